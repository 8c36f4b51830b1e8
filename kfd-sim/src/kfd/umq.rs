//! The simulated SDMA engines running user-mode queues, as the hardware scheduler runs a
//! process's SDMA queues once the driver mapped them: userspace writes packets into the ring
//! (in its own memory, mapped in its GPU VM), stores the new write pointer and writes it to the
//! queue's doorbell through its mapping of the doorbell slice; the engine executes the packets
//! from its read pointer up to that write pointer against the process's GPU VM and writes the
//! read pointer back.
//!
//! - **When it runs.** One thread per machine, started when a doorbell slice is first mapped
//!   (a queue cannot be rung before). A CPU store into a mapping wakes nobody, so the thread
//!   polls the mapped doorbells of every active SDMA queue: every [`POLL_MIN`] while there is
//!   work, backing off to [`POLL_MAX`] when idle (no core spins). It holds the machine weakly
//!   and ends when the machine goes.
//! - **What it reads.** The doorbell of a queue is the 64-bit value at `doorbell_id * 8` in the
//!   process's slice (on gfx9 an SDMA doorbell carries the write pointer in bytes). A value
//!   that differs from the last one seen is latched as the write pointer, as the doorbell write
//!   is latched into the engine's write-pointer register. The ring, the read pointer address
//!   and every packet's addresses are GPU VAs of the process's VM on the queue's GPU.
//! - **What it skips.** A process whose queues are evicted (CRIU's PROCESS_INFO, a restore
//!   before RESUME) runs nothing; evicting waits for the packet in flight
//!   ([`wait_idle`]): the queue is preempted at a packet boundary. A queue without a ring, with
//!   a zero percentage, or hung does not run. Nor does an AQL compute queue: the packet its
//!   doorbell names is only looked at, and reported once per type ([`super::aql`]).
//! - **Faults.** A packet the engine does not know, a ring pointer that is not dword aligned or
//!   more than a ring ahead, or a VM fault hangs the queue (logged; nothing after it runs), as
//!   a hung SDMA queue waits for a reset on hardware. An incomplete packet at the write pointer
//!   waits for the rest.
//! - **Waits.** A POLL_REGMEM on memory whose condition does not hold leaves the read pointer
//!   at the packet; the engine polls it again on its next round (ROCr makes a copy wait for its
//!   dependency signals so).
//! - **Signals.** FENCE writes a dword anywhere in the VM (the event's slot in the signal page,
//!   as ROCr does); ATOMIC ADD64 decrements a completion signal's value; TRAP delivers the event interrupt with its 28-bit context, which the
//!   driver's handler turns into SET_EVENT of the event whose slot was written
//!   ([`signal_event_interrupt`]).
//! - **Checkpoint.** The executed and latched pointers are part of the queue's MQD image, which
//!   CRIU's private data carries; a restored queue resumes the packets that were submitted but
//!   not executed ([`latch_doorbells`] runs before the MQDs are saved).

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use kfd_abi::sdma::{DecodeError, Decoder};

use super::events::signal_event_interrupt;
use crate::machine::{lock, MachineInner};
use crate::process::{KfdProcess, ProcState, QueueKind};
use crate::render::Vm;
use crate::sdma::{read_va, run_packet, write_va, Fault, Ran};

/// The poll interval while queues have work.
pub(crate) const POLL_MIN: Duration = Duration::from_micros(100);
/// The longest poll interval of an idle engine.
pub(crate) const POLL_MAX: Duration = Duration::from_millis(10);
/// Bits of an SDMA TRAP's context that carry the event id (`kfd_int_process_v9`).
const TRAP_ID_BITS: u32 = 28;

/// Starts the machine's engine thread if it is not running yet.
pub(crate) fn ensure_engine(m: &Arc<MachineInner>) {
    let weak = Arc::downgrade(m);
    m.engine_started.call_once(move || {
        let spawned = std::thread::Builder::new()
            .name("kfd-sim-sdma".into())
            .spawn(move || run(&weak));
        if let Err(e) = spawned {
            log::error!(
                "kfd-sim: cannot start the SDMA engine thread: {e}; user queues will not run"
            );
        }
    });
}

/// The engine thread: polls until the machine is gone.
fn run(machine: &Weak<MachineInner>) {
    let mut wait = POLL_MIN;
    loop {
        let Some(m) = machine.upgrade() else {
            return;
        };
        let mut worked = false;
        for p in m.processes() {
            // Every process gets its turn, whatever the others did.
            worked |= service(&m, &p);
        }
        drop(m);
        wait = if worked {
            POLL_MIN
        } else {
            (wait * 2).min(POLL_MAX)
        };
        std::thread::sleep(wait);
    }
}

/// Waits until the engine is not running a packet of `p` (call after evicting its queues).
pub(crate) fn wait_idle(p: &KfdProcess) {
    drop(lock(&p.engine));
}

/// Latches every mapped SDMA doorbell of `st` into its queue's write pointer.
pub(crate) fn latch_doorbells(m: &MachineInner, p: &KfdProcess, st: &mut ProcState) {
    let devices: Vec<usize> = st.pdds.iter().map(|d| d.dev).collect();
    for q in st.queues.values_mut() {
        if q.kind == QueueKind::Compute {
            continue;
        }
        let Some(&dev) = devices.get(q.pdd) else {
            continue;
        };
        let Some(page) = m.device_pages.mapped_doorbell(p, dev) else {
            continue;
        };
        let mut b = [0u8; 8];
        if !page.read(u64::from(q.doorbell_id) * 8, &mut b) {
            continue;
        }
        let value = u64::from_le_bytes(b);
        if value != q.ring_state.doorbell {
            log::debug!(
                "kfd-sim: pid {}: SDMA queue doorbell {} latched: {:#x} -> {:#x} (rptr {:#x})",
                p.pid,
                q.doorbell_id,
                q.ring_state.doorbell,
                value,
                q.ring_state.rptr
            );
            q.ring_state.doorbell = value;
            q.ring_state.wptr = value;
        }
    }
}

/// One queue's pending work, taken under the process lock.
struct Work {
    qid: u32,
    vm: Arc<Mutex<Vm>>,
    ring: u64,
    ring_size: u64,
    rptr_addr: u64,
    from: u64,
    to: u64,
}

/// Runs the pending packets of `p`'s queues; whether any ran.
fn service(m: &MachineInner, p: &KfdProcess) -> bool {
    let _running = lock(&p.engine);
    let (work, aql): (Vec<Work>, _) = {
        let mut st = p.lock();
        latch_doorbells(m, p, &mut st);
        if st.evictions > 0 {
            return false;
        }
        let aql = super::aql::rung(m, p, &st);
        let work = st
            .queues
            .iter()
            .filter(|(_, q)| {
                q.kind != QueueKind::Compute
                    && super::queues::queue_active(&st, q)
                    && !q.ring_state.hung
                    && q.ring_state.rptr != q.ring_state.wptr
            })
            .filter_map(|(&qid, q)| {
                let vm = st.pdds.get(q.pdd)?.drm.as_ref()?.vm.clone();
                Some(Work {
                    qid,
                    vm,
                    ring: q.ring,
                    ring_size: q.ring_size,
                    rptr_addr: q.rptr,
                    from: q.ring_state.rptr,
                    to: q.ring_state.wptr,
                })
            })
            .collect();
        (work, aql)
    };
    // The AQL queues' packets are only looked at (and reported): no work for the engine.
    super::aql::report(m, p, aql);
    let mut ran = false;
    for w in work {
        log::debug!(
            "kfd-sim: pid {}: SDMA queue {} runs {:#x}..{:#x}",
            p.pid,
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
fn run_queue(p: &KfdProcess, w: &Work) -> bool {
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
            let evicted = {
                let mut st = p.lock();
                let Some(q) = st.queues.get_mut(&w.qid).filter(|q| q.ring == w.ring) else {
                    // Destroyed under the engine.
                    return Ok(ran);
                };
                q.ring_state.rptr = rptr;
                st.evictions > 0
            };
            // The read pointer is in memory before the packet's interrupt wakes anyone: a waiter
            // woken by the event sees the packet consumed.
            write_va(&w.vm, w.rptr_addr, &rptr.to_le_bytes())?;
            if !traps.is_empty() {
                let mut st = p.lock();
                let mut woke = 0;
                for ctx in traps {
                    let set = signal_event_interrupt(&mut st, ctx, TRAP_ID_BITS);
                    log::debug!(
                        "kfd-sim: pid {}: SDMA queue {} TRAP {ctx:#x}: {set} event(s) set",
                        p.pid,
                        w.qid
                    );
                    woke += set;
                }
                if woke > 0 {
                    p.events_cv.notify_all();
                }
            }
            if evicted {
                return Ok(ran);
            }
        }
    })();
    match result {
        Ok(ran) => ran,
        Err(e) => {
            log::warn!("kfd-sim: pid {}: SDMA queue {} hung: {e}", p.pid, w.qid);
            if let Some(q) = p.lock().queues.get_mut(&w.qid) {
                q.ring_state.hung = true;
            }
            true
        }
    }
}
