//! `amdgpu-cr topology [--topology-root DIR]`: a KFD topology tree as tables (CPU nodes, GPU nodes,
//! xGMI hives).

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use topology::model::{heap_type, keys};
use topology::{Node, Topology};

use super::table::Table;
use super::{count, hex_id, json, model_name, CliError, Format, HumanSize, Outcome, Report, Run};
use kfd_abi::platform::{HostPlatform, Platform};

/// Arguments of `amdgpu-cr topology`.
#[derive(Clone, Debug, clap::Args)]
pub struct TopologyArgs {
    /// Topology root (default: this machine's, or $AMDGPU_CR_TOPOLOGY_ROOT).
    #[arg(long = "topology-root", visible_alias = "root", value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Print one JSON document instead of tables.
    #[arg(long)]
    pub json: bool,
}

impl Run for TopologyArgs {
    fn run(&self, out: &mut dyn Write) -> Result<Outcome, CliError> {
        let root = self
            .root
            .clone()
            .unwrap_or_else(|| HostPlatform::from_env().topology_root());
        let t = read_topology(&root)?;
        TopologyReport::new(&root.display().to_string(), &t)
            .emit(Format::from_json_flag(self.json), out)
    }
}

/// Parses the topology under `root`, naming the root in the error.
///
/// # Errors
///
/// [`CliError::Topology`].
pub(crate) fn read_topology(root: &Path) -> Result<Topology, CliError> {
    topology::parse(root).map_err(|source| CliError::Topology {
        root: root.to_owned(),
        source,
    })
}

/// One io_link, as listed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LinkSummary {
    /// `PCIe`, `xGMI`, `HyperTransport`, ...
    pub link_type: String,
    /// Target node id.
    pub to: u32,
    /// The target links back with the same kind.
    pub two_way: bool,
    /// The target node exists.
    pub valid: bool,
    /// Relative distance.
    pub weight: u64,
}

/// A frame buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Vram {
    /// Bytes.
    pub size: u64,
    /// Fully CPU-visible (large BAR, heap type 1) or not (heap type 2).
    pub public: bool,
}

/// One CPU node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CpuNodeSummary {
    /// Node id.
    pub node_id: u32,
    /// `cpu_cores_count`.
    pub cores: u64,
    /// Sum of its system-memory banks, bytes.
    pub memory: u64,
    /// Its io_links.
    pub links: Vec<LinkSummary>,
}

/// One GPU node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GpuNodeSummary {
    /// Node id.
    pub node_id: u32,
    /// gpu_id (JSON: a hex string).
    #[serde(serialize_with = "json::hex32")]
    pub gpu_id: u32,
    /// The `name` file (e.g. `arcturus`).
    pub name: String,
    /// Known model name of the device id, if any.
    pub model: Option<&'static str>,
    /// `vendor_id` (JSON: a hex string).
    #[serde(serialize_with = "json::hex64")]
    pub vendor_id: u64,
    /// `device_id` (JSON: a hex string).
    #[serde(serialize_with = "json::hex64")]
    pub device_id: u64,
    /// `gfx_target_version`.
    pub gfx_target_version: u64,
    /// Compute units (`simd_count / simd_per_cu`).
    pub compute_units: u64,
    /// Render minor (`/dev/dri/renderD<minor>`).
    pub render_minor: u32,
    /// PCI location `domain:bus:device.function`.
    pub location: String,
    /// The CPU node its first io_link goes to.
    pub numa_node: Option<u32>,
    /// Frame buffer, if it has one.
    pub vram: Option<Vram>,
    /// `hive_id` (0: not in a hive; JSON: a hex string, as it may exceed 2^53).
    #[serde(serialize_with = "json::hex64")]
    pub hive_id: u64,
    /// `fw_version`.
    pub fw_version: u64,
    /// `sdma_fw_version`.
    pub sdma_fw_version: u64,
    /// `capability`.
    pub capability: u64,
    /// Its io_links.
    pub links: Vec<LinkSummary>,
    /// Number of p2p_links.
    pub p2p_links: usize,
}

/// An xGMI hive.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HiveSummary {
    /// The members' `hive_id` (of the first member; JSON: a hex string).
    #[serde(serialize_with = "json::hex64")]
    pub hive_id: u64,
    /// Member gpu_ids in node order (JSON: hex strings).
    #[serde(serialize_with = "json::hex32_list")]
    pub gpus: Vec<u32>,
    /// Member node ids.
    pub nodes: Vec<u32>,
}

/// The report of `amdgpu-cr topology`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TopologyReport {
    /// The root, as given.
    pub root: String,
    /// `generation_id`.
    pub generation_id: u64,
    /// CPU nodes in node order.
    pub cpus: Vec<CpuNodeSummary>,
    /// GPU nodes in node order.
    pub gpus: Vec<GpuNodeSummary>,
    /// xGMI hives (from two-way xGMI links).
    pub hives: Vec<HiveSummary>,
}

/// PCI location of a GPU: `domain:bus:device.function` from `domain` and `location_id`
/// (`bus << 8 | device << 3 | function`).
#[must_use]
pub(crate) fn pci_location(node: &Node) -> String {
    let loc = node.prop(keys::LOCATION_ID);
    format!(
        "{:04x}:{:02x}:{:02x}.{}",
        node.prop(keys::DOMAIN),
        (loc >> 8) & 0xff,
        (loc >> 3) & 0x1f,
        loc & 0x7
    )
}

/// The CPU node a GPU's io_link 0 goes to (its NUMA node).
#[must_use]
pub(crate) fn numa_node(t: &Topology, node: &Node) -> Option<u32> {
    let to = node.io_links.first()?.node_to();
    t.node(to).filter(|n| !n.is_gpu()).map(|n| n.id)
}

fn links(t: &Topology, node: &Node) -> Vec<LinkSummary> {
    node.io_links
        .iter()
        .map(|l| LinkSummary {
            link_type: l.link_type().to_string(),
            to: l.node_to(),
            two_way: t.has_peer(l),
            valid: t.is_valid(l),
            weight: l.weight(),
        })
        .collect()
}

/// `PCIe->0, xGMI->3,4,5`; one-way links marked `(one-way)`, links to missing nodes `(missing)`.
fn links_text(links: &[LinkSummary]) -> String {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for l in links {
        let mut key = l.link_type.clone();
        if !l.valid {
            key.push_str(" (missing)");
        } else if !l.two_way {
            key.push_str(" (one-way)");
        }
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, targets)) => targets.push(l.to.to_string()),
            None => groups.push((key, vec![l.to.to_string()])),
        }
    }
    if groups.is_empty() {
        return "-".to_owned();
    }
    groups
        .iter()
        .map(|(k, targets)| match k.split_once(' ') {
            Some((ty, note)) => format!("{ty}->{} {note}", targets.join(",")),
            None => format!("{k}->{}", targets.join(",")),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl TopologyReport {
    /// The report of topology `t` read from `root`.
    #[must_use]
    pub fn new(root: &str, t: &Topology) -> Self {
        let cpus = t
            .cpus()
            .map(|n| CpuNodeSummary {
                node_id: n.id,
                cores: n.prop(keys::CPU_CORES_COUNT),
                memory: n
                    .mem_banks
                    .iter()
                    .filter(|b| b.heap_type() == heap_type::SYSTEM)
                    .map(|b| b.size_in_bytes())
                    .fold(0u64, u64::saturating_add),
                links: links(t, n),
            })
            .collect();
        let gpus = t
            .gpus()
            .map(|n| GpuNodeSummary {
                node_id: n.id,
                gpu_id: n.gpu_id,
                name: n.name.clone(),
                model: model_name(n.prop(keys::VENDOR_ID), n.prop(keys::DEVICE_ID)),
                vendor_id: n.prop(keys::VENDOR_ID),
                device_id: n.prop(keys::DEVICE_ID),
                gfx_target_version: n.prop(keys::GFX_TARGET_VERSION),
                compute_units: n.prop(keys::SIMD_COUNT) / n.prop(keys::SIMD_PER_CU).max(1),
                render_minor: n.render_minor(),
                location: pci_location(n),
                numa_node: numa_node(t, n),
                vram: n.vram().map(|(public, size)| Vram { size, public }),
                hive_id: n.prop(keys::HIVE_ID),
                fw_version: n.prop(keys::FW_VERSION),
                sdma_fw_version: n.prop(keys::SDMA_FW_VERSION),
                capability: n.prop(keys::CAPABILITY),
                links: links(t, n),
                p2p_links: n.p2p_links.len(),
            })
            .collect();
        let hives = t
            .hives()
            .into_iter()
            .map(|members| HiveSummary {
                hive_id: members
                    .first()
                    .and_then(|&g| t.gpu(g))
                    .map_or(0, |n| n.prop(keys::HIVE_ID)),
                nodes: members
                    .iter()
                    .filter_map(|&g| t.gpu(g).map(|n| n.id))
                    .collect(),
                gpus: members,
            })
            .collect();
        Self {
            root: root.to_owned(),
            generation_id: t.generation_id,
            cpus,
            gpus,
            hives,
        }
    }
}

/// `32 GiB public` / `16 GiB private`.
pub(crate) fn vram_text(vram: Option<Vram>) -> String {
    match vram {
        Some(v) => format!(
            "{} {}",
            HumanSize(v.size),
            if v.public { "public" } else { "private" }
        ),
        None => "-".to_owned(),
    }
}

/// `0x4a7e000000000001`, or `-` for 0.
pub(crate) fn hive_text(hive_id: u64) -> String {
    if hive_id == 0 {
        "-".to_owned()
    } else {
        format!("{hive_id:#x}")
    }
}

impl Report for TopologyReport {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(
            out,
            "Topology {}: {}, {}, generation {}",
            self.root,
            count(self.cpus.len(), "CPU node", "CPU nodes"),
            count(self.gpus.len(), "GPU", "GPUs"),
            self.generation_id
        )?;
        writeln!(out, "\nCPU nodes")?;
        let mut t = Table::new(&["node", "cores", "memory", "links"]);
        for c in &self.cpus {
            t.row([
                c.node_id.to_string(),
                c.cores.to_string(),
                HumanSize(c.memory).to_string(),
                links_text(&c.links),
            ]);
        }
        t.write(out, "  ")?;
        writeln!(out, "\nGPU nodes")?;
        if self.gpus.is_empty() {
            writeln!(out, "  none")?;
        } else {
            let mut t = Table::new(&[
                "node", "gpu_id", "name", "model", "device", "CUs", "renderD", "location", "NUMA",
                "VRAM", "hive", "fw", "sdma fw", "links",
            ]);
            for g in &self.gpus {
                t.row([
                    g.node_id.to_string(),
                    hex_id(g.gpu_id),
                    g.name.clone(),
                    g.model.unwrap_or("-").to_owned(),
                    format!("{:04x}:{:04x}", g.vendor_id, g.device_id),
                    g.compute_units.to_string(),
                    g.render_minor.to_string(),
                    g.location.clone(),
                    g.numa_node.map_or("-".to_owned(), |n| n.to_string()),
                    vram_text(g.vram),
                    hive_text(g.hive_id),
                    g.fw_version.to_string(),
                    g.sdma_fw_version.to_string(),
                    links_text(&g.links),
                ]);
            }
            t.write(out, "  ")?;
        }
        writeln!(out, "\nxGMI hives")?;
        if self.hives.is_empty() {
            writeln!(out, "  none")?;
        }
        for h in &self.hives {
            writeln!(
                out,
                "  hive {}: GPUs {} (nodes {})",
                hive_text(h.hive_id),
                h.gpus
                    .iter()
                    .map(|&g| hex_id(g))
                    .collect::<Vec<_>>()
                    .join(", "),
                h.nodes
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )?;
        }
        Ok(())
    }

    fn outcome(&self) -> Outcome {
        Outcome::Success
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use topology::builder::{GpuSpec, TopologyBuilder};

    #[test]
    fn location_decodes_bus_device_function_and_domain() {
        let mut t = TopologyBuilder::new()
            .cpus(1)
            .gpu(GpuSpec::mi100().prop(keys::LOCATION_ID, 0xc1 << 8 | 2 << 3 | 1))
            .build();
        let g = t.gpus().next().unwrap().gpu_id;
        t.gpu_mut(g).unwrap().properties.set(keys::DOMAIN, 2);
        assert_eq!(pci_location(t.gpu(g).unwrap()), "0002:c1:02.1");
    }

    #[test]
    fn numa_node_is_the_cpu_of_the_first_link() {
        let t = TopologyBuilder::new()
            .cpus(2)
            .gpu(GpuSpec::mi100().numa(1))
            .build();
        let g = t.gpus().next().unwrap();
        assert_eq!(numa_node(&t, g), Some(1));
    }

    #[test]
    fn links_group_by_kind_and_direction() {
        let l = |ty: &str, to, two_way, valid| LinkSummary {
            link_type: ty.to_owned(),
            to,
            two_way,
            valid,
            weight: 0,
        };
        let text = links_text(&[
            l("PCIe", 0, false, true),
            l("xGMI", 3, true, true),
            l("xGMI", 4, true, true),
            l("xGMI", 9, false, false),
        ]);
        assert_eq!(text, "PCIe->0 (one-way), xGMI->3,4, xGMI->9 (missing)");
        assert_eq!(links_text(&[]), "-");
    }
}
