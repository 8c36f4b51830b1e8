//! The error of every typed call: which ioctl, on which node, and the errno.

use std::borrow::Cow;
use std::io;
use std::path::PathBuf;

use crate::errno::Errno;

/// A failed call into the driver.
#[derive(Debug, thiserror::Error)]
pub enum IoctlError {
    /// The driver rejected the ioctl.
    #[error("{ioctl} on {device} failed: {errno}{}", hint.map(|h| format!(" ({h})")).unwrap_or_default())]
    Failed {
        /// The ioctl, e.g. `ALLOC_MEMORY_OF_GPU` or `CRIU_OP(CHECKPOINT)`.
        ioctl: Cow<'static, str>,
        /// The node, e.g. `/dev/kfd` or `/dev/dri/renderD128`.
        device: String,
        /// What the driver returned.
        errno: Errno,
        /// What the errno means for this ioctl, where that is known.
        hint: Option<&'static str>,
    },
    /// The driver answered with something it never returns (a zero handle, an impossible count).
    #[error("{ioctl} on {device} returned an invalid reply: {what}")]
    BadReply {
        /// The ioctl.
        ioctl: Cow<'static, str>,
        /// The node.
        device: String,
        /// What was wrong.
        what: String,
    },
    /// An argument that cannot be expressed in the ioctl (too many entries, a size overflow).
    #[error("{ioctl}: invalid argument: {what}")]
    InvalidArgument {
        /// The ioctl.
        ioctl: Cow<'static, str>,
        /// What was wrong.
        what: String,
    },
    /// Opening a device node failed.
    #[error("cannot open {}: {source}", path.display())]
    Open {
        /// The node.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// An fd operation around an ioctl failed (adopting an installed fd, dup).
    #[error("{what} on {device}: {source}")]
    Fd {
        /// What was being done.
        what: &'static str,
        /// The node.
        device: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

impl IoctlError {
    /// The errno, when the driver returned one.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            IoctlError::Failed { errno, .. } => Some(*errno),
            IoctlError::Open { source, .. } | IoctlError::Fd { source, .. } => {
                source.raw_os_error().map(Errno)
            }
            _ => None,
        }
    }
}

/// Result of typed calls.
pub type Result<T, E = IoctlError> = std::result::Result<T, E>;

/// The meaning of an errno for a given ioctl, where the driver's checks make it unambiguous.
pub(crate) fn hint(ioctl: &str, errno: Errno) -> Option<&'static str> {
    Some(match (ioctl, errno) {
        (_, Errno::EBADF) => "the file was opened by another process",
        ("CRIU_OP(CHECKPOINT)", Errno::EINVAL) => {
            "not paused, or counts changed since PROCESS_INFO"
        }
        ("CRIU_OP(UNPAUSE)", Errno::EINVAL) => "the process is not paused",
        ("CRIU_OP(RESUME)", Errno::ESRCH) => "no KFD process with that pid",
        ("CRIU_OP(RESUME)", Errno::EINVAL) => "the process was not restored",
        ("CRIU_OP(PROCESS_INFO)" | "CRIU_OP(CHECKPOINT)", Errno::ENODEV) => {
            "the process has no GPU devices"
        }
        ("CRIU_OP(PROCESS_INFO)", Errno::EOPNOTSUPP) => {
            "the process uses a queue type that cannot be checkpointed"
        }
        (i, Errno::EACCES) if i.starts_with("CRIU_OP") => {
            "needs CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN"
        }
        ("ACQUIRE_VM", Errno::EBUSY) => "the GPU's VM is already acquired with another file",
        ("FREE_MEMORY_OF_GPU", Errno::EBUSY) => "the buffer is still mapped",
        ("FREE_MEMORY_OF_GPU", Errno::EPERM) => "the signal event page cannot be freed",
        ("ALLOC_MEMORY_OF_GPU", Errno::ENODEV) => "no VM acquired on that GPU",
        ("ALLOC_MEMORY_OF_GPU", Errno::ENOMEM) => "out of memory on that GPU",
        ("ALLOC_MEMORY_OF_GPU", Errno::EADDRINUSE) => "the range overlaps an SVM range",
        ("CREATE_QUEUE", Errno::ESRCH) => "no VM acquired on that GPU",
        ("CREATE_QUEUE", Errno::ENOSPC) => "too many queues on that GPU",
        ("CREATE_QUEUE", Errno::ENOTSUPP) => "unsupported queue type",
        ("CREATE_EVENT", Errno::ENOSPC) => "no free signal event slot",
        (_, Errno::ENOTTY) => "not a device that understands this ioctl",
        _ => return None,
    })
}

pub(crate) fn failed(
    ioctl: impl Into<Cow<'static, str>>,
    device: &str,
    errno: Errno,
) -> IoctlError {
    let ioctl = ioctl.into();
    let hint = hint(&ioctl, errno);
    IoctlError::Failed {
        ioctl,
        device: device.to_owned(),
        errno,
        hint,
    }
}

pub(crate) fn bad_reply(
    ioctl: impl Into<Cow<'static, str>>,
    device: &str,
    what: impl Into<String>,
) -> IoctlError {
    IoctlError::BadReply {
        ioctl: ioctl.into(),
        device: device.to_owned(),
        what: what.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_ioctl_node_errno_and_meaning() {
        let e = failed("CRIU_OP(CHECKPOINT)", "/dev/kfd", Errno::EINVAL);
        assert_eq!(
            e.to_string(),
            "CRIU_OP(CHECKPOINT) on /dev/kfd failed: EINVAL \
             (not paused, or counts changed since PROCESS_INFO)"
        );
        let e = failed("GET_VERSION", "/dev/kfd", Errno(77));
        assert_eq!(e.to_string(), "GET_VERSION on /dev/kfd failed: errno 77");
        assert_eq!(e.errno(), Some(Errno(77)));
    }
}
