//! How the workload allocates its buffers: at a VA of its own allocator or at an address range
//! the CPU reserves first (for buffers it maps for the CPU at their GPU address, as ROCm does),
//! mapped on their GPU and listed in the GPU's manifest; and the host memory a queue needs.

use kfd_abi::kfd::QueueDesc;
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

/// A GTT buffer of `kind` on `gpu` mapped for the CPU through `render` at its GPU VA (an
/// address the CPU reserves first), as ROCm maps host-visible buffers; listed in `buffers`.
pub(super) fn alloc_mapped<T: Transport>(
    kfd: &Kfd<T>,
    render: &RenderNode<T>,
    gpu: GpuId,
    buffers: &mut Vec<Buffer>,
    kind: Kind,
    size: u64,
) -> Result<(Buffer, Mapping), WorkloadError> {
    let flags = AllocFlags::GTT | AllocFlags::WRITABLE | AllocFlags::NO_SUBSTITUTE;
    let (b, at, mmap_offset) = alloc_reserved(kfd, gpu, buffers, kind, size, flags)?;
    let map = render.map_bo_at(at, mmap_offset, Prot::RW, Share::Shared)?;
    Ok((b, map))
}

/// A buffer of `kind` on `gpu` (mapped on it) whose GPU VA is an address range the CPU reserves
/// for it, listed in `buffers`; returns the buffer, the reservation (to map the buffer's pages
/// over) and the buffer's mmap offset on its render node.
pub(super) fn alloc_reserved<T: Transport>(
    kfd: &Kfd<T>,
    gpu: GpuId,
    buffers: &mut Vec<Buffer>,
    kind: Kind,
    size: u64,
    flags: AllocFlags,
) -> Result<(Buffer, Mapping, u64), WorkloadError> {
    let at = Mapping::reserve(usize::try_from(size).unwrap_or(usize::MAX))
        .map_err(|e| std::io::Error::from_raw_os_error(e.0))?;
    let (b, mmap_offset) = alloc_at(kfd, gpu, buffers, kind, at.addr(), size, flags)?;
    Ok((b, at, mmap_offset))
}

/// Allocates a buffer of `kind` at the next VA on `gpu`, maps it there, and lists it.
pub(super) fn alloc<T: Transport>(
    kfd: &Kfd<T>,
    gpu: GpuId,
    buffers: &mut Vec<Buffer>,
    kind: Kind,
    size: u64,
    flags: AllocFlags,
    va: &mut u64,
) -> Result<Buffer, WorkloadError> {
    let at = bump(va, size);
    Ok(alloc_at(kfd, gpu, buffers, kind, at, size, flags)?.0)
}

/// Allocates a buffer of `kind` at `va` on `gpu`, maps it there and lists it in `buffers`;
/// returns it with its mmap offset on its render node.
pub(super) fn alloc_at<T: Transport>(
    kfd: &Kfd<T>,
    gpu: GpuId,
    buffers: &mut Vec<Buffer>,
    kind: Kind,
    va: u64,
    size: u64,
    flags: AllocFlags,
) -> Result<(Buffer, u64), WorkloadError> {
    let a = kfd.alloc_memory(va, size, gpu, flags)?;
    kfd.map_memory_to_gpu(a.handle, &[gpu])?;
    let b = Buffer {
        index: u32::try_from(buffers.len()).unwrap_or(u32::MAX),
        kind,
        va,
        size,
        handle: a.handle.get(),
    };
    buffers.push(b.clone());
    Ok((b, a.mmap_offset))
}
