//! Properties: the same machine enumerated differently always maps, bijectively, keeping every
//! equality property and every hive; and so does a machine onto a larger one that holds it (more
//! GPUs, anywhere in the enumeration), injectively.

#![allow(clippy::unwrap_used)] // test code

use proptest::prelude::*;
use topology::builder::{GpuSpec, TopologyBuilder};
use topology::map::{map_gpus, EQUAL_PROPERTIES};
use topology::{CheckOptions, Topology};

/// One GPU: model, NUMA node (modulo the CPU count), two-way CPU link, hive label.
type GpuGene = (u8, u8, bool, Option<u8>);

fn machine(cpus: usize, genes: &[GpuGene]) -> Topology {
    let mut b = TopologyBuilder::new().cpus(cpus);
    for &(model, numa, two_way, _) in genes {
        let spec = match model % 4 {
            0 => GpuSpec::mi50(),
            1 => GpuSpec::mi100(),
            2 => GpuSpec::mi210(),
            _ => GpuSpec::mi250x_gcd(),
        };
        b = b.gpu(
            spec.numa(usize::from(numa) % cpus)
                .two_way_cpu_link(two_way)
                .caches(0),
        );
    }
    for label in 0..3u8 {
        let members: Vec<usize> = (0..genes.len())
            .filter(|&g| genes[g].3 == Some(label))
            .collect();
        if members.len() > 1 {
            b = b.hive(members);
        }
    }
    b.build()
}

fn case() -> impl Strategy<Value = (Topology, Vec<u32>, Vec<u32>)> {
    (1usize..=3, prop::collection::vec(gene(), 1..=10)).prop_flat_map(|(cpus, genes)| {
        let t = machine(cpus, &genes);
        let ids: Vec<u32> = t.nodes.iter().map(|n| n.id).collect();
        let n_gpus = genes.len();
        (
            Just(t),
            Just(ids).prop_shuffle(),
            prop::collection::hash_set(1u32..=0xffff, n_gpus)
                .prop_map(|s| s.into_iter().collect::<Vec<u32>>()),
        )
    })
}

fn gene() -> impl Strategy<Value = GpuGene> {
    any::<(u8, u8, bool, Option<u8>)>().prop_map(|(m, n, t, h)| (m, n, t, h.map(|h| h % 3)))
}

/// A machine, and a larger one: the same GPUs plus `extra`, enumerated in a shuffled order.
fn superset_case() -> impl Strategy<Value = (Topology, Topology, Vec<u32>)> {
    (
        1usize..=3,
        prop::collection::vec(gene(), 1..=8),
        prop::collection::vec(gene(), 1..=8),
    )
        .prop_flat_map(|(cpus, genes, extra)| {
            let src = machine(cpus, &genes);
            let all: Vec<GpuGene> = genes.iter().chain(&extra).copied().collect();
            let dst = machine(cpus, &all);
            let ids: Vec<u32> = dst.nodes.iter().map(|n| n.id).collect();
            (Just(src), Just(dst), Just(ids).prop_shuffle())
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn a_machine_always_maps_into_a_larger_one_that_holds_it(
        (src, dst, order) in superset_case()
    ) {
        let mut dst = dst.renumbered(&order);
        for (i, node) in dst.nodes.iter_mut().filter(|n| n.is_gpu()).enumerate() {
            node.gpu_id = 0x8000 + u32::try_from(i).unwrap();
        }
        let m = map_gpus(&src, &dst, &CheckOptions::default())
            .map_err(|e| TestCaseError::fail(e.to_string()))?;

        // Injective, and every other GPU is listed as unused.
        let mut targets: Vec<u32> = m.gpus.iter().map(|g| g.destination_gpu_id).collect();
        targets.extend(m.unused.iter().map(|u| u.gpu.gpu_id));
        targets.sort_unstable();
        let mut all: Vec<u32> = dst.gpus().map(|n| n.gpu_id).collect();
        all.sort_unstable();
        prop_assert_eq!(targets, all);
        prop_assert_eq!(m.gpus.len(), src.gpus().count());

        for g in &m.gpus {
            let (s, d) = (src.gpu(g.source_gpu_id).unwrap(), dst.gpu(g.destination_gpu_id).unwrap());
            for key in EQUAL_PROPERTIES {
                prop_assert_eq!(s.prop(key), d.prop(key), "{}", key);
            }
        }
        let dst_hives = dst.hives();
        for hive in src.hives() {
            let images: Vec<u32> = hive.iter().map(|g| m.destination_gpu(*g).unwrap()).collect();
            prop_assert!(
                dst_hives.iter().any(|h| images.iter().all(|g| h.contains(g))),
                "hive {:x?} -> {:x?}", hive, images
            );
        }
    }

    #[test]
    fn a_renumbered_machine_always_maps_and_keeps_properties_and_hives(
        (src, order, new_ids) in case()
    ) {
        let mut dst = src.renumbered(&order);
        for (node, id) in dst.nodes.iter_mut().filter(|n| n.is_gpu()).zip(&new_ids) {
            node.gpu_id = *id;
        }
        let m = map_gpus(&src, &dst, &CheckOptions::default())
            .map_err(|e| TestCaseError::fail(e.to_string()))?;

        // A bijection between the two sets of gpu_ids.
        let mut targets: Vec<u32> = m.gpus.iter().map(|g| g.destination_gpu_id).collect();
        targets.sort_unstable();
        let mut all: Vec<u32> = dst.gpus().map(|n| n.gpu_id).collect();
        all.sort_unstable();
        prop_assert_eq!(targets, all);
        prop_assert_eq!(m.gpus.len(), src.gpus().count());

        // Every equality property and the VRAM kind kept.
        for g in &m.gpus {
            let (s, d) = (src.gpu(g.source_gpu_id).unwrap(), dst.gpu(g.destination_gpu_id).unwrap());
            for key in EQUAL_PROPERTIES {
                prop_assert_eq!(s.prop(key), d.prop(key), "{}", key);
            }
            prop_assert_eq!(s.vram(), d.vram());
        }

        // Every source hive lands inside one destination hive.
        let dst_hives = dst.hives();
        for hive in src.hives() {
            let images: Vec<u32> = hive.iter().map(|g| m.destination_gpu(*g).unwrap()).collect();
            prop_assert!(
                dst_hives.iter().any(|h| images.iter().all(|g| h.contains(g))),
                "hive {:x?} -> {:x?}", hive, images
            );
        }
    }
}
