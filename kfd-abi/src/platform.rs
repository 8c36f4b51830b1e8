//! Where the plugin engine gets its devices: the seam between the engine and the machine.
//!
//! The engine never opens a path or calls `fstat` itself. [`HostPlatform`] is the real machine
//! (hardware, or the simulator served over CUSE, which is the same to us); the simulator's
//! in-process platform implements the same trait. Paths can be overridden with environment
//! variables for the CUSE simulator (see [`HostPlatform::from_env`]).

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::PathBuf;

pub use crate::procfs::read_proc_file;
use crate::render::{self, render_node_path};
use crate::{FdTransport, IoctlError, Kfd, RenderNode, Transport, KFD_PATH};

/// What a file descriptor is open on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// `/dev/kfd`.
    Kfd,
    /// An amdgpu render node.
    Render {
        /// Its minor (`renderD<minor>`).
        minor: u32,
    },
    /// A dma-buf (a buffer of some device shared as an fd; `/dmabuf:` in `/proc/PID/fd`) that
    /// DRM exported (on the real machine: not a heap's, `udmabuf`'s or a media driver's).
    DmaBuf,
    /// Anything else: not ours.
    Other,
}

/// The devices and paths of one machine, real or simulated.
pub trait Platform: Send + Sync + fmt::Debug + 'static {
    /// The transport of its device files.
    type Device: Transport + 'static;

    /// Opens `/dev/kfd` as the calling process.
    fn open_kfd(&self) -> Result<Kfd<Self::Device>, IoctlError>;

    /// Opens render node `renderD<minor>`.
    fn open_render(&self, minor: u32) -> Result<RenderNode<Self::Device>, IoctlError>;

    /// Wraps a file descriptor that is open on `/dev/kfd` (criu's dup of the target's).
    fn kfd_from_fd(&self, fd: OwnedFd) -> Result<Kfd<Self::Device>, IoctlError>;

    /// Wraps a file descriptor that is open on a render node.
    fn render_from_fd(&self, fd: OwnedFd) -> Result<RenderNode<Self::Device>, IoctlError>;

    /// What `fd` is open on.
    fn identify(&self, fd: BorrowedFd<'_>) -> io::Result<DeviceKind>;

    /// What a device number (`st_rdev`) is.
    fn identify_rdev(&self, rdev: u64) -> DeviceKind;

    /// The KFD topology root (`/sys/class/kfd/kfd/topology` on a real machine).
    fn topology_root(&self) -> PathBuf;

    /// The calling process's pid as the driver reports it (PROCESS_INFO's `pid`): at restore, the
    /// restored process's, which criu keeps from the dump.
    fn process_id(&self) -> u32;

    /// A copy of fd `raw` of process `pid` (`pidfd_getfd(2)` on the real machine): a restored
    /// task forked before its parent restored the GPU state maps the parent's restored buffers
    /// through the parent's render-node files.
    fn fd_of_process(&self, pid: u32, raw: RawFd) -> io::Result<OwnedFd>;

    /// The parent of process `pid`, where the platform can tell (`/proc/PID/status` on the real
    /// machine); `None` otherwise.
    fn parent_of(&self, _pid: u32) -> Option<u32> {
        None
    }

    /// libhsakmt's shared memory file.
    fn hsakmt_shm_path(&self) -> PathBuf {
        PathBuf::from(HSAKMT_SHM_PATH)
    }
}

/// Environment variable overriding the KFD node path (the CUSE simulator serves one elsewhere).
pub(crate) const ENV_KFD_PATH: &str = "AMDGPU_CR_KFD_PATH";
/// Environment variable overriding the topology root.
pub(crate) const ENV_TOPOLOGY_ROOT: &str = "AMDGPU_CR_TOPOLOGY_ROOT";
/// Environment variable overriding the directory of the render nodes (`/dev/dri`).
pub(crate) const ENV_DRI_DIR: &str = "AMDGPU_CR_DRI_DIR";

/// The default path of libhsakmt's shared memory file.
pub(crate) const HSAKMT_SHM_PATH: &str = "/dev/shm/hsakmt_shared_mem";

/// The default topology root.
pub(crate) const TOPOLOGY_ROOT: &str = "/sys/class/kfd/kfd/topology";

/// The machine this process runs on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPlatform {
    kfd_path: PathBuf,
    dri_dir: Option<PathBuf>,
    topology_root: PathBuf,
}

impl Default for HostPlatform {
    fn default() -> Self {
        Self {
            kfd_path: KFD_PATH.into(),
            dri_dir: None,
            topology_root: TOPOLOGY_ROOT.into(),
        }
    }
}

impl HostPlatform {
    /// The standard paths, overridden by `AMDGPU_CR_KFD_PATH`, `AMDGPU_CR_DRI_DIR` and
    /// `AMDGPU_CR_TOPOLOGY_ROOT` when set.
    pub fn from_env() -> Self {
        Self::from_lookup(|k| std::env::var_os(k).map(PathBuf::from))
    }

    /// As [`HostPlatform::from_env`] with a lookup function (tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<PathBuf>) -> Self {
        let d = Self::default();
        Self {
            kfd_path: lookup(ENV_KFD_PATH).unwrap_or(d.kfd_path),
            dri_dir: lookup(ENV_DRI_DIR),
            topology_root: lookup(ENV_TOPOLOGY_ROOT).unwrap_or(d.topology_root),
        }
    }

    fn render_path(&self, minor: u32) -> PathBuf {
        match &self.dri_dir {
            Some(dir) => dir.join(format!("renderD{minor}")),
            None => render_node_path(minor),
        }
    }

    fn kfd_rdev(&self) -> Option<u64> {
        std::fs::metadata(&self.kfd_path).ok().map(|m| m.rdev())
    }
}

/// Whether a dma-buf's `/proc/PID/fdinfo` text leaves it possibly amdgpu's: its `exp_name` is
/// DRM's (PRIME exports every GEM driver's buffers under DRM's own name, amdgpu's and KFD's
/// among them) or amdgpu's, or the text names no exporter. A dma-buf of a heap, `udmabuf` or a
/// media driver says so and is not ours.
pub(crate) fn drm_exported(fdinfo: &str) -> bool {
    fdinfo
        .lines()
        .find_map(|l| l.strip_prefix("exp_name:"))
        .map(str::trim)
        .is_none_or(|name| matches!(name, "drm" | "amdgpu"))
}

fn major(rdev: u64) -> u32 {
    libc::major(rdev)
}

fn minor(rdev: u64) -> u32 {
    libc::minor(rdev)
}

impl Platform for HostPlatform {
    type Device = FdTransport;

    fn open_kfd(&self) -> Result<Kfd, IoctlError> {
        Kfd::open(&self.kfd_path)
    }

    fn open_render(&self, minor: u32) -> Result<RenderNode, IoctlError> {
        RenderNode::open(&self.render_path(minor))
    }

    fn kfd_from_fd(&self, fd: OwnedFd) -> Result<Kfd, IoctlError> {
        Ok(Kfd::new(
            FdTransport::from_fd(fd),
            self.kfd_path.display().to_string(),
        ))
    }

    fn render_from_fd(&self, fd: OwnedFd) -> Result<RenderNode, IoctlError> {
        Ok(RenderNode::new(FdTransport::from_fd(fd), "render node"))
    }

    fn identify(&self, fd: BorrowedFd<'_>) -> io::Result<DeviceKind> {
        let file = std::fs::File::from(fd.try_clone_to_owned()?);
        let meta = file.metadata()?;
        if !meta.file_type().is_char_device() {
            // The dma-buf file system names its files `/dmabuf:<name>`.
            let link = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()));
            let dmabuf =
                link.is_ok_and(|l| l.as_os_str().as_encoded_bytes().starts_with(b"/dmabuf:"));
            if !dmabuf {
                return Ok(DeviceKind::Other);
            }
            let info = read_proc_file(format!("/proc/self/fdinfo/{}", file.as_raw_fd()));
            return Ok(match info {
                Ok(text) if !drm_exported(&text) => {
                    log::debug!("a dma-buf of another exporter than DRM: not ours");
                    DeviceKind::Other
                }
                _ => DeviceKind::DmaBuf,
            });
        }
        Ok(self.identify_rdev(meta.rdev()))
    }

    fn identify_rdev(&self, rdev: u64) -> DeviceKind {
        if self.kfd_rdev() == Some(rdev) {
            DeviceKind::Kfd
        } else if render::is_render_node(major(rdev), minor(rdev)) {
            DeviceKind::Render { minor: minor(rdev) }
        } else {
            DeviceKind::Other
        }
    }

    fn topology_root(&self) -> PathBuf {
        self.topology_root.clone()
    }

    fn process_id(&self) -> u32 {
        std::process::id()
    }

    fn fd_of_process(&self, pid: u32, raw: RawFd) -> io::Result<OwnedFd> {
        let pidfd = crate::cuse::pidfd_open(pid)?;
        crate::cuse::pidfd_getfd(pidfd.as_fd(), raw)
    }

    fn parent_of(&self, pid: u32) -> Option<u32> {
        let status = read_proc_file(format!("/proc/{pid}/status")).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))?
            .trim()
            .parse()
            .ok()
            .filter(|&p| p != 0)
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;
    use std::path::Path;

    use super::*;

    #[test]
    fn environment_overrides_each_path() {
        let p = HostPlatform::from_lookup(|k| match k {
            ENV_KFD_PATH => Some("/tmp/sim/kfd".into()),
            ENV_TOPOLOGY_ROOT => Some("/tmp/sim/topology".into()),
            _ => None,
        });
        assert_eq!(p.kfd_path, Path::new("/tmp/sim/kfd"));
        assert_eq!(p.topology_root(), PathBuf::from("/tmp/sim/topology"));
        assert_eq!(p.render_path(129), PathBuf::from("/dev/dri/renderD129"));
    }

    #[rstest::rstest]
    #[case::amdgpu_through_prime("size:\t2097152\ncount:\t1\nexp_name:\tdrm\n", true)]
    #[case::named_amdgpu("size:\t4096\ncount:\t2\nexp_name:\tamdgpu\nname:\tx\n", true)]
    #[case::a_dma_heap("size:\t4096\ncount:\t1\nexp_name:\tsystem\n", false)]
    #[case::udmabuf("size:\t4096\ncount:\t1\nexp_name:\tudmabuf\n", false)]
    #[case::a_name_that_only_starts_like_drm("exp_name:\tdrm_shmem\n", false)]
    #[case::no_exporter_named("pos:\t0\nflags:\t02\n", true)]
    fn dma_bufs_of_other_exporters_are_not_ours(#[case] fdinfo: &str, #[case] ours: bool) {
        assert_eq!(drm_exported(fdinfo), ours);
    }

    #[test]
    fn files_that_are_not_devices_are_not_ours() {
        let f = std::fs::File::open("/proc/self/status").unwrap();
        assert_eq!(
            HostPlatform::default().identify(f.as_fd()).unwrap(),
            DeviceKind::Other
        );
    }

    #[test]
    fn render_node_numbers_are_recognised() {
        let p = HostPlatform::default();
        assert_eq!(
            p.identify_rdev(libc::makedev(226, 130)),
            DeviceKind::Render { minor: 130 }
        );
        assert_eq!(p.identify_rdev(libc::makedev(226, 0)), DeviceKind::Other);
        assert_eq!(p.identify_rdev(libc::makedev(1, 3)), DeviceKind::Other);
    }

    /// procfs files (size 0 in their metadata) read whole; a FIFO, a device or an oversized file
    /// in their place is refused at once.
    #[test]
    fn proc_files_are_read_with_a_bound() {
        let status = read_proc_file(format!("/proc/{}/status", std::process::id())).unwrap();
        assert!(status.contains("\nPPid:"), "{status}");
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo(3) with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for special in [fifo.as_path(), std::path::Path::new("/dev/zero")] {
            let e = read_proc_file(special).unwrap_err();
            assert_eq!(
                e.kind(),
                io::ErrorKind::InvalidInput,
                "{}",
                special.display()
            );
        }
        let big = dir.path().join("big");
        std::fs::write(
            &big,
            vec![b'x'; usize::try_from(crate::procfs::PROC_FILE_LIMIT + 1).unwrap()],
        )
        .unwrap();
        assert_eq!(
            read_proc_file(&big).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }
}
