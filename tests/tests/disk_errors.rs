//! The disk refusing a write in the middle of a dump with direct I/O: the dump fails, names the
//! pages file, and nothing waits for ever (the copiers, the checksumming writer and the thread
//! that writes to the disk all stop).
//!
//! The refusal is the process's file size limit (`RLIMIT_FSIZE`: `EFBIG` past it), which is
//! process-wide: these tests live in a binary of their own, so that no other test's files meet
//! the limit when tests run as threads of one process (`cargo test`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::error::Error;

use amdgpu_plugin::copy::DirectIo;
use amdgpu_plugin::criu::Settings;
use harness::workload::Spec;
use harness::SimNode;
use kfd_sim::preset::Preset;
use tests::open_fds;

const M: u64 = 1 << 20;

/// Sets the process's file size limit to `bytes` and ignores `SIGXFSZ`, so that a write past it
/// fails with `EFBIG` instead of killing the process.
fn limit_file_size(bytes: u64) {
    // SAFETY: SIG_IGN for SIGXFSZ installs no handler code; it changes what the kernel does
    // with the signal only.
    let old = unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    assert_ne!(old, libc::SIG_ERR);
    let limit = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: `limit` is a valid rlimit the call only reads.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &limit) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
}

/// `e` and its sources, one per line.
fn chain(e: &dyn Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(&format!("\n  {s}"));
        cur = s.source();
    }
    out
}

#[test]
fn a_direct_write_the_disk_refuses_fails_the_dump_and_names_the_file() {
    let preset = Preset::by_name("mi210x2").unwrap();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    if !images::direct::supported_in(dir.path()).unwrap() {
        eprintln!("{}: no direct I/O here: skipped", dir.path().display());
        return;
    }
    // 40 MiB of VRAM per GPU, written in 8 MiB buffers: the writes past 20 MiB are refused
    // while the copiers still fill buffers.
    let node = SimNode::new(&preset).unwrap();
    let target = harness::start_target(&node, &Spec::new(9, vec![40 * M], vec![M])).unwrap();
    let mut settings = Settings::from_lookup(|_| None, false);
    settings.direct_io = DirectIo::Always;
    let fds = open_fds();
    // After the workload's memory exists: the simulator's VRAM is files too.
    limit_file_size(20 * M);
    let e = harness::checkpoint(&node, &target, dir.path(), &settings).unwrap_err();
    let text = chain(&e);
    assert!(text.contains("amdgpu-pages-"), "{text}");
    let efbig = std::io::Error::from_raw_os_error(libc::EFBIG).to_string();
    assert!(text.contains(&efbig), "{text}");
    assert_eq!(open_fds(), fds, "fd leak after a failed dump");
    assert_eq!(
        node.machine.queues_paused(target.process.pid()),
        Some(false),
        "the process is left paused"
    );
}
