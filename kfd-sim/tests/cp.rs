//! The command processor, driven as ROCr drives it: AQL queues made with CREATE_QUEUE, rings,
//! `amd_queue_t` and signals in GTT buffers, doorbells written through the mapped slice, events
//! whose mailboxes are slots of the events page. The committed test kernels run on the shader
//! core and their results are checked against the CPU; barriers order packets; queue errors
//! reach `queue_inactive_signal` and its event; a spinning kernel neither starves another queue
//! nor blocks eviction.

#![allow(clippy::unwrap_used)]
#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap
)]

mod common;

use std::time::{Duration, Instant};

use common::aql::{
    barrier_packet, dispatch_packet, Args, Queue, Rig, BARRIER_AND, BARRIER_OR, INVALID,
    PROPERTIES, VENDOR_SPECIFIC,
};
use common::criu::criu_view;
use common::{env, GTT_W, VRAM_W};
use kfd_abi::{AllocFlags, EventType, WaitResult};
use kfd_sim::Preset;
use rstest::rstest;

fn rig() -> Rig {
    Rig::new(env(Preset::mi210x2()))
}

/// `n` words that differ from lane to lane and from `seed` to seed.
fn pattern(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| i.wrapping_mul(0x9e37_79b9).wrapping_add(seed) ^ (i >> 3))
        .collect()
}

/// Dispatches `kernel` and waits for its completion signal; the signal.
fn run(rig: &Rig, q: &Queue, kernel: &str, grid: [u32; 3], wg: [u16; 3], args: &Args) {
    let done = rig.signal(1, true);
    let ka = rig.kernargs(&args.0);
    let i = q.submit(dispatch_packet(rig.kernel(kernel), grid, wg, ka, done.va));
    rig.wait_event(&done);
    assert_eq!(rig.value(&done), 0);
    // The packet is consumed: its slot INVALID, the read index past it.
    q.wait_read_index(i + 1);
    assert_eq!(q.header(i), INVALID);
}

/// `q` runs a small `grid2d` dispatch to its checked result: the command processor serves it.
fn still_runs(rig: &Rig, q: &Queue) {
    let out = rig.buf(4096, GTT_W);
    run(
        rig,
        q,
        "grid2d",
        [4, 1, 1],
        [4, 1, 1],
        &Args::default().u64(out.va).u32(4),
    );
    assert_eq!(out.u32s(0, 4), [0, 1000, 2000, 3000]);
}

#[rstest]
#[case::one_partial_workgroup(50, 64)]
#[case::many_workgroups(100_000, 256)]
fn vector_add_matches_the_cpu(#[case] n: u32, #[case] wg: u16) {
    let rig = rig();
    let q = Queue::new(&rig, 64, None);
    let bytes = u64::from(n) * 4;
    let (a, b) = (rig.buf(bytes, GTT_W), rig.buf(bytes, VRAM_W));
    let c = rig.buf(bytes + 4096, VRAM_W);
    let (av, bv): (Vec<f32>, Vec<f32>) =
        (0..n).map(|i| (i as f32 * 0.5, 1000.0 - i as f32)).unzip();
    a.put_u32s(0, &av.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    b.put_u32s(0, &bv.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    c.put_u32s(bytes as usize, &[0xdead_beef]);
    let args = Args::default().u64(a.va).u64(b.va).u64(c.va).u32(n);
    run(&rig, &q, "vector_add", [n, 1, 1], [wg, 1, 1], &args);
    let got = c.u32s(0, n as usize);
    for (i, g) in got.iter().enumerate() {
        assert_eq!(f32::from_bits(*g), av[i] + bv[i], "element {i}");
    }
    assert_eq!(
        c.u32s(bytes as usize, 1),
        [0xdead_beef],
        "nothing written past the end"
    );
}

#[test]
fn lds_reduce_sums_each_workgroup_across_barriers() {
    let rig = rig();
    let q = Queue::new(&rig, 64, None);
    let n = 256 * 40;
    let input = pattern(n, 7).iter().map(|x| x & 0xffff).collect::<Vec<_>>();
    let (i, o) = (rig.buf(n as u64 * 4, GTT_W), rig.buf(40 * 4, GTT_W));
    i.put_u32s(0, &input);
    run(
        &rig,
        &q,
        "lds_reduce",
        [n as u32, 1, 1],
        [256, 1, 1],
        &Args::default().u64(i.va).u64(o.va),
    );
    let want: Vec<u32> = input.chunks(256).map(|c| c.iter().sum()).collect();
    assert_eq!(o.u32s(0, 40), want);
}

#[test]
fn atomics_from_many_workgroups_are_atomic() {
    let rig = rig();
    let q = Queue::new(&rig, 64, None);
    let n = 128usize;
    let vals: Vec<i32> = (0..n as i32).map(|i| (i * 37 % 101) - 50).collect();
    let counters = rig.buf(16, GTT_W);
    let wide = rig.buf(24, GTT_W);
    let slots = rig.buf(128 * 4, GTT_W);
    let v = rig.buf(n as u64 * 4, GTT_W);
    v.put_u32s(0, &vals.iter().map(|&x| x as u32).collect::<Vec<_>>());
    counters.put_u32s(0, &[0, i32::MAX as u32, i32::MIN as u32, 0]);
    wide.write(
        0,
        &[
            0u64.to_le_bytes(),
            i64::MAX.to_le_bytes(),
            i64::MIN.to_le_bytes(),
        ]
        .concat(),
    );
    let args = Args::default()
        .u64(counters.va)
        .u64(wide.va)
        .u64(slots.va)
        .u64(v.va);
    run(&rig, &q, "atomics", [n as u32, 1, 1], [32, 1, 1], &args);
    let c = counters.u32s(0, 4);
    assert_eq!(c[0], n as u32);
    assert_eq!(c[1] as i32, *vals.iter().min().unwrap());
    assert_eq!(c[2] as i32, *vals.iter().max().unwrap());
    assert_eq!(c[3], vals.iter().map(|&x| x as u32).max().unwrap());
    let w0 = wide.u64_at(0) as i64;
    assert_eq!(w0, vals.iter().map(|&x| i64::from(x)).sum::<i64>());
    let mut claimed: Vec<u32> = slots.u32s(0, 128).into_iter().filter(|&s| s != 0).collect();
    claimed.sort_unstable();
    assert_eq!(
        claimed,
        (1..=n as u32).collect::<Vec<_>>(),
        "each item claimed one slot"
    );
}

/// ROCr and HIP programs keep counters that kernels update atomically in host memory
/// (userptr), which the simulator mirrors: the workers of a round must share one mirror, or each
/// writes its own count back over the others'. One item per workgroup, so that every worker
/// takes some.
#[test]
fn atomics_on_userptr_memory_are_atomic_across_workgroups() {
    let rig = rig();
    let q = Queue::new(&rig, 64, None);
    // At most 128 items: each claims one of the kernel's 128 slots.
    let n = 128usize;
    let vals: Vec<i32> = (0..n as i32).map(|i| (i * 37 % 101) - 50).collect();
    let mut host = vec![0u32; 1024];
    host[1] = i32::MAX as u32;
    host[2] = i32::MIN as u32;
    let va = 0x7e30_0000_0000u64;
    // SAFETY: `host` outlives the BO (freed at the end of the test) and is not reallocated.
    let bo = unsafe {
        rig.e.kfd.alloc_userptr(
            va,
            (host.len() * 4) as u64,
            rig.g,
            AllocFlags::WRITABLE,
            host.as_mut_ptr() as u64,
        )
    }
    .unwrap();
    rig.e.kfd.map_memory_to_gpu(bo.handle, &[rig.g]).unwrap();
    let wide = rig.buf(24, GTT_W);
    let slots = rig.buf(128 * 4, GTT_W);
    let v = rig.buf(n as u64 * 4, GTT_W);
    v.put_u32s(0, &vals.iter().map(|&x| x as u32).collect::<Vec<_>>());
    let args = Args::default().u64(va).u64(wide.va).u64(slots.va).u64(v.va);
    run(&rig, &q, "atomics", [n as u32, 1, 1], [1, 1, 1], &args);
    assert_eq!(host[0], n as u32, "one increment per item");
    assert_eq!(host[1] as i32, *vals.iter().min().unwrap());
    assert_eq!(host[2] as i32, *vals.iter().max().unwrap());
    rig.e
        .kfd
        .unmap_memory_from_gpu(bo.handle, &[rig.g])
        .unwrap();
    rig.e.kfd.free_memory(bo.handle).unwrap();
}

#[test]
fn a_2d_grid_covers_partial_edge_workgroups() {
    let rig = rig();
    let q = Queue::new(&rig, 64, None);
    let (w, h) = (70u32, 37u32);
    let out = rig.buf(u64::from(w * h) * 4, GTT_W);
    run(
        &rig,
        &q,
        "grid2d",
        [w, h, 1],
        [16, 8, 1],
        &Args::default().u64(out.va).u32(w),
    );
    let got = out.u32s(0, (w * h) as usize);
    for y in 0..h {
        for x in 0..w {
            assert_eq!(got[(y * w + x) as usize], x * 1000 + y);
        }
    }
}

#[test]
fn private_arrays_use_the_queues_scratch() {
    let rig = rig();
    let (_, _, private) = rig.kernel("scratch");
    assert!(private > 0, "the scratch kernel has a private segment");
    let wave_bytes = (private * 64).div_ceil(1024) * 1024;
    let waves = 16;
    let scratch = rig.buf(u64::from(waves * wave_bytes), GTT_W);
    let q = Queue::new(&rig, 64, Some((&scratch, waves, wave_bytes)));
    let n = 1000usize;
    let input = pattern(n, 3);
    let idx = pattern(n, 11);
    let (i, x, o) = (
        rig.buf(n as u64 * 4, GTT_W),
        rig.buf(n as u64 * 4, GTT_W),
        rig.buf(n as u64 * 4, GTT_W),
    );
    i.put_u32s(0, &input);
    x.put_u32s(0, &idx);
    let args = Args::default().u64(i.va).u64(x.va).u64(o.va);
    run(&rig, &q, "scratch", [n as u32, 1, 1], [128, 1, 1], &args);
    let a = |v: u32, k: u32| v.wrapping_mul(k).wrapping_add(k);
    let want: Vec<u32> = (0..n)
        .map(|k| a(input[k], idx[k] & 63).wrapping_add(a(input[k], (idx[k] + 7) & 63)))
        .collect();
    assert_eq!(o.u32s(0, n), want);
    assert!(
        scratch
            .read(0, (waves * wave_bytes) as usize)
            .iter()
            .any(|&b| b != 0),
        "scratch was used"
    );
}

#[test]
fn a_dispatch_needing_more_scratch_asks_for_it_through_queue_inactive_signal() {
    let rig = rig();
    let (_, _, private) = rig.kernel("scratch");
    let wave_bytes = (private * 64).div_ceil(1024) * 1024;
    let q = Queue::new(&rig, 64, None);
    let n = 256usize;
    let (i, x, o) = (
        rig.buf(n as u64 * 4, GTT_W),
        rig.buf(n as u64 * 4, GTT_W),
        rig.buf(n as u64 * 4, GTT_W),
    );
    i.put_u32s(0, &pattern(n, 1));
    let done = rig.signal(1, true);
    let ka = rig.kernargs(&Args::default().u64(i.va).u64(x.va).u64(o.va).0);
    let index = q.submit(dispatch_packet(
        rig.kernel("scratch"),
        [n as u32, 1, 1],
        [64, 1, 1],
        ka,
        done.va,
    ));
    // The queue has no scratch: the CP asks (value 1 and the event), the dispatch waits.
    rig.wait_event(&q.inactive);
    assert_eq!(rig.value(&q.inactive), 1);
    assert_eq!(
        q.read_index(),
        index,
        "the read index stays at the dispatch"
    );
    assert_eq!(rig.value(&done), 1);
    // As ROCr's handler does: scratch allocated, the queue's fields rewritten, 0 stored.
    let waves = 8u32;
    let scratch = rig.buf(u64::from(waves * wave_bytes), GTT_W);
    let tmpring = waves | (wave_bytes / 1024) << 12;
    q.amd.write(common::aql::TMPRING, &tmpring.to_le_bytes());
    let rsrc = kfd_shader::testmem::scratch_resource(scratch.va, waves * wave_bytes);
    let rsrc: Vec<u8> = rsrc.iter().flat_map(|w| w.to_le_bytes()).collect();
    q.amd.write(common::aql::SCRATCH_RSRC, &rsrc);
    q.amd
        .write(common::aql::SCRATCH_BASE, &scratch.va.to_le_bytes());
    assert!(rig
        .signals
        .map
        .write_u64((q.inactive.va - rig.signals.va) as usize + 8, 0));
    rig.wait_event(&done);
    assert_eq!(rig.value(&done), 0);
}

#[test]
fn barrier_and_waits_for_every_dependency_and_barrier_or_for_one() {
    let rig = rig();
    let q = Queue::new(&rig, 64, None);
    let (d1, d2) = (rig.signal(1, false), rig.signal(1, false));
    let and_done = rig.signal(1, true);
    let or_done = rig.signal(1, true);
    let out = rig.buf(4096, GTT_W);
    // AND(d1, d2), then a kernel behind it.
    q.submit(barrier_packet(BARRIER_AND, &[d1.va, 0, d2.va], and_done.va));
    let ka = rig.kernargs(&Args::default().u64(out.va).u32(8).0);
    let k = q.submit(dispatch_packet(
        rig.kernel("grid2d"),
        [8, 1, 1],
        [8, 1, 1],
        ka,
        0,
    ));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(q.read_index(), 0, "the barrier waits");
    assert!(rig
        .signals
        .map
        .write_u64((d1.va - rig.signals.va) as usize + 8, 0));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(q.read_index(), 0, "one dependency is not enough for AND");
    assert_eq!(
        out.u32s(0, 1),
        [0],
        "the kernel behind the barrier has not run"
    );
    assert!(rig
        .signals
        .map
        .write_u64((d2.va - rig.signals.va) as usize + 8, 0));
    rig.wait_event(&and_done);
    q.wait_read_index(k + 1);
    assert_eq!(out.u32s(0, 8), (0..8).map(|x| x * 1000).collect::<Vec<_>>());
    // OR(d3, d4): one of them is enough.
    let (d3, d4) = (rig.signal(1, false), rig.signal(1, false));
    let o = q.submit(barrier_packet(BARRIER_OR, &[d3.va, d4.va], or_done.va));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(q.read_index(), o);
    assert!(rig
        .signals
        .map
        .write_u64((d4.va - rig.signals.va) as usize + 8, 0));
    rig.wait_event(&or_done);
    assert_eq!(rig.value(&or_done), 0);
    assert_eq!(rig.value(&d3), 1);
}

/// AMD's BARRIER_VALUE packet (VENDOR_SPECIFIC format 2) whose condition holds completes its
/// signal; a null signal is a satisfied dependency (`hsa_ext_amd.h`), as HIP 5.7 submits it.
#[rstest]
#[case::null_signal(None, 0, u64::MAX, 0)]
#[case::equal(Some(5), 5, u64::MAX, 0)]
#[case::masked_equal(Some(0x15), 4, 0x4, 0)]
#[case::not_equal(Some(5), 6, u64::MAX, 1)]
#[case::less(Some(-3), 0, u64::MAX, 2)]
#[case::greater_or_equal(Some(7), 7, u64::MAX, 3)]
fn a_barrier_value_whose_condition_holds_completes(
    #[case] dep: Option<i64>,
    #[case] value: i64,
    #[case] mask: u64,
    #[case] cond: u32,
) {
    let rig = rig();
    let q = Queue::new(&rig, 64, None);
    let dep = dep.map_or(0, |v| rig.signal(v, false).va);
    let done = rig.signal(1, true);
    let mut p = [0u8; 64];
    p[0..2].copy_from_slice(&(u16::from(VENDOR_SPECIFIC) | 1 << 8).to_le_bytes());
    p[2] = 2;
    p[8..16].copy_from_slice(&dep.to_le_bytes());
    p[16..24].copy_from_slice(&value.to_le_bytes());
    p[24..32].copy_from_slice(&mask.to_le_bytes());
    p[32..36].copy_from_slice(&cond.to_le_bytes());
    p[56..64].copy_from_slice(&done.va.to_le_bytes());
    let i = q.submit(p);
    rig.wait_event(&done);
    q.wait_read_index(i + 1);
    assert_eq!(rig.value(&done), 0);
}

#[test]
fn a_pm4_indirect_buffer_completes_its_signal_and_profiling_writes_timestamps() {
    let rig = rig();
    let q = Queue::new(&rig, 64, None);
    let props = u32::from_le_bytes(q.amd.read(PROPERTIES, 4).try_into().unwrap()) | 1 << 3;
    q.amd.write(PROPERTIES, &props.to_le_bytes());
    // ROCr's cache invalidation: an INDIRECT_BUFFER to an ACQUIRE_MEM.
    let ib = rig.buf(4096, GTT_W);
    ib.put_u32s(0, &[3 << 30 | 5 << 16 | 0x58 << 8, 0, 0, 0, 0, 0, 0]);
    let done = rig.signal(1, true);
    let mut p = [0u8; 64];
    p[0..2].copy_from_slice(&(u16::from(VENDOR_SPECIFIC) | 1 << 8).to_le_bytes());
    p[2] = 1;
    let words = [
        3 << 30 | 2 << 16 | 0x3f << 8,
        ib.va as u32,
        (ib.va >> 32) as u32,
        7,
    ];
    for (k, w) in words.iter().enumerate() {
        p[4 + 4 * k..8 + 4 * k].copy_from_slice(&w.to_le_bytes());
    }
    p[56..64].copy_from_slice(&done.va.to_le_bytes());
    let i = q.submit(p);
    rig.wait_event(&done);
    q.wait_read_index(i + 1);
    let off = (done.va - rig.signals.va) as usize;
    let (start, end) = (rig.signals.u64_at(off + 32), rig.signals.u64_at(off + 40));
    assert!(start > 0 && end >= start, "timestamps {start} {end}");
    assert!(rig
        .e
        .machine
        .logged_once()
        .iter()
        .any(|k| k == "PM4 ACQUIRE_MEM"));
}

/// Submits a one-workgroup dispatch of `kernel` (arguments: one output buffer) and waits for
/// the queue to stop; the error code and the output.
fn queue_error(kernel: &str, args: impl FnOnce(&Rig) -> Args) -> (Rig, Queue, i64) {
    let rig = rig();
    let q = Queue::new(&rig, 64, None);
    let done = rig.signal(1, true);
    let ka = rig.kernargs(&args(&rig).0);
    q.submit(dispatch_packet(
        rig.kernel(kernel),
        [64, 1, 1],
        [64, 1, 1],
        ka,
        done.va,
    ));
    rig.wait_event(&q.inactive);
    let code = rig.value(&q.inactive);
    assert_eq!(rig.value(&done), 1, "a failed dispatch does not complete");
    (rig, q, code)
}

#[rstest]
#[case::illegal_instruction("illegal", 0x4000_0000)]
#[case::s_trap("trap", 0x8000_0000)]
fn a_wave_error_stops_the_queue_with_rocrs_code(#[case] kernel: &str, #[case] want: i64) {
    let (rig, q, code) = queue_error(kernel, |r| Args::default().u64(r.buf(4096, GTT_W).va));
    assert_eq!(code, want);
    // The queue stays stopped: a later packet does not run; the process goes on.
    let later = rig.signal(1, true);
    q.submit(barrier_packet(BARRIER_AND, &[], later.va));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(rig.value(&later), 1);
    still_runs(&rig, &Queue::new(&rig, 64, None));
}

#[test]
fn a_memory_fault_is_reported_in_queue_inactive_signal_and_as_a_memory_event() {
    let mem_event = std::cell::Cell::new(None);
    let (rig, _q, code) = queue_error("fault", |r| {
        let ev =
            r.e.kfd
                .create_event(EventType::Memory, false, None)
                .unwrap();
        mem_event.set(Some(ev.event_id));
        Args::default()
            .u64(0x7e00_0000_0000)
            .u64(r.buf(4096, GTT_W).va)
    });
    assert_eq!(code, 0x2000_0000);
    let ev = mem_event.get().unwrap();
    assert_eq!(
        rig.e.kfd.wait_events(&[ev], false, 1000).unwrap(),
        WaitResult::Complete
    );
    assert!(rig
        .e
        .machine
        .logged_once()
        .iter()
        .any(|k| k == "shader memory fault"));
}

#[rstest]
#[case::zero_grid([0, 1, 1], [64, 1, 1], 0x2)]
#[case::workgroup_too_large([4096, 1, 1], [2048, 1, 1], 0x2)]
fn bad_dimensions_are_a_queue_error(
    #[case] grid: [u32; 3],
    #[case] wg: [u16; 3],
    #[case] want: i64,
) {
    let rig = rig();
    let q = Queue::new(&rig, 64, None);
    let ka = rig.kernargs(&[0; 64]);
    let mut p = dispatch_packet(rig.kernel("grid2d"), grid, wg, ka, 0);
    p[2] = 1;
    q.submit(p);
    rig.wait_event(&q.inactive);
    assert_eq!(rig.value(&q.inactive), want);
}

#[test]
fn an_unreadable_kernel_object_is_a_queue_error() {
    let rig = rig();
    let q = Queue::new(&rig, 64, None);
    q.submit(dispatch_packet(
        (0x1000, 0, 0),
        [64, 1, 1],
        [64, 1, 1],
        0,
        0,
    ));
    rig.wait_event(&q.inactive);
    assert_eq!(rig.value(&q.inactive), 0x8);
}

#[test]
fn a_spinning_kernel_does_not_starve_another_queue_and_eviction_stops_it() {
    let rig = rig();
    let spin_q = Queue::new(&rig, 64, None);
    let flag = rig.buf(4096, GTT_W);
    let out = rig.buf(4096, GTT_W);
    let spun = rig.signal(1, true);
    let ka = rig.kernargs(&Args::default().u64(flag.va).u64(out.va).0);
    spin_q.submit(dispatch_packet(
        rig.kernel("spin"),
        [128, 1, 1],
        [64, 1, 1],
        ka,
        spun.va,
    ));
    // Another queue of the same process runs to completion meanwhile.
    let other = Queue::new(&rig, 64, None);
    let o2 = rig.buf(4096, GTT_W);
    run(
        &rig,
        &other,
        "grid2d",
        [16, 1, 1],
        [16, 1, 1],
        &Args::default().u64(o2.va).u32(16),
    );
    assert_eq!(rig.value(&spun), 1);
    // CRIU's PROCESS_INFO evicts the queues: it returns although the kernel never ends, and
    // the waves run no more (a store to the flag is not seen until the queues run again).
    let (_criu, ck) = criu_view(&rig.e.kfd, &rig.e.proc);
    let info = ck.criu_process_info().unwrap();
    assert!(info.num_objects > 0);
    assert!(flag.map.write_u64(0, 5));
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(rig.value(&spun), 1, "an evicted dispatch does not run");
    assert_eq!(out.u32s(0, 2), [0, 0]);
    // UNPAUSE: the stopped waves go on from where they were and see the flag.
    ck.criu_unpause().unwrap();
    rig.wait_event(&spun);
    assert_eq!(
        out.u32s(0, 128),
        (0..128).map(|i| 5 + i).collect::<Vec<_>>()
    );
}

#[test]
fn hostile_packets_stop_the_queue_and_never_the_command_processor() {
    let rig = rig();
    let q = Queue::new(&rig, 16, None);
    let mut seed = 0x1234_5678_9abc_def0u64;
    let mut rnd = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..16 {
        let mut p = [0u8; 64];
        for c in p.chunks_mut(8) {
            c.copy_from_slice(&rnd().to_le_bytes());
        }
        // Any type but INVALID, which would only make the CP wait.
        p[0] = [0, 2, 3, 4, 5, 0x7f][(p[0] % 6) as usize];
        q.reserve(p);
    }
    q.ring_doorbell(15);
    // Whatever those packets did (most stop the queue), the GPU still runs other queues.
    let deadline = Instant::now() + Duration::from_secs(20);
    while rig.value(&q.inactive) == 0 && q.read_index() < 16 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(5));
    }
    still_runs(&rig, &Queue::new(&rig, 64, None));
}

#[test]
fn userptr_memory_is_read_and_written_by_kernels() {
    let rig = rig();
    let q = Queue::new(&rig, 64, None);
    let n = 5000u32;
    let mut host_a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut host_c = vec![0f32; n as usize + 1024];
    host_c[n as usize] = 42.0;
    let user = |v: &mut Vec<f32>, va: u64| {
        // The driver probes the range rounded up to whole pages: a page of spare capacity keeps
        // its last byte inside this allocation, wherever the allocator put it.
        v.reserve_exact(1024);
        let bytes = (v.len() * 4) as u64;
        // SAFETY: `v` outlives the BO (freed at the end of the test) and is not reallocated.
        let bo = unsafe {
            rig.e.kfd.alloc_userptr(
                va,
                bytes,
                rig.g,
                AllocFlags::WRITABLE,
                v.as_mut_ptr() as u64,
            )
        }
        .unwrap();
        rig.e.kfd.map_memory_to_gpu(bo.handle, &[rig.g]).unwrap();
        bo
    };
    let (a_va, c_va) = (0x7e10_0000_0000u64, 0x7e20_0000_0000u64);
    let ba = user(&mut host_a, a_va);
    let bc = user(&mut host_c, c_va);
    let b = rig.buf(u64::from(n) * 4, VRAM_W);
    b.put_u32s(
        0,
        &(0..n)
            .map(|i| (2 * i) as f32)
            .map(f32::to_bits)
            .collect::<Vec<_>>(),
    );
    run(
        &rig,
        &q,
        "vector_add",
        [n, 1, 1],
        [256, 1, 1],
        &Args::default().u64(a_va).u64(b.va).u64(c_va).u32(n),
    );
    for (i, c) in host_c.iter().take(n as usize).enumerate() {
        assert_eq!(*c, 3.0 * i as f32, "element {i}");
    }
    assert_eq!(host_c[n as usize], 42.0);
    for bo in [ba, bc] {
        rig.e
            .kfd
            .unmap_memory_from_gpu(bo.handle, &[rig.g])
            .unwrap();
        rig.e.kfd.free_memory(bo.handle).unwrap();
    }
}

/// A queue that was never rung is not fetched from, so a ring the GPU cannot reach yet is no
/// fault: mapped later, the queue runs its first packet. (Before, the command processor read
/// slot 0 of every new queue and stopped the queue at the VM fault, with a warning.)
#[test]
fn a_queue_never_rung_is_not_fetched_from_until_its_doorbell_rings() {
    let rig = rig();
    let q = Queue::new(&rig, 16, None);
    rig.e
        .kfd
        .unmap_memory_from_gpu(q.ring.handle, &[rig.g])
        .unwrap();
    // Another queue's dispatch completes: the command processor has passed over the first one
    // with its ring unmapped.
    still_runs(&rig, &Queue::new(&rig, 16, None));
    rig.e
        .kfd
        .map_memory_to_gpu(q.ring.handle, &[rig.g])
        .unwrap();
    still_runs(&rig, &q);
    assert_eq!(rig.value(&q.inactive), 0, "no queue error");
}
