//! GPU memory on `/dev/kfd`: the compute VM, buffer objects (allocation, GPU mappings, free),
//! dma-buf export information and import, and the free memory of a GPU.

use std::os::fd::{AsRawFd, BorrowedFd};

use kfd_sys as sys;

use crate::error::{IoctlError, Result};
use crate::handle::DeviceFile;
use crate::ioctl::kfd::req;
use crate::ioctl::{self, Ioctl, ReadWrite};
use crate::transport::Transport;
use crate::types::{AllocFlags, GpuId, MemHandle};

use super::Kfd;

/// What `ALLOC_MEMORY_OF_GPU` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// The handle (`gpu_id << 32 | idr`).
    pub handle: MemHandle,
    /// The offset to mmap the BO at (render node for VRAM/GTT, `/dev/kfd` for doorbells/MMIO).
    pub mmap_offset: u64,
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

impl<T: Transport> Kfd<T> {
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

    /// A dma-buf fd of KFD BO `handle` (`AMDKFD_IOC_EXPORT_DMABUF`, KFD 1.12; Linux 6.2 and
    /// later), close-on-exec.
    ///
    /// # Errors
    ///
    /// `ENOTTY` on a KFD older than 1.12 (Linux 6.1); `EINVAL` an unknown GPU or handle;
    /// `EPERM` a userptr BO.
    pub fn export_dmabuf(&self, handle: MemHandle) -> Result<std::os::fd::OwnedFd> {
        let mut a = crate::uapi618::kfd_ioctl_export_dmabuf_args {
            handle: handle.0,
            flags: libc::O_CLOEXEC.unsigned_abs(),
            dmabuf_fd: u32::MAX,
        };
        self.read_write(crate::ioctl::linux618::kfd::req::EXPORT_DMABUF, &mut a)?;
        let raw = i32::try_from(a.dmabuf_fd).unwrap_or(-1);
        // SAFETY: the driver installed `a.dmabuf_fd` for this call.
        unsafe { self.adopt_fd("adopting an exported dma-buf fd", raw) }
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
