//! BO lists (`amdgpu_bo_list.c`): the GEM handles a submission names.

use std::mem::{offset_of, size_of};

use kfd_abi::Errno;
use kfd_sys as sys;

use super::RenderCall;
use crate::host::lock;
use crate::limits::KVMALLOC_MAX;
use crate::state::render_file::{free_id, FileState};
use crate::uaccess::{copy_from_user, get_u32, get_u64, put_u32, IoctlResult};

/// `amdgpu_bo_create_list_entry_array`: reads `bo_number` entries of `bo_info_size` bytes
/// (`ENOMEM` past kvmalloc, `EFAULT`), returning the handles.
fn read_bo_entries(
    call: &RenderCall<'_>,
    ptr: u64,
    number: u32,
    info_size: u32,
) -> Result<Vec<u32>, Errno> {
    use sys::drm_amdgpu_bo_list_entry as E;
    let entry = size_of::<E>() as u64;
    if u64::from(number) * entry > KVMALLOC_MAX {
        return Err(Errno::ENOMEM);
    }
    let handle_at = offset_of!(E, bo_handle);
    let stride = u64::from(info_size);
    let handle = |e: &[u8]| {
        let mut full = [0u8; size_of::<E>()];
        full[..e.len()].copy_from_slice(e);
        get_u32(&full, handle_at)
    };
    if stride <= entry {
        // The entries are contiguous (an entry shorter than ours is zero-extended, as the
        // driver's per-entry copy leaves it): one copy of them all faults where the driver's
        // copies would. An empty entry reads nothing, and every handle is then 0.
        if stride == 0 {
            return Ok(vec![0; usize::try_from(number).map_err(|_| Errno::ENOMEM)?]);
        }
        let bytes = copy_from_user(call.client, ptr, u64::from(number) * stride)?;
        let stride = usize::try_from(stride).map_err(|_| Errno::ENOMEM)?;
        return Ok(bytes.chunks_exact(stride).map(handle).collect());
    }
    // Longer entries than ours: the driver copies the head of each, one at a time.
    let mut e = [0u8; size_of::<E>()];
    (0..u64::from(number))
        .map(|i| {
            let at = ptr.checked_add(i * stride).ok_or(Errno::EFAULT)?;
            call.client.read_user(at, &mut e)?;
            Ok(handle(&e))
        })
        .collect()
}

/// `amdgpu_bo_list_ioctl`: the entries are read first (`EFAULT`); CREATE and UPDATE need every
/// handle (`ENOENT`), UPDATE an existing list (`ENOENT`); DESTROY of an unknown list is silently
/// fine; other operations `EINVAL`.
pub(super) fn bo_list(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use sys::drm_amdgpu_bo_list_in as In;
    let op = get_u32(kdata, offset_of!(In, operation));
    let list = get_u32(kdata, offset_of!(In, list_handle));
    let number = get_u32(kdata, offset_of!(In, bo_number));
    let info_size = get_u32(kdata, offset_of!(In, bo_info_size));
    let ptr = get_u64(kdata, offset_of!(In, bo_info_ptr));
    let handles = read_bo_entries(call, ptr, number, info_size)?;
    let mut st = lock(&call.file.state);
    let check = |st: &FileState| {
        if handles.iter().all(|h| st.handles.contains_key(h)) {
            Ok(())
        } else {
            Err(Errno::ENOENT)
        }
    };
    let out = match op {
        sys::AMDGPU_BO_LIST_OP_CREATE => {
            check(&st)?;
            let id = free_id(&st.bo_lists, u32::MAX).ok_or(Errno::ENOSPC)?;
            st.bo_lists.insert(id, handles);
            id
        }
        sys::AMDGPU_BO_LIST_OP_UPDATE => {
            check(&st)?;
            let slot = st.bo_lists.get_mut(&list).ok_or(Errno::ENOENT)?;
            *slot = handles;
            list
        }
        sys::AMDGPU_BO_LIST_OP_DESTROY => {
            st.bo_lists.remove(&list);
            0
        }
        _ => return Err(Errno::EINVAL),
    };
    kdata.fill(0);
    put_u32(
        kdata,
        offset_of!(sys::drm_amdgpu_bo_list_out, list_handle),
        out,
    );
    Ok(0)
}
