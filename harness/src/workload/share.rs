//! A render-node buffer shared between two processes through a dma-buf, as multi-process
//! inference and RCCL share GPU memory: one process creates it on its render node and exports
//! it, the other imports the dma-buf into its own render-node file, each maps it at a VA of its
//! own VM and for the CPU, and what one writes the other reads. Each side is a [`SharedSide`]
//! over that process's render-node file; after a restore the same sides are found again at the
//! same GEM handle ([`SharedSide::at`]), which is what a checkpoint on Linux 6.18 keeps.

use std::os::fd::{BorrowedFd, OwnedFd};

use kfd_abi::render::{GemDomain, VmPageFlags};
use kfd_abi::{BoHandle, Prot, RenderNode, Share, Transport};

use super::manifest::WorkloadError;

/// A GPU VA for shared buffers, far from the workload's own allocations (which grow from
/// 64 GiB) and from its staging VAs.
pub const SHARED_VA: u64 = 0x100_0000_0000;

/// One process's view of a shared buffer: its GEM handle in that process's render-node file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedSide {
    handle: BoHandle,
    size: u64,
}

fn rw() -> VmPageFlags {
    VmPageFlags::READABLE | VmPageFlags::WRITEABLE
}

impl SharedSide {
    /// The exporter: a VRAM buffer of `size` bytes the CPU can map, created on `render`, mapped
    /// at `va` in its VM; returns it with its dma-buf (to hand to the other process).
    ///
    /// # Errors
    /// A failed render-node call.
    pub fn create<T: Transport>(
        render: &RenderNode<T>,
        size: u64,
        va: u64,
    ) -> Result<(Self, OwnedFd), WorkloadError> {
        let cpu = u64::from(kfd_sys::AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED);
        let handle = render.gem_create(size, 4096, GemDomain::VRAM, cpu)?;
        render.va_map(handle, va, 0, size, rw())?;
        let dmabuf = render.prime_handle_to_fd(handle)?;
        Ok((Self { handle, size }, dmabuf))
    }

    /// The importer: the buffer of `dmabuf` (`size` bytes) imported into `render` and mapped at
    /// `va` in its VM.
    ///
    /// # Errors
    /// A failed render-node call.
    pub fn import<T: Transport>(
        render: &RenderNode<T>,
        dmabuf: BorrowedFd<'_>,
        size: u64,
        va: u64,
    ) -> Result<Self, WorkloadError> {
        let handle = render.prime_fd_to_handle(dmabuf)?;
        render.va_map(handle, va, 0, size, rw())?;
        Ok(Self { handle, size })
    }

    /// The side at GEM handle `handle` of a render-node file (after a restore: the handle it had).
    pub fn at(handle: BoHandle, size: u64) -> Self {
        Self { handle, size }
    }

    /// Its GEM handle.
    pub fn handle(&self) -> BoHandle {
        self.handle
    }

    /// Its size.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Writes `bytes` at `offset` through a CPU mapping of the buffer from `render` (this side's
    /// render-node file).
    ///
    /// # Errors
    /// A failed render-node call; [`WorkloadError::Mismatch`] for a range outside the buffer.
    pub fn write<T: Transport>(
        &self,
        render: &RenderNode<T>,
        offset: u64,
        bytes: &[u8],
    ) -> Result<(), WorkloadError> {
        let map = self.map(render)?;
        let at = self.range(offset, bytes.len())?;
        if map.write(at, bytes) {
            Ok(())
        } else {
            Err(self.outside(offset, bytes.len()))
        }
    }

    /// Reads `len` bytes at `offset` through a CPU mapping of the buffer from `render`.
    ///
    /// # Errors
    /// As [`SharedSide::write`].
    pub fn read<T: Transport>(
        &self,
        render: &RenderNode<T>,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, WorkloadError> {
        let map = self.map(render)?;
        let at = self.range(offset, len)?;
        let mut out = vec![0u8; len];
        if map.read(at, &mut out) {
            Ok(out)
        } else {
            Err(self.outside(offset, len))
        }
    }

    fn map<T: Transport>(&self, render: &RenderNode<T>) -> Result<kfd_abi::Mapping, WorkloadError> {
        let offset = render.gem_mmap_offset(self.handle)?;
        let len = usize::try_from(self.size).map_err(|_| self.outside(0, usize::MAX))?;
        Ok(render.map_bo(offset, len, Prot::RW, Share::Shared)?)
    }

    fn range(&self, offset: u64, len: usize) -> Result<usize, WorkloadError> {
        let end = offset.checked_add(len as u64);
        match (usize::try_from(offset), end) {
            (Ok(at), Some(end)) if end <= self.size => Ok(at),
            _ => Err(self.outside(offset, len)),
        }
    }

    fn outside(&self, offset: u64, len: usize) -> WorkloadError {
        WorkloadError::Mismatch(format!(
            "{len} bytes at {offset:#x} are outside the shared buffer at GEM handle {} ({} bytes)",
            self.handle, self.size
        ))
    }
}
