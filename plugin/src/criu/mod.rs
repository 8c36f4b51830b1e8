//! The engine behind criu's hooks: one [`Engine`] per criu process (and per restored process,
//! which inherits it across fork).
//!
//! Here: the engine's state and criu's hooks, the KFD files' dump and restore. Beside it:
//! `settings` (what the environment asks), `render` (render-node files and dma-bufs, dump and
//! restore) and `shared` (buffers shared between the restored tasks).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use images::{DmabufImage, ImageFile, RenderNodeImage};
use kfd_abi::{Errno, Kfd};

use crate::dump::{self};
use crate::gem::{self, GemError};
use crate::hooks::{CriuHooks, HookError, HookResult, Stage, VmaUpdate};
use crate::inventory::{self, Inventory, NoInventory};
use crate::restore::{self, Restored};
use crate::vma::{MappedOn, SharedBuffer, SharedVmas, VmaDevice};
use kfd_abi::platform::{DeviceKind, HostPlatform, Platform};

mod render;
use render::check_render_counts;
mod settings;
mod shared;

pub use settings::{Settings, PARALLEL_RESTORE_ENV};

/// What the engine remembers between hooks.
#[derive(Debug)]
struct State<P: Platform> {
    /// Dumped processes whose queues stay paused until DUMP_DEVICES_LATE (or exit).
    paused: Vec<Kfd<P::Device>>,
    /// The KFD files restored in this (restored) process.
    restored: Vec<Restored<P::Device>>,
    /// At dump: the ids processes use for GPUs (user ids), by the GPU's id now (actual id), from
    /// the KFD files dumped so far.
    user_ids: std::collections::BTreeMap<u32, u32>,
    /// The local topology, read once per criu run (every device file of a dump needs it).
    topology: Option<std::sync::Arc<topology::Topology>>,
    /// At restore: the part of it that the restored process (by pid) may use, probed once per
    /// process (a child task forked by its restored parent probes its own).
    usable: Option<(u32, std::sync::Arc<restore::UsableGpus>)>,
    /// At dump: render-node images written before the KFD file that names their GPU's user id,
    /// as (image id, actual gpu id).
    pending_renders: Vec<(u32, u32, u32)>,
    /// At restore: render nodes restored before this process's `/dev/kfd` (or in a process
    /// without one), by the GPU id of their image.
    preopened: std::collections::BTreeMap<u32, kfd_abi::RenderNode<P::Device>>,
    /// At restore: which `/dev/kfd` image is this process's (`None` inside: it has none), once
    /// looked up.
    own_kfd_image: Option<Option<u32>>,
    /// At restore: the render-node buffers every restored task published, made at `init` in
    /// criu's process (before it forks the tasks, which share it).
    shared: Option<std::sync::Arc<SharedVmas>>,
    /// This task's copy of what it last read of `shared`.
    inherited: Vec<SharedBuffer>,
    /// At dump: the buffer objects seen so far (render-node buffers, KFD BOs, dma-bufs).
    ledger: gem::Ledger,
    /// At restore: the render-node buffers restored in this task: the render minor at
    /// checkpoint, their offsets, the file they are mapped from.
    gem_remaps: Vec<(u32, Vec<gem::GemRemap>, kfd_abi::RenderNode<P::Device>)>,
    /// At restore: dma-bufs this task keeps open for other tasks (published in `shared`).
    kept: Vec<OwnedFd>,
    /// At restore: the keys of buffers some file imports or holds as a dma-buf (read once).
    needed: Option<std::sync::Arc<std::collections::BTreeSet<u32>>>,
    /// At restore: the keys of buffers some file of the checkpoint creates (read once, when a
    /// file first imports one).
    created: Option<std::sync::Arc<std::collections::BTreeSet<u32>>>,
    /// At dump: the render minors whose buffers the kernel could not list (before Linux 6.18).
    unlisted: std::collections::BTreeSet<u32>,
    /// At restore, with the parallel restore on: the master's socket and fills, made at
    /// RESTORE_INIT (the tasks use its task end).
    parallel: Option<std::sync::Arc<crate::parallel::Hub>>,
}

impl<P: Platform> Default for State<P> {
    fn default() -> Self {
        Self {
            paused: Vec::new(),
            restored: Vec::new(),
            topology: None,
            usable: None,
            user_ids: std::collections::BTreeMap::new(),
            pending_renders: Vec::new(),
            preopened: std::collections::BTreeMap::new(),
            own_kfd_image: None,
            shared: None,
            inherited: Vec::new(),
            ledger: gem::Ledger::default(),
            gem_remaps: Vec::new(),
            kept: Vec::new(),
            needed: None,
            created: None,
            unlisted: std::collections::BTreeSet::new(),
            parallel: None,
        }
    }
}

/// The plugin engine over a platform.
pub struct Engine<P: Platform> {
    platform: std::sync::Arc<P>,
    settings: Mutex<Option<Settings>>,
    state: Mutex<State<P>>,
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
    HookError::failed(e.errno(), e.to_string())
}

/// Another fd on the same open file (what criu gets to install in the task).
fn dup(fd: BorrowedFd<'_>) -> HookResult<OwnedFd> {
    fd.try_clone_to_owned()
        .map_err(|e| failed(Errno::from_io(&e), e))
}

impl<P: Platform> Engine<P> {
    /// An engine over `platform`; `image_dir` gives criu's image directory fd (criu's
    /// `criu_get_image_dir()`).
    pub fn new(platform: P, image_dir: impl Fn() -> Option<RawFd> + Send + Sync + 'static) -> Self {
        Self {
            platform: std::sync::Arc::new(platform),
            settings: Mutex::new(None),
            state: Mutex::new(State::default()),
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
    /// of its settings and state as they are now (the topology read at `init`, the table of
    /// buffers shared between the restored tasks), over the task's `platform`. The in-process
    /// harness's fork.
    pub fn forked(&self, platform: P) -> Self {
        let state = lock(&self.state);
        let copy = State {
            topology: state.topology.clone(),
            shared: state.shared.clone(),
            parallel: state.parallel.clone(),
            ..State::default()
        };
        drop(state);
        Self {
            platform: std::sync::Arc::new(platform),
            settings: Mutex::new(lock(&self.settings).clone()),
            state: Mutex::new(copy),
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
            failed(Errno::EIO, e)
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

    /// The GPU mappings of the `/dev/kfd` files restored in this process.
    pub fn mappings(&self) -> Vec<topology::Mapping> {
        lock(&self.state)
            .restored
            .iter()
            .map(|r| r.mapping.clone())
            .collect()
    }

    /// Unpauses every dumped process's queues; the first failure, if any (each is logged).
    fn unpause_all(&self) -> Result<(), kfd_abi::IoctlError> {
        let mut first = Ok(());
        for kfd in lock(&self.state).paused.drain(..) {
            match kfd.criu_unpause() {
                Ok(()) => log::info!("unpaused a dumped process's GPU queues"),
                Err(e) => {
                    log::error!("{e}");
                    if first.is_ok() {
                        first = Err(e);
                    }
                }
            }
        }
        first
    }

    /// This machine's topology, parsed on first use in this criu run. A restore reads it in
    /// criu's own process, at init (see [`CriuHooks::init`]), so the restored tasks inherit it.
    fn local_topology(&self) -> HookResult<std::sync::Arc<topology::Topology>> {
        let mut state = lock(&self.state);
        if let Some(t) = &state.topology {
            return Ok(std::sync::Arc::clone(t));
        }
        let root = self.platform.topology_root();
        let t = std::sync::Arc::new(
            topology::parse(&root)
                .map_err(|e| failed(Errno::EIO, format!("reading the GPU topology: {e}")))?,
        );
        state.topology = Some(std::sync::Arc::clone(&t));
        Ok(t)
    }

    /// The GPUs of this node that the calling restored process may use
    /// ([`restore::usable_topology`]), probed on first use in this process.
    fn usable_topology(&self) -> HookResult<std::sync::Arc<restore::UsableGpus>> {
        let pid = self.platform.process_id();
        if let Some((owner, t)) = &lock(&self.state).usable {
            if *owner == pid {
                return Ok(std::sync::Arc::clone(t));
            }
        }
        let t = std::sync::Arc::new(restore::usable_topology(
            &*self.platform,
            &*self.local_topology()?,
        ));
        lock(&self.state).usable = Some((pid, std::sync::Arc::clone(&t)));
        Ok(t)
    }

    /// RESTORE_EXT_FILE in Rust terms: recreates file `id` in the calling (restored) process
    /// and returns its fd; `Ok(None)` asks to be called again later.
    pub fn restore_file(&self, id: u32) -> HookResult<Option<OwnedFd>> {
        self.enabled()?;
        let dir = self.dir()?;
        if let Some(msg) =
            RenderNodeImage::try_read(dir, id).map_err(|e| failed(Errno::EINVAL, e))?
        {
            check_render_counts(id, &msg)?;
            return self.restore_render(id, &msg);
        }
        let handoff = lock(&self.state).parallel.clone();
        let opts = self.settings().restore_options(handoff);
        if !restore::has_kfd_image(dir, id) {
            if let Some(msg) =
                DmabufImage::try_read(dir, id).map_err(|e| failed(Errno::EINVAL, e))?
            {
                return self.restore_dmabuf(id, msg).map(Some);
            }
            return Err(HookError::NotOurs);
        }
        let local = self.usable_topology()?;
        let preopened = std::mem::take(&mut lock(&self.state).preopened);
        let needed = self.needed_keys();
        let keep = |key: u32| needed.contains(&key);
        let mut restored =
            restore::restore_kfd(&*self.platform, &local, id, dir, &opts, preopened, &keep)
                .map_err(|e| HookError::failed(e.errno(), e.to_string()))?
                .ok_or(HookError::NotOurs)?;
        let shared = std::mem::take(&mut restored.shared);
        log::info!(
            "restored image {id}: {} bytes of GPU memory in {:.3}s",
            restored.bytes(),
            restored.elapsed.as_secs_f64()
        );
        let restored = self.keep_out_of_the_way(restored)?;
        let fd = dup(restored.kfd.as_fd())?;
        self.publish(&restored);
        lock(&self.state).restored.push(restored);
        self.publish_dmabufs(shared)?;
        Ok(Some(fd))
    }

    /// Moves the files the plugin keeps in the restored task (its `/dev/kfd` and the render nodes
    /// whose VMs the driver uses) above every fd number the task itself will have, so that criu
    /// restoring the task's own files never lands on them.
    fn keep_out_of_the_way(&self, mut r: Restored<P::Device>) -> HookResult<Restored<P::Device>> {
        let Some(mut next) = crate::shim::unused_fd_of(r.pid) else {
            return Ok(r);
        };
        log::debug!("keeping the restored task's device files from fd {next} up");
        let io = |e: std::io::Error| failed(Errno::from_io(&e), e);
        let high = kfd_abi::transport::dup_at_or_above(r.kfd.as_fd(), next).map_err(io)?;
        next = high.as_raw_fd() + 1;
        r.kfd = self
            .platform
            .kfd_from_fd(high)
            .map_err(|e| failed(Errno::EIO, e))?;
        for render in r.renders.values_mut() {
            *render = self.render_at_or_above(render, next)?;
            next = render.as_fd().as_raw_fd() + 1;
        }
        Ok(r)
    }
}

impl<P: Platform> Engine<P> {
    /// RESTORE_INIT with the parallel restore on: the socket the restored tasks send their BOs
    /// on, and the fills in this (criu's master) process.
    fn start_parallel(&self) -> HookResult<()> {
        let dir = self.dir()?;
        let opts = self.settings().restore_options(None);
        let io = |e: std::io::Error| failed(Errno::from_io(&e), e);
        let (master, task) = crate::parallel::socket_pair().map_err(io)?;
        let task_end = if crate::shim::in_criu() {
            match crate::shim::fdstore_add(task.as_fd()) {
                Some(id) => crate::parallel::TaskEnd::Stored(id),
                None => {
                    log::warn!(
                        "criu's fd store did not take the parallel restore's socket: buffer \
                         contents are restored in the restored tasks"
                    );
                    return Err(HookError::NotOurs);
                }
            }
        } else {
            crate::parallel::TaskEnd::Inherited(task)
        };
        let platform = std::sync::Arc::clone(&self.platform);
        let fill: std::sync::Arc<crate::parallel::Filler> =
            std::sync::Arc::new(move |job: crate::parallel::Job| {
                restore::fill_job(&*platform, dir, &opts, job).map_err(|e| e.to_string())
            });
        let hub = crate::parallel::Hub::new(master, task_end, self.platform.process_id(), fill);
        lock(&self.state).parallel = Some(std::sync::Arc::new(hub));
        log::info!(
            "parallel restore on: the restored tasks hand their buffers to criu's master, which \
             restores their contents"
        );
        Ok(())
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
        if stage == Stage::Restore && listed {
            // Made here, in criu's process before it forks the restored tasks, so that they all
            // share it (see crate::vma).
            let mut state = lock(&self.state);
            if state.shared.is_none() {
                match SharedVmas::new() {
                    Ok(t) => state.shared = Some(std::sync::Arc::new(t)),
                    Err(e) => log::warn!(
                        "no table of restored buffers for forked tasks ({e}): a task that \
                         inherited its parent's GPU mappings cannot map them"
                    ),
                }
            }
            drop(state);
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
        // Never leave a process paused, whatever happened in between (a failure is logged: the
        // exit hook cannot fail the dump any more).
        let _ = self.unpause_all();
        let mut state = lock(&self.state);
        state.restored.clear();
        state.topology = None;
        state.user_ids.clear();
        state.pending_renders.clear();
        state.preopened.clear();
        state.own_kfd_image = None;
        state.shared = None;
        state.inherited.clear();
        let lost = state.ledger.unresolved();
        if !lost.is_empty() {
            log::error!(
                "dma-buf images {lost:?}: their buffers are in no dumped file (no render node or \
                 /dev/kfd of the tree holds them): not saved"
            );
        }
        state.ledger = gem::Ledger::default();
        state.gem_remaps.clear();
        state.kept.clear();
        state.needed = None;
        state.created = None;
        state.unlisted.clear();
        let parallel = state.parallel.take();
        drop(state);
        if let Some(hub) = parallel {
            if hub.owner == self.platform.process_id() {
                hub.shut_down();
            } else {
                // A restored task's copy of the master's: its fd numbers are the task's own
                // files by now (criu closed the inherited ones), so they are never closed here.
                std::mem::forget(hub);
            }
        }
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
            .map_err(|e| failed(Errno::from_io(&e), e))?;
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
                    .map_err(|e| failed(Errno::EIO, e))?;
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
                    .map_err(|e| HookError::failed(e.errno(), e.to_string()))?;
                log::info!(
                    "dumped pid {}: {} BOs, {} bytes of GPU memory in {:.3}s",
                    report.pid,
                    report.bos,
                    report.bytes(),
                    report.elapsed.as_secs_f64()
                );
                lock(&self.state).paused.push(kfd);
                self.learn_user_ids(&report.gpus)?;
                let mut patches = Vec::new();
                {
                    let mut state = lock(&self.state);
                    for &(index, object) in &report.buffers {
                        patches.extend(state.ledger.kfd(id, index, object).map_err(gem_failed)?);
                    }
                }
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
        let state = lock(&self.state);
        let Some((r, target)) = state
            .restored
            .iter()
            .find_map(|r| Some((r, r.vmas.find(device, addr, old_pgoff)?)))
        else {
            if let VmaDevice::Render { minor } = device {
                let hit = state
                    .gem_remaps
                    .iter()
                    .filter(|(old, _, _)| *old == minor)
                    .find_map(|(_, remaps, render)| {
                        Some((remaps.iter().find_map(|r| r.answer(old_pgoff))?, render))
                    });
                if let Some((new_pgoff, render)) = hit {
                    let fd = dup(render.as_fd())?;
                    return Ok(Some(VmaUpdate {
                        new_pgoff,
                        fd: Some(fd),
                    }));
                }
            }
            drop(state);
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
            return Ok(None);
        };
        let fd = match target.on {
            MappedOn::Kfd => None,
            MappedOn::Render { gpu_id } => {
                let render = r.renders.get(&gpu_id).ok_or_else(|| {
                    failed(
                        Errno::EINVAL,
                        format!("no render node was restored for GPU {gpu_id:#x}"),
                    )
                })?;
                Some(dup(render.as_fd())?)
            }
        };
        Ok(Some(VmaUpdate {
            new_pgoff: target.new_pgoff,
            fd,
        }))
    }

    fn resume_devices_late(&self, pid: i32) -> HookResult<()> {
        self.enabled()?;
        let parallel = lock(&self.state).parallel.clone();
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
                    let killed = crate::shim::kill_restored_task(pid);
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
            Err(e) => return Err(failed(e.errno().unwrap_or(Errno::EIO), e)),
        };
        match kfd.criu_resume(pid) {
            Ok(()) => {
                log::info!("resumed the GPU queues of pid {pid}");
                Ok(())
            }
            Err(e) if e.errno() == Some(Errno::ESRCH) => Err(HookError::NotOurs),
            Err(e) => Err(failed(e.errno().unwrap_or(Errno::EIO), e)),
        }
    }

    fn post_forking(&self) -> HookResult<()> {
        self.enabled()?;
        let Some(hub) = lock(&self.state).parallel.clone() else {
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
        if lock(&self.state).parallel.is_some() {
            return Ok(());
        }
        self.start_parallel()
    }

    fn dump_devices_late(&self, _id: u32) -> HookResult<()> {
        let had = !lock(&self.state).paused.is_empty();
        // A process left paused would hang: criu fails the dump instead.
        self.unpause_all()
            .map_err(|e| failed(e.errno().unwrap_or(Errno::EIO), e.to_string()))?;
        let (lost, unlisted) = {
            let state = lock(&self.state);
            (state.ledger.unresolved(), state.unlisted.clone())
        };
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

/// The hooks of this process's plugin instance: the engine on the real machine.
pub(crate) fn hooks() -> &'static dyn CriuHooks {
    static ENGINE: OnceLock<Engine<HostPlatform>> = OnceLock::new();
    ENGINE.get_or_init(|| {
        Engine::new(HostPlatform::from_env(), criu_image_dir)
            .with_inventory(crate::shim::HostInventory)
    })
}

/// Whether the host criu calls DUMP_DEVICES_LATE (measured by the shim when criu loaded us).
fn host_has_dump_devices_late() -> bool {
    crate::shim::host().has_dump_devices_late
}

/// criu's image directory fd.
fn criu_image_dir() -> Option<RawFd> {
    crate::shim::criu_image_dir()
}
