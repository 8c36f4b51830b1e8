//! `AMDKFD_IOC_CRIU_OP`: PROCESS_INFO, CHECKPOINT, UNPAUSE, RESTORE, RESUME, with the kernel's
//! preconditions and errno, and `priv_data` in the kernel's version-1 layout byte for byte.
//!
//! Layout (all little endian):
//! - process record: `{u32 version = 1; u32 xnack_mode}`;
//! - one reserved `u64` per device;
//! - one 80-byte record per BO: `{u64 user_addr; u32 idr_handle; u32 mapped_gpuids[16]}`;
//! - `num_objects` records, each starting with a `u32` object type: queues (120-byte header,
//!   then the MQD, then the control stack), events (64 bytes), SVM ranges (24-byte header, then
//!   `4 + num_devices` attributes of 8 bytes).

use std::mem::{offset_of, size_of};
use std::os::fd::OwnedFd;
use std::sync::Arc;

use kfd_abi::mmap_offset as mo;
use kfd_abi::Errno;
use kfd_sys as sys;

use super::apertures::{bind_vm, xnack_supported};
use super::events::{create_event_locked, kmap_event_page};
use super::memory::{map_bo_on, new_bo};
use super::queues::{create_queue_locked, QueueRestore};
use super::svm::svm_apply;
use super::{kmalloc_check, KfdCall};
use crate::client::{Client, FdSlot};
use crate::host::Pod;
use crate::hw::cp::cwsr;
use crate::limits::*;
use crate::state::process::ProcState;
use crate::state::queue::{Queue, QueueKind};
use crate::state::svm_range::SvmAccess;
use crate::uaccess::{
    copy_from_user, copy_to_user, fd_from_field, fd_to_field, get_u32, get_u64, put_u32, put_u64,
    struct_bytes, IoctlResult,
};

/// `KFD_CRIU_PRIV_VERSION`.
pub const PRIV_VERSION: u32 = 1;
/// `MAX_GPU_INSTANCE` of 6.1.
pub const MAX_GPU_INSTANCE: usize = 16;
/// Size of the process record.
pub const PROCESS_PRIV_SIZE: usize = 8;
/// Size of a device record.
pub const DEVICE_PRIV_SIZE: usize = 8;
/// Size of a BO record.
pub const BO_PRIV_SIZE: usize = 8 + 4 + 4 * MAX_GPU_INSTANCE;
/// Size of a queue record's header.
pub const QUEUE_PRIV_SIZE: usize = 120;
/// Size of an event record.
pub const EVENT_PRIV_SIZE: usize = 64;
/// Size of an SVM range record's header.
pub const SVM_PRIV_SIZE: usize = 24;
/// Object types.
pub const OBJECT_QUEUE: u32 = 0;
/// Event object.
pub const OBJECT_EVENT: u32 = 1;
/// SVM range object.
pub const OBJECT_SVM_RANGE: u32 = 2;

/// Size of a `kfd_criu_device_bucket`.
const DEVICE_BUCKET_SIZE: usize = size_of::<sys::kfd_criu_device_bucket>();
/// Size of a `kfd_criu_bo_bucket`.
const BO_BUCKET_SIZE: usize = size_of::<sys::kfd_criu_bo_bucket>();

/// Offsets in a queue record header.
mod q {
    pub(super) const OBJECT_TYPE: usize = 0;
    pub(super) const Q_ADDRESS: usize = 8;
    pub(super) const Q_SIZE: usize = 16;
    pub(super) const READ_PTR: usize = 24;
    pub(super) const WRITE_PTR: usize = 32;
    pub(super) const DOORBELL_OFF: usize = 40;
    pub(super) const EOP_ADDRESS: usize = 48;
    pub(super) const CTX_ADDRESS: usize = 56;
    pub(super) const GPU_ID: usize = 64;
    pub(super) const TYPE: usize = 68;
    pub(super) const FORMAT: usize = 72;
    pub(super) const Q_ID: usize = 76;
    pub(super) const PRIORITY: usize = 80;
    pub(super) const Q_PERCENT: usize = 84;
    pub(super) const DOORBELL_ID: usize = 88;
    pub(super) const GWS: usize = 92;
    pub(super) const SDMA_ID: usize = 96;
    pub(super) const EOP_SIZE: usize = 100;
    pub(super) const CTX_SIZE: usize = 104;
    pub(super) const CTL_STACK_SIZE: usize = 108;
    pub(super) const MQD_SIZE: usize = 112;
}

/// Offsets in an event record.
mod ev {
    pub(super) const USER_HANDLE: usize = 8;
    pub(super) const EVENT_ID: usize = 16;
    pub(super) const AUTO_RESET: usize = 20;
    pub(super) const TYPE: usize = 24;
    pub(super) const SIGNALED: usize = 28;
    pub(super) const EXCEPTION: usize = 32;
}

/// `kfd_ioctl_criu_args`, decoded field by field (the struct has tail padding, so it is not
/// [`Pod`]).
#[derive(Debug, Default)]
struct CriuArgs {
    devices: u64,
    bos: u64,
    priv_data: u64,
    priv_data_size: u64,
    num_devices: u32,
    num_bos: u32,
    num_objects: u32,
    pid: u32,
    op: u32,
}

/// The byte offset of a field of `kfd_ioctl_criu_args`.
macro_rules! at {
    ($field:ident) => {
        offset_of!(sys::kfd_ioctl_criu_args, $field)
    };
}

impl CriuArgs {
    fn load(kdata: &[u8]) -> Self {
        Self {
            devices: get_u64(kdata, at!(devices)),
            bos: get_u64(kdata, at!(bos)),
            priv_data: get_u64(kdata, at!(priv_data)),
            priv_data_size: get_u64(kdata, at!(priv_data_size)),
            num_devices: get_u32(kdata, at!(num_devices)),
            num_bos: get_u32(kdata, at!(num_bos)),
            num_objects: get_u32(kdata, at!(num_objects)),
            pid: get_u32(kdata, at!(pid)),
            op: get_u32(kdata, at!(op)),
        }
    }

    fn store(&self, kdata: &mut [u8]) {
        put_u64(kdata, at!(devices), self.devices);
        put_u64(kdata, at!(bos), self.bos);
        put_u64(kdata, at!(priv_data), self.priv_data);
        put_u64(kdata, at!(priv_data_size), self.priv_data_size);
        put_u32(kdata, at!(num_devices), self.num_devices);
        put_u32(kdata, at!(num_bos), self.num_bos);
        put_u32(kdata, at!(num_objects), self.num_objects);
        put_u32(kdata, at!(pid), self.pid);
        put_u32(kdata, at!(op), self.op);
    }
}

/// `kfd_ioctl_criu`.
pub(super) fn criu_op(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    let mut a = CriuArgs::load(kdata);
    let r = match a.op {
        sys::KFD_CRIU_OP_PROCESS_INFO => process_info(call, &mut a),
        sys::KFD_CRIU_OP_CHECKPOINT => checkpoint(call, &a),
        sys::KFD_CRIU_OP_UNPAUSE => unpause(call),
        sys::KFD_CRIU_OP_RESTORE => restore(call, &a),
        sys::KFD_CRIU_OP_RESUME => resume(call, &a),
        _ => Err(Errno::EINVAL),
    };
    a.store(kdata);
    r
}

struct ObjectInfo {
    num_devices: u32,
    num_bos: u32,
    num_objects: u32,
    priv_size: u64,
}

fn len32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn object_info(st: &ProcState) -> ObjectInfo {
    let ndev = st.pdds.len() as u64;
    let nbos = st.criu_bo_count() as u64;
    let queues: u64 = st
        .queues
        .values()
        .map(|q| QUEUE_PRIV_SIZE as u64 + q.mqd.len() as u64 + q.ctl_stack.len() as u64)
        .sum();
    let nev = st.events.len() as u64;
    let svm = st.svm.len() as u64 * (SVM_PRIV_SIZE as u64 + 8 * (4 + ndev));
    ObjectInfo {
        num_devices: len32(st.pdds.len()),
        num_bos: len32(st.criu_bo_count()),
        num_objects: len32(st.queues.len() + st.events.len() + st.svm.len()),
        priv_size: PROCESS_PRIV_SIZE as u64
            + DEVICE_PRIV_SIZE as u64 * ndev
            + BO_PRIV_SIZE as u64 * nbos
            + queues
            + EVENT_PRIV_SIZE as u64 * nev
            + svm,
    }
}

fn process_info(call: &KfdCall<'_>, a: &mut CriuArgs) -> IoctlResult {
    let mut st = call.process.lock();
    if st.pdds.is_empty() {
        return Err(Errno::ENODEV);
    }
    // Evict the queues (counted) and mark the process paused.
    st.evictions += 1;
    st.queues_paused = true;
    log::info!(
        "kfd-sim: pid {}: queues paused (CRIU PROCESS_INFO)",
        call.process.pid
    );
    // The target's pid in its own pid namespace, as the driver reports it (a container's task
    // gets its pid inside the container; criu looks the restored task up by that pid).
    a.pid = call.client.pid_in_own_namespace(call.process.pid);
    let info = object_info(&st);
    a.num_devices = info.num_devices;
    a.num_bos = info.num_bos;
    a.num_objects = info.num_objects;
    a.priv_data_size = info.priv_size;
    drop(st);
    // The queues are preempted: the SDMA engine finishes the packet it is running, if any; the
    // command processors stop their waves, which go into the context save areas.
    crate::hw::runlist::wait_idle(call.process);
    crate::hw::cp::save_waves(call.process);
    // What the eviction caught in flight: the AQL queues whose control stack now holds a
    // dispatch (GET_QUEUE_WAVE_STATE would report it).
    let saved = call
        .process
        .lock()
        .queues
        .values()
        .filter(|q| q.cwsr_mqd() && cwsr::regs_used(&q.mqd, q.ctl_stack.len()).0 > 0)
        .count();
    log::info!(
        "kfd-sim: pid {}: {saved} dispatch(es) in flight saved at the pause",
        call.process.pid
    );
    Ok(0)
}

fn unpause(call: &KfdCall<'_>) -> IoctlResult {
    let mut st = call.process.lock();
    if !st.queues_paused {
        return Err(Errno::EINVAL);
    }
    st.evictions = st.evictions.saturating_sub(1);
    st.queues_paused = false;
    log::info!(
        "kfd-sim: pid {}: queues running (CRIU UNPAUSE)",
        call.process.pid
    );
    Ok(0)
}

/// The dma-buf fds one CRIU_OP has installed in the caller so far. Dropped before
/// [`keep`](Self::keep), it closes them again: every failure of the op after its first
/// `fd_install` takes them back, as the driver closes the fds it installed when CHECKPOINT or
/// RESTORE fails.
struct InstalledFds<'a> {
    client: &'a dyn Client,
    fds: Vec<i32>,
}

impl<'a> InstalledFds<'a> {
    fn new(client: &'a dyn Client) -> Self {
        Self {
            client,
            fds: Vec::new(),
        }
    }

    /// `fd_install` of `fd` in the caller; its number as a bucket's `dmabuf_fd` carries it, at
    /// `slot` of the caller's memory.
    fn install(&mut self, fd: OwnedFd, slot: FdSlot) -> Result<u32, Errno> {
        let raw = self.client.install_fd_at(fd, slot)?;
        self.fds.push(raw);
        Ok(fd_to_field(raw))
    }

    /// The op succeeded: the fds stay with the caller.
    fn keep(mut self) {
        self.fds.clear();
    }
}

impl Drop for InstalledFds<'_> {
    fn drop(&mut self) {
        for &fd in &self.fds {
            self.client.uninstall_fd(fd);
        }
    }
}

/// Serialises the queue, event and SVM records.
fn write_objects(st: &ProcState, out: &mut Vec<u8>) {
    for (&qid, qu) in &st.queues {
        let mut h = [0u8; QUEUE_PRIV_SIZE];
        let user_gpu_id = st.pdds.get(qu.pdd).map_or(0, |p| p.user_gpu_id);
        put_u32(&mut h, q::OBJECT_TYPE, OBJECT_QUEUE);
        put_u64(&mut h, q::Q_ADDRESS, qu.ring);
        put_u64(&mut h, q::Q_SIZE, qu.ring_size);
        put_u64(&mut h, q::READ_PTR, qu.rptr);
        put_u64(&mut h, q::WRITE_PTR, qu.wptr);
        put_u64(&mut h, q::DOORBELL_OFF, qu.doorbell_off);
        put_u64(&mut h, q::EOP_ADDRESS, qu.eop);
        put_u64(&mut h, q::CTX_ADDRESS, qu.ctx);
        put_u32(&mut h, q::GPU_ID, user_gpu_id);
        put_u32(&mut h, q::TYPE, qu.kind.internal());
        put_u32(&mut h, q::FORMAT, u32::from(qu.aql));
        put_u32(&mut h, q::Q_ID, qid);
        put_u32(&mut h, q::PRIORITY, qu.priority);
        put_u32(&mut h, q::Q_PERCENT, qu.percent);
        put_u32(&mut h, q::DOORBELL_ID, qu.doorbell_id);
        put_u32(&mut h, q::GWS, u32::from(qu.gws));
        put_u32(&mut h, q::SDMA_ID, qu.sdma_id);
        put_u32(&mut h, q::EOP_SIZE, qu.eop_size);
        put_u32(&mut h, q::CTX_SIZE, qu.ctx_size);
        put_u32(&mut h, q::CTL_STACK_SIZE, len32(qu.ctl_stack.len()));
        put_u32(&mut h, q::MQD_SIZE, len32(qu.mqd.len()));
        out.extend_from_slice(&h);
        out.extend_from_slice(&qu.mqd);
        out.extend_from_slice(&qu.ctl_stack);
    }
    for (i, (&id, e)) in st.events.iter().enumerate() {
        let mut r = [0u8; EVENT_PRIV_SIZE];
        put_u32(&mut r, 0, OBJECT_EVENT);
        if i == 0 {
            put_u64(
                &mut r,
                ev::USER_HANDLE,
                st.signal.as_ref().map_or(0, |s| s.handle),
            );
        }
        put_u32(&mut r, ev::EVENT_ID, id);
        put_u32(&mut r, ev::AUTO_RESET, u32::from(e.auto_reset));
        put_u32(&mut r, ev::TYPE, e.ty);
        put_u32(&mut r, ev::SIGNALED, u32::from(e.signaled));
        r[ev::EXCEPTION..].copy_from_slice(&e.exception);
        out.extend_from_slice(&r);
    }
    for range in &st.svm {
        let mut h = [0u8; SVM_PRIV_SIZE];
        put_u32(&mut h, 0, OBJECT_SVM_RANGE);
        put_u64(&mut h, 8, range.start);
        put_u64(&mut h, 16, range.size);
        out.extend_from_slice(&h);
        let mut attr = |ty: u32, v: u32| {
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&v.to_le_bytes());
        };
        attr(sys::KFD_IOCTL_SVM_ATTR_PREFERRED_LOC, range.preferred);
        attr(sys::KFD_IOCTL_SVM_ATTR_PREFETCH_LOC, range.prefetch);
        attr(sys::KFD_IOCTL_SVM_ATTR_SET_FLAGS, range.flags);
        attr(sys::KFD_IOCTL_SVM_ATTR_GRANULARITY, range.granularity);
        for (pdd, acc) in st.pdds.iter().zip(&range.access) {
            let ty = match acc {
                SvmAccess::Access => sys::KFD_IOCTL_SVM_ATTR_ACCESS,
                SvmAccess::InPlace => sys::KFD_IOCTL_SVM_ATTR_ACCESS_IN_PLACE,
                SvmAccess::None => sys::KFD_IOCTL_SVM_ATTR_NO_ACCESS,
            };
            attr(ty, pdd.user_gpu_id);
        }
    }
}

fn checkpoint(call: &KfdCall<'_>, a: &CriuArgs) -> IoctlResult {
    if a.devices == 0 || a.bos == 0 || a.priv_data == 0 {
        return Err(Errno::EINVAL);
    }
    let mut st = call.process.lock();
    if st.pdds.is_empty() {
        return Err(Errno::ENODEV);
    }
    if !st.queues_paused {
        return Err(Errno::EINVAL);
    }
    // The MQDs hold the ring pointers: what was submitted through a doorbell is latched first.
    crate::hw::scheduler::latch_doorbells(
        call.process.pid,
        &mut super::runlist::ProcessQueues {
            process: call.process,
            st: &mut st,
        },
    );
    for (&qid, qu) in st.queues.iter_mut() {
        if qu.kind != QueueKind::Compute || qu.aql {
            qu.refresh_mqd(qid);
        }
    }
    let info = object_info(&st);
    if info.num_devices != a.num_devices
        || info.num_bos != a.num_bos
        || info.num_objects != a.num_objects
        || info.priv_size != a.priv_data_size
    {
        return Err(Errno::EINVAL);
    }
    let mut priv_data = Vec::new();
    priv_data.extend_from_slice(&PRIV_VERSION.to_le_bytes());
    priv_data.extend_from_slice(&u32::from(st.xnack).to_le_bytes());
    let mut dev_buckets = Vec::new();
    for pdd in &st.pdds {
        let actual = call.machine.devices.get(pdd.dev).map_or(0, |d| d.gpu_id);
        dev_buckets.extend(struct_bytes(&sys::kfd_criu_device_bucket {
            user_gpu_id: pdd.user_gpu_id,
            actual_gpu_id: actual,
            drm_fd: 0,
            pad: 0,
        }));
        priv_data.extend_from_slice(&[0u8; DEVICE_PRIV_SIZE]);
    }
    copy_to_user(call.client, a.devices, &dev_buckets)?;

    // BO records (the buckets get their dma-buf fds last).
    let mut buckets = Vec::new();
    let mut exports = Vec::new();
    for pdd in &st.pdds {
        let actual = call.machine.devices.get(pdd.dev).map_or(0, |d| d.gpu_id);
        for (&idr, bo) in pdd.bos.iter().filter(|(_, b)| b.va > GPUVM_BASE) {
            let offset = if bo.flags & sys::KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL != 0 {
                mo::TYPE_DOORBELL | mo::gpu_id(actual)
            } else if bo.flags & sys::KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP != 0 {
                mo::TYPE_MMIO | mo::gpu_id(actual)
            } else {
                bo.mmap_offset
            };
            buckets.push(sys::kfd_criu_bo_bucket {
                addr: bo.va,
                size: bo.size,
                offset,
                restored_offset: 0,
                gpu_id: pdd.user_gpu_id,
                alloc_flags: bo.flags,
                dmabuf_fd: sys::KFD_INVALID_FD,
                pad: 0,
            });
            exports.push(bo.backing.as_ref().map(|b| {
                (
                    Arc::clone(b),
                    bo.flags & sys::KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE != 0,
                )
            }));
            let mut rec = [0u8; BO_PRIV_SIZE];
            let user_addr = if bo.flags & sys::KFD_IOC_ALLOC_MEM_FLAGS_USERPTR != 0 {
                bo.user_addr
            } else {
                0
            };
            put_u64(&mut rec, 0, user_addr);
            put_u32(&mut rec, 8, idr);
            let mapped = st
                .pdds
                .iter()
                .filter(|p| bo.mapped.contains(&p.dev))
                .take(MAX_GPU_INSTANCE);
            for (j, p) in mapped.enumerate() {
                put_u32(&mut rec, 12 + 4 * j, p.user_gpu_id);
            }
            priv_data.extend_from_slice(&rec);
        }
    }
    write_objects(&st, &mut priv_data);
    drop(st);
    copy_to_user(call.client, a.priv_data, &priv_data)?;

    // The last step that can fail: install the dma-bufs and copy the buckets out.
    let mut installed = InstalledFds::new(call.client);
    for (i, (bucket, export)) in buckets.iter_mut().zip(exports).enumerate() {
        let Some((backing, writable)) = export else {
            continue;
        };
        let fd = backing.export(writable).map_err(|e| Errno::from_io(&e))?;
        bucket.dmabuf_fd = installed.install(fd, dmabuf_fd_slot(a.bos, i))?;
    }
    let bytes: Vec<u8> = buckets.iter().flat_map(struct_bytes).collect();
    copy_to_user(call.client, a.bos, &bytes)?;
    installed.keep();
    Ok(0)
}

/// Where the dma-buf fd of BO bucket `i` of the array at `bos` is written.
fn dmabuf_fd_slot(bos: u64, i: usize) -> FdSlot {
    let at = i
        .saturating_mul(BO_BUCKET_SIZE)
        .saturating_add(std::mem::offset_of!(sys::kfd_criu_bo_bucket, dmabuf_fd));
    FdSlot::User(bos.wrapping_add(u64::try_from(at).unwrap_or(u64::MAX)))
}

/// Reads priv_data records from user memory with the kernel's bounds checks.
struct PrivReader<'a> {
    client: &'a dyn Client,
    base: u64,
    max: u64,
    off: u64,
}

impl PrivReader<'_> {
    /// `EINVAL` if `len` more bytes would pass the declared size.
    fn check(&self, len: u64) -> Result<(), Errno> {
        match self.off.checked_add(len) {
            Some(end) if end <= self.max => Ok(()),
            _ => Err(Errno::EINVAL),
        }
    }

    /// The next `len` bytes, without consuming them.
    fn peek(&self, len: u64) -> Result<Vec<u8>, Errno> {
        self.check(len)?;
        let at = self.base.checked_add(self.off).ok_or(Errno::EFAULT)?;
        copy_from_user(self.client, at, len).map_err(|_| Errno::EFAULT)
    }

    /// The next `len` bytes.
    fn take(&mut self, len: u64) -> Result<Vec<u8>, Errno> {
        let b = self.peek(len)?;
        self.off += len;
        Ok(b)
    }

    /// The type of the object record that comes next (its first `u32`).
    fn peek_object_type(&self) -> Result<u32, Errno> {
        Ok(get_u32(&self.peek(4)?, 0))
    }
}

/// `criu_restore`: process record, devices, BOs, objects, then the size check, each step failing
/// with the driver's errno.
///
/// On failure, nothing outside the restoring process is left changed: the dma-buf fds installed
/// for its BOs are closed again (in process and over CUSE alike). What the steps before the
/// failure did to the restoring KFD process itself stays, as in the 6.1 driver, which does not
/// roll back (recorded user gpu ids, VMs taken from render nodes, BOs, queues and events, the
/// eviction); it all goes with the process, and VRAM, SDMA slots and doorbells with it.
fn restore(call: &KfdCall<'_>, a: &CriuArgs) -> IoctlResult {
    // A process without BOs is restored (6.1.y stable): the BO array is needed only when there
    // are BOs (6.1.0 refused num_bos 0).
    if (a.num_bos > 0 && a.bos == 0)
        || a.devices == 0
        || a.priv_data == 0
        || a.priv_data_size == 0
        || a.num_devices == 0
    {
        return Err(Errno::EINVAL);
    }
    let mut st = call.process.lock();
    // Queues stay evicted until RESUME.
    st.evictions += 1;
    let mut rd = PrivReader {
        client: call.client,
        base: a.priv_data,
        max: a.priv_data_size,
        off: 0,
    };

    // Process record.
    let rec = rd.take(PROCESS_PRIV_SIZE as u64)?;
    if get_u32(&rec, 0) != PRIV_VERSION {
        return Err(Errno::EINVAL);
    }
    let xnack = get_u32(&rec, 4) != 0;
    if xnack && !xnack_supported(call.machine) {
        return Err(Errno::EPERM);
    }
    st.xnack = xnack;

    // Devices.
    if a.num_devices as usize != st.pdds.len() {
        return Err(Errno::EINVAL);
    }
    rd.check(DEVICE_PRIV_SIZE as u64 * u64::from(a.num_devices))?;
    let device_buckets = DEVICE_BUCKET_SIZE as u64 * u64::from(a.num_devices);
    kmalloc_check(device_buckets)?;
    let raw = copy_from_user(call.client, a.devices, device_buckets).map_err(|_| Errno::EFAULT)?;
    for chunk in raw.chunks_exact(DEVICE_BUCKET_SIZE) {
        let b = sys::kfd_criu_device_bucket::read_from(chunk).ok_or(Errno::EFAULT)?;
        if b.user_gpu_id == 0 {
            return Err(Errno::EINVAL);
        }
        let dev = call
            .machine
            .device_by_gpu_id(b.actual_gpu_id)
            .ok_or(Errno::EINVAL)?;
        let pi = st
            .pdds
            .iter()
            .position(|p| p.dev == dev)
            .ok_or(Errno::EINVAL)?;
        // A GPU whose VM is already taken is refused before its bucket changes anything: the
        // id the process knows it by stays (6.1.y checks `pdd->drm_file` first).
        if st.pdds.get(pi).is_some_and(|p| p.drm.is_some()) {
            return Err(Errno::EINVAL);
        }
        if let Some(p) = st.pdds.get_mut(pi) {
            p.user_gpu_id = b.user_gpu_id;
        }
        let key = call
            .client
            .resolve_fd(fd_from_field(b.drm_fd))
            .map_err(|_| Errno::EINVAL)?;
        bind_vm(call, &mut st, pi, key, call.process.pid).map_err(|_| Errno::EINVAL)?;
    }
    rd.off += DEVICE_PRIV_SIZE as u64 * u64::from(a.num_devices);

    // BOs.
    let nbos = u64::from(a.num_bos);
    rd.check(BO_PRIV_SIZE as u64 * nbos)?;
    st.restore_pending = true;
    let bo_buckets = BO_BUCKET_SIZE as u64 * nbos;
    if bo_buckets > KVMALLOC_MAX {
        return Err(Errno::ENOMEM);
    }
    let raw = copy_from_user(call.client, a.bos, bo_buckets).map_err(|_| Errno::EFAULT)?;
    let mut buckets: Vec<sys::kfd_criu_bo_bucket> = raw
        .chunks_exact(BO_BUCKET_SIZE)
        .filter_map(sys::kfd_criu_bo_bucket::read_from)
        .collect();
    let privs = rd.take(BO_PRIV_SIZE as u64 * nbos)?;
    // From the first dma-buf fd on, every failure closes the fds installed so far.
    let mut installed = InstalledFds::new(call.client);
    for (i, (bucket, rec)) in buckets
        .iter_mut()
        .zip(privs.chunks_exact(BO_PRIV_SIZE))
        .enumerate()
    {
        restore_bo(
            call,
            &mut st,
            bucket,
            rec,
            dmabuf_fd_slot(a.bos, i),
            &mut installed,
        )?;
    }
    let out: Vec<u8> = buckets.iter().flat_map(struct_bytes).collect();
    copy_to_user(call.client, a.bos, &out)?;

    // Objects.
    let mut queues = Vec::new();
    if let Err(e) = restore_objects(call, &mut st, &mut rd, a, &mut queues) {
        // The queues restored so far stay (the driver does not roll back), but no wave of a
        // half-restored process is resumed: their control stacks are emptied.
        for qid in queues {
            if let Some(q) = st.queues.get_mut(&qid).filter(|q| q.cwsr_mqd()) {
                cwsr::store_stack(&mut q.ctl_stack, &mut q.mqd, &[], 0);
            }
        }
        return Err(e);
    }
    installed.keep();
    Ok(0)
}

/// The object records of a RESTORE; the ids of the queues restored go to `queues`.
fn restore_objects(
    call: &KfdCall<'_>,
    st: &mut ProcState,
    rd: &mut PrivReader<'_>,
    a: &CriuArgs,
    queues: &mut Vec<u32>,
) -> Result<(), Errno> {
    for _ in 0..a.num_objects {
        match rd.peek_object_type()? {
            OBJECT_QUEUE => queues.push(restore_queue(call, st, rd)?),
            OBJECT_EVENT => restore_event(st, rd)?,
            OBJECT_SVM_RANGE => restore_svm(call, st, rd)?,
            _ => return Err(Errno::EINVAL),
        }
    }
    if rd.off != a.priv_data_size {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

fn restore_bo(
    call: &KfdCall<'_>,
    st: &mut ProcState,
    bucket: &mut sys::kfd_criu_bo_bucket,
    rec: &[u8],
    slot: FdSlot,
    installed: &mut InstalledFds<'_>,
) -> Result<(), Errno> {
    use sys::*;
    let pi = st.pdd_by_user_id(bucket.gpu_id).ok_or(Errno::ENODEV)?;
    let dev = st.pdds.get(pi).map(|p| p.dev).ok_or(Errno::ENODEV)?;
    let actual = call.machine.devices.get(dev).map_or(0, |d| d.gpu_id);
    let flags = bucket.alloc_flags;
    if flags & KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL != 0 {
        if bucket.size != DOORBELL_SLICE {
            return Err(Errno::EINVAL);
        }
    } else if flags & KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP != 0 && bucket.size != PAGE_SIZE {
        return Err(Errno::EINVAL);
    }
    if bucket.size == 0 {
        return Err(Errno::EINVAL);
    }
    let user_addr = get_u64(rec, 0);
    let idr = get_u32(rec, 8);
    let bo = new_bo(call, dev, bucket.addr, bucket.size, flags, user_addr, false)?;
    let pdd = st.pdds.get_mut(pi).ok_or(Errno::ENODEV)?;
    if pdd.bos.contains_key(&idr) || idr > i32::MAX as u32 {
        call.process.release_bo(dev, &bo);
        return Err(Errno::ENOMEM);
    }
    if flags & KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL != 0 {
        bucket.restored_offset = mo::TYPE_DOORBELL | mo::gpu_id(actual);
    }
    if flags & KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP != 0 {
        bucket.restored_offset = mo::TYPE_MMIO | mo::gpu_id(actual);
    } else if flags & (KFD_IOC_ALLOC_MEM_FLAGS_GTT | KFD_IOC_ALLOC_MEM_FLAGS_VRAM) != 0 {
        bucket.restored_offset = bo.mmap_offset;
    }
    let export = bo.backing.clone();
    pdd.bos.insert(idr, bo);
    let n_pdds = st.pdds.len().min(MAX_GPU_INSTANCE);
    for j in 0..n_pdds {
        let id = get_u32(rec, 12 + 4 * j);
        if id == 0 {
            break;
        }
        let peer = st.pdd_by_user_id(id).ok_or(Errno::EINVAL)?;
        map_bo_on(st, pi, idr, peer)?;
    }
    match export {
        Some(b) => {
            let fd = b.export(true).map_err(|e| Errno::from_io(&e))?;
            bucket.dmabuf_fd = installed.install(fd, slot)?;
        }
        None => bucket.dmabuf_fd = KFD_INVALID_FD,
    }
    Ok(())
}

fn restore_queue(
    call: &KfdCall<'_>,
    st: &mut ProcState,
    rd: &mut PrivReader<'_>,
) -> Result<u32, Errno> {
    let h = rd.take(QUEUE_PRIV_SIZE as u64)?;
    let mqd_size = u64::from(get_u32(&h, q::MQD_SIZE));
    let ctl_size = u64::from(get_u32(&h, q::CTL_STACK_SIZE));
    let extra = mqd_size + ctl_size;
    rd.check(extra)?;
    kmalloc_check(extra)?;
    let mut data = rd.take(extra)?;
    let ctl_stack = data.split_off(usize::try_from(mqd_size).map_err(|_| Errno::ENOMEM)?);
    let pi = st
        .pdd_by_user_id(get_u32(&h, q::GPU_ID))
        .ok_or(Errno::EINVAL)?;
    let kind = QueueKind::from_internal(get_u32(&h, q::TYPE)).ok_or(Errno::EINVAL)?;
    let queue = Queue {
        pdd: pi,
        kind,
        aql: get_u32(&h, q::FORMAT) == 1,
        ring: get_u64(&h, q::Q_ADDRESS),
        ring_size: get_u64(&h, q::Q_SIZE),
        rptr: get_u64(&h, q::READ_PTR),
        wptr: get_u64(&h, q::WRITE_PTR),
        eop: get_u64(&h, q::EOP_ADDRESS),
        eop_size: get_u32(&h, q::EOP_SIZE),
        ctx: get_u64(&h, q::CTX_ADDRESS),
        ctx_size: get_u32(&h, q::CTX_SIZE),
        priority: get_u32(&h, q::PRIORITY),
        percent: get_u32(&h, q::Q_PERCENT),
        doorbell_id: 0,
        doorbell_off: 0,
        sdma_id: 0,
        gws: get_u32(&h, q::GWS) != 0,
        mqd: Vec::new(),
        ctl_stack: Vec::new(),
        cu_mask: Vec::new(),
        ring_state: crate::hw::queue::RingState::default(),
    };
    let gws = queue.gws;
    let restore = QueueRestore {
        q_id: get_u32(&h, q::Q_ID),
        doorbell_id: get_u32(&h, q::DOORBELL_ID),
        sdma_id: get_u32(&h, q::SDMA_ID),
        mqd: data,
        ctl_stack,
    };
    let ctl = len32(restore.ctl_stack.len());
    let (qid, _) = create_queue_locked(call.machine, st, queue, ctl, Some(restore))?;
    if gws {
        if let Some(p) = st.pdds.get_mut(pi) {
            p.gws_taken = true;
        }
    }
    Ok(qid)
}

fn restore_event(st: &mut ProcState, rd: &mut PrivReader<'_>) -> Result<(), Errno> {
    let r = rd.take(EVENT_PRIV_SIZE as u64)?;
    let handle = get_u64(&r, ev::USER_HANDLE);
    if handle != 0 {
        kmap_event_page(st, handle)?;
    }
    let id = get_u32(&r, ev::EVENT_ID);
    let ty = get_u32(&r, ev::TYPE);
    // kfd_criu_restore_event recreates signal, debug, memory and HW exception events only; a
    // record of any other type (node change, device state change, profile, queue event, or a
    // number CREATE_EVENT took as an "other" event) is consumed and recreates nothing, without
    // an error: such an event does not survive a checkpoint.
    let restored = [
        sys::KFD_IOC_EVENT_SIGNAL,
        sys::KFD_IOC_EVENT_DEBUG_EVENT,
        sys::KFD_IOC_EVENT_MEMORY,
        sys::KFD_IOC_EVENT_HW_EXCEPTION,
    ];
    if !restored.contains(&ty) {
        log::debug!("kfd-sim: CRIU RESTORE skips event {id} of type {ty}, as the driver does");
        return Ok(());
    }
    let id = create_event_locked(
        st,
        ty,
        get_u32(&r, ev::AUTO_RESET) != 0,
        get_u32(&r, ev::SIGNALED) != 0,
        Some(id),
    )?;
    if ty == sys::KFD_IOC_EVENT_MEMORY || ty == sys::KFD_IOC_EVENT_HW_EXCEPTION {
        if let (Some(e), Some(src)) = (st.events.get_mut(&id), r.get(ev::EXCEPTION..)) {
            e.exception.copy_from_slice(src);
        }
    }
    Ok(())
}

fn restore_svm(
    call: &KfdCall<'_>,
    st: &mut ProcState,
    rd: &mut PrivReader<'_>,
) -> Result<(), Errno> {
    let h = rd.take(SVM_PRIV_SIZE as u64)?;
    let nattr = 4 + st.pdds.len() as u64;
    let raw = rd.take(8 * nattr)?;
    let attrs: Vec<(u32, u32)> = raw
        .chunks_exact(8)
        .map(|c| (get_u32(c, 0), get_u32(c, 4)))
        .collect();
    st.svm_restored
        .push((get_u64(&h, 8), get_u64(&h, 16), attrs));
    // The range is the restoring process's memory (the plugin restores from inside it), as
    // SET_ATTR would record: what the GPU reaches there, a context save area among it.
    st.svm_mem = Some(call.client.process_memory());
    Ok(())
}

fn resume(call: &KfdCall<'_>, a: &CriuArgs) -> IoctlResult {
    let target = call.machine.find_process(a.pid).ok_or(Errno::ESRCH)?;
    let mut st = target.lock();
    // Apply the SVM attributes stored at RESTORE.
    for (start, size, attrs) in std::mem::take(&mut st.svm_restored) {
        if let Some(end) = start.checked_add(size).filter(|_| size > 0) {
            svm_apply(&mut st, start, end, &attrs);
        }
    }
    if !st.restore_pending {
        return Err(Errno::EINVAL);
    }
    st.restore_pending = false;
    st.evictions = st.evictions.saturating_sub(1);
    log::info!("kfd-sim: pid {}: queues running (CRIU RESUME)", target.pid);
    Ok(0)
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::os::fd::{IntoRawFd, RawFd};

    use super::*;
    use crate::host::FileKey;

    /// A caller that records which fds were installed for it and which were taken back.
    #[derive(Default)]
    struct FdTable {
        open: RefCell<Vec<RawFd>>,
    }

    impl Client for FdTable {
        fn pid(&self) -> u32 {
            1
        }
        fn can_checkpoint_restore(&self) -> bool {
            true
        }
        fn is_ptrace_parent_of(&self, _pid: u32) -> bool {
            false
        }
        fn read_user(&self, _addr: u64, _buf: &mut [u8]) -> Result<(), Errno> {
            Err(Errno::EFAULT)
        }
        fn write_user(&self, _addr: u64, _buf: &[u8]) -> Result<(), Errno> {
            Err(Errno::EFAULT)
        }
        fn resolve_fd(&self, _raw: i32) -> Result<FileKey, Errno> {
            Err(Errno::EBADF)
        }
        fn install_fd(&self, fd: OwnedFd) -> Result<i32, Errno> {
            let raw = fd.into_raw_fd();
            self.open.borrow_mut().push(raw);
            Ok(raw)
        }
        fn uninstall_fd(&self, raw: RawFd) {
            self.open.borrow_mut().retain(|&fd| fd != raw);
            crate::host::close_raw(raw);
        }
    }

    fn memfd() -> OwnedFd {
        crate::host::memfd("kfd-sim:test").unwrap()
    }

    #[test]
    fn installed_fds_are_taken_back_unless_the_op_succeeds() {
        let table = FdTable::default();
        {
            let mut failed = InstalledFds::new(&table);
            let a = failed.install(memfd(), FdSlot::User(0)).unwrap();
            let b = failed.install(memfd(), FdSlot::User(0)).unwrap();
            assert_ne!(a, b);
            assert_eq!(table.open.borrow().len(), 2);
        }
        assert!(table.open.borrow().is_empty(), "a failed op leaves no fd");

        let mut done = InstalledFds::new(&table);
        let fd = done.install(memfd(), FdSlot::User(0)).unwrap();
        done.keep();
        assert_eq!(*table.open.borrow(), [fd_from_field(fd)]);
        table.uninstall_fd(fd_from_field(fd));
    }
}
