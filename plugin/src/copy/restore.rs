//! The restore's side of one GPU's copy: the reader fills staging buffers from the pages file
//! (or maps windows of it), verifies them and hands them to the copiers, which copy them into
//! the BOs.
//!
//! With direct I/O the reader works in two stages: a thread reads the file into each staging
//! buffer as soon as one is free ([`DirectReads`]), while the reader verifies the buffer read
//! before ([`PagesReader::verify_direct_skipping_holes`]), so the disk reads one buffer while
//! the last one is checksummed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};

use images::pages::{self, DirectReads};
use images::PagesReader;
use kfd_abi::{FileWindow, IoctlError, RenderNode, Transport, UserptrBuffer};

use super::{
    copy_range, guard, ioctl_err, overlap, prepare, BoSource, CopyError, DirectIo, Dma, Full,
    Progress, Reading, Ring, Staging,
};

/// Where a piece of the stream sits at restore while the copiers copy it into the BOs.
enum Staged<'r, T: Transport> {
    /// In a staging buffer, read there from the pages file.
    Buffer(UserptrBuffer<'r, T>),
    /// In the page cache: a window of the pages file, mapped for the GPU to read.
    Window(FileWindow<'r, T>),
}

impl<'r, T: Transport> Staged<'r, T> {
    fn va(&self) -> u64 {
        match self {
            Self::Buffer(b) => b.va(),
            Self::Window(w) => w.va(),
        }
    }

    /// Gives the room back once copied: the buffer, or the window's GPU VA (the window is
    /// unmapped here).
    fn release(self) -> Slot<'r, T> {
        match self {
            Self::Buffer(b) => Slot::Buffer(b),
            Self::Window(w) => Slot::Va(w.va()),
        }
    }
}

/// Room for the next piece of the stream at restore: a staging buffer to read into, or a GPU VA
/// where a window of the pages file is to be mapped.
enum Slot<'r, T: Transport> {
    Buffer(UserptrBuffer<'r, T>),
    Va(u64),
}

/// Copies `reader`'s stream into the BOs of one GPU, in order. Returns the bytes copied.
///
/// With `map`, the GPU copies straight out of the page cache: each staging-buffer-sized piece
/// of the pages file is mapped read-only as a window (a read-only USERPTR BO over a shared file
/// mapping, [`FileWindow`]), the reader checksums the window's bytes where they are instead of
/// `read`ing them into a staging buffer, and the window is unmapped once copied: no staging
/// memory and no copy by the CPU. At most `staging.buffers` windows are mapped at a time, the
/// same bound as the staging buffers (page cache, not process memory). Where the file cannot be
/// mapped so (a file system without `mmap`, a kernel without `MADV_POPULATE_READ`, a driver
/// that refuses the userptr), the pages are read into staging buffers as without `map`.
pub(crate) fn restore_gpu<T: Transport>(
    render: &RenderNode<T>,
    bos: &[BoSource<'_>],
    staging: Staging,
    reading: Reading,
    progress: &Progress,
    reader: &mut PagesReader,
) -> Result<u64, CopyError> {
    let (total, mut dma) = prepare(render, bos)?;
    let direct = total > 0
        && match reading.direct {
            // Less than half of it in the page cache.
            DirectIo::Cold => reader.use_direct_io_if_cold(0.5),
            DirectIo::Always => reader.use_direct_io(),
            DirectIo::Never => false,
        };
    let map = reading.map_pages && total > 0 && !direct;
    let slots = restore_slots(&mut dma, reader, staging, map)?;
    let Ring {
        full_tx,
        full_rx,
        empty_tx,
        empty_rx,
    } = Ring::new(slots);
    // Set by a copier that failed: the reader stops reading and the other copiers stop.
    let stop = AtomicBool::new(false);
    let stop = &stop;
    let disk = if direct { reader.direct_reads()? } else { None };
    let read = move || -> Result<(), CopyError> {
        if let Some(disk) = disk {
            return read_direct(&disk, reader, empty_rx, full_tx, total, staging, stop);
        }
        let mut pos = 0u64;
        while pos < total && !stop.load(Ordering::Relaxed) {
            let Ok(slot) = empty_rx.recv() else { break };
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let len = staging.piece(total, pos);
            let off = pages::buffer_offset(pos);
            let (buf, zeros) = match slot {
                Slot::Buffer(mut buf) => {
                    let zeros =
                        reader.read_skipping_holes(&mut buf.as_mut_slice()[off..off + len])?;
                    (Staged::Buffer(buf), zeros)
                }
                Slot::Va(va) => {
                    let window = FileWindow::new(
                        render,
                        reader.file(),
                        pages::page_offset(pos),
                        off + len,
                        va,
                    )
                    .map_err(ioctl_err(format!(
                        "mapping {} bytes of {} for the GPU",
                        len,
                        reader.file_name()
                    )))?;
                    let zeros = reader
                        .verify_skipping_holes(len, |r| window.bytes(off + r.start..off + r.end))?;
                    (Staged::Window(window), zeros)
                }
            };
            let full = Full {
                buf,
                pos,
                off,
                len,
                zeros,
            };
            if full_tx.send(full).is_err() {
                break;
            }
            pos += len as u64;
        }
        Ok(())
    };
    let full_rx = Mutex::new(full_rx);
    let copied = AtomicU64::new(0);
    let lanes: Vec<_> = dma
        .queues
        .iter_mut()
        .map(|q| (q, empty_tx.clone()))
        .collect();
    // The copiers' clones are the only senders left: a reader waiting for an empty buffer stops
    // once they all return.
    drop(empty_tx);
    let imported = &dma.imported;
    overlap("reader", read, lanes, |(queue, empty_tx)| {
        while !stop.load(Ordering::Relaxed) {
            // The reader is done (or gone) once the channel is closed and drained.
            let Ok(Full {
                buf,
                pos,
                off,
                len,
                zeros,
            }) = guard(&full_rx).recv()
            else {
                break;
            };
            let r = copy_range(
                queue,
                imported,
                pos,
                len as u64,
                buf.va() + off as u64,
                false,
                &zeros,
            );
            // The reader may already be done; a closed channel is fine here.
            let _ = empty_tx.send(buf.release());
            if let Err(e) = r {
                stop.store(true, Ordering::Relaxed);
                return Err(e);
            }
            progress.add(len as u64);
            copied.fetch_add(len as u64, Ordering::Relaxed);
        }
        Ok(())
    })?;
    if copied.load(Ordering::Relaxed) < total {
        return Err(CopyError::ThreadGone("reader"));
    }
    Ok(total)
}

/// The restore's room for the stream: with `map`, GPU VAs for windows of the pages file, once a
/// first window showed that the file maps (and how it did not is logged otherwise); else, and
/// then, staging buffers.
fn restore_slots<'r, T: Transport>(
    dma: &mut Dma<'r, T>,
    reader: &PagesReader,
    staging: Staging,
    map: bool,
) -> Result<Vec<Slot<'r, T>>, CopyError> {
    if map {
        let len = staging.buffer_size + kfd_abi::dma::PAGE_SIZE;
        let vas = (0..staging.buffers.max(1))
            .map(|_| dma.alloc_va(len as u64))
            .collect::<Result<Vec<_>, _>>()?;
        // The header's page: mapped, registered, mapped for the GPU and read as every window is.
        // Only the file's own refusals (a file system that cannot map it, a kernel without
        // MADV_POPULATE_READ) choose the other way; a failed driver call is the restore's error.
        let why = match FileWindow::new(dma.render, reader.file(), 0, 1, vas[0]) {
            Ok(w) => w.bytes(0..1).err().map(|e| e.to_string()),
            Err(e @ IoctlError::Fd { .. }) => Some(e.to_string()),
            Err(e) => {
                return Err(ioctl_err(format!(
                    "mapping {} for the GPU",
                    reader.file_name()
                ))(e))
            }
        };
        match why {
            None => return Ok(vas.into_iter().map(Slot::Va).collect()),
            Some(e) => log::info!(
                "{}: cannot map it for the GPU to read ({e}); reading it into staging buffers",
                reader.file_name()
            ),
        }
    }
    Ok(dma
        .staging(staging)?
        .into_iter()
        .map(Slot::Buffer)
        .collect())
}

/// The reader with direct I/O: a thread of its own reads the next staging buffers from the disk
/// ([`fill_ahead`]) while this one verifies them in order and hands them to the copiers.
fn read_direct<'r, T: Transport>(
    disk: &DirectReads,
    reader: &mut PagesReader,
    empty_rx: mpsc::Receiver<Slot<'r, T>>,
    full_tx: mpsc::SyncSender<Full<Staged<'r, T>>>,
    total: u64,
    staging: Staging,
    stop: &AtomicBool,
) -> Result<(), CopyError> {
    std::thread::scope(|s| {
        let (read_tx, read_rx) = mpsc::channel();
        s.spawn(move || fill_ahead(disk, &empty_rx, &read_tx, total, staging, stop));
        // `full_tx` ends with `verify_in_order`: the copiers then end and drop their ends of the
        // empty buffers' channel, so the filling thread, if it waits for one, ends too.
        verify_in_order(reader, read_rx, full_tx, stop)
    })
}

/// A staging buffer [`fill_ahead`] read, with where its bytes are in the stream, or why not.
type Read<'r, T> = Result<Full<UserptrBuffer<'r, T>>, CopyError>;

/// Reads the stream into each staging buffer that comes back empty, in order, and sends it on
/// with its position and length; stops after a failed read (sent on as the error), at the end,
/// or once the verifying side or the copiers are gone.
fn fill_ahead<'r, T: Transport>(
    disk: &DirectReads,
    empty_rx: &mpsc::Receiver<Slot<'r, T>>,
    read_tx: &mpsc::Sender<Read<'r, T>>,
    total: u64,
    staging: Staging,
    stop: &AtomicBool,
) {
    let mut pos = 0u64;
    while pos < total && !stop.load(Ordering::Relaxed) {
        let Ok(slot) = empty_rx.recv() else { break };
        let len = staging.piece(total, pos);
        // Congruent with the file (payload byte `pos` at `buffer_offset(pos)`), one page larger
        // than the data: the whole pages a direct read needs fit.
        let read = match slot {
            Slot::Buffer(mut buf) => disk
                .read(buf.as_mut_slice(), pos, len)
                .map(|()| Full::new(buf, pos, len))
                .map_err(CopyError::from),
            // Files read directly are not mapped (`restore_gpu`).
            Slot::Va(_) => Err(CopyError::ThreadGone("staging buffer")),
        };
        let failed = read.is_err();
        if read_tx.send(read).is_err() || failed {
            break;
        }
        pos += len as u64;
    }
}

/// Verifies each buffer [`fill_ahead`] read, in order, and hands it to the copiers.
fn verify_in_order<'r, T: Transport>(
    reader: &mut PagesReader,
    read_rx: mpsc::Receiver<Read<'r, T>>,
    full_tx: mpsc::SyncSender<Full<Staged<'r, T>>>,
    stop: &AtomicBool,
) -> Result<(), CopyError> {
    for read in read_rx {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let mut full = read?;
        full.zeros = reader.verify_direct_skipping_holes(full.buf.as_slice(), full.len)?;
        if full_tx.send(full.with_buf(Staged::Buffer)).is_err() {
            break;
        }
    }
    Ok(())
}
