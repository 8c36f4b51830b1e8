//! Matrix-core throughput of the shader core on one thread, in floating-point operations per
//! second of CPU time (a multiply and an add per product: 2 x M x N x K x blocks a
//! instruction): one wave running 256 back-to-back `v_mfma_f32_32x32x2f32` (4096 FLOP each), and
//! 256 `v_mfma_f32_32x32x8f16` (16384 FLOP each), accumulating in AGPRs. The target (issue 38):
//! at least 5 GFLOP/s on one core for both.
//!
//! Time is the process's CPU time (see `common`), so this is the rate of one core however busy
//! the machine is.

#![allow(clippy::unwrap_used, missing_docs)] // bench code

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kfd_shader::testmem::FlatMemory;
use kfd_shader::{Apertures, Executor, NoClock, Stop, Wave, Workgroup, LANES};

mod common;

use common::CpuTime;

const CODE: u64 = 0x1000;
const S_ENDPGM: u32 = 0xbf81_0000;
const COPIES: usize = 256;

/// `v_mfma_f32_32x32x2f32 a[0:15], v0, v2, a[0:15]` (llvm-mc-15 -mcpu=gfx90a).
const F32_32X32X2: [u32; 2] = [0xd3c4_8000, 0x0402_0500];
/// `v_mfma_f32_32x32x8f16 a[0:15], v[0:1], v[2:3], a[0:15]`.
const F16_32X32X8: [u32; 2] = [0xd3cc_8000, 0x0402_0500];

/// One wave with `inst` COPIES times then s_endpgm; A and B hold `ab` in every lane.
fn setup(inst: [u32; 2], ab: u32) -> (FlatMemory, Workgroup) {
    let mut code: Vec<u32> = (0..COPIES).flat_map(|_| inst).collect();
    code.push(S_ENDPGM);
    let mut mem = FlatMemory::new();
    assert!(mem.map(CODE, 0x4000, false));
    assert!(mem.write_u32s(CODE, &code));
    let mut w = Wave::new(0, 64, 32);
    w.pc = CODE;
    w.set_exec(u64::MAX);
    for r in 0..4 {
        *w.v_mut(r).unwrap() = [ab; LANES];
    }
    (mem, Workgroup::from_waves(vec![w], 0, Apertures::KFD_GFX9))
}

fn measure(c: &mut Criterion<CpuTime>, name: &str, inst: [u32; 2], ab: u32, flops: u64) {
    let (mem, wg) = setup(inst, ab);
    let mut ex = Executor::new();
    let mut g = c.benchmark_group("mfma");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    g.throughput(Throughput::Elements(flops * COPIES as u64));
    g.bench_function(name, |b| {
        b.iter(|| {
            let mut run = wg.clone();
            let st = ex.run(&mut run, &mem, &NoClock, u64::MAX);
            assert_eq!(st.stop, Stop::Done);
            run
        });
    });
    g.finish();
}

fn bench(c: &mut Criterion<CpuTime>) {
    // A and B: 1.0 (f32), and pairs of f16 1.0.
    measure(
        c,
        "f32_32x32x2_flop",
        F32_32X32X2,
        0x3f80_0000,
        2 * 32 * 32 * 2,
    );
    measure(
        c,
        "f16_32x32x8_flop",
        F16_32X32X8,
        0x3c00_3c00,
        2 * 32 * 32 * 8,
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(CpuTime);
    targets = bench
}
criterion_main!(benches);
