//! The result of a successful search: which destination GPU (and CPU node) each source GPU and
//! CPU node goes to.

use std::fmt::{self, Display};

use serde::Serialize;

use super::choice::{unused_lines, UnusedGpu, PREFERENCE_ORDER};

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
    /// The destination GPUs the mapping does not use (a node with more GPUs than the source),
    /// in destination node order, each with why.
    pub unused: Vec<UnusedGpu>,
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
        if !self.unused.is_empty() {
            writeln!(
                f,
                "Uses {} of the {} GPUs here, preferring {PREFERENCE_ORDER}; left out:",
                self.gpus.len(),
                self.gpus.len() + self.unused.len()
            )?;
            for line in unused_lines(&self.unused) {
                writeln!(f, "  {line}")?;
            }
        }
        Ok(())
    }
}
