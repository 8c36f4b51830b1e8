//! A model ROCm process, written against `kfd-abi` only, so that it runs unchanged in process,
//! over CUSE and on hardware.
//!
//! Like a HIP program it opens `/dev/kfd` and a render node per GPU, acquires the GPU VMs,
//! allocates VRAM and GTT buffers, fills them by SDMA through its render-node file (whose VM is
//! the compute VM after `ACQUIRE_VM`), creates queues and signal events, and advances a
//! generation counter in a small VRAM buffer by SDMA on every tick.
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
    AllocFlags, EventId, EventType, GpuId, HostBuffer, IoctlError, Kfd, MemHandle, QueueId,
    QueueType, RenderNode, SdmaQueue, Transport, UserptrBuffer, WaitResult,
};
use serde::{Deserialize, Serialize};

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

    fn run(&mut self, ib: IbBuilder) -> Result<(), WorkloadError> {
        if self.queue.run(&ib.finish(), FENCE)? {
            Ok(())
        } else {
            Err(WorkloadError::Fence {
                gpu_id: self.gpu_id,
            })
        }
    }

    /// Writes the pattern of buffer `b` (GPU number `gpu`) into it by SDMA, but for its last
    /// `untouched` bytes.
    fn fill(
        &mut self,
        seed: u64,
        gpu: usize,
        b: &Buffer,
        untouched: u64,
    ) -> Result<(), WorkloadError> {
        let end = b.size - untouched.min(b.size);
        let mut off = 0;
        while off < end {
            let n = (end - off).min(STAGING as u64);
            #[allow(clippy::cast_possible_truncation)] // n <= STAGING
            pattern(
                seed,
                gpu,
                b.index,
                off,
                &mut self.staging.as_mut_slice()[..n as usize],
            );
            let mut ib = IbBuilder::new();
            ib.copy_linear(self.staging.va(), b.va + off, n);
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
        let end = b.size - untouched.min(b.size);
        let mut want = vec![0u8; STAGING];
        let mut off = 0;
        while off < b.size {
            let n = (b.size - off).min(STAGING as u64);
            let mut ib = IbBuilder::new();
            ib.copy_linear(b.va + off, self.staging.va(), n);
            self.run(ib)?;
            #[allow(clippy::cast_possible_truncation)] // n <= STAGING
            let n = n as usize;
            #[allow(clippy::cast_possible_truncation)] // < n
            let patterned = end.saturating_sub(off).min(n as u64) as usize;
            pattern(seed, gpu, b.index, off, &mut want[..patterned]);
            want[patterned..n].fill(0);
            let got = &self.staging.as_slice()[..n];
            if got != &want[..n] {
                let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
                return Err(WorkloadError::Mismatch(format!(
                    "GPU {:#x} buffer {} ({:?} at {:#x}): byte {} is {:#04x}, expected {:#04x}",
                    self.gpu_id,
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

    fn read_counter(&mut self, va: u64) -> Result<u32, WorkloadError> {
        let mut ib = IbBuilder::new();
        ib.copy_linear(va, self.staging.va(), 4);
        self.run(ib)?;
        let s = self.staging.as_slice();
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
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
    _queue_memory: Vec<QueueMemory>,
}

impl<T: Transport> Workload<T> {
    /// Builds the workload on `gpus` (each with a render node of that GPU), as a fresh ROCm
    /// process would: ACQUIRE_VM, buffers filled by SDMA, queues, events, generation 1.
    pub fn start(
        kfd: Kfd<T>,
        gpus: Vec<(GpuId, RenderNode<T>)>,
        spec: &Spec,
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
        let mut event_page = None;

        for (g, (&gpu, render)) in ids.iter().zip(&renders).enumerate() {
            kfd.acquire_vm(gpu, render.as_fd())?;
            let mut buffers = Vec::new();
            let mut alloc = |kind: Kind,
                             size: u64,
                             flags: AllocFlags,
                             va: &mut u64|
             -> Result<Buffer, WorkloadError> {
                let at = bump(va, size);
                let a = kfd.alloc_memory(at, size, gpu, flags)?;
                kfd.map_memory_to_gpu(a.handle, &[gpu])?;
                let index = u32::try_from(buffers.len()).unwrap_or(u32::MAX);
                let b = Buffer {
                    index,
                    kind,
                    va: at,
                    size,
                    handle: a.handle.get(),
                };
                buffers.push(b.clone());
                Ok(b)
            };
            let rw = AllocFlags::WRITABLE | AllocFlags::NO_SUBSTITUTE;
            for &size in &spec.vram {
                alloc(Kind::Vram, size, AllocFlags::VRAM | rw, &mut va)?;
            }
            for &size in &spec.gtt {
                alloc(Kind::Gtt, size, AllocFlags::GTT | rw, &mut va)?;
            }
            alloc(Kind::Counter, 4096, AllocFlags::VRAM | rw, &mut va)?;
            if g == 0 {
                let page = alloc(
                    Kind::EventPage,
                    8 * 4096,
                    AllocFlags::GTT | rw | AllocFlags::COHERENT,
                    &mut va,
                )?;
                event_page = Some(MemHandle(page.handle));
            }

            let mut dma = GpuDma::new(gpu.get(), render, &mut va)?;
            for b in buffers
                .iter()
                .filter(|b| matches!(b.kind, Kind::Vram | Kind::Gtt))
            {
                dma.fill(spec.seed, g, b, spec.untouched_bytes(b.size))?;
            }
            if let Some(c) = buffers.iter().find(|b| b.kind == Kind::Counter) {
                dma.write_counter(c.va, 1)?;
            }
            drop(dma);

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

        for i in 0..spec.events {
            let page = if i == 0 { event_page } else { None };
            let e = kfd.create_event(EventType::Signal, false, page)?;
            let signaled = i % 2 == 1;
            if signaled {
                kfd.set_event(e.event_id)?;
            }
            manifest.events.push((e.event_id.get(), signaled));
        }
        Ok(Self {
            kfd,
            renders,
            rebuilds: 0,
            manifest,
            _queue_memory: queue_memory,
        })
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
    /// Each GPU's step builds an SDMA context, IB and staging buffer in the render-node file,
    /// submits, waits and tears them down. A checkpoint can land inside that step (criu freezes
    /// the process anywhere), and what the step built lives in the render-node file, which criu
    /// restores as a new open file whose VM holds the process's KFD buffers but no contexts, GEM
    /// handles or VA mappings of its own (the 6.1 driver has no way to checkpoint them, and the
    /// plugin, like upstream's, does not try). The step then fails: `EINVAL` from WAIT_CS on a
    /// context that is gone, or `ETIME` from a submission that faulted on an IB mapped only in the
    /// old file. Like a libdrm client after a GPU reset, the workload
    /// rebuilds its tools and runs the step once more: the step writes an absolute value, so
    /// running it twice is harmless. A second failure is an error. [`Workload::rebuilds`] counts
    /// the steps run again.
    pub fn tick(&mut self) -> Result<u32, WorkloadError> {
        let generation = self.manifest.generation.wrapping_add(1);
        for (g, render) in self.manifest.gpus.iter().zip(&self.renders) {
            let Some(c) = g.buffers.iter().find(|b| b.kind == Kind::Counter) else {
                continue;
            };
            let step = || -> Result<(), WorkloadError> {
                let mut va = VA_BASE + (1 << 40);
                GpuDma::new(g.gpu_id, render, &mut va)?.write_counter(c.va, generation)
            };
            if let Err(e) = step() {
                if !lost_render_state(&e) {
                    return Err(e);
                }
                log::warn!(
                    "GPU {:#x}: {e}: the render-node file lost this step's objects (restored by \
                     criu mid-step?); rebuilding them and running the step again",
                    g.gpu_id
                );
                self.rebuilds += 1;
                step()?;
            }
        }
        self.manifest.generation = generation;
        Ok(generation)
    }

    /// How many tick steps had to rebuild their render-node objects (see [`Workload::tick`]).
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds
    }

    /// Checks the workload's own state (after criu restored this process).
    pub fn verify(&self) -> Result<Report, WorkloadError> {
        let renders: Vec<&RenderNode<T>> = self.renders.iter().collect();
        verify(&self.kfd, &renders, &self.manifest)
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
}

/// Checks, through `kfd` and one render node per GPU of the manifest (whose VMs must be the
/// process's compute VMs), that every buffer holds its pattern, every counter the manifest's
/// generation, every queue exists and every event has its recorded state.
pub fn verify<T: Transport>(
    kfd: &Kfd<T>,
    renders: &[&RenderNode<T>],
    m: &Manifest,
) -> Result<Report, WorkloadError> {
    let mut report = Report {
        buffers: 0,
        bytes: 0,
        queues: 0,
        events: 0,
        generation: m.generation,
    };
    let mut va = VA_BASE + (1 << 41);
    for (g, (gm, render)) in m.gpus.iter().zip(renders).enumerate() {
        let mut dma = GpuDma::new(gm.gpu_id, render, &mut va)?;
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
                Kind::EventPage => {}
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
