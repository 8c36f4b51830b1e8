//! `/dev/kfd`: one typed method per KFD 1.11 ioctl, grouped as the driver groups them.
//!
//! [`Kfd`] is the handle; its methods live beside the types they take and return:
//! the process and its apertures (`process`), GPU memory (`memory`), user-mode queues (`queue`),
//! events (`event`), shared virtual memory (`svm`), CPU mappings of the device (`mmap`); the
//! checkpoint/restore state machine is [`crate::criu`].

use std::os::fd::OwnedFd;

use crate::error::{bad_reply, Result};
use crate::handle::DeviceFile;
use crate::transport::Transport;

mod event;
mod memory;
mod mmap;
mod process;
mod queue;
mod svm;

pub use event::{CreatedEvent, WAIT_INFINITE};
pub use memory::{Allocation, DmabufInfo};
pub use process::{Apertures, CachePolicy, ClockCounters, TileConfig, Version};
pub use queue::{CreatedQueue, QueueDesc};
pub use svm::SvmAttribute;

/// The default path of the KFD node.
pub const KFD_PATH: &str = "/dev/kfd";

crate::handle::device_handle!(
    /// An open `/dev/kfd` (normally at [`KFD_PATH`]).
    Kfd,
    "KFD node"
);

impl<T: Transport> Kfd<T> {
    pub(crate) fn adopt(&self, what: &'static str, raw: u32) -> Result<OwnedFd> {
        let raw = i32::try_from(raw)
            .map_err(|_| bad_reply(what, &self.label, format!("fd {raw} out of range")))?;
        // SAFETY: the driver installed `raw` in our table for the call that just returned it.
        unsafe { self.adopt_fd(what, raw) }
    }
}
