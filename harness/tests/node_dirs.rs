//! A simulated node's topology directory does not outlive a process that ends without unwinding:
//! the next node made anywhere removes it. (Before, 14 were left in /tmp after a day of tests,
//! fuzzing and benches.)
//!
//! Each step runs in a child process (this test binary again, with `NODE_DIRS_STEP` set and only
//! `node_dirs_child` selected) with its own `TMPDIR`.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use harness::SimNode;
use kfd_sim::preset::Preset;

const STEP: &str = "NODE_DIRS_STEP";

/// A step of the test below, run in a child: makes a node, prints its topology root, and ends
/// with `exit` (`leak`: the node is never dropped) or normally.
#[test]
fn node_dirs_child() {
    let Ok(step) = std::env::var(STEP) else {
        return;
    };
    let node = SimNode::new(&Preset::by_name("mi50x1").unwrap()).unwrap();
    println!("\nROOT={}", node.topology_root().display());
    if step == "leak" {
        std::process::exit(0);
    }
}

fn step(tmp: &Path, step: &str) -> PathBuf {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "node_dirs_child",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(STEP, step)
        .env("TMPDIR", tmp)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let root = stdout
        .lines()
        .find_map(|l| l.strip_prefix("ROOT="))
        .unwrap_or_else(|| panic!("no topology root in {stdout}"));
    assert!(root.starts_with(tmp.to_str().unwrap()), "{root}");
    // The root is the directory itself (the tree is written at its top).
    PathBuf::from(root)
}

#[test]
fn a_node_removes_the_topology_directories_of_processes_that_ended_without_cleaning_up() {
    let tmp = tempfile::tempdir().unwrap();
    let leaked = step(tmp.path(), "leak");
    assert!(leaked.join("nodes").is_dir(), "the exit left it behind");
    let clean = step(tmp.path(), "clean");
    assert!(
        !leaked.exists(),
        "the next node removed {}",
        leaked.display()
    );
    assert!(!clean.exists(), "a dropped node removes its own");
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}
