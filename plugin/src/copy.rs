//! Moving BO contents between GPU memory and pages files by SDMA, through bounded staging buffers.
//!
//! Per GPU, the plugin opens its own render-node file, imports every BO's dma-buf into it, maps
//! the BOs and a few USERPTR staging buffers into that file's GPU VM, and has the SDMA engine copy
//! between them with COPY_LINEAR packets. The BOs of a GPU form one byte stream in bucket order —
//! the layout of the pages file — cut into staging-buffer-sized pieces regardless of BO
//! boundaries, so small BOs share a buffer and a submission, and large BOs need no large buffer.
//!
//! Two threads per GPU overlap the copy with the I/O: the copier submits SDMA work and waits for
//! its fence, the I/O thread writes (dump) or reads (restore) the file, and the staging buffers
//! circulate between them through channels. Memory is `buffers * buffer_size` per GPU, whatever
//! the BO sizes.

use std::os::fd::BorrowedFd;
use std::sync::mpsc;
use std::time::Duration;

use images::{PagesError, PagesReader, PagesWriter};
use kfd_abi::render::VmPageFlags;
use kfd_abi::sdma::IbBuilder;
use kfd_abi::{BoHandle, IoctlError, RenderNode, SdmaQueue, Transport, UserptrBuffer};

/// A running count of bytes copied (both directions), for progress displays. Clones share the
/// count.
#[derive(Clone, Debug, Default)]
pub struct Progress(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl Progress {
    /// Adds `n` copied bytes.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Bytes copied so far.
    pub fn get(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Starts counting from zero again.
    pub fn reset(&self) {
        self.0.store(0, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Staging geometry per GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Staging {
    /// Bytes per staging buffer.
    pub buffer_size: usize,
    /// Number of staging buffers (at least 2 for copy and I/O to overlap).
    pub buffers: usize,
}

impl Default for Staging {
    /// 4 buffers of 8 MiB: large sequential writes, and SDMA and disk both kept busy.
    fn default() -> Self {
        Self {
            buffer_size: 8 << 20,
            buffers: 4,
        }
    }
}

impl Staging {
    /// The default geometry with buffers no larger than `max` bytes (`KFD_MAX_BUFFER_SIZE`),
    /// rounded down to whole pages (one page at least).
    pub fn capped(max: Option<u64>) -> Self {
        let mut s = Self::default();
        if let Some(max) = max {
            let max = usize::try_from(max).unwrap_or(usize::MAX);
            let page = kfd_abi::dma::PAGE_SIZE;
            s.buffer_size = s.buffer_size.min(max / page * page).max(page);
        }
        s
    }

    /// Host memory used per GPU.
    pub fn bytes(&self) -> usize {
        self.buffer_size * self.buffers
    }
}

/// Bytes of the indirect buffer: room for ~2300 COPY_LINEAR packets per submission.
const IB_BYTES: usize = 64 << 10;
/// Alignment of the VAs the plugin maps in its own VM.
const VA_ALIGN: u64 = 2 << 20;
/// How long one submission may take before the copy is declared hung.
const FENCE_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a copy failed.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// A render-node call failed.
    #[error("{what}: {source}")]
    Ioctl {
        /// What was being done.
        what: String,
        /// The failed call.
        #[source]
        source: IoctlError,
    },
    /// The pages file could not be written or read.
    #[error(transparent)]
    Pages(#[from] PagesError),
    /// An SDMA submission did not finish in time.
    #[error("SDMA copy on {device} did not finish within {}s", FENCE_TIMEOUT.as_secs())]
    Timeout {
        /// The render node.
        device: String,
    },
    /// The plugin's GPU VM has no room left.
    #[error("no room in the GPU address space of {device} for {bytes} more bytes")]
    VaExhausted {
        /// The render node.
        device: String,
        /// Bytes asked for.
        bytes: u64,
    },
    /// The I/O thread stopped early (its own error is reported instead when there is one).
    #[error("the {0} thread stopped early")]
    ThreadGone(&'static str),
}

fn ioctl_err(what: impl Into<String>) -> impl FnOnce(IoctlError) -> CopyError {
    let what = what.into();
    move |source| CopyError::Ioctl { what, source }
}

/// A BO to copy, by its dma-buf.
#[derive(Clone, Copy, Debug)]
pub struct BoSource<'fd> {
    /// The dma-buf of the BO.
    pub dmabuf: BorrowedFd<'fd>,
    /// Its size (the bytes in the pages file).
    pub size: u64,
    /// Its VA in the checkpointed process (for messages only).
    pub addr: u64,
}

/// A BO imported into the plugin's render-node file and mapped into its VM.
struct Imported {
    bo: BoHandle,
    va: u64,
    size: u64,
}

/// The plugin's SDMA context on one GPU.
struct Dma<'r, T: Transport> {
    render: &'r RenderNode<T>,
    queue: SdmaQueue<'r, T>,
    next_va: u64,
    va_end: u64,
    imported: Vec<Imported>,
}

impl<'r, T: Transport> Dma<'r, T> {
    fn new(render: &'r RenderNode<T>) -> Result<Self, CopyError> {
        let info = render
            .dev_info()
            .map_err(ioctl_err("querying the GPU's address range"))?;
        let start = info
            .virtual_address_offset
            .max(VA_ALIGN)
            .next_multiple_of(VA_ALIGN);
        let mut next_va = start;
        let ib_va = next_va;
        next_va += (IB_BYTES as u64).next_multiple_of(VA_ALIGN);
        let queue = SdmaQueue::new(render, ib_va, IB_BYTES)
            .map_err(ioctl_err("setting up an SDMA queue"))?;
        Ok(Self {
            render,
            queue,
            next_va,
            va_end: info.virtual_address_max,
            imported: Vec::new(),
        })
    }

    fn alloc_va(&mut self, bytes: u64) -> Result<u64, CopyError> {
        let va = self.next_va;
        let end = bytes
            .checked_next_multiple_of(VA_ALIGN)
            .and_then(|n| va.checked_add(n))
            .filter(|&end| end <= self.va_end)
            .ok_or_else(|| CopyError::VaExhausted {
                device: self.render.label().to_owned(),
                bytes,
            })?;
        self.next_va = end;
        Ok(va)
    }

    fn staging(&mut self, staging: Staging) -> Result<Vec<UserptrBuffer<'r, T>>, CopyError> {
        (0..staging.buffers.max(1))
            .map(|_| {
                let va = self.alloc_va(staging.buffer_size as u64)?;
                UserptrBuffer::new(self.render, staging.buffer_size, va)
                    .map_err(ioctl_err("mapping a staging buffer"))
            })
            .collect()
    }

    /// Imports and maps every BO; their VAs are in `self.imported`, in order.
    fn import_all(&mut self, bos: &[BoSource<'_>]) -> Result<(), CopyError> {
        for b in bos {
            let bo = self
                .render
                .prime_fd_to_handle(b.dmabuf)
                .map_err(ioctl_err(format!("importing the BO at {:#x}", b.addr)))?;
            let va = match self.alloc_va(b.size) {
                Ok(va) => va,
                Err(e) => {
                    let _ = self.render.gem_close(bo);
                    return Err(e);
                }
            };
            let flags = VmPageFlags::READABLE | VmPageFlags::WRITEABLE;
            if let Err(e) = self.render.va_map(bo, va, 0, b.size, flags) {
                let _ = self.render.gem_close(bo);
                return Err(ioctl_err(format!("mapping the BO at {:#x}", b.addr))(e));
            }
            self.imported.push(Imported {
                bo,
                va,
                size: b.size,
            });
        }
        Ok(())
    }

    /// Runs `ib` (already padded) and waits for it.
    fn submit(&mut self, ib: &[u32]) -> Result<(), CopyError> {
        let done = self
            .queue
            .run(ib, FENCE_TIMEOUT)
            .map_err(ioctl_err("running an SDMA copy"))?;
        if done {
            Ok(())
        } else {
            Err(CopyError::Timeout {
                device: self.render.label().to_owned(),
            })
        }
    }

    /// Copies stream bytes `[pos, pos + len)` to (`to_staging`) or from staging VA `staging_va`.
    fn copy_range(
        &mut self,
        pos: u64,
        len: u64,
        staging_va: u64,
        to_staging: bool,
    ) -> Result<(), CopyError> {
        let max_dwords = self.queue.capacity_dwords();
        let mut ib = IbBuilder::new();
        let mut bo_start = 0u64;
        let (end, mut done) = (pos + len, 0u64);
        let segments: Vec<(u64, u64, u64)> = self
            .imported
            .iter()
            .filter_map(|b| {
                let (s, e) = (bo_start, bo_start + b.size);
                bo_start = e;
                let (a, z) = (pos.max(s), end.min(e));
                (a < z).then(|| (b.va + (a - s), a - pos, z - a))
            })
            .collect();
        for (bo_va, staging_off, n) in segments {
            if ib.len() + IbBuilder::copy_dwords(n) > max_dwords {
                let full = std::mem::take(&mut ib);
                self.submit(&full.finish())?;
            }
            let s_va = staging_va + staging_off;
            if to_staging {
                ib.copy_linear(bo_va, s_va, n);
            } else {
                ib.copy_linear(s_va, bo_va, n);
            }
            done += n;
        }
        debug_assert_eq!(done, len);
        if !ib.is_empty() {
            self.submit(&ib.finish())?;
        }
        Ok(())
    }
}

impl<T: Transport> Drop for Dma<'_, T> {
    fn drop(&mut self) {
        for b in self.imported.drain(..) {
            if let Err(e) = self.render.va_unmap(b.bo, b.va, 0, b.size) {
                log::warn!("{e}");
            }
            if let Err(e) = self.render.gem_close(b.bo) {
                log::warn!("{e}");
            }
        }
    }
}

/// The staging buffers' round trip between the copier and the I/O thread: `full` carries a
/// buffer and its used length one way, `empty` brings it back.
struct Ring<'r, T: Transport> {
    full_tx: mpsc::SyncSender<(UserptrBuffer<'r, T>, usize)>,
    full_rx: mpsc::Receiver<(UserptrBuffer<'r, T>, usize)>,
    empty_tx: mpsc::SyncSender<UserptrBuffer<'r, T>>,
    empty_rx: mpsc::Receiver<UserptrBuffer<'r, T>>,
}

/// Sets up one GPU's copy: the SDMA context with every BO imported, and the staging buffers,
/// all of them empty, in the ring. Returns the stream's length too.
fn prepare<'r, T: Transport>(
    render: &'r RenderNode<T>,
    bos: &[BoSource<'_>],
    staging: Staging,
) -> Result<(u64, Dma<'r, T>, Ring<'r, T>), CopyError> {
    let total: u64 = bos.iter().map(|b| b.size).sum();
    let mut dma = Dma::new(render)?;
    dma.import_all(bos)?;
    let buffers = dma.staging(staging)?;
    let (full_tx, full_rx) = mpsc::sync_channel(buffers.len());
    let (empty_tx, empty_rx) = mpsc::sync_channel(buffers.len());
    for b in buffers {
        let _ = empty_tx.send(b);
    }
    Ok((
        total,
        dma,
        Ring {
            full_tx,
            full_rx,
            empty_tx,
            empty_rx,
        },
    ))
}

/// Runs the two sides of one GPU's copy at once: `io` (the pages file) on a thread of its own,
/// `copy` (SDMA) on this one. Each side drops the ring's ends it owns when it returns, so the
/// other side sees it gone. The I/O thread's own error explains a copier that stopped because that
/// thread (`thread` names it) went away.
fn overlap<IoSide, CopySide>(
    thread: &'static str,
    io: IoSide,
    copy: CopySide,
) -> Result<(), CopyError>
where
    IoSide: FnOnce() -> Result<(), CopyError> + Send,
    CopySide: FnOnce() -> Result<(), CopyError>,
{
    std::thread::scope(|s| {
        let io = s.spawn(io);
        let copied = copy();
        let io = io.join().unwrap_or(Err(CopyError::ThreadGone(thread)));
        match (copied, io) {
            (Err(CopyError::ThreadGone(_)), Err(e)) | (Ok(()), Err(e)) | (Err(e), _) => Err(e),
            (Ok(()), Ok(())) => Ok(()),
        }
    })
}

/// Waits for every per-GPU copy thread: their results in order, or, once all of them have
/// stopped, the first error. A thread that panicked counts as [`CopyError::ThreadGone`], which
/// `gone` wraps in the caller's error.
pub(crate) fn join_all<R, E>(
    workers: Vec<std::thread::ScopedJoinHandle<'_, Result<R, E>>>,
    gone: impl Fn(CopyError) -> E,
) -> Result<Vec<R>, E> {
    let mut out = Vec::with_capacity(workers.len());
    let mut first_err = None;
    for w in workers {
        match w.join() {
            Ok(Ok(r)) => out.push(r),
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert_with(|| gone(CopyError::ThreadGone("per-GPU copy")));
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Copies the BOs of one GPU into `writer`, in order. Returns the bytes written.
pub fn dump_gpu<T: Transport>(
    render: &RenderNode<T>,
    bos: &[BoSource<'_>],
    staging: Staging,
    progress: &Progress,
    writer: &mut PagesWriter,
) -> Result<u64, CopyError> {
    let (total, mut dma, ring) = prepare(render, bos, staging)?;
    let (full_rx, empty_tx) = (ring.full_rx, ring.empty_tx);
    let write = move || -> Result<(), CopyError> {
        for (buf, len) in full_rx {
            writer.write_chunk(&buf.as_slice()[..len])?;
            if empty_tx.send(buf).is_err() {
                break;
            }
        }
        Ok(())
    };
    // The copier drops `full_tx` when it returns, which ends the writer's loop once the ring is
    // drained; `empty_rx` lives on until the writer is joined, so it can hand every buffer back.
    let (full_tx, empty_rx, dma) = (ring.full_tx, &ring.empty_rx, &mut dma);
    let copy = move || -> Result<(), CopyError> {
        let mut pos = 0u64;
        while pos < total {
            let buf = empty_rx
                .recv()
                .map_err(|_| CopyError::ThreadGone("writer"))?;
            let len = (total - pos).min(buf.len() as u64);
            dma.copy_range(pos, len, buf.va(), true)?;
            progress.add(len);
            #[allow(clippy::cast_possible_truncation)] // len <= buf.len()
            full_tx
                .send((buf, len as usize))
                .map_err(|_| CopyError::ThreadGone("writer"))?;
            pos += len;
        }
        Ok(())
    };
    overlap("writer", write, copy).map(|()| total)
}

/// Copies `reader`'s stream into the BOs of one GPU, in order. Returns the bytes copied.
pub fn restore_gpu<T: Transport>(
    render: &RenderNode<T>,
    bos: &[BoSource<'_>],
    staging: Staging,
    progress: &Progress,
    reader: &mut PagesReader,
) -> Result<u64, CopyError> {
    let (total, mut dma, ring) = prepare(render, bos, staging)?;
    let (full_tx, empty_rx) = (ring.full_tx, ring.empty_rx);
    let read = move || -> Result<(), CopyError> {
        let mut pos = 0u64;
        while pos < total {
            let Ok(mut buf) = empty_rx.recv() else { break };
            let len = (total - pos).min(buf.len() as u64);
            #[allow(clippy::cast_possible_truncation)] // len <= buf.len()
            let len = len as usize;
            reader.read_exact_into(&mut buf.as_mut_slice()[..len])?;
            if full_tx.send((buf, len)).is_err() {
                break;
            }
            pos += len as u64;
        }
        Ok(())
    };
    // The copier drops both its ends when it returns: a reader still running stops at its next
    // buffer.
    let (full_rx, empty_tx, dma) = (ring.full_rx, ring.empty_tx, &mut dma);
    let copy = move || -> Result<(), CopyError> {
        let mut pos = 0u64;
        while pos < total {
            let (buf, len) = full_rx
                .recv()
                .map_err(|_| CopyError::ThreadGone("reader"))?;
            dma.copy_range(pos, len as u64, buf.va(), false)?;
            progress.add(len as u64);
            pos += len as u64;
            // The reader may already be done; a closed channel is fine here.
            let _ = empty_tx.send(buf);
        }
        Ok(())
    };
    overlap("reader", read, copy).map(|()| total)
}
