//! The amdgpu render node (`/dev/dri/renderD<minor>`): the DRM subset that moves GPU memory for
//! checkpoint/restore — GEM objects, PRIME, the GPU VM, submission contexts, command submission on
//! the SDMA ring and its fences — and the queries that identify the device (the DRM version and
//! capabilities, the `AMDGPU_INFO` queries libdrm's `amdgpu_device_initialize` makes).

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;

use bitflags::bitflags;
use kfd_sys as sys;

use crate::error::{bad_reply, IoctlError, Result};
use crate::handle::DeviceFile;
use crate::ioctl::{self, drm::req};
use crate::mapping::{Mapping, Place, Prot, Share};
use crate::transport::Transport;
use crate::types::{BoHandle, BoListHandle, ContextId};

/// The character-device major of DRM nodes.
pub const DRM_MAJOR: u32 = 226;
/// The first render-node minor.
pub(crate) const RENDER_MINOR_BASE: u32 = 128;
/// One past the last render-node minor.
pub(crate) const RENDER_MINOR_END: u32 = 256;

/// The path of render node `minor`: `/dev/dri/renderD<minor>`.
pub(crate) fn render_node_path(minor: u32) -> PathBuf {
    PathBuf::from(format!("/dev/dri/renderD{minor}"))
}

/// Whether `(major, minor)` is a render node's device number.
pub(crate) fn is_render_node(major: u32, minor: u32) -> bool {
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

/// What `DRM_IOCTL_VERSION` reports: the driver's version and its name, date and description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrmVersion {
    /// Major version (amdgpu: 3).
    pub major: i32,
    /// Minor version (amdgpu in Linux 6.1: 49).
    pub minor: i32,
    /// Patch level.
    pub patchlevel: i32,
    /// Driver name (`amdgpu`).
    pub name: String,
    /// Driver date (`20150101`).
    pub date: String,
    /// Driver description (`AMD GPU`).
    pub desc: String,
}

/// One hardware IP as `AMDGPU_INFO_HW_IP_INFO` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HwIpInfo {
    /// The driver IP block's major version.
    pub major: u32,
    /// Its minor version.
    pub minor: u32,
    /// The rings a context may use, one bit each.
    pub available_rings: u32,
    /// Required alignment of an IB's start, bytes.
    pub ib_start_alignment: u32,
    /// Required alignment of an IB's size, bytes.
    pub ib_size_alignment: u32,
    /// The discovered IP version, `major << 16 | minor << 8 | revision` (0 before Vega).
    pub ip_discovery_version: u32,
}

/// VRAM and GTT sizes as `AMDGPU_INFO_VRAM_GTT` reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VramGtt {
    /// VRAM userspace may use.
    pub vram_size: u64,
    /// The part of it the CPU can reach.
    pub vram_cpu_accessible_size: u64,
    /// GTT size.
    pub gtt_size: u64,
}

/// One memory heap of `AMDGPU_INFO_MEMORY`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapInfo {
    /// Size of the heap.
    pub total: u64,
    /// What userspace may use of it.
    pub usable: u64,
    /// What is in use.
    pub usage: u64,
    /// The largest single allocation the driver allows.
    pub max_allocation: u64,
}

/// `AMDGPU_INFO_MEMORY`: the VRAM, CPU-visible VRAM and GTT heaps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryInfo {
    /// All VRAM.
    pub vram: HeapInfo,
    /// VRAM the CPU can reach through the BAR.
    pub cpu_accessible_vram: HeapInfo,
    /// GTT.
    pub gtt: HeapInfo,
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

/// The arguments of an `AMDGPU_INFO` query (a union in the header).
type InfoArgs = sys::drm_amdgpu_info__bindgen_ty_1;

/// The `query_hw_ip` arguments.
fn hw_ip(ip_type: u32, ip_instance: u32) -> InfoArgs {
    InfoArgs {
        query_hw_ip: sys::drm_amdgpu_info__bindgen_ty_1__bindgen_ty_2 {
            type_: ip_type,
            ip_instance,
        },
    }
}

/// One GEM handle of a render-node file, as `AMDGPU_GEM_LIST_HANDLES` (Linux 6.18) lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemHandleInfo {
    /// The handle.
    pub handle: BoHandle,
    /// Imported from a dma-buf of another device (`AMDGPU_GEM_LIST_HANDLES_FLAG_IS_IMPORT`); a
    /// dma-buf of the same device imports as the same object, without the flag.
    pub imported: bool,
    /// Size in bytes.
    pub size: u64,
    /// Preferred domains.
    pub preferred_domains: GemDomain,
    /// Creation flags (`AMDGPU_GEM_CREATE_*`, the settable ones).
    pub alloc_flags: u64,
    /// Alignment in pages, as the driver keeps it.
    pub alignment_pages: u64,
}

/// One GPU VA mapping of a GEM object in a file's VM, as `AMDGPU_GEM_OP_GET_MAPPING_INFO`
/// (Linux 6.18) reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemMapping {
    /// GPU VA.
    pub va: u64,
    /// Bytes.
    pub size: u64,
    /// Offset in the object.
    pub offset: u64,
    /// Page-table flags (`AMDGPU_PTE_*`; [`crate::uapi618::pte_to_va_flags`] gives the
    /// `GEM_VA` flags that recreate them).
    pub pte_flags: u64,
}

/// How many times a two-call listing asks again when the list grew in between.
const LIST_ATTEMPTS: usize = 8;

crate::handle::device_handle!(
    /// An open render node of an amdgpu GPU.
    RenderNode,
    "render node"
);

impl<T: Transport> RenderNode<T> {
    fn handle(&self, what: &'static str, raw: u32) -> Result<BoHandle> {
        BoHandle::new(raw).ok_or_else(|| bad_reply(what, &self.label, "GEM handle 0"))
    }

    /// Maps `len` bytes of the buffer whose fake mmap offset is `offset` (`GEM_MMAP`'s answer,
    /// or a KFD BO's `mmap_offset` on the render node of its GPU's VM).
    ///
    /// # Errors
    ///
    /// `EINVAL` not a buffer's offset on this node, longer than the buffer, or copy-on-write;
    /// `EACCES` a buffer of another file; `EPERM` userptr or VRAM without CPU access.
    pub fn map_bo(&self, offset: u64, len: usize, prot: Prot, share: Share) -> Result<Mapping> {
        self.map("mmap", Place::Anywhere(len), offset, prot, share)
    }

    /// [`map_bo`](Self::map_bo) over the reservation `at`, at its address (ROCm maps a buffer
    /// at its GPU virtual address).
    ///
    /// # Errors
    ///
    /// As for [`map_bo`](Self::map_bo).
    pub fn map_bo_at(&self, at: Mapping, offset: u64, prot: Prot, share: Share) -> Result<Mapping> {
        self.map("mmap", Place::Over(at), offset, prot, share)
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

    /// Every GEM handle of this file (`AMDGPU_GEM_LIST_HANDLES`, Linux 6.18), in handle order.
    ///
    /// # Errors
    ///
    /// `EINVAL` on a kernel without the ioctl (Linux 6.1 to 6.17); `EAGAIN` when handles keep
    /// appearing between the calls.
    pub fn gem_list_handles(&self) -> Result<Vec<GemHandleInfo>> {
        use crate::uapi618::{
            drm_amdgpu_gem_list_handles, drm_amdgpu_gem_list_handles_entry,
            AMDGPU_GEM_LIST_HANDLES_FLAG_IS_IMPORT,
        };
        let mut room = 0usize;
        for _ in 0..LIST_ATTEMPTS {
            let mut entries = vec![drm_amdgpu_gem_list_handles_entry::default(); room];
            let mut a = drm_amdgpu_gem_list_handles {
                entries: entries.as_mut_ptr() as u64,
                num_entries: u32::try_from(room).unwrap_or(u32::MAX),
                padding: 0,
            };
            let req = ioctl::linux618::drm::req::AMDGPU_GEM_LIST_HANDLES;
            // SAFETY: `entries` holds `num_entries` entries, which the driver may fill.
            unsafe { self.call(req, &mut a) }?;
            let n = a.num_entries as usize;
            if n > room {
                room = n;
                continue;
            }
            return entries
                .into_iter()
                .take(n)
                .map(|e| {
                    Ok(GemHandleInfo {
                        handle: self.handle("AMDGPU_GEM_LIST_HANDLES", e.gem_handle)?,
                        imported: e.flags & AMDGPU_GEM_LIST_HANDLES_FLAG_IS_IMPORT != 0,
                        size: e.size,
                        preferred_domains: GemDomain::from_bits_retain(e.preferred_domains),
                        alloc_flags: e.alloc_flags,
                        alignment_pages: e.alignment,
                    })
                })
                .collect();
        }
        Err(crate::error::failed(
            "AMDGPU_GEM_LIST_HANDLES",
            &self.label,
            crate::Errno::EAGAIN,
        ))
    }

    /// The GPU VA mappings of `bo` in this file's VM (`AMDGPU_GEM_OP`,
    /// `GET_MAPPING_INFO`, Linux 6.18).
    ///
    /// # Errors
    ///
    /// `ENOENT` an unknown handle; `EINVAL` on a kernel without the operation (Linux 6.1).
    pub fn gem_mapping_info(&self, bo: BoHandle) -> Result<Vec<GemMapping>> {
        use crate::uapi618::{drm_amdgpu_gem_op, drm_amdgpu_gem_vm_entry};
        let mut room = 0usize;
        for _ in 0..LIST_ATTEMPTS {
            let mut entries = vec![drm_amdgpu_gem_vm_entry::default(); room];
            let mut a = drm_amdgpu_gem_op {
                handle: bo.get(),
                op: crate::uapi618::AMDGPU_GEM_OP_GET_MAPPING_INFO,
                value: entries.as_mut_ptr() as u64,
                num_entries: u32::try_from(room).unwrap_or(u32::MAX),
                padding: 0,
            };
            let req = ioctl::linux618::drm::req::AMDGPU_GEM_OP;
            // SAFETY: `value` points to `num_entries` entries, which the driver may fill.
            unsafe { self.call(req, &mut a) }?;
            let n = a.num_entries as usize;
            if n > room {
                room = n;
                continue;
            }
            return Ok(entries
                .into_iter()
                .take(n)
                .map(|e| GemMapping {
                    va: e.addr,
                    size: e.size,
                    offset: e.offset,
                    pte_flags: e.flags,
                })
                .collect());
        }
        Err(crate::error::failed(
            "AMDGPU_GEM_OP(GET_MAPPING_INFO)",
            &self.label,
            crate::Errno::EAGAIN,
        ))
    }

    /// Moves the object of `bo` to handle `new` (`DRM_IOCTL_GEM_CHANGE_HANDLE`, Linux 6.18);
    /// `bo` is closed.
    ///
    /// # Errors
    ///
    /// `ENOENT` an unknown handle; `ENOSPC` `new` is taken; `EINVAL` on a kernel without the
    /// ioctl (Linux 6.1).
    pub fn gem_change_handle(&self, bo: BoHandle, new: BoHandle) -> Result<()> {
        let mut a = crate::uapi618::drm_gem_change_handle {
            handle: bo.get(),
            new_handle: new.get(),
        };
        self.read_write(ioctl::linux618::drm::req::GEM_CHANGE_HANDLE, &mut a)
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
        let info = self.dev_info_raw()?;
        Ok(DeviceInfo {
            device_id: info.device_id,
            family: info.family,
            virtual_address_offset: info.virtual_address_offset,
            virtual_address_max: info.virtual_address_max,
            virtual_address_alignment: info.virtual_address_alignment,
        })
    }

    /// Every field of the device info (`AMDGPU_INFO`, `AMDGPU_INFO_DEV_INFO`), as the header
    /// lays it out.
    pub fn dev_info_raw(&self) -> Result<sys::drm_amdgpu_info_device> {
        let mut info = sys::drm_amdgpu_info_device::default();
        self.query_into(sys::AMDGPU_INFO_DEV_INFO, InfoArgs::default(), &mut info)?;
        Ok(info)
    }

    /// Issues `AMDGPU_INFO` query `query` with its arguments `args`, returning into `out` (at
    /// most its size).
    fn query_into<R>(&self, query: u32, args: InfoArgs, out: &mut R) -> Result<()> {
        let mut a = sys::drm_amdgpu_info {
            return_pointer: std::ptr::from_mut(out) as u64,
            return_size: ioctl::size_u32::<R>(),
            query,
            __bindgen_anon_1: args,
        };
        // SAFETY: `return_pointer` points to `return_size` writable bytes of `out`.
        unsafe { self.call(req::AMDGPU_INFO, &mut a) }
    }

    /// A `u32` or `u64` `AMDGPU_INFO` query.
    fn query_u64(&self, query: u32) -> Result<u64> {
        let mut v = 0u64;
        self.query_into(query, InfoArgs::default(), &mut v)?;
        Ok(v)
    }

    /// Whether the GPU's acceleration works (`AMDGPU_INFO_ACCEL_WORKING`), the first thing
    /// libdrm's `amdgpu_device_initialize` asks.
    pub fn accel_working(&self) -> Result<bool> {
        let mut v = 0u32;
        self.query_into(sys::AMDGPU_INFO_ACCEL_WORKING, InfoArgs::default(), &mut v)?;
        Ok(v != 0)
    }

    /// One hardware IP of the GPU (`AMDGPU_INFO_HW_IP_INFO`): `ip_type` is `AMDGPU_HW_IP_*`.
    pub fn hw_ip_info(&self, ip_type: u32, instance: u32) -> Result<HwIpInfo> {
        let mut h = sys::drm_amdgpu_info_hw_ip::default();
        self.query_into(
            sys::AMDGPU_INFO_HW_IP_INFO,
            hw_ip(ip_type, instance),
            &mut h,
        )?;
        Ok(HwIpInfo {
            major: h.hw_ip_version_major,
            minor: h.hw_ip_version_minor,
            available_rings: h.available_rings,
            ib_start_alignment: h.ib_start_alignment,
            ib_size_alignment: h.ib_size_alignment,
            // Newer headers call this `ip_discovery_version`.
            ip_discovery_version: h._pad,
        })
    }

    /// How many IP blocks of `ip_type` the GPU has (`AMDGPU_INFO_HW_IP_COUNT`).
    pub fn hw_ip_count(&self, ip_type: u32) -> Result<u32> {
        let mut v = 0u32;
        self.query_into(sys::AMDGPU_INFO_HW_IP_COUNT, hw_ip(ip_type, 0), &mut v)?;
        Ok(v)
    }

    /// `(version, feature)` of a firmware (`AMDGPU_INFO_FW_VERSION`): `fw_type` is
    /// `AMDGPU_INFO_FW_*`, `index` selects MEC1/2, an SDMA engine or a TA.
    pub fn firmware_version(&self, fw_type: u32, instance: u32, index: u32) -> Result<(u32, u32)> {
        let mut f = sys::drm_amdgpu_info_firmware::default();
        let args = InfoArgs {
            query_fw: sys::drm_amdgpu_query_fw {
                fw_type,
                ip_instance: instance,
                index,
                _pad: 0,
            },
        };
        self.query_into(sys::AMDGPU_INFO_FW_VERSION, args, &mut f)?;
        Ok((f.ver, f.feature))
    }

    /// VRAM, CPU-visible VRAM and GTT sizes (`AMDGPU_INFO_VRAM_GTT`).
    pub fn vram_gtt(&self) -> Result<VramGtt> {
        let mut v = sys::drm_amdgpu_info_vram_gtt::default();
        self.query_into(sys::AMDGPU_INFO_VRAM_GTT, InfoArgs::default(), &mut v)?;
        Ok(VramGtt {
            vram_size: v.vram_size,
            vram_cpu_accessible_size: v.vram_cpu_accessible_size,
            gtt_size: v.gtt_size,
        })
    }

    /// The memory heaps (`AMDGPU_INFO_MEMORY`).
    pub fn memory_info(&self) -> Result<MemoryInfo> {
        let mut m = sys::drm_amdgpu_memory_info::default();
        self.query_into(sys::AMDGPU_INFO_MEMORY, InfoArgs::default(), &mut m)?;
        let heap = |h: sys::drm_amdgpu_heap_info| HeapInfo {
            total: h.total_heap_size,
            usable: h.usable_heap_size,
            usage: h.heap_usage,
            max_allocation: h.max_allocation,
        };
        Ok(MemoryInfo {
            vram: heap(m.vram),
            cpu_accessible_vram: heap(m.cpu_accessible_vram),
            gtt: heap(m.gtt),
        })
    }

    /// VRAM in use (`AMDGPU_INFO_VRAM_USAGE`).
    pub fn vram_usage(&self) -> Result<u64> {
        self.query_u64(sys::AMDGPU_INFO_VRAM_USAGE)
    }

    /// CPU-visible VRAM in use (`AMDGPU_INFO_VIS_VRAM_USAGE`).
    pub fn vis_vram_usage(&self) -> Result<u64> {
        self.query_u64(sys::AMDGPU_INFO_VIS_VRAM_USAGE)
    }

    /// GTT in use (`AMDGPU_INFO_GTT_USAGE`).
    pub fn gtt_usage(&self) -> Result<u64> {
        self.query_u64(sys::AMDGPU_INFO_GTT_USAGE)
    }

    /// Reads `count` registers from `dword_offset` (`AMDGPU_INFO_READ_MMR_REG`); `instance`
    /// selects the shader engine and array (`0xffffffff`: broadcast).
    pub fn read_mmr_reg(&self, dword_offset: u32, count: u32, instance: u32) -> Result<Vec<u32>> {
        let mut regs = vec![0u32; count as usize];
        let mut a = sys::drm_amdgpu_info {
            return_pointer: regs.as_mut_ptr() as u64,
            return_size: count.saturating_mul(4),
            query: sys::AMDGPU_INFO_READ_MMR_REG,
            __bindgen_anon_1: Default::default(),
        };
        a.__bindgen_anon_1.read_mmr_reg = sys::drm_amdgpu_info__bindgen_ty_1__bindgen_ty_3 {
            dword_offset,
            count,
            instance,
            flags: 0,
        };
        // SAFETY: `return_pointer` points to `return_size` writable bytes of `regs`.
        unsafe { self.call(req::AMDGPU_INFO, &mut a) }?;
        Ok(regs)
    }

    /// The DRM driver's version and identity (`DRM_IOCTL_VERSION`), with the two-call pattern:
    /// lengths first, then the strings.
    pub fn version(&self) -> Result<DrmVersion> {
        let mut v = sys::drm_version::default();
        // SAFETY: all buffer pointers are null with zero lengths: the driver writes nothing
        // through them.
        unsafe { self.call(req::VERSION, &mut v) }?;
        // The strings are short; a length past a page is not a driver's answer.
        let len = |n: u64| {
            usize::try_from(n)
                .ok()
                .filter(|&n| n <= 4096)
                .ok_or_else(|| bad_reply("VERSION", &self.label, "string length past 4096"))
        };
        let (name_len, date_len, desc_len) = (len(v.name_len)?, len(v.date_len)?, len(v.desc_len)?);
        let mut name = vec![0u8; name_len];
        let mut date = vec![0u8; date_len];
        let mut desc = vec![0u8; desc_len];
        v.name = name.as_mut_ptr().cast();
        v.date = date.as_mut_ptr().cast();
        v.desc = desc.as_mut_ptr().cast();
        // SAFETY: each pointer is followed by its buffer's length, which the driver does not
        // exceed.
        unsafe { self.call(req::VERSION, &mut v) }?;
        let text = |b: Vec<u8>, len: u64| {
            let n = usize::try_from(len).unwrap_or(usize::MAX).min(b.len());
            String::from_utf8_lossy(&b[..n]).into_owned()
        };
        Ok(DrmVersion {
            major: v.version_major,
            minor: v.version_minor,
            patchlevel: v.version_patchlevel,
            name: text(name, v.name_len),
            date: text(date, v.date_len),
            desc: text(desc, v.desc_len),
        })
    }

    /// A driver capability (`DRM_IOCTL_GET_CAP`, `DRM_CAP_*`).
    pub fn get_cap(&self, capability: u64) -> Result<u64> {
        let mut c = sys::drm_get_cap {
            capability,
            value: 0,
        };
        self.read_write(req::GET_CAP, &mut c)?;
        Ok(c.value)
    }

    /// Sets a client capability (`DRM_IOCTL_SET_CLIENT_CAP`); a render node refuses it
    /// (`EACCES`).
    pub fn set_client_cap(&self, capability: u64, value: u64) -> Result<()> {
        self.write(
            req::SET_CLIENT_CAP,
            &sys::drm_set_client_cap { capability, value },
        )
    }

    /// Waits until `bo` is idle (`AMDGPU_GEM_WAIT_IDLE`, timeout `timeout_ns` absolute);
    /// returns whether it is still busy.
    pub fn gem_wait_idle(&self, bo: BoHandle, timeout_ns: u64) -> Result<bool> {
        let mut a = sys::drm_amdgpu_gem_wait_idle::default();
        a.in_ = sys::drm_amdgpu_gem_wait_idle_in {
            handle: bo.get(),
            flags: 0,
            timeout: timeout_ns,
        };
        self.read_write(req::AMDGPU_GEM_WAIT_IDLE, &mut a)?;
        // SAFETY: on success the driver wrote the `out` member.
        Ok(unsafe { a.out.status } != 0)
    }
}
