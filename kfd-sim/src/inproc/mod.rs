//! The in-process front end: a [`Machine`] with simulated processes whose open files are
//! [`SimFile`]s, implementing `kfd_abi::Transport`, so code written against `kfd-abi` runs
//! unchanged on the simulator.
//!
//! Every simulated open file is backed by a real fd (a memfd placeholder): its inode names the
//! simulated file in the machine's registry, so fds passed inside ioctl arguments (`ACQUIRE_VM`'s
//! `drm_fd`, the device buckets of `CRIU_OP(RESTORE)`) are real fd numbers that the dispatcher
//! resolves through the caller, as the kernel's `fget` does. All simulated processes share this
//! OS process's fd table and memory.

use std::collections::BTreeSet;
use std::ffi::c_void;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use kfd_abi::{Errno, Transport};
use topology::Topology;

pub(crate) mod client;
mod platform;
mod vmas;

pub use platform::SimPlatform;
pub use vmas::DeviceVma;

use self::client::InProcessClient;
use self::vmas::{DeviceVmas, VmaRecord};
use crate::host::{self, lock};
use crate::hw::backing::ProcessMemory;
use crate::lock_order::{rank, Ordered};
use crate::preset::Preset;
use crate::state::machine::{FileKind, MachineError, MachineInner, OpenFile};
use crate::state::process::KfdProcess;
use crate::state::render_file::RenderFile;

/// A simulated machine: GPUs from a topology, and the simulated processes using them.
#[derive(Clone, Debug)]
pub struct Machine {
    inner: Arc<MachineInner>,
    /// The device mappings its processes made (see [`SimProcess::device_vmas`]).
    vmas: Arc<DeviceVmas>,
}

impl Machine {
    /// A machine described by a preset.
    pub fn new(preset: &Preset) -> Result<Self, MachineError> {
        Self::from_topology(preset.to_topology()?)
    }

    /// A machine whose GPUs are the GPU nodes of `topology` (a preset's, or a parsed real one).
    pub fn from_topology(topology: Topology) -> Result<Self, MachineError> {
        Ok(Self {
            inner: Arc::new(MachineInner::new(topology)?),
            vmas: Arc::default(),
        })
    }

    /// Makes GET_VERSION report KFD interface `version` (as an older or newer kernel would); the
    /// simulated driver is otherwise unchanged (1.11).
    pub fn set_kfd_version(&self, version: kfd_abi::kfd::Version) {
        self.inner.set_kfd_version(version);
    }

    /// Makes the simulated drivers behave as `kernel` (Linux 6.1 by default; see
    /// [`Kernel`](crate::Kernel)), GET_VERSION included.
    pub fn set_kernel(&self, kernel: crate::state::machine::Kernel) {
        self.inner.set_kernel(kernel);
    }

    /// The kernel the simulated drivers behave as.
    pub fn kernel(&self) -> crate::state::machine::Kernel {
        self.inner.kernel()
    }

    /// The topology the machine was built from (what its sysfs tree shows).
    pub fn topology(&self) -> &Topology {
        &self.inner.topology
    }

    /// CPU time (user and system, of the threads that submitted) the simulated SDMA engines have
    /// spent executing command submissions on this machine so far: what the GPU does on hardware,
    /// apart from the CPU work of the program that submitted.
    pub fn engine_cpu_time(&self) -> std::time::Duration {
        self.inner.engine.cpu_time()
    }

    /// The gpu_ids of its GPUs, in node order.
    pub fn gpu_ids(&self) -> Vec<u32> {
        self.inner.devices.iter().map(|d| d.gpu_id).collect()
    }

    /// The render minors of its GPUs, in node order.
    pub fn render_minors(&self) -> Vec<u32> {
        self.inner.devices.iter().map(|d| d.render_minor).collect()
    }

    /// A new simulated process (a new mm) with a fresh pid, privileged
    /// (CAP_CHECKPOINT_RESTORE) by default.
    pub fn spawn_process(&self) -> SimProcess {
        self.process_with_pid(self.inner.new_pid())
    }

    /// A new simulated process with pid `pid`, as criu restores a process under its old pid;
    /// later fresh pids are above it. The caller makes sure that no live process has it.
    pub fn spawn_process_as(&self, pid: u32) -> SimProcess {
        self.inner.reserve_pid(pid);
        self.process_with_pid(pid)
    }

    fn process_with_pid(&self, pid: u32) -> SimProcess {
        SimProcess {
            inner: Arc::new(ProcInner {
                machine: self.clone(),
                caller: Arc::new(Caller {
                    pid,
                    capable: AtomicBool::new(true),
                    devices: Ordered::new(rank::CALLER_DEVICES, None),
                    signal: AtomicBool::new(false),
                }),
                kfd: Ordered::new(rank::PROC_KFD, None),
            }),
        }
    }

    /// The simulated open file that a real fd of this OS process stands for, if any.
    fn file_of(&self, fd: BorrowedFd<'_>) -> Option<Arc<OpenFile>> {
        self.inner.file(host::file_key(fd).ok()?)
    }

    /// Simulates the KFD lock held during suspend/reset: opens of `/dev/kfd` fail with `EAGAIN`.
    pub fn set_kfd_locked(&self, locked: bool) {
        self.inner.set_locked(locked);
    }

    /// What the machine has logged once (as a warning) so far, by the name it gave each: the
    /// client requests it does not answer (`DRM_IOCTL_SYNCOBJ_CREATE`), foreign ones it names
    /// (`AMDKFD_IOC_DBG_TRAP (KFD 1.13)`) and those no table names, by request code
    /// (`/dev/kfd _IOWR('K', 0x30, 8 bytes)`).
    pub fn logged_once(&self) -> Vec<String> {
        self.inner.logged_once()
    }

    /// Whether a KFD process exists for simulated pid `pid`.
    pub fn has_kfd_process(&self, pid: u32) -> bool {
        self.inner.find_process(pid).is_some()
    }

    /// Whether the KFD process of `pid` has its queues paused by a checkpoint (`None`: no such
    /// process), for tests.
    pub fn queues_paused(&self, pid: u32) -> Option<bool> {
        self.inner.find_process(pid).map(|p| p.lock().queues_paused)
    }

    /// The GPUs of the KFD process of `pid` as `(user gpu id, actual gpu id)` pairs, in the
    /// driver's pdd order (`None`: no such process), for tests. The user id is the one the
    /// process names the GPU by (its image's id after a restore); no ioctl reports it, as
    /// GET_PROCESS_APERTURES(_NEW) report the actual ids.
    pub fn process_gpus(&self, pid: u32) -> Option<Vec<(u32, u32)>> {
        let p = self.inner.find_process(pid)?;
        let st = p.lock();
        Some(
            st.pdds
                .iter()
                .map(|pdd| {
                    let actual = self.inner.devices.get(pdd.dev).map_or(0, |d| d.gpu_id);
                    (pdd.user_gpu_id, actual)
                })
                .collect(),
        )
    }

    /// The doorbell at byte `offset` of the doorbell slice of simulated process `pid` on GPU
    /// `gpu_id`, as the GPU sees it (the last value written through a mapping of the slice);
    /// `None` when the process has no KFD process or never mapped that slice.
    pub fn doorbell(&self, pid: u32, gpu_id: u32, offset: u64) -> Option<u64> {
        let p = self.inner.find_process(pid)?;
        let dev = self.inner.device_by_gpu_id(gpu_id)?;
        let page = p.mapped_doorbell(dev)?;
        let mut b = [0u8; 8];
        page.read(offset, &mut b).then(|| u64::from_le_bytes(b))
    }

    /// VRAM in use on the GPU `gpu_id` (bytes), for tests.
    pub fn vram_used(&self, gpu_id: u32) -> Option<u64> {
        let d = self
            .inner
            .devices
            .get(self.inner.device_by_gpu_id(gpu_id)?)?;
        Some(lock(&d.state).vram_used)
    }
}

#[derive(Debug)]
struct Caller {
    pid: u32,
    capable: AtomicBool,
    /// The render minors its device cgroup lets it use; `None`: every device.
    devices: Ordered<Option<BTreeSet<u32>>>,
    /// A signal is pending (see [`SimProcess::signal`]).
    signal: AtomicBool,
}

impl Caller {
    /// `devcgroup_check_permission` of read and write access to render node `minor`.
    fn may_use(&self, minor: u32) -> bool {
        lock(&self.devices)
            .as_ref()
            .is_none_or(|allowed| allowed.contains(&minor))
    }
}

/// A simulated process (one mm): opens simulated device files. Clones are the same process.
#[derive(Clone, Debug)]
pub struct SimProcess {
    inner: Arc<ProcInner>,
}

#[derive(Debug)]
struct ProcInner {
    machine: Machine,
    caller: Arc<Caller>,
    /// The KFD process lives as long as the mm (or an open file) does.
    kfd: Ordered<Option<Arc<KfdProcess>>>,
}

impl SimProcess {
    /// Its simulated pid.
    pub fn pid(&self) -> u32 {
        self.inner.caller.pid
    }

    /// The machine.
    pub fn machine(&self) -> &Machine {
        &self.inner.machine
    }

    /// Sends the process a signal whose handler returns (no SA_RESTART): the next interruptible
    /// sleep in a call (or the one it is in now) ends with `EINTR`, the driver's `-ERESTARTSYS`
    /// as a caller sees it without restart, having written back what the driver writes back.
    pub fn signal(&self) {
        self.inner.caller.signal.store(true, Ordering::SeqCst);
        if let Some(p) = lock(&self.inner.kfd).as_ref() {
            // Wake a sleeper (under its lock, so that it cannot miss the wake-up).
            let _st = p.lock();
            p.events_cv.notify_all();
        }
    }

    /// Grants or drops CAP_CHECKPOINT_RESTORE / CAP_SYS_ADMIN.
    pub fn set_capable(&self, capable: bool) {
        self.inner.caller.capable.store(capable, Ordering::SeqCst);
    }

    /// Puts the process in a device cgroup that lets it use only the render nodes `minors` (a
    /// container's `--device` list), or lifts the limit (`None`). As the kernel applies it: the
    /// other render nodes fail to open with `EPERM`, and a KFD process created from now on has
    /// no per-device record for their GPUs (`kfd_init_apertures` skips them), so no ioctl can
    /// name them. `/dev/kfd` itself stays open to it.
    pub fn set_device_cgroup(&self, minors: Option<&[u32]>) {
        *lock(&self.inner.caller.devices) = minors.map(|m| m.iter().copied().collect());
    }

    /// Makes this process the ptrace parent of `tracee` (as criu is of the dumped task).
    pub fn ptrace_attach(&self, tracee: &SimProcess) {
        self.inner
            .machine
            .inner
            .set_tracer(tracee.pid(), Some(self.pid()));
    }

    /// The device mappings of this process that are still mapped, in address order, as criu
    /// enumerates them (`/proc/PID/maps`): each recorded mapping whose range still maps its
    /// device memory in this OS process (all simulated processes share its address space), so
    /// what was unmapped or replaced is gone.
    pub fn device_vmas(&self) -> Vec<DeviceVma> {
        self.inner.machine.vmas.of(self.pid())
    }

    /// What the kernel's MMU notifier reports to amdkfd when the process unmaps `[start, end)`
    /// (bytes; `MMU_NOTIFY_UNMAP`): the unmapped part of every SVM range of its KFD process goes
    /// (`svm_range_unmap_from_cpu`). All simulated processes share this OS process's address
    /// space, so nothing sees their munmaps: a test calls this after its munmap, as the
    /// notifier runs before munmap returns. Nothing happens without a KFD process.
    pub fn notify_unmap(&self, start: u64, end: u64) {
        if let Some(p) = lock(&self.inner.kfd).as_ref() {
            crate::kfd::svm::unmap_from_cpu(p, start, end);
        }
    }

    /// What the kernel's MMU notifier reports to amdkfd when the process's mm is torn down (it
    /// exits or calls execve: `release`): amdkfd destroys the queues of its KFD process
    /// (`kfd_process_notifier_release`), so nothing of it runs on the GPU again, although its
    /// files may stay open a while (another process holds them, or the exit has not closed them
    /// yet). Returns once no engine runs a round of it. All simulated processes share this OS
    /// process's mm, which never goes: a test calls this as if this process had exited. Nothing
    /// happens without a KFD process.
    pub fn notify_mm_release(&self) {
        let process = lock(&self.inner.kfd).clone();
        if let Some(p) = process {
            p.release_mm();
            crate::hw::runlist::wait_idle(&*p);
        }
    }

    /// Ends a ptrace relation started with [`ptrace_attach`](Self::ptrace_attach).
    pub fn ptrace_detach(&self, tracee: &SimProcess) {
        self.inner.machine.inner.set_tracer(tracee.pid(), None);
    }

    /// `open("/dev/kfd")`: the process's KFD process is created on the first open (with a
    /// per-device record for every GPU its device cgroup allows); later opens share it.
    pub fn open_kfd(&self) -> io::Result<SimFile> {
        // One KFD process per simulated process (the kernel's per-mm one): its first open makes
        // it, even where an earlier process with this pid left one behind.
        let mut mine = lock(&self.inner.kfd);
        let process = match &*mine {
            Some(p) => Arc::clone(p),
            None => self
                .inner
                .machine
                .inner
                .new_kfd_process(self.pid(), &|minor| self.inner.caller.may_use(minor))
                .map_err(io::Error::from)?,
        };
        *mine = Some(Arc::clone(&process));
        drop(mine);
        self.new_file("kfd-sim:/dev/kfd", FileKind::Kfd(process))
    }

    /// `open("/dev/dri/renderD<minor>")`: a render-node file with its own GPU VM; `EPERM` where
    /// the process's device cgroup does not allow the node.
    pub fn open_render(&self, minor: u32) -> io::Result<SimFile> {
        if !self.inner.caller.may_use(minor) {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        let dev = self
            .inner
            .machine
            .inner
            .devices
            .iter()
            .position(|d| d.render_minor == minor)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        self.new_file(
            &format!("kfd-sim:/dev/dri/renderD{minor}"),
            FileKind::Render(RenderFile::new(dev)),
        )
    }

    fn new_file(&self, name: &str, kind: FileKind) -> io::Result<SimFile> {
        let fd = host::memfd(name)?;
        let key = host::file_key(fd.as_fd())?;
        let file = Arc::new(OpenFile { key, kind });
        self.inner.machine.inner.register_file(&file);
        Ok(SimFile {
            machine: self.inner.machine.clone(),
            file,
            fd,
            caller: Arc::clone(&self.inner.caller),
        })
    }
}

/// A simulated open file used by a simulated process: `/dev/kfd` or a render node.
///
/// Its fd is a placeholder whose inode names the simulated open file; clones share the open file
/// as `dup(2)` does.
pub struct SimFile {
    machine: Machine,
    file: Arc<OpenFile>,
    fd: OwnedFd,
    caller: Arc<Caller>,
}

impl fmt::Debug for SimFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.file.kind {
            FileKind::Kfd(p) => format!("/dev/kfd of pid {}", p.pid),
            FileKind::Render(r) => format!("render node of GPU {}", r.device),
        };
        f.debug_struct("SimFile")
            .field("file", &kind)
            .field("caller", &self.caller.pid)
            .finish()
    }
}

/// What the CUSE front end's unit tests look at behind the in-process objects.
#[cfg(test)]
impl Machine {
    pub(crate) fn inner(&self) -> &Arc<MachineInner> {
        &self.inner
    }
}

#[cfg(test)]
impl SimFile {
    pub(crate) fn open_file(&self) -> &Arc<OpenFile> {
        &self.file
    }
}

impl SimFile {
    /// The same open file in the hands of another simulated process (an fd passed over a socket
    /// or inherited): ioctls are then issued as that process.
    pub fn used_by(&self, process: &SimProcess) -> io::Result<SimFile> {
        Ok(SimFile {
            machine: self.machine.clone(),
            file: Arc::clone(&self.file),
            fd: self.fd.try_clone()?,
            caller: Arc::clone(&process.inner.caller),
        })
    }

    /// Whether this is a `/dev/kfd` file.
    pub fn is_kfd(&self) -> bool {
        matches!(self.file.kind, FileKind::Kfd(_))
    }

    /// The GPU VM of a render-node file (what ACQUIRE_VM adopts), for inspection.
    pub fn vm(&self) -> Option<Arc<Ordered<crate::hw::vm::Vm>>> {
        match &self.file.kind {
            FileKind::Render(r) => Some(Arc::clone(&r.vm)),
            FileKind::Kfd(_) => None,
        }
    }

    /// Issues an ioctl with the argument at a plain address (what a CUSE front end receives).
    /// Never dereferences `arg` itself: all access goes through the caller's user memory.
    pub fn ioctl_at(&self, request: u32, arg: u64) -> Result<i32, Errno> {
        let client = InProcessClient {
            pid: self.caller.pid,
            capable: self.caller.capable.load(Ordering::SeqCst),
            machine: &self.machine.inner,
            mem: ProcessMemory::own(),
            signal: &self.caller.signal,
            device_vmas: Some(&self.machine.vmas),
        };
        crate::fops::ioctl(&self.machine.inner, &self.file, &client, request, arg)
    }
}

impl AsFd for SimFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Transport for SimFile {
    unsafe fn ioctl(&self, request: u32, arg: *mut c_void) -> Result<i32, Errno> {
        self.ioctl_at(request, arg as usize as u64)
    }

    unsafe fn adopt_fd(&self, raw: RawFd) -> io::Result<OwnedFd> {
        if raw < 0 {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        // SAFETY: the caller guarantees that `raw` was just installed by an ioctl on this
        // transport (our Client::install_fd leaves it open for exactly this) and is unowned.
        Ok(unsafe { OwnedFd::from_raw_fd(raw) })
    }

    fn try_clone(&self) -> io::Result<Self> {
        Ok(SimFile {
            machine: self.machine.clone(),
            file: Arc::clone(&self.file),
            fd: self.fd.try_clone()?,
            caller: Arc::clone(&self.caller),
        })
    }

    /// mmap as the driver does it, in process: the driver model decides what backs the offset
    /// (the simulator's `fops` and `vma` modules) and the mapping is of that memory itself, shared with the
    /// simulated GPU both ways. The VMA flags that userspace can express are applied: KFD pages
    /// are not inherited by fork (`VM_DONTCOPY`), no device mapping is in a core dump
    /// (`VM_DONTDUMP`), and a private `PROT_NONE` render mapping that lost `VM_MAYWRITE` is made
    /// from a read-only file, so it can never become writable. The mapping is recorded as a
    /// device VMA of the calling process ([`SimProcess::device_vmas`]).
    fn mmap(
        &self,
        place: kfd_abi::Place,
        offset: u64,
        prot: kfd_abi::Prot,
        share: kfd_abi::Share,
    ) -> Result<kfd_abi::Mapping, Errno> {
        use crate::vma as m;
        use kfd_abi::{Advice, Mapping, Prot, Share};
        let len = place.len();
        // The kernel refuses these before any driver sees them.
        if len == 0 || offset % crate::limits::PAGE_SIZE != 0 {
            return Err(Errno::EINVAL);
        }
        let length = u64::try_from(len).map_err(|_| Errno::ENOMEM)?;
        let length = crate::limits::align_up(length);
        let mut flags = m::MAP_MAYWRITE;
        for (p, f) in [
            (Prot::READ, m::MAP_READ),
            (Prot::WRITE, m::MAP_WRITE),
            (Prot::EXEC, m::MAP_EXEC),
        ] {
            if prot.contains(p) {
                flags |= f;
            }
        }
        if share == Share::Shared {
            flags |= m::MAP_SHARED;
        }
        let caller = self.machine.inner.find_process(self.caller.pid);
        let req = m::MmapRequest {
            offset,
            length,
            flags,
        };
        let target = crate::fops::mmap(&self.machine.inner, &self.file, caller.as_ref(), &req)?;
        let no_maywrite = target.vma & m::VMA_NO_MAYWRITE != 0;
        let fd = target
            .backing
            .export(!no_maywrite)
            .map_err(|e| Errno::from_io(&e))?;
        let share = if no_maywrite { Share::Shared } else { share };
        let mapping = Mapping::map_fd(place, fd.as_fd(), target.offset, prot, share)?;
        mapping.advise(Advice {
            dont_fork: target.vma & m::VMA_DONTCOPY != 0,
            dont_dump: target.vma & m::VMA_DONTDUMP != 0,
        })?;
        let (path, rdev) = self.dev_path();
        self.machine.vmas.record(VmaRecord {
            pid: self.caller.pid,
            vma: DeviceVma {
                start: mapping.addr(),
                end: mapping.addr() + length,
                pgoff: offset,
                path,
                rdev,
            },
            backing: target.backing.key(),
            backing_offset: target.offset,
        });
        Ok(mapping)
    }
}

/// The device number of the simulated `/dev/kfd` in process: the driver registers a dynamic
/// character major, and the first dynamic majors the kernel hands out are counted down from
/// 511; what a process would see in `/proc/PID/maps` and `stat`.
pub const SIM_KFD_MAJOR: u32 = 511;

/// The DRM character-device major, as render nodes report it in `st_rdev`.
const DRM_MAJOR: u32 = 226;

impl SimFile {
    /// The path and device number of this file, as `stat` of it would show.
    fn dev_path(&self) -> (PathBuf, u64) {
        match &self.file.kind {
            FileKind::Kfd(_) => (PathBuf::from("/dev/kfd"), libc::makedev(SIM_KFD_MAJOR, 0)),
            FileKind::Render(r) => {
                let minor = self
                    .machine
                    .inner
                    .devices
                    .get(r.device)
                    .map_or(0, |d| d.render_minor);
                (
                    PathBuf::from(format!("/dev/dri/renderD{minor}")),
                    libc::makedev(DRM_MAJOR, minor),
                )
            }
        }
    }
}
