//! An event as the driver keeps it (`struct kfd_event`, `kfd_events.h`), its waiters and the
//! signal page.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use crate::hw::backing::Backing;

/// State of a waiter on an event.
pub(crate) mod waiter {
    /// Still waiting.
    pub(crate) const WAITING: u8 = 0;
    /// The event fired.
    pub(crate) const ACTIVATED: u8 = 1;
    /// The event was destroyed.
    pub(crate) const GONE: u8 = 2;
}

/// One event.
#[derive(Debug)]
pub(crate) struct Event {
    /// `KFD_IOC_EVENT_*`.
    pub ty: u32,
    /// Auto-reset.
    pub auto_reset: bool,
    /// Signaled.
    pub signaled: bool,
    /// Current waiters.
    pub waiters: Vec<Arc<AtomicU8>>,
    /// Memory / HW exception data (32 bytes, as in the event record).
    pub exception: [u8; 32],
}

impl Event {
    /// Signal or debug events use signal slots.
    pub(crate) fn is_signal(ty: u32) -> bool {
        ty == kfd_sys::KFD_IOC_EVENT_SIGNAL || ty == kfd_sys::KFD_IOC_EVENT_DEBUG_EVENT
    }

    /// `set_event`: wakes the waiters; an auto-reset event with waiters stays unsignaled.
    pub(crate) fn set(&mut self) {
        self.signaled = !self.auto_reset || self.waiters.is_empty();
        for w in self.waiters.drain(..) {
            w.store(waiter::ACTIVATED, Ordering::SeqCst);
        }
    }
}

/// The signal page: the BO userspace gave with its first CREATE_EVENT, or the kernel's own.
#[derive(Debug)]
pub(crate) struct SignalPage {
    /// The BO handle (0 for the kernel's own page).
    pub handle: u64,
    /// The BO's memory, to write slot values into.
    pub backing: Option<Arc<Backing>>,
    /// Number of slots.
    pub slots: u32,
}
