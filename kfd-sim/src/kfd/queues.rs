//! Ioctls on user queues (`kfd_process_queue_manager.c`, the device queue manager): creating,
//! destroying and updating queues with their ids, doorbells, SDMA slots and MQDs; CU masks; the
//! wave state of an inactive queue; the GWS.

use kfd_abi::mmap_offset as mo;
use kfd_abi::Errno;
use kfd_sys as sys;

use super::KfdCall;
use crate::host::access_ok;
use crate::hw::cp::cwsr;
use crate::limits::*;
use crate::state::machine::MachineInner;
use crate::state::process::ProcState;
use crate::state::queue::{mqd_layout, sdma_doorbell_id, Queue, QueueKind};
use crate::uaccess::{copy_from_user, copy_to_user, get_u32, with_args, IoctlResult};

/// `set_queue_properties_from_user`: checks and the queue type.
fn queue_props_from_user(
    a: &mut sys::kfd_ioctl_create_queue_args,
) -> Result<(QueueKind, bool), Errno> {
    if a.queue_percentage > sys::KFD_MAX_QUEUE_PERCENTAGE {
        return Err(Errno::EINVAL);
    }
    if a.queue_priority > sys::KFD_MAX_QUEUE_PRIORITY {
        return Err(Errno::EINVAL);
    }
    if a.ring_base_address != 0 && !access_ok(a.ring_base_address, 8) {
        return Err(Errno::EFAULT);
    }
    if a.ring_size != 0 && !a.ring_size.is_power_of_two() {
        return Err(Errno::EINVAL);
    }
    if a.ring_size < sys::KFD_MIN_QUEUE_RING_SIZE {
        a.ring_size = sys::KFD_MIN_QUEUE_RING_SIZE;
    }
    if !access_ok(a.read_pointer_address, 4) || !access_ok(a.write_pointer_address, 4) {
        return Err(Errno::EFAULT);
    }
    if a.eop_buffer_address != 0 && !access_ok(a.eop_buffer_address, 4) {
        return Err(Errno::EFAULT);
    }
    if a.ctx_save_restore_address != 0 && !access_ok(a.ctx_save_restore_address, 4) {
        return Err(Errno::EFAULT);
    }
    match a.queue_type {
        sys::KFD_IOC_QUEUE_TYPE_COMPUTE => Ok((QueueKind::Compute, false)),
        sys::KFD_IOC_QUEUE_TYPE_COMPUTE_AQL => Ok((QueueKind::Compute, true)),
        sys::KFD_IOC_QUEUE_TYPE_SDMA => Ok((QueueKind::Sdma, false)),
        sys::KFD_IOC_QUEUE_TYPE_SDMA_XGMI => Ok((QueueKind::SdmaXgmi, false)),
        _ => Err(Errno::ENOTSUPP),
    }
}

/// Ids a restored queue must get back, and its saved MQD and control stack.
pub(super) struct QueueRestore {
    pub q_id: u32,
    pub doorbell_id: u32,
    pub sdma_id: u32,
    pub mqd: Vec<u8>,
    pub ctl_stack: Vec<u8>,
}

/// `pqm_create_queue` + the device queue manager: ids, doorbell, SDMA slot, MQD.
/// Returns the queue id and the doorbell's byte offset in the process slice.
pub(super) fn create_queue_locked(
    m: &MachineInner,
    st: &mut ProcState,
    mut q: Queue,
    ctl_stack_size: u32,
    restore: Option<QueueRestore>,
) -> Result<(u32, u64), Errno> {
    let pdd = st.pdds.get(q.pdd).ok_or(Errno::EINVAL)?;
    if pdd.queue_count >= MAX_QUEUES_PER_DEVICE {
        return Err(Errno::ENOSPC);
    }
    let qid = match &restore {
        Some(r) => {
            if r.q_id >= MAX_QUEUES_PER_PROCESS {
                return Err(Errno::EINVAL);
            }
            if st.queues.contains_key(&r.q_id) {
                return Err(Errno::ENOSPC);
            }
            r.q_id
        }
        None => (0..MAX_QUEUES_PER_PROCESS)
            .find(|i| !st.queues.contains_key(i))
            .ok_or(Errno::ENOMEM)?,
    };
    if ctl_stack_size > MAX_CTL_STACK {
        return Err(Errno::ENOMEM);
    }
    let dev_index = pdd.dev;
    let doorbell_index = pdd.doorbell_index;
    let dev = m.devices.get(dev_index).ok_or(Errno::EINVAL)?;
    let doorbell_id = match q.kind {
        QueueKind::Sdma | QueueKind::SdmaXgmi => {
            let (id, engine, queue) =
                dev.alloc_sdma(q.kind, restore.as_ref().map(|r| r.sdma_id))?;
            let db = sdma_doorbell_id(engine, queue);
            if restore.as_ref().is_some_and(|r| r.doorbell_id != db) {
                dev.free_sdma(q.kind, id);
                return Err(Errno::EINVAL);
            }
            q.sdma_id = id;
            db
        }
        QueueKind::Compute => {
            let pdd = st.pdds.get_mut(q.pdd).ok_or(Errno::EINVAL)?;
            let db = match &restore {
                Some(r) => match pdd.doorbells.get(r.doorbell_id as usize) {
                    Some(false) => r.doorbell_id,
                    _ => return Err(Errno::EINVAL),
                },
                None => pdd
                    .doorbells
                    .iter()
                    .position(|used| !used)
                    .and_then(|i| u32::try_from(i).ok())
                    .ok_or(Errno::EBUSY)?,
            };
            if let Some(b) = pdd.doorbells.get_mut(db as usize) {
                *b = true;
            }
            db
        }
    };
    q.doorbell_id = doorbell_id;
    q.doorbell_off = u64::from(doorbell_index) * (DOORBELL_SLICE / 4) + u64::from(doorbell_id) * 2;
    match restore {
        Some(r) => {
            q.mqd = r.mqd;
            q.ctl_stack = r.ctl_stack;
            let off = mqd_layout::DOORBELL;
            if let Some(b) = q.mqd.get_mut(off..off + 8) {
                b.copy_from_slice(&q.doorbell_off.to_le_bytes());
            }
            // The engine resumes where the checkpoint left it: what it had executed and what had
            // been submitted (the doorbell of the new process starts at zero).
            q.ring_state = q.ring_state_from_mqd();
            log::debug!(
                "kfd-sim: queue {qid} restored: rptr {:#x} wptr {:#x}",
                q.ring_state.rptr,
                q.ring_state.wptr
            );
        }
        None => {
            let size = if q.kind == QueueKind::Compute {
                MQD_SIZE_COMPUTE
            } else {
                MQD_SIZE_SDMA
            };
            q.mqd = vec![0; size as usize];
            q.ctl_stack = if q.kind == QueueKind::Compute {
                vec![0; ctl_stack_size as usize]
            } else {
                Vec::new()
            };
            q.refresh_mqd(qid);
            if q.kind == QueueKind::Compute {
                cwsr::init_regs(&mut q.mqd, q.ctx, q.ctx_size, ctl_stack_size);
            }
        }
    }
    if let Some(p) = st.pdds.get_mut(q.pdd) {
        p.queue_count += 1;
    }
    st.queues.insert(qid, q);
    Ok((qid, u64::from(doorbell_id) * 8))
}

pub(super) fn create_queue(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(kdata, |a: &mut sys::kfd_ioctl_create_queue_args| {
        let (kind, aql) = queue_props_from_user(a)?;
        let mut st = call.process.lock();
        let pi = st.pdd_by_user_id(a.gpu_id).ok_or(Errno::EINVAL)?;
        if st.bind(pi).is_err() {
            return Err(Errno::ESRCH);
        }
        let q = Queue {
            pdd: pi,
            kind,
            aql,
            ring: a.ring_base_address,
            ring_size: u64::from(a.ring_size),
            rptr: a.read_pointer_address,
            wptr: a.write_pointer_address,
            eop: a.eop_buffer_address,
            eop_size: u32::try_from(a.eop_buffer_size).unwrap_or(u32::MAX),
            ctx: a.ctx_save_restore_address,
            ctx_size: a.ctx_save_restore_size,
            priority: a.queue_priority,
            percent: a.queue_percentage,
            doorbell_id: 0,
            doorbell_off: 0,
            sdma_id: 0,
            gws: false,
            mqd: Vec::new(),
            ctl_stack: Vec::new(),
            cu_mask: Vec::new(),
            ring_state: crate::hw::queue::RingState::default(),
        };
        let ctl = if kind == QueueKind::Compute {
            a.ctl_stack_size
        } else {
            0
        };
        let (qid, byte) = create_queue_locked(call.machine, &mut st, q, ctl, None)?;
        // Which queues a client makes is what tells how far it can get: the SDMA engine runs
        // SDMA queues, the command processor AQL queues; nothing runs PM4 compute queues.
        let what = match (kind, aql) {
            (QueueKind::Compute, true) => "compute AQL",
            (QueueKind::Compute, false) => "compute PM4 (not executed: no PM4 queue processor)",
            (QueueKind::Sdma, _) => "SDMA",
            (QueueKind::SdmaXgmi, _) => "SDMA xGMI",
        };
        log::info!(
            "kfd-sim: pid {}: queue {qid} created on gpu {:#x}: {what}",
            call.process.pid,
            a.gpu_id
        );
        a.queue_id = qid;
        a.doorbell_offset = mo::TYPE_DOORBELL | mo::gpu_id(a.gpu_id) | byte;
        Ok(0)
    })
}

pub(super) fn destroy_queue(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(kdata, |a: &mut sys::kfd_ioctl_destroy_queue_args| {
        let mut st = call.process.lock();
        let q = st.queues.remove(&a.queue_id).ok_or(Errno::EINVAL)?;
        call.process.release_queue(&mut st, &q);
        Ok(0)
    })
}

pub(super) fn update_queue(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(kdata, |a: &mut sys::kfd_ioctl_update_queue_args| {
        if a.queue_percentage > sys::KFD_MAX_QUEUE_PERCENTAGE
            || a.queue_priority > sys::KFD_MAX_QUEUE_PRIORITY
        {
            return Err(Errno::EINVAL);
        }
        if a.ring_base_address != 0 && !access_ok(a.ring_base_address, 8) {
            return Err(Errno::EFAULT);
        }
        if a.ring_size != 0 && !a.ring_size.is_power_of_two() {
            return Err(Errno::EINVAL);
        }
        let mut st = call.process.lock();
        let q = st.queues.get_mut(&a.queue_id).ok_or(Errno::EFAULT)?;
        q.ring = a.ring_base_address;
        q.ring_size = u64::from(a.ring_size);
        q.percent = a.queue_percentage;
        q.priority = a.queue_priority;
        q.refresh_mqd(a.queue_id);
        Ok(0)
    })
}

pub(super) fn set_cu_mask(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(kdata, |a: &mut sys::kfd_ioctl_set_cu_mask_args| {
        if a.num_cu_mask % 32 != 0 || a.num_cu_mask == 0 {
            return Err(Errno::EINVAL);
        }
        let count = a.num_cu_mask.min(1024);
        let bytes = copy_from_user(call.client, a.cu_mask_ptr, u64::from(count / 32) * 4)
            .map_err(|_| Errno::EFAULT)?;
        let mut st = call.process.lock();
        let q = st.queues.get_mut(&a.queue_id).ok_or(Errno::EFAULT)?;
        q.cu_mask = bytes.chunks_exact(4).map(|c| get_u32(c, 0)).collect();
        Ok(0)
    })
}

/// Whether a queue is running (not evicted and with a ring).
fn queue_active(st: &ProcState, q: &Queue) -> bool {
    st.evictions == 0 && q.runnable()
}

pub(super) fn get_queue_wave_state(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(kdata, |a: &mut sys::kfd_ioctl_get_queue_wave_state_args| {
        let st = call.process.lock();
        let q = st.queues.get(&a.queue_id).ok_or(Errno::EFAULT)?;
        if q.kind != QueueKind::Compute || queue_active(&st, q) {
            return Err(Errno::EINVAL);
        }
        // The used part of the control stack (it grows down to `cntl_stack_offset`) and how much
        // wave data the save area holds, as the MQD's CWSR registers say.
        let size = q.ctl_stack.len();
        let (used, data) = if q.cwsr_mqd() {
            cwsr::regs_used(&q.mqd, size)
        } else {
            (size, 0)
        };
        copy_to_user(
            call.client,
            a.ctl_stack_address,
            &q.ctl_stack[size - used..],
        )?;
        a.ctl_stack_used_size = u32::try_from(used).unwrap_or(u32::MAX);
        a.save_area_used_size = u32::try_from(data).unwrap_or(u32::MAX);
        Ok(0)
    })
}

pub(super) fn alloc_queue_gws(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(kdata, |a: &mut sys::kfd_ioctl_alloc_queue_gws_args| {
        let mut st = call.process.lock();
        let (pi, has) = st
            .queues
            .get(&a.queue_id)
            .map(|q| (q.pdd, q.gws))
            .ok_or(Errno::EINVAL)?;
        let dev = st.pdds.get(pi).map(|p| p.dev).ok_or(Errno::EINVAL)?;
        if call.machine.devices.get(dev).is_none_or(|d| d.num_gws == 0) {
            return Err(Errno::ENODEV);
        }
        let taken = st.pdds.get(pi).is_some_and(|p| p.gws_taken);
        if a.num_gws != 0 {
            if taken {
                return Err(Errno::EBUSY);
            }
        } else if !has {
            return Err(Errno::EINVAL);
        }
        let on = a.num_gws != 0;
        if let Some(q) = st.queues.get_mut(&a.queue_id) {
            q.gws = on;
        }
        if let Some(p) = st.pdds.get_mut(pi) {
            p.gws_taken = on;
        }
        a.first_gws = 0;
        Ok(0)
    })
}
