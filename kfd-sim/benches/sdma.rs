//! SDMA COPY_LINEAR throughput of the simulator between a memfd-backed VRAM BO and a userptr
//! buffer, against a plain `copy_from_slice` of the same size. The promise (issue 4): such a copy
//! runs at memcpy speed (no per-byte work: in process, one `pread` out of the memfd and one
//! `pwrite` into it, straight from and to the user memory). A bare `process_vm_readv` of the
//! same size is measured too: that syscall is the floor of any copy that may cross address
//! spaces.
//!
//! `copy_linear_userptr_to_fresh_vram` is the restore's case: every iteration copies into a VRAM
//! BO created (and mapped) just before, whose memfd pages have never been written, so the time
//! includes the engine allocating them; creating, mapping, unmapping and closing the BO are
//! outside the timed part. The other VRAM cases reuse one BO whose pages exist after the first
//! iteration.

#![allow(clippy::unwrap_used, clippy::cast_possible_truncation, missing_docs)] // bench code

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kfd_abi::render::{GemDomain, IbSubmit, VmPageFlags, HW_IP_DMA};
use kfd_abi::sdma::IbBuilder;
use kfd_abi::{RenderNode, UserptrBuffer};
use kfd_sim::{Machine, Preset, SimFile};

const SIZE: u64 = 64 << 20;
const VRAM_VA: u64 = 0x20_0000_0000;
/// Where each iteration's fresh BO is mapped.
const FRESH_VA: u64 = 0x40_0000_0000;

fn bench(c: &mut Criterion) {
    let machine = Machine::new(&Preset::mi210x2()).unwrap();
    let proc = machine.spawn_process();
    let minor = machine.render_minors()[0];
    let r = RenderNode::new(proc.open_render(minor).unwrap(), "renderD");
    let rw = VmPageFlags::READABLE | VmPageFlags::WRITEABLE;
    let vram = r.gem_create(SIZE, 4096, GemDomain::VRAM, 0).unwrap();
    r.va_map(vram, VRAM_VA, 0, SIZE, rw).unwrap();
    let mut host = UserptrBuffer::new(&r, SIZE as usize, 0x10_0000_0000).unwrap();
    host.as_mut_slice().fill(0x5a);
    let mut ib = UserptrBuffer::new(&r, 4096, 0x30_0000_0000).unwrap();
    let ctx = r.ctx_alloc().unwrap();

    let mut run = |src: u64, dst: u64| {
        let mut b = IbBuilder::new();
        b.copy_linear(src, dst, SIZE);
        let dwords = b.finish();
        for (d, w) in ib.as_mut_slice().chunks_exact_mut(4).zip(&dwords) {
            d.copy_from_slice(&w.to_le_bytes());
        }
        let submit = IbSubmit {
            ctx,
            bo_list: None,
            ip_type: HW_IP_DMA,
            ring: 0,
            ib_va: ib.va(),
            ib_bytes: (dwords.len() * 4) as u32,
        };
        let seq = r.cs_submit(&submit).unwrap();
        let deadline = RenderNode::<SimFile>::deadline_in(10_000_000_000);
        assert!(r.wait_cs(ctx, HW_IP_DMA, 0, seq, deadline).unwrap());
    };
    let host_va = host.va();

    let mut g = c.benchmark_group("sdma_64MiB");
    g.throughput(Throughput::Bytes(SIZE));
    g.sample_size(20);
    g.bench_function("copy_linear_userptr_to_vram", |b| {
        b.iter(|| run(host_va, VRAM_VA));
    });
    g.bench_function("copy_linear_vram_to_userptr", |b| {
        b.iter(|| run(VRAM_VA, host_va));
    });
    g.bench_function("copy_linear_userptr_to_fresh_vram", |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            for _ in 0..iters {
                let bo = r.gem_create(SIZE, 4096, GemDomain::VRAM, 0).unwrap();
                r.va_map(bo, FRESH_VA, 0, SIZE, rw).unwrap();
                let start = Instant::now();
                run(host_va, FRESH_VA);
                took += start.elapsed();
                r.va_unmap(bo, FRESH_VA, 0, SIZE).unwrap();
                r.gem_close(bo).unwrap();
            }
            took
        });
    });
    let src = vec![0x5au8; SIZE as usize];
    let mut dst = vec![0u8; SIZE as usize];
    g.bench_function("copy_from_slice", |b| {
        b.iter(|| dst.copy_from_slice(black_box(&src)));
    });
    // The floor of a copy between address spaces: one bare process_vm_readv of the same size.
    let pid = kfd_sim::host::own_pid();
    g.bench_function("process_vm_readv", |b| {
        b.iter(|| {
            kfd_sim::host::process_vm_read(pid, black_box(src.as_ptr() as u64), &mut dst).unwrap()
        });
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
