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
//! reads back through the mapping and by SDMA ([`STAMP_SLOT`]). Where devices cannot be mapped
//! (CUSE without the bridge module), [`Dma::Cs`] uses the render node's command submission
//! instead (see there for what it loses).
//!
//! Contents are a pure function of `(seed, gpu index, buffer index, byte offset)` (`pattern`;
//! zero in the untouched tail of each buffer, [`Spec::untouched_permille`]), so any process that
//! knows the [`Manifest`] can verify them: the workload itself after criu restored it, or a test
//! that restored its state into another simulated process
//! ([`RestoredTarget::verify`](crate::RestoredTarget::verify)).
//!
//! Inside: what it is made of (`manifest`), its buffers (`alloc`), how it moves data (`mover`:
//! the render node's command submission; `user_queue`: the user-mode queue), how it starts
//! (`start`) and how it is verified (`verify`). Besides, a render-node buffer shared with
//! another process through a dma-buf ([`SharedSide`]).

use std::sync::Mutex;

use kfd_abi::{IoctlError, Kfd, Mapping, RenderNode, Transport};

mod alloc;
mod manifest;
mod mover;
mod pattern;
mod share;
mod start;
mod user_queue;
mod verify;

pub use manifest::{Buffer, Dma, GpuManifest, Kind, Manifest, Queue, Report, Spec, WorkloadError};
pub use share::{
    check_mapping, fill_mapping, Importer, SharedContents, SharedSide, Writer, SHARED_VA,
};
pub use user_queue::STAMP_SLOT;
pub(crate) use verify::verify;

use alloc::QueueMemory;
use mover::{GpuDma, Mover, VA_BASE};
use user_queue::{UserQueue, UserRun};

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
    user: Vec<Mutex<UserQueue>>,
    /// The signal page's `/dev/kfd` mapping at its GPU VA ([`Dma::Queues`]); with
    /// [`Dma::Cs`], the address reservation at that VA.
    events_page: Option<Mapping>,
    _queue_memory: Vec<QueueMemory>,
}

impl<T: Transport> Workload<T> {
    /// The signal page's `/dev/kfd` mapping, in user-mode queue mode.
    pub fn events_page(&self) -> Option<&Mapping> {
        self.events_page
            .as_ref()
            .filter(|_| self.dma == Dma::Queues)
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
}
