//! What criu 4.x asks of the plugin, through the engine on the in-process simulator: the plugin
//! inventory (recorded at dump, claimed at restore, out of the way when not listed) and upstream's
//! KFD version check (refused before any CRIU ioctl, nothing paused, nothing created).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::File;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use amdgpu_plugin::criu::Settings;
use amdgpu_plugin::hooks::{CriuHooks, HookError, Stage};
use amdgpu_plugin::inventory::{Inventory, RecordError, NAME};
use harness::workload::Spec;
use harness::{self, SimNode};
use kfd_abi::kfd::Version;
use kfd_abi::Platform;
use kfd_sim::preset::Preset;
use rstest::rstest;

fn spec() -> Spec {
    Spec::new(7, vec![1 << 20, 64 << 10], vec![64 << 10])
}

fn settings() -> Settings {
    Settings::from_lookup(|_| None, false)
}

/// criu 4.1's inventory as a test sees it: what the image lists, what the plugin did.
#[derive(Debug, Default)]
struct FakeInventory {
    /// The image's list; `None`: an image made before criu 4.1 (no list).
    lists: Option<Vec<&'static str>>,
    records: AtomicU32,
    claims: AtomicU32,
}

/// The engine's handle on a [`FakeInventory`] the test keeps too.
#[derive(Debug)]
struct Shared(Arc<FakeInventory>);

impl Inventory for Shared {
    fn present(&self) -> bool {
        true
    }

    fn record(&self) -> Result<(), RecordError> {
        self.0.records.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn claim(&self) -> bool {
        self.0.claims.fetch_add(1, Ordering::SeqCst);
        self.0.lists.as_ref().is_none_or(|l| l.contains(&NAME))
    }
}

/// Dumps the workload of a fresh mi210x2 node into `dir` with `inventory`; returns the node,
/// the target and the ids.
fn dump_with(
    dir: &std::path::Path,
    inventory: &Arc<FakeInventory>,
) -> (SimNode, harness::Target, harness::ImageIds) {
    let node = SimNode::new(&Preset::mi210x2()).unwrap();
    let target = harness::start_target(&node, &spec()).unwrap();
    let dirf = File::open(dir).unwrap();
    let criu = node.machine.spawn_process();
    criu.ptrace_attach(&target.process);
    let engine = node
        .engine(&|p| p, &criu, &dirf, &settings())
        .with_inventory(Shared(Arc::clone(inventory)));
    engine.init(Stage::Dump).unwrap();
    engine
        .dump_ext_file(target.workload.kfd().as_fd(), 1)
        .unwrap();
    let mut renders = Vec::new();
    for (i, r) in target.workload.renders().iter().enumerate() {
        let id = 2 + u32::try_from(i).unwrap();
        engine.dump_ext_file(r.as_fd(), id).unwrap();
        renders.push(id);
    }
    engine.fini(Stage::Dump, 0);
    criu.ptrace_detach(&target.process);
    let ids = harness::ImageIds {
        pid: target.process.pid(),
        renders_first: false,
        kfd: 1,
        renders,
    };
    (node, target, ids)
}

#[test]
fn a_dump_records_the_plugin_once() {
    let dir = tempfile::tempdir().unwrap();
    let inventory = Arc::new(FakeInventory::default());
    let (_node, _target, ids) = dump_with(dir.path(), &inventory);
    assert_eq!(ids.renders.len(), 2);
    assert_eq!(
        inventory.records.load(Ordering::SeqCst),
        1,
        "one record for the /dev/kfd and two render nodes of one dump"
    );
    assert_eq!(inventory.claims.load(Ordering::SeqCst), 0);
}

#[rstest]
#[case::listed(Some(vec!["cuda_plugin", NAME]), true)]
#[case::image_from_before_criu_4_1(None, true)]
#[case::not_listed(Some(vec!["cuda_plugin"]), false)]
fn a_restore_follows_the_images_inventory(
    #[case] lists: Option<Vec<&'static str>>,
    #[case] restores: bool,
) {
    let dir = tempfile::tempdir().unwrap();
    let (node, target, ids) = dump_with(dir.path(), &Arc::new(FakeInventory::default()));
    let manifest = target.workload.manifest().clone();
    drop(target);

    let dst = SimNode::new(&Preset::mi210x2()).unwrap();
    let process = dst.machine.spawn_process_as(ids.pid);
    let dirf = File::open(dir.path()).unwrap();
    let inventory = Arc::new(FakeInventory {
        lists,
        ..FakeInventory::default()
    });
    let engine = dst
        .engine(&|p| p, &process, &dirf, &settings())
        .with_inventory(Shared(Arc::clone(&inventory)));
    engine.init(Stage::Restore).unwrap();
    assert_eq!(
        inventory.claims.load(Ordering::SeqCst),
        1,
        "claimed in init"
    );
    let kfd = engine.restore_file(ids.kfd);
    if restores {
        let kfd = dst.platform_of(&process).kfd_from_fd(kfd.unwrap().unwrap());
        assert!(kfd.is_ok());
    } else {
        assert!(matches!(kfd, Err(HookError::NotOurs)), "{kfd:?}");
        for &gpu in &dst.machine.gpu_ids() {
            assert_eq!(dst.machine.vram_used(gpu), Some(0), "nothing restored");
        }
        assert!(matches!(
            engine.resume_devices_late(i32::try_from(ids.pid).unwrap()),
            Err(HookError::NotOurs)
        ));
    }
    engine.fini(Stage::Restore, 0);
    assert_eq!(
        inventory.records.load(Ordering::SeqCst),
        0,
        "a restore records nothing"
    );
    drop((node, manifest));
}

#[rstest]
#[case::before_criu_op(Version { major: 1, minor: 7 })]
#[case::another_major(Version { major: 2, minor: 11 })]
fn a_dump_on_a_kfd_without_criu_op_is_refused_and_the_process_runs_on(#[case] v: Version) {
    let dir = tempfile::tempdir().unwrap();
    let node = SimNode::new(&Preset::mi210x2()).unwrap();
    node.machine.set_kfd_version(v);
    let target = harness::start_target(&node, &spec()).unwrap();
    let err = harness::checkpoint(&node, &target, dir.path(), &settings()).unwrap_err();
    let expected = format!(
        "CR not supported on current kernel (current:{:02}.{:02} min:01.08)",
        v.major, v.minor
    );
    assert!(err.to_string().contains(&expected), "{err}");
    assert_eq!(
        node.machine.queues_paused(target.process.pid()),
        Some(false),
        "never paused"
    );
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "no image written"
    );
}

#[test]
fn a_restore_on_a_kfd_without_criu_op_is_refused_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let src = SimNode::new(&Preset::mi210x2()).unwrap();
    let target = harness::start_target(&src, &spec()).unwrap();
    let (ids, _) = harness::checkpoint(&src, &target, dir.path(), &settings()).unwrap();

    let dst = SimNode::new(&Preset::mi210x2()).unwrap();
    dst.machine.set_kfd_version(Version { major: 1, minor: 7 });
    let err = harness::restore(&dst, dir.path(), &ids, &settings()).unwrap_err();
    assert!(
        err.to_string()
            .contains("CR not supported on current kernel (current:01.07 min:01.08)"),
        "{err}"
    );
    for &gpu in &dst.machine.gpu_ids() {
        assert_eq!(dst.machine.vram_used(gpu), Some(0), "no BO was created");
    }
}

/// criu dumps a task's files, then its memory. The dumped process's GPU queues stay paused until
/// the memory is dumped too: a kernel running in between would write host memory past the point
/// its saved waves resume from. A criu with DUMP_DEVICES_LATE calls it after every task's memory;
/// criu 3.17 to 4.2 call only the exit hook, before they let the tasks run or kill them.
#[rstest]
#[case::with_dump_devices_late(true)]
#[case::without_it(false)]
fn a_dumped_process_stays_paused_until_criu_has_dumped_its_memory(#[case] late: bool) {
    let dir = tempfile::tempdir().unwrap();
    let dirf = File::open(dir.path()).unwrap();
    let node = SimNode::new(&Preset::mi210x2()).unwrap();
    let target = harness::start_target(&node, &spec()).unwrap();
    let pid = target.process.pid();
    let criu = node.machine.spawn_process();
    criu.ptrace_attach(&target.process);
    let engine = node.engine(&|p| p, &criu, &dirf, &Settings::from_lookup(|_| None, late));
    engine.init(Stage::Dump).unwrap();
    engine
        .dump_ext_file(target.workload.kfd().as_fd(), 1)
        .unwrap();
    assert_eq!(
        node.machine.queues_paused(pid),
        Some(true),
        "after DUMP_EXT_FILE"
    );
    if late {
        engine.dump_devices_late(pid).unwrap();
        assert_eq!(
            node.machine.queues_paused(pid),
            Some(false),
            "after DUMP_DEVICES_LATE"
        );
    }
    engine.fini(Stage::Dump, 0);
    assert_eq!(
        node.machine.queues_paused(pid),
        Some(false),
        "after the exit hook"
    );
    criu.ptrace_detach(&target.process);
}
