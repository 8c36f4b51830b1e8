//! Moving BO contents between GPU memory and pages files by SDMA, through bounded staging buffers.
//!
//! Per GPU, the plugin opens its own render-node file, imports every BO's dma-buf into it, maps
//! the BOs and a few USERPTR staging buffers into that file's GPU VM, and has the SDMA engine copy
//! between them with COPY_LINEAR packets. The BOs of a GPU form one byte stream in bucket order —
//! the layout of the pages file — cut into staging-buffer-sized pieces regardless of BO
//! boundaries, so small BOs share a buffer and a submission, and large BOs need no large buffer.
//!
//! Per GPU, an I/O thread and `SDMA_LANES` (2) copier threads overlap the copy with the I/O: each
//! copier has an SDMA queue of its own (its own submission context), submits the copy of one
//! staging buffer and waits for its fence, while the others copy other buffers and the I/O thread
//! writes (dump) or reads (restore) the file; the staging buffers circulate between them through
//! channels, each carrying its position in the stream. A GPU has several SDMA engines (MI50 2,
//! MI100 8, MI210 5) and amdgpu's scheduler gives each idle context's ring the least busy one, so
//! the copiers' submissions run on different engines at once. At dump the writer puts the buffers
//! back in stream order (they may come back from the copiers out of order). With direct I/O the
//! I/O side is two threads: one checksums a buffer while the other has the disk read or write
//! another (modules `dump` and `restore`). Memory is `buffers * buffer_size` per GPU, whatever the BO
//! sizes and however many copiers.
//!
//! Alignment: in each staging buffer the data starts [`images::pages::buffer_offset`] bytes in (8, one
//! page more is allocated), so the buffer and the pages file, whose payload starts after an
//! 8-byte header, are congruent modulo the page size: the kernel's copies between the page cache
//! and the buffer then run at full speed (about twice the speed of a page-aligned buffer written
//! at file offsets 8 bytes past a page), and the SDMA engine, for which alignment costs nothing,
//! does the shifting.
//!
//! Zeros: at dump the pages writer leaves zero pieces as holes of the file; at restore the reader
//! does not read whole chunks that are holes, and the copier writes those ranges of the BOs with
//! SDMA CONSTANT_FILL packets (value 0) instead of copying them out of the staging buffer.

use std::ops::Range;
use std::os::fd::BorrowedFd;
use std::sync::{mpsc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use images::PagesError;
use kfd_abi::render::VmPageFlags;
use kfd_abi::sdma::{self, IbBuilder};
use kfd_abi::{BoHandle, IoctlError, RenderNode, SdmaQueue, Transport, UserptrBuffer};

mod dump;
mod restore;

pub(crate) use dump::dump_gpu;
pub(crate) use restore::restore_gpu;

/// A running count of bytes copied (both directions), for progress displays. Clones share the
/// count.
#[derive(Clone, Debug, Default)]
pub struct Progress(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl Progress {
    /// Adds `n` copied bytes.
    pub(crate) fn add(&self, n: u64) {
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

/// `AMDGPU_CR_DIRECT_IO`: which pages files a restore reads with direct I/O (`O_DIRECT`, from
/// the device straight into the staging buffers; see [`images::direct`]) instead of through the
/// page cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DirectIo {
    /// Files mostly not in the page cache (less than half of their pages): a restore from the
    /// disk. Files just dumped on this node are read from the cache (default).
    #[default]
    Cold,
    /// Every file whose file system takes direct I/O.
    Always,
    /// None: every file through the page cache.
    Never,
}

impl DirectIo {
    /// Whether a dump writes its pages files with direct I/O: with write-behind (a dump that
    /// must be on the disk when criu ends), or always.
    pub(crate) fn at_dump(self, write_behind: bool) -> bool {
        match self {
            DirectIo::Cold => write_behind,
            DirectIo::Always => true,
            DirectIo::Never => false,
        }
    }
}

/// How a restore reads a pages file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reading {
    /// The GPU copies straight out of read-only mappings of the file (a file read with direct
    /// I/O is not mapped: its pages would come through the page cache).
    pub map_pages: bool,
    /// Which files are read with direct I/O.
    pub direct: DirectIo,
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
    pub(crate) fn capped(max: Option<u64>) -> Self {
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

    /// The length of the stream's piece at `pos` of `total` bytes: a staging buffer's worth, or
    /// what is left.
    pub(crate) fn piece(&self, total: u64, pos: u64) -> usize {
        usize::try_from(total.saturating_sub(pos))
            .map_or(self.buffer_size, |left| left.min(self.buffer_size))
    }
}

/// SDMA queues (copier threads) per GPU. Two: one more copy runs while one waits for its
/// fence or its buffer, on another engine; every MI-series GPU has at least two engines, and the
/// staging buffers, not the copiers, bound the memory.
pub(crate) const SDMA_LANES: usize = 2;

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
pub(crate) struct BoSource<'fd> {
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

/// The plugin's SDMA queues on one GPU, and the BOs mapped in its VM.
struct Dma<'r, T: Transport> {
    render: &'r RenderNode<T>,
    queues: Vec<SdmaQueue<'r, T>>,
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
        let mut queues = Vec::with_capacity(SDMA_LANES);
        for _ in 0..SDMA_LANES {
            let ib_va = next_va;
            next_va += (IB_BYTES as u64).next_multiple_of(VA_ALIGN);
            queues.push(
                SdmaQueue::new(render, ib_va, IB_BYTES)
                    .map_err(ioctl_err("setting up an SDMA queue"))?,
            );
        }
        Ok(Self {
            render,
            queues,
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

    /// The staging buffers: each one page larger than `staging.buffer_size`, because the data
    /// sits [`images::pages::buffer_offset`] bytes into it (congruent with the pages file).
    fn staging(&mut self, staging: Staging) -> Result<Vec<UserptrBuffer<'r, T>>, CopyError> {
        let len = staging.buffer_size + kfd_abi::dma::PAGE_SIZE;
        (0..staging.buffers.max(1))
            .map(|_| {
                let va = self.alloc_va(len as u64)?;
                UserptrBuffer::with_huge_pages(self.render, len, va)
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
}

/// Runs `ib` (already padded) on `queue` and waits for it.
fn submit<T: Transport>(queue: &mut SdmaQueue<'_, T>, ib: &[u32]) -> Result<(), CopyError> {
    let done = queue
        .run(ib, FENCE_TIMEOUT)
        .map_err(ioctl_err("running an SDMA copy"))?;
    if done {
        Ok(())
    } else {
        Err(CopyError::Timeout {
            device: queue.render().label().to_owned(),
        })
    }
}

/// Copies stream bytes `[pos, pos + len)` of the BOs `imported` (the stream in their order) to
/// (`to_staging`) or from staging VA `staging_va`, on `queue`; from staging, the ranges `zeros`
/// (offsets into the staging buffer, sorted) are filled with zeros instead of copied.
fn copy_range<T: Transport>(
    queue: &mut SdmaQueue<'_, T>,
    imported: &[Imported],
    pos: u64,
    len: u64,
    staging_va: u64,
    to_staging: bool,
    zeros: &[Range<usize>],
) -> Result<(), CopyError> {
    let max_dwords = queue.capacity_dwords();
    let mut ib = IbBuilder::new();
    let mut bo_start = 0u64;
    let (end, mut done) = (pos + len, 0u64);
    let segments: Vec<(u64, u64, u64)> = imported
        .iter()
        .filter_map(|b| {
            let (s, e) = (bo_start, bo_start + b.size);
            bo_start = e;
            let (a, z) = (pos.max(s), end.min(e));
            (a < z).then(|| (b.va + (a - s), a - pos, z - a))
        })
        .collect();
    for (bo_va, staging_off, n) in segments {
        for (off, k, zero) in split_by_zeros(staging_off, n, zeros) {
            let dwords = if zero {
                fill_dwords(k)
            } else {
                IbBuilder::copy_dwords(k)
            };
            if ib.len() + dwords > max_dwords {
                let full = std::mem::take(&mut ib);
                submit(queue, &full.finish())?;
            }
            let (s_va, b_va) = (staging_va + off, bo_va + (off - staging_off));
            if zero {
                ib.const_fill(b_va, 0, k);
            } else if to_staging {
                ib.copy_linear(b_va, s_va, k);
            } else {
                ib.copy_linear(s_va, b_va, k);
            }
        }
        done += n;
    }
    debug_assert_eq!(done, len);
    if !ib.is_empty() {
        submit(queue, &ib.finish())?;
    }
    Ok(())
}

/// How many dwords an IB filling `len` bytes in one go takes, padding included.
fn fill_dwords(len: u64) -> usize {
    let packets = usize::try_from(len.div_ceil(sdma::MAX_BYTES_PER_PACKET)).unwrap_or(usize::MAX);
    packets
        .saturating_mul(sdma::CONST_FILL_DWORDS)
        .div_ceil(sdma::IB_ALIGN_DWORDS)
        .max(1)
        * sdma::IB_ALIGN_DWORDS
}

/// Cuts `[start, start + len)` (offsets into a staging buffer) at the edges of the sorted ranges
/// `zeros`: `(offset, length, inside a zero range)` pieces, in order.
fn split_by_zeros(start: u64, len: u64, zeros: &[Range<usize>]) -> Vec<(u64, u64, bool)> {
    let end = start + len;
    let mut out = Vec::new();
    let mut at = start;
    for z in zeros {
        let (zs, ze) = (z.start as u64, z.end as u64);
        if ze <= at {
            continue;
        }
        if zs >= end {
            break;
        }
        if zs > at {
            out.push((at, zs - at, false));
            at = zs;
        }
        let stop = ze.min(end);
        out.push((at, stop - at, true));
        at = stop;
    }
    if at < end {
        out.push((at, end - at, false));
    }
    out
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

/// A staging buffer (`B`) on its way from the side that filled it: the stream position of its
/// data, where the data starts in it, its length and, at restore, the ranges of the data that
/// are zeros the reader did not read.
struct Full<B> {
    buf: B,
    pos: u64,
    off: usize,
    len: usize,
    zeros: Vec<Range<usize>>,
}

impl<B> Full<B> {
    /// `buf` with the stream's `len` bytes at `pos`, congruent with the pages file (at
    /// [`images::pages::buffer_offset`]`(pos)`), no zeros known.
    fn new(buf: B, pos: u64, len: usize) -> Self {
        Self {
            buf,
            pos,
            off: images::pages::buffer_offset(pos),
            len,
            zeros: Vec::new(),
        }
    }

    /// The same piece of the stream in `f(buf)`.
    fn with_buf<C>(self, f: impl FnOnce(B) -> C) -> Full<C> {
        Full {
            buf: f(self.buf),
            pos: self.pos,
            off: self.off,
            len: self.len,
            zeros: self.zeros,
        }
    }
}

/// The staging buffers' round trip between the copiers and the I/O thread: `full` carries a
/// filled buffer (`F`) one way, `empty` brings it back (as an `E`). Each channel holds every
/// buffer at once, so a send never blocks.
struct Ring<F, E> {
    full_tx: mpsc::SyncSender<Full<F>>,
    full_rx: mpsc::Receiver<Full<F>>,
    empty_tx: mpsc::SyncSender<E>,
    empty_rx: mpsc::Receiver<E>,
}

impl<F, E> Ring<F, E> {
    /// A ring with every one of `empties` in it, empty.
    fn new(empties: Vec<E>) -> Self {
        let (full_tx, full_rx) = mpsc::sync_channel(empties.len());
        let (empty_tx, empty_rx) = mpsc::sync_channel(empties.len());
        for b in empties {
            let _ = empty_tx.send(b);
        }
        Self {
            full_tx,
            full_rx,
            empty_tx,
            empty_rx,
        }
    }
}

/// Sets up one GPU's copy: the SDMA queues with every BO imported. Returns the stream's length
/// too.
fn prepare<'r, T: Transport>(
    render: &'r RenderNode<T>,
    bos: &[BoSource<'_>],
) -> Result<(u64, Dma<'r, T>), CopyError> {
    let total: u64 = bos.iter().map(|b| b.size).sum();
    let mut dma = Dma::new(render)?;
    dma.import_all(bos)?;
    Ok((total, dma))
}

/// A mutex's guard, also when another thread panicked holding it (what it guards, a channel
/// end or a counter, stays consistent).
fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs the two sides of one GPU's copy at once: `io` (the pages file) on a thread of its own,
/// and `lane` once per item of `lanes` (an SDMA queue and its ends of the ring), each on a
/// thread of its own. Each side drops the ring's ends it owns when it returns, so the others see
/// it gone. A copier's own error comes first; then the I/O thread's (`thread` names it), which
/// also explains copiers that stopped because it went away.
fn overlap<L, IoSide, Lane>(
    thread: &'static str,
    io: IoSide,
    lanes: Vec<L>,
    lane: Lane,
) -> Result<(), CopyError>
where
    L: Send,
    IoSide: FnOnce() -> Result<(), CopyError> + Send,
    Lane: Fn(L) -> Result<(), CopyError> + Sync,
{
    std::thread::scope(|s| {
        let io = s.spawn(io);
        let lane = &lane;
        let copiers: Vec<_> = lanes
            .into_iter()
            .map(|l| s.spawn(move || lane(l)))
            .collect();
        let (mut failed, mut gone) = (None, None);
        for c in copiers {
            match c.join() {
                Ok(Ok(())) => {}
                Ok(Err(e @ CopyError::ThreadGone(_))) => {
                    gone.get_or_insert(e);
                }
                Ok(Err(e)) => {
                    failed.get_or_insert(e);
                }
                Err(_) => {
                    failed.get_or_insert(CopyError::ThreadGone("SDMA copier"));
                }
            }
        }
        let io = io.join().unwrap_or(Err(CopyError::ThreadGone(thread)));
        match (failed, io, gone) {
            (Some(e), _, _) | (None, Err(e), _) | (None, Ok(()), Some(e)) => Err(e),
            (None, Ok(()), None) => Ok(()),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cut_at_zero_ranges_cover_the_range_once() {
        let zeros = [4..8usize, 10..12, 20..30];
        assert_eq!(
            split_by_zeros(0, 16, &zeros),
            [
                (0, 4, false),
                (4, 4, true),
                (8, 2, false),
                (10, 2, true),
                (12, 4, false)
            ]
        );
        // A BO segment starting inside a zero range and ending inside another.
        assert_eq!(
            split_by_zeros(6, 18, &zeros),
            [
                (6, 2, true),
                (8, 2, false),
                (10, 2, true),
                (12, 8, false),
                (20, 4, true)
            ]
        );
        assert_eq!(split_by_zeros(12, 8, &zeros), [(12, 8, false)]);
        assert_eq!(split_by_zeros(0, 5, &[]), [(0, 5, false)]);
    }

    #[test]
    fn fill_packets_fit_the_dwords_counted_for_them() {
        for len in [1u64, 4 << 20, (4 << 20) + 1, 64 << 20] {
            let mut ib = IbBuilder::new();
            ib.const_fill(0x1000, 0, len);
            assert_eq!(ib.finish().len(), fill_dwords(len), "{len} bytes");
        }
    }
}
