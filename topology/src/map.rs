//! Mapping the GPUs of a checkpointed machine (the source) onto this machine's (the
//! destination), and explaining why when that is impossible.
//!
//! A source GPU may go to a destination GPU when:
//! - the properties that define what code runs on it are equal ([`EQUAL_PROPERTIES`], plus
//!   `vram_public`);
//! - every enabled [`Check`] holds (firmware not older, caches/GWS/VRAM not fewer, capability
//!   equal);
//! - its links fit: no fewer valid PCIe/xGMI io_links; each link to a CPU node is matched by a
//!   destination link to a CPU node that is not weaker (an xGMI link needs xGMI, a two-way link
//!   needs two-way); each xGMI link to another source GPU is matched by an xGMI link to that GPU's
//!   destination (so hives are mapped whole into hives). GPU-to-GPU PCIe links are not compared,
//!   and `io_links_count` need not be equal: a more capable destination is fine;
//! - with `KFD_NUMA_CHECK`, source CPU nodes map one to one onto destination CPU nodes and every
//!   GPU's CPU links follow that map.
//!
//! Hives: upstream pairs each source hive with a distinct destination hive. Here hives follow
//! from the link rule instead: a source hive must land inside one destination hive (its xGMI
//! links must exist there), and two source hives may share a larger destination hive, in line
//! with "a more capable destination is accepted" (see criu-plugin.md section 5, intent versus
//! letter).
//!
//! The search is a backtracking over destination candidates with forward checking (every
//! unplaced GPU keeps a candidate, and a perfect bipartite matching still exists). It is complete:
//! if a mapping exists it is found. Candidates with the same gpu_id are tried first, then the one
//! at the same position, so the identity mapping is returned whenever it is valid.

use std::fmt::{self, Display, Write as _};

use serde::Serialize;

use crate::model::{keys, LinkType, Node, Topology};
use crate::options::{Check, CheckOptions};

/// Node properties that must be equal on both sides, in the order they are reported.
pub const EQUAL_PROPERTIES: &[&str] = &[
    keys::VENDOR_ID,
    keys::DEVICE_ID,
    keys::SIMD_COUNT,
    keys::MEM_BANKS_COUNT,
    keys::MAX_WAVES_PER_SIMD,
    keys::LDS_SIZE_IN_KB,
    keys::WAVE_FRONT_SIZE,
    keys::ARRAY_COUNT,
    keys::SIMD_ARRAYS_PER_ENGINE,
    keys::CU_PER_SIMD_ARRAY,
    keys::SIMD_PER_CU,
    keys::MAX_SLOTS_SCRATCH_CU,
    keys::NUM_SDMA_ENGINES,
    keys::NUM_SDMA_XGMI_ENGINES,
    keys::NUM_SDMA_QUEUES_PER_ENGINE,
    keys::NUM_CP_QUEUES,
];

/// Pseudo-property name for "VRAM fully visible to the CPU" (from the GPU's memory bank).
pub const VRAM_PUBLIC: &str = "vram_public";
/// Pseudo-property name for the VRAM size in bytes (from the GPU's memory bank).
pub const VRAM_SIZE: &str = "vram_size";

/// One mapped GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GpuMapping {
    /// gpu_id in the image.
    pub source_gpu_id: u32,
    /// gpu_id on this machine.
    pub destination_gpu_id: u32,
    /// Topology node id in the image.
    pub source_node_id: u32,
    /// Topology node id on this machine.
    pub destination_node_id: u32,
    /// Render minor in the image.
    pub source_render_minor: u32,
    /// Render minor on this machine (`/dev/dri/renderD<minor>`).
    pub destination_render_minor: u32,
}

/// A complete mapping of source GPUs (and the CPU nodes they hang off) to destination ones.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Mapping {
    /// One entry per source GPU, in source node order.
    pub gpus: Vec<GpuMapping>,
    /// `(source CPU node id, destination CPU node id)` for the CPU nodes that source GPUs link
    /// to, in source order. One to one when `KFD_NUMA_CHECK` is on; otherwise the CPU node that
    /// each source CPU node's first GPU landed next to.
    pub cpus: Vec<(u32, u32)>,
}

impl Mapping {
    /// The mapping of the source GPU with `source_gpu_id`.
    #[must_use]
    pub fn gpu(&self, source_gpu_id: u32) -> Option<&GpuMapping> {
        self.gpus.iter().find(|g| g.source_gpu_id == source_gpu_id)
    }

    /// The destination gpu_id of a source gpu_id.
    #[must_use]
    pub fn destination_gpu(&self, source_gpu_id: u32) -> Option<u32> {
        self.gpu(source_gpu_id).map(|g| g.destination_gpu_id)
    }

    /// The destination node id of a source node id (GPU or mapped CPU node).
    #[must_use]
    pub fn destination_node(&self, source_node_id: u32) -> Option<u32> {
        self.gpus
            .iter()
            .find(|g| g.source_node_id == source_node_id)
            .map(|g| g.destination_node_id)
            .or_else(|| {
                self.cpus
                    .iter()
                    .find(|(s, _)| *s == source_node_id)
                    .map(|&(_, d)| d)
            })
    }

    /// True when every GPU keeps its gpu_id.
    #[must_use]
    pub fn is_identity(&self) -> bool {
        self.gpus
            .iter()
            .all(|g| g.source_gpu_id == g.destination_gpu_id)
    }
}

impl Display for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for g in &self.gpus {
            writeln!(
                f,
                "GPU {:#06x} (node {}, renderD{}) -> GPU {:#06x} (node {}, renderD{})",
                g.source_gpu_id,
                g.source_node_id,
                g.source_render_minor,
                g.destination_gpu_id,
                g.destination_node_id,
                g.destination_render_minor
            )?;
        }
        for (s, d) in &self.cpus {
            writeln!(f, "CPU node {s} -> CPU node {d}")?;
        }
        Ok(())
    }
}

/// A GPU named in an explanation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct GpuRef {
    /// Its gpu_id.
    pub gpu_id: u32,
    /// Its topology node id.
    pub node_id: u32,
}

impl Display for GpuRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GPU {:#06x} (node {})", self.gpu_id, self.node_id)
    }
}

/// Why one destination GPU cannot take one source GPU (the first reason found).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reason {
    /// A property that must be equal differs.
    Differs {
        /// Property name.
        property: &'static str,
        /// Value in the image.
        source: u64,
        /// Value here.
        destination: u64,
    },
    /// An optional check fails.
    CheckFailed {
        /// The check (its variable lifts it).
        check: Check,
        /// Property compared.
        property: &'static str,
        /// Value in the image.
        source: u64,
        /// Value here.
        destination: u64,
    },
    /// Fewer valid PCIe/xGMI io_links than the source GPU had.
    FewerLinks {
        /// Source count.
        source: usize,
        /// Destination count.
        destination: usize,
    },
    /// No link to a CPU node that can stand for one the source GPU had.
    NoMatchingCpuLink {
        /// Source CPU node the link went to.
        source_cpu: u32,
        /// Its kind.
        link_type: LinkType,
        /// Whether it was two-way.
        two_way: bool,
    },
    /// The source GPU is in an xGMI hive larger than the destination GPU's (0: none).
    HiveTooSmall {
        /// Source hive size.
        source: usize,
        /// Destination hive size.
        destination: usize,
    },
    /// Fewer xGMI links to other GPUs.
    FewerXgmiLinks {
        /// Source count.
        source: usize,
        /// Destination count.
        destination: usize,
    },
    /// Already taken by another source GPU in the best partial mapping.
    Taken {
        /// The source GPU that took it.
        by: u32,
    },
    /// The source GPU has an xGMI link to a GPU whose destination this GPU has no such link to.
    MissingXgmiLink {
        /// The source GPU's xGMI peer.
        source_peer: u32,
        /// Where that peer was mapped.
        destination_peer: u32,
    },
    /// NUMA placement cannot be kept (`KFD_NUMA_CHECK`).
    NumaConflict {
        /// The source CPU node the GPU hangs off.
        source_cpu: u32,
        /// The destination CPU node it is already mapped to, if it is.
        mapped_to: Option<u32>,
        /// The destination CPU nodes this GPU hangs off.
        destination_cpus: Vec<u32>,
    },
    /// Taking it leaves another source GPU with no destination at all (`Some`), or the
    /// remaining source GPUs with too few destinations between them (`None`).
    Starves {
        /// The source GPU left without a candidate.
        source_gpu: Option<u32>,
    },
}

impl Reason {
    /// The check whose variable, set to 0, would remove this reason.
    #[must_use]
    pub fn check(&self) -> Option<Check> {
        match self {
            Reason::CheckFailed { check, .. } => Some(*check),
            Reason::NumaConflict { .. } => Some(Check::Numa),
            _ => None,
        }
    }
}

impl Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Differs {
                property,
                source,
                destination,
            } => write!(
                f,
                "{property} is {destination} here but {source} in the image"
            ),
            Reason::CheckFailed {
                check,
                property,
                source,
                destination,
            } => {
                let relation = if *check == Check::Capability {
                    "differs from"
                } else {
                    "is lower than"
                };
                write!(
                    f,
                    "{property} {destination} here {relation} {source} in the image"
                )
            }
            Reason::FewerLinks {
                source,
                destination,
            } => write!(
                f,
                "{destination} valid PCIe/xGMI links here, {source} in the image"
            ),
            Reason::NoMatchingCpuLink {
                source_cpu,
                link_type,
                two_way,
            } => write!(
                f,
                "no {}{link_type} link to a CPU node to stand for the image's link to CPU node \
                 {source_cpu}",
                if *two_way { "two-way " } else { "" }
            ),
            Reason::HiveTooSmall {
                source,
                destination: 0,
            } => write!(
                f,
                "not in an xGMI hive; the image's GPU is in a hive of {source}"
            ),
            Reason::HiveTooSmall {
                source,
                destination,
            } => write!(
                f,
                "in an xGMI hive of {destination}; the image's GPU is in a hive of {source}"
            ),
            Reason::FewerXgmiLinks {
                source,
                destination,
            } => write!(f, "{destination} xGMI links here, {source} in the image"),
            Reason::Taken { by } => write!(f, "already taken by image GPU {by:#06x}"),
            Reason::MissingXgmiLink {
                source_peer,
                destination_peer,
            } => write!(
                f,
                "no xGMI link to GPU {destination_peer:#06x}, where image GPU {source_peer:#06x} \
                 (an xGMI peer) went"
            ),
            Reason::NumaConflict {
                source_cpu,
                mapped_to: Some(to),
                destination_cpus,
            } => write!(
                f,
                "hangs off CPU node(s) {destination_cpus:?}, but the image's CPU node \
                 {source_cpu} is already mapped to CPU node {to}"
            ),
            Reason::NumaConflict {
                source_cpu,
                mapped_to: None,
                destination_cpus,
            } => write!(
                f,
                "hangs off CPU node(s) {destination_cpus:?}, already taken by CPU nodes of the \
                 image other than {source_cpu}"
            ),
            Reason::Starves {
                source_gpu: Some(gpu),
            } => write!(
                f,
                "taking it leaves image GPU {gpu:#06x} with no destination"
            ),
            Reason::Starves { source_gpu: None } => write!(
                f,
                "taking it leaves the image's remaining GPUs too few destinations"
            ),
        }
    }
}

/// One destination GPU ruled out for a source GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Rejection {
    /// The destination GPU.
    pub destination: GpuRef,
    /// The first reason found.
    pub reason: Reason,
    /// Checks that, all turned off, would make this GPU a candidate (empty when turning checks
    /// off would not be enough).
    pub lifted_by: Vec<Check>,
}

/// A source GPU with no destination, and why each destination GPU is ruled out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unplaced {
    /// The source GPU.
    pub gpu: GpuRef,
    /// One entry per destination GPU.
    pub rejections: Vec<Rejection>,
}

/// GPUs and the CPU node they hang off, for NUMA explanations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NumaGroup {
    /// CPU node id.
    pub cpu: u32,
    /// gpu_ids on it.
    pub gpus: Vec<u32>,
}

/// Why the source GPUs cannot be mapped onto the destination's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MapError {
    /// Different numbers of GPUs.
    #[error(
        "the image was taken with {image_gpus} GPU(s) but this node has {local_gpus}; restore \
         needs the same number (inside a container, check which GPUs are visible)"
    )]
    GpuCount {
        /// GPUs in the image.
        image_gpus: usize,
        /// GPUs here.
        local_gpus: usize,
    },
    /// Some source GPUs have no compatible destination GPU at all.
    #[error("{}", display_no_candidate(unplaced))]
    NoCandidate {
        /// Each such source GPU, with every destination's first reason.
        unplaced: Vec<Unplaced>,
    },
    /// More source GPUs than there are destinations compatible with any of them.
    #[error("{}", display_contention(sources, destinations, unplaced))]
    Contention {
        /// The source GPUs competing.
        sources: Vec<u32>,
        /// The only destination GPUs any of them can use.
        destinations: Vec<u32>,
        /// For each competing source GPU, why the other destinations are ruled out.
        unplaced: Vec<Unplaced>,
    },
    /// The GPUs fit individually but not with their NUMA placement kept.
    #[error("{}", display_numa(image, local))]
    NumaPlacement {
        /// The image's GPUs per CPU node.
        image: Vec<NumaGroup>,
        /// This node's GPUs per CPU node.
        local: Vec<NumaGroup>,
    },
    /// Every GPU has candidates but no combination keeps all links (hives) intact.
    #[error("{}", display_no_consistent(partial, stuck))]
    NoConsistentMapping {
        /// The largest partial mapping found, `(source gpu_id, destination gpu_id)`.
        partial: Vec<(u32, u32)>,
        /// The source GPU that could not be added to it, and why.
        stuck: Unplaced,
    },
}

/// One line per distinct reason, naming every destination GPU it applies to.
fn rejection_lines(rejections: &[Rejection]) -> String {
    let mut groups: Vec<(String, Vec<GpuRef>)> = Vec::new();
    for r in rejections {
        let mut line = r.reason.to_string();
        if !r.lifted_by.is_empty() {
            let vars: Vec<String> = r.lifted_by.iter().map(|c| format!("{c}=0")).collect();
            let _ = write!(line, " (setting {} would allow it)", vars.join(" and "));
        }
        match groups.iter_mut().find(|(l, _)| *l == line) {
            Some((_, gpus)) => gpus.push(r.destination),
            None => groups.push((line, vec![r.destination])),
        }
    }
    let mut out = String::new();
    for (line, gpus) in groups {
        let _ = write!(out, "\n    {}: {line}", gpu_list(&gpus));
    }
    out
}

/// "GPU 0x1234 (node 2)" or "GPUs 0x1234, 0x5678 (nodes 2, 3)".
fn gpu_list(gpus: &[GpuRef]) -> String {
    match gpus {
        [one] => one.to_string(),
        _ => format!(
            "GPUs {} (nodes {})",
            hex_list(&gpus.iter().map(|g| g.gpu_id).collect::<Vec<_>>()),
            gpus.iter()
                .map(|g| g.node_id.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Source GPUs grouped by identical explanations: `(sources, lines)`.
fn grouped(unplaced: &[Unplaced]) -> Vec<(Vec<GpuRef>, String)> {
    let mut groups: Vec<(Vec<GpuRef>, String)> = Vec::new();
    for u in unplaced {
        let lines = rejection_lines(&u.rejections);
        match groups.iter_mut().find(|(_, l)| *l == lines) {
            Some((gpus, _)) => gpus.push(u.gpu),
            None => groups.push((vec![u.gpu], lines)),
        }
    }
    groups
}

fn display_no_candidate(unplaced: &[Unplaced]) -> String {
    let mut out = String::from("no GPU on this node can take some of the image's GPUs:");
    for (gpus, lines) in grouped(unplaced) {
        let verb = if gpus.len() == 1 { "has" } else { "have" };
        let _ = write!(
            out,
            "\n  image {} {verb} no candidate:{lines}",
            gpu_list(&gpus)
        );
    }
    out
}

fn display_contention(sources: &[u32], destinations: &[u32], unplaced: &[Unplaced]) -> String {
    let mut out = format!(
        "{} of the image's GPUs ({}) can only go to {} GPU(s) here ({}):",
        sources.len(),
        hex_list(sources),
        destinations.len(),
        hex_list(destinations)
    );
    for (gpus, lines) in grouped(unplaced) {
        let _ = write!(out, "\n  image {} cannot use:{lines}", gpu_list(&gpus));
    }
    out
}

fn display_numa(image: &[NumaGroup], local: &[NumaGroup]) -> String {
    let groups = |g: &[NumaGroup]| {
        g.iter()
            .map(|g| format!("CPU node {}: [{}]", g.cpu, hex_list(&g.gpus)))
            .collect::<Vec<_>>()
            .join("; ")
    };
    format!(
        "the GPUs fit, but not with their NUMA placement kept: in the image {}; here {}. Set \
         KFD_NUMA_CHECK=0 to restore without keeping it",
        groups(image),
        groups(local)
    )
}

fn display_no_consistent(partial: &[(u32, u32)], stuck: &Unplaced) -> String {
    let mut out = format!(
        "every GPU of the image has candidates here, but no combination keeps their links \
         (xGMI hives) intact; after mapping {}, image {} has no place:",
        if partial.is_empty() {
            "nothing".to_owned()
        } else {
            partial
                .iter()
                .map(|(s, d)| format!("{s:#06x}->{d:#06x}"))
                .collect::<Vec<_>>()
                .join(", ")
        },
        stuck.gpu
    );
    out.push_str(&rejection_lines(&stuck.rejections));
    out
}

fn hex_list(ids: &[u32]) -> String {
    ids.iter()
        .map(|id| format!("{id:#06x}"))
        .collect::<Vec<_>>()
        .join(", ")
}

// ---------------------------------------------------------------------------------------------
// The solver's view of one side.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CpuLink {
    cpu: usize,
    ty: LinkType,
    two_way: bool,
}

#[derive(Debug)]
struct Gpu {
    r: GpuRef,
    render_minor: u32,
    equal: Vec<u64>,
    vram_public: u64,
    vram_size: u64,
    fw: u64,
    sdma_fw: u64,
    caches: u64,
    gws: u64,
    capability: u64,
    valid_links: usize,
    cpu_links: Vec<CpuLink>,
    xgmi_out: usize,
    hive_size: usize,
}

#[derive(Debug)]
struct Side {
    gpus: Vec<Gpu>,
    cpu_ids: Vec<u32>,
    /// xgmi[a][b]: the xGMI link a -> b, and whether it is two-way.
    xgmi: Vec<Vec<Option<bool>>>,
}

impl Side {
    fn new(t: &Topology) -> Self {
        let cpu_ids: Vec<u32> = t.cpus().map(|n| n.id).collect();
        let gpu_nodes: Vec<&Node> = t.gpus().collect();
        let n = gpu_nodes.len();
        let hives = t.hives();
        let mut xgmi = vec![vec![None; n]; n];
        let mut gpus = Vec::with_capacity(n);
        for (i, node) in gpu_nodes.iter().enumerate() {
            let links = t.resolved_links(node);
            let mut cpu_links = Vec::new();
            let mut xgmi_out = 0;
            for l in &links {
                if let Some(c) = cpu_ids.iter().position(|&id| id == l.to) {
                    cpu_links.push(CpuLink {
                        cpu: c,
                        ty: l.link_type,
                        two_way: l.two_way,
                    });
                } else if l.link_type == LinkType::Xgmi {
                    if let Some(j) = gpu_nodes.iter().position(|g| g.id == l.to) {
                        xgmi[i][j] = Some(l.two_way);
                        xgmi_out += 1;
                    }
                }
            }
            let (public, size) = node.vram().unwrap_or((false, 0));
            gpus.push(Gpu {
                r: GpuRef {
                    gpu_id: node.gpu_id,
                    node_id: node.id,
                },
                render_minor: node.render_minor(),
                equal: EQUAL_PROPERTIES.iter().map(|k| node.prop(k)).collect(),
                vram_public: u64::from(public),
                vram_size: size,
                fw: node.prop(keys::FW_VERSION),
                sdma_fw: node.prop(keys::SDMA_FW_VERSION),
                caches: node.prop(keys::CACHES_COUNT),
                gws: node.prop(keys::NUM_GWS),
                capability: node.prop(keys::CAPABILITY),
                valid_links: links.len(),
                cpu_links,
                xgmi_out,
                hive_size: hives
                    .iter()
                    .find(|h| h.contains(&node.gpu_id))
                    .map_or(0, Vec::len),
            });
        }
        Self {
            gpus,
            cpu_ids,
            xgmi,
        }
    }

    fn numa_groups(&self) -> Vec<NumaGroup> {
        self.cpu_ids
            .iter()
            .enumerate()
            .map(|(c, &cpu)| NumaGroup {
                cpu,
                gpus: self
                    .gpus
                    .iter()
                    .filter(|g| g.cpu_links.iter().any(|l| l.cpu == c))
                    .map(|g| g.r.gpu_id)
                    .collect(),
            })
            .filter(|g| !g.gpus.is_empty())
            .collect()
    }
}

fn link_fits(src: &CpuLink, dst: &CpuLink) -> bool {
    !(src.ty == LinkType::Xgmi && dst.ty != LinkType::Xgmi) && (!src.two_way || dst.two_way)
}

/// All static reasons (independent of other GPUs' placement) why `d` cannot take `s`.
fn static_reasons(s: &Gpu, d: &Gpu, options: &CheckOptions) -> Vec<Reason> {
    let mut out = Vec::new();
    for (i, property) in EQUAL_PROPERTIES.iter().enumerate() {
        if s.equal[i] != d.equal[i] {
            out.push(Reason::Differs {
                property,
                source: s.equal[i],
                destination: d.equal[i],
            });
        }
    }
    if s.vram_public != d.vram_public {
        out.push(Reason::Differs {
            property: VRAM_PUBLIC,
            source: s.vram_public,
            destination: d.vram_public,
        });
    }
    let checks = [
        (Check::FwVersion, keys::FW_VERSION, s.fw, d.fw),
        (
            Check::SdmaFwVersion,
            keys::SDMA_FW_VERSION,
            s.sdma_fw,
            d.sdma_fw,
        ),
        (Check::CachesCount, keys::CACHES_COUNT, s.caches, d.caches),
        (Check::NumGws, keys::NUM_GWS, s.gws, d.gws),
        (Check::VramSize, VRAM_SIZE, s.vram_size, d.vram_size),
    ];
    for (check, property, sv, dv) in checks {
        if options.enabled(check) && sv > dv {
            out.push(Reason::CheckFailed {
                check,
                property,
                source: sv,
                destination: dv,
            });
        }
    }
    if options.capability && s.capability != d.capability {
        out.push(Reason::CheckFailed {
            check: Check::Capability,
            property: keys::CAPABILITY,
            source: s.capability,
            destination: d.capability,
        });
    }
    if s.hive_size > d.hive_size {
        out.push(Reason::HiveTooSmall {
            source: s.hive_size,
            destination: d.hive_size,
        });
    }
    if s.xgmi_out > d.xgmi_out {
        out.push(Reason::FewerXgmiLinks {
            source: s.xgmi_out,
            destination: d.xgmi_out,
        });
    }
    if s.valid_links > d.valid_links {
        out.push(Reason::FewerLinks {
            source: s.valid_links,
            destination: d.valid_links,
        });
    }
    out.extend(
        unmatched_cpu_link(s, d).map(|(source_cpu, l)| Reason::NoMatchingCpuLink {
            source_cpu,
            link_type: l.ty,
            two_way: l.two_way,
        }),
    );
    out
}

/// The first source CPU link that no destination CPU link can stand for (ignoring NUMA), with
/// the source CPU's index resolved by the caller.
fn unmatched_cpu_link(s: &Gpu, d: &Gpu) -> Option<(u32, CpuLink)> {
    // Distinct destination links for distinct source links: a small bipartite matching.
    let adj: Vec<Vec<usize>> = s
        .cpu_links
        .iter()
        .map(|sl| {
            (0..d.cpu_links.len())
                .filter(|&j| link_fits(sl, &d.cpu_links[j]))
                .collect()
        })
        .collect();
    let (matched, _) = max_matching(&adj, d.cpu_links.len());
    matched.iter().position(Option::is_none).map(|i| {
        (
            u32::try_from(s.cpu_links[i].cpu).unwrap_or(u32::MAX),
            s.cpu_links[i],
        )
    })
}

/// Kuhn's augmenting paths. Returns, per left vertex, its right vertex (if matched) and per
/// right vertex its left vertex.
fn max_matching(adj: &[Vec<usize>], n_right: usize) -> (Vec<Option<usize>>, Vec<Option<usize>>) {
    fn augment(
        u: usize,
        adj: &[Vec<usize>],
        seen: &mut [bool],
        right: &mut [Option<usize>],
    ) -> bool {
        for &v in &adj[u] {
            if seen[v] {
                continue;
            }
            seen[v] = true;
            if right[v].is_none_or(|w| augment(w, adj, seen, right)) {
                right[v] = Some(u);
                return true;
            }
        }
        false
    }
    let mut right = vec![None; n_right];
    for u in 0..adj.len() {
        let mut seen = vec![false; n_right];
        augment(u, adj, &mut seen, &mut right);
    }
    let mut left = vec![None; adj.len()];
    for (v, u) in right.iter().enumerate() {
        if let Some(u) = u {
            left[*u] = Some(v);
        }
    }
    (left, right)
}

// ---------------------------------------------------------------------------------------------
// The search.

#[derive(Clone, Debug)]
struct State {
    assign: Vec<Option<usize>>,
    used_by: Vec<Option<usize>>,
    cpu_map: Vec<Option<usize>>,
    cpu_rev: Vec<Option<usize>>,
}

struct Solver<'a> {
    src: &'a Side,
    dst: &'a Side,
    numa: bool,
    /// Static candidates per source GPU, in preference order.
    candidates: Vec<Vec<usize>>,
    order: Vec<usize>,
    state: State,
    /// Deepest failure: (depth, source GPU, state then).
    deepest: Option<(usize, usize, State)>,
}

type Bindings = Vec<(usize, usize)>;

impl Solver<'_> {
    /// Why `d` cannot take `s` given the current state, or the CPU bindings it would add (one
    /// entry per way of matching the GPU's CPU links).
    fn dynamic(&self, s: usize, d: usize) -> Result<Vec<Bindings>, Reason> {
        if let Some(by) = self.state.used_by[d] {
            return Err(Reason::Taken {
                by: self.src.gpus[by].r.gpu_id,
            });
        }
        for (s2, d2) in self.state.assign.iter().enumerate() {
            let Some(d2) = *d2 else { continue };
            let pairs = [
                (self.src.xgmi[s][s2], self.dst.xgmi[d][d2]),
                (self.src.xgmi[s2][s], self.dst.xgmi[d2][d]),
            ];
            for (sl, dl) in pairs {
                if let Some(two_way) = sl {
                    if !dl.is_some_and(|dtw| dtw || !two_way) {
                        return Err(Reason::MissingXgmiLink {
                            source_peer: self.src.gpus[s2].r.gpu_id,
                            destination_peer: self.dst.gpus[d2].r.gpu_id,
                        });
                    }
                }
            }
        }
        if !self.numa {
            return Ok(vec![Vec::new()]);
        }
        let (sg, dg) = (&self.src.gpus[s], &self.dst.gpus[d]);
        let mut out = Vec::new();
        let mut used = vec![false; dg.cpu_links.len()];
        self.cpu_alternatives(sg, dg, 0, &mut used, &mut Vec::new(), &mut out);
        if out.is_empty() {
            let sl = sg
                .cpu_links
                .iter()
                .find(|sl| {
                    let mapped = self.state.cpu_map[sl.cpu];
                    !dg.cpu_links.iter().any(|dl| {
                        link_fits(sl, dl)
                            && mapped.map_or(self.state.cpu_rev[dl.cpu].is_none(), |m| m == dl.cpu)
                    })
                })
                .or(sg.cpu_links.first());
            let source_cpu = sl.map_or(0, |l| self.src.cpu_ids[l.cpu]);
            return Err(Reason::NumaConflict {
                source_cpu,
                mapped_to: sl
                    .and_then(|l| self.state.cpu_map[l.cpu])
                    .map(|c| self.dst.cpu_ids[c]),
                destination_cpus: dg
                    .cpu_links
                    .iter()
                    .map(|l| self.dst.cpu_ids[l.cpu])
                    .collect(),
            });
        }
        Ok(out)
    }

    fn cpu_alternatives(
        &self,
        s: &Gpu,
        d: &Gpu,
        i: usize,
        used: &mut [bool],
        binds: &mut Bindings,
        out: &mut Vec<Bindings>,
    ) {
        let Some(sl) = s.cpu_links.get(i) else {
            if !out.contains(binds) {
                out.push(binds.clone());
            }
            return;
        };
        for (j, dl) in d.cpu_links.iter().enumerate() {
            if used[j] || !link_fits(sl, dl) {
                continue;
            }
            let bound = self.state.cpu_map[sl.cpu].or_else(|| {
                binds
                    .iter()
                    .find(|(sc, _)| *sc == sl.cpu)
                    .map(|&(_, dc)| dc)
            });
            let new = match bound {
                Some(dc) if dc == dl.cpu => false,
                Some(_) => continue,
                None => {
                    if self.state.cpu_rev[dl.cpu].is_some()
                        || binds.iter().any(|&(_, dc)| dc == dl.cpu)
                    {
                        continue;
                    }
                    true
                }
            };
            used[j] = true;
            if new {
                binds.push((sl.cpu, dl.cpu));
            }
            self.cpu_alternatives(s, d, i + 1, used, binds, out);
            if new {
                binds.pop();
            }
            used[j] = false;
        }
    }

    fn apply(&mut self, s: usize, d: usize, binds: &Bindings) {
        self.state.assign[s] = Some(d);
        self.state.used_by[d] = Some(s);
        for &(sc, dc) in binds {
            self.state.cpu_map[sc] = Some(dc);
            self.state.cpu_rev[dc] = Some(sc);
        }
    }

    fn undo(&mut self, s: usize, d: usize, binds: &Bindings) {
        self.state.assign[s] = None;
        self.state.used_by[d] = None;
        for &(sc, dc) in binds {
            self.state.cpu_map[sc] = None;
            self.state.cpu_rev[dc] = None;
        }
    }

    /// Forward check: every unplaced source GPU keeps a candidate, and all of them can still be
    /// placed at once. On failure, the source GPU left without a candidate, if one is.
    fn feasible(&self) -> Result<(), Option<usize>> {
        let unplaced: Vec<usize> = self
            .order
            .iter()
            .copied()
            .filter(|&s| self.state.assign[s].is_none())
            .collect();
        let mut domains = Vec::with_capacity(unplaced.len());
        for &s in &unplaced {
            let dom: Vec<usize> = self.candidates[s]
                .iter()
                .copied()
                .filter(|&d| self.dynamic(s, d).is_ok())
                .collect();
            if dom.is_empty() {
                return Err(Some(s));
            }
            domains.push(dom);
        }
        let (left, _) = max_matching(&domains, self.dst.gpus.len());
        if left.iter().all(Option::is_some) {
            Ok(())
        } else {
            Err(None)
        }
    }

    fn search(&mut self, depth: usize) -> bool {
        let Some(&s) = self.order.get(depth) else {
            return true;
        };
        for d in self.candidates[s].clone() {
            let Ok(alternatives) = self.dynamic(s, d) else {
                continue;
            };
            for binds in alternatives {
                self.apply(s, d, &binds);
                if self.feasible().is_ok() && self.search(depth + 1) {
                    return true;
                }
                self.undo(s, d, &binds);
            }
        }
        if self.deepest.as_ref().is_none_or(|(k, _, _)| depth > *k) {
            self.deepest = Some((depth, s, self.state.clone()));
        }
        false
    }

    /// For the stuck source GPU `s` at the recorded state: each destination's first reason.
    fn explain_stuck(&mut self, s: usize, options: &CheckOptions) -> Vec<Rejection> {
        let mut out = Vec::new();
        for d in 0..self.dst.gpus.len() {
            let destination = self.dst.gpus[d].r;
            let statics = static_reasons(&self.src.gpus[s], &self.dst.gpus[d], options);
            let reason = match statics.into_iter().next() {
                Some(r) => r,
                None => match self.dynamic(s, d) {
                    Err(r) => r,
                    Ok(alternatives) => {
                        // It fits by itself, so taking it must starve another GPU.
                        let mut starved = None;
                        for binds in alternatives {
                            self.apply(s, d, &binds);
                            let f = self.feasible();
                            self.undo(s, d, &binds);
                            if let Err(Some(other)) = f {
                                starved = Some(other);
                                break;
                            }
                        }
                        Reason::Starves {
                            source_gpu: starved.map(|o| self.src.gpus[o].r.gpu_id),
                        }
                    }
                },
            };
            let lifted_by = reason.check().into_iter().collect();
            out.push(Rejection {
                destination,
                reason,
                lifted_by,
            });
        }
        out
    }
}

/// Every destination's first static reason for `s`, with the checks that would lift it.
fn static_rejections(src: &Side, dst: &Side, s: usize, options: &CheckOptions) -> Vec<Rejection> {
    dst.gpus
        .iter()
        .filter_map(|dg| {
            let reasons = static_reasons(&src.gpus[s], dg, options);
            let first = reasons.first()?.clone();
            let mut lifted_by: Vec<Check> = Vec::new();
            if reasons.iter().all(|r| r.check().is_some()) {
                for c in reasons.iter().filter_map(Reason::check) {
                    if !lifted_by.contains(&c) {
                        lifted_by.push(c);
                    }
                }
            }
            Some(Rejection {
                destination: dg.r,
                reason: first,
                lifted_by,
            })
        })
        .collect()
}

/// Maps every GPU of `source` (the checkpointed machine, e.g. rebuilt from the image) to a
/// distinct GPU of `destination` (this machine), honouring `options`.
///
/// # Errors
///
/// [`MapError`] explaining, in terms a user can act on, why no mapping exists.
pub fn map_gpus(
    source: &Topology,
    destination: &Topology,
    options: &CheckOptions,
) -> Result<Mapping, MapError> {
    let src = Side::new(source);
    let dst = Side::new(destination);
    let result = solve(&src, &dst, options);
    match &result {
        Ok(m) => log::debug!("GPU mapping found:\n{m}"),
        Err(e) => log::debug!("no GPU mapping: {e}"),
    }
    result
}

fn solve(src: &Side, dst: &Side, options: &CheckOptions) -> Result<Mapping, MapError> {
    let n = src.gpus.len();
    if n != dst.gpus.len() {
        return Err(MapError::GpuCount {
            image_gpus: n,
            local_gpus: dst.gpus.len(),
        });
    }

    // Static candidates, same gpu_id first, then the same position, then the rest.
    let candidates: Vec<Vec<usize>> = (0..n)
        .map(|s| {
            let mut c: Vec<usize> = (0..n)
                .filter(|&d| static_reasons(&src.gpus[s], &dst.gpus[d], options).is_empty())
                .collect();
            c.sort_by_key(|&d| (dst.gpus[d].r.gpu_id != src.gpus[s].r.gpu_id, d != s, d));
            c
        })
        .collect();

    let unplaced: Vec<Unplaced> = (0..n)
        .filter(|&s| candidates[s].is_empty())
        .map(|s| Unplaced {
            gpu: src.gpus[s].r,
            rejections: static_rejections(src, dst, s, options),
        })
        .collect();
    if !unplaced.is_empty() {
        return Err(MapError::NoCandidate { unplaced });
    }

    let (left, right) = max_matching(&candidates, n);
    if let Some(u) = left.iter().position(Option::is_none) {
        return Err(contention(src, dst, options, &candidates, &right, u));
    }

    // Place hive GPUs first (largest hives, members together), then the most constrained.
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&s| {
        let g = &src.gpus[s];
        (
            std::cmp::Reverse(g.hive_size),
            first_hive_member(src, s),
            candidates[s].len(),
            s,
        )
    });

    let mut solver = Solver {
        src,
        dst,
        numa: options.numa,
        candidates,
        order,
        state: State {
            assign: vec![None; n],
            used_by: vec![None; n],
            cpu_map: vec![None; src.cpu_ids.len()],
            cpu_rev: vec![None; dst.cpu_ids.len()],
        },
        deepest: None,
    };
    if solver.feasible().is_ok() && solver.search(0) {
        return Ok(solution(src, dst, &solver.state, options.numa));
    }

    if options.numa && solve(src, dst, &options.with(Check::Numa, false)).is_ok() {
        return Err(MapError::NumaPlacement {
            image: src.numa_groups(),
            local: dst.numa_groups(),
        });
    }

    let (s, state) = match solver.deepest.take() {
        Some((_, s, state)) => (s, state),
        None => (solver.order[0], solver.state.clone()),
    };
    solver.state = state;
    let partial = solver
        .order
        .iter()
        .filter_map(|&s2| {
            solver.state.assign[s2].map(|d| (src.gpus[s2].r.gpu_id, dst.gpus[d].r.gpu_id))
        })
        .collect();
    let rejections = solver.explain_stuck(s, options);
    Err(MapError::NoConsistentMapping {
        partial,
        stuck: Unplaced {
            gpu: src.gpus[s].r,
            rejections,
        },
    })
}

/// The smallest index of a GPU connected to `s` by xGMI (itself when in no hive): keeps hive
/// members together in the placement order.
fn first_hive_member(side: &Side, s: usize) -> usize {
    let mut seen = vec![false; side.gpus.len()];
    let mut stack = vec![s];
    seen[s] = true;
    let mut min = s;
    while let Some(a) = stack.pop() {
        min = min.min(a);
        for (b, link) in side.xgmi[a].iter().enumerate() {
            if !seen[b] && *link == Some(true) {
                seen[b] = true;
                stack.push(b);
            }
        }
    }
    min
}

/// A Hall violator after a maximum matching that leaves `u` unmatched: the source GPUs
/// reachable from `u` by alternating paths compete for fewer destinations.
fn contention(
    src: &Side,
    dst: &Side,
    options: &CheckOptions,
    candidates: &[Vec<usize>],
    right: &[Option<usize>],
    u: usize,
) -> MapError {
    let mut sources = vec![u];
    let mut dests: Vec<usize> = Vec::new();
    let mut i = 0;
    while let Some(&s) = sources.get(i) {
        i += 1;
        for &d in &candidates[s] {
            if !dests.contains(&d) {
                dests.push(d);
                if let Some(s2) = right[d] {
                    if !sources.contains(&s2) {
                        sources.push(s2);
                    }
                }
            }
        }
    }
    sources.sort_unstable();
    dests.sort_unstable();
    MapError::Contention {
        sources: sources.iter().map(|&s| src.gpus[s].r.gpu_id).collect(),
        destinations: dests.iter().map(|&d| dst.gpus[d].r.gpu_id).collect(),
        unplaced: sources
            .iter()
            .map(|&s| Unplaced {
                gpu: src.gpus[s].r,
                rejections: static_rejections(src, dst, s, options),
            })
            .collect(),
    }
}

fn solution(src: &Side, dst: &Side, state: &State, numa: bool) -> Mapping {
    let gpus = src
        .gpus
        .iter()
        .zip(&state.assign)
        .filter_map(|(sg, d)| {
            let dg = &dst.gpus[(*d)?];
            Some(GpuMapping {
                source_gpu_id: sg.r.gpu_id,
                destination_gpu_id: dg.r.gpu_id,
                source_node_id: sg.r.node_id,
                destination_node_id: dg.r.node_id,
                source_render_minor: sg.render_minor,
                destination_render_minor: dg.render_minor,
            })
        })
        .collect();
    let mut cpu_map: Vec<Option<usize>> = if numa {
        state.cpu_map.clone()
    } else {
        vec![None; src.cpu_ids.len()]
    };
    if !numa {
        for (sg, d) in src.gpus.iter().zip(&state.assign) {
            let Some(d) = *d else { continue };
            for sl in &sg.cpu_links {
                if cpu_map[sl.cpu].is_none() {
                    cpu_map[sl.cpu] = dst.gpus[d]
                        .cpu_links
                        .iter()
                        .find(|dl| link_fits(sl, dl))
                        .map(|dl| dl.cpu);
                }
            }
        }
    }
    let cpus = cpu_map
        .iter()
        .enumerate()
        .filter_map(|(sc, dc)| Some((src.cpu_ids[sc], dst.cpu_ids[(*dc)?])))
        .collect();
    Mapping { gpus, cpus }
}
