//! Per-process and per-device state, as amdkfd keeps it: the KFD process (one per simulated mm),
//! its per-device records (pdds) with their IDR of buffer objects, queues, events, SVM ranges and
//! the CRIU state.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use kfd_abi::Errno;

use crate::host::lock;
use crate::host::FileKey;
use crate::hw::backing::{Backing, Domain};
use crate::hw::queue::RingState;
use crate::hw::vm::Vm;
use crate::machine::MachineInner;

use crate::limits::*;

/// The driver-internal queue type (as priv_data records it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueKind {
    /// Compute (PM4 or AQL).
    Compute,
    /// SDMA.
    Sdma,
    /// SDMA on an xGMI engine.
    SdmaXgmi,
}

impl QueueKind {
    /// The internal number (`KFD_QUEUE_TYPE_*`).
    pub fn internal(self) -> u32 {
        match self {
            QueueKind::Compute => 0,
            QueueKind::Sdma => 1,
            QueueKind::SdmaXgmi => 4,
        }
    }

    /// From the internal number.
    pub fn from_internal(v: u32) -> Option<Self> {
        match v {
            0 => Some(QueueKind::Compute),
            1 => Some(QueueKind::Sdma),
            4 => Some(QueueKind::SdmaXgmi),
            _ => None,
        }
    }
}

/// A user queue.
#[derive(Clone, Debug)]
pub struct Queue {
    /// Index of the pdd (device) in the process.
    pub pdd: usize,
    /// Type.
    pub kind: QueueKind,
    /// AQL format (else PM4).
    pub aql: bool,
    /// Ring address.
    pub ring: u64,
    /// Ring size.
    pub ring_size: u64,
    /// Read pointer address.
    pub rptr: u64,
    /// Write pointer address.
    pub wptr: u64,
    /// EOP buffer address.
    pub eop: u64,
    /// EOP buffer size.
    pub eop_size: u32,
    /// Context save/restore area.
    pub ctx: u64,
    /// Context save/restore area size.
    pub ctx_size: u32,
    /// Priority.
    pub priority: u32,
    /// Percentage.
    pub percent: u32,
    /// Doorbell id in the process slice.
    pub doorbell_id: u32,
    /// Absolute doorbell index (dwords) in the device's doorbell BAR.
    pub doorbell_off: u64,
    /// SDMA slot (SDMA queues).
    pub sdma_id: u32,
    /// Whether the queue holds the GWS.
    pub gws: bool,
    /// The MQD.
    pub mqd: Vec<u8>,
    /// The control stack.
    pub ctl_stack: Vec<u8>,
    /// CU mask.
    pub cu_mask: Vec<u32>,
    /// Where the simulated engine is in the ring (SDMA queues).
    pub ring_state: RingState,
}

/// Byte offsets of the fields the simulator keeps in its MQD image (its own layout; the real
/// MQD is opaque to userspace and to the plugin).
pub mod mqd_layout {
    /// Magic header dword.
    pub const MAGIC: usize = 0;
    /// Ring base address.
    pub const RING: usize = 8;
    /// Ring size.
    pub const RING_SIZE: usize = 16;
    /// Doorbell index.
    pub const DOORBELL: usize = 24;
    /// Queue id.
    pub const QUEUE_ID: usize = 32;
    /// Ring read pointer: bytes executed (SDMA queues).
    pub const RPTR: usize = 40;
    /// Ring write pointer: bytes submitted (SDMA queues).
    pub const WPTR: usize = 48;
    /// Magic value of a compute MQD.
    pub const COMPUTE_MAGIC: u32 = 0xC031_0800;
    /// Magic value of an SDMA MQD.
    pub const SDMA_MAGIC: u32 = 0x5D4A_0009;
}

impl Queue {
    /// Whether the queue can run once its process is not evicted: it has a ring and a non-zero
    /// percentage.
    pub fn runnable(&self) -> bool {
        self.ring_size > 0 && self.ring != 0 && self.percent > 0
    }

    /// The ring pointers of a restored SDMA MQD image (zero for anything else: an MQD the
    /// simulator did not write starts its ring afresh).
    pub fn ring_state_from_mqd(&self) -> RingState {
        let u64_at = |off: usize| {
            self.mqd
                .get(off..off + 8)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_le_bytes)
        };
        let magic = self
            .mqd
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes);
        if self.kind == QueueKind::Compute || magic != Some(mqd_layout::SDMA_MAGIC) {
            return RingState::default();
        }
        RingState {
            rptr: u64_at(mqd_layout::RPTR),
            wptr: u64_at(mqd_layout::WPTR),
            doorbell: 0,
            hung: false,
            aql_reported: None,
        }
    }

    /// Writes the fields the simulator tracks into the MQD image.
    pub fn refresh_mqd(&mut self, qid: u32) {
        let magic = match self.kind {
            QueueKind::Compute => mqd_layout::COMPUTE_MAGIC,
            _ => mqd_layout::SDMA_MAGIC,
        };
        let fields: [(usize, &[u8]); 7] = [
            (mqd_layout::MAGIC, &magic.to_le_bytes()),
            (mqd_layout::RING, &self.ring.to_le_bytes()),
            (mqd_layout::RING_SIZE, &self.ring_size.to_le_bytes()),
            (mqd_layout::DOORBELL, &self.doorbell_off.to_le_bytes()),
            (mqd_layout::QUEUE_ID, &qid.to_le_bytes()),
            (mqd_layout::RPTR, &self.ring_state.rptr.to_le_bytes()),
            (mqd_layout::WPTR, &self.ring_state.wptr.to_le_bytes()),
        ];
        for (off, bytes) in fields {
            if let Some(dst) = self.mqd.get_mut(off..off + bytes.len()) {
                dst.copy_from_slice(bytes);
            }
        }
    }
}

/// State of a waiter on an event.
pub mod waiter {
    /// Still waiting.
    pub const WAITING: u8 = 0;
    /// The event fired.
    pub const ACTIVATED: u8 = 1;
    /// The event was destroyed.
    pub const GONE: u8 = 2;
}

/// One event.
#[derive(Debug)]
pub struct Event {
    /// `KFD_IOC_EVENT_*`.
    pub ty: u32,
    /// Auto-reset.
    pub auto_reset: bool,
    /// Signaled.
    pub signaled: bool,
    /// Current waiters.
    pub waiters: Vec<Arc<AtomicU8>>,
    /// Memory / HW exception data (32 bytes, as in the event record).
    pub exception: [u8; 32],
}

impl Event {
    /// Signal or debug events use signal slots.
    pub fn is_signal(ty: u32) -> bool {
        ty == kfd_sys::KFD_IOC_EVENT_SIGNAL || ty == kfd_sys::KFD_IOC_EVENT_DEBUG_EVENT
    }

    /// `set_event`: wakes the waiters; an auto-reset event with waiters stays unsignaled.
    pub fn set(&mut self) {
        self.signaled = !self.auto_reset || self.waiters.is_empty();
        for w in self.waiters.drain(..) {
            w.store(waiter::ACTIVATED, Ordering::SeqCst);
        }
    }
}

/// The signal page: the BO userspace gave with its first CREATE_EVENT, or the kernel's own.
#[derive(Debug)]
pub struct SignalPage {
    /// The BO handle (0 for the kernel's own page).
    pub handle: u64,
    /// The BO's memory, to write slot values into.
    pub backing: Option<Arc<Backing>>,
    /// Number of slots.
    pub slots: u32,
}

/// Per-GPU access of an SVM range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SvmAccess {
    /// No access.
    None,
    /// Access (may migrate).
    Access,
    /// Access in place.
    InPlace,
}

/// An SVM range with its attributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SvmRange {
    /// Start address (bytes, page aligned).
    pub start: u64,
    /// Size (bytes, pages).
    pub size: u64,
    /// Preferred location (gpu_id, 0 sysmem, 0xffffffff undefined).
    pub preferred: u32,
    /// Prefetch location.
    pub prefetch: u32,
    /// `KFD_IOCTL_SVM_FLAG_*`.
    pub flags: u32,
    /// Migration granularity (log2 pages).
    pub granularity: u32,
    /// Access per pdd index.
    pub access: Vec<SvmAccess>,
}

impl SvmRange {
    /// The end address (exclusive).
    pub fn end(&self) -> u64 {
        self.start.saturating_add(self.size)
    }
}

/// One buffer object.
#[derive(Debug)]
pub struct Bo {
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
pub struct DrmBinding {
    /// Identity of the render-node open file.
    pub key: FileKey,
    /// Its VM.
    pub vm: Arc<Mutex<Vm>>,
}

/// A per-device record of a process.
#[derive(Debug)]
pub struct Pdd {
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
    pub fn free_idr(&self) -> Option<u32> {
        (0..=u32::MAX).find(|i| !self.bos.contains_key(i))
    }
}

/// gfx9 reserved doorbell ids (the SDMA/IH range and its mirror).
pub fn doorbell_reserved(id: u32) -> bool {
    (id & 0x1e0) == 0x0e0
}

/// The doorbell id of an SDMA queue: engine base, odd queues in the mirror half.
pub fn sdma_doorbell_id(engine: u32, queue: u32) -> u32 {
    0xe0 + engine.saturating_mul(4) + (queue & 1) * 512 + (queue >> 1)
}

/// An SVM range read at RESTORE: start, size, attributes `(type, value)`.
pub type RestoredSvm = (u64, u64, Vec<(u32, u32)>);

/// All state of a KFD process.
#[derive(Debug)]
pub struct ProcState {
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
}

impl ProcState {
    /// The pdd index whose user gpu_id is `id` (`kfd_process_device_data_by_id`).
    pub fn pdd_by_user_id(&self, id: u32) -> Option<usize> {
        if id == 0 {
            return None;
        }
        self.pdds.iter().position(|p| p.user_gpu_id == id)
    }

    /// `kfd_bind_process_to_device`: ENODEV without an acquired VM.
    pub fn bind(&self, pi: usize) -> Result<&DrmBinding, Errno> {
        self.pdds
            .get(pi)
            .and_then(|p| p.drm.as_ref())
            .ok_or(Errno::ENODEV)
    }

    /// BOs that CRIU saves (VA above the GPUVM base).
    pub fn criu_bo_count(&self) -> usize {
        self.pdds
            .iter()
            .map(|p| p.bos.values().filter(|b| b.va > GPUVM_BASE).count())
            .sum()
    }

    /// Whether the range `[start, end)` overlaps an SVM range.
    pub fn svm_overlaps(&self, start: u64, end: u64) -> bool {
        self.svm.iter().any(|r| r.start < end && start < r.end())
    }
}

/// A KFD process: one per simulated mm.
#[derive(Debug)]
pub struct KfdProcess {
    /// Simulated pid of the owner.
    pub pid: u32,
    pub(crate) machine: Arc<MachineInner>,
    pub(crate) state: Mutex<ProcState>,
    /// Signalled on SET_EVENT and DESTROY_EVENT.
    pub(crate) events_cv: Condvar,
    /// Held by the simulated SDMA engine while it runs this process's queues: taken once after
    /// the queues are evicted, it waits for the packet in flight (a queue preemption).
    pub(crate) engine: Mutex<()>,
}

impl KfdProcess {
    pub(crate) fn new(machine: Arc<MachineInner>, pid: u32, may_use: &dyn Fn(u32) -> bool) -> Self {
        let mut pdds = Vec::new();
        for (i, dev) in machine.devices.iter().enumerate() {
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
            xnack: false,
            evictions: 0,
            queues_paused: false,
            restore_pending: false,
            svm_restored: Vec::new(),
            smi_clients: Vec::new(),
        };
        Self {
            pid,
            machine,
            state: Mutex::new(state),
            events_cv: Condvar::new(),
            engine: Mutex::new(()),
        }
    }

    /// Locks the process.
    pub(crate) fn lock(&self) -> MutexGuard<'_, ProcState> {
        lock(&self.state)
    }

    /// Releases the device resources of one BO (accounting).
    pub(crate) fn release_bo(&self, dev: usize, bo: &Bo) {
        if !bo.accounted {
            return;
        }
        let aligned = align_up(bo.size);
        if bo.flags & kfd_sys::KFD_IOC_ALLOC_MEM_FLAGS_VRAM != 0 {
            if let Some(d) = self.machine.devices.get(dev) {
                let mut s = lock(&d.state);
                s.vram_used = s.vram_used.saturating_sub(aligned);
            }
        } else if bo.flags
            & (kfd_sys::KFD_IOC_ALLOC_MEM_FLAGS_GTT | kfd_sys::KFD_IOC_ALLOC_MEM_FLAGS_USERPTR)
            != 0
        {
            self.machine.release_system(aligned);
        }
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
                if let Some(d) = self.machine.devices.get(p.dev) {
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
                .and_then(|p| self.machine.devices.get(p.dev))
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
            if let Some(d) = self.machine.devices.get(p.dev) {
                d.free_doorbell_slice(p.doorbell_index);
            }
        }
        self.machine.forget_process(self.pid);
        if log::log_enabled!(log::Level::Info) {
            let used: Vec<String> = self
                .machine
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
pub fn vm_unmap_bo(pdds: &[Pdd], bo: &Bo, dev: usize) {
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
pub fn domain_of(flags: u32) -> Option<Domain> {
    if flags & kfd_sys::KFD_IOC_ALLOC_MEM_FLAGS_VRAM != 0 {
        Some(Domain::Vram)
    } else if flags & kfd_sys::KFD_IOC_ALLOC_MEM_FLAGS_GTT != 0 {
        Some(Domain::Gtt)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_doorbells_are_the_sdma_window_and_its_mirror() {
        assert!(doorbell_reserved(0xe0) && doorbell_reserved(0xff) && doorbell_reserved(0x2e0));
        assert!(!doorbell_reserved(0) && !doorbell_reserved(0x100) && !doorbell_reserved(0x1e0));
        for e in 0..8 {
            for q in 0..8 {
                assert!(doorbell_reserved(sdma_doorbell_id(e, q)));
            }
        }
    }
}
