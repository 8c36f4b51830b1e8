//! The engine behind criu's hooks: one [`Engine`] per criu process (and per restored process,
//! which inherits it across fork).
//!
//! Here: the engine and criu's hooks. Beside it: `session` (what one stage keeps, a
//! `Session` per dump or restore, made at `init` and dropped at `fini`),
//! `settings` (what the environment asks), `dumping` (the engine at dump: render-node files and
//! dma-bufs), `restoring` (the engine at restore: `/dev/kfd` and render-node files, VMAs, the
//! parallel restore's start) and `shared` (buffers shared between the restored tasks).

use std::os::fd::{BorrowedFd, IntoRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use kfd_abi::Errno;

use crate::dump::{self};
use crate::gem::GemError;
use crate::hooks::{CriuHooks, HookError, HookResult, Stage, VmaUpdate};
use crate::inventory::{self, Inventory, NoInventory};
use crate::restore;
use crate::restore::sharing::SharedVmas;
use crate::restore::vma::VmaDevice;
use kfd_abi::platform::{DeviceKind, Platform};

mod dumping;
mod restoring;
use restoring::restored_vma;
mod session;
use session::{DumpSession, RestoreSession, Session};
mod settings;
mod shared;

pub use settings::{Settings, PARALLEL_RESTORE_ENV};

/// The plugin engine over a platform.
pub struct Engine<P: Platform> {
    platform: std::sync::Arc<P>,
    settings: Mutex<Option<Settings>>,
    /// The stage criu is in: made at `init`, dropped at `fini`.
    session: Mutex<Option<Session<P>>>,
    image_dir: std::sync::Arc<dyn Fn() -> Option<RawFd> + Send + Sync>,
    inventory: std::sync::Arc<dyn Inventory>,
    /// This dump's inventory lists the plugin already.
    recorded: AtomicBool,
    /// This restore's images do not list the plugin: every hook is "not ours".
    disabled: AtomicBool,
}

impl<P: Platform> std::fmt::Debug for Engine<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("platform", &self.platform)
            .finish_non_exhaustive()
    }
}

fn failed(errno: Errno, e: impl std::fmt::Display) -> HookError {
    HookError::failed(errno, e.to_string())
}

fn gem_failed(e: GemError) -> HookError {
    caused(e.errno(), e)
}

/// A failure that error `e` is, with `e` kept as its cause (criu's log shows the chain).
fn caused(errno: Errno, e: impl std::error::Error + Send + Sync + 'static) -> HookError {
    HookError::caused_by(errno, e)
}

/// Another fd on the same open file (what criu gets to install in the task).
fn dup(fd: BorrowedFd<'_>) -> HookResult<OwnedFd> {
    fd.try_clone_to_owned()
        .map_err(|e| caused(Errno::from_io(&e), e))
}

impl<P: Platform> Engine<P> {
    /// An engine over `platform`; `image_dir` gives criu's image directory fd (criu's
    /// `criu_get_image_dir()`).
    pub fn new(platform: P, image_dir: impl Fn() -> Option<RawFd> + Send + Sync + 'static) -> Self {
        Self {
            platform: std::sync::Arc::new(platform),
            settings: Mutex::new(None),
            session: Mutex::new(None),
            image_dir: std::sync::Arc::new(image_dir),
            inventory: std::sync::Arc::new(NoInventory),
            recorded: AtomicBool::new(false),
            disabled: AtomicBool::new(false),
        }
    }

    /// The same engine on a host with criu's plugin inventory (criu 4.1+; see
    /// [`crate::inventory`]).
    pub fn with_inventory(mut self, inventory: impl Inventory + 'static) -> Self {
        self.inventory = std::sync::Arc::new(inventory);
        self
    }

    /// What a task that criu forks from its own process after `init` has of this engine: a copy
    /// of its settings and of its restore's session as they are now (the topology read at
    /// `init`, the table of buffers shared between the restored tasks), over the task's
    /// `platform`. The in-process harness's fork.
    pub fn forked(&self, platform: P) -> Self {
        let copy = match &*lock(&self.session) {
            Some(Session::Restore(r)) => Some(Session::Restore(r.forked(platform.process_id()))),
            Some(Session::Dump(d)) => {
                let mut copy = DumpSession::default();
                copy.topology = d.topology.clone();
                Some(Session::Dump(copy))
            }
            None => None,
        };
        Self {
            platform: std::sync::Arc::new(platform),
            settings: Mutex::new(lock(&self.settings).clone()),
            session: Mutex::new(copy),
            image_dir: std::sync::Arc::clone(&self.image_dir),
            inventory: std::sync::Arc::clone(&self.inventory),
            recorded: AtomicBool::new(self.recorded.load(Ordering::SeqCst)),
            disabled: AtomicBool::new(self.disabled.load(Ordering::SeqCst)),
        }
    }

    /// Dump: records the plugin in the dump's inventory, once, as soon as it handles anything.
    fn record(&self) -> HookResult<()> {
        if self.recorded.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.inventory.record().map_err(|e| {
            self.recorded.store(false, Ordering::SeqCst);
            caused(Errno::EIO, e)
        })
    }

    /// "Not ours" for everything in a restore whose images do not list the plugin.
    fn enabled(&self) -> HookResult<()> {
        if self.disabled.load(Ordering::SeqCst) {
            Err(HookError::NotOurs)
        } else {
            Ok(())
        }
    }

    /// Sets the settings (otherwise `init` reads them from the environment).
    pub fn configure(&self, settings: Settings) {
        *lock(&self.settings) = Some(settings);
    }

    fn settings(&self) -> Settings {
        lock(&self.settings)
            .get_or_insert_with(|| Settings::from_env(false))
            .clone()
    }

    fn dir(&self) -> HookResult<BorrowedFd<'static>> {
        let fd = (self.image_dir)()
            .filter(|&fd| fd >= 0)
            .ok_or_else(|| HookError::failed(Errno::EBADF, "criu gave no image directory"))?;
        // SAFETY: criu keeps its image directory fd open for the whole run of the hooks.
        Ok(unsafe { BorrowedFd::borrow_raw(fd) })
    }

    /// Runs `f` on the dump's session (made here if a dump hook comes without `init`).
    fn with_dump<R>(&self, f: impl FnOnce(&mut DumpSession<P>) -> R) -> R {
        let mut session = lock(&self.session);
        if let Some(Session::Dump(d)) = session.as_mut() {
            return f(d);
        }
        let mut d = DumpSession::default();
        let r = f(&mut d);
        *session = Some(Session::Dump(d));
        r
    }

    /// Runs `f` on the restore's session (made here if a restore hook comes without `init`).
    fn with_restore<R>(&self, f: impl FnOnce(&mut RestoreSession<P>) -> R) -> R {
        let mut session = lock(&self.session);
        if let Some(Session::Restore(r)) = session.as_mut() {
            return f(r);
        }
        let mut r = RestoreSession::new(self.platform.process_id());
        let out = f(&mut r);
        *session = Some(Session::Restore(r));
        out
    }

    /// The GPU mappings of the `/dev/kfd` files restored in this process.
    pub fn mappings(&self) -> Vec<topology::Mapping> {
        match &*lock(&self.session) {
            Some(Session::Restore(r)) => r.restored.iter().map(|r| r.mapping.clone()).collect(),
            _ => Vec::new(),
        }
    }

    /// Unpauses every dumped process's queues; the first failure, if any (each is logged).
    fn unpause_all(&self) -> Result<(), kfd_abi::IoctlError> {
        match lock(&self.session).as_mut() {
            Some(Session::Dump(d)) => d.unpause_all(),
            _ => Ok(()),
        }
    }

    /// This machine's topology, parsed on first use in this criu run. A restore reads it in
    /// criu's own process, at init (see [`CriuHooks::init`]), so the restored tasks inherit it.
    fn local_topology(&self) -> HookResult<std::sync::Arc<topology::Topology>> {
        if let Some(t) = lock(&self.session)
            .as_mut()
            .and_then(|s| s.topology().clone())
        {
            return Ok(t);
        }
        let root = self.platform.topology_root();
        let t = std::sync::Arc::new(
            topology::parse(&root)
                .map_err(|e| failed(Errno::EIO, format!("reading the GPU topology: {e}")))?,
        );
        // Kept for the rest of the stage (without one, a hook outside `init` and `fini`, read
        // again next time).
        if let Some(s) = lock(&self.session).as_mut() {
            *s.topology() = Some(std::sync::Arc::clone(&t));
        }
        Ok(t)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<P: Platform> CriuHooks for Engine<P> {
    fn init(&self, stage: Stage) -> HookResult<()> {
        let dump_devices_late = host_has_dump_devices_late();
        let mut s = lock(&self.settings);
        let settings = s.get_or_insert_with(|| Settings::from_env(dump_devices_late));
        log::debug!("init {stage:?}: {settings:?}");
        self.recorded.store(false, Ordering::SeqCst);
        let listed = stage != Stage::Restore || self.inventory.claim();
        self.disabled.store(!listed, Ordering::SeqCst);
        if !listed {
            log::info!(
                "the images' plugin inventory does not list {}: staying out of this restore",
                inventory::NAME
            );
        }
        drop(s);
        match stage {
            Stage::Dump | Stage::PreDump => {
                let mut session = lock(&self.session);
                if !matches!(*session, Some(Session::Dump(_))) {
                    *session = Some(Session::Dump(DumpSession::default()));
                }
            }
            Stage::Restore if listed => {
                let mut session = lock(&self.session);
                if !matches!(*session, Some(Session::Restore(_))) {
                    *session = Some(Session::Restore(RestoreSession::new(
                        self.platform.process_id(),
                    )));
                }
            }
            Stage::Restore | Stage::Unknown(_) => {}
        }
        if stage == Stage::Restore && listed {
            // Made here, in criu's process before it forks the restored tasks, so that they all
            // share it (see crate::restore::sharing).
            self.with_restore(|r| {
                if r.shared.is_none() {
                    match SharedVmas::new() {
                        Ok(t) => r.shared = Some(std::sync::Arc::new(t)),
                        Err(e) => log::warn!(
                            "no table of restored buffers for forked tasks ({e}): a task that \
                             inherited its parent's GPU mappings cannot map them"
                        ),
                    }
                }
            });
            // criu restores GPU files in the restored tasks, after their namespaces are set up: a
            // container's task sees its own sysfs mount, where the topology may be missing or
            // partly unreadable (the device cgroup hides the GPUs it may not use). criu's own
            // process sees the node's, and the tasks it forks inherit what it read here. Which
            // GPUs a task may use is still its own /dev/kfd's answer. A node without a KFD
            // topology (no AMD GPU) is not an error here: the first GPU file reads it again.
            match self.local_topology() {
                Ok(t) => log::debug!(
                    "read the topology at {} before forking: {} GPUs",
                    self.platform.topology_root().display(),
                    t.gpus().count()
                ),
                Err(e) => log::debug!("no topology at restore init: {e}"),
            }
        }
        Ok(())
    }

    fn fini(&self, stage: Stage, ret: i32) {
        // The stage's session goes: a dump's unpauses every process it left paused, a restore's
        // shuts the parallel restore down (see session.rs).
        let session = lock(&self.session).take();
        drop(session);
        log::debug!("exit {stage:?} ({ret})");
    }

    fn handle_device_vma(&self, _fd: BorrowedFd<'_>, rdev: u64) -> HookResult<()> {
        self.enabled()?;
        match self.platform.identify_rdev(rdev) {
            DeviceKind::Kfd | DeviceKind::Render { .. } => self.record(),
            DeviceKind::DmaBuf | DeviceKind::Other => Err(HookError::NotOurs),
        }
    }

    fn dump_ext_file(&self, fd: BorrowedFd<'_>, id: u32) -> HookResult<()> {
        self.enabled()?;
        let kind = self
            .platform
            .identify(fd)
            .map_err(|e| caused(Errno::from_io(&e), e))?;
        if kind != DeviceKind::Other {
            self.record()?;
        }
        match kind {
            DeviceKind::Other => Err(HookError::NotOurs),
            DeviceKind::DmaBuf => self.dump_dmabuf(fd, id),
            DeviceKind::Render { minor } => self.dump_render(fd, id, minor),
            DeviceKind::Kfd => {
                let settings = self.settings();
                let kfd = self
                    .platform
                    .kfd_from_fd(dup(fd)?)
                    .map_err(|e| caused(Errno::EIO, e))?;
                let opts = settings.dump_options();
                // The queues stay paused until criu has dumped the tasks' memory: at
                // DUMP_DEVICES_LATE, or, for a criu without it (3.17 to 4.2), in the exit hook,
                // which criu calls after the memory and before it lets the tasks run or kills
                // them. A kernel running in between would write host memory past the point its
                // saved waves resume from (the restored kernel would do that work twice).
                if !settings.dump_devices_late {
                    log::debug!(
                        "this criu has no DUMP_DEVICES_LATE: queues unpaused at its exit hook"
                    );
                }
                let topo = self.local_topology()?;
                let report = dump::dump_kfd(&*self.platform, &topo, &kfd, id, self.dir()?, &opts)
                    .map_err(|e| caused(e.errno(), e))?;
                log::info!(
                    "dumped pid {}: {} BOs, {} bytes of GPU memory in {:.3}s",
                    report.pid,
                    report.bos,
                    report.bytes(),
                    report.elapsed.as_secs_f64()
                );
                self.with_dump(|d| d.paused.push(kfd));
                self.learn_user_ids(&report.gpus)?;
                let patches = self.with_dump(|d| {
                    let mut patches = Vec::new();
                    for &(index, object) in &report.buffers {
                        patches.extend(d.ledger.kfd(id, index, object).map_err(gem_failed)?);
                    }
                    Ok::<_, HookError>(patches)
                })?;
                self.apply(patches)
            }
        }
    }

    fn restore_ext_file(&self, id: u32) -> HookResult<Option<RawFd>> {
        // criu takes over the fd.
        Ok(self.restore_file(id)?.map(IntoRawFd::into_raw_fd))
    }

    fn update_vma_map(
        &self,
        path: &Path,
        addr: u64,
        old_pgoff: u64,
    ) -> HookResult<Option<VmaUpdate>> {
        self.enabled()?;
        let device = VmaDevice::from_path(path).ok_or(HookError::NotOurs)?;
        let found = self.with_restore(|state| restored_vma(state, device, addr, old_pgoff))?;
        if let Some(update) = found {
            return Ok(Some(update));
        }
        if let VmaDevice::Render { minor } = device {
            if let Some(update) = self.inherited_vma(minor, addr, old_pgoff)? {
                return Ok(Some(update));
            }
        }
        log::info!(
            "no restored buffer had {} at {addr:#x} with offset {old_pgoff:#x}: the mapping \
             stays as criu has it",
            path.display()
        );
        Ok(None)
    }

    fn resume_devices_late(&self, pid: i32) -> HookResult<()> {
        self.enabled()?;
        let parallel = self.with_restore(|r| r.parallel.clone());
        if let Some(hub) = parallel {
            // Every fill of the restore, not only this pid's: its queues may use buffers other
            // tasks restored.
            match hub.wait() {
                Ok(s) => log::debug!(
                    "parallel restore: {} jobs, {} bytes, all written before resuming pid {pid}",
                    s.jobs,
                    s.bytes
                ),
                Err(e) => {
                    // criu only logs a failing RESUME_DEVICES_LATE and would let the task run
                    // on zeros: killed, it makes criu's restore fail before any task runs.
                    let killed = crate::host::criu().kill_restored_task(pid);
                    return Err(failed(
                        Errno::EIO,
                        format!(
                            "the parallel restore of buffer contents failed: {e}; pid {pid} is \
                             not resumed{}",
                            if killed {
                                " and was killed so that criu fails the restore"
                            } else {
                                ""
                            }
                        ),
                    ));
                }
            }
        }
        let pid = u32::try_from(pid).map_err(|_| HookError::NotOurs)?;
        if let Ok(dir) = self.dir() {
            if restore::pid_needs_resume(dir, pid) == Some(false) {
                log::info!("pid {pid} had no GPU state to resume");
                return Ok(());
            }
        }
        let kfd = match self.platform.open_kfd() {
            Ok(k) => k,
            // No KFD on this machine: nothing of ours was restored.
            Err(e) if e.errno() == Some(Errno::ENOENT) => return Err(HookError::NotOurs),
            Err(e) => return Err(caused(e.errno().unwrap_or(Errno::EIO), e)),
        };
        match kfd.criu_resume(pid) {
            Ok(()) => {
                log::info!("resumed the GPU queues of pid {pid}");
                Ok(())
            }
            Err(e) if e.errno() == Some(Errno::ESRCH) => Err(HookError::NotOurs),
            Err(e) => Err(caused(e.errno().unwrap_or(Errno::EIO), e)),
        }
    }

    fn post_forking(&self) -> HookResult<()> {
        self.enabled()?;
        let Some(hub) = self.with_restore(|r| r.parallel.clone()) else {
            return Err(HookError::NotOurs);
        };
        hub.start()
            .map_err(|e| failed(Errno::from_io(&e), format!("starting the fill thread: {e}")))
    }

    fn restore_init(&self) -> HookResult<()> {
        self.enabled()?;
        if !self.settings().parallel_restore {
            log::info!(
                "buffer contents are restored in the restored tasks ({PARALLEL_RESTORE_ENV}=1 \
                 restores them from criu's master)"
            );
            return Err(HookError::NotOurs);
        }
        if self.with_restore(|r| r.parallel.is_some()) {
            return Ok(());
        }
        self.start_parallel()
    }

    fn dump_devices_late(&self, _id: u32) -> HookResult<()> {
        let had = self.with_dump(|d| !d.paused.is_empty());
        // A process left paused would hang: criu fails the dump instead.
        self.unpause_all()
            .map_err(|e| caused(e.errno().unwrap_or(Errno::EIO), e))?;
        let (lost, unlisted) = { self.with_dump(|d| (d.ledger.unresolved(), d.unlisted.clone())) };
        if !lost.is_empty() {
            let why = if unlisted.is_empty() {
                String::new()
            } else {
                let minors: Vec<String> = unlisted.iter().map(|m| format!("renderD{m}")).collect();
                format!(
                    "; the buffers of {} could not be listed: that needs Linux 6.18 \
                     (AMDGPU_GEM_LIST_HANDLES), which this kernel does not have",
                    minors.join(", ")
                )
            };
            return Err(failed(
                Errno::EINVAL,
                format!(
                    "dma-buf images {lost:?}: their buffers are in no dumped file (no render \
                     node or /dev/kfd of the tree holds them){why}"
                ),
            ));
        }
        if had {
            Ok(())
        } else {
            Err(HookError::NotOurs)
        }
    }
}

/// Whether the host criu calls DUMP_DEVICES_LATE (measured by the shim when criu loaded us).
fn host_has_dump_devices_late() -> bool {
    crate::host::criu().has_dump_devices_late()
}
