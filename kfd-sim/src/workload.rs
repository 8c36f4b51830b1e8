//! A model ROCm process, written against `kfd-abi` only, so that it runs unchanged in process,
//! over CUSE and on hardware.
//!
//! Like a HIP program it opens `/dev/kfd` and a render node per GPU, acquires the GPU VMs,
//! allocates VRAM and GTT buffers, creates queues and signal events, fills its buffers by SDMA,
//! and advances a generation counter in a small VRAM buffer by SDMA on every tick.
//!
//! It moves data as ROCr does ([`Dma::Queues`]): one KFD user-mode SDMA queue per GPU whose ring
//! and pointers are in a GTT buffer it maps for the CPU through the render node, packets written
//! into the ring, the write pointer written to the queue's doorbell through its mapping of the
//! doorbell page; each submission ends with FENCE (the event id into the event's slot of the
//! signal page) and TRAP, and the workload waits for the event and the read pointer. Staging is
//! a host-visible GTT buffer. The signal page is a GTT buffer given to the first CREATE_EVENT (as
//! libhsakmt gives its events page), and the workload maps it from `/dev/kfd` at the `EVENTS`
//! offset that CREATE_EVENT returns, at the buffer's GPU virtual address: each queue's mailbox
//! (the slot its FENCE writes) has the same address for the CPU and the GPU; through that
//! mapping the workload stamps its generation into a slot no event uses, which verification
//! reads back through the mapping and by SDMA ([`STAMP_SLOT`]). Where devices cannot be mapped (CUSE without the bridge module),
//! [`Dma::Cs`] uses the render node's command submission instead (see there for what it loses).
//!
//! Contents are a pure function of `(seed, gpu index, buffer index, byte offset)` (and zero in the
//! untouched tail of each buffer, [`Spec::untouched_permille`]), so any process that knows the
//! [`Manifest`] can verify them: the workload itself after criu restored it, or a test that
//! restored its state into another simulated process.

use std::collections::BTreeMap;
use std::os::fd::AsFd;

use kfd_abi::kfd::QueueDesc;
use kfd_abi::sdma::IbBuilder;
use kfd_abi::{
    AllocFlags, Errno, EventId, EventType, GpuId, HostBuffer, IoctlError, Kfd, Mapping, MemHandle,
    Prot, QueueId, QueueType, RenderNode, SdmaQueue, Share, Transport, UserptrBuffer, WaitResult,
};
use serde::{Deserialize, Serialize};

/// How the workload moves its data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
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
    /// them), so the step is rerun on new ones ([`Workload::rebuilds`]).
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
}

impl Spec {
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
    /// KFD handle.
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
    /// Bytes of all its buffers (all VRAM or GTT: what a checkpoint saves of this process).
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
            .filter(|b| matches!(b.kind, Kind::Vram | Kind::Gtt))
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

/// The pattern byte stream of buffer `index` on GPU number `gpu`: 8-byte words of a
/// splitmix64-style hash of the position.
pub fn pattern(seed: u64, gpu: usize, index: u32, offset: u64, out: &mut [u8]) {
    let key = seed ^ ((gpu as u64) << 48) ^ (u64::from(index) << 32);
    let mut pos = offset;
    let mut i = 0;
    while i < out.len() {
        let word = pos / 8;
        let mut z = key.wrapping_add(word.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let bytes = z.to_le_bytes();
        #[allow(clippy::cast_possible_truncation)] // pos % 8 < 8
        let skip = (pos % 8) as usize;
        let n = (8 - skip).min(out.len() - i);
        out[i..i + n].copy_from_slice(&bytes[skip..skip + n]);
        i += n;
        pos += n as u64;
    }
}

/// Whether `e`, from a tick step (render-node calls only), says that objects the step created no
/// longer exist in the file: what a render-node file restored by criu looks like to a step that
/// began before the checkpoint. A context or GEM handle that is gone is `EINVAL` or `ENOENT`; an
/// IB or buffer whose VA mapping is gone faults the submission, whose fence reports `ETIME` (and
/// a guilty context refuses more work with `ECANCELED`).
fn lost_render_state(e: &WorkloadError) -> bool {
    use kfd_abi::Errno;
    matches!(
        e,
        WorkloadError::Ioctl(IoctlError::Failed { errno, .. })
            if [Errno::EINVAL, Errno::ENOENT, Errno::ETIME, Errno::ECANCELED].contains(errno)
    )
}

/// Bytes of the staging buffer the workload fills and reads buffers through.
const STAGING: usize = 4 << 20;
/// Bytes of its indirect buffer.
const IB_BYTES: usize = 16 << 10;
/// Where its VA allocator starts (above the 16 KiB GPUVM base, 2 MiB aligned).
const VA_BASE: u64 = 0x10_0000_0000;
/// How long one submission may take.
const FENCE: std::time::Duration = std::time::Duration::from_secs(30);
/// Bytes of a user-mode queue's ring (its pointers follow in the next page).
const RING_BYTES: u64 = 64 << 10;
/// Where the read pointer is in the ring's buffer (right after the ring); the write pointer
/// follows it.
const RPTR_AT: usize = 64 << 10;
/// Bytes of a user-mode queue's staging buffer.
const QUEUE_STAGING: u64 = 1 << 20;
/// Bytes of a process's doorbell slice on gfx9.
const DOORBELL_SLICE: usize = 8192;
/// Slots of the signal page (`KFD_SIGNAL_EVENT_LIMIT`), 8 bytes each.
const SIGNAL_SLOTS: u64 = 4096;
/// Bytes of the signal page: what the workload allocates and maps from `/dev/kfd`.
const SIGNAL_PAGE: u64 = 8 * SIGNAL_SLOTS;
/// The signal page's slot in which the workload stamps its generation through its `/dev/kfd`
/// mapping of the page, in user-mode queue mode: the last one, which no event of the workload
/// has (signal event ids are given from 0 up, and the workload makes a handful). The driver
/// reads only the slots of existing events, so the stamp is plain memory to it; a checkpoint
/// carries it in the page's buffer, and verification finds it through the mapping and by SDMA.
pub const STAMP_SLOT: u64 = SIGNAL_SLOTS - 1;
/// What a signal slot holds until the GPU writes it (`UNSIGNALED_EVENT_SLOT`).
const UNSIGNALED_SLOT: u64 = u64::MAX;

/// The stamp of `generation` (tagged, so that it is no value the driver or a FENCE writes).
fn stamp(generation: u32) -> u64 {
    0x5354_414d_0000_0000 | u64::from(generation)
}

/// A way to move data on one GPU: a staging buffer in the GPU's VM and a way to run packets.
trait Mover {
    fn gpu_id(&self) -> u32;
    /// The staging buffer's GPU VA and size.
    fn staging(&self) -> (u64, u64);
    /// Fills the first `n` bytes of the staging buffer with `fill`.
    fn stage_in(&mut self, n: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), WorkloadError>;
    /// The first `n` bytes of the staging buffer.
    fn stage_out(&self, n: usize) -> Result<Vec<u8>, WorkloadError>;
    /// Runs `ib` and waits for it.
    fn run(&mut self, ib: IbBuilder) -> Result<(), WorkloadError>;

    /// Writes the pattern of buffer `b` (GPU number `gpu`) into it by SDMA, but for its last
    /// `untouched` bytes.
    fn fill(
        &mut self,
        seed: u64,
        gpu: usize,
        b: &Buffer,
        untouched: u64,
    ) -> Result<(), WorkloadError> {
        let (va, size) = self.staging();
        let end = b.size - untouched.min(b.size);
        let mut off = 0;
        while off < end {
            let n = (end - off).min(size);
            #[allow(clippy::cast_possible_truncation)] // n <= the staging size
            self.stage_in(n as usize, &mut |buf| pattern(seed, gpu, b.index, off, buf))?;
            let mut ib = IbBuilder::new();
            ib.copy_linear(va, b.va + off, n);
            self.run(ib)?;
            off += n;
        }
        Ok(())
    }

    /// Reads buffer `b` back by SDMA and compares it with its pattern (zeros in its last
    /// `untouched` bytes).
    fn check(
        &mut self,
        seed: u64,
        gpu: usize,
        b: &Buffer,
        untouched: u64,
    ) -> Result<(), WorkloadError> {
        let (va, size) = self.staging();
        let end = b.size - untouched.min(b.size);
        let mut off = 0;
        while off < b.size {
            let n = (b.size - off).min(size);
            let mut ib = IbBuilder::new();
            ib.copy_linear(b.va + off, va, n);
            self.run(ib)?;
            #[allow(clippy::cast_possible_truncation)] // n <= the staging size
            let n = n as usize;
            let mut want = vec![0u8; n];
            #[allow(clippy::cast_possible_truncation)] // < n
            let patterned = end.saturating_sub(off).min(n as u64) as usize;
            pattern(seed, gpu, b.index, off, &mut want[..patterned]);
            let got = self.stage_out(n)?;
            if got != want {
                let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
                return Err(WorkloadError::Mismatch(format!(
                    "GPU {:#x} buffer {} ({:?} at {:#x}): byte {} is {:#04x}, expected {:#04x}",
                    self.gpu_id(),
                    b.index,
                    b.kind,
                    b.va,
                    off + at as u64,
                    got[at],
                    want[at]
                )));
            }
            off += n as u64;
        }
        Ok(())
    }

    fn write_counter(&mut self, va: u64, generation: u32) -> Result<(), WorkloadError> {
        let mut ib = IbBuilder::new();
        ib.const_fill(va, generation, 4);
        self.run(ib)
    }

    /// The `n` bytes at GPU VA `va`, read by SDMA.
    fn read_gpu(&mut self, va: u64, n: usize) -> Result<Vec<u8>, WorkloadError> {
        let mut ib = IbBuilder::new();
        ib.copy_linear(va, self.staging().0, n as u64);
        self.run(ib)?;
        self.stage_out(n)
    }

    fn read_counter(&mut self, va: u64) -> Result<u32, WorkloadError> {
        let s = self.read_gpu(va, 4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
}

/// A KFD user-mode SDMA queue on one GPU, as ROCr's blit queue: ring and pointers in a GTT
/// buffer mapped for the CPU, the doorbell page mapped, a signal event for completion.
#[derive(Debug)]
struct UserQueue {
    gpu_id: u32,
    /// The ring, then the read pointer and the write pointer (8 bytes each).
    ring: Mapping,
    doorbells: Mapping,
    /// Byte offset of the queue's doorbell in the doorbell page.
    doorbell: usize,
    /// Bytes submitted so far.
    wptr: u64,
    staging: Mapping,
    staging_va: u64,
    event: EventId,
    /// The event's slot in the signal page: its index and GPU VA.
    slot: u32,
    slot_va: u64,
}

impl UserQueue {
    /// The read pointer the engine wrote back.
    fn rptr(&self) -> Option<u64> {
        self.ring.read_u64(RPTR_AT)
    }
}

/// A [`UserQueue`] with the KFD file that waits on its event.
struct UserRun<'a, T: Transport> {
    kfd: &'a Kfd<T>,
    q: &'a mut UserQueue,
}

impl<T: Transport> Mover for UserRun<'_, T> {
    fn gpu_id(&self) -> u32 {
        self.q.gpu_id
    }

    fn staging(&self) -> (u64, u64) {
        (self.q.staging_va, QUEUE_STAGING)
    }

    fn stage_in(&mut self, n: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), WorkloadError> {
        let mut buf = vec![0u8; n];
        fill(&mut buf);
        if self.q.staging.write(0, &buf) {
            Ok(())
        } else {
            Err(WorkloadError::Mismatch("staging write out of range".into()))
        }
    }

    fn stage_out(&self, n: usize) -> Result<Vec<u8>, WorkloadError> {
        let mut buf = vec![0u8; n];
        if self.q.staging.read(0, &mut buf) {
            Ok(buf)
        } else {
            Err(WorkloadError::Mismatch("staging read out of range".into()))
        }
    }

    fn run(&mut self, mut ib: IbBuilder) -> Result<(), WorkloadError> {
        let q = &mut *self.q;
        ib.fence(q.slot_va, q.slot).trap(q.slot);
        // The ring is empty (every run waits for its packets), so the packets fit.
        for &dw in ib.packets() {
            #[allow(clippy::cast_possible_truncation)] // < RING_BYTES
            let at = (q.wptr % RING_BYTES) as usize;
            if !q.ring.write(at, &dw.to_le_bytes()) {
                return Err(WorkloadError::Fence { gpu_id: q.gpu_id });
            }
            q.wptr += 4;
        }
        // The write pointer in memory, then (after the packets are visible) the doorbell.
        q.ring.write_u64(RPTR_AT + 8, q.wptr);
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        q.doorbells.write_u64(q.doorbell, q.wptr);
        let mut budget = FenceBudget::new(std::time::Instant::now());
        let mut signaled = false;
        loop {
            if signaled {
                std::thread::sleep(std::time::Duration::from_micros(100));
            } else {
                match self.kfd.wait_events(&[q.event], true, 20) {
                    Ok(WaitResult::Complete) => signaled = true,
                    Ok(_) => {}
                    Err(IoctlError::Failed { errno, .. }) if errno == Errno::EINTR => {}
                    Err(e) => return Err(e.into()),
                }
            }
            if signaled && q.rptr() == Some(q.wptr) {
                return Ok(());
            }
            if !budget.charge(std::time::Instant::now()) {
                return Err(WorkloadError::QueueStalled {
                    gpu_id: q.gpu_id,
                    rptr: q.rptr(),
                    wptr: q.wptr,
                    signaled,
                });
            }
        }
    }
}

/// The time a user-mode queue submission may take ([`FENCE`]), counting only the time the
/// process ran. criu freezes the workload anywhere, also while it waits for a submission, and
/// the monotonic clock runs on through the dump, the copy of the images and the restore (a
/// minute and more on a busy machine); a deadline taken before the checkpoint would have passed
/// when the restored process looks at it again, before its restored queue had a chance to run.
/// A step between two looks longer than [`FenceBudget::MAX_STEP`] is the process having been
/// stopped, and counts as that much.
#[derive(Debug)]
struct FenceBudget {
    left: std::time::Duration,
    last: std::time::Instant,
}

impl FenceBudget {
    /// The most one step between two looks counts for (a look comes every 20 ms of waiting).
    const MAX_STEP: std::time::Duration = std::time::Duration::from_secs(1);

    fn new(now: std::time::Instant) -> Self {
        Self {
            left: FENCE,
            last: now,
        }
    }

    /// Charges the time since the last look; false once the budget is spent.
    fn charge(&mut self, now: std::time::Instant) -> bool {
        let step = now.saturating_duration_since(self.last).min(Self::MAX_STEP);
        self.last = now;
        match self.left.checked_sub(step) {
            Some(left) if !left.is_zero() => {
                self.left = left;
                true
            }
            _ => false,
        }
    }
}

/// The process's SDMA tools on one GPU: an IB and a staging buffer in its render-node VM.
struct GpuDma<'r, T: Transport> {
    gpu_id: u32,
    queue: SdmaQueue<'r, T>,
    staging: UserptrBuffer<'r, T>,
}

impl<'r, T: Transport> GpuDma<'r, T> {
    fn new(gpu_id: u32, render: &'r RenderNode<T>, va: &mut u64) -> Result<Self, WorkloadError> {
        let queue = SdmaQueue::new(render, bump(va, IB_BYTES as u64), IB_BYTES)?;
        let staging = UserptrBuffer::new(render, STAGING, bump(va, STAGING as u64))?;
        Ok(Self {
            gpu_id,
            queue,
            staging,
        })
    }
}

impl<T: Transport> Mover for GpuDma<'_, T> {
    fn gpu_id(&self) -> u32 {
        self.gpu_id
    }

    fn staging(&self) -> (u64, u64) {
        (self.staging.va(), STAGING as u64)
    }

    fn stage_in(&mut self, n: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), WorkloadError> {
        fill(&mut self.staging.as_mut_slice()[..n]);
        Ok(())
    }

    fn stage_out(&self, n: usize) -> Result<Vec<u8>, WorkloadError> {
        Ok(self.staging.as_slice()[..n].to_vec())
    }

    fn run(&mut self, ib: IbBuilder) -> Result<(), WorkloadError> {
        if self.queue.run(&ib.finish(), FENCE)? {
            Ok(())
        } else {
            Err(WorkloadError::Fence {
                gpu_id: self.gpu_id,
            })
        }
    }
}

fn bump(next: &mut u64, size: u64) -> u64 {
    let va = *next;
    *next += size.next_multiple_of(2 << 20);
    va
}

/// Host memory a queue needs (ring, pointers, EOP, context save area), kept alive with it.
#[derive(Debug)]
struct QueueMemory {
    _ring: HostBuffer,
    _pointers: HostBuffer,
    _eop: HostBuffer,
    _ctx_save: HostBuffer,
}

/// A running model workload.
#[derive(Debug)]
pub struct Workload<T: Transport> {
    kfd: Kfd<T>,
    renders: Vec<RenderNode<T>>,
    rebuilds: u64,
    manifest: Manifest,
    dma: Dma,
    /// The user-mode SDMA queue of each GPU ([`Dma::Queues`]) (locked: verifying needs no
    /// exclusive access to the workload).
    user: Vec<std::sync::Mutex<UserQueue>>,
    /// The signal page's `/dev/kfd` mapping at its GPU VA ([`Dma::Queues`]); with
    /// [`Dma::Cs`], the address reservation at that VA.
    events_page: Option<Mapping>,
    _queue_memory: Vec<QueueMemory>,
}

/// The doorbell page of `gpu`, as libhsakmt maps it: a DOORBELL buffer at a GPU VA and the CPU
/// mapping of its offset at the same address (criu's restore finds a device mapping by its
/// address and offset among the process's buffers).
fn map_doorbells<T: Transport>(kfd: &Kfd<T>, gpu: GpuId) -> Result<Mapping, IoctlError> {
    let at = Mapping::reserve(DOORBELL_SLICE).map_err(|errno| IoctlError::Failed {
        ioctl: "mmap (reserving the doorbell page's address)".into(),
        device: "host".into(),
        errno,
        hint: None,
    })?;
    kfd.alloc_memory(at.addr(), DOORBELL_SLICE as u64, gpu, AllocFlags::DOORBELL)?;
    // The buffer's own mmap_offset is the driver's business; the page is mapped at the offset
    // of the GPU's doorbells, as libhsakmt computes it.
    let offset = kfd_abi::mmap_offset::TYPE_DOORBELL | kfd_abi::mmap_offset::gpu_id(gpu.get());
    kfd.map_offset_at(at, offset, Prot::RW, Share::Shared)
}

/// A GTT buffer of `kind` on `gpu` mapped for the CPU through `render` at its GPU VA (an
/// address the CPU reserves first), as ROCm maps host-visible buffers; listed in `buffers`.
fn alloc_mapped<T: Transport>(
    kfd: &Kfd<T>,
    render: &RenderNode<T>,
    gpu: GpuId,
    buffers: &mut Vec<Buffer>,
    kind: Kind,
    size: u64,
) -> Result<(Buffer, Mapping), WorkloadError> {
    let flags = AllocFlags::GTT | AllocFlags::WRITABLE | AllocFlags::NO_SUBSTITUTE;
    let (b, at, mmap_offset) = alloc_reserved(kfd, gpu, buffers, kind, size, flags)?;
    let map = render.map_bo_at(at, mmap_offset, Prot::RW, Share::Shared)?;
    Ok((b, map))
}

/// A buffer of `kind` on `gpu` (mapped on it) whose GPU VA is an address range the CPU reserves
/// for it, listed in `buffers`; returns the buffer, the reservation (to map the buffer's pages
/// over) and the buffer's mmap offset on its render node.
fn alloc_reserved<T: Transport>(
    kfd: &Kfd<T>,
    gpu: GpuId,
    buffers: &mut Vec<Buffer>,
    kind: Kind,
    size: u64,
    flags: AllocFlags,
) -> Result<(Buffer, Mapping, u64), WorkloadError> {
    let at = Mapping::reserve(usize::try_from(size).unwrap_or(usize::MAX))
        .map_err(|e| std::io::Error::from_raw_os_error(e.0))?;
    let (b, mmap_offset) = alloc_at(kfd, gpu, buffers, kind, at.addr(), size, flags)?;
    Ok((b, at, mmap_offset))
}

/// Allocates a buffer of `kind` at the next VA on `gpu`, maps it there, and lists it.
fn alloc<T: Transport>(
    kfd: &Kfd<T>,
    gpu: GpuId,
    buffers: &mut Vec<Buffer>,
    kind: Kind,
    size: u64,
    flags: AllocFlags,
    va: &mut u64,
) -> Result<Buffer, WorkloadError> {
    let at = bump(va, size);
    Ok(alloc_at(kfd, gpu, buffers, kind, at, size, flags)?.0)
}

/// Allocates a buffer of `kind` at `va` on `gpu`, maps it there and lists it in `buffers`;
/// returns it with its mmap offset on its render node.
fn alloc_at<T: Transport>(
    kfd: &Kfd<T>,
    gpu: GpuId,
    buffers: &mut Vec<Buffer>,
    kind: Kind,
    va: u64,
    size: u64,
    flags: AllocFlags,
) -> Result<(Buffer, u64), WorkloadError> {
    let a = kfd.alloc_memory(va, size, gpu, flags)?;
    kfd.map_memory_to_gpu(a.handle, &[gpu])?;
    let b = Buffer {
        index: u32::try_from(buffers.len()).unwrap_or(u32::MAX),
        kind,
        va,
        size,
        handle: a.handle.get(),
    };
    buffers.push(b.clone());
    Ok((b, a.mmap_offset))
}

impl<T: Transport> Workload<T> {
    /// Builds the workload on `gpus` (each with a render node of that GPU), as a fresh ROCm
    /// process would: ACQUIRE_VM, buffers, events, a user-mode SDMA queue per GPU (or the CS
    /// path, see [`Dma::Auto`]), buffers filled by SDMA, AQL queues, generation 1.
    pub fn start(
        kfd: Kfd<T>,
        gpus: Vec<(GpuId, RenderNode<T>)>,
        spec: &Spec,
    ) -> Result<Self, WorkloadError> {
        Self::start_with(kfd, gpus, spec, Dma::Auto)
    }

    /// [`start`](Self::start), moving data the way `dma` says.
    pub fn start_with(
        kfd: Kfd<T>,
        gpus: Vec<(GpuId, RenderNode<T>)>,
        spec: &Spec,
        dma: Dma,
    ) -> Result<Self, WorkloadError> {
        let (ids, renders): (Vec<GpuId>, Vec<RenderNode<T>>) = gpus.into_iter().unzip();
        let mut va = VA_BASE;
        let mut manifest = Manifest {
            spec: spec.clone(),
            gpus: Vec::new(),
            events: Vec::new(),
            generation: 1,
        };
        let mut queue_memory = Vec::new();
        let rw = AllocFlags::WRITABLE | AllocFlags::NO_SUBSTITUTE;

        // Buffers.
        let mut all_buffers = Vec::new();
        let mut page_at = None;
        for (g, (&gpu, render)) in ids.iter().zip(&renders).enumerate() {
            kfd.acquire_vm(gpu, render.as_fd())?;
            let mut buffers = Vec::new();
            for &size in &spec.vram {
                alloc(
                    &kfd,
                    gpu,
                    &mut buffers,
                    Kind::Vram,
                    size,
                    AllocFlags::VRAM | rw,
                    &mut va,
                )?;
            }
            for &size in &spec.gtt {
                alloc(
                    &kfd,
                    gpu,
                    &mut buffers,
                    Kind::Gtt,
                    size,
                    AllocFlags::GTT | rw,
                    &mut va,
                )?;
            }
            alloc(
                &kfd,
                gpu,
                &mut buffers,
                Kind::Counter,
                4096,
                AllocFlags::VRAM | rw,
                &mut va,
            )?;
            if g == 0 {
                // At an address the CPU reserves: in queue mode the page's `/dev/kfd` mapping
                // goes there.
                let page_flags = AllocFlags::GTT | rw | AllocFlags::COHERENT;
                let (_, at, _) = alloc_reserved(
                    &kfd,
                    gpu,
                    &mut buffers,
                    Kind::EventPage,
                    SIGNAL_PAGE,
                    page_flags,
                )?;
                page_at = Some(at);
            }
            all_buffers.push(buffers);
        }
        let page = all_buffers
            .first()
            .and_then(|b| b.iter().find(|b| b.kind == Kind::EventPage))
            .cloned();

        // Whether the devices can be mapped: the doorbell page of the first GPU.
        let mut first_doorbells = None;
        let dma = match (dma, ids.first()) {
            (Dma::Cs, _) | (_, None) => Dma::Cs,
            (wanted, Some(&gpu)) => match map_doorbells(&kfd, gpu) {
                Ok(m) => {
                    first_doorbells = Some(m);
                    Dma::Queues
                }
                Err(e) if wanted == Dma::Auto && e.errno() == Some(Errno::ENODEV) => {
                    log::warn!(
                        "/dev/kfd cannot be mapped ({e}): moving data by command submission on \
                         the render nodes instead of user-mode queues"
                    );
                    Dma::Cs
                }
                Err(e) => return Err(e.into()),
            },
        };

        // Signal events: the first gives the signal page (and says where `/dev/kfd` maps it);
        // in queue mode, the page is mapped on every GPU (each queue writes its event's slot).
        if let (Dma::Queues, Some(p)) = (dma, &page) {
            kfd.map_memory_to_gpu(MemHandle(p.handle), &ids)?;
        }
        let mut page_to_give = page.as_ref().map(|p| MemHandle(p.handle));
        let mut events_offset = None;
        let mut create_signal = |auto_reset: bool| {
            let e = kfd.create_event(EventType::Signal, auto_reset, page_to_give.take())?;
            events_offset.get_or_insert(e.page_offset);
            Ok::<_, IoctlError>(e)
        };
        for i in 0..spec.events {
            let e = create_signal(false)?;
            let signaled = i % 2 == 1;
            if signaled {
                kfd.set_event(e.event_id)?;
            }
            manifest.events.push((e.event_id.get(), signaled));
        }

        // The SDMA queues.
        let mut user = Vec::new();
        if dma == Dma::Queues {
            let page = page.as_ref().ok_or_else(|| {
                WorkloadError::Mismatch("user-mode queues need a signal page".into())
            })?;
            for (g, (&gpu, render)) in ids.iter().zip(&renders).enumerate() {
                let doorbells = match first_doorbells.take() {
                    Some(m) => m,
                    None => map_doorbells(&kfd, gpu)?,
                };
                let buffers = all_buffers
                    .get_mut(g)
                    .ok_or(WorkloadError::Fence { gpu_id: gpu.get() })?;
                let (ring, ring_map) =
                    alloc_mapped(&kfd, render, gpu, buffers, Kind::Ring, RING_BYTES + 4096)?;
                let (staging, staging_map) =
                    alloc_mapped(&kfd, render, gpu, buffers, Kind::Staging, QUEUE_STAGING)?;
                let event = create_signal(true)?;
                let mut d = QueueDesc::new(gpu, QueueType::Sdma);
                d.ring_base = ring.va;
                d.ring_size = u32::try_from(RING_BYTES).unwrap_or(u32::MAX);
                d.read_ptr = ring.va + RING_BYTES;
                d.write_ptr = ring.va + RING_BYTES + 8;
                // SAFETY: ring and pointers are a GTT buffer of this process mapped on the
                // queue's GPU, alive as long as the workload (which owns the KFD file).
                let q = unsafe { kfd.create_queue(&d) }?;
                let staging_va = staging.va;
                #[allow(clippy::cast_possible_truncation)] // masked to the doorbell page
                let doorbell = (q.doorbell_offset & (DOORBELL_SLICE as u64 - 1)) as usize;
                user.push(std::sync::Mutex::new(UserQueue {
                    gpu_id: gpu.get(),
                    ring: ring_map,
                    doorbells,
                    doorbell,
                    wptr: 0,
                    staging: staging_map,
                    staging_va,
                    event: event.event_id,
                    slot: event.slot_index,
                    slot_va: page.va + u64::from(event.slot_index) * 8,
                }));
            }
        }

        // In queue mode the signal page is mapped from `/dev/kfd` (at the offset the first
        // CREATE_EVENT returned) over its reservation, so that the mailbox each queue's FENCE
        // writes is at the same address for the CPU; in CS mode the reservation stays.
        let events_page = match (dma, page_at, events_offset) {
            (Dma::Queues, Some(at), Some(offset)) => {
                Some(kfd.map_offset_at(at, offset, Prot::RW, Share::Shared)?)
            }
            (_, at, _) => at,
        };

        for (g, (&gpu, render)) in ids.iter().zip(&renders).enumerate() {
            let buffers = all_buffers.get(g).cloned().unwrap_or_default();
            let mut cs;
            let mut run;
            let mover: &mut dyn Mover = match user.get_mut(g) {
                Some(q) => {
                    let q = q
                        .get_mut()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    run = UserRun { kfd: &kfd, q };
                    &mut run
                }
                None => {
                    cs = GpuDma::new(gpu.get(), render, &mut va)?;
                    &mut cs
                }
            };
            for b in buffers
                .iter()
                .filter(|b| matches!(b.kind, Kind::Vram | Kind::Gtt))
            {
                mover.fill(spec.seed, g, b, spec.untouched_bytes(b.size))?;
            }
            if let Some(c) = buffers.iter().find(|b| b.kind == Kind::Counter) {
                mover.write_counter(c.va, 1)?;
            }

            let mut queues = Vec::new();
            for _ in 0..spec.queues {
                let mem = QueueMemory {
                    _ring: HostBuffer::new(64 << 10)?,
                    _pointers: HostBuffer::new(4096)?,
                    _eop: HostBuffer::new(4096)?,
                    _ctx_save: HostBuffer::new(64 << 10)?,
                };
                let mut d = QueueDesc::new(gpu, QueueType::ComputeAql);
                d.ring_base = mem._ring.addr();
                d.ring_size = 64 << 10;
                d.read_ptr = mem._pointers.addr();
                d.write_ptr = mem._pointers.addr() + 8;
                d.eop_buffer = mem._eop.addr();
                d.eop_buffer_size = 4096;
                d.ctx_save_restore = mem._ctx_save.addr();
                d.ctx_save_restore_size = 64 << 10;
                d.ctl_stack_size = 4096;
                // SAFETY: the queue's host memory lives in `queue_memory` as long as the workload,
                // which owns the KFD file the queue belongs to.
                let q = unsafe { kfd.create_queue(&d) }?;
                queue_memory.push(mem);
                queues.push(Queue {
                    id: q.queue_id.get(),
                    ring_base: d.ring_base,
                    ring_size: d.ring_size,
                });
            }
            manifest.gpus.push(GpuManifest {
                gpu_id: gpu.get(),
                buffers,
                queues,
            });
        }
        let w = Self {
            kfd,
            renders,
            rebuilds: 0,
            manifest,
            dma,
            user,
            events_page,
            _queue_memory: queue_memory,
        };
        w.stamp_events_page(w.manifest.generation);
        Ok(w)
    }

    /// The signal page's `/dev/kfd` mapping, in user-mode queue mode.
    pub fn events_page(&self) -> Option<&Mapping> {
        self.events_page
            .as_ref()
            .filter(|_| self.dma == Dma::Queues)
    }

    /// Writes the stamp of `generation` into [`STAMP_SLOT`] through the events page mapping.
    fn stamp_events_page(&self, generation: u32) {
        if let Some(m) = self.events_page() {
            #[allow(clippy::cast_possible_truncation)] // a slot's byte offset in a 32 KiB page
            m.write_u64((STAMP_SLOT * 8) as usize, stamp(generation));
        }
    }

    /// Checks the signal page through its `/dev/kfd` mapping (user-mode queue mode): the stamp
    /// of `generation` in [`STAMP_SLOT`], the same value read by SDMA at the page's GPU VA
    /// (the mapping and the buffer are one memory), and every event's slot acknowledged
    /// (unsignaled: the driver reset each mailbox a completion wrote when it set the event).
    /// Returns the slots checked (0 without the mapping).
    fn check_events_page(&self, generation: u32) -> Result<usize, WorkloadError> {
        let (Some(m), Some(q)) = (self.events_page(), self.user.first()) else {
            return Ok(0);
        };
        let mismatch = |what: String| WorkloadError::Mismatch(format!("events page: {what}"));
        #[allow(clippy::cast_possible_truncation)] // a slot's byte offset in a 32 KiB page
        let read = |slot: u64| m.read_u64((slot * 8) as usize);
        let want = stamp(generation);
        match read(STAMP_SLOT) {
            Some(v) if v == want => {}
            v => {
                return Err(mismatch(format!(
                    "slot {STAMP_SLOT} reads {v:#x?} through the /dev/kfd mapping, expected \
                     {want:#x}"
                )))
            }
        }
        let mut q = crate::machine::lock(q);
        let by_gpu = UserRun {
            kfd: &self.kfd,
            q: &mut q,
        }
        .read_gpu(m.addr() + STAMP_SLOT * 8, 8)?;
        if by_gpu != want.to_le_bytes() {
            return Err(mismatch(format!(
                "slot {STAMP_SLOT} reads {by_gpu:02x?} by SDMA at {:#x}, {want:#x} through the \
                 /dev/kfd mapping",
                m.addr() + STAMP_SLOT * 8
            )));
        }
        drop(q);
        let mut slots = 1;
        let queue_events = self.user.iter().map(|q| crate::machine::lock(q).slot);
        let ids: Vec<u32> = self
            .manifest
            .events
            .iter()
            .map(|&(id, _)| id)
            .chain(queue_events)
            .collect();
        for id in ids {
            match read(u64::from(id)) {
                Some(UNSIGNALED_SLOT) => slots += 1,
                v => {
                    return Err(mismatch(format!(
                        "the slot of event {id} reads {v:#x?} through the /dev/kfd mapping, \
                         expected unsignaled"
                    )))
                }
            }
        }
        Ok(slots)
    }

    /// How this workload moves its data ([`Dma::Queues`] or [`Dma::Cs`]).
    pub fn dma(&self) -> Dma {
        self.dma
    }

    /// The manifest (what a verifier needs).
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The KFD file.
    pub fn kfd(&self) -> &Kfd<T> {
        &self.kfd
    }

    /// The render-node files, one per GPU, in manifest order.
    pub fn renders(&self) -> &[RenderNode<T>] {
        &self.renders
    }

    /// Advances the generation counter on every GPU by SDMA; returns the new generation.
    ///
    /// With user-mode queues ([`Dma::Queues`]) each GPU's step writes packets into the queue's
    /// ring and rings its doorbell; a checkpoint anywhere in the step carries the ring (process
    /// memory) and the queue's pointers (its MQD), so the restored queue runs what was submitted
    /// and the step simply completes.
    ///
    /// With [`Dma::Cs`] each GPU's step builds an SDMA context, IB and staging buffer in the
    /// render-node file, submits, waits and tears them down. A checkpoint can land inside that
    /// step (criu freezes the process anywhere), and what the step built lives in the
    /// render-node file, which criu restores as a new open file whose VM holds the process's KFD
    /// buffers but no contexts, GEM handles or VA mappings of its own (the 6.1 driver has no way
    /// to checkpoint them, and the plugin, like upstream's, does not try). The step then fails:
    /// `EINVAL` from WAIT_CS on a context that is gone, or `ETIME` from a submission that faulted
    /// on an IB mapped only in the old file. Like a libdrm client after a GPU reset, the workload
    /// rebuilds its tools and runs the step once more: the step writes an absolute value, so
    /// running it twice is harmless. A second failure is an error. [`Workload::rebuilds`] counts
    /// the steps run again.
    pub fn tick(&mut self) -> Result<u32, WorkloadError> {
        let generation = self.manifest.generation.wrapping_add(1);
        for (g, (gm, render)) in self.manifest.gpus.iter().zip(&self.renders).enumerate() {
            let Some(c) = gm.buffers.iter().find(|b| b.kind == Kind::Counter) else {
                continue;
            };
            if let Some(q) = self.user.get_mut(g) {
                let q = q
                    .get_mut()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                UserRun { kfd: &self.kfd, q }.write_counter(c.va, generation)?;
                continue;
            }
            let step = || -> Result<(), WorkloadError> {
                let mut va = VA_BASE + (1 << 40);
                GpuDma::new(gm.gpu_id, render, &mut va)?.write_counter(c.va, generation)
            };
            if let Err(e) = step() {
                if !lost_render_state(&e) {
                    return Err(e);
                }
                log::warn!(
                    "GPU {:#x}: {e}: the render-node file lost this step's objects (restored by \
                     criu mid-step?); rebuilding them and running the step again",
                    gm.gpu_id
                );
                self.rebuilds += 1;
                step()?;
            }
        }
        self.stamp_events_page(generation);
        self.manifest.generation = generation;
        Ok(generation)
    }

    /// How many tick steps had to rebuild their render-node objects (see [`Workload::tick`];
    /// always 0 with user-mode queues).
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds
    }

    /// Checks the workload's own state (after criu restored this process), moving data the
    /// way the workload does.
    pub fn verify(&self) -> Result<Report, WorkloadError> {
        if self.user.is_empty() {
            let renders: Vec<&RenderNode<T>> = self.renders.iter().collect();
            return verify(&self.kfd, &renders, &self.manifest);
        }
        let kfd = &self.kfd;
        let mut queues: Vec<_> = self.user.iter().map(crate::machine::lock).collect();
        let movers: Vec<Box<dyn Mover + '_>> = queues
            .iter_mut()
            .map(|q| Box::new(UserRun { kfd, q }) as Box<dyn Mover + '_>)
            .collect();
        let mut report = verify_with(kfd, movers, &self.manifest)?;
        drop(queues);
        report.page_slots = self.check_events_page(self.manifest.generation)?;
        Ok(report)
    }
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

/// Checks, through `kfd` and one render node per GPU of the manifest (whose VMs must be the
/// process's compute VMs), that every buffer holds its pattern, every counter the manifest's
/// generation, every queue exists and every event has its recorded state.
pub fn verify<T: Transport>(
    kfd: &Kfd<T>,
    renders: &[&RenderNode<T>],
    m: &Manifest,
) -> Result<Report, WorkloadError> {
    let mut va = VA_BASE + (1 << 41);
    let mut movers: Vec<Box<dyn Mover + '_>> = Vec::new();
    for (gm, render) in m.gpus.iter().zip(renders) {
        movers.push(Box::new(GpuDma::new(gm.gpu_id, render, &mut va)?));
    }
    verify_with(kfd, movers, m)
}

/// [`verify`] with a way to move data on each GPU of the manifest.
fn verify_with<T: Transport>(
    kfd: &Kfd<T>,
    movers: Vec<Box<dyn Mover + '_>>,
    m: &Manifest,
) -> Result<Report, WorkloadError> {
    let mut report = Report {
        buffers: 0,
        bytes: 0,
        queues: 0,
        events: 0,
        generation: m.generation,
        page_slots: 0,
    };
    for (g, (gm, mut dma)) in m.gpus.iter().zip(movers).enumerate() {
        for b in &gm.buffers {
            match b.kind {
                Kind::Vram | Kind::Gtt => {
                    dma.check(m.spec.seed, g, b, m.spec.untouched_bytes(b.size))?;
                    report.buffers += 1;
                    report.bytes += b.size;
                }
                Kind::Counter => {
                    let found = dma.read_counter(b.va)?;
                    if found != m.generation {
                        return Err(WorkloadError::Mismatch(format!(
                            "GPU {:#x}: generation counter is {found}, expected {}",
                            gm.gpu_id, m.generation
                        )));
                    }
                }
                Kind::EventPage | Kind::Ring | Kind::Staging => {}
            }
        }
        for q in &gm.queues {
            // A queue answers UPDATE_QUEUE with its own ring only if it exists.
            // SAFETY: the ring is the one the queue was created with, kept alive by the workload
            // process as long as its queues.
            let answer =
                unsafe { kfd.update_queue(QueueId(q.id), q.ring_base, q.ring_size, 100, 7) };
            if let Err(e) = answer {
                return Err(WorkloadError::Mismatch(format!(
                    "queue {} on GPU {:#x} does not answer: {e}",
                    q.id, gm.gpu_id
                )));
            }
            report.queues += 1;
        }
    }
    let by_id: BTreeMap<u32, bool> = m.events.iter().copied().collect();
    for (&id, &signaled) in &by_id {
        let r = kfd.wait_events(&[EventId(id)], true, 0)?;
        let now = r == WaitResult::Complete;
        if now != signaled {
            return Err(WorkloadError::Mismatch(format!(
                "event {id} is {}, expected {}",
                if now { "signaled" } else { "not signaled" },
                if signaled { "signaled" } else { "not signaled" }
            )));
        }
        report.events += 1;
    }
    Ok(report)
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

    #[test]
    fn the_fence_budget_counts_running_time_not_a_freeze() {
        use std::time::{Duration, Instant};
        let t0 = Instant::now();
        let mut b = FenceBudget::new(t0);
        // Frozen by criu for five minutes in the middle of a wait: one second is charged.
        assert!(b.charge(t0 + Duration::from_secs(300)));
        // Then 28.9 s of 100 ms looks still fit; the budget runs out at 30 s of running time.
        let mut now = t0 + Duration::from_secs(300);
        for _ in 0..289 {
            now += Duration::from_millis(100);
            assert!(b.charge(now));
        }
        now += Duration::from_millis(100);
        assert!(!b.charge(now));
    }

    #[test]
    fn the_fence_budget_runs_out_for_a_queue_that_never_completes() {
        use std::time::{Duration, Instant};
        let t0 = Instant::now();
        let mut b = FenceBudget::new(t0);
        let looks = (1..=400u32)
            .take_while(|&i| b.charge(t0 + Duration::from_millis(100) * i))
            .count();
        assert_eq!(looks, 299, "30 s of 100 ms looks, the last one spends it");
    }

    #[test]
    fn pattern_is_position_addressed() {
        let mut whole = vec![0u8; 64];
        pattern(7, 1, 2, 0, &mut whole);
        let mut part = vec![0u8; 13];
        pattern(7, 1, 2, 21, &mut part);
        assert_eq!(&whole[21..34], &part[..]);
        let mut other = vec![0u8; 64];
        pattern(7, 1, 3, 0, &mut other);
        assert_ne!(whole, other);
    }
}
