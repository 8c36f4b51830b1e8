//! A GPU node's `caches` as the 6.1 driver lists them, and the active-CU masks they follow.
//!
//! Facts from the 6.1 driver (kfd_crat.c; caches of a GPU come from the virtual CRAT the driver
//! builds for it, and were moved to kfd_topology.c only in 6.2):
//!
//! - One table per chip of cache kinds: size (KiB), level, CRAT flags and `num_cu_shared`, the
//!   number of CU slots of one shader array (SH) that share one cache. Vega 20 (gfx906) and
//!   Arcturus (gfx908) share a table; Aldebaran (gfx90a) has its own (`CacheKind`).
//! - Level 1 kinds: for each shader engine, each of its arrays, and each block of
//!   `num_cu_shared` CU slots of the array, one entry if the block has an active CU.
//!   `processor_id_low` is the node's `simd_id_base` plus the slot number of the block's first
//!   active CU (slots numbered through the arrays in order, inactive ones counted); the
//!   `sibling_map` is the block's active-CU mask shifted to start at that CU (4 bytes).
//! - Level 2 kinds: one entry for the GPU, `processor_id_low` from the first active CU of
//!   SE 0 SH 0; its `sibling_map` has 4 bytes per array, in the driver's order: the first
//!   array's mask (shifted like level 1), then the masks of all arrays but the last, each cut to
//!   `num_cu_shared` bits (the driver reads each array's mask one step late; kept as it is).
//! - The map is the CRAT's 32 bytes, printed as 256 comma-separated bits, lowest bit of byte 0
//!   first. Line size, lines per tag, associativity and latency are not filled (0).
//! - `type` from the CRAT flags: DATA 1, INSTRUCTION 2, CPU 4, HSACU 8.
//! - `caches_count` counts the entries; CPU nodes have none (6.1's virtual CRAT for CPUs has a
//!   TODO for caches).
//!
//! Which CUs of a board are fused off is per die; the simulator takes a documented,
//! deterministic pattern ([`CuLayout::bitmap`]).

use crate::model::{keys, Cache, Properties};

/// Bytes of a CRAT cache entry's sibling map (`CRAT_SIBLINGMAP_SIZE`).
pub(crate) const SIBLING_MAP_BYTES: usize = 32;

/// `type` bits of a cache (`HSA_CACHE_TYPE_*`).
pub mod cache_type {
    /// Data cache.
    pub const DATA: u64 = 1;
    /// Instruction cache.
    pub const INSTRUCTION: u64 = 2;
    /// CPU cache.
    pub const CPU: u64 = 4;
    /// Cache of the HSA compute units (every GPU cache).
    pub const HSACU: u64 = 8;
}

/// One kind of GPU cache from the driver's per-chip table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CacheKind {
    /// Size in KiB.
    pub size_kb: u64,
    /// Level (1 or 2).
    pub level: u64,
    /// `type` bits.
    pub cache_type: u64,
    /// CU slots of an array that share one cache (level 1), or the bits of each array's mask
    /// kept in the level-2 sibling map.
    pub cu_shared: u32,
}

const fn kind(size_kb: u64, level: u64, cache_type: u64, cu_shared: u32) -> CacheKind {
    CacheKind {
        size_kb,
        level,
        cache_type,
        cu_shared,
    }
}

const DATA: u64 = cache_type::DATA | cache_type::HSACU;
const INST: u64 = cache_type::INSTRUCTION | cache_type::HSACU;

/// Vega 20 and Arcturus: TCP L1 per CU, scalar instruction and data L1 per SQC (3 CUs), 8 MiB L2.
const VEGA20: &[CacheKind] = &[
    kind(16, 1, DATA, 1),
    kind(32, 1, INST, 3),
    kind(16, 1, DATA, 3),
    kind(8192, 2, DATA, 16),
];

/// Aldebaran: TCP L1 per CU, scalar L1s per SQC of 2 CUs, 8 MiB L2 (14 CU slots per array).
const ALDEBARAN: &[CacheKind] = &[
    kind(16, 1, DATA, 1),
    kind(32, 1, INST, 2),
    kind(16, 1, DATA, 2),
    kind(8192, 2, DATA, 14),
];

/// The driver's cache table for a `gfx_target_version`, or `None` for a chip the simulator does
/// not model (the driver then lists no caches).
#[must_use]
pub(crate) fn table(gfx_target_version: u64) -> Option<&'static [CacheKind]> {
    match gfx_target_version {
        // GC 9.4.0 (Vega 20) and 9.4.1 (Arcturus) share the table.
        90006 | 90008 => Some(VEGA20),
        90010 => Some(ALDEBARAN),
        _ => None,
    }
}

/// How a GPU's compute units are laid out: engines, arrays, slots, and how many are active.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CuLayout {
    /// Shader engines.
    pub shader_engines: u32,
    /// Shader arrays per engine.
    pub arrays_per_engine: u32,
    /// CU slots per array (`max_cu_per_sh`, the node's `cu_per_simd_array`).
    pub slots_per_array: u32,
    /// Active CUs (`simd_count / simd_per_cu`).
    pub active: u32,
}

impl CuLayout {
    /// The layout a GPU node's properties describe (`array_count`, `simd_arrays_per_engine`,
    /// `cu_per_simd_array`, `simd_count`, `simd_per_cu`).
    #[must_use]
    pub fn of(props: &Properties) -> Self {
        let u = |k: &str| u32::try_from(props.get_or_zero(k)).unwrap_or(u32::MAX);
        let arrays_per_engine = u(keys::SIMD_ARRAYS_PER_ENGINE).max(1);
        Self {
            shader_engines: u(keys::ARRAY_COUNT) / arrays_per_engine,
            arrays_per_engine,
            slots_per_array: u(keys::CU_PER_SIMD_ARRAY).min(32),
            active: u(keys::SIMD_COUNT) / u(keys::SIMD_PER_CU).max(1),
        }
    }

    /// Shader arrays in all.
    #[must_use]
    pub(crate) fn arrays(&self) -> u32 {
        self.shader_engines.saturating_mul(self.arrays_per_engine)
    }

    /// CU slots in all, active or not: what the driver advances `simd_id_base` by for the next
    /// GPU.
    #[must_use]
    pub fn slots(&self) -> u32 {
        self.arrays().saturating_mul(self.slots_per_array)
    }

    /// The active-CU mask of engine `se`, array `sh` (bit n = slot n).
    ///
    /// The CUs fused off (`slots - active`) are spread over the arrays as evenly as the count
    /// allows: each array loses `disabled / arrays`, and the remainder goes to arrays spaced
    /// evenly from array 0 (an MI250X GCD's two disabled CUs sit in engines 0 and 4). Within an
    /// array the disabled CUs are the middle slots (`slots_per_array / 2` and up), so that every
    /// SQC keeps an active CU, as on the boards whose counts are known (an MI100 lists 217
    /// caches). Real boards differ die by die; this pattern is the simulator's choice.
    #[must_use]
    pub fn bitmap(&self, se: u32, sh: u32) -> u32 {
        let (arrays, slots) = (self.arrays(), self.slots_per_array);
        if arrays == 0 || slots == 0 || se >= self.shader_engines || sh >= self.arrays_per_engine {
            return 0;
        }
        let full = if slots >= 32 {
            u32::MAX
        } else {
            (1u32 << slots) - 1
        };
        let disabled = self.slots().saturating_sub(self.active);
        let idx = se * self.arrays_per_engine + sh;
        let (base, rest) = (disabled / arrays, disabled % arrays);
        let extra = (0..rest).any(|k| k * arrays / rest == idx);
        let off = (base + u32::from(extra)).min(slots);
        let mut mask = full;
        for i in 0..off {
            mask &= !(1u32 << ((slots / 2 + i) % slots));
        }
        mask
    }
}

/// A mask's low `bits` bits.
fn low_bits(mask: u32, bits: u32) -> u32 {
    if bits >= 32 {
        mask
    } else {
        mask & ((1u32 << bits) - 1)
    }
}

/// A sibling map as the sysfs file prints it: `SIBLING_MAP_BYTES` bytes, 8 bits each, lowest
/// first. Bytes past the map's end are zero.
fn map_bits(bytes: &[u8]) -> Vec<u8> {
    (0..SIBLING_MAP_BYTES)
        .flat_map(|i| {
            let b = bytes.get(i).copied().unwrap_or(0);
            (0..8).map(move |bit| (b >> bit) & 1)
        })
        .collect()
}

fn entry(processor_id_low: u64, kind: &CacheKind, map: &[u8]) -> Cache {
    let mut cache = Cache::new(
        processor_id_low,
        kind.level,
        kind.size_kb,
        kind.cache_type,
        map_bits(map),
    );
    // The virtual CRAT leaves these zero.
    for k in [
        "cache_line_size",
        "cache_lines_per_tag",
        "association",
        "latency",
    ] {
        cache.properties.set(k, 0);
    }
    cache
}

/// The cache entries of a GPU with this layout, table and `simd_id_base`, in the driver's order.
#[must_use]
pub(crate) fn gpu_caches(kinds: &[CacheKind], layout: &CuLayout, simd_id_base: u64) -> Vec<Cache> {
    let mut out = Vec::new();
    let arrays = || {
        (0..layout.shader_engines)
            .flat_map(move |se| (0..layout.arrays_per_engine).map(move |sh| (se, sh)))
    };
    for kind in kinds {
        let shared = kind.cu_shared.max(1);
        if kind.level == 1 {
            let mut id = simd_id_base;
            for (se, sh) in arrays() {
                let bitmap = layout.bitmap(se, sh);
                let mut k = 0;
                while k < layout.slots_per_array {
                    let block = low_bits(bitmap >> k, shared);
                    if block != 0 {
                        let first = block.trailing_zeros();
                        let map = (block >> first).to_le_bytes();
                        out.push(entry(id + u64::from(first), kind, &map));
                    }
                    id += u64::from(shared.min(layout.slots_per_array - k));
                    k += shared;
                }
            }
        } else {
            let first_mask = low_bits(layout.bitmap(0, 0), shared);
            if first_mask == 0 {
                continue;
            }
            let first = first_mask.trailing_zeros();
            let mut map = Vec::new();
            let mut current = first_mask >> first;
            for (se, sh) in arrays() {
                map.extend_from_slice(&current.to_le_bytes());
                current = low_bits(layout.bitmap(se, sh), shared);
            }
            out.push(entry(simd_id_base + u64::from(first), kind, &map));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(se: u32, slots: u32, active: u32) -> CuLayout {
        CuLayout {
            shader_engines: se,
            arrays_per_engine: 1,
            slots_per_array: slots,
            active,
        }
    }

    #[test]
    fn disabled_cus_are_the_middle_slots_spread_over_the_engines() {
        // MI100: 120 of 128, one per engine, slot 8.
        let mi100 = layout(8, 16, 120);
        assert!((0..8).all(|se| mi100.bitmap(se, 0) == 0xffff & !(1 << 8)));
        // MI250X GCD: 110 of 112, engines 0 and 4 lose slot 7.
        let gcd = layout(8, 14, 110);
        let lost: Vec<u32> = (0..8).filter(|&se| gcd.bitmap(se, 0) != 0x3fff).collect();
        assert_eq!(lost, [0, 4]);
        assert_eq!(gcd.bitmap(4, 0), 0x3fff & !(1 << 7));
        // Out of range arrays have no CUs.
        assert_eq!(gcd.bitmap(8, 0), 0);
        assert_eq!(gcd.bitmap(0, 1), 0);
    }

    #[test]
    fn an_mi100_lists_217_caches_with_the_l2_last() {
        let c = gpu_caches(VEGA20, &layout(8, 16, 120), 0x8000_1000);
        assert_eq!(c.len(), 120 + 48 + 48 + 1);
        let l2 = c.last().unwrap();
        assert_eq!(l2.properties.get("level"), Some(2));
        assert_eq!(l2.properties.get("processor_id_low"), Some(0x8000_1000));
    }

    #[test]
    fn a_block_with_its_first_cu_off_starts_at_the_next() {
        // SQC block [6, 7, 8] of an array missing slot 8 keeps 6 and 7; block [15] is CU 15.
        let c = gpu_caches(&VEGA20[1..2], &layout(1, 16, 15), 100);
        let ids: Vec<u64> = c
            .iter()
            .map(|e| e.properties.get_or_zero("processor_id_low"))
            .collect();
        assert_eq!(ids, [100, 103, 106, 109, 112, 115]);
        let map = c[2].sibling_map.as_ref().unwrap();
        assert_eq!(&map[..4], [1, 1, 0, 0]);
        assert_eq!(map.len(), 256);
    }

    #[test]
    fn the_l2_map_repeats_the_first_array_and_leaves_out_the_last() {
        let l = layout(2, 4, 7);
        // Array 0 loses slot 2 (0b1011), array 1 is full (0b1111).
        let c = gpu_caches(&[kind(4096, 2, DATA, 4)], &l, 0);
        let map = c[0].sibling_map.as_ref().unwrap();
        assert_eq!(&map[..4], [1, 1, 0, 1]);
        assert_eq!(&map[32..36], [1, 1, 0, 1]);
        assert!(map[36..].iter().all(|&b| b == 0));
    }
}
