//! AQL compute queues, which the simulated GPU does not execute (no command processor, no
//! shader code): the engine thread looks at the packet each doorbell names and the daemon logs
//! the first packet of each type rung on the machine, so that a client's stop (HIP's copy
//! kernel, ROCr's blit) is named in the log.

#![allow(clippy::unwrap_used)]
#![allow(clippy::cast_possible_truncation)] // test sizes and offsets are small

mod common;

use std::time::{Duration, Instant};

use common::{env, Env, GTT_W};
use kfd_abi::kfd::QueueDesc;
use kfd_abi::{mmap_offset as mo, Mapping, Prot, QueueType, RenderNode, Share};
use kfd_sim::Preset;

const RING_VA: u64 = 0x7f10_0000_0000;
const RING_BYTES: u64 = 4096;
const PACKET: usize = 64;
/// `hsa_packet_type_t` values.
const INVALID: u8 = 1;
const KERNEL_DISPATCH: u8 = 2;
const BARRIER_AND: u8 = 3;

/// An AQL queue on the first GPU whose ring (`RING_BYTES`, packets INVALID) is a GTT buffer
/// mapped in the GPU VM and for the CPU, and its doorbell.
struct AqlQueue {
    ring: Mapping,
    doorbells: Mapping,
    doorbell: usize,
    _host: Vec<u8>,
}

impl AqlQueue {
    fn new(e: &Env) -> Self {
        let g = e.gpus[0];
        let render = RenderNode::new(e.renders[0].used_by(&e.proc).unwrap(), "render");
        let bo = e
            .kfd
            .alloc_memory(RING_VA, RING_BYTES + 4096, g, GTT_W)
            .unwrap();
        e.kfd.map_memory_to_gpu(bo.handle, &[g]).unwrap();
        let ring = render
            .map_bo(
                bo.mmap_offset,
                (RING_BYTES + 4096) as usize,
                Prot::RW,
                Share::Shared,
            )
            .unwrap();
        for i in 0..RING_BYTES as usize / PACKET {
            assert!(ring.write(i * PACKET, &[INVALID, 0]));
        }
        // The EOP buffer and the context save area: host memory the queue is given, as
        // kfd-workload gives it.
        let host = vec![0u8; 4096 + (64 << 10)];
        let mut d = QueueDesc::new(g, QueueType::ComputeAql);
        d.ring_base = RING_VA;
        d.ring_size = RING_BYTES as u32;
        d.read_ptr = RING_VA + RING_BYTES;
        d.write_ptr = RING_VA + RING_BYTES + 8;
        d.eop_buffer = host.as_ptr() as u64;
        d.eop_buffer_size = 4096;
        d.ctx_save_restore = host.as_ptr() as u64 + 4096;
        d.ctx_save_restore_size = 64 << 10;
        d.ctl_stack_size = 4096;
        // SAFETY: the ring and pointers are GPU-mapped memory of the process, the EOP buffer and
        // save area are `host`, for as long as the queue exists (the test's).
        let q = unsafe { e.kfd.create_queue(&d) }.unwrap();
        assert_eq!(q.doorbell_offset & mo::TYPE_MASK, mo::TYPE_DOORBELL);
        Self {
            ring,
            doorbells: e.kfd.map_doorbells(g, 8192).unwrap(),
            doorbell: (q.doorbell_offset & 0x1fff) as usize,
            _host: host,
        }
    }

    /// Writes a packet of type `ty` at `index` (its header's low byte).
    fn write(&self, index: u64, ty: u8) {
        let at = (index % (RING_BYTES / PACKET as u64)) as usize * PACKET;
        assert!(self.ring.write(at, &[ty, 0]));
    }

    /// Rings the doorbell for the packet at `index`.
    fn ring(&self, index: u64) {
        assert!(self.doorbells.write_u64(self.doorbell, index));
    }
}

/// The AQL packet types logged on `e`'s machine so far, by name.
fn logged_aql(e: &Env) -> Vec<String> {
    e.machine
        .logged_once()
        .into_iter()
        .filter(|k| k.starts_with("AQL "))
        .collect()
}

/// Waits (up to 10 s) until the machine has logged `want` (in its order: by name).
fn wait_logged(e: &Env, want: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while logged_aql(e) != want {
        assert!(
            Instant::now() < deadline,
            "logged {:?}, want {want:?}",
            logged_aql(e)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn the_packets_rung_on_an_aql_queue_are_named_once_per_type_and_never_run() {
    let e = env(Preset::mi210x2());
    let q = AqlQueue::new(&e);
    // Rung for a packet not written yet: nothing to name (the engine looks again later).
    q.ring(0);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(logged_aql(&e), Vec::<String>::new());
    // The packet written: a kernel dispatch (a blit kernel, for ROCr's copies).
    q.write(0, KERNEL_DISPATCH);
    wait_logged(&e, &["AQL KERNEL_DISPATCH packet"]);
    // Another one of the same type is not logged again; a barrier is, after it.
    q.write(1, KERNEL_DISPATCH);
    q.ring(1);
    q.write(2, BARRIER_AND);
    q.ring(2);
    wait_logged(
        &e,
        &["AQL BARRIER_AND packet", "AQL KERNEL_DISPATCH packet"],
    );
    // Nothing ran them: the CP would have made them INVALID again.
    let mut header = [0u8; 1];
    assert!(q.ring.read(0, &mut header));
    assert_eq!(header[0], KERNEL_DISPATCH);
}
