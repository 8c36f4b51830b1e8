//! `amdgpu-cr demo` end to end through the binary: it exits 0 only when every byte was verified,
//! and non-zero, saying what differed, when the image was damaged.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn demo(extra: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_amdgpu-cr"))
        .args(["demo", "--vram-mib", "2,1", "--gtt-mib", "1"])
        .args(extra)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn a_clean_run_verifies_every_byte_and_exits_0() {
    let (code, out) = demo(&[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("every byte matches"), "{out}");
    assert!(out.contains("GPU mapping at restore"), "{out}");
    assert!(out.contains("amdgpu-kfd-1.img"), "{out}");
}

#[test]
fn a_corrupt_image_with_checksums_is_refused_at_restore() {
    let (code, out) = demo(&["--corrupt-pages"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("checksum"), "{out}");
}

#[test]
fn a_corrupt_image_without_checksums_fails_verification_naming_the_byte() {
    let (code, out) = demo(&["--corrupt-pages", "--no-checksums"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("VERIFICATION FAILED") && out.contains("byte"),
        "{out}"
    );
}

/// The JSON document: schema_version, ids as hex strings, named fields (no Rust `Ok`/`Err`
/// wrappers, no pairs); only the times vary between runs.
#[test]
fn json_output_is_the_documented_report() {
    let out = Command::new(env!("CARGO_BIN_EXE_amdgpu-cr"))
        .args(["demo", "--vram-mib", "2,1", "--gtt-mib", "1"])
        .args(["--json", "--preset", "mi50x1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let mut v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["verification"]["result"], "verified");
    for phase in ["dump", "restore"] {
        assert!(v[phase]["seconds"].as_f64().unwrap() > 0.0);
        v[phase]["seconds"] = 0.into();
    }
    insta::assert_json_snapshot!("demo_mi50x1_json", v);
}

fn run(args: &[&str], env: &[(&str, &std::path::Path)]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_amdgpu-cr"));
    cmd.arg("demo").args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Usage and I/O errors: exit 2, the message on stderr, nothing on stdout (also with --json),
/// a limit named where a value is out of range. (Before: the message on stdout, exit 1, or the
/// simulated driver's EINVAL/ENOMEM.)
#[rstest::rstest]
#[case::unknown_preset(&["--preset", "bogus", "--json"], "possible values: mi50x1, mi100x4")]
#[case::dir_that_cannot_be_made(&["--dir", "/proc/x", "--json"], "--dir: creating /proc/x")]
#[case::zero_mib(&["--vram-mib", "0"], "below the minimum of 1")]
#[case::more_than_the_vram(&["--vram-mib", "100000"], "mi210x2 has 65536 MiB of VRAM per GPU")]
#[case::octal_is_not_a_thing(&["--vram-mib", "0x10"], "not a whole number")]
fn errors_go_to_stderr_and_exit_2(#[case] args: &[&str], #[case] says: &str) {
    let (code, out, err) = run(args, &[]);
    assert_eq!(code, 2, "{out}{err}");
    assert_eq!(out, "");
    assert!(err.contains(says), "{err}");
}

#[test]
fn a_regular_file_as_dir_is_named_as_not_a_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let (code, out, err) = run(&["--dir", file.to_str().unwrap()], &[]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(err.contains("not a directory"), "{err}");
    assert!(!err.contains("File exists"), "{err}");
}

/// Files that were in `--dir` before (not amdgpu images: those are refused) are counted, not
/// listed as the dump's.
#[test]
fn files_already_in_dir_are_not_listed_as_written() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("notes-9.img"), "old").unwrap();
    let (code, out, err) = run(
        &[
            "--preset",
            "mi50x1",
            "--vram-mib",
            "1",
            "--dir",
            tmp.path().to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["other_files"], 1);
    let names: Vec<&str> = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert!(!names.contains(&"notes-9.img"), "{names:?}");
    assert!(names.contains(&"amdgpu-kfd-1.img"), "{names:?}");
}

/// Ctrl-C during a demo: its temporary image directory and the simulated nodes' topology
/// directories are removed, and it exits 128 + SIGINT. (Before: 257 MiB left for mi250x8.)
#[test]
fn an_interrupted_demo_leaves_nothing_in_the_temporary_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_amdgpu-cr"))
        .args(["demo", "--preset", "mi250x8", "--vram-mib", "64,64"])
        .env("TMPDIR", tmp.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the demo has made its image directory (it is registered before it exists).
    let made = |prefix: &str| {
        std::fs::read_dir(tmp.path())
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(prefix))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !(made("amdgpu-cr-demo-") && made("amdgpu-cr-topology-")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the demo made no directories"
        );
        assert!(child.try_wait().unwrap().is_none(), "the demo ended early");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) with the pid of our own child and a signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + libc::SIGINT), "{err}");
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}; {err}");
}
