#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss,
    clippy::unwrap_used
)] // test code
//! The committed test kernels (kernels/kernels.cl, built by scripts/gen-kernels.sh) run through
//! the core over flat test memory, each checked against the same computation on the CPU.

use kfd_shader::testmem::{layout, Rig};
use kfd_shader::{run_dispatch, Dispatch, DispatchOutcome, Executor, NoClock, ShaderError, Stop};
use rstest::rstest;

mod common;

use common::{pattern, Args, AtomicsBuffers, CODE_OBJECT};

/// kernels/blit.s, built by scripts/gen-kernels.sh.
const BLIT: &[u8] = include_bytes!("../kernels/blit.co");

fn rig() -> Rig {
    Rig::new(CODE_OBJECT, 64 << 20).unwrap()
}

/// A one-dimensional dispatch of `items` work-items in workgroups of `wg`.
fn dispatch_1d(
    rig: &Rig,
    kernel: &str,
    items: u32,
    wg: u16,
    args: &[u8],
    threads: u32,
) -> Dispatch {
    rig.dispatch(kernel, [items, 1, 1], [wg, 1, 1], args, threads)
        .unwrap()
}

fn run(rig: &Rig, d: &Dispatch, threads: usize) -> DispatchOutcome {
    run_dispatch(d, &rig.mem, &NoClock, threads, 200_000_000)
}

#[test]
fn every_kernel_of_the_code_object_is_found() {
    let rig = rig();
    let mut k = rig.kernels();
    k.sort_unstable();
    assert_eq!(
        k,
        [
            "atomics",
            "copy_aligned",
            "dmath",
            "fault",
            "fill",
            "flat_apertures",
            "grid2d",
            "half_math",
            "illegal",
            "index64",
            "int_div",
            "interrupt",
            "lds_reduce",
            "scratch",
            "shuffle",
            "softmax",
            "spin",
            "trap",
            "vector_add"
        ]
    );
}

#[rstest]
#[case::whole_waves(4096, 0, 1)]
#[case::tail(1000, 3, 1)]
#[case::two_threads(5000, 63, 2)]
#[case::less_than_the_grid(17, 15, 1)]
fn copy_aligned_copies_body_and_tail(#[case] n16: u64, #[case] n4: u64, #[case] threads: usize) {
    let mut rig = rig();
    let src = rig.alloc(n16 * 16).unwrap();
    let dst = rig.alloc(n16 * 16).unwrap();
    let src_t = rig.alloc(n4 * 4 + 4).unwrap();
    let dst_t = rig.alloc(n4 * 4 + 4).unwrap();
    let body = pattern(n16 as usize * 4, 1);
    let tail = pattern(n4 as usize, 2);
    rig.mem.write_u32s(src, &body);
    rig.mem.write_u32s(src_t, &tail);
    let a = Args::default()
        .u64(src)
        .u64(dst)
        .u64(n16)
        .u64(src_t)
        .u64(dst_t)
        .u64(n4);
    let d = dispatch_1d(&rig, "copy_aligned", 256 * 4, 64, &a.0, threads as u32);
    let out = run(&rig, &d, threads);
    assert_eq!(out.stop, Stop::Done);
    assert_eq!(rig.mem.read_u32s(dst, body.len()).unwrap(), body);
    assert_eq!(rig.mem.read_u32s(dst_t, tail.len()).unwrap(), tail);
    // The word after the tail is not touched.
    assert_eq!(rig.mem.read_u32(dst_t + n4 * 4).unwrap(), 0);
}

/// ROCr's own blits are raw code behind an amd_kernel_code_t with FLAT accesses (kernels/blit.s
/// has that shape and instruction mix); the grid is 64 x 4 x CUs in workgroups of 64.
#[rstest]
#[case::chunks_and_tail(5000, 13)]
#[case::tail_only(0, 63)]
#[case::more_chunks_than_the_grid(3000, 0)]
fn an_amd_kernel_code_t_blit_copies_with_flat_instructions(#[case] n16: u64, #[case] tail: u64) {
    let mut rig = Rig::new(BLIT, 1 << 20).unwrap();
    let src = rig.alloc(n16 * 16 + tail).unwrap();
    let dst = rig.alloc(n16 * 16 + tail + 4).unwrap();
    let bytes: Vec<u8> = (0..n16 * 16 + tail).map(|i| (i * 7 + 3) as u8).collect();
    rig.mem.write(src, &bytes);
    let grid = 64 * 4 * 2;
    let a = Args::default()
        .u64(src)
        .u64(dst)
        .u64(n16)
        .u64(tail)
        .u32(grid);
    let d = dispatch_1d(&rig, "flat_blit", grid, 64, &a.0, 1);
    assert_eq!(
        d.entry(),
        d.packet().kernel_object + 256,
        "code after the 256-byte header"
    );
    assert_eq!(run(&rig, &d, 1).stop, Stop::Done);
    assert_eq!(rig.mem.read(dst, bytes.len()).unwrap(), bytes);
    assert_eq!(rig.mem.read_u32(dst + bytes.len() as u64).unwrap(), 0);
}

#[test]
fn fill_writes_the_value_and_nothing_past_it() {
    let mut rig = rig();
    let (n16, n4) = (3001u64, 5u64);
    let dst = rig.alloc(n16 * 16 + 16).unwrap();
    let dst_t = rig.alloc(64).unwrap();
    let a = Args::default()
        .u64(dst)
        .u32(0xdead_beef)
        .u64(n16)
        .u64(dst_t)
        .u64(n4);
    let d = dispatch_1d(&rig, "fill", 1024, 64, &a.0, 1);
    assert_eq!(run(&rig, &d, 1).stop, Stop::Done);
    let got = rig.mem.read_u32s(dst, n16 as usize * 4 + 1).unwrap();
    assert!(got[..n16 as usize * 4].iter().all(|&x| x == 0xdead_beef));
    assert_eq!(got[n16 as usize * 4], 0);
    assert_eq!(
        rig.mem.read_u32s(dst_t, 6).unwrap(),
        [
            0xdead_beef,
            0xdead_beef,
            0xdead_beef,
            0xdead_beef,
            0xdead_beef,
            0
        ]
    );
}

#[rstest]
#[case::partial_last_workgroup(1000, 256)]
#[case::one_wave(64, 64)]
#[case::partial_wave(33, 64)]
fn vector_add_matches_the_cpu(#[case] n: u32, #[case] wg: u16) {
    let mut rig = rig();
    let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 - 17.0).collect();
    let b: Vec<f32> = (0..n).map(|i| 1.0 / (i as f32 + 1.0)).collect();
    let (pa, pb, pc) = (
        rig.alloc(u64::from(n) * 4).unwrap(),
        rig.alloc(u64::from(n) * 4).unwrap(),
        rig.alloc(u64::from(n) * 4 + 4).unwrap(),
    );
    rig.mem
        .write_u32s(pa, &a.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    rig.mem
        .write_u32s(pb, &b.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    let args = Args::default().u64(pa).u64(pb).u64(pc).u32(n);
    let d = dispatch_1d(&rig, "vector_add", n, wg, &args.0, 1);
    assert_eq!(run(&rig, &d, 1).stop, Stop::Done);
    let got = rig.mem.read_u32s(pc, n as usize + 1).unwrap();
    for i in 0..n as usize {
        assert_eq!(got[i], (a[i] + b[i]).to_bits(), "element {i}");
    }
    assert_eq!(got[n as usize], 0);
}

#[test]
fn lds_reduce_sums_each_workgroup_across_barriers() {
    let mut rig = rig();
    let groups = 6usize;
    let input = pattern(256 * groups, 7);
    let pin = rig.alloc(input.len() as u64 * 4).unwrap();
    let pout = rig.alloc(groups as u64 * 4).unwrap();
    rig.mem.write_u32s(pin, &input);
    let args = Args::default().u64(pin).u64(pout);
    let d = dispatch_1d(&rig, "lds_reduce", 256 * groups as u32, 256, &args.0, 2);
    assert_eq!(run(&rig, &d, 2).stop, Stop::Done);
    let want: Vec<u32> = input
        .chunks(256)
        .map(|c| c.iter().fold(0u32, |s, x| s.wrapping_add(*x)))
        .collect();
    assert_eq!(rig.mem.read_u32s(pout, groups).unwrap(), want);
}

#[rstest]
#[case::one_thread(1)]
#[case::two_threads(2)]
fn atomics_are_atomic(#[case] threads: usize) {
    let mut rig = rig();
    let n = 100usize;
    let vals: Vec<i32> = (0..n as i32).map(|i| (i * 37 % 101) - 50).collect();
    let b = AtomicsBuffers::new(&mut rig, &vals);
    let d = dispatch_1d(&rig, "atomics", n as u32, 32, &b.args().0, threads as u32);
    assert_eq!(run(&rig, &d, threads).stop, Stop::Done);
    let (counters, wide, slots) = (b.counters, b.wide, b.slots);
    let c = rig.mem.read_u32s(counters, 4).unwrap();
    assert_eq!(c[0], n as u32);
    assert_eq!(c[1] as i32, *vals.iter().min().unwrap());
    assert_eq!(c[2] as i32, *vals.iter().max().unwrap());
    assert_eq!(c[3], vals.iter().map(|&v| v as u32).max().unwrap());
    assert_eq!(
        rig.mem.read_u64(wide).unwrap() as i64,
        vals.iter().map(|&v| i64::from(v)).sum::<i64>()
    );
    assert_eq!(
        rig.mem.read_u64(wide + 8).unwrap() as i64,
        i64::from(*vals.iter().min().unwrap()) * 1_000_000_000
    );
    assert_eq!(
        rig.mem.read_u64(wide + 16).unwrap() as i64,
        i64::from(*vals.iter().max().unwrap()) * 1_000_000_000
    );
    let mut owners: Vec<u32> = rig
        .mem
        .read_u32s(slots, 128)
        .unwrap()
        .into_iter()
        .filter(|&x| x != 0)
        .collect();
    owners.sort_unstable();
    assert_eq!(
        owners,
        (1..=n as u32).collect::<Vec<_>>(),
        "every item claimed exactly one slot"
    );
}

#[test]
fn shuffles_move_values_between_lanes() {
    let mut rig = rig();
    let n = 128usize;
    let input = pattern(n, 3);
    let (pin, prot, pdpp) = (
        rig.alloc(512).unwrap(),
        rig.alloc(512).unwrap(),
        rig.alloc(512).unwrap(),
    );
    rig.mem.write_u32s(pin, &input);
    let args = Args::default().u64(pin).u64(prot).u64(pdpp);
    let d = dispatch_1d(&rig, "shuffle", n as u32, 64, &args.0, 1);
    assert_eq!(run(&rig, &d, 1).stop, Stop::Done);
    let rot = rig.mem.read_u32s(prot, n).unwrap();
    let dpp = rig.mem.read_u32s(pdpp, n).unwrap();
    for i in 0..n {
        let wave = i & !63;
        assert_eq!(rot[i], input[wave + (i + 1) % 64], "bpermute lane {i}");
        let want = if i % 16 == 0 { 0 } else { input[i - 1] };
        assert_eq!(dpp[i], want, "row_shr lane {i}");
    }
}

#[test]
fn grid2d_covers_partial_edge_workgroups() {
    let mut rig = rig();
    let (w, h) = (40u32, 24u32);
    let out = rig.alloc(u64::from(w * h) * 4 + 4).unwrap();
    let args = Args::default().u64(out).u32(w);
    let d = rig
        .dispatch("grid2d", [w, h, 1], [16, 8, 1], &args.0, 1)
        .unwrap();
    assert_eq!(d.workgroup_counts(), [3, 3, 1]);
    assert_eq!(run(&rig, &d, 1).stop, Stop::Done);
    let got = rig.mem.read_u32s(out, (w * h) as usize + 1).unwrap();
    for y in 0..h {
        for x in 0..w {
            assert_eq!(got[(y * w + x) as usize], x * 1000 + y, "({x}, {y})");
        }
    }
    assert_eq!(got[(w * h) as usize], 0);
}

#[test]
fn dmath_matches_the_cpu() {
    let mut rig = rig();
    let n = 64usize;
    let a: Vec<f64> = (0..n).map(|i| (i as f64 + 0.5) * 1.37e3).collect();
    let b: Vec<f64> = (0..n).map(|i| 3.0 - i as f64 * 0.731).collect();
    let (pa, pb, po) = (
        rig.alloc(512).unwrap(),
        rig.alloc(512).unwrap(),
        rig.alloc(2048).unwrap(),
    );
    rig.mem.write(
        pa,
        &a.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>(),
    );
    rig.mem.write(
        pb,
        &b.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>(),
    );
    let args = Args::default().u64(pa).u64(pb).u64(po);
    let d = dispatch_1d(&rig, "dmath", n as u32, 64, &args.0, 1);
    assert_eq!(run(&rig, &d, 1).stop, Stop::Done);
    for i in 0..n {
        let got: Vec<f64> = (0..4)
            .map(|k| f64::from_bits(rig.mem.read_u64(po + 8 * (4 * i + k) as u64).unwrap()))
            .collect();
        let (x, y) = (a[i], b[i]);
        // OpenCL contracts x * y + x into one fma.
        assert_eq!(got[0], x.mul_add(y, x), "mul-add {i}");
        assert_eq!(got[1], x / y, "division {i}");
        assert_eq!(got[2], x.sqrt(), "sqrt {i}");
        assert_eq!(got[3], x.mul_add(y, -1.5), "fma {i}");
    }
}

#[test]
fn index64_reaches_past_4_gib() {
    let mut rig = rig();
    let base = rig.alloc(8).unwrap();
    let offset_words = (5u64 << 30) / 8;
    assert!(rig.mem.map(base + offset_words * 8, 4096, true));
    let args = Args::default().u64(base).u64(offset_words);
    let d = dispatch_1d(&rig, "index64", 256, 64, &args.0, 1);
    assert_eq!(run(&rig, &d, 1).stop, Stop::Done);
    for i in 0..256u64 {
        assert_eq!(
            rig.mem.read_u64(base + (offset_words + i) * 8).unwrap(),
            offset_words + i
        );
    }
}

#[test]
fn an_illegal_instruction_stops_the_dispatch_with_its_address() {
    let mut rig = rig();
    let out = rig.alloc(4).unwrap();
    let d = dispatch_1d(&rig, "illegal", 64, 64, &Args::default().u64(out).0, 1);
    let o = run(&rig, &d, 1);
    let Stop::Error {
        error: ShaderError::IllegalInstruction { word, pc, .. },
        ..
    } = o.stop
    else {
        panic!("expected an illegal instruction, got {:?}", o.stop)
    };
    assert_eq!(word, 0xfc00_0000);
    assert!(pc > d.entry(), "the word is after the first store");
    assert_eq!(
        rig.mem.read_u32(out).unwrap(),
        1,
        "the store before it happened, the one after not"
    );
}

#[test]
fn a_read_of_an_unmapped_address_is_a_memory_fault() {
    let mut rig = rig();
    let out = rig.alloc(256).unwrap();
    let bad = 0x7_0000_0000u64;
    let args = Args::default().u64(bad).u64(out);
    let d = dispatch_1d(&rig, "fault", 64, 64, &args.0, 1);
    let o = run(&rig, &d, 1);
    let Stop::Error {
        error: ShaderError::MemoryFault { fault, .. },
        ..
    } = o.stop
    else {
        panic!("expected a memory fault, got {:?}", o.stop)
    };
    assert_eq!((fault.addr & !0xff, fault.write), (bad, false));
}

#[test]
fn s_trap_is_reported_with_its_id() {
    let mut rig = rig();
    let out = rig.alloc(4).unwrap();
    let d = dispatch_1d(&rig, "trap", 64, 64, &Args::default().u64(out).0, 1);
    let o = run(&rig, &d, 1);
    assert!(
        matches!(o.stop, Stop::Trap { trap_id: 2, .. }),
        "{:?}",
        o.stop
    );
    assert_eq!(rig.mem.read_u32(out).unwrap(), 1);
}

#[test]
fn a_spinning_wave_stops_at_its_budget_and_finishes_when_the_flag_is_set() {
    let mut rig = rig();
    let flag = rig.alloc(4).unwrap();
    let out = rig.alloc(256).unwrap();
    let args = Args::default().u64(flag).u64(out);
    let d = dispatch_1d(&rig, "spin", 64, 64, &args.0, 1);
    let mut wg = d.workgroup(0, 0);
    let mut ex = Executor::new();
    let st = ex.run(&mut wg, &rig.mem, &NoClock, 10_000);
    assert_eq!((st.stop, st.instructions), (Stop::Budget, 10_000));
    rig.mem.write_u32s(flag, &[5]);
    let st = ex.run(&mut wg, &rig.mem, &NoClock, 10_000);
    assert_eq!(st.stop, Stop::Done);
    assert_eq!(
        rig.mem.read_u32s(out, 64).unwrap(),
        (5..69).collect::<Vec<u32>>()
    );
}

#[test]
fn private_arrays_use_swizzled_scratch() {
    let mut rig = rig();
    let n = 200usize;
    let input = pattern(n, 11);
    let idx = pattern(n, 5);
    let (pin, pidx, pout) = (
        rig.alloc(1024).unwrap(),
        rig.alloc(1024).unwrap(),
        rig.alloc(1024).unwrap(),
    );
    rig.mem.write_u32s(pin, &input);
    rig.mem.write_u32s(pidx, &idx);
    let args = Args::default().u64(pin).u64(pidx).u64(pout);
    let d = dispatch_1d(&rig, "scratch", n as u32, 128, &args.0, 2);
    assert_eq!(run(&rig, &d, 2).stop, Stop::Done);
    let got = rig.mem.read_u32s(pout, n).unwrap();
    for i in 0..n {
        let a = |k: u32| input[i].wrapping_mul(k).wrapping_add(k);
        assert_eq!(
            got[i],
            a(idx[i] & 63).wrapping_add(a((idx[i] + 7) & 63)),
            "item {i}"
        );
    }
    // The private arrays went through the scratch backing memory: somewhere in it, since which
    // thread's slot a workgroup's waves get depends on which thread took the workgroup.
    let words = usize::try_from(layout::SCRATCH_BYTES / 4).unwrap();
    let used = rig.mem.read_u32s(layout::SCRATCH_VA, words).unwrap();
    assert!(used.iter().any(|&x| x != 0));
}

#[test]
fn flat_pointers_reach_lds_and_private_memory_through_the_apertures() {
    let mut rig = rig();
    let out = rig.alloc(256).unwrap();
    let d = dispatch_1d(
        &rig,
        "flat_apertures",
        64,
        64,
        &Args::default().u64(out).0,
        1,
    );
    let o = run(&rig, &d, 1);
    assert_eq!(o.stop, Stop::Done);
    let got = rig.mem.read_u32s(out, 64).unwrap();
    for t in 0..64u32 {
        assert_eq!(got[t as usize], (63 - t) * 3 + t * 5, "lane {t}");
    }
}

#[test]
fn s_sendmsg_interrupt_carries_m0_and_the_wave_goes_on() {
    let mut rig = rig();
    let out = rig.alloc(1024).unwrap();
    let d = dispatch_1d(&rig, "interrupt", 256, 64, &Args::default().u64(out).0, 1);
    let o = run(&rig, &d, 1);
    assert_eq!(o.stop, Stop::Done);
    assert_eq!(o.interrupts, [40, 41, 42, 43]);
    assert!(rig.mem.read_u32s(out, 256).unwrap().iter().all(|&x| x == 7));
}

#[test]
fn integer_division_sequences_match_the_cpu() {
    let mut rig = rig();
    let n = 256usize;
    let mut seed = 0x1234_5678_9abc_def1u64;
    let mut next = || {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        seed
    };
    let special = [
        0u64,
        1,
        2,
        3,
        7,
        u64::MAX,
        u64::MAX - 1,
        1 << 32,
        (1 << 32) - 1,
        1 << 63,
    ];
    let a: Vec<u64> = (0..n)
        .map(|k| match k % 4 {
            0 => next(),
            1 => next() >> 33,
            2 => special[k % special.len()],
            _ => next() >> 60,
        })
        .map(|x| {
            if x as i64 == i64::MIN || x as u32 as i32 == i32::MIN {
                x ^ 1 << 62 ^ 1
            } else {
                x
            }
        })
        .collect();
    let b: Vec<u64> = (0..n)
        .map(|k| match k % 3 {
            0 => next() >> (next() % 64),
            1 => special[(k + 3) % special.len()],
            _ => next() >> 40,
        })
        .collect();
    let (pa, pb, po) = (
        rig.alloc(n as u64 * 8).unwrap(),
        rig.alloc(n as u64 * 8).unwrap(),
        rig.alloc(n as u64 * 64).unwrap(),
    );
    rig.mem.write(
        pa,
        &a.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>(),
    );
    rig.mem.write(
        pb,
        &b.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>(),
    );
    let args = Args::default().u64(pa).u64(pb).u64(po);
    let d = dispatch_1d(&rig, "int_div", n as u32, 64, &args.0, 1);
    assert_eq!(run(&rig, &d, 1).stop, Stop::Done);
    for i in 0..n {
        let (x, y) = (a[i], b[i] | 1);
        let (x32, y32) = (x as u32, b[i] as u32 | 1);
        let want = [
            x / y,
            x % y,
            (x as i64).wrapping_div(y as i64) as u64,
            (x as i64).wrapping_rem(y as i64) as u64,
            u64::from(x32 / y32),
            u64::from(x32 % y32),
            i64::from((x32 as i32).wrapping_div(y32 as i32)) as u64,
            i64::from((x32 as i32).wrapping_rem(y32 as i32)) as u64,
        ];
        let got: Vec<u64> = (0..8)
            .map(|k| rig.mem.read_u64(po + 8 * (8 * i + k) as u64).unwrap())
            .collect();
        assert_eq!(got, want, "{x:#x} and {:#x}", b[i]);
    }
}

#[test]
fn half_precision_matches_the_cpu() {
    use half::f16;
    let mut rig = rig();
    let n = 128usize;
    let pick = |k: usize, s: u32| -> f16 {
        match k % 8 {
            0 => f16::from_bits(1 + (k as u16 % 5)), // denormals
            1 => f16::from_f32(65000.0),
            2 => f16::from_f32(-0.0),
            _ => f16::from_f32((k as f32 * 0.37 + s as f32).sin() * 100.0),
        }
    };
    let a: Vec<f16> = (0..n).map(|k| pick(k, 1)).collect();
    let b: Vec<f16> = (0..n).map(|k| pick(k + 3, 2)).collect();
    let (pa, pb, po, pw) = (
        rig.alloc(256).unwrap(),
        rig.alloc(256).unwrap(),
        rig.alloc(1024).unwrap(),
        rig.alloc(512).unwrap(),
    );
    rig.mem.write(
        pa,
        &a.iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .collect::<Vec<_>>(),
    );
    rig.mem.write(
        pb,
        &b.iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .collect::<Vec<_>>(),
    );
    let args = Args::default().u64(pa).u64(pb).u64(po).u64(pw);
    let d = dispatch_1d(&rig, "half_math", n as u32, 64, &args.0, 1);
    assert_eq!(run(&rig, &d, 1).stop, Stop::Done);
    let out = rig.mem.read(po, n * 8).unwrap();
    let h = |k: usize| u16::from_le_bytes([out[2 * k], out[2 * k + 1]]);
    for i in 0..n {
        let (x, y) = (a[i], b[i]);
        let fma = f16::from_f64(f64::from(x).mul_add(f64::from(y), 0.25));
        let want = [x + y, x * y, fma, if x > y { x } else { y }];
        for (k, w) in want.iter().enumerate() {
            assert_eq!(h(4 * i + k), w.to_bits(), "item {i} op {k}: {x} and {y}");
        }
        let wide = f32::from_bits(rig.mem.read_u32(pw + 4 * i as u64).unwrap());
        assert_eq!(wide, f32::from(x) * f32::from(y), "item {i}");
    }
}

#[test]
fn softmax_rows_sum_to_one_and_match_the_cpu() {
    let mut rig = rig();
    let rows = 4usize;
    let input: Vec<f32> = (0..rows * 64)
        .map(|k| ((k * 37 % 101) as f32 - 50.0) / 7.0)
        .collect();
    let (pin, pout) = (rig.alloc(1024).unwrap(), rig.alloc(1024).unwrap());
    rig.mem
        .write_u32s(pin, &input.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    let args = Args::default().u64(pin).u64(pout);
    let d = dispatch_1d(&rig, "softmax", (rows * 64) as u32, 64, &args.0, 1);
    assert_eq!(run(&rig, &d, 1).stop, Stop::Done);
    let got: Vec<f32> = rig
        .mem
        .read_u32s(pout, rows * 64)
        .unwrap()
        .into_iter()
        .map(f32::from_bits)
        .collect();
    for r in 0..rows {
        let row = &input[64 * r..64 * (r + 1)];
        let m = row.iter().copied().fold(f32::MIN, f32::max);
        let sum: f64 = row.iter().map(|v| f64::from(v - m).exp()).sum();
        for (k, v) in row.iter().enumerate() {
            let want = f64::from(v - m).exp() / sum;
            let g = f64::from(got[64 * r + k]);
            assert!(
                (g - want).abs() <= 1e-5 * want.max(1e-30),
                "row {r} item {k}: {g} vs {want}"
            );
        }
    }
}
