//! What the CUSE server and its threads share: how the devices are served ([`ServeConfig`],
//! [`DeviceRole`], [`ServedDevice`]) and the state every reader thread works on ([`Shared`]:
//! the machine, the open files by CUSE handle, the processes served). The threads are in
//! [`server`](super::server) and [`threads`](super::threads), what they do with a request in
//! [`requests`](super::requests) and [`procs`](super::procs).

use std::collections::HashMap;
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::thread::JoinHandle;

use super::bridge::{self, Bridge};
use crate::lock_order::Ordered;
use crate::state::machine::{MachineInner, OpenFile};
use crate::state::process::KfdProcess;

/// The DRM character major: render nodes are served with their real numbers.
pub(super) const DRM_MAJOR: u32 = 226;

/// How the server registers its devices.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// The CUSE control device (`/dev/cuse`).
    pub cuse_path: PathBuf,
    /// DEVNAME of the KFD node (`kfd`: `/dev/kfd`).
    pub kfd_name: String,
    /// Where devtmpfs shows the nodes (`/dev`).
    pub dev_root: PathBuf,
    /// Reader threads per device at most.
    pub max_threads: usize,
    /// The control device of the kernel module that gives our devices mmap and fd installation
    /// (`ci/kmod/kfd_bridge`); used when it exists. `None`: plain CUSE even if it does.
    pub bridge_path: Option<PathBuf>,
    /// The KFD interface version GET_VERSION reports (`None`: the simulator's own, 1.11).
    pub kfd_version: Option<kfd_abi::kfd::Version>,
    /// The kernel the drivers behave as (Linux 6.1 unless told otherwise); `kfd_version`, when
    /// given, overrides its KFD version.
    pub kernel: crate::state::machine::Kernel,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            cuse_path: PathBuf::from("/dev/cuse"),
            kfd_name: "kfd".into(),
            dev_root: PathBuf::from("/dev"),
            max_threads: 32,
            bridge_path: Some(PathBuf::from(bridge::DEFAULT_PATH)),
            kfd_version: None,
            kernel: crate::state::machine::Kernel::default(),
        }
    }
}

/// What a served device is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceRole {
    /// `/dev/kfd` (dynamic device numbers).
    Kfd,
    /// `/dev/dri/renderD<minor>` of GPU index `index` (numbers 226:minor).
    Render {
        /// GPU index in the machine.
        index: usize,
        /// Render minor.
        minor: u32,
    },
}

/// A device the server registered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServedDevice {
    /// KFD or render node.
    pub role: DeviceRole,
    /// The CUSE DEVNAME (`kfd`, `dri/renderD128`; `kfd-sim/...` behind the bridge).
    pub devname: String,
    /// The node clients open, under the dev root.
    pub path: PathBuf,
    /// Behind the kernel module's proxy at `path`: the CUSE node itself.
    pub backend: Option<PathBuf>,
}

/// An open file of a device, by its CUSE handle.
pub(super) struct OpenEntry {
    pub(super) file: Arc<OpenFile>,
}

/// State shared by every reader thread.
pub(crate) struct Shared {
    pub(crate) machine: Arc<MachineInner>,
    pub(crate) own_pid: u32,
    pub(super) files: Ordered<HashMap<u64, OpenEntry>>,
    pub(super) next_fh: AtomicU64,
    pub(super) procs: Ordered<HashMap<u32, ProcEntry>>,
    pub(crate) render_rdevs: Vec<u64>,
    /// The kernel module's control device, when our devices are served through it (taken out
    /// at shutdown, which removes the proxies).
    pub(super) bridge: Ordered<Option<Arc<Bridge>>>,
    pub(super) stop_rx: UnixStream,
    pub(super) max_threads: usize,
    pub(super) threads: Ordered<Vec<JoinHandle<()>>>,
}

/// What the daemon keeps of one process.
#[derive(Default)]
pub(super) struct ProcEntry {
    pub(super) pidfd: Option<Arc<OwnedFd>>,
    pub(super) kfd: Option<Arc<KfdProcess>>,
    pub(super) installed: HashMap<RawFd, OwnedFd>,
}
