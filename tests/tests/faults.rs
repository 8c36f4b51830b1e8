//! A driver error injected at every ioctl of a dump and of a restore: a failed dump always leaves
//! the process running (unpaused) and leaks no file descriptor; a failed restore leaves no
//! simulated process, buffer or queue behind. One test per binary, so that counting this
//! process's fds is not disturbed by other tests running in parallel threads.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use amdgpu_plugin::criu::Settings;
use harness::workload::Spec;
use harness::{self, SimNode};
use kfd_sim::preset::Preset;
use tests::{open_fds, FaultPlan, FaultyPlatform};

fn spec() -> Spec {
    Spec::new(7, vec![2 << 20, 4 << 10], vec![64 << 10])
}

fn settings() -> Settings {
    tests::staged_settings(1 << 20, 2)
}

#[test]
fn every_injected_failure_is_clean() {
    let preset = Preset::by_name("mi210x2").unwrap();
    let node = SimNode::new(&preset).unwrap();
    let target = harness::start_target(&node, &spec()).unwrap();
    let renders: Vec<_> = target.workload.renders().iter().collect();
    let manifest = target.workload.manifest().clone();

    // Dump: fail the 1st, 2nd, ... ioctl until a dump gets through untouched.
    let mut dumps = 0;
    let good_dir = loop {
        dumps += 1;
        let dir = tempfile::tempdir().unwrap();
        let fds = open_fds();
        let plan = FaultPlan::fail_at(dumps);
        let wrap = |p| FaultyPlatform::new(p, plan.clone());
        let result = harness::checkpoint_files(
            &node,
            &wrap,
            &target.process,
            target.workload.kfd(),
            &renders,
            dir.path(),
            &settings(),
        );
        let failed = plan.failed();
        let what = failed.map_or_else(|| "nothing".to_owned(), |f| f.to_string());
        assert_eq!(open_fds(), fds, "fd leak after failing {what}");
        if !failed.is_some_and(|f| f.is_unpause()) {
            // A failed UNPAUSE cannot be made up for; after every other failure the process runs.
            assert_eq!(
                node.machine.queues_paused(target.process.pid()),
                Some(false),
                "paused after failing {what}"
            );
        }
        match (result, failed) {
            (Ok((ids, _)), None) => break (dir, ids),
            (Ok(_), Some(f)) => {
                assert!(f.may_be_cleanup(), "the dump succeeded although {f} failed")
            }
            (Err(e), None) => panic!("the dump failed without an injected fault: {e}"),
            (Err(_), Some(_)) => {}
        }
        assert!(dumps < 10_000, "the dump never completes");
    };
    assert!(dumps > 10, "a dump issues more than 10 ioctls ({dumps})");
    let (dir, ids) = good_dir;
    drop(target);

    // Restore: likewise, into a fresh process each time; afterwards nothing may remain.
    let dst = SimNode::new(&preset).unwrap();
    let vram: Vec<_> = dst
        .machine
        .gpu_ids()
        .iter()
        .map(|&g| dst.machine.vram_used(g))
        .collect();
    let mut restores = 0;
    loop {
        restores += 1;
        let fds = open_fds();
        let plan = FaultPlan::fail_at(restores);
        let wrap = |p| FaultyPlatform::new(p, plan.clone());
        let process = dst.machine.spawn_process();
        let pid = process.pid();
        let result = harness::restore_with(&dst, &wrap, process, dir.path(), &ids, &settings());
        match (result, plan.failed()) {
            (Ok((restored, _)), None) => {
                restored.verify(&manifest).unwrap();
                break;
            }
            (Ok(_), Some(f)) => assert!(
                f.may_be_cleanup(),
                "the restore succeeded although {f} failed"
            ),
            (Err(e), None) => panic!("the restore failed without an injected fault: {e}"),
            (Err(_), Some(f)) => {
                assert!(
                    !dst.machine.has_kfd_process(pid),
                    "a KFD process is left after failing {f}"
                );
                let now: Vec<_> = dst
                    .machine
                    .gpu_ids()
                    .iter()
                    .map(|&g| dst.machine.vram_used(g))
                    .collect();
                assert_eq!(now, vram, "VRAM is left allocated after failing {f}");
                assert_eq!(open_fds(), fds, "fd leak after failing {f}");
            }
        }
        assert!(restores < 10_000, "the restore never completes");
    }
    assert!(
        restores > 10,
        "a restore issues more than 10 ioctls ({restores})"
    );
}
