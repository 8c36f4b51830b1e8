//! The `ioctl(2)` system call, below the transports: [`ioctl_raw`] for device calls (the
//! transports issue it, restarting it as the drivers' callers do) and [`ioctl_with`] for a
//! control device's own requests (the CUSE daemon's, the `kfd_bridge` module's).

use std::ffi::c_void;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::errno::Errno;

/// `ioctl(2)` on `fd` with the argument at `arg`: the one call of it in this crate.
///
/// # Safety
///
/// As for [`Transport::ioctl`](crate::Transport::ioctl): `arg` is valid for reads and writes of
/// `ioctl::size(request)` bytes for the whole call, and every pointer inside it satisfies that
/// ioctl's contract.
pub(crate) unsafe fn ioctl_raw(
    fd: BorrowedFd<'_>,
    request: u32,
    arg: *mut c_void,
) -> Result<i32, Errno> {
    // SAFETY: `fd` is open for the call; the caller vouches for `arg`.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), libc::c_ulong::from(request), arg) };
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(ret)
    }
}

/// `ioctl(2)` on `fd` whose argument is a `T` (a control device's request, such as the
/// simulator's own requests on a CUSE-served node or the `kfd_bridge` module's); returns the
/// call's non-negative result.
///
/// # Safety
///
/// `request` must be a request whose argument is a `T` (its size field is `size_of::<T>()`: the
/// driver reads and writes exactly that many bytes at `arg`), and any pointer inside `T` must
/// satisfy that request's contract for the call.
pub unsafe fn ioctl_with<T>(fd: BorrowedFd<'_>, request: u32, arg: &mut T) -> io::Result<i32> {
    debug_assert_eq!(crate::ioctl::size(request), std::mem::size_of::<T>());
    // SAFETY: `arg` is a live, exclusive `T` of the size the request encodes; the caller vouches
    // for the request and the pointers inside `T`.
    unsafe { ioctl_raw(fd, request, std::ptr::from_mut(arg).cast()) }
        .map_err(|e| io::Error::from_raw_os_error(e.0))
}
