//! The solver's view of one topology: its GPUs with the values the rules compare, their links
//! to CPU nodes, and the xGMI links between them.

use super::explain::{GpuRef, NumaGroup};
use super::EQUAL_PROPERTIES;
use crate::model::{keys, LinkType, Node, Topology};

/// A GPU's link to a CPU node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct CpuLink {
    pub(super) cpu: usize,
    pub(super) ty: LinkType,
    pub(super) two_way: bool,
}

/// A GPU, with the values the rules compare.
#[derive(Debug)]
pub(super) struct Gpu {
    pub(super) r: GpuRef,
    pub(super) render_minor: u32,
    pub(super) equal: Vec<u64>,
    pub(super) vram_public: u64,
    pub(super) vram_size: u64,
    pub(super) fw: u64,
    pub(super) sdma_fw: u64,
    pub(super) caches: u64,
    pub(super) gws: u64,
    pub(super) capability: u64,
    pub(super) valid_links: usize,
    pub(super) cpu_links: Vec<CpuLink>,
    pub(super) xgmi_out: usize,
    pub(super) hive_size: usize,
}

/// One topology (the source or the destination) as the solver sees it.
#[derive(Debug)]
pub(super) struct Side {
    pub(super) gpus: Vec<Gpu>,
    pub(super) cpu_ids: Vec<u32>,
    /// xgmi[a][b]: the xGMI link a -> b, and whether it is two-way.
    pub(super) xgmi: Vec<Vec<Option<bool>>>,
    /// share_cpu[a][b]: GPUs a and b hang off a common CPU node (NUMA neighbours).
    pub(super) share_cpu: Vec<Vec<bool>>,
}

impl Side {
    pub(super) fn new(t: &Topology) -> Self {
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
        let share_cpu = gpus
            .iter()
            .map(|a| {
                gpus.iter()
                    .map(|b| {
                        a.cpu_links
                            .iter()
                            .any(|la| b.cpu_links.iter().any(|lb| la.cpu == lb.cpu))
                    })
                    .collect()
            })
            .collect();
        Self {
            gpus,
            cpu_ids,
            xgmi,
            share_cpu,
        }
    }

    pub(super) fn numa_groups(&self) -> Vec<NumaGroup> {
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

/// Whether the destination CPU link `dst` can stand for the source CPU link `src`: xGMI needs
/// xGMI, two-way needs two-way.
pub(super) fn link_fits(src: &CpuLink, dst: &CpuLink) -> bool {
    !(src.ty == LinkType::Xgmi && dst.ty != LinkType::Xgmi) && (!src.two_way || dst.two_way)
}
