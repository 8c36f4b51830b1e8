//! Verification: every buffer against its pattern, every counter against the generation, every
//! queue and event as the [`Manifest`] recorded them, and (with user-mode queues) the signal page
//! through the process's `/dev/kfd` mapping of it. From inside the workload's process
//! ([`Workload::verify`]) or from any process that has its files ([`verify`]).

use std::collections::BTreeMap;

use kfd_abi::{BoHandle, EventId, Kfd, QueueId, RenderNode, Transport, WaitResult};

use super::manifest::{Kind, Manifest, Report, WorkloadError};
use super::mover::{Contents, GpuDma, Mover, VA_BASE};
use super::user_queue::{lock, stamp, UserRun, STAMP_SLOT, UNSIGNALED_SLOT};
use super::Workload;

impl<T: Transport> Workload<T> {
    /// Writes the stamp of `generation` into [`STAMP_SLOT`] through the events page mapping.
    pub(super) fn stamp_events_page(&self, generation: u32) {
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
        let mut q = lock(q);
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
        let queue_events = self.user.iter().map(|q| lock(q).slot);
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

    /// The `n` bytes (at most a staging buffer's) at GPU VA `va` of the VM of the workload's
    /// GPU number `gpu`, read by SDMA the way the workload moves data: what the GPU sees there,
    /// a buffer of the workload's or any other mapped in that VM (a shared render-node buffer).
    ///
    /// # Errors
    /// A failed submission; [`WorkloadError::Mismatch`] for a GPU the workload does not have.
    pub fn read_gpu(&self, gpu: usize, va: u64, n: usize) -> Result<Vec<u8>, WorkloadError> {
        if let Some(q) = self.user.get(gpu) {
            let mut q = lock(q);
            return UserRun {
                kfd: &self.kfd,
                q: &mut q,
            }
            .read_gpu(va, n);
        }
        let (Some(gm), Some(render)) = (self.manifest.gpus.get(gpu), self.renders.get(gpu)) else {
            return Err(WorkloadError::Mismatch(format!(
                "the workload has no GPU number {gpu}"
            )));
        };
        let mut staging = VA_BASE + (1 << 41);
        GpuDma::new(gm.gpu_id, render, &mut staging)?.read_gpu(va, n)
    }

    /// Checks the workload's own state (after criu restored this process), moving data the
    /// way the workload does.
    pub fn verify(&self) -> Result<Report, WorkloadError> {
        if self.user.is_empty() {
            let renders: Vec<&RenderNode<T>> = self.renders.iter().collect();
            return verify(&self.kfd, &renders, &self.manifest);
        }
        let kfd = &self.kfd;
        let mut queues: Vec<_> = self.user.iter().map(lock).collect();
        let movers: Vec<Box<dyn Mover + '_>> = queues
            .iter_mut()
            .map(|q| Box::new(UserRun { kfd, q }) as Box<dyn Mover + '_>)
            .collect();
        let renders: Vec<&RenderNode<T>> = self.renders.iter().collect();
        let mut report = verify_with(kfd, &renders, movers, &self.manifest)?;
        drop(queues);
        report.page_slots = self.check_events_page(self.manifest.generation)?;
        Ok(report)
    }
}

/// Checks, through `kfd` and one render node per GPU of the manifest (whose VMs must be the
/// process's compute VMs), that every buffer holds its pattern, every counter the manifest's
/// generation, every queue exists and every event has its recorded state.
pub(crate) fn verify<T: Transport>(
    kfd: &Kfd<T>,
    renders: &[&RenderNode<T>],
    m: &Manifest,
) -> Result<Report, WorkloadError> {
    let mut va = VA_BASE + (1 << 41);
    let mut movers: Vec<Box<dyn Mover + '_>> = Vec::new();
    for (gm, render) in m.gpus.iter().zip(renders) {
        movers.push(Box::new(GpuDma::new(gm.gpu_id, render, &mut va)?));
    }
    verify_with(kfd, renders, movers, m)
}

/// [`verify`] with a way to move data on each GPU of the manifest.
fn verify_with<T: Transport>(
    kfd: &Kfd<T>,
    renders: &[&RenderNode<T>],
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
                    dma.check(&Contents::of(&m.spec, g, b))?;
                    report.buffers += 1;
                    report.bytes += b.size;
                }
                Kind::Render => {
                    let gone = |why: String| {
                        WorkloadError::Mismatch(format!(
                            "GPU {:#x}: render-node buffer {} (GEM handle {}) {why}",
                            gm.gpu_id, b.index, b.handle
                        ))
                    };
                    let handle = u32::try_from(b.handle)
                        .ok()
                        .and_then(BoHandle::new)
                        .ok_or_else(|| gone("has no valid handle".into()))?;
                    let render = renders
                        .get(g)
                        .ok_or_else(|| gone("has no render node".into()))?;
                    render
                        .gem_mmap_offset(handle)
                        .map_err(|e| gone(format!("is not in the render-node file: {e}")))?;
                    dma.check(&Contents::of(&m.spec, g, b))?;
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
