//! Command submission (`amdgpu_cs.c`): the IB chunks of a submission run on one of the GPU's
//! SDMA engines, in order per (context, ring) entity; `WAIT_CS` reports the fence.

use std::mem::{offset_of, size_of};
use std::sync::Arc;
use std::time::Instant;

use kfd_abi::Errno;
use kfd_sys as sys;

use super::RenderCall;
use crate::host::lock;
use crate::limits::KVMALLOC_MAX;
use crate::state::render_file::FENCE_WINDOW;
use crate::uaccess::{copy_from_user, get_u32, get_u64, put_u64, IoctlResult};

/// The DMA rings of this file's GPU: one per SDMA engine.
fn dma_rings(call: &RenderCall<'_>) -> u32 {
    call.machine
        .devices
        .get(call.file.device)
        .map_or(0, |d| d.sdma_engines.saturating_add(d.xgmi_sdma_engines))
}

/// Scheduler entities a context has for the DMA IP (`amdgpu_ctx_num_entities`): rings 0 and 1,
/// whatever the number of SDMA engines; each entity goes to the least busy engine.
const CTX_DMA_ENTITIES: u32 = 2;

/// `amdgpu_ctx_get_entity`: an IP past `AMDGPU_HW_IP_NUM`, an instance other than 0, or a ring
/// past the context's entities of the IP, `EINVAL`. Only the DMA IP has rings here (a GPU
/// without SDMA engines has none).
fn entity_check(call: &RenderCall<'_>, ip: u32, instance: u32, ring: u32) -> Result<(), Errno> {
    if ip >= sys::AMDGPU_HW_IP_NUM || instance != 0 {
        return Err(Errno::EINVAL);
    }
    if ip != sys::AMDGPU_HW_IP_DMA || ring >= CTX_DMA_ENTITIES || dma_rings(call) == 0 {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// One IB chunk of a submission.
struct IbChunk {
    va: u64,
    bytes: u32,
    ring: u32,
}

/// Reads and checks the chunks of a submission (`amdgpu_cs_pass1`).
fn cs_chunks(call: &RenderCall<'_>, chunks: u64, num: u32) -> Result<Vec<IbChunk>, Errno> {
    use sys::drm_amdgpu_cs_chunk as C;
    use sys::drm_amdgpu_cs_chunk_ib as Ib;
    if u64::from(num) * 8 > KVMALLOC_MAX {
        return Err(Errno::ENOMEM);
    }
    let ptrs =
        copy_from_user(call.client, chunks, u64::from(num) * 8).map_err(|_| Errno::EFAULT)?;
    let mut ibs: Vec<IbChunk> = Vec::new();
    for p in ptrs.chunks_exact(8) {
        let at = get_u64(p, 0);
        let c =
            copy_from_user(call.client, at, size_of::<C>() as u64).map_err(|_| Errno::EFAULT)?;
        let id = get_u32(&c, offset_of!(C, chunk_id));
        let size = u64::from(get_u32(&c, offset_of!(C, length_dw))) * 4;
        if size > KVMALLOC_MAX {
            return Err(Errno::ENOMEM);
        }
        let data = copy_from_user(call.client, get_u64(&c, offset_of!(C, chunk_data)), size)
            .map_err(|_| Errno::EFAULT)?;
        match id {
            sys::AMDGPU_CHUNK_ID_IB => {
                if size < size_of::<Ib>() as u64 {
                    return Err(Errno::EINVAL);
                }
                let ring = get_u32(&data, offset_of!(Ib, ring));
                entity_check(
                    call,
                    get_u32(&data, offset_of!(Ib, ip_type)),
                    get_u32(&data, offset_of!(Ib, ip_instance)),
                    ring,
                )?;
                // One entity per submission (no gang submit in the simulator).
                if ibs.first().is_some_and(|f| f.ring != ring) {
                    return Err(Errno::EINVAL);
                }
                ibs.push(IbChunk {
                    va: get_u64(&data, offset_of!(Ib, va_start)),
                    bytes: get_u32(&data, offset_of!(Ib, ib_bytes)),
                    ring,
                });
            }
            sys::AMDGPU_CHUNK_ID_FENCE
            | sys::AMDGPU_CHUNK_ID_DEPENDENCIES
            | sys::AMDGPU_CHUNK_ID_SYNCOBJ_IN
            | sys::AMDGPU_CHUNK_ID_SYNCOBJ_OUT
            | sys::AMDGPU_CHUNK_ID_BO_HANDLES
            | sys::AMDGPU_CHUNK_ID_SCHEDULED_DEPENDENCIES
            | sys::AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_WAIT
            | sys::AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_SIGNAL => {
                log::warn!("kfd-sim: CS chunk {id} is not simulated");
                return Err(Errno::EINVAL);
            }
            _ => return Err(Errno::EINVAL),
        }
    }
    if ibs.is_empty() {
        return Err(Errno::EINVAL);
    }
    Ok(ibs)
}

/// `amdgpu_cs_ioctl`: no chunks `EINVAL`; unknown context `EINVAL`; guilty context `ECANCELED`;
/// chunk array or chunk unreadable `EFAULT`; an IB chunk too short, an unknown chunk id, a bad
/// IP/instance/ring, or no IB `EINVAL`; unknown BO list `ENOENT`. Then the IBs run on the SDMA
/// engine and the fence's sequence number is returned; a fault fails the fence, not the ioctl.
pub(super) fn cs(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use sys::drm_amdgpu_cs_in as In;
    let ctx_id = get_u32(kdata, offset_of!(In, ctx_id));
    let list = get_u32(kdata, offset_of!(In, bo_list_handle));
    let num = get_u32(kdata, offset_of!(In, num_chunks));
    let chunks = get_u64(kdata, offset_of!(In, chunks));
    if num == 0 {
        return Err(Errno::EINVAL);
    }
    let mut st = lock(&call.file.state);
    if st.ctxs.get(&ctx_id).ok_or(Errno::EINVAL)?.guilty {
        return Err(Errno::ECANCELED);
    }
    let ibs = cs_chunks(call, chunks, num)?;
    if list != 0 && !st.bo_lists.contains_key(&list) {
        return Err(Errno::ENOENT);
    }
    let ring = ibs.first().map_or(0, |ib| ib.ring);
    let running = Arc::clone(
        &st.ctxs
            .get_mut(&ctx_id)
            .ok_or(Errno::EINVAL)?
            .rings
            .entry(ring)
            .or_default()
            .running,
    );
    // The file is free while the job runs (other entities' jobs run at the same time, on other
    // engines); the entity's lock keeps its jobs in order, and its sequence number is given
    // once the job is done, so a fence that can be waited for is always signalled.
    drop(st);
    let entity_busy = lock(&running);
    let started = Instant::now();
    let engines = call.machine.devices.get(call.file.device).map(|d| &d.dma);
    let run = || {
        call.machine.engine.run(|| {
            ibs.iter().try_for_each(|ib| {
                crate::hw::sdma::execute(&call.file.vm, ib.va, ib.bytes, started)
            })
        })
    };
    let result = match engines {
        Some(e) => e.run(run),
        None => run(),
    };
    let mut st = lock(&call.file.state);
    drop(entity_busy);
    let ctx = st.ctxs.get_mut(&ctx_id).ok_or(Errno::EINVAL)?;
    let result = result.map_err(|fault| {
        log::warn!("kfd-sim: SDMA submission on context {ctx_id} failed: {fault}");
        ctx.guilty = true;
        fault.errno()
    });
    let entity = ctx.rings.entry(ring).or_default();
    let seq = entity.next;
    entity.next += 1;
    entity.done.push_back((seq, result));
    while entity.done.len() as u64 > FENCE_WINDOW {
        entity.done.pop_front();
    }
    put_u64(kdata, offset_of!(sys::drm_amdgpu_cs_out, handle), seq);
    Ok(0)
}

/// `amdgpu_cs_wait_ioctl`: unknown context or entity `EINVAL`; a sequence number not yet issued
/// `EINVAL`; a failed fence returns its error; else `status` 0 (signalled). Every fence is
/// signalled when its CS returns, so the timeout never expires.
pub(super) fn wait_cs(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use sys::drm_amdgpu_wait_cs_in as In;
    let seq = get_u64(kdata, offset_of!(In, handle));
    let ip = get_u32(kdata, offset_of!(In, ip_type));
    let instance = get_u32(kdata, offset_of!(In, ip_instance));
    let ring = get_u32(kdata, offset_of!(In, ring));
    let ctx_id = get_u32(kdata, offset_of!(In, ctx_id));
    let st = lock(&call.file.state);
    let ctx = st.ctxs.get(&ctx_id).ok_or(Errno::EINVAL)?;
    entity_check(call, ip, instance, ring)?;
    let (next, result) = match ctx.rings.get(&ring) {
        Some(e) => {
            // u64::MAX asks for the last submission.
            let seq = if seq == u64::MAX { e.next - 1 } else { seq };
            let r = e.done.iter().find(|(s, _)| *s == seq).map(|(_, r)| *r);
            (e.next, r.map(|r| (seq, r)))
        }
        None => (1, None),
    };
    if seq != u64::MAX && seq >= next {
        return Err(Errno::EINVAL);
    }
    if let Some((_, Err(e))) = result {
        return Err(e);
    }
    kdata.fill(0);
    put_u64(kdata, offset_of!(sys::drm_amdgpu_wait_cs_out, status), 0);
    Ok(0)
}
