//! The remapping rules, as tables of source and destination machines.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use rstest::rstest;
use topology::builder::{GpuSpec, TopologyBuilder};
use topology::map::{map_gpus, MapError, Reason};
use topology::model::{keys, Topology};
use topology::{Check, CheckOptions};

// ---- machines ------------------------------------------------------------------------------

/// Two NUMA nodes, four MI100 on PCIe, two per NUMA node.
fn mi100x4() -> Topology {
    TopologyBuilder::new()
        .cpus(2)
        .gpus(2, &GpuSpec::mi100().numa(0))
        .gpus(2, &GpuSpec::mi100().numa(1))
        .build()
}

/// One NUMA node, four MI210 in one xGMI hive.
fn mi210_hive4() -> Topology {
    TopologyBuilder::new()
        .cpus(1)
        .gpus(4, &GpuSpec::mi210())
        .hive(0..4)
        .build()
}

/// Two NUMA nodes, eight MI250X GCDs in one hive, four per NUMA node.
fn mi250x_hive8() -> Topology {
    TopologyBuilder::new()
        .cpus(2)
        .gpus(4, &GpuSpec::mi250x_gcd().numa(0))
        .gpus(4, &GpuSpec::mi250x_gcd().numa(1))
        .hive(0..8)
        .build()
}

/// Two NUMA nodes, sixteen GCDs in four hives of four (GPUs 4h..4h+4), hives 0-1 on NUMA 0.
fn gcd16_four_hives() -> Topology {
    let mut b = TopologyBuilder::new()
        .cpus(2)
        .gpus(8, &GpuSpec::mi250x_gcd().numa(0).caches(0))
        .gpus(8, &GpuSpec::mi250x_gcd().numa(1).caches(0));
    for h in 0..4 {
        b = b.hive(4 * h..4 * h + 4);
    }
    b.build()
}

/// The same machine with its GPUs enumerated in `gpu_order` (indices of the GPUs in `t`),
/// CPU nodes first as on a real system.
fn gpus_enumerated(t: &Topology, gpu_order: &[usize]) -> Topology {
    let cpus: Vec<u32> = t.cpus().map(|n| n.id).collect();
    let gpus: Vec<u32> = t.gpus().map(|n| n.id).collect();
    let order: Vec<u32> = cpus
        .into_iter()
        .chain(gpu_order.iter().map(|&g| gpus[g]))
        .collect();
    t.renumbered(&order)
}

/// The same machine with other gpu_ids and render minors.
fn other_ids(mut t: Topology) -> Topology {
    for (i, node) in t.nodes.iter_mut().filter(|n| n.is_gpu()).enumerate() {
        node.gpu_id = 0xb000 + u32::try_from(i).unwrap() * 0x11;
        node.properties
            .set(keys::DRM_RENDER_MINOR, 200 + u64::try_from(i).unwrap());
    }
    t
}

fn gpu_ids(t: &Topology) -> Vec<u32> {
    t.gpus().map(|n| n.gpu_id).collect()
}

fn on(t: Topology, f: impl FnOnce(&mut Topology)) -> Topology {
    let mut t = t;
    f(&mut t);
    t
}

/// Sets `key` on every GPU.
fn every_gpu(t: Topology, key: &str, value: u64) -> Topology {
    on(t, |t| {
        for n in t.nodes.iter_mut().filter(|n| n.is_gpu()) {
            n.properties.set(key, value);
        }
    })
}

/// Asserts `m` maps hives into hives (all members of a source hive into one destination hive).
fn assert_hives_kept(src: &Topology, dst: &Topology, m: &topology::Mapping) {
    let dst_hives = dst.hives();
    for hive in src.hives() {
        let images: Vec<u32> = hive
            .iter()
            .map(|g| m.destination_gpu(*g).unwrap())
            .collect();
        assert!(
            dst_hives
                .iter()
                .any(|h| images.iter().all(|g| h.contains(g))),
            "source hive {hive:x?} went to {images:x?}, across destination hives {dst_hives:x?}"
        );
    }
}

fn options_without(checks: &[Check]) -> CheckOptions {
    checks
        .iter()
        .fold(CheckOptions::default(), |o, c| o.with(*c, false))
}

// ---- mappings that exist ---------------------------------------------------------------------

#[rstest]
#[case::mi100x4(mi100x4())]
#[case::hive_of_4(mi210_hive4())]
#[case::hive_of_8(mi250x_hive8())]
#[case::four_hives_of_4(gcd16_four_hives())]
fn identical_nodes_map_each_gpu_to_itself(#[case] t: Topology) {
    let m = map_gpus(&t, &t, &CheckOptions::default()).unwrap();
    assert!(m.is_identity(), "{m}");
    let cpus: Vec<(u32, u32)> = m.cpus.clone();
    assert!(cpus.iter().all(|(s, d)| s == d), "{cpus:?}");
}

#[test]
fn same_gpus_with_other_ids_and_render_minors_map_in_order() {
    let src = mi100x4();
    let dst = other_ids(mi100x4());
    let m = map_gpus(&src, &dst, &CheckOptions::default()).unwrap();
    let pairs: Vec<(u32, u32)> = m
        .gpus
        .iter()
        .map(|g| (g.source_gpu_id, g.destination_gpu_id))
        .collect();
    let expected: Vec<(u32, u32)> = gpu_ids(&src).into_iter().zip(gpu_ids(&dst)).collect();
    assert_eq!(pairs, expected);
    assert_eq!(m.gpus[0].destination_render_minor, 200);
}

#[test]
fn gpus_enumerated_in_another_order_keep_their_ids() {
    let src = mi100x4();
    let dst = gpus_enumerated(&src, &[3, 1, 0, 2]);
    let m = map_gpus(&src, &dst, &CheckOptions::default()).unwrap();
    assert!(m.is_identity(), "{m}");
    // The node ids follow the GPUs.
    let g = m.gpu(gpu_ids(&src)[3]).unwrap();
    assert_eq!((g.source_node_id, g.destination_node_id), (5, 2));
}

#[rstest]
#[case::hive_of_4_reversed(mi210_hive4(), vec![3, 2, 1, 0])]
#[case::hive_of_8_shuffled(mi250x_hive8(), vec![5, 2, 7, 0, 3, 6, 1, 4])]
#[case::four_hives_of_4_interleaved(
    gcd16_four_hives(),
    vec![12, 8, 4, 0, 13, 9, 5, 1, 14, 10, 6, 2, 15, 11, 7, 3]
)]
fn hives_map_whole_onto_hives_enumerated_differently(
    #[case] src: Topology,
    #[case] order: Vec<usize>,
) {
    let dst = other_ids(gpus_enumerated(&src, &order));
    let m = map_gpus(&src, &dst, &CheckOptions::default()).unwrap();
    assert_eq!(m.gpus.len(), src.gpus().count());
    assert_hives_kept(&src, &dst, &m);
}

#[test]
fn mixed_gpu_models_go_to_their_own_kind() {
    let src = TopologyBuilder::new()
        .cpus(1)
        .gpu(GpuSpec::mi100())
        .gpu(GpuSpec::mi50())
        .build();
    let dst = other_ids(gpus_enumerated(&src, &[1, 0]));
    let m = map_gpus(&src, &dst, &CheckOptions::default()).unwrap();
    for g in &m.gpus {
        let (s, d) = (
            src.gpu(g.source_gpu_id).unwrap(),
            dst.gpu(g.destination_gpu_id).unwrap(),
        );
        assert_eq!(s.name, d.name);
    }
}

#[rstest]
#[case::newer_firmware(keys::FW_VERSION, 66)]
#[case::newer_sdma_firmware(keys::SDMA_FW_VERSION, 19)]
#[case::more_caches(keys::CACHES_COUNT, 300)]
#[case::more_gws(keys::NUM_GWS, 128)]
#[case::more_peer_links(keys::IO_LINKS_COUNT, 9)]
fn a_more_capable_destination_is_accepted(#[case] key: &str, #[case] value: u64) {
    let src = mi100x4();
    let dst = every_gpu(mi100x4(), key, value);
    assert!(map_gpus(&src, &dst, &CheckOptions::default()).is_ok());
}

#[test]
fn gpus_in_a_hive_can_take_gpus_that_had_none() {
    let src = TopologyBuilder::new()
        .cpus(1)
        .gpus(4, &GpuSpec::mi250x_gcd())
        .build();
    let dst = other_ids(
        TopologyBuilder::new()
            .cpus(1)
            .gpus(4, &GpuSpec::mi250x_gcd())
            .hive(0..4)
            .build(),
    );
    let m = map_gpus(&src, &dst, &CheckOptions::default()).unwrap();
    assert_eq!(m.gpus.len(), 4);
}

#[test]
fn two_source_hives_may_share_one_larger_destination_hive() {
    let src = TopologyBuilder::new()
        .cpus(1)
        .gpus(8, &GpuSpec::mi250x_gcd())
        .hive(0..4)
        .hive(4..8)
        .build();
    let dst = other_ids(
        TopologyBuilder::new()
            .cpus(1)
            .gpus(8, &GpuSpec::mi250x_gcd())
            .hive(0..8)
            .build(),
    );
    let m = map_gpus(&src, &dst, &CheckOptions::default()).unwrap();
    assert_hives_kept(&src, &dst, &m);
}

#[test]
fn a_larger_destination_hive_takes_a_smaller_source_hive_and_its_neighbours() {
    // Source: a hive of 2 and two single GPUs. Destination: one hive of 4.
    let src = TopologyBuilder::new()
        .cpus(1)
        .gpus(4, &GpuSpec::mi210())
        .hive(2..4)
        .build();
    let dst = other_ids(mi210_hive4());
    let m = map_gpus(&src, &dst, &CheckOptions::default()).unwrap();
    assert_hives_kept(&src, &dst, &m);
}

#[test]
fn numa_placement_is_preserved() {
    let src = mi100x4();
    // Same GPUs, but the ones on NUMA 0 are enumerated last.
    let dst = other_ids(gpus_enumerated(&src, &[2, 3, 0, 1]));
    let m = map_gpus(&src, &dst, &CheckOptions::default()).unwrap();
    // GPUs that shared a CPU node still share one, and the CPU map is one to one.
    let src_gpus = gpu_ids(&src);
    let numa_of = |t: &Topology, gpu: u32| t.gpu(gpu).unwrap().io_links[0].node_to();
    for pair in [[src_gpus[0], src_gpus[1]], [src_gpus[2], src_gpus[3]]] {
        let [a, b] = pair.map(|g| numa_of(&dst, m.destination_gpu(g).unwrap()));
        assert_eq!(a, b);
    }
    let mut dst_cpus: Vec<u32> = m.cpus.iter().map(|&(_, d)| d).collect();
    dst_cpus.dedup();
    assert_eq!(dst_cpus.len(), 2);
    for g in &src_gpus {
        let d = m.destination_gpu(*g).unwrap();
        assert_eq!(
            m.destination_node(numa_of(&src, *g)),
            Some(numa_of(&dst, d))
        );
    }
}

// ---- mappings that do not exist ----------------------------------------------------------------

/// Three GPUs on NUMA 0 and one on NUMA 1 instead of two and two.
fn mi100x4_three_and_one() -> Topology {
    TopologyBuilder::new()
        .cpus(2)
        .gpus(3, &GpuSpec::mi100().numa(0))
        .gpus(1, &GpuSpec::mi100().numa(1))
        .build()
}

#[test]
fn numa_placement_violated_is_refused_unless_the_numa_check_is_off() {
    let src = mi100x4();
    let dst = mi100x4_three_and_one();
    let err = map_gpus(&src, &dst, &CheckOptions::default()).unwrap_err();
    assert!(matches!(err, MapError::NumaPlacement { .. }), "{err}");
    assert!(err.to_string().contains("KFD_NUMA_CHECK=0"), "{err}");
    assert!(map_gpus(&src, &dst, &options_without(&[Check::Numa])).is_ok());
}

#[rstest]
#[case::fewer_gpus_here(mi100x4(), TopologyBuilder::new().cpus(2).gpus(3, &GpuSpec::mi100()).build())]
#[case::no_gpus_here(mi100x4(), TopologyBuilder::new().cpus(2).build())]
fn fewer_gpus_here_always_fail(#[case] src: Topology, #[case] dst: Topology) {
    let err = map_gpus(&src, &dst, &CheckOptions::all(false)).unwrap_err();
    assert!(matches!(err, MapError::GpuCount { .. }), "{err}");
    assert!(err.to_string().contains("at least as many"), "{err}");
}

#[test]
fn older_firmware_fails_unless_kfd_fw_ver_check_is_off() {
    let src = mi100x4();
    let dst = every_gpu(mi100x4(), keys::FW_VERSION, 60);
    let err = map_gpus(&src, &dst, &CheckOptions::default()).unwrap_err();
    let MapError::NoCandidate { unplaced } = &err else {
        panic!("{err}");
    };
    assert_eq!(unplaced.len(), 4);
    for r in &unplaced[0].rejections {
        assert_eq!(r.lifted_by, [Check::FwVersion]);
        assert!(matches!(
            r.reason,
            Reason::CheckFailed {
                check: Check::FwVersion,
                source: 65,
                destination: 60,
                ..
            }
        ));
    }
    assert!(map_gpus(&src, &dst, &options_without(&[Check::FwVersion])).is_ok());
}

#[test]
fn the_explanation_names_the_gpu_the_property_and_the_variable() {
    let src = TopologyBuilder::new()
        .cpus(1)
        .gpu(GpuSpec::mi100().gpu_id(0x1111))
        .gpu(GpuSpec::mi100().gpu_id(0x2222))
        .build();
    let dst = on(src.clone(), |t| {
        t.gpu_mut(0x1111)
            .unwrap()
            .properties
            .set(keys::SDMA_FW_VERSION, 17);
        t.gpu_mut(0x2222)
            .unwrap()
            .properties
            .set(keys::DEVICE_ID, 0x740f);
    });
    let err = map_gpus(&src, &dst, &CheckOptions::default()).unwrap_err();
    insta::assert_snapshot!(err.to_string());
}

/// Destination variants that break one check each, with the check.
#[rstest]
#[case::fw_version(Check::FwVersion, every_gpu(mi100x4(), keys::FW_VERSION, 64))]
#[case::sdma_fw_version(Check::SdmaFwVersion, every_gpu(mi100x4(), keys::SDMA_FW_VERSION, 17))]
#[case::caches_count(Check::CachesCount, every_gpu(mi100x4(), keys::CACHES_COUNT, 3))]
#[case::num_gws(Check::NumGws, every_gpu(mi100x4(), keys::NUM_GWS, 32))]
#[case::vram_size(Check::VramSize, TopologyBuilder::new().cpus(2)
    .gpus(2, &GpuSpec::mi100().numa(0).vram(true, 16 << 30))
    .gpus(2, &GpuSpec::mi100().numa(1).vram(true, 16 << 30)).build())]
#[case::numa(Check::Numa, mi100x4_three_and_one())]
#[case::capability(Check::Capability, every_gpu(mi100x4(), keys::CAPABILITY, 0x0800_2280 | (1 << 22)))]
fn each_check_refuses_when_on_and_allows_when_off(
    #[case] check: Check,
    #[case] dst: Topology,
    #[values(true, false)] enabled: bool,
) {
    let src = mi100x4();
    let options = CheckOptions::default().with(check, enabled);
    let result = map_gpus(&src, &dst, &options);
    if enabled {
        let err = result.unwrap_err();
        assert!(
            err.to_string().contains(&format!("{}=0", check.env_var())),
            "{err}"
        );
    } else {
        assert!(result.is_ok(), "{}", result.unwrap_err());
    }
    // Only that check matters: with it off, all the others on still pass.
    assert!(map_gpus(&src, &dst, &CheckOptions::default().with(check, false)).is_ok());
}

#[test]
fn a_capability_upgrade_is_refused_too_because_capability_must_be_equal() {
    let src = mi100x4();
    let dst = every_gpu(mi100x4(), keys::CAPABILITY, u64::from(u32::MAX));
    assert!(map_gpus(&src, &dst, &CheckOptions::default()).is_err());
}

#[rstest]
#[case::simd_count(keys::SIMD_COUNT, 440)]
#[case::device_id(keys::DEVICE_ID, 0x740c)]
#[case::wave_front_size(keys::WAVE_FRONT_SIZE, 32)]
#[case::num_cp_queues(keys::NUM_CP_QUEUES, 32)]
#[case::num_sdma_xgmi_engines(keys::NUM_SDMA_XGMI_ENGINES, 3)]
fn an_equality_property_that_differs_fails_even_with_every_check_off(
    #[case] key: &str,
    #[case] value: u64,
) {
    let src = mi100x4();
    let dst = every_gpu(mi100x4(), key, value);
    let err = map_gpus(&src, &dst, &CheckOptions::all(false)).unwrap_err();
    let MapError::NoCandidate { unplaced } = &err else {
        panic!("{err}");
    };
    let r = &unplaced[0].rejections[0];
    assert!(
        matches!(r.reason, Reason::Differs { property, .. } if property == key),
        "{err}"
    );
    assert!(r.lifted_by.is_empty());
}

#[test]
fn mixed_models_that_do_not_match_up_are_contention() {
    let src = TopologyBuilder::new()
        .cpus(1)
        .gpus(2, &GpuSpec::mi100())
        .build();
    let dst = TopologyBuilder::new()
        .cpus(1)
        .gpu(GpuSpec::mi50())
        .gpu(GpuSpec::mi100())
        .build();
    let err = map_gpus(&src, &dst, &CheckOptions::default()).unwrap_err();
    let MapError::Contention {
        sources,
        destinations,
        ..
    } = &err
    else {
        panic!("{err}");
    };
    assert_eq!((sources.len(), destinations.len()), (2, 1));
    assert!(err.to_string().contains("device_id"), "{err}");
}

#[test]
fn a_source_hive_larger_than_any_destination_hive_does_not_fit() {
    let src = mi250x_hive8();
    let dst = TopologyBuilder::new()
        .cpus(2)
        .gpus(4, &GpuSpec::mi250x_gcd().numa(0))
        .gpus(4, &GpuSpec::mi250x_gcd().numa(1))
        .hive(0..4)
        .hive(4..8)
        .build();
    let err = map_gpus(&src, &dst, &CheckOptions::all(false)).unwrap_err();
    let MapError::NoCandidate { unplaced } = &err else {
        panic!("{err}");
    };
    assert!(matches!(
        unplaced[0].rejections[0].reason,
        Reason::HiveTooSmall {
            source: 8,
            destination: 4
        }
    ));
}

#[test]
fn two_source_hives_cannot_share_one_destination_hive_with_singles() {
    let src = TopologyBuilder::new()
        .cpus(1)
        .gpus(8, &GpuSpec::mi250x_gcd())
        .hive(0..4)
        .hive(4..8)
        .build();
    let dst = TopologyBuilder::new()
        .cpus(1)
        .gpus(8, &GpuSpec::mi250x_gcd())
        .hive(0..4)
        .build();
    let err = map_gpus(&src, &dst, &CheckOptions::default()).unwrap_err();
    assert!(matches!(err, MapError::Contention { .. }), "{err}");
}

#[test]
fn a_full_mesh_hive_does_not_fit_a_hive_with_a_link_missing() {
    let src = mi210_hive4();
    let dst = on(mi210_hive4(), |t| {
        // Drop the xGMI links between the first two GPUs (nodes 1 and 2).
        for (from, to) in [(1, 2), (2, 1)] {
            t.node_mut(from)
                .unwrap()
                .io_links
                .retain(|l| l.node_to() != to);
        }
    });
    assert_eq!(dst.hives().len(), 1);
    let err = map_gpus(&src, &dst, &CheckOptions::all(false)).unwrap_err();
    assert!(matches!(err, MapError::Contention { .. }), "{err}");
}

/// Two hives of three (triangles) against one hive of six wired as a ring: every GPU has two
/// xGMI links on both sides, but a triangle does not fit in a ring.
#[test]
fn hives_that_fit_gpu_by_gpu_but_not_as_a_whole_name_the_missing_link() {
    let src = TopologyBuilder::new()
        .cpus(1)
        .gpus(6, &GpuSpec::mi250x_gcd())
        .hive(0..3)
        .hive(3..6)
        .build();
    let mut ring = TopologyBuilder::new()
        .cpus(1)
        .gpus(6, &GpuSpec::mi250x_gcd());
    for g in 0..6 {
        ring = ring.xgmi(g, (g + 1) % 6);
    }
    let dst = other_ids(ring.build());
    assert_eq!(dst.hives(), vec![gpu_ids(&dst)]);
    let err = map_gpus(&src, &dst, &CheckOptions::default()).unwrap_err();
    let MapError::NoConsistentMapping { partial, stuck } = &err else {
        panic!("{err}");
    };
    assert_eq!(partial.len(), 1, "{err}");
    assert!(
        stuck
            .rejections
            .iter()
            .any(|r| matches!(r.reason, Reason::MissingXgmiLink { .. })),
        "{err}"
    );
    insta::assert_snapshot!(err.to_string());
}

#[test]
fn a_one_way_cpu_link_cannot_stand_for_a_two_way_one() {
    let src = mi100x4();
    let dst = TopologyBuilder::new()
        .cpus(2)
        .gpus(2, &GpuSpec::mi100().numa(0).two_way_cpu_link(false))
        .gpus(2, &GpuSpec::mi100().numa(1).two_way_cpu_link(false))
        .build();
    let err = map_gpus(&src, &dst, &CheckOptions::all(false)).unwrap_err();
    let MapError::NoCandidate { unplaced } = &err else {
        panic!("{err}");
    };
    assert!(
        matches!(
            unplaced[0].rejections[0].reason,
            Reason::NoMatchingCpuLink { two_way: true, .. }
        ),
        "{err}"
    );
    // The other way round is fine: a two-way link stands for a one-way one.
    assert!(map_gpus(&dst, &src, &CheckOptions::default()).is_ok());
}

#[test]
fn explanations_serialise_for_tools() {
    let err = map_gpus(
        &mi100x4(),
        &every_gpu(mi100x4(), keys::FW_VERSION, 1),
        &CheckOptions::default(),
    )
    .unwrap_err();
    let json = serde_json::to_value(&err).unwrap();
    assert_eq!(json["kind"], "no_candidate");
    assert_eq!(
        json["unplaced"][0]["rejections"][0]["lifted_by"][0],
        "FwVersion"
    );
}
