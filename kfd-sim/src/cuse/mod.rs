//! The CUSE front end: the simulator served as real character devices, `/dev/kfd` and
//! `/dev/dri/renderD<minor>` (major 226, the preset's minors, so that they look exactly like real
//! render nodes), by a userspace daemon (`kfd-simd serve`), in pure Rust (no libfuse).
//!
//! - `proto`: the FUSE/CUSE wire format (CUSE_INIT, OPEN, IOCTL, RELEASE, ...).
//! - [`CuseServer`] (`server`): one `/dev/cuse` connection per device, registered by `init`;
//!   elastic reader thread pools (`threads`); the request handlers (`requests`); the processes
//!   they serve, with their pidfds and installed fds (`procs`).
//! - The dispatcher's caller for CUSE callers (`client`): identity from `/proc`, user memory
//!   with `process_vm_readv`/`writev` (unrestricted ioctls, no retry round trips), fds passed in
//!   fetched with `pidfd_getfd`, fds the kernel would install kept in the daemon for the client
//!   to fetch (the client side of that is `kfd_abi::cuse`).
//!
//! - `bridge`: with the VM lane's kernel module loaded (`ci/kmod/kfd_bridge`), the devices are
//!   served through its proxies, which add mmap and fds installed into the caller.
//!
//! Three request codes exist only here, all outside the real drivers' tables (real amdkfd
//! answers `EINVAL`/`ENOTTY`, a real amdgpu render node `EINVAL`):
//! `kfd_abi::cuse::SIM_DAEMON_PID` (`_IOR('K', 0x7f, u32)`), `kfd_abi::cuse::SIM_CLOSE_FD`
//! (`_IOW('K', 0x7e, u32)`) and `SIM_PROBE` (`_IO('K', 0x7d)`, answered only to the daemon
//! itself). They are matched on the whole code before the dispatcher sees the call.
//!
//! Needs root (or at least CAP_SYS_ADMIN to open `/dev/cuse`, and ptrace access to the clients
//! for `process_vm_*` and `pidfd_getfd`).

mod bridge;
mod client;
mod init;
mod os;
mod procs;
mod proto;
mod requests;
mod server;
mod shared;
mod threads;

use std::io;
use std::path::PathBuf;

use kfd_abi::ioctl::{encode, Dir};

pub use bridge::{BridgeError, DEFAULT_PATH as BRIDGE_PATH};
pub use os::TermSignals;
pub use server::CuseServer;
use shared::DRM_MAJOR;
pub use shared::{DeviceRole, ServeConfig, ServedDevice};

use crate::host::FileKey;
use crate::state::machine::MachineError;

/// `_IO('K', 0x7d)`: the daemon asks one of its own render-node files, fetched from a client,
/// which open it is; the answer is the file's CUSE handle.
pub(crate) const SIM_PROBE: u32 = encode(Dir::None, b'K', 0x7d, 0);

/// `st_dev` of the synthetic keys of CUSE open files in the machine's registry (no real file
/// system has it).
pub(crate) const CUSE_FILE_DEV: u64 = u64::MAX;

/// The key under which the simulated open file of CUSE handle `fh` is registered.
pub(crate) fn cuse_file_key(fh: u64) -> FileKey {
    FileKey {
        dev: CUSE_FILE_DEV,
        ino: fh,
    }
}

/// Why the CUSE server could not start.
#[derive(Debug, thiserror::Error)]
pub enum CuseError {
    /// No `/dev/cuse`.
    #[error(
        "{} does not exist: this kernel has no CUSE (CONFIG_CUSE), or the cuse module is not \
         loaded (try `modprobe cuse`); serving /dev/kfd needs it (the in-process simulator does \
         not)",
        path.display()
    )]
    NoCuse {
        /// The path tried.
        path: PathBuf,
    },
    /// `/dev/cuse` could not be opened.
    #[error("opening {}: {source} (serving devices over CUSE needs root)", path.display())]
    Open {
        /// The path.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The kernel did not accept a device.
    #[error("registering /dev/{devname} over CUSE: {what}")]
    Register {
        /// The device name.
        devname: String,
        /// What went wrong.
        what: String,
    },
    /// The device nodes did not show up.
    #[error(
        "the device nodes did not appear within {secs} s: {missing} (is devtmpfs mounted on /dev?)"
    )]
    NotReady {
        /// The timeout.
        secs: u64,
        /// Missing nodes.
        missing: String,
    },
    /// The kernel module's control device exists but could not be used.
    #[error(transparent)]
    Bridge(#[from] bridge::BridgeError),
    /// The machine could not be built.
    #[error(transparent)]
    Machine(#[from] MachineError),
    /// A thread or socket could not be created.
    #[error("starting the server: {0}")]
    Thread(io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_code_is_outside_kfd_and_distinct() {
        assert_eq!(SIM_PROBE, 0x0000_4b7d);
        assert!(kfd_abi::ioctl::kfd::lookup(SIM_PROBE).is_none());
        assert_ne!(SIM_PROBE, kfd_abi::cuse::SIM_DAEMON_PID);
        assert_ne!(SIM_PROBE, kfd_abi::cuse::SIM_CLOSE_FD);
    }

    #[test]
    fn missing_cuse_is_a_clear_error() {
        let cfg = ServeConfig {
            cuse_path: PathBuf::from("/nonexistent/cuse"),
            ..ServeConfig::default()
        };
        let preset = crate::Preset::by_name("mi50x1").unwrap();
        let err = CuseServer::start(preset.to_topology().unwrap(), &cfg).unwrap_err();
        assert!(matches!(err, CuseError::NoCuse { .. }), "{err}");
        assert!(err.to_string().contains("modprobe cuse"));
    }
}
