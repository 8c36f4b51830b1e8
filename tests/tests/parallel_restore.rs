//! The parallel restore under criu's development branch, through the engine on the in-process
//! simulator: criu's process calls RESTORE_INIT and POST_FORKING, the restored tasks hand their
//! BOs to it in RESTORE_EXT_FILE, and it writes their contents, per GPU from that GPU's own
//! pages file; RESUME_DEVICES_LATE waits for the writes and fails when one failed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use amdgpu_plugin::criu::{Settings, PARALLEL_RESTORE_ENV};
use harness::workload::{Manifest, Spec};
use harness::{CriuHooksSet, NodeError, RestoredTask, SimNode, TaskFiles, TaskIds};
use kfd_sim::preset::Preset;
use rstest::rstest;

fn settings(parallel: bool) -> Settings {
    Settings::from_lookup(
        |k| (k == PARALLEL_RESTORE_ENV).then(|| if parallel { "1" } else { "0" }.to_owned()),
        false,
    )
}

/// Two VRAM buffers and a GTT buffer on each GPU, the first over the copy engine's staging size.
fn spec(seed: u64) -> Spec {
    Spec::new(seed, vec![6 << 20, 192 << 10], vec![320 << 10])
}

/// The tasks' `/dev/kfd` and render nodes, in the order criu restores them.
fn verify(task: RestoredTask, manifest: &Manifest) -> Result<(), String> {
    let mut files = task.files.into_iter();
    let kfd = files.next().unwrap().into_kfd().unwrap();
    let renders = files.map(|f| f.into_render().unwrap()).collect();
    let restored = harness::RestoredTarget {
        process: task.process,
        kfd,
        renders,
        mapping: Vec::new(),
    };
    restored
        .verify(manifest)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Checkpoints `n` processes of a mi210x2 node (each on both GPUs) into `dir` as one tree.
fn checkpoint(n: u64, dir: &Path) -> (Vec<TaskIds>, Vec<Manifest>) {
    let node = SimNode::new(&Preset::mi210x2()).unwrap();
    let targets: Vec<_> = (0..n)
        .map(|i| harness::start_target(&node, &spec(11 + i)).unwrap())
        .collect();
    let tasks: Vec<TaskFiles<'_>> = targets
        .iter()
        .map(|t| {
            let mut files: Vec<BorrowedFd<'_>> = vec![t.workload.kfd().as_fd()];
            files.extend(t.workload.renders().iter().map(AsFd::as_fd));
            TaskFiles {
                process: &t.process,
                files,
            }
        })
        .collect();
    let ids = harness::checkpoint_tree(&node, &tasks, dir, &settings(false)).unwrap();
    let manifests = targets
        .iter()
        .map(|t| t.workload.manifest().clone())
        .collect();
    (ids, manifests)
}

#[rstest]
#[case::one_process_criu_dev_parallel(1, CriuHooksSet::Dev, true)]
#[case::two_processes_criu_dev_parallel(2, CriuHooksSet::Dev, true)]
#[case::one_process_criu_dev_parallel_off(1, CriuHooksSet::Dev, false)]
#[case::two_processes_criu_4_2_asked_for_parallel(2, CriuHooksSet::Release, true)]
fn two_gpu_processes_are_restored_with_both_gpus_contents(
    #[case] processes: u64,
    #[case] hooks: CriuHooksSet,
    #[case] parallel: bool,
) {
    let dir = tempfile::tempdir().unwrap();
    let (ids, manifests) = checkpoint(processes, dir.path());
    let dst = SimNode::new(&Preset::mi210x2()).unwrap();
    let tasks =
        harness::restore_tree_as(&dst, dir.path(), &ids, &settings(parallel), hooks).unwrap();
    assert_eq!(tasks.len(), manifests.len());
    for (task, manifest) in tasks.into_iter().zip(&manifests) {
        let pid = task.process.pid();
        verify(task, manifest).unwrap_or_else(|e| panic!("pid {pid}: {e}"));
    }
}

/// Flips a byte in the middle of the pages file of the image's second GPU.
fn corrupt_second_gpu(dir: &Path, image: u32) -> String {
    let mut pages: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with(&format!("amdgpu-pages-{image}-")))
        .collect();
    pages.sort();
    assert_eq!(pages.len(), 2, "{pages:?}");
    let name = pages.pop().unwrap();
    let path = dir.join(&name);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x5a;
    std::fs::write(&path, bytes).unwrap();
    name
}

#[test]
fn a_failing_fill_fails_resume_devices_late() {
    let dir = tempfile::tempdir().unwrap();
    let (ids, _) = checkpoint(2, dir.path());
    corrupt_second_gpu(dir.path(), ids[1].files[0]);
    let dst = SimNode::new(&Preset::mi210x2()).unwrap();
    let err = harness::restore_tree_as(&dst, dir.path(), &ids, &settings(true), CriuHooksSet::Dev)
        .unwrap_err();
    let NodeError::Hook { hook, source } = &err else {
        panic!("{err}");
    };
    assert_eq!(*hook, "RESUME_DEVICES_LATE", "{err}");
    let message = source.to_string();
    assert!(
        message.contains("the parallel restore of buffer contents failed")
            && message.contains(&format!("image {}", ids[1].files[0])),
        "{message}"
    );
}

#[test]
fn the_same_corruption_fails_the_in_task_restore_in_restore_ext_file() {
    let dir = tempfile::tempdir().unwrap();
    let (ids, _) = checkpoint(1, dir.path());
    corrupt_second_gpu(dir.path(), ids[0].files[0]);
    let dst = SimNode::new(&Preset::mi210x2()).unwrap();
    let err = harness::restore_tree_as(&dst, dir.path(), &ids, &settings(false), CriuHooksSet::Dev)
        .unwrap_err();
    let NodeError::Hook { hook, .. } = &err else {
        panic!("{err}");
    };
    assert_eq!(*hook, "RESTORE_EXT_FILE", "{err}");
}
