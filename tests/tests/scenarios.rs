//! The plugin engine driven as criu drives it, against the in-process simulator: dump through
//! DUMP_EXT_FILE, restore through RESTORE_EXT_FILE in a fresh process and RESUME_DEVICES_LATE,
//! then the model workload checks every byte, queue and event.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use amdgpu_plugin::copy::Staging;
use amdgpu_plugin::criu::Settings;
use amdgpu_plugin::hooks::{CriuHooks, Stage};
use harness::workload::Spec;
use harness::{self, remapped_variant, SimNode};
use kfd_abi::{DeviceKind, Platform};
use kfd_sim::preset::Preset;
use rstest::rstest;
use std::os::fd::AsFd;
use topology::options::Check;

/// A small workload: a buffer larger than one staging buffer, small ones, GTT, queues, events.
fn small_spec() -> Spec {
    Spec {
        events: 3,
        ..Spec::new(42, vec![3 << 20, 64 << 10, 4 << 10], vec![256 << 10])
    }
}

/// Settings with 1 MiB staging buffers, so that BOs span several buffers.
fn settings() -> Settings {
    tests::staged_settings(1 << 20, 3)
}

fn round_trip(
    source: &Preset,
    destination: &Preset,
    spec: &Spec,
    settings: &Settings,
) -> harness::RestoredTarget {
    let dir = tempfile::tempdir().unwrap();
    let src = SimNode::new(source).unwrap();
    let target = harness::start_target(&src, spec).unwrap();
    let manifest = target.workload.manifest().clone();
    settings.progress.reset();
    let (ids, _) = harness::checkpoint(&src, &target, dir.path(), settings).unwrap();
    assert_eq!(
        src.machine.queues_paused(target.process.pid()),
        Some(false),
        "the dumped process runs on"
    );
    assert_eq!(
        settings.progress.get(),
        manifest.buffer_bytes(),
        "progress counts the bytes dumped"
    );
    settings.progress.reset();

    let dst = SimNode::new(destination).unwrap();
    let (restored, _) = harness::restore(&dst, dir.path(), &ids, settings).unwrap();
    assert_eq!(
        settings.progress.get(),
        manifest.buffer_bytes(),
        "progress counts the bytes restored"
    );
    let report = restored.verify(&manifest).unwrap();
    assert_eq!(report.bytes, manifest.pattern_bytes());
    assert_eq!(report.queues, spec.queues as usize * source.gpus.len());
    assert_eq!(report.events, spec.events as usize);
    restored
}

#[rstest]
#[case::single_gpu("mi50x1")]
#[case::two_gpus("mi210x2")]
#[case::four_gpus_two_numa_nodes("mi100x4")]
#[case::eight_gcds_in_one_hive("mi250x8")]
fn restores_onto_the_same_node(#[case] preset: &str) {
    let p = Preset::by_name(preset).unwrap();
    let restored = round_trip(&p, &p, &small_spec(), &settings());
    assert!(restored
        .mapping
        .iter()
        .all(|m| m.source_gpu_id == m.destination_gpu_id));
}

#[rstest]
#[case::two_gpus("mi210x2")]
#[case::four_gpus("mi100x4")]
#[case::eight_gcds_in_one_hive("mi250x8")]
fn restores_onto_other_gpu_ids(#[case] preset: &str) {
    let p = Preset::by_name(preset).unwrap();
    let restored = round_trip(&p, &remapped_variant(&p), &small_spec(), &settings());
    assert!(restored
        .mapping
        .iter()
        .all(|m| m.source_gpu_id != m.destination_gpu_id));
}

#[test]
fn restores_onto_gpu_ids_enumerated_in_another_order() {
    let p = Preset::by_name("mi100x4").unwrap();
    let mut ids: Vec<u32> = p.gpus.iter().map(|g| g.gpu_id).collect();
    ids.reverse();
    let permuted = p.clone().with_gpu_ids(&ids);
    round_trip(&p, &permuted, &small_spec(), &settings());
}

#[test]
fn bos_much_larger_than_the_staging_buffers() {
    let p = Preset::by_name("mi210x2").unwrap();
    let spec = Spec {
        vram: vec![24 << 20],
        gtt: vec![5 << 20],
        ..small_spec()
    };
    let mut s = settings();
    s.staging = Staging {
        buffer_size: 256 << 10,
        buffers: 2,
    };
    round_trip(&p, &p, &spec, &s);
}

#[test]
fn pages_without_checksums_restore_like_upstream_images() {
    let p = Preset::by_name("mi210x2").unwrap();
    let s = Settings {
        checksums: false,
        ..settings()
    };
    round_trip(&p, &remapped_variant(&p), &small_spec(), &s);
}

fn dump_only(
    preset: &Preset,
    settings: &Settings,
) -> (
    tempfile::TempDir,
    harness::ImageIds,
    harness::workload::Manifest,
) {
    let dir = tempfile::tempdir().unwrap();
    let (ids, manifest) =
        harness::checkpoint_new(preset, &small_spec(), dir.path(), settings).unwrap();
    (dir, ids, manifest)
}

#[test]
fn too_few_gpus_is_refused_with_the_reason() {
    let (dir, ids, _) = dump_only(&Preset::by_name("mi210x2").unwrap(), &settings());
    let dst = SimNode::new(&Preset::by_name("mi50x1").unwrap()).unwrap();
    let err = harness::restore(&dst, dir.path(), &ids, &settings())
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot be mapped"), "{err}");
    assert!(
        err.contains("2") && err.contains("1"),
        "names both GPU counts: {err}"
    );
}

#[test]
fn older_firmware_is_refused_until_its_check_is_turned_off() {
    let p = Preset::by_name("mi210x2").unwrap();
    let fw = p.gpus[0].fw_version.unwrap_or(78);
    let (dir, ids, manifest) = dump_only(&p.clone().with_fw_version(fw + 10), &settings());
    let older = SimNode::new(&p.clone().with_fw_version(fw)).unwrap();
    let err = harness::restore(&older, dir.path(), &ids, &settings())
        .unwrap_err()
        .to_string();
    assert!(err.contains("KFD_FW_VER_CHECK"), "{err}");

    let mut lenient = settings();
    lenient.checks.set(Check::FwVersion, false);
    let (restored, _) = harness::restore(&older, dir.path(), &ids, &lenient).unwrap();
    restored.verify(&manifest).unwrap();
}

#[test]
fn a_restored_process_is_checkpointed_and_restored_again() {
    let p = Preset::by_name("mi210x2").unwrap();
    let (dir, ids, manifest) = dump_only(&p, &settings());
    let second = SimNode::new(&remapped_variant(&p)).unwrap();
    let (restored, _) = harness::restore(&second, dir.path(), &ids, &settings()).unwrap();
    restored.verify(&manifest).unwrap();

    // Dump the restored process, which uses its old gpu ids on other GPUs, and restore it back.
    let dir2 = tempfile::tempdir().unwrap();
    let (ids2, _) =
        harness::checkpoint_restored(&second, &restored, dir2.path(), &settings()).unwrap();
    let third = SimNode::new(&p).unwrap();
    let (again, _) = harness::restore(&third, dir2.path(), &ids2, &settings()).unwrap();
    again.verify(&manifest).unwrap();
}

#[test]
fn a_corrupt_pages_file_is_refused_before_resume() {
    let p = Preset::by_name("mi210x2").unwrap();
    let (dir, ids, _) = dump_only(&p, &settings());
    let pages = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("amdgpu-pages-")
        })
        .unwrap();
    let mut bytes = std::fs::read(&pages).unwrap();
    bytes[8 + 1000] ^= 1;
    std::fs::write(&pages, bytes).unwrap();
    let dst = SimNode::new(&p).unwrap();
    let err = harness::restore(&dst, dir.path(), &ids, &settings())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("checksum") && err.contains("amdgpu-pages-"),
        "{err}"
    );
}

#[test]
fn a_process_without_gpu_buffers_restores_as_a_fresh_kfd() {
    use kfd_abi::Platform;
    let p = Preset::by_name("mi210x2").unwrap();
    let src = SimNode::new(&p).unwrap();
    let process = src.machine.spawn_process();
    let kfd = src.platform_of(&process).open_kfd().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (ids, _) =
        harness::checkpoint_files(&src, &|p| p, &process, &kfd, &[], dir.path(), &settings())
            .unwrap();
    let dst = SimNode::new(&remapped_variant(&p)).unwrap();
    let (restored, _) = harness::restore(&dst, dir.path(), &ids, &settings()).unwrap();
    assert_eq!(restored.kfd.get_version().unwrap().minor, 11);
}

/// A process that opened its render nodes before `/dev/kfd` (criu restores files in fd order):
/// the render nodes are opened on the GPUs the restore maps them to and become the compute VMs of
/// the `/dev/kfd` restored after them, with any criu (3.17 cannot retry a file).
#[rstest]
#[case::same_gpu_ids(false)]
#[case::remapped(true)]
fn render_nodes_restored_before_their_kfd_are_its_compute_vms(#[case] remap: bool) {
    let p = Preset::by_name("mi210x2").unwrap();
    let (dir, mut ids, manifest) = dump_only(&p, &settings());
    ids.renders_first = true;
    let dst = SimNode::new(&if remap { remapped_variant(&p) } else { p }).unwrap();
    let (restored, _) = harness::restore(&dst, dir.path(), &ids, &settings()).unwrap();
    // Verification reads every buffer by SDMA through the restored render nodes: only the files
    // whose VMs the driver restored the buffers into can.
    let report = restored.verify(&manifest).unwrap();
    assert_eq!(report.bytes, manifest.pattern_bytes());
}

/// A process of an mi210x2 node holding its second GPU's render node and no `/dev/kfd`, dumped
/// as image 7: the preset, the image directory (and an open fd of it), the process's pid and the
/// render minor.
struct RenderOnly {
    p: Preset,
    /// Kept for the directory's lifetime.
    _dir: tempfile::TempDir,
    dirf: std::fs::File,
    pid: u32,
    minor: u32,
}

fn dump_render_only() -> RenderOnly {
    let p = Preset::by_name("mi210x2").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dirf = std::fs::File::open(dir.path()).unwrap();
    let src = SimNode::new(&p).unwrap();
    let process = src.machine.spawn_process();
    let minor = src.machine.render_minors()[1];
    let render = src.platform_of(&process).open_render(minor).unwrap();
    let criu = src.machine.spawn_process();
    criu.ptrace_attach(&process);
    let dumper = src.engine(&|p| p, &criu, &dirf, &settings());
    dumper.init(Stage::Dump).unwrap();
    dumper.dump_ext_file(render.as_fd(), 7).unwrap();
    dumper.fini(Stage::Dump, 0);
    RenderOnly {
        p,
        _dir: dir,
        dirf,
        pid: process.pid(),
        minor,
    }
}

/// A process with a render node open and no `/dev/kfd` gets a render node of the same GPU back;
/// on a node without that GPU the restore says so.
#[test]
fn a_render_node_without_kfd_restores_on_the_same_gpu() {
    let RenderOnly {
        p,
        _dir,
        dirf,
        pid,
        minor,
    } = dump_render_only();

    let dst = SimNode::new(&p).unwrap();
    let restored = dst.machine.spawn_process_as(pid);
    let engine = dst.engine(&|p| p, &restored, &dirf, &settings());
    engine.init(Stage::Restore).unwrap();
    let fd = engine.restore_file(7).unwrap().unwrap();
    assert_eq!(
        dst.platform_of(&restored).identify(fd.as_fd()).unwrap(),
        DeviceKind::Render { minor }
    );
    engine.fini(Stage::Restore, 0);

    let other = SimNode::new(&remapped_variant(&p)).unwrap();
    let restored = other.machine.spawn_process_as(pid);
    let engine = other.engine(&|p| p, &restored, &dirf, &settings());
    engine.init(Stage::Restore).unwrap();
    let err = engine.restore_file(7).unwrap_err().to_string();
    assert!(
        err.contains("amdgpu-renderD-7.img") && err.contains("no GPU of that id"),
        "{err}"
    );
    engine.fini(Stage::Restore, -1);
}

/// A render-node image that lists buffers of the render node (criu-dev's plugin and ours write
/// them on kernels with `AMDGPU_GEM_LIST_HANDLES`) is refused on Linux 6.1 (the simulator's
/// default), naming the file, the number of buffers and the 6.18 ioctls it needs, rather than
/// restored without them; one whose count contradicts its list is refused as such; without the
/// list the same image restores. (Restoring them on 6.18: `tests/tests/render_bos.rs`.)
#[rstest]
#[case::listed_and_counted(
    3,
    3,
    "holds 3 buffer(s) of render node renderD129; recreating them at their GEM handles needs \
     Linux 6.18 (AMDGPU_GEM_LIST_HANDLES, DRM_IOCTL_GEM_CHANGE_HANDLE)"
)]
#[case::counted_only(
    0,
    2,
    "of render node renderD129 contradicts itself: num_of_bos says 2 but it lists 0 buffer(s)"
)]
fn a_render_node_image_with_buffers_is_refused(
    #[case] listed: usize,
    #[case] declared: u64,
    #[case] says: &str,
) {
    use images::proto::DrmBoEntry;
    use images::{ImageFile, RenderNodeImage};
    let RenderOnly {
        p,
        _dir,
        dirf,
        pid,
        minor,
    } = dump_render_only();

    // The image as criu-dev's plugin writes it for a render node holding buffers.
    let plain = RenderNodeImage::read(dirf.as_fd(), 7).unwrap();
    let mut msg = plain.clone();
    msg.id = 7;
    msg.drm_render_minor = minor;
    msg.num_of_bos = declared;
    msg.bo_entries = (0..listed as u64)
        .map(|i| DrmBoEntry {
            addr: 0x10_0000_0000 + (i << 21),
            size: 2 << 20,
            offset: i << 21,
            alloc_flags: 0,
            alignment: 4096,
            preferred_domains: 4,
            handle: 1 + u32::try_from(i).unwrap(),
            is_import: 0,
            num_of_vms: 0,
            vm_entries: Vec::new(),
        })
        .collect();
    RenderNodeImage::write(dirf.as_fd(), 7, &msg).unwrap();

    let dst = SimNode::new(&p).unwrap();
    let restored = dst.machine.spawn_process_as(pid);
    let engine = dst.engine(&|p| p, &restored, &dirf, &settings());
    engine.init(Stage::Restore).unwrap();
    let err = engine.restore_file(7).unwrap_err().to_string();
    assert!(
        err.starts_with("amdgpu-renderD-7.img: the image ") && err.contains(says),
        "{err}"
    );
    assert!(err.contains("refused"), "{err}");
    engine.fini(Stage::Restore, -1);

    // Without the buffers, the same image restores.
    RenderNodeImage::write(dirf.as_fd(), 7, &plain).unwrap();
    let dst = SimNode::new(&p).unwrap();
    let restored = dst.machine.spawn_process_as(pid);
    let engine = dst.engine(&|p| p, &restored, &dirf, &settings());
    engine.init(Stage::Restore).unwrap();
    assert!(engine.restore_file(7).unwrap().is_some());
    engine.fini(Stage::Restore, 0);
}

/// A KFD topology that can vanish: the view of a restored container's task, whose sysfs
/// is the container's own mount (without the simulated topology in the VM lane; on a real node,
/// with the GPUs its device cgroup denies unreadable).
#[derive(Debug)]
struct TaskView {
    hidden: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl<P: Platform> tests::View<P> for TaskView {
    type Device = P::Device;

    fn device(&self, inner: P::Device) -> P::Device {
        inner
    }

    fn topology_root(&self, inner: &P) -> std::path::PathBuf {
        if self.hidden.load(std::sync::atomic::Ordering::SeqCst) {
            std::path::PathBuf::from("/nonexistent/sys/class/kfd/kfd/topology")
        } else {
            inner.topology_root()
        }
    }
}

/// criu restores a container's GPU files in its restored task, after the task has entered the
/// container's namespaces; the plugin reads the node's topology at restore init, in criu's own
/// process, and the task restores with what was read there. With no topology at init either, the
/// restore fails with the reason.
#[rstest]
#[case::topology_seen_at_init(false)]
#[case::topology_seen_nowhere(true)]
fn a_restored_task_needs_no_topology_of_its_own(#[case] hidden_at_init: bool) {
    let p = Preset::by_name("mi210x2").unwrap();
    let (dir, ids, _) = dump_only(&p, &settings());
    let dirf = std::fs::File::open(dir.path()).unwrap();
    let dst = SimNode::new(&p).unwrap();
    let restored = dst.machine.spawn_process_as(ids.pid);
    let hidden = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(hidden_at_init));
    let view = |inner| tests::Viewed {
        inner,
        view: TaskView {
            hidden: std::sync::Arc::clone(&hidden),
        },
    };
    let engine = dst.engine(&view, &restored, &dirf, &settings());
    engine.init(Stage::Restore).unwrap();
    // The restored task, in the container's mount namespace.
    hidden.store(true, std::sync::atomic::Ordering::SeqCst);
    let kfd = engine.restore_file(ids.kfd);
    if hidden_at_init {
        let err = kfd.unwrap_err().to_string();
        assert!(err.contains("reading the GPU topology"), "{err}");
        engine.fini(Stage::Restore, -1);
        return;
    }
    let kfd = kfd.unwrap().expect("the /dev/kfd image is ours");
    assert_eq!(
        dst.platform_of(&restored).identify(kfd.as_fd()).unwrap(),
        DeviceKind::Kfd
    );
    for &id in &ids.renders {
        let fd = engine
            .restore_file(id)
            .unwrap()
            .expect("a render node image");
        assert!(matches!(
            dst.platform_of(&restored).identify(fd.as_fd()).unwrap(),
            DeviceKind::Render { .. }
        ));
    }
    engine.fini(Stage::Restore, 0);
}

/// The first file of `dir` whose name starts with `prefix`.
fn image_file(dir: &std::path::Path, prefix: &str) -> std::path::PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .unwrap()
}

/// Four bytes of the KFD image overwritten where the message still decodes (the GPU's device
/// entry): the restore refuses the image, naming it, before it restores anything.
#[test]
fn a_damaged_kfd_image_is_refused_naming_the_file() {
    let p = Preset::by_name("mi210x2").unwrap();
    let (dir, ids, _) = dump_only(&p, &settings());
    let kfd = image_file(dir.path(), "amdgpu-kfd-");
    let mut bytes = std::fs::read(&kfd).unwrap();
    bytes[200..204].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    std::fs::write(&kfd, bytes).unwrap();
    let dst = SimNode::new(&p).unwrap();
    let err = harness::restore(&dst, dir.path(), &ids, &settings())
        .unwrap_err()
        .to_string();
    let name = kfd.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        err.contains(&format!("image file {name} is damaged")),
        "{err}"
    );
    for &gpu in &dst.machine.gpu_ids() {
        assert_eq!(
            dst.machine.vram_used(gpu),
            Some(0),
            "nothing restored: {err}"
        );
    }
}

/// Images as upstream's plugin writes them (no page checksums, no image checksum at the end of
/// the message images) restore, unverified.
#[test]
fn images_without_an_image_checksum_restore_like_upstreams() {
    let p = Preset::by_name("mi210x2").unwrap();
    let s = Settings {
        checksums: false,
        ..settings()
    };
    let (dir, ids, manifest) = dump_only(&p, &s);
    let mut stripped = 0;
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !(name.starts_with("amdgpu-kfd-") || name.starts_with("amdgpu-renderD-")) {
            continue;
        }
        // The message image ends with field 101: key 0xaa 0x06, length 11.
        let mut bytes = std::fs::read(&path).unwrap();
        let seal = bytes.len() - 14;
        assert_eq!(bytes[seal..seal + 3], [0xaa, 0x06, 11], "{name}");
        bytes.truncate(seal);
        let len = (seal - 8) as u64;
        bytes[..8].copy_from_slice(&len.to_ne_bytes());
        std::fs::write(&path, bytes).unwrap();
        stripped += 1;
    }
    assert_eq!(stripped, 1 + ids.renders.len());
    let dst = SimNode::new(&remapped_variant(&p)).unwrap();
    let (restored, _) = harness::restore(&dst, dir.path(), &ids, &s).unwrap();
    restored.verify(&manifest).unwrap();
}
