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
//!   ([`poll`]: often while there is work, backing off when there is
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
//!   ([`wait_idle`](super::runlist::wait_idle)), whose waves stop at an instruction boundary
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
//!
//! Here: the packet loop. Beside it: [`state`] (what it keeps of each queue), `packet` (the
//! layouts it reads),
//! `vendor` (PM4 and BARRIER_VALUE packets), `launch` (starting a dispatch, scratch, rounds,
//! failures), `dispatch` (the workgroups on worker threads), `signal` (completion signals and
//! queue errors), [`cwsr`] and [`memory`] (reads and atomics through the GPU's VM).
pub(crate) mod cwsr;
mod dispatch;
mod launch;
pub(crate) mod memory;
mod packet;
mod signal;
pub(crate) mod state;
mod vendor;

use std::sync::{Arc, Weak};

use self::cwsr::{Area, CwsrError, Layout};
use self::memory::{load_u64, read_u32, SvmView};
use self::state::QueueState;
use super::queue::Engine;
use super::runlist::{poll, run_engine, MappedProcess, Runlist};
use super::sdma::{read_va, Fault};
use super::vm::Vm;
use crate::host::lock;
use crate::lock_order::{rank, Ordered};
use packet::{code, off, ty, type_name, u64_at, PACKET};

/// Packets one queue runs per pass (dispatch rounds count as one).
const PACKETS_PER_PASS: usize = 64;

/// The command processors of one machine: a thread per GPU, each started once.
#[derive(Debug)]
pub(crate) struct CommandProcessors {
    started: Ordered<Vec<usize>>,
}

impl Default for CommandProcessors {
    fn default() -> Self {
        Self {
            started: Ordered::new(rank::CP_STARTED, Vec::new()),
        }
    }
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
            .spawn(move || {
                let engine = format!("the command processor of GPU {device}");
                run_engine(&engine, &weak, || run(&weak, device));
            });
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
        state: Arc<Ordered<QueueState>>,
        vm: Arc<Ordered<Vm>>,
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
    vm: Arc<Ordered<Vm>>,
    svm: Arc<SvmView>,
    state: Arc<Ordered<QueueState>>,
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
                let state = Arc::clone(q.state.cp.get_or_insert_with(|| {
                    Arc::new(Ordered::new(rank::QUEUE_STATE, QueueState::default()))
                }));
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
    fn vm(&self) -> &Ordered<Vm> {
        &self.w.vm
    }

    fn log_once(&self, key: &str, message: &str) {
        self.runlist.log_once(
            key,
            &format!("pid {}: AQL queue {}: {message}", self.p.pid(), self.w.qid),
        );
    }

    /// As [`log_once`](Self::log_once) for a failure to reach the process's memory, which is no
    /// fault of the queue when the process's mm is gone under it (the driver destroyed the
    /// queue): then it is logged at debug level only. Only failures ask whether the mm is gone
    /// (the kfd_bridge module, and the process's mappings): an ordinary message must not wait
    /// for either while the round holds the process's queues.
    fn log_failure(&self, key: &str, message: &str) {
        if self.p.mm_gone() {
            log::debug!(
                "kfd-sim: pid {}: AQL queue {}: {message} (its process's mm is gone)",
                self.p.pid(),
                self.w.qid
            );
            return;
        }
        self.log_once(key, message);
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
                    self.log_failure(
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
                self.log_failure(
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
}
