//! The simulated SDMA engines running user-mode queues, as the hardware scheduler runs a
//! process's SDMA queues once the driver mapped them: userspace writes packets into the ring
//! (in its own memory, mapped in its GPU VM), stores the new write pointer and writes it to the
//! queue's doorbell through its mapping of the doorbell slice; the engine executes the packets
//! from its read pointer up to that write pointer against the process's GPU VM and writes the
//! read pointer back.
//!
//! - **What it knows.** Only what the driver maps for it: the runlist of processes
//!   ([`Runlist`], in [`runlist`](super::runlist)), each process's queues as their registers
//!   ([`MappedQueue`]), the process's doorbell slice and GPU VM on each queue's GPU. It never
//!   sees the driver's state.
//! - **When it runs.** One thread per machine, started when a doorbell slice is first mapped
//!   (a queue cannot be rung before). A CPU store into a mapping wakes nobody, so the thread
//!   polls the mapped doorbells of every active SDMA queue: every
//!   [`POLL_MIN`](super::runlist::POLL_MIN) while there is work, backing off to
//!   [`POLL_MAX`](super::runlist::POLL_MAX) when idle (no core spins). It holds the machine
//!   weakly and ends when the machine goes.
//! - **What it reads.** The doorbell of a queue is the 64-bit value at `doorbell_id * 8` in the
//!   process's slice (on gfx9 an SDMA doorbell carries the write pointer in bytes). A value
//!   that differs from the last one seen is latched as the write pointer, as the doorbell write
//!   is latched into the engine's write-pointer register. The ring, the read pointer address
//!   and every packet's addresses are GPU VAs of the process's VM on the queue's GPU.
//! - **What it skips.** A process whose queues are evicted (CRIU's PROCESS_INFO, a restore
//!   before RESUME) runs nothing; evicting waits for the packet in flight
//!   ([`wait_idle`](super::runlist::wait_idle)): the queue is preempted at a packet boundary.
//!   A queue without a ring, with a zero percentage, or hung does not run. AQL compute queues are the command processor's
//!   ([`super::cp`]), which runs on its own threads over the same runlist.
//! - **Faults.** A packet the engine does not know, a ring pointer that is not dword aligned or
//!   more than a ring ahead, or a VM fault hangs the queue (logged; nothing after it runs), as
//!   a hung SDMA queue waits for a reset on hardware. An incomplete packet at the write pointer
//!   waits for the rest.
//! - **Waits.** A POLL_REGMEM on memory whose condition does not hold leaves the read pointer
//!   at the packet; the engine polls it again on its next round (ROCr makes a copy wait for its
//!   dependency signals so).
//! - **Signals.** FENCE writes a dword anywhere in the VM (the event's slot in the signal page,
//!   as ROCr does); ATOMIC ADD64 decrements a completion signal's value; TRAP raises the event
//!   interrupt with its context ([`Queues::interrupt`]), which the driver's handler turns into
//!   SET_EVENT of the event whose slot was written.
//! - **Checkpoint.** The executed and latched pointers are part of the queue's MQD image, which
//!   CRIU's private data carries; a restored queue resumes the packets that were submitted but
//!   not executed ([`latch_doorbells`] runs before the MQDs are saved).

use std::sync::{Arc, Once, Weak};

use kfd_abi::sdma::{DecodeError, Decoder};

use super::queue::Engine;
use super::runlist::{poll, run_engine, MappedProcess, Queues, Runlist};
use super::sdma::{read_va, run_packet, write_va, Fault, Ran};
use super::vm::Vm;
use crate::host::lock;
use crate::lock_order::Ordered;

/// Bits of an SDMA TRAP's context that carry the event id (`kfd_int_process_v9`).
const TRAP_ID_BITS: u32 = 28;

/// The queue scheduler of one machine: its engine thread, started once.
#[derive(Debug)]
pub(crate) struct Scheduler {
    started: Once,
}

impl Default for Scheduler {
    fn default() -> Self {
        Self {
            started: Once::new(),
        }
    }
}

impl Scheduler {
    /// Starts the engine thread over `runlist` if it is not running yet.
    pub(crate) fn start<R: Runlist>(&self, runlist: &Arc<R>) {
        let weak = Arc::downgrade(runlist);
        self.started.call_once(move || {
            let spawned = std::thread::Builder::new()
                .name("kfd-sim-sdma".into())
                .spawn(move || run_engine("the SDMA engine", &weak, || run(&weak)));
            if let Err(e) = spawned {
                log::error!(
                    "kfd-sim: cannot start the SDMA engine thread: {e}; user queues will not run"
                );
            }
        });
    }
}

/// The engine thread: polls until the machine is gone.
fn run<R: Runlist>(runlist: &Weak<R>) {
    poll(runlist, |r| {
        // Every process gets its turn, whatever the others did.
        r.processes()
            .iter()
            .fold(false, |worked, p| service(&**p) | worked)
    });
}

/// Latches every mapped SDMA doorbell of process `pid` into its queue's write pointer, and
/// every AQL doorbell into the index of its queue's last valid packet.
pub(crate) fn latch_doorbells(pid: u32, queues: &mut dyn Queues) {
    for q in queues.mapped() {
        if q.engine == Engine::Aql {
            if let Some(value) = q.doorbell() {
                q.state.wptr = q.state.wptr.max(value);
            }
            continue;
        }
        if q.engine != Engine::Sdma {
            continue;
        }
        let Some(value) = q.doorbell() else {
            continue;
        };
        if value != q.state.doorbell {
            log::debug!(
                "kfd-sim: pid {pid}: SDMA queue doorbell {} latched: {:#x} -> {:#x} (rptr {:#x})",
                q.doorbell_id,
                q.state.doorbell,
                value,
                q.state.rptr
            );
            q.state.doorbell = value;
            q.state.wptr = value;
        }
    }
}

/// One queue's pending work, taken under the process lock.
struct Work {
    qid: u32,
    vm: Arc<Ordered<Vm>>,
    ring: u64,
    ring_size: u64,
    rptr_addr: u64,
    from: u64,
    to: u64,
}

/// Runs the pending packets of `p`'s queues; whether any ran.
fn service(p: &impl MappedProcess) -> bool {
    let _running = lock(p.preemption());
    let pid = p.pid();
    let pending = p.with_queues(|qs| {
        latch_doorbells(pid, qs);
        if qs.evicted() {
            return None;
        }
        let work: Vec<Work> = qs
            .mapped()
            .into_iter()
            .filter(|q| {
                q.engine == Engine::Sdma
                    && q.active
                    && !q.state.hung
                    && q.state.rptr != q.state.wptr
            })
            .filter_map(|q| {
                Some(Work {
                    qid: q.qid,
                    vm: q.vm?,
                    ring: q.ring,
                    ring_size: q.ring_size,
                    rptr_addr: q.rptr_addr,
                    from: q.state.rptr,
                    to: q.state.wptr,
                })
            })
            .collect();
        Some(work)
    });
    let Some(work) = pending else {
        return false;
    };
    let mut ran = false;
    for w in work {
        log::debug!(
            "kfd-sim: pid {pid}: SDMA queue {} runs {:#x}..{:#x}",
            w.qid,
            w.from,
            w.to
        );
        ran |= run_queue(p, &w);
    }
    ran
}

/// Why the engine stopped on a queue for good.
#[derive(Debug, thiserror::Error)]
enum Hang {
    #[error("write pointer {to:#x} is not a whole number of dwords ahead of {from:#x} within one ring of {ring_size:#x} bytes")]
    BadPointers { from: u64, to: u64, ring_size: u64 },
    #[error(transparent)]
    Fault(#[from] Fault),
}

/// Reads the `len` pending bytes from ring offset `from`, wrapping at its end, as dwords.
fn fetch(w: &Work, len: u64) -> Result<Vec<u32>, Fault> {
    let at = w.from % w.ring_size;
    let first = len.min(w.ring_size - at);
    let mut raw = read_va(&w.vm, w.ring.saturating_add(at), first)?;
    if first < len {
        raw.extend(read_va(&w.vm, w.ring, len - first)?);
    }
    Ok(raw
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// Executes `w`'s packets one at a time, publishing the read pointer after each; stops at an
/// eviction, an incomplete packet, or a fault (which hangs the queue). Whether any packet ran.
fn run_queue(p: &impl MappedProcess, w: &Work) -> bool {
    let len = w.to.wrapping_sub(w.from);
    let result = (|| -> Result<bool, Hang> {
        if len % 4 != 0 || len > w.ring_size || w.ring_size % 4 != 0 {
            return Err(Hang::BadPointers {
                from: w.from,
                to: w.to,
                ring_size: w.ring_size,
            });
        }
        let dwords = fetch(w, len)?;
        let mut decoder = Decoder::new(&dwords);
        let mut ran = false;
        loop {
            let packet = match decoder.next() {
                None => return Ok(ran),
                // The rest of the packet is not submitted yet.
                Some(Err(DecodeError::Truncated { .. })) => return Ok(ran),
                Some(Err(e)) => return Err(Fault::Decode(e).into()),
                Some(Ok(packet)) => packet,
            };
            let mut traps = Vec::new();
            if run_packet(&w.vm, packet, &mut |ctx| traps.push(ctx))? == Ran::Waiting {
                // A poll not satisfied yet: polled again on the next round.
                return Ok(ran);
            }
            ran = true;
            let rptr = w.from.wrapping_add(decoder.position() as u64 * 4);
            let published = p.with_queues(|qs| {
                let state = qs.ring_state(w.qid, Some(w.ring))?;
                state.rptr = rptr;
                Some(qs.evicted())
            });
            let Some(evicted) = published else {
                // Destroyed under the engine.
                return Ok(ran);
            };
            // The read pointer is in memory before the packet's interrupt wakes anyone: a waiter
            // woken by the event sees the packet consumed.
            write_va(&w.vm, w.rptr_addr, &rptr.to_le_bytes())?;
            if !traps.is_empty() {
                p.with_queues(|qs| {
                    for ctx in traps {
                        qs.interrupt(w.qid, ctx, TRAP_ID_BITS);
                    }
                });
            }
            if evicted {
                return Ok(ran);
            }
        }
    })();
    match result {
        Ok(ran) => ran,
        Err(e) if p.mm_gone() => {
            log::debug!(
                "kfd-sim: pid {}: SDMA queue {} stopped: its process's mm is gone ({e})",
                p.pid(),
                w.qid
            );
            true
        }
        Err(e) => {
            log::warn!("kfd-sim: pid {}: SDMA queue {} hung: {e}", p.pid(), w.qid);
            p.with_queues(|qs| {
                if let Some(state) = qs.ring_state(w.qid, None) {
                    state.hung = true;
                }
            });
            true
        }
    }
}
