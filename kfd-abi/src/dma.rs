//! Host memory the GPU copies into and out of: page-aligned anonymous buffers, registered as
//! USERPTR BOs and mapped into a render node's GPU VM.
//!
//! This is the only way the plugin gives the GPU access to its own memory, so the unsafe contract
//! of [`RenderNode::gem_userptr`] is discharged here once: a [`UserptrBuffer`] owns its memory and
//! unmaps and closes the BO before freeing it.

use std::fmt;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

use crate::error::{IoctlError, Result};
use std::time::Duration;

use crate::render::{IbSubmit, RenderNode, UserptrFlags, VmPageFlags, HW_IP_DMA};
use crate::transport::Transport;
use crate::types::{BoHandle, ContextId};

/// The page size assumed for alignment (4 KiB on x86-64; larger pages are multiples of it).
pub const PAGE_SIZE: usize = 4096;

/// The size of a transparent huge page on x86-64 (a PMD: 2 MiB).
pub const HUGE_PAGE_SIZE: usize = 2 << 20;

/// A page-aligned, zero-filled anonymous memory mapping.
pub struct HostBuffer {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer is plain memory owned by this value; moving it to another thread moves the
// ownership with it.
unsafe impl Send for HostBuffer {}
// SAFETY: shared access only hands out shared slices.
unsafe impl Sync for HostBuffer {}

impl HostBuffer {
    /// Maps `len` bytes (rounded up to whole pages) of fresh anonymous memory.
    pub fn new(len: usize) -> std::io::Result<Self> {
        let len = len.max(1).div_ceil(PAGE_SIZE) * PAGE_SIZE;
        // SAFETY: an anonymous private mapping at an address of the kernel's choice touches no
        // existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(Self { ptr, len })
    }

    /// Maps `len` bytes (rounded up to whole pages) of fresh anonymous memory starting on a
    /// [`HUGE_PAGE_SIZE`] boundary, and asks for transparent huge pages (`MADV_HUGEPAGE`) over
    /// its whole huge-page blocks; the rest (less than a huge page at the end) stays in small
    /// pages, so the buffer takes no more memory than [`HostBuffer::new`]'s. Large staging
    /// buffers copied through many times: the CPU's passes over them (checksums), the kernel's
    /// pinning of their pages for direct I/O and a driver's for a USERPTR BO walk 512 times fewer
    /// pages. Where the kernel has no transparent huge pages (or they are off) the advice is
    /// refused or ignored and the buffer is an ordinary one.
    pub fn with_huge_pages(len: usize) -> std::io::Result<Self> {
        let len = len.max(1).div_ceil(PAGE_SIZE) * PAGE_SIZE;
        let span = len
            .checked_add(HUGE_PAGE_SIZE - PAGE_SIZE)
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOMEM))?;
        let room = Self::new(span)?;
        let base = room.ptr.as_ptr() as usize;
        let start = base.next_multiple_of(HUGE_PAGE_SIZE);
        // The reservation is given back around the aligned buffer: its head and tail unmapped,
        // and `room` forgotten so that its Drop unmaps nothing.
        let room = std::mem::ManuallyDrop::new(room);
        for (from, to) in [(base, start), (start + len, base + room.len)] {
            if to > from {
                // SAFETY: unmapping pages of the reservation made above that lie outside the
                // buffer kept; nothing references them.
                unsafe { libc::munmap(from as *mut libc::c_void, to - from) };
            }
        }
        let ptr = NonNull::new(start as *mut u8)
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOMEM))?;
        let buf = Self { ptr, len };
        let whole = len / HUGE_PAGE_SIZE * HUGE_PAGE_SIZE;
        if whole > 0 {
            // SAFETY: advice on the buffer's own, mapped, huge-page-aligned range; it changes how
            // the kernel backs the memory, not its contents (all zero) or its mapping.
            let r = unsafe { libc::madvise(buf.ptr.as_ptr().cast(), whole, libc::MADV_HUGEPAGE) };
            if r != 0 {
                log::debug!(
                    "no transparent huge pages for a {len}-byte buffer: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
        Ok(buf)
    }

    /// Length in bytes (whole pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a buffer has at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The CPU address.
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// The contents.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes owned by `self`, alive as long as `&self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The contents, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is `len` writable bytes owned by `self`, exclusively borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `new`, which nothing references any more.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

impl fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostBuffer({:#x}, {} bytes)", self.addr(), self.len)
    }
}

/// A host buffer registered as a USERPTR BO and mapped at a GPU VA of a render node's VM.
///
/// The GPU writes it only while a submission that targets it runs: read it after waiting for that
/// submission's fence, and write it before submitting.
#[derive(Debug)]
pub struct UserptrBuffer<'r, T: Transport> {
    render: &'r RenderNode<T>,
    mem: HostBuffer,
    bo: BoHandle,
    va: u64,
}

impl<'r, T: Transport> UserptrBuffer<'r, T> {
    /// Allocates `len` bytes (rounded to pages), registers them with `render` and maps them
    /// read-write at GPU VA `va`.
    pub fn new(render: &'r RenderNode<T>, len: usize, va: u64) -> Result<Self> {
        Self::register(render, HostBuffer::new(len), va)
    }

    /// As [`UserptrBuffer::new`], in memory backed by transparent huge pages where the kernel
    /// has them ([`HostBuffer::with_huge_pages`]): for large buffers the GPU and the CPU go
    /// through many times.
    pub fn with_huge_pages(render: &'r RenderNode<T>, len: usize, va: u64) -> Result<Self> {
        Self::register(render, HostBuffer::with_huge_pages(len), va)
    }

    /// Registers `mem` (the allocation's outcome) with `render` and maps it at `va`.
    fn register(
        render: &'r RenderNode<T>,
        mem: std::io::Result<HostBuffer>,
        va: u64,
    ) -> Result<Self> {
        let mem = mem.map_err(|source| IoctlError::Fd {
            what: "allocating a staging buffer",
            device: render.label().to_owned(),
            source,
        })?;
        // SAFETY: `mem` is page-aligned anonymous memory owned by the value built below, which
        // unmaps and closes the BO (in Drop) before the memory is freed.
        let bo = unsafe {
            render.gem_userptr(
                mem.addr(),
                mem.len() as u64,
                UserptrFlags::ANONONLY | UserptrFlags::REGISTER,
            )
        }?;
        let flags = VmPageFlags::READABLE | VmPageFlags::WRITEABLE;
        if let Err(e) = render.va_map(bo, va, 0, mem.len() as u64, flags) {
            let _ = render.gem_close(bo);
            return Err(e);
        }
        Ok(Self {
            render,
            mem,
            bo,
            va,
        })
    }

    /// The GPU VA of the first byte.
    pub fn va(&self) -> u64 {
        self.va
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.mem.len()
    }

    /// Always false.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The contents (after the GPU wrote them).
    pub fn as_slice(&self) -> &[u8] {
        self.mem.as_slice()
    }

    /// The contents, for the CPU to fill before a submission reads them.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.mem.as_mut_slice()
    }
}

impl<T: Transport> Drop for UserptrBuffer<'_, T> {
    fn drop(&mut self) {
        if let Err(e) = self
            .render
            .va_unmap(self.bo, self.va, 0, self.mem.len() as u64)
        {
            log::warn!("unmapping a staging buffer: {e}");
        }
        if let Err(e) = self.render.gem_close(self.bo) {
            log::warn!("closing a staging buffer: {e}");
        }
    }
}

/// A window of a file, mapped read-only into this process (`MAP_SHARED`, so its pages are the
/// file's page cache, not process memory), registered as a read-only USERPTR BO and mapped
/// read-only at a GPU VA: the GPU copies straight out of the page cache.
///
/// Only for reading: amdgpu takes a file-backed userptr when `AMDGPU_GEM_USERPTR_ANONONLY` is
/// not asked for, and with `AMDGPU_GEM_USERPTR_READONLY` it neither asks for write access to
/// the pages nor maps them writable for the GPU, so the file's pages are never dirtied behind
/// the kernel's back (a GPU writing into page-cache pages would be).
///
/// The CPU sees the bytes through [`FileWindow::bytes`], which first has the kernel map them
/// (`MADV_POPULATE_READ`): a page beyond the end of the file (one truncated since the caller
/// checked its length) is then an error, not a `SIGBUS`. A file truncated by another process
/// between that call and the reads of the returned slice can still raise `SIGBUS`, as with any
/// mapped file; the pages files of an image directory are not written while criu restores.
pub struct FileWindow<'r, T: Transport> {
    render: &'r RenderNode<T>,
    ptr: NonNull<u8>,
    len: usize,
    bo: BoHandle,
    va: u64,
}

// SAFETY: the window is a read-only mapping owned by this value; moving it to another thread
// moves the ownership with it; transports are Sync, so the render node reference may move.
unsafe impl<T: Transport> Send for FileWindow<'_, T> {}
// SAFETY: shared access only hands out shared slices of read-only memory.
unsafe impl<T: Transport> Sync for FileWindow<'_, T> {}

impl<T: Transport> fmt::Debug for FileWindow<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "FileWindow({:#x}, {} bytes, GPU VA {:#x})",
            self.ptr.as_ptr() as u64,
            self.len,
            self.va
        )
    }
}

impl<'r, T: Transport> FileWindow<'r, T> {
    /// Maps `len` bytes (rounded up to whole pages) of `file` from `offset` (a multiple of
    /// [`PAGE_SIZE`]) read-only, registers them with `render` as a read-only USERPTR BO and
    /// maps that at GPU VA `va`, readable only.
    ///
    /// # Errors
    ///
    /// [`IoctlError::Fd`] when `mmap(2)` fails (`ENODEV`: the file system cannot map files;
    /// `EINVAL`: an unaligned offset); the errors of `AMDGPU_GEM_USERPTR` and `AMDGPU_GEM_VA`.
    pub fn new(
        render: &'r RenderNode<T>,
        file: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        va: u64,
    ) -> Result<Self> {
        let fd_err = |source| IoctlError::Fd {
            what: "mapping a window of a pages file",
            device: render.label().to_owned(),
            source,
        };
        let len = len.max(1).div_ceil(PAGE_SIZE) * PAGE_SIZE;
        let off = libc::off_t::try_from(offset)
            .ok()
            .filter(|_| offset % PAGE_SIZE as u64 == 0)
            .ok_or_else(|| fd_err(std::io::Error::from_raw_os_error(libc::EINVAL)))?;
        // SAFETY: a NULL hint: the kernel picks address space that overlaps nothing of ours; a
        // read-only shared mapping of the file cannot change the file; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(fd_err(std::io::Error::last_os_error()));
        }
        let Some(ptr) = NonNull::new(p.cast::<u8>()) else {
            return Err(fd_err(std::io::Error::from_raw_os_error(libc::ENOMEM)));
        };
        let unmap = || {
            // SAFETY: unmapping exactly the mapping made above, which nothing references.
            unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
        };
        // SAFETY: the range is the mapping made above, page-aligned, owned by the value built
        // below, which unmaps and closes the BO (in Drop) before it unmaps the memory; the BO is
        // read-only, so the GPU never writes the file's pages.
        let bo = match unsafe {
            render.gem_userptr(
                ptr.as_ptr() as u64,
                len as u64,
                UserptrFlags::READONLY | UserptrFlags::REGISTER,
            )
        } {
            Ok(bo) => bo,
            Err(e) => {
                unmap();
                return Err(e);
            }
        };
        if let Err(e) = render.va_map(bo, va, 0, len as u64, VmPageFlags::READABLE) {
            let _ = render.gem_close(bo);
            unmap();
            return Err(e);
        }
        Ok(Self {
            render,
            ptr,
            len,
            bo,
            va,
        })
    }

    /// The GPU VA of the first byte.
    pub fn va(&self) -> u64 {
        self.va
    }

    /// Length in bytes (whole pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The bytes of `range` (offsets into the window), after having the kernel map their pages
    /// (`MADV_POPULATE_READ`, reading them from the disk if they are not in the page cache).
    ///
    /// # Errors
    ///
    /// `EFAULT` when a page is beyond the end of the file, `EINVAL` on kernels before 5.14
    /// (no `MADV_POPULATE_READ`) or for a range outside the window, `EINTR`, `ENOMEM`, `EIO`.
    pub fn bytes(&self, range: std::ops::Range<usize>) -> std::io::Result<&[u8]> {
        if range.start > range.end || range.end > self.len {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        if range.is_empty() {
            return Ok(&[]);
        }
        let first = range.start / PAGE_SIZE * PAGE_SIZE;
        let end = range.end.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        // SAFETY: madvise on whole pages of our own mapping; POPULATE_READ only faults them in.
        let r = unsafe {
            libc::madvise(
                self.ptr.as_ptr().add(first).cast(),
                end - first,
                libc::MADV_POPULATE_READ,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the range is inside the mapping (checked above), which lives as long as
        // `&self` and is never written by this process or the GPU (read-only on both sides);
        // its pages were just mapped, so reading them does not fault (see the type's docs for a
        // file truncated meanwhile by another process).
        Ok(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(range.start), range.len()) })
    }
}

impl<T: Transport> Drop for FileWindow<'_, T> {
    fn drop(&mut self) {
        if let Err(e) = self.render.va_unmap(self.bo, self.va, 0, self.len as u64) {
            log::warn!("unmapping a window of a pages file: {e}");
        }
        if let Err(e) = self.render.gem_close(self.bo) {
            log::warn!("closing a window of a pages file: {e}");
        }
        // SAFETY: unmapping exactly the mapping made in `new`; the BO over it is closed and
        // nothing else references it.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// An SDMA queue on one render-node file: a submission context and an indirect buffer (a
/// [`UserptrBuffer`]) in that file's GPU VM. [`SdmaQueue::run`] writes packets into the IB,
/// submits them on the DMA ring and waits for their fence.
#[derive(Debug)]
pub struct SdmaQueue<'r, T: Transport> {
    render: &'r RenderNode<T>,
    ctx: ContextId,
    ib: UserptrBuffer<'r, T>,
}

impl<'r, T: Transport> SdmaQueue<'r, T> {
    /// Allocates a context and an IB of `ib_bytes` mapped at GPU VA `ib_va`.
    pub fn new(render: &'r RenderNode<T>, ib_va: u64, ib_bytes: usize) -> Result<Self> {
        let ib = UserptrBuffer::new(render, ib_bytes, ib_va)?;
        let ctx = render.ctx_alloc()?;
        Ok(Self { render, ctx, ib })
    }

    /// How many dwords one submission may hold.
    pub fn capacity_dwords(&self) -> usize {
        self.ib.len() / 4
    }

    /// The render node.
    pub fn render(&self) -> &'r RenderNode<T> {
        self.render
    }

    /// Runs the packets of `ib` (padded, at most [`capacity_dwords`](Self::capacity_dwords)
    /// dwords) and waits up to `timeout`: `Ok(true)` when they completed, `Ok(false)` when the
    /// fence did not signal in time. A faulting submission is an error from `AMDGPU_WAIT_CS`.
    pub fn run(&mut self, ib: &[u32], timeout: Duration) -> Result<bool> {
        if ib.len() > self.capacity_dwords() {
            return Err(IoctlError::InvalidArgument {
                ioctl: "AMDGPU_CS".into(),
                what: format!("{} dwords in an IB of {}", ib.len(), self.capacity_dwords()),
            });
        }
        for (dst, w) in self.ib.as_mut_slice().chunks_exact_mut(4).zip(ib) {
            dst.copy_from_slice(&w.to_le_bytes());
        }
        let submit = IbSubmit {
            ctx: self.ctx,
            bo_list: None,
            ip_type: HW_IP_DMA,
            ring: 0,
            ib_va: self.ib.va(),
            ib_bytes: u32::try_from(ib.len() * 4).unwrap_or(u32::MAX),
        };
        let seq = self.render.cs_submit(&submit)?;
        let deadline =
            RenderNode::<T>::deadline_in(u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX));
        self.render.wait_cs(self.ctx, HW_IP_DMA, 0, seq, deadline)
    }
}

impl<T: Transport> Drop for SdmaQueue<'_, T> {
    fn drop(&mut self) {
        if let Err(e) = self.render.ctx_free(self.ctx) {
            log::warn!("freeing an SDMA context: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_buffers_are_page_aligned_zeroed_and_writable() {
        let mut b = HostBuffer::new(5000).unwrap();
        assert_eq!(b.len(), 8192);
        assert_eq!(b.addr() % PAGE_SIZE as u64, 0);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[8191] = 7;
        assert_eq!(b.as_slice()[8191], 7);
    }

    /// The `VmFlags` of the mapping of this process that holds `addr`, and its range.
    fn vma_of(addr: usize) -> (usize, usize, Vec<String>) {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut current = None;
        for line in smaps.lines() {
            if let Some(flags) = line.strip_prefix("VmFlags:") {
                if let Some((start, end)) = current.take() {
                    return (
                        start,
                        end,
                        flags.split_whitespace().map(str::to_owned).collect(),
                    );
                }
            } else if let Some((range, _)) = line.split_once(' ') {
                if let Some((a, b)) = range.split_once('-') {
                    if let (Ok(a), Ok(b)) =
                        (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                    {
                        current = (a <= addr && addr < b).then_some((a, b)).or(current);
                    }
                }
            }
        }
        panic!("no mapping holds {addr:#x}");
    }

    #[test]
    fn huge_page_buffers_start_on_a_huge_page_and_ask_for_huge_pages_over_whole_blocks() {
        let len = 4 * HUGE_PAGE_SIZE + 5000;
        let mut b = HostBuffer::with_huge_pages(len).unwrap();
        assert_eq!(b.len(), 4 * HUGE_PAGE_SIZE + 8192);
        let addr = usize::try_from(b.addr()).unwrap();
        assert_eq!(addr % HUGE_PAGE_SIZE, 0);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[0] = 1;
        b.as_mut_slice()[len - 1] = 2;
        let (start, end, flags) = vma_of(addr);
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
            eprintln!("no transparent huge pages in this kernel: only the layout is checked");
            return;
        }
        assert!(flags.iter().any(|f| f == "hg"), "{flags:?}");
        assert!(start <= addr && end >= addr + 4 * HUGE_PAGE_SIZE);
        // The tail (less than a huge page) is left to small pages.
        let (_, _, tail) = vma_of(addr + 4 * HUGE_PAGE_SIZE);
        assert!(!tail.iter().any(|f| f == "hg"), "{tail:?}");
    }
}
