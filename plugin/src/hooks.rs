//! The plugin's side of criu's hooks, in Rust types.
//!
//! The C ABI shim (`shim`) turns each criu call into a call of [`CriuHooks`] and each result back
//! into criu's return conventions; nothing here knows about C. Every hook can say "not ours"
//! ([`HookError::NotOurs`], returned to criu as `-ENOTSUP`) so that other plugins get their turn
//! and a machine without AMD GPUs is unaffected.

use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::path::Path;

use kfd_abi::Errno;

/// criu's stages (`CR_PLUGIN_STAGE__*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// `criu dump`.
    Dump,
    /// `criu pre-dump`.
    PreDump,
    /// `criu restore`.
    Restore,
    /// A stage this plugin does not know.
    Unknown(i32),
}

impl From<i32> for Stage {
    fn from(v: i32) -> Self {
        match v {
            0 => Stage::Dump,
            1 => Stage::PreDump,
            2 => Stage::Restore,
            other => Stage::Unknown(other),
        }
    }
}

/// Why a hook did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The object is not an AMD GPU object: criu should ask the next plugin (`-ENOTSUP`).
    #[error("not an amdgpu object")]
    NotOurs,
    /// It is ours and handling it failed; the message goes to criu's log, with what caused it.
    #[error("{message}")]
    Failed {
        /// Returned to criu as `-errno`.
        errno: Errno,
        /// What failed and what the user can do.
        message: String,
        /// The error that caused it, if another error did: criu's log shows its chain.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    },
}

impl HookError {
    /// A failure with its errno and message.
    pub fn failed(errno: Errno, message: impl Into<String>) -> Self {
        HookError::Failed {
            errno,
            message: message.into(),
            source: None,
        }
    }

    /// A failure with its errno that `source` is: its message, and `source` kept as the cause.
    pub fn caused_by(errno: Errno, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        HookError::Failed {
            errno,
            message: source.to_string(),
            source: Some(Box::new(source)),
        }
    }

    /// What criu's log says of it: the message, then each cause below it that the text so far
    /// does not already say (many messages spell their cause out), joined by `": "`.
    pub(crate) fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(e) = cause {
            let said = e.to_string();
            if !text.contains(&said) {
                text.push_str(": ");
                text.push_str(&said);
            }
            cause = e.source();
        }
        text
    }

    /// The value criu receives: `-ENOTSUP` for "not ours", `-errno` for failures.
    pub(crate) fn to_criu(&self) -> i32 {
        match self {
            HookError::NotOurs => -libc::ENOTSUP,
            HookError::Failed { errno, .. } => -errno.0.abs().max(1),
        }
    }
}

/// Result of a hook.
pub type HookResult<T> = Result<T, HookError>;

/// The answer to UPDATE_VMA_MAP for a VMA that is ours.
#[derive(Debug)]
pub struct VmaUpdate {
    /// The new mmap offset.
    pub new_pgoff: u64,
    /// For render-node VMAs, an fd criu maps the VMA from (criu owns and closes it).
    pub fd: Option<OwnedFd>,
}

/// Everything criu asks of the plugin. Implemented by the engine; called by the C ABI shim.
pub trait CriuHooks: Send + Sync {
    /// `init(stage)`: called once when criu loads the plugin.
    fn init(&self, stage: Stage) -> HookResult<()>;

    /// `exit(stage, ret)`: called once before criu exits; `ret` is criu's result so far.
    fn fini(&self, stage: Stage, ret: i32);

    /// HANDLE_DEVICE_VMA: is this device mapping (`/dev/kfd`, a render node) ours?
    /// `Ok(())` makes criu skip its contents; [`HookError::NotOurs`] leaves it to others.
    fn handle_device_vma(&self, fd: BorrowedFd<'_>, rdev: u64) -> HookResult<()>;

    /// DUMP_EXT_FILE: dump the device file `fd` (criu's dup of the target's) as image `id`.
    fn dump_ext_file(&self, fd: BorrowedFd<'_>, id: u32) -> HookResult<()>;

    /// RESTORE_EXT_FILE: runs in the restored process; recreate file `id` and return its fd.
    /// `Ok(None)` asks criu to call again later (newer criu's `retry_needed`).
    fn restore_ext_file(&self, id: u32) -> HookResult<Option<RawFd>>;

    /// UPDATE_VMA_MAP: the new offset (and fd) of a device VMA at `addr` that had `old_pgoff`.
    /// `Ok(None)`: no match (criu keeps the VMA as it is).
    fn update_vma_map(
        &self,
        path: &Path,
        addr: u64,
        old_pgoff: u64,
    ) -> HookResult<Option<VmaUpdate>>;

    /// RESUME_DEVICES_LATE: start the GPU queues of restored process `pid`.
    fn resume_devices_late(&self, pid: i32) -> HookResult<()>;

    /// POST_FORKING (criu 4.2+): in the criu master, after the restored tasks were forked.
    fn post_forking(&self) -> HookResult<()>;

    /// RESTORE_INIT (newer criu): in the criu master, before forking.
    fn restore_init(&self) -> HookResult<()>;

    /// DUMP_DEVICES_LATE (newer criu): after every file of the tree was dumped; `id` is the
    /// root pid.
    fn dump_devices_late(&self, id: u32) -> HookResult<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error with a message and, maybe, a cause.
    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    struct Layer(&'static str, #[source] Option<Box<Layer>>);

    #[test]
    fn a_failure_keeps_the_chain_of_its_cause_without_saying_anything_twice() {
        let io = Layer("permission denied", None);
        let read = Layer("reading the pages file", Some(Box::new(io)));
        let restore = Layer("image 7: reading the pages file", Some(Box::new(read)));
        let e = HookError::caused_by(Errno::EIO, restore);
        assert_eq!(e.to_string(), "image 7: reading the pages file");
        assert_eq!(
            e.chain(),
            "image 7: reading the pages file: permission denied"
        );
        assert_eq!(e.to_criu(), -libc::EIO);
        let plain = HookError::failed(Errno::EINVAL, "no such image");
        assert_eq!(plain.chain(), "no such image");
    }
}
