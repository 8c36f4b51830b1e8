//! Kernel error numbers as a small, printable type.

use std::fmt;

/// A positive kernel errno, as an ioctl returns it.
///
/// Unlike `std::io::Error` it is `Copy`, compares by value, and knows the kernel-internal
/// `ENOTSUPP` (524) that amdkfd returns for unsupported queue types.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// `EPERM` (1).
    pub const EPERM: Self = Self(libc::EPERM);
    /// `ENOENT` (2).
    pub const ENOENT: Self = Self(libc::ENOENT);
    /// `ESRCH` (3).
    pub const ESRCH: Self = Self(libc::ESRCH);
    /// `EINTR` (4).
    pub const EINTR: Self = Self(libc::EINTR);
    /// `EIO` (5).
    pub const EIO: Self = Self(libc::EIO);
    /// `EBADF` (9).
    pub const EBADF: Self = Self(libc::EBADF);
    /// `EAGAIN` (11).
    pub const EAGAIN: Self = Self(libc::EAGAIN);
    /// `ENOMEM` (12).
    pub const ENOMEM: Self = Self(libc::ENOMEM);
    /// `EACCES` (13).
    pub const EACCES: Self = Self(libc::EACCES);
    /// `EFAULT` (14).
    pub const EFAULT: Self = Self(libc::EFAULT);
    /// `EBUSY` (16).
    pub const EBUSY: Self = Self(libc::EBUSY);
    /// `EEXIST` (17).
    pub const EEXIST: Self = Self(libc::EEXIST);
    /// `ENODEV` (19).
    pub const ENODEV: Self = Self(libc::ENODEV);
    /// `EINVAL` (22).
    pub const EINVAL: Self = Self(libc::EINVAL);
    /// `ENOTTY` (25).
    pub const ENOTTY: Self = Self(libc::ENOTTY);
    /// `ENOSPC` (28).
    pub const ENOSPC: Self = Self(libc::ENOSPC);
    /// `ENOSYS` (38).
    pub const ENOSYS: Self = Self(libc::ENOSYS);
    /// `ENODATA` (61).
    pub const ENODATA: Self = Self(libc::ENODATA);
    /// `ETIME` (62).
    pub const ETIME: Self = Self(libc::ETIME);
    /// `EOPNOTSUPP` (95), also `ENOTSUP` in userspace.
    pub const EOPNOTSUPP: Self = Self(libc::EOPNOTSUPP);
    /// `EADDRINUSE` (98).
    pub const EADDRINUSE: Self = Self(libc::EADDRINUSE);
    /// `ETIMEDOUT` (110).
    pub const ETIMEDOUT: Self = Self(libc::ETIMEDOUT);
    /// `ECANCELED` (125).
    pub const ECANCELED: Self = Self(libc::ECANCELED);
    /// The kernel-internal `ENOTSUPP` (524), which leaks to userspace from amdkfd.
    pub const ENOTSUPP: Self = Self(524);

    /// The errno of the last failed libc call on this thread.
    pub fn last() -> Self {
        Self(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        )
    }

    /// The errno carried by an I/O error, `EIO` if it carries none.
    pub fn from_io(err: &std::io::Error) -> Self {
        Self(err.raw_os_error().unwrap_or(libc::EIO))
    }

    /// The symbolic name (`"EINVAL"`), or `None` for numbers this type does not name.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            libc::EPERM => "EPERM",
            libc::ENOENT => "ENOENT",
            libc::ESRCH => "ESRCH",
            libc::EINTR => "EINTR",
            libc::EIO => "EIO",
            libc::EBADF => "EBADF",
            libc::EAGAIN => "EAGAIN",
            libc::ENOMEM => "ENOMEM",
            libc::EACCES => "EACCES",
            libc::EFAULT => "EFAULT",
            libc::EBUSY => "EBUSY",
            libc::EEXIST => "EEXIST",
            libc::ENODEV => "ENODEV",
            libc::EINVAL => "EINVAL",
            libc::ENOTTY => "ENOTTY",
            libc::ENOSPC => "ENOSPC",
            libc::ENOSYS => "ENOSYS",
            libc::ENODATA => "ENODATA",
            libc::ETIME => "ETIME",
            libc::EOPNOTSUPP => "EOPNOTSUPP",
            libc::EADDRINUSE => "EADDRINUSE",
            libc::ETIMEDOUT => "ETIMEDOUT",
            libc::ECANCELED => "ECANCELED",
            524 => "ENOTSUPP",
            _ => return None,
        })
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "errno {}", self.0),
        }
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}({})", self.0)
    }
}

impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> Self {
        std::io::Error::from_raw_os_error(e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_known_numbers_and_prints_unknown_ones() {
        assert_eq!(Errno::EINVAL.to_string(), "EINVAL");
        assert_eq!(Errno::ENOTSUPP.to_string(), "ENOTSUPP");
        assert_eq!(Errno(4242).to_string(), "errno 4242");
        assert_eq!(format!("{:?}", Errno::EFAULT), "EFAULT(14)");
    }
}
