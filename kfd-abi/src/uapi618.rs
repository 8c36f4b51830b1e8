//! The uapi that Linux 6.18 added for checkpoint/restore of render-node buffers, and the KFD
//! dma-buf export of KFD 1.12, which Debian bookworm's headers (Linux 6.1's `kfd_ioctl.h`,
//! libdrm 2.4.114's `amdgpu_drm.h` and `drm.h`) do not have, so `kfd-sys` cannot generate them.
//!
//! Written by hand from the 6.18 headers (`include/uapi/drm/amdgpu_drm.h`,
//! `include/uapi/drm/drm.h`, `include/uapi/linux/kfd_ioctl.h`); the tests below hold each size
//! and field offset to the numbers a C program prints against those headers, and
//! `tests/request_codes.rs` each request code to its literal value.
//!
//! - `DRM_IOCTL_AMDGPU_GEM_LIST_HANDLES` (amdgpu `0x19`): every GEM handle of a file with its
//!   size, domains, creation flags and alignment ([`drm_amdgpu_gem_list_handles`],
//!   [`drm_amdgpu_gem_list_handles_entry`]).
//! - `AMDGPU_GEM_OP_GET_MAPPING_INFO` of `DRM_IOCTL_AMDGPU_GEM_OP`, whose argument grew from 16
//!   to 24 bytes ([`drm_amdgpu_gem_op`]): the GPU VA mappings of a BO in the file's VM
//!   ([`drm_amdgpu_gem_vm_entry`]).
//! - `DRM_IOCTL_GEM_CHANGE_HANDLE` (core `0xd2`): moves an object to a chosen handle
//!   ([`drm_gem_change_handle`]).
//! - `AMDKFD_IOC_EXPORT_DMABUF` (KFD 1.12, `0x24`): a dma-buf fd of a KFD BO
//!   ([`kfd_ioctl_export_dmabuf_args`]).
//! - `AMDKFD_IOC_RUNTIME_ENABLE` (KFD 1.13, `0x25`): ROCr tells the driver its runtime is up
//!   (or down), before it creates queues ([`kfd_ioctl_runtime_enable_args`]); the same struct
//!   in every kernel since 6.2, 7.2's header included.

#![allow(non_camel_case_types)]

/// `AMDGPU_GEM_OP_GET_MAPPING_INFO`.
pub const AMDGPU_GEM_OP_GET_MAPPING_INFO: u32 = 2;

/// `AMDGPU_GEM_LIST_HANDLES_FLAG_IS_IMPORT`: the object was imported from a dma-buf of another
/// device (it has a dma-buf attachment).
pub const AMDGPU_GEM_LIST_HANDLES_FLAG_IS_IMPORT: u32 = 1 << 0;

/// `AMDGPU_GEM_CREATE_SETTABLE_MASK` of 6.18 (`amdgpu_gem.h`): the creation flags
/// `GEM_CREATE` accepts, and what `GEM_LIST_HANDLES` reports of a BO's flags.
pub const AMDGPU_GEM_CREATE_SETTABLE_MASK: u64 = (1 << 0) // CPU_ACCESS_REQUIRED
    | (1 << 1) // NO_CPU_ACCESS
    | (1 << 2) // CPU_GTT_USWC
    | (1 << 3) // VRAM_CLEARED
    | (1 << 6) // VM_ALWAYS_VALID
    | (1 << 7) // EXPLICIT_SYNC
    | (1 << 9) // VRAM_WIPE_ON_RELEASE
    | (1 << 10) // ENCRYPTED
    | (1 << 12) // DISCARDABLE
    | (1 << 13) // COHERENT
    | (1 << 14) // UNCACHED
    | (1 << 15) // EXT_COHERENT
    | (1 << 16); // GFX12_DCC

/// `struct drm_amdgpu_gem_list_handles`: `entries` points to `num_entries` entries; the driver
/// sets `num_entries` to the number of handles (ask again with more room when it grew).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct drm_amdgpu_gem_list_handles {
    /// User pointer to an array of [`drm_amdgpu_gem_list_handles_entry`].
    pub entries: u64,
    /// In: room in `entries`; out: the number of handles of the file.
    pub num_entries: u32,
    /// Zero.
    pub padding: u32,
}

/// `struct drm_amdgpu_gem_list_handles_entry`: one GEM handle of a file.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct drm_amdgpu_gem_list_handles_entry {
    /// The handle.
    pub gem_handle: u32,
    /// [`AMDGPU_GEM_LIST_HANDLES_FLAG_IS_IMPORT`].
    pub flags: u32,
    /// Size of the BO.
    pub size: u64,
    /// Its preferred domains (`AMDGPU_GEM_DOMAIN_*`).
    pub preferred_domains: u64,
    /// Its creation flags masked with [`AMDGPU_GEM_CREATE_SETTABLE_MASK`].
    pub alloc_flags: u64,
    /// Its alignment, in pages (`tbo.page_alignment`).
    pub alignment: u64,
}

/// `struct drm_amdgpu_gem_op` as of 6.18 (16 bytes before: `num_entries` and `padding` are new).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct drm_amdgpu_gem_op {
    /// GEM handle.
    pub handle: u32,
    /// `AMDGPU_GEM_OP_*`.
    pub op: u32,
    /// Input or output value; for `GET_MAPPING_INFO` a user pointer to an array of
    /// [`drm_amdgpu_gem_vm_entry`].
    pub value: u64,
    /// For `GET_MAPPING_INFO`: in, room in the array; out, the number of mappings.
    pub num_entries: u32,
    /// Must be zero (`EINVAL`).
    pub padding: u32,
}

/// `struct drm_amdgpu_gem_vm_entry`: one GPU VA mapping of a BO.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct drm_amdgpu_gem_vm_entry {
    /// GPU VA of the mapping.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// Offset in the BO.
    pub offset: u64,
    /// The mapping's flags as the VM keeps them: page-table entry flags (`AMDGPU_PTE_*`), not
    /// the `AMDGPU_VM_PAGE_*` flags `GEM_VA` took (see [`pte_to_va_flags`]).
    pub flags: u64,
}

/// `struct drm_gem_change_handle`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct drm_gem_change_handle {
    /// The object's handle now.
    pub handle: u32,
    /// The free handle to move it to.
    pub new_handle: u32,
}

/// `struct kfd_ioctl_export_dmabuf_args` (KFD 1.12).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct kfd_ioctl_export_dmabuf_args {
    /// The KFD BO handle (`gpu_id << 32 | idr`).
    pub handle: u64,
    /// `O_CLOEXEC` etc. for the new fd.
    pub flags: u32,
    /// The new dma-buf fd.
    pub dmabuf_fd: u32,
}

/// `KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK`: enable the runtime (without it: disable).
pub const KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK: u32 = 1;
/// `KFD_RUNTIME_ENABLE_MODE_TTMP_SAVE_MASK`: set the trap temporaries up (ignored on disable).
pub const KFD_RUNTIME_ENABLE_MODE_TTMP_SAVE_MASK: u32 = 2;

/// `struct kfd_ioctl_runtime_enable_args` (KFD 1.13).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct kfd_ioctl_runtime_enable_args {
    /// Where ROCr keeps what it shares with a debugger (`r_debug`).
    pub r_debug: u64,
    /// `KFD_RUNTIME_ENABLE_MODE_*`.
    pub mode_mask: u32,
    /// What the driver supports (the kernel leaves it as it came).
    pub capabilities_mask: u32,
}

/// `AMDGPU_PTE_EXECUTABLE`.
pub const AMDGPU_PTE_EXECUTABLE: u64 = 1 << 4;
/// `AMDGPU_PTE_READABLE`.
pub const AMDGPU_PTE_READABLE: u64 = 1 << 5;
/// `AMDGPU_PTE_WRITEABLE`.
pub const AMDGPU_PTE_WRITEABLE: u64 = 1 << 6;

/// The `AMDGPU_VM_PAGE_*` flags of `GEM_VA` that give a mapping the page-table flags `pte`
/// (`amdgpu_gem_va_map_flags` backwards, for gfx9 with the default memory type): what a mapping
/// that `GET_MAPPING_INFO` reported must be recreated with.
pub fn pte_to_va_flags(pte: u64) -> u32 {
    let mut flags = 0;
    if pte & AMDGPU_PTE_READABLE != 0 {
        flags |= kfd_sys::AMDGPU_VM_PAGE_READABLE;
    }
    if pte & AMDGPU_PTE_WRITEABLE != 0 {
        flags |= kfd_sys::AMDGPU_VM_PAGE_WRITEABLE;
    }
    if pte & AMDGPU_PTE_EXECUTABLE != 0 {
        flags |= kfd_sys::AMDGPU_VM_PAGE_EXECUTABLE;
    }
    flags
}

/// The page-table flags a `GEM_VA` map with `AMDGPU_VM_PAGE_*` flags `va` gives (gfx9, default
/// memory type: `amdgpu_gem_va_map_flags`).
pub fn va_to_pte_flags(va: u32) -> u64 {
    let mut pte = 0;
    if va & kfd_sys::AMDGPU_VM_PAGE_READABLE != 0 {
        pte |= AMDGPU_PTE_READABLE;
    }
    if va & kfd_sys::AMDGPU_VM_PAGE_WRITEABLE != 0 {
        pte |= AMDGPU_PTE_WRITEABLE;
    }
    if va & kfd_sys::AMDGPU_VM_PAGE_EXECUTABLE != 0 {
        pte |= AMDGPU_PTE_EXECUTABLE;
    }
    pte
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::*;

    /// Sizes and offsets as a C program prints them against the 6.18 headers.
    #[test]
    fn layouts_match_the_6_18_headers() {
        assert_eq!(size_of::<drm_amdgpu_gem_list_handles>(), 16);
        assert_eq!(offset_of!(drm_amdgpu_gem_list_handles, num_entries), 8);
        assert_eq!(size_of::<drm_amdgpu_gem_list_handles_entry>(), 40);
        assert_eq!(offset_of!(drm_amdgpu_gem_list_handles_entry, flags), 4);
        assert_eq!(offset_of!(drm_amdgpu_gem_list_handles_entry, size), 8);
        assert_eq!(
            offset_of!(drm_amdgpu_gem_list_handles_entry, preferred_domains),
            16
        );
        assert_eq!(
            offset_of!(drm_amdgpu_gem_list_handles_entry, alloc_flags),
            24
        );
        assert_eq!(offset_of!(drm_amdgpu_gem_list_handles_entry, alignment), 32);
        assert_eq!(size_of::<drm_amdgpu_gem_op>(), 24);
        assert_eq!(offset_of!(drm_amdgpu_gem_op, value), 8);
        assert_eq!(offset_of!(drm_amdgpu_gem_op, num_entries), 16);
        assert_eq!(offset_of!(drm_amdgpu_gem_op, padding), 20);
        assert_eq!(size_of::<drm_amdgpu_gem_vm_entry>(), 32);
        assert_eq!(offset_of!(drm_amdgpu_gem_vm_entry, flags), 24);
        assert_eq!(size_of::<drm_gem_change_handle>(), 8);
        assert_eq!(size_of::<kfd_ioctl_export_dmabuf_args>(), 16);
        assert_eq!(offset_of!(kfd_ioctl_export_dmabuf_args, dmabuf_fd), 12);
        assert_eq!(size_of::<kfd_ioctl_runtime_enable_args>(), 16);
        assert_eq!(offset_of!(kfd_ioctl_runtime_enable_args, mode_mask), 8);
        assert_eq!(
            offset_of!(kfd_ioctl_runtime_enable_args, capabilities_mask),
            12
        );
    }

    #[test]
    fn mapping_flags_go_back_to_what_gem_va_took() {
        use kfd_sys::{
            AMDGPU_VM_PAGE_EXECUTABLE, AMDGPU_VM_PAGE_READABLE, AMDGPU_VM_PAGE_WRITEABLE,
        };
        for va in 0..8u32 {
            let pick = |bit: u32, flag: u32| if va >> bit & 1 == 1 { flag } else { 0 };
            let flags = pick(0, AMDGPU_VM_PAGE_READABLE)
                | pick(1, AMDGPU_VM_PAGE_WRITEABLE)
                | pick(2, AMDGPU_VM_PAGE_EXECUTABLE);
            assert_eq!(pte_to_va_flags(va_to_pte_flags(flags)), flags);
        }
        // Read-write is PTE 0x60: taken as GEM_VA flags, bits 5-6 are the memory type field.
        assert_eq!(
            va_to_pte_flags(AMDGPU_VM_PAGE_READABLE | AMDGPU_VM_PAGE_WRITEABLE),
            0x60
        );
    }
}
