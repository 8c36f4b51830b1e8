//! The transport seam: how a typed call reaches a driver.
//!
//! Everything above this module is generic over [`Transport`]. The real implementation,
//! [`FdTransport`], is a file descriptor on which `ioctl(2)` is called: a real `/dev/kfd`, a real
//! render node, or the same nodes served by the simulator over CUSE. The simulator implements the
//! trait in process, so the same plugin code runs against hardware and against the model.
//!
//! [`FdTransport`] issues a call again that the driver ended with `EINTR` or `EAGAIN`, as
//! libdrm's `drmIoctl` and libhsakmt's `kmtIoctl` do: amdgpu's command submission asks for it
//! when a USERPTR BO's pages moved under it, and a signal ends the drivers' interruptible waits.

use std::ffi::c_void;
use std::fmt;
use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

use crate::cuse::{self, CuseLink};
use crate::errno::Errno;
use crate::mapping::{Mapping, Place, Prot, Share};
use crate::syscall::ioctl_raw;

pub use crate::syscall::ioctl_with;

/// An open device file on which ioctls can be issued.
///
/// A transport is also a file descriptor ([`AsFd`]): the handle criu sees, the fd passed to another
/// ioctl (`ACQUIRE_VM`'s `drm_fd`), the fd that `dup` duplicates. In the simulator that fd is a
/// placeholder file that names the simulated open file.
pub trait Transport: AsFd + fmt::Debug + Send + Sync {
    /// Issues the ioctl `request` with the argument at `arg` and returns its non-negative result.
    ///
    /// # Safety
    ///
    /// `arg` must be valid for reads and writes of `ioctl::size(request)` bytes for the whole call,
    /// and every pointer the argument contains must satisfy that ioctl's contract (the driver reads
    /// and writes through them, and may keep some, such as userptr and queue addresses).
    unsafe fn ioctl(&self, request: u32, arg: *mut c_void) -> Result<i32, Errno>;

    /// Takes ownership of a file descriptor that the driver installed in this process as the
    /// result of an ioctl on this transport (the dma-buf fds of `CRIU_OP`, a PRIME export, the SMI
    /// event fd).
    ///
    /// # Safety
    ///
    /// `raw` must be an fd number that an ioctl on this transport just returned and that nothing
    /// else owns.
    unsafe fn adopt_fd(&self, raw: RawFd) -> io::Result<OwnedFd>;

    /// Another handle on the same open file (as `dup(2)` makes).
    fn try_clone(&self) -> io::Result<Self>
    where
        Self: Sized;

    /// `mmap(2)` of the device at byte `offset` (a KFD doorbell, events or MMIO offset, or a
    /// render node's fake offset of a buffer), at `place`: wherever the kernel puts it, or over
    /// a mapping of ours ([`Place::Over`]). Dropping the [`Mapping`] unmaps it (`munmap(2)`).
    ///
    /// The default is the answer of a file without an `mmap` operation (`ENODEV`), which is what
    /// a stock CUSE device gives.
    ///
    /// # Errors
    ///
    /// The driver's errno for the request (unknown offset, wrong length, no access); a mapping
    /// the new one was to replace is then unmapped.
    fn mmap(&self, place: Place, offset: u64, prot: Prot, share: Share) -> Result<Mapping, Errno> {
        drop((place, offset, prot, share));
        Err(Errno::ENODEV)
    }
}

/// A transport that forwards every call to another one, and may act before each ioctl: a
/// test's fault injection, a trap on some requests, a switch to another file halfway through.
/// Implementing it (and [`AsFd`], usually the inner transport's fd) makes a type a
/// [`Transport`] that writes only what it adds.
pub trait Forward: AsFd + fmt::Debug + Send + Sync + Sized {
    /// The transport calls go to.
    type Inner: Transport;

    /// Where the next call goes.
    fn inner(&self) -> &Self::Inner;

    /// Runs before each ioctl; an error is the ioctl's answer and the call is not forwarded.
    /// The default lets every call through.
    ///
    /// # Safety
    ///
    /// The caller gives [`Transport::ioctl`]'s guarantees for `arg`, so an implementation may
    /// read the argument `request` carries.
    unsafe fn before_ioctl(&self, request: u32, arg: *mut c_void) -> Result<(), Errno> {
        let _ = (request, arg);
        Ok(())
    }

    /// Another handle on the same open file ([`Transport::try_clone`]).
    fn dup(&self) -> io::Result<Self>;
}

impl<F: Forward> Transport for F {
    unsafe fn ioctl(&self, request: u32, arg: *mut c_void) -> Result<i32, Errno> {
        // SAFETY: our caller gives the guarantees both calls need.
        unsafe {
            self.before_ioctl(request, arg)?;
            self.inner().ioctl(request, arg)
        }
    }

    unsafe fn adopt_fd(&self, raw: RawFd) -> io::Result<OwnedFd> {
        // SAFETY: forwarded unchanged; the caller's contract is the inner transport's.
        unsafe { self.inner().adopt_fd(raw) }
    }

    fn try_clone(&self) -> io::Result<Self> {
        self.dup()
    }

    fn mmap(&self, place: Place, offset: u64, prot: Prot, share: Share) -> Result<Mapping, Errno> {
        self.inner().mmap(place, offset, prot, share)
    }
}

/// A device file opened with `open(2)`: real hardware, or a simulator served over CUSE.
///
/// When the device is served by the simulator over CUSE (found out once, when the fd is opened
/// or wrapped), fds that ioctls return are fetched from the daemon ([`crate::cuse`]).
#[derive(Debug)]
pub struct FdTransport {
    fd: OwnedFd,
    cuse: Option<Arc<CuseLink>>,
}

impl FdTransport {
    /// Opens a device node read-write and close-on-exec, as libhsakmt and libdrm do.
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)?;
        Ok(Self::from_fd(file.into()))
    }

    /// Wraps an fd that is already open on a KFD or render node.
    pub fn from_fd(fd: OwnedFd) -> Self {
        let cuse = cuse::detect(fd.as_fd());
        Self { fd, cuse }
    }

    /// Whether the device is the simulator served over CUSE (`kfd-simd`).
    pub fn is_cuse_served(&self) -> bool {
        self.cuse.is_some()
    }

    /// Gives the fd back.
    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }
}

impl AsFd for FdTransport {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Transport for FdTransport {
    unsafe fn ioctl(&self, request: u32, arg: *mut c_void) -> Result<i32, Errno> {
        restarting(|| {
            // SAFETY: the fd is open for the lifetime of `self`; the caller guarantees that `arg`
            // is valid for the size encoded in `request` and for the pointers it contains, for
            // the whole call, so for every attempt.
            unsafe { ioctl_raw(self.fd.as_fd(), request, arg) }
        })
    }

    unsafe fn adopt_fd(&self, raw: RawFd) -> io::Result<OwnedFd> {
        if raw < 0 {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        if let Some(link) = &self.cuse {
            // The number is the daemon's, not ours.
            return cuse::adopt(link, self.fd.as_fd(), raw);
        }
        // SAFETY: the caller guarantees that the kernel installed `raw` in our table for this
        // call and that nothing else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(raw) })
    }

    fn try_clone(&self) -> io::Result<Self> {
        Ok(Self {
            fd: self.fd.try_clone()?,
            cuse: self.cuse.clone(),
        })
    }

    fn mmap(&self, place: Place, offset: u64, prot: Prot, share: Share) -> Result<Mapping, Errno> {
        // The driver (or the kfd_bridge module in front of a CUSE device) decides; the VMA flags
        // are the kernel's business.
        Mapping::map_fd(place, self.fd.as_fd(), offset, prot, share)
    }
}

/// A close-on-exec duplicate of `fd` at the lowest free number not below `min`
/// (`fcntl(F_DUPFD_CLOEXEC)`): how fds are moved out of the way of numbers another party (criu
/// restoring a task's files) is about to use.
pub fn dup_at_or_above(fd: BorrowedFd<'_>, min: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) only reads the open fd and an integer; on success it returns
    // a new fd that nothing else owns.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min.max(0)) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `r` was just created by fcntl and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

/// How many times a device ioctl is issued in all while it fails with `EINTR` or `EAGAIN`
/// ([`restarting`]); then the last error is returned.
const RESTART_ATTEMPTS: u32 = 256;

/// Issues `call` (one ioctl on a KFD or render node) again while it fails with `EINTR` or
/// `EAGAIN`, up to [`RESTART_ATTEMPTS`] calls, as libdrm's `drmIoctl` and libhsakmt's
/// `kmtIoctl` do and as the drivers expect of their callers: amdgpu's command submission answers
/// `EAGAIN` when the pages of a USERPTR BO moved while it was checking them (a migration, a huge
/// page collapsed) and expects the call again, and a signal arriving in an interruptible wait of
/// either driver ends the call with `EINTR` (`WAIT_EVENTS` writes back the time left first, so
/// the call again waits only for that). Any other result is returned at once.
fn restarting(mut call: impl FnMut() -> Result<i32, Errno>) -> Result<i32, Errno> {
    let mut attempts = 1;
    loop {
        match call() {
            Err(e) if (e == Errno::EINTR || e == Errno::EAGAIN) && attempts < RESTART_ATTEMPTS => {
                attempts += 1;
            }
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    /// The result of [`restarting`] over a call that answers `answers` in turn (the last one
    /// for ever), and how many calls it made.
    fn restart(answers: &[Result<i32, Errno>]) -> (Result<i32, Errno>, usize) {
        let mut calls = 0;
        let r = restarting(|| {
            calls += 1;
            answers[(calls - 1).min(answers.len() - 1)]
        });
        (r, calls)
    }

    #[rstest]
    #[case::success_at_once(&[Ok(3)], Ok(3), 1)]
    #[case::interrupted_then_done(&[Err(Errno::EINTR), Err(Errno::EINTR), Ok(0)], Ok(0), 3)]
    #[case::userptr_moved_then_done(&[Err(Errno::EAGAIN), Ok(0)], Ok(0), 2)]
    #[case::other_errors_at_once(&[Err(Errno::EINVAL), Ok(0)], Err(Errno::EINVAL), 1)]
    #[case::busy_for_ever_ends(&[Err(Errno::EAGAIN)], Err(Errno::EAGAIN), RESTART_ATTEMPTS as usize)]
    #[case::interrupted_for_ever_ends(&[Err(Errno::EINTR)], Err(Errno::EINTR), RESTART_ATTEMPTS as usize)]
    fn device_ioctls_are_restarted_as_libdrm_and_libhsakmt_restart_them(
        #[case] answers: &[Result<i32, Errno>],
        #[case] result: Result<i32, Errno>,
        #[case] calls: usize,
    ) {
        assert_eq!(restart(answers), (result, calls));
    }
}
