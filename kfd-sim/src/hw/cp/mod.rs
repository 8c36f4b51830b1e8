//! The command processor of each simulated GPU: it runs the AQL packets of the process's
//! compute queues, dispatching kernels to the gfx90a shader core (`kfd-shader`).
//!
//! - **What it knows.** What the driver maps for it, as for the SDMA engines: the runlist of
//!   processes ([`Runlist`]), each queue's registers ([`MappedQueue`](super::queue::MappedQueue): ring, read-pointer
//!   address, doorbell), the process's doorbell slice and GPU VM, and the SVM ranges its GPU may
//!   reach. It keeps its own state of each queue (the packet it is at, a dispatch in flight with
//!   its stopped waves, a wait, an error) in the queue's registers ([`QueueState`]), which the
//!   driver drops with the queue.
//! - **When it runs.** One thread per GPU, started when a doorbell slice of that GPU is first
//!   mapped, polling the doorbells of the active AQL queues in the SDMA engine's loop
//!   ([`super::scheduler::poll`]: often while there is work, backing off when there is
//!   none); it holds the machine weakly and ends with it.
//! - **The ring.** 64-byte packets; the doorbell holds the index of the last packet made valid
//!   (CHECKPOINT latches it into the MQD, and a restored queue starts from that value, its new
//!   doorbell slice being zero).
//!   While the read index (`amd_queue_t.read_dispatch_id`, whose address CREATE_QUEUE gave as
//!   the read pointer) is not past the doorbell and the packet's type is not INVALID, the packet
//!   runs; an INVALID packet in that range is one the client has reserved and not written yet:
//!   the command processor looks again later. After a packet: its completion signal (profiling
//!   timestamps first, when the queue has profiling on; the value decremented atomically; the
//!   event id stored in the signal's mailbox and the KFD event interrupt raised, as the CP's
//!   end-of-pipe interrupt does), the header made INVALID, then the read index advanced and
//!   written back. A dispatch keeps the read index at its packet until it ends (ROCr reads the
//!   packet there when it handles a scratch request).
//! - **Packets.** KERNEL_DISPATCH ([`dispatch`]: the kernel descriptor read through the VM,
//!   the workgroups on worker threads in time slices); BARRIER_AND and BARRIER_OR (wait until
//!   every, or one, non-null dependency signal is 0, without holding up other queues);
//!   VENDOR_SPECIFIC in AMD's formats: a PM4 indirect buffer (ROCr's code-cache invalidation;
//!   the simulator's caches are coherent, so it does nothing but complete its signal; its PM4
//!   opcodes are logged once by name) and BARRIER_VALUE (wait until the signal's value, masked,
//!   compares as asked). Anything else is a queue error.
//! - **Scratch.** A dispatch whose private segment does not fit the queue's scratch
//!   (`compute_tmpring_size`: waves and bytes per wave, and the scratch base in `amd_queue_t`)
//!   sets the queue's `queue_inactive_signal` to 1 and raises its event; ROCr allocates more,
//!   rewrites the queue's scratch fields and stores 0, and the dispatch starts with the new
//!   scratch. Workgroups that run at the same time use different wave slots of it.
//! - **Queue errors.** An unsupported or illegal instruction (0x40000000), a memory fault
//!   (0x20000000, and the KFD memory event with the fault's address, as the VM fault
//!   interrupt sets it), `s_trap` (0x80000000), bad dimensions (2), a group segment over 64 KiB
//!   (64), an unreadable kernel descriptor (8), a packet format it does not know (32): the code
//!   goes into `queue_inactive_signal` with its event, as ROCr's queue-error handler expects,
//!   the queue stops, and the first of each kind is logged by name. Nothing a client writes
//!   stops the thread or the daemon.
//! - **Eviction.** An evicted process runs nothing; evicting waits for the round in flight
//!   ([`wait_idle`](super::scheduler::wait_idle)), whose waves stop at an instruction boundary
//!   (a kernel that never ends stops at the end of its time slice, [`dispatch::ROUND`]). Then
//!   [`save_waves`] does what compute wave save/restore does ([`cwsr`]): each stopped dispatch's
//!   waves and LDS go into the queue's context save area in the client's memory, its progress
//!   and one entry per wave onto the control stack beside the MQD, which CRIU's CHECKPOINT
//!   copies into the queue's private data; the packet stays valid at the read index. When the
//!   queue runs again (UNPAUSE, or RESUME of a restored process, on any GPU: the area is the
//!   queue's), the command processor takes the control stack, reads the waves back from the area
//!   and the dispatch goes on where it stopped. A queue without a context save area (or one the
//!   GPU cannot reach) keeps its stopped waves in the simulator, parked until the process runs
//!   again (logged): a checkpoint does not carry them, and a restored queue runs that dispatch
//!   again from the start.
pub(crate) mod cwsr;
mod dispatch;
pub(crate) mod memory;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, Weak};

use kfd_shader::{
    Apertures, Dispatch, DispatchError, DispatchPacket, KernelDescriptor, ScratchSetup, ShaderError,
};

use self::cwsr::{Area, CwsrError, Layout, SavedDispatch};
use self::dispatch::{Failure, InFlight, RoundEnd};
use self::memory::{fetch_add_u64, load_u64, read_u32, read_u64, store_u64, SvmView};
use super::queue::Engine;
use super::scheduler::{poll, MappedProcess, Runlist};
use super::sdma::{gpu_timestamp, read_va, write_va, Fault};
use super::vm::Vm;
use crate::host::lock;

/// Packets one queue runs per pass (dispatch rounds count as one).
const PACKETS_PER_PASS: usize = 64;

/// Bytes of an AQL packet.
const PACKET: u64 = 64;

/// `hsa_packet_type_t`.
mod ty {
    pub(super) const VENDOR_SPECIFIC: u8 = 0;
    pub(super) const INVALID: u8 = 1;
    pub(super) const KERNEL_DISPATCH: u8 = 2;
    pub(super) const BARRIER_AND: u8 = 3;
    pub(super) const BARRIER_OR: u8 = 5;
}

/// The name of an AQL packet type.
fn type_name(t: u8) -> &'static str {
    match t {
        0 => "VENDOR_SPECIFIC",
        1 => "INVALID",
        2 => "KERNEL_DISPATCH",
        3 => "BARRIER_AND",
        4 => "AGENT_DISPATCH",
        5 => "BARRIER_OR",
        _ => "reserved-type",
    }
}

/// Offsets in `amd_queue_t` and `amd_signal_t`.
mod off {
    /// `read_dispatch_id_field_base_byte_offset`, from the read pointer.
    pub(super) const RPTR_BASE: u64 = 8;
    pub(super) const TMPRING: usize = 140;
    pub(super) const SCRATCH_RSRC: usize = 144;
    pub(super) const SCRATCH_BASE: usize = 160;
    pub(super) const PROPERTIES: usize = 180;
    pub(super) const INACTIVE_SIGNAL: usize = 192;
    /// Bytes of `amd_queue_t` the command processor reads.
    pub(super) const QUEUE_BYTES: u64 = 200;
    pub(super) const SIG_VALUE: u64 = 8;
    pub(super) const SIG_MAILBOX: u64 = 16;
    pub(super) const SIG_EVENT_ID: u64 = 24;
    pub(super) const SIG_START_TS: u64 = 32;
    pub(super) const SIG_END_TS: u64 = 40;
}

/// `queue_properties` bit: profiling timestamps.
const PROFILING: u32 = 1 << 3;

/// Queue error codes in `queue_inactive_signal` (ROCr's queue-error handler).
mod code {
    pub(super) const NO_SCRATCH: u64 = 0x1;
    pub(super) const DIMENSIONS: u64 = 0x2;
    pub(super) const BAD_CODE: u64 = 0x8;
    pub(super) const BAD_FORMAT: u64 = 0x20;
    pub(super) const GROUP_TOO_LARGE: u64 = 0x40;
    pub(super) const MEMORY_VIOLATION: u64 = 0x2000_0000;
    pub(super) const ILLEGAL_INSTRUCTION: u64 = 0x4000_0000;
    pub(super) const TRAP: u64 = 0x8000_0000;
}

/// Bits of an end-of-pipe interrupt's context that carry the event id.
const EOP_ID_BITS: u32 = 32;
/// Bits of an `s_sendmsg` interrupt's data that carry (part of) the event id.
const SENDMSG_ID_BITS: u32 = 24;

/// What the command processor keeps of one AQL queue.
#[derive(Debug, Default)]
pub(crate) struct QueueState {
    /// The read index was taken from memory.
    started: bool,
    /// The index of the packet the command processor is at.
    rptr: u64,
    /// The dispatch in flight.
    dispatch: Option<InFlight>,
    /// A control stack taken when the queue was mapped again: its waves are still to be read
    /// from the context save area.
    saved_layout: Option<Result<Layout, CwsrError>>,
    /// A dispatch read back from the context save area, resumed when the command processor
    /// meets its packet at the read index.
    resume: Option<SavedDispatch>,
    /// A scratch request is out: wait until ROCr answers it.
    scratch_wait: bool,
    /// A scratch request was answered for the packet at the read index.
    scratch_answered: bool,
    /// The queue stopped with this error code.
    stopped: Option<u64>,
    /// Where its first dispatch's ring, kernel, arguments and signal are was logged.
    described: bool,
}

/// The command processors of one machine: a thread per GPU, each started once.
#[derive(Debug, Default)]
pub(crate) struct CommandProcessors {
    started: Mutex<Vec<usize>>,
}

impl CommandProcessors {
    /// Starts the command processor of GPU `device` over `runlist` if it is not running yet.
    pub(crate) fn start<R: Runlist>(&self, runlist: &Arc<R>, device: usize) {
        let mut started = lock(&self.started);
        if started.contains(&device) {
            return;
        }
        let weak = Arc::downgrade(runlist);
        let spawned = std::thread::Builder::new()
            .name(format!("kfd-sim-cp{device}"))
            .spawn(move || run(&weak, device));
        match spawned {
            Ok(_) => started.push(device),
            Err(e) => log::error!(
                "kfd-sim: cannot start the command processor of GPU {device}: {e}; its AQL \
                 queues will not run"
            ),
        }
    }
}

/// The command processor thread of GPU `device`: polls until the machine is gone.
fn run<R: Runlist>(runlist: &Weak<R>, device: usize) {
    poll(runlist, |r| {
        r.processes()
            .iter()
            .fold(false, |worked, p| service(r, &**p, device) | worked)
    });
}

/// Compute wave save, after an eviction stopped every round of `p`'s AQL queues (call with
/// the process unlocked): each dispatch stopped in flight goes into its queue's context save
/// area and control stack ([`cwsr`]). A queue without an area, or whose area the GPU cannot
/// reach, keeps its stopped waves parked in the simulator, and says so.
pub(crate) fn save_waves<P: MappedProcess>(p: &P) {
    struct Target {
        qid: u32,
        state: Arc<Mutex<QueueState>>,
        vm: Arc<Mutex<Vm>>,
        svm: SvmView,
        area: Area,
    }
    let targets = p.with_queues(|qs| {
        let mapped: Vec<(u32, usize)> = qs
            .mapped()
            .iter()
            .filter(|q| q.engine == Engine::Aql)
            .map(|q| (q.qid, q.device))
            .collect();
        let svms: Vec<(u32, SvmView)> = mapped
            .into_iter()
            .map(|(id, dev)| (id, qs.svm(dev)))
            .collect();
        qs.mapped()
            .into_iter()
            .filter(|q| q.engine == Engine::Aql)
            .filter_map(|q| {
                Some(Target {
                    qid: q.qid,
                    state: Arc::clone(q.state.cp.as_ref()?),
                    vm: q.vm?,
                    svm: svms
                        .iter()
                        .find(|(id, _)| *id == q.qid)
                        .map(|(_, s)| s.clone())?,
                    area: Area {
                        base: q.ctx.0,
                        size: q.ctx.1,
                        ctl_size: q.ctl_stack.len(),
                    },
                })
            })
            .collect::<Vec<_>>()
    });
    for t in targets {
        let mut st = lock(&t.state);
        let saved = match (&st.dispatch, &st.resume) {
            (Some(d), _) => d.snapshot(),
            (None, Some(r)) => r.clone(),
            (None, None) => continue,
        };
        match t.area.save(&t.vm, &t.svm, &saved) {
            Ok((used, data)) => {
                p.with_queues(|qs| {
                    for q in qs.mapped().into_iter().filter(|q| q.qid == t.qid) {
                        cwsr::store_stack(q.ctl_stack, q.mqd, &used, data);
                    }
                });
                st.dispatch = None;
                st.resume = None;
                log::debug!(
                    "kfd-sim: pid {}: AQL queue {}: dispatch {} saved: {} stopped workgroups \
                     ({data} bytes of wave data, {} of control stack), {} of {} started",
                    p.pid(),
                    t.qid,
                    saved.index,
                    saved.groups.len(),
                    used.len(),
                    saved.next,
                    saved.total
                );
            }
            Err(e) => log::warn!(
                "kfd-sim: pid {}: AQL queue {}: the waves of dispatch {} are not saved ({e}): they \
                 stay in the simulator until the queue runs again, and a checkpoint does not \
                 carry them",
                p.pid(),
                t.qid,
                saved.index
            ),
        }
    }
}

/// One AQL queue the command processor looks at, taken under the process lock.
struct Work {
    qid: u32,
    ring: u64,
    slots: u64,
    rptr_addr: u64,
    doorbell: u64,
    vm: Arc<Mutex<Vm>>,
    svm: Arc<SvmView>,
    state: Arc<Mutex<QueueState>>,
    /// The context save area.
    area: Area,
    /// What the control stack held when the queue was mapped (taken off it).
    saved: Option<Result<Layout, CwsrError>>,
}

/// Runs what `p`'s AQL queues on `device` have; whether anything ran.
fn service<R: Runlist>(runlist: &R, p: &R::Process, device: usize) -> bool {
    let _running = lock(p.cp_preemption());
    let work = p.with_queues(|qs| {
        if qs.evicted() {
            return Vec::new();
        }
        let svm = Arc::new(qs.svm(device));
        qs.mapped()
            .into_iter()
            .filter(|q| q.engine == Engine::Aql && q.device == device && q.active)
            .filter_map(|q| {
                // The last packet made valid: the doorbell, or what the MQD latched before a
                // checkpoint (a restored process's doorbell slice starts at zero).
                let doorbell = q.doorbell()?.max(q.state.wptr);
                q.state.wptr = doorbell;
                let state = Arc::clone(q.state.cp.get_or_insert_with(Arc::default));
                let vm = q.vm?;
                let area = Area {
                    base: q.ctx.0,
                    size: q.ctx.1,
                    ctl_size: q.ctl_stack.len(),
                };
                // Mapped again after an eviction: the firmware takes the saved waves off the
                // control stack.
                let saved = cwsr::take_stack(q.ctl_stack, q.mqd).transpose();
                Some(Work {
                    qid: q.qid,
                    ring: q.ring,
                    slots: q.ring_size / PACKET,
                    rptr_addr: q.rptr_addr,
                    doorbell,
                    vm,
                    svm: Arc::clone(&svm),
                    state,
                    area,
                    saved,
                })
            })
            .collect::<Vec<_>>()
    });
    let mut worked = false;
    for mut w in work {
        let mut st = lock(&w.state);
        if let Some(s) = w.saved.take() {
            st.saved_layout = Some(s);
        }
        let mut q = QueueRun {
            runlist,
            p,
            w: &w,
            st: &mut st,
        };
        worked |= q.run();
    }
    worked
}

/// A queue being run, with its state locked.
struct QueueRun<'a, R: Runlist> {
    runlist: &'a R,
    p: &'a R::Process,
    w: &'a Work,
    st: &'a mut QueueState,
}

/// What the next packet did.
enum Step {
    /// It ran (completed or went on in flight): look at the next.
    Ran,
    /// It waits (for a signal, for the client): look again on a later pass.
    Wait,
    /// The queue stopped.
    Stopped,
}

impl<R: Runlist> QueueRun<'_, R> {
    fn vm(&self) -> &Mutex<Vm> {
        &self.w.vm
    }

    fn log_once(&self, key: &str, message: &str) {
        let message = format!("pid {}: AQL queue {}: {message}", self.p.pid(), self.w.qid);
        // A process gone under its queue: the driver destroyed the queue, nothing to report.
        if self.p.mm_gone() {
            log::debug!("kfd-sim: {message} (its process's mm is gone)");
            return;
        }
        self.runlist.log_once(key, &message);
    }

    /// Runs packets until the queue waits, up to a pass's worth; whether anything ran.
    fn run(&mut self) -> bool {
        if self.st.stopped.is_some() {
            return false;
        }
        if self.w.slots == 0 || !self.w.slots.is_power_of_two() {
            self.log_once(
                "AQL ring size",
                "the ring is not a power of two of packets: not run",
            );
            self.st.stopped = Some(code::BAD_FORMAT);
            return false;
        }
        if !self.st.started {
            // A new queue starts at 0; a restored one where its read index was.
            self.st.rptr = load_u64(self.vm(), self.w.rptr_addr).unwrap_or(0);
            self.st.started = true;
        }
        if let Some(layout) = self.st.saved_layout.take() {
            match layout.and_then(|l| self.w.area.load(self.vm(), &self.w.svm, l)) {
                Ok(d) => {
                    log::debug!(
                        "kfd-sim: pid {}: AQL queue {}: dispatch {} restored from the context \
                         save area: {} stopped workgroups, {} of {} started",
                        self.p.pid(),
                        self.w.qid,
                        d.index,
                        d.groups.len(),
                        d.next,
                        d.total
                    );
                    self.st.resume = Some(d);
                }
                Err(e) => {
                    self.log_once(
                        "AQL CWSR restore",
                        &format!("saved waves unreadable ({e}): queue error"),
                    );
                    self.queue_error(code::MEMORY_VIOLATION);
                    return true;
                }
            }
        }
        let mut worked = false;
        for _ in 0..PACKETS_PER_PASS {
            match self.step() {
                Step::Ran => worked = true,
                Step::Wait => return worked,
                Step::Stopped => return true,
            }
            if self.st.dispatch.is_some() {
                // A round ran and the dispatch goes on: other queues get their turn first.
                return true;
            }
        }
        worked
    }

    /// `amd_queue_t`'s address: the read pointer less the offset the queue records there.
    fn queue_va(&self) -> Result<u64, Fault> {
        let base = read_u32(self.vm(), self.w.rptr_addr.wrapping_add(off::RPTR_BASE))?;
        Ok(self.w.rptr_addr.wrapping_sub(u64::from(base)))
    }

    fn packet_va(&self) -> u64 {
        self.w
            .ring
            .wrapping_add((self.st.rptr % self.w.slots) * PACKET)
    }

    fn step(&mut self) -> Step {
        if let Some(d) = self.st.dispatch.take() {
            return self.round(d);
        }
        // The doorbell names the last packet made valid; a dispatch restored from the context
        // save area was valid before (a restored process's doorbells start at zero).
        let resuming = self
            .st
            .resume
            .as_ref()
            .is_some_and(|r| r.index == self.st.rptr);
        if !resuming && self.w.doorbell.wrapping_sub(self.st.rptr) >= 1 << 63 {
            return Step::Wait;
        }
        let at = self.packet_va();
        let pkt = match read_va(self.vm(), at, PACKET) {
            Ok(b) => b,
            // A queue never rung (its doorbell and read pointer still at 0, as the driver made
            // it) has given the hardware nothing to fetch: a ring the GPU cannot reach yet is not
            // a fault before the queue is used (kfd-workload's compute queues are never rung,
            // their rings never GPU-mapped). The cost: a first packet rung on an unmapped ring
            // waits instead of faulting.
            Err(_) if self.st.rptr == 0 && self.w.doorbell == 0 => return Step::Wait,
            Err(e) => {
                self.log_once(
                    "AQL ring unreadable",
                    &format!("ring unreadable ({e}): the queue stops"),
                );
                self.st.stopped = Some(code::MEMORY_VIOLATION);
                return Step::Stopped;
            }
        };
        let mut p = [0u8; 64];
        p.copy_from_slice(&pkt);
        let t = p[0];
        let signal = u64_at(&p, 56);
        match t {
            ty::INVALID => Step::Wait,
            ty::KERNEL_DISPATCH => self.start_dispatch(&p, at, signal),
            ty::BARRIER_AND | ty::BARRIER_OR => {
                let deps: Vec<u64> = (0..5)
                    .map(|k| u64_at(&p, 8 + 8 * k))
                    .filter(|&s| s != 0)
                    .collect();
                let mut zero = Vec::with_capacity(deps.len());
                for s in deps {
                    match load_u64(self.vm(), s.wrapping_add(off::SIG_VALUE)) {
                        Ok(v) => zero.push(v == 0),
                        Err(e) => {
                            return self
                                .memory_error(&format!("barrier dependency signal {s:#x}"), &e)
                        }
                    }
                }
                let met = if t == ty::BARRIER_AND {
                    zero.iter().all(|&z| z)
                } else {
                    zero.is_empty() || zero.iter().any(|&z| z)
                };
                if met {
                    self.complete(signal, None)
                } else {
                    Step::Wait
                }
            }
            ty::VENDOR_SPECIFIC => self.vendor(&p, signal),
            other => {
                self.log_once(
                    &format!("AQL {} packet", type_name(other)),
                    &format!(
                        "{} packet (type {other}) at index {}: not supported, queue error",
                        type_name(other),
                        self.st.rptr
                    ),
                );
                self.queue_error(code::BAD_FORMAT)
            }
        }
    }

    /// AMD's vendor-specific packets.
    fn vendor(&mut self, p: &[u8; 64], signal: u64) -> Step {
        match p[2] {
            // A PM4 indirect buffer: INDIRECT_BUFFER (dwords 1..4 of the packet body).
            1 => {
                self.name_pm4(p);
                self.complete(signal, None)
            }
            // BARRIER_VALUE: signal @8, value @16, mask @24, condition @32. A null signal is a
            // satisfied dependency (`hsa_ext_amd.h`; HIP 5.7's streams submit such packets).
            2 => {
                let (s, value, mask, cond) =
                    (u64_at(p, 8), u64_at(p, 16), u64_at(p, 24), u32_at(p, 32));
                if s == 0 {
                    return self.complete(signal, None);
                }
                let cur = match load_u64(self.vm(), s.wrapping_add(off::SIG_VALUE)) {
                    Ok(v) => v & mask,
                    Err(e) => {
                        return self.memory_error(&format!("BARRIER_VALUE signal {s:#x}"), &e)
                    }
                };
                #[allow(clippy::cast_possible_wrap)] // signal values are i64
                let (cur, value) = (cur as i64, value as i64);
                let met = match cond {
                    0 => cur == value,
                    1 => cur != value,
                    2 => cur < value,
                    3 => cur >= value,
                    _ => {
                        self.log_once(
                            "AQL BARRIER_VALUE condition",
                            &format!("BARRIER_VALUE condition {cond}: queue error"),
                        );
                        return self.queue_error(code::BAD_FORMAT);
                    }
                };
                if met {
                    self.complete(signal, None)
                } else {
                    Step::Wait
                }
            }
            f => {
                self.log_once(
                    &format!("AQL vendor format {f}"),
                    &format!(
                        "VENDOR_SPECIFIC packet of AMD format {f}: not supported, queue error"
                    ),
                );
                self.queue_error(code::BAD_FORMAT)
            }
        }
    }

    /// Logs once each PM4 opcode of an indirect buffer (what the simulator does not execute).
    fn name_pm4(&self, p: &[u8; 64]) {
        let hdr = u32_at(p, 4);
        let addr = u64::from(u32_at(p, 8) & !3) | u64::from(u32_at(p, 12) & 0xffff) << 32;
        let dwords = u64::from(u32_at(p, 16) & 0xf_ffff).min(256);
        let ops: Vec<u32> = if (hdr >> 8) & 0xff == 0x3f && dwords > 0 {
            match read_va(self.vm(), addr, dwords * 4) {
                Ok(b) => {
                    let mut ops = Vec::new();
                    let mut i = 0usize;
                    while i + 4 <= b.len() {
                        let h = u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
                        if h >> 30 != 3 {
                            break;
                        }
                        ops.push((h >> 8) & 0xff);
                        i += 4 * (((h >> 16) & 0x3fff) as usize + 2);
                    }
                    ops
                }
                Err(_) => Vec::new(),
            }
        } else {
            Vec::new()
        };
        for op in ops {
            let name = pm4_name(op);
            self.log_once(
                &format!("PM4 {name}"),
                &format!("PM4 indirect buffer with {name} (opcode {op:#x}): not executed (the simulated caches are coherent), its completion signal is"),
            );
        }
    }

    /// Starts the KERNEL_DISPATCH `p` at `at` (the scratch handshake first if it needs one).
    fn start_dispatch(&mut self, p: &[u8; 64], at: u64, signal: u64) -> Step {
        let queue_va = match self.queue_va() {
            Ok(q) => q,
            Err(e) => return self.memory_error("amd_queue_t", &e),
        };
        let q = match read_va(self.vm(), queue_va, off::QUEUE_BYTES) {
            Ok(b) => b,
            Err(e) => return self.memory_error("amd_queue_t", &e),
        };
        let dims = u16::from_le_bytes([p[2], p[3]]) & 3;
        if dims == 0 {
            return self.dispatch_error(code::DIMENSIONS, "no dimensions");
        }
        let packet = DispatchPacket::parse(p, at, queue_va, self.st.rptr);
        // Scratch: bytes per wave and wave slots of the queue's scratch.
        let tmpring = u32_at(&q, off::TMPRING);
        let waves = u64::from(tmpring & 0xfff);
        let wave_bytes = u64::from((tmpring >> 12) & 0x1fff) * 1024;
        let base = u64_at(&q, off::SCRATCH_BASE);
        let kd_bytes = match read_va(self.vm(), packet.kernel_object, 64) {
            Ok(b) => b,
            Err(e) => {
                self.log_once(
                    "AQL kernel object",
                    &format!(
                        "kernel descriptor at {:#x} unreadable ({e}): queue error",
                        packet.kernel_object
                    ),
                );
                return self.queue_error(code::BAD_CODE);
            }
        };
        let kd = match KernelDescriptor::parse(&kd_bytes) {
            Ok(kd) => kd,
            Err(e) => return self.dispatch_error(code::BAD_CODE, &e.to_string()),
        };
        let mut resource = [0u32; 4];
        for (k, r) in resource.iter_mut().enumerate() {
            *r = u32_at(&q, off::SCRATCH_RSRC + 4 * k);
        }
        let scratch = ScratchSetup {
            resource,
            base,
            wave_bytes,
        };
        let d = match Dispatch::new(kd, packet, scratch, Apertures::KFD_GFX9) {
            Ok(d) => d,
            Err(e @ DispatchError::Dimensions { .. }) => {
                return self.dispatch_error(code::DIMENSIONS, &e.to_string())
            }
            Err(e @ DispatchError::GroupSegment(_)) => {
                return self.dispatch_error(code::GROUP_TOO_LARGE, &e.to_string())
            }
            Err(e @ DispatchError::ShortDescriptor(_)) => {
                return self.dispatch_error(code::BAD_CODE, &e.to_string())
            }
        };
        let per_wg = u64::from(d.waves_per_workgroup().max(1));
        let workers = dispatch::workers() as u64;
        let slots: Vec<u32> = if packet.private_segment_size == 0 {
            vec![0; usize::try_from(workers).unwrap_or(1)]
        } else {
            let need = u64::from(packet.private_segment_size) * 64;
            let fits = need <= wave_bytes && waves >= per_wg && base != 0;
            if !fits {
                return self.scratch_request(need, wave_bytes, waves);
            }
            (0..(waves / per_wg).min(workers))
                .filter_map(|k| u32::try_from(k * per_wg).ok())
                .collect()
        };
        self.st.scratch_answered = false;
        // Where the client put what the dispatch reads, once per machine (looked up once per
        // queue: describing userptr memory reads the client's mappings): which memory ROCr and
        // HIP use for rings, kernels, arguments and signals.
        if !self.st.described {
            self.st.described = true;
            self.describe_dispatch(&packet, &d, at, queue_va, signal);
        }
        log::debug!(
            "kfd-sim: pid {}: AQL queue {}: dispatch {} of {} workgroups at {:#x}",
            self.p.pid(),
            self.w.qid,
            self.st.rptr,
            d.workgroup_count(),
            d.entry()
        );
        let in_flight = match self.st.resume.take() {
            Some(saved) if saved.index == self.st.rptr && saved.signal == signal => {
                match InFlight::resume(d, slots, saved) {
                    Ok(f) => f,
                    Err(e) => {
                        return self.dispatch_error(
                            code::MEMORY_VIOLATION,
                            &format!("saved waves do not resume: {e}"),
                        )
                    }
                }
            }
            other => {
                if let Some(saved) = other {
                    self.log_once(
                        "AQL CWSR stale",
                        &format!(
                            "saved waves of dispatch {} dropped: the read index is at {}",
                            saved.index, self.st.rptr
                        ),
                    );
                }
                InFlight::new(self.st.rptr, signal, gpu_timestamp(), d, slots)
            }
        };
        self.round(in_flight)
    }

    /// Asks ROCr for more scratch (or waits for its answer).
    fn scratch_request(&mut self, need: u64, have: u64, waves: u64) -> Step {
        let Ok(queue_va) = self.queue_va() else {
            return self.queue_error(code::NO_SCRATCH);
        };
        let sig = read_u64(self.vm(), queue_va + off::INACTIVE_SIGNAL as u64).unwrap_or(0);
        if self.st.scratch_wait {
            match load_u64(self.vm(), sig.wrapping_add(off::SIG_VALUE)) {
                Ok(0) => {
                    // Answered: the dispatch is looked at again with the new scratch fields.
                    self.st.scratch_wait = false;
                    self.st.scratch_answered = true;
                    return Step::Ran;
                }
                Ok(_) => return Step::Wait,
                Err(e) => return self.memory_error("queue_inactive_signal", &e),
            }
        }
        if self.st.scratch_answered || sig == 0 {
            log::warn!(
                "kfd-sim: pid {}: AQL queue {}: the dispatch needs {need} bytes of scratch per wave, \
                 the queue has {have} in {waves} waves: queue error",
                self.p.pid(),
                self.w.qid
            );
            return self.queue_error(code::NO_SCRATCH);
        }
        log::debug!(
            "kfd-sim: pid {}: AQL queue {}: scratch request ({need} bytes per wave, the queue has {have})",
            self.p.pid(),
            self.w.qid
        );
        if let Err(e) = self.signal_store(sig, code::NO_SCRATCH) {
            return self.memory_error("queue_inactive_signal", &e);
        }
        self.st.scratch_wait = true;
        Step::Wait
    }

    /// Runs a round of the dispatch in flight.
    fn round(&mut self, mut d: InFlight) -> Step {
        let mut interrupts = Vec::new();
        let stop = AtomicBool::new(false);
        let end = d.round(&self.w.vm, &self.w.svm, &mut interrupts, &stop);
        if !interrupts.is_empty() {
            let qid = self.w.qid;
            self.p.with_queues(|qs| {
                for m0 in interrupts {
                    qs.interrupt(qid, m0 & 0xff_ffff, SENDMSG_ID_BITS);
                }
            });
        }
        match end {
            RoundEnd::More => {
                self.st.dispatch = Some(d);
                Step::Ran
            }
            RoundEnd::Done => {
                log::debug!(
                    "kfd-sim: pid {}: AQL queue {}: dispatch {} done",
                    self.p.pid(),
                    self.w.qid,
                    d.index
                );
                self.complete(d.signal, Some(d.start_ts))
            }
            RoundEnd::Failed(f) => self.dispatch_failed(&f),
        }
    }

    fn dispatch_failed(&mut self, f: &Failure) -> Step {
        let (code, what) = match f {
            Failure::Trap { id, pc } => (code::TRAP, format!("s_trap {id} at pc {pc:#x}")),
            Failure::Shader(e @ ShaderError::MemoryFault { fault, .. }) => {
                let qid = self.w.qid;
                let (va, write) = (fault.addr, fault.write);
                self.p.with_queues(|qs| qs.vm_fault(qid, va, write));
                (
                    code::MEMORY_VIOLATION,
                    format!("{e} (the VM: {})", memory::describe(self.vm(), va)),
                )
            }
            Failure::Shader(e) => (code::ILLEGAL_INSTRUCTION, e.to_string()),
            Failure::WriteBack { addr } => (
                code::MEMORY_VIOLATION,
                format!("client memory at {addr:#x} the kernel wrote is gone"),
            ),
        };
        let key = match f {
            Failure::Shader(ShaderError::UnsupportedOpcode {
                encoding,
                opcode,
                mnemonic,
                ..
            }) => {
                format!(
                    "shader {} {}",
                    encoding.name(),
                    mnemonic.map_or_else(|| format!("{opcode:#x}"), str::to_owned)
                )
            }
            Failure::Shader(ShaderError::IllegalInstruction { word, .. }) => {
                format!("shader illegal {word:#x}")
            }
            Failure::Shader(ShaderError::MemoryFault { .. }) => "shader memory fault".to_owned(),
            Failure::Trap { id, .. } => format!("shader s_trap {id}"),
            Failure::WriteBack { .. } => "shader write-back".to_owned(),
        };
        self.log_once(
            &key,
            &format!(
                "dispatch {} stopped: {what}: queue error {code:#x}",
                self.st.rptr
            ),
        );
        self.queue_error(code)
    }

    /// Logs (once per machine) where the client put what a dispatch reads.
    fn describe_dispatch(
        &self,
        packet: &DispatchPacket,
        d: &Dispatch,
        at: u64,
        queue_va: u64,
        signal: u64,
    ) {
        let vm = self.vm();
        self.log_once(
            "AQL first KERNEL_DISPATCH",
            &format!(
                "first KERNEL_DISPATCH: grid {:?} in workgroups of {:?}; ring at {:#x} ({}); \
                 amd_queue_t at {queue_va:#x} ({}); kernel object {:#x} ({}); entry {:#x} ({}); \
                 kernel arguments at {:#x} ({}); completion signal {signal:#x} ({})",
                packet.grid_size,
                packet.workgroup_size,
                at,
                memory::describe(vm, at),
                memory::describe(vm, queue_va),
                packet.kernel_object,
                memory::describe(vm, packet.kernel_object),
                d.entry(),
                memory::describe(vm, d.entry()),
                packet.kernarg_address,
                memory::describe(vm, packet.kernarg_address),
                memory::describe(vm, signal),
            ),
        );
    }

    fn dispatch_error(&mut self, code: u64, what: &str) -> Step {
        self.log_once(
            &format!("AQL dispatch error {code:#x}"),
            &format!(
                "KERNEL_DISPATCH at index {}: {what}: queue error {code:#x}",
                self.st.rptr
            ),
        );
        self.queue_error(code)
    }

    fn memory_error(&mut self, what: &str, e: &Fault) -> Step {
        self.log_once(
            &format!("AQL memory {what}"),
            &format!(
                "{what} unreadable at packet {} ({e}): queue error",
                self.st.rptr
            ),
        );
        self.queue_error(code::MEMORY_VIOLATION)
    }

    /// Stops the queue with `code` in its `queue_inactive_signal` (and its event).
    fn queue_error(&mut self, code: u64) -> Step {
        self.st.stopped = Some(code);
        self.st.dispatch = None;
        if self.p.mm_gone() {
            return Step::Stopped;
        }
        let sig = self
            .queue_va()
            .and_then(|q| read_u64(self.vm(), q + off::INACTIVE_SIGNAL as u64));
        match sig {
            Ok(0) => log::warn!(
                "kfd-sim: pid {}: AQL queue {} stopped with error {code:#x} (no queue_inactive_signal to report it in)",
                self.p.pid(),
                self.w.qid
            ),
            Err(e) => log::warn!(
                "kfd-sim: pid {}: AQL queue {} stopped with error {code:#x} (queue_inactive_signal unreadable: {e})",
                self.p.pid(),
                self.w.qid
            ),
            Ok(s) => {
                if let Err(e) = self.signal_store(s, code) {
                    log::warn!("kfd-sim: pid {}: AQL queue {}: queue_inactive_signal: {e}", self.p.pid(), self.w.qid);
                }
            }
        }
        Step::Stopped
    }

    /// Stores `v` into signal `s` and raises its event.
    fn signal_store(&self, s: u64, v: u64) -> Result<(), Fault> {
        store_u64(self.vm(), s.wrapping_add(off::SIG_VALUE), v)?;
        self.raise(s)
    }

    /// The signal's event: its id into the mailbox, then the interrupt.
    fn raise(&self, s: u64) -> Result<(), Fault> {
        let mailbox = read_u64(self.vm(), s.wrapping_add(off::SIG_MAILBOX))?;
        if mailbox == 0 {
            return Ok(());
        }
        let id = read_u32(self.vm(), s.wrapping_add(off::SIG_EVENT_ID))?;
        store_u64(self.vm(), mailbox, u64::from(id))?;
        let qid = self.w.qid;
        self.p.with_queues(|qs| qs.interrupt(qid, id, EOP_ID_BITS));
        Ok(())
    }

    /// Completes the packet at the read index: its signal, its header, the read index.
    fn complete(&mut self, signal: u64, start_ts: Option<u64>) -> Step {
        if signal != 0 {
            let r = (|| -> Result<(), Fault> {
                let profiling = self
                    .queue_va()
                    .and_then(|q| read_u32(self.vm(), q + off::PROPERTIES as u64))
                    .is_ok_and(|p| p & PROFILING != 0);
                if profiling {
                    let end = gpu_timestamp();
                    let start = start_ts.unwrap_or(end);
                    write_va(
                        self.vm(),
                        signal.wrapping_add(off::SIG_START_TS),
                        &start.to_le_bytes(),
                    )?;
                    write_va(
                        self.vm(),
                        signal.wrapping_add(off::SIG_END_TS),
                        &end.to_le_bytes(),
                    )?;
                }
                fetch_add_u64(self.vm(), signal.wrapping_add(off::SIG_VALUE), u64::MAX)?;
                self.raise(signal)
            })();
            if let Err(e) = r {
                return self.memory_error(&format!("completion signal {signal:#x}"), &e);
            }
        }
        let at = self.packet_va();
        let next = self.st.rptr.wrapping_add(1);
        // The slot is free again before the read index says so.
        let r = write_va(self.vm(), at, &[ty::INVALID])
            .and_then(|()| store_u64(self.vm(), self.w.rptr_addr, next));
        if let Err(e) = r {
            return self.memory_error("the ring or read_dispatch_id", &e);
        }
        self.st.rptr = next;
        Step::Ran
    }
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut q = [0u8; 8];
    if let Some(s) = b.get(o..o + 8) {
        q.copy_from_slice(s);
    }
    u64::from_le_bytes(q)
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    let mut q = [0u8; 4];
    if let Some(s) = b.get(o..o + 4) {
        q.copy_from_slice(s);
    }
    u32::from_le_bytes(q)
}

/// Names of the PM4 type-3 opcodes ROCr and HIP put in indirect buffers.
fn pm4_name(op: u32) -> String {
    match op {
        0x10 => "NOP".into(),
        0x37 => "WRITE_DATA".into(),
        0x3c => "WAIT_REG_MEM".into(),
        0x3f => "INDIRECT_BUFFER".into(),
        0x46 => "EVENT_WRITE".into(),
        0x49 => "RELEASE_MEM".into(),
        0x50 => "DMA_DATA".into(),
        0x58 => "ACQUIRE_MEM".into(),
        0x76 => "SET_SH_REG".into(),
        0x79 => "SET_UCONFIG_REG".into(),
        other => format!("opcode {other:#x}"),
    }
}
