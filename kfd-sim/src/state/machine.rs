//! The simulated machine: its GPUs (from a [`Topology`]), the registry of simulated open files and
//! dma-bufs, the KFD processes by pid, and ptrace relations.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Weak};

use kfd_abi::Errno;
use topology::model::keys;
use topology::Topology;

use super::accounts::{Accounts, MmWatch};
use super::device::{Device, DeviceState};
use super::process::KfdProcess;
use super::render_file::{Gem, RenderFile};
use crate::host::{lock, FileKey};
use crate::hw::backing::Backing;
use crate::lock_order::{rank, Ordered};

/// Why a machine could not be built from a topology.
#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    /// A GPU node lacks something the simulator needs.
    #[error("GPU node {node} (gpu_id {gpu_id:#x}): {what}")]
    BadGpu {
        /// Node id.
        node: u32,
        /// gpu_id.
        gpu_id: u32,
        /// What is missing.
        what: &'static str,
    },
    /// The preset is invalid.
    #[error(transparent)]
    Preset(#[from] crate::preset::PresetError),
}

/// Which Linux kernel the simulated drivers behave as.
///
/// Linux 6.1 (Debian bookworm's, the default) is the specification the simulator was written
/// from. Linux 6.18 adds what checkpoint/restore of render-node buffers and of dma-bufs shared
/// between processes needs (upstream CRIU's development branch uses it): on render nodes
/// `AMDGPU_GEM_LIST_HANDLES`, `AMDGPU_GEM_OP`'s `GET_MAPPING_INFO` (with the op's 24-byte
/// argument and its `padding` check) and `DRM_IOCTL_GEM_CHANGE_HANDLE`; on `/dev/kfd` the KFD
/// interface version 1.18, `AMDKFD_IOC_EXPORT_DMABUF` (KFD 1.12) and `RUNTIME_ENABLE` (1.13).
/// Linux 7.2 (Debian forky's) is 6.18 with KFD 1.23 and amdgpu 3.64, and
/// `DRM_IOCTL_GEM_CHANGE_HANDLE` answered `EINVAL` (`drm_invalid_op`), as every kernel fixed in
/// June 2026 answers it (7.1-rc7, 7.0.13, 6.18.36). What else changed since 6.1 is not
/// simulated: KFD's debugger ioctl (1.13), secondary contexts (1.19) and profiler (1.23) are
/// logged once and answered `ENOTTY`, the other new DRM ioctls `EINVAL`, as numbers without a
/// function.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// Linux 6.1: KFD 1.11, no GEM handle listing.
    #[default]
    Linux6_1,
    /// Linux 6.18: KFD 1.18, GEM handle listing, mapping info and handle change.
    Linux6_18,
    /// Linux 7.2: KFD 1.23, GEM handle listing and mapping info; handle change refused.
    Linux7_2,
}

impl Kernel {
    /// The KFD interface version the kernel's GET_VERSION reports.
    pub fn kfd_version(self) -> kfd_abi::kfd::Version {
        match self {
            Kernel::Linux6_1 => kfd_abi::kfd::Version {
                major: kfd_sys::KFD_IOCTL_MAJOR_VERSION,
                minor: kfd_sys::KFD_IOCTL_MINOR_VERSION,
            },
            Kernel::Linux6_18 => kfd_abi::kfd::Version {
                major: 1,
                minor: 18,
            },
            Kernel::Linux7_2 => kfd_abi::kfd::Version {
                major: 1,
                minor: 23,
            },
        }
    }

    /// The amdgpu DRM driver's version (`KMS_DRIVER_MAJOR.MINOR`; 3.65 added
    /// `GEM_LIST_HANDLES` and `GET_MAPPING_INFO`).
    pub fn drm_version(self) -> (i32, i32) {
        match self {
            Kernel::Linux6_1 => (3, 49),
            Kernel::Linux6_18 => (3, 65),
            // 7.2's amdgpu_drv.c: KMS_DRIVER_MINOR 64 (3.64: user queue IP query).
            Kernel::Linux7_2 => (3, 64),
        }
    }

    /// Whether the kernel has 6.18's render-node checkpoint ioctls (handle listing, mapping
    /// info) and KFD's dma-buf export and runtime enable.
    pub fn has_gem_listing(self) -> bool {
        self != Kernel::Linux6_1
    }
}

impl std::fmt::Display for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kernel::Linux6_1 => "6.1",
            Kernel::Linux6_18 => "6.18",
            Kernel::Linux7_2 => "7.2",
        })
    }
}

impl std::str::FromStr for Kernel {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "6.1" => Ok(Kernel::Linux6_1),
            "6.18" => Ok(Kernel::Linux6_18),
            "7.2" => Ok(Kernel::Linux7_2),
            other => Err(format!(
                "unknown kernel {other:?}: the simulator is Linux 6.1, 6.18 or 7.2"
            )),
        }
    }
}

/// What a simulated open file is.
#[derive(Debug)]
pub(crate) enum FileKind {
    /// `/dev/kfd`, bound to the opener's KFD process.
    Kfd(Arc<KfdProcess>),
    /// `/dev/dri/renderD<minor>`.
    Render(RenderFile),
}

/// A simulated open file (`struct file`).
#[derive(Debug)]
pub(crate) struct OpenFile {
    pub key: FileKey,
    pub kind: FileKind,
}

#[derive(Debug, Default)]
struct Registry {
    next_pid: u32,
    processes: HashMap<u32, Weak<KfdProcess>>,
    files: HashMap<FileKey, Weak<OpenFile>>,
    dmabufs: HashMap<FileKey, Weak<Backing>>,
    /// The GEM object of each dma-buf of a GPU's memory, once one exists: importing a dma-buf
    /// of the same device gives this object again, as amdgpu's self-import does.
    gems: HashMap<FileKey, Weak<Gem>>,
    tracers: HashMap<u32, u32>,
    locked: bool,
}

/// The machine's state; shared by every front-end object.
#[derive(Debug)]
pub(crate) struct MachineInner {
    pub(crate) topology: Topology,
    /// The GPUs (the same list as the accounts').
    pub(crate) devices: Arc<[Device]>,
    /// What the kernel's objects settle with the machine: held by KFD processes and GEM objects.
    pub(crate) accounts: Arc<Accounts>,
    /// What GET_VERSION reports, `major << 32 | minor` (1.11 unless told otherwise).
    kfd_version: std::sync::atomic::AtomicU64,
    /// The kernel the drivers behave as (`Kernel as u8`).
    kernel: std::sync::atomic::AtomicU8,
    /// CPU time the SDMA engines of the machine used (for benchmarks).
    pub(crate) engine: crate::hw::sdma::EngineTime,
    /// The GTT size of every GPU (`amdgpu_ttm_init`).
    gtt_size: u64,
    /// The client requests the simulator does not answer that it has logged (once each).
    unanswered: Ordered<BTreeSet<String>>,
    /// The queue scheduler: its engine thread runs the user-mode queues.
    pub(crate) scheduler: crate::hw::scheduler::Scheduler,
    /// The command processors: a thread per GPU runs the AQL queues.
    pub(crate) cp: crate::hw::cp::CommandProcessors,
    reg: Ordered<Registry>,
    /// The engine that died, if one did: the machine is wedged (see [`Self::wedge`]).
    wedged: std::sync::OnceLock<String>,
}

impl MachineInner {
    pub(crate) fn new(topology: Topology) -> Result<Self, MachineError> {
        let mut devices = Vec::new();
        for n in topology.gpus() {
            let bad = |what| MachineError::BadGpu {
                node: n.id,
                gpu_id: n.gpu_id,
                what,
            };
            let (large_bar, vram_size) =
                n.vram().ok_or_else(|| bad("no frame buffer memory bank"))?;
            if n.gpu_id > 0xffff {
                return Err(bad("gpu_id does not fit the 16-bit mmap offset field"));
            }
            let p32 = |k: &str| u32::try_from(n.prop(k)).unwrap_or(u32::MAX);
            let qpe = p32(keys::NUM_SDMA_QUEUES_PER_ENGINE).min(64);
            let sdma_engines = p32(keys::NUM_SDMA_ENGINES).min(64);
            let xgmi_sdma_engines = p32(keys::NUM_SDMA_XGMI_ENGINES).min(64);
            let slots = |engines: u32| vec![false; (engines * qpe) as usize];
            devices.push(Device {
                gpu_id: n.gpu_id,
                render_minor: n.render_minor(),
                gfx_target_version: p32(keys::GFX_TARGET_VERSION),
                vram_size,
                large_bar,
                sdma_engines,
                xgmi_sdma_engines,
                num_gws: p32(keys::NUM_GWS),
                state: Ordered::new(
                    rank::DEVICE_STATE,
                    DeviceState {
                        vram_used: 0,
                        sdma_used: slots(sdma_engines),
                        xgmi_sdma_used: slots(xgmi_sdma_engines),
                        doorbell_slices: BTreeSet::new(),
                        next_mmap_offset: crate::limits::DRM_FILE_PAGE_OFFSET_START,
                    },
                ),
                dma: crate::hw::sdma::Engines::new(sdma_engines.saturating_add(xgmi_sdma_engines)),
                mmio: Ordered::new(rank::DEVICE_MMIO, None),
            });
        }
        // The KFD system memory limit: 15/16 of system RAM.
        let ram: u64 = topology
            .cpus()
            .flat_map(|n| n.mem_banks.iter())
            .map(|b| b.size_in_bytes())
            .fold(0u64, u64::saturating_add);
        let system_limit = ram / 16 * 15;
        let gtt_size = crate::sysfs::gtt_size(&topology);
        let devices: Arc<[Device]> = devices.into();
        let accounts = Arc::new(Accounts::new(Arc::clone(&devices), system_limit));
        Ok(Self {
            topology,
            devices,
            accounts,
            gtt_size,
            unanswered: Ordered::new(rank::UNANSWERED, BTreeSet::new()),
            scheduler: crate::hw::scheduler::Scheduler::default(),
            cp: crate::hw::cp::CommandProcessors::default(),
            kfd_version: std::sync::atomic::AtomicU64::new(
                u64::from(kfd_sys::KFD_IOCTL_MAJOR_VERSION) << 32
                    | u64::from(kfd_sys::KFD_IOCTL_MINOR_VERSION),
            ),
            engine: crate::hw::sdma::EngineTime::default(),
            kernel: std::sync::atomic::AtomicU8::new(0),
            reg: Ordered::new(
                rank::REGISTRY,
                Registry {
                    next_pid: 1000,
                    ..Registry::default()
                },
            ),
            wedged: std::sync::OnceLock::new(),
        })
    }

    /// Marks the machine wedged: engine `engine` died and runs nothing any more. The first
    /// engine named stays.
    pub(crate) fn wedge(&self, engine: &str) {
        let _ = self.wedged.set(engine.to_owned());
    }

    /// The engine whose death wedged the machine, if one did.
    pub(crate) fn wedged(&self) -> Option<&str> {
        self.wedged.get().map(String::as_str)
    }

    /// The KFD ioctl interface version GET_VERSION reports.
    pub(crate) fn kfd_version(&self) -> kfd_abi::kfd::Version {
        let v = self.kfd_version.load(std::sync::atomic::Ordering::Relaxed);
        kfd_abi::kfd::Version {
            major: (v >> 32) as u32,
            minor: (v & 0xffff_ffff) as u32,
        }
    }

    /// Makes GET_VERSION report `v` (an older or newer kernel); nothing else changes.
    pub(crate) fn set_kfd_version(&self, v: kfd_abi::kfd::Version) {
        let packed = u64::from(v.major) << 32 | u64::from(v.minor);
        self.kfd_version
            .store(packed, std::sync::atomic::Ordering::Relaxed);
    }

    /// The kernel the drivers behave as.
    pub(crate) fn kernel(&self) -> Kernel {
        match self.kernel.load(std::sync::atomic::Ordering::Relaxed) {
            0 => Kernel::Linux6_1,
            1 => Kernel::Linux6_18,
            _ => Kernel::Linux7_2,
        }
    }

    /// Makes the drivers behave as `kernel`, GET_VERSION included.
    pub(crate) fn set_kernel(&self, kernel: Kernel) {
        let v = match kernel {
            Kernel::Linux6_1 => 0,
            Kernel::Linux6_18 => 1,
            Kernel::Linux7_2 => 2,
        };
        self.kernel.store(v, std::sync::atomic::Ordering::Relaxed);
        self.set_kfd_version(kernel.kfd_version());
    }

    pub(crate) fn device_by_gpu_id(&self, gpu_id: u32) -> Option<usize> {
        self.devices.iter().position(|d| d.gpu_id == gpu_id)
    }

    pub(crate) fn new_pid(&self) -> u32 {
        let mut r = lock(&self.reg);
        r.next_pid = r.next_pid.wrapping_add(1).max(1000);
        r.next_pid
    }

    /// Makes later [`new_pid`](Self::new_pid)s skip `pid`.
    pub(crate) fn reserve_pid(&self, pid: u32) {
        let mut r = lock(&self.reg);
        r.next_pid = r.next_pid.max(pid);
    }

    /// A new KFD process (pdds on every GPU whose render minor `may_use` allows: the caller's
    /// device cgroup) for a new process `pid`, even if the KFD process of an earlier holder
    /// of that pid is still alive (its files not all released yet): the kernel keys KFD
    /// processes on the mm, so a new process never inherits a dead one's. Lookups by pid find
    /// the new one from now on.
    pub(crate) fn new_kfd_process(
        self: &Arc<Self>,
        pid: u32,
        may_use: &dyn Fn(u32) -> bool,
    ) -> Result<Arc<KfdProcess>, Errno> {
        let mut r = lock(&self.reg);
        if r.locked {
            return Err(Errno::EAGAIN);
        }
        if r.processes.get(&pid).is_some_and(|w| w.strong_count() > 0) {
            log::debug!("kfd-sim: pid {pid}: a new process while the old one's files linger");
        }
        let p = Arc::new(KfdProcess::new(Arc::clone(&self.accounts), pid, may_use));
        // The entries of processes gone are dropped here, as those of files and dma-bufs are.
        r.processes.retain(|_, w| w.strong_count() > 0);
        r.processes.insert(pid, Arc::downgrade(&p));
        Ok(p)
    }

    /// Every live KFD process.
    pub(crate) fn processes(&self) -> Vec<Arc<KfdProcess>> {
        lock(&self.reg)
            .processes
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// The live KFD process of `pid`, if any.
    pub(crate) fn find_process(&self, pid: u32) -> Option<Arc<KfdProcess>> {
        lock(&self.reg).processes.get(&pid).and_then(Weak::upgrade)
    }

    pub(crate) fn register_file(&self, file: &Arc<OpenFile>) {
        let mut r = lock(&self.reg);
        r.files.retain(|_, w| w.strong_count() > 0);
        r.files.insert(file.key, Arc::downgrade(file));
    }

    /// Every live simulated open file.
    pub(crate) fn files(&self) -> Vec<Arc<OpenFile>> {
        lock(&self.reg)
            .files
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }

    pub(crate) fn file(&self, key: FileKey) -> Option<Arc<OpenFile>> {
        lock(&self.reg).files.get(&key).and_then(Weak::upgrade)
    }

    pub(crate) fn register_dmabuf(&self, b: &Arc<Backing>) {
        let mut r = lock(&self.reg);
        r.dmabufs.retain(|_, w| w.strong_count() > 0);
        r.dmabufs.insert(b.key(), Arc::downgrade(b));
    }

    pub(crate) fn dmabuf(&self, key: FileKey) -> Option<Arc<Backing>> {
        lock(&self.reg).dmabufs.get(&key).and_then(Weak::upgrade)
    }

    /// Records `gem` as the GEM object of its memory's dma-bufs.
    pub(crate) fn register_gem(&self, key: FileKey, gem: &Arc<Gem>) {
        let mut r = lock(&self.reg);
        r.gems.retain(|_, w| w.strong_count() > 0);
        r.gems.insert(key, Arc::downgrade(gem));
    }

    /// The GEM object of the memory whose dma-buf has identity `key`, if one exists.
    pub(crate) fn gem(&self, key: FileKey) -> Option<Arc<Gem>> {
        lock(&self.reg).gems.get(&key).and_then(Weak::upgrade)
    }

    pub(crate) fn tracer_of(&self, pid: u32) -> Option<u32> {
        lock(&self.reg).tracers.get(&pid).copied()
    }

    pub(crate) fn set_tracer(&self, tracee: u32, tracer: Option<u32>) {
        let mut r = lock(&self.reg);
        match tracer {
            Some(t) => r.tracers.insert(tracee, t),
            None => r.tracers.remove(&tracee),
        };
    }

    pub(crate) fn set_locked(&self, locked: bool) {
        lock(&self.reg).locked = locked;
    }

    /// Charges `size` bytes of system memory (GTT, userptr); ENOMEM past the limit.
    pub(crate) fn reserve_system(&self, size: u64) -> Result<(), Errno> {
        self.accounts.reserve_system(size)
    }

    pub(crate) fn release_system(&self, size: u64) {
        self.accounts.release_system(size);
    }

    /// System memory charged to GTT and userptr BOs (what `AMDGPU_INFO_GTT_USAGE` reports).
    pub(crate) fn system_used(&self) -> u64 {
        self.accounts.system_used()
    }

    /// The GTT size of each GPU: half the system memory, at least 3 GiB.
    pub(crate) fn gtt_size(&self) -> u64 {
        self.gtt_size
    }

    /// Notes a client request the simulator does not answer (named as the kernel names it): the
    /// first time on this machine it is logged as a warning, later only at debug level, so that
    /// what AMD's userspace asks for and does not get shows once in the daemon's log.
    pub(crate) fn unanswered(&self, what: &str) {
        self.log_once(what, &format!("not simulated: {what}"));
    }

    /// Sets (or, with `None`, drops) who reports the release of clients' mms.
    pub(crate) fn set_mm_watch(&self, watch: Option<Arc<dyn MmWatch>>) {
        self.accounts.set_mm_watch(watch);
    }

    /// The keys of what [`log_once`](Self::log_once) has logged on this machine, in order.
    pub(crate) fn logged_once(&self) -> Vec<String> {
        lock(&self.unanswered).iter().cloned().collect()
    }

    /// Logs `message` as a warning the first time `key` is seen on this machine, later at debug
    /// level.
    pub(crate) fn log_once(&self, key: &str, message: &str) {
        let first = lock(&self.unanswered).insert(key.to_owned());
        if first {
            log::warn!("kfd-sim: {message} (logged once)");
        } else {
            log::debug!("kfd-sim: {message}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::accounts::MmWatch;

    /// A watch that reports the mms of `released` torn down, and counts the questions.
    #[derive(Debug)]
    struct Watch {
        released: Vec<u32>,
        asked: std::sync::atomic::AtomicU32,
    }

    impl MmWatch for Watch {
        fn released(&self, pid: u32) -> bool {
            self.asked
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.released.contains(&pid)
        }
    }

    fn machine() -> Arc<MachineInner> {
        let preset = crate::Preset::by_name("mi210x2").unwrap();
        Arc::new(MachineInner::new(preset.to_topology().unwrap()).unwrap())
    }

    #[test]
    fn a_process_whose_mm_the_watch_reports_released_is_released_once() {
        let m = machine();
        let watch = Arc::new(Watch {
            released: vec![77],
            asked: 0.into(),
        });
        let p = m.new_kfd_process(77, &|_| true).unwrap();
        assert!(!p.mm_gone(), "no watch: nothing is known of any mm");
        m.set_mm_watch(Some(watch.clone()));
        assert!(p.mm_gone());
        assert!(p.lock().mm_released);
        assert!(p.mm_gone(), "still gone");
        assert!(!p.release_mm(), "released before");
        assert_eq!(
            watch.asked.load(std::sync::atomic::Ordering::Relaxed),
            1,
            "once released, the watch is not asked again"
        );
    }

    #[test]
    fn a_live_process_the_watch_does_not_report_keeps_its_queues() {
        let m = machine();
        let watch = Arc::new(Watch {
            released: vec![77],
            asked: 0.into(),
        });
        m.set_mm_watch(Some(watch.clone()));
        // This test's own process: alive, with mappings, so the watch is asked once.
        let me = std::process::id();
        let p = m.new_kfd_process(me, &|_| true).unwrap();
        assert!(!p.mm_gone());
        assert!(!p.lock().mm_released);
        assert_eq!(watch.asked.load(std::sync::atomic::Ordering::Relaxed), 1);
        m.set_mm_watch(None);
        assert!(!m.accounts.mm_released(77), "no watch any more");
    }

    #[test]
    fn a_new_process_never_inherits_a_dead_holders_kfd_process() {
        let preset = crate::Preset::by_name("mi210x2").unwrap();
        let m = Arc::new(MachineInner::new(preset.to_topology().unwrap()).unwrap());
        // The old holder of pid 77 is gone, but one of its files still holds its KFD process.
        let old = m.new_kfd_process(77, &|_| true).unwrap();
        let new = m.new_kfd_process(77, &|_| true).unwrap();
        assert!(!Arc::ptr_eq(&old, &new));
        assert!(Arc::ptr_eq(&m.find_process(77).unwrap(), &new));
        // The old one's last file goes: the new one stays registered.
        drop(old);
        assert!(Arc::ptr_eq(&m.find_process(77).unwrap(), &new));
        drop(new);
        assert!(m.find_process(77).is_none());
    }
}
