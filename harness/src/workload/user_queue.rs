//! The user-mode SDMA queue the workload moves data through as ROCr does
//! ([`Dma::Queues`](super::Dma::Queues)): its ring, pointers and staging buffer in GTT buffers
//! mapped for the CPU, its doorbell rung through the process's mapping of the doorbell page, and
//! each submission's completion signalled into its event's slot of the signal page; and the
//! signal page's constants and the generation stamp the workload keeps in it.

use std::sync::atomic::{fence, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kfd_abi::kfd::{CreatedEvent, QueueDesc};
use kfd_abi::sdma::IbBuilder;
use kfd_abi::{
    AllocFlags, Errno, EventId, GpuId, IoctlError, Kfd, Mapping, Prot, QueueType, RenderNode,
    Share, Transport, WaitResult,
};

use super::alloc::GpuBuffers;
use super::manifest::{Kind, WorkloadError};
use super::mover::{Mover, FENCE};

/// Bytes of a user-mode queue's ring (its pointers follow in the next page).
const RING_BYTES: u64 = 64 << 10;
/// Where the read pointer is in the ring's buffer (right after the ring); the write pointer
/// follows it.
const RPTR_AT: usize = 64 << 10;
/// Bytes of a user-mode queue's staging buffer.
const QUEUE_STAGING: u64 = 1 << 20;
/// Bytes of a process's doorbell slice on gfx9.
pub(super) const DOORBELL_SLICE: usize = 8192;
/// Slots of the signal page (`KFD_SIGNAL_EVENT_LIMIT`), 8 bytes each.
const SIGNAL_SLOTS: u64 = 4096;
/// Bytes of the signal page: what the workload allocates and maps from `/dev/kfd`.
pub(super) const SIGNAL_PAGE: u64 = 8 * SIGNAL_SLOTS;
/// The signal page's slot in which the workload stamps its generation through its `/dev/kfd`
/// mapping of the page, in user-mode queue mode: the last one, which no event of the workload
/// has (signal event ids are given from 0 up, and the workload makes a handful). The driver
/// reads only the slots of existing events, so the stamp is plain memory to it; a checkpoint
/// carries it in the page's buffer, and verification finds it through the mapping and by SDMA.
pub const STAMP_SLOT: u64 = SIGNAL_SLOTS - 1;
/// What a signal slot holds until the GPU writes it (`UNSIGNALED_EVENT_SLOT`).
pub(super) const UNSIGNALED_SLOT: u64 = u64::MAX;

/// The stamp of `generation` (tagged, so that it is no value the driver or a FENCE writes).
pub(super) fn stamp(generation: u32) -> u64 {
    0x5354_414d_0000_0000 | u64::from(generation)
}

/// Locks a user-mode queue (a poisoned lock still holds a usable queue: its state is plain data).
pub(super) fn lock(q: &Mutex<UserQueue>) -> MutexGuard<'_, UserQueue> {
    q.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A KFD user-mode SDMA queue on one GPU, as ROCr's blit queue: ring and pointers in a GTT
/// buffer mapped for the CPU, the doorbell page mapped, a signal event for completion.
#[derive(Debug)]
pub(super) struct UserQueue {
    pub(super) gpu_id: u32,
    /// The ring, then the read pointer and the write pointer (8 bytes each).
    pub(super) ring: Mapping,
    pub(super) doorbells: Mapping,
    /// Byte offset of the queue's doorbell in the doorbell page.
    pub(super) doorbell: usize,
    /// Bytes submitted so far.
    pub(super) wptr: u64,
    pub(super) staging: Mapping,
    pub(super) staging_va: u64,
    pub(super) event: EventId,
    /// The event's slot in the signal page: its index and GPU VA.
    pub(super) slot: u32,
    pub(super) slot_va: u64,
}

impl UserQueue {
    /// Creates the queue on the GPU of `buffers` (render node `render`, doorbell page
    /// `doorbells`): its ring and pointers and its staging buffer as GTT buffers mapped for the
    /// CPU (listed in `buffers`), completing into the slot of the signal event `event` creates
    /// (after the buffers) in the signal page at GPU VA `page_va`.
    pub(super) fn create<T: Transport>(
        render: &RenderNode<T>,
        buffers: &mut GpuBuffers<'_, T>,
        doorbells: Mapping,
        event: impl FnOnce() -> Result<CreatedEvent, IoctlError>,
        page_va: u64,
    ) -> Result<Self, WorkloadError> {
        let (kfd, gpu) = (buffers.kfd, buffers.gpu);
        let (ring, ring_map) = buffers.mapped(render, Kind::Ring, RING_BYTES + 4096)?;
        let (staging, staging_map) = buffers.mapped(render, Kind::Staging, QUEUE_STAGING)?;
        let event = event()?;
        let mut d = QueueDesc::new(gpu, QueueType::Sdma);
        d.ring_base = ring.va;
        d.ring_size = u32::try_from(RING_BYTES).unwrap_or(u32::MAX);
        d.read_ptr = ring.va + RING_BYTES;
        d.write_ptr = ring.va + RING_BYTES + 8;
        // SAFETY: ring and pointers are a GTT buffer of this process mapped on the queue's GPU,
        // alive as long as the workload (which owns the KFD file).
        let q = unsafe { kfd.create_queue(&d) }?;
        #[allow(clippy::cast_possible_truncation)] // masked to the doorbell page
        let doorbell = (q.doorbell_offset & (DOORBELL_SLICE as u64 - 1)) as usize;
        Ok(Self {
            gpu_id: gpu.get(),
            ring: ring_map,
            doorbells,
            doorbell,
            wptr: 0,
            staging: staging_map,
            staging_va: staging.va,
            event: event.event_id,
            slot: event.slot_index,
            slot_va: page_va + u64::from(event.slot_index) * 8,
        })
    }

    /// The read pointer the engine wrote back.
    fn rptr(&self) -> Option<u64> {
        self.ring.read_u64(RPTR_AT)
    }
}

/// A [`UserQueue`] with the KFD file that waits on its event.
pub(super) struct UserRun<'a, T: Transport> {
    pub(super) kfd: &'a Kfd<T>,
    pub(super) q: &'a mut UserQueue,
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
        fence(Ordering::Release);
        q.doorbells.write_u64(q.doorbell, q.wptr);
        let mut budget = FenceBudget::new(Instant::now());
        let mut signaled = false;
        loop {
            if signaled {
                std::thread::sleep(Duration::from_micros(100));
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
            if !budget.charge(Instant::now()) {
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
    left: Duration,
    last: Instant,
}

impl FenceBudget {
    /// The most one step between two looks counts for (a look comes every 20 ms of waiting).
    const MAX_STEP: Duration = Duration::from_secs(1);

    fn new(now: Instant) -> Self {
        Self {
            left: FENCE,
            last: now,
        }
    }

    /// Charges the time since the last look; false once the budget is spent.
    fn charge(&mut self, now: Instant) -> bool {
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

/// The doorbell page of `gpu`, as libhsakmt maps it: a DOORBELL buffer at a GPU VA and the CPU
/// mapping of its offset at the same address (criu's restore finds a device mapping by its
/// address and offset among the process's buffers).
pub(super) fn map_doorbells<T: Transport>(kfd: &Kfd<T>, gpu: GpuId) -> Result<Mapping, IoctlError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fence_budget_counts_running_time_not_a_freeze() {
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
        let t0 = Instant::now();
        let mut b = FenceBudget::new(t0);
        let looks = (1..=400u32)
            .take_while(|&i| b.charge(t0 + Duration::from_millis(100) * i))
            .count();
        assert_eq!(looks, 299, "30 s of 100 ms looks, the last one spends it");
    }
}
