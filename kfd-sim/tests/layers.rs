//! The layers of the simulator's source, and the rule that keeps them: a module uses only modules
//! of its own layer or below (`kfd-sim/src/lib.rs` draws them). Read from the `use crate::`,
//! `use super::` and `use self::` lines and the `crate::...` paths of every file's product code
//! (its unit tests aside), so a new upward import fails here, naming the file and the line.
//!
//! Within a layer, files may use each other, but not in a circle: the same reading gives the
//! graph of which file uses which, and a strongly connected component of more than one file is
//! an import cycle, which fails here too. A module's references to its own parts (the modules it
//! declares, and re-exports) are no arrows, nor are references to the crate root.

#![allow(clippy::unwrap_used)] // test helpers, like the tests themselves, panic on failure

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, bottom up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Layer {
    /// The host OS glue and the description of the machine: everything may use them.
    Base,
    /// What the GPU does: memory, page tables, engines, the queue scheduler.
    Hardware,
    /// The state a kernel keeps (`state/`): devices, processes, per-device data, BOs, queues,
    /// events, open files, and the accounts they settle.
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
    ("lock_order.rs", Layer::Base),
    ("asic.rs", Layer::Base),
    ("preset.rs", Layer::Base),
    ("sysfs.rs", Layer::Base),
    ("scratch.rs", Layer::Base),
    ("hw/", Layer::Hardware),
    ("state/", Layer::State),
    ("client.rs", Layer::Driver),
    ("fops.rs", Layer::Driver),
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

/// The source of the shader crate (`kfd-sim/shader`).
fn shader_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("shader/src")
}

/// Every `.rs` file of a library below `root` (the binaries aside), as `a/b.rs`.
fn library_files_of(root: &Path) -> Vec<String> {
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
    walk(root, "", &mut out);
    out.sort();
    out
}

/// Every `.rs` file of the simulator's library below `src/` (the binaries aside), as `a/b.rs`.
fn library_files() -> Vec<String> {
    library_files_of(&src())
}

/// The text of every library file below `root`, by its path there.
fn read_library(root: &Path) -> BTreeMap<String, String> {
    library_files_of(root)
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(root.join(&f)).unwrap();
            (f, text)
        })
        .collect()
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

/// Every crate-relative path the code names, with its line: `use` trees and inline `crate::`,
/// `super::` and `self::` paths.
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
        while let Some(at) = ["crate::", "super::", "self::"]
            .iter()
            .filter_map(|root| rest.find(root))
            .min()
        {
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

/// Which file uses which: for every file of `files` (path below `src/` to its text), the files
/// its product code names, less its own parts (a module's descendants: it declares them and
/// may re-export their items) and the crate root (whose re-exports name items of every file).
fn import_graph(files: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeMap<Vec<String>, String> =
        files.keys().map(|f| (module_of(f), f.clone())).collect();
    files
        .iter()
        .map(|(file, text)| {
            let from = module_of(file);
            let uses = named_paths(&product_lines(text))
                .into_iter()
                .map(|(_, path)| resolve(&from, &path, &modules))
                .filter(|target| !target.is_empty() && !target.starts_with(&from))
                .filter_map(|target| modules.get(&target).cloned())
                .collect();
            (file.clone(), uses)
        })
        .collect()
}

/// The import cycles of `graph`: its strongly connected components of more than one file, each
/// sorted, in order of their first file (Tarjan's algorithm).
fn import_cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    #[derive(Default)]
    struct Walk<'a> {
        next: usize,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(v: &'a str, graph: &'a BTreeMap<String, BTreeSet<String>>, w: &mut Walk<'a>) {
        w.index.insert(v, w.next);
        w.low.insert(v, w.next);
        w.next += 1;
        w.stack.push(v);
        w.on_stack.insert(v);
        for t in graph.get(v).into_iter().flatten() {
            let t = t.as_str();
            if !w.index.contains_key(t) {
                visit(t, graph, w);
                let low = w.low[v].min(w.low[t]);
                w.low.insert(v, low);
            } else if w.on_stack.contains(t) {
                let low = w.low[v].min(w.index[t]);
                w.low.insert(v, low);
            }
        }
        if w.low[v] == w.index[v] {
            let mut component = Vec::new();
            while let Some(t) = w.stack.pop() {
                w.on_stack.remove(t);
                component.push(t.to_owned());
                if t == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                w.found.push(component);
            }
        }
    }
    let mut w = Walk::default();
    for v in graph.keys() {
        if !w.index.contains_key(v.as_str()) {
            visit(v, graph, &mut w);
        }
    }
    w.found.sort();
    w.found
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

#[test]
fn no_file_of_the_simulator_is_in_an_import_cycle() {
    let cycles = import_cycles(&import_graph(&read_library(&src())));
    let cycles: Vec<String> = cycles.iter().map(|c| c.join(" <-> ")).collect();
    assert!(
        cycles.is_empty(),
        "import cycles in kfd-sim/src (each: files that reach one another through their \
         imports):\n{}",
        cycles.join("\n")
    );
}

/// kfd-abi, below the simulator, has no import cycle either: a module two of its modules need
/// (its bounded `/proc` reads, say) goes below both.
#[test]
fn no_file_of_kfd_abi_is_in_an_import_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kfd-abi/src");
    let cycles = import_cycles(&import_graph(&read_library(&root)));
    let cycles: Vec<String> = cycles.iter().map(|c| c.join(" <-> ")).collect();
    assert!(
        cycles.is_empty(),
        "import cycles in kfd-abi/src:\n{}",
        cycles.join("\n")
    );
}

/// The plugin's source (read from beside this crate: the test needs no dependency on it).
fn plugin_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugin/src")
}

/// The plugin has no import cycle: the C ABI shim calls the engine, and the engine and the
/// logger reach criu's exported functions through the `host::CriuHost` the shim installs, never
/// by naming the shim (inline `crate::shim::f()` calls included).
#[test]
fn no_file_of_the_plugin_is_in_an_import_cycle() {
    let cycles = import_cycles(&import_graph(&read_library(&plugin_src())));
    let cycles: Vec<String> = cycles.iter().map(|c| c.join(" <-> ")).collect();
    assert!(
        cycles.is_empty(),
        "import cycles in plugin/src:\n{}",
        cycles.join("\n")
    );
}

/// The shim is the plugin's top: the C ABI criu calls. Only the crate root (which declares it)
/// and the shim's own files name it.
#[test]
fn nothing_in_the_plugin_uses_its_c_abi_shim() {
    let graph = import_graph(&read_library(&plugin_src()));
    let users: Vec<String> = graph
        .iter()
        .filter(|(file, _)| !file.starts_with("shim/"))
        .filter(|(_, uses)| uses.iter().any(|u| u.starts_with("shim/")))
        .map(|(file, _)| format!("plugin/src/{file}"))
        .collect();
    assert!(
        users.is_empty(),
        "these files name the C ABI shim (give the engine what it needs through \
         host::CriuHost instead): {users:?}"
    );
}

/// The shader crate's interpreter core is one circle, and may stay one: the instruction table
/// names the decoded instruction and each executor's context, while the decoder, the executors
/// (by encoding, with their operands, memory and LDS paths) and their errors name the table's
/// encodings and rows. Nothing outside that core may join it, and there is no second circle.
#[test]
fn the_shader_crate_has_one_import_cycle_at_most_its_interpreter_core() {
    let cycles = import_cycles(&import_graph(&read_library(&shader_src())));
    assert!(
        cycles.len() <= 1,
        "the shader crate has more than one import cycle: {cycles:?}"
    );
    for core in &cycles {
        for outside in [
            "lib.rs",
            "elf.rs",
            "float.rs",
            "save.rs",
            "wave.rs",
            "testmem.rs",
        ] {
            assert!(
                !core.iter().any(|f| f == outside),
                "{outside} joined the interpreter core's import cycle: {core:?}"
            );
        }
        assert!(
            core.iter().any(|f| f == "exec.rs"),
            "an import cycle of the shader crate outside its interpreter core: {core:?}"
        );
    }
}

#[test]
fn the_cycle_check_finds_a_cycle_and_nothing_else() {
    let crate_of = |files: &[(&str, &str)]| -> BTreeMap<String, String> {
        files
            .iter()
            .map(|&(f, t)| (f.to_owned(), t.to_owned()))
            .collect()
    };
    // A tree of modules whose parents use their parts and whose parts use their parent and
    // the crate root: no cycle.
    let tree = crate_of(&[
        ("lib.rs", "mod a;\nmod b;\npub use a::x::X;\n"),
        (
            "a/mod.rs",
            "pub mod x;\nuse self::x::X;\nuse crate::b::B;\n",
        ),
        ("a/x.rs", "use super::A;\nuse crate::Top;\n"),
        ("b.rs", "pub struct B;\n"),
    ]);
    assert_eq!(
        import_cycles(&import_graph(&tree)),
        Vec::<Vec<String>>::new()
    );
    // b uses a's part x, which uses c, which names b inline: one cycle of three files; d,
    // used by all of them, and the use in x's unit tests are no part of it.
    let cycle = crate_of(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\nmod d;\n"),
        ("a/mod.rs", "pub mod x;\n"),
        (
            "a/x.rs",
            "use crate::{c::C, d};\n#[cfg(test)]\nmod tests {\n    use crate::b;\n}\n",
        ),
        ("b.rs", "use crate::a::x::{self, X};\nuse super::d::D;\n"),
        (
            "c.rs",
            "use crate::d::D;\nfn f() -> super::b::B { crate::b::make() }\n",
        ),
        ("d.rs", "pub struct D;\n"),
    ]);
    assert_eq!(
        import_cycles(&import_graph(&cycle)),
        [["a/x.rs", "b.rs", "c.rs"]]
    );
    // Two cycles, each found whole.
    let two = crate_of(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\nmod d;\n"),
        ("a.rs", "use crate::b;\n"),
        ("b.rs", "use crate::a;\n"),
        ("c.rs", "use super::d::D;\n"),
        ("d.rs", "// use crate::c;\nuse crate::c::C;\n"),
    ]);
    assert_eq!(
        import_cycles(&import_graph(&two)),
        [["a.rs", "b.rs"], ["c.rs", "d.rs"]]
    );
}

/// A cycle made only of inline paths, the way code calls a function of another module without a
/// `use` line (`crate::shim::lookup_symbol(..)` in a function body, `super::x::f()` in an
/// expression), is a cycle too: the check must not read only `use` lines.
#[test]
fn the_cycle_check_finds_a_cycle_of_inline_paths_only() {
    let files: BTreeMap<String, String> = [
        ("lib.rs", "mod engine;\nmod logger;\nmod shim;\n"),
        (
            "engine/mod.rs",
            "pub fn run() {\n    let dir = crate::shim::image_dir();\n    go(dir);\n}\n",
        ),
        (
            "logger.rs",
            "pub fn install() {\n    let print = crate::shim::lookup_symbol(c\"print\");\n}\n",
        ),
        (
            "shim/mod.rs",
            "extern \"C\" fn init() -> i32 {\n    crate::logger::install();\n    \
             super::engine::run();\n    0\n}\n",
        ),
    ]
    .iter()
    .map(|&(f, t)| (f.to_owned(), t.to_owned()))
    .collect();
    assert!(
        files.values().all(|t| !t.contains("use ")),
        "the example has no use line"
    );
    assert_eq!(
        import_cycles(&import_graph(&files)),
        [["engine/mod.rs", "logger.rs", "shim/mod.rs"]]
    );
    // The same files with the engine's and the logger's calls gone: no cycle left.
    let mut broken = files.clone();
    broken.insert("engine/mod.rs".to_owned(), "pub fn run() {}\n".to_owned());
    broken.insert("logger.rs".to_owned(), "pub fn install() {}\n".to_owned());
    assert_eq!(
        import_cycles(&import_graph(&broken)),
        Vec::<Vec<String>>::new()
    );
}
