//! Why no mapping exists: the reasons one destination GPU cannot take one source GPU, the
//! failure as a whole ([`MapError`]), and their text, written for a user who can act on it.

use std::fmt::{self, Display, Write as _};

use serde::Serialize;

use crate::model::{keys, LinkType};
use crate::options::Check;

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

/// Properties that are identifiers or bit sets, shown in hexadecimal (as `amdgpu-cr topology`,
/// `lspci` and the kernel's logs show them); the others are counts and versions, in decimal.
const HEX_PROPERTIES: &[&str] = &[
    keys::VENDOR_ID,
    keys::DEVICE_ID,
    keys::CAPABILITY,
    keys::HIVE_ID,
    keys::UNIQUE_ID,
    keys::LOCATION_ID,
];

/// `value` of `property` as the reasons print it.
fn shown(property: &str, value: u64) -> String {
    if HEX_PROPERTIES.contains(&property) {
        format!("{value:#06x}")
    } else {
        value.to_string()
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
                "{property} is {} here but {} in the image",
                shown(property, *destination),
                shown(property, *source)
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
                    "{property} {} here {relation} {} in the image",
                    shown(property, *destination),
                    shown(property, *source)
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
                "hangs off {}, but the image GPU's CPU node {source_cpu} already went to CPU \
                 node {to}",
                cpu_nodes(destination_cpus)
            ),
            Reason::NumaConflict {
                source_cpu,
                mapped_to: None,
                destination_cpus,
            } => write!(
                f,
                "hangs off {}, already taken by CPU nodes of the image other than {source_cpu}",
                cpu_nodes(destination_cpus)
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

/// A group of destination GPUs joined by xGMI links, judged for one hive of the image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LocalHive {
    /// Its GPUs.
    pub gpus: Vec<GpuRef>,
    /// How many of them can take one of the image hive's GPUs.
    pub fitting: usize,
    /// The others, each with why it cannot take the hive's first GPU.
    pub rejected: Vec<Rejection>,
}

/// Why the source GPUs cannot be mapped onto the destination's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MapError {
    /// Fewer GPUs here than in the image.
    #[error(
        "the image was taken with {} but this node has only {local_gpus}; restore needs at \
         least as many (inside a container, check which GPUs it may use)",
        gpus(*image_gpus)
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
    /// A hive of the image needs that many GPUs of one hive here that can take its GPUs, and no
    /// hive here has them (e.g. one GPU of each hive has older firmware).
    #[error("{}", display_no_hive_fits(image_hive, local_hives))]
    NoHiveFits {
        /// The image's GPUs joined by xGMI links.
        image_hive: Vec<GpuRef>,
        /// Each group of GPUs joined by xGMI links here, with how many of them can take one of
        /// the image hive's GPUs and why the others cannot.
        local_hives: Vec<LocalHive>,
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

/// `1 GPU`, `2 GPUs`.
fn gpus(n: usize) -> String {
    format!("{n} {}", if n == 1 { "GPU" } else { "GPUs" })
}

fn display_contention(sources: &[u32], destinations: &[u32], unplaced: &[Unplaced]) -> String {
    let mut out = format!(
        "{} of the image's GPUs ({}) can only go to {} here ({}):",
        sources.len(),
        hex_list(sources),
        gpus(destinations.len()),
        hex_list(destinations)
    );
    for (gpus, lines) in grouped(unplaced) {
        let _ = write!(out, "\n  image {} cannot use:{lines}", gpu_list(&gpus));
    }
    out
}

fn display_no_hive_fits(image_hive: &[GpuRef], local_hives: &[LocalHive]) -> String {
    let k = image_hive.len();
    let mut out = format!(
        "the image's {} form an xGMI hive of {k}, which must go into one xGMI hive here; no hive \
         here has {k} GPUs that can take its GPUs:",
        gpu_list(image_hive)
    );
    for h in local_hives {
        let _ = write!(
            out,
            "\n  the hive of {}, {}: {} can{}",
            h.gpus.len(),
            gpu_list(&h.gpus),
            h.fitting,
            if h.rejected.is_empty() { "" } else { "; not:" }
        );
        for line in rejection_lines(&h.rejected)
            .lines()
            .filter(|l| !l.is_empty())
        {
            let _ = write!(out, "\n  {line}");
        }
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

/// "CPU node 1" or "CPU nodes 1, 2".
fn cpu_nodes(ids: &[u32]) -> String {
    let list = ids
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if ids.len() == 1 {
        format!("CPU node {list}")
    } else {
        format!("CPU nodes {list}")
    }
}

pub(super) fn hex_list(ids: &[u32]) -> String {
    ids.iter()
        .map(|id| format!("{id:#06x}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids and bit sets in hex, as the topology table shows them; counts and versions in
    /// decimal (before, `device_id is 29708 here but 29711 in the image`).
    #[rstest::rstest]
    #[case::device_id(Reason::Differs { property: keys::DEVICE_ID, source: 0x740f, destination: 0x740c }, "device_id is 0x740c here but 0x740f in the image")]
    #[case::simd_count(Reason::Differs { property: keys::SIMD_COUNT, source: 440, destination: 416 }, "simd_count is 416 here but 440 in the image")]
    #[case::capability(Reason::CheckFailed { check: Check::Capability, property: keys::CAPABILITY, source: 0x0038_2280, destination: 0x0800_2280 }, "capability 0x8002280 here differs from 0x382280 in the image")]
    #[case::fw(Reason::CheckFailed { check: Check::FwVersion, property: keys::FW_VERSION, source: 78, destination: 60 }, "fw_version 60 here is lower than 78 in the image")]
    fn ids_are_hex_and_counts_decimal(#[case] reason: Reason, #[case] text: &str) {
        assert_eq!(reason.to_string(), text);
    }
}
