//! The layering rests on the dependency graph, not on the linker: what criu loads
//! (`amdgpu_plugin.so`, the `plugin` package) depends on neither the simulator nor the CLI's
//! crates, `topology` does not depend on the image format, the simulated node (`harness`)
//! on no CLI crate, and the shader core (`kfd-shader`) knows neither the simulator nor the
//! operating system. Asked of `cargo tree` (normal edges: dev-dependencies may use anything
//! below the CLI), offline, on the workspace's own lock file. Nothing builds on the CLI package
//! `amdgpu-cr`, not even tests (`tests`, `fuzz` use `harness`); and only binaries parse
//! arguments: no library source of `kfd-sim` or `harness` names `clap`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use rstest::rstest;

/// The names of the packages in `package`'s graph of normal dependencies, itself included.
fn normal_dependencies(package: &str) -> BTreeSet<String> {
    dependencies(package, "normal")
}

/// The names of the packages in `package`'s graph of dependencies of the `edges` kinds (as
/// `cargo tree --edges` takes them), itself included.
fn dependencies(package: &str, edges: &str) -> BTreeSet<String> {
    let manifest = workspace().join("Cargo.toml");
    let out = Command::new(env!("CARGO"))
        .args(["tree", "--frozen", "--edges", edges, "--prefix", "none"])
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
#[case::the_simulated_node(
    "harness",
    &["plugin", "kfd-sim", "kfd-abi"],
    &["amdgpu-cr", "indicatif"]
)]
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

/// The workspace's top directory.
fn workspace() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

#[rstest]
#[case::the_integration_tests("tests")]
#[case::the_fuzz_targets("fuzz")]
#[case::the_simulated_node("harness")]
fn nothing_builds_on_the_cli_package_not_even_tests(#[case] package: &str) {
    let names = dependencies(package, "normal,build,dev");
    assert!(
        names.contains("harness") || package == "harness",
        "{package} should build on the simulated node (harness); cargo tree lists {names:?}"
    );
    assert!(
        !names.contains("amdgpu-cr"),
        "{package} must not depend on the CLI package amdgpu-cr (of any kind): {names:?}; what \
         it needs of the CLI belongs in harness"
    );
}

/// The Rust files under `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
}

#[rstest]
#[case::the_simulator("kfd-sim")]
#[case::the_simulated_node("harness")]
fn only_binaries_parse_arguments(#[case] package: &str) {
    let src = workspace().join(package).join("src");
    let files = rust_files(&src);
    // The tree was read: the library's root is among the files.
    assert!(files.contains(&src.join("lib.rs")), "{files:?}");
    let bins = src.join("bin");
    let naming_clap: Vec<_> = files
        .iter()
        .filter(|f| !f.starts_with(&bins) && f != &&src.join("main.rs"))
        .filter(|f| std::fs::read_to_string(f).unwrap().contains("clap"))
        .collect();
    assert!(
        naming_clap.is_empty(),
        "{package}'s library must not use clap (argument parsing belongs in its binaries, \
         src/bin/): {naming_clap:?}"
    );
}

/// The lines of a source file before its unit tests (`#[cfg(test)]` at the top level).
fn lines_before_tests(text: &str) -> usize {
    text.lines()
        .position(|l| l.starts_with("#[cfg(test)]"))
        .unwrap_or_else(|| text.lines().count())
}

#[rstest]
#[case::the_bindings("kfd-sys")]
#[case::typed_ioctls("kfd-abi")]
#[case::the_simulator("kfd-sim")]
#[case::the_shader_core("kfd-sim/shader")]
#[case::topology("topology")]
#[case::images("images")]
#[case::the_plugin("plugin")]
#[case::the_simulated_node("harness")]
#[case::the_cli("cli")]
fn no_source_file_mixes_more_than_it_can_say_in_900_lines(#[case] package: &str) {
    const MOST: usize = 900;
    let src = workspace().join(package).join("src");
    let files = rust_files(&src);
    assert!(!files.is_empty(), "no Rust files under {}", src.display());
    // Generated code (bindgen, prost) is as long as what it is generated from.
    let generated = |f: &Path| {
        f.file_name().is_some_and(|n| n == "bindings.rs") || f.starts_with(src.join("proto"))
    };
    let long: Vec<_> = files
        .iter()
        .filter(|f| !generated(f))
        .filter_map(|f| {
            let n = lines_before_tests(&std::fs::read_to_string(f).unwrap());
            (n > MOST).then(|| format!("{} ({n} lines)", f.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "{package}: over {MOST} lines before their unit tests; split them along what they hold: \
         {long:?}"
    );
}
