//! The sysfs tree of every preset, as the simulator's platform writes it, and the kfd-simd CLI.

#![allow(clippy::unwrap_used)] // test helpers, like the tests themselves, panic on failure

use std::fmt::Write as _;
use std::path::Path;

use kfd_sim::{Machine, Preset, SimPlatform};
use rstest::rstest;

/// Every file under `root`, in path order (numeric components compared as numbers).
fn render(root: &Path) -> String {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(root, &mut files);
    let key = |p: &std::path::PathBuf| {
        p.strip_prefix(root)
            .unwrap()
            .components()
            .map(|c| {
                let s = c.as_os_str().to_string_lossy().into_owned();
                (s.parse::<u64>().unwrap_or(u64::MAX), s)
            })
            .collect::<Vec<_>>()
    };
    files.sort_by_key(key);
    let mut text = String::new();
    for f in files {
        let rel = f.strip_prefix(root).unwrap().display().to_string();
        let content = std::fs::read_to_string(&f).unwrap();
        if rel.contains("/caches/") {
            let _ = writeln!(text, "== {rel}: {}", cache_line(&content));
        } else {
            let _ = write!(text, "== {rel}\n{content}");
        }
    }
    text
}

/// A cache's properties on one line, without the keys that are 0, the 256-bit sibling map as the
/// positions of its set bits (a GPU lists hundreds of caches; the full format is in topology's
/// own tests, and every tree here is parsed back and compared whole).
fn cache_line(content: &str) -> String {
    content
        .lines()
        .filter(|line| !line.ends_with(" 0"))
        .map(|line| match line.strip_prefix("sibling_map ") {
            Some(bits) => {
                let set: Vec<String> = bits
                    .split(',')
                    .enumerate()
                    .filter(|(_, b)| *b == "1")
                    .map(|(i, _)| i.to_string())
                    .collect();
                let zeros = bits.split(',').count() - set.len();
                format!("sibling_map {{{}}} of {}", set.join(","), set.len() + zeros)
            }
            None => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[rstest]
#[case::mi50x1("mi50x1")]
#[case::mi100x4("mi100x4")]
#[case::mi210x2("mi210x2")]
#[case::mi250x8("mi250x8")]
fn preset_sysfs_tree(#[case] name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let machine = Machine::new(&Preset::by_name(name).unwrap()).unwrap();
    let platform = SimPlatform::new(machine, dir.path()).unwrap();
    assert_eq!(platform.topology_root(), dir.path());
    // The tree parses back to the machine's topology: sysfs and devices agree.
    assert_eq!(
        &topology::parse(dir.path()).unwrap(),
        platform.machine().topology()
    );
    insta::assert_snapshot!(name, render(dir.path()));
}

#[test]
fn kfd_simd_lists_presets_and_writes_trees_from_names_and_files() {
    let bin = env!("CARGO_BIN_EXE_kfd-simd");
    let out = std::process::Command::new(bin)
        .arg("presets")
        .output()
        .unwrap();
    assert!(out.status.success());
    let listed = String::from_utf8(out.stdout).unwrap();
    for (name, _) in kfd_sim::preset::BUILTIN {
        assert!(listed.contains(name), "{name} in {listed}");
    }

    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("mi100x4");
    let st = std::process::Command::new(bin)
        .args(["write-topology", "--preset", "mi100x4"])
        .arg(&tree)
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(
        topology::parse(&tree).unwrap(),
        Preset::mi100x4().to_topology().unwrap()
    );

    // A user's own node, as a TOML file: an older firmware and other gpu_ids.
    let custom = Preset::mi210x2()
        .with_name("my-node")
        .with_gpu_ids(&[0x1111, 0x2222])
        .with_fw_version(60);
    let file = dir.path().join("node.toml");
    std::fs::write(&file, custom.to_toml()).unwrap();
    let tree = dir.path().join("custom");
    let st = std::process::Command::new(bin)
        .args(["write-topology", "--file"])
        .arg(&file)
        .arg(&tree)
        .status()
        .unwrap();
    assert!(st.success());
    let t = topology::parse(&tree).unwrap();
    assert_eq!(
        t.gpus().map(|n| n.gpu_id).collect::<Vec<_>>(),
        [0x1111, 0x2222]
    );
    assert!(t.gpus().all(|n| n.prop("fw_version") == 60));

    let bad = std::process::Command::new(bin)
        .args(["write-topology", "--preset", "nope"])
        .arg(&tree)
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown preset"));
}

/// `write-topology` over another tree replaces it (before, the old tree's extra nodes stayed:
/// mi50x1 written over mi100x4 parsed as five GPUs), and a directory holding anything else is
/// refused untouched.
#[test]
fn write_topology_replaces_a_tree_and_refuses_a_foreign_directory() {
    let bin = env!("CARGO_BIN_EXE_kfd-simd");
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("topology");
    let write = |preset: &str, to: &std::path::Path| {
        std::process::Command::new(bin)
            .args(["write-topology", "--preset", preset])
            .arg(to)
            .output()
            .unwrap()
    };
    assert!(write("mi100x4", &tree).status.success());
    assert!(write("mi50x1", &tree).status.success());
    assert_eq!(
        topology::parse(&tree).unwrap(),
        Preset::mi50x1().to_topology().unwrap()
    );
    std::fs::write(tree.join("notes.txt"), "mine\n").unwrap();
    let out = write("mi100x4", &tree);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"notes.txt\", which is not part of a KFD topology tree"),
        "{err}"
    );
    assert_eq!(
        topology::parse(&tree).unwrap(),
        Preset::mi50x1().to_topology().unwrap()
    );
}

#[test]
fn sim_platform_implements_the_engines_platform_seam() {
    use kfd_abi::{DeviceKind, Platform};
    use std::os::fd::AsFd;
    let dir = tempfile::tempdir().unwrap();
    let machine = Machine::new(&Preset::mi100x4()).unwrap();
    let minor = machine.render_minors()[2];
    let platform = SimPlatform::new(machine, dir.path()).unwrap();
    assert_eq!(Platform::topology_root(&platform), dir.path());
    let kfd = platform.open_kfd().unwrap();
    assert_eq!(kfd.get_version().unwrap().minor, 11);
    let render = platform.open_render(minor).unwrap();
    assert_eq!(platform.identify(kfd.as_fd()).unwrap(), DeviceKind::Kfd);
    assert_eq!(
        platform.identify(render.as_fd()).unwrap(),
        DeviceKind::Render { minor }
    );
    let null = std::fs::File::open("/dev/null").unwrap();
    assert_eq!(platform.identify(null.as_fd()).unwrap(), DeviceKind::Other);
    let bo = render
        .gem_create(1 << 20, 0, kfd_abi::render::GemDomain::GTT, 0)
        .unwrap();
    let dmabuf = render.prime_handle_to_fd(bo).unwrap();
    assert_eq!(
        platform.identify(dmabuf.as_fd()).unwrap(),
        DeviceKind::DmaBuf
    );
    assert_eq!(
        platform.identify_rdev(libc::makedev(226, minor)),
        DeviceKind::Render { minor }
    );
    assert_eq!(
        platform.identify_rdev(libc::makedev(226, 1)),
        DeviceKind::Other
    );
    assert!(platform.open_render(7).is_err());
    // criu's dup of the target's /dev/kfd, wrapped by the tracing process's platform.
    let criu = platform.machine().spawn_process();
    criu.ptrace_attach(platform.process());
    let dup = kfd.as_fd().try_clone_to_owned().unwrap();
    let target = platform.for_process(&criu).kfd_from_fd(dup).unwrap();
    assert_eq!(
        target.criu_process_info().unwrap().pid,
        platform.process().pid()
    );
    let not_kfd = render.as_fd().try_clone_to_owned().unwrap();
    assert!(platform.kfd_from_fd(not_kfd).is_err());
}
