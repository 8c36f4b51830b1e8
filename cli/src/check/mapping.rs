//! A GPU mapping as the reports show it ([`MappingSummary`]), the answer for an image or a tree
//! ([`MapOutcome`]), and, when the mapping is refused, the `KFD_*_CHECK` variables whose
//! switching off would allow it ([`Remedy`]).

use std::io::{self, Write};

use serde::Serialize;
use topology::map::{unused_lines, UnusedGpu, PREFERENCE_ORDER};
use topology::{Check, CheckOptions, MapError, Mapping, Topology};

use crate::hex_id;
use crate::table::Table;
use crate::topo::pci_location;

/// Column headings of the two sides of a mapping table.
pub(super) type Sides = (&'static str, &'static str);
/// `check`: an image onto this machine.
pub(super) const IMAGE_SIDES: Sides = ("image GPU", "local GPU");
/// `map`: one tree onto another.
pub(super) const TREE_SIDES: Sides = ("source GPU", "dest GPU");

/// One GPU of a mapping, with where it lands (for `map`: image = source, local = destination).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MappedGpu {
    /// gpu_id in the image (the source; JSON: a hex string).
    #[serde(serialize_with = "crate::json::hex32")]
    pub image_gpu_id: u32,
    /// Node id in the image.
    pub image_node: u32,
    /// Render minor in the image.
    pub image_render_minor: u32,
    /// gpu_id here (the destination; JSON: a hex string).
    #[serde(serialize_with = "crate::json::hex32")]
    pub local_gpu_id: u32,
    /// Node id here.
    pub local_node: u32,
    /// Render minor here (`/dev/dri/renderD<minor>`).
    pub local_render_minor: u32,
    /// The destination's `name`.
    pub local_name: String,
    /// The destination's PCI location.
    pub local_location: String,
}

/// A source CPU node and the one it maps to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct MappedCpu {
    /// Node id in the image.
    pub image_node: u32,
    /// Node id here.
    pub local_node: u32,
}

/// A mapping as reported.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MappingSummary {
    /// Per source GPU in source order.
    pub gpus: Vec<MappedGpu>,
    /// CPU nodes.
    pub cpus: Vec<MappedCpu>,
    /// Every GPU keeps its gpu_id.
    pub identity: bool,
    /// The GPUs here that the mapping leaves out (more GPUs here than in the image), with why.
    pub unused: Vec<UnusedGpu>,
}

impl MappingSummary {
    /// `m` with the destination GPUs' names and locations from `local`.
    #[must_use]
    pub(crate) fn new(m: &Mapping, local: &Topology) -> Self {
        Self {
            gpus: m
                .gpus
                .iter()
                .map(|g| {
                    let node = local.gpu(g.destination_gpu_id);
                    MappedGpu {
                        image_gpu_id: g.source_gpu_id,
                        image_node: g.source_node_id,
                        image_render_minor: g.source_render_minor,
                        local_gpu_id: g.destination_gpu_id,
                        local_node: g.destination_node_id,
                        local_render_minor: g.destination_render_minor,
                        local_name: node.map(|n| n.name.clone()).unwrap_or_default(),
                        local_location: node.map(pci_location).unwrap_or_default(),
                    }
                })
                .collect(),
            cpus: m
                .cpus
                .iter()
                .map(|&(s, d)| MappedCpu {
                    image_node: s,
                    local_node: d,
                })
                .collect(),
            identity: m.is_identity(),
            unused: m.unused.clone(),
        }
    }

    pub(super) fn render(&self, out: &mut dyn Write, indent: &str, sides: Sides) -> io::Result<()> {
        let mut t = Table::new(&[
            sides.0, "node", "renderD", "", sides.1, "node", "renderD", "name", "location",
        ]);
        for g in &self.gpus {
            t.row([
                hex_id(g.image_gpu_id),
                g.image_node.to_string(),
                g.image_render_minor.to_string(),
                "->".to_owned(),
                hex_id(g.local_gpu_id),
                g.local_node.to_string(),
                g.local_render_minor.to_string(),
                g.local_name.clone(),
                g.local_location.clone(),
            ]);
        }
        t.write(out, indent)?;
        if !self.cpus.is_empty() {
            writeln!(
                out,
                "{indent}CPU nodes: {}",
                self.cpus
                    .iter()
                    .map(|c| format!("{} -> {}", c.image_node, c.local_node))
                    .collect::<Vec<_>>()
                    .join(", ")
            )?;
        }
        if self.identity {
            writeln!(out, "{indent}(every GPU keeps its gpu_id)")?;
        } else {
            writeln!(
                out,
                "{indent}(gpu_ids change: the restored process keeps using the image's ids)"
            )?;
        }
        if !self.unused.is_empty() {
            writeln!(
                out,
                "{indent}Uses {} of the {} GPUs here; left out:",
                self.gpus.len(),
                self.gpus.len() + self.unused.len()
            )?;
            for line in unused_lines(&self.unused) {
                writeln!(out, "{indent}  {line}")?;
            }
            writeln!(
                out,
                "{indent}(among the GPUs that fit, preferred: {PREFERENCE_ORDER})"
            )?;
        }
        Ok(())
    }
}

/// `KFD_*_CHECK` variables that, set to 0, make a refused mapping succeed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Remedy {
    /// The variables to set to 0 (a smallest such set).
    pub set_to_zero: Vec<&'static str>,
    /// The mapping that would result.
    pub mapping: MappingSummary,
}

/// The answer for one source topology against a destination.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum MapOutcome {
    /// A mapping exists.
    Mapped {
        /// It.
        mapping: MappingSummary,
    },
    /// None exists under the checks in effect.
    Refused {
        /// The solver's explanation, structured.
        error: MapError,
        /// The same, as text.
        explanation: String,
        /// Checks whose switching off would allow a mapping (`None`: no setting would).
        remedy: Option<Remedy>,
    },
}

impl MapOutcome {
    /// The outcome of `result`, a [`topology::map_gpus`] of `source` onto `local` under
    /// `options`; on refusal, searches for a [`Remedy`].
    #[must_use]
    pub(crate) fn new(
        result: Result<Mapping, MapError>,
        source: &Topology,
        local: &Topology,
        options: &CheckOptions,
    ) -> Self {
        match result {
            Ok(m) => Self::Mapped {
                mapping: MappingSummary::new(&m, local),
            },
            Err(error) => Self::Refused {
                explanation: error.to_string(),
                remedy: find_remedy(&error, source, local, options),
                error,
            },
        }
    }

    /// Maps `source` onto `local` under `options`.
    #[must_use]
    pub(crate) fn compute(source: &Topology, local: &Topology, options: &CheckOptions) -> Self {
        Self::new(
            topology::map_gpus(source, local, options),
            source,
            local,
            options,
        )
    }

    /// True for [`MapOutcome::Mapped`].
    #[must_use]
    pub fn is_mapped(&self) -> bool {
        matches!(self, Self::Mapped { .. })
    }

    pub(super) fn render(&self, out: &mut dyn Write, indent: &str, sides: Sides) -> io::Result<()> {
        match self {
            Self::Mapped { mapping } => mapping.render(out, indent, sides),
            Self::Refused {
                explanation,
                remedy,
                ..
            } => {
                for line in explanation.lines() {
                    writeln!(out, "{indent}{line}")?;
                }
                match remedy {
                    Some(r) => {
                        let vars: Vec<String> =
                            r.set_to_zero.iter().map(|v| format!("{v}=0")).collect();
                        writeln!(
                            out,
                            "{indent}With {} it would restore as:",
                            vars.join(" and ")
                        )?;
                        r.mapping.render(out, &format!("{indent}  "), sides)
                    }
                    None => writeln!(
                        out,
                        "{indent}No KFD_*_CHECK setting would allow it: the GPUs themselves \
                         (model, count, links) do not fit."
                    ),
                }
            }
        }
    }
}

/// A smallest set of enabled checks (one, then two, then all of them) whose switching off lets
/// `source` map onto `local`. The GPU count is never lifted by a check.
fn find_remedy(
    error: &MapError,
    source: &Topology,
    local: &Topology,
    options: &CheckOptions,
) -> Option<Remedy> {
    if matches!(error, MapError::GpuCount { .. }) {
        return None;
    }
    let enabled: Vec<Check> = Check::ALL
        .into_iter()
        .filter(|c| options.enabled(*c))
        .collect();
    let mut sets: Vec<Vec<Check>> = enabled.iter().map(|&c| vec![c]).collect();
    for (i, &a) in enabled.iter().enumerate() {
        for &b in &enabled[i + 1..] {
            sets.push(vec![a, b]);
        }
    }
    if enabled.len() > 2 {
        sets.push(enabled.clone());
    }
    sets.into_iter().find_map(|set| {
        let relaxed = set.iter().fold(*options, |o, &c| o.with(c, false));
        topology::map_gpus(source, local, &relaxed)
            .ok()
            .map(|m| Remedy {
                set_to_zero: set.iter().map(|c| c.env_var()).collect(),
                mapping: MappingSummary::new(&m, local),
            })
    })
}
