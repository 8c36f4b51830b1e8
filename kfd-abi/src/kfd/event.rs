//! Events on `/dev/kfd`: creation, signalling, waiting, and the SMI event stream.

use std::os::fd::OwnedFd;

use kfd_sys as sys;

use crate::error::{IoctlError, Result};
use crate::handle::DeviceFile;
use crate::ioctl::kfd::req;
use crate::transport::Transport;
use crate::types::{EventId, EventType, GpuId, MemHandle, WaitResult};

use super::Kfd;

/// Infinite timeout for [`Kfd::wait_events`].
pub const WAIT_INFINITE: u32 = 0xffff_ffff;

/// What `CREATE_EVENT` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreatedEvent {
    /// The event id.
    pub event_id: EventId,
    /// Trigger data (the id for signal events).
    pub trigger_data: u32,
    /// The signal page's mmap offset on `/dev/kfd` (signal events).
    pub page_offset: u64,
    /// The slot in the signal page (signal events).
    pub slot_index: u32,
}

impl<T: Transport> Kfd<T> {
    /// Creates an event (`CREATE_EVENT`). The first signal event of a process on a dGPU passes
    /// the handle of the signal page BO in `event_page`.
    ///
    /// # Errors
    ///
    /// `EINVAL` a second event page or unknown type, `ENOSPC` no free signal slot.
    pub fn create_event(
        &self,
        ty: EventType,
        auto_reset: bool,
        event_page: Option<MemHandle>,
    ) -> Result<CreatedEvent> {
        let mut a = sys::kfd_ioctl_create_event_args {
            event_page_offset: event_page.map_or(0, MemHandle::get),
            event_type: ty.into(),
            auto_reset: u32::from(auto_reset),
            ..Default::default()
        };
        self.read_write(req::CREATE_EVENT, &mut a)?;
        Ok(CreatedEvent {
            event_id: EventId(a.event_id),
            trigger_data: a.event_trigger_data,
            page_offset: a.event_page_offset,
            slot_index: a.event_slot_index,
        })
    }

    /// Destroys an event (`DESTROY_EVENT`).
    pub fn destroy_event(&self, event: EventId) -> Result<()> {
        let a = sys::kfd_ioctl_destroy_event_args {
            event_id: event.get(),
            pad: 0,
        };
        self.write(req::DESTROY_EVENT, &a)?;
        Ok(())
    }

    /// Signals an event (`SET_EVENT`).
    pub fn set_event(&self, event: EventId) -> Result<()> {
        let a = sys::kfd_ioctl_set_event_args {
            event_id: event.get(),
            pad: 0,
        };
        self.write(req::SET_EVENT, &a)?;
        Ok(())
    }

    /// Clears an event (`RESET_EVENT`).
    pub fn reset_event(&self, event: EventId) -> Result<()> {
        let a = sys::kfd_ioctl_reset_event_args {
            event_id: event.get(),
            pad: 0,
        };
        self.write(req::RESET_EVENT, &a)?;
        Ok(())
    }

    /// Waits for any (or all) of `events` for `timeout_ms` milliseconds (`WAIT_EVENTS`;
    /// 0 polls, [`WAIT_INFINITE`] waits forever).
    pub fn wait_events(
        &self,
        events: &[EventId],
        wait_all: bool,
        timeout_ms: u32,
    ) -> Result<WaitResult> {
        let mut data: Vec<sys::kfd_event_data> = events
            .iter()
            .map(|e| sys::kfd_event_data {
                event_id: e.get(),
                ..Default::default()
            })
            .collect();
        let num_events = u32::try_from(data.len()).map_err(|_| IoctlError::InvalidArgument {
            ioctl: "WAIT_EVENTS".into(),
            what: format!("{} events", data.len()),
        })?;
        let mut a = sys::kfd_ioctl_wait_events_args {
            events_ptr: data.as_mut_ptr() as u64,
            num_events,
            wait_for_all: u32::from(wait_all),
            timeout: timeout_ms,
            wait_result: 0,
        };
        // SAFETY: `data` holds `num_events` event records for the driver to read and update.
        unsafe { self.call(req::WAIT_EVENTS, &mut a) }?;
        Ok(WaitResult::from(a.wait_result))
    }

    /// Opens the SMI event stream of a GPU (`SMI_EVENTS`): an fd to read events from.
    pub fn smi_events(&self, gpu: GpuId) -> Result<OwnedFd> {
        let mut a = sys::kfd_ioctl_smi_events_args {
            gpuid: gpu.get(),
            anon_fd: 0,
        };
        self.read_write(req::SMI_EVENTS, &mut a)?;
        self.adopt("SMI_EVENTS", a.anon_fd)
    }
}
