//! What the engine and the logger need of the criu process they run in, as one trait the C ABI
//! shim implements and installs.
//!
//! criu exports a few functions from its executable (it links with `-rdynamic`): its logger
//! `print_on_level`, `find_unused_fd_pid`, its fd store. The shim finds them with `dlsym` (never
//! linked: the same code runs in `amdgpu-cr` and the tests, where they are absent) and installs
//! a [`CriuHost`] here when criu loads the `.so`; the engine and the logger ask [`criu`]. So the
//! arrows go one way: the shim uses the engine and this module, and nothing below the shim names
//! it. Until the shim installs its host (in a binary without the shim's constructor, say),
//! [`criu`] answers as a process without criu: [`NoCriu`].

use std::ffi::c_void;
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::sync::OnceLock;

/// The functions of the host criu the plugin calls. Every method answers "absent" (`None`,
/// `false`, null) outside criu.
pub(crate) trait CriuHost: Send + Sync + std::fmt::Debug {
    /// criu calls DUMP_DEVICES_LATE (measured by the shim when criu loaded the plugin).
    fn has_dump_devices_late(&self) -> bool;
    /// criu's `print_on_level(unsigned, const char *, ...)`, or null.
    fn print_on_level(&self) -> *mut c_void;
    /// criu's `find_unused_fd_pid(pid)`: one above the highest fd restored task `pid` will use.
    fn unused_fd_of(&self, pid: u32) -> Option<RawFd>;
    /// criu's `fdstore_add(fd)`: the id of a copy of `fd` in criu's fd store.
    fn fdstore_add(&self, fd: BorrowedFd<'_>) -> Option<i32>;
    /// criu's `fdstore_get(id)`: a new fd of what is stored under `id`.
    fn fdstore_get(&self, id: i32) -> Option<OwnedFd>;
    /// This process is criu (its fd store is there to use).
    fn in_criu(&self) -> bool;
    /// Kills restored task `pid`, only inside criu; whether it did.
    fn kill_restored_task(&self, pid: i32) -> bool;
}

/// A process without criu (`amdgpu-cr`, the tests): every function is absent.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NoCriu;

impl CriuHost for NoCriu {
    fn has_dump_devices_late(&self) -> bool {
        false
    }
    fn print_on_level(&self) -> *mut c_void {
        std::ptr::null_mut()
    }
    fn unused_fd_of(&self, _pid: u32) -> Option<RawFd> {
        None
    }
    fn fdstore_add(&self, _fd: BorrowedFd<'_>) -> Option<i32> {
        None
    }
    fn fdstore_get(&self, _id: i32) -> Option<OwnedFd> {
        None
    }
    fn in_criu(&self) -> bool {
        false
    }
    fn kill_restored_task(&self, _pid: i32) -> bool {
        false
    }
}

static HOST: OnceLock<&'static dyn CriuHost> = OnceLock::new();

/// Installs the host of this process (the shim, when criu loads the plugin). The first install
/// stays: criu is the same process for the plugin's whole life.
pub(crate) fn install(host: &'static dyn CriuHost) {
    let _ = HOST.set(host);
}

/// The host this process runs in: what the shim installed, or [`NoCriu`].
pub(crate) fn criu() -> &'static dyn CriuHost {
    HOST.get().copied().unwrap_or(&NoCriu)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_without_criu_has_none_of_its_functions() {
        let host = NoCriu;
        assert!(!host.has_dump_devices_late());
        assert!(host.print_on_level().is_null());
        assert_eq!(host.unused_fd_of(1), None);
        assert_eq!(host.fdstore_get(0).map(|_| ()), None);
        assert!(!host.in_criu());
        assert!(!host.kill_restored_task(1));
    }
}
