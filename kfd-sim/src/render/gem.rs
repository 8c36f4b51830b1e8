//! GEM objects (`amdgpu_gem.c`, `drm_gem.c`): creating them in VRAM or GTT, registering user
//! memory, their fake mmap offsets, their creation info and placement, and closing handles.

use std::mem::offset_of;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use kfd_abi::Errno;
use kfd_sys as sys;

use super::RenderCall;
use crate::host::lock;
use crate::hw::backing::{Backing, Domain};
use crate::hw::vm::Vm;
use crate::limits::PAGE_SIZE;
use crate::lock_order::Ordered;
use crate::state::render_file::{Charge, Gem, GemMemory, Handle, VaMap};
use crate::uaccess::{
    check_user_range, copy_to_user, get_u32, get_u64, put_u32, put_u64, IoctlResult,
};

/// `AMDGPU_GEM_CREATE_DISCARDABLE` (6.1 uapi, newer than the pinned header).
const GEM_CREATE_DISCARDABLE: u64 = 1 << 12;

/// Removes the VA mappings of `h` from `vm` (`amdgpu_vm_bo_del` at handle close).
fn unmap_all(vm: &Ordered<Vm>, h: &Handle) {
    let mut vm = lock(vm);
    for &crate::state::render_file::VaMap { va, size, .. } in &h.vas {
        let ours = vm
            .lookup(va)
            .is_some_and(|(s, m)| s == va && m.size == size && h.gem.is_target(&m.target));
        if ours {
            vm.unmap(va);
        }
    }
}

/// `drm_gem_close_ioctl`: unknown handle `EINVAL`.
pub(super) fn gem_close(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    let handle = get_u32(kdata, offset_of!(sys::drm_gem_close, handle));
    let h = lock(&call.file.state)
        .handles
        .remove(&handle)
        .ok_or(Errno::EINVAL)?;
    unmap_all(&call.file.vm, &h);
    Ok(0)
}

/// `amdgpu_gem_create_ioctl`: unknown flags or domain bits, or `ENCRYPTED` without TMZ, `EINVAL`;
/// out of memory `ENOMEM`. VRAM that does not fit falls back to GTT, as the driver retries.
pub(super) fn gem_create(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use sys::drm_amdgpu_gem_create_in as In;
    let size = get_u64(kdata, offset_of!(In, bo_size));
    let alignment = get_u64(kdata, offset_of!(In, alignment));
    let domains = get_u64(kdata, offset_of!(In, domains));
    let flags = get_u64(kdata, offset_of!(In, domain_flags));
    let valid = u64::from(
        sys::AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED
            | sys::AMDGPU_GEM_CREATE_NO_CPU_ACCESS
            | sys::AMDGPU_GEM_CREATE_CPU_GTT_USWC
            | sys::AMDGPU_GEM_CREATE_VRAM_CLEARED
            | sys::AMDGPU_GEM_CREATE_VM_ALWAYS_VALID
            | sys::AMDGPU_GEM_CREATE_EXPLICIT_SYNC
            | sys::AMDGPU_GEM_CREATE_ENCRYPTED,
    ) | GEM_CREATE_DISCARDABLE;
    if flags & !valid != 0 || domains & !u64::from(sys::AMDGPU_GEM_DOMAIN_MASK) != 0 {
        return Err(Errno::EINVAL);
    }
    // gfx9 MI parts run without TMZ.
    if flags & u64::from(sys::AMDGPU_GEM_CREATE_ENCRYPTED) != 0 {
        return Err(Errno::EINVAL);
    }
    let special = u64::from(
        sys::AMDGPU_GEM_DOMAIN_GDS | sys::AMDGPU_GEM_DOMAIN_GWS | sys::AMDGPU_GEM_DOMAIN_OA,
    );
    let memory = u64::from(
        sys::AMDGPU_GEM_DOMAIN_VRAM | sys::AMDGPU_GEM_DOMAIN_GTT | sys::AMDGPU_GEM_DOMAIN_CPU,
    );
    if domains & special != 0 || domains & memory == 0 || size == 0 {
        return Err(Errno::EINVAL);
    }
    let dev_index = call.file.device;
    let dev = call.machine.devices.get(dev_index).ok_or(Errno::EINVAL)?;
    let aligned = crate::limits::align_up(size);
    let mut vram = domains & u64::from(sys::AMDGPU_GEM_DOMAIN_VRAM) != 0;
    if vram {
        let mut s = lock(&dev.state);
        match s.vram_used.checked_add(aligned) {
            Some(total) if total <= dev.vram_size => s.vram_used = total,
            _ => vram = false,
        }
    }
    if !vram {
        call.machine.reserve_system(aligned)?;
    }
    let charge = Charge {
        accounts: Arc::clone(&call.machine.accounts),
        device: dev_index,
        vram,
        bytes: aligned,
    };
    let domain = if vram { Domain::Vram } else { Domain::Gtt };
    let access_required = flags & u64::from(sys::AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED) != 0;
    let backing = match Backing::new(aligned, domain, dev_index, access_required) {
        Ok(b) => Arc::new(b),
        Err(e) => {
            log::warn!("kfd-sim: cannot back a {aligned}-byte GEM object: {e}");
            return Err(Errno::ENOMEM);
        }
    };
    call.machine.register_dmabuf(&backing);
    let gem = Gem {
        memory: GemMemory::Backing(backing),
        size: aligned,
        alignment,
        domains: AtomicU64::new(domains),
        flags,
        mmap_offset: dev.alloc_mmap_offset(aligned),
        _charge: Some(charge),
        foreign: false,
        exported: AtomicBool::new(false),
    };
    let gem = Arc::new(gem);
    if let GemMemory::Backing(b) = &gem.memory {
        call.machine.register_gem(b.key(), &gem);
    }
    let id = lock(&call.file.state).add_object(gem)?;
    kdata.fill(0);
    put_u32(
        kdata,
        offset_of!(sys::drm_amdgpu_gem_create_out, handle),
        id,
    );
    Ok(0)
}

/// `amdgpu_gem_userptr_ioctl`: address or size not page-aligned, or unknown flags, `EINVAL`;
/// writable without `REGISTER` `EACCES`; `VALIDATE` of memory that is not there `EFAULT`.
pub(super) fn gem_userptr(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use sys::drm_amdgpu_gem_userptr as A;
    let addr = get_u64(kdata, offset_of!(A, addr));
    let size = get_u64(kdata, offset_of!(A, size));
    let flags = get_u32(kdata, offset_of!(A, flags));
    if (addr | size) & (PAGE_SIZE - 1) != 0 {
        return Err(Errno::EINVAL);
    }
    let known = sys::AMDGPU_GEM_USERPTR_READONLY
        | sys::AMDGPU_GEM_USERPTR_ANONONLY
        | sys::AMDGPU_GEM_USERPTR_VALIDATE
        | sys::AMDGPU_GEM_USERPTR_REGISTER;
    if flags & !known != 0 {
        return Err(Errno::EINVAL);
    }
    let readonly = flags & sys::AMDGPU_GEM_USERPTR_READONLY != 0;
    if !readonly && flags & sys::AMDGPU_GEM_USERPTR_REGISTER == 0 {
        return Err(Errno::EACCES);
    }
    if size == 0 {
        return Err(Errno::EINVAL);
    }
    if flags & sys::AMDGPU_GEM_USERPTR_VALIDATE != 0 {
        let last = addr.checked_add(size - 1).ok_or(Errno::EFAULT)?;
        check_user_range(call.client, addr, last)?;
    }
    let dev = call
        .machine
        .devices
        .get(call.file.device)
        .ok_or(Errno::EINVAL)?;
    let gem = Gem {
        memory: GemMemory::User {
            addr,
            mem: call.client.process_memory(),
            readonly,
        },
        size,
        alignment: 0,
        domains: AtomicU64::new(u64::from(sys::AMDGPU_GEM_DOMAIN_CPU)),
        flags: 0,
        mmap_offset: dev.alloc_mmap_offset(size),
        _charge: None,
        foreign: false,
        exported: AtomicBool::new(false),
    };
    let id = lock(&call.file.state).add_handle(gem)?;
    put_u32(kdata, offset_of!(A, handle), id);
    Ok(0)
}

/// `amdgpu_mode_dumb_mmap`: unknown handle `ENOENT`; userptr or `NO_CPU_ACCESS` `EPERM`.
pub(super) fn gem_mmap(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    let handle = get_u32(kdata, offset_of!(sys::drm_amdgpu_gem_mmap_in, handle));
    let st = lock(&call.file.state);
    let gem = &st.handles.get(&handle).ok_or(Errno::ENOENT)?.gem;
    if matches!(gem.memory, GemMemory::User { .. })
        || gem.flags & u64::from(sys::AMDGPU_GEM_CREATE_NO_CPU_ACCESS) != 0
    {
        return Err(Errno::EPERM);
    }
    put_u64(
        kdata,
        offset_of!(sys::drm_amdgpu_gem_mmap_out, addr_ptr),
        gem.mmap_offset,
    );
    Ok(0)
}

/// `amdgpu_gem_op_ioctl`: on 6.18 and 7.2 a nonzero `padding` `EINVAL` first; unknown handle `ENOENT`;
/// GET_GEM_CREATE_INFO writes the creation parameters, the alignment in whole pages
/// (`EFAULT`); SET_PLACEMENT of a userptr `EPERM`, of VRAM for an import `EINVAL`;
/// GET_MAPPING_INFO (6.18) the object's mappings in this file's VM; unknown op `EINVAL`.
pub(super) fn gem_op(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use kfd_abi::uapi618::drm_amdgpu_gem_op as A;
    let kernel = call.machine.kernel();
    if kernel.has_gem_listing() && get_u32(kdata, offset_of!(A, padding)) != 0 {
        return Err(Errno::EINVAL);
    }
    let handle = get_u32(kdata, offset_of!(A, handle));
    let op = get_u32(kdata, offset_of!(A, op));
    let value = get_u64(kdata, offset_of!(A, value));
    let gem = lock(&call.file.state)
        .handles
        .get(&handle)
        .map(|h| Arc::clone(&h.gem))
        .ok_or(Errno::ENOENT)?;
    match op {
        sys::AMDGPU_GEM_OP_GET_GEM_CREATE_INFO => {
            use sys::drm_amdgpu_gem_create_in as In;
            let mut out = vec![0u8; size_of::<In>()];
            put_u64(&mut out, offset_of!(In, bo_size), gem.size);
            put_u64(
                &mut out,
                offset_of!(In, alignment),
                gem.alignment_pages() * PAGE_SIZE,
            );
            put_u64(
                &mut out,
                offset_of!(In, domains),
                gem.domains.load(Ordering::Relaxed),
            );
            put_u64(&mut out, offset_of!(In, domain_flags), gem.flags);
            copy_to_user(call.client, value, &out)?;
            Ok(0)
        }
        sys::AMDGPU_GEM_OP_SET_PLACEMENT => {
            if matches!(gem.memory, GemMemory::User { .. }) {
                return Err(Errno::EPERM);
            }
            if gem._charge.is_none() && value & u64::from(sys::AMDGPU_GEM_DOMAIN_VRAM) != 0 {
                return Err(Errno::EINVAL);
            }
            let keep = u64::from(
                sys::AMDGPU_GEM_DOMAIN_VRAM
                    | sys::AMDGPU_GEM_DOMAIN_GTT
                    | sys::AMDGPU_GEM_DOMAIN_CPU,
            );
            gem.domains.store(value & keep, Ordering::Relaxed);
            Ok(0)
        }
        kfd_abi::uapi618::AMDGPU_GEM_OP_GET_MAPPING_INFO if kernel.has_gem_listing() => {
            gem_mapping_info(call, kdata, handle, value)
        }
        _ => Err(Errno::EINVAL),
    }
}

/// `kvcalloc` of `n` elements of `size` bytes fails past `INT_MAX` bytes (`kvmalloc_node`).
fn kvcalloc_check(n: u64, size: u64) -> Result<(), Errno> {
    match n.checked_mul(size) {
        Some(bytes) if bytes <= i32::MAX.unsigned_abs().into() => Ok(()),
        _ => Err(Errno::ENOMEM),
    }
}

/// What `copy_to_user` returns for `bytes` at `addr`: 0, or the bytes it could not copy (the
/// simulator copies all or nothing). 6.18's `GEM_LIST_HANDLES` and `GET_MAPPING_INFO` return
/// that count as the ioctl's value, not `EFAULT`.
fn copy_out_count(call: &RenderCall<'_>, addr: u64, bytes: &[u8]) -> i32 {
    match copy_to_user(call.client, addr, bytes) {
        Ok(()) => 0,
        Err(_) => i32::try_from(bytes.len()).unwrap_or(i32::MAX),
    }
}

/// `AMDGPU_GEM_OP_GET_MAPPING_INFO` (6.18): `num_entries` entries at `value` get the object's
/// mappings in this file's VM (GPU VA, size, offset, page-table flags; valid ones, the newest
/// first), `num_entries` becomes their number; nothing is written when they do not fit.
fn gem_mapping_info(
    call: &RenderCall<'_>,
    kdata: &mut [u8],
    handle: u32,
    value: u64,
) -> IoctlResult {
    use kfd_abi::uapi618::{drm_amdgpu_gem_op as A, drm_amdgpu_gem_vm_entry as E};
    let room = get_u32(kdata, offset_of!(A, num_entries));
    kvcalloc_check(u64::from(room), size_of::<E>() as u64)?;
    let maps: Vec<VaMap> = lock(&call.file.state)
        .handles
        .get(&handle)
        .map(|h| h.vas.clone())
        .unwrap_or_default();
    let n = u32::try_from(maps.len()).unwrap_or(u32::MAX);
    let mut ret = 0;
    if n > 0 && n <= room {
        let mut out = vec![0u8; maps.len() * size_of::<E>()];
        for (i, m) in maps.iter().enumerate() {
            let at = i * size_of::<E>();
            put_u64(&mut out, at + offset_of!(E, addr), m.va);
            put_u64(&mut out, at + offset_of!(E, size), m.size);
            put_u64(&mut out, at + offset_of!(E, offset), m.offset);
            put_u64(&mut out, at + offset_of!(E, flags), m.pte);
        }
        ret = copy_out_count(call, value, &out);
    }
    put_u32(kdata, offset_of!(A, num_entries), n);
    Ok(ret)
}

/// `amdgpu_gem_list_handles_ioctl` (6.18): with room for fewer entries than the file has
/// handles only `num_entries` is set (to their number); else one entry per handle, in handle
/// order: size, creation flags (the settable ones), preferred domains, alignment in pages, and
/// `IS_IMPORT` for an object imported from another device.
pub(super) fn gem_list_handles(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use kfd_abi::uapi618::{
        drm_amdgpu_gem_list_handles as A, drm_amdgpu_gem_list_handles_entry as E,
        AMDGPU_GEM_CREATE_SETTABLE_MASK, AMDGPU_GEM_LIST_HANDLES_FLAG_IS_IMPORT,
    };
    let room = get_u32(kdata, offset_of!(A, num_entries));
    let entries = get_u64(kdata, offset_of!(A, entries));
    let st = lock(&call.file.state);
    let n = u32::try_from(st.handles.len()).unwrap_or(u32::MAX);
    if room < n || n == 0 {
        drop(st);
        put_u32(kdata, offset_of!(A, num_entries), n);
        return Ok(0);
    }
    let mut out = vec![0u8; st.handles.len() * size_of::<E>()];
    for (i, (&id, h)) in st.handles.iter().enumerate() {
        let at = i * size_of::<E>();
        let g = &h.gem;
        put_u32(&mut out, at + offset_of!(E, gem_handle), id);
        let flags = if g.foreign {
            AMDGPU_GEM_LIST_HANDLES_FLAG_IS_IMPORT
        } else {
            0
        };
        put_u32(&mut out, at + offset_of!(E, flags), flags);
        put_u64(&mut out, at + offset_of!(E, size), g.size);
        put_u64(
            &mut out,
            at + offset_of!(E, preferred_domains),
            g.domains.load(Ordering::Relaxed),
        );
        put_u64(
            &mut out,
            at + offset_of!(E, alloc_flags),
            g.flags & AMDGPU_GEM_CREATE_SETTABLE_MASK,
        );
        put_u64(&mut out, at + offset_of!(E, alignment), g.alignment_pages());
    }
    drop(st);
    put_u32(kdata, offset_of!(A, num_entries), n);
    Ok(copy_out_count(call, entries, &out))
}

/// `drm_gem_change_handle_ioctl` (6.18): a new handle past `INT_MAX` `EINVAL`; unknown handle
/// `ENOENT`; the same handle does nothing; a taken one `ENOSPC`. The object moves, with its VA
/// mappings, and the old handle is gone. Returns 0 for an object that has a dma-buf (its PRIME
/// entry moves too) and the new handle otherwise, as 6.18 returns `idr_alloc`'s value.
///
/// Not as the kernel: handle 0, which 6.18's `idr_alloc` on the file's table (based at 1) turns
/// into the lowest free handle, is refused `EINVAL`.
///
/// Linux 7.2 (and every kernel fixed in June 2026) has [`invalid_op`] in this row instead.
pub(super) fn gem_change_handle(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use kfd_abi::uapi618::drm_gem_change_handle as A;
    let handle = get_u32(kdata, offset_of!(A, handle));
    let new = get_u32(kdata, offset_of!(A, new_handle));
    let new_id = i32::try_from(new).map_err(|_| Errno::EINVAL)?;
    let mut st = lock(&call.file.state);
    let exported = st
        .handles
        .get(&handle)
        .map(|h| h.gem.exported.load(Ordering::Relaxed))
        .ok_or(Errno::ENOENT)?;
    if handle == new {
        return Ok(0);
    }
    if new == 0 {
        return Err(Errno::EINVAL);
    }
    if st.handles.contains_key(&new) {
        return Err(Errno::ENOSPC);
    }
    let h = st.handles.remove(&handle).ok_or(Errno::ENOENT)?;
    st.handles.insert(new, h);
    Ok(if exported { 0 } else { new_id })
}

/// `drm_invalid_op`: the function of a row the kernel keeps but turned off (7.2's
/// `GEM_CHANGE_HANDLE`): `EINVAL`, after `drm_ioctl` copied the argument in and checked the
/// caller's permissions, as for any row.
pub(super) fn invalid_op(_call: &RenderCall<'_>, _kdata: &mut [u8]) -> IoctlResult {
    Err(Errno::EINVAL)
}
