//! Choosing among destination GPUs that all pass the rules (a node with more GPUs than the
//! image, or several equal GPUs), and explaining the GPUs a mapping leaves out.
//!
//! Among the destinations a source GPU may take, it prefers, in this order:
//! 1. the GPU with its own gpu_id (restoring on the node it came from changes nothing);
//! 2. an xGMI hive of the size its own hive had, no hive for a GPU that had none: a hive of 2
//!    takes a hive of 2 before it splits a hive of 8, and a GPU without xGMI leaves hive GPUs
//!    to the GPUs that need them;
//! 3. the NUMA placement of the GPUs placed before it: GPUs that shared a CPU node share one,
//!    GPUs that did not, do not (a rule with `KFD_NUMA_CHECK` on, a preference with it off);
//! 4. the fewest differing checked properties (`fw_version`, `sdma_fw_version`,
//!    `caches_count`, `num_gws`, VRAM size, `capability`): the same firmware rather than a newer
//!    one, the same VRAM rather than more;
//! 5. the lowest node id.
//!
//! The search places the source GPUs in a fixed order and gives each the first destination in
//! this order with which all the others can still be placed: the result is the first mapping
//! in that order, the same for the same two topologies and options.

use std::fmt::{self, Display};

use serde::Serialize;

use super::explain::{GpuRef, Reason};
use super::side::{Gpu, Side};
use super::VRAM_SIZE;
use crate::model::keys;
use crate::options::Check;

/// How well a destination fits a source GPU beyond the rules; lower is better, compared
/// field by field (the order of the module's list).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Fit {
    /// The gpu_id differs.
    pub(super) other_id: bool,
    /// Difference of the two GPUs' xGMI hive sizes (0: no hive).
    pub(super) hive_gap: usize,
    /// Placed GPUs whose NUMA neighbourhood with this one would not be kept.
    pub(super) numa_breaks: usize,
    /// Checked properties that differ.
    pub(super) differing: usize,
}

/// The checked properties (those of the `KFD_*_CHECK` switches) of `s` and `d`, by name.
fn checked(s: &Gpu, d: &Gpu) -> [(&'static str, u64, u64); 6] {
    [
        (keys::FW_VERSION, s.fw, d.fw),
        (keys::SDMA_FW_VERSION, s.sdma_fw, d.sdma_fw),
        (keys::CACHES_COUNT, s.caches, d.caches),
        (keys::NUM_GWS, s.gws, d.gws),
        (VRAM_SIZE, s.vram_size, d.vram_size),
        (keys::CAPABILITY, s.capability, d.capability),
    ]
}

/// The checked properties that differ between `s` and `d`.
pub(super) fn differing(s: &Gpu, d: &Gpu) -> Vec<&'static str> {
    checked(s, d)
        .into_iter()
        .filter(|(_, a, b)| a != b)
        .map(|(k, _, _)| k)
        .collect()
}

/// The part of [`Fit`] that does not depend on where the other GPUs went.
pub(super) fn static_fit(s: &Gpu, d: &Gpu) -> Fit {
    Fit {
        other_id: s.r.gpu_id != d.r.gpu_id,
        hive_gap: s.hive_size.abs_diff(d.hive_size),
        numa_breaks: 0,
        differing: checked(s, d).iter().filter(|(_, a, b)| a != b).count(),
    }
}

/// Placed source GPUs (`assign`) whose "shares a CPU node with `s`" would change if `s` went to
/// `d`.
pub(super) fn numa_breaks(
    src: &Side,
    dst: &Side,
    assign: &[Option<usize>],
    s: usize,
    d: usize,
) -> usize {
    assign
        .iter()
        .enumerate()
        .filter(|&(s2, _)| s2 != s)
        .filter_map(|(s2, d2)| Some((s2, (*d2)?)))
        .filter(|&(s2, d2)| src.share_cpu[s][s2] != dst.share_cpu[d][d2])
        .count()
}

/// Why the chosen GPU was preferred to one the mapping leaves out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Preference {
    /// The chosen GPU has the image GPU's gpu_id.
    SameGpuId,
    /// The chosen GPU's xGMI hive is closer in size to the image GPU's (0: no hive).
    HiveSize {
        /// The image GPU's hive.
        image: usize,
        /// The chosen GPU's hive.
        chosen: usize,
        /// This GPU's hive.
        this: usize,
    },
    /// The chosen GPU keeps the image's NUMA placement, this one would not (a preference:
    /// `KFD_NUMA_CHECK` is off).
    NumaPlacement,
    /// More checked properties differ from the image's on this GPU.
    Properties {
        /// The properties that differ on this GPU.
        differing: Vec<&'static str>,
    },
    /// Both fit equally; the chosen GPU has the lower node id.
    NodeOrder,
    /// This GPU cannot take the image GPU next to where the image's other GPUs went.
    Placement {
        /// Why not.
        reason: Reason,
    },
    /// With this GPU, the image's other GPUs could not all be placed.
    OthersNeedIt,
}

impl Display for Preference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hive = |n: usize| {
            if n == 0 {
                "no xGMI hive".to_owned()
            } else {
                format!("an xGMI hive of {n}")
            }
        };
        match self {
            Preference::SameGpuId => f.write_str("that GPU has the image GPU's gpu_id"),
            Preference::HiveSize {
                image,
                chosen,
                this,
            } => write!(
                f,
                "the image GPU is in {}, that GPU in {}, this one in {}",
                hive(*image),
                hive(*chosen),
                hive(*this)
            ),
            Preference::NumaPlacement => f.write_str(
                "that GPU keeps the image's NUMA placement, this one would not (KFD_NUMA_CHECK \
                 is off, so it is only a preference)",
            ),
            Preference::Properties { differing } => write!(
                f,
                "its {} {} from the image's",
                differing.join(", "),
                if differing.len() == 1 {
                    "differs"
                } else {
                    "differ"
                }
            ),
            Preference::NodeOrder => f.write_str("both fit equally; that GPU's node id is lower"),
            Preference::Placement { reason } => write!(f, "{reason}"),
            Preference::OthersNeedIt => {
                f.write_str("with this GPU the image's other GPUs could not all be placed")
            }
        }
    }
}

/// Why the mapping leaves a GPU of this node out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Unused {
    /// It can take none of the image's GPUs.
    Unfit {
        /// The image GPU it comes closest to (the fewest reasons against it).
        image_gpu: u32,
        /// The first reason it cannot take that one.
        reason: Reason,
        /// Checks that, all turned off, would let it take that one (empty when none would).
        lifted_by: Vec<Check>,
    },
    /// It could take an image GPU, which went to another GPU.
    NotChosen {
        /// The image GPU (the first, in image order, that it could take).
        image_gpu: u32,
        /// Where that GPU went.
        chosen: GpuRef,
        /// Why there.
        because: Preference,
    },
}

/// A GPU of this node that the mapping leaves out (the restored process does not get it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UnusedGpu {
    /// The GPU.
    pub gpu: GpuRef,
    /// Its render minor.
    pub render_minor: u32,
    /// Why it is left out.
    pub why: Unused,
}

impl Display for UnusedGpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "GPU {:#06x} (node {}, renderD{}): {}",
            self.gpu.gpu_id, self.gpu.node_id, self.render_minor, self.why
        )
    }
}

/// One line per distinct explanation, naming every GPU it applies to, in the order of each
/// explanation's first GPU: "GPUs 0xc004, 0xc005 (nodes 8, 9; renderD132, renderD133): ...".
#[must_use]
pub fn unused_lines(unused: &[UnusedGpu]) -> Vec<String> {
    let mut groups: Vec<(String, Vec<&UnusedGpu>)> = Vec::new();
    for u in unused {
        let why = u.why.to_string();
        match groups.iter_mut().find(|(w, _)| *w == why) {
            Some((_, gpus)) => gpus.push(u),
            None => groups.push((why, vec![u])),
        }
    }
    groups
        .into_iter()
        .map(|(why, gpus)| match gpus.as_slice() {
            [one] => one.to_string(),
            _ => {
                let join = |f: &dyn Fn(&UnusedGpu) -> String| {
                    gpus.iter().map(|g| f(g)).collect::<Vec<_>>().join(", ")
                };
                format!(
                    "GPUs {} (nodes {}; {}): {why}",
                    join(&|g| format!("{:#06x}", g.gpu.gpu_id)),
                    join(&|g| g.gpu.node_id.to_string()),
                    join(&|g| format!("renderD{}", g.render_minor)),
                )
            }
        })
        .collect()
}

impl Display for Unused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unused::Unfit {
                image_gpu,
                reason,
                lifted_by,
            } => {
                write!(
                    f,
                    "fits none of the image's GPUs; for image GPU {image_gpu:#06x}: {reason}"
                )?;
                if !lifted_by.is_empty() {
                    let vars: Vec<String> = lifted_by.iter().map(|c| format!("{c}=0")).collect();
                    write!(f, " (setting {} would allow it)", vars.join(" and "))?;
                }
                Ok(())
            }
            Unused::NotChosen {
                image_gpu,
                chosen,
                because,
            } => write!(
                f,
                "could take image GPU {image_gpu:#06x}, which went to {chosen}: {because}"
            ),
        }
    }
}

/// The order of preference, in words, for reports.
pub const PREFERENCE_ORDER: &str = "same gpu_id, an xGMI hive of the image GPU's size, NUMA \
                                    placement, the fewest differing checked properties, the \
                                    lowest node id";
