//! The KFD process as amdkfd keeps it (`struct kfd_process`, `kfd_process.c`): one per
//! simulated mm, with its per-device records (pdds) and their IDR of buffer objects, its queues
//! ([`queue`](super::queue)), events ([`event`](super::event)), SVM ranges
//! ([`svm_range`](super::svm_range)) and the CRIU state.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar};

use kfd_abi::Errno;

use super::accounts::Accounts;
use super::event::{Event, SignalPage};
use super::queue::{doorbell_reserved, Queue, QueueKind};
use super::svm_range::{RestoredSvm, SvmRange};
use crate::host::{lock, FileKey};
use crate::hw::backing::{device_page, Backing, Domain};
use crate::hw::vm::Vm;
use crate::limits::*;
use crate::lock_order::{rank, Ordered, OrderedGuard};

/// One buffer object.
#[derive(Debug)]
pub(crate) struct Bo {
    /// GPU virtual address.
    pub va: u64,
    /// Size in bytes.
    pub size: u64,
    /// `KFD_IOC_ALLOC_MEM_FLAGS_*`.
    pub flags: u32,
    /// Render-node fake mmap offset.
    pub mmap_offset: u64,
    /// CPU address of a userptr BO.
    pub user_addr: u64,
    /// Whose memory `user_addr` is in (the allocating process), for a userptr BO.
    pub user_mem: Option<crate::hw::backing::ProcessMemory>,
    /// VRAM/GTT memory.
    pub backing: Option<Arc<Backing>>,
    /// Whether it counts against the device/system limits (not for imports).
    pub accounted: bool,
    /// Devices (indices) on whose VM it is mapped.
    pub mapped: Vec<usize>,
}

/// The DRM file (and its VM) a pdd acquired.
#[derive(Debug, Clone)]
pub(crate) struct DrmBinding {
    /// Identity of the render-node open file.
    pub key: FileKey,
    /// Its VM.
    pub vm: Arc<Ordered<Vm>>,
}

/// A per-device record of a process.
#[derive(Debug)]
pub(crate) struct Pdd {
    /// Index of the device in the machine.
    pub dev: usize,
    /// The gpu_id userspace uses (the old one after a restore).
    pub user_gpu_id: u32,
    /// ACQUIRE_VM state.
    pub drm: Option<DrmBinding>,
    /// The IDR of BOs.
    pub bos: BTreeMap<u32, Bo>,
    /// Index of the process's doorbell slice on the device.
    pub doorbell_index: u32,
    /// Doorbell ids in use (reserved SDMA ids included).
    pub doorbells: Vec<bool>,
    /// Queues on this device.
    pub queue_count: u32,
    /// Whether a queue holds the GWS.
    pub gws_taken: bool,
    /// SET_SCRATCH_BACKING_VA.
    pub scratch_va: u64,
    /// SET_TRAP_HANDLER (tba, tma).
    pub trap: (u64, u64),
}

impl Pdd {
    /// Lowest free IDR handle.
    pub(crate) fn free_idr(&self) -> Option<u32> {
        (0..=u32::MAX).find(|i| !self.bos.contains_key(i))
    }
}

/// All state of a KFD process.
#[derive(Debug)]
pub(crate) struct ProcState {
    /// Per-device records, in device order.
    pub pdds: Vec<Pdd>,
    /// Queues by id.
    pub queues: BTreeMap<u32, Queue>,
    /// Events by id.
    pub events: BTreeMap<u32, Event>,
    /// The signal page.
    pub signal: Option<SignalPage>,
    /// Signal events in use.
    pub signal_event_count: u32,
    /// SVM ranges, sorted, non-overlapping.
    pub svm: Vec<SvmRange>,
    /// Whose memory the SVM ranges are (the process that set their attributes).
    pub svm_mem: Option<crate::hw::backing::ProcessMemory>,
    /// XNACK mode.
    pub xnack: bool,
    /// Queue eviction count (queues run when zero).
    pub evictions: u32,
    /// Paused by CRIU PROCESS_INFO.
    pub queues_paused: bool,
    /// Restored; MMU notifications blocked until RESUME.
    pub restore_pending: bool,
    /// SVM ranges read at RESTORE, applied at RESUME: (start, size, attributes).
    pub svm_restored: Vec<RestoredSvm>,
    /// The simulator's ends of the SMI event fds handed out (`kfd_smi_events.c`'s clients): kept
    /// open so that the caller's end reads empty rather than at its end.
    pub smi_clients: Vec<std::os::unix::net::UnixStream>,
    /// The process's mm was torn down ([`KfdProcess::release_mm`]): its queues are gone.
    pub mm_released: bool,
    /// The runtime ROCr enabled with `RUNTIME_ENABLE` (KFD 1.13), while it is enabled. Not part of
    /// a checkpoint: the kernel's CRIU private data has no room for it, so a restored process
    /// starts with its runtime disabled, as on the driver.
    pub runtime: Option<Runtime>,
}

/// What `RUNTIME_ENABLE` set (`kfd_runtime_info`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Runtime {
    /// Where ROCr keeps what it shares with a debugger.
    pub r_debug: u64,
    /// The trap temporaries are set up (`KFD_RUNTIME_ENABLE_MODE_TTMP_SAVE_MASK`).
    pub ttmp_setup: bool,
}

impl ProcState {
    /// The pdd index whose user gpu_id is `id` (`kfd_process_device_data_by_id`).
    pub(crate) fn pdd_by_user_id(&self, id: u32) -> Option<usize> {
        if id == 0 {
            return None;
        }
        self.pdds.iter().position(|p| p.user_gpu_id == id)
    }

    /// `kfd_bind_process_to_device`: ENODEV without an acquired VM.
    pub(crate) fn bind(&self, pi: usize) -> Result<&DrmBinding, Errno> {
        self.pdds
            .get(pi)
            .and_then(|p| p.drm.as_ref())
            .ok_or(Errno::ENODEV)
    }

    /// BOs that CRIU saves (VA above the GPUVM base).
    pub(crate) fn criu_bo_count(&self) -> usize {
        self.pdds
            .iter()
            .map(|p| p.bos.values().filter(|b| b.va > GPUVM_BASE).count())
            .sum()
    }
}

/// A KFD process: one per simulated mm.
#[derive(Debug)]
pub(crate) struct KfdProcess {
    /// Simulated pid of the owner.
    pub pid: u32,
    /// What it gives back to the machine when it goes.
    pub(crate) accounts: Arc<Accounts>,
    pub(crate) state: Ordered<ProcState>,
    /// Signalled on SET_EVENT and DESTROY_EVENT.
    pub(crate) events_cv: Condvar,
    /// Held by the simulated SDMA engine while it runs this process's queues: taken once after
    /// the queues are evicted, it waits for the packet in flight (a queue preemption).
    pub(crate) engine: Ordered<()>,
    /// The same for the command processors: held while they run a round of this process.
    pub(crate) cp: Ordered<()>,
    /// Its doorbell slices that were mapped, by device index: the same pages for every mapping,
    /// and what the GPU reads when a doorbell rings.
    doorbells: Ordered<Vec<(usize, Arc<Backing>)>>,
}

impl KfdProcess {
    pub(crate) fn new(accounts: Arc<Accounts>, pid: u32, may_use: &dyn Fn(u32) -> bool) -> Self {
        let mut pdds = Vec::new();
        for (i, dev) in accounts.devices.iter().enumerate() {
            if !may_use(dev.render_minor) {
                continue;
            }
            let doorbell_index = dev.alloc_doorbell_slice();
            let doorbells = (0..DOORBELLS_PER_PROCESS).map(doorbell_reserved).collect();
            pdds.push(Pdd {
                dev: i,
                user_gpu_id: dev.gpu_id,
                drm: None,
                bos: BTreeMap::new(),
                doorbell_index,
                doorbells,
                queue_count: 0,
                gws_taken: false,
                scratch_va: 0,
                trap: (0, 0),
            });
        }
        let state = ProcState {
            pdds,
            queues: BTreeMap::new(),
            events: BTreeMap::new(),
            signal: None,
            signal_event_count: 0,
            svm: Vec::new(),
            svm_mem: None,
            xnack: false,
            evictions: 0,
            queues_paused: false,
            restore_pending: false,
            svm_restored: Vec::new(),
            smi_clients: Vec::new(),
            mm_released: false,
            runtime: None,
        };
        Self {
            pid,
            accounts,
            state: Ordered::new(rank::PROC_STATE, state),
            events_cv: Condvar::new(),
            engine: Ordered::new(rank::ENGINE_PREEMPTION, ()),
            cp: Ordered::new(rank::CP_PREEMPTION, ()),
            doorbells: Ordered::new(rank::DOORBELLS, Vec::new()),
        }
    }

    /// The doorbell slice of this process on device `dev`, made on its first mapping.
    pub(crate) fn doorbell_page(&self, dev: usize) -> Result<Arc<Backing>, Errno> {
        let mut all = lock(&self.doorbells);
        if let Some((_, page)) = all.iter().find(|(d, _)| *d == dev) {
            return Ok(Arc::clone(page));
        }
        let page = device_page(DOORBELL_SLICE, dev)?;
        all.push((dev, Arc::clone(&page)));
        Ok(page)
    }

    /// The doorbell slice of this process on device `dev`, if it was ever mapped.
    pub(crate) fn mapped_doorbell(&self, dev: usize) -> Option<Arc<Backing>> {
        lock(&self.doorbells)
            .iter()
            .find(|(d, _)| *d == dev)
            .map(|(_, page)| Arc::clone(page))
    }

    /// Locks the process.
    pub(crate) fn lock(&self) -> OrderedGuard<'_, ProcState> {
        lock(&self.state)
    }

    /// Releases the device resources of one BO (accounting).
    pub(crate) fn release_bo(&self, dev: usize, bo: &Bo) {
        if !bo.accounted {
            return;
        }
        let aligned = align_up(bo.size);
        if bo.flags & kfd_sys::KFD_IOC_ALLOC_MEM_FLAGS_VRAM != 0 {
            self.accounts.release_vram(dev, aligned);
        } else if bo.flags
            & (kfd_sys::KFD_IOC_ALLOC_MEM_FLAGS_GTT | kfd_sys::KFD_IOC_ALLOC_MEM_FLAGS_USERPTR)
            != 0
        {
            self.accounts.release_system(aligned);
        }
    }

    /// amdkfd's MMU notifier release (`kfd_process_notifier_release_internal`): the process's mm
    /// is gone, so its queues are destroyed (`kfd_process_dequeue_from_all_devices`,
    /// `pqm_uninit`) and nothing of it runs on the GPU again; a round of the engines in flight
    /// finds its queue gone. Returns whether this call released it (not done before). Does not
    /// wait for that round (the command processor calls it from inside one; see
    /// [`wait_idle`](crate::hw::runlist::wait_idle)).
    pub(crate) fn release_mm(&self) -> bool {
        let mut st = self.lock();
        if st.mm_released {
            return false;
        }
        st.mm_released = true;
        let queues = std::mem::take(&mut st.queues);
        for q in queues.values() {
            self.release_queue(&mut st, q);
        }
        drop(st);
        log::info!(
            "kfd-sim: pid {}: its mm was released: {} queue(s) destroyed, as amdkfd's MMU \
             notifier release does",
            self.pid,
            queues.len()
        );
        true
    }

    /// Whether the process's mm is gone: released before, or the machine's watch
    /// ([`MmWatch`](super::accounts::MmWatch)) says so now, and then it is released here
    /// ([`release_mm`](Self::release_mm)). Asked when the engines could not reach the process's
    /// memory, before they call that a fault of the queue.
    pub(crate) fn mm_gone(&self) -> bool {
        if self.lock().mm_released {
            return true;
        }
        if self.accounts.mm_released(self.pid) {
            self.release_mm();
            return true;
        }
        false
    }

    /// Releases a queue's device resources.
    pub(crate) fn release_queue(&self, st: &mut ProcState, q: &Queue) {
        if let Some(p) = st.pdds.get_mut(q.pdd) {
            p.queue_count = p.queue_count.saturating_sub(1);
            if q.gws {
                p.gws_taken = false;
            }
            if q.kind == QueueKind::Compute {
                if let Some(b) = p.doorbells.get_mut(q.doorbell_id as usize) {
                    *b = false;
                }
            }
            if q.kind != QueueKind::Compute {
                if let Some(d) = self.accounts.devices.get(p.dev) {
                    d.free_sdma(q.kind, q.sdma_id);
                }
            }
        }
    }
}

impl Drop for KfdProcess {
    fn drop(&mut self) {
        let st = self
            .state
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let pdds = std::mem::take(&mut st.pdds);
        let queues = std::mem::take(&mut st.queues);
        for q in queues.values() {
            if q.kind == QueueKind::Compute {
                continue;
            }
            if let Some(d) = pdds
                .get(q.pdd)
                .and_then(|p| self.accounts.devices.get(p.dev))
            {
                d.free_sdma(q.kind, q.sdma_id);
            }
        }
        for p in &pdds {
            for bo in p.bos.values() {
                self.release_bo(p.dev, bo);
                for &d in &bo.mapped {
                    vm_unmap_bo(&pdds, bo, d);
                }
            }
            if let Some(drm) = &p.drm {
                lock(&drm.vm).owner = None;
            }
            if let Some(d) = self.accounts.devices.get(p.dev) {
                d.free_doorbell_slice(p.doorbell_index);
            }
        }
        if log::log_enabled!(log::Level::Info) {
            let used: Vec<String> = self
                .accounts
                .devices
                .iter()
                .map(|d| format!("{:#x}: {}", d.gpu_id, lock(&d.state).vram_used))
                .collect();
            log::info!(
                "kfd-sim: pid {}: KFD process released; VRAM in use: {}",
                self.pid,
                used.join(", ")
            );
        }
    }
}

/// Removes a BO's mapping(s) from the VM of device index `dev` (the pdd of that device).
pub(crate) fn vm_unmap_bo(pdds: &[Pdd], bo: &Bo, dev: usize) {
    if let Some(drm) = pdds
        .iter()
        .find(|p| p.dev == dev)
        .and_then(|p| p.drm.as_ref())
    {
        let mut vm = lock(&drm.vm);
        vm.unmap(bo.va);
        if bo.flags & kfd_sys::KFD_IOC_ALLOC_MEM_FLAGS_AQL_QUEUE_MEM != 0 {
            vm.unmap(bo.va.saturating_add(bo.size));
        }
    }
}

/// Memory domain of a VRAM/GTT BO from its flags (VRAM wins, as in the driver).
pub(crate) fn domain_of(flags: u32) -> Option<Domain> {
    if flags & kfd_sys::KFD_IOC_ALLOC_MEM_FLAGS_VRAM != 0 {
        Some(Domain::Vram)
    } else if flags & kfd_sys::KFD_IOC_ALLOC_MEM_FLAGS_GTT != 0 {
        Some(Domain::Gtt)
    } else {
        None
    }
}
