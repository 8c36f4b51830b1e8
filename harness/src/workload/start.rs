//! How the workload comes to life, in the order a fresh ROCm process builds its GPU state:
//! ACQUIRE_VM and buffers on every GPU, the way it will move data, signal events (the first
//! giving the signal page), a user-mode SDMA queue per GPU, the signal page mapped from
//! `/dev/kfd`, the buffers filled by SDMA, AQL queues.

use std::os::fd::AsFd;
use std::sync::Mutex;

use kfd_abi::kfd::CreatedEvent;
use kfd_abi::{
    AllocFlags, Errno, EventType, GpuId, IoctlError, Kfd, Mapping, MemHandle, Prot, RenderNode,
    Share, Transport,
};

use super::alloc::{GpuBuffers, QueueMemory};
use super::manifest::{Buffer, Dma, GpuManifest, Kind, Manifest, Spec, WorkloadError};
use super::mover::{Contents, GpuDma, Mover, VA_BASE};
use super::user_queue::{map_doorbells, UserQueue, UserRun, SIGNAL_PAGE};
use super::Workload;

/// The buffers of every GPU (in `ids`' order) and the reservation of the signal page (on the
/// first GPU): patterned VRAM and GTT, the generation counter, the render-node buffers.
fn allocate<T: Transport>(
    kfd: &Kfd<T>,
    gpus: &[GpuId],
    renders: &[RenderNode<T>],
    spec: &Spec,
    va: &mut u64,
) -> Result<(Vec<Vec<Buffer>>, Option<Mapping>), WorkloadError> {
    let rw = AllocFlags::WRITABLE | AllocFlags::NO_SUBSTITUTE;
    let mut all_buffers = Vec::new();
    let mut page_at = None;
    for (g, (&gpu, render)) in gpus.iter().zip(renders).enumerate() {
        kfd.acquire_vm(gpu, render.as_fd())?;
        let mut buffers = GpuBuffers {
            kfd,
            gpu,
            list: Vec::new(),
        };
        let sized = |kind, flags| move |&size: &u64| (kind, size, flags);
        let wanted = (spec
            .vram
            .iter()
            .map(sized(Kind::Vram, AllocFlags::VRAM | rw)))
        .chain(spec.gtt.iter().map(sized(Kind::Gtt, AllocFlags::GTT | rw)))
        .chain([(Kind::Counter, 4096, AllocFlags::VRAM | rw)]);
        for (kind, size, flags) in wanted {
            buffers.next(kind, size, flags, va)?;
        }
        for &size in &spec.render {
            buffers.render(render, size, va)?;
        }
        if g == 0 {
            // At an address the CPU reserves: in queue mode the page's `/dev/kfd` mapping goes
            // there.
            let page_flags = AllocFlags::GTT | rw | AllocFlags::COHERENT;
            let (_, at, _) = buffers.reserved(Kind::EventPage, SIGNAL_PAGE, page_flags)?;
            page_at = Some(at);
        }
        all_buffers.push(buffers.list);
    }
    Ok((all_buffers, page_at))
}

/// How data will move: [`Dma::Queues`] when the first GPU's doorbell page can be mapped (and
/// that mapping, for its queue), [`Dma::Cs`] when asked or, with [`Dma::Auto`], when `/dev/kfd`
/// cannot be mapped.
fn choose_dma<T: Transport>(
    kfd: &Kfd<T>,
    wanted: Dma,
    first: Option<GpuId>,
) -> Result<(Dma, Option<Mapping>), IoctlError> {
    let gpu = match (wanted, first) {
        (Dma::Cs, _) | (_, None) => return Ok((Dma::Cs, None)),
        (_, Some(gpu)) => gpu,
    };
    match map_doorbells(kfd, gpu) {
        Ok(m) => Ok((Dma::Queues, Some(m))),
        Err(e) if wanted == Dma::Auto && e.errno() == Some(Errno::ENODEV) => {
            log::warn!(
                "/dev/kfd cannot be mapped ({e}): moving data by command submission on the \
                 render nodes instead of user-mode queues"
            );
            Ok((Dma::Cs, None))
        }
        Err(e) => Err(e),
    }
}

/// The process's signal events: the first one created gives the signal page, and says at which
/// `/dev/kfd` offset the page is mapped.
struct Signals {
    page_to_give: Option<MemHandle>,
    offset: Option<u64>,
}

impl Signals {
    fn create<T: Transport>(
        &mut self,
        kfd: &Kfd<T>,
        auto_reset: bool,
    ) -> Result<CreatedEvent, IoctlError> {
        let e = kfd.create_event(EventType::Signal, auto_reset, self.page_to_give.take())?;
        self.offset.get_or_insert(e.page_offset);
        Ok(e)
    }
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

        let (mut all_buffers, page_at) = allocate(&kfd, &ids, &renders, spec, &mut va)?;
        let page = all_buffers
            .first()
            .and_then(|b| b.iter().find(|b| b.kind == Kind::EventPage))
            .cloned();
        let (dma, mut first_doorbells) = choose_dma(&kfd, dma, ids.first().copied())?;

        // Signal events: the first gives the signal page (and says where `/dev/kfd` maps it);
        // in queue mode, the page is mapped on every GPU (each queue writes its event's slot).
        if let (Dma::Queues, Some(p)) = (dma, &page) {
            kfd.map_memory_to_gpu(MemHandle(p.handle), &ids)?;
        }
        let mut signals = Signals {
            page_to_give: page.as_ref().map(|p| MemHandle(p.handle)),
            offset: None,
        };
        for i in 0..spec.events {
            let e = signals.create(&kfd, false)?;
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
                let list = all_buffers
                    .get_mut(g)
                    .ok_or(WorkloadError::Fence { gpu_id: gpu.get() })?;
                let mut buffers = GpuBuffers {
                    kfd: &kfd,
                    gpu,
                    list: std::mem::take(list),
                };
                let event = || signals.create(&kfd, true);
                let q = UserQueue::create(render, &mut buffers, doorbells, event, page.va);
                *list = buffers.list;
                user.push(Mutex::new(q?));
            }
        }

        // In queue mode the signal page is mapped from `/dev/kfd` (at the offset the first
        // CREATE_EVENT returned) over its reservation, so that the mailbox each queue's FENCE
        // writes is at the same address for the CPU; in CS mode the reservation stays.
        let events_page = match (dma, page_at, signals.offset) {
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
                .filter(|b| matches!(b.kind, Kind::Vram | Kind::Gtt | Kind::Render))
            {
                mover.fill(&Contents::of(spec, g, b))?;
            }
            if let Some(c) = buffers.iter().find(|b| b.kind == Kind::Counter) {
                mover.write_counter(c.va, 1)?;
            }

            let mut queues = Vec::new();
            for _ in 0..spec.queues {
                let (queue, mem) = QueueMemory::aql_queue(&kfd, gpu)?;
                queue_memory.push(mem);
                queues.push(queue);
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
}
