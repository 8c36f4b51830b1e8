//! Submission contexts (`amdgpu_ctx.c`): allocating and freeing them, and their reset state.

use std::mem::offset_of;

use kfd_abi::Errno;
use kfd_sys as sys;

use super::RenderCall;
use crate::host::lock;
use crate::state::render_file::{free_id, Ctx};
use crate::uaccess::{get_u32, put_u32, put_u64, IoctlResult};

/// Context ids are allocated in `1..AMDGPU_VM_MAX_NUM_CTX`.
const MAX_CTX: u32 = 4096;

/// `amdgpu_ctx_ioctl`: ALLOC (ids 1..4096, `ENOSPC` past them), FREE (unknown `EINVAL`),
/// QUERY_STATE and QUERY_STATE2 (unknown `EINVAL`); other ops `EINVAL`.
pub(super) fn ctx(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use sys::drm_amdgpu_ctx_in as In;
    use sys::drm_amdgpu_ctx_out__bindgen_ty_2 as State;
    let op = get_u32(kdata, offset_of!(In, op));
    let id = get_u32(kdata, offset_of!(In, ctx_id));
    let mut st = lock(&call.file.state);
    match op {
        sys::AMDGPU_CTX_OP_ALLOC_CTX => {
            let id = free_id(&st.ctxs, MAX_CTX).ok_or(Errno::ENOSPC)?;
            st.ctxs.insert(id, Ctx::default());
            put_u32(kdata, 0, id);
            Ok(0)
        }
        sys::AMDGPU_CTX_OP_FREE_CTX => st.ctxs.remove(&id).map(|_| 0).ok_or(Errno::EINVAL),
        sys::AMDGPU_CTX_OP_QUERY_STATE | sys::AMDGPU_CTX_OP_QUERY_STATE2 => {
            let guilty = st.ctxs.get(&id).ok_or(Errno::EINVAL)?.guilty;
            let (flags, status) = match (op, guilty) {
                (sys::AMDGPU_CTX_OP_QUERY_STATE, g) => (
                    0,
                    if g {
                        sys::AMDGPU_CTX_UNKNOWN_RESET
                    } else {
                        sys::AMDGPU_CTX_NO_RESET
                    },
                ),
                (_, true) => (
                    sys::AMDGPU_CTX_QUERY2_FLAGS_RESET | sys::AMDGPU_CTX_QUERY2_FLAGS_GUILTY,
                    0,
                ),
                (_, false) => (0, 0),
            };
            put_u64(kdata, offset_of!(State, flags), u64::from(flags));
            put_u32(kdata, offset_of!(State, hangs), 0);
            put_u32(kdata, offset_of!(State, reset_status), status);
            Ok(0)
        }
        _ => Err(Errno::EINVAL),
    }
}
