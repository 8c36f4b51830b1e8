//! How the workload allocates its buffers: at a VA of its own allocator or at an address range
//! the CPU reserves first (for buffers it maps for the CPU at their GPU address, as ROCm does),
//! mapped on their GPU and listed in the GPU's manifest; and the host memory a queue needs.

use kfd_abi::kfd::QueueDesc;
use kfd_abi::render::{GemDomain, VmPageFlags};
use kfd_abi::{
    AllocFlags, GpuId, HostBuffer, Kfd, Mapping, Prot, QueueType, RenderNode, Share, Transport,
};

use super::manifest::{Buffer, Kind, Queue, WorkloadError};
use super::mover::bump;

/// Host memory a queue needs (ring, pointers, EOP, context save area), kept alive with it.
#[derive(Debug)]
pub(super) struct QueueMemory {
    _ring: HostBuffer,
    _pointers: HostBuffer,
    _eop: HostBuffer,
    _ctx_save: HostBuffer,
}

impl QueueMemory {
    /// An AQL compute queue on `gpu`, as a ROCm runtime creates one, with its host memory (which
    /// must live as long as the queue: the caller keeps it with the KFD file).
    pub(super) fn aql_queue<T: Transport>(
        kfd: &Kfd<T>,
        gpu: GpuId,
    ) -> Result<(Queue, Self), WorkloadError> {
        let mem = QueueMemory {
            _ring: HostBuffer::new(64 << 10)?,
            _pointers: HostBuffer::new(4096)?,
            _eop: HostBuffer::new(4096)?,
            _ctx_save: HostBuffer::new(64 << 10)?,
        };
        let mut d = QueueDesc::new(gpu, QueueType::ComputeAql);
        d.ring_base = mem._ring.addr();
        d.ring_size = 64 << 10;
        d.read_ptr = mem._pointers.addr();
        d.write_ptr = mem._pointers.addr() + 8;
        d.eop_buffer = mem._eop.addr();
        d.eop_buffer_size = 4096;
        d.ctx_save_restore = mem._ctx_save.addr();
        d.ctx_save_restore_size = 64 << 10;
        d.ctl_stack_size = 4096;
        // SAFETY: the queue's host memory is returned with it, and the caller keeps it as long as
        // the KFD file the queue belongs to.
        let q = unsafe { kfd.create_queue(&d) }?;
        let queue = Queue {
            id: q.queue_id.get(),
            ring_base: d.ring_base,
            ring_size: d.ring_size,
        };
        Ok((queue, mem))
    }
}

/// The buffers of one GPU as they are allocated: each mapped on the GPU and listed, in order, in
/// the GPU's manifest.
pub(super) struct GpuBuffers<'k, T: Transport> {
    pub(super) kfd: &'k Kfd<T>,
    pub(super) gpu: GpuId,
    pub(super) list: Vec<Buffer>,
}

impl<T: Transport> GpuBuffers<'_, T> {
    /// A GTT buffer of `kind` mapped for the CPU through `render` at its GPU VA (an address the
    /// CPU reserves first), as ROCm maps host-visible buffers.
    pub(super) fn mapped(
        &mut self,
        render: &RenderNode<T>,
        kind: Kind,
        size: u64,
    ) -> Result<(Buffer, Mapping), WorkloadError> {
        let flags = AllocFlags::GTT | AllocFlags::WRITABLE | AllocFlags::NO_SUBSTITUTE;
        let (b, at, mmap_offset) = self.reserved(kind, size, flags)?;
        let map = render.map_bo_at(at, mmap_offset, Prot::RW, Share::Shared)?;
        Ok((b, map))
    }

    /// A buffer of `kind` whose GPU VA is an address range the CPU reserves for it; returns the
    /// buffer, the reservation (to map the buffer's pages over) and the buffer's mmap offset on
    /// its render node.
    pub(super) fn reserved(
        &mut self,
        kind: Kind,
        size: u64,
        flags: AllocFlags,
    ) -> Result<(Buffer, Mapping, u64), WorkloadError> {
        let at = Mapping::reserve(usize::try_from(size).unwrap_or(usize::MAX))
            .map_err(|e| std::io::Error::from_raw_os_error(e.0))?;
        let (b, mmap_offset) = self.at(kind, at.addr(), size, flags)?;
        Ok((b, at, mmap_offset))
    }

    /// A buffer of `kind` at the next VA of `va`.
    pub(super) fn next(
        &mut self,
        kind: Kind,
        size: u64,
        flags: AllocFlags,
        va: &mut u64,
    ) -> Result<Buffer, WorkloadError> {
        let at = bump(va, size);
        Ok(self.at(kind, at, size, flags)?.0)
    }

    /// A buffer of the render node `render` ([`Kind::Render`]): VRAM the CPU can map, created
    /// by `GEM_CREATE` and mapped at the next VA of `va` in the render node's VM (the compute
    /// VM, once ACQUIRE_VM made it that).
    pub(super) fn render(
        &mut self,
        render: &RenderNode<T>,
        size: u64,
        va: &mut u64,
    ) -> Result<Buffer, WorkloadError> {
        let cpu = u64::from(kfd_sys::AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED);
        let handle = render.gem_create(size, 4096, GemDomain::VRAM, cpu)?;
        let at = bump(va, size);
        render.va_map(
            handle,
            at,
            0,
            size,
            VmPageFlags::READABLE | VmPageFlags::WRITEABLE,
        )?;
        let b = Buffer {
            index: u32::try_from(self.list.len()).unwrap_or(u32::MAX),
            kind: Kind::Render,
            va: at,
            size,
            handle: u64::from(handle.get()),
        };
        self.list.push(b.clone());
        Ok(b)
    }

    /// A buffer of `kind` at `va`; returns it with its mmap offset on its render node.
    fn at(
        &mut self,
        kind: Kind,
        va: u64,
        size: u64,
        flags: AllocFlags,
    ) -> Result<(Buffer, u64), WorkloadError> {
        let a = self.kfd.alloc_memory(va, size, self.gpu, flags)?;
        self.kfd.map_memory_to_gpu(a.handle, &[self.gpu])?;
        let b = Buffer {
            index: u32::try_from(self.list.len()).unwrap_or(u32::MAX),
            kind,
            va,
            size,
            handle: a.handle.get(),
        };
        self.list.push(b.clone());
        Ok((b, a.mmap_offset))
    }
}
