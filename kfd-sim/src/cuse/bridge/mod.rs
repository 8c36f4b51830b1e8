//! The daemon's side of `kfd_bridge`, the kernel module of the VM lane (`ci/kmod/kfd_bridge`,
//! whose README.md describes the protocol): with the module loaded, `/dev/kfd-bridge` exists and
//! the server puts a proxy device in front of each of its CUSE devices.
//!
//! - The CUSE devices get private names (`/dev/kfd-sim/kfd`, `/dev/kfd-sim/dri-renderD128`, with
//!   dynamic numbers); the proxies take the public ones (`/dev/kfd` with a dynamic major,
//!   `/dev/dri/renderD<minor>` as 226:minor) and exist while the control file is open.
//! - A proxy forwards open, ioctl, poll, read, write and release to the CUSE device in the
//!   caller's context, so requests arrive as before, with the caller's pid.
//! - mmap: the module sends [`proto::SIM_MMAP`] with a query id through the CUSE device; we read
//!   the query from the control device, decide what backs it (the driver model's `vma` module:
//!   the drivers' rules and errno, as for in-process mappings) and answer with one of our memfds;
//!   the ioctl's result is the mmap's.
//! - Fds the driver installs (CRIU_OP's dma-bufs, the SMI event fd, PRIME exports): the dispatcher
//!   names where each number goes ([`FdSlot`](crate::client::FdSlot)); before answering the ioctl
//!   we hand the fds and those addresses to the module (`Bridge::deliver`), and the proxy
//!   installs them into the caller, in the caller's context, when the call returns. No
//!   `pidfd_getfd` is involved, so it works in any pid namespace.
//! - The device cgroup (module version 2): when a client opens a proxy, the module evaluates in
//!   its context what its device cgroup allows on every proxy (read and write of the character
//!   device) and keeps the verdicts while the open waits for us; serving the FUSE_OPEN of
//!   `/dev/kfd` we read them ([`Bridge::open_access`]) and give the new KFD process per-device
//!   records only for the GPUs whose render node (226:minor) it may use, as amdkfd does when it
//!   creates a process. With a version 1 module every GPU gets a record (and a warning).
//! - Unmaps (module version 3): amdkfd drops the part of an SVM range that its process unmaps
//!   (its MMU notifier); the module's notifier on each client's mm records the unmapped ranges,
//!   and before serving a `/dev/kfd` call we take those of the file's process
//!   ([`Bridge::apply_unmaps`]) and apply them the driver's way
//!   ([`unmap_from_cpu`](crate::kfd::svm::unmap_from_cpu)). The notifier runs before munmap
//!   returns, so no call made after an unmap is served without it. When the module's queue
//!   overflowed, the parts of ranges that no VMA of the process covers any more are dropped.
//! - The release of a client's mm (module version 4): amdkfd destroys a process's queues from its
//!   MMU notifier's `release` (the process exited, or called execve). The module's notifier marks
//!   the mm released, and a take for that process says so ([`proto::UNMAPS_RELEASED`], also for a
//!   while after its files closed). The bridge is the machine's [`MmWatch`]: when an engine cannot
//!   reach a process's memory, the machine asks it (a take of no entries, which takes nothing),
//!   and a released process has its queues destroyed instead of their faulting: criu kills the
//!   processes it dumped, whose queues it had just let run again.

pub(super) mod proto;
mod sys;

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use kfd_abi::Errno;

use crate::host::lock;
use crate::lock_order::{rank, Ordered};
use crate::state::accounts::MmWatch;
use crate::state::machine::{MachineInner, OpenFile};
use crate::state::process::KfdProcess;

/// Where the module's control device appears.
pub const DEFAULT_PATH: &str = "/dev/kfd-bridge";

/// Directory under the dev root of the private CUSE names.
pub(super) const PRIVATE_DIR: &str = "kfd-sim";

/// Why the bridge could not be used.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// The control device could not be opened.
    #[error("opening {}: {source} (the kfd_bridge module's control device; needs root)", path.display())]
    Open {
        /// The path.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The module speaks another protocol version.
    #[error(
        "{} speaks protocol version {got}, this kfd-simd versions {}..={}: rebuild the module \
         from this checkout (ci/kmod/build.sh)",
        path.display(),
        proto::OLDEST_VERSION,
        proto::VERSION
    )]
    Version {
        /// The path.
        path: PathBuf,
        /// What the module answered (0: the request failed).
        got: u32,
    },
    /// A proxy device could not be created.
    #[error(
        "creating the proxy device {name} (numbers {major}:{minor}) in front of {}: {source} \
         (EBUSY: the numbers are taken, e.g. by a real DRM driver; EEXIST: another daemon \
         serves the name)",
        backend.display()
    )]
    Create {
        /// The proxy's name.
        name: String,
        /// The CUSE node.
        backend: PathBuf,
        /// Requested major (0: dynamic).
        major: u32,
        /// Requested minor.
        minor: u32,
        /// The error.
        source: io::Error,
    },
}

/// The CUSE devname of the device served publicly as `public` (`dri/renderD128` ->
/// `kfd-sim/dri-renderD128`).
pub(super) fn backend_devname(public: &str) -> String {
    format!("{PRIVATE_DIR}/{}", public.replace('/', "-"))
}

/// The proxy device's name for `public` (`dri/renderD128` -> `dri!renderD128`: the driver core
/// turns `!` into `/` under /dev).
pub(super) fn proxy_name(public: &str) -> String {
    public.replace('/', "!")
}

/// An open control device of the module; its proxies exist while it is open.
#[derive(Debug)]
pub(super) struct Bridge {
    ctl: File,
    path: PathBuf,
    /// The module's protocol version.
    version: u32,
    /// Whether the missing device cgroup of a version 1 module was reported.
    warned_no_cgroup: AtomicBool,
    /// Whether lost unmaps were reported.
    warned_lost: AtomicBool,
}

/// What a client's device cgroup allowed on the proxies when it opened one, as the module
/// evaluated it in the client's context (`devcgroup_check_permission` of read and write).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct OpenAccess(Vec<proto::DevAccess>);

impl OpenAccess {
    /// From the module's entries.
    pub(super) fn new(devs: Vec<proto::DevAccess>) -> Self {
        Self(devs)
    }

    /// The render minors (226:minor) the client's device cgroup refused.
    pub(super) fn refused_renders(&self) -> Vec<u32> {
        self.0
            .iter()
            .filter(|d| d.major == super::DRM_MAJOR && d.result != 0)
            .map(|d| d.minor)
            .collect()
    }

    /// Whether the client may use the GPU whose render node is `226:minor`, as amdkfd decides
    /// which GPUs a new process gets (it checks the render node's numbers whether or not that
    /// node exists). No verdict for those numbers (we made no such proxy): allowed, as without
    /// the module.
    pub(super) fn allows_render(&self, minor: u32) -> bool {
        self.0
            .iter()
            .find(|d| d.major == super::DRM_MAJOR && d.minor == minor)
            .is_none_or(|d| d.result == 0)
    }
}

/// An fd the driver would install into the caller of the ioctl being served, kept until the
/// ioctl has succeeded.
#[derive(Debug)]
pub(crate) struct HandOver {
    /// Our copy (its close-on-exec flag is the one the installed fd gets).
    pub fd: OwnedFd,
    /// Where the number goes in the caller's memory.
    pub addr: u64,
}

/// The fds one call would install into its caller, collected while the dispatcher serves it.
///
/// Nothing leaves this list before the call has succeeded: the server hands its contents to the
/// module ([`Bridge::deliver`]) only then, and drops them otherwise. A step of the call that
/// fails after an install withdraws the fd at once ([`Client::uninstall_fd`], e.g. the guard of
/// CRIU_OP's dma-bufs), so the list holds exactly what the caller is to get.
///
/// [`Client::uninstall_fd`]: crate::client::Client::uninstall_fd
#[derive(Debug)]
pub(crate) struct HandOvers(Ordered<Vec<HandOver>>);

impl Default for HandOvers {
    fn default() -> Self {
        Self(Ordered::new(rank::HAND_OVERS, Vec::new()))
    }
}

impl HandOvers {
    /// Keeps `fd` for the caller, its number to be written at `addr`. Returns our own number,
    /// which stands where the call writes the number until the module writes the caller's.
    pub(crate) fn hold(&self, fd: OwnedFd, addr: u64) -> RawFd {
        let raw = fd.as_raw_fd();
        lock(&self.0).push(HandOver { fd, addr });
        raw
    }

    /// Drops (closes) the held fd whose number [`hold`](Self::hold) returned; `false` when no
    /// such fd is held.
    pub(crate) fn withdraw(&self, raw: RawFd) -> bool {
        let mut held = lock(&self.0);
        let before = held.len();
        held.retain(|h| h.fd.as_raw_fd() != raw);
        held.len() != before
    }

    /// What the call hands over, in the order it was held.
    pub(crate) fn into_inner(self) -> Vec<HandOver> {
        self.0
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl MmWatch for Bridge {
    fn released(&self, pid: u32) -> bool {
        Bridge::released(self, pid)
    }
}

impl Bridge {
    /// Whether the module reports the release of clients' mms (version 4).
    pub(super) fn watches_mms(&self) -> bool {
        self.version >= proto::VERSION_RELEASED
    }

    /// Opens the control device at `path` and checks the protocol version.
    pub(super) fn open(path: &Path) -> Result<Self, BridgeError> {
        let ctl = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(|source| BridgeError::Open {
                path: path.to_owned(),
                source,
            })?;
        let got = sys::version(ctl.as_fd()).unwrap_or(0);
        if !(proto::OLDEST_VERSION..=proto::VERSION).contains(&got) {
            return Err(BridgeError::Version {
                path: path.to_owned(),
                got,
            });
        }
        if got < proto::VERSION_OPEN_ACCESS {
            log::warn!(
                "kfd-simd: {} speaks protocol version {got} (this kfd-simd {}): clients' device \
                 cgroups are not applied, every KFD process gets every GPU; rebuild the module \
                 from this checkout (ci/kmod/build.sh)",
                path.display(),
                proto::VERSION
            );
        }
        if got < proto::VERSION_RELEASED {
            log::warn!(
                "kfd-simd: {} speaks protocol version {got} (this kfd-simd {}): the release of \
                 clients' mms is not seen, the queues of a process that exits run until its \
                 files close; rebuild the module from this checkout (ci/kmod/build.sh)",
                path.display(),
                proto::VERSION
            );
        }
        if got < proto::VERSION_UNMAPS {
            log::warn!(
                "kfd-simd: {} speaks protocol version {got} (this kfd-simd {}): clients' unmaps \
                 are not seen, SVM ranges outlive them; rebuild the module from this checkout \
                 (ci/kmod/build.sh)",
                path.display(),
                proto::VERSION
            );
        }
        Ok(Self {
            ctl,
            path: path.to_owned(),
            version: got,
            warned_no_cgroup: AtomicBool::new(false),
            warned_lost: AtomicBool::new(false),
        })
    }

    /// The device cgroup's verdicts of the open through a proxy that thread `tid` is making
    /// (asked while serving its FUSE_OPEN). `None` when there are none: a version 1 module, or
    /// an open of our CUSE node that did not come through a proxy (root opening
    /// `/dev/kfd-sim/kfd` directly: no container's view to apply).
    pub(super) fn open_access(&self, tid: u32) -> Option<OpenAccess> {
        if self.version < proto::VERSION_OPEN_ACCESS {
            if !self.warned_no_cgroup.swap(true, Ordering::Relaxed) {
                log::warn!(
                    "kfd-simd: kfd_bridge version {} cannot report device cgroups: KFD \
                     processes get every GPU",
                    self.version
                );
            }
            return None;
        }
        let mut devs = vec![proto::DevAccess::default(); 16];
        loop {
            match sys::open_access(self.ctl.as_fd(), tid, &mut devs) {
                Ok(n) if n <= devs.len() => {
                    devs.truncate(n);
                    return Some(OpenAccess::new(devs));
                }
                // More proxies than room (they were made meanwhile): again, with room.
                Ok(n) => devs.resize(n, proto::DevAccess::default()),
                Err(e) => {
                    log::debug!("kfd-simd: no device cgroup verdicts for tid {tid}: {e}");
                    return None;
                }
            }
        }
    }

    /// Applies to `process` the unmaps its process made since the last time (the module's
    /// records, oldest first), as amdkfd's MMU notifier does: the unmapped part of every SVM
    /// range goes. Called before serving each `/dev/kfd` call of the file's process. When some
    /// went unrecorded, the ranges are cut to the process's VMAs instead (logged once).
    pub(crate) fn apply_unmaps(&self, process: &KfdProcess) {
        if self.version < proto::VERSION_UNMAPS {
            return;
        }
        let tgid = process.pid;
        let mut ranges = [proto::Unmap::default(); 64];
        let mut lost = false;
        loop {
            match sys::take_unmaps(self.ctl.as_fd(), tgid, &mut ranges) {
                Ok((n, flags)) => {
                    for u in ranges.iter().take(n) {
                        crate::kfd::svm::unmap_from_cpu(process, u.start, u.end);
                    }
                    lost |= flags & proto::UNMAPS_LOST != 0;
                    if flags & proto::UNMAPS_MORE == 0 || n == 0 {
                        break;
                    }
                }
                // ENOENT: no proxy file of that process is open (a file it inherited, or
                // the process is going): nothing was recorded for it.
                Err(e) => {
                    log::trace!("kfd-simd: pid {tgid}: no unmaps to take: {e}");
                    break;
                }
            }
        }
        if lost {
            self.unmaps_lost(process);
        }
    }

    /// Whether the module has seen the mm of process `tgid` torn down: a take of no entries,
    /// which leaves the records in place. `false` with a module older than version 4, and when
    /// the module knows nothing of the process.
    fn released(&self, tgid: u32) -> bool {
        if self.version < proto::VERSION_RELEASED {
            return false;
        }
        match sys::take_unmaps(self.ctl.as_fd(), tgid, &mut []) {
            Ok((_, flags)) => flags & proto::UNMAPS_RELEASED != 0,
            Err(e) => {
                log::trace!("kfd-simd: pid {tgid}: nothing known of its mm: {e}");
                false
            }
        }
    }

    /// Some unmaps of `process` went unrecorded: every part of an SVM range outside the
    /// process's VMAs goes (a part mapped again since stays: it cannot be told apart).
    fn unmaps_lost(&self, process: &KfdProcess) {
        let tgid = process.pid;
        let level = if self.warned_lost.swap(true, Ordering::Relaxed) {
            log::Level::Debug
        } else {
            log::Level::Warn
        };
        log::log!(
            level,
            "kfd-simd: pid {tgid}: unmaps were lost (more between two calls than the module \
             keeps): its SVM ranges are cut to its mappings instead"
        );
        match libc::pid_t::try_from(tgid)
            .map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))
            .and_then(crate::host::vmas_of)
        {
            Ok(vmas) => {
                crate::kfd::svm::unmap_outside(process, &vmas);
            }
            Err(e) => log::debug!("kfd-simd: pid {tgid}: its mappings: {e}"),
        }
    }

    /// The control device's path.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Creates the proxy `name` (see [`proxy_name`]) in front of the CUSE node `backend`, with
    /// the numbers `major:minor` (major 0: a dynamic one). Returns the numbers it got.
    pub(super) fn create(
        &self,
        backend: &Path,
        name: &str,
        major: u32,
        minor: u32,
    ) -> Result<(u32, u32), BridgeError> {
        let err = |source| BridgeError::Create {
            name: name.to_owned(),
            backend: backend.to_owned(),
            major,
            minor,
            source,
        };
        let mut c = proto::Create {
            backend: [0; 128],
            name: [0; 64],
            major,
            minor,
        };
        let b = backend.as_os_str().as_encoded_bytes();
        let n = name.as_bytes();
        // Room for the NUL that the zeroed tail provides.
        if b.len() >= c.backend.len() || n.len() >= c.name.len() {
            return Err(err(io::Error::from_raw_os_error(libc::ENAMETOOLONG)));
        }
        c.backend[..b.len()].copy_from_slice(b);
        c.name[..n.len()].copy_from_slice(n);
        sys::create(self.ctl.as_fd(), &mut c).map_err(err)?;
        Ok((c.major, c.minor))
    }

    /// Answers mmap query `id` of thread `tid` on `file` (the module's [`proto::SIM_MMAP`]);
    /// `caller` is the calling process's KFD process, if it has one. The result is the mmap's.
    pub(crate) fn answer_mmap(
        &self,
        machine: &Arc<MachineInner>,
        file: &OpenFile,
        caller: Option<&Arc<KfdProcess>>,
        tid: u32,
        id: u64,
    ) -> Result<i32, Errno> {
        let mut q = proto::MmapQuery {
            id,
            ..proto::MmapQuery::default()
        };
        if let Err(e) = sys::mmap_query(self.ctl.as_fd(), &mut q) {
            // Only the module sends SIM_MMAP, and only while the query exists.
            log::warn!("kfd-simd: mmap query {id} of tid {tid}: {e}");
            return Err(Errno::EINVAL);
        }
        if q.tid != tid {
            // Someone else's query (the proxies never forward SIM_MMAP from userspace).
            log::warn!(
                "kfd-simd: mmap query {id} belongs to tid {}, not to the caller {tid}",
                q.tid
            );
            return Err(Errno::EINVAL);
        }
        let req = crate::vma::MmapRequest {
            offset: q.offset,
            length: q.length,
            flags: q.flags,
        };
        let target = crate::fops::mmap(machine, file, caller, &req).inspect_err(|e| {
            log::debug!(
                "kfd-simd: tid {tid}: mmap of {:#x}+{:#x} (flags {:#x}): {e}",
                q.offset,
                q.length,
                q.flags
            );
        })?;
        let fd = target
            .backing
            .export(true)
            .map_err(|e| Errno::from_io(&e))?;
        let fd_num = fd.as_raw_fd();
        let a = proto::MmapAnswer {
            id,
            fd: fd_num,
            flags: target.vma,
            offset: target.offset,
        };
        sys::mmap_answer(self.ctl.as_fd(), &a).map_err(|e| {
            log::warn!("kfd-simd: answering mmap query {id}: {e}");
            Errno::from_io(&e)
        })?;
        log::trace!(
            "kfd-simd: tid {tid}: mmap of {:#x}+{:#x} -> memfd +{:#x} (vma flags {:#x})",
            q.offset,
            q.length,
            target.offset,
            target.vma
        );
        Ok(0)
    }

    /// Hands the fds of a successful ioctl of thread `tid` to the module, which installs them
    /// into the caller when the call returns. Our copies are closed afterwards (the module holds
    /// its own references).
    pub(crate) fn deliver(&self, tid: u32, fds: Vec<HandOver>) -> Result<(), Errno> {
        if fds.is_empty() {
            return Ok(());
        }
        let mut entries = Vec::with_capacity(fds.len());
        for h in &fds {
            let cloexec = sys::is_cloexec(h.fd.as_fd()).map_err(|e| Errno::from_io(&e))?;
            entries.push(proto::PushFd {
                fd: h.fd.as_raw_fd(),
                flags: if cloexec {
                    libc::O_CLOEXEC.unsigned_abs()
                } else {
                    0
                },
                addr: h.addr,
            });
        }
        sys::push_fds(self.ctl.as_fd(), tid, &entries).map_err(|e| {
            log::warn!(
                "kfd-simd: handing {} fds for tid {tid} to the module: {e}",
                fds.len()
            );
            Errno::from_io(&e)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(major: u32, minor: u32, result: i32) -> proto::DevAccess {
        proto::DevAccess {
            major,
            minor,
            result,
            pad: 0,
        }
    }

    #[test]
    fn a_gpu_is_usable_when_its_render_node_is_allowed() {
        let a = OpenAccess::new(vec![
            verdict(510, 0, 0), // /dev/kfd's proxy (dynamic major)
            verdict(226, 128, 0),
            verdict(226, 129, -libc::EPERM),
        ]);
        assert!(a.allows_render(128));
        assert!(!a.allows_render(129));
        assert_eq!(a.refused_renders(), vec![129]);
    }

    #[test]
    fn only_the_drm_major_counts() {
        // A refused device that happens to have minor 128 under another major says nothing of
        // renderD128.
        let a = OpenAccess::new(vec![verdict(510, 128, -libc::EPERM), verdict(226, 128, 0)]);
        assert!(a.allows_render(128));
        let b = OpenAccess::new(vec![verdict(510, 128, 0), verdict(226, 128, -libc::EPERM)]);
        assert!(!b.allows_render(128));
    }

    #[test]
    fn a_render_node_without_a_proxy_is_not_refused() {
        let a = OpenAccess::new(vec![verdict(226, 128, -libc::EPERM)]);
        assert!(a.allows_render(130));
        assert!(OpenAccess::default().allows_render(128));
    }

    #[test]
    fn any_error_of_the_check_refuses() {
        let a = OpenAccess::new(vec![verdict(226, 128, -libc::EACCES)]);
        assert!(!a.allows_render(128));
    }

    #[test]
    fn private_and_proxy_names() {
        assert_eq!(backend_devname("kfd"), "kfd-sim/kfd");
        assert_eq!(backend_devname("dri/renderD128"), "kfd-sim/dri-renderD128");
        assert_eq!(proxy_name("dri/renderD128"), "dri!renderD128");
        assert_eq!(proxy_name("kfd"), "kfd");
    }

    #[test]
    fn a_missing_control_device_is_a_clear_error() {
        let err = Bridge::open(Path::new("/nonexistent/kfd-bridge")).unwrap_err();
        assert!(matches!(err, BridgeError::Open { .. }), "{err}");
    }

    #[test]
    fn a_file_that_is_not_the_module_is_refused_by_version() {
        let err = Bridge::open(Path::new("/dev/null")).unwrap_err();
        assert!(matches!(err, BridgeError::Version { got: 0, .. }), "{err}");
        assert!(err.to_string().contains("ci/kmod/build.sh"));
    }
}
