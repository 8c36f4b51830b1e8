//! What the builder adds as the 6.1 driver adds it: caches per CU group, xGMI bandwidths, and
//! the indirect p2p links between a GPU and the other NUMA nodes' CPUs.

#![allow(clippy::unwrap_used)] // tests panic on failure

use rstest::rstest;
use topology::builder::{GpuSpec, TopologyBuilder};
use topology::caches::CuLayout;
use topology::model::{keys, link_flags};
use topology::{LinkType, Node, Topology};

fn one(spec: GpuSpec) -> Topology {
    TopologyBuilder::new().cpus(1).gpu(spec).build()
}

fn count_of(node: &Node, level: u64, cache_type: u64) -> usize {
    node.caches
        .iter()
        .filter(|c| {
            c.properties.get("level") == Some(level) && c.properties.get("type") == Some(cache_type)
        })
        .count()
}

/// Per model: active CUs of the CU slots, and the caches 6.1 lists for them: one TCP L1 per
/// active CU, one scalar instruction and one scalar data L1 per SQC group with an active CU
/// (groups of 3 slots on Vega 20 / Arcturus, 2 on Aldebaran, per array), one L2.
#[rstest]
#[case::mi50(GpuSpec::mi50(), 60, 64, 4 * 6, 109)]
#[case::mi100(GpuSpec::mi100(), 120, 128, 8 * 6, 217)]
#[case::mi210(GpuSpec::mi210(), 104, 112, 8 * 7, 217)]
#[case::mi250x_gcd(GpuSpec::mi250x_gcd(), 110, 112, 8 * 7, 223)]
fn caches_are_listed_per_cu_group(
    #[case] spec: GpuSpec,
    #[case] active: u32,
    #[case] slots: u32,
    #[case] sqc_groups: usize,
    #[case] total: usize,
) {
    let t = one(spec);
    let gpu = t.gpus().next().unwrap();
    let layout = CuLayout::of(&gpu.properties);
    assert_eq!((layout.active, layout.slots()), (active, slots));
    assert_eq!(count_of(gpu, 1, 1 | 8), active as usize + sqc_groups);
    assert_eq!(count_of(gpu, 1, 2 | 8), sqc_groups);
    assert_eq!(count_of(gpu, 2, 1 | 8), 1);
    assert_eq!(gpu.caches.len(), total);
    assert_eq!(gpu.prop(keys::CACHES_COUNT), total as u64);
    // Every entry names an active CU of this GPU and maps 32 bytes of siblings starting at it.
    let base = gpu.prop(keys::SIMD_ID_BASE);
    for c in &gpu.caches {
        let id = c.properties.get_or_zero("processor_id_low") - base;
        let (array, slot) = (
            id / u64::from(layout.slots_per_array),
            id % u64::from(layout.slots_per_array),
        );
        let se = u32::try_from(array).unwrap() / layout.arrays_per_engine;
        let sh = u32::try_from(array).unwrap() % layout.arrays_per_engine;
        assert_ne!(layout.bitmap(se, sh) & (1 << slot), 0, "{c:?}");
        let map = c.sibling_map.as_ref().unwrap();
        assert_eq!((map.len(), map[0]), (256, 1));
    }
    // CPU nodes list none (6.1's virtual CRAT for CPUs has no caches).
    assert!(t
        .cpus()
        .all(|n| n.caches.is_empty() && n.prop(keys::CACHES_COUNT) == 0));
}

#[test]
fn the_l2_maps_every_array_in_the_drivers_order() {
    let t = one(GpuSpec::mi250x_gcd());
    let gpu = t.gpus().next().unwrap();
    let l2 = gpu.caches.last().unwrap();
    assert_eq!(l2.properties.get("size"), Some(8192));
    let map = l2.sibling_map.as_ref().unwrap();
    let word = |i: usize| -> u32 {
        map[i * 32..(i + 1) * 32]
            .iter()
            .enumerate()
            .map(|(b, &v)| u32::from(v) << b)
            .sum()
    };
    // Engines 0 and 4 lost slot 7. The map holds engine 0 twice, then engines 1..6: the
    // driver reads each array's mask one step late, so engine 7 is left out.
    let harvested = 0x3fff & !(1 << 7);
    assert_eq!((word(0), word(1), word(2)), (harvested, harvested, 0x3fff));
    assert_eq!((word(4), word(5), word(7)), (0x3fff, harvested, 0x3fff));
}

#[test]
fn simd_ids_of_the_next_gpu_follow_all_cu_slots() {
    let t = TopologyBuilder::new()
        .cpus(1)
        .gpus(2, &GpuSpec::mi100())
        .build();
    let bases: Vec<u64> = t.gpus().map(|n| n.prop(keys::SIMD_ID_BASE)).collect();
    assert_eq!(bases, [0x8000_1000, 0x8000_1000 + 128]);
}

#[test]
fn aldebaran_xgmi_links_report_the_link_count_times_50_gbs() {
    let t = TopologyBuilder::new()
        .cpus(1)
        .gpus(3, &GpuSpec::mi250x_gcd())
        .hive([0, 1, 2])
        .xgmi_links(0, 1, 4)
        .build();
    let bw = |from: usize, to: usize| {
        let gpus: Vec<&Node> = t.gpus().collect();
        let l = gpus[from]
            .io_links
            .iter()
            .find(|l| l.node_to() == gpus[to].id)
            .unwrap();
        assert_eq!((l.link_type(), l.weight()), (LinkType::Xgmi, 15));
        (
            l.properties.get_or_zero("min_bandwidth"),
            l.properties.get_or_zero("max_bandwidth"),
        )
    };
    assert_eq!(bw(0, 1), (50_000, 200_000));
    assert_eq!(bw(1, 0), (50_000, 200_000));
    assert_eq!(bw(0, 2), (50_000, 50_000));
}

#[test]
fn older_chips_report_no_xgmi_bandwidth() {
    let t = TopologyBuilder::new()
        .cpus(1)
        .gpus(2, &GpuSpec::mi100())
        .hive([0, 1])
        .build();
    for gpu in t.gpus() {
        let l = &gpu.io_links[1];
        assert_eq!(l.link_type(), LinkType::Xgmi);
        assert_eq!(l.properties.get("max_bandwidth"), Some(0));
        assert_eq!(l.properties.get("min_bandwidth"), Some(0));
    }
}

#[test]
fn gpus_reach_the_other_numa_nodes_cpus_through_p2p_links() {
    let t = TopologyBuilder::new()
        .cpus(2)
        .gpu(GpuSpec::mi100().numa(0))
        .gpu(GpuSpec::mi100().numa(1))
        .gpu(GpuSpec::mi100().numa(1).vram(false, 32 << 30))
        .build();
    let (gpu0, cpu1) = (t.node(2).unwrap(), t.node(1).unwrap());
    // GPU 0 -> CPU 1 first, then the GPU peers.
    let first = &gpu0.p2p_links[0];
    assert_eq!((first.node_to(), first.weight()), (1, 20 + 21));
    assert_eq!(first.properties.get("flags"), Some(link_flags::ENABLED));
    assert_eq!(first.properties.get("max_bandwidth"), Some(0));
    assert_eq!(
        gpu0.prop(keys::P2P_LINKS_COUNT),
        gpu0.p2p_links.len() as u64
    );
    // CPU 1 -> GPU 0 back (large BAR), none to the small-BAR GPU; its own GPUs are io_links.
    let to: Vec<u32> = cpu1.p2p_links.iter().map(topology::Link::node_to).collect();
    assert_eq!(to, [2]);
    assert_eq!(
        cpu1.p2p_links[0].properties.get("flags"),
        Some(link_flags::ENABLED | link_flags::NON_COHERENT)
    );
    assert_eq!(cpu1.prop(keys::P2P_LINKS_COUNT), 1);
    // The small-BAR GPU still links out to CPU 0.
    assert_eq!(t.node(4).unwrap().p2p_links[0].node_to(), 0);
    // One NUMA node: no indirect links.
    let single = one(GpuSpec::mi100());
    assert!(single.nodes.iter().all(|n| n.p2p_links.is_empty()));
}
