//! The CUSE front end's contact with the OS: `poll`, the probe ioctl on a fetched client file,
//! signal masks, and `/proc/<pid>/status`. Every `unsafe` block of the front end is here.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

/// What `poll` saw on one fd.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Ready {
    /// Readable.
    pub readable: bool,
    /// Error or hang-up (a dead FUSE connection reports POLLERR).
    pub error: bool,
}

/// Waits until one of `fds` is readable or in error, or `timeout` passes (`None`: forever).
/// `EINTR` is returned as an error of kind `Interrupted`.
pub(super) fn poll(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> io::Result<Vec<Ready>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.map_or(-1, |t| i32::try_from(t.as_millis()).unwrap_or(i32::MAX));
    let n = libc::nfds_t::try_from(pfds.len())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `pfds` is a valid array of `n` pollfd structs for the call; the fds are borrowed
    // and open for its duration.
    let r = unsafe { libc::poll(pfds.as_mut_ptr(), n, ms) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pfds
        .iter()
        .map(|p| Ready {
            readable: p.revents & libc::POLLIN != 0,
            error: p.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0,
        })
        .collect())
}

/// Whether a pidfd reports its process as exited (readable), without waiting.
pub(super) fn pidfd_exited(pidfd: BorrowedFd<'_>) -> bool {
    poll(&[pidfd], Some(Duration::ZERO)).is_ok_and(|r| r.first().is_some_and(|r| r.readable))
}

/// An argument-less ioctl on `fd`; returns its non-negative result.
pub(super) fn ioctl_no_arg(fd: BorrowedFd<'_>, request: u32) -> io::Result<i32> {
    // SAFETY: `fd` is open for the call; the request carries no argument (size 0) and the
    // argument passed is a null pointer that nothing dereferences.
    let r = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::c_ulong::from(request),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// SIGTERM, SIGINT and SIGHUP blocked in the calling thread (and in the threads it starts
/// afterwards), so that [`TermSignals::wait`] can take them synchronously.
#[derive(Debug)]
pub struct TermSignals {
    set: libc::sigset_t,
}

impl TermSignals {
    /// Blocks the termination signals in the calling thread. Call it before starting threads.
    pub fn block() -> io::Result<Self> {
        let mut set = std::mem::MaybeUninit::<libc::sigset_t>::zeroed();
        // SAFETY: sigemptyset and sigaddset initialise and modify the set we own.
        let set = unsafe {
            libc::sigemptyset(set.as_mut_ptr());
            for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
                libc::sigaddset(set.as_mut_ptr(), s);
            }
            set.assume_init()
        };
        // SAFETY: `set` is initialised; the old mask is not wanted (null).
        let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if r != 0 {
            return Err(io::Error::from_raw_os_error(r));
        }
        Ok(Self { set })
    }

    /// Waits for one of the blocked signals; returns its number.
    pub fn wait(&self) -> io::Result<i32> {
        let mut sig = 0;
        // SAFETY: `self.set` is an initialised signal set; `sig` is writable.
        let r = unsafe { libc::sigwait(&self.set, &mut sig) };
        if r != 0 {
            return Err(io::Error::from_raw_os_error(r));
        }
        Ok(sig)
    }
}

/// What the daemon needs of `/proc/<pid>/status`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct ProcStatus {
    /// Thread-group id (the process).
    pub tgid: u32,
    /// The tracer's thread id, 0 when not traced.
    pub tracer_pid: u32,
    /// Effective capabilities.
    pub cap_eff: u64,
    /// The pid in the process's own (innermost) pid namespace: the last number of `NSpid`, or
    /// `tgid` on a kernel without that line.
    pub ns_pid: u32,
}

/// Capability numbers (`<linux/capability.h>`).
pub(super) const CAP_SYS_ADMIN: u32 = 21;
/// `CAP_CHECKPOINT_RESTORE`.
pub(super) const CAP_CHECKPOINT_RESTORE: u32 = 40;

impl ProcStatus {
    /// Parses the text of a status file; `None` without a `Tgid:` line.
    pub(super) fn parse(text: &str) -> Option<Self> {
        let mut s = Self::default();
        let mut tgid = None;
        let mut ns_pid = None;
        for line in text.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match key {
                "Tgid" => tgid = value.parse().ok(),
                "TracerPid" => s.tracer_pid = value.parse().unwrap_or(0),
                "CapEff" => s.cap_eff = u64::from_str_radix(value, 16).unwrap_or(0),
                "NSpid" => ns_pid = value.split_whitespace().last().and_then(|v| v.parse().ok()),
                _ => {}
            }
        }
        s.tgid = tgid?;
        s.ns_pid = ns_pid.unwrap_or(s.tgid);
        Some(s)
    }

    /// Reads `/proc/<pid>/status` (`pid` may be a thread id).
    pub(super) fn read(pid: u32) -> io::Result<Self> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        Self::parse(&text).ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))
    }

    /// `capable(CAP_CHECKPOINT_RESTORE) || capable(CAP_SYS_ADMIN)`.
    pub(super) fn can_checkpoint_restore(&self) -> bool {
        let has = |cap: u32| self.cap_eff & (1u64 << cap) != 0;
        has(CAP_CHECKPOINT_RESTORE) || has(CAP_SYS_ADMIN)
    }
}

/// A connected `SOCK_SEQPACKET` pair: message boundaries like `/dev/cuse`, so one end can play
/// the kernel in tests.
#[cfg(test)]
pub(crate) fn seqpacket_pair() -> io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two fds socketpair writes.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socketpair succeeded: both fds are new and owned by nobody else.
    Ok(unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tcriu\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\n\
        Ngid:\t0\nPid:\t4243\nPPid:\t1\nTracerPid:\t77\nUid:\t0\t0\t0\t0\n\
        CapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t0000010000000000\n";

    #[test]
    fn status_fields_are_parsed() {
        let s = ProcStatus::parse(STATUS).unwrap();
        assert_eq!(s.tgid, 4242);
        assert_eq!(s.tracer_pid, 77);
        assert_eq!(s.cap_eff, 1 << 40);
        assert!(s.can_checkpoint_restore());
    }

    #[test]
    fn the_pid_in_its_own_namespace_is_the_last_nspid() {
        let host = ProcStatus::parse("Tgid:\t4242\nNSpid:\t4242\n").unwrap();
        assert_eq!(host.ns_pid, 4242);
        // A container's init, seen from the host, and a task two namespaces deep.
        let init = ProcStatus::parse("Tgid:\t4242\nNSpid:\t4242\t1\n").unwrap();
        assert_eq!(init.ns_pid, 1);
        let nested = ProcStatus::parse("Tgid:\t4242\nNSpid:\t4242\t17\t3\n").unwrap();
        assert_eq!(nested.ns_pid, 3);
        // A kernel without NSpid (before 4.1): the pid as the daemon sees it.
        assert_eq!(ProcStatus::parse(STATUS).unwrap().ns_pid, 4242);
    }

    #[test]
    fn capabilities_decide_checkpoint_rights() {
        let mut s = ProcStatus::parse("Tgid:\t1\nCapEff:\t0000000000200000\n").unwrap();
        assert!(s.can_checkpoint_restore()); // CAP_SYS_ADMIN
        s.cap_eff = 0x1000; // something else
        assert!(!s.can_checkpoint_restore());
        assert!(ProcStatus::parse("Name:\tx\n").is_none());
    }

    #[test]
    fn our_own_status_is_readable() {
        let s = ProcStatus::read(std::process::id()).unwrap();
        assert_eq!(s.tgid, std::process::id());
    }

    #[test]
    fn poll_sees_a_readable_socket() {
        use std::io::Write;
        use std::os::fd::AsFd;
        let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let r = poll(&[b.as_fd()], Some(Duration::ZERO)).unwrap();
        assert!(!r[0].readable);
        a.write_all(b"x").unwrap();
        let r = poll(&[b.as_fd()], Some(Duration::from_secs(1))).unwrap();
        assert!(r[0].readable);
    }
}
