//! Concise construction of topologies for tests and the simulator's presets.
//!
//! ```
//! use topology::builder::{GpuSpec, TopologyBuilder};
//!
//! // Two NUMA nodes, four MI100 on PCIe, two per NUMA node.
//! let t = TopologyBuilder::new()
//!     .cpus(2)
//!     .gpus(2, &GpuSpec::mi100().numa(0))
//!     .gpus(2, &GpuSpec::mi100().numa(1))
//!     .build();
//! assert_eq!(t.gpus().count(), 4);
//! ```
//!
//! Node ids: CPU nodes first (0..), then GPUs in the order added. Unless set, gpu_ids are
//! distinct nonzero 16-bit values, render minors 128.., PCI buses distinct. Every count property
//! (`mem_banks_count`, `caches_count`, `io_links_count`, `p2p_links_count`) matches the
//! generated lists; change them afterwards through [`Topology::gpu_mut`] if a test needs a lie.
//!
//! What the 6.1 driver adds is added as it does: a GPU's caches per CU group
//! ([`crate::caches`]), xGMI bandwidths from the link count, and the indirect p2p links between
//! a GPU and the CPU nodes other than its own.

use crate::caches::{self, CuLayout};
use crate::model::{
    heap_type, keys, link_flags, Link, LinkType, MemBank, Node, Properties, Topology,
};

const GIB: u64 = 1 << 30;
/// `simd_id_base` of the first GPU.
const FIRST_SIMD_ID_BASE: u64 = 0x8000_1000;
/// Link weights as the kernel reports them.
const PCIE_WEIGHT: u32 = 20;
const XGMI_WEIGHT: u32 = 15;
const CPU_CPU_WEIGHT: u32 = 21;
/// One xGMI link's bandwidth in MB/s as 6.1 reckons it for Aldebaran (x16 at 25 Gbps: xGMI DPM
/// is defeatured, `amdgpu_amdkfd_get_xgmi_bandwidth_mbytes`). Older chips report 0.
const XGMI_LINK_BANDWIDTH: u64 = 16 * 25000 / 8;
/// `gfx_target_version` of Aldebaran, the only chip whose xGMI bandwidth 6.1 reports.
const GFX_ALDEBARAN: u64 = 90010;
/// A GPU's PCIe link bandwidths in MB/s (`amdgpu_amdkfd_get_pcie_bandwidth_mbytes`): the
/// narrowest and slowest link the GPU and platform support (x1 at 2.5 GT/s) and the widest and
/// fastest (x16 at 16 GT/s: every preset's GPU is PCIe 4.0 x16, on a PCIe 4.0 host).
const PCIE_MIN_BANDWIDTH: u64 = 2500 / 8;
const PCIE_MAX_BANDWIDTH: u64 = 16 * 16000 / 8;
/// `gfx_target_version` of Vega20 (GC 9.4.0), whose xGMI links the driver marks non-coherent.
const GFX_VEGA20: u64 = 90006;
/// gfx9 capability: watch points (0x80 | 0x200), doorbell type 2.0, SVM API.
const GFX9_CAPABILITY: u64 = 0x80 | 0x200 | 0x2000 | 0x0800_0000;

/// One GPU to add: its model's properties plus where it sits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuSpec {
    /// The `name` file (e.g. `vega20`).
    pub name: String,
    /// Node properties of the model; placement keys (ids, counts, render minor, location, hive)
    /// are filled in by the builder unless set with [`prop`](Self::prop) after the fact.
    pub properties: Properties,
    /// Explicit gpu_id, else one is chosen.
    pub gpu_id: Option<u32>,
    /// Explicit render minor, else 128 + GPU index.
    pub render_minor: Option<u32>,
    /// Index of the CPU node the GPU hangs off.
    pub numa: usize,
    /// Frame buffer heap type (1 public / large BAR, 2 private) and size in bytes.
    pub vram: (u64, u64),
    /// How many of the driver's cache entries to keep (all by default; tests that do not look at
    /// caches keep none, to keep trees small).
    pub caches: usize,
    /// Whether the CPU node links back to the GPU (two-way CPU link). Default: large BAR.
    pub two_way_cpu_link: Option<bool>,
    /// Property overrides applied last, after the builder's placement values.
    pub overrides: Properties,
    /// The VRAM bank's `mem_clk_max` (MHz): the model's top memory clock, as
    /// `amdgpu_amdkfd_get_local_mem_info` reports it (`amdgpu_dpm_get_mclk / 100`).
    pub mem_clk_max: u64,
}

impl GpuSpec {
    /// A gfx9 GPU with the given model values; the others are common gfx9 values.
    #[must_use]
    #[allow(clippy::too_many_arguments)]
    fn gfx9(
        name: &str,
        gfx: u64,
        device_id: u64,
        simd_count: u64,
        cu_per_simd_array: u64,
        xgmi_sdma: u64,
        fw: (u64, u64),
        vram_gib: u64,
    ) -> Self {
        let properties = Properties::from_keys(keys::NODE_ORDER, |k| match k {
            keys::SIMD_COUNT => simd_count,
            keys::MAX_WAVES_PER_SIMD => 10,
            keys::LDS_SIZE_IN_KB => 64,
            keys::NUM_GWS => 64,
            keys::WAVE_FRONT_SIZE => 64,
            keys::ARRAY_COUNT => 8,
            keys::SIMD_ARRAYS_PER_ENGINE => 1,
            keys::CU_PER_SIMD_ARRAY => cu_per_simd_array,
            keys::SIMD_PER_CU => 4,
            keys::MAX_SLOTS_SCRATCH_CU => 32,
            keys::GFX_TARGET_VERSION => gfx,
            keys::VENDOR_ID => 0x1002,
            keys::DEVICE_ID => device_id,
            keys::NUM_SDMA_ENGINES => 2,
            keys::NUM_SDMA_XGMI_ENGINES => xgmi_sdma,
            keys::NUM_SDMA_QUEUES_PER_ENGINE => 8,
            keys::NUM_CP_QUEUES => 24,
            keys::MAX_ENGINE_CLK_FCOMPUTE => 1500,
            keys::FW_VERSION => fw.0,
            keys::CAPABILITY => GFX9_CAPABILITY,
            keys::SDMA_FW_VERSION => fw.1,
            keys::MAX_ENGINE_CLK_CCOMPUTE => 2450,
            _ => 0,
        });
        Self {
            name: name.to_owned(),
            properties,
            gpu_id: None,
            render_minor: None,
            numa: 0,
            vram: (heap_type::FB_PUBLIC, vram_gib * GIB),
            caches: usize::MAX,
            two_way_cpu_link: None,
            overrides: Properties::new(),
            mem_clk_max: 1600,
        }
    }

    /// AMD Instinct MI50 (gfx906, `vega20`, 60 CUs of 64: 4 engines of one 16-slot array,
    /// 32 GiB).
    #[must_use]
    pub fn mi50() -> Self {
        let mut spec = Self::gfx9("vega20", 90006, 0x66a1, 240, 16, 0, (454, 435), 32);
        spec.properties.set(keys::ARRAY_COUNT, 4);
        // HBM2 at 1000 MHz.
        spec.mem_clk_max = 1000;
        spec
    }

    /// AMD Instinct MI100 (gfx908, `arcturus`, 120 CUs of 128: 8 engines of one 16-slot array,
    /// 32 GiB).
    #[must_use]
    pub fn mi100() -> Self {
        let mut spec = Self::gfx9("arcturus", 90008, 0x738c, 480, 16, 6, (65, 18), 32);
        // HBM2 at 1200 MHz.
        spec.mem_clk_max = 1200;
        spec
    }

    /// AMD Instinct MI210 (gfx90a, `aldebaran`, 104 CUs of 112: 8 engines of one 14-slot
    /// array, 64 GiB; HBM2e at 1600 MHz).
    #[must_use]
    pub fn mi210() -> Self {
        Self::gfx9("aldebaran", 90010, 0x740f, 416, 14, 3, (78, 8), 64)
    }

    /// One GCD of an AMD Instinct MI250X (gfx90a, `aldebaran`, 110 CUs of 112, 64 GiB; HBM2e
    /// at 1600 MHz).
    #[must_use]
    pub fn mi250x_gcd() -> Self {
        Self::gfx9("aldebaran", 90010, 0x740c, 440, 14, 3, (78, 8), 64)
    }

    /// Sets the gpu_id.
    #[must_use]
    pub fn gpu_id(mut self, gpu_id: u32) -> Self {
        self.gpu_id = Some(gpu_id);
        self
    }

    /// Sets the render minor.
    #[must_use]
    pub fn render_minor(mut self, minor: u32) -> Self {
        self.render_minor = Some(minor);
        self
    }

    /// Puts the GPU on CPU node index `cpu`.
    #[must_use]
    pub fn numa(mut self, cpu: usize) -> Self {
        self.numa = cpu;
        self
    }

    /// Overrides one node property (applied after the builder's own values).
    #[must_use]
    pub fn prop(mut self, key: &str, value: u64) -> Self {
        self.overrides.set(key, value);
        self
    }

    /// Sets the frame buffer: `public` (large BAR, heap type 1) or private (2), and its size.
    #[must_use]
    pub fn vram(mut self, public: bool, size: u64) -> Self {
        let heap = if public {
            heap_type::FB_PUBLIC
        } else {
            heap_type::FB_PRIVATE
        };
        self.vram = (heap, size);
        self
    }

    /// Keeps only the first `count` of the driver's cache entries.
    #[must_use]
    pub fn caches(mut self, count: usize) -> Self {
        self.caches = count;
        self
    }

    /// Whether the CPU node links back to this GPU.
    #[must_use]
    pub fn two_way_cpu_link(mut self, two_way: bool) -> Self {
        self.two_way_cpu_link = Some(two_way);
        self
    }
}

/// Builds a [`Topology`]: CPU nodes, GPUs on them, xGMI hives.
#[derive(Clone, Debug, Default)]
pub struct TopologyBuilder {
    cpus: Vec<u32>,
    gpus: Vec<GpuSpec>,
    /// Two-way xGMI connections between GPU indices, with their link counts.
    xgmi: Vec<(usize, usize, u32)>,
    p2p: bool,
    generation_id: u64,
}

impl TopologyBuilder {
    /// An empty machine.
    #[must_use]
    pub fn new() -> Self {
        Self {
            p2p: true,
            generation_id: 1,
            ..Self::default()
        }
    }

    /// Adds one CPU node with `cores` cores.
    #[must_use]
    pub fn cpu(mut self, cores: u32) -> Self {
        self.cpus.push(cores);
        self
    }

    /// Adds `count` CPU nodes with 32 cores each.
    #[must_use]
    pub fn cpus(mut self, count: usize) -> Self {
        self.cpus.extend(std::iter::repeat_n(32, count));
        self
    }

    /// Adds a GPU. Its index (for [`hive`](Self::hive)) is the number of GPUs added before it.
    #[must_use]
    pub fn gpu(mut self, spec: GpuSpec) -> Self {
        self.gpus.push(spec);
        self
    }

    /// Adds `count` copies of `spec` (with distinct ids unless the spec sets one).
    #[must_use]
    pub fn gpus(mut self, count: usize, spec: &GpuSpec) -> Self {
        self.gpus.extend(std::iter::repeat_n(spec.clone(), count));
        self
    }

    /// Joins the GPUs with these indices in one xGMI hive (links both ways between all pairs).
    #[must_use]
    pub fn hive(mut self, gpus: impl IntoIterator<Item = usize>) -> Self {
        let members: Vec<usize> = gpus.into_iter().collect();
        for (i, &a) in members.iter().enumerate() {
            for &b in &members[i + 1..] {
                self = self.xgmi(a, b);
            }
        }
        self
    }

    /// Connects GPU indices `a` and `b` by xGMI (one link), for hives that are not a full mesh.
    /// GPUs connected by xGMI share a `hive_id`.
    #[must_use]
    pub fn xgmi(self, a: usize, b: usize) -> Self {
        if self.links_between(a, b).is_some() {
            return self;
        }
        self.xgmi_links(a, b, 1)
    }

    /// Connects GPU indices `a` and `b` by `links` xGMI links (the firmware's link count, which
    /// 6.1 multiplies into an Aldebaran's `max_bandwidth`; e.g. 4 between the two GCDs of an
    /// MI250X). Replaces an earlier count for the pair.
    #[must_use]
    pub fn xgmi_links(mut self, a: usize, b: usize, links: u32) -> Self {
        if a == b {
            return self;
        }
        self.xgmi
            .retain(|&(x, y, _)| (x, y) != (a, b) && (x, y) != (b, a));
        self.xgmi.push((a, b, links));
        self
    }

    fn links_between(&self, a: usize, b: usize) -> Option<u32> {
        self.xgmi
            .iter()
            .find(|&&(x, y, _)| (x, y) == (a, b) || (x, y) == (b, a))
            .map(|&(_, _, n)| n)
    }

    /// The topology.
    ///
    /// # Panics
    ///
    /// If a GPU's NUMA index or a hive's GPU index is out of range: a mistake in the caller.
    #[must_use]
    pub fn build(self) -> Topology {
        let n_cpus = self.cpus.len();
        let node_id = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
        let gpu_node = |g: usize| node_id(n_cpus + g);
        let n_gpus = self.gpus.len();
        let linked = |a: usize, b: usize| self.links_between(a, b).is_some();
        for &(a, b, _) in &self.xgmi {
            assert!(
                a.max(b) < n_gpus,
                "xGMI link {a}-{b} names a GPU index that does not exist"
            );
        }
        // hive_of[g]: the smallest GPU index connected to g by xGMI links, if any.
        let mut hive_of: Vec<Option<usize>> = vec![None; n_gpus];
        for g in 0..n_gpus {
            if hive_of[g].is_some() || !(0..n_gpus).any(|o| linked(g, o)) {
                continue;
            }
            let mut stack = vec![g];
            hive_of[g] = Some(g);
            while let Some(a) = stack.pop() {
                for (b, hive) in hive_of.iter_mut().enumerate() {
                    if hive.is_none() && linked(a, b) {
                        *hive = Some(g);
                        stack.push(b);
                    }
                }
            }
        }
        for spec in &self.gpus {
            assert!(
                spec.numa < n_cpus,
                "GPU NUMA index {} has no CPU node",
                spec.numa
            );
        }
        let two_way = |spec: &GpuSpec| {
            spec.two_way_cpu_link
                .unwrap_or(spec.vram.0 == heap_type::FB_PUBLIC)
        };

        let mut nodes = Vec::new();
        let mut core_base = 0u64;
        for (c, &cores) in self.cpus.iter().enumerate() {
            // CPU <-> CPU links keep the flags of no one: the driver does not copy the CRAT's
            // flags, and only a GPU's arrival sets flags (kfd_fill_iolink_non_crat_info).
            let mut io_links: Vec<Link> = (0..n_cpus)
                .filter(|&o| o != c)
                .map(|o| {
                    Link::new(
                        LinkType::HyperTransport,
                        node_id(c),
                        node_id(o),
                        CPU_CPU_WEIGHT,
                    )
                    .with_flags(0)
                })
                .collect();
            for (g, spec) in self.gpus.iter().enumerate() {
                if spec.numa == c && two_way(spec) {
                    // The reverse of the GPU's PCIe link (same bandwidths), non-coherent as the
                    // driver marks CPU -> GPU over PCIe.
                    io_links.push(
                        Link::new(LinkType::Pcie, node_id(c), gpu_node(g), PCIE_WEIGHT)
                            .with_flags(link_flags::ENABLED | link_flags::NON_COHERENT)
                            .with_bandwidth(PCIE_MIN_BANDWIDTH, PCIE_MAX_BANDWIDTH),
                    );
                }
            }
            // The driver's indirect links (kfd_create_indirect_link_prop): each large-BAR GPU on
            // another NUMA node is reached through that node's CPU, as a p2p link whose weight
            // adds the GPU's PCIe link and the CPU <-> CPU link, whose bandwidths are the
            // narrower of the two (the CPU link has none), flagged as CPU -> GPU over PCIe.
            let p2p_links: Vec<Link> = self
                .gpus
                .iter()
                .enumerate()
                .filter(|(_, spec)| spec.numa != c && two_way(spec))
                .map(|(g, _)| {
                    Link::new(
                        LinkType::Pcie,
                        node_id(c),
                        gpu_node(g),
                        PCIE_WEIGHT + CPU_CPU_WEIGHT,
                    )
                    .with_flags(link_flags::ENABLED | link_flags::NON_COHERENT)
                    .with_bandwidth(0, 0)
                })
                .collect();
            // System memory as 6.1 reports it: the CRAT gives the size; width and clock come
            // from the DMI memory devices (find_system_memory: data width and speed of the
            // DIMMs, here DDR4-3200).
            let mem = MemBank::new(heap_type::SYSTEM, 256 * GIB, 64, 3200);
            let cpu_keys: Vec<&str> = keys::NODE_ORDER
                .iter()
                .copied()
                .filter(|k| !keys::GPU_ONLY.contains(k))
                .collect();
            let properties = Properties::from_keys(&cpu_keys, |k| match k {
                keys::CPU_CORES_COUNT => u64::from(cores),
                keys::MEM_BANKS_COUNT => 1,
                keys::IO_LINKS_COUNT => io_links.len() as u64,
                keys::P2P_LINKS_COUNT => p2p_links.len() as u64,
                keys::CPU_CORE_ID_BASE => core_base,
                keys::MAX_ENGINE_CLK_CCOMPUTE => 2450,
                _ => 0,
            });
            core_base += u64::from(cores);
            nodes.push(Node {
                id: node_id(c),
                gpu_id: 0,
                name: String::new(),
                properties,
                mem_banks: vec![mem],
                caches: Vec::new(),
                io_links,
                p2p_links,
            });
        }

        let mut simd_id_base = FIRST_SIMD_ID_BASE;
        for (g, spec) in self.gpus.iter().enumerate() {
            let me = gpu_node(g);
            // Flags as kfd_fill_iolink_non_crat_info leaves them (PCIe atomics supported):
            // ENABLED, and NON_COHERENT between GPUs over PCIe and over Vega20's xGMI.
            let mut io_links = vec![
                Link::new(LinkType::Pcie, me, node_id(spec.numa), PCIE_WEIGHT)
                    .with_bandwidth(PCIE_MIN_BANDWIDTH, PCIE_MAX_BANDWIDTH),
            ];
            let vega20 =
                |s: &GpuSpec| s.properties.get_or_zero(keys::GFX_TARGET_VERSION) == GFX_VEGA20;
            // First the indirect links to the other NUMA nodes' CPUs (the reverse of the CPU
            // nodes' p2p links above): the GPU -> CPU direction keeps ENABLED only.
            let mut p2p_links: Vec<Link> = (0..n_cpus)
                .filter(|&c| c != spec.numa)
                .map(|c| {
                    Link::new(LinkType::Pcie, me, node_id(c), PCIE_WEIGHT + CPU_CPU_WEIGHT)
                        .with_bandwidth(0, 0)
                })
                .collect();
            let aldebaran = spec.properties.get_or_zero(keys::GFX_TARGET_VERSION) == GFX_ALDEBARAN;
            for (o, other) in self.gpus.iter().enumerate() {
                if o == g {
                    continue;
                }
                if let Some(links) = self.links_between(g, o) {
                    let flags = if vega20(spec) || vega20(other) {
                        link_flags::ENABLED | link_flags::NON_COHERENT
                    } else {
                        link_flags::ENABLED
                    };
                    // 6.1 (kfd_fill_gpu_xgmi_link_to_gpu): max is the link count times one
                    // link's bandwidth, min one link's when max is nonzero; only Aldebaran
                    // reports any, Vega 20 and Arcturus 0. One hop, so weight 15.
                    let max = if aldebaran {
                        u64::from(links) * XGMI_LINK_BANDWIDTH
                    } else {
                        0
                    };
                    let min = if max == 0 { 0 } else { XGMI_LINK_BANDWIDTH };
                    io_links.push(
                        Link::new(LinkType::Xgmi, me, gpu_node(o), XGMI_WEIGHT)
                            .with_flags(flags)
                            .with_bandwidth(min, max),
                    );
                } else if self.p2p && two_way(other) {
                    // kfd_add_peer_prop: the two GPUs' PCIe links, and the CPU <-> CPU link
                    // between their NUMA nodes if they differ, added up (weights) or narrowed
                    // (bandwidths: the CPU link has none, so a cross-NUMA path reports 0).
                    let (weight, bw) = if other.numa == spec.numa {
                        (2 * PCIE_WEIGHT, (PCIE_MIN_BANDWIDTH, PCIE_MAX_BANDWIDTH))
                    } else {
                        (2 * PCIE_WEIGHT + CPU_CPU_WEIGHT, (0, 0))
                    };
                    p2p_links.push(
                        Link::new(LinkType::Pcie, me, gpu_node(o), weight)
                            .with_flags(link_flags::ENABLED | link_flags::NON_COHERENT)
                            .with_bandwidth(bw.0, bw.1),
                    );
                }
            }
            let hive_id = hive_of[g].map_or(0, |h| 0x4a7e_0000_0000_0000 + h as u64 + 1);
            let bus = 0x03 + 0x20 * g as u64;
            let mut properties = spec.properties.clone();
            for (k, v) in [
                (keys::MEM_BANKS_COUNT, 1),
                (keys::IO_LINKS_COUNT, io_links.len() as u64),
                (keys::P2P_LINKS_COUNT, p2p_links.len() as u64),
                (keys::SIMD_ID_BASE, simd_id_base),
                (keys::LOCATION_ID, (bus & 0xff) << 8),
                (
                    keys::DRM_RENDER_MINOR,
                    u64::from(spec.render_minor.unwrap_or(128 + node_id(g))),
                ),
                (keys::HIVE_ID, hive_id),
                (keys::UNIQUE_ID, 0x1d2c_3b4a_0000_0000 + g as u64),
            ] {
                properties.set(k, v);
            }
            for (k, v) in spec.overrides.iter() {
                properties.set(k, v);
            }
            let layout = CuLayout::of(&properties);
            let mut caches = caches::table(properties.get_or_zero(keys::GFX_TARGET_VERSION))
                .map(|kinds| {
                    caches::gpu_caches(kinds, &layout, properties.get_or_zero(keys::SIMD_ID_BASE))
                })
                .unwrap_or_default();
            caches.truncate(spec.caches);
            if spec.overrides.get(keys::CACHES_COUNT).is_none() {
                properties.set(keys::CACHES_COUNT, caches.len() as u64);
            }
            // The next GPU's SIMD ids follow this one's CU slots, active or not
            // (get_and_inc_gpu_processor_id).
            simd_id_base += u64::from(layout.slots());
            let gpu_id = spec.gpu_id.unwrap_or_else(|| auto_gpu_id(g));
            nodes.push(Node {
                id: me,
                gpu_id,
                name: spec.name.clone(),
                properties,
                mem_banks: vec![MemBank::new(
                    spec.vram.0,
                    spec.vram.1,
                    4096,
                    spec.mem_clk_max,
                )],
                caches,
                io_links,
                p2p_links,
            });
        }
        Topology {
            generation_id: self.generation_id,
            system_properties: Properties::from_keys(keys::SYSTEM_ORDER, |_| 0),
            nodes,
        }
    }
}

/// A distinct nonzero 16-bit gpu_id for GPU index `g` (an odd multiplier is a bijection mod 2^16).
fn auto_gpu_id(g: usize) -> u32 {
    let g = u32::try_from(g % 0xffff).unwrap_or(0);
    ((g + 1).wrapping_mul(40503)) & 0xffff
}
