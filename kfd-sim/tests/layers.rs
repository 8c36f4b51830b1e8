//! The layers of the simulator's source, and the rule that keeps them: a module uses only modules
//! of its own layer or below (`kfd-sim/src/lib.rs` draws them). Read from the `use crate::`,
//! `use super::` and `use self::` lines and the `crate::...` paths of every file's product code
//! (its unit tests aside), so a new upward import fails here, naming the file and the line.

#![allow(clippy::unwrap_used)] // test helpers, like the tests themselves, panic on failure

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The layers, bottom up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Layer {
    /// The host OS glue and the description of the machine: everything may use them.
    Base,
    /// What the GPU does: memory, page tables, engines, the queue scheduler.
    Hardware,
    /// The state a kernel keeps: devices, processes, per-device data, BOs, queues, events, open
    /// files.
    State,
    /// The drivers: `/dev/kfd`'s ioctls and mmap, the render node's, and what they share.
    Driver,
    /// The front ends: in process, CUSE (with the kfd_bridge protocol).
    FrontEnd,
    /// The crate root: its re-exports name items of every layer.
    Top,
}

/// Files by their path below `src/`: an exact file, or a directory (ending in `/`). The longest
/// match wins.
const LAYERS: &[(&str, Layer)] = &[
    ("host.rs", Layer::Base),
    ("limits.rs", Layer::Base),
    ("asic.rs", Layer::Base),
    ("preset.rs", Layer::Base),
    ("sysfs.rs", Layer::Base),
    ("scratch.rs", Layer::Base),
    ("hw/", Layer::Hardware),
    ("machine.rs", Layer::State),
    ("device.rs", Layer::State),
    ("kfd/process.rs", Layer::State),
    ("kfd/queue.rs", Layer::State),
    ("kfd/event.rs", Layer::State),
    ("kfd/svm_range.rs", Layer::State),
    ("render/file.rs", Layer::State),
    ("client.rs", Layer::Driver),
    ("uaccess.rs", Layer::Driver),
    ("vma.rs", Layer::Driver),
    ("kfd/", Layer::Driver),
    ("render/", Layer::Driver),
    ("inproc/", Layer::FrontEnd),
    ("cuse/", Layer::FrontEnd),
    ("lib.rs", Layer::Top),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file of the library below `src/` (the binaries aside), as `a/b.rs`.
fn library_files() -> Vec<String> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            let path = format!("{rel}{name}");
            if e.file_type().unwrap().is_dir() {
                if path != "bin" {
                    walk(&e.path(), &format!("{path}/"), out);
                }
            } else if name.ends_with(".rs") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&src(), "", &mut out);
    out.sort();
    out
}

fn layer_of(file: &str) -> Option<Layer> {
    LAYERS
        .iter()
        .filter(|(p, _)| *p == file || (p.ends_with('/') && file.starts_with(p)))
        .max_by_key(|(p, _)| p.len())
        .map(|&(_, l)| l)
}

/// The module path of a file: `kfd/mod.rs` is `kfd`, `kfd/queue.rs` is `kfd::queue`.
fn module_of(file: &str) -> Vec<String> {
    let stem = file.trim_end_matches(".rs");
    let mut parts: Vec<String> = stem.split('/').map(str::to_owned).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The product code of a file: up to its unit tests, without comments.
fn product_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((i, line)) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]")
            && lines.peek().is_some_and(|(_, next)| {
                let n = next.trim_start();
                n.starts_with("mod tests") || n.starts_with("pub(crate) mod tests")
            })
        {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        let code = match t.find("//") {
            Some(at) if !t[..at].contains('"') => &t[..at],
            _ => t,
        };
        out.push((i + 1, code.to_owned()));
    }
    out
}

/// The paths a `use` tree names: `a::{b, c::{d, e}}` gives `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or(tree).trim();
        return vec![path.trim_end_matches("::*").to_owned()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(expand)
        .map(|p| {
            if p == "self" {
                prefix.trim_end_matches("::").to_owned()
            } else {
                format!("{prefix}{p}")
            }
        })
        .collect()
}

/// Every crate-relative path the code names, with its line: `use` trees and inline `crate::`
/// paths.
fn named_paths(lines: &[(usize, String)]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (n, line) in lines {
        let stmt = match pending.take() {
            Some((first, mut acc)) => {
                acc.push(' ');
                acc.push_str(line);
                Some((first, acc))
            }
            None => {
                let t = line
                    .trim_start_matches("pub(crate) ")
                    .trim_start_matches("pub ");
                t.strip_prefix("use ").map(|rest| (*n, rest.to_owned()))
            }
        };
        if let Some((first, acc)) = stmt {
            if acc.contains(';') {
                let tree = acc.split(';').next().unwrap_or_default();
                if ["crate::", "super::", "self::"]
                    .iter()
                    .any(|p| tree.trim_start().starts_with(p))
                {
                    out.extend(expand(tree).into_iter().map(|p| (first, p)));
                }
            } else {
                pending = Some((first, acc));
            }
            continue;
        }
        let mut rest = line.as_str();
        while let Some(at) = rest.find("crate::") {
            let before = rest[..at].chars().last();
            let path: String = rest[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            if !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                out.push((*n, path.clone()));
            }
            rest = &rest[at + path.len().max(1)..];
        }
    }
    out
}

/// The module path `path` names from module `from`, cut to the longest module that is a file.
fn resolve(from: &[String], path: &str, modules: &BTreeMap<Vec<String>, String>) -> Vec<String> {
    let mut segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut base: Vec<String> = match segs.first() {
        Some(&"crate") => {
            segs.remove(0);
            Vec::new()
        }
        _ => from.to_vec(),
    };
    while let Some(&s) = segs.first() {
        match s {
            "super" => {
                base.pop();
                segs.remove(0);
            }
            "self" => {
                segs.remove(0);
            }
            _ => break,
        }
    }
    let mut best = base.clone();
    let mut cur = base;
    for s in segs {
        cur.push(s.to_owned());
        if modules.contains_key(&cur) {
            best = cur.clone();
        }
    }
    best
}

#[test]
fn every_file_of_the_simulator_has_a_layer() {
    let unplaced: Vec<String> = library_files()
        .into_iter()
        .filter(|f| layer_of(f).is_none())
        .collect();
    assert!(
        unplaced.is_empty(),
        "these files have no layer in kfd-sim/tests/layers.rs: {unplaced:?}"
    );
}

#[test]
fn no_module_uses_a_module_of_a_layer_above_it() {
    let files = library_files();
    let modules: BTreeMap<Vec<String>, String> =
        files.iter().map(|f| (module_of(f), f.clone())).collect();
    let mut upward = Vec::new();
    for file in &files {
        let Some(mine) = layer_of(file) else {
            continue;
        };
        let text = std::fs::read_to_string(src().join(file)).unwrap();
        let from = module_of(file);
        for (line, path) in named_paths(&product_lines(&text)) {
            let target = resolve(&from, &path, &modules);
            let Some(target_file) = modules.get(&target) else {
                continue;
            };
            let Some(theirs) = layer_of(target_file) else {
                continue;
            };
            if theirs > mine {
                upward.push(format!(
                    "src/{file}:{line} ({mine:?}) uses {path} ({theirs:?}, src/{target_file})"
                ));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports that point up:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_reader_sees_every_kind_of_import() {
    let code = "use super::{event::Event, process::{KfdProcess, ProcState}};\n\
                use crate::hw::vm::Vm as V;\n\
                use self::file::RenderFile;\n\
                use crate::host::{\n    self,\n    lock,\n};\n\
                let x = crate::kfd::kfd_ioctl(m); // crate::not::this\n";
    let paths = named_paths(&product_lines(code));
    let want = [
        (1, "super::event::Event"),
        (1, "super::process::KfdProcess"),
        (1, "super::process::ProcState"),
        (2, "crate::hw::vm::Vm"),
        (3, "self::file::RenderFile"),
        (4, "crate::host"),
        (4, "crate::host::lock"),
        (8, "crate::kfd::kfd_ioctl"),
    ];
    let want: Vec<(usize, String)> = want.iter().map(|&(n, p)| (n, p.to_owned())).collect();
    assert_eq!(paths, want);
    let modules: BTreeMap<Vec<String>, String> = ["kfd/mod.rs", "kfd/queue.rs", "kfd/event.rs"]
        .iter()
        .map(|f| (module_of(f), (*f).to_owned()))
        .collect();
    let from = module_of("kfd/queue.rs");
    assert_eq!(
        resolve(&from, "super::event::Event", &modules),
        ["kfd", "event"]
    );
    assert_eq!(resolve(&from, "super::KfdCall", &modules), ["kfd"]);
    assert_eq!(
        resolve(&from, "crate::kfd::event", &modules),
        ["kfd", "event"]
    );
}
