//! The amdgpu render node (`/dev/dri/renderD<minor>`): the DRM subset that moves GPU memory for
//! checkpoint/restore — GEM objects, PRIME, the GPU VM, submission contexts, command submission on
//! the SDMA ring and its fences, and the device info query.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;

use bitflags::bitflags;
use kfd_sys as sys;

use crate::error::{bad_reply, IoctlError, Result};
use crate::handle::DeviceFile;
use crate::ioctl::{self, drm::req};
use crate::transport::Transport;
use crate::types::{BoHandle, BoListHandle, ContextId};

/// The character-device major of DRM nodes.
pub const DRM_MAJOR: u32 = 226;
/// The first render-node minor.
pub const RENDER_MINOR_BASE: u32 = 128;
/// One past the last render-node minor.
pub const RENDER_MINOR_END: u32 = 256;

/// The path of render node `minor`: `/dev/dri/renderD<minor>`.
pub fn render_node_path(minor: u32) -> PathBuf {
    PathBuf::from(format!("/dev/dri/renderD{minor}"))
}

/// Whether `(major, minor)` is a render node's device number.
pub fn is_render_node(major: u32, minor: u32) -> bool {
    major == DRM_MAJOR && (RENDER_MINOR_BASE..RENDER_MINOR_END).contains(&minor)
}

bitflags! {
    /// `AMDGPU_GEM_DOMAIN_*`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct GemDomain: u64 {
        /// System memory, not GPU-mapped.
        const CPU = sys::AMDGPU_GEM_DOMAIN_CPU as u64;
        /// System memory through the GART.
        const GTT = sys::AMDGPU_GEM_DOMAIN_GTT as u64;
        /// Device memory.
        const VRAM = sys::AMDGPU_GEM_DOMAIN_VRAM as u64;
        const _ = !0;
    }
}

bitflags! {
    /// `AMDGPU_VM_PAGE_*` flags of a GPU VA mapping.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct VmPageFlags: u32 {
        /// Readable.
        const READABLE = sys::AMDGPU_VM_PAGE_READABLE;
        /// Writeable.
        const WRITEABLE = sys::AMDGPU_VM_PAGE_WRITEABLE;
        /// Executable.
        const EXECUTABLE = sys::AMDGPU_VM_PAGE_EXECUTABLE;
        const _ = !0;
    }
}

bitflags! {
    /// `AMDGPU_GEM_USERPTR_*`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct UserptrFlags: u32 {
        /// GPU read-only.
        const READONLY = sys::AMDGPU_GEM_USERPTR_READONLY;
        /// Only anonymous memory.
        const ANONONLY = sys::AMDGPU_GEM_USERPTR_ANONONLY;
        /// Validate the range now.
        const VALIDATE = sys::AMDGPU_GEM_USERPTR_VALIDATE;
        /// Track CPU changes with an MMU notifier.
        const REGISTER = sys::AMDGPU_GEM_USERPTR_REGISTER;
        const _ = !0;
    }
}

/// What the device info query reports that checkpoint/restore uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// PCI device id.
    pub device_id: u32,
    /// `AMDGPU_FAMILY_*` (AI = gfx9).
    pub family: u32,
    /// Start of the VA range userspace may use.
    pub virtual_address_offset: u64,
    /// End of that range.
    pub virtual_address_max: u64,
    /// Required VA alignment.
    pub virtual_address_alignment: u32,
}

/// One indirect buffer to submit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IbSubmit {
    /// Context.
    pub ctx: ContextId,
    /// BO list, if any.
    pub bo_list: Option<BoListHandle>,
    /// `AMDGPU_HW_IP_*` (`DMA` for SDMA).
    pub ip_type: u32,
    /// Ring of that IP.
    pub ring: u32,
    /// GPU VA of the IB.
    pub ib_va: u64,
    /// Size of the IB in bytes.
    pub ib_bytes: u32,
}

/// `AMDGPU_HW_IP_DMA`.
pub const HW_IP_DMA: u32 = sys::AMDGPU_HW_IP_DMA;

crate::handle::device_handle!(
    /// An open render node of an amdgpu GPU.
    RenderNode,
    "render node"
);

impl<T: Transport> RenderNode<T> {
    fn handle(&self, what: &'static str, raw: u32) -> Result<BoHandle> {
        BoHandle::new(raw).ok_or_else(|| bad_reply(what, &self.label, "GEM handle 0"))
    }

    /// Creates a GEM BO of `size` bytes in `domains` (`AMDGPU_GEM_CREATE`).
    pub fn gem_create(
        &self,
        size: u64,
        alignment: u64,
        domains: GemDomain,
        flags: u64,
    ) -> Result<BoHandle> {
        let mut a = sys::drm_amdgpu_gem_create::default();
        a.in_ = sys::drm_amdgpu_gem_create_in {
            bo_size: size,
            alignment,
            domains: domains.bits(),
            domain_flags: flags,
        };
        self.read_write(req::AMDGPU_GEM_CREATE, &mut a)?;
        // SAFETY: on success the driver wrote the `out` member.
        let raw = unsafe { a.out.handle };
        self.handle("AMDGPU_GEM_CREATE", raw)
    }

    /// Wraps `size` bytes of process memory at `addr` as a GEM BO (`AMDGPU_GEM_USERPTR`).
    ///
    /// # Safety
    ///
    /// `addr..addr + size` must be page-aligned memory of this process that stays mapped while the
    /// BO exists; the GPU reads and writes it behind the compiler's back.
    pub unsafe fn gem_userptr(
        &self,
        addr: u64,
        size: u64,
        flags: UserptrFlags,
    ) -> Result<BoHandle> {
        let mut a = sys::drm_amdgpu_gem_userptr {
            addr,
            size,
            flags: flags.bits(),
            handle: 0,
        };
        // SAFETY: the caller guarantees the memory range.
        unsafe { self.call(req::AMDGPU_GEM_USERPTR, &mut a) }?;
        self.handle("AMDGPU_GEM_USERPTR", a.handle)
    }

    /// The fake offset to mmap a BO at on this node (`AMDGPU_GEM_MMAP`).
    pub fn gem_mmap_offset(&self, bo: BoHandle) -> Result<u64> {
        let mut a = sys::drm_amdgpu_gem_mmap::default();
        a.in_ = sys::drm_amdgpu_gem_mmap_in {
            handle: bo.get(),
            _pad: 0,
        };
        self.read_write(req::AMDGPU_GEM_MMAP, &mut a)?;
        // SAFETY: on success the driver wrote the `out` member.
        Ok(unsafe { a.out.addr_ptr })
    }

    fn gem_va(
        &self,
        op: u32,
        bo: BoHandle,
        flags: VmPageFlags,
        va: u64,
        offset: u64,
        size: u64,
    ) -> Result<()> {
        let a = sys::drm_amdgpu_gem_va {
            handle: bo.get(),
            _pad: 0,
            operation: op,
            flags: flags.bits(),
            va_address: va,
            offset_in_bo: offset,
            map_size: size,
        };
        self.write(req::AMDGPU_GEM_VA, &a)
    }

    /// Maps `size` bytes of `bo` from `offset` at GPU VA `va` in this file's VM
    /// (`AMDGPU_GEM_VA`, `AMDGPU_VA_OP_MAP`).
    pub fn va_map(
        &self,
        bo: BoHandle,
        va: u64,
        offset: u64,
        size: u64,
        flags: VmPageFlags,
    ) -> Result<()> {
        self.gem_va(sys::AMDGPU_VA_OP_MAP, bo, flags, va, offset, size)
    }

    /// Removes the mapping of `bo` at `va` (`AMDGPU_GEM_VA`, `AMDGPU_VA_OP_UNMAP`).
    pub fn va_unmap(&self, bo: BoHandle, va: u64, offset: u64, size: u64) -> Result<()> {
        self.gem_va(
            sys::AMDGPU_VA_OP_UNMAP,
            bo,
            VmPageFlags::empty(),
            va,
            offset,
            size,
        )
    }

    /// Releases a GEM handle (`DRM_IOCTL_GEM_CLOSE`).
    pub fn gem_close(&self, bo: BoHandle) -> Result<()> {
        let a = sys::drm_gem_close {
            handle: bo.get(),
            pad: 0,
        };
        self.write(req::GEM_CLOSE, &a)
    }

    /// Exports a BO as a dma-buf (`DRM_IOCTL_PRIME_HANDLE_TO_FD`, close-on-exec, read-write).
    pub fn prime_handle_to_fd(&self, bo: BoHandle) -> Result<OwnedFd> {
        let mut a = sys::drm_prime_handle {
            handle: bo.get(),
            // DRM_CLOEXEC and DRM_RDWR are O_CLOEXEC and O_RDWR.
            flags: (libc::O_CLOEXEC | libc::O_RDWR).unsigned_abs(),
            fd: -1,
        };
        self.read_write(req::PRIME_HANDLE_TO_FD, &mut a)?;
        // SAFETY: the driver installed `a.fd` for this call.
        unsafe { self.adopt_fd("adopting a PRIME fd", a.fd) }
    }

    /// Imports a dma-buf as a GEM BO of this file (`DRM_IOCTL_PRIME_FD_TO_HANDLE`).
    pub fn prime_fd_to_handle(&self, dmabuf: BorrowedFd<'_>) -> Result<BoHandle> {
        let mut a = sys::drm_prime_handle {
            handle: 0,
            flags: 0,
            fd: dmabuf.as_raw_fd(),
        };
        self.read_write(req::PRIME_FD_TO_HANDLE, &mut a)?;
        self.handle("PRIME_FD_TO_HANDLE", a.handle)
    }

    /// Allocates a submission context (`AMDGPU_CTX`, `ALLOC_CTX`).
    pub fn ctx_alloc(&self) -> Result<ContextId> {
        let mut a = sys::drm_amdgpu_ctx::default();
        a.in_ = sys::drm_amdgpu_ctx_in {
            op: sys::AMDGPU_CTX_OP_ALLOC_CTX,
            ..Default::default()
        };
        self.read_write(req::AMDGPU_CTX, &mut a)?;
        // SAFETY: on success the driver wrote `out.alloc`.
        Ok(ContextId(unsafe { a.out.alloc.ctx_id }))
    }

    /// Frees a submission context (`AMDGPU_CTX`, `FREE_CTX`).
    pub fn ctx_free(&self, ctx: ContextId) -> Result<()> {
        let mut a = sys::drm_amdgpu_ctx::default();
        a.in_ = sys::drm_amdgpu_ctx_in {
            op: sys::AMDGPU_CTX_OP_FREE_CTX,
            ctx_id: ctx.get(),
            ..Default::default()
        };
        self.read_write(req::AMDGPU_CTX, &mut a)
    }

    /// Creates a BO list of `(handle, priority)` entries (`AMDGPU_BO_LIST`, `CREATE`).
    pub fn bo_list_create(&self, bos: &[(BoHandle, u32)]) -> Result<BoListHandle> {
        let entries: Vec<sys::drm_amdgpu_bo_list_entry> = bos
            .iter()
            .map(|&(h, p)| sys::drm_amdgpu_bo_list_entry {
                bo_handle: h.get(),
                bo_priority: p,
            })
            .collect();
        let bo_number = u32::try_from(entries.len()).map_err(|_| IoctlError::InvalidArgument {
            ioctl: "AMDGPU_BO_LIST".into(),
            what: format!("{} entries", entries.len()),
        })?;
        let mut a = sys::drm_amdgpu_bo_list::default();
        a.in_ = sys::drm_amdgpu_bo_list_in {
            operation: sys::AMDGPU_BO_LIST_OP_CREATE,
            list_handle: 0,
            bo_number,
            bo_info_size: ioctl::size_u32::<sys::drm_amdgpu_bo_list_entry>(),
            bo_info_ptr: entries.as_ptr() as u64,
        };
        // SAFETY: `entries` holds `bo_number` entries of `bo_info_size` bytes for the driver to read.
        unsafe { self.call(req::AMDGPU_BO_LIST, &mut a) }?;
        // SAFETY: on success the driver wrote `out`.
        Ok(BoListHandle(unsafe { a.out.list_handle }))
    }

    /// Destroys a BO list (`AMDGPU_BO_LIST`, `DESTROY`).
    pub fn bo_list_destroy(&self, list: BoListHandle) -> Result<()> {
        let mut a = sys::drm_amdgpu_bo_list::default();
        a.in_ = sys::drm_amdgpu_bo_list_in {
            operation: sys::AMDGPU_BO_LIST_OP_DESTROY,
            list_handle: list.get(),
            ..Default::default()
        };
        // SAFETY: no pointers are read for DESTROY.
        unsafe { self.call(req::AMDGPU_BO_LIST, &mut a) }
    }

    /// Submits one indirect buffer (`AMDGPU_CS` with one IB chunk); returns the fence sequence
    /// number to wait on with [`RenderNode::wait_cs`].
    ///
    /// The IB is read by the GPU at its VA: the submission is only memory-safe for this process
    /// because the GPU VM maps nothing the process did not map on purpose.
    pub fn cs_submit(&self, ib: &IbSubmit) -> Result<u64> {
        let mut chunk_ib = sys::drm_amdgpu_cs_chunk_ib {
            _pad: 0,
            flags: 0,
            va_start: ib.ib_va,
            ib_bytes: ib.ib_bytes,
            ip_type: ib.ip_type,
            ip_instance: 0,
            ring: ib.ring,
        };
        let mut chunk = sys::drm_amdgpu_cs_chunk {
            chunk_id: sys::AMDGPU_CHUNK_ID_IB,
            length_dw: ioctl::size_u32::<sys::drm_amdgpu_cs_chunk_ib>() / 4,
            chunk_data: &mut chunk_ib as *mut sys::drm_amdgpu_cs_chunk_ib as u64,
        };
        let chunk_ptrs: [u64; 1] = [&mut chunk as *mut sys::drm_amdgpu_cs_chunk as u64];
        let mut a = sys::drm_amdgpu_cs::default();
        a.in_ = sys::drm_amdgpu_cs_in {
            ctx_id: ib.ctx.get(),
            bo_list_handle: ib.bo_list.map_or(0, BoListHandle::get),
            num_chunks: 1,
            flags: 0,
            chunks: chunk_ptrs.as_ptr() as u64,
        };
        // SAFETY: `chunks` points to one chunk pointer, which points to a chunk whose data is an
        // IB descriptor of `length_dw` dwords; all three live until the call returns.
        unsafe { self.call(req::AMDGPU_CS, &mut a) }?;
        // SAFETY: on success the driver wrote `out`.
        Ok(unsafe { a.out.handle })
    }

    /// Waits up to `timeout_ns` (absolute on hardware: see below) for the fence `seq` of a
    /// submission (`AMDGPU_WAIT_CS`); `Ok(true)` when it signalled, `Ok(false)` on timeout.
    /// A submission that faulted reports its error here (`ECANCELED` or `ETIME` on hardware).
    ///
    /// amdgpu reads the timeout as an absolute `CLOCK_MONOTONIC` time in ns; pass
    /// [`RenderNode::deadline_in`] to wait a relative time.
    pub fn wait_cs(
        &self,
        ctx: ContextId,
        ip_type: u32,
        ring: u32,
        seq: u64,
        timeout_ns: u64,
    ) -> Result<bool> {
        let mut a = sys::drm_amdgpu_wait_cs::default();
        a.in_ = sys::drm_amdgpu_wait_cs_in {
            handle: seq,
            timeout: timeout_ns,
            ip_type,
            ip_instance: 0,
            ring,
            ctx_id: ctx.get(),
        };
        self.read_write(req::AMDGPU_WAIT_CS, &mut a)?;
        // SAFETY: on success the driver wrote `out`.
        Ok(unsafe { a.out.status } == 0)
    }

    /// The absolute `CLOCK_MONOTONIC` deadline `ns` nanoseconds from now, for [`Self::wait_cs`].
    pub fn deadline_in(ns: u64) -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid timespec to fill.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        let now = u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000
            + u64::try_from(ts.tv_nsec).unwrap_or(0);
        now.saturating_add(ns)
    }

    /// The device info of this GPU (`AMDGPU_INFO`, `AMDGPU_INFO_DEV_INFO`).
    pub fn dev_info(&self) -> Result<DeviceInfo> {
        let mut info = sys::drm_amdgpu_info_device::default();
        let mut a = sys::drm_amdgpu_info {
            return_pointer: &mut info as *mut sys::drm_amdgpu_info_device as u64,
            return_size: ioctl::size_u32::<sys::drm_amdgpu_info_device>(),
            query: sys::AMDGPU_INFO_DEV_INFO,
            __bindgen_anon_1: Default::default(),
        };
        // SAFETY: `return_pointer` points to `return_size` writable bytes.
        unsafe { self.call(req::AMDGPU_INFO, &mut a) }?;
        Ok(DeviceInfo {
            device_id: info.device_id,
            family: info.family,
            virtual_address_offset: info.virtual_address_offset,
            virtual_address_max: info.virtual_address_max,
            virtual_address_alignment: info.virtual_address_alignment,
        })
    }
}
