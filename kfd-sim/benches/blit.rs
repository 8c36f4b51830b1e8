//! Copy kernels through the whole command processor, as `hsa_memory_copy` runs them: the
//! committed test kernels dispatched on an AQL queue of the in-process simulator, the queue rung
//! through its doorbell, the completion signal waited for on its event. The data is what ROCr's
//! copies move: host memory of the client registered as userptr (`hsa-compute`'s fine-grained
//! host buffers and `hsa_amd_memory_lock`ed ones), which the GPU reaches only through the
//! mirrors of `hw::cp::memory`, and VRAM.
//!
//! The sizes and offsets are `ci/rocm/hsa-compute.c`'s `copy_unaligned` step: 1 MiB - 5 bytes
//! from host offset 3 to VRAM offset 1 and back, copied by a byte-granular kernel of the shape of
//! ROCr's misaligned blit (`copy_misaligned` in `shader/kernels/misaligned.cl`), on ROCr's grid
//! (64 x 4 work-items per CU of an MI210, workgroups of 64). The aligned copy of the same
//! megabyte (`copy_aligned`, dwordx4) and the misaligned copy between GTT and VRAM (no client
//! memory: memfds, shared) are measured beside it, to tell the mirrors' cost from the per-byte
//! work.
//!
//! The in-process front end reaches the client's memory as the daemon reaches a CUSE client's:
//! `ProcessMemory` with `process_vm_readv`/`writev` (of our own pid here, of the client's over
//! CUSE), so the mirrors cost the same system calls and copies in both.
//!
//! Time is the process's CPU time (every thread's: the command processor's and its round's
//! workers, one per core, do the work; the bench's thread sleeps on the event), so the numbers
//! are the work a copy costs however busy the machine is. Throughput is bytes copied per
//! CPU-second.

#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    missing_docs
)] // bench code

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../shader/benches/common/mod.rs"]
mod cputime;

use std::time::Duration;

use common::aql::{dispatch_packet, Args, Code, Queue, Rig, Signal, MISALIGNED};
use common::{env, VRAM_W};
use cputime::CpuTime;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kfd_abi::AllocFlags;
use kfd_sim::Preset;

/// `hsa-compute`'s buffers.
const BYTES: u64 = 1 << 20;
/// ROCr's blit grid on an MI210 (104 CUs).
const GRID: u32 = 64 * 4 * 104;
/// Where the host buffers go in the GPU VM (userptr).
const HOST_VA: u64 = 0x7e10_0000_0000;

/// Page-aligned host memory of the process, registered as a userptr BO and mapped on the GPU.
struct Host {
    bytes: Vec<u8>,
    off: usize,
    va: u64,
}

impl Host {
    fn new(rig: &Rig, va: u64) -> Self {
        let mut bytes = vec![0u8; (BYTES + 4096) as usize];
        let off = bytes.as_ptr().align_offset(4096);
        let cpu = bytes[off..].as_mut_ptr() as u64;
        // SAFETY: `bytes` lives as long as the machine the BO belongs to (the bench's end) and is
        // never reallocated.
        let bo = unsafe {
            rig.e
                .kfd
                .alloc_userptr(va, BYTES, rig.g, AllocFlags::WRITABLE, cpu)
        }
        .unwrap();
        rig.e.kfd.map_memory_to_gpu(bo.handle, &[rig.g]).unwrap();
        Self { bytes, off, va }
    }

    fn slice(&mut self) -> &mut [u8] {
        &mut self.bytes[self.off..self.off + BYTES as usize]
    }
}

/// A copy ready to dispatch: its kernel and its arguments in the rig's kernel-argument buffer.
struct Copy {
    kernel: (u64, u32, u32),
    kernargs: u64,
}

impl Copy {
    fn new(rig: &Rig, kernel: (u64, u32, u32), args: &Args) -> Self {
        Self {
            kernel,
            kernargs: rig.kernargs(&args.0),
        }
    }

    /// Dispatches the copy over ROCr's grid and waits for its completion signal (`done`, set to
    /// 1 first, as ROCr's blit does with its own signal).
    fn run(&self, rig: &Rig, q: &Queue, done: &Signal) {
        let at = (done.va - rig.signals.va) as usize + 8;
        rig.signals.write(at, &1i64.to_le_bytes());
        q.submit(dispatch_packet(
            self.kernel,
            [GRID, 1, 1],
            [64, 1, 1],
            self.kernargs,
            done.va,
        ));
        rig.wait_event(done);
        assert_eq!(rig.value(done), 0);
    }
}

fn bench(c: &mut Criterion<CpuTime>) {
    let rig = Rig::new(env(Preset::mi210x2()));
    // Signals and kernel arguments are a few KiB of the rig's: one queue of 4096 packets and
    // fresh signals per copy would run out; each iteration takes one of each.
    let q = Queue::new(&rig, 4096, None);
    let mut host = Host::new(&rig, HOST_VA);
    let vram = rig.buf(BYTES, VRAM_W);
    let gtt = rig.buf(BYTES, common::GTT_W);
    let n = BYTES - 5;
    let pattern: Vec<u8> = (0..BYTES).map(|i| (i * 7 + 3) as u8).collect();
    host.slice().copy_from_slice(&pattern);
    gtt.write(0, &pattern);

    let done = rig.signal(1, true);
    let code: Code = rig.load(MISALIGNED);
    let mis = |src: u64, dst: u64| {
        let args = Args::default().u64(src).u64(dst).u64(n);
        Copy::new(&rig, code.kernel("copy_misaligned"), &args)
    };
    let to_vram = mis(host.va + 3, vram.va + 1);
    let to_host = mis(vram.va + 1, host.va + 3);
    let gtt_to_vram = mis(gtt.va + 3, vram.va + 1);
    let aligned = Copy::new(
        &rig,
        rig.kernel("copy_aligned"),
        &Args::default()
            .u64(host.va)
            .u64(vram.va)
            .u64(BYTES / 16)
            .u64(host.va)
            .u64(vram.va)
            .u64(0),
    );
    // The copies are checked once, outside the timing.
    to_vram.run(&rig, &q, &done);
    assert_eq!(vram.read(1, n as usize), pattern[3..3 + n as usize]);
    host.slice().fill(0);
    to_host.run(&rig, &q, &done);
    assert_eq!(host.slice()[3..3 + n as usize], pattern[3..3 + n as usize]);
    assert_eq!(host.slice()[..3], [0, 0, 0]);
    gtt_to_vram.run(&rig, &q, &done);
    assert_eq!(vram.read(1, n as usize), pattern[3..3 + n as usize]);

    let mut g = c.benchmark_group("cp_copy_1MiB");
    g.throughput(Throughput::Bytes(n));
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(8));
    for (name, copy) in [
        ("misaligned_userptr_to_vram", &to_vram),
        ("misaligned_vram_to_userptr", &to_host),
        ("misaligned_gtt_to_vram", &gtt_to_vram),
        ("aligned_userptr_to_vram", &aligned),
    ] {
        g.bench_function(name, |b| b.iter(|| copy.run(&rig, &q, &done)));
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(CpuTime);
    targets = bench
}
criterion_main!(benches);
