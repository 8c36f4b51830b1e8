//! What the kernel's objects settle with the machine: the GPUs' use (VRAM, SDMA queue slots,
//! doorbell slices, on each [`Device`]), the system memory charged to GTT and userptr BOs
//! against the KFD limit, and who reports a client's mm torn down ([`MmWatch`]). A KFD process
//! holds these accounts, not the machine, and gives its doorbell slices, queue slots and BOs'
//! memory back here when it goes; a GEM object gives back its charge. The machine
//! ([`MachineInner`]) holds the same accounts beside its registries of processes, files and
//! dma-bufs, so nothing it holds points back at it.
//!
//! [`MachineInner`]: super::machine::MachineInner

use std::sync::Arc;

use kfd_abi::Errno;

use super::device::Device;
use crate::host::lock;
use crate::lock_order::{rank, Ordered};

/// How often, and how long apart, [`Accounts::mm_released`] asks again about a process that is
/// between dropping its mm and the mm's release.
const MM_RELEASE_POLLS: u32 = 50;
const MM_RELEASE_POLL: std::time::Duration = std::time::Duration::from_millis(2);

/// Who tells the driver that a client's mm was torn down (the MMU notifier's `release`, which
/// amdkfd registers for every process): the kfd_bridge module, for the CUSE server behind it.
pub(crate) trait MmWatch: Send + Sync + std::fmt::Debug {
    /// Whether the mm of OS process `pid` (the daemon's pid namespace) was torn down: it exited,
    /// or called execve.
    fn released(&self, pid: u32) -> bool;
}

/// The machine's accounts (see the module's doc).
#[derive(Debug)]
pub(crate) struct Accounts {
    /// The GPUs, with what is in use of each; the machine's own list.
    pub(crate) devices: Arc<[Device]>,
    /// The KFD system memory limit: 15/16 of system RAM.
    system_limit: u64,
    /// System memory charged to GTT and userptr BOs.
    system_used: Ordered<u64>,
    /// Who reports the release of clients' mms, when someone does (the CUSE server behind the
    /// kfd_bridge module).
    mm_watch: Ordered<Option<Arc<dyn MmWatch>>>,
}

impl Accounts {
    /// The accounts of `devices`, nothing in use, with a system memory limit of `system_limit`
    /// bytes.
    pub(crate) fn new(devices: Arc<[Device]>, system_limit: u64) -> Self {
        Self {
            devices,
            system_limit,
            system_used: Ordered::new(rank::SYSTEM_USED, 0),
            mm_watch: Ordered::new(rank::MM_WATCH, None),
        }
    }

    /// Charges `size` bytes of system memory (GTT, userptr); ENOMEM past the limit.
    pub(crate) fn reserve_system(&self, size: u64) -> Result<(), Errno> {
        let mut used = lock(&self.system_used);
        let total = used.checked_add(size).ok_or(Errno::ENOMEM)?;
        if total > self.system_limit {
            return Err(Errno::ENOMEM);
        }
        *used = total;
        Ok(())
    }

    /// Gives back `size` bytes of system memory charged before.
    pub(crate) fn release_system(&self, size: u64) {
        let mut used = lock(&self.system_used);
        *used = used.saturating_sub(size);
    }

    /// System memory charged to GTT and userptr BOs (what `AMDGPU_INFO_GTT_USAGE` reports).
    pub(crate) fn system_used(&self) -> u64 {
        *lock(&self.system_used)
    }

    /// Gives back `size` bytes of the VRAM of device index `dev` charged before.
    pub(crate) fn release_vram(&self, dev: usize, size: u64) {
        if let Some(d) = self.devices.get(dev) {
            let mut s = lock(&d.state);
            s.vram_used = s.vram_used.saturating_sub(size);
        }
    }

    /// Sets (or, with `None`, drops) who reports the release of clients' mms.
    pub(crate) fn set_mm_watch(&self, watch: Option<Arc<dyn MmWatch>>) {
        *lock(&self.mm_watch) = watch;
    }

    /// Whether the watch reports the mm of OS process `pid` released (`false` without a watch).
    /// A process whose memory cannot be reached although the watch does not report it yet may be
    /// between dropping its mm and the mm's release (the kernel's `exit_mm`: the task lets go of
    /// its mm, then the last reference's `mmput` runs the notifiers); when it has no mappings
    /// left, the watch is asked again for a short while.
    pub(crate) fn mm_released(&self, pid: u32) -> bool {
        let Some(watch) = lock(&self.mm_watch).clone() else {
            return false;
        };
        if watch.released(pid) {
            return true;
        }
        // `maps`, not `smaps`: whether any mapping is left, without walking page tables.
        let exiting = std::fs::read(format!("/proc/{pid}/maps")).map_or(true, |m| m.is_empty());
        if !exiting {
            return false;
        }
        (0..MM_RELEASE_POLLS).any(|_| {
            std::thread::sleep(MM_RELEASE_POLL);
            watch.released(pid)
        })
    }
}
