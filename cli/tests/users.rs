//! What a new user meets (issue 41), through the binary: one verdict for one directory from
//! `inspect` and `check`, bounded reads of topology and image files, exit codes that mean what
//! the README says, quiet interrupts, `demo --dir` over a checkpoint, counts that agree with
//! their nouns, one flag name for a topology root, man pages and completions.

#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)] // test helpers, small values

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use clap::CommandFactory;
use images::proto::{CriuDmabufNode, CriuKfd, CriuRenderNode, DrmBoEntry, KfdBoEntry};
use images::{DmabufImage, ImageFile, KfdImage, PagesFile, PagesWriter, RenderNodeImage};
use kfd_abi::AllocFlags;
use rstest::rstest;
use tempfile::TempDir;
use topology::builder::{GpuSpec, TopologyBuilder};
use topology::{Check, Topology};

// ---------------------------------------------------------------------------------------------
// Fixtures

/// One NUMA node with `n` MI100s.
fn mi100s(n: usize) -> Topology {
    TopologyBuilder::new()
        .cpus(1)
        .gpus(n, &GpuSpec::mi100())
        .build()
}

/// Writes `t` as a sysfs tree into a new temporary directory.
fn tree(t: &Topology) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    topology::write(t, dir.path()).unwrap();
    dir
}

/// A directory with KFD image 7 of a process on `t`: one 64 KiB VRAM BO per GPU, its pages
/// files (with checksums when `checksums`), the message changed by `change` before it is
/// written.
fn image_dir_with(t: &Topology, checksums: bool, change: impl FnOnce(&mut CriuKfd)) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = File::open(dir.path()).unwrap();
    let gpus: Vec<u32> = t.gpus().map(|g| g.gpu_id).collect();
    let device_entries = amdgpu_plugin::topology_image::to_device_entries(t);
    let bo_entries: Vec<KfdBoEntry> = gpus
        .iter()
        .enumerate()
        .map(|(i, &gpu_id)| KfdBoEntry {
            addr: 0x7f00_0000_0000 + (i as u64) * 0x1000_0000,
            size: 64 << 10,
            offset: 0x1_0000_0000 * (i as u64 + 1),
            alloc_flags: AllocFlags::VRAM.bits(),
            gpu_id,
            handle: u32::MAX,
        })
        .collect();
    let mut pages_checksums = Vec::new();
    for &gpu in &gpus {
        let len = images::pages::kfd_pages_len(&bo_entries, gpu);
        let which = PagesFile::Kfd { id: 7, gpu_id: gpu };
        let mut w = PagesWriter::new(d.as_fd(), which, len, checksums.then_some(16 << 10)).unwrap();
        w.write_chunk(&vec![0x5a; len as usize]).unwrap();
        pages_checksums.extend(w.finish().unwrap());
    }
    let num_of_gpus = gpus.len() as u32;
    let mut msg = CriuKfd {
        pid: 4242,
        num_of_gpus,
        num_of_cpus: device_entries.len() as u32 - num_of_gpus,
        device_entries,
        num_of_bos: bo_entries.len() as u64,
        bo_entries,
        num_of_objects: 2,
        priv_data: vec![0xa5; 1024],
        pages_checksums,
        ..Default::default()
    };
    change(&mut msg);
    KfdImage::write(d.as_fd(), 7, &msg).unwrap();
    dir
}

fn image_dir(t: &Topology) -> TempDir {
    image_dir_with(t, true, |_| {})
}

fn p(dir: &Path) -> &str {
    dir.to_str().unwrap()
}

/// Runs the binary with `args` and no `KFD_*_CHECK` or topology variable; `(code, stdout,
/// stderr)`.
fn amdgpu_cr(args: &[&str]) -> (i32, String, String) {
    run(Command::new(env!("CARGO_BIN_EXE_amdgpu-cr")).args(args))
}

fn run(cmd: &mut Command) -> (i32, String, String) {
    for c in Check::ALL {
        cmd.env_remove(c.env_var());
    }
    cmd.env_remove("AMDGPU_CR_TOPOLOGY_ROOT");
    // No command may need much memory here: a reader that reads /dev/zero to its end fails
    // at once instead of growing until the OOM killer comes.
    // SAFETY: setrlimit(2) only, between fork and exec; it allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 4 << 30,
                rlim_max: 4 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = finish_or_kill(child);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits for `child`; one that has not ended after a minute is blocked for good (a FIFO read
/// waits for a writer forever): it is killed, and the test fails saying so.
fn finish_or_kill(mut child: std::process::Child) -> std::process::Output {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "the command blocked and was killed; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo(3) with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

// ---------------------------------------------------------------------------------------------
// 1. One verdict for one directory

/// What a restore refuses, inspect counts as a problem and check refuses: the same exit status
/// from both, and each names the fault. (Before: `inspect --verify` said "Result: ok" for
/// `num_of_gpus` 1000000 with 2 entries, or for private data far too short, and a dma-buf of a
/// buffer no image creates.)
#[rstest]
#[case::num_of_gpus(|m: &mut CriuKfd| m.num_of_gpus = 1_000_000, "num_of_gpus is 1000000 but the image lists 2 GPU entries")]
#[case::num_of_bos(|m: &mut CriuKfd| m.num_of_bos = 5, "num_of_bos is 5 but the image lists 2 BO entries")]
#[case::bo_of_no_gpu(|m: &mut CriuKfd| m.bo_entries[1].gpu_id = 0x77, "1 BO is on GPU 0x0077, which has no device entry")]
#[case::short_private_data(|m: &mut CriuKfd| m.num_of_objects = 1000, "the driver's private data holds 1024 bytes")]
#[case::sound(|_: &mut CriuKfd| {}, "")]
fn inspect_and_check_give_one_verdict(#[case] change: fn(&mut CriuKfd), #[case] says: &str) {
    let t = mi100s(2);
    let root = tree(&t);
    let dir = image_dir_with(&t, true, change);
    let (inspect, i_out, i_err) = amdgpu_cr(&["inspect", "--verify", p(dir.path())]);
    let (check, c_out, c_err) =
        amdgpu_cr(&["check", p(dir.path()), "--topology-root", p(root.path())]);
    let sound = says.is_empty();
    assert_eq!(inspect, i32::from(!sound), "{i_out}{i_err}");
    assert_eq!(check, inspect, "{c_out}{c_err}");
    assert!(
        i_out.contains(says) && c_out.contains(says),
        "{i_out}\n{c_out}"
    );
    // The summary says no more than the rows: this plugin does not restore all of a directory
    // with a problem.
    assert_eq!(
        i_out.contains("this plugin (amdgpu-cr): restores all of it"),
        sound,
        "{i_out}"
    );
}

#[test]
fn a_dmabuf_of_a_buffer_no_image_creates_is_refused_by_both() {
    let t = mi100s(2);
    let root = tree(&t);
    let dir = image_dir(&t);
    let d = File::open(dir.path()).unwrap();
    DmabufImage::write(d.as_fd(), 9, &CriuDmabufNode { gem_handle: 3 }).unwrap();
    let (inspect, i_out, _) = amdgpu_cr(&["inspect", p(dir.path())]);
    let (check, c_out, _) = amdgpu_cr(&["check", p(dir.path()), "--topology-root", p(root.path())]);
    assert_eq!((inspect, check), (1, 1), "{i_out}\n{c_out}");
    let says = "amdgpu-dmabuf_9.img: GEM handle 3: PROBLEM: it imports the buffer shared as GEM \
                handle 3, which no image of the directory creates";
    assert!(i_out.contains(says), "{i_out}");
    assert!(
        c_out.contains("amdgpu-dmabuf_9.img: it imports the buffer shared as GEM handle 3"),
        "{c_out}"
    );
}

/// A render-node buffer's pages file that is missing or damaged: inspect's row says so and
/// check refuses the render node. (Before: check read only the KFD image's pages files and said
/// "restorable here".)
#[rstest]
#[case::missing(None, "MISSING")]
#[case::damaged(Some(100), "CORRUPT")]
fn a_render_pages_file_gets_one_verdict(#[case] flip: Option<u64>, #[case] row: &str) {
    let t = mi100s(1);
    let root = tree(&t);
    let dir = image_dir(&t);
    let d = File::open(dir.path()).unwrap();
    let gpu = t.gpus().next().unwrap();
    let minor = gpu.render_minor();
    let which = PagesFile::Drm {
        id: 8,
        minor,
        index: 0,
    };
    let mut w = PagesWriter::new(d.as_fd(), which, 8192, Some(4096)).unwrap();
    w.write_chunk(&[0x33; 8192]).unwrap();
    let render = CriuRenderNode {
        gpu_id: gpu.gpu_id,
        id: 8,
        drm_render_minor: minor,
        num_of_bos: 1,
        bo_entries: vec![DrmBoEntry {
            size: 8192,
            handle: 1,
            ..Default::default()
        }],
        pages_checksums: w.finish().unwrap().into_iter().collect(),
    };
    RenderNodeImage::write(d.as_fd(), 8, &render).unwrap();
    let file = dir.path().join(which.file_name());
    match flip {
        None => std::fs::remove_file(&file).unwrap(),
        Some(at) => {
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
            f.write_all_at(&[0xff], at).unwrap();
        }
    }
    let (inspect, i_out, _) = amdgpu_cr(&["inspect", "--verify", p(dir.path())]);
    let (check, c_out, _) = amdgpu_cr(&["check", p(dir.path()), "--topology-root", p(root.path())]);
    assert_eq!((inspect, check), (1, 1), "{i_out}\n{c_out}");
    assert!(i_out.contains(row), "{i_out}");
    assert!(
        c_out.contains(&format!(
            "amdgpu-renderD-8.img: NOT restorable: {}",
            which.file_name()
        )),
        "{c_out}"
    );
}

/// Files read without checksums are not "verified" in the summary line. (Before: "all pages
/// files read and verified" above rows saying "no checksums".)
#[test]
fn inspect_verify_without_checksums_says_none_was_verified() {
    let dir = image_dir_with(&mi100s(2), false, |_| {});
    let (code, out, err) = amdgpu_cr(&["inspect", "--verify", p(dir.path())]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ok (read; no checksums)"), "{out}");
    assert!(
        out.contains("Result: ok (all pages files read; none has checksums, so none was verified)"),
        "{out}"
    );
    assert!(!out.contains("read and verified"), "{out}");
}

// ---------------------------------------------------------------------------------------------
// 2. Bounded reads, special files refused

/// A topology file that is `/dev/zero` or a FIFO: every command that reads a topology says
/// which file and what it is, exit 2, at once. (Before: memory grew until the OOM killer, or the
/// command waited forever.)
#[rstest]
fn special_files_in_a_topology_are_refused(
    #[values("zero", "fifo", "huge")] kind: &str,
    #[values("topology", "check", "map")] command: &str,
) {
    let t = mi100s(2);
    let root = tree(&t);
    let images = image_dir(&t);
    let file = root.path().join("nodes/1/properties");
    std::fs::remove_file(&file).unwrap();
    let says = match kind {
        "zero" => {
            std::os::unix::fs::symlink("/dev/zero", &file).unwrap();
            "it is a character device, not a regular file"
        }
        "fifo" => {
            mkfifo(&file);
            "it is a FIFO, not a regular file"
        }
        _ => {
            std::fs::write(&file, "simd_count 0\n".repeat(100_000)).unwrap();
            "more than the kernel writes there"
        }
    };
    let root_s = p(root.path());
    let args: Vec<&str> = match command {
        "topology" => vec!["topology", "--topology-root", root_s],
        "check" => vec!["check", p(images.path()), "--topology-root", root_s],
        _ => vec!["map", "--from", root_s, "--to", root_s],
    };
    let (code, out, err) = amdgpu_cr(&args);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains(&file.display().to_string()), "{err}");
    assert!(err.contains(says), "{err}");
}

/// Image files that are special files: named, refused, at once, by both commands.
#[rstest]
fn special_image_files_are_refused(
    #[values("zero", "fifo")] kind: &str,
    #[values("amdgpu-kfd-7.img", "amdgpu-pages-7-%.img")] name: &str,
) {
    let t = mi100s(1);
    let root = tree(&t);
    let dir = image_dir(&t);
    let name = name.replace('%', &format!("{:04x}", t.gpus().next().unwrap().gpu_id));
    let file = dir.path().join(&name);
    std::fs::remove_file(&file).unwrap();
    if kind == "zero" {
        std::os::unix::fs::symlink("/dev/zero", &file).unwrap();
    } else {
        mkfifo(&file);
    }
    for args in [
        vec!["inspect", "--verify", p(dir.path())],
        vec!["check", p(dir.path()), "--topology-root", p(root.path())],
    ] {
        let (code, out, err) = amdgpu_cr(&args);
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        assert!(
            out.contains(&name) && out.contains("not a regular file"),
            "{out}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Exit codes

/// An image the user may not read is an I/O error (exit 2) saying so. (Before: "NOT
/// restorable", exit 1, as if the checkpoint were damaged.)
#[test]
fn an_image_the_user_may_not_read_is_an_io_error() {
    use std::os::unix::fs::PermissionsExt;
    let t = mi100s(1);
    let root = tree(&t);
    let dir = image_dir(&t);
    let set = |path: &Path, mode| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    // The images are root's, mode 0600, in a directory others may list (as criu leaves them).
    set(dir.path(), 0o755);
    set(root.path(), 0o755);
    for e in std::fs::read_dir(dir.path()).unwrap() {
        set(&e.unwrap().path(), 0o600);
    }
    // SAFETY: geteuid(2) has no preconditions.
    let root_user = unsafe { libc::geteuid() } == 0;
    for args in [
        vec!["inspect", p(dir.path())],
        vec!["check", p(dir.path()), "--topology-root", p(root.path())],
    ] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_amdgpu-cr"));
        cmd.args(&args);
        if root_user {
            cmd.uid(65534).gid(65534); // nobody
        } else {
            for e in std::fs::read_dir(dir.path()).unwrap() {
                set(&e.unwrap().path(), 0o000);
            }
        }
        let (code, out, err) = run(&mut cmd);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert_eq!(out, "");
        assert!(
            err.contains("amdgpu-kfd-7.img: permission denied; run as the user who can read it"),
            "{err}"
        );
    }
}

/// Orphan pages files are files too: the refused never outnumber the whole. (Before: "2 of 1
/// image files refused".)
#[test]
fn checks_counts_add_up() {
    let t = mi100s(1);
    let root = tree(&t);
    let dir = image_dir(&t);
    for name in ["amdgpu-pages-3-1234.img", "amdgpu-pages-4-1234.img"] {
        std::fs::write(dir.path().join(name), "stale").unwrap();
    }
    let (code, out, _) = amdgpu_cr(&["check", p(dir.path()), "--topology-root", p(root.path())]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("Result: NOT restorable here (2 of 3 image files refused)"),
        "{out}"
    );
}

/// Two GPUs with one render minor are refused as two with one gpu_id are. (Before: parsed, and
/// one render node stood for two GPUs.)
#[test]
fn a_duplicate_render_minor_is_refused() {
    let t = mi100s(2);
    let root = tree(&t);
    let minors: Vec<u32> = t.gpus().map(topology::Node::render_minor).collect();
    let second = t.gpus().nth(1).unwrap().id;
    let props = root.path().join(format!("nodes/{second}/properties"));
    let text = std::fs::read_to_string(&props).unwrap().replace(
        &format!("drm_render_minor {}\n", minors[1]),
        &format!("drm_render_minor {}\n", minors[0]),
    );
    std::fs::write(&props, text).unwrap();
    let first = t.gpus().next().unwrap().id;
    let (code, out, err) = amdgpu_cr(&["topology", "--topology-root", p(root.path())]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains(&format!(
            "{}: drm_render_minor {} is also node {first}'s",
            props.display(),
            minors[0]
        )),
        "{err}"
    );
}

/// `--devices` allowing fewer GPUs than the image has: the refusal counts both. (Before: only
/// "this node has only 1".)
#[test]
fn a_devices_refusal_says_what_the_node_has_and_the_list_allows() {
    let t = mi100s(2);
    let root = tree(&t);
    let dir = image_dir(&t);
    let minor = t.gpus().next().unwrap().render_minor();
    let device = format!("/dev/dri/renderD{minor}");
    let (code, out, _) = amdgpu_cr(&[
        "check",
        p(dir.path()),
        "--topology-root",
        p(root.path()),
        "--devices",
        &device,
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "--devices: the node has 2 GPUs, the devices given allow 1; the image needs 2"
        ),
        "{out}"
    );
}

/// A `--devices` list refused for what it names counts the node's GPUs and what it allows.
#[rstest]
#[case::not_a_gpu(
    "/dev/kfd,/dev/dri/renderD128,/dev/dri/renderD200",
    "/dev/dri/renderD200 is not a GPU of the topology at ROOT: the node has 2 GPUs (renderD128, \
     renderD129), the list allows 1 so far"
)]
#[case::none(
    "/dev/kfd",
    "no render node listed, so the list allows 0 GPUs; a container needs at least one GPU's (the \
     node has 2 GPUs: renderD128, renderD129)"
)]
fn a_refused_device_list_counts(#[case] devices: &str, #[case] says: &str) {
    let t = mi100s(2);
    let root = tree(&t);
    let dir = image_dir(&t);
    let (code, out, err) = amdgpu_cr(&[
        "check",
        p(dir.path()),
        "--topology-root",
        p(root.path()),
        "--devices",
        devices,
    ]);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(err.contains(&says.replace("ROOT", p(root.path()))), "{err}");
}

// ---------------------------------------------------------------------------------------------
// 4, 5. demo: interrupts, --dir over a checkpoint

/// Ctrl-C during the dump: nothing more on stdout (no "FAILED" for a run the user stopped), no
/// directory left, exit 130. (Before: "FAILED: the dump failed: ..." of the directory the
/// cleanup removed, and the next phase could start.)
#[test]
fn an_interrupted_demo_ends_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_amdgpu-cr"))
        .args(["demo", "--preset", "mi250x8", "--vram-mib", "64,64"])
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the dump writes pages files, then interrupt it.
    let dumping = || {
        std::fs::read_dir(tmp.path())
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("amdgpu-cr-demo-")
            })
            .any(|e| {
                std::fs::read_dir(e.path())
                    .into_iter()
                    .flatten()
                    .flatten()
                    .any(|f| f.file_name().to_string_lossy().starts_with("amdgpu-pages-"))
            })
    };
    let mut child = child;
    while !dumping() {
        assert!(child.try_wait().unwrap().is_none(), "the demo ended early");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) with the pid of our own child and a signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let out = finish_or_kill(child);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(130), "{stdout}{stderr}");
    assert_eq!(stdout, "", "{stderr}");
    assert!(!stderr.contains("FAILED"), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().flatten().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Once an interrupt is taken (what the binary's signal thread marks before its cleanup), no
/// report is written and no temporary directory is made: deterministic, whatever phase the
/// signal falls in. (Before: a report of the failure the cleanup caused was printed, and a
/// phase starting after the signal made its directories anew.) nextest runs each test in its
/// own process, so the mark stays here.
#[test]
fn after_an_interrupt_nothing_is_written_or_made() {
    use amdgpu_cr::{interrupt, CliError, Format, Report};
    let t = mi100s(1);
    let report = amdgpu_cr::topo::TopologyReport::new("ROOT", &t);
    let parent = tempfile::tempdir().unwrap();
    interrupt::begin();
    let mut out = Vec::new();
    assert!(matches!(
        report.emit(Format::Text, &mut out),
        Err(CliError::Interrupted(_))
    ));
    assert!(out.is_empty());
    let made = interrupt::ScratchDir::new(parent.path(), "amdgpu-cr-demo-");
    assert_eq!(made.unwrap_err().kind(), std::io::ErrorKind::Interrupted);
    assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
}

/// A second checkpoint into a directory that holds one is refused, or replaces it with
/// `--force`; either way `inspect` then finds one sound checkpoint. (Before: mixed into the
/// first, which inspect reported as 14 problems.)
#[test]
fn demo_dir_over_a_checkpoint_is_refused_or_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let demo = |preset: &str, extra: &[&str]| {
        let mut args = vec![
            "demo",
            "--preset",
            preset,
            "--vram-mib",
            "1",
            "--gtt-mib",
            "1",
        ];
        args.extend(["--dir", p(dir.path())]);
        args.extend(extra);
        amdgpu_cr(&args)
    };
    let (code, _, err) = demo("mi210x2", &[]);
    assert_eq!(code, 0, "{err}");
    let before = std::fs::read_dir(dir.path()).unwrap().count();
    let (code, out, err) = demo("mi50x1", &[]);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(err.contains("already holds"), "{err}");
    assert!(err.contains("--force"), "{err}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), before);
    let (code, _, err) = demo("mi50x1", &["--force"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = amdgpu_cr(&["inspect", p(dir.path())]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("1 GPU, "), "{out}");
}

// ---------------------------------------------------------------------------------------------
// 7. Small things

/// Every count agrees with its noun. (Before: "pid 4242, 1 GPUs", "(1 GPUs)", "1 GPUs, 1 CPU
/// nodes, 1 BOs".)
#[test]
fn counts_of_one_are_singular() {
    let t = mi100s(1);
    let root = tree(&t);
    let dir = image_dir_with(&t, true, |m| m.num_of_objects = 1);
    let (_, check, _) = amdgpu_cr(&["check", p(dir.path()), "--topology-root", p(root.path())]);
    assert!(check.contains("(1 GPU)\n"), "{check}");
    assert!(check.contains("(pid 4242, 1 GPU)"), "{check}");
    let (_, inspect, _) = amdgpu_cr(&["inspect", p(dir.path())]);
    assert!(
        inspect.contains("1 GPU, 1 CPU node, 1 BO, 1 object, priv_data"),
        "{inspect}"
    );
    assert!(
        inspect.contains("present for 1 of 1 GPU with contents"),
        "{inspect}"
    );
}

/// `--topology-root` for every command that reads one tree; the old names still work.
#[rstest]
#[case::topology(&["topology"], "--topology-root")]
#[case::topology_old(&["topology"], "--root")]
#[case::check(&["check", "IMAGES"], "--topology-root")]
#[case::check_old(&["check", "IMAGES"], "--topology")]
fn one_flag_names_a_topology_root(#[case] command: &[&str], #[case] flag: &str) {
    let t = mi100s(1);
    let root = tree(&t);
    let dir = image_dir(&t);
    let mut args: Vec<&str> = command
        .iter()
        .map(|&a| if a == "IMAGES" { p(dir.path()) } else { a })
        .collect();
    args.extend([flag, p(root.path())]);
    let (code, out, err) = amdgpu_cr(&args);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn bench_judge_on_a_missing_directory_says_so() {
    let (code, out, err) = amdgpu_cr(&["bench", "--judge", "/nonexistent/bench"]);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(
        err.contains("--judge /nonexistent/bench: No such file"),
        "{err}"
    );
}

/// The README's command table names every flag of every command.
#[test]
fn the_readme_command_table_lists_every_flag() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let cmd = amdgpu_cr::app::Cli::command();
    for sub in cmd.get_subcommands() {
        let start = format!("| `amdgpu-cr {}", sub.get_name());
        let row = readme
            .lines()
            .find(|l| l.starts_with(&start))
            .unwrap_or_else(|| panic!("no row for {} in README's command table", sub.get_name()));
        for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
            if let Some(long) = arg.get_long().filter(|l| *l != "help") {
                assert!(
                    row.contains(&format!("--{long}")),
                    "README's row of {} lacks --{long}: {row}",
                    sub.get_name()
                );
            }
        }
    }
}

/// A man page per command, from the clap definitions, written where `man` finds them; shell
/// completions printed for the shells clap_complete knows.
#[test]
fn man_pages_and_completions_are_generated() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("man1");
    let (code, out, err) = amdgpu_cr(&["man", "--out", p(&out_dir)]);
    assert_eq!(code, 0, "{err}");
    let cmd = amdgpu_cr::app::Cli::command();
    let mut names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| format!("amdgpu-cr-{}.1", s.get_name()))
        .collect();
    names.push("amdgpu-cr.1".to_owned());
    for name in &names {
        let page = std::fs::read_to_string(out_dir.join(name)).unwrap();
        assert!(page.contains(".TH"), "{name}");
        assert!(out.contains(name), "{out}");
    }
    let check = std::fs::read_to_string(out_dir.join("amdgpu-cr-check.1")).unwrap();
    assert!(check.contains("topology\\-root"), "{check}");
    for shell in ["bash", "zsh", "fish"] {
        let (code, script, err) = amdgpu_cr(&["completions", shell]);
        assert_eq!(code, 0, "{err}");
        assert!(script.contains("topology-root"), "{shell}: {script}");
    }
}
