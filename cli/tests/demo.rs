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

#[test]
fn json_output_has_the_report() {
    let (code, out) = demo(&["--json", "--preset", "mi50x1"]);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["source"], "mi50x1");
    assert!(v["verified"]["Ok"]["bytes"].as_u64().unwrap() > 0);
}
