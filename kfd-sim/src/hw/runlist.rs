//! What the driver hands the hardware scheduler, as the hardware reads it: the runlist of
//! processes whose queues are mapped ([`Runlist`]), each process with its queues ([`MappedProcess`],
//! [`Queues`]), and the polling loop every engine runs over it ([`poll`]): the SDMA engine's
//! ([`scheduler`](super::scheduler)) and each GPU's command processor ([`cp`](super::cp)).

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::cp::memory::SvmView;
use super::queue::{MappedQueue, RingState};
use crate::host::lock;
use crate::lock_order::Ordered;

/// The poll interval while queues have work.
pub(crate) const POLL_MIN: Duration = Duration::from_micros(100);
/// The longest poll interval of an idle engine.
pub(crate) const POLL_MAX: Duration = Duration::from_millis(10);

/// The processes whose queues the driver has mapped: the scheduler's runlist.
pub(crate) trait Runlist: Send + Sync + 'static {
    /// One process of the runlist.
    type Process: MappedProcess;

    /// Every process, in any order.
    fn processes(&self) -> Vec<Arc<Self::Process>>;

    /// Notes something the GPU met and does not do: a warning the first time `key` is seen,
    /// debug level later.
    fn log_once(&self, key: &str, message: &str);

    /// Engine `engine` (its thread) died of a panic and runs nothing any more: the driver fails
    /// what would wait on it for ever. Called from the dead engine's thread, holding nothing.
    fn engine_died(&self, engine: &str);
}

/// One process of the runlist: its queues, and the lock that preemption waits on.
pub(crate) trait MappedProcess {
    /// Its pid, for the log.
    fn pid(&self) -> u32;

    /// Held by the engine while it runs packets of this process: the driver takes it once after
    /// evicting the queues, to wait for the packet in flight (a queue preemption).
    fn preemption(&self) -> &Ordered<()>;

    /// The same for the command processors: held while they run a round of this process's
    /// AQL queues.
    fn cp_preemption(&self) -> &Ordered<()>;

    /// Runs `f` on the process's queues, under the lock the driver keeps them under.
    fn with_queues<R>(&self, f: impl FnOnce(&mut dyn Queues) -> R) -> R;

    /// Whether the process's mm is gone (it exited while its queues ran): asked when an engine
    /// could not reach its memory. The driver destroys the queues of such a process from its MMU
    /// notifier's release, so what the engine met is no fault of the queue: it stops without a
    /// word, and the process's queues are gone. Call without the process's lock.
    fn mm_gone(&self) -> bool;
}

/// The queues of one process, under its lock.
pub(crate) trait Queues {
    /// Whether the driver has evicted (preempted) the process's queues.
    fn evicted(&self) -> bool;

    /// Every queue of the process, as the GPU sees it.
    fn mapped(&mut self) -> Vec<MappedQueue<'_>>;

    /// The ring registers of queue `qid` (if it still has ring `ring`, when given: a queue
    /// destroyed or replaced under the engine is left alone).
    fn ring_state(&mut self, qid: u32, ring: Option<u64>) -> Option<&mut RingState>;

    /// An interrupt an engine raised on queue `qid` naming (the low `valid_bits` bits of) an
    /// event id: an SDMA TRAP's context, a command processor's end-of-pipe interrupt, a wave's
    /// `s_sendmsg`. The driver's interrupt handler runs on it.
    fn interrupt(&mut self, qid: u32, context: u32, valid_bits: u32);

    /// A GPU VM fault of a wave on queue `qid` at `va`: the driver's VM fault handler runs on
    /// it (the process's memory events).
    fn vm_fault(&mut self, qid: u32, va: u64, write: bool);

    /// The SVM ranges GPU `device` may reach, and whose memory they are.
    fn svm(&self, device: usize) -> SvmView;
}

/// Runs `round` over the runlist until the machine is gone: again at once (after a yield) while
/// rounds find work, then after [`POLL_MIN`], backing off to [`POLL_MAX`] while they do not (an
/// idle engine does not spin). The loop of the SDMA engine and of each GPU's command processor.
pub(crate) fn poll<R: Runlist>(runlist: &Weak<R>, mut round: impl FnMut(&R) -> bool) {
    let mut wait = POLL_MIN;
    while let Some(r) = runlist.upgrade() {
        let worked = round(&r);
        drop(r);
        if worked {
            // More may be ready at once (a dispatch goes on round after round): the thread
            // stays runnable. A sleep, however short, gives its core away, and on a host whose
            // cores are all busy (a guest's vCPUs, one spun by a client waiting for the
            // dispatch) getting it back can take longer than a round.
            wait = POLL_MIN;
            std::thread::yield_now();
            continue;
        }
        std::thread::sleep(wait);
        wait = (wait * 2).min(POLL_MAX);
    }
}

/// The body of an engine thread (`engine` names it in the log): runs `body`, and if it panics,
/// logs the panic and tells the runlist's driver ([`Runlist::engine_died`]), so that a client
/// waiting for the engine's work gets an error instead of waiting for ever. The thread then
/// ends: nothing restarts an engine (its state may be half-updated), as nothing restarts a GPU
/// ring that hung until a reset.
///
/// `AssertUnwindSafe`: after the panic the engine's own state is dropped, not looked at; the
/// locks it held are released poisoned, and [`lock`] takes them as they are.
pub(crate) fn run_engine<R: Runlist>(engine: &str, runlist: &Weak<R>, body: impl FnOnce()) {
    let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) else {
        return;
    };
    let what = crate::host::panic_message(&*payload);
    log::error!(
        "kfd-sim: {engine} panicked ({what}): it runs no queue any more, and waits for events \
         fail; please report this as a bug"
    );
    if let Some(r) = runlist.upgrade() {
        r.engine_died(engine);
    }
}

/// Waits until no engine runs a packet of `p` and no command processor a round of it (call
/// after evicting its queues).
pub(crate) fn wait_idle(p: &impl MappedProcess) {
    drop(lock(p.preemption()));
    drop(lock(p.cp_preemption()));
}
