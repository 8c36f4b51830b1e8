//! Completion signals (value, profiling timestamps, the event interrupt) and queue errors.

use super::memory::{fetch_add_u64, read_u32, read_u64, store_u64};
use super::packet::{code, off, ty, EOP_ID_BITS, PROFILING};
use super::{QueueRun, Step};
use crate::hw::runlist::{MappedProcess, Runlist};
use crate::hw::sdma::{gpu_timestamp, write_va, Fault};

impl<R: Runlist> QueueRun<'_, R> {
    pub(super) fn memory_error(&mut self, what: &str, e: &Fault) -> Step {
        self.log_failure(
            &format!("AQL memory {what}"),
            &format!(
                "{what} unreadable at packet {} ({e}): queue error",
                self.st.rptr
            ),
        );
        self.queue_error(code::MEMORY_VIOLATION)
    }

    /// Stops the queue with `code` in its `queue_inactive_signal` (and its event).
    pub(super) fn queue_error(&mut self, code: u64) -> Step {
        self.st.stopped = Some(code);
        self.st.dispatch = None;
        // A process gone under its queue: the driver destroyed the queue, nothing to report.
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
    pub(super) fn signal_store(&self, s: u64, v: u64) -> Result<(), Fault> {
        store_u64(self.vm(), s.wrapping_add(off::SIG_VALUE), v)?;
        self.raise(s)
    }

    /// The signal's event: its id into the mailbox, then the interrupt.
    pub(super) fn raise(&self, s: u64) -> Result<(), Fault> {
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
    pub(super) fn complete(&mut self, signal: u64, start_ts: Option<u64>) -> Step {
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
