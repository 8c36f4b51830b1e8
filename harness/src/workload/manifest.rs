//! What the workload is made of, as any process can find it again: the [`Spec`] it is built
//! from, the [`Manifest`] of its buffers, queues and events, how it moves data ([`Dma`]), what a
//! verification checked ([`Report`]) and why it failed ([`WorkloadError`]).

use kfd_abi::IoctlError;
use serde::{Deserialize, Serialize};

/// How the workload moves its data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Dma {
    /// [`Dma::Queues`] if `/dev/kfd` can be mapped (the doorbell page), else [`Dma::Cs`].
    #[default]
    Auto,
    /// KFD user-mode SDMA queues rung through the mapped doorbell page, as ROCr moves data.
    Queues,
    /// The render node's command submission (`AMDGPU_CS` on the DMA ring), which ROCm never
    /// uses, for devices that cannot be mapped. What it loses: no doorbell, ring or
    /// host-visible buffer is mapped, so a checkpoint carries no device mapping and no queue
    /// state of the workload's own; and a tick step that criu checkpoints between its CS ioctls
    /// loses the step's context, IB and staging mappings (the 6.1 driver cannot checkpoint
    /// them), so the step is rerun on new ones ([`Workload::rebuilds`](super::Workload::rebuilds)).
    Cs,
}

/// What the workload allocates on every GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    /// Seed of the data pattern.
    pub seed: u64,
    /// Sizes of the VRAM buffers per GPU.
    pub vram: Vec<u64>,
    /// Sizes of the GTT buffers per GPU.
    pub gtt: Vec<u64>,
    /// AQL queues per GPU.
    pub queues: u32,
    /// Signal events (every other one is left signaled).
    pub events: u32,
    /// Per mille of each VRAM and GTT buffer, at its end, that the workload never writes (it
    /// stays zero, as freshly allocated memory): a caching allocator's reserved but untouched
    /// pool. Rounded down to whole pages.
    #[serde(default)]
    pub untouched_permille: u32,
    /// Sizes of the buffers per GPU allocated through the render node (`GEM_CREATE` in VRAM,
    /// mapped at a VA of the process's compute VM with `GEM_VA`), filled with the pattern: what
    /// a libdrm or Mesa client of the GPU allocates besides its KFD buffers. A checkpoint
    /// carries them on Linux 6.18 (whose `AMDGPU_GEM_LIST_HANDLES` lets the plugin see them);
    /// on 6.1 they are lost, and verification says so.
    #[serde(default)]
    pub render: Vec<u64>,
}

impl Spec {
    /// `vram` and `gtt` buffers per GPU with the pattern of `seed`, one AQL queue per GPU and two
    /// signal events, every byte written: the small workload most checks need. Other counts are
    /// struct updates of it (`Spec { events: 3, ..Spec::new(..) }`).
    pub fn new(seed: u64, vram: Vec<u64>, gtt: Vec<u64>) -> Self {
        Self {
            seed,
            vram,
            gtt,
            queues: 1,
            events: 2,
            untouched_permille: 0,
            render: Vec::new(),
        }
    }

    /// Bytes at the end of a `size`-byte buffer that stay zero (see
    /// [`Spec::untouched_permille`]).
    pub fn untouched_bytes(&self, size: u64) -> u64 {
        let permille = u128::from(self.untouched_permille.min(1000));
        let bytes = u128::from(size) * permille / 1000;
        u64::try_from(bytes).map_or(size, |b| b / 4096 * 4096)
    }
}

impl Default for Spec {
    /// A few MiB per GPU with one buffer larger than the plugin's staging buffers.
    fn default() -> Self {
        Self {
            seed: 0x5eed,
            vram: vec![24 << 20, 4 << 20, 1 << 20, 64 << 10],
            gtt: vec![2 << 20, 4 << 10],
            queues: 2,
            events: 6,
            untouched_permille: 0,
            render: Vec::new(),
        }
    }
}

/// Kind of a workload buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    /// VRAM, filled with the pattern.
    Vram,
    /// GTT, filled with the pattern.
    Gtt,
    /// The generation counter (VRAM, 4 KiB; the first dword is the generation).
    Counter,
    /// The signal event page (GTT).
    EventPage,
    /// The ring and read/write pointers of the user-mode SDMA queue (GTT, mapped for the CPU).
    Ring,
    /// The host-visible staging buffer of the user-mode SDMA queue (GTT, mapped for the CPU).
    Staging,
    /// A buffer of the render node ([`Spec::render`]; VRAM, filled with the pattern): its
    /// `handle` is the GEM handle in the process's render-node file of its GPU.
    Render,
}

/// One buffer, as any process can find it again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Buffer {
    /// Index in the GPU's list (part of the pattern's key).
    pub index: u32,
    /// Kind.
    pub kind: Kind,
    /// GPU VA.
    pub va: u64,
    /// Size.
    pub size: u64,
    /// KFD handle ([`Kind::Render`]: GEM handle).
    pub handle: u64,
}

/// One queue: its id and the ring it was created with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Queue {
    /// Queue id.
    pub id: u32,
    /// Ring address.
    pub ring_base: u64,
    /// Ring size.
    pub ring_size: u32,
}

/// The workload's state on one GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuManifest {
    /// The GPU (as the process names it).
    pub gpu_id: u32,
    /// Its buffers.
    pub buffers: Vec<Buffer>,
    /// Its queues.
    pub queues: Vec<Queue>,
}

/// Everything needed to check a workload's state from outside.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The spec it was built from.
    pub spec: Spec,
    /// Per GPU, in the order of the GPU list it was given.
    pub gpus: Vec<GpuManifest>,
    /// Signal event ids and whether each is signaled.
    pub events: Vec<(u32, bool)>,
    /// The generation written by the last tick.
    pub generation: u32,
}

impl Manifest {
    /// Bytes of all its buffers (all VRAM or GTT: what a checkpoint saves of this process, the
    /// render-node buffers only on Linux 6.18).
    pub fn buffer_bytes(&self) -> u64 {
        self.gpus
            .iter()
            .flat_map(|g| &g.buffers)
            .map(|b| b.size)
            .sum()
    }

    /// Bytes of patterned buffers (what a checkpoint must carry at least).
    pub fn pattern_bytes(&self) -> u64 {
        self.gpus
            .iter()
            .flat_map(|g| &g.buffers)
            .filter(|b| matches!(b.kind, Kind::Vram | Kind::Gtt | Kind::Render))
            .map(|b| b.size)
            .sum()
    }
}

/// Why the workload failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// A KFD or render-node call failed.
    #[error(transparent)]
    Ioctl(#[from] IoctlError),
    /// Host memory could not be allocated.
    #[error("allocating host memory: {0}")]
    Memory(#[from] std::io::Error),
    /// An SDMA submission did not complete.
    #[error("SDMA submission on GPU {gpu_id:#x} did not complete")]
    Fence {
        /// The GPU.
        gpu_id: u32,
    },
    /// A user-mode queue's submission did not complete: where its pointers and event stood.
    #[error(
        "SDMA submission on GPU {gpu_id:#x} did not complete: read pointer {}, write pointer \
         {wptr:#x}, completion event {}",
        .rptr.map_or_else(|| "unreadable".to_owned(), |r| format!("{r:#x}")),
        if *.signaled { "signaled" } else { "not signaled" }
    )]
    QueueStalled {
        /// The GPU.
        gpu_id: u32,
        /// The read pointer the engine last wrote back (none if the ring could not be read).
        rptr: Option<u64>,
        /// The write pointer the submission rang.
        wptr: u64,
        /// Whether the submission's event had signaled.
        signaled: bool,
    },
    /// Verification found a difference.
    #[error("{0}")]
    Mismatch(String),
}

/// What a verification checked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Buffers compared.
    pub buffers: usize,
    /// Bytes compared.
    pub bytes: u64,
    /// Queues that answered.
    pub queues: usize,
    /// Events whose state matched.
    pub events: usize,
    /// The generation found on every GPU.
    pub generation: u32,
    /// Slots of the signal page checked through the process's `/dev/kfd` mapping of it (0
    /// where it has none): the generation stamp and every event's slot.
    pub page_slots: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untouched_tail_is_whole_pages_and_at_most_the_buffer() {
        let spec = |permille| Spec {
            untouched_permille: permille,
            ..Spec::default()
        };
        assert_eq!(spec(0).untouched_bytes(1 << 20), 0);
        assert_eq!(spec(750).untouched_bytes(256 << 20), 192 << 20);
        // 10% of 100 KiB is 10240 bytes: two whole pages.
        assert_eq!(spec(100).untouched_bytes(100 << 10), 8192);
        assert_eq!(spec(1000).untouched_bytes(12_345), 12_345 / 4096 * 4096);
        assert_eq!(spec(5000).untouched_bytes(1 << 20), 1 << 20);
        assert_eq!(spec(1000).untouched_bytes(u64::MAX), u64::MAX / 4096 * 4096);
    }
}
