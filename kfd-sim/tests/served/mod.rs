//! What the tests of the simulator served over CUSE share (`cuse.rs`, and `bridge.rs` behind the
//! VM lane's kernel module): the lock that serialises their daemons (they all register
//! `/dev/kfd`, across the processes of nextest too), the daemon, a process's view of the served
//! devices, and the helper processes the tests start from their own binary.

#![allow(dead_code)] // each test binary uses its part

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use kfd_abi::{GpuId, Kfd, RenderNode};

/// The preset every daemon serves.
pub(crate) const PRESET: &str = "mi210x2";

/// Why a daemon cannot serve over CUSE here, if it cannot: no `/dev/cuse` (`no_cuse` says what
/// then), or not root.
pub(crate) fn cannot_serve(no_cuse: &str) -> Option<String> {
    if !Path::new("/dev/cuse").exists() {
        return Some(no_cuse.to_owned());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("serving over CUSE needs root".into());
    }
    None
}

/// Ends the test (which passes) when `reason` says why it cannot run here.
macro_rules! skip_if {
    ($reason:expr) => {
        if let Some(why) = $reason {
            eprintln!("SKIPPED: {why}");
            return;
        }
    };
}

pub(crate) use skip_if;

/// Holds the cross-process lock of the served tests while a daemon runs.
struct Lock {
    _file: File,
}

fn lock() -> Lock {
    let f = File::create("/tmp/kfd-sim-cuse-tests.lock").expect("lock file");
    // SAFETY: flock on an fd we own; blocks until the lock is ours.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(r, 0, "flock");
    Lock { _file: f }
}

/// A running `kfd-simd serve`; stopped with SIGTERM (which must end it cleanly) by
/// [`Daemon::stop`] or on drop.
pub(crate) struct Daemon {
    child: Child,
    /// Its pid.
    pub pid: u32,
    topology: PathBuf,
    /// Whether it serves through the `kfd_bridge` module's proxies (it said so before READY).
    pub proxied: bool,
    stopped: bool,
    _lock: Lock,
}

impl Daemon {
    /// Takes the lock and starts `kfd-simd serve` of [`PRESET`], with its topology in a temporary
    /// directory named `<name>-<our pid>`; returns once it is READY.
    pub(crate) fn serve(name: &str) -> Daemon {
        let lock = lock();
        assert!(
            !Path::new("/dev/kfd").exists(),
            "/dev/kfd exists before the daemon starts (a real GPU, or a daemon left over)"
        );
        let topology = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let mut child = Command::new(env!("CARGO_BIN_EXE_kfd-simd"))
            .args(["serve", "--preset", PRESET, "--topology-dir"])
            .arg(&topology)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start kfd-simd");
        let out = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(out).lines();
        let mut proxied = false;
        let pid = loop {
            let line = lines
                .next()
                .expect("kfd-simd ended before READY")
                .expect("read kfd-simd output");
            proxied |= line.contains("kfd_bridge proxy of");
            if let Some(rest) = line.strip_prefix("READY pid=") {
                break rest
                    .split_whitespace()
                    .next()
                    .and_then(|p| p.parse().ok())
                    .expect("pid in READY");
            }
        };
        assert_eq!(pid, child.id());
        Daemon {
            child,
            pid,
            topology,
            proxied,
            stopped: false,
            _lock: lock,
        }
    }

    /// Whether it still runs.
    pub(crate) fn alive(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// The number of its open file descriptors.
    pub(crate) fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// Its GPUs, from the topology it wrote: (gpu id, render minor).
    pub(crate) fn gpus(&self) -> Vec<(GpuId, u32)> {
        let t = topology::parse(&self.topology).expect("parse the daemon's topology");
        t.gpus()
            .map(|n| (GpuId::new(n.gpu_id).expect("gpu id"), n.render_minor()))
            .collect()
    }

    /// Whether it holds two fds on one BO's memory (its VRAM/GTT memfds, and dma-bufs of
    /// them): "none twice", or the inodes it does.
    pub(crate) fn bo_memory_handles(&self) -> String {
        let mut seen = std::collections::BTreeMap::<u64, usize>::new();
        for e in std::fs::read_dir(format!("/proc/{}/fd", self.pid)).expect("daemon fds") {
            let Ok(e) = e else { continue };
            let Ok(target) = std::fs::read_link(e.path()) else {
                continue; // closed since the listing
            };
            let t = target.to_string_lossy();
            if t.starts_with("/memfd:kfd-sim:vram") || t.starts_with("/memfd:kfd-sim:gtt") {
                if let Ok(m) = std::fs::metadata(e.path()) {
                    *seen.entry(m.ino()).or_default() += 1;
                }
            }
        }
        let twice: Vec<String> = seen
            .iter()
            .filter(|(_, &n)| n > 1)
            .map(|(ino, n)| format!("inode {ino} x{n}"))
            .collect();
        if twice.is_empty() {
            "none twice".into()
        } else {
            twice.join(", ")
        }
    }

    /// SIGTERM, and waits until it has exited and its nodes are gone.
    pub(crate) fn stop(&mut self) {
        self.stopped = true;
        // SAFETY: kill with the pid of our own child, which we have not reaped.
        unsafe { libc::kill(libc::pid_t::try_from(self.pid).unwrap_or(0), libc::SIGTERM) };
        let start = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                break Some(s);
            }
            if start.elapsed() > Duration::from_secs(20) {
                let _ = self.child.kill();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let _ = std::fs::remove_dir_all(&self.topology);
        if !std::thread::panicking() {
            let status = status.expect("kfd-simd did not stop on SIGTERM");
            assert!(status.success(), "kfd-simd exited with {status}");
            assert!(
                !Path::new("/dev/kfd").exists(),
                "/dev/kfd outlived the daemon"
            );
            assert!(
                !self.proxied || dir_is_empty("/dev/kfd-sim"),
                "the CUSE nodes outlived the daemon"
            );
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if !self.stopped {
            self.stop();
        }
    }
}

/// Whether directory `p` is empty or absent.
fn dir_is_empty(p: &str) -> bool {
    std::fs::read_dir(p).map_or(true, |mut d| d.next().is_none())
}

/// The preset's GPUs, as a process that does not know the daemon's topology directory sees them
/// (the render nodes are named after them): (gpu id, render minor), in node order.
pub(crate) fn preset_gpus() -> Vec<(GpuId, u32)> {
    let preset = kfd_sim::Preset::by_name(PRESET).expect("preset");
    let t = preset.to_topology().expect("topology");
    t.gpus()
        .map(|n| (GpuId::new(n.gpu_id).expect("gpu id"), n.render_minor()))
        .collect()
}

/// The path of render node `minor`.
pub(crate) fn render_path(minor: u32) -> PathBuf {
    PathBuf::from(format!("/dev/dri/renderD{minor}"))
}

/// A process's view: /dev/kfd and every render node open, every VM acquired.
pub(crate) struct Client {
    /// `/dev/kfd`.
    pub kfd: Kfd,
    /// One per GPU, in the order of `gpus`.
    pub renders: Vec<RenderNode>,
    /// The GPUs.
    pub gpus: Vec<GpuId>,
}

/// Opens `/dev/kfd` and the render nodes of `gpus` (gpu id, render minor), and acquires their VMs.
pub(crate) fn client(gpus: &[(GpuId, u32)]) -> Client {
    let kfd = Kfd::open(Path::new("/dev/kfd")).expect("open /dev/kfd");
    let mut renders = Vec::new();
    for (gpu, minor) in gpus {
        let r = RenderNode::open(&render_path(*minor)).expect("open render node");
        kfd.acquire_vm(*gpu, r.transport().as_fd())
            .expect("ACQUIRE_VM");
        renders.push(r);
    }
    Client {
        kfd,
        renders,
        gpus: gpus.iter().map(|g| g.0).collect(),
    }
}

impl Client {
    /// The fd of render node `i`.
    pub(crate) fn render_fd(&self, i: usize) -> BorrowedFd<'_> {
        self.renders[i].transport().as_fd()
    }

    /// The fd of `/dev/kfd`.
    pub(crate) fn kfd_fd(&self) -> BorrowedFd<'_> {
        self.kfd.transport().as_fd()
    }
}

/// Starts this test binary again as a helper process, running only `helper_process_entry`, with
/// the environment variables `vars` (which tell it its role); its stdin and stdout are piped.
pub(crate) fn spawn_helper(vars: &[(&str, &str)]) -> (Child, BufReader<ChildStdout>) {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "helper_process_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(vars.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start helper");
    let out = BufReader::new(child.stdout.take().expect("stdout"));
    (child, out)
}

/// In a helper: prints `s` for the test to find ([`read_helper_line`]).
pub(crate) fn say(s: &str) {
    println!("HELPER {s}");
    let _ = std::io::stdout().flush();
}

/// What a helper process said ([`say`]).
pub(crate) fn read_helper_line(out: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        let n = out.read_line(&mut line).expect("helper output");
        assert!(n > 0, "the helper ended early");
        // libtest prints `test helper_process_entry ... ` without a newline before the test
        // runs: the marker may come after it on the same line.
        if let Some((_, rest)) = line.split_once("HELPER ") {
            return rest.trim().to_owned();
        }
    }
}
