//! Topology presets: small descriptions of a node (CPU NUMA nodes, GPU models and where they sit)
//! that become a [`Topology`] through the `topology` crate's builder.
//!
//! The same value drives the sysfs tree (`topology::write`) and the simulated devices
//! ([`crate::Machine`]), so the two always agree. A preset is also a file a user can write
//! (TOML or JSON), describing their own node:
//!
//! ```toml
//! name = "my-node"
//! [[numa]]
//! cores = 32
//! memory_gib = 256
//! [[gpu]]
//! model = "mi100"
//! gpu_id = 0x2f9b
//! pci = "0000:23:00.0"
//! numa = 0
//! ```

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use topology::builder::{GpuSpec as BuilderGpu, TopologyBuilder};
use topology::model::keys;
use topology::Topology;

const GIB: u64 = 1 << 30;
/// xGMI links between the two GCDs of an MI250X package.
const MI250X_PACKAGE_LINKS: u32 = 4;

/// Why a preset could not be loaded or is inconsistent.
#[derive(Debug, thiserror::Error)]
pub enum PresetError {
    /// No built-in preset has this name.
    #[error("unknown preset {0:?}; `kfd-simd presets` lists the built-in ones")]
    Unknown(String),
    /// The preset file could not be read.
    #[error("cannot read preset file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// TOML syntax or schema error.
    #[error("invalid TOML preset: {0}")]
    Toml(#[from] toml::de::Error),
    /// JSON syntax or schema error.
    #[error("invalid JSON preset: {0}")]
    Json(#[from] serde_json::Error),
    /// The description is inconsistent.
    #[error("invalid preset {name:?}: {what}")]
    Invalid {
        /// The preset's name.
        name: String,
        /// What is wrong, and how to fix it.
        what: String,
    },
}

/// A GPU model the simulator knows (all gfx9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuModel {
    /// AMD Instinct MI50 (gfx906, vega20).
    Mi50,
    /// AMD Instinct MI60 (gfx906, vega20).
    Mi60,
    /// AMD Instinct MI100 (gfx908, arcturus).
    Mi100,
    /// AMD Instinct MI210 (gfx90a, aldebaran).
    Mi210,
    /// One GCD of an AMD Instinct MI250X (gfx90a, aldebaran).
    Mi250x,
}

impl GpuModel {
    fn builder(self) -> BuilderGpu {
        match self {
            GpuModel::Mi50 => BuilderGpu::mi50().vram(true, 16 * GIB),
            GpuModel::Mi60 => BuilderGpu::mi50()
                .prop(keys::DEVICE_ID, 0x66a0)
                .vram(true, 32 * GIB),
            GpuModel::Mi100 => BuilderGpu::mi100(),
            GpuModel::Mi210 => BuilderGpu::mi210(),
            GpuModel::Mi250x => BuilderGpu::mi250x_gcd(),
        }
    }
}

/// A PCI location `DDDD:BB:DD.F`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciLocation {
    /// PCI domain.
    pub domain: u16,
    /// Bus.
    pub bus: u8,
    /// Device (0..32).
    pub device: u8,
    /// Function (0..8).
    pub function: u8,
}

impl PciLocation {
    /// Domain 0, the given bus, device 0, function 0.
    pub const fn bus(bus: u8) -> Self {
        Self {
            domain: 0,
            bus,
            device: 0,
            function: 0,
        }
    }

    /// `location_id` as sysfs shows it: `(bus << 8) | devfn`.
    pub fn location_id(self) -> u64 {
        (u64::from(self.bus) << 8)
            | (u64::from(self.device & 0x1f) << 3)
            | u64::from(self.function & 7)
    }
}

impl fmt::Display for PciLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl FromStr for PciLocation {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not a PCI location like 0000:23:00.0");
        let (dom, rest) = s.split_once(':').ok_or_else(bad)?;
        let (bus, rest) = rest.split_once(':').ok_or_else(bad)?;
        let (dev, func) = rest.split_once('.').ok_or_else(bad)?;
        let loc = PciLocation {
            domain: u16::from_str_radix(dom, 16).map_err(|_| bad())?,
            bus: u8::from_str_radix(bus, 16).map_err(|_| bad())?,
            device: u8::from_str_radix(dev, 16).map_err(|_| bad())?,
            function: u8::from_str_radix(func, 16).map_err(|_| bad())?,
        };
        if loc.device >= 32 || loc.function >= 8 {
            return Err(bad());
        }
        Ok(loc)
    }
}

impl Serialize for PciLocation {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PciLocation {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One CPU NUMA node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NumaNode {
    /// CPU cores.
    pub cores: u32,
    /// System memory in GiB.
    pub memory_gib: u64,
}

/// One GPU of a preset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuEntry {
    /// The model.
    pub model: GpuModel,
    /// KFD gpu_id (nonzero, 16 bits as the 6.1 kernel makes them).
    pub gpu_id: u32,
    /// PCI location.
    pub pci: PciLocation,
    /// Index of the NUMA node it hangs off.
    pub numa: u32,
    /// xGMI hive: GPUs with the same number form one hive (all pairs linked). MI250X GCDs come
    /// in packages of two: GPUs 2k and 2k+1 of the preset, both MI250X in one hive, are the two
    /// GCDs of one package, joined by 4 xGMI links; other pairs by one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hive: Option<u32>,
    /// Render minor (`/dev/dri/renderD<minor>`); default 128 + index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub render_minor: Option<u32>,
    /// MEC firmware version (`fw_version`); default the model's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fw_version: Option<u32>,
    /// SDMA firmware version; default the model's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sdma_fw_version: Option<u32>,
    /// VRAM in GiB; default the model's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vram_gib: Option<u64>,
}

/// A node description: NUMA nodes and GPUs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    /// Name (`mi100x4`).
    pub name: String,
    /// One line for `kfd-simd presets`.
    #[serde(default)]
    pub description: String,
    /// CPU NUMA nodes, in node order.
    pub numa: Vec<NumaNode>,
    /// GPUs, in probe order.
    #[serde(rename = "gpu")]
    pub gpus: Vec<GpuEntry>,
}

/// The built-in presets: name and description.
pub const BUILTIN: &[(&str, &str)] = &[
    ("mi50x1", "one MI50 (gfx906) on one NUMA node"),
    (
        "mi100x4",
        "four MI100 (gfx908) on PCIe, two per NUMA node, two NUMA nodes",
    ),
    ("mi210x2", "two MI210 (gfx90a) on PCIe, one NUMA node"),
    (
        "mi250x8",
        "four MI250X = eight GCDs (gfx90a) in one xGMI hive, four NUMA nodes",
    ),
    (
        "mi250x16",
        "eight MI250X = sixteen GCDs (gfx90a) in two xGMI hives of eight, eight NUMA nodes",
    ),
];

fn gpu(model: GpuModel, gpu_id: u32, bus: u8, numa: u32) -> GpuEntry {
    GpuEntry {
        model,
        gpu_id,
        pci: PciLocation::bus(bus),
        numa,
        hive: None,
        render_minor: None,
        fw_version: None,
        sdma_fw_version: None,
        vram_gib: None,
    }
}

impl Preset {
    /// One MI50.
    pub fn mi50x1() -> Self {
        Self {
            name: "mi50x1".into(),
            description: BUILTIN[0].1.into(),
            numa: vec![NumaNode {
                cores: 16,
                memory_gib: 128,
            }],
            gpus: vec![gpu(GpuModel::Mi50, 0x5ad3, 0x03, 0)],
        }
    }

    /// Four MI100 on PCIe over two NUMA nodes.
    pub fn mi100x4() -> Self {
        Self {
            name: "mi100x4".into(),
            description: BUILTIN[1].1.into(),
            numa: vec![
                NumaNode {
                    cores: 32,
                    memory_gib: 256
                };
                2
            ],
            gpus: vec![
                gpu(GpuModel::Mi100, 0xb4e1, 0x23, 0),
                gpu(GpuModel::Mi100, 0x2c7a, 0x43, 0),
                gpu(GpuModel::Mi100, 0xe806, 0x83, 1),
                gpu(GpuModel::Mi100, 0x71d9, 0xa3, 1),
            ],
        }
    }

    /// Two MI210 on PCIe.
    pub fn mi210x2() -> Self {
        Self {
            name: "mi210x2".into(),
            description: BUILTIN[2].1.into(),
            numa: vec![NumaNode {
                cores: 64,
                memory_gib: 512,
            }],
            gpus: vec![
                gpu(GpuModel::Mi210, 0x8a3f, 0xc1, 0),
                gpu(GpuModel::Mi210, 0x1e52, 0xe1, 0),
            ],
        }
    }

    /// Eight MI250X GCDs in one hive, two per NUMA node.
    pub fn mi250x8() -> Self {
        let ids = [
            0xd4a2, 0x39c7, 0x6b15, 0xf0e8, 0x0c9d, 0xa761, 0x5e34, 0x92bb,
        ];
        let buses = [0xc1, 0xc6, 0xc9, 0xce, 0xd1, 0xd6, 0xd9, 0xde];
        let gpus = ids
            .iter()
            .zip(buses)
            .zip(0u32..)
            .map(|((&id, bus), i)| GpuEntry {
                hive: Some(0),
                ..gpu(GpuModel::Mi250x, id, bus, i / 2)
            })
            .collect();
        Self {
            name: "mi250x8".into(),
            description: BUILTIN[3].1.into(),
            numa: vec![
                NumaNode {
                    cores: 16,
                    memory_gib: 128
                };
                4
            ],
            gpus,
        }
    }

    /// Sixteen MI250X GCDs in two hives of eight, two per NUMA node: twice `mi250x8`, with
    /// gpu_ids of its own (a node with more GPUs than an `mi250x8` image, for restores onto a
    /// subset).
    pub fn mi250x16() -> Self {
        let ids = [
            0x4c1e, 0xb307, 0x17d9, 0xe8a2, 0x7f40, 0x2a6b, 0xc5f3, 0x6094, 0x9d28, 0x03b6, 0xd7c1,
            0x586f, 0xa14d, 0x3ee0, 0xf915, 0x8672,
        ];
        let gpus = ids
            .iter()
            .zip(0u8..)
            .zip(0u32..)
            .map(|((&id, k), i)| GpuEntry {
                hive: Some(i / 8),
                ..gpu(GpuModel::Mi250x, id, 0x41 + 0x0a * k, i / 2)
            })
            .collect();
        Self {
            name: "mi250x16".into(),
            description: BUILTIN[4].1.into(),
            numa: vec![
                NumaNode {
                    cores: 16,
                    memory_gib: 128
                };
                8
            ],
            gpus,
        }
    }

    /// A built-in preset by name.
    pub fn by_name(name: &str) -> Result<Self, PresetError> {
        Ok(match name {
            "mi50x1" => Self::mi50x1(),
            "mi100x4" => Self::mi100x4(),
            "mi210x2" => Self::mi210x2(),
            "mi250x8" => Self::mi250x8(),
            "mi250x16" => Self::mi250x16(),
            other => return Err(PresetError::Unknown(other.to_owned())),
        })
    }

    /// Parses a TOML preset.
    pub fn from_toml(text: &str) -> Result<Self, PresetError> {
        let p: Self = toml::from_str(text)?;
        p.validate()?;
        Ok(p)
    }

    /// Parses a JSON preset.
    pub fn from_json(text: &str) -> Result<Self, PresetError> {
        let p: Self = serde_json::from_str(text)?;
        p.validate()?;
        Ok(p)
    }

    /// Loads a preset file: JSON if it ends in `.json`, else TOML.
    pub fn load(path: &Path) -> Result<Self, PresetError> {
        let text = std::fs::read_to_string(path).map_err(|source| PresetError::Read {
            path: path.display().to_string(),
            source,
        })?;
        if path.extension().is_some_and(|e| e == "json") {
            Self::from_json(&text)
        } else {
            Self::from_toml(&text)
        }
    }

    /// The preset as TOML (a starting point for a user's own file).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }

    /// Renames the preset.
    #[must_use]
    pub fn with_name(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// Other gpu_ids, in GPU order (extra ids are ignored, missing ones keep their value).
    #[must_use]
    pub fn with_gpu_ids(mut self, ids: &[u32]) -> Self {
        for (g, &id) in self.gpus.iter_mut().zip(ids) {
            g.gpu_id = id;
        }
        self
    }

    /// Other PCI locations, in GPU order.
    #[must_use]
    pub fn with_pci_locations(mut self, locations: &[PciLocation]) -> Self {
        for (g, &loc) in self.gpus.iter_mut().zip(locations) {
            g.pci = loc;
        }
        self
    }

    /// Other NUMA wiring: the NUMA node index of each GPU, in GPU order.
    #[must_use]
    pub fn with_numa(mut self, numa: &[u32]) -> Self {
        for (g, &n) in self.gpus.iter_mut().zip(numa) {
            g.numa = n;
        }
        self
    }

    /// Another MEC firmware version on every GPU (e.g. an older one).
    #[must_use]
    pub fn with_fw_version(mut self, fw: u32) -> Self {
        for g in &mut self.gpus {
            g.fw_version = Some(fw);
        }
        self
    }

    /// Other render minors, in GPU order.
    #[must_use]
    pub fn with_render_minors(mut self, minors: &[u32]) -> Self {
        for (g, &m) in self.gpus.iter_mut().zip(minors) {
            g.render_minor = Some(m);
        }
        self
    }

    /// Other VRAM size (GiB) on every GPU.
    #[must_use]
    pub fn with_vram_gib(mut self, gib: u64) -> Self {
        for g in &mut self.gpus {
            g.vram_gib = Some(gib);
        }
        self
    }

    /// Checks ids, references and uniqueness.
    pub fn validate(&self) -> Result<(), PresetError> {
        let bad = |what: String| {
            Err(PresetError::Invalid {
                name: self.name.clone(),
                what,
            })
        };
        if self.numa.is_empty() {
            return bad("at least one [[numa]] node is needed".into());
        }
        let minors = self.render_minors();
        for (i, g) in self.gpus.iter().enumerate() {
            if g.gpu_id == 0 || g.gpu_id > 0xffff {
                return bad(format!(
                    "GPU {i}: gpu_id {:#x} must be a nonzero 16-bit value",
                    g.gpu_id
                ));
            }
            if usize::try_from(g.numa).map_or(true, |n| n >= self.numa.len()) {
                return bad(format!(
                    "GPU {i}: numa {} does not exist ({} NUMA nodes)",
                    g.numa,
                    self.numa.len()
                ));
            }
            for (j, h) in self.gpus.iter().enumerate().take(i) {
                if h.gpu_id == g.gpu_id {
                    return bad(format!("GPUs {j} and {i} share gpu_id {:#x}", g.gpu_id));
                }
                if h.pci == g.pci {
                    return bad(format!("GPUs {j} and {i} share PCI location {}", g.pci));
                }
                if minors[j] == minors[i] {
                    return bad(format!("GPUs {j} and {i} share render minor {}", minors[i]));
                }
            }
            if g.vram_gib == Some(0) {
                return bad(format!("GPU {i}: vram_gib must be nonzero"));
            }
        }
        Ok(())
    }

    fn render_minors(&self) -> Vec<u32> {
        self.gpus
            .iter()
            .zip(128u32..)
            .map(|(g, default)| g.render_minor.unwrap_or(default))
            .collect()
    }

    /// The topology this preset describes.
    pub fn to_topology(&self) -> Result<Topology, PresetError> {
        self.validate()?;
        let minors = self.render_minors();
        let mut b = TopologyBuilder::new();
        for n in &self.numa {
            b = b.cpu(n.cores);
        }
        for (g, &minor) in self.gpus.iter().zip(&minors) {
            let mut spec = g
                .model
                .builder()
                .gpu_id(g.gpu_id)
                .render_minor(minor)
                .numa(usize::try_from(g.numa).unwrap_or(0))
                .prop(keys::LOCATION_ID, g.pci.location_id())
                .prop(keys::DOMAIN, u64::from(g.pci.domain));
            if let Some(fw) = g.fw_version {
                spec = spec.prop(keys::FW_VERSION, u64::from(fw));
            }
            if let Some(fw) = g.sdma_fw_version {
                spec = spec.prop(keys::SDMA_FW_VERSION, u64::from(fw));
            }
            if let Some(gib) = g.vram_gib {
                let public = spec.vram.0 == topology::model::heap_type::FB_PUBLIC;
                spec = spec.vram(public, gib.saturating_mul(GIB));
            }
            b = b.gpu(spec);
        }
        let mut hives: Vec<u32> = self.gpus.iter().filter_map(|g| g.hive).collect();
        hives.sort_unstable();
        hives.dedup();
        for h in hives {
            b = b.hive(
                self.gpus
                    .iter()
                    .enumerate()
                    .filter(|(_, g)| g.hive == Some(h))
                    .map(|(i, _)| i),
            );
        }
        // An MI250X's two GCDs talk over 4 links inside the package (the firmware's link count
        // 6.1 reads for max_bandwidth); across packages the preset's full mesh has one per pair
        // (a real 4-package board has 1 or 2, and some pairs only through another GCD).
        for (i, pair) in self.gpus.chunks_exact(2).enumerate() {
            if pair[0].model == GpuModel::Mi250x
                && pair[1].model == GpuModel::Mi250x
                && pair[0].hive.is_some()
                && pair[0].hive == pair[1].hive
            {
                b = b.xgmi_links(2 * i, 2 * i + 1, MI250X_PACKAGE_LINKS);
            }
        }
        let mut t = b.build();
        // System memory per NUMA node, as the preset gives it.
        for (node, numa) in t.nodes.iter_mut().filter(|n| !n.is_gpu()).zip(&self.numa) {
            for bank in &mut node.mem_banks {
                bank.properties
                    .set("size_in_bytes", numa.memory_gib.saturating_mul(GIB));
            }
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_valid_and_named_as_listed() {
        for (name, _) in BUILTIN {
            let p = Preset::by_name(name).unwrap();
            assert_eq!(&p.name, name);
            p.to_topology().unwrap();
        }
        assert!(matches!(
            Preset::by_name("mi300"),
            Err(PresetError::Unknown(_))
        ));
    }

    #[test]
    fn toml_and_json_round_trip() {
        let p = Preset::mi250x8();
        assert_eq!(Preset::from_toml(&p.to_toml()).unwrap(), p);
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(Preset::from_json(&json).unwrap(), p);
    }

    #[test]
    fn pci_location_parses_and_prints() {
        let l: PciLocation = "0000:23:00.0".parse().unwrap();
        assert_eq!(l, PciLocation::bus(0x23));
        assert_eq!(l.location_id(), 8960);
        assert_eq!(l.to_string(), "0000:23:00.0");
        assert!("0000:23:40.0".parse::<PciLocation>().is_err());
        assert!("zz".parse::<PciLocation>().is_err());
    }

    #[test]
    fn variants_change_what_they_say() {
        let t = Preset::mi210x2()
            .with_gpu_ids(&[0x1111, 0x2222])
            .with_fw_version(50)
            .with_pci_locations(&[PciLocation::bus(0x05), PciLocation::bus(0x06)])
            .to_topology()
            .unwrap();
        let ids: Vec<u32> = t.gpus().map(|n| n.gpu_id).collect();
        assert_eq!(ids, [0x1111, 0x2222]);
        assert!(t.gpus().all(|n| n.prop(keys::FW_VERSION) == 50));
        assert_eq!(t.gpus().next().unwrap().prop(keys::LOCATION_ID), 0x500);
    }

    #[test]
    fn inconsistent_presets_are_refused() {
        let dup = Preset::mi210x2().with_gpu_ids(&[7, 7]);
        assert!(dup.validate().is_err());
        let numa = Preset::mi210x2().with_numa(&[0, 3]);
        assert!(numa.to_topology().is_err());
        let wide = Preset::mi50x1().with_gpu_ids(&[0x1_0000]);
        assert!(wide.validate().is_err());
    }

    #[test]
    fn sixteen_gcds_are_two_hives_of_eight_two_per_numa_node() {
        let p = Preset::mi250x16();
        let t = p.to_topology().unwrap();
        let hives = t.hives();
        assert_eq!(hives.iter().map(Vec::len).collect::<Vec<_>>(), [8, 8]);
        assert_eq!(t.cpus().count(), 8);
        assert!((0..8).all(|n| p.gpus.iter().filter(|g| g.numa == n).count() == 2));
        // No gpu_id of mi250x8's: an mi250x8 image restored here is remapped.
        let small: Vec<u32> = Preset::mi250x8().gpus.iter().map(|g| g.gpu_id).collect();
        assert!(p.gpus.iter().all(|g| !small.contains(&g.gpu_id)));
    }

    #[test]
    fn mi250x_package_gcds_have_four_links_others_one() {
        let t = Preset::mi250x8().to_topology().unwrap();
        let gpus: Vec<&topology::Node> = t.gpus().collect();
        let max_bw = |a: usize, b: usize| {
            gpus[a]
                .io_links
                .iter()
                .find(|l| l.node_to() == gpus[b].id)
                .and_then(|l| l.properties.get("max_bandwidth"))
        };
        assert_eq!(max_bw(0, 1), Some(200_000));
        assert_eq!(max_bw(7, 6), Some(200_000));
        assert_eq!(max_bw(1, 2), Some(50_000));
    }

    #[test]
    fn hive_of_eight_is_one_hive() {
        let t = Preset::mi250x8().to_topology().unwrap();
        assert_eq!(t.hives().len(), 1);
        assert_eq!(t.hives()[0].len(), 8);
    }
}
