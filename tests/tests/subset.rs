//! Restoring onto a node with more GPUs than the image, end to end: the plugin engine driven as
//! criu drives it against the in-process simulator, the model workload verifying every byte,
//! queue and event on the GPUs the mapping chose.
//!
//! The restored process keeps its image's gpu_ids. As the 6.1 driver requires, its RESTORE lists
//! every GPU of the restoring process (one per-device record per GPU it may use), so a host
//! process on a bigger node also has the other GPUs, with no state, under ids the image does not
//! use; a container's device cgroup is what keeps them from it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use amdgpu_plugin::criu::Settings;
use harness::workload::{Manifest, Spec};
use harness::{self, SimNode};
use kfd_sim::preset::Preset;

fn spec() -> Spec {
    Spec {
        events: 3,
        ..Spec::new(15, vec![3 << 20, 64 << 10], vec![256 << 10])
    }
}

fn settings() -> Settings {
    tests::staged_settings(1 << 20, 2)
}

/// One MI250X: two GCDs in a hive on one NUMA node, with gpu_ids of its own.
fn mi250x2(ids: [u32; 2]) -> Preset {
    let mut p = Preset::mi250x8().with_name("mi250x2");
    p.gpus.truncate(2);
    p.numa.truncate(1);
    p.with_gpu_ids(&ids)
}

/// Checkpoints the workload running on every GPU of `preset`.
fn dump(preset: &Preset) -> (tempfile::TempDir, harness::ImageIds, Manifest) {
    let dir = tempfile::tempdir().unwrap();
    let (ids, manifest) =
        harness::checkpoint_new(preset, &spec(), dir.path(), &settings()).unwrap();
    (dir, ids, manifest)
}

/// The GPU ids of `preset` at these indices.
fn ids_at(preset: &Preset, indices: impl IntoIterator<Item = usize>) -> Vec<u32> {
    indices.into_iter().map(|i| preset.gpus[i].gpu_id).collect()
}

/// The GPUs the restore's mapping chose, in the image's order.
fn chosen_gpus(restored: &harness::RestoredTarget) -> Vec<u32> {
    restored
        .mapping
        .iter()
        .map(|m| m.destination_gpu_id)
        .collect()
}

/// The restored process's GPUs as its `/dev/kfd` names them (the user gpu ids; the apertures
/// report the actual ids, as the driver's).
fn process_gpus(restored: &harness::RestoredTarget) -> Vec<u32> {
    let machine = restored.process.machine();
    let mut ids: Vec<u32> = machine
        .process_gpus(restored.process.pid())
        .unwrap()
        .iter()
        .map(|&(user, _)| user)
        .collect();
    ids.sort_unstable();
    ids
}

/// 8 onto 16: an MI250x8 image restores onto the first of an MI250x16 node's two hives; the
/// other hive holds nothing.
#[test]
fn an_eight_gcd_image_restores_onto_one_hive_of_a_sixteen_gcd_node() {
    let small = Preset::mi250x8();
    let big = Preset::mi250x16();
    let (dir, ids, manifest) = dump(&small);
    let node = SimNode::new(&big).unwrap();
    let (restored, _) = harness::restore(&node, dir.path(), &ids, &settings()).unwrap();

    let report = restored.verify(&manifest).unwrap();
    assert_eq!(report.bytes, manifest.pattern_bytes());
    assert_eq!(report.queues, 8);
    assert_eq!(report.events, 3);

    let used = chosen_gpus(&restored);
    assert_eq!(used, ids_at(&big, 0..8), "the first hive, in order");
    for gpu in ids_at(&big, 8..16) {
        assert_eq!(node.machine.vram_used(gpu), Some(0), "GPU {gpu:#x}");
    }
    // The process knows its GPUs by the image's ids; the other hive's are there with no state.
    let mut expected = ids_at(&small, 0..8);
    expected.extend(ids_at(&big, 8..16));
    expected.sort_unstable();
    assert_eq!(process_gpus(&restored), expected);
}

/// 2 of 8: one MI250X's two GCDs restore onto two GCDs of an MI250x8 node that share a hive and
/// a NUMA node (GCDs 0 and 1), also when criu restores the render nodes before `/dev/kfd`
/// (they are opened on the GPUs the mapping chooses).
#[rstest::rstest]
fn two_gcds_restore_onto_a_pair_of_an_eight_gcd_node(#[values(false, true)] renders_first: bool) {
    let big = Preset::mi250x8();
    let (dir, mut ids, manifest) = dump(&mi250x2([0x1111, 0x2222]));
    ids.renders_first = renders_first;
    let node = SimNode::new(&big).unwrap();
    let (restored, _) = harness::restore(&node, dir.path(), &ids, &settings()).unwrap();
    restored.verify(&manifest).unwrap();
    let used = chosen_gpus(&restored);
    assert_eq!(used, ids_at(&big, 0..2));
    assert_eq!(big.gpus[0].numa, big.gpus[1].numa);
}

/// When a GPU left out has the gpu_id an image GPU had (that image GPU went elsewhere), it gets
/// another id, so the ids the process uses stay unambiguous.
#[test]
fn a_left_out_gpu_with_an_image_gpu_id_gets_another_id() {
    let mut big = Preset::mi250x8();
    let fw = big.gpus[0].fw_version.unwrap_or(78);
    big.gpus[0].fw_version = Some(fw.saturating_sub(10));
    let image = ids_at(&big, 0..2);
    let (dir, ids, manifest) = dump(&mi250x2([image[0], image[1]]));
    let node = SimNode::new(&big).unwrap();
    let (restored, _) = harness::restore(&node, dir.path(), &ids, &settings()).unwrap();
    restored.verify(&manifest).unwrap();

    // GCD 0 is too old, so the pair goes to the next two GCDs that share a NUMA node.
    let used = chosen_gpus(&restored);
    assert_eq!(used, ids_at(&big, 2..4));
    let gpus = process_gpus(&restored);
    assert_eq!(gpus.len(), 8, "{gpus:x?}");
    let mut distinct = gpus.clone();
    distinct.dedup();
    assert_eq!(distinct, gpus, "no id twice");
    for id in image.iter().chain(&ids_at(&big, 4..8)) {
        assert!(gpus.contains(id), "{id:#x} in {gpus:x?}");
    }
}

/// A process restored onto a bigger node checkpoints again (its image now lists every GPU it
/// has) and restores onto a node like that one.
#[test]
fn a_process_restored_onto_a_bigger_node_is_checkpointed_and_restored_again() {
    let big = Preset::mi250x8();
    let (dir, ids, manifest) = dump(&mi250x2([0x1111, 0x2222]));
    let second = SimNode::new(&big).unwrap();
    let (restored, _) = harness::restore(&second, dir.path(), &ids, &settings()).unwrap();
    restored.verify(&manifest).unwrap();

    let dir2 = tempfile::tempdir().unwrap();
    let (ids2, _) =
        harness::checkpoint_restored(&second, &restored, dir2.path(), &settings()).unwrap();
    let third = SimNode::new(&harness::remapped_variant(&big)).unwrap();
    let (again, _) = harness::restore(&third, dir2.path(), &ids2, &settings()).unwrap();
    again.verify(&manifest).unwrap();
    assert_eq!(again.mapping.len(), 8);
}

/// Fewer fitting GPUs than the image: a GCD too old in each hive of the 16-GCD node leaves no
/// hive for the image's hive of eight. The restore is refused before the driver restores
/// anything, with the GCDs and the variable named.
#[test]
fn too_few_fitting_gpus_refuse_the_restore_with_the_reason() {
    let (dir, ids, _) = dump(&Preset::mi250x8());
    let mut big = Preset::mi250x16();
    for i in [3, 12] {
        let fw = big.gpus[i].fw_version.unwrap_or(78);
        big.gpus[i].fw_version = Some(fw.saturating_sub(10));
    }
    let node = SimNode::new(&big).unwrap();
    let err = harness::restore(&node, dir.path(), &ids, &settings())
        .unwrap_err()
        .to_string();
    assert!(err.contains("xGMI hive of 8"), "{err}");
    assert!(err.contains("KFD_FW_VER_CHECK=0"), "{err}");
    for id in ids_at(&big, [3, 12]) {
        assert!(err.contains(&format!("{id:#06x}")), "names {id:#x}: {err}");
    }
    for gpu in ids_at(&big, 0..16) {
        assert_eq!(node.machine.vram_used(gpu), Some(0), "GPU {gpu:#x}");
    }

    let mut lenient = settings();
    lenient.checks.set(topology::Check::FwVersion, false);
    harness::restore(&node, dir.path(), &ids, &lenient).unwrap();
}

/// An SVM range keeps its access on the image's GPUs, and the GPUs the image did not have get
/// none: the restore adds their attributes to the range's record (the 6.1 driver reads one per
/// GPU of the restoring process).
#[test]
fn svm_ranges_keep_their_access_and_the_other_gpus_get_none() {
    use kfd_abi::kfd::SvmAttribute;
    use kfd_sys::{KFD_IOCTL_SVM_ATTR_ACCESS, KFD_IOCTL_SVM_ATTR_NO_ACCESS};

    let small = mi250x2([0x1111, 0x2222]);
    let src = SimNode::new(&small).unwrap();
    let target = harness::start_target(&src, &spec()).unwrap();
    // A page of this process's memory (the in-process simulator's user memory).
    let buffer = vec![0u8; 3 * 4096];
    let page = (buffer.as_ptr() as u64 + 4095) & !4095;
    let access = |gpu: u32| SvmAttribute {
        ty: KFD_IOCTL_SVM_ATTR_ACCESS,
        value: gpu,
    };
    target
        .workload
        .kfd()
        .svm_set_attr(page, 4096, &[access(0x1111)])
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (ids, _) = harness::checkpoint(&src, &target, dir.path(), &settings()).unwrap();
    let manifest = target.workload.manifest().clone();

    let big = Preset::mi250x8();
    let node = SimNode::new(&big).unwrap();
    let (restored, _) = harness::restore(&node, dir.path(), &ids, &settings()).unwrap();
    restored.verify(&manifest).unwrap();
    let spares = ids_at(&big, 2..8);
    let mut query: Vec<SvmAttribute> = [0x1111, 0x2222]
        .into_iter()
        .chain(spares.iter().copied())
        .map(access)
        .collect();
    restored.kfd.svm_get_attr(page, 4096, &mut query).unwrap();
    let types: Vec<u32> = query.iter().map(|a| a.ty).collect();
    let mut expected = vec![KFD_IOCTL_SVM_ATTR_ACCESS];
    expected.extend([KFD_IOCTL_SVM_ATTR_NO_ACCESS; 7]);
    assert_eq!(types, expected);
    drop(buffer);
}

/// The render minors of `node`'s GPUs at these indices.
fn minors_at(node: &SimNode, indices: impl IntoIterator<Item = usize>) -> Vec<u32> {
    let minors = node.machine.render_minors();
    indices.into_iter().map(|i| minors[i]).collect()
}

/// A container given GCDs 4 and 5 of an MI250x8 node (its device cgroup) is restored onto those
/// two, not onto the pair the node would offer a process without limits (GCDs 0 and 1): the
/// plugin reads which GPUs the restored task may use from what it can open. Its `/dev/kfd` has
/// only those two, so there are no spare GPUs to give records to.
#[rstest::rstest]
fn a_container_is_restored_onto_the_gpus_its_device_cgroup_allows(
    #[values(false, true)] renders_first: bool,
) {
    let big = Preset::mi250x8();
    let (dir, mut ids, manifest) = dump(&mi250x2([0x1111, 0x2222]));
    ids.renders_first = renders_first;
    let node = SimNode::new(&big).unwrap();
    let process = node.machine.spawn_process_as(ids.pid);
    process.set_device_cgroup(Some(&minors_at(&node, 4..6)));
    let (restored, _) =
        harness::restore_with(&node, &|p| p, process, dir.path(), &ids, &settings()).unwrap();
    restored.verify(&manifest).unwrap();
    let used = chosen_gpus(&restored);
    assert_eq!(used, ids_at(&big, 4..6));
    assert_eq!(process_gpus(&restored), vec![0x1111, 0x2222]);
    for gpu in ids_at(&big, (0..4).chain(6..8)) {
        assert_eq!(node.machine.vram_used(gpu), Some(0), "GPU {gpu:#x}");
    }
}

/// A container given fewer GPUs than its image had is refused with the reason, and nothing is
/// left on any GPU.
#[test]
fn a_container_given_too_few_gpus_is_refused() {
    let big = Preset::mi250x8();
    let (dir, ids, _) = dump(&mi250x2([0x1111, 0x2222]));
    let node = SimNode::new(&big).unwrap();
    let process = node.machine.spawn_process_as(ids.pid);
    process.set_device_cgroup(Some(&minors_at(&node, [6])));
    let err = harness::restore_with(&node, &|p| p, process, dir.path(), &ids, &settings())
        .unwrap_err()
        .to_string();
    assert!(err.contains("taken with 2 GPUs"), "{err}");
    assert!(err.contains("has only 1"), "{err}");
    for gpu in ids_at(&big, 0..8) {
        assert_eq!(node.machine.vram_used(gpu), Some(0), "GPU {gpu:#x}");
    }
}

/// A container given one GCD of an MI250X (its device cgroup allows renderD of GCD 1 only) has a
/// `/dev/kfd` record for that GCD alone, so its image has one GPU, although the node (criu's
/// view, which the dump reads) has two. It restores into a container given GCD 6 of an MI250x8
/// node, where the GPU has another id; the process keeps its image's id.
#[test]
fn a_container_given_one_gpu_is_checkpointed_with_one_and_restored_onto_another() {
    let small = mi250x2([0x1111, 0x2222]);
    let dir = tempfile::tempdir().unwrap();
    let src = SimNode::new(&small).unwrap();
    let allowed = minors_at(&src, [1]);
    let target = harness::start_target_in(&src, &spec(), Some(&allowed)).unwrap();
    let (ids, _) = harness::checkpoint(&src, &target, dir.path(), &settings()).unwrap();
    let manifest = target.workload.manifest().clone();

    let big = Preset::mi250x8();
    let node = SimNode::new(&big).unwrap();
    let process = node.machine.spawn_process_as(ids.pid);
    process.set_device_cgroup(Some(&minors_at(&node, [6])));
    let (restored, _) =
        harness::restore_with(&node, &|p| p, process, dir.path(), &ids, &settings()).unwrap();
    restored.verify(&manifest).unwrap();
    let used = chosen_gpus(&restored);
    assert_eq!(used, ids_at(&big, [6]));
    assert_eq!(process_gpus(&restored), vec![0x2222]);
}

/// The restored task of a container as crun restores it with its own cgroup manager on cgroup
/// v2: the container's `/dev` has only the render nodes it was given (others: `ENOENT`), but its
/// device cgroup is applied only after criu's restore, so its `/dev/kfd` has every GPU.
#[derive(Debug)]
struct UnconfinedContainer {
    dev: Vec<u32>,
}

impl<P: kfd_abi::Platform> tests::View<P> for UnconfinedContainer {
    type Device = P::Device;

    fn device(&self, inner: P::Device) -> P::Device {
        inner
    }

    fn open_render(
        &self,
        inner: &P,
        minor: u32,
    ) -> Result<kfd_abi::RenderNode<P::Device>, kfd_abi::IoctlError> {
        if self.dev.contains(&minor) {
            return inner.open_render(minor);
        }
        Err(kfd_abi::IoctlError::Open {
            path: format!("/dev/dri/renderD{minor}").into(),
            source: std::io::Error::from_raw_os_error(libc::ENOENT),
        })
    }
}

/// A container given one GPU of two, checkpointed with that one, is restored by a runtime that
/// applies its device cgroup only after criu's restore (crun with cgroupfs on cgroup v2): its
/// `/dev/kfd` has both GPUs, and the driver's RESTORE would need a render node of the other,
/// which the container was not given. The plugin refuses before any GPU state is created, names
/// the cause and the fix, and nothing is left on any GPU. The same image restores once the
/// cgroup is in place (the systemd cgroup manager's order).
#[rstest::rstest]
fn a_container_whose_device_cgroup_is_not_applied_yet_is_refused_with_the_cause(
    #[values(false, true)] renders_first: bool,
) {
    let small = mi250x2([0x1111, 0x2222]);
    let dir = tempfile::tempdir().unwrap();
    let src = SimNode::new(&small).unwrap();
    let allowed = minors_at(&src, [0]);
    let target = harness::start_target_in(&src, &spec(), Some(&allowed)).unwrap();
    let (mut ids, _) = harness::checkpoint(&src, &target, dir.path(), &settings()).unwrap();
    ids.renders_first = renders_first;
    let manifest = target.workload.manifest().clone();
    drop(target);

    let other = mi250x2([0x4242, 0x4343]);
    let node = SimNode::new(&other).unwrap();
    let given = minors_at(&node, [0]);
    let unconfined = |p| tests::Viewed {
        inner: p,
        view: UnconfinedContainer { dev: given.clone() },
    };
    let process = node.machine.spawn_process_as(ids.pid);
    let err = harness::restore_with(&node, &unconfined, process, dir.path(), &ids, &settings())
        .unwrap_err()
        .to_string();
    let other_minor = minors_at(&node, [1])[0];
    for needle in [
        format!(
            "/dev/kfd has GPU 0x4343 (renderD{other_minor}), which its container was not given"
        ),
        "device cgroup was not applied yet".to_owned(),
        "refused before any GPU state was created".to_owned(),
        "--runtime runc".to_owned(),
        "--cgroup-manager systemd".to_owned(),
        "manage-cgroups=ignore".to_owned(),
    ] {
        assert!(err.contains(&needle), "{needle:?} not in: {err}");
    }
    for gpu in [0x4242, 0x4343] {
        assert_eq!(node.machine.vram_used(gpu), Some(0), "GPU {gpu:#x}");
    }

    let process = node.machine.spawn_process_as(ids.pid);
    process.set_device_cgroup(Some(&given));
    let (restored, _) =
        harness::restore_with(&node, &unconfined, process, dir.path(), &ids, &settings()).unwrap();
    restored.verify(&manifest).unwrap();
    assert_eq!(process_gpus(&restored), vec![0x1111]);
    assert_eq!(node.machine.vram_used(0x4343), Some(0));
}
