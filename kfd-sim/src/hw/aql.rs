//! What the simulated GPU makes of the packets a client rings on its AQL compute queues: it runs
//! none of them yet (no command processor, no shader execution; the command processor that will
//! run them belongs beside the SDMA engine, as `hw/cp.rs`, and takes the AQL queues off this
//! reader), but the engine thread looks at the packet each doorbell names, so that the daemon's
//! log says where a client stops and on what: the first packet of each type rung on the machine
//! is logged once (a warning), with its process, queue and index; later ones at debug level.
//!
//! An AQL queue's doorbell is its slot in the process's doorbell slice, as an SDMA queue's; the
//! client writes the index of the packet it has just made valid (HSA's doorbell signal). The
//! ring holds 64-byte packets; the low byte of a packet's header is its type
//! (`hsa_packet_type_t`), `INVALID` until the client has written the packet. A ring the engine
//! cannot read through the queue's GPU VM (a client that never rings it may keep it anywhere)
//! is not looked at.

use std::sync::{Arc, Mutex};

use super::queue::Engine;
use super::scheduler::{MappedProcess, Queues, Runlist};
use super::sdma::read_va;
use super::vm::Vm;

/// Bytes of an AQL packet.
const PACKET_BYTES: u64 = 64;
/// `HSA_PACKET_TYPE_INVALID`: a slot the client has not written (or the CP has consumed).
const TYPE_INVALID: u8 = 1;

/// The name of an AQL packet type (`hsa_packet_type_t`).
fn type_name(ty: u8) -> &'static str {
    match ty {
        0 => "VENDOR_SPECIFIC",
        1 => "INVALID",
        2 => "KERNEL_DISPATCH",
        3 => "BARRIER_AND",
        4 => "AGENT_DISPATCH",
        5 => "BARRIER_OR",
        _ => "reserved-type",
    }
}

/// An AQL queue whose doorbell names a packet not looked at yet.
pub(crate) struct Rung {
    qid: u32,
    vm: Arc<Mutex<Vm>>,
    ring: u64,
    index: u64,
    at: u64,
}

/// The AQL queues of a process that is not evicted whose doorbell names a packet the engine has
/// not reported yet. Call with the process's doorbells latched, under its lock.
pub(crate) fn rung(queues: &mut dyn Queues) -> Vec<Rung> {
    queues
        .mapped()
        .into_iter()
        .filter(|q| q.engine == Engine::Aql && q.active && q.ring_size >= PACKET_BYTES)
        .filter_map(|q| {
            let index = q.doorbell()?;
            if q.state.aql_reported == Some(index) {
                return None;
            }
            let slots = q.ring_size / PACKET_BYTES;
            Some(Rung {
                qid: q.qid,
                vm: q.vm?,
                ring: q.ring,
                index,
                at: q.ring.checked_add((index % slots) * PACKET_BYTES)?,
            })
        })
        .collect()
}

/// Reads the header of each rung packet (outside the process lock, as the engine reads rings)
/// and reports the written ones, each once.
pub(crate) fn report<R: Runlist>(runlist: &R, p: &R::Process, rung: Vec<Rung>) {
    for r in rung {
        let Ok(header) = read_va(&r.vm, r.at, 2) else {
            continue;
        };
        let ty = header.first().copied().unwrap_or(TYPE_INVALID);
        if ty == TYPE_INVALID {
            continue;
        }
        let noted = p.with_queues(|qs| {
            let state = qs.ring_state(r.qid, Some(r.ring))?;
            state.aql_reported = Some(r.index);
            Some(())
        });
        if noted.is_none() {
            continue;
        }
        let name = type_name(ty);
        runlist.log_once(
            &format!("AQL {name} packet"),
            &format!(
                "pid {}: AQL queue {} rung for a {name} packet (index {}): not executed, there is \
                 no command processor",
                p.pid(),
                r.qid,
                r.index
            ),
        );
    }
}
