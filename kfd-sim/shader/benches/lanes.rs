//! Lane-instructions per second of the shader core on one thread: a blit-style aligned copy
//! (dwordx4 loads and stores over a grid-stride loop, as ROCr's and HIP's copy kernels) and a
//! vector add. A lane-instruction is one instruction times its active lanes (EXEC). The promise
//! (issue 25, item 3): at least 500M lane-instructions/s for the copy in a release build.
//!
//! Time is the process's CPU time, not the wall clock: the dispatch runs on one thread, so this
//! is the rate of one core however busy the machine is (CI machines and shared build hosts are).

#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    missing_docs
)] // bench code

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kfd_shader::testmem::Rig;
use kfd_shader::{run_dispatch, Dispatch, NoClock, Stop};

mod common;

use common::CpuTime;

const CODE_OBJECT: &[u8] = include_bytes!("../kernels/kernels.co");
const BLIT: &[u8] = include_bytes!("../kernels/blit.co");

fn args(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn measure(c: &mut Criterion<CpuTime>, name: &str, rig: &Rig, d: &Dispatch) {
    let first = run_dispatch(d, &rig.mem, &NoClock, 1, u64::MAX);
    assert_eq!(first.stop, Stop::Done);
    let mut g = c.benchmark_group("shader");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    g.throughput(Throughput::Elements(first.lane_instructions));
    g.bench_function(name, |b| {
        b.iter(|| run_dispatch(d, &rig.mem, &NoClock, 1, u64::MAX));
    });
    g.finish();
}

fn bench(c: &mut Criterion<CpuTime>) {
    // Copy 16 MiB with ROCr's blit grid: 64 x 4 x 104 CUs work-items, workgroups of 64.
    let mut rig = Rig::new(CODE_OBJECT, 40 << 20).unwrap();
    let n16: u64 = (16 << 20) / 16;
    let src = rig.alloc(n16 * 16).unwrap();
    let dst = rig.alloc(n16 * 16).unwrap();
    let tail = rig.alloc(256).unwrap();
    let a = args(&[src, dst, n16, tail, tail + 128, 0]);
    let d = rig
        .dispatch("copy_aligned", [64 * 4 * 104, 1, 1], [64, 1, 1], &a, 1)
        .unwrap();
    measure(c, "copy_aligned_16MiB", &rig, &d);

    // The same 16 MiB by the amd_kernel_code_t blit with FLAT accesses (ROCr's shape).
    let mut rig = Rig::new(BLIT, 40 << 20).unwrap();
    let src = rig.alloc(n16 * 16).unwrap();
    let dst = rig.alloc(n16 * 16).unwrap();
    let grid: u32 = 64 * 4 * 104;
    let mut a = args(&[src, dst, n16, 0]);
    a.extend_from_slice(&grid.to_le_bytes());
    let d = rig
        .dispatch("flat_blit", [grid, 1, 1], [64, 1, 1], &a, 1)
        .unwrap();
    measure(c, "flat_blit_16MiB", &rig, &d);

    // c = a + b over 1M floats in workgroups of 256.
    let mut rig = Rig::new(CODE_OBJECT, 13 << 20).unwrap();
    let n: u64 = 1 << 20;
    let (pa, pb, pc) = (
        rig.alloc(n * 4).unwrap(),
        rig.alloc(n * 4).unwrap(),
        rig.alloc(n * 4).unwrap(),
    );
    let mut a = args(&[pa, pb, pc]);
    a.extend_from_slice(&(n as u32).to_le_bytes());
    let d = rig
        .dispatch("vector_add", [n as u32, 1, 1], [256, 1, 1], &a, 1)
        .unwrap();
    measure(c, "vector_add_1M", &rig, &d);
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(CpuTime);
    targets = bench
}
criterion_main!(benches);
