//! The KFD interface versions checkpoint/restore works with.
//!
//! CRIU_OP came with KFD ioctl interface 1.8 (Linux 5.16); every later 1.x keeps it. Like
//! upstream's plugin, a dump or restore on an older interface (or another major version) is
//! refused before any CRIU ioctl, so the process is neither paused nor half-restored.

use kfd_abi::kfd::Version;
use kfd_abi::{IoctlError, Kfd, Platform};

/// The oldest KFD interface with CRIU_OP.
pub const MIN_VERSION: Version = Version { major: 1, minor: 8 };

/// Why checkpoint/restore cannot run on this KFD.
#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    /// The interface predates CRIU_OP (or is of another major version). The message is upstream's
    /// log line, so that tooling that looks for it finds it.
    #[error(
        "CR not supported on current kernel (current:{:02}.{:02} min:{:02}.{:02})",
        current.major,
        current.minor,
        MIN_VERSION.major,
        MIN_VERSION.minor
    )]
    Unsupported {
        /// What the driver reports.
        current: Version,
    },
    /// GET_VERSION itself failed.
    #[error("asking /dev/kfd for its version: {0}")]
    Kfd(#[from] IoctlError),
}

/// Whether `v` has CRIU_OP.
pub fn supports_cr(v: Version) -> bool {
    v.major == MIN_VERSION.major && v.minor >= MIN_VERSION.minor
}

/// Checks the version of an open `/dev/kfd`.
pub(crate) fn check<D: kfd_abi::Transport>(kfd: &Kfd<D>) -> Result<(), VersionError> {
    let current = kfd.get_version()?;
    if supports_cr(current) {
        Ok(())
    } else {
        Err(VersionError::Unsupported { current })
    }
}

/// Checks the version of the platform's KFD on a `/dev/kfd` of our own (a dumped process's file
/// answers only its owner).
pub(crate) fn check_platform<P: Platform>(platform: &P) -> Result<(), VersionError> {
    check(&platform.open_kfd()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[rstest::rstest]
    #[case::linux_5_15(1, 7, false)]
    #[case::first_with_criu(1, 8, true)]
    #[case::linux_6_1(1, 11, true)]
    #[case::later(1, 17, true)]
    #[case::another_major(2, 9, false)]
    #[case::major_zero(0, 12, false)]
    fn criu_op_needs_1_8_or_later_of_major_1(
        #[case] major: u32,
        #[case] minor: u32,
        #[case] ok: bool,
    ) {
        assert_eq!(supports_cr(Version { major, minor }), ok);
    }

    #[test]
    fn the_refusal_reads_as_upstreams_log_line() {
        let e = VersionError::Unsupported {
            current: Version { major: 1, minor: 7 },
        };
        assert_eq!(
            e.to_string(),
            "CR not supported on current kernel (current:01.07 min:01.08)"
        );
    }
}
