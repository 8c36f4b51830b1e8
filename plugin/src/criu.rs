//! The engine behind criu's hooks: one [`Engine`] per criu process (and per restored process,
//! which inherits it across fork).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use images::proto::{CriuDmabufNode, CriuRenderNode};
use images::{DmabufImage, ImageFile, KfdImage, RenderNodeImage};
use kfd_abi::{Errno, Kfd};

use crate::copy::Staging;
use crate::dump::{self, DumpOptions};
use crate::gem::{self, GemError, Patch};
use crate::hooks::{CriuHooks, HookError, HookResult, Stage, VmaUpdate};
use crate::inventory::{self, Inventory, NoInventory};
use crate::restore::{self, RestoreOptions, Restored};
use crate::vma::{self, MappedOn, SharedBuffer, SharedVmas, VmaDevice};
use kfd_abi::platform::{DeviceKind, HostPlatform, Platform};

/// Turns on write-behind of the pages files at dump ([`Settings::write_behind`]).
pub(crate) const WRITE_BEHIND_ENV: &str = "AMDGPU_CR_WRITE_BEHIND";

/// Turns off restoring from mappings of the pages files ([`Settings::map_pages`]).
pub(crate) const MAP_PAGES_ENV: &str = "AMDGPU_CR_MAP_PAGES";

/// Turns on the parallel restore from criu's master ([`Settings::parallel_restore`]).
pub const PARALLEL_RESTORE_ENV: &str = "AMDGPU_CR_PARALLEL_RESTORE";

/// The settings that come from the environment (read once, at `init`).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Staging geometry (`KFD_MAX_BUFFER_SIZE` caps the buffer size).
    pub staging: Staging,
    /// `KFD_*_CHECK`.
    pub checks: topology::CheckOptions,
    /// Whether the host criu calls DUMP_DEVICES_LATE (the dumped queues are unpaused there; else
    /// in the exit hook).
    pub dump_devices_late: bool,
    /// Whether dumps write per-chunk checksums of the pages files.
    pub checksums: bool,
    /// Counts the bytes dumps and restores copy (for progress displays).
    pub progress: crate::copy::Progress,
    /// `AMDGPU_CR_WRITE_BEHIND`: dumps start writing the pages files to the disk as they go.
    pub write_behind: bool,
    /// `AMDGPU_CR_MAP_PAGES` (default on): restores have the GPU copy straight out of read-only
    /// mappings of the pages files (see `copy::restore_gpu`); off, they read them into
    /// staging buffers.
    pub map_pages: bool,
    /// `AMDGPU_CR_PARALLEL_RESTORE` (default off): under a criu that calls RESTORE_INIT and
    /// POST_FORKING, the restored tasks hand their BOs to criu's master, which writes their
    /// contents while the tasks go on restoring (see `crate::parallel`). Other criu versions
    /// restore contents in the task whatever it says.
    pub parallel_restore: bool,
}

impl Settings {
    /// From the process environment.
    pub fn from_env(dump_devices_late: bool) -> Self {
        Self::from_lookup(|k| std::env::var(k).ok(), dump_devices_late)
    }

    /// From a lookup function (tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>, dump_devices_late: bool) -> Self {
        let max = match topology::options::max_buffer_size_from_lookup(&lookup) {
            Ok(v) => v,
            Err(e) => {
                log::warn!("{e}; using the default staging size");
                None
            }
        };
        Self {
            staging: Staging::capped(max),
            checks: topology::CheckOptions::from_lookup(&lookup),
            dump_devices_late,
            checksums: true,
            progress: crate::copy::Progress::default(),
            write_behind: lookup(WRITE_BEHIND_ENV).is_some_and(|v| {
                topology::options::parse_bool(&v).unwrap_or_else(|| {
                    log::warn!("ignoring {WRITE_BEHIND_ENV}={v:?}: expected 0, 1, NO or YES");
                    false
                })
            }),
            map_pages: lookup(MAP_PAGES_ENV).is_none_or(|v| {
                topology::options::parse_bool(&v).unwrap_or_else(|| {
                    log::warn!("ignoring {MAP_PAGES_ENV}={v:?}: expected 0, 1, NO or YES");
                    true
                })
            }),
            parallel_restore: lookup(PARALLEL_RESTORE_ENV).is_some_and(|v| {
                topology::options::parse_bool(&v).unwrap_or_else(|| {
                    log::warn!("ignoring {PARALLEL_RESTORE_ENV}={v:?}: expected 0, 1, NO or YES");
                    false
                })
            }),
        }
    }
}

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

/// `SharedBuffer::old_minor` of a published dma-buf (render minors are 128..255): its `addr` is
/// the buffer's key, its `fd` the publisher's fd of the dma-buf.
const DMABUF_MARK: u32 = u32::MAX;

/// How long a restore waits for the file that creates a shared buffer to publish it.
const SHARE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

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

    /// Writes the image of a render-node file. Images record the GPU under the id the process
    /// uses (which differs from the GPU's id after a restore onto other GPUs), so the restore
    /// finds it in the process's mapping; a render node dumped before its process's `/dev/kfd`
    /// is rewritten once that id is known.
    fn dump_render(&self, fd: BorrowedFd<'_>, id: u32, minor: u32) -> HookResult<()> {
        let topo = self.local_topology()?;
        let actual = topo
            .gpus()
            .find(|n| n.render_minor() == minor)
            .ok_or_else(|| {
                failed(
                    Errno::ENODEV,
                    format!("renderD{minor} is not a GPU of the KFD topology"),
                )
            })?
            .gpu_id;
        let render = self
            .platform
            .render_from_fd(dup(fd)?)
            .map_err(|e| failed(Errno::EIO, e))?;
        let mut msg = CriuRenderNode {
            gpu_id: actual,
            id,
            drm_render_minor: minor,
            ..Default::default()
        };
        let mut patches = Vec::new();
        match gem::list(&render, minor).map_err(gem_failed)? {
            None => {
                log::debug!(
                    "renderD{minor}: the kernel cannot list its buffers (AMDGPU_GEM_LIST_HANDLES, \
                     Linux 6.18): none saved"
                );
                lock(&self.state).unlisted.insert(minor);
            }
            Some(mut listed) => {
                {
                    let mut state = lock(&self.state);
                    for (i, l) in listed.iter_mut().enumerate() {
                        let (import, p) = state
                            .ledger
                            .render(id, i, l.entry.handle, l.object)
                            .map_err(gem_failed)?;
                        l.entry.is_import = u32::from(import);
                        patches.extend(p);
                    }
                }
                let settings = self.settings();
                let opts = DumpOptions {
                    staging: settings.staging,
                    checksums: settings.checksums,
                    progress: settings.progress.clone(),
                    write_behind: settings.write_behind,
                };
                msg.pages_checksums =
                    gem::dump_contents(&*self.platform, minor, id, self.dir()?, &listed, &opts)
                        .map_err(gem_failed)?;
                msg.num_of_bos = listed.len() as u64;
                msg.bo_entries = listed.into_iter().map(|l| l.entry).collect();
            }
        }
        let mut state = lock(&self.state);
        if let Some(&user) = state.user_ids.get(&actual) {
            msg.gpu_id = user;
        } else {
            state.pending_renders.push((id, actual, minor));
        }
        drop(state);
        RenderNodeImage::write(self.dir()?, id, &msg).map_err(|e| failed(Errno::EIO, e))?;
        log::info!(
            "dumped renderD{minor} (GPU {:#x}) as image {id}: {} buffers",
            msg.gpu_id,
            msg.bo_entries.len()
        );
        self.apply(patches)
    }

    /// Rewrites the images a [`gem::Ledger`] sighting changed.
    fn apply(&self, patches: Vec<Patch>) -> HookResult<()> {
        let dir = self.dir()?;
        let io = |e: images::FrameError| failed(Errno::EIO, e);
        for p in patches {
            match p {
                Patch::RenderImport { id, index } => {
                    let mut m = RenderNodeImage::read(dir, id).map_err(io)?;
                    if let Some(e) = m.bo_entries.get_mut(index) {
                        e.is_import = 1;
                    }
                    RenderNodeImage::write(dir, id, &m).map_err(io)?;
                }
                Patch::KfdHandle { id, index, key } => {
                    let mut m = KfdImage::read(dir, id).map_err(io)?;
                    if let Some(e) = m.bo_entries.get_mut(index) {
                        e.handle = key;
                    }
                    KfdImage::write(dir, id, &m).map_err(io)?;
                }
                Patch::Dmabuf { id, key } => {
                    DmabufImage::write(dir, id, &CriuDmabufNode { gem_handle: key }).map_err(io)?;
                    log::info!("dumped a dma-buf as image {id}: the buffer shared as {key}");
                }
            }
        }
        Ok(())
    }

    /// A dma-buf fd: which buffer it is, once a dumped file holds that buffer.
    fn dump_dmabuf(&self, fd: BorrowedFd<'_>, id: u32) -> HookResult<()> {
        let object = gem::object_id(fd).map_err(|e| failed(Errno::from_io(&e), e))?;
        let patches = lock(&self.state)
            .ledger
            .dmabuf(id, object)
            .map_err(gem_failed)?;
        if patches.is_empty() {
            log::info!("dma-buf image {id}: its buffer is in a file not dumped yet");
        }
        self.apply(patches)
    }

    /// Records the user ids of a dumped KFD file and fixes the render images written before it.
    fn learn_user_ids(&self, gpus: &[crate::dump::GpuDump]) -> HookResult<()> {
        let mut guard = lock(&self.state);
        let state = &mut *guard;
        for g in gpus {
            state.user_ids.insert(g.actual_gpu_id, g.gpu_id);
        }
        let mut fixes = Vec::new();
        state
            .pending_renders
            .retain(|&(id, actual, minor)| match state.user_ids.get(&actual) {
                Some(&user) => {
                    fixes.push((id, user, minor));
                    false
                }
                None => true,
            });
        drop(guard);
        let dir = self.dir()?;
        for (id, user, minor) in fixes {
            let mut m = RenderNodeImage::read(dir, id).map_err(|e| failed(Errno::EIO, e))?;
            m.gpu_id = user;
            RenderNodeImage::write(dir, id, &m).map_err(|e| failed(Errno::EIO, e))?;
            log::info!("renderD{minor} of image {id} is GPU {user:#x} to its process");
        }
        Ok(())
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
        let settings = self.settings();
        let opts = RestoreOptions {
            staging: settings.staging,
            map_pages: settings.map_pages,
            checks: settings.checks,
            progress: settings.progress,
            handoff: lock(&self.state).parallel.clone(),
        };
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

    /// The keys of the buffers that some file of the checkpoint imports or holds as a dma-buf
    /// (read once from the image directory): their creators publish them.
    fn needed_keys(&self) -> std::sync::Arc<std::collections::BTreeSet<u32>> {
        if let Some(n) = &lock(&self.state).needed {
            return std::sync::Arc::clone(n);
        }
        let keys = std::sync::Arc::new(self.scan_keys(Keys::Imported));
        lock(&self.state).needed = Some(std::sync::Arc::clone(&keys));
        keys
    }

    /// The keys of the buffers that some file of the checkpoint creates: render-node buffers
    /// that are not imports, and `/dev/kfd` BOs named by a handle (read once).
    fn created_keys(&self) -> std::sync::Arc<std::collections::BTreeSet<u32>> {
        if let Some(c) = &lock(&self.state).created {
            return std::sync::Arc::clone(c);
        }
        let keys = std::sync::Arc::new(self.scan_keys(Keys::Created));
        lock(&self.state).created = Some(std::sync::Arc::clone(&keys));
        keys
    }

    /// The keys of `which` buffers of the directory's images. An image that cannot be read adds
    /// none: its own restore says why.
    fn scan_keys(&self, which: Keys) -> std::collections::BTreeSet<u32> {
        let created = which != Keys::Imported;
        let mut keys = std::collections::BTreeSet::new();
        if let Ok(dir) = self.dir() {
            let path = format!("/proc/self/fd/{}", dir.as_raw_fd());
            for name in std::fs::read_dir(path)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
            {
                let id = |prefix: &str| {
                    name.strip_prefix(prefix)?
                        .strip_suffix(".img")?
                        .parse::<i32>()
                        .ok()
                        .map(|v| u32::from_ne_bytes(v.to_ne_bytes()))
                };
                if let Some(id) = id("amdgpu-renderD-") {
                    if let Ok(m) = RenderNodeImage::read(dir, id) {
                        keys.extend(
                            m.bo_entries
                                .iter()
                                .filter(|b| (b.is_import == 0) == created)
                                .map(|b| b.handle),
                        );
                    }
                } else if let Some(id) = id("amdgpu-dmabuf_").filter(|_| !created) {
                    if let Ok(m) = DmabufImage::read(dir, id) {
                        keys.insert(m.gem_handle);
                    }
                } else if let Some(id) = id("amdgpu-kfd-").filter(|_| which == Keys::Created) {
                    if let Ok(m) = KfdImage::read(dir, id) {
                        keys.extend(
                            m.bo_entries
                                .iter()
                                .map(|b| b.handle)
                                .filter(|&h| h != u32::MAX),
                        );
                    }
                }
            }
        }
        keys
    }

    /// Publishes the dma-bufs of buffers created in this task that other files need, for the
    /// other restored tasks (kept open here, above the task's own fds).
    fn publish_dmabufs(&self, created: Vec<(u32, OwnedFd)>) -> HookResult<()> {
        let needed = self.needed_keys();
        let Some(shared) = lock(&self.state).shared.clone() else {
            return Ok(());
        };
        let owner = self.platform.process_id();
        let published: std::collections::BTreeSet<u64> = shared
            .buffers()
            .iter()
            .filter(|b| b.old_minor == DMABUF_MARK)
            .map(|b| b.addr)
            .collect();
        let mut records = Vec::new();
        let mut kept = Vec::new();
        for (key, fd) in created {
            if !needed.contains(&key) || published.contains(&u64::from(key)) {
                continue;
            }
            let fd = match crate::shim::unused_fd_of(owner) {
                Some(next) => kfd_abi::transport::dup_at_or_above(fd.as_fd(), next)
                    .map_err(|e| failed(Errno::from_io(&e), e))?,
                None => fd,
            };
            records.push(SharedBuffer {
                owner,
                old_minor: DMABUF_MARK,
                addr: u64::from(key),
                size: 0,
                old_offset: 0,
                new_offset: 0,
                fd: fd.as_raw_fd(),
                new_minor: 0,
            });
            kept.push(fd);
        }
        shared
            .publish(&records)
            .map_err(|e| failed(Errno::ENOSPC, e))?;
        for r in &records {
            log::info!("pid {owner}: published the buffer shared as {}", r.addr);
        }
        lock(&self.state).kept.extend(kept);
        Ok(())
    }

    /// The dma-buf of the buffer shared as `key`, once the task that creates it published it.
    fn lookup_shared(&self, key: u32, what: &str) -> Result<OwnedFd, GemError> {
        let not_published = |secs| GemError::NotPublished {
            what: what.to_owned(),
            key,
            secs,
        };
        if !self.created_keys().contains(&key) {
            return Err(GemError::Inconsistent {
                file: what.to_owned(),
                what: format!(
                    "no image of the checkpoint creates the buffer shared as GEM handle {key} (no \
                     render-node buffer of that handle that is not an import, no /dev/kfd buffer \
                     shared under it)"
                ),
            });
        }
        let Some(shared) = lock(&self.state).shared.clone() else {
            return Err(not_published(0));
        };
        let start = std::time::Instant::now();
        loop {
            let hit = shared
                .buffers()
                .into_iter()
                .find(|b| b.old_minor == DMABUF_MARK && b.addr == u64::from(key));
            if let Some(b) = hit {
                return self.platform.fd_of_process(b.owner, b.fd).map_err(|e| {
                    GemError::Unshareable(format!(
                        "{what}: taking the buffer shared as {key} (fd {} of pid {}): {e}",
                        b.fd, b.owner
                    ))
                });
            }
            if start.elapsed() >= SHARE_WAIT {
                return Err(not_published(SHARE_WAIT.as_secs()));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// A dma-buf fd: the dma-buf of the restored buffer it shares.
    fn restore_dmabuf(&self, id: u32, msg: CriuDmabufNode) -> HookResult<OwnedFd> {
        let what = DmabufImage::file_name(id);
        let fd = self
            .lookup_shared(msg.gem_handle, &what)
            .map_err(gem_failed)?;
        log::info!(
            "{what}: restored as the buffer shared as {}",
            msg.gem_handle
        );
        Ok(fd)
    }

    /// Recreates the buffers of render image `id` in `render`, the process's restored file.
    fn restore_gem(
        &self,
        id: u32,
        msg: &CriuRenderNode,
        render: &kfd_abi::RenderNode<P::Device>,
    ) -> HookResult<()> {
        if msg.bo_entries.is_empty() {
            return Ok(());
        }
        let minor = match self.platform.identify(render.as_fd()) {
            Ok(DeviceKind::Render { minor }) => minor,
            other => {
                return Err(failed(
                    Errno::EINVAL,
                    format!("the restored render node of image {id} is not one: {other:?}"),
                ))
            }
        };
        let settings = self.settings();
        let lookup = |key: u32, what: &str| self.lookup_shared(key, what);
        // The render images' keys are read once, and only for an image that asks (criu-dev's).
        let render_created = std::cell::OnceCell::new();
        let kfd_only = |key: u32| {
            self.created_keys().contains(&key)
                && !render_created
                    .get_or_init(|| self.scan_keys(Keys::RenderCreated))
                    .contains(&key)
        };
        let opts = gem::RestoreGemOptions {
            staging: settings.staging,
            map_pages: settings.map_pages,
            progress: &settings.progress,
            lookup: &lookup,
            kfd_only: &kfd_only,
        };
        let restored = gem::restore(&gem::RenderRestore {
            platform: &*self.platform,
            render,
            minor,
            id,
            msg,
            dir: self.dir()?,
            opts: &opts,
        })
        .map_err(gem_failed)?;
        log::info!(
            "{}: {} buffers of renderD{} restored on renderD{minor}, {} bytes",
            RenderNodeImage::file_name(id),
            msg.bo_entries.len(),
            msg.drm_render_minor,
            restored.bytes
        );
        self.publish_dmabufs(restored.created)?;
        // Kept for UPDATE_VMA_MAP: above every fd the task will have, like the KFD's files (at
        // the lowest free number it took an fd criu then restores the task's own file at).
        let above = crate::shim::unused_fd_of(self.platform.process_id()).unwrap_or(0);
        let keep = self.render_at_or_above(render, above)?;
        lock(&self.state)
            .gem_remaps
            .push((msg.drm_render_minor, restored.remaps, keep));
        Ok(())
    }

    /// Puts the render-node buffers of a process restored here in the table the other restored
    /// tasks see: a child that shares this process's files (forked before the dump) maps them
    /// through this task's render nodes.
    fn publish(&self, r: &Restored<P::Device>) {
        let Some(shared) = lock(&self.state).shared.clone() else {
            return;
        };
        let owner = self.platform.process_id();
        let buffers: Vec<SharedBuffer> = r
            .vmas
            .render_buffers()
            .filter_map(|(old_minor, gpu_id, b)| {
                let render = r.renders.get(&gpu_id)?;
                Some(SharedBuffer {
                    owner,
                    old_minor,
                    addr: b.addr,
                    size: b.size,
                    old_offset: b.old_offset,
                    new_offset: b.new_offset,
                    fd: render.as_fd().as_raw_fd(),
                    new_minor: r
                        .mapping
                        .gpu(gpu_id)
                        .map_or(0, |g| g.destination_render_minor),
                })
            })
            .collect();
        match shared.publish(&buffers) {
            Ok(()) => log::debug!(
                "pid {owner}: {} render-node buffers shared with the other restored tasks",
                buffers.len()
            ),
            Err(e) => log::warn!("pid {owner}: {e}"),
        }
    }

    /// UPDATE_VMA_MAP for a render VMA of a task that restored no buffer there: one that another
    /// task restored (the task's parent, which it shares the files with), mapped through that
    /// task's render node.
    fn inherited_vma(
        &self,
        minor: u32,
        addr: u64,
        old_pgoff: u64,
    ) -> HookResult<Option<VmaUpdate>> {
        let pid = self.platform.process_id();
        let mut state = lock(&self.state);
        let Some(shared) = state.shared.clone() else {
            return Ok(None);
        };
        let find = |buffers: &[SharedBuffer]| {
            vma::find_inherited(buffers, pid, minor, addr, old_pgoff, |p| {
                self.platform.parent_of(p)
            })
            .map_err(|e| failed(Errno::EINVAL, e))
        };
        let mut hit = find(&state.inherited)?;
        if hit.is_none() {
            // Published since this task last looked.
            state.inherited = shared.buffers();
            hit = find(&state.inherited)?;
        }
        drop(state);
        let Some((b, new_pgoff)) = hit else {
            if shared.lost() > 0 {
                return Err(failed(
                    Errno::ENOSPC,
                    format!(
                        "no restored buffer had renderD{minor} at {addr:#x} with offset \
                         {old_pgoff:#x}, and {} buffers did not fit in the table of {} shared \
                         with forked tasks",
                        shared.lost(),
                        shared.capacity()
                    ),
                ));
            }
            return Ok(None);
        };
        let fd = self.platform.fd_of_process(b.owner, b.fd).map_err(|e| {
            failed(
                Errno::from_io(&e),
                format!(
                    "taking renderD{} (fd {}) from pid {}, which restored the buffer at \
                         {addr:#x}: {e}",
                    b.new_minor, b.fd, b.owner
                ),
            )
        })?;
        log::info!(
            "pid {pid}: renderD{minor} at {addr:#x} maps the buffer pid {} restored (offset \
             {old_pgoff:#x} -> {new_pgoff:#x}, renderD{})",
            b.owner,
            b.new_minor
        );
        Ok(Some(VmaUpdate {
            new_pgoff,
            fd: Some(fd),
        }))
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

    /// `render` moved to the lowest free fd number at or above `next`.
    fn render_at_or_above(
        &self,
        render: &kfd_abi::RenderNode<P::Device>,
        next: RawFd,
    ) -> HookResult<kfd_abi::RenderNode<P::Device>> {
        let high = kfd_abi::transport::dup_at_or_above(render.as_fd(), next)
            .map_err(|e| failed(Errno::from_io(&e), e))?;
        self.platform
            .render_from_fd(high)
            .map_err(|e| failed(Errno::EIO, e))
    }

    /// Restores a render-node file as the same open file that the process's KFD restore gave
    /// the driver for that GPU: its VM is the process's compute VM, as it was before the dump.
    /// A render node restored before its process's `/dev/kfd` (the process opened it first) is
    /// opened on the GPU the restore will map it to and handed to the KFD restore later; in a
    /// process without `/dev/kfd` it is the GPU of the same id on this machine.
    fn restore_render(&self, id: u32, msg: &CriuRenderNode) -> HookResult<Option<OwnedFd>> {
        let known = {
            let state = lock(&self.state);
            state
                .restored
                .iter()
                .find_map(|r| r.renders.get(&msg.gpu_id))
                .or_else(|| state.preopened.get(&msg.gpu_id))
                .map(kfd_abi::RenderNode::try_clone)
        };
        if let Some(render) = known {
            let render = render.map_err(|e| failed(Errno::EIO, e))?;
            self.restore_gem(id, msg, &render)?;
            return dup(render.as_fd()).map(Some);
        }
        let render = self.open_render_early(id, msg)?;
        // Kept until the KFD restore: above every fd the task will have, like the KFD's files.
        let render = match crate::shim::unused_fd_of(self.platform.process_id()) {
            Some(next) => self.render_at_or_above(&render, next)?,
            None => render,
        };
        self.restore_gem(id, msg, &render)?;
        let fd = dup(render.as_fd())?;
        lock(&self.state).preopened.insert(msg.gpu_id, render);
        Ok(Some(fd))
    }

    /// Opens the render node for render image `id` before any `/dev/kfd` of this process was
    /// restored.
    fn open_render_early(
        &self,
        id: u32,
        msg: &CriuRenderNode,
    ) -> HookResult<kfd_abi::RenderNode<P::Device>> {
        let dir = self.dir()?;
        let image = RenderNodeImage::file_name(id);
        let err = |e: restore::RestoreError| HookError::failed(e.errno(), format!("{image}: {e}"));
        let local = self.usable_topology()?;
        let cached = lock(&self.state).own_kfd_image;
        let kfd_id = match cached {
            Some(k) => k,
            None => {
                let k = restore::kfd_image_of(dir, self.platform.process_id()).map_err(err)?;
                lock(&self.state).own_kfd_image = Some(k);
                k
            }
        };
        let checks = self.settings().checks;
        let minor = restore::render_minor_for(msg.gpu_id, kfd_id, dir, &local.topology, &checks)
            .map_err(err)?
            .ok_or_else(|| {
                let kfd = match kfd_id {
                    Some(k) => format!(", and the process's /dev/kfd image {k} does not use it"),
                    None => String::new(),
                };
                failed(
                    Errno::ENODEV,
                    format!(
                        "{image}: renderD{} (GPU {:#x}) at the dump: this machine has no GPU of \
                         that id{kfd}",
                        msg.drm_render_minor, msg.gpu_id
                    ),
                )
            })?;
        log::info!(
            "{image}: GPU {:#x} opened as renderD{minor} before its process's /dev/kfd{}",
            msg.gpu_id,
            if kfd_id.is_some() {
                " (handed to the KFD restore)"
            } else {
                " (the process has none)"
            }
        );
        self.platform
            .open_render(minor)
            .map_err(|e| failed(e.errno().unwrap_or(Errno::EIO), e))
    }
}

impl<P: Platform> Engine<P> {
    /// RESTORE_INIT with the parallel restore on: the socket the restored tasks send their BOs
    /// on, and the fills in this (criu's master) process.
    fn start_parallel(&self) -> HookResult<()> {
        let dir = self.dir()?;
        let settings = self.settings();
        let opts = RestoreOptions {
            staging: settings.staging,
            map_pages: settings.map_pages,
            checks: settings.checks,
            progress: settings.progress,
            handoff: None,
        };
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
                let opts = DumpOptions {
                    staging: settings.staging,
                    checksums: settings.checksums,
                    progress: settings.progress.clone(),
                    write_behind: settings.write_behind,
                };
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

/// Which keys of the images [`Engine::scan_keys`] collects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Keys {
    /// Of buffers that render-node and dma-buf images import.
    Imported,
    /// Of buffers that render-node or /dev/kfd images create.
    Created,
    /// Of buffers that render-node images create.
    RenderCreated,
}

/// Whether the host criu calls DUMP_DEVICES_LATE (measured by the shim when criu loaded us).
fn host_has_dump_devices_late() -> bool {
    crate::shim::host().has_dump_devices_late
}

/// criu's image directory fd.
fn criu_image_dir() -> Option<RawFd> {
    crate::shim::criu_image_dir()
}

/// Refuses a render-node image whose counts contradict its lists (`num_of_bos` against
/// `bo_entries`, each buffer's `num_of_vms` against its `vm_entries`) before anything of it is
/// restored: its buffers would be restored short.
fn check_render_counts(id: u32, msg: &CriuRenderNode) -> HookResult<()> {
    let listed = msg.bo_entries.len() as u64;
    let what = if msg.num_of_bos != listed {
        format!(
            "num_of_bos says {} but it lists {listed} buffer(s)",
            msg.num_of_bos
        )
    } else if let Some((i, b)) = msg
        .bo_entries
        .iter()
        .enumerate()
        .find(|(_, b)| b.num_of_vms as usize != b.vm_entries.len())
    {
        format!(
            "buffer {i} (GEM handle {}): num_of_vms says {} but it lists {} mapping(s)",
            b.handle,
            b.num_of_vms,
            b.vm_entries.len()
        )
    } else {
        return Ok(());
    };
    Err(HookError::failed(
        Errno::EINVAL,
        format!(
            "{}: the image of render node renderD{} contradicts itself: {what}: refused",
            RenderNodeImage::file_name(id),
            msg.drm_render_minor
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The settings of an environment that holds `value` (or nothing) under `env` alone.
    fn settings_with(env: &str, value: Option<&str>) -> Settings {
        Settings::from_lookup(
            |k| (k == env).then(|| value.map(String::from)).flatten(),
            false,
        )
    }

    #[rstest::rstest]
    #[case::unset(None, false)]
    #[case::on(Some("1"), true)]
    #[case::yes(Some("YES"), true)]
    #[case::off(Some("0"), false)]
    #[case::garbage_is_ignored(Some("sometimes"), false)]
    fn write_behind_comes_from_the_environment(#[case] value: Option<&str>, #[case] on: bool) {
        let s = settings_with(WRITE_BEHIND_ENV, value);
        assert_eq!(s.write_behind, on);
    }

    #[rstest::rstest]
    #[case::unset(None, true)]
    #[case::on(Some("yes"), true)]
    #[case::off(Some("0"), false)]
    #[case::no(Some("NO"), false)]
    #[case::garbage_is_ignored(Some("rarely"), true)]
    fn mapping_the_pages_files_comes_from_the_environment(
        #[case] value: Option<&str>,
        #[case] on: bool,
    ) {
        let s = settings_with(MAP_PAGES_ENV, value);
        assert_eq!(s.map_pages, on);
    }

    #[rstest::rstest]
    #[case::unset(None, false)]
    #[case::on(Some("1"), true)]
    #[case::yes(Some("yes"), true)]
    #[case::off(Some("0"), false)]
    #[case::garbage_is_ignored(Some("fast"), false)]
    fn the_parallel_restore_comes_from_the_environment(
        #[case] value: Option<&str>,
        #[case] on: bool,
    ) {
        let s = settings_with(PARALLEL_RESTORE_ENV, value);
        assert_eq!(s.parallel_restore, on);
    }
}
