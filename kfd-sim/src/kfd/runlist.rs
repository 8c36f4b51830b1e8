//! What the driver gives the hardware scheduler (the HWS runlist of amdkfd's device queue
//! manager): every KFD process with its queues as the GPU reads them, and the interrupt handler
//! for what the engines raise on them (`kfd_int_process_v9`).

use std::sync::Arc;

use super::events::{signal_event_interrupt, signal_vm_fault};
use crate::hw::cp::memory::SvmView;
use crate::hw::queue::{Engine, MappedQueue, RingState};
use crate::hw::runlist::{MappedProcess, Queues, Runlist};
use crate::lock_order::Ordered;
use crate::state::machine::MachineInner;
use crate::state::process::{KfdProcess, ProcState};
use crate::state::queue::QueueKind;
use crate::state::svm_range::SvmAccess;

impl Runlist for MachineInner {
    type Process = KfdProcess;

    fn processes(&self) -> Vec<Arc<KfdProcess>> {
        MachineInner::processes(self)
    }

    fn log_once(&self, key: &str, message: &str) {
        MachineInner::log_once(self, key, message);
    }

    /// The machine is wedged (as amdgpu marks a GPU whose reset failed): every waiter of every
    /// process wakes, and WAIT_EVENTS fails with `EIO` instead of sleeping (`kfd/events.rs`).
    fn engine_died(&self, engine: &str) {
        self.wedge(engine);
        for p in self.processes() {
            // Taken and dropped before the wake-up: a waiter between its check of the machine
            // and its sleep holds the state, so it cannot miss the notification.
            drop(p.lock());
            p.events_cv.notify_all();
        }
    }
}

impl MappedProcess for KfdProcess {
    fn pid(&self) -> u32 {
        self.pid
    }

    fn preemption(&self) -> &Ordered<()> {
        &self.engine
    }

    fn cp_preemption(&self) -> &Ordered<()> {
        &self.cp
    }

    fn with_queues<R>(&self, f: impl FnOnce(&mut dyn Queues) -> R) -> R {
        let mut st = self.lock();
        f(&mut ProcessQueues {
            process: self,
            st: &mut st,
        })
    }

    fn mm_gone(&self) -> bool {
        KfdProcess::mm_gone(self)
    }
}

/// The queues of a locked KFD process, as the scheduler reads them.
pub(crate) struct ProcessQueues<'a> {
    /// The process.
    pub process: &'a KfdProcess,
    /// Its state, locked.
    pub st: &'a mut ProcState,
}

impl Queues for ProcessQueues<'_> {
    fn evicted(&self) -> bool {
        self.st.evictions > 0
    }

    fn mapped(&mut self) -> Vec<MappedQueue<'_>> {
        let ProcState { pdds, queues, .. } = &mut *self.st;
        queues
            .iter_mut()
            .filter_map(|(&qid, q)| {
                let pdd = pdds.get(q.pdd)?;
                let ours = q.cwsr_mqd();
                Some(MappedQueue {
                    qid,
                    device: pdd.dev,
                    engine: match (q.kind, q.aql) {
                        (QueueKind::Compute, true) => Engine::Aql,
                        (QueueKind::Compute, false) => Engine::Pm4,
                        _ => Engine::Sdma,
                    },
                    active: q.runnable(),
                    ring: q.ring,
                    ring_size: q.ring_size,
                    rptr_addr: q.rptr,
                    doorbell_id: q.doorbell_id,
                    state: &mut q.ring_state,
                    ctx: (q.ctx, u64::from(q.ctx_size)),
                    // The CWSR registers are in the simulator's own compute MQD; an MQD it did
                    // not write (an image of another driver) has none to read or to write.
                    ctl_stack: if ours { &mut q.ctl_stack } else { &mut [] },
                    mqd: if ours { &mut q.mqd } else { &mut [] },
                    doorbells: self.process.mapped_doorbell(pdd.dev),
                    vm: pdd.drm.as_ref().map(|d| Arc::clone(&d.vm)),
                })
            })
            .collect()
    }

    fn ring_state(&mut self, qid: u32, ring: Option<u64>) -> Option<&mut RingState> {
        self.st
            .queues
            .get_mut(&qid)
            .filter(|q| ring.is_none_or(|r| q.ring == r))
            .map(|q| &mut q.ring_state)
    }

    fn interrupt(&mut self, qid: u32, context: u32, valid_bits: u32) {
        let set = signal_event_interrupt(self.st, context, valid_bits);
        log::debug!(
            "kfd-sim: pid {}: queue {qid} interrupt {context:#x} ({valid_bits} id bits): {set} \
             event(s) set",
            self.process.pid
        );
        if set > 0 {
            self.process.events_cv.notify_all();
        }
    }

    fn vm_fault(&mut self, qid: u32, va: u64, write: bool) {
        let gpu_id = self
            .st
            .queues
            .get(&qid)
            .and_then(|q| self.st.pdds.get(q.pdd))
            .map_or(0, |pdd| pdd.user_gpu_id);
        let set = signal_vm_fault(self.st, gpu_id, va, write);
        log::debug!(
            "kfd-sim: pid {}: queue {qid} GPU VM fault at {va:#x}: {set} memory event(s) set",
            self.process.pid
        );
        if set > 0 {
            self.process.events_cv.notify_all();
        }
    }

    fn svm(&self, device: usize) -> SvmView {
        let Some(pi) = self.st.pdds.iter().position(|p| p.dev == device) else {
            return SvmView::default();
        };
        let xnack = self.st.xnack;
        SvmView {
            ranges: self
                .st
                .svm
                .iter()
                .filter(|r| xnack || r.access.get(pi).is_some_and(|&a| a != SvmAccess::None))
                .map(|r| (r.start, r.end()))
                .collect(),
            mem: self.st.svm_mem,
        }
    }
}
