//! The topology model: what one KFD sysfs tree holds, kept losslessly.
//!
//! Every properties file is an ordered list of `key value` pairs ([`Properties`]): the kernel's key
//! order is kept and keys this crate does not know are carried along, so that
//! `parse(write(t)) == t` and a parsed tree is written back unchanged. Typed accessors sit on top.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// Key names of a node's `properties` file that the solver and the image use.
pub mod keys {
    #![allow(missing_docs)]
    /// Declares each key's constant and [`NODE_ORDER`], the keys in the kernel's order, from one
    /// list.
    macro_rules! node_keys {
        ($($vis:vis $name:ident = $key:literal;)*) => {
            $($vis const $name: &str = $key;)*

            /// The keys of a node's `properties` file in the kernel's order. The keys from
            /// `GPU_ONLY` appear only in GPU nodes; `max_engine_clk_ccompute` is always last.
            pub const NODE_ORDER: &[&str] = &[$($name),*];
        };
    }

    node_keys! {
        pub CPU_CORES_COUNT = "cpu_cores_count";
        pub SIMD_COUNT = "simd_count";
        pub MEM_BANKS_COUNT = "mem_banks_count";
        pub CACHES_COUNT = "caches_count";
        pub IO_LINKS_COUNT = "io_links_count";
        pub P2P_LINKS_COUNT = "p2p_links_count";
        pub(crate) CPU_CORE_ID_BASE = "cpu_core_id_base";
        pub SIMD_ID_BASE = "simd_id_base";
        pub MAX_WAVES_PER_SIMD = "max_waves_per_simd";
        pub LDS_SIZE_IN_KB = "lds_size_in_kb";
        pub GDS_SIZE_IN_KB = "gds_size_in_kb";
        pub NUM_GWS = "num_gws";
        pub WAVE_FRONT_SIZE = "wave_front_size";
        pub ARRAY_COUNT = "array_count";
        pub SIMD_ARRAYS_PER_ENGINE = "simd_arrays_per_engine";
        pub CU_PER_SIMD_ARRAY = "cu_per_simd_array";
        pub SIMD_PER_CU = "simd_per_cu";
        pub MAX_SLOTS_SCRATCH_CU = "max_slots_scratch_cu";
        pub GFX_TARGET_VERSION = "gfx_target_version";
        pub VENDOR_ID = "vendor_id";
        pub DEVICE_ID = "device_id";
        pub LOCATION_ID = "location_id";
        pub DOMAIN = "domain";
        pub DRM_RENDER_MINOR = "drm_render_minor";
        pub HIVE_ID = "hive_id";
        pub NUM_SDMA_ENGINES = "num_sdma_engines";
        pub NUM_SDMA_XGMI_ENGINES = "num_sdma_xgmi_engines";
        pub NUM_SDMA_QUEUES_PER_ENGINE = "num_sdma_queues_per_engine";
        pub NUM_CP_QUEUES = "num_cp_queues";
        pub MAX_ENGINE_CLK_FCOMPUTE = "max_engine_clk_fcompute";
        pub(crate) LOCAL_MEM_SIZE = "local_mem_size";
        pub FW_VERSION = "fw_version";
        pub CAPABILITY = "capability";
        pub SDMA_FW_VERSION = "sdma_fw_version";
        pub UNIQUE_ID = "unique_id";
        pub(crate) MAX_ENGINE_CLK_CCOMPUTE = "max_engine_clk_ccompute";
    }

    /// Keys the kernel writes for GPU nodes only.
    pub(crate) const GPU_ONLY: &[&str] = &[
        MAX_ENGINE_CLK_FCOMPUTE,
        LOCAL_MEM_SIZE,
        FW_VERSION,
        CAPABILITY,
        SDMA_FW_VERSION,
        UNIQUE_ID,
    ];

    /// Keys of `system_properties`, in order.
    pub(crate) const SYSTEM_ORDER: &[&str] = &["platform_oem", "platform_id", "platform_rev"];

    /// Keys of a `mem_banks/M/properties` file, in order.
    pub(crate) const MEM_BANK_ORDER: &[&str] = &[
        "heap_type",
        "size_in_bytes",
        "flags",
        "width",
        "mem_clk_max",
    ];

    /// Keys of a `caches/C/properties` file, in order (`sibling_map` follows them).
    pub(crate) const CACHE_ORDER: &[&str] = &[
        "processor_id_low",
        "level",
        "size",
        "cache_line_size",
        "cache_lines_per_tag",
        "association",
        "latency",
        "type",
    ];

    /// Keys of an `io_links/L/properties` or `p2p_links/L/properties` file, in order.
    pub(crate) const LINK_ORDER: &[&str] = &[
        "type",
        "version_major",
        "version_minor",
        "node_from",
        "node_to",
        "weight",
        "min_latency",
        "max_latency",
        "min_bandwidth",
        "max_bandwidth",
        "recommended_transfer_size",
        "flags",
    ];
}

/// An ordered list of `key value` properties, as one sysfs `properties` file holds them.
///
/// Order is significant (it is the file's order) and keys are unique.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Properties(Vec<(String, u64)>);

impl Properties {
    /// An empty list.
    #[must_use]
    pub fn new() -> Self {
        Self(Vec::new())
    }

    /// The value of `key`, if present.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<u64> {
        self.0.iter().find(|(k, _)| k == key).map(|&(_, v)| v)
    }

    /// The value of `key`, 0 when absent (the kernel's consumers treat a missing key as 0).
    #[must_use]
    pub fn get_or_zero(&self, key: &str) -> u64 {
        self.get(key).unwrap_or(0)
    }

    /// Sets `key` to `value`: in place if present, else appended at the end.
    pub fn set(&mut self, key: &str, value: u64) {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value,
            None => self.0.push((key.to_owned(), value)),
        }
    }

    /// [`set`](Self::set), builder style.
    #[must_use]
    pub fn with(mut self, key: &str, value: u64) -> Self {
        self.set(key, value);
        self
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<u64> {
        let pos = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.remove(pos).1)
    }

    /// The entries in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// Number of entries.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are no entries.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Builds a list from `keys` in that order, taking every value from `value`.
    pub(crate) fn from_keys(keys: &[&str], mut value: impl FnMut(&str) -> u64) -> Self {
        keys.iter().map(|k| (*k, value(k))).collect()
    }
}

impl<K: Into<String>> FromIterator<(K, u64)> for Properties {
    fn from_iter<I: IntoIterator<Item = (K, u64)>>(iter: I) -> Self {
        let mut p = Self::new();
        for (k, v) in iter {
            p.set(&k.into(), v);
        }
        p
    }
}

/// The kind of an io_link or p2p_link (the CRAT iolink type).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum LinkType {
    /// HyperTransport (1), between CPUs.
    HyperTransport,
    /// PCI Express (2), GPU to CPU and GPU to GPU over PCIe.
    Pcie,
    /// QPI 1.1 (5), between CPUs.
    Qpi,
    /// xGMI (11), between GPUs of one hive.
    Xgmi,
    /// Any other value.
    Unknown(u32),
}

impl LinkType {
    /// The sysfs/CRAT value.
    #[must_use]
    pub fn as_u32(self) -> u32 {
        match self {
            Self::HyperTransport => 1,
            Self::Pcie => 2,
            Self::Qpi => 5,
            Self::Xgmi => 11,
            Self::Unknown(v) => v,
        }
    }

    /// From the sysfs/CRAT value; never fails.
    #[must_use]
    pub fn from_u32(v: u32) -> Self {
        match v {
            1 => Self::HyperTransport,
            2 => Self::Pcie,
            5 => Self::Qpi,
            11 => Self::Xgmi,
            v => Self::Unknown(v),
        }
    }

    /// True for the kinds the remapping compares (PCIe and xGMI).
    #[must_use]
    pub fn is_compared(self) -> bool {
        matches!(self, Self::Pcie | Self::Xgmi)
    }
}

impl std::fmt::Display for LinkType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::HyperTransport => f.write_str("HyperTransport"),
            Self::Pcie => f.write_str("PCIe"),
            Self::Qpi => f.write_str("QPI"),
            Self::Xgmi => f.write_str("xGMI"),
            Self::Unknown(v) => write!(f, "type {v}"),
        }
    }
}

/// Link `flags` bits.
pub mod link_flags {
    /// The link is enabled.
    pub const ENABLED: u64 = 1;
    /// Not cache coherent.
    pub const NON_COHERENT: u64 = 2;
    /// No 32-bit atomics.
    pub const NO_ATOMICS_32: u64 = 4;
    /// No 64-bit atomics.
    pub const NO_ATOMICS_64: u64 = 8;
}

/// One `io_links/L` or `p2p_links/L` entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// The `properties` file.
    pub properties: Properties,
}

impl Link {
    /// A link with every key of the kernel's format, zero except those given.
    #[must_use]
    pub fn new(link_type: LinkType, from: u32, to: u32, weight: u32) -> Self {
        let properties = Properties::from_keys(keys::LINK_ORDER, |k| match k {
            "type" => u64::from(link_type.as_u32()),
            "node_from" => u64::from(from),
            "node_to" => u64::from(to),
            "weight" => u64::from(weight),
            "flags" => link_flags::ENABLED,
            _ => 0,
        });
        Self { properties }
    }

    /// The same link with `flags` set.
    #[must_use]
    pub(crate) fn with_flags(mut self, flags: u64) -> Self {
        self.properties.set("flags", flags);
        self
    }

    /// The same link with `min_bandwidth` and `max_bandwidth` set (MB/s).
    #[must_use]
    pub(crate) fn with_bandwidth(mut self, min: u64, max: u64) -> Self {
        self.properties.set("min_bandwidth", min);
        self.properties.set("max_bandwidth", max);
        self
    }

    /// The link's kind.
    #[must_use]
    pub fn link_type(&self) -> LinkType {
        LinkType::from_u32(low32(self.properties.get_or_zero("type")))
    }

    /// The node it starts from.
    #[must_use]
    pub(crate) fn node_from(&self) -> u32 {
        low32(self.properties.get_or_zero("node_from"))
    }

    /// The node it goes to.
    #[must_use]
    pub fn node_to(&self) -> u32 {
        low32(self.properties.get_or_zero("node_to"))
    }

    /// The weight (relative distance).
    #[must_use]
    pub fn weight(&self) -> u64 {
        self.properties.get_or_zero("weight")
    }
}

/// One `mem_banks/M` entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemBank {
    /// The `properties` file.
    pub properties: Properties,
}

/// `heap_type` values.
pub mod heap_type {
    /// System memory (CPU NUMA node).
    pub const SYSTEM: u64 = 0;
    /// Frame buffer, fully visible to the CPU (large BAR).
    pub const FB_PUBLIC: u64 = 1;
    /// Frame buffer, partly visible.
    pub const FB_PRIVATE: u64 = 2;
}

impl MemBank {
    /// A bank with every key of the kernel's format.
    #[must_use]
    pub fn new(heap: u64, size_in_bytes: u64, width: u64, mem_clk_max: u64) -> Self {
        let properties = Properties::from_keys(keys::MEM_BANK_ORDER, |k| match k {
            "heap_type" => heap,
            "size_in_bytes" => size_in_bytes,
            "width" => width,
            "mem_clk_max" => mem_clk_max,
            _ => 0,
        });
        Self { properties }
    }

    /// `heap_type`.
    #[must_use]
    pub fn heap_type(&self) -> u64 {
        self.properties.get_or_zero("heap_type")
    }

    /// `size_in_bytes`.
    #[must_use]
    pub fn size_in_bytes(&self) -> u64 {
        self.properties.get_or_zero("size_in_bytes")
    }
}

/// One `caches/C` entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cache {
    /// The `key value` lines of the `properties` file.
    pub properties: Properties,
    /// The `sibling_map` line: one 0/1 entry per sibling, comma separated in the file. `None`
    /// when the file has no such line; `Some(empty)` for a bare `sibling_map` line.
    pub sibling_map: Option<Vec<u8>>,
}

impl Cache {
    /// A cache with every key of the kernel's format.
    #[must_use]
    pub fn new(
        processor_id_low: u64,
        level: u64,
        size_kb: u64,
        cache_type: u64,
        sibling_map: Vec<u8>,
    ) -> Self {
        let properties = Properties::from_keys(keys::CACHE_ORDER, |k| match k {
            "processor_id_low" => processor_id_low,
            "level" => level,
            "size" => size_kb,
            "cache_line_size" => 64,
            "cache_lines_per_tag" => 1,
            "association" => 16,
            "latency" => 1,
            "type" => cache_type,
            _ => 0,
        });
        Self {
            properties,
            sibling_map: Some(sibling_map),
        }
    }
}

/// One `nodes/N` directory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// The directory number N (the kernel's node id, also `node_from`/`node_to` of links).
    pub id: u32,
    /// Contents of `gpu_id`; 0 for a CPU node.
    pub gpu_id: u32,
    /// Contents of `name` (without the newline); empty for a CPU node.
    pub name: String,
    /// The `properties` file.
    pub properties: Properties,
    /// `mem_banks/0..`.
    pub mem_banks: Vec<MemBank>,
    /// `caches/0..`.
    pub caches: Vec<Cache>,
    /// `io_links/0..`.
    pub io_links: Vec<Link>,
    /// `p2p_links/0..`.
    pub p2p_links: Vec<Link>,
}

impl Node {
    /// True for a GPU node (nonzero gpu_id).
    #[must_use]
    pub fn is_gpu(&self) -> bool {
        self.gpu_id != 0
    }

    /// A property of the node's `properties` file, 0 when absent.
    #[must_use]
    pub fn prop(&self, key: &str) -> u64 {
        self.properties.get_or_zero(key)
    }

    /// `drm_render_minor` (render node `/dev/dri/renderD<minor>`).
    #[must_use]
    pub fn render_minor(&self) -> u32 {
        low32(self.prop(keys::DRM_RENDER_MINOR))
    }

    /// The GPU's frame buffer: `(public, size)` from the first bank with heap type 1 (public) or
    /// 2 (private); `None` when there is none (CPU nodes).
    #[must_use]
    pub fn vram(&self) -> Option<(bool, u64)> {
        self.mem_banks.iter().find_map(|b| match b.heap_type() {
            heap_type::FB_PUBLIC => Some((true, b.size_in_bytes())),
            heap_type::FB_PRIVATE => Some((false, b.size_in_bytes())),
            _ => None,
        })
    }
}

/// A whole topology directory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    /// Contents of `generation_id`.
    pub generation_id: u64,
    /// The `system_properties` file.
    pub system_properties: Properties,
    /// The nodes, in directory order (CPU nodes first on a real system).
    pub nodes: Vec<Node>,
}

/// A link as the solver sees it: valid (its target exists), with its direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ResolvedLink {
    /// Kind of link.
    pub link_type: LinkType,
    /// Source node id.
    pub from: u32,
    /// Target node id.
    pub to: u32,
    /// True when the target has a link of the same kind back (a peer link).
    pub two_way: bool,
}

impl Topology {
    /// The node with directory number `id`.
    #[must_use]
    pub fn node(&self, id: u32) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// The node with directory number `id`, mutably.
    pub fn node_mut(&mut self, id: u32) -> Option<&mut Node> {
        self.nodes.iter_mut().find(|n| n.id == id)
    }

    /// The GPU node with this gpu_id.
    #[must_use]
    pub fn gpu(&self, gpu_id: u32) -> Option<&Node> {
        self.nodes.iter().find(|n| n.is_gpu() && n.gpu_id == gpu_id)
    }

    /// The GPU node with this gpu_id, mutably.
    pub fn gpu_mut(&mut self, gpu_id: u32) -> Option<&mut Node> {
        self.nodes
            .iter_mut()
            .find(|n| n.is_gpu() && n.gpu_id == gpu_id)
    }

    /// GPU nodes in directory order.
    pub fn gpus(&self) -> impl DoubleEndedIterator<Item = &Node> {
        self.nodes.iter().filter(|n| n.is_gpu())
    }

    /// CPU nodes in directory order.
    pub fn cpus(&self) -> impl DoubleEndedIterator<Item = &Node> {
        self.nodes.iter().filter(|n| !n.is_gpu())
    }

    /// True when the link's target node exists in this topology.
    #[must_use]
    pub fn is_valid(&self, link: &Link) -> bool {
        self.node(link.node_to()).is_some()
    }

    /// True when the link's target has an io_link of the same type back to its source.
    #[must_use]
    pub fn has_peer(&self, link: &Link) -> bool {
        let (from, ty) = (link.node_from(), link.link_type());
        self.node(link.node_to()).is_some_and(|target| {
            target
                .io_links
                .iter()
                .any(|back| back.node_to() == from && back.link_type() == ty)
        })
    }

    /// The node's valid io_links of the compared kinds (PCIe, xGMI), with their direction.
    #[must_use]
    pub fn resolved_links(&self, node: &Node) -> Vec<ResolvedLink> {
        node.io_links
            .iter()
            .filter(|l| l.link_type().is_compared() && self.is_valid(l))
            .map(|l| ResolvedLink {
                link_type: l.link_type(),
                from: node.id,
                to: l.node_to(),
                two_way: self.has_peer(l),
            })
            .collect()
    }

    /// xGMI hives: connected components (of two or more GPUs) of two-way xGMI links, as lists of
    /// gpu_ids in directory order; hives ordered by their first GPU.
    #[must_use]
    pub fn hives(&self) -> Vec<Vec<u32>> {
        let gpus: Vec<&Node> = self.gpus().collect();
        let index_of = |id: u32| gpus.iter().position(|n| n.id == id);
        let mut parent: Vec<usize> = (0..gpus.len()).collect();
        fn root(parent: &mut [usize], mut i: usize) -> usize {
            while parent[i] != i {
                parent[i] = parent[parent[i]];
                i = parent[i];
            }
            i
        }
        for (i, node) in gpus.iter().enumerate() {
            for link in self.resolved_links(node) {
                if link.link_type == LinkType::Xgmi && link.two_way {
                    if let Some(j) = index_of(link.to) {
                        let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                        parent[a.max(b)] = a.min(b);
                    }
                }
            }
        }
        let mut hives: Vec<Vec<u32>> = Vec::new();
        let mut roots: Vec<usize> = Vec::new();
        for (i, gpu) in gpus.iter().enumerate() {
            let r = root(&mut parent, i);
            match roots.iter().position(|&x| x == r) {
                Some(h) => hives[h].push(gpu.gpu_id),
                None => {
                    roots.push(r);
                    hives.push(vec![gpu.gpu_id]);
                }
            }
        }
        hives.retain(|h| h.len() > 1);
        hives
    }

    /// The topology as a process that may use only the GPUs `keep` selects sees it (a
    /// container's device cgroup): the other GPU nodes are missing, as the parser skips the nodes
    /// the kernel does not let it read, and the links to them are no longer valid (so a hive
    /// shrinks to its visible members). Node ids do not change; CPU nodes stay.
    #[must_use]
    pub fn restricted_to(&self, keep: impl Fn(&Node) -> bool) -> Self {
        Self {
            nodes: self
                .nodes
                .iter()
                .filter(|n| !n.is_gpu() || keep(n))
                .cloned()
                .collect(),
            ..self.clone()
        }
    }

    /// The same topology with its nodes in `order` (a permutation of the node ids) and renumbered
    /// 0.. in that order; links follow their nodes. Used to make "same machine, enumerated
    /// differently" variants.
    ///
    /// # Panics
    ///
    /// If `order` is not a permutation of this topology's node ids.
    #[must_use]
    pub fn renumbered(&self, order: &[u32]) -> Self {
        let old: BTreeSet<u32> = self.nodes.iter().map(|n| n.id).collect();
        let new: BTreeSet<u32> = order.iter().copied().collect();
        assert!(
            old == new && order.len() == self.nodes.len(),
            "renumbered: {order:?} is not a permutation of the node ids"
        );
        let new_id = |old_id: u32| -> u32 {
            order
                .iter()
                .position(|&x| x == old_id)
                .and_then(|p| u32::try_from(p).ok())
                .unwrap_or(old_id)
        };
        let fix_links = |links: &[Link]| -> Vec<Link> {
            links
                .iter()
                .map(|l| {
                    let mut l = l.clone();
                    l.properties
                        .set("node_from", u64::from(new_id(l.node_from())));
                    l.properties.set("node_to", u64::from(new_id(l.node_to())));
                    l
                })
                .collect()
        };
        let nodes = order
            .iter()
            .filter_map(|&id| self.node(id))
            .map(|n| Node {
                id: new_id(n.id),
                io_links: fix_links(&n.io_links),
                p2p_links: fix_links(&n.p2p_links),
                ..n.clone()
            })
            .collect();
        Self {
            nodes,
            ..self.clone()
        }
    }
}

/// A sysfs value the kernel prints from a 32-bit field, as u32 (saturating if out of range).
pub(crate) fn low32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}
