//! Restoring onto a node with more GPUs than the image: which GPUs the mapping takes (hive
//! structure, NUMA placement, checks, the order of preference), why it leaves the others out,
//! and when it refuses.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions
#![allow(clippy::single_range_in_vec_init)] // hives are lists of GPU index ranges

use std::ops::Range;

use rstest::rstest;
use topology::builder::{GpuSpec, TopologyBuilder};
use topology::map::{map_gpus, MapError, Preference, Reason, Unused};
use topology::model::{keys, Topology};
use topology::{Check, CheckOptions, Mapping};

// ---- machines ------------------------------------------------------------------------------

/// MI250X GCDs on `cpus` CPU nodes, GCD `i` on CPU node `numa[i]`, in xGMI hives of GCD indices.
fn gcds(cpus: usize, numa: &[usize], hives: &[Range<usize>]) -> Topology {
    let mut b = TopologyBuilder::new().cpus(cpus);
    for &n in numa {
        b = b.gpu(GpuSpec::mi250x_gcd().numa(n));
    }
    for h in hives {
        b = b.hive(h.clone());
    }
    b.build()
}

/// The simulator's `mi250x8`: eight GCDs in one hive, two per CPU node, four CPU nodes.
fn mi250x8() -> Topology {
    gcds(4, &[0, 0, 1, 1, 2, 2, 3, 3], &[0..8])
}

/// Sixteen GCDs in two hives of eight, two per CPU node, eight CPU nodes: two `mi250x8`s.
fn mi250x16() -> Topology {
    let numa: Vec<usize> = (0..16).map(|i| i / 2).collect();
    gcds(8, &numa, &[0..8, 8..16])
}

/// One MI250X: its two GCDs in a hive, on `numa` (one or two CPU nodes).
fn gcd_pair(numa: [usize; 2]) -> Topology {
    gcds(numa[0].max(numa[1]) + 1, &numa, &[0..2])
}

/// The same machine with gpu_ids of its own (the builder numbers GPUs alike on every machine,
/// and a GPU with the image GPU's gpu_id is preferred).
fn here(mut t: Topology) -> Topology {
    for (i, node) in t.nodes.iter_mut().filter(|n| n.is_gpu()).enumerate() {
        node.gpu_id = 0xc000 + u32::try_from(i).unwrap();
    }
    t
}

/// The GCDs of `t` with these indices only, as a container allowed those render nodes sees it.
fn only(t: &Topology, indices: &[usize]) -> Topology {
    let ids: Vec<u32> = t.gpus().map(|n| n.gpu_id).collect();
    t.restricted_to(|n| indices.iter().any(|&i| ids[i] == n.gpu_id))
}

fn gpu_ids(t: &Topology) -> Vec<u32> {
    t.gpus().map(|n| n.gpu_id).collect()
}

/// The destination GPU indices (in `dst` order) the mapping uses, in source order.
fn chosen(m: &Mapping, dst: &Topology) -> Vec<usize> {
    let ids = gpu_ids(dst);
    m.gpus
        .iter()
        .map(|g| ids.iter().position(|&i| i == g.destination_gpu_id).unwrap())
        .collect()
}

/// The CPU node a GPU hangs off.
fn numa_of(t: &Topology, gpu_id: u32) -> u32 {
    t.resolved_links(t.gpu(gpu_id).unwrap())
        .iter()
        .find(|l| t.node(l.to).is_some_and(|n| !n.is_gpu()))
        .unwrap()
        .to
}

fn with_numa(numa: bool) -> CheckOptions {
    CheckOptions::default().with(Check::Numa, numa)
}

fn set_on(t: &mut Topology, index: usize, key: &str, value: u64) {
    let id = gpu_ids(t)[index];
    t.gpu_mut(id).unwrap().properties.set(key, value);
}

fn assert_in_one_hive(m: &Mapping, dst: &Topology) {
    let used: Vec<u32> = m.gpus.iter().map(|g| g.destination_gpu_id).collect();
    assert!(
        dst.hives()
            .iter()
            .any(|h| used.iter().all(|g| h.contains(g))),
        "{used:x?} are not in one hive of {:x?}",
        dst.hives()
    );
}

// ---- which GPUs ------------------------------------------------------------------------------

/// 2 of 8: an MI250X's two GCDs onto an MI250x8 node stay one xGMI pair on one CPU node, on the
/// lowest-numbered GCDs; the other six are left out, each with why.
#[rstest]
fn two_of_eight_keep_their_hive_and_their_numa_node(#[values(true, false)] numa: bool) {
    let src = gcd_pair([0, 0]);
    let dst = here(mi250x8());
    let m = map_gpus(&src, &dst, &with_numa(numa)).unwrap();
    assert_eq!(chosen(&m, &dst), [0, 1]);
    assert_in_one_hive(&m, &dst);
    let [a, b] = [0, 1].map(|i| numa_of(&dst, m.gpus[i].destination_gpu_id));
    assert_eq!(a, b, "{m}");
    assert_eq!(m.unused.len(), 6);
    for u in &m.unused {
        assert!(matches!(u.why, Unused::NotChosen { .. }), "{u}");
    }
}

/// A pair that spanned two CPU nodes spans two here too, with the NUMA check on (a rule) and
/// off (a preference).
#[rstest]
fn a_pair_across_numa_nodes_stays_across(#[values(true, false)] numa: bool) {
    let src = gcd_pair([0, 1]);
    let dst = here(mi250x8());
    let m = map_gpus(&src, &dst, &with_numa(numa)).unwrap();
    assert_eq!(chosen(&m, &dst), [0, 2], "{m}");
    let [a, b] = [0, 1].map(|i| numa_of(&dst, m.gpus[i].destination_gpu_id));
    assert_ne!(a, b);
    let because = |i: usize| {
        let u = m
            .unused
            .iter()
            .find(|u| u.gpu.gpu_id == gpu_ids(&dst)[i])
            .unwrap();
        let Unused::NotChosen { because, .. } = &u.why else {
            panic!("{u}");
        };
        because.clone()
    };
    // GCD 1 would do as well as GCD 0 (it is on CPU node 0 too).
    assert_eq!(because(1), Preference::NodeOrder);
    // GCD 3 shares GCD 2's CPU node, where the image's other GPU went.
    if numa {
        assert!(
            matches!(
                because(3),
                Preference::Placement {
                    reason: Reason::NumaConflict { .. }
                }
            ),
            "{m}"
        );
    } else {
        assert_eq!(because(3), Preference::NumaPlacement, "{m}");
    }
}

/// When the only free GCDs sit on the wrong CPU nodes, `KFD_NUMA_CHECK` decides.
#[rstest]
#[case::pair_on_one_node_onto_two(gcd_pair([0, 0]), &[0, 2])]
#[case::pair_on_two_nodes_onto_one(gcd_pair([0, 1]), &[0, 1])]
#[case::pair_on_two_nodes_onto_one_of_many(gcd_pair([0, 1]), &[2, 3])]
fn the_numa_check_decides_when_the_free_gpus_sit_elsewhere(
    #[case] src: Topology,
    #[case] free: &[usize],
) {
    let dst = only(&here(mi250x8()), free);
    let err = map_gpus(&src, &dst, &with_numa(true)).unwrap_err();
    assert!(matches!(err, MapError::NumaPlacement { .. }), "{err}");
    assert!(err.to_string().contains("KFD_NUMA_CHECK=0"), "{err}");
    let m = map_gpus(&src, &dst, &with_numa(false)).unwrap();
    assert_eq!(m.gpus.len(), 2);
}

/// The GCDs a container may use are the only candidates: a pair on one CPU node takes the two
/// visible GCDs that share one, whatever their node ids.
#[test]
fn a_container_view_offers_only_its_gpus() {
    let src = gcd_pair([0, 0]);
    let dst = only(&here(mi250x8()), &[1, 2, 3]);
    assert_eq!(dst.hives().len(), 1, "the visible GCDs are still one hive");
    let m = map_gpus(&src, &dst, &CheckOptions::default()).unwrap();
    // Visible: GCD 1 (CPU node 0), GCDs 2 and 3 (CPU node 1).
    let ids = gpu_ids(&here(mi250x8()));
    let used: Vec<u32> = m.gpus.iter().map(|g| g.destination_gpu_id).collect();
    assert_eq!(used, [ids[2], ids[3]], "{m}");
    assert_eq!(m.unused.len(), 1);
    assert_eq!(m.unused[0].gpu.gpu_id, ids[1]);
}

/// "Same hive structure": a hive of two takes a hive of two before it splits a larger one,
/// and a GPU without xGMI leaves hive GPUs alone.
#[rstest]
#[case::pair_prefers_the_pair(gcd_pair([0, 0]), &[2, 3])]
#[case::single_prefers_the_single(gcds(1, &[0], &[]), &[4])]
fn hive_sizes_are_matched_before_node_order(#[case] src: Topology, #[case] expected: &[usize]) {
    // A hive of 3 (GCDs 0, 1, 5) first, then a hive of 2 (GCDs 2, 3) and a single GCD (4).
    let dst = here(
        TopologyBuilder::new()
            .cpus(1)
            .gpus(6, &GpuSpec::mi250x_gcd())
            .hive([0, 1, 5])
            .hive(2..4)
            .build(),
    );
    let m = map_gpus(&src, &dst, &CheckOptions::default()).unwrap();
    assert_eq!(chosen(&m, &dst), expected, "{m}");
    let skipped = m
        .unused
        .iter()
        .find(|u| u.gpu.gpu_id == gpu_ids(&dst)[0])
        .unwrap();
    assert!(
        matches!(
            &skipped.why,
            Unused::NotChosen {
                because: Preference::HiveSize { this: 3, .. },
                ..
            }
        ),
        "{skipped}"
    );
}

/// The GPU with the image GPU's own gpu_id first (the node it came from), then the one whose
/// checked properties are all equal, then the lowest node id.
#[test]
fn same_gpu_id_then_closest_properties_then_lowest_node() {
    let dst = TopologyBuilder::new()
        .cpus(1)
        .gpu(GpuSpec::mi100().gpu_id(0x1111).prop(keys::FW_VERSION, 70))
        .gpu(GpuSpec::mi100().gpu_id(0x2222))
        .gpu(GpuSpec::mi100().gpu_id(0x3333))
        .gpu(GpuSpec::mi100().gpu_id(0x4444))
        .build();
    let one = |id: u32| {
        TopologyBuilder::new()
            .cpus(1)
            .gpu(GpuSpec::mi100().gpu_id(id))
            .build()
    };
    let pick = |src: &Topology| map_gpus(src, &dst, &CheckOptions::default()).unwrap();

    let m = pick(&one(0x4444));
    assert_eq!(m.gpus[0].destination_gpu_id, 0x4444);
    assert!(m.unused.iter().all(|u| matches!(
        u.why,
        Unused::NotChosen {
            because: Preference::SameGpuId,
            ..
        }
    )));

    // fw_version 65 in the image: 0x1111's newer firmware passes the check but is not as close.
    let m = pick(&one(0x9999));
    assert_eq!(m.gpus[0].destination_gpu_id, 0x2222);
    let why: Vec<&Unused> = m.unused.iter().map(|u| &u.why).collect();
    assert!(
        matches!(why[0], Unused::NotChosen { because: Preference::Properties { differing }, .. }
            if differing == &[keys::FW_VERSION]),
        "{m}"
    );
    assert!(matches!(
        why[1],
        Unused::NotChosen {
            because: Preference::NodeOrder,
            ..
        }
    ));
}

/// A GPU that can take none of the image's GPUs is left out with the reason and the variable.
#[test]
fn a_gpu_that_fits_nothing_says_why() {
    let src = gcd_pair([0, 0]);
    let mut dst = here(mi250x8());
    set_on(&mut dst, 0, keys::FW_VERSION, 10);
    let m = map_gpus(&src, &dst, &CheckOptions::default()).unwrap();
    // GCD 0 is out, so its CPU-node neighbour GCD 1 has no partner there: GCDs 2 and 3.
    assert_eq!(chosen(&m, &dst), [2, 3], "{m}");
    let Unused::Unfit {
        reason, lifted_by, ..
    } = &m.unused[0].why
    else {
        panic!("{m}");
    };
    assert!(matches!(
        reason,
        Reason::CheckFailed {
            check: Check::FwVersion,
            ..
        }
    ));
    assert_eq!(lifted_by, &[Check::FwVersion]);
    insta::assert_snapshot!(m.to_string());
}

/// 8 onto 16: an MI250x8 image onto two hives of eight takes one whole hive, the first; with
/// one GCD of the first hive too old, the second.
#[test]
fn eight_in_one_hive_onto_sixteen_in_two_hives() {
    let src = mi250x8();
    let dst = here(mi250x16());
    let m = map_gpus(&src, &dst, &CheckOptions::default()).unwrap();
    assert_eq!(chosen(&m, &dst), (0..8).collect::<Vec<_>>());
    assert_in_one_hive(&m, &dst);
    assert_eq!(m.unused.len(), 8);
    for u in &m.unused {
        assert!(
            matches!(
                &u.why,
                Unused::NotChosen {
                    because: Preference::Placement {
                        reason: Reason::MissingXgmiLink { .. }
                    },
                    ..
                }
            ),
            "{u}"
        );
    }

    let mut older = here(mi250x16());
    set_on(&mut older, 3, keys::FW_VERSION, 10);
    let m = map_gpus(&src, &older, &CheckOptions::default()).unwrap();
    assert_eq!(chosen(&m, &older), (8..16).collect::<Vec<_>>());
    assert!(map_gpus(
        &src,
        &older,
        &CheckOptions::default().with(Check::FwVersion, false)
    )
    .is_ok_and(|m| chosen(&m, &older) == (0..8).collect::<Vec<_>>()));
}

// ---- refusals ------------------------------------------------------------------------------

/// Fewer fitting GPUs than the image: one too-old GCD in each hive of eight leaves no hive
/// that can take the image's hive of eight; the refusal names the old GCDs and the variable.
#[test]
fn a_hive_too_few_fitting_gpus_is_refused_with_the_gpu_and_the_reason() {
    let src = mi250x8();
    let mut dst = here(mi250x16());
    set_on(&mut dst, 3, keys::FW_VERSION, 10);
    set_on(&mut dst, 12, keys::FW_VERSION, 10);
    let err = map_gpus(&src, &dst, &CheckOptions::default()).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("KFD_FW_VER_CHECK=0"), "{text}");
    for i in [3, 12] {
        assert!(
            text.contains(&format!("{:#06x}", gpu_ids(&dst)[i])),
            "names GCD {i}: {text}"
        );
    }
    insta::assert_snapshot!(text);
}

/// More GPUs, but not enough of the image's kind: the refusal says which image GPUs compete for
/// which local ones, and why the others do not qualify.
#[test]
fn more_gpus_of_another_kind_are_contention() {
    let src = TopologyBuilder::new()
        .cpus(1)
        .gpus(2, &GpuSpec::mi100())
        .build();
    let dst = here(
        TopologyBuilder::new()
            .cpus(1)
            .gpu(GpuSpec::mi100())
            .gpus(3, &GpuSpec::mi50())
            .build(),
    );
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
fn fewer_gpus_than_the_image_is_a_count_error() {
    let err = map_gpus(&mi250x16(), &here(mi250x8()), &CheckOptions::all(false)).unwrap_err();
    assert!(
        matches!(
            err,
            MapError::GpuCount {
                image_gpus: 16,
                local_gpus: 8
            }
        ),
        "{err}"
    );
}

#[test]
fn the_same_inputs_give_the_same_choice() {
    let src = gcd_pair([0, 1]);
    let dst = here(mi250x16());
    let first = map_gpus(&src, &dst, &with_numa(false)).unwrap();
    for _ in 0..3 {
        assert_eq!(map_gpus(&src, &dst, &with_numa(false)).unwrap(), first);
    }
}
