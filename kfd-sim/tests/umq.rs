//! User-mode SDMA queues as ROCr drives them: the ring and its pointers in a GTT buffer mapped in
//! the GPU VM and for the CPU, packets written into the ring, the write pointer written to the
//! queue's doorbell through the mapped doorbell slice; FENCE + TRAP signal an event whose slot
//! is in the mapped events page. The simulated engine runs them, skips evicted processes, and a
//! process checkpointed with packets in its ring resumes them after restore.

#![allow(clippy::unwrap_used)]
#![allow(clippy::cast_possible_truncation)] // test sizes and offsets are small

mod common;

use std::time::{Duration, Instant};

use common::criu::{
    criu_view, read_dmabuf, restore_on_other_gpu_ids, write_dmabuf, RestoredElsewhere,
};
use common::{env, errno, gpu, Env, GTT_W};
use kfd_abi::kfd::QueueDesc;
use kfd_abi::sdma::{IbBuilder, PollFunc};
use kfd_abi::{
    mmap_offset as mo, AllocFlags, Errno, EventId, EventType, GpuId, Kfd, Mapping, Prot, QueueType,
    RenderNode, Share, WaitResult,
};
use kfd_sim::{Machine, Preset, SimFile};

const RING_VA: u64 = 0x7f10_0000_0000;
const SRC_VA: u64 = 0x7f20_0000_0000;
const DST_VA: u64 = 0x7f30_0000_0000;
const EVENTS_VA: u64 = 0x7f40_0000_0000;
const EVENTS_SIZE: u64 = 4096 * 8;
const DATA: u64 = 64 << 10;
const PAGE: u64 = 4096;

/// One user-mode SDMA queue of a process, driven from the CPU side.
struct UserQueue {
    ring: Mapping,
    ring_size: u64,
    doorbells: Mapping,
    doorbell: usize,
    wptr: u64,
}

impl UserQueue {
    /// Creates an SDMA queue on `g` whose ring (`ring_size` bytes) and pointers live in a GTT
    /// buffer at `va`, mapped for the CPU through `render`.
    fn new(e: &Env, render: &RenderNode<SimFile>, g: GpuId, va: u64, ring_size: u64) -> Self {
        let bo = e.kfd.alloc_memory(va, ring_size + PAGE, g, GTT_W).unwrap();
        e.kfd.map_memory_to_gpu(bo.handle, &[g]).unwrap();
        let ring = render
            .map_bo(
                bo.mmap_offset,
                (ring_size + PAGE) as usize,
                Prot::RW,
                Share::Shared,
            )
            .unwrap();
        let mut d = QueueDesc::new(g, QueueType::Sdma);
        d.ring_base = va;
        d.ring_size = u32::try_from(ring_size).unwrap();
        d.read_ptr = va + ring_size;
        d.write_ptr = va + ring_size + 8;
        // SAFETY: the ring and pointers are GPU-mapped memory of the process for as long as
        // the queue exists.
        let q = unsafe { e.kfd.create_queue(&d) }.unwrap();
        assert_eq!(q.doorbell_offset & mo::TYPE_MASK, mo::TYPE_DOORBELL);
        let doorbells = e.kfd.map_doorbells(g, 8192).unwrap();
        Self {
            ring,
            ring_size,
            doorbells,
            doorbell: (q.doorbell_offset & 0x1fff) as usize,
            wptr: 0,
        }
    }

    /// Writes `packets` at the write pointer (wrapping at the ring's end); rings if `ring`.
    fn push(&mut self, packets: &[u32], ring: bool) {
        for &dw in packets {
            let at = (self.wptr % self.ring_size) as usize;
            assert!(self.ring.write(at, &dw.to_le_bytes()));
            self.wptr += 4;
        }
        assert!(self.ring.write_u64(self.ring_size as usize + 8, self.wptr));
        if ring {
            self.ring_doorbell();
        }
    }

    fn ring_doorbell(&self) {
        assert!(self.doorbells.write_u64(self.doorbell, self.wptr));
    }

    /// The read pointer the engine wrote back.
    fn rptr(&self) -> u64 {
        self.ring.read_u64(self.ring_size as usize).unwrap()
    }

    /// Waits until the engine caught up with the write pointer.
    fn drain(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.rptr() != self.wptr {
            assert!(
                Instant::now() < deadline,
                "rptr {:#x} never reached {:#x}",
                self.rptr(),
                self.wptr
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// A GTT buffer of `size` bytes at `va` on `g`, GPU-mapped, and its CPU mapping.
fn buffer(e: &Env, render: &RenderNode<SimFile>, g: GpuId, va: u64, size: u64) -> Mapping {
    let bo = e.kfd.alloc_memory(va, size, g, GTT_W).unwrap();
    e.kfd.map_memory_to_gpu(bo.handle, &[g]).unwrap();
    render
        .map_bo(bo.mmap_offset, size as usize, Prot::RW, Share::Shared)
        .unwrap()
}

/// The event page (a GTT BO, GPU-mapped, its first event created with it) and one signal event.
fn event(e: &Env, g: GpuId) -> (EventId, u32, Mapping) {
    let page = e
        .kfd
        .alloc_memory(EVENTS_VA, EVENTS_SIZE, g, GTT_W | AllocFlags::COHERENT)
        .unwrap();
    e.kfd.map_memory_to_gpu(page.handle, &[g]).unwrap();
    let ev = e
        .kfd
        .create_event(EventType::Signal, true, Some(page.handle))
        .unwrap();
    let slots = e.kfd.map_events(EVENTS_SIZE as usize).unwrap();
    (ev.event_id, ev.slot_index, slots)
}

/// FENCE of the event id into its slot, then TRAP with the id: how ROCr's SDMA signals.
fn signal(slot: u32) -> IbBuilder {
    let mut ib = IbBuilder::new();
    ib.fence(EVENTS_VA + u64::from(slot) * 8, slot).trap(slot);
    ib
}

fn render(e: &Env, i: usize) -> RenderNode<SimFile> {
    RenderNode::new(e.renders[i].used_by(&e.proc).unwrap(), "render")
}

fn pattern(len: u64, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn read(m: &Mapping, len: u64) -> Vec<u8> {
    let mut b = vec![0u8; len as usize];
    assert!(m.read(0, &mut b));
    b
}

#[test]
fn a_copy_rung_through_the_doorbell_runs_and_signals_its_event() {
    let e = env(Preset::mi210x2());
    let g = e.gpus[0];
    let r = render(&e, 0);
    let src = buffer(&e, &r, g, SRC_VA, DATA);
    let dst = buffer(&e, &r, g, DST_VA, DATA);
    assert!(src.write(0, &pattern(DATA, 1)));
    let (ev, slot, slots) = event(&e, g);
    let mut q = UserQueue::new(&e, &r, g, RING_VA, 64 << 10);

    let mut ib = IbBuilder::new();
    ib.copy_linear(SRC_VA, DST_VA, DATA);
    q.push(ib.packets(), false);
    q.push(signal(slot).packets(), true);

    assert_eq!(
        e.kfd.wait_events(&[ev], true, 10_000).unwrap(),
        WaitResult::Complete
    );
    q.drain();
    assert_eq!(read(&dst, DATA), pattern(DATA, 1));
    assert_eq!(
        slots.read_u64(slot as usize * 8),
        Some(u64::MAX),
        "the interrupt handler acknowledged the slot"
    );
    // The doorbell is what the GPU sees.
    assert_eq!(
        e.machine.doorbell(e.proc.pid(), g.get(), q.doorbell as u64),
        Some(q.wptr)
    );
}

#[test]
fn packets_written_without_the_doorbell_wait_and_the_ring_wraps() {
    let e = env(Preset::mi210x2());
    let g = e.gpus[1];
    let r = render(&e, 1);
    let dst = buffer(&e, &r, g, DST_VA, PAGE);
    // The smallest ring: 1 KiB, so forty fills of 20 bytes wrap it.
    let mut q = UserQueue::new(&e, &r, g, RING_VA, 1024);
    let mut ib = IbBuilder::new();
    ib.const_fill(DST_VA, 0xaaaa_aaaa, 4);
    q.push(ib.packets(), false);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(q.rptr(), 0, "nothing runs before the doorbell");
    assert_eq!(read(&dst, 4), [0; 4]);
    for i in 0..80u32 {
        let mut ib = IbBuilder::new();
        ib.const_fill(DST_VA + u64::from(i % 64) * 4, i + 1, 4);
        q.push(ib.packets(), true);
        if i % 16 == 15 {
            q.drain();
        }
    }
    q.drain();
    assert!(q.wptr > 1024, "the ring wrapped");
    let got = read(&dst, 64 * 4);
    for i in 0..64u32 {
        let last = if i < 16 { i + 64 + 1 } else { i + 1 };
        assert_eq!(got[i as usize * 4..][..4], last.to_le_bytes(), "dword {i}");
    }
}

/// ROCr's SDMA blit for `hsa_amd_memory_async_copy` on gfx9: an HDP flush, a wait until the
/// dependency signal's value (two dwords) is 0, the copy, the completion signal decremented with
/// ATOMIC ADD64 of -1, a global timestamp, and the event's FENCE + TRAP.
#[test]
fn rocr_blit_waits_for_its_dependency_then_decrements_its_completion_signal() {
    let e = env(Preset::mi210x2());
    let g = e.gpus[0];
    let r = render(&e, 0);
    let src = buffer(&e, &r, g, SRC_VA, DATA);
    let dst = buffer(&e, &r, g, DST_VA, DATA);
    let signals = buffer(&e, &r, g, SRC_VA + (1 << 30), PAGE);
    let (dep, done, ts) = (
        SRC_VA + (1 << 30),
        SRC_VA + (1 << 30) + 8,
        SRC_VA + (1 << 30) + 32,
    );
    assert!(signals.write_u64(0, 1), "the dependency is pending");
    assert!(signals.write_u64(8, 1), "the completion signal starts at 1");
    assert!(src.write(0, &pattern(DATA, 3)));
    let (ev, slot, _slots) = event(&e, g);
    let mut q = UserQueue::new(&e, &r, g, RING_VA, 64 << 10);

    let mut ib = IbBuilder::new();
    ib.hdp_flush()
        .poll_mem(dep + 4, 0, u32::MAX, PollFunc::Equal)
        .poll_mem(dep, 0, u32::MAX, PollFunc::Equal)
        .copy_linear(SRC_VA, DST_VA, DATA)
        .atomic_add64(done, u64::MAX)
        .timestamp(ts);
    q.push(ib.packets(), false);
    q.push(signal(slot).packets(), true);

    // The engine runs on its own thread: give it time to get as far as it can (however busy
    // the machine), which is to the low dword's poll and no further.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while q.rptr() < 2 * 6 * 4 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        q.rptr(),
        2 * 6 * 4,
        "the HDP flush and the poll of the high dword (0) ran; the engine waits at the low one..."
    );
    assert_eq!(read(&dst, 4), [0; 4]);
    assert!(signals.write_u64(0, 0), "...until the dependency completes");
    assert_eq!(
        e.kfd.wait_events(&[ev], true, 10_000).unwrap(),
        WaitResult::Complete
    );
    q.drain();
    assert_eq!(read(&dst, DATA), pattern(DATA, 3));
    assert_eq!(signals.read_u64(8), Some(0), "decremented once");
    assert_ne!(signals.read_u64(32), Some(0), "a timestamp was written");
}

#[test]
fn a_poll_on_a_register_hangs_the_queue() {
    let e = env(Preset::mi210x2());
    let g = e.gpus[0];
    let r = render(&e, 0);
    let dst = buffer(&e, &r, g, DST_VA, PAGE);
    let mut q = UserQueue::new(&e, &r, g, RING_VA, 4096);
    // POLL_REGMEM on a register without the HDP flush bit: the simulator has no registers.
    let poll = [8u32, 0x1234, 0, 0, u32::MAX, 0x0fff_000a];
    let mut ib = IbBuilder::new();
    ib.const_fill(DST_VA, 7, 4);
    q.push(&poll, false);
    q.push(ib.packets(), true);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(q.rptr(), 0);
    assert_eq!(read(&dst, 4), [0; 4]);
}

#[test]
fn a_bad_packet_hangs_its_queue_only() {
    let e = env(Preset::mi210x2());
    let g = e.gpus[0];
    let r = render(&e, 0);
    let dst = buffer(&e, &r, g, DST_VA, PAGE);
    let mut bad = UserQueue::new(&e, &r, g, RING_VA, 4096);
    let mut good = UserQueue::new(&e, &r, g, RING_VA + (1 << 30), 4096);
    // A copy from an unmapped address faults: nothing after it runs.
    let mut ib = IbBuilder::new();
    ib.copy_linear(0x10_0000, DST_VA, 4)
        .const_fill(DST_VA, 7, 4);
    bad.push(ib.packets(), true);
    let mut ib = IbBuilder::new();
    ib.const_fill(DST_VA + 8, 9, 4);
    good.push(ib.packets(), true);
    good.drain();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(bad.rptr(), 0);
    assert_eq!(read(&dst, 12), [0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0]);
}

#[test]
fn an_evicted_process_runs_nothing_until_it_is_unpaused() {
    let e = env(Preset::mi210x2());
    let g = e.gpus[0];
    let r = render(&e, 0);
    let dst = buffer(&e, &r, g, DST_VA, PAGE);
    let mut q = UserQueue::new(&e, &r, g, RING_VA, 4096);
    let (_criu, ck) = criu_view(&e.kfd, &e.proc);
    ck.criu_process_info().unwrap();
    let mut ib = IbBuilder::new();
    ib.const_fill(DST_VA, 5, 4);
    q.push(ib.packets(), true);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!((q.rptr(), read(&dst, 4)), (0, vec![0; 4]), "paused");
    ck.criu_unpause().unwrap();
    q.drain();
    assert_eq!(read(&dst, 4), 5u32.to_le_bytes());
}

#[test]
fn packets_submitted_before_a_checkpoint_complete_after_the_restore() {
    let e = env(Preset::mi210x2());
    let g = e.gpus[0];
    let r = render(&e, 0);
    let src = buffer(&e, &r, g, SRC_VA, DATA);
    buffer(&e, &r, g, DST_VA, DATA);
    assert!(src.write(0, &pattern(DATA, 7)));
    let (_ev, slot, _slots) = event(&e, g);
    let mut q = UserQueue::new(&e, &r, g, RING_VA, 4096);
    let mut ib = IbBuilder::new();
    ib.const_fill(DST_VA, 0x0101_0101, DATA);
    q.push(ib.packets(), true);
    q.drain();

    // criu freezes the process, then it is paused; the packets it submitted wait in its ring.
    let (_criu, ck) = criu_view(&e.kfd, &e.proc);
    let info = ck.criu_process_info().unwrap();
    let mut ib = IbBuilder::new();
    ib.copy_linear(SRC_VA, DST_VA, DATA);
    q.push(ib.packets(), false);
    q.push(signal(slot).packets(), true);
    let submitted = q.wptr;
    let c = ck.criu_checkpoint(&info).unwrap();
    assert_eq!(q.rptr(), 20, "nothing ran after the pause");

    // Restore into a fresh process on a machine whose GPUs have other ids.
    let RestoredElsewhere {
        machine: mb,
        process: rp,
        kfd: rk,
        renders,
        bos: restored,
    } = restore_on_other_gpu_ids(&c);
    for (b, rb) in c.bos.iter().zip(&restored) {
        if let (Some(from), Some(to)) = (&b.dmabuf, &rb.dmabuf) {
            write_dmabuf(to, &read_dmabuf(from, b.size));
        }
    }
    let offset_of = |va: u64| {
        c.bos
            .iter()
            .zip(&restored)
            .find(|(b, _)| b.addr == va)
            .map(|(_, rb)| rb.restored_offset)
            .unwrap()
    };
    ck.criu_unpause().unwrap();
    drop(e);
    // criu maps the doorbells again (a fresh slice: zero), then resumes the queues.
    let new_gpu = gpu(0x3a01);
    let doorbells = rk.map_doorbells(new_gpu, 8192).unwrap();
    assert_eq!(doorbells.read_u64(q.doorbell), Some(0));
    let criu_b = mb.spawn_process();
    let kb = Kfd::new(criu_b.open_kfd().unwrap(), "/dev/kfd (criu)");
    std::thread::sleep(Duration::from_millis(20));
    kb.criu_resume(rp.pid()).unwrap();

    // The restored process's event fires and its memory shows the copy.
    let ev = EventId(slot);
    assert_eq!(
        rk.wait_events(&[ev], true, 10_000).unwrap(),
        WaitResult::Complete
    );
    let rr = RenderNode::new(renders[0].used_by(&rp).unwrap(), "render (restored)");
    let dst = rr
        .map_bo(offset_of(DST_VA), DATA as usize, Prot::RW, Share::Shared)
        .unwrap();
    assert_eq!(read(&dst, DATA), pattern(DATA, 7));
    let ring_len = 4096 + PAGE;
    let ring = rr
        .map_bo(
            offset_of(RING_VA),
            ring_len as usize,
            Prot::RW,
            Share::Shared,
        )
        .unwrap();
    assert_eq!(ring.read_u64(4096), Some(submitted), "rptr written back");
}

#[test]
fn a_doorbell_of_a_gpu_outside_the_device_cgroup_is_einval() {
    let m = Machine::new(&Preset::mi210x2()).unwrap();
    let p = m.spawn_process();
    let minors = m.render_minors();
    p.set_device_cgroup(Some(&minors[..1]));
    let k = Kfd::new(p.open_kfd().unwrap(), "/dev/kfd");
    let ids = m.gpu_ids();
    k.map_doorbells(gpu(ids[0]), 8192).unwrap();
    let e = k.map_doorbells(gpu(ids[1]), 8192).map(|_| ());
    assert_eq!(errno(e), Some(Errno::EINVAL));
}

#[test]
fn a_trap_with_a_wrong_id_sets_every_event_whose_slot_was_written() {
    let e = env(Preset::mi210x2());
    let g = e.gpus[0];
    let r = render(&e, 0);
    let (ev, slot, slots) = event(&e, g);
    let other = e.kfd.create_event(EventType::Signal, true, None).unwrap();
    let mut q = UserQueue::new(&e, &r, g, RING_VA, 4096);
    // The slot of the first event is written, the interrupt names an event that does not exist.
    let mut ib = IbBuilder::new();
    ib.fence(EVENTS_VA + u64::from(slot) * 8, slot)
        .trap(slot + 100);
    q.push(ib.packets(), true);
    q.drain();
    assert_eq!(
        e.kfd.wait_events(&[ev], true, 5_000).unwrap(),
        WaitResult::Complete
    );
    assert_eq!(slots.read_u64(slot as usize * 8), Some(u64::MAX));
    assert_eq!(
        e.kfd.wait_events(&[other.event_id], true, 0).unwrap(),
        WaitResult::Timeout,
        "an event whose slot was not written stays unsignaled"
    );
}
