//! The bridge's contact with the OS: the control device's ioctls and an fd's close-on-exec flag.
//! Every `unsafe` block of the bridge is here.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use kfd_abi::transport::ioctl_with;

use super::proto::{
    self, Create, DevAccess, MmapAnswer, MmapQuery, OpenAccess, PushFd, PushFds, TakeUnmaps, Unmap,
};

/// `KFD_BRIDGE_IOC_VERSION`.
pub(super) fn version(fd: BorrowedFd<'_>) -> io::Result<u32> {
    let mut v = 0u32;
    // SAFETY: IOC_VERSION's argument is a u32, which the module writes.
    unsafe { ioctl_with(fd, proto::IOC_VERSION, &mut v) }?;
    Ok(v)
}

/// `KFD_BRIDGE_IOC_CREATE`.
pub(super) fn create(fd: BorrowedFd<'_>, c: &mut Create) -> io::Result<()> {
    // SAFETY: IOC_CREATE's argument is a `Create` (plain data, no pointers).
    unsafe { ioctl_with(fd, proto::IOC_CREATE, c) }.map(drop)
}

/// `KFD_BRIDGE_IOC_MMAP_QUERY`.
pub(super) fn mmap_query(fd: BorrowedFd<'_>, q: &mut MmapQuery) -> io::Result<()> {
    // SAFETY: IOC_MMAP_QUERY's argument is a `MmapQuery` (plain data).
    unsafe { ioctl_with(fd, proto::IOC_MMAP_QUERY, q) }.map(drop)
}

/// `KFD_BRIDGE_IOC_MMAP_ANSWER`.
pub(super) fn mmap_answer(fd: BorrowedFd<'_>, a: &MmapAnswer) -> io::Result<()> {
    let mut a = *a;
    // SAFETY: IOC_MMAP_ANSWER's argument is a `MmapAnswer` (plain data; its fd is only looked up
    // in our table).
    unsafe { ioctl_with(fd, proto::IOC_MMAP_ANSWER, &mut a) }.map(drop)
}

/// `KFD_BRIDGE_IOC_PUSH_FDS` of `fds` for thread `tid`.
pub(super) fn push_fds(fd: BorrowedFd<'_>, tid: u32, fds: &[PushFd]) -> io::Result<()> {
    let count = u32::try_from(fds.len()).map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?;
    let mut p = PushFds {
        tid,
        count,
        fds: fds.as_ptr() as u64,
    };
    // SAFETY: IOC_PUSH_FDS's argument is a `PushFds` whose `fds` points to `count` entries that
    // `fds` keeps alive for the call; the module only reads them.
    unsafe { ioctl_with(fd, proto::IOC_PUSH_FDS, &mut p) }.map(drop)
}

/// `KFD_BRIDGE_IOC_OPEN_ACCESS` for thread `tid`, into `devs`. Returns how many proxies the
/// module has verdicts for (more than `devs.len()`: only the first ones were written).
pub(super) fn open_access(
    fd: BorrowedFd<'_>,
    tid: u32,
    devs: &mut [DevAccess],
) -> io::Result<usize> {
    let count = u32::try_from(devs.len()).map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?;
    let mut a = OpenAccess {
        tid,
        count,
        devs: devs.as_mut_ptr() as u64,
    };
    // SAFETY: IOC_OPEN_ACCESS's argument is an `OpenAccess` whose `devs` points to `count`
    // writable entries that `devs` keeps exclusively borrowed for the call; the module writes at
    // most `count` of them (plain data).
    unsafe { ioctl_with(fd, proto::IOC_OPEN_ACCESS, &mut a) }?;
    usize::try_from(a.count).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))
}

/// `KFD_BRIDGE_IOC_TAKE_UNMAPS` for process `tgid`, into `ranges`. Returns how many entries the
/// module wrote and its `KFD_BRIDGE_UNMAPS_*` flags.
pub(super) fn take_unmaps(
    fd: BorrowedFd<'_>,
    tgid: u32,
    ranges: &mut [Unmap],
) -> io::Result<(usize, u32)> {
    let count =
        u32::try_from(ranges.len()).map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?;
    let mut t = TakeUnmaps {
        tgid,
        count,
        ranges: ranges.as_mut_ptr() as u64,
        ..TakeUnmaps::default()
    };
    // SAFETY: IOC_TAKE_UNMAPS's argument is a `TakeUnmaps` whose `ranges` points to `count`
    // writable entries that `ranges` keeps exclusively borrowed for the call; the module writes
    // at most `count` of them (plain data).
    unsafe { ioctl_with(fd, proto::IOC_TAKE_UNMAPS, &mut t) }?;
    let n = usize::try_from(t.count).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
    Ok((n.min(ranges.len()), t.flags))
}

/// Whether `fd` is close-on-exec (`F_GETFD`).
pub(super) fn is_cloexec(fd: BorrowedFd<'_>) -> io::Result<bool> {
    // SAFETY: F_GETFD on an fd borrowed for the call; no pointers.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r & libc::FD_CLOEXEC != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn close_on_exec_is_read_back() {
        let f = std::fs::File::open("/dev/null").unwrap();
        assert!(is_cloexec(f.as_fd()).unwrap(), "std opens close-on-exec");
        let inheritable = crate::host::dup_inheritable(f.as_fd()).unwrap();
        assert!(!is_cloexec(inheritable.as_fd()).unwrap());
    }

    #[test]
    fn control_requests_on_another_file_fail_cleanly() {
        // /dev/null has no ioctls: every request is ENOTTY, nothing is read or written.
        let f = std::fs::File::open("/dev/null").unwrap();
        assert_eq!(
            version(f.as_fd()).unwrap_err().raw_os_error(),
            Some(libc::ENOTTY)
        );
        let e = push_fds(f.as_fd(), 1, &[PushFd::default()]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTTY));
        let mut devs = [DevAccess::default(); 2];
        let e = open_access(f.as_fd(), 1, &mut devs).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTTY));
        assert_eq!(devs, [DevAccess::default(); 2], "nothing written");
        let mut ranges = [Unmap::default(); 2];
        let e = take_unmaps(f.as_fd(), 1, &mut ranges).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTTY));
        assert_eq!(ranges, [Unmap::default(); 2], "nothing written");
    }
}
