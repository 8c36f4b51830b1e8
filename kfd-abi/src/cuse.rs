//! The one place that knows a device may be served over CUSE by the simulator (`kfd-simd`).
//!
//! A CUSE server answers ioctls with an integer and bytes; it cannot put a file descriptor into
//! its client. Where the kernel would install an fd in the caller (the dma-bufs of `CRIU_OP`
//! CHECKPOINT and RESTORE, a PRIME export, the SMI event fd), `kfd-simd` keeps the fd in its own
//! table and returns that number. This module turns such a number into an fd of ours:
//! `pidfd_getfd(2)` on the daemon (which needs `PTRACE_MODE_ATTACH_REALCREDS` over it: same user
//! without restrictions, or root), then [`SIM_CLOSE_FD`] so that the daemon drops its copy.
//!
//! A device is known to be CUSE-served when `/sys/dev/char/<major>:<minor>` resolves under
//! `/sys/devices/virtual/cuse/` (render nodes served by the simulator keep the real DRM numbers,
//! so the numbers alone do not tell), and the daemon's pid comes from [`SIM_DAEMON_PID`], a
//! request number that the real drivers reject. A CUSE device that does not answer it is not the
//! simulator: fds are then adopted as usual.
//!
//! Fds passed *into* an ioctl (`ACQUIRE_VM`'s `drm_fd`, imports) need nothing here: the daemon
//! fetches them from the caller itself.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::sync::Arc;

use crate::ioctl::{encode, Dir};
use crate::syscall::ioctl_with;

/// `_IOR('K', 0x7f, u32)`: the simulator daemon writes its pid.
///
/// Outside KFD's table (0x01..0x23), so real amdkfd answers `ENOTTY` (6.1.y; 6.1.0 said `EINVAL`);
/// of type `'K'`, not DRM's, so a real render node answers `ENOTTY` (`drm_ioctl`).
pub const SIM_DAEMON_PID: u32 = encode(Dir::Read, b'K', 0x7f, 4);

/// `_IOW('K', 0x7e, u32)`: asks the simulator daemon to close its copy of an fd that an earlier
/// ioctl of the same caller returned. Rejected by the real drivers as [`SIM_DAEMON_PID`] is.
pub const SIM_CLOSE_FD: u32 = encode(Dir::Write, b'K', 0x7e, 4);

/// Where sysfs puts the devices of CUSE servers.
pub(crate) const CUSE_SYSFS_DIR: &str = "/sys/devices/virtual/cuse/";

/// A device served by the simulator daemon.
///
/// It holds no pidfd: a client may be checkpointed at any time, and criu cannot dump a pidfd; the
/// daemon may also have been restarted (with another pid) since. So the daemon's pid is asked
/// again, and a pidfd opened, each time an fd is fetched.
pub(crate) struct CuseLink {
    daemon_pid: u32,
}

impl fmt::Debug for CuseLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CuseLink")
            .field("daemon_pid", &self.daemon_pid)
            .finish()
    }
}

/// Whether a resolved `/sys/dev/char/M:m` target is a CUSE device.
pub(crate) fn is_cuse_sysfs_path(resolved: &Path) -> bool {
    resolved.starts_with(CUSE_SYSFS_DIR)
}

/// Whether the character device `rdev` is served over CUSE (by any server).
pub(crate) fn is_cuse_device(rdev: u64) -> bool {
    let link = format!("/sys/dev/char/{}:{}", libc::major(rdev), libc::minor(rdev));
    std::fs::canonicalize(link).is_ok_and(|p| is_cuse_sysfs_path(&p))
}

/// Looks at a freshly opened or wrapped device fd: `Some` when the simulator daemon serves it.
/// Never fails: anything unexpected means "not the simulator" (and is logged).
pub(crate) fn detect(fd: BorrowedFd<'_>) -> Option<Arc<CuseLink>> {
    let file = std::fs::File::from(fd.try_clone_to_owned().ok()?);
    let meta = file.metadata().ok()?;
    if !meta.file_type().is_char_device() || !is_cuse_device(meta.rdev()) {
        return None;
    }
    match daemon_pid(fd) {
        Ok(pid) => {
            log::debug!("device served over CUSE by kfd-simd (pid {pid})");
            Some(Arc::new(CuseLink { daemon_pid: pid }))
        }
        Err(e) => {
            log::debug!("a CUSE device that is not the simulator (daemon pid query: {e})");
            None
        }
    }
}

/// Asks the daemon serving `fd` for its pid (the simulator-only `SIM_DAEMON_PID`).
fn daemon_pid(fd: BorrowedFd<'_>) -> io::Result<u32> {
    let mut pid = 0u32;
    // SAFETY: SIM_DAEMON_PID's argument is a u32, which the daemon writes.
    unsafe { ioctl_with(fd, SIM_DAEMON_PID, &mut pid) }?;
    if pid == 0 {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(pid)
}

/// Takes the fd that the daemon keeps as `raw` for us: fetches a copy with `pidfd_getfd` and
/// asks the daemon (through `dev`, the device the ioctl was issued on) to close its own.
pub(crate) fn adopt(link: &CuseLink, dev: BorrowedFd<'_>, raw: RawFd) -> io::Result<OwnedFd> {
    let pid = daemon_pid(dev).unwrap_or(link.daemon_pid);
    let fetched = pidfd_open(pid)
        .and_then(|pidfd| pidfd_getfd(pidfd.as_fd(), raw))
        .and_then(|fd| inherit_close_on_exec(pid, raw, fd));
    let mut arg = u32::try_from(raw).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: SIM_CLOSE_FD's argument is a u32, which the daemon reads.
    if let Err(e) = unsafe { ioctl_with(dev, SIM_CLOSE_FD, &mut arg) } {
        log::warn!("kfd-simd (pid {pid}) did not close its fd {raw}: {e}");
    }
    fetched.map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "fetching fd {raw} from kfd-simd (pid {pid}) with pidfd_getfd: {e} (needs ptrace \
                 access to the daemon: run as its user or as root)"
            ),
        )
    })
}

/// `pidfd_getfd` always makes a close-on-exec copy; the fd the driver would have installed has
/// the close-on-exec flag the daemon gave its own copy (none for CRIU_OP dma-bufs, the caller's
/// choice for PRIME), read from `/proc/<daemon>/fdinfo/<raw>` before the daemon closes it.
fn inherit_close_on_exec(pid: u32, raw: RawFd, fd: OwnedFd) -> io::Result<OwnedFd> {
    let info = crate::procfs::read_proc_file(format!("/proc/{pid}/fdinfo/{raw}"))?;
    let flags = info
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no flags in fdinfo"))?;
    if flags & libc::O_CLOEXEC.unsigned_abs() == 0 {
        // SAFETY: F_SETFD on an fd we own, with an integer argument.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, 0) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(fd)
}

/// `pidfd_open(2)` (also used by the daemon on its clients).
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: plain syscall with integer arguments; it returns a new fd or -1.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    owned_from_syscall(r)
}

/// `pidfd_getfd(2)`: a copy (close-on-exec) of fd `raw` of the process behind `pidfd` (also used
/// by the daemon to resolve the fds its clients pass in).
pub fn pidfd_getfd(pidfd: BorrowedFd<'_>, raw: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with integer arguments (`pidfd` is open for the call); it returns a
    // new fd or -1.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), raw, 0) };
    owned_from_syscall(r)
}

fn owned_from_syscall(r: libc::c_long) -> io::Result<OwnedFd> {
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(r).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: the syscall just returned this new fd, which nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn request_codes_are_outside_both_drivers() {
        assert_eq!(SIM_DAEMON_PID, 0x8004_4b7f);
        assert_eq!(SIM_CLOSE_FD, 0x4004_4b7e);
        assert!(crate::ioctl::kfd::lookup(SIM_DAEMON_PID).is_none());
        assert!(crate::ioctl::kfd::lookup(SIM_CLOSE_FD).is_none());
    }

    #[test]
    fn sysfs_targets_of_cuse_devices_are_recognised() {
        assert!(is_cuse_sysfs_path(Path::new(
            "/sys/devices/virtual/cuse/dri!renderD128"
        )));
        assert!(is_cuse_sysfs_path(Path::new(
            "/sys/devices/virtual/cuse/kfd"
        )));
        assert!(!is_cuse_sysfs_path(Path::new(
            "/sys/devices/pci0000:00/0000:00:01.0/drm/renderD128"
        )));
        assert!(!is_cuse_sysfs_path(Path::new(
            "/sys/devices/virtual/kfd/kfd"
        )));
        assert!(!is_cuse_sysfs_path(Path::new(
            "/sys/devices/virtual/cusex/kfd"
        )));
    }

    #[test]
    fn plain_files_and_ordinary_devices_are_not_cuse_served() {
        let f = std::fs::File::open("/proc/self/status").unwrap();
        assert!(detect(f.as_fd()).is_none());
        let null = std::fs::File::open("/dev/null").unwrap();
        assert!(detect(null.as_fd()).is_none());
    }

    #[test]
    fn fetched_fds_keep_the_daemons_close_on_exec_flag() {
        fn cloexec(fd: BorrowedFd<'_>) -> bool {
            // SAFETY: F_GETFD on an fd borrowed for the call.
            let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
            assert!(r >= 0);
            r & libc::FD_CLOEXEC != 0
        }
        let me = std::process::id();
        let pidfd = pidfd_open(me).unwrap();
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        // As the daemon keeps a CRIU_OP dma-buf: not close-on-exec.
        // SAFETY: dup of an fd we own; the result is owned below.
        let inheritable = unsafe { OwnedFd::from_raw_fd(libc::dup(a.as_raw_fd())) };
        assert!(!cloexec(inheritable.as_fd()));
        let raw = inheritable.as_raw_fd();
        let copy = pidfd_getfd(pidfd.as_fd(), raw).unwrap();
        assert!(
            cloexec(copy.as_fd()),
            "pidfd_getfd makes close-on-exec copies"
        );
        let copy = inherit_close_on_exec(me, raw, copy).unwrap();
        assert!(!cloexec(copy.as_fd()));
        // As a PRIME export with DRM_CLOEXEC: stays close-on-exec.
        let raw = a.as_raw_fd();
        assert!(cloexec(a.as_fd()));
        let copy = pidfd_getfd(pidfd.as_fd(), raw).unwrap();
        let copy = inherit_close_on_exec(me, raw, copy).unwrap();
        assert!(cloexec(copy.as_fd()));
    }

    #[test]
    fn pidfd_getfd_fetches_the_same_open_file() {
        // Our own process stands in for the daemon (ptrace access to oneself is always allowed).
        let pidfd = pidfd_open(std::process::id()).unwrap();
        let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let copy = pidfd_getfd(pidfd.as_fd(), b.as_raw_fd()).unwrap();
        drop(b);
        a.write_all(b"x").unwrap();
        let mut got = [0u8; 1];
        std::fs::File::from(copy).read_exact(&mut got).unwrap();
        assert_eq!(&got, b"x");
        let e = pidfd_getfd(pidfd.as_fd(), 1 << 20).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
    }
}
