//! What the simulated GPU makes of the packets a client rings on its AQL compute queues: it runs
//! none of them (no command processor, no shader execution), but the engine thread looks at the
//! packet each doorbell names, so that the daemon's log says where a client stops and on what:
//! the first packet of each type rung on the machine is logged once (a warning), with its
//! process, queue and index; later ones at debug level.
//!
//! An AQL queue's doorbell is its slot in the process's doorbell slice, as an SDMA queue's; the
//! client writes the index of the packet it has just made valid (HSA's doorbell signal). The
//! ring holds 64-byte packets; the low byte of a packet's header is its type
//! (`hsa_packet_type_t`), `INVALID` until the client has written the packet. A ring the engine
//! cannot read through the queue's GPU VM (a client that never rings it may keep it anywhere)
//! is not looked at.

use std::sync::{Arc, Mutex};

use crate::machine::MachineInner;
use crate::process::{KfdProcess, ProcState, QueueKind};
use crate::render::Vm;
use crate::sdma::read_va;

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

/// The AQL queues of `st` (a process that is not evicted) whose doorbell names a packet the
/// engine has not reported yet. Call with the doorbells of `st` latched, under its lock.
pub(crate) fn rung(m: &MachineInner, p: &KfdProcess, st: &ProcState) -> Vec<Rung> {
    st.queues
        .iter()
        .filter(|(_, q)| {
            q.kind == QueueKind::Compute
                && q.aql
                && super::queues::queue_active(st, q)
                && q.ring_size >= PACKET_BYTES
        })
        .filter_map(|(&qid, q)| {
            let pdd = st.pdds.get(q.pdd)?;
            let page = m.device_pages.mapped_doorbell(p, pdd.dev)?;
            let mut b = [0u8; 8];
            if !page.read(u64::from(q.doorbell_id) * 8, &mut b) {
                return None;
            }
            let index = u64::from_le_bytes(b);
            if q.ring_state.aql_reported == Some(index) {
                return None;
            }
            let slots = q.ring_size / PACKET_BYTES;
            Some(Rung {
                qid,
                vm: pdd.drm.as_ref()?.vm.clone(),
                ring: q.ring,
                index,
                at: q.ring.checked_add((index % slots) * PACKET_BYTES)?,
            })
        })
        .collect()
}

/// Reads the header of each rung packet (outside the process lock, as the engine reads rings)
/// and reports the written ones, each once.
pub(crate) fn report(m: &MachineInner, p: &KfdProcess, rung: Vec<Rung>) {
    for r in rung {
        let Ok(header) = read_va(&r.vm, r.at, 2) else {
            continue;
        };
        let ty = header.first().copied().unwrap_or(TYPE_INVALID);
        if ty == TYPE_INVALID {
            continue;
        }
        {
            let mut st = p.lock();
            let Some(q) = st.queues.get_mut(&r.qid).filter(|q| q.ring == r.ring) else {
                continue;
            };
            q.ring_state.aql_reported = Some(r.index);
        }
        let name = type_name(ty);
        m.log_once(
            &format!("AQL {name} packet"),
            &format!(
                "pid {}: AQL queue {} rung for a {name} packet (index {}): not executed, there is \
                 no command processor",
                p.pid, r.qid, r.index
            ),
        );
    }
}
