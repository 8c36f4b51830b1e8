//! The GPU VM of a render-node file as userspace drives it (`amdgpu_vm.c`, `amdgpu_gem.c`): the
//! gfx9 VM layout and `GEM_VA`, which maps and unmaps GEM objects in the file's VM.

use std::mem::offset_of;

use kfd_abi::Errno;
use kfd_sys as sys;

use super::RenderCall;
use crate::host::lock;
use crate::hw::vm::VmMapping;
use crate::limits::PAGE_SIZE;
use crate::state::render_file::{GemMemory, VaMap};
use crate::uaccess::{get_u32, get_u64, IoctlResult};

/// The gfx9 GPU VM layout, as the amdgpu driver (6.1) defines it.
pub(crate) mod va {
    /// Bytes reserved at the bottom and the top of the VM for the kernel
    /// (`AMDGPU_VA_RESERVED_SIZE`).
    pub(crate) const RESERVED: u64 = 2 << 20;
    /// Size of the VM: 48-bit addresses on gfx9 (`max_pfn` << 12).
    pub(crate) const VM_SIZE: u64 = 1 << 48;
    /// Start of the hole between the low and the sign-extended high half (`AMDGPU_GMC_HOLE_START`).
    pub(crate) const HOLE_START: u64 = 0x0000_8000_0000_0000;
    /// End of the hole (`AMDGPU_GMC_HOLE_END`).
    pub(crate) const HOLE_END: u64 = 0xffff_8000_0000_0000;
    /// Mask from a high-half address to its VM address (`AMDGPU_GMC_HOLE_MASK`).
    pub(crate) const HOLE_MASK: u64 = 0x0000_ffff_ffff_ffff;
}

/// `AMDGPU_VM_PAGE_NOALLOC` (6.1 uapi, newer than the pinned header).
const VM_PAGE_NOALLOC: u32 = 1 << 9;

/// `amdgpu_gem_va_ioctl` + `amdgpu_vm_bo_map` / `amdgpu_vm_bo_unmap`, checks in the driver's
/// order: VA in the reserved bottom or in the hole `EINVAL`; past the VM `EINVAL`; unknown flags
/// `EINVAL`; unknown operation `EINVAL`; unknown handle `ENOENT`; then for MAP unaligned VA,
/// offset or size, an empty or wrapping range, a range past the BO, or an overlap `EINVAL`; for
/// UNMAP no mapping of this BO at the VA `ENOENT`.
pub(super) fn gem_va(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use sys::drm_amdgpu_gem_va as A;
    let handle = get_u32(kdata, offset_of!(A, handle));
    let op = get_u32(kdata, offset_of!(A, operation));
    let flags = get_u32(kdata, offset_of!(A, flags));
    let mut addr = get_u64(kdata, offset_of!(A, va_address));
    let offset = get_u64(kdata, offset_of!(A, offset_in_bo));
    let size = get_u64(kdata, offset_of!(A, map_size));
    if addr < va::RESERVED || (va::HOLE_START..va::HOLE_END).contains(&addr) {
        return Err(Errno::EINVAL);
    }
    addr &= va::HOLE_MASK;
    let vm_size = va::VM_SIZE - va::RESERVED;
    if addr.checked_add(size).is_none_or(|end| end > vm_size) {
        return Err(Errno::EINVAL);
    }
    let valid = sys::AMDGPU_VM_DELAY_UPDATE
        | sys::AMDGPU_VM_PAGE_READABLE
        | sys::AMDGPU_VM_PAGE_WRITEABLE
        | sys::AMDGPU_VM_PAGE_EXECUTABLE
        | sys::AMDGPU_VM_MTYPE_MASK
        | VM_PAGE_NOALLOC;
    let prt = sys::AMDGPU_VM_DELAY_UPDATE | sys::AMDGPU_VM_PAGE_PRT;
    if flags & !valid != 0 && flags & !prt != 0 {
        return Err(Errno::EINVAL);
    }
    if !matches!(
        op,
        sys::AMDGPU_VA_OP_MAP
            | sys::AMDGPU_VA_OP_UNMAP
            | sys::AMDGPU_VA_OP_CLEAR
            | sys::AMDGPU_VA_OP_REPLACE
    ) {
        return Err(Errno::EINVAL);
    }
    if op == sys::AMDGPU_VA_OP_CLEAR || flags & sys::AMDGPU_VM_PAGE_PRT != 0 {
        log::warn!("kfd-sim: GEM_VA CLEAR and PRT mappings are not simulated");
        return Err(Errno::EINVAL);
    }
    let mut st = lock(&call.file.state);
    let h = st.handles.get_mut(&handle).ok_or(Errno::ENOENT)?;
    match op {
        sys::AMDGPU_VA_OP_MAP => {
            if (addr | offset | size) & (PAGE_SIZE - 1) != 0 {
                return Err(Errno::EINVAL);
            }
            let end_ok = addr.checked_add(size).is_some_and(|e| e > addr)
                && offset.checked_add(size).is_some_and(|e| e > offset);
            if !end_ok || offset + size > h.gem.size || addr + size > va::VM_SIZE {
                return Err(Errno::EINVAL);
            }
            let readonly = matches!(h.gem.memory, GemMemory::User { readonly: true, .. });
            let writable = flags & sys::AMDGPU_VM_PAGE_WRITEABLE != 0 && !readonly;
            lock(&call.file.vm).map(
                addr,
                VmMapping {
                    size,
                    target: h.gem.target(offset),
                    writable,
                },
            )?;
            h.vas.insert(
                0,
                VaMap {
                    va: addr,
                    size,
                    offset,
                    pte: kfd_abi::uapi618::va_to_pte_flags(flags),
                },
            );
            Ok(0)
        }
        sys::AMDGPU_VA_OP_UNMAP => {
            let i = h
                .vas
                .iter()
                .position(|m| m.va == addr)
                .ok_or(Errno::ENOENT)?;
            let VaMap { va, size, .. } = h.vas.remove(i);
            let mut vm = lock(&call.file.vm);
            if vm
                .lookup(va)
                .is_some_and(|(s, m)| s == va && m.size == size && h.gem.is_target(&m.target))
            {
                vm.unmap(va);
            }
            Ok(0)
        }
        _ => {
            log::warn!("kfd-sim: GEM_VA REPLACE is not simulated");
            Err(Errno::EINVAL)
        }
    }
}
