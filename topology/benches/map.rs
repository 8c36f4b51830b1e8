//! Mapping time for large nodes. The promises: a 16-GPU node with four xGMI hives of four maps
//! in well under 10 ms (issue: topology remap), and so does an 8-GPU image onto a 16-GPU node
//! (issue: GPU containers, restore onto a node with more GPUs).

#![allow(clippy::unwrap_used, missing_docs)] // bench code

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use topology::builder::{GpuSpec, TopologyBuilder};
use topology::{map_gpus, CheckOptions, Topology};

/// `gpus` GCDs in hives of `hive` on two NUMA nodes.
fn node(gpus: usize, hive: usize) -> Topology {
    let mut b = TopologyBuilder::new()
        .cpus(2)
        .gpus(gpus / 2, &GpuSpec::mi250x_gcd().numa(0).caches(0))
        .gpus(gpus / 2, &GpuSpec::mi250x_gcd().numa(1).caches(0));
    for h in 0..gpus / hive {
        b = b.hive(h * hive..(h + 1) * hive);
    }
    b.build()
}

/// The same node with its GPUs enumerated in a different order (hives interleaved, NUMA
/// nodes swapped) and other gpu_ids: no identity mapping to fall back on.
fn enumerated_differently(t: &Topology) -> Topology {
    let gpus: Vec<u32> = t.gpus().map(|n| n.id).collect();
    let n = gpus.len();
    let mut order: Vec<u32> = t.cpus().map(|c| c.id).rev().collect();
    order.extend((0..n).map(|i| gpus[(i % 4) * (n / 4) + (n / 4 - 1 - i / 4)]));
    let mut d = t.renumbered(&order);
    for (i, g) in d.nodes.iter_mut().filter(|n| n.is_gpu()).enumerate() {
        g.gpu_id = 0xc000 + u32::try_from(i).unwrap();
    }
    d
}

fn bench(c: &mut Criterion) {
    let options = CheckOptions::default();
    for (name, gpus, hive) in [
        ("16 GPUs, four hives of 4", 16, 4),
        ("16 GPUs, two hives of 8", 16, 8),
        ("8 GPUs, one hive of 8", 8, 8),
    ] {
        let src = node(gpus, hive);
        let dst = enumerated_differently(&src);
        assert!(map_gpus(&src, &dst, &options).is_ok());
        c.bench_function(&format!("map {name}, enumerated differently"), |b| {
            b.iter(|| map_gpus(black_box(&src), black_box(&dst), &options));
        });
    }
    // A failure has to rule everything out: 16 GPUs in one hive of 16 onto four hives of 4.
    let src = node(16, 16);
    let dst = enumerated_differently(&node(16, 4));
    assert!(map_gpus(&src, &dst, &options).is_err());
    c.bench_function("refuse a hive of 16 onto four hives of 4", |b| {
        b.iter(|| map_gpus(black_box(&src), black_box(&dst), &options));
    });
    // The worst failure for the search: four hives of 4 onto two hives of 8 wired as rings,
    // which passes every per-GPU test.
    let dst = {
        let mut b = TopologyBuilder::new()
            .cpus(2)
            .gpus(8, &GpuSpec::mi250x_gcd().numa(0).caches(0))
            .gpus(8, &GpuSpec::mi250x_gcd().numa(1).caches(0));
        for h in 0..2 {
            for i in 0..8 {
                b = b.xgmi(h * 8 + i, h * 8 + (i + 1) % 8);
                b = b.xgmi(h * 8 + i, h * 8 + (i + 2) % 8);
                b = b.xgmi(h * 8 + i, h * 8 + (i + 4) % 8);
            }
        }
        b.build()
    };
    let src = node(16, 4);
    let _ = map_gpus(&src, &dst, &options);
    c.bench_function("four hives of 4 onto two 8-GPU rings with chords", |b| {
        b.iter(|| map_gpus(black_box(&src), black_box(&dst), &options));
    });
    // NUMA placement that cannot be kept: 16 PCIe GPUs, 8 + 8 onto 9 + 7.
    let pcie = |a: usize, b: usize| {
        TopologyBuilder::new()
            .cpus(2)
            .gpus(a, &GpuSpec::mi100().numa(0).caches(0))
            .gpus(b, &GpuSpec::mi100().numa(1).caches(0))
            .build()
    };
    let (src, dst) = (pcie(8, 8), pcie(9, 7));
    assert!(map_gpus(&src, &dst, &options).is_err());
    c.bench_function("refuse 16 PCIe GPUs 8+8 onto NUMA nodes 9+7", |b| {
        b.iter(|| map_gpus(black_box(&src), black_box(&dst), &options));
    });
}

/// `gpus` GCDs two per CPU node, in hives of `hive`, with gpu_ids from `first_id`.
fn gcds(gpus: usize, hive: usize, first_id: u32) -> Topology {
    let mut b = TopologyBuilder::new().cpus(gpus / 2);
    for i in 0..gpus {
        let id = first_id + u32::try_from(i).unwrap();
        b = b.gpu(GpuSpec::mi250x_gcd().numa(i / 2).caches(0).gpu_id(id));
    }
    for h in 0..gpus / hive {
        b = b.hive(h * hive..(h + 1) * hive);
    }
    b.build()
}

fn bench_subsets(c: &mut Criterion) {
    let on = CheckOptions::default();
    let numa_off = on.with(topology::Check::Numa, false);
    let sixteen = gcds(16, 8, 0xc000);
    for (name, src, options) in [
        (
            "8 GCDs in a hive onto 16 in two hives of 8",
            gcds(8, 8, 0x100),
            on,
        ),
        (
            "8 GCDs in a hive onto 16 in two hives of 8, KFD_NUMA_CHECK=0",
            gcds(8, 8, 0x100),
            numa_off,
        ),
        (
            "8 GCDs in four hives of 2 onto 16 in two hives of 8",
            gcds(8, 2, 0x100),
            on,
        ),
        (
            "2 GCDs in a hive onto 16 in two hives of 8",
            gcds(2, 2, 0x100),
            on,
        ),
    ] {
        let m = map_gpus(&src, &sixteen, &options).unwrap();
        assert_eq!(m.unused.len(), 16 - src.gpus().count());
        c.bench_function(&format!("subset: {name}"), |b| {
            b.iter(|| map_gpus(black_box(&src), black_box(&sixteen), &options));
        });
    }
    let pcie = |gpus: usize, first_id: u32| {
        let mut b = TopologyBuilder::new().cpus(2);
        for i in 0..gpus {
            let id = first_id + u32::try_from(i).unwrap();
            b = b.gpu(GpuSpec::mi100().numa(i % 2).caches(0).gpu_id(id));
        }
        b.build()
    };
    let (src, dst) = (pcie(8, 0x100), pcie(16, 0xc000));
    assert!(map_gpus(&src, &dst, &on).is_ok());
    c.bench_function("subset: 8 PCIe GPUs onto 16 on two NUMA nodes", |b| {
        b.iter(|| map_gpus(black_box(&src), black_box(&dst), &on));
    });
    // Fewer fitting GPUs than the image: one old GCD in each hive of 8.
    let mut dst = gcds(16, 8, 0xc000);
    for id in [0xc003, 0xc00c] {
        dst.gpu_mut(id)
            .unwrap()
            .properties
            .set(topology::model::keys::FW_VERSION, 1);
    }
    let src = gcds(8, 8, 0x100);
    assert!(map_gpus(&src, &dst, &on).is_err());
    c.bench_function(
        "subset: refuse a hive of 8 onto two hives of 8 with 7 fitting each",
        |b| {
            b.iter(|| map_gpus(black_box(&src), black_box(&dst), &on));
        },
    );
}

criterion_group!(benches, bench, bench_subsets);
criterion_main!(benches);
