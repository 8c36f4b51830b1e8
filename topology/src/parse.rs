//! Reading a KFD sysfs topology directory into a [`Topology`].

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::map::EQUAL_PROPERTIES;
use crate::model::{keys, Cache, Link, MemBank, Node, Properties, Topology};

/// Why a topology directory could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// A file or directory that must exist could not be read.
    #[error("cannot read {path}: {source}; is amdkfd loaded and the topology root right?")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A line is not in the kernel's format.
    #[error("{path}:{line}: expected {expected}, found {found:?}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What the kernel writes there.
        expected: &'static str,
        /// The offending text.
        found: String,
    },
    /// A key appears twice in one properties file.
    #[error("{path}:{line}: duplicate key {key:?}")]
    DuplicateKey {
        /// The file.
        path: PathBuf,
        /// 1-based line number of the second occurrence.
        line: usize,
        /// The key.
        key: String,
    },
    /// A properties file lacks a line that the kernel writes in every file of its kind.
    #[error("{path}: no `{key}` line; the kernel writes one in every {kind}")]
    MissingKey {
        /// The file.
        path: PathBuf,
        /// The key.
        key: &'static str,
        /// The kind of file ("node's properties", "GPU node's properties", ...).
        kind: &'static str,
    },
    /// A value the kernel never writes there.
    #[error("{path}: `{key} {value}`: {expected}")]
    BadValue {
        /// The file.
        path: PathBuf,
        /// The key.
        key: &'static str,
        /// Its value.
        value: u64,
        /// What the kernel writes there.
        expected: &'static str,
    },
    /// Two GPU nodes have the same gpu_id.
    #[error(
        "{path}: gpu_id {gpu_id} ({gpu_id:#x}) is also node {first}'s; the kernel gives every GPU \
         its own"
    )]
    DuplicateGpuId {
        /// The second node's `gpu_id` file.
        path: PathBuf,
        /// The gpu_id.
        gpu_id: u32,
        /// The node that has it first.
        first: u32,
    },
    /// Two GPU nodes have the same render minor.
    #[error(
        "{path}: drm_render_minor {minor} is also node {first}'s; the kernel gives every GPU its \
         own render node"
    )]
    DuplicateRenderMinor {
        /// The second node's `properties` file.
        path: PathBuf,
        /// The minor.
        minor: u64,
        /// The node that has it first.
        first: u32,
    },
    /// The root is an empty path, which would read the current directory.
    #[error(
        "the topology root is an empty path (is AMDGPU_CR_TOPOLOGY_ROOT set to an empty \
         string?); give a directory, or unset it for /sys/class/kfd/kfd/topology"
    )]
    EmptyRoot,
}

impl ParseError {
    fn io(path: &Path, source: io::Error) -> Self {
        Self::Io {
            path: path.to_owned(),
            source,
        }
    }

    fn syntax(path: &Path, line: usize, expected: &'static str, found: &str) -> Self {
        Self::Syntax {
            path: path.to_owned(),
            line,
            expected,
            found: found.to_owned(),
        }
    }
}

/// Reads the topology under `root` (for a real system `/sys/class/kfd/kfd/topology`).
///
/// Nodes whose files the kernel refuses with `EPERM` (a device cgroup hiding some GPUs: amdkfd
/// answers so for the GPUs the process may not use) are skipped, with a log message. Missing
/// `mem_banks`, `caches`, `io_links` or `p2p_links` directories count as empty.
///
/// The tree is read strictly, as the kernel writes it: every node's `properties` holds the keys
/// the image records of it (a GPU node also its firmware versions and capability), a GPU's
/// render minor is 128 or more, every link names its type and both ends, every memory bank its
/// heap type and size, and no two GPUs share a gpu_id.
///
/// # Errors
///
/// [`ParseError`] naming the file (and line) that is missing, unreadable or not in the kernel's
/// format, and the fault; [`ParseError::EmptyRoot`] for an empty `root`.
pub fn parse(root: &Path) -> Result<Topology, ParseError> {
    parse_with(root, &|path| crate::sysfs::read_sysfs_file(path))
}

/// The keys a node's `properties` must hold besides those the mapping compares
/// ([`EQUAL_PROPERTIES`]): together, those the image records of every node (`kfd_device_entry`)
/// and `location_id` (the PCI address). The kernel has written all of them since long before the
/// first KFD interface with CRIU (1.8).
const NODE_REQUIRED: &[&str] = &[
    keys::CPU_CORES_COUNT,
    keys::CACHES_COUNT,
    keys::IO_LINKS_COUNT,
    keys::GDS_SIZE_IN_KB,
    keys::NUM_GWS,
    keys::LOCATION_ID,
    keys::DOMAIN,
    keys::DRM_RENDER_MINOR,
    keys::HIVE_ID,
];

/// The keys a GPU node's `properties` must hold beyond [`EQUAL_PROPERTIES`] and
/// [`NODE_REQUIRED`] (the kernel writes them for GPU nodes only; the image records them and the
/// checks compare them).
const GPU_REQUIRED: &[&str] = &[keys::FW_VERSION, keys::CAPABILITY, keys::SDMA_FW_VERSION];

/// The keys every `io_links/L` and `p2p_links/L` properties file must hold.
const LINK_REQUIRED: &[&str] = &["type", "node_from", "node_to"];

/// The keys every `mem_banks/M` properties file must hold.
const MEM_BANK_REQUIRED: &[&str] = &["heap_type", "size_in_bytes"];

/// The lowest DRM render minor: minors below are primary nodes.
const FIRST_RENDER_MINOR: u64 = 128;

/// `EPERM` (Linux, asm-generic/errno-base.h): amdkfd's answer for a node of a GPU the device
/// cgroup does not give the process.
const EPERM: i32 = 1;

/// `Err` naming the first of `required` that `props` (read from `path`) lacks.
fn require(
    props: &Properties,
    path: &Path,
    required: &[&'static str],
    kind: &'static str,
) -> Result<(), ParseError> {
    match required.iter().find(|k| props.get(k).is_none()) {
        Some(key) => Err(ParseError::MissingKey {
            path: path.to_owned(),
            key,
            kind,
        }),
        None => Ok(()),
    }
}

/// Reads a file's text; tests substitute one that fails like a device cgroup does.
type ReadText<'a> = &'a dyn Fn(&Path) -> io::Result<String>;

fn parse_with(root: &Path, read: ReadText<'_>) -> Result<Topology, ParseError> {
    if root.as_os_str().is_empty() {
        return Err(ParseError::EmptyRoot);
    }
    let read_number_file = |p: &Path| read_number_file(p, read);
    let read_properties = |p: &Path| read_properties(p, read);
    let generation_id = read_number_file(&root.join("generation_id"))?;
    let system_properties = read_properties(&root.join("system_properties"))?;
    let nodes_dir = root.join("nodes");
    let mut nodes = Vec::new();
    for id in numbered_entries(&nodes_dir, true)? {
        let dir = nodes_dir.join(id.to_string());
        match parse_node(&dir, id, read) {
            Ok(node) => {
                if let Some(first) = nodes
                    .iter()
                    .find(|n: &&Node| node.gpu_id != 0 && n.gpu_id == node.gpu_id)
                {
                    return Err(ParseError::DuplicateGpuId {
                        path: dir.join("gpu_id"),
                        gpu_id: node.gpu_id,
                        first: first.id,
                    });
                }
                let minor = |n: &Node| n.properties.get_or_zero(keys::DRM_RENDER_MINOR);
                if let Some(first) = nodes
                    .iter()
                    .find(|n: &&Node| node.gpu_id != 0 && n.gpu_id != 0 && minor(n) == minor(&node))
                {
                    return Err(ParseError::DuplicateRenderMinor {
                        path: dir.join("properties"),
                        minor: minor(&node),
                        first: first.id,
                    });
                }
                nodes.push(node);
            }
            Err(ParseError::Io { path, source }) if is_device_cgroup_refusal(&source) => {
                log::info!(
                    "skipping topology node {id}: {} is not readable ({source}): a GPU this \
                     process's device cgroup does not give it",
                    path.display()
                );
            }
            Err(e) => return Err(e),
        }
    }
    log::debug!(
        "parsed topology {}: {} nodes ({} GPUs)",
        root.display(),
        nodes.len(),
        nodes.iter().filter(|n: &&Node| n.is_gpu()).count()
    );
    Ok(Topology {
        generation_id,
        system_properties,
        nodes,
    })
}

/// Whether `e` is amdkfd's refusal of a node the device cgroup hides (`EPERM`); any other
/// failure to read a node (`EACCES` included) is an error.
fn is_device_cgroup_refusal(e: &io::Error) -> bool {
    e.raw_os_error() == Some(EPERM)
}

fn parse_node(dir: &Path, id: u32, read: ReadText<'_>) -> Result<Node, ParseError> {
    let read_number_file = |p: &Path| read_number_file(p, read);
    let read_properties = |p: &Path| read_properties(p, read);
    let read_cache = |p: &Path| read_cache(p, read);
    let gpu_path = dir.join("gpu_id");
    let gpu_id = u32::try_from(read_number_file(&gpu_path)?)
        .map_err(|_| ParseError::syntax(&gpu_path, 1, "a 32-bit gpu_id", "(too large)"))?;
    let name_path = dir.join("name");
    let name = read_text(&name_path, read)?;
    let name = name.strip_suffix('\n').unwrap_or(&name).to_owned();
    let props_path = dir.join("properties");
    let properties = read_properties(&props_path)?;
    for required in [NODE_REQUIRED, EQUAL_PROPERTIES] {
        require(&properties, &props_path, required, "node's properties")?;
    }
    if gpu_id != 0 {
        require(
            &properties,
            &props_path,
            GPU_REQUIRED,
            "GPU node's properties",
        )?;
        let minor = properties.get_or_zero(keys::DRM_RENDER_MINOR);
        if minor < FIRST_RENDER_MINOR {
            return Err(ParseError::BadValue {
                path: props_path,
                key: keys::DRM_RENDER_MINOR,
                value: minor,
                expected: "a GPU's render node has minor 128 or more (renderD128, ...)",
            });
        }
    }
    let mem_banks = read_list(&dir.join("mem_banks"), |p| {
        let properties = read_properties(p)?;
        require(
            &properties,
            p,
            MEM_BANK_REQUIRED,
            "memory bank's properties",
        )?;
        Ok(MemBank { properties })
    })?;
    let caches = read_list(&dir.join("caches"), read_cache)?;
    let read_link = |p: &Path| {
        let properties = read_properties(p)?;
        require(&properties, p, LINK_REQUIRED, "link's properties")?;
        Ok(Link { properties })
    };
    let io_links = read_list(&dir.join("io_links"), read_link)?;
    let p2p_links = read_list(&dir.join("p2p_links"), read_link)?;
    Ok(Node {
        id,
        gpu_id,
        name,
        properties,
        mem_banks,
        caches,
        io_links,
        p2p_links,
    })
}

/// The numbered subdirectories of `dir`, sorted. Other entries are ignored.
fn numbered_entries(dir: &Path, required: bool) -> Result<Vec<u32>, ParseError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if !required && e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(ParseError::io(dir, e)),
    };
    let mut ids = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| ParseError::io(dir, e))?;
        if let Some(id) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// Reads `dir/0/properties`, `dir/1/properties`, ... in numeric order.
fn read_list<T>(
    dir: &Path,
    read: impl Fn(&Path) -> Result<T, ParseError>,
) -> Result<Vec<T>, ParseError> {
    numbered_entries(dir, false)?
        .into_iter()
        .map(|i| read(&dir.join(i.to_string()).join("properties")))
        .collect()
}

fn read_text(path: &Path, read: ReadText<'_>) -> Result<String, ParseError> {
    read(path).map_err(|e| ParseError::io(path, e))
}

/// A file holding one decimal number and a newline (`generation_id`, `gpu_id`).
fn read_number_file(path: &Path, read: ReadText<'_>) -> Result<u64, ParseError> {
    let text = read_text(path, read)?;
    let line = text.lines().next().unwrap_or("");
    parse_number(line.trim()).ok_or_else(|| ParseError::syntax(path, 1, "a decimal number", line))
}

fn parse_number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// One `key value` line, or `None` for a blank line.
fn split_line<'a>(
    path: &Path,
    line_no: usize,
    line: &'a str,
) -> Result<Option<(&'a str, &'a str)>, ParseError> {
    if line.trim().is_empty() {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    match (parts.next(), parts.next(), parts.next()) {
        (Some(key), Some(value), None) => Ok(Some((key, value))),
        (Some(key), None, None) => Ok(Some((key, ""))),
        _ => Err(ParseError::syntax(
            path,
            line_no,
            "`key value` (two words)",
            line,
        )),
    }
}

fn push_unique(
    props: &mut Properties,
    path: &Path,
    line_no: usize,
    key: &str,
    value: u64,
) -> Result<(), ParseError> {
    if props.get(key).is_some() {
        return Err(ParseError::DuplicateKey {
            path: path.to_owned(),
            line: line_no,
            key: key.to_owned(),
        });
    }
    props.set(key, value);
    Ok(())
}

/// The `key value` lines of a properties file, each value a decimal number. `other` sees each
/// line `(line_no, key, value, line)` first and returns `true` for a line it took (a line of
/// another form, such as a cache's `sibling_map`).
fn read_key_values(
    path: &Path,
    read: ReadText<'_>,
    mut other: impl FnMut(usize, &str, &str, &str) -> Result<bool, ParseError>,
) -> Result<Properties, ParseError> {
    let text = read_text(path, read)?;
    let mut props = Properties::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let Some((key, value)) = split_line(path, line_no, line)? else {
            continue;
        };
        if other(line_no, key, value, line)? {
            continue;
        }
        let value = parse_number(value).ok_or_else(|| {
            ParseError::syntax(path, line_no, "`key value` with a decimal value", line)
        })?;
        push_unique(&mut props, path, line_no, key, value)?;
    }
    Ok(props)
}

/// A properties file: `key value` lines, value a decimal number.
fn read_properties(path: &Path, read: ReadText<'_>) -> Result<Properties, ParseError> {
    read_key_values(path, read, |_, _, _, _| Ok(false))
}

/// A cache's properties file: like [`read_properties`] plus the `sibling_map` line.
fn read_cache(path: &Path, read: ReadText<'_>) -> Result<Cache, ParseError> {
    let mut sibling_map = None;
    let properties = read_key_values(path, read, |line_no, key, value, line| {
        if key != "sibling_map" {
            return Ok(false);
        }
        if sibling_map.is_some() {
            return Err(ParseError::DuplicateKey {
                path: path.to_owned(),
                line: line_no,
                key: key.to_owned(),
            });
        }
        let map = if value.is_empty() {
            Vec::new()
        } else {
            value
                .split(',')
                .map(|bit| match bit {
                    "0" => Some(0),
                    "1" => Some(1),
                    _ => None,
                })
                .collect::<Option<Vec<u8>>>()
                .ok_or_else(|| {
                    ParseError::syntax(
                        path,
                        line_no,
                        "`sibling_map` and a comma-separated list of 0 and 1",
                        line,
                    )
                })?
        };
        sibling_map = Some(map);
        Ok(true)
    })?;
    Ok(Cache {
        properties,
        sibling_map,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::{GpuSpec, TopologyBuilder};
    use crate::write::write;
    use rstest::rstest;

    /// Two CPU nodes, two MI100 (nodes 2 and 3), written to a fresh directory.
    fn tree() -> (tempfile::TempDir, Topology) {
        let t = TopologyBuilder::new()
            .cpus(2)
            .gpu(GpuSpec::mi100().numa(0).caches(1))
            .gpu(GpuSpec::mi100().numa(1).caches(1))
            .build();
        let dir = tempfile::tempdir().unwrap();
        write(&t, dir.path()).unwrap();
        (dir, t)
    }

    fn put(root: &Path, rel: &str, text: &str) {
        fs::write(root.join(rel), text).unwrap();
    }

    #[rstest]
    #[case::value_not_a_number(
        "nodes/2/properties",
        "cpu_cores_count 0\nsimd_count lots\n",
        2,
        "`key value` with a decimal value"
    )]
    #[case::negative_value(
        "nodes/2/properties",
        "simd_count -1\n",
        1,
        "`key value` with a decimal value"
    )]
    #[case::hex_value(
        "nodes/2/properties",
        "simd_count 0x1e0\n",
        1,
        "`key value` with a decimal value"
    )]
    #[case::three_words(
        "nodes/2/properties",
        "simd_count 480\nhive_id 1 2\n",
        2,
        "`key value` (two words)"
    )]
    #[case::key_without_value(
        "nodes/2/io_links/0/properties",
        "type 2\nnode_to\n",
        2,
        "`key value` with a decimal value"
    )]
    #[case::gpu_id_not_a_number("nodes/3/gpu_id", "gpu\n", 1, "a decimal number")]
    #[case::empty_gpu_id("nodes/3/gpu_id", "", 1, "a decimal number")]
    #[case::generation_id_garbage("generation_id", "x1\n", 1, "a decimal number")]
    #[case::system_properties_garbage(
        "system_properties",
        "platform_oem 1 extra\n",
        1,
        "`key value` (two words)"
    )]
    #[case::bad_sibling_map(
        "nodes/2/caches/0/properties",
        "level 1\nsibling_map 1,2\n",
        2,
        "`sibling_map` and a comma-separated list of 0 and 1"
    )]
    #[case::mem_bank_garbage(
        "nodes/3/mem_banks/0/properties",
        "heap_type 1\nsize_in_bytes 1.5\n",
        2,
        "`key value` with a decimal value"
    )]
    fn malformed_files_are_reported_with_file_line_and_expectation(
        #[case] rel: &str,
        #[case] text: &str,
        #[case] line: usize,
        #[case] expected: &str,
    ) {
        let (dir, _) = tree();
        put(dir.path(), rel, text);
        let err = parse(dir.path()).unwrap_err();
        let ParseError::Syntax {
            path,
            line: l,
            expected: e,
            ..
        } = &err
        else {
            panic!("expected a syntax error, got {err}");
        };
        assert_eq!(path, &dir.path().join(rel));
        assert_eq!((*l, *e), (line, expected));
        let message = err.to_string();
        assert!(
            message.contains(&format!("{rel}:{line}: expected")),
            "{message}"
        );
    }

    #[test]
    fn a_duplicate_key_is_an_error() {
        let (dir, _) = tree();
        put(
            dir.path(),
            "nodes/2/properties",
            "simd_count 1\nsimd_count 2\n",
        );
        let err = parse(dir.path()).unwrap_err();
        assert!(
            matches!(&err, ParseError::DuplicateKey { line: 2, key, .. } if key == "simd_count"),
            "{err}"
        );
    }

    #[rstest]
    #[case::no_generation_id("generation_id")]
    #[case::no_system_properties("system_properties")]
    #[case::no_nodes_directory("nodes")]
    #[case::node_without_properties("nodes/2/properties")]
    #[case::node_without_gpu_id("nodes/3/gpu_id")]
    #[case::node_without_name("nodes/3/name")]
    #[case::link_directory_without_properties("nodes/2/io_links/0/properties")]
    fn a_missing_file_is_an_error_naming_it(#[case] rel: &str) {
        let (dir, _) = tree();
        let path = dir.path().join(rel);
        if path.is_dir() {
            fs::remove_dir_all(&path).unwrap();
        } else {
            fs::remove_file(&path).unwrap();
        }
        let err = parse(dir.path()).unwrap_err();
        assert!(
            matches!(&err, ParseError::Io { path: p, source } if *p == path && source.kind() == io::ErrorKind::NotFound),
            "{err}"
        );
        assert!(err.to_string().contains(rel));
    }

    #[rstest]
    #[case::no_caches("caches")]
    #[case::no_p2p_links("p2p_links")]
    #[case::no_io_links("io_links")]
    #[case::no_mem_banks("mem_banks")]
    fn missing_subdirectories_count_as_empty(#[case] sub: &str) {
        let (dir, t) = tree();
        fs::remove_dir_all(dir.path().join("nodes/2").join(sub)).unwrap();
        let parsed = parse(dir.path()).unwrap();
        assert_eq!(parsed.nodes.len(), t.nodes.len());
        let node = &parsed.nodes[2];
        let len = match sub {
            "caches" => node.caches.len(),
            "p2p_links" => node.p2p_links.len(),
            "io_links" => node.io_links.len(),
            _ => node.mem_banks.len(),
        };
        assert_eq!(len, 0);
    }

    #[test]
    fn entries_that_are_not_numbered_are_ignored_and_nodes_are_read_in_numeric_order() {
        let t = TopologyBuilder::new()
            .cpus(1)
            .gpus(11, &GpuSpec::mi100().caches(0))
            .build();
        let dir = tempfile::tempdir().unwrap();
        write(&t, dir.path()).unwrap();
        fs::create_dir(dir.path().join("nodes/README")).unwrap();
        put(dir.path(), "nodes/notes.txt", "hello\n");
        let parsed = parse(dir.path()).unwrap();
        let ids: Vec<u32> = parsed.nodes.iter().map(|n| n.id).collect();
        assert_eq!(ids, (0..12).collect::<Vec<u32>>());
    }

    #[test]
    fn a_node_hidden_by_a_device_cgroup_is_skipped_and_its_links_become_invalid() {
        let (dir, t) = tree();
        let hidden = dir.path().join("nodes/3");
        let read = |p: &Path| {
            if p.starts_with(&hidden) {
                Err(io::Error::from_raw_os_error(EPERM))
            } else {
                fs::read_to_string(p)
            }
        };
        let parsed = parse_with(dir.path(), &read).unwrap();
        assert_eq!(parsed.nodes.len(), 3);
        assert_eq!(parsed.gpus().count(), 1);
        assert_eq!(parsed.gpus().next().unwrap().gpu_id, t.nodes[2].gpu_id);
        // The CPU node 1's link back to the hidden GPU now points nowhere.
        let cpu1 = parsed.node(1).unwrap();
        let to_gpu = cpu1.io_links.iter().find(|l| l.node_to() == 3).unwrap();
        assert!(!parsed.is_valid(to_gpu));
    }

    /// A node that cannot be read for another reason than the device cgroup's `EPERM` (here
    /// `EACCES`, a file mode) is an error naming the file, not a node silently left out.
    #[test]
    fn a_node_unreadable_for_another_reason_is_an_error_naming_the_file() {
        let (dir, _) = tree();
        let denied = dir.path().join("nodes/3/properties");
        let read = |p: &Path| {
            if p == denied {
                Err(io::Error::from_raw_os_error(13))
            } else {
                fs::read_to_string(p)
            }
        };
        let err = parse_with(dir.path(), &read).unwrap_err();
        assert!(
            matches!(&err, ParseError::Io { path, .. } if *path == denied),
            "{err}"
        );
        assert!(err.to_string().contains("nodes/3/properties"), "{err}");
    }

    /// Trees the kernel never writes, each refused naming the file and the fault (before, each
    /// parsed: an empty GPU properties file became GPU 0000:0000 with no CUs, a GPU without
    /// `drm_render_minor` mapped to renderD0).
    #[rstest]
    #[case::empty_gpu_properties(
        "nodes/2/properties",
        "",
        "nodes/2/properties: no `cpu_cores_count` line; the kernel writes one in every node's properties"
    )]
    #[case::empty_cpu_properties(
        "nodes/0/properties",
        "",
        "nodes/0/properties: no `cpu_cores_count` line"
    )]
    #[case::gpu_without_render_minor(
        "nodes/3/properties",
        "-drm_render_minor",
        "nodes/3/properties: no `drm_render_minor` line"
    )]
    #[case::gpu_without_fw_version(
        "nodes/3/properties",
        "-fw_version",
        "nodes/3/properties: no `fw_version` line; the kernel writes one in every GPU node's properties"
    )]
    #[case::gpu_with_render_minor_0(
        "nodes/3/properties",
        "=drm_render_minor 0",
        "nodes/3/properties: `drm_render_minor 0`: a GPU's render node has minor 128 or more"
    )]
    #[case::link_without_node_to(
        "nodes/2/io_links/0/properties",
        "-node_to",
        "nodes/2/io_links/0/properties: no `node_to` line; the kernel writes one in every link's properties"
    )]
    #[case::p2p_link_without_type(
        "nodes/2/p2p_links/0/properties",
        "-type",
        "nodes/2/p2p_links/0/properties: no `type` line"
    )]
    #[case::mem_bank_without_size(
        "nodes/2/mem_banks/0/properties",
        "-size_in_bytes",
        "nodes/2/mem_banks/0/properties: no `size_in_bytes` line"
    )]
    #[case::second_gpu_with_the_first_ones_gpu_id(
        "nodes/3/gpu_id",
        "=gpu_id of node 2",
        "nodes/3/gpu_id: gpu_id"
    )]
    fn trees_the_kernel_never_writes_are_refused_naming_file_and_fault(
        #[case] rel: &str,
        #[case] edit: &str,
        #[case] message: &str,
    ) {
        let (dir, t) = tree();
        let path = dir.path().join(rel);
        let text = fs::read_to_string(&path).unwrap();
        let edited = if let Some(key) = edit.strip_prefix('-') {
            text.lines()
                .filter(|l| l.split_whitespace().next() != Some(key))
                .map(|l| format!("{l}\n"))
                .collect()
        } else if edit == "=gpu_id of node 2" {
            format!("{}\n", t.nodes[2].gpu_id)
        } else if let Some(line) = edit.strip_prefix('=') {
            let key = line.split_whitespace().next().unwrap();
            text.lines()
                .map(|l| {
                    if l.split_whitespace().next() == Some(key) {
                        format!("{line}\n")
                    } else {
                        format!("{l}\n")
                    }
                })
                .collect()
        } else {
            edit.to_owned()
        };
        assert_ne!(edited, text, "the edit changes the file");
        put(dir.path(), rel, &edited);
        let err = parse(dir.path()).unwrap_err().to_string();
        assert!(err.contains(message), "{err}");
        assert!(
            err.starts_with(&dir.path().join(rel).display().to_string()),
            "{err}"
        );
    }

    #[test]
    fn two_gpus_with_one_gpu_id_name_both_nodes() {
        let (dir, t) = tree();
        put(
            dir.path(),
            "nodes/3/gpu_id",
            &format!("{}\n", t.nodes[2].gpu_id),
        );
        let err = parse(dir.path()).unwrap_err();
        assert!(
            matches!(&err, ParseError::DuplicateGpuId { first: 2, gpu_id, .. } if *gpu_id == t.nodes[2].gpu_id),
            "{err}"
        );
    }

    /// An empty root would read the current directory (`AMDGPU_CR_TOPOLOGY_ROOT=`).
    #[test]
    fn an_empty_root_is_refused() {
        let err = parse(Path::new("")).unwrap_err();
        assert!(matches!(err, ParseError::EmptyRoot), "{err}");
        assert!(err.to_string().contains("AMDGPU_CR_TOPOLOGY_ROOT"), "{err}");
    }

    #[test]
    fn a_bare_sibling_map_line_is_an_empty_map() {
        let (dir, _) = tree();
        put(
            dir.path(),
            "nodes/2/caches/0/properties",
            "level 1\nsibling_map\n",
        );
        let parsed = parse(dir.path()).unwrap();
        assert_eq!(parsed.nodes[2].caches[0].sibling_map, Some(Vec::new()));
    }
}
