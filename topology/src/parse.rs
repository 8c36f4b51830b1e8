//! Reading a KFD sysfs topology directory into a [`Topology`].

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::model::{Cache, Link, MemBank, Node, Properties, Topology};

/// The topology root of a real system.
pub const DEFAULT_ROOT: &str = "/sys/class/kfd/kfd/topology";

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

/// Reads the topology under `root` (for a real system [`DEFAULT_ROOT`]).
///
/// Nodes whose files cannot be read for lack of permission (as inside a device cgroup that hides
/// some GPUs) are skipped, with a log message. Missing `mem_banks`, `caches`, `io_links` or
/// `p2p_links` directories count as empty.
///
/// # Errors
///
/// [`ParseError`] naming the file (and line) that is missing or not in the kernel's format.
pub fn parse(root: &Path) -> Result<Topology, ParseError> {
    let generation_id = read_number_file(&root.join("generation_id"))?;
    let system_properties = read_properties(&root.join("system_properties"))?;
    let nodes_dir = root.join("nodes");
    let mut nodes = Vec::new();
    for id in numbered_entries(&nodes_dir, true)? {
        match parse_node(&nodes_dir.join(id.to_string()), id) {
            Ok(node) => nodes.push(node),
            Err(ParseError::Io { path, source }) if is_permission(&source) => {
                log::info!(
                    "skipping topology node {id}: {} is not readable ({source})",
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

fn is_permission(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::PermissionDenied
}

fn parse_node(dir: &Path, id: u32) -> Result<Node, ParseError> {
    let gpu_path = dir.join("gpu_id");
    let gpu_id = u32::try_from(read_number_file(&gpu_path)?)
        .map_err(|_| ParseError::syntax(&gpu_path, 1, "a 32-bit gpu_id", "(too large)"))?;
    let name_path = dir.join("name");
    let name = read_text(&name_path)?;
    let name = name.strip_suffix('\n').unwrap_or(&name).to_owned();
    let properties = read_properties(&dir.join("properties"))?;
    let mem_banks = read_list(&dir.join("mem_banks"), |p| {
        Ok(MemBank {
            properties: read_properties(p)?,
        })
    })?;
    let caches = read_list(&dir.join("caches"), read_cache)?;
    let io_links = read_list(&dir.join("io_links"), |p| {
        Ok(Link {
            properties: read_properties(p)?,
        })
    })?;
    let p2p_links = read_list(&dir.join("p2p_links"), |p| {
        Ok(Link {
            properties: read_properties(p)?,
        })
    })?;
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

fn read_text(path: &Path) -> Result<String, ParseError> {
    fs::read_to_string(path).map_err(|e| ParseError::io(path, e))
}

/// A file holding one decimal number and a newline (`generation_id`, `gpu_id`).
fn read_number_file(path: &Path) -> Result<u64, ParseError> {
    let text = read_text(path)?;
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

/// A properties file: `key value` lines, value a decimal number.
fn read_properties(path: &Path) -> Result<Properties, ParseError> {
    let text = read_text(path)?;
    let mut props = Properties::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let Some((key, value)) = split_line(path, line_no, line)? else {
            continue;
        };
        let value = parse_number(value).ok_or_else(|| {
            ParseError::syntax(path, line_no, "`key value` with a decimal value", line)
        })?;
        push_unique(&mut props, path, line_no, key, value)?;
    }
    Ok(props)
}

/// A cache's properties file: like [`read_properties`] plus the `sibling_map` line.
fn read_cache(path: &Path) -> Result<Cache, ParseError> {
    let text = read_text(path)?;
    let mut cache = Cache::default();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let Some((key, value)) = split_line(path, line_no, line)? else {
            continue;
        };
        if key == "sibling_map" {
            if cache.sibling_map.is_some() {
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
            cache.sibling_map = Some(map);
            continue;
        }
        let value = parse_number(value).ok_or_else(|| {
            ParseError::syntax(path, line_no, "`key value` with a decimal value", line)
        })?;
        push_unique(&mut cache.properties, path, line_no, key, value)?;
    }
    Ok(cache)
}
