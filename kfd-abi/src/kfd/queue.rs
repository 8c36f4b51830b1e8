//! User-mode queues on `/dev/kfd`: creation and destruction, ring updates, CU masks, wave
//! state and global wave syncs.

use kfd_sys as sys;

use crate::error::{IoctlError, Result};
use crate::handle::DeviceFile;
use crate::ioctl::kfd::req;
use crate::transport::Transport;
use crate::types::{GpuId, QueueId, QueueType};

use super::Kfd;

/// The description of a new queue. Addresses are process virtual addresses that the driver keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct QueueDesc {
    /// The GPU.
    pub gpu_id: u32,
    /// Queue type.
    pub queue_type: u32,
    /// Ring buffer address.
    pub ring_base: u64,
    /// Ring size in bytes (a power of two).
    pub ring_size: u32,
    /// Write pointer address.
    pub write_ptr: u64,
    /// Read pointer address.
    pub read_ptr: u64,
    /// Percentage of the ring in use (0..=100).
    pub percentage: u32,
    /// Priority (0..=15).
    pub priority: u32,
    /// End-of-pipe buffer address.
    pub eop_buffer: u64,
    /// End-of-pipe buffer size.
    pub eop_buffer_size: u64,
    /// Context save/restore area address.
    pub ctx_save_restore: u64,
    /// Context save/restore area size.
    pub ctx_save_restore_size: u32,
    /// Control stack size.
    pub ctl_stack_size: u32,
}

impl QueueDesc {
    /// A queue of `queue_type` on `gpu` with default percentage (100) and priority (7).
    pub fn new(gpu: GpuId, queue_type: QueueType) -> Self {
        Self {
            gpu_id: gpu.get(),
            queue_type: queue_type.into(),
            percentage: 100,
            priority: 7,
            ..Self::default()
        }
    }
}

/// What `CREATE_QUEUE` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreatedQueue {
    /// The queue id.
    pub queue_id: QueueId,
    /// The doorbell's mmap offset on `/dev/kfd`.
    pub doorbell_offset: u64,
}

impl<T: Transport> Kfd<T> {
    /// Creates a user-mode queue (`CREATE_QUEUE`).
    ///
    /// # Safety
    ///
    /// The driver keeps the ring, read/write pointer, EOP and context-save addresses of `desc` and
    /// the GPU accesses them until the queue is destroyed: they must stay valid (and mapped to the
    /// GPU where the hardware needs that) for the queue's life.
    ///
    /// # Errors
    ///
    /// `EINVAL` bad percentage/priority/ring size or unknown GPU, `EFAULT` bad addresses,
    /// `ENOTSUPP` bad queue type, `ESRCH` no VM on that GPU, `ENOSPC` too many queues.
    pub unsafe fn create_queue(&self, desc: &QueueDesc) -> Result<CreatedQueue> {
        let mut a = sys::kfd_ioctl_create_queue_args {
            ring_base_address: desc.ring_base,
            write_pointer_address: desc.write_ptr,
            read_pointer_address: desc.read_ptr,
            ring_size: desc.ring_size,
            gpu_id: desc.gpu_id,
            queue_type: desc.queue_type,
            queue_percentage: desc.percentage,
            queue_priority: desc.priority,
            eop_buffer_address: desc.eop_buffer,
            eop_buffer_size: desc.eop_buffer_size,
            ctx_save_restore_address: desc.ctx_save_restore,
            ctx_save_restore_size: desc.ctx_save_restore_size,
            ctl_stack_size: desc.ctl_stack_size,
            ..Default::default()
        };
        // SAFETY: the caller guarantees the addresses the driver keeps.
        unsafe { self.call(req::CREATE_QUEUE, &mut a) }?;
        Ok(CreatedQueue {
            queue_id: QueueId(a.queue_id),
            doorbell_offset: a.doorbell_offset,
        })
    }

    /// Destroys a queue (`DESTROY_QUEUE`).
    pub fn destroy_queue(&self, queue: QueueId) -> Result<()> {
        let mut a = sys::kfd_ioctl_destroy_queue_args {
            queue_id: queue.get(),
            pad: 0,
        };
        self.read_write(req::DESTROY_QUEUE, &mut a)?;
        Ok(())
    }

    /// Changes a queue's ring, percentage and priority (`UPDATE_QUEUE`).
    ///
    /// # Safety
    ///
    /// As for [`Kfd::create_queue`]: the new ring must stay valid for the queue's life.
    pub unsafe fn update_queue(
        &self,
        queue: QueueId,
        ring_base: u64,
        ring_size: u32,
        percentage: u32,
        priority: u32,
    ) -> Result<()> {
        let mut a = sys::kfd_ioctl_update_queue_args {
            ring_base_address: ring_base,
            queue_id: queue.get(),
            ring_size,
            queue_percentage: percentage,
            queue_priority: priority,
        };
        // SAFETY: the caller guarantees the ring address.
        unsafe { self.call(req::UPDATE_QUEUE, &mut a) }?;
        Ok(())
    }

    /// Restricts a queue to the CUs set in `mask` (`SET_CU_MASK`; 32 CUs per word).
    pub fn set_cu_mask(&self, queue: QueueId, mask: &[u32]) -> Result<()> {
        let bits = mask
            .len()
            .checked_mul(32)
            .and_then(|b| u32::try_from(b).ok());
        let num_cu_mask = bits.ok_or_else(|| IoctlError::InvalidArgument {
            ioctl: "SET_CU_MASK".into(),
            what: format!("{} mask words", mask.len()),
        })?;
        let mut a = sys::kfd_ioctl_set_cu_mask_args {
            queue_id: queue.get(),
            num_cu_mask,
            cu_mask_ptr: mask.as_ptr() as u64,
        };
        // SAFETY: `mask` holds num_cu_mask / 32 words for the driver to read.
        unsafe { self.call(req::SET_CU_MASK, &mut a) }?;
        Ok(())
    }

    /// Copies a queue's control stack into `ctl_stack` and returns the used sizes of the control
    /// stack and of the save area (`GET_QUEUE_WAVE_STATE`).
    ///
    /// # Safety
    ///
    /// `ctl_stack` must be at least as large as the queue's control stack (its `ctl_stack_size`):
    /// the driver writes that many bytes.
    pub unsafe fn get_queue_wave_state(
        &self,
        queue: QueueId,
        ctl_stack: &mut [u8],
    ) -> Result<(u32, u32)> {
        let mut a = sys::kfd_ioctl_get_queue_wave_state_args {
            ctl_stack_address: ctl_stack.as_mut_ptr() as u64,
            queue_id: queue.get(),
            ..Default::default()
        };
        // SAFETY: the caller guarantees the buffer is large enough.
        unsafe { self.call(req::GET_QUEUE_WAVE_STATE, &mut a) }?;
        Ok((a.ctl_stack_used_size, a.save_area_used_size))
    }

    /// Gives a queue `num_gws` global wave syncs; returns the first (`ALLOC_QUEUE_GWS`).
    pub fn alloc_queue_gws(&self, queue: QueueId, num_gws: u32) -> Result<u32> {
        let mut a = sys::kfd_ioctl_alloc_queue_gws_args {
            queue_id: queue.get(),
            num_gws,
            ..Default::default()
        };
        self.read_write(req::ALLOC_QUEUE_GWS, &mut a)?;
        Ok(a.first_gws)
    }
}
