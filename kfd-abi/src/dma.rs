//! Host memory the GPU copies into and out of: page-aligned anonymous buffers, registered as
//! USERPTR BOs and mapped into a render node's GPU VM.
//!
//! This is the only way the plugin gives the GPU access to its own memory, so the unsafe contract
//! of [`RenderNode::gem_userptr`] is discharged here once: a [`UserptrBuffer`] owns its memory and
//! unmaps and closes the BO before freeing it.

use std::fmt;
use std::ptr::NonNull;

use crate::error::{IoctlError, Result};
use std::time::Duration;

use crate::render::{IbSubmit, RenderNode, UserptrFlags, VmPageFlags, HW_IP_DMA};
use crate::transport::Transport;
use crate::types::{BoHandle, ContextId};

/// The page size assumed for alignment (4 KiB on x86-64; larger pages are multiples of it).
pub const PAGE_SIZE: usize = 4096;

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
        let mem = HostBuffer::new(len).map_err(|source| IoctlError::Fd {
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
}
