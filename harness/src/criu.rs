//! criu's part of a checkpoint and a restore on a simulated node: the plugin's hooks called in
//! criu's order, as criu calls them (a tracer process for DUMP_EXT_FILE, RESTORE_EXT_FILE in the
//! restored process, RESUME_DEVICES_LATE from criu's side), and the criu file ids of the
//! checkpoint's device files ([`ImageIds`]); a tree of processes sharing buffers
//! ([`checkpoint_tree`], [`restore_tree`]).

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use amdgpu_plugin::criu::Settings;
use amdgpu_plugin::hooks::{CriuHooks, HookError, Stage};
use kfd_abi::{DeviceKind, Kfd, Platform, RenderNode};
use kfd_sim::{Preset, SimFile, SimPlatform, SimProcess};
use serde::Serialize;

use crate::node::{hook, io_err, start_target, NodeError, SimNode, Target};
use crate::workload::{self, Manifest, Spec};

/// The criu file ids of a checkpoint: `/dev/kfd` first, then one per render node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ImageIds {
    /// The checkpointed process (criu restores it under the same pid).
    pub pid: u32,
    /// Whether the process opened its render nodes before `/dev/kfd` (criu restores files in
    /// the order of their fds).
    pub renders_first: bool,
    /// The `/dev/kfd` file.
    pub kfd: u32,
    /// The render-node files, in the workload's GPU order.
    pub renders: Vec<u32>,
}

fn open_dir(dir: &Path) -> Result<File, NodeError> {
    File::open(dir).map_err(io_err(format!("opening image directory {}", dir.display())))
}

/// Checkpoints `target` into `dir` through the plugin's hooks, in criu's order, as a tracer
/// process of `node` (criu's part). Returns the file ids and the time the dump took.
pub fn checkpoint(
    node: &SimNode,
    target: &Target,
    dir: &Path,
    settings: &Settings,
) -> Result<(ImageIds, Duration), NodeError> {
    let renders: Vec<&RenderNode<SimFile>> = target.workload.renders().iter().collect();
    checkpoint_files(
        node,
        &|p| p,
        &target.process,
        target.workload.kfd(),
        &renders,
        dir,
        settings,
    )
}

/// Starts the workload of `spec` on a new node of `preset`, checkpoints it into `dir` and lets
/// the node go: what a test that needs only the images does. Returns the file ids and the
/// workload's manifest.
pub fn checkpoint_new(
    preset: &Preset,
    spec: &Spec,
    dir: &Path,
    settings: &Settings,
) -> Result<(ImageIds, Manifest), NodeError> {
    let node = SimNode::new(preset)?;
    let target = start_target(&node, spec)?;
    let (ids, _) = checkpoint(&node, &target, dir, settings)?;
    Ok((ids, target.workload.manifest().clone()))
}

/// [`checkpoint`] for any process of `node` with its `/dev/kfd` and render-node files, with the
/// engine on `wrap(platform)` (tests wrap the platform to inject faults).
pub fn checkpoint_files<P: Platform, W: Fn(SimPlatform) -> P>(
    node: &SimNode,
    wrap: &W,
    process: &SimProcess,
    kfd: &Kfd<SimFile>,
    renders: &[&RenderNode<SimFile>],
    dir: &Path,
    settings: &Settings,
) -> Result<(ImageIds, Duration), NodeError> {
    let dirf = open_dir(dir)?;
    let criu = node.machine.spawn_process();
    criu.ptrace_attach(process);
    let engine = node.engine(wrap, &criu, &dirf, settings);
    engine.init(Stage::Dump).map_err(hook("init"))?;
    let start = Instant::now();
    let mut ids = ImageIds {
        pid: process.pid(),
        renders_first: false,
        kfd: 1,
        renders: Vec::new(),
    };
    let result = (|| {
        engine
            .dump_ext_file(kfd.as_fd(), ids.kfd)
            .map_err(hook("DUMP_EXT_FILE(/dev/kfd)"))?;
        for (i, render) in renders.iter().enumerate() {
            let id = 2 + u32::try_from(i).unwrap_or(u32::MAX - 2);
            engine
                .dump_ext_file(render.as_fd(), id)
                .map_err(hook("DUMP_EXT_FILE(render node)"))?;
            ids.renders.push(id);
        }
        engine
            .dump_devices_late(process.pid())
            .or_else(|e| match e {
                HookError::NotOurs => Ok(()),
                e => Err(hook("DUMP_DEVICES_LATE")(e)),
            })
    })();
    let elapsed = start.elapsed();
    engine.fini(Stage::Dump, if result.is_ok() { 0 } else { -1 });
    criu.ptrace_detach(process);
    result.map(|()| (ids, elapsed))
}

/// Checkpoints a process that a restore made (`restored`, on `node`) into `dir`, as criu dumps a
/// restored process again: [`checkpoint_files`] of its files as RESTORE_EXT_FILE returned them.
pub fn checkpoint_restored(
    node: &SimNode,
    restored: &RestoredTarget,
    dir: &Path,
    settings: &Settings,
) -> Result<(ImageIds, Duration), NodeError> {
    let renders: Vec<&RenderNode<SimFile>> = restored.renders.iter().collect();
    checkpoint_files(
        node,
        &|p| p,
        &restored.process,
        &restored.kfd,
        &renders,
        dir,
        settings,
    )
}

/// The restored process: its `/dev/kfd` and render nodes as RESTORE_EXT_FILE returned them.
#[derive(Debug)]
pub struct RestoredTarget {
    /// The simulated process.
    pub process: SimProcess,
    /// Its `/dev/kfd`.
    pub kfd: Kfd<SimFile>,
    /// Its render nodes, in the workload's GPU order.
    pub renders: Vec<RenderNode<SimFile>>,
    /// The GPU mapping the plugin chose.
    pub mapping: Vec<topology::GpuMapping>,
}

impl RestoredTarget {
    /// Verifies the restored workload against its manifest.
    pub fn verify(&self, manifest: &Manifest) -> Result<workload::Report, workload::WorkloadError> {
        let renders: Vec<&RenderNode<SimFile>> = self.renders.iter().collect();
        workload::verify(&self.kfd, &renders, manifest)
    }
}

/// Restores the checkpoint in `dir` on `node` into a new process, through the plugin's hooks in
/// criu's order (RESTORE_EXT_FILE in the restored process, RESUME_DEVICES_LATE from criu).
pub fn restore(
    node: &SimNode,
    dir: &Path,
    ids: &ImageIds,
    settings: &Settings,
) -> Result<(RestoredTarget, Duration), NodeError> {
    restore_with(
        node,
        &|p| p,
        node.machine.spawn_process_as(ids.pid),
        dir,
        ids,
        settings,
    )
}

/// [`restore`] into `process`, with the engine on `wrap(platform)`.
pub fn restore_with<P: Platform, W: Fn(SimPlatform) -> P>(
    node: &SimNode,
    wrap: &W,
    process: SimProcess,
    dir: &Path,
    ids: &ImageIds,
    settings: &Settings,
) -> Result<(RestoredTarget, Duration), NodeError> {
    let dirf = open_dir(dir)?;
    let platform = node.platform_of(&process);
    let engine = node.engine(wrap, &process, &dirf, settings);
    engine.init(Stage::Restore).map_err(hook("init"))?;
    let start = Instant::now();
    let restored = (|| -> Result<RestoredTarget, NodeError> {
        let missing = |what: &str| NodeError::Hook {
            hook: "RESTORE_EXT_FILE",
            source: HookError::failed(
                kfd_abi::Errno::EAGAIN,
                format!("{what} asked to be retried"),
            ),
        };
        let restore_renders = || -> Result<Vec<RenderNode<SimFile>>, NodeError> {
            let mut renders = Vec::new();
            for &id in &ids.renders {
                let fd = engine
                    .restore_file(id)
                    .map_err(hook("RESTORE_EXT_FILE(render node)"))?
                    .ok_or_else(|| missing("a render node"))?;
                renders.push(platform.render_from_fd(fd)?);
            }
            Ok(renders)
        };
        let early = if ids.renders_first {
            Some(restore_renders()?)
        } else {
            None
        };
        let kfd_fd: OwnedFd = engine
            .restore_file(ids.kfd)
            .map_err(hook("RESTORE_EXT_FILE(/dev/kfd)"))?
            .ok_or_else(|| missing("/dev/kfd"))?;
        let kfd = platform.kfd_from_fd(kfd_fd)?;
        let renders = match early {
            Some(r) => r,
            None => restore_renders()?,
        };
        // criu's master process resumes the restored task's GPU queues.
        let criu = node.machine.spawn_process();
        let master = node.engine(wrap, &criu, &dirf, settings);
        master
            .resume_devices_late(i32::try_from(process.pid()).unwrap_or(i32::MAX))
            .map_err(hook("RESUME_DEVICES_LATE"))?;
        let mapping = engine.mappings().into_iter().flat_map(|m| m.gpus).collect();
        Ok(RestoredTarget {
            process: process.clone(),
            kfd,
            renders,
            mapping,
        })
    })();
    let elapsed = start.elapsed();
    engine.fini(Stage::Restore, if restored.is_ok() { 0 } else { -1 });
    restored.map(|r| (r, elapsed))
}

/// One process of a checkpointed tree and its files that criu hands the plugin, in fd order.
#[derive(Debug)]
pub struct TaskFiles<'a> {
    /// The process.
    pub process: &'a SimProcess,
    /// Its device files and dma-bufs, in the order criu dumps (and restores) them.
    pub files: Vec<BorrowedFd<'a>>,
}

/// The criu file ids of one task of a checkpointed tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TaskIds {
    /// The process (criu restores it under the same pid).
    pub pid: u32,
    /// Its files' ids, in its [`TaskFiles::files`] order.
    pub files: Vec<u32>,
}

/// Checkpoints the processes of one tree (one criu run) into `dir`: DUMP_EXT_FILE for every
/// file of every task in order (ids from 1), then DUMP_DEVICES_LATE for each task, as a tracer
/// process of `node`. Dma-bufs and render-node buffers shared between the tasks are one buffer
/// in the images.
pub fn checkpoint_tree(
    node: &SimNode,
    tasks: &[TaskFiles<'_>],
    dir: &Path,
    settings: &Settings,
) -> Result<Vec<TaskIds>, NodeError> {
    let dirf = open_dir(dir)?;
    let criu = node.machine.spawn_process();
    for t in tasks {
        criu.ptrace_attach(t.process);
    }
    let engine = node.engine(&|p| p, &criu, &dirf, settings);
    engine.init(Stage::Dump).map_err(hook("init"))?;
    let result = (|| {
        let mut next = 1u32;
        let mut all = Vec::new();
        for t in tasks {
            let mut ids = TaskIds {
                pid: t.process.pid(),
                files: Vec::new(),
            };
            for fd in &t.files {
                engine
                    .dump_ext_file(*fd, next)
                    .map_err(hook("DUMP_EXT_FILE"))?;
                ids.files.push(next);
                next += 1;
            }
            all.push(ids);
        }
        for t in tasks {
            match engine.dump_devices_late(t.process.pid()) {
                Ok(()) | Err(HookError::NotOurs) => {}
                Err(e) => return Err(hook("DUMP_DEVICES_LATE")(e)),
            }
        }
        Ok(all)
    })();
    engine.fini(Stage::Dump, if result.is_ok() { 0 } else { -1 });
    for t in tasks {
        criu.ptrace_detach(t.process);
    }
    result
}

/// A file RESTORE_EXT_FILE gave a restored task.
#[derive(Debug)]
pub enum RestoredFile {
    /// Its `/dev/kfd`.
    Kfd(Kfd<SimFile>),
    /// A render node.
    Render(RenderNode<SimFile>),
    /// Anything else (a dma-buf).
    Other(OwnedFd),
}

impl RestoredFile {
    /// The `/dev/kfd`, if it is one.
    pub fn into_kfd(self) -> Option<Kfd<SimFile>> {
        match self {
            Self::Kfd(k) => Some(k),
            _ => None,
        }
    }

    /// The render node, if it is one.
    pub fn into_render(self) -> Option<RenderNode<SimFile>> {
        match self {
            Self::Render(r) => Some(r),
            _ => None,
        }
    }

    /// The fd of any other file (a dma-buf).
    pub fn into_other(self) -> Option<OwnedFd> {
        match self {
            Self::Other(fd) => Some(fd),
            _ => None,
        }
    }
}

/// A task a [`restore_tree`] made: its process and the files RESTORE_EXT_FILE gave it.
#[derive(Debug)]
pub struct RestoredTask {
    /// The simulated process.
    pub process: SimProcess,
    /// Its files, in its [`TaskIds::files`] order.
    pub files: Vec<RestoredFile>,
}

/// Restores the tree checkpointed as `tasks` from `dir` on `node`: criu's process runs `init`,
/// each task is forked from it under its old pid and restores its files in order (the tasks in
/// the order given: a task whose files create a shared buffer before those that import it),
/// then criu resumes every task's GPU queues.
pub fn restore_tree(
    node: &SimNode,
    dir: &Path,
    tasks: &[TaskIds],
    settings: &Settings,
) -> Result<Vec<RestoredTask>, NodeError> {
    restore_tree_as(node, dir, tasks, settings, CriuHooksSet::Release)
}

/// Which restore hooks the simulated criu calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CriuHooksSet {
    /// criu up to 4.2: `init`, RESTORE_EXT_FILE in the tasks, RESUME_DEVICES_LATE.
    Release,
    /// criu's development branch: also RESTORE_INIT in criu's process before it forks the tasks
    /// (after `init`), and POST_FORKING once they are forked, before they restore their files.
    Dev,
}

/// [`restore_tree`] as a criu with `hooks` calls the plugin.
pub fn restore_tree_as(
    node: &SimNode,
    dir: &Path,
    tasks: &[TaskIds],
    settings: &Settings,
    hooks: CriuHooksSet,
) -> Result<Vec<RestoredTask>, NodeError> {
    let dirf = open_dir(dir)?;
    // The tasks' pids are taken before criu's own process gets one.
    let processes: Vec<SimProcess> = tasks
        .iter()
        .map(|t| node.machine.spawn_process_as(t.pid))
        .collect();
    let criu = node.machine.spawn_process();
    let master = node.engine(&|p| p, &criu, &dirf, settings);
    master.init(Stage::Restore).map_err(hook("init"))?;
    let dev = hooks == CriuHooksSet::Dev;
    if dev {
        match master.restore_init() {
            Ok(()) | Err(HookError::NotOurs) => {}
            Err(e) => {
                master.fini(Stage::Restore, -1);
                return Err(hook("RESTORE_INIT")(e));
            }
        }
    }
    let mut engines = Vec::new();
    let result = (|| {
        let forked: Vec<_> = processes
            .into_iter()
            .map(|p| {
                let engine = master.forked(node.platform_of(&p));
                (p, engine)
            })
            .collect();
        if dev {
            match master.post_forking() {
                Ok(()) | Err(HookError::NotOurs) => {}
                Err(e) => return Err(hook("POST_FORKING")(e)),
            }
        }
        let mut restored = Vec::new();
        for (t, (process, engine)) in tasks.iter().zip(forked) {
            let platform = node.platform_of(&process);
            let mut files = Vec::new();
            for &id in &t.files {
                let fd = engine
                    .restore_file(id)
                    .map_err(hook("RESTORE_EXT_FILE"))?
                    .ok_or_else(|| NodeError::Hook {
                        hook: "RESTORE_EXT_FILE",
                        source: HookError::failed(
                            kfd_abi::Errno::EAGAIN,
                            format!("file {id} asked to be retried"),
                        ),
                    })?;
                let file = match platform.identify(fd.as_fd()) {
                    Ok(DeviceKind::Kfd) => RestoredFile::Kfd(platform.kfd_from_fd(fd)?),
                    Ok(DeviceKind::Render { .. }) => {
                        RestoredFile::Render(platform.render_from_fd(fd)?)
                    }
                    _ => RestoredFile::Other(fd),
                };
                files.push(file);
            }
            engines.push(engine);
            restored.push(RestoredTask { process, files });
        }
        for t in &restored {
            let pid = i32::try_from(t.process.pid()).unwrap_or(i32::MAX);
            match master.resume_devices_late(pid) {
                Ok(()) | Err(HookError::NotOurs) => {}
                Err(e) => return Err(hook("RESUME_DEVICES_LATE")(e)),
            }
        }
        Ok(restored)
    })();
    let ret = if result.is_ok() { 0 } else { -1 };
    for e in engines {
        e.fini(Stage::Restore, ret);
    }
    master.fini(Stage::Restore, ret);
    result
}
