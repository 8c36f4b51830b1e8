//! Writing a [`Topology`] as a sysfs tree in the kernel's format (used by the simulator and tests).

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::model::{Cache, Properties, Topology};

/// Why a topology tree could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write topology file {path}: {source}; check that the directory is writable")]
pub struct WriteError {
    /// The file or directory.
    pub path: PathBuf,
    /// The underlying error.
    #[source]
    pub source: io::Error,
}

/// The text of a properties file: `key value` lines in order, decimal values.
#[must_use]
pub(crate) fn properties_text(props: &Properties) -> String {
    let mut s = String::new();
    for (k, v) in props.iter() {
        let _ = writeln!(s, "{k} {v}");
    }
    s
}

/// The text of a cache's properties file, `sibling_map` last.
#[must_use]
pub(crate) fn cache_text(cache: &Cache) -> String {
    let mut s = properties_text(&cache.properties);
    if let Some(map) = &cache.sibling_map {
        s.push_str("sibling_map");
        for (i, bit) in map.iter().enumerate() {
            s.push(if i == 0 { ' ' } else { ',' });
            let _ = write!(s, "{bit}");
        }
        s.push('\n');
    }
    s
}

/// Every file of the tree as `(relative path, contents)`, in a stable order (nodes in model
/// order, then mem_banks, caches, io_links, p2p_links).
#[must_use]
pub(crate) fn files(topology: &Topology) -> Vec<(PathBuf, String)> {
    let mut out = vec![
        (
            PathBuf::from("generation_id"),
            format!("{}\n", topology.generation_id),
        ),
        (
            PathBuf::from("system_properties"),
            properties_text(&topology.system_properties),
        ),
    ];
    for node in &topology.nodes {
        let dir = Path::new("nodes").join(node.id.to_string());
        out.push((dir.join("gpu_id"), format!("{}\n", node.gpu_id)));
        out.push((dir.join("name"), format!("{}\n", node.name)));
        out.push((dir.join("properties"), properties_text(&node.properties)));
        let lists = [
            (
                "mem_banks",
                node.mem_banks
                    .iter()
                    .map(|b| properties_text(&b.properties))
                    .collect::<Vec<_>>(),
            ),
            ("caches", node.caches.iter().map(cache_text).collect()),
            (
                "io_links",
                node.io_links
                    .iter()
                    .map(|l| properties_text(&l.properties))
                    .collect(),
            ),
            (
                "p2p_links",
                node.p2p_links
                    .iter()
                    .map(|l| properties_text(&l.properties))
                    .collect(),
            ),
        ];
        for (sub, texts) in lists {
            for (i, text) in texts.into_iter().enumerate() {
                out.push((dir.join(sub).join(i.to_string()).join("properties"), text));
            }
        }
    }
    out
}

/// Makes `rel` and its parents below `root`, one directory at a time, never `root` itself: a
/// root removed while a tree is written into it (an interrupted process cleaning up its
/// temporary directories) is not made again; the write fails instead.
///
/// # Errors
///
/// The first `mkdir(2)` error other than `EEXIST` (`ENOENT` when `root` is gone).
pub fn create_dir_below(root: &Path, rel: &Path) -> io::Result<()> {
    if rel.as_os_str().is_empty() {
        return Ok(());
    }
    let mkdir = |dir: &Path| match fs::create_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        done => done,
    };
    let dir = root.join(rel);
    // One call when the parent is there (the common case: a tree written parents first);
    // otherwise the parents below `root` first.
    match mkdir(&dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => match rel.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => {
                create_dir_below(root, parent)?;
                mkdir(&dir)
            }
            _ => Err(e),
        },
        done => done,
    }
}

/// Writes `topology` under `root` (created if needed) in the kernel's sysfs format: files
/// `generation_id`, `system_properties`, `nodes/N/{gpu_id,name,properties}` and the numbered
/// `mem_banks`, `caches`, `io_links`, `p2p_links` subdirectories, each with a `properties`
/// file. Every node gets all four subdirectories, as in the kernel, even when empty, and the
/// kernel's `perf` directory, empty as on a dGPU machine without AMD IOMMU performance
/// counters (the driver lists only an `iommu` block there, for those counters).
///
/// # Errors
///
/// [`WriteError`] naming the path that could not be created or written.
pub fn write(topology: &Topology, root: &Path) -> Result<(), WriteError> {
    let err = |path: &Path| {
        let path = path.to_owned();
        move |source| WriteError { path, source }
    };
    fs::create_dir_all(root).map_err(err(root))?;
    // Below the root, each directory is made on its own, parents first: a root removed while
    // the tree is written (a process interrupted and cleaning up) is not made again.
    let make = |rel: &Path| create_dir_below(root, rel).map_err(err(&root.join(rel)));
    make(Path::new("nodes"))?;
    for node in &topology.nodes {
        let dir = Path::new("nodes").join(node.id.to_string());
        make(&dir)?;
        for sub in ["mem_banks", "caches", "io_links", "p2p_links", "perf"] {
            make(&dir.join(sub))?;
        }
    }
    for (rel, text) in files(topology) {
        if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) {
            make(parent)?;
        }
        let path = root.join(rel);
        fs::write(&path, text).map_err(err(&path))?;
    }
    Ok(())
}

/// Why [`replace`] did not write a tree.
#[derive(Debug, thiserror::Error)]
pub enum ReplaceError {
    /// The directory holds something that is not part of a topology tree.
    #[error(
        "{root} holds {entry:?}, which is not part of a KFD topology tree; write the tree into an \
         empty or new directory, or into one that holds only a topology tree (which is replaced)"
    )]
    NotATree {
        /// The directory.
        root: PathBuf,
        /// The first foreign entry.
        entry: String,
    },
    /// The old tree, or the listing of the directory, could not be removed or read.
    #[error("cannot replace the topology tree at {path}: {source}")]
    Remove {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// Writing the new tree failed.
    #[error(transparent)]
    Write(#[from] WriteError),
}

/// The entries of a topology tree's root.
const TREE_ENTRIES: &[&str] = &["generation_id", "system_properties", "nodes"];

/// Writes `topology` under `root` as [`write()`] does, replacing the tree that may be there: the
/// nodes of an old tree would otherwise stay beside the new ones (a preset with fewer GPUs
/// written over one with more). A `root` that holds anything but a topology tree is refused
/// untouched.
///
/// # Errors
///
/// [`ReplaceError::NotATree`] naming the first foreign entry, [`ReplaceError::Remove`] when the
/// old tree cannot be removed, [`ReplaceError::Write`].
pub fn replace(topology: &Topology, root: &Path) -> Result<(), ReplaceError> {
    let remove = |path: &Path| {
        let path = path.to_owned();
        move |source| ReplaceError::Remove { path, source }
    };
    match fs::read_dir(root) {
        Ok(entries) => {
            let mut names = Vec::new();
            for e in entries {
                names.push(e.map_err(remove(root))?.file_name());
            }
            if let Some(foreign) = names
                .iter()
                .find(|n| !TREE_ENTRIES.iter().any(|t| n.as_os_str() == *t))
            {
                return Err(ReplaceError::NotATree {
                    root: root.to_owned(),
                    entry: foreign.to_string_lossy().into_owned(),
                });
            }
            let nodes = root.join("nodes");
            if nodes.exists() {
                fs::remove_dir_all(&nodes).map_err(remove(&nodes))?;
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(remove(root)(e)),
    }
    Ok(write(topology, root)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::{GpuSpec, TopologyBuilder};
    use crate::parse::parse;

    fn render(t: &Topology) -> String {
        let mut out = String::new();
        for (path, text) in files(t) {
            let _ = write!(out, "== {}\n{text}", path.display());
        }
        out
    }

    /// One CPU node and one MI50 with two caches: every file of the tree, for review.
    #[test]
    fn mi50_tree_is_in_the_kernel_format() {
        let t = TopologyBuilder::new()
            .cpu(16)
            .gpu(GpuSpec::mi50().gpu_id(0x2a1b).caches(2))
            .build();
        insta::assert_snapshot!(render(&t));
    }

    #[test]
    fn parse_of_write_is_identity_for_a_hive_of_eight() {
        let t = TopologyBuilder::new()
            .cpus(2)
            .gpus(4, &GpuSpec::mi250x_gcd().numa(0))
            .gpus(4, &GpuSpec::mi250x_gcd().numa(1))
            .hive(0..8)
            .build();
        let dir = tempfile::tempdir().unwrap();
        write(&t, dir.path()).unwrap();
        assert_eq!(parse(dir.path()).unwrap(), t);
    }

    #[test]
    fn unknown_keys_and_odd_orders_are_written_back_as_read() {
        let mut t = TopologyBuilder::new()
            .cpu(8)
            .gpu(GpuSpec::mi100().vram(false, 1 << 34))
            .build();
        let gpu = &mut t.nodes[1];
        gpu.properties.set("future_key", 7);
        gpu.io_links[0]
            .properties
            .set("recommended_sdma_engine_id_mask", 3);
        gpu.caches[0].sibling_map = Some(Vec::new());
        gpu.caches[1].sibling_map = None;
        let dir = tempfile::tempdir().unwrap();
        write(&t, dir.path()).unwrap();
        let back = parse(dir.path()).unwrap();
        assert_eq!(back, t);
        assert_eq!(
            back.nodes[1].properties.iter().last(),
            Some(("future_key", 7))
        );
    }

    /// A tree of four GPUs replaced by one of one GPU: before `replace`, `write` left nodes
    /// 2..4 of the old tree beside the new one, and the result parsed as five GPUs.
    #[test]
    fn replace_removes_the_old_tree_and_refuses_a_foreign_directory() {
        let four = TopologyBuilder::new()
            .cpu(8)
            .gpus(4, &GpuSpec::mi100())
            .build();
        let one = TopologyBuilder::new().cpu(8).gpu(GpuSpec::mi50()).build();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("topology");
        replace(&four, &root).unwrap();
        assert_eq!(parse(&root).unwrap(), four);
        replace(&one, &root).unwrap();
        assert_eq!(parse(&root).unwrap(), one);

        std::fs::write(root.join("notes.txt"), "mine\n").unwrap();
        let err = replace(&four, &root).unwrap_err();
        assert!(
            matches!(&err, ReplaceError::NotATree { entry, .. } if entry == "notes.txt"),
            "{err}"
        );
        assert!(parse(&root).unwrap() == one, "left untouched");
    }

    #[test]
    fn every_node_has_all_five_subdirectories() {
        let t = TopologyBuilder::new().cpu(4).build();
        let dir = tempfile::tempdir().unwrap();
        write(&t, dir.path()).unwrap();
        for sub in ["mem_banks", "caches", "io_links", "p2p_links", "perf"] {
            assert!(dir.path().join("nodes/0").join(sub).is_dir(), "{sub}");
        }
    }
}
