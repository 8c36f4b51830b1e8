//! The bridge's contact with the OS: the control device's ioctls (issued through `kfd-abi`'s
//! [`FdTransport`], as every ioctl of the workspace) and an fd's close-on-exec flag. Every
//! `unsafe` block of the bridge is here.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use kfd_abi::{FdTransport, Transport};

use super::proto::{self, Create, DevAccess, MmapAnswer, MmapQuery, OpenAccess, PushFd, PushFds};

/// One ioctl on the control device whose argument is a `T`.
///
/// # Safety
///
/// `request` must be one of the control device's codes whose argument struct is `T` (the module
/// reads and writes exactly `size_of::<T>()` bytes there) and `T` must contain no pointers the
/// module follows, except those the caller keeps valid for the call.
unsafe fn ioctl_with<T>(ctl: &FdTransport, request: u32, arg: &mut T) -> io::Result<i32> {
    debug_assert_eq!(kfd_abi::ioctl::size(request), std::mem::size_of::<T>());
    // SAFETY: `arg` is a live, exclusive `T` of the size the request encodes, and what it points
    // to is the caller's to keep valid (the caller's contract).
    unsafe { ctl.ioctl(request, std::ptr::from_mut(arg).cast()) }.map_err(io::Error::from)
}

/// `KFD_BRIDGE_IOC_VERSION`.
pub(super) fn version(ctl: &FdTransport) -> io::Result<u32> {
    let mut v = 0u32;
    // SAFETY: IOC_VERSION's argument is a u32, which the module writes.
    unsafe { ioctl_with(ctl, proto::IOC_VERSION, &mut v) }?;
    Ok(v)
}

/// `KFD_BRIDGE_IOC_CREATE`.
pub(super) fn create(ctl: &FdTransport, c: &mut Create) -> io::Result<()> {
    // SAFETY: IOC_CREATE's argument is a `Create` (plain data, no pointers).
    unsafe { ioctl_with(ctl, proto::IOC_CREATE, c) }.map(drop)
}

/// `KFD_BRIDGE_IOC_MMAP_QUERY`.
pub(super) fn mmap_query(ctl: &FdTransport, q: &mut MmapQuery) -> io::Result<()> {
    // SAFETY: IOC_MMAP_QUERY's argument is a `MmapQuery` (plain data).
    unsafe { ioctl_with(ctl, proto::IOC_MMAP_QUERY, q) }.map(drop)
}

/// `KFD_BRIDGE_IOC_MMAP_ANSWER`.
pub(super) fn mmap_answer(ctl: &FdTransport, a: &MmapAnswer) -> io::Result<()> {
    let mut a = *a;
    // SAFETY: IOC_MMAP_ANSWER's argument is a `MmapAnswer` (plain data; its fd is only looked up
    // in our table).
    unsafe { ioctl_with(ctl, proto::IOC_MMAP_ANSWER, &mut a) }.map(drop)
}

/// `KFD_BRIDGE_IOC_PUSH_FDS` of `fds` for thread `tid`.
pub(super) fn push_fds(ctl: &FdTransport, tid: u32, fds: &[PushFd]) -> io::Result<()> {
    let count = u32::try_from(fds.len()).map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?;
    let mut p = PushFds {
        tid,
        count,
        fds: fds.as_ptr() as u64,
    };
    // SAFETY: IOC_PUSH_FDS's argument is a `PushFds` whose `fds` points to `count` entries that
    // `fds` keeps alive for the call; the module only reads them.
    unsafe { ioctl_with(ctl, proto::IOC_PUSH_FDS, &mut p) }.map(drop)
}

/// `KFD_BRIDGE_IOC_OPEN_ACCESS` for thread `tid`, into `devs`. Returns how many proxies the
/// module has verdicts for (more than `devs.len()`: only the first ones were written).
pub(super) fn open_access(
    ctl: &FdTransport,
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
    unsafe { ioctl_with(ctl, proto::IOC_OPEN_ACCESS, &mut a) }?;
    usize::try_from(a.count).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))
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
        let f = FdTransport::open(std::path::Path::new("/dev/null")).unwrap();
        assert_eq!(version(&f).unwrap_err().raw_os_error(), Some(libc::ENOTTY));
        let e = push_fds(&f, 1, &[PushFd::default()]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTTY));
        let mut devs = [DevAccess::default(); 2];
        let e = open_access(&f, 1, &mut devs).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTTY));
        assert_eq!(devs, [DevAccess::default(); 2], "nothing written");
    }
}
