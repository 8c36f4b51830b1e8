//! `kfd-simd`'s command line as a user meets it: `--version`, and usage errors that exit 2 (as
//! amdgpu-cr's do) saying what the preset allows.

#![allow(clippy::unwrap_used)]

use rstest::rstest;

fn kfd_simd(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kfd-simd"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn version_prints_the_name_and_version() {
    let (code, out, err) = kfd_simd(&["--version"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("kfd-simd {}\n", env!("CARGO_PKG_VERSION")));
}

/// Before: extra gpu ids were dropped and missing ones kept their value, exit 0; an unknown
/// preset exited 1.
#[rstest]
#[case::too_many_gpu_ids(
    &["show", "mi210x2", "--gpu-ids", "1,2,3"],
    "--gpu-ids: 3 values given, but mi210x2 has 2 GPUs; give one per GPU"
)]
#[case::too_few_gpu_ids(
    &["show", "mi100x4", "--gpu-ids", "0x1111"],
    "--gpu-ids: 1 value given, but mi100x4 has 4 GPUs; give one per GPU"
)]
#[case::render_minors(
    &["show", "mi50x1", "--render-minors", "128,129"],
    "--render-minors: 2 values given, but mi50x1 has 1 GPU; give one per GPU"
)]
#[case::unknown_preset(&["show", "mi999"], "mi999")]
#[case::unknown_preset_to_write(&["write-topology", "--preset", "mi999", "/nonexistent"], "mi999")]
#[case::clap_own(&["show"], "NAME")]
fn usage_errors_exit_2(#[case] args: &[&str], #[case] says: &str) {
    let (code, out, err) = kfd_simd(args);
    assert_eq!(code, 2, "{out}{err}");
    assert_eq!(out, "");
    assert!(err.contains(says), "{err}");
}

#[test]
fn gpu_ids_one_per_gpu_are_taken() {
    let (code, out, err) = kfd_simd(&["show", "mi210x2", "--gpu-ids", "0x1111,0x2222"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("4369"), "{out}");
}
