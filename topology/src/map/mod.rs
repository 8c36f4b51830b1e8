//! Mapping the GPUs of a checkpointed machine (the source) onto this machine's (the
//! destination), and explaining why when that is impossible.
//!
//! A source GPU may go to a destination GPU when:
//! - the properties that define what code runs on it are equal ([`EQUAL_PROPERTIES`], plus
//!   `vram_public`);
//! - every enabled [`Check`](crate::Check) holds (firmware not older, caches/GWS/VRAM not
//!   fewer, capability equal);
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
//! The destination may have more GPUs than the source (a 2-GPU job onto a free 2 of an 8-GPU
//! node): the source GPUs take the best-fitting subset and the others stay unused, each listed
//! in [`Mapping::unused`] with why. Fewer GPUs than the source is [`MapError::GpuCount`].
//!
//! The search is a backtracking over destination candidates with forward checking (every
//! unplaced GPU keeps a candidate, and a bipartite matching that places all of them still
//! exists). It is complete: if a mapping exists it is found. Among the destinations that pass the
//! rules, candidates are tried in a fixed order of preference (`choice`: same gpu_id, hive size,
//! NUMA placement, closest checked properties, lowest node id), so the identity mapping is
//! returned whenever it is valid, and the same inputs always give the same mapping.
//!
//! The module holds the rules of one GPU pair (`rules`), the solver's view of a topology (`side`),
//! the order of preference and the explanation of unused GPUs (`choice`), the search (`solver`,
//! with a bipartite matching in `matching`), the result ([`Mapping`]) and the explanation of a
//! failure ([`MapError`] and the types it names, with their text).

mod choice;
mod explain;
mod mapping;
mod matching;
mod rules;
mod side;
mod solver;

use crate::model::{keys, Topology};
use crate::options::CheckOptions;

pub use choice::{unused_lines, Preference, Unused, UnusedGpu, PREFERENCE_ORDER};
pub use explain::{GpuRef, LocalHive, MapError, NumaGroup, Reason, Rejection, Unplaced};
pub use mapping::{GpuMapping, Mapping};

/// Node properties that must be equal on both sides, in the order they are reported. Parsing a
/// topology requires every node to have them.
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
pub(crate) const VRAM_PUBLIC: &str = "vram_public";
/// Pseudo-property name for the VRAM size in bytes (from the GPU's memory bank).
pub(crate) const VRAM_SIZE: &str = "vram_size";

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
    let src = side::Side::new(source);
    let dst = side::Side::new(destination);
    let result = solver::solve(&src, &dst, options);
    match &result {
        Ok(m) => log::debug!("GPU mapping found:\n{m}"),
        Err(e) => log::debug!("no GPU mapping: {e}"),
    }
    result
}
