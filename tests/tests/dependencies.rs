//! The layering rests on the dependency graph, not on the linker: what criu loads
//! (`amdgpu_plugin.so`, the `plugin` package) depends on neither the simulator nor the CLI's
//! crates, `topology` does not depend on the image format, and the shader core (`kfd-shader`)
//! knows neither the simulator nor the operating system. Asked of `cargo tree` (normal
//! edges only: dev-dependencies may use anything), offline, on the workspace's own lock file.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use rstest::rstest;

/// The names of the packages in `package`'s graph of normal dependencies, itself included.
fn normal_dependencies(package: &str) -> BTreeSet<String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let out = Command::new(env!("CARGO"))
        .args(["tree", "--frozen", "--edges", "normal", "--prefix", "none"])
        .args(["--format", "{p}", "--package", package, "--manifest-path"])
        .arg(&manifest)
        .env("CARGO_TERM_COLOR", "never")
        .output()
        .expect("run cargo tree");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo tree -p {package} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // Lines are `name vX.Y.Z [(source)] [(*)]`, the package itself first.
    let mut names = stdout
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .peekable();
    assert_eq!(
        names.peek().copied(),
        Some(package),
        "cargo tree does not start with the package itself:\n{stdout}"
    );
    names.map(str::to_owned).collect()
}

#[rstest]
#[case::the_plugin_criu_loads(
    "plugin",
    &["kfd-abi", "kfd-sys", "images", "topology"],
    &["kfd-sim", "clap", "indicatif", "amdgpu-cr"]
)]
#[case::topology("topology", &["log", "thiserror"], &["images", "prost", "kfd-sim"])]
#[case::the_shader_core_is_pure(
    "kfd-shader",
    &["half", "log", "thiserror"],
    &["kfd-sim", "kfd-abi", "kfd-sys", "libc", "rustix"]
)]
fn a_package_depends_on_what_its_role_needs_and_nothing_above_it(
    #[case] package: &str,
    #[case] present: &[&str],
    #[case] absent: &[&str],
) {
    let names = normal_dependencies(package);
    // The graph was read: the dependencies the package is built from are in it.
    for name in present {
        assert!(
            names.contains(*name),
            "{package} should depend on {name}; cargo tree lists {names:?}"
        );
    }
    for name in absent {
        assert!(
            !names.contains(*name),
            "{package} must not depend on {name} (normal dependencies, directly or not): \
             {names:?}; move the code that needs it to the package of its user"
        );
    }
}
