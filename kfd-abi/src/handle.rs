//! What every device-file handle type has in common: it owns a transport and a label for
//! errors, can be opened from a path, duplicated, and seen as an fd, and issues its ioctls through
//! the one set of call helpers of [`DeviceFile`]. One macro writes the type, so that `Kfd` and
//! `RenderNode` stay distinct types (a KFD call cannot be made on a render node) without writing
//! the same code twice.

use std::borrow::Cow;
use std::ffi::c_void;
use std::os::fd::{OwnedFd, RawFd};

use kfd_sys as sys;

use crate::error::{failed, IoctlError, Result};
use crate::ioctl::{self, Direction, Ioctl, Read, ReadWrite, Write};
use crate::mapping::{Mapping, Place, Prot, Share};
use crate::transport::Transport;

/// Argument structs that hold no pointers: the driver reads and writes only the struct itself, so
/// issuing them needs no promise from the caller.
///
/// # Safety
///
/// Implementors must be `repr(C)` plain data without pointer fields the driver dereferences.
pub(crate) unsafe trait Plain: Copy {}

macro_rules! plain {
    ($($t:ty),* $(,)?) => { $(
        // SAFETY: a bindgen struct (or union) of integer fields only; the driver dereferences
        // nothing in it.
        unsafe impl Plain for $t {}
    )* };
}

plain!(
    sys::kfd_ioctl_get_version_args,
    sys::kfd_ioctl_destroy_queue_args,
    sys::kfd_ioctl_set_memory_policy_args,
    sys::kfd_ioctl_get_clock_counters_args,
    sys::kfd_ioctl_get_process_apertures_args,
    sys::kfd_ioctl_create_event_args,
    sys::kfd_ioctl_destroy_event_args,
    sys::kfd_ioctl_set_event_args,
    sys::kfd_ioctl_reset_event_args,
    sys::kfd_ioctl_set_scratch_backing_va_args,
    sys::kfd_ioctl_set_trap_handler_args,
    sys::kfd_ioctl_acquire_vm_args,
    sys::kfd_ioctl_free_memory_of_gpu_args,
    sys::kfd_ioctl_alloc_queue_gws_args,
    sys::kfd_ioctl_smi_events_args,
    sys::kfd_ioctl_set_xnack_mode_args,
    sys::kfd_ioctl_get_available_memory_args,
    sys::kfd_ioctl_import_dmabuf_args,
    sys::drm_gem_close,
    sys::drm_prime_handle,
    sys::drm_amdgpu_gem_create,
    sys::drm_amdgpu_gem_mmap,
    sys::drm_amdgpu_gem_va,
    sys::drm_amdgpu_ctx,
    sys::drm_amdgpu_wait_cs,
    sys::drm_get_cap,
    sys::drm_set_client_cap,
    sys::drm_amdgpu_gem_wait_idle,
    crate::uapi618::drm_gem_change_handle,
    crate::uapi618::kfd_ioctl_export_dmabuf_args,
    crate::uapi618::kfd_ioctl_runtime_enable_args,
);

/// The ioctl calls of a device file, written once for every kind of handle.
///
/// The typed helpers take an [`Ioctl`], which fixes the argument struct and the direction: getters
/// ([`Read`]) return the struct by value, setters ([`Write`]) take it by reference, read-write
/// calls take it mutably. The safe ones need a [`Plain`] struct; an argument with pointers goes
/// through the `unsafe` [`DeviceFile::call`], whose caller vouches for the pointers.
pub(crate) trait DeviceFile {
    /// The transport the handle owns.
    type Transport: Transport;

    /// The transport and the label that names the node in errors.
    fn parts(&self) -> (&Self::Transport, &str);

    /// Issues the request `code` with the argument at `arg`; a failure names `ioctl`, the node
    /// and the errno. Every ioctl of every handle goes through here.
    ///
    /// # Safety
    ///
    /// As for [`Transport::ioctl`]: `arg` is valid for `ioctl::size(code)` bytes and every pointer
    /// inside it satisfies the ioctl's contract.
    unsafe fn issue(&self, ioctl: Cow<'static, str>, code: u32, arg: *mut c_void) -> Result<i32> {
        let (transport, label) = self.parts();
        // SAFETY: the caller's contract is the transport's.
        unsafe { transport.ioctl(code, arg) }.map_err(|errno| failed(ioctl, label, errno))
    }

    /// Issues `req` with `arg`; a failure names `ioctl`.
    ///
    /// # Safety
    ///
    /// Every pointer inside `arg` must satisfy the ioctl's contract.
    unsafe fn call_named<A, D: Direction>(
        &self,
        ioctl: Cow<'static, str>,
        req: Ioctl<A, D>,
        arg: &mut A,
    ) -> Result<()> {
        // SAFETY: `arg` is a live, exclusive `A`, which is the size `req` encodes; the caller
        // vouches for the pointers inside it.
        unsafe { self.issue(ioctl, req.code(), std::ptr::from_mut(arg).cast()) }.map(drop)
    }

    /// Issues `req` with `arg`, whose pointers the driver follows.
    ///
    /// # Safety
    ///
    /// Every pointer inside `arg` must satisfy the ioctl's contract.
    unsafe fn call<A, D: Direction>(&self, req: Ioctl<A, D>, arg: &mut A) -> Result<()> {
        // SAFETY: the caller vouches for the pointers inside `arg`.
        unsafe { self.call_named(ioctl::name(req.code()).into(), req, arg) }
    }

    /// Issues the getter `req` and returns what the driver wrote.
    fn read<A: Plain + Default>(&self, req: Ioctl<A, Read>) -> Result<A> {
        let mut arg = A::default();
        // SAFETY: `A: Plain` holds no pointers the driver dereferences.
        unsafe { self.call(req, &mut arg) }?;
        Ok(arg)
    }

    /// Issues the setter `req` with `arg`.
    fn write<A: Plain>(&self, req: Ioctl<A, Write>, arg: &A) -> Result<()> {
        // The transport takes a mutable pointer; the driver does not write back for `_IOW`.
        let mut copy = *arg;
        // SAFETY: `A: Plain` holds no pointers the driver dereferences.
        unsafe { self.call(req, &mut copy) }
    }

    /// Issues the read-write request `req` with `arg`, which the driver updates.
    fn read_write<A: Plain>(&self, req: Ioctl<A, ReadWrite>, arg: &mut A) -> Result<()> {
        // SAFETY: `A: Plain` holds no pointers the driver dereferences.
        unsafe { self.call(req, arg) }
    }

    /// `mmap(2)` of the device at `offset`, at `place`, through the transport; a failure names
    /// `what` (for example `mmap(DOORBELL)`), the node and the errno.
    fn map(
        &self,
        what: &'static str,
        place: Place,
        offset: u64,
        prot: Prot,
        share: Share,
    ) -> Result<Mapping> {
        let (transport, label) = self.parts();
        transport
            .mmap(place, offset, prot, share)
            .map_err(|errno| failed(what, label, errno))
    }

    /// Takes ownership of the fd `raw` that the driver installed for the call `what` names.
    ///
    /// # Safety
    ///
    /// `raw` must be an fd number that an ioctl on this handle just returned and that nothing else
    /// owns.
    unsafe fn adopt_fd(&self, what: &'static str, raw: RawFd) -> Result<OwnedFd> {
        let (transport, label) = self.parts();
        // SAFETY: the caller's contract is the transport's.
        unsafe { transport.adopt_fd(raw) }.map_err(|source| IoctlError::Fd {
            what,
            device: label.to_owned(),
            source,
        })
    }
}

/// Declares a handle type `$name<T: Transport>` over a transport, with `open`, `new`,
/// `transport`, `label`, `try_clone`, `into_transport` and `AsFd`.
macro_rules! device_handle {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name<T: $crate::transport::Transport = $crate::transport::FdTransport> {
            transport: T,
            label: String,
        }

        impl $name<$crate::transport::FdTransport> {
            #[doc = concat!("Opens the ", $what, " at `path`.")]
            pub fn open(path: &std::path::Path) -> $crate::error::Result<Self> {
                let transport = $crate::transport::FdTransport::open(path).map_err(|source| {
                    $crate::error::IoctlError::Open { path: path.to_owned(), source }
                })?;
                Ok(Self::new(transport, path.display().to_string()))
            }
        }

        impl<T: $crate::transport::Transport> std::os::fd::AsFd for $name<T> {
            fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
                self.transport.as_fd()
            }
        }

        impl<T: $crate::transport::Transport> $crate::handle::DeviceFile for $name<T> {
            type Transport = T;

            fn parts(&self) -> (&T, &str) {
                (&self.transport, &self.label)
            }
        }

        impl<T: $crate::transport::Transport> $name<T> {
            #[doc = concat!("Wraps a transport open on a ", $what, "; `label` names it in errors.")]
            pub fn new(transport: T, label: impl Into<String>) -> Self {
                Self { transport, label: label.into() }
            }

            /// The transport.
            pub fn transport(&self) -> &T {
                &self.transport
            }

            /// The name used in error messages.
            pub fn label(&self) -> &str {
                &self.label
            }

            /// Gives the transport back.
            pub fn into_transport(self) -> T {
                self.transport
            }

            /// Another handle on the same open file (as `dup(2)` makes).
            pub fn try_clone(&self) -> $crate::error::Result<Self> {
                let transport = self.transport.try_clone().map_err(|source| {
                    $crate::error::IoctlError::Fd { what: "dup", device: self.label.clone(), source }
                })?;
                Ok(Self { transport, label: self.label.clone() })
            }
        }
    };
}

pub(crate) use device_handle;
