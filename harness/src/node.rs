//! A simulated node ([`SimNode`]: a machine of the simulator, its sysfs tree and its platform),
//! the model workload running on it ([`Target`]), and a node with other gpu ids to restore onto
//! ([`remapped_variant`]).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

use amdgpu_plugin::criu::{Engine, Settings};
use amdgpu_plugin::hooks::HookError;
use kfd_abi::{GpuId, Platform};
use kfd_sim::{Machine, Preset, SimFile, SimPlatform, SimProcess};

use crate::workload::{Spec, Workload};

/// Why a step on a simulated node failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The preset is unknown or invalid.
    #[error(transparent)]
    Preset(#[from] kfd_sim::PresetError),
    /// The simulated machine could not be built.
    #[error("building the simulated node: {0}")]
    Machine(String),
    /// A file or directory operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The model workload failed.
    #[error("the model workload: {0}")]
    Workload(#[from] crate::workload::WorkloadError),
    /// A device call outside the plugin failed.
    #[error(transparent)]
    Ioctl(#[from] kfd_abi::IoctlError),
    /// A plugin hook failed, as criu would report it.
    #[error("{hook} failed: {source}")]
    Hook {
        /// The hook.
        hook: &'static str,
        /// What the plugin said.
        #[source]
        source: HookError,
    },
}

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> NodeError {
    let what = what.into();
    move |source| NodeError::Io { what, source }
}

pub(crate) fn hook(name: &'static str) -> impl FnOnce(HookError) -> NodeError {
    move |source| NodeError::Hook { hook: name, source }
}

/// The start of the names of simulated nodes' topology directories (in the temporary directory,
/// `std::env::temp_dir()`); the owner's pid and start time follow
/// ([`kfd_sim::scratch::owned_prefix`]).
pub const TOPOLOGY_DIR_BASE: &str = "amdgpu-cr-topology-";

/// A simulated node: the machine, its sysfs tree in a temporary directory, and its platform.
#[derive(Debug)]
pub struct SimNode {
    /// The machine.
    pub machine: Machine,
    platform: SimPlatform,
    _topology: tempfile::TempDir,
}

impl SimNode {
    /// Builds the node of `preset` and writes its topology tree, in a temporary directory named
    /// for this process. The directory goes with the node; those that processes which ended
    /// without unwinding (killed, `exit` in a child) left behind are removed here first.
    pub fn new(preset: &Preset) -> Result<Self, NodeError> {
        let machine = Machine::new(preset).map_err(|e| NodeError::Machine(e.to_string()))?;
        let tmp = std::env::temp_dir();
        let reaped = kfd_sim::scratch::reap(&tmp, TOPOLOGY_DIR_BASE);
        if reaped > 0 {
            log::info!(
                "removed {reaped} topology directories in {} left by ended processes",
                tmp.display()
            );
        }
        let dir = tempfile::Builder::new()
            .prefix(&kfd_sim::scratch::owned_prefix(TOPOLOGY_DIR_BASE))
            .tempdir_in(&tmp)
            .map_err(io_err("creating a topology directory"))?;
        let platform = SimPlatform::new(machine.clone(), dir.path())
            .map_err(|e| NodeError::Machine(e.to_string()))?;
        Ok(Self {
            machine,
            platform,
            _topology: dir,
        })
    }

    /// The platform as seen by `process`.
    pub fn platform_of(&self, process: &SimProcess) -> SimPlatform {
        self.platform.for_process(process)
    }

    /// The topology root of the node.
    pub fn topology_root(&self) -> &Path {
        self.platform.topology_root()
    }

    /// A plugin engine over `wrap(platform of process)`, with image directory `dir`.
    pub fn engine<P: Platform, W: Fn(SimPlatform) -> P>(
        &self,
        wrap: &W,
        process: &SimProcess,
        dir: &File,
        settings: &Settings,
    ) -> Engine<P> {
        let raw = dir.as_raw_fd();
        let engine = Engine::new(wrap(self.platform_of(process)), move || Some(raw));
        engine.configure(settings.clone());
        engine
    }
}

/// A running workload process on a node.
#[derive(Debug)]
pub struct Target {
    /// The simulated process.
    pub process: SimProcess,
    /// Its workload.
    pub workload: Workload<SimFile>,
}

/// Starts the model workload with `spec` on every GPU of `node`, in a new process.
pub fn start_target(node: &SimNode, spec: &Spec) -> Result<Target, NodeError> {
    start_target_in(node, spec, None)
}

/// Starts the workload in a new process of `node` whose device cgroup allows only the render
/// nodes `minors` (`None`: every GPU), as a container given those `--device`s: its `/dev/kfd`
/// has records for those GPUs only, and the workload uses them.
pub fn start_target_in(
    node: &SimNode,
    spec: &Spec,
    minors: Option<&[u32]>,
) -> Result<Target, NodeError> {
    let process = node.machine.spawn_process();
    process.set_device_cgroup(minors);
    let platform = node.platform_of(&process);
    let kfd = platform.open_kfd()?;
    let mut gpus = Vec::new();
    for (gpu, minor) in node
        .machine
        .gpu_ids()
        .into_iter()
        .zip(node.machine.render_minors())
        .filter(|(_, m)| minors.is_none_or(|allowed| allowed.contains(m)))
    {
        let id = GpuId::new(gpu)
            .ok_or_else(|| NodeError::Machine(format!("GPU id 0 at renderD{minor}")))?;
        gpus.push((id, platform.open_render(minor)?));
    }
    let workload = Workload::start(kfd, gpus, spec)?;
    Ok(Target { process, workload })
}

/// A variant of `preset` with other gpu ids (and render minors), so that a restore remaps.
pub fn remapped_variant(preset: &Preset) -> Preset {
    let ids: Vec<u32> = preset
        .gpus
        .iter()
        .map(|g| (g.gpu_id ^ 0x1357).max(1))
        .collect();
    let minors: Vec<u32> = (0u32..)
        .zip(&preset.gpus)
        .map(|(i, g)| g.render_minor.unwrap_or(128 + i) + 8)
        .collect();
    preset
        .clone()
        .with_gpu_ids(&ids)
        .with_render_minors(&minors)
        .with_name(&format!("{}-remapped", preset.name))
}
