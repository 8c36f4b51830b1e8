//! What the engine keeps for one stage of criu: a [`Session`], made when criu calls `init` for
//! the stage and dropped at `fini`, so that nothing of a dump outlives it and nothing of one
//! restore reaches the next. A dump's session unpauses the processes it left paused when it
//! goes; a restore's shuts the parallel restore down in the process that started it.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::OwnedFd;
use std::sync::Arc;

use kfd_abi::platform::Platform;
use kfd_abi::{Kfd, RenderNode};
use topology::Topology;

use crate::dump::sharing::Ledger;
use crate::restore::parallel::Hub;
use crate::restore::render::GemRemap;
use crate::restore::sharing::{SharedBuffer, SharedVmas};
use crate::restore::{Restored, UsableGpus};

/// The state of the stage criu is in.
#[derive(Debug)]
pub(super) enum Session<P: Platform> {
    /// `criu dump`.
    Dump(DumpSession<P>),
    /// `criu restore`, in criu's process or in a restored task (which inherits a copy).
    Restore(RestoreSession<P>),
}

impl<P: Platform> Session<P> {
    /// The local topology, once read in this stage.
    pub(super) fn topology(&mut self) -> &mut Option<Arc<Topology>> {
        match self {
            Session::Dump(d) => &mut d.topology,
            Session::Restore(r) => &mut r.topology,
        }
    }
}

/// What a dump remembers between hooks.
#[derive(Debug)]
pub(super) struct DumpSession<P: Platform> {
    /// Dumped processes whose queues stay paused until DUMP_DEVICES_LATE (or the end).
    pub(super) paused: Vec<Kfd<P::Device>>,
    /// The ids processes use for GPUs (user ids), by the GPU's id now (actual id), from the KFD
    /// files dumped so far.
    pub(super) user_ids: BTreeMap<u32, u32>,
    /// The local topology, read once per criu run (every device file of a dump needs it).
    pub(super) topology: Option<Arc<Topology>>,
    /// Render-node images written before the KFD file that names their GPU's user id, as (image
    /// id, actual gpu id, render minor).
    pub(super) pending_renders: Vec<(u32, u32, u32)>,
    /// The buffer objects seen so far (render-node buffers, KFD BOs, dma-bufs).
    pub(super) ledger: Ledger,
    /// The render minors whose buffers the kernel could not list (before Linux 6.18).
    pub(super) unlisted: BTreeSet<u32>,
}

impl<P: Platform> Default for DumpSession<P> {
    fn default() -> Self {
        Self {
            paused: Vec::new(),
            user_ids: BTreeMap::new(),
            topology: None,
            pending_renders: Vec::new(),
            ledger: Ledger::default(),
            unlisted: BTreeSet::new(),
        }
    }
}

impl<P: Platform> DumpSession<P> {
    /// Unpauses every dumped process's queues; the first failure, if any (each is logged).
    pub(super) fn unpause_all(&mut self) -> Result<(), kfd_abi::IoctlError> {
        let mut first = Ok(());
        for kfd in self.paused.drain(..) {
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
}

impl<P: Platform> Drop for DumpSession<P> {
    fn drop(&mut self) {
        // Never leave a process paused, whatever happened in between (a failure is logged: the
        // exit hook cannot fail the dump any more).
        let _ = self.unpause_all();
        let lost = self.ledger.unresolved();
        if !lost.is_empty() {
            log::error!(
                "dma-buf images {lost:?}: their buffers are in no dumped file (no render node or \
                 /dev/kfd of the tree holds them): not saved"
            );
        }
    }
}

/// What a restore remembers between hooks, in criu's process and in each restored task.
#[derive(Debug)]
pub(super) struct RestoreSession<P: Platform> {
    /// The process this session is in (the platform's pid): the parallel restore is shut down
    /// by the process that started it, and only forgotten by the tasks that inherited it.
    pub(super) pid: u32,
    /// The KFD files restored in this (restored) process.
    pub(super) restored: Vec<Restored<P::Device>>,
    /// The local topology, read at `init` in criu's process (the tasks inherit it).
    pub(super) topology: Option<Arc<Topology>>,
    /// The part of it that the restored process (by pid) may use, probed once per process (a
    /// child task forked by its restored parent probes its own).
    pub(super) usable: Option<(u32, Arc<UsableGpus>)>,
    /// Render nodes restored before this process's `/dev/kfd` (or in a process without one), by
    /// the GPU id of their image.
    pub(super) preopened: BTreeMap<u32, RenderNode<P::Device>>,
    /// Which `/dev/kfd` image is this process's (`None` inside: it has none), once looked up.
    pub(super) own_kfd_image: Option<Option<u32>>,
    /// The render-node buffers every restored task published, made at `init` in criu's process
    /// (before it forks the tasks, which share it).
    pub(super) shared: Option<Arc<SharedVmas>>,
    /// This task's copy of what it last read of `shared`.
    pub(super) inherited: Vec<SharedBuffer>,
    /// The render-node buffers restored in this task: the render minor at checkpoint, their
    /// offsets, the file they are mapped from.
    pub(super) gem_remaps: Vec<(u32, Vec<GemRemap>, RenderNode<P::Device>)>,
    /// Dma-bufs this task keeps open for other tasks (published in `shared`).
    pub(super) kept: Vec<OwnedFd>,
    /// The keys of buffers some file imports or holds as a dma-buf (read once).
    pub(super) needed: Option<Arc<BTreeSet<u32>>>,
    /// The keys of buffers some file of the checkpoint creates (read once, when a file first
    /// imports one).
    pub(super) created: Option<Arc<BTreeSet<u32>>>,
    /// With the parallel restore on: the master's socket and fills, made at RESTORE_INIT (the
    /// tasks use its task end).
    pub(super) parallel: Option<Arc<Hub>>,
}

impl<P: Platform> RestoreSession<P> {
    /// A restore's session in process `pid`, with nothing restored yet.
    pub(super) fn new(pid: u32) -> Self {
        Self {
            pid,
            restored: Vec::new(),
            topology: None,
            usable: None,
            preopened: BTreeMap::new(),
            own_kfd_image: None,
            shared: None,
            inherited: Vec::new(),
            gem_remaps: Vec::new(),
            kept: Vec::new(),
            needed: None,
            created: None,
            parallel: None,
        }
    }

    /// What a task that criu forks after `init` has of this session, in process `pid`: the
    /// topology read at `init`, the table of buffers shared between the restored tasks and the
    /// parallel restore's socket.
    pub(super) fn forked(&self, pid: u32) -> Self {
        let mut copy = Self::new(pid);
        copy.topology = self.topology.clone();
        copy.shared = self.shared.clone();
        copy.parallel = self.parallel.clone();
        copy
    }
}

impl<P: Platform> Drop for RestoreSession<P> {
    fn drop(&mut self) {
        if let Some(hub) = self.parallel.take() {
            if hub.owner == self.pid {
                hub.shut_down();
            } else {
                // A restored task's copy of the master's: its fd numbers are the task's own
                // files by now (criu closed the inherited ones), so they are never closed here.
                std::mem::forget(hub);
            }
        }
    }
}
