//! The `/dev/kfd` ioctl dispatcher, written like the driver's: one table keyed on `_IOC_NR`, the
//! kernel's size rules, the caller and capability checks, then one function per ioctl (named after
//! it) with the driver's checks in the driver's order.
//!
//! Client-controlled values are never indexed or unwrapped: every lookup is checked and every
//! user access goes through the [`Client`], so no input can panic the simulator.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kfd_abi::ioctl::{self, kfd};
use kfd_abi::mmap_offset as mo;
use kfd_abi::Errno;
use kfd_sys as sys;

use crate::client::Client;
use crate::machine::{lock, FileKind, MachineInner};
use crate::memory::Backing;
use crate::process::limits::*;
use crate::process::{
    align_up, domain_of, mqd_layout, sdma_doorbell_id, vm_unmap_bo, waiter, Bo, DrmBinding, Event,
    KfdProcess, ProcState, Queue, QueueKind, SignalPage, SvmAccess, SvmRange,
};
use crate::render::{VmMapping, VmTarget};
use crate::sys::{access_ok, clock_ns, Pod};

pub(crate) type R = Result<i32, Errno>;

/// What one ioctl call sees: the machine, the file's KFD process, and the caller.
pub(crate) struct Cx<'a> {
    pub m: &'a MachineInner,
    pub p: &'a KfdProcess,
    pub c: &'a dyn Client,
}

impl Cx<'_> {
    /// `copy_from_user` of one struct.
    pub fn read_pod<T: Pod>(&self, addr: u64) -> Result<T, Errno> {
        let mut b = vec![0u8; std::mem::size_of::<T>()];
        self.c.read_user(addr, &mut b)?;
        T::read_from(&b).ok_or(Errno::EFAULT)
    }

    /// `copy_from_user` of `len` bytes (see [`read_user_bytes`]).
    pub fn read_bytes(&self, addr: u64, len: u64) -> Result<Vec<u8>, Errno> {
        read_user_bytes(self.c, addr, len)
    }
}

/// `copy_from_user` of `len` bytes, read in chunks so that a huge length over unmapped memory
/// fails fast without a huge allocation.
pub(crate) fn read_user_bytes(c: &dyn Client, addr: u64, len: u64) -> Result<Vec<u8>, Errno> {
    const CHUNK: u64 = 1 << 16;
    let mut out = Vec::new();
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(CHUNK);
        let at = addr.checked_add(done).ok_or(Errno::EFAULT)?;
        let start = out.len();
        out.resize(start + usize::try_from(n).map_err(|_| Errno::ENOMEM)?, 0);
        c.read_user(at, &mut out[start..])?;
        done += n;
    }
    Ok(out)
}

/// Runs `f` on the argument struct decoded from the kernel buffer and stores it back (also on
/// error: the driver copies its buffer out whatever the result).
pub(crate) fn args<T: Pod>(k: &mut [u8], f: impl FnOnce(&mut T) -> R) -> R {
    let mut a = T::read_from(k).ok_or(Errno::EINVAL)?;
    let r = f(&mut a);
    a.write_to(k);
    r
}

pub(crate) fn get_u32(k: &[u8], off: usize) -> u32 {
    k.get(off..off + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

pub(crate) fn get_u64(k: &[u8], off: usize) -> u64 {
    k.get(off..off + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

pub(crate) fn put_u32(k: &mut [u8], off: usize, v: u32) {
    if let Some(b) = k.get_mut(off..off + 4) {
        b.copy_from_slice(&v.to_le_bytes());
    }
}

pub(crate) fn put_u64(k: &mut [u8], off: usize, v: u64) {
    if let Some(b) = k.get_mut(off..off + 8) {
        b.copy_from_slice(&v.to_le_bytes());
    }
}

/// An fd number as the kernel reads it from a `u32` field.
pub(crate) fn fd_of(v: u32) -> i32 {
    i32::from_ne_bytes(v.to_ne_bytes())
}

/// `kmalloc` of `bytes` fails past the allocator's limit.
pub(crate) fn kmalloc_check(bytes: u64) -> Result<(), Errno> {
    if bytes > KMALLOC_MAX {
        Err(Errno::ENOMEM)
    } else {
        Ok(())
    }
}

type Handler = fn(&Cx<'_>, &mut [u8]) -> R;

/// The dispatch table, indexed by `_IOC_NR - 1`, in the order of `kfd_abi::ioctl::kfd::TABLE`.
const HANDLERS: [Handler; 35] = [
    get_version,
    create_queue,
    destroy_queue,
    set_memory_policy,
    get_clock_counters,
    get_process_apertures,
    update_queue,
    create_event,
    destroy_event,
    set_event,
    reset_event,
    wait_events,
    dbg_deprecated,
    dbg_deprecated,
    dbg_deprecated,
    dbg_deprecated,
    set_scratch_backing_va,
    get_tile_config,
    set_trap_handler,
    get_process_apertures_new,
    acquire_vm,
    alloc_memory_of_gpu,
    free_memory_of_gpu,
    map_memory_to_gpu,
    unmap_memory_from_gpu,
    set_cu_mask,
    get_queue_wave_state,
    get_dmabuf_info,
    import_dmabuf,
    alloc_queue_gws,
    smi_events,
    svm,
    set_xnack_mode,
    crate::criu::criu_op,
    available_memory,
];

/// `kfd_ioctl`: one call on a `/dev/kfd` file owned by `process`, made by `client`.
pub(crate) fn kfd_ioctl(
    m: &MachineInner,
    process: &Arc<KfdProcess>,
    client: &dyn Client,
    cmd: u32,
    arg: u64,
) -> R {
    // 1. Only _IOC_NR selects; outside the table: EINVAL (6.1).
    let desc = kfd::lookup(cmd).ok_or(Errno::EINVAL)?;
    let handler = usize::from(desc.nr)
        .checked_sub(1)
        .and_then(|i| HANDLERS.get(i))
        .ok_or(Errno::EINVAL)?;
    // 2. The caller must be the opener, or (CRIU_OP only) its ptrace parent.
    let criu = desc.cmd == kfd::CRIU_OP;
    let traced = criu && client.is_ptrace_parent_of(process.pid);
    if client.pid() != process.pid && !traced {
        return Err(Errno::EBADF);
    }
    // 3. CRIU_OP needs CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN.
    if criu && !client.can_checkpoint_restore() {
        return Err(Errno::EACCES);
    }
    // 4. Sizes: usize from the caller's code, the kernel's own direction and size.
    let usize_ = ioctl::size(cmd);
    let asize = usize_.max(ioctl::size(desc.cmd));
    let dir = ioctl::dir(desc.cmd);
    let mut kdata = vec![0u8; asize];
    if dir.copies_in() {
        client
            .read_user(arg, &mut kdata[..usize_])
            .map_err(|_| Errno::EFAULT)?;
    }
    let cx = Cx {
        m,
        p: process,
        c: client,
    };
    let ret = handler(&cx, &mut kdata);
    if dir.copies_out() && client.write_user(arg, &kdata[..usize_]).is_err() {
        return Err(Errno::EFAULT);
    }
    if let Err(e) = ret {
        log::debug!("kfd-sim: {} -> {e}", desc.name);
    }
    ret
}

fn get_version(cx: &Cx<'_>, k: &mut [u8]) -> R {
    let v = cx.m.kfd_version();
    args(k, |a: &mut sys::kfd_ioctl_get_version_args| {
        a.major_version = v.major;
        a.minor_version = v.minor;
        Ok(0)
    })
}

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
pub(crate) struct QueueRestore {
    pub q_id: u32,
    pub doorbell_id: u32,
    pub sdma_id: u32,
    pub mqd: Vec<u8>,
    pub ctl_stack: Vec<u8>,
}

/// `pqm_create_queue` + the device queue manager: ids, doorbell, SDMA slot, MQD.
/// Returns the queue id and the doorbell's byte offset in the process slice.
pub(crate) fn create_queue_locked(
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
        }
    }
    if let Some(p) = st.pdds.get_mut(q.pdd) {
        p.queue_count += 1;
    }
    st.queues.insert(qid, q);
    Ok((qid, u64::from(doorbell_id) * 8))
}

fn create_queue(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_create_queue_args| {
        let (kind, aql) = queue_props_from_user(a)?;
        let mut st = cx.p.lock();
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
        };
        let ctl = if kind == QueueKind::Compute {
            a.ctl_stack_size
        } else {
            0
        };
        let (qid, byte) = create_queue_locked(cx.m, &mut st, q, ctl, None)?;
        a.queue_id = qid;
        a.doorbell_offset = mo::TYPE_DOORBELL | mo::gpu_id(a.gpu_id) | byte;
        Ok(0)
    })
}

fn destroy_queue(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_destroy_queue_args| {
        let mut st = cx.p.lock();
        let q = st.queues.remove(&a.queue_id).ok_or(Errno::EINVAL)?;
        cx.p.release_queue(&mut st, &q);
        Ok(0)
    })
}

fn set_memory_policy(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_set_memory_policy_args| {
        let ok = |p| {
            p == sys::KFD_IOC_CACHE_POLICY_COHERENT || p == sys::KFD_IOC_CACHE_POLICY_NONCOHERENT
        };
        if !ok(a.default_policy) || !ok(a.alternate_policy) {
            return Err(Errno::EINVAL);
        }
        let st = cx.p.lock();
        let pi = st.pdd_by_user_id(a.gpu_id).ok_or(Errno::EINVAL)?;
        st.bind(pi).map_err(|_| Errno::ESRCH)?;
        Ok(0)
    })
}

fn get_clock_counters(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_get_clock_counters_args| {
        let raw = clock_ns(libc::CLOCK_MONOTONIC_RAW);
        let known = cx.p.lock().pdd_by_user_id(a.gpu_id).is_some();
        // The gfx9 GPU timestamp counter runs at 100 MHz.
        a.gpu_clock_counter = if known { raw / 10 } else { 0 };
        a.cpu_clock_counter = raw;
        a.system_clock_counter = clock_ns(libc::CLOCK_BOOTTIME);
        a.system_clock_freq = 1_000_000_000;
        Ok(0)
    })
}

fn apertures_of(gpu_id: u32) -> sys::kfd_process_device_apertures {
    sys::kfd_process_device_apertures {
        lds_base: LDS_BASE,
        lds_limit: LDS_BASE | 0xffff_ffff,
        scratch_base: SCRATCH_BASE,
        scratch_limit: SCRATCH_BASE | 0xffff_ffff,
        gpuvm_base: GPUVM_BASE,
        gpuvm_limit: GPUVM_LIMIT,
        gpu_id,
        pad: 0,
    }
}

fn get_process_apertures(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_get_process_apertures_args| {
        let st = cx.p.lock();
        a.num_of_nodes = 0;
        for (slot, pdd) in a.process_apertures.iter_mut().zip(&st.pdds) {
            *slot = apertures_of(pdd.user_gpu_id);
            a.num_of_nodes += 1;
        }
        Ok(0)
    })
}

fn update_queue(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_update_queue_args| {
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
        let mut st = cx.p.lock();
        let q = st.queues.get_mut(&a.queue_id).ok_or(Errno::EFAULT)?;
        q.ring = a.ring_base_address;
        q.ring_size = u64::from(a.ring_size);
        q.percent = a.queue_percentage;
        q.priority = a.queue_priority;
        q.refresh_mqd(a.queue_id);
        Ok(0)
    })
}

/// `kfd_kmap_event_page`: the BO behind `handle` becomes the signal page.
pub(crate) fn kmap_event_page(st: &mut ProcState, handle: u64) -> Result<(), Errno> {
    if st.signal.is_some() {
        return Err(Errno::EINVAL);
    }
    let pi = st
        .pdd_by_user_id((handle >> 32) as u32)
        .ok_or(Errno::EINVAL)?;
    st.bind(pi)?;
    let idr = (handle & 0xffff_ffff) as u32;
    let bo = st
        .pdds
        .get(pi)
        .and_then(|p| p.bos.get(&idr))
        .ok_or(Errno::EINVAL)?;
    let backing = match &bo.backing {
        Some(b) if bo.flags & sys::KFD_IOC_ALLOC_MEM_FLAGS_GTT != 0 => Arc::clone(b),
        _ => return Err(Errno::EINVAL),
    };
    let slots = u32::try_from(bo.size / 8)
        .unwrap_or(u32::MAX)
        .min(SIGNAL_EVENT_LIMIT);
    let init_len = usize::try_from((u64::from(slots) * 8).min(backing.size)).unwrap_or(0);
    let init = vec![0xffu8; init_len];
    backing.write(0, &init);
    st.signal = Some(SignalPage {
        handle,
        backing: Some(backing),
        slots,
    });
    Ok(())
}

/// Creates an event (with its id at restore). Returns the id.
pub(crate) fn create_event_locked(
    st: &mut ProcState,
    ty: u32,
    auto_reset: bool,
    signaled: bool,
    restore_id: Option<u32>,
) -> Result<u32, Errno> {
    let id = if Event::is_signal(ty) {
        let page = st.signal.get_or_insert_with(|| SignalPage {
            handle: 0,
            backing: None,
            slots: DEFAULT_SIGNAL_SLOTS,
        });
        let slots = page.slots;
        if st.signal_event_count >= slots {
            return Err(Errno::ENOSPC);
        }
        let id = match restore_id {
            Some(id) if st.events.contains_key(&id) => return Err(Errno::ENOSPC),
            Some(id) => id,
            None => (0..slots)
                .find(|i| !st.events.contains_key(i))
                .ok_or(Errno::ENOSPC)?,
        };
        if let Some(b) = st.signal.as_ref().and_then(|p| p.backing.as_ref()) {
            b.write(u64::from(id) * 8, &u64::MAX.to_le_bytes());
        }
        st.signal_event_count += 1;
        id
    } else {
        match restore_id {
            Some(id) if st.events.contains_key(&id) || id < FIRST_NONSIGNAL_EVENT_ID => {
                return Err(Errno::ENOSPC)
            }
            Some(id) => id,
            None => {
                let mut cand = FIRST_NONSIGNAL_EVENT_ID;
                for &id in st
                    .events
                    .range(FIRST_NONSIGNAL_EVENT_ID..)
                    .map(|(id, _)| id)
                {
                    if id != cand {
                        break;
                    }
                    cand = cand.checked_add(1).ok_or(Errno::ENOSPC)?;
                }
                if cand > LAST_NONSIGNAL_EVENT_ID {
                    return Err(Errno::ENOSPC);
                }
                cand
            }
        }
    };
    st.events.insert(
        id,
        Event {
            ty,
            auto_reset,
            signaled,
            waiters: Vec::new(),
            exception: [0; 32],
        },
    );
    Ok(id)
}

fn create_event(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_create_event_args| {
        let mut st = cx.p.lock();
        if a.event_page_offset != 0 {
            kmap_event_page(&mut st, a.event_page_offset)?;
        }
        a.event_page_offset = 0;
        let id = create_event_locked(&mut st, a.event_type, a.auto_reset != 0, false, None)?;
        if Event::is_signal(a.event_type) {
            a.event_page_offset = mo::TYPE_EVENTS;
            a.event_slot_index = id;
        }
        a.event_id = id;
        a.event_trigger_data = id;
        Ok(0)
    })
}

fn destroy_event(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_destroy_event_args| {
        let mut st = cx.p.lock();
        let ev = st.events.remove(&a.event_id).ok_or(Errno::EINVAL)?;
        for w in &ev.waiters {
            w.store(waiter::GONE, Ordering::SeqCst);
        }
        if Event::is_signal(ev.ty) {
            st.signal_event_count = st.signal_event_count.saturating_sub(1);
        }
        cx.p.events_cv.notify_all();
        Ok(0)
    })
}

/// The signal event `id` that SET_EVENT and RESET_EVENT act on: `EINVAL` if there is none, or
/// it is of another type.
fn signal_event(st: &mut ProcState, id: u32) -> Result<&mut Event, Errno> {
    let ev = st.events.get_mut(&id).ok_or(Errno::EINVAL)?;
    if ev.ty != sys::KFD_IOC_EVENT_SIGNAL {
        return Err(Errno::EINVAL);
    }
    Ok(ev)
}

fn set_event(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_set_event_args| {
        let mut st = cx.p.lock();
        signal_event(&mut st, a.event_id)?.set();
        cx.p.events_cv.notify_all();
        Ok(0)
    })
}

fn reset_event(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_reset_event_args| {
        let mut st = cx.p.lock();
        signal_event(&mut st, a.event_id)?.signaled = false;
        Ok(0)
    })
}

const EVENT_DATA_SIZE: u64 = std::mem::size_of::<sys::kfd_event_data>() as u64;
/// Size of the kernel's per-event waiter record (for its allocation limit).
const WAITER_SIZE: u64 = 56;
const TIMEOUT_INFINITE: u32 = 0xffff_ffff;

fn wait_events(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_wait_events_args| {
        let r = wait_on_events(cx, a);
        match r {
            Ok(result) => {
                a.wait_result = result;
                if result == sys::KFD_IOC_WAIT_RESULT_FAIL {
                    return Err(Errno::EIO);
                }
                Ok(0)
            }
            Err(e) => {
                a.wait_result = sys::KFD_IOC_WAIT_RESULT_FAIL;
                Err(e)
            }
        }
    })
}

fn wait_on_events(cx: &Cx<'_>, a: &sys::kfd_ioctl_wait_events_args) -> Result<u32, Errno> {
    let n = u64::from(a.num_events);
    kmalloc_check(n * WAITER_SIZE)?;
    let all = a.wait_for_all != 0;
    let mut st = cx.p.lock();
    let mut waiters: Vec<(u32, Arc<AtomicU8>)> = Vec::new();
    let cleanup = |st: &mut ProcState, waiters: &[(u32, Arc<AtomicU8>)]| {
        for (id, w) in waiters {
            if let Some(ev) = st.events.get_mut(id) {
                ev.waiters.retain(|x| !Arc::ptr_eq(x, w));
            }
        }
    };
    for i in 0..n {
        let addr = a
            .events_ptr
            .checked_add(i * EVENT_DATA_SIZE)
            .ok_or(Errno::EFAULT);
        let data = match addr.and_then(|addr| cx.read_pod::<sys::kfd_event_data>(addr)) {
            Ok(d) => d,
            Err(_) => {
                cleanup(&mut st, &waiters);
                return Err(Errno::EFAULT);
            }
        };
        let Some(ev) = st.events.get_mut(&data.event_id) else {
            cleanup(&mut st, &waiters);
            return Err(Errno::EINVAL);
        };
        let activated = ev.signaled;
        ev.signaled = ev.signaled && !ev.auto_reset;
        let w = Arc::new(AtomicU8::new(if activated {
            waiter::ACTIVATED
        } else {
            waiter::WAITING
        }));
        if !activated {
            ev.waiters.push(Arc::clone(&w));
        }
        waiters.push((data.event_id, w));
    }
    let condition = |waiters: &[(u32, Arc<AtomicU8>)]| {
        let mut activated = 0usize;
        for (_, w) in waiters {
            match w.load(Ordering::SeqCst) {
                waiter::GONE => return sys::KFD_IOC_WAIT_RESULT_FAIL,
                waiter::ACTIVATED if !all => return sys::KFD_IOC_WAIT_RESULT_COMPLETE,
                waiter::ACTIVATED => activated += 1,
                _ => {}
            }
        }
        if activated == waiters.len() {
            sys::KFD_IOC_WAIT_RESULT_COMPLETE
        } else {
            sys::KFD_IOC_WAIT_RESULT_TIMEOUT
        }
    };
    let deadline = match a.timeout {
        0 | TIMEOUT_INFINITE => None,
        ms => Instant::now().checked_add(Duration::from_millis(u64::from(ms))),
    };
    let result = loop {
        let r = condition(&waiters);
        if r != sys::KFD_IOC_WAIT_RESULT_TIMEOUT || a.timeout == 0 {
            break r;
        }
        // The driver ends the sleep with -ERESTARTSYS; FUSE can only carry EINTR.
        if cx.c.signal_pending() {
            cleanup(&mut st, &waiters);
            return Err(Errno::EINTR);
        }
        if a.timeout == TIMEOUT_INFINITE {
            st =
                cx.p.events_cv
                    .wait(st)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            continue;
        }
        let now = Instant::now();
        let Some(left) = deadline
            .and_then(|d| d.checked_duration_since(now))
            .filter(|d| !d.is_zero())
        else {
            break condition(&waiters);
        };
        st = match cx.p.events_cv.wait_timeout(st, left) {
            Ok((g, _)) => g,
            Err(e) => e.into_inner().0,
        };
    };
    cleanup(&mut st, &waiters);
    if result == sys::KFD_IOC_WAIT_RESULT_COMPLETE {
        // copy_signaled_event_data: memory exception data of fired memory events.
        for (i, (id, w)) in (0u64..).zip(&waiters) {
            if w.load(Ordering::SeqCst) != waiter::ACTIVATED {
                continue;
            }
            let Some(ev) = st.events.get(id) else {
                continue;
            };
            if ev.ty == sys::KFD_IOC_EVENT_MEMORY {
                let addr = a.events_ptr.wrapping_add(i * EVENT_DATA_SIZE);
                cx.c.write_user(addr, &ev.exception)
                    .map_err(|_| Errno::EFAULT)?;
            }
        }
    }
    Ok(result)
}

fn dbg_deprecated(_cx: &Cx<'_>, _k: &mut [u8]) -> R {
    Err(Errno::EPERM)
}

fn set_scratch_backing_va(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_set_scratch_backing_va_args| {
        let mut st = cx.p.lock();
        let pi = st.pdd_by_user_id(a.gpu_id).ok_or(Errno::EINVAL)?;
        st.bind(pi)?;
        if let Some(p) = st.pdds.get_mut(pi) {
            p.scratch_va = a.va_addr;
        }
        Ok(0)
    })
}

/// `GB_ADDR_CONFIG` of the gfx9 parts.
fn gb_addr_config(gfx: u32) -> u32 {
    match gfx {
        90006 => 0x2a11_4042,
        90008 => 0x2a11_4042,
        _ => 0x2a11_0042,
    }
}

fn get_tile_config(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_get_tile_config_args| {
        let dev = {
            let st = cx.p.lock();
            let pi = st.pdd_by_user_id(a.gpu_id).ok_or(Errno::EINVAL)?;
            st.pdds.get(pi).map(|p| p.dev).ok_or(Errno::EINVAL)?
        };
        let gfx = cx.m.devices.get(dev).map_or(0, |d| d.gfx_target_version);
        a.gb_addr_config = gb_addr_config(gfx);
        a.num_banks = 0;
        a.num_ranks = 0;
        // gfx9 keeps 32 tile modes and 16 macro tile modes, all zero.
        a.num_tile_configs = a.num_tile_configs.min(32);
        if cx
            .c
            .write_user(
                a.tile_config_ptr,
                &vec![0u8; a.num_tile_configs as usize * 4],
            )
            .is_err()
        {
            a.num_tile_configs = 0;
            return Err(Errno::EFAULT);
        }
        a.num_macro_tile_configs = a.num_macro_tile_configs.min(16);
        let macro_bytes = vec![0u8; a.num_macro_tile_configs as usize * 4];
        if cx
            .c
            .write_user(a.macro_tile_config_ptr, &macro_bytes)
            .is_err()
        {
            a.num_macro_tile_configs = 0;
            return Err(Errno::EFAULT);
        }
        Ok(0)
    })
}

fn set_trap_handler(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_set_trap_handler_args| {
        let mut st = cx.p.lock();
        let pi = st.pdd_by_user_id(a.gpu_id).ok_or(Errno::EINVAL)?;
        st.bind(pi).map_err(|_| Errno::ESRCH)?;
        if let Some(p) = st.pdds.get_mut(pi) {
            p.trap = (a.tba_addr, a.tma_addr);
        }
        Ok(0)
    })
}

fn get_process_apertures_new(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(
        k,
        |a: &mut sys::kfd_ioctl_get_process_apertures_new_args| {
            if a.num_of_nodes == 0 {
                a.num_of_nodes = u32::try_from(cx.p.lock().pdds.len()).unwrap_or(u32::MAX);
                return Ok(0);
            }
            const APU: usize = std::mem::size_of::<sys::kfd_process_device_apertures>();
            const AP: u64 = APU as u64;
            kmalloc_check(AP * u64::from(a.num_of_nodes))?;
            let mut bytes = Vec::new();
            let st = cx.p.lock();
            let mut n = 0u32;
            for pdd in st.pdds.iter().take(a.num_of_nodes as usize) {
                let mut rec = [0u8; APU];
                apertures_of(pdd.user_gpu_id).write_to(&mut rec);
                bytes.extend_from_slice(&rec);
                n += 1;
            }
            drop(st);
            a.num_of_nodes = n;
            cx.c.write_user(a.kfd_process_device_apertures_ptr, &bytes)
                .map_err(|_| Errno::EFAULT)?;
            Ok(0)
        },
    )
}

fn acquire_vm(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_acquire_vm_args| {
        let key =
            cx.c.resolve_fd(fd_of(a.drm_fd))
                .map_err(|_| Errno::EINVAL)?;
        let mut st = cx.p.lock();
        let pi = st.pdd_by_user_id(a.gpu_id).ok_or(Errno::EINVAL)?;
        bind_vm(cx, &mut st, pi, key, cx.p.pid)
    })
}

/// `kfd_process_device_init_vm`: adopts the render file's VM as the pdd's compute VM.
pub(crate) fn bind_vm(
    cx: &Cx<'_>,
    st: &mut ProcState,
    pi: usize,
    key: crate::sys::FileKey,
    pid: u32,
) -> R {
    let pdd = st.pdds.get_mut(pi).ok_or(Errno::EINVAL)?;
    if let Some(drm) = &pdd.drm {
        return if drm.key == key {
            Ok(0)
        } else {
            Err(Errno::EBUSY)
        };
    }
    let file = cx.m.file(key).ok_or(Errno::EINVAL)?;
    let FileKind::Render(render) = &file.kind else {
        return Err(Errno::EINVAL);
    };
    if render.device != pdd.dev {
        return Err(Errno::EINVAL);
    }
    {
        let mut vm = lock(&render.vm);
        if vm.owner.is_some_and(|o| o != pid) {
            return Err(Errno::EINVAL);
        }
        vm.owner = Some(pid);
    }
    pdd.drm = Some(DrmBinding {
        key,
        vm: Arc::clone(&render.vm),
    });
    Ok(0)
}

/// Creates a BO's memory and accounting (`amdgpu_amdkfd_gpuvm_alloc_memory_of_gpu`).
/// `check_user` validates a userptr's pages (not at CRIU restore).
pub(crate) fn new_bo(
    cx: &Cx<'_>,
    dev: usize,
    va: u64,
    size: u64,
    flags: u32,
    user_addr: u64,
    check_user: bool,
) -> Result<Bo, Errno> {
    use sys::*;
    let device = cx.m.devices.get(dev).ok_or(Errno::EINVAL)?;
    let aligned = align_up(size);
    let domain = domain_of(flags);
    let userptr = domain.is_none() && flags & KFD_IOC_ALLOC_MEM_FLAGS_USERPTR != 0;
    if domain.is_none() && !userptr {
        if flags & (KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL | KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP) == 0 {
            return Err(Errno::EINVAL);
        }
        if size > u64::from(u32::MAX) {
            return Err(Errno::EINVAL);
        }
    }
    if userptr && user_addr == 0 {
        return Err(Errno::EINVAL);
    }
    // Memory limits.
    let vram = domain == Some(crate::memory::Domain::Vram);
    let system = domain == Some(crate::memory::Domain::Gtt) || userptr;
    if vram {
        let mut s = lock(&device.state);
        let total = s.vram_used.checked_add(aligned).ok_or(Errno::ENOMEM)?;
        if total > device.vram_size {
            return Err(Errno::ENOMEM);
        }
        s.vram_used = total;
    } else if system {
        cx.m.reserve_system(aligned)?;
    }
    let unreserve = || {
        if vram {
            let mut s = lock(&device.state);
            s.vram_used = s.vram_used.saturating_sub(aligned);
        } else if system {
            cx.m.release_system(aligned);
        }
    };
    if userptr && check_user {
        let mut probe = [0u8; 1];
        let last = user_addr.saturating_add(aligned.saturating_sub(1));
        if cx.c.read_user(user_addr, &mut probe).is_err()
            || cx.c.read_user(last, &mut probe).is_err()
        {
            unreserve();
            return Err(Errno::EFAULT);
        }
    }
    let backing = match domain {
        Some(d) => {
            let visible = d == crate::memory::Domain::Gtt
                || flags & KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC != 0
                || device.large_bar;
            match Backing::new(aligned, d, dev, visible) {
                Ok(b) => {
                    let b = Arc::new(b);
                    cx.m.register_dmabuf(&b);
                    Some(b)
                }
                Err(e) => {
                    log::warn!("kfd-sim: cannot back a {aligned}-byte BO: {e}");
                    unreserve();
                    return Err(Errno::ENOMEM);
                }
            }
        }
        None => None,
    };
    Ok(Bo {
        va,
        size: aligned,
        flags,
        mmap_offset: device.alloc_mmap_offset(aligned),
        user_addr: if userptr { user_addr } else { 0 },
        user_mem: userptr.then(|| cx.c.process_memory()),
        backing,
        accounted: true,
        mapped: Vec::new(),
    })
}

fn alloc_memory_of_gpu(cx: &Cx<'_>, k: &mut [u8]) -> R {
    use sys::*;
    args(k, |a: &mut kfd_ioctl_alloc_memory_of_gpu_args| {
        let flags = a.flags;
        if a.size == 0 {
            return Err(Errno::EINVAL);
        }
        let mut st = cx.p.lock();
        let first = a.va_addr >> 12;
        let last = a.va_addr.wrapping_add(a.size - 1) >> 12;
        if st
            .svm
            .iter()
            .any(|r| (r.start >> 12) <= last && first <= (r.end() - 1) >> 12)
        {
            return Err(Errno::EADDRINUSE);
        }
        let pi = st.pdd_by_user_id(a.gpu_id).ok_or(Errno::EINVAL)?;
        let dev = st.pdds.get(pi).map(|p| p.dev).ok_or(Errno::EINVAL)?;
        let large_bar = cx.m.devices.get(dev).is_some_and(|d| d.large_bar);
        if flags & KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC != 0
            && flags & KFD_IOC_ALLOC_MEM_FLAGS_VRAM != 0
            && !large_bar
        {
            return Err(Errno::EINVAL);
        }
        st.bind(pi)?;
        if flags & KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL != 0 {
            if a.size != DOORBELL_SLICE {
                return Err(Errno::EINVAL);
            }
        } else if flags & KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP != 0 && a.size != PAGE_SIZE {
            return Err(Errno::EINVAL);
        }
        let bo = new_bo(cx, dev, a.va_addr, a.size, flags, a.mmap_offset, true)?;
        let pdd = st.pdds.get_mut(pi).ok_or(Errno::EINVAL)?;
        let Some(idr) = pdd.free_idr() else {
            cx.p.release_bo(dev, &bo);
            return Err(Errno::EFAULT);
        };
        let offset = bo.mmap_offset;
        pdd.bos.insert(idr, bo);
        a.handle = (u64::from(a.gpu_id) << 32) | u64::from(idr);
        a.mmap_offset = if flags & KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP != 0 {
            mo::TYPE_MMIO | mo::gpu_id(a.gpu_id)
        } else {
            offset
        };
        Ok(0)
    })
}

fn free_memory_of_gpu(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_free_memory_of_gpu_args| {
        let mut st = cx.p.lock();
        if st
            .signal
            .as_ref()
            .is_some_and(|s| s.handle != 0 && s.handle == a.handle)
        {
            return Err(Errno::EPERM);
        }
        let pi = st
            .pdd_by_user_id((a.handle >> 32) as u32)
            .ok_or(Errno::EINVAL)?;
        let idr = (a.handle & 0xffff_ffff) as u32;
        let pdd = st.pdds.get_mut(pi).ok_or(Errno::EINVAL)?;
        let bo = pdd.bos.get(&idr).ok_or(Errno::EINVAL)?;
        if !bo.mapped.is_empty() {
            return Err(Errno::EBUSY);
        }
        let dev = pdd.dev;
        if let Some(bo) = pdd.bos.remove(&idr) {
            cx.p.release_bo(dev, &bo);
        }
        Ok(0)
    })
}

/// The VM mapping(s) of a BO.
pub(crate) fn vm_target(bo: &Bo) -> VmTarget {
    if let Some(b) = &bo.backing {
        VmTarget::Memory {
            backing: Arc::clone(b),
            offset: 0,
        }
    } else if let (true, Some(mem)) = (
        bo.flags & sys::KFD_IOC_ALLOC_MEM_FLAGS_USERPTR != 0,
        bo.user_mem,
    ) {
        VmTarget::User {
            cpu_addr: bo.user_addr,
            mem,
        }
    } else if bo.flags & sys::KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL != 0 {
        VmTarget::Doorbell
    } else {
        VmTarget::Mmio
    }
}

/// `amdgpu_amdkfd_gpuvm_map_memory_to_gpu` of BO `(pi, idr)` on the VM of pdd `peer`.
pub(crate) fn map_bo_on(st: &mut ProcState, pi: usize, idr: u32, peer: usize) -> Result<(), Errno> {
    let drm = st.bind(peer)?.clone();
    let peer_dev = st.pdds.get(peer).map(|p| p.dev).ok_or(Errno::EINVAL)?;
    let bo = st
        .pdds
        .get_mut(pi)
        .and_then(|p| p.bos.get_mut(&idr))
        .ok_or(Errno::ENOMEM)?;
    if bo.mapped.contains(&peer_dev) {
        return Ok(());
    }
    let writable = bo.flags & sys::KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE != 0;
    let mut vm = lock(&drm.vm);
    vm.map(
        bo.va,
        VmMapping {
            size: bo.size,
            target: vm_target(bo),
            writable,
        },
    )?;
    if bo.flags & sys::KFD_IOC_ALLOC_MEM_FLAGS_AQL_QUEUE_MEM != 0 {
        let second = VmMapping {
            size: bo.size,
            target: vm_target(bo),
            writable,
        };
        if let Err(e) = vm.map(bo.va.saturating_add(bo.size), second) {
            vm.unmap(bo.va);
            return Err(e);
        }
    }
    bo.mapped.push(peer_dev);
    Ok(())
}

fn read_gpu_ids(cx: &Cx<'_>, ptr: u64, n: u32) -> Result<Vec<u32>, Errno> {
    kmalloc_check(u64::from(n) * 4)?;
    let bytes = cx
        .read_bytes(ptr, u64::from(n) * 4)
        .map_err(|_| Errno::EFAULT)?;
    Ok(bytes.chunks_exact(4).map(|c| get_u32(c, 0)).collect())
}

fn map_memory_to_gpu(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_map_memory_to_gpu_args| {
        if a.n_devices == 0 || a.n_success > a.n_devices {
            return Err(Errno::EINVAL);
        }
        let ids = read_gpu_ids(cx, a.device_ids_array_ptr, a.n_devices)?;
        let mut st = cx.p.lock();
        let pi = st
            .pdd_by_user_id((a.handle >> 32) as u32)
            .ok_or(Errno::EINVAL)?;
        st.bind(pi)?;
        let idr = (a.handle & 0xffff_ffff) as u32;
        if !st.pdds.get(pi).is_some_and(|p| p.bos.contains_key(&idr)) {
            return Err(Errno::ENOMEM);
        }
        for (i, &id) in ids.iter().enumerate().skip(a.n_success as usize) {
            let peer = st.pdd_by_user_id(id).ok_or(Errno::EINVAL)?;
            map_bo_on(&mut st, pi, idr, peer)?;
            a.n_success = u32::try_from(i + 1).unwrap_or(u32::MAX);
        }
        Ok(0)
    })
}

fn unmap_memory_from_gpu(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_unmap_memory_from_gpu_args| {
        if a.n_devices == 0 || a.n_success > a.n_devices {
            return Err(Errno::EINVAL);
        }
        let ids = read_gpu_ids(cx, a.device_ids_array_ptr, a.n_devices)?;
        let mut st = cx.p.lock();
        let pi = st
            .pdd_by_user_id((a.handle >> 32) as u32)
            .ok_or(Errno::EINVAL)?;
        let idr = (a.handle & 0xffff_ffff) as u32;
        if !st.pdds.get(pi).is_some_and(|p| p.bos.contains_key(&idr)) {
            return Err(Errno::ENOMEM);
        }
        for (i, &id) in ids.iter().enumerate().skip(a.n_success as usize) {
            let peer = st.pdd_by_user_id(id).ok_or(Errno::EINVAL)?;
            let peer_dev = st.pdds.get(peer).map(|p| p.dev).ok_or(Errno::EINVAL)?;
            let pdds = &mut st.pdds;
            let Some(bo) = pdds.get_mut(pi).and_then(|p| p.bos.get_mut(&idr)) else {
                return Err(Errno::ENOMEM);
            };
            let Some(pos) = bo.mapped.iter().position(|&d| d == peer_dev) else {
                return Err(Errno::EINVAL);
            };
            bo.mapped.remove(pos);
            if let Some(bo) = pdds.get(pi).and_then(|p| p.bos.get(&idr)) {
                vm_unmap_bo(pdds, bo, peer_dev);
            }
            a.n_success = u32::try_from(i + 1).unwrap_or(u32::MAX);
        }
        Ok(0)
    })
}

fn set_cu_mask(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_set_cu_mask_args| {
        if a.num_cu_mask % 32 != 0 || a.num_cu_mask == 0 {
            return Err(Errno::EINVAL);
        }
        let count = a.num_cu_mask.min(1024);
        let bytes = cx
            .read_bytes(a.cu_mask_ptr, u64::from(count / 32) * 4)
            .map_err(|_| Errno::EFAULT)?;
        let mut st = cx.p.lock();
        let q = st.queues.get_mut(&a.queue_id).ok_or(Errno::EFAULT)?;
        q.cu_mask = bytes.chunks_exact(4).map(|c| get_u32(c, 0)).collect();
        Ok(0)
    })
}

/// Whether a queue is running (not evicted and with a ring).
pub(crate) fn queue_active(st: &ProcState, q: &Queue) -> bool {
    st.evictions == 0 && q.ring_size > 0 && q.ring != 0 && q.percent > 0
}

fn get_queue_wave_state(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_get_queue_wave_state_args| {
        let st = cx.p.lock();
        let q = st.queues.get(&a.queue_id).ok_or(Errno::EFAULT)?;
        if q.kind != QueueKind::Compute || queue_active(&st, q) {
            return Err(Errno::EINVAL);
        }
        cx.c.write_user(a.ctl_stack_address, &q.ctl_stack)
            .map_err(|_| Errno::EFAULT)?;
        a.ctl_stack_used_size = u32::try_from(q.ctl_stack.len()).unwrap_or(u32::MAX);
        a.save_area_used_size = 0;
        Ok(0)
    })
}

fn get_dmabuf_info(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_get_dmabuf_info_args| {
        if cx.m.devices.is_empty() {
            return Err(Errno::EINVAL);
        }
        if a.metadata_ptr != 0 {
            kmalloc_check(u64::from(a.metadata_size))?;
        }
        let key = cx.c.resolve_fd(fd_of(a.dmabuf_fd))?;
        let b = cx.m.dmabuf(key).ok_or(Errno::EINVAL)?;
        let dev = cx.m.devices.get(b.device).ok_or(Errno::EINVAL)?;
        a.size = b.size;
        a.gpu_id = dev.gpu_id;
        a.flags = match b.domain {
            crate::memory::Domain::Vram => sys::KFD_IOC_ALLOC_MEM_FLAGS_VRAM,
            crate::memory::Domain::Gtt => sys::KFD_IOC_ALLOC_MEM_FLAGS_GTT,
        };
        if b.cpu_visible {
            a.flags |= sys::KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC;
        }
        // No metadata is ever attached: nothing to copy.
        a.metadata_size = 0;
        Ok(0)
    })
}

fn import_dmabuf(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_import_dmabuf_args| {
        let key = cx.c.resolve_fd(fd_of(a.dmabuf_fd))?;
        let backing = cx.m.dmabuf(key);
        let mut st = cx.p.lock();
        let pi = st.pdd_by_user_id(a.gpu_id).ok_or(Errno::EINVAL)?;
        st.bind(pi)?;
        let b = backing.ok_or(Errno::EINVAL)?;
        let pdd = st.pdds.get_mut(pi).ok_or(Errno::EINVAL)?;
        if b.device != pdd.dev {
            return Err(Errno::EINVAL);
        }
        let domain = match b.domain {
            crate::memory::Domain::Vram => sys::KFD_IOC_ALLOC_MEM_FLAGS_VRAM,
            crate::memory::Domain::Gtt => sys::KFD_IOC_ALLOC_MEM_FLAGS_GTT,
        };
        let dev = cx.m.devices.get(pdd.dev).ok_or(Errno::EINVAL)?;
        let bo = Bo {
            va: a.va_addr,
            size: b.size,
            flags: domain
                | sys::KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE
                | sys::KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE,
            mmap_offset: dev.alloc_mmap_offset(b.size),
            user_addr: 0,
            user_mem: None,
            backing: Some(b),
            accounted: false,
            mapped: Vec::new(),
        };
        let idr = pdd.free_idr().ok_or(Errno::EFAULT)?;
        pdd.bos.insert(idr, bo);
        a.handle = (u64::from(a.gpu_id) << 32) | u64::from(idr);
        Ok(0)
    })
}

fn alloc_queue_gws(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_alloc_queue_gws_args| {
        let mut st = cx.p.lock();
        let (pi, has) = st
            .queues
            .get(&a.queue_id)
            .map(|q| (q.pdd, q.gws))
            .ok_or(Errno::EINVAL)?;
        let dev = st.pdds.get(pi).map(|p| p.dev).ok_or(Errno::EINVAL)?;
        if cx.m.devices.get(dev).is_none_or(|d| d.num_gws == 0) {
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

fn smi_events(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_smi_events_args| {
        if cx.p.lock().pdd_by_user_id(a.gpuid).is_none() {
            return Err(Errno::EINVAL);
        }
        let fd = crate::sys::memfd("kfd-sim:[kfd_smi_ev]").map_err(|e| Errno::from_io(&e))?;
        let raw = cx.c.install_fd(fd)?;
        a.anon_fd = u32::from_ne_bytes(raw.to_ne_bytes());
        Ok(0)
    })
}

const SVM_HDR: usize = 24;
const SVM_ATTR: usize = 8;
const SVM_UNDEFINED: u32 = sys::KFD_IOCTL_SVM_LOCATION_UNDEFINED;
const SVM_DEFAULT_FLAGS: u32 =
    sys::KFD_IOCTL_SVM_FLAG_HOST_ACCESS | sys::KFD_IOCTL_SVM_FLAG_COHERENT;

/// A range with default attributes.
pub(crate) fn svm_default(st: &ProcState, start: u64, end: u64) -> SvmRange {
    let access = if st.xnack {
        SvmAccess::Access
    } else {
        SvmAccess::None
    };
    SvmRange {
        start,
        size: end - start,
        preferred: SVM_UNDEFINED,
        prefetch: SVM_UNDEFINED,
        flags: SVM_DEFAULT_FLAGS,
        granularity: 9,
        access: vec![access; st.pdds.len()],
    }
}

/// `svm_range_is_valid`: the range must be mapped in the caller and not overlap a BO mapping.
fn svm_range_valid(cx: &Cx<'_>, st: &ProcState, start: u64, end: u64) -> Result<(), Errno> {
    let mut probe = [0u8; 1];
    // The first and last byte must be mapped (a simulator approximation of the VMA walk).
    cx.c.read_user(start, &mut probe)
        .map_err(|_| Errno::EFAULT)?;
    cx.c.read_user(end - 1, &mut probe)
        .map_err(|_| Errno::EFAULT)?;
    for pdd in &st.pdds {
        if let Some(drm) = &pdd.drm {
            let vm = lock(&drm.vm);
            if vm
                .mappings()
                .any(|(va, m)| va < end && start < va.saturating_add(m.size))
            {
                return Err(Errno::EADDRINUSE);
            }
        }
    }
    Ok(())
}

/// Applies SET_ATTR attributes to `[start, end)`, splitting existing ranges at the borders.
pub(crate) fn svm_apply(st: &mut ProcState, start: u64, end: u64, attrs: &[(u32, u32)]) {
    let old = std::mem::take(&mut st.svm);
    let mut keep = Vec::new();
    let mut inside = Vec::new();
    for r in old {
        if r.end() <= start || r.start >= end {
            keep.push(r);
            continue;
        }
        if r.start < start {
            keep.push(SvmRange {
                size: start - r.start,
                ..r.clone()
            });
        }
        if r.end() > end {
            keep.push(SvmRange {
                start: end,
                size: r.end() - end,
                ..r.clone()
            });
        }
        let s = r.start.max(start);
        let e = r.end().min(end);
        inside.push(SvmRange {
            start: s,
            size: e - s,
            ..r
        });
    }
    // Gaps become new ranges with default attributes.
    inside.sort_by_key(|r| r.start);
    let mut cursor = start;
    let mut gaps = Vec::new();
    for r in &inside {
        if r.start > cursor {
            gaps.push(svm_default(st, cursor, r.start));
        }
        cursor = r.end();
    }
    if cursor < end {
        gaps.push(svm_default(st, cursor, end));
    }
    inside.extend(gaps);
    for r in &mut inside {
        for &(ty, value) in attrs {
            match ty {
                sys::KFD_IOCTL_SVM_ATTR_PREFERRED_LOC => r.preferred = value,
                sys::KFD_IOCTL_SVM_ATTR_PREFETCH_LOC => r.prefetch = value,
                sys::KFD_IOCTL_SVM_ATTR_ACCESS
                | sys::KFD_IOCTL_SVM_ATTR_ACCESS_IN_PLACE
                | sys::KFD_IOCTL_SVM_ATTR_NO_ACCESS => {
                    if let Some(slot) = st.pdd_by_user_id(value).and_then(|i| r.access.get_mut(i)) {
                        *slot = match ty {
                            sys::KFD_IOCTL_SVM_ATTR_ACCESS => SvmAccess::Access,
                            sys::KFD_IOCTL_SVM_ATTR_ACCESS_IN_PLACE => SvmAccess::InPlace,
                            _ => SvmAccess::None,
                        };
                    }
                }
                sys::KFD_IOCTL_SVM_ATTR_SET_FLAGS => r.flags |= value,
                sys::KFD_IOCTL_SVM_ATTR_CLR_FLAGS => r.flags &= !value,
                sys::KFD_IOCTL_SVM_ATTR_GRANULARITY => r.granularity = value.min(0x3f),
                _ => {}
            }
        }
    }
    keep.extend(inside);
    keep.sort_by_key(|r| r.start);
    st.svm = keep;
}

fn svm_location_ok(st: &ProcState, v: u32) -> bool {
    v == sys::KFD_IOCTL_SVM_LOCATION_SYSMEM || v == SVM_UNDEFINED || st.pdd_by_user_id(v).is_some()
}

fn svm(cx: &Cx<'_>, k: &mut [u8]) -> R {
    let start = get_u64(k, 0) >> 12;
    let npages = get_u64(k, 8) >> 12;
    let op = get_u32(k, 16);
    let nattr = get_u32(k, 20) as usize;
    // The attributes travel in the ioctl buffer: its size (from the caller's code) must hold them.
    let attr_end = nattr
        .checked_mul(SVM_ATTR)
        .and_then(|n| n.checked_add(SVM_HDR));
    let Some(attr_end) = attr_end.filter(|&e| e <= k.len()) else {
        return Err(Errno::EINVAL);
    };
    let attrs: Vec<(u32, u32)> = (SVM_HDR..attr_end)
        .step_by(SVM_ATTR)
        .map(|off| (get_u32(k, off), get_u32(k, off + 4)))
        .collect();
    let r = svm_op(cx, start, npages, op, &attrs, k);
    put_u64(k, 0, start << 12);
    put_u64(k, 8, npages << 12);
    r
}

fn svm_op(
    cx: &Cx<'_>,
    start_p: u64,
    npages: u64,
    op: u32,
    attrs: &[(u32, u32)],
    k: &mut [u8],
) -> R {
    let start = start_p << 12;
    let end = start_p
        .checked_add(npages)
        .and_then(|e| e.checked_mul(4096))
        .ok_or(Errno::EINVAL)?;
    if npages == 0 || !access_ok(start, npages << 12) {
        return Err(Errno::EINVAL);
    }
    let mut st = cx.p.lock();
    match op {
        sys::KFD_IOCTL_SVM_OP_SET_ATTR => {
            for &(ty, v) in attrs {
                let ok = match ty {
                    sys::KFD_IOCTL_SVM_ATTR_PREFERRED_LOC
                    | sys::KFD_IOCTL_SVM_ATTR_PREFETCH_LOC => svm_location_ok(&st, v),
                    sys::KFD_IOCTL_SVM_ATTR_ACCESS
                    | sys::KFD_IOCTL_SVM_ATTR_ACCESS_IN_PLACE
                    | sys::KFD_IOCTL_SVM_ATTR_NO_ACCESS => st.pdd_by_user_id(v).is_some(),
                    sys::KFD_IOCTL_SVM_ATTR_SET_FLAGS
                    | sys::KFD_IOCTL_SVM_ATTR_CLR_FLAGS
                    | sys::KFD_IOCTL_SVM_ATTR_GRANULARITY => true,
                    _ => false,
                };
                if !ok {
                    return Err(Errno::EINVAL);
                }
            }
            svm_range_valid(cx, &st, start, end)?;
            svm_apply(&mut st, start, end, attrs);
            Ok(0)
        }
        sys::KFD_IOCTL_SVM_OP_GET_ATTR => {
            for &(ty, _) in attrs {
                if ty > sys::KFD_IOCTL_SVM_ATTR_GRANULARITY {
                    return Err(Errno::EINVAL);
                }
            }
            svm_range_valid(cx, &st, start, end)?;
            let found: Vec<&SvmRange> = st
                .svm
                .iter()
                .filter(|r| r.start < end && start < r.end())
                .collect();
            let default = svm_default(&st, start, end);
            let ranges: Vec<&SvmRange> = if found.is_empty() {
                vec![&default]
            } else {
                found
            };
            let first = ranges.first().copied().unwrap_or(&default);
            let same = |f: fn(&SvmRange) -> u32| {
                let v = f(first);
                if ranges.iter().all(|r| f(r) == v) {
                    v
                } else {
                    SVM_UNDEFINED
                }
            };
            let location = same(|r| r.preferred);
            let prefetch = same(|r| r.prefetch);
            let flags_and = ranges.iter().fold(u32::MAX, |acc, r| acc & r.flags);
            let flags_or = ranges.iter().fold(0, |acc, r| acc | r.flags);
            let granularity = ranges.iter().map(|r| r.granularity).min().unwrap_or(9);
            let mut out = Vec::with_capacity(attrs.len());
            for &(ty, v) in attrs {
                let (ty, v) = match ty {
                    sys::KFD_IOCTL_SVM_ATTR_PREFERRED_LOC => (ty, location),
                    sys::KFD_IOCTL_SVM_ATTR_PREFETCH_LOC => (ty, prefetch),
                    sys::KFD_IOCTL_SVM_ATTR_ACCESS
                    | sys::KFD_IOCTL_SVM_ATTR_ACCESS_IN_PLACE
                    | sys::KFD_IOCTL_SVM_ATTR_NO_ACCESS => {
                        let gi = st.pdd_by_user_id(v).ok_or(Errno::EINVAL)?;
                        let all =
                            |a: SvmAccess| ranges.iter().all(|r| r.access.get(gi) == Some(&a));
                        let t = if all(SvmAccess::InPlace) {
                            sys::KFD_IOCTL_SVM_ATTR_ACCESS_IN_PLACE
                        } else if ranges
                            .iter()
                            .all(|r| r.access.get(gi).is_some_and(|&a| a != SvmAccess::None))
                        {
                            sys::KFD_IOCTL_SVM_ATTR_ACCESS
                        } else {
                            sys::KFD_IOCTL_SVM_ATTR_NO_ACCESS
                        };
                        (t, v)
                    }
                    sys::KFD_IOCTL_SVM_ATTR_SET_FLAGS => (ty, flags_and),
                    sys::KFD_IOCTL_SVM_ATTR_CLR_FLAGS => (ty, !flags_or),
                    _ => (ty, granularity),
                };
                out.push((ty, v));
            }
            for (i, (ty, v)) in out.into_iter().enumerate() {
                put_u32(k, SVM_HDR + i * SVM_ATTR, ty);
                put_u32(k, SVM_HDR + i * SVM_ATTR + 4, v);
            }
            Ok(0)
        }
        _ => Err(Errno::EINVAL),
    }
}

/// XNACK can be enabled per process only if every GPU supports it (gfx90a).
pub(crate) fn xnack_supported(m: &MachineInner) -> bool {
    m.devices.iter().all(|d| d.gfx_target_version == 90010)
}

fn set_xnack_mode(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_set_xnack_mode_args| {
        let mut st = cx.p.lock();
        if a.xnack_enabled >= 0 {
            if !st.queues.is_empty() {
                return Err(Errno::EBUSY);
            }
            if a.xnack_enabled != 0 && !xnack_supported(cx.m) {
                return Err(Errno::EPERM);
            }
            st.xnack = a.xnack_enabled != 0;
        } else {
            a.xnack_enabled = i32::from(st.xnack);
        }
        Ok(0)
    })
}

fn available_memory(cx: &Cx<'_>, k: &mut [u8]) -> R {
    args(k, |a: &mut sys::kfd_ioctl_get_available_memory_args| {
        let st = cx.p.lock();
        let pi = st.pdd_by_user_id(a.gpu_id).ok_or(Errno::EINVAL)?;
        let dev = st
            .pdds
            .get(pi)
            .and_then(|p| cx.m.devices.get(p.dev))
            .ok_or(Errno::EINVAL)?;
        let used = lock(&dev.state).vram_used;
        a.available = dev.vram_size.saturating_sub(used) & !(VRAM_AVAILABILITY_ALIGN - 1);
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::doorbell_reserved;

    #[test]
    fn table_matches_the_kernel_numbering() {
        assert_eq!(HANDLERS.len(), kfd::TABLE.len());
        for (i, d) in kfd::TABLE.iter().enumerate() {
            assert_eq!(usize::from(d.nr), i + 1, "{}", d.name);
        }
    }

    #[test]
    fn reserved_doorbells_are_the_sdma_window_and_its_mirror() {
        assert!(doorbell_reserved(0xe0) && doorbell_reserved(0xff) && doorbell_reserved(0x2e0));
        assert!(!doorbell_reserved(0) && !doorbell_reserved(0x100) && !doorbell_reserved(0x1e0));
        for e in 0..8 {
            for q in 0..8 {
                assert!(doorbell_reserved(sdma_doorbell_id(e, q)));
            }
        }
    }
}
