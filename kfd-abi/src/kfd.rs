//! `/dev/kfd`: one typed method per KFD 1.11 ioctl.

use std::ffi::c_void;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use kfd_sys as sys;

use crate::error::{bad_reply, IoctlError, Result};
use crate::handle::DeviceFile;
use crate::ioctl::kfd::req;
use crate::ioctl::{self, Ioctl, ReadWrite};
use crate::transport::Transport;
use crate::types::*;

/// The default path of the KFD node.
pub const KFD_PATH: &str = "/dev/kfd";

/// Infinite timeout for [`Kfd::wait_events`].
pub const WAIT_INFINITE: u32 = 0xffff_ffff;

/// A version of the KFD ioctl interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    /// Major version (1).
    pub major: u32,
    /// Minor version (11 for Linux 6.1).
    pub minor: u32,
}

/// Clock counters of one GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ClockCounters {
    /// GPU clock.
    pub gpu: u64,
    /// CPU clock (CLOCK_MONOTONIC_RAW in ns).
    pub cpu: u64,
    /// System clock (CLOCK_BOOTTIME in ns).
    pub system: u64,
    /// Frequency of the system clock.
    pub system_freq: u64,
}

/// The apertures of one GPU in the process's address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Apertures {
    /// The GPU.
    pub gpu_id: u32,
    /// LDS aperture base.
    pub lds_base: u64,
    /// LDS aperture limit.
    pub lds_limit: u64,
    /// Scratch aperture base.
    pub scratch_base: u64,
    /// Scratch aperture limit.
    pub scratch_limit: u64,
    /// GPUVM aperture base.
    pub gpuvm_base: u64,
    /// GPUVM aperture limit.
    pub gpuvm_limit: u64,
}

impl From<&sys::kfd_process_device_apertures> for Apertures {
    fn from(a: &sys::kfd_process_device_apertures) -> Self {
        Self {
            gpu_id: a.gpu_id,
            lds_base: a.lds_base,
            lds_limit: a.lds_limit,
            scratch_base: a.scratch_base,
            scratch_limit: a.scratch_limit,
            gpuvm_base: a.gpuvm_base,
            gpuvm_limit: a.gpuvm_limit,
        }
    }
}

/// What `ALLOC_MEMORY_OF_GPU` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// The handle (`gpu_id << 32 | idr`).
    pub handle: MemHandle,
    /// The offset to mmap the BO at (render node for VRAM/GTT, `/dev/kfd` for doorbells/MMIO).
    pub mmap_offset: u64,
}

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

/// What `CREATE_EVENT` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreatedEvent {
    /// The event id.
    pub event_id: EventId,
    /// Trigger data (the id for signal events).
    pub trigger_data: u32,
    /// The signal page's mmap offset on `/dev/kfd` (signal events).
    pub page_offset: u64,
    /// The slot in the signal page (signal events).
    pub slot_index: u32,
}

/// The tiling configuration of a GPU.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TileConfig {
    /// `GB_ADDR_CONFIG`.
    pub gb_addr_config: u32,
    /// Number of banks.
    pub num_banks: u32,
    /// Number of ranks.
    pub num_ranks: u32,
    /// Tile mode registers.
    pub tile_config: Vec<u32>,
    /// Macro tile mode registers.
    pub macro_tile_config: Vec<u32>,
}

/// What `GET_DMABUF_INFO` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmabufInfo {
    /// Size of the buffer.
    pub size: u64,
    /// The GPU it lives on.
    pub gpu_id: u32,
    /// Its KFD allocation flags.
    pub flags: AllocFlags,
    /// Size of its metadata.
    pub metadata_size: u32,
}

/// Cache policy of `SET_MEMORY_POLICY`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum CachePolicy {
    /// `KFD_IOC_CACHE_POLICY_COHERENT`.
    Coherent = sys::KFD_IOC_CACHE_POLICY_COHERENT,
    /// `KFD_IOC_CACHE_POLICY_NONCOHERENT`.
    NonCoherent = sys::KFD_IOC_CACHE_POLICY_NONCOHERENT,
}

/// One SVM attribute (`KFD_IOCTL_SVM_ATTR_*` type and value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SvmAttribute {
    /// `KFD_IOCTL_SVM_ATTR_*`.
    pub ty: u32,
    /// The value (a gpu id, flags or a granularity).
    pub value: u32,
}

/// `KFD_IOCTL_SVM_OP_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum SvmOp {
    /// Set attributes on a range.
    SetAttr = sys::KFD_IOCTL_SVM_OP_SET_ATTR,
    /// Get attributes of a range.
    GetAttr = sys::KFD_IOCTL_SVM_OP_GET_ATTR,
}

/// Largest attribute count one SVM call carries (the size field of the request code is 14 bits).
pub const SVM_MAX_ATTRS: usize = (0x3fff - size_of::<sys::kfd_ioctl_svm_args>()) / 8;

/// The argument of `MAP_MEMORY_TO_GPU` and of `UNMAP_MEMORY_FROM_GPU`: one layout under two
/// names, so that one function issues both with the struct each request code declares.
trait DeviceListArgs {
    /// The argument for BO `handle` and `n_devices` gpu ids at `ids_ptr`.
    fn new(handle: u64, ids_ptr: u64, n_devices: u32) -> Self;
    /// How many devices the driver handled.
    fn n_success(&self) -> u32;
}

macro_rules! device_list_args {
    ($($t:ty),*) => { $(
        impl DeviceListArgs for $t {
            fn new(handle: u64, ids_ptr: u64, n_devices: u32) -> Self {
                Self { handle, device_ids_array_ptr: ids_ptr, n_devices, n_success: 0 }
            }

            fn n_success(&self) -> u32 {
                self.n_success
            }
        }
    )* };
}

device_list_args!(
    sys::kfd_ioctl_map_memory_to_gpu_args,
    sys::kfd_ioctl_unmap_memory_from_gpu_args
);

crate::handle::device_handle!(
    /// An open `/dev/kfd` (normally at [`KFD_PATH`]).
    Kfd,
    "KFD node"
);

impl<T: Transport> Kfd<T> {
    pub(crate) fn adopt(&self, what: &'static str, raw: u32) -> Result<OwnedFd> {
        let raw = i32::try_from(raw)
            .map_err(|_| bad_reply(what, &self.label, format!("fd {raw} out of range")))?;
        // SAFETY: the driver installed `raw` in our table for the call that just returned it.
        unsafe { self.adopt_fd(what, raw) }
    }

    /// The KFD ioctl interface version (`GET_VERSION`).
    pub fn get_version(&self) -> Result<Version> {
        let a = self.read(req::GET_VERSION)?;
        Ok(Version {
            major: a.major_version,
            minor: a.minor_version,
        })
    }

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

    /// Sets the default and alternate cache policy of a GPU (`SET_MEMORY_POLICY`).
    pub fn set_memory_policy(
        &self,
        gpu: GpuId,
        default: CachePolicy,
        alternate: CachePolicy,
        alternate_base: u64,
        alternate_size: u64,
    ) -> Result<()> {
        let a = sys::kfd_ioctl_set_memory_policy_args {
            alternate_aperture_base: alternate_base,
            alternate_aperture_size: alternate_size,
            gpu_id: gpu.get(),
            default_policy: default as u32,
            alternate_policy: alternate as u32,
            pad: 0,
        };
        self.write(req::SET_MEMORY_POLICY, &a)?;
        Ok(())
    }

    /// Reads the clock counters of a GPU (`GET_CLOCK_COUNTERS`).
    pub fn get_clock_counters(&self, gpu: GpuId) -> Result<ClockCounters> {
        let mut a = sys::kfd_ioctl_get_clock_counters_args {
            gpu_id: gpu.get(),
            ..Default::default()
        };
        self.read_write(req::GET_CLOCK_COUNTERS, &mut a)?;
        Ok(ClockCounters {
            gpu: a.gpu_clock_counter,
            cpu: a.cpu_clock_counter,
            system: a.system_clock_counter,
            system_freq: a.system_clock_freq,
        })
    }

    /// The apertures of up to 7 GPUs (`GET_PROCESS_APERTURES`, deprecated).
    pub fn get_process_apertures(&self) -> Result<Vec<Apertures>> {
        let a = self.read(req::GET_PROCESS_APERTURES)?;
        let n = a.num_of_nodes as usize;
        let rows = a.process_apertures.get(..n).ok_or_else(|| {
            bad_reply(
                "GET_PROCESS_APERTURES",
                &self.label,
                format!("{n} nodes (at most 7)"),
            )
        })?;
        Ok(rows.iter().map(Apertures::from).collect())
    }

    /// The apertures of every GPU of the process (`GET_PROCESS_APERTURES_NEW`, two calls).
    pub fn get_process_apertures_new(&self) -> Result<Vec<Apertures>> {
        let mut a = sys::kfd_ioctl_get_process_apertures_new_args::default();
        // SAFETY: with num_of_nodes 0 the driver only writes the count back.
        unsafe { self.call(req::GET_PROCESS_APERTURES_NEW, &mut a) }?;
        let n = a.num_of_nodes;
        if n == 0 {
            return Ok(Vec::new());
        }
        if n > 4096 {
            return Err(bad_reply(
                "GET_PROCESS_APERTURES_NEW",
                &self.label,
                format!("{n} nodes"),
            ));
        }
        let mut rows = vec![sys::kfd_process_device_apertures::default(); n as usize];
        a.kfd_process_device_apertures_ptr = rows.as_mut_ptr() as u64;
        // SAFETY: `rows` holds `num_of_nodes` entries for the driver to fill.
        unsafe { self.call(req::GET_PROCESS_APERTURES_NEW, &mut a) }?;
        rows.truncate(a.num_of_nodes.min(n) as usize);
        Ok(rows.iter().map(Apertures::from).collect())
    }

    /// Creates an event (`CREATE_EVENT`). The first signal event of a process on a dGPU passes
    /// the handle of the signal page BO in `event_page`.
    ///
    /// # Errors
    ///
    /// `EINVAL` a second event page or unknown type, `ENOSPC` no free signal slot.
    pub fn create_event(
        &self,
        ty: EventType,
        auto_reset: bool,
        event_page: Option<MemHandle>,
    ) -> Result<CreatedEvent> {
        let mut a = sys::kfd_ioctl_create_event_args {
            event_page_offset: event_page.map_or(0, MemHandle::get),
            event_type: ty.into(),
            auto_reset: u32::from(auto_reset),
            ..Default::default()
        };
        self.read_write(req::CREATE_EVENT, &mut a)?;
        Ok(CreatedEvent {
            event_id: EventId(a.event_id),
            trigger_data: a.event_trigger_data,
            page_offset: a.event_page_offset,
            slot_index: a.event_slot_index,
        })
    }

    /// Destroys an event (`DESTROY_EVENT`).
    pub fn destroy_event(&self, event: EventId) -> Result<()> {
        let a = sys::kfd_ioctl_destroy_event_args {
            event_id: event.get(),
            pad: 0,
        };
        self.write(req::DESTROY_EVENT, &a)?;
        Ok(())
    }

    /// Signals an event (`SET_EVENT`).
    pub fn set_event(&self, event: EventId) -> Result<()> {
        let a = sys::kfd_ioctl_set_event_args {
            event_id: event.get(),
            pad: 0,
        };
        self.write(req::SET_EVENT, &a)?;
        Ok(())
    }

    /// Clears an event (`RESET_EVENT`).
    pub fn reset_event(&self, event: EventId) -> Result<()> {
        let a = sys::kfd_ioctl_reset_event_args {
            event_id: event.get(),
            pad: 0,
        };
        self.write(req::RESET_EVENT, &a)?;
        Ok(())
    }

    /// Waits for any (or all) of `events` for `timeout_ms` milliseconds (`WAIT_EVENTS`;
    /// 0 polls, [`WAIT_INFINITE`] waits forever).
    pub fn wait_events(
        &self,
        events: &[EventId],
        wait_all: bool,
        timeout_ms: u32,
    ) -> Result<WaitResult> {
        let mut data: Vec<sys::kfd_event_data> = events
            .iter()
            .map(|e| sys::kfd_event_data {
                event_id: e.get(),
                ..Default::default()
            })
            .collect();
        let num_events = u32::try_from(data.len()).map_err(|_| IoctlError::InvalidArgument {
            ioctl: "WAIT_EVENTS".into(),
            what: format!("{} events", data.len()),
        })?;
        let mut a = sys::kfd_ioctl_wait_events_args {
            events_ptr: data.as_mut_ptr() as u64,
            num_events,
            wait_for_all: u32::from(wait_all),
            timeout: timeout_ms,
            wait_result: 0,
        };
        // SAFETY: `data` holds `num_events` event records for the driver to read and update.
        unsafe { self.call(req::WAIT_EVENTS, &mut a) }?;
        Ok(WaitResult::from(a.wait_result))
    }

    /// Sets the scratch backing address of a GPU (`SET_SCRATCH_BACKING_VA`).
    pub fn set_scratch_backing_va(&self, gpu: GpuId, va: u64) -> Result<()> {
        let mut a = sys::kfd_ioctl_set_scratch_backing_va_args {
            va_addr: va,
            gpu_id: gpu.get(),
            pad: 0,
        };
        self.read_write(req::SET_SCRATCH_BACKING_VA, &mut a)?;
        Ok(())
    }

    /// The tiling configuration of a GPU (`GET_TILE_CONFIG`, two calls).
    pub fn get_tile_config(&self, gpu: GpuId) -> Result<TileConfig> {
        let mut a = sys::kfd_ioctl_get_tile_config_args {
            gpu_id: gpu.get(),
            ..Default::default()
        };
        // SAFETY: with zero counts the driver only reports the counts.
        unsafe { self.call(req::GET_TILE_CONFIG, &mut a) }?;
        let (nt, nm) = (a.num_tile_configs.min(64), a.num_macro_tile_configs.min(64));
        let mut tile = vec![0u32; nt as usize];
        let mut macro_tile = vec![0u32; nm as usize];
        if nt > 0 || nm > 0 {
            a.tile_config_ptr = tile.as_mut_ptr() as u64;
            a.macro_tile_config_ptr = macro_tile.as_mut_ptr() as u64;
            a.num_tile_configs = nt;
            a.num_macro_tile_configs = nm;
            // SAFETY: the arrays hold the counts given for the driver to fill.
            unsafe { self.call(req::GET_TILE_CONFIG, &mut a) }?;
            tile.truncate(a.num_tile_configs.min(nt) as usize);
            macro_tile.truncate(a.num_macro_tile_configs.min(nm) as usize);
        }
        Ok(TileConfig {
            gb_addr_config: a.gb_addr_config,
            num_banks: a.num_banks,
            num_ranks: a.num_ranks,
            tile_config: tile,
            macro_tile_config: macro_tile,
        })
    }

    /// Installs the trap handler of a GPU (`SET_TRAP_HANDLER`).
    pub fn set_trap_handler(&self, gpu: GpuId, tba: u64, tma: u64) -> Result<()> {
        let a = sys::kfd_ioctl_set_trap_handler_args {
            tba_addr: tba,
            tma_addr: tma,
            gpu_id: gpu.get(),
            pad: 0,
        };
        self.write(req::SET_TRAP_HANDLER, &a)?;
        Ok(())
    }

    /// Makes the VM of the render-node file `drm` the GPU's compute VM (`ACQUIRE_VM`).
    ///
    /// # Errors
    ///
    /// `EINVAL` bad fd or unknown GPU, `EBUSY` already acquired with another file.
    pub fn acquire_vm(&self, gpu: GpuId, drm: BorrowedFd<'_>) -> Result<()> {
        let drm_fd = u32::try_from(drm.as_raw_fd()).unwrap_or(u32::MAX);
        let a = sys::kfd_ioctl_acquire_vm_args {
            drm_fd,
            gpu_id: gpu.get(),
        };
        self.write(req::ACQUIRE_VM, &a)?;
        Ok(())
    }

    fn alloc_raw(
        &self,
        va: u64,
        size: u64,
        gpu: GpuId,
        flags: AllocFlags,
        mmap_offset: u64,
    ) -> Result<Allocation> {
        let mut a = sys::kfd_ioctl_alloc_memory_of_gpu_args {
            va_addr: va,
            size,
            handle: 0,
            mmap_offset,
            gpu_id: gpu.get(),
            flags: flags.bits(),
        };
        // SAFETY: ALLOC_MEMORY_OF_GPU dereferences no pointer of the argument; a userptr address
        // in `mmap_offset` is vouched for by `alloc_userptr`'s caller.
        unsafe { self.call(req::ALLOC_MEMORY_OF_GPU, &mut a) }?;
        Ok(Allocation {
            handle: MemHandle(a.handle),
            mmap_offset: a.mmap_offset,
        })
    }

    /// Allocates VRAM, GTT, doorbell or MMIO-remap memory at GPU VA `va` (`ALLOC_MEMORY_OF_GPU`).
    /// For USERPTR memory use [`Kfd::alloc_userptr`].
    ///
    /// # Errors
    ///
    /// `EINVAL` zero size, unknown GPU or bad doorbell/MMIO size, `ENODEV` no VM acquired,
    /// `ENOMEM` out of memory, `EADDRINUSE` overlap with an SVM range.
    pub fn alloc_memory(
        &self,
        va: u64,
        size: u64,
        gpu: GpuId,
        flags: AllocFlags,
    ) -> Result<Allocation> {
        if flags.contains(AllocFlags::USERPTR) {
            return Err(IoctlError::InvalidArgument {
                ioctl: "ALLOC_MEMORY_OF_GPU".into(),
                what: "USERPTR memory needs alloc_userptr".into(),
            });
        }
        self.alloc_raw(va, size, gpu, flags, 0)
    }

    /// Registers `size` bytes of process memory at `cpu_addr` as a USERPTR BO at GPU VA `va`.
    ///
    /// # Safety
    ///
    /// `cpu_addr..cpu_addr + size` must be memory of this process that stays mapped until the BO
    /// is freed; the GPU reads and writes it behind the compiler's back.
    pub unsafe fn alloc_userptr(
        &self,
        va: u64,
        size: u64,
        gpu: GpuId,
        flags: AllocFlags,
        cpu_addr: u64,
    ) -> Result<Allocation> {
        self.alloc_raw(va, size, gpu, flags | AllocFlags::USERPTR, cpu_addr)
    }

    /// Frees a BO (`FREE_MEMORY_OF_GPU`).
    ///
    /// # Errors
    ///
    /// `EINVAL` unknown handle, `EBUSY` still mapped, `EPERM` the signal event page.
    pub fn free_memory(&self, handle: MemHandle) -> Result<()> {
        let a = sys::kfd_ioctl_free_memory_of_gpu_args {
            handle: handle.get(),
        };
        self.write(req::FREE_MEMORY_OF_GPU, &a)?;
        Ok(())
    }

    fn map_unmap<A: DeviceListArgs>(
        &self,
        req: Ioctl<A, ReadWrite>,
        handle: MemHandle,
        gpus: &[GpuId],
    ) -> Result<u32> {
        let ids: Vec<u32> = gpus.iter().map(|g| g.get()).collect();
        let n_devices = u32::try_from(ids.len()).map_err(|_| IoctlError::InvalidArgument {
            ioctl: ioctl::name(req.code()).into(),
            what: format!("{} devices", ids.len()),
        })?;
        let mut a = A::new(handle.get(), ids.as_ptr() as u64, n_devices);
        // SAFETY: `ids` holds `n_devices` gpu ids for the driver to read.
        unsafe { self.call(req, &mut a) }?;
        Ok(a.n_success())
    }

    /// Maps a BO on each of `gpus` (`MAP_MEMORY_TO_GPU`); returns the number mapped.
    ///
    /// # Errors
    ///
    /// `EINVAL` no devices or unknown peer GPU, `ENOMEM` unknown handle.
    pub fn map_memory_to_gpu(&self, handle: MemHandle, gpus: &[GpuId]) -> Result<u32> {
        self.map_unmap(req::MAP_MEMORY_TO_GPU, handle, gpus)
    }

    /// Unmaps a BO from each of `gpus` (`UNMAP_MEMORY_FROM_GPU`); returns the number unmapped.
    pub fn unmap_memory_from_gpu(&self, handle: MemHandle, gpus: &[GpuId]) -> Result<u32> {
        self.map_unmap(req::UNMAP_MEMORY_FROM_GPU, handle, gpus)
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

    /// Describes a dma-buf exported by a KFD GPU (`GET_DMABUF_INFO`), with its metadata copied
    /// into `metadata` when given.
    pub fn get_dmabuf_info(
        &self,
        dmabuf: BorrowedFd<'_>,
        metadata: Option<&mut [u8]>,
    ) -> Result<DmabufInfo> {
        let (ptr, len) = metadata.map_or((0, 0), |m| (m.as_mut_ptr() as u64, m.len()));
        let mut a = sys::kfd_ioctl_get_dmabuf_info_args {
            metadata_ptr: ptr,
            metadata_size: u32::try_from(len).unwrap_or(u32::MAX),
            dmabuf_fd: u32::try_from(dmabuf.as_raw_fd()).unwrap_or(u32::MAX),
            ..Default::default()
        };
        // SAFETY: the metadata buffer, when given, holds `metadata_size` bytes.
        unsafe { self.call(req::GET_DMABUF_INFO, &mut a) }?;
        Ok(DmabufInfo {
            size: a.size,
            gpu_id: a.gpu_id,
            flags: AllocFlags::from_bits_retain(a.flags),
            metadata_size: a.metadata_size,
        })
    }

    /// Imports a dma-buf as a BO at GPU VA `va` on `gpu` (`IMPORT_DMABUF`).
    pub fn import_dmabuf(&self, va: u64, gpu: GpuId, dmabuf: BorrowedFd<'_>) -> Result<MemHandle> {
        let mut a = sys::kfd_ioctl_import_dmabuf_args {
            va_addr: va,
            handle: 0,
            gpu_id: gpu.get(),
            dmabuf_fd: u32::try_from(dmabuf.as_raw_fd()).unwrap_or(u32::MAX),
        };
        self.read_write(req::IMPORT_DMABUF, &mut a)?;
        Ok(MemHandle(a.handle))
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

    /// Opens the SMI event stream of a GPU (`SMI_EVENTS`): an fd to read events from.
    pub fn smi_events(&self, gpu: GpuId) -> Result<OwnedFd> {
        let mut a = sys::kfd_ioctl_smi_events_args {
            gpuid: gpu.get(),
            anon_fd: 0,
        };
        self.read_write(req::SMI_EVENTS, &mut a)?;
        self.adopt("SMI_EVENTS", a.anon_fd)
    }

    fn svm(&self, op: SvmOp, start: u64, size: u64, attrs: &mut [SvmAttribute]) -> Result<()> {
        if attrs.len() > SVM_MAX_ATTRS {
            return Err(IoctlError::InvalidArgument {
                ioctl: "SVM".into(),
                what: format!("{} attributes (at most {SVM_MAX_ATTRS})", attrs.len()),
            });
        }
        // Header (24 bytes) then the attributes, in u64 words to keep the 8-byte alignment.
        let mut buf = vec![0u64; 3 + attrs.len()];
        buf[0] = start;
        buf[1] = size;
        #[allow(clippy::cast_possible_truncation)] // bounded by SVM_MAX_ATTRS
        let nattr = attrs.len() as u32;
        buf[2] = u64::from(op as u32) | (u64::from(nattr) << 32);
        for (w, at) in buf[3..].iter_mut().zip(attrs.iter()) {
            *w = u64::from(at.ty) | (u64::from(at.value) << 32);
        }
        let code = req::SVM.with_size(buf.len() * 8);
        // SAFETY: `buf` holds the whole variable-size argument whose size `code` encodes; the SVM
        // ioctl dereferences no pointer inside it.
        unsafe { self.issue("SVM".into(), code, buf.as_mut_ptr().cast::<c_void>()) }?;
        for (w, at) in buf[3..].iter().zip(attrs.iter_mut()) {
            #[allow(clippy::cast_possible_truncation)] // splitting a u64 into its halves
            {
                at.ty = *w as u32;
                at.value = (*w >> 32) as u32;
            }
        }
        Ok(())
    }

    /// Sets SVM attributes on `start..start + size` (`SVM`, `SET_ATTR`).
    pub fn svm_set_attr(&self, start: u64, size: u64, attrs: &[SvmAttribute]) -> Result<()> {
        self.svm(SvmOp::SetAttr, start, size, &mut attrs.to_vec())
    }

    /// Reads SVM attributes of `start..start + size` into `attrs` (`SVM`, `GET_ATTR`): the caller
    /// names the attribute types, the driver fills the values.
    pub fn svm_get_attr(&self, start: u64, size: u64, attrs: &mut [SvmAttribute]) -> Result<()> {
        self.svm(SvmOp::GetAttr, start, size, attrs)
    }

    /// Sets the XNACK mode (`SET_XNACK_MODE`); returns the mode now in force.
    pub fn set_xnack_mode(&self, enabled: bool) -> Result<bool> {
        let mut a = sys::kfd_ioctl_set_xnack_mode_args {
            xnack_enabled: i32::from(enabled),
        };
        self.read_write(req::SET_XNACK_MODE, &mut a)?;
        Ok(a.xnack_enabled != 0)
    }

    /// Queries the XNACK mode (`SET_XNACK_MODE` with -1).
    pub fn xnack_mode(&self) -> Result<bool> {
        let mut a = sys::kfd_ioctl_set_xnack_mode_args { xnack_enabled: -1 };
        self.read_write(req::SET_XNACK_MODE, &mut a)?;
        Ok(a.xnack_enabled != 0)
    }

    /// Free memory on a GPU, in bytes (`AVAILABLE_MEMORY`).
    pub fn available_memory(&self, gpu: GpuId) -> Result<u64> {
        let mut a = sys::kfd_ioctl_get_available_memory_args {
            gpu_id: gpu.get(),
            ..Default::default()
        };
        self.read_write(req::AVAILABLE_MEMORY, &mut a)?;
        Ok(a.available)
    }
}
