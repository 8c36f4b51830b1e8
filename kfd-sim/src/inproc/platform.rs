//! The platform of the in-process simulator (`kfd_abi::Platform`): the device files of one
//! simulated process and the directory of the machine's sysfs tree.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Machine, SimFile, SimProcess, DRM_MAJOR, SIM_KFD_MAJOR};
use crate::host;
use crate::state::machine::FileKind;

/// The platform of the in-process simulator: opens its device files as one simulated process
/// (the "calling process" of `kfd_abi::Platform`) and gives the directory of its sysfs tree.
#[derive(Debug)]
pub struct SimPlatform {
    machine: Machine,
    process: SimProcess,
    topology_root: PathBuf,
}

impl SimPlatform {
    /// Writes the machine's topology tree under `topology_root` and returns the platform of a
    /// new simulated process.
    pub fn new(machine: Machine, topology_root: &Path) -> Result<Self, topology::WriteError> {
        topology::write(machine.topology(), topology_root)?;
        let process = machine.spawn_process();
        Ok(Self {
            machine,
            process,
            topology_root: topology_root.to_owned(),
        })
    }

    /// The same machine and tree, seen from another simulated process.
    pub fn for_process(&self, process: &SimProcess) -> Self {
        Self {
            machine: self.machine.clone(),
            process: process.clone(),
            topology_root: self.topology_root.clone(),
        }
    }

    /// The machine.
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// The simulated process this platform acts as.
    pub fn process(&self) -> &SimProcess {
        &self.process
    }

    /// `/dev/kfd` opened by `process`.
    pub fn open_kfd_as(&self, process: &SimProcess) -> io::Result<SimFile> {
        process.open_kfd()
    }

    /// `/dev/dri/renderD<minor>` opened by `process`.
    pub fn open_render_as(&self, process: &SimProcess, minor: u32) -> io::Result<SimFile> {
        process.open_render(minor)
    }

    /// The directory that plays `/sys/class/kfd/kfd/topology`.
    pub fn topology_root(&self) -> &Path {
        &self.topology_root
    }
}

fn open_error(path: String, e: io::Error) -> kfd_abi::IoctlError {
    kfd_abi::IoctlError::Open {
        path: PathBuf::from(path),
        source: e,
    }
}

impl kfd_abi::Platform for SimPlatform {
    type Device = SimFile;

    fn open_kfd(&self) -> Result<kfd_abi::Kfd<SimFile>, kfd_abi::IoctlError> {
        let f = self
            .process
            .open_kfd()
            .map_err(|e| open_error("/dev/kfd".into(), e))?;
        Ok(kfd_abi::Kfd::new(f, "/dev/kfd (simulated)"))
    }

    fn open_render(&self, minor: u32) -> Result<kfd_abi::RenderNode<SimFile>, kfd_abi::IoctlError> {
        let path = format!("/dev/dri/renderD{minor}");
        let f = self
            .process
            .open_render(minor)
            .map_err(|e| open_error(path.clone(), e))?;
        Ok(kfd_abi::RenderNode::new(f, format!("{path} (simulated)")))
    }

    fn kfd_from_fd(&self, fd: OwnedFd) -> Result<kfd_abi::Kfd<SimFile>, kfd_abi::IoctlError> {
        let not_kfd = || {
            open_error(
                "/dev/kfd".into(),
                io::Error::from_raw_os_error(libc::ENODEV),
            )
        };
        let file = self.machine.file_of(fd.as_fd()).ok_or_else(not_kfd)?;
        if !matches!(file.kind, FileKind::Kfd(_)) {
            return Err(not_kfd());
        }
        let f = SimFile {
            machine: self.machine.clone(),
            file,
            fd,
            caller: Arc::clone(&self.process.inner.caller),
        };
        Ok(kfd_abi::Kfd::new(f, "/dev/kfd (simulated)"))
    }

    fn render_from_fd(
        &self,
        fd: OwnedFd,
    ) -> Result<kfd_abi::RenderNode<SimFile>, kfd_abi::IoctlError> {
        let file = self
            .machine
            .file_of(fd.as_fd())
            .filter(|f| matches!(f.kind, FileKind::Render(_)))
            .ok_or_else(|| {
                open_error(
                    "render node".into(),
                    io::Error::from_raw_os_error(libc::ENODEV),
                )
            })?;
        let label = match &file.kind {
            FileKind::Render(r) => self.machine.inner.devices.get(r.device).map_or_else(
                || "render node (simulated)".to_owned(),
                |d| format!("/dev/dri/renderD{} (simulated)", d.render_minor),
            ),
            FileKind::Kfd(_) => String::new(),
        };
        let f = SimFile {
            machine: self.machine.clone(),
            file,
            fd,
            caller: Arc::clone(&self.process.inner.caller),
        };
        Ok(kfd_abi::RenderNode::new(f, label))
    }

    fn identify(&self, fd: BorrowedFd<'_>) -> io::Result<kfd_abi::DeviceKind> {
        let key = host::file_key(fd)?;
        if self.machine.inner.dmabuf(key).is_some() {
            return Ok(kfd_abi::DeviceKind::DmaBuf);
        }
        Ok(match self.machine.file_of(fd).as_deref().map(|f| &f.kind) {
            Some(FileKind::Kfd(_)) => kfd_abi::DeviceKind::Kfd,
            Some(FileKind::Render(r)) => {
                self.machine
                    .inner
                    .devices
                    .get(r.device)
                    .map_or(kfd_abi::DeviceKind::Other, |d| {
                        kfd_abi::DeviceKind::Render {
                            minor: d.render_minor,
                        }
                    })
            }
            None => kfd_abi::DeviceKind::Other,
        })
    }

    fn identify_rdev(&self, rdev: u64) -> kfd_abi::DeviceKind {
        let (major, minor) = (libc::major(rdev), libc::minor(rdev));
        if major == DRM_MAJOR && self.machine.render_minors().contains(&minor) {
            kfd_abi::DeviceKind::Render { minor }
        } else if major == SIM_KFD_MAJOR && minor == 0 {
            kfd_abi::DeviceKind::Kfd
        } else {
            kfd_abi::DeviceKind::Other
        }
    }

    fn topology_root(&self) -> PathBuf {
        self.topology_root.clone()
    }

    fn process_id(&self) -> u32 {
        self.process.pid()
    }

    /// The simulated processes share this process's fd table: fd `raw` of any of them is our fd
    /// `raw`, when it is a file or a dma-buf of this machine (`EBADF` otherwise, as `pidfd_getfd`
    /// answers for a number the target has not open).
    fn fd_of_process(&self, _pid: u32, raw: RawFd) -> io::Result<OwnedFd> {
        let known = host::raw_file_key(raw).ok().is_some_and(|key| {
            self.machine.inner.file(key).is_some() || self.machine.inner.dmabuf(key).is_some()
        });
        if !known {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        host::dup_raw(raw)
    }
}
