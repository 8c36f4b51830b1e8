//! A platform as a test sees it: another platform with the few things the test changes.
//!
//! A test that changes what the plugin sees (a container's `/dev` without some render nodes, a
//! task whose sysfs has no topology, device files that fail on demand) writes a [`View`] that
//! says only that, and hands the plugin `Viewed { inner, view }`; everything else is the inner
//! platform's, forwarded here once. A trait with default methods rather than a forwarding macro:
//! the defaults are plain code a reader can follow, a view states its changes as ordinary
//! methods, and a method added to [`Platform`] is forwarded in this one place (the compiler
//! says so) rather than in every test that wraps a platform.

use std::fmt;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::path::PathBuf;

use kfd_abi::{DeviceKind, IoctlError, Kfd, Platform, RenderNode, Transport};

/// What a test changes in platform `P`. Only the methods that some test changes are here (add
/// one, with a default that forwards, when a test needs it); [`Viewed`] forwards the rest.
pub trait View<P: Platform>: Send + Sync + fmt::Debug + 'static {
    /// The transport of the device files as the test hands them out.
    type Device: Transport + 'static;

    /// The transport of a device file `P` opened or wrapped, as the test hands it out.
    fn device(&self, inner: P::Device) -> Self::Device;

    /// Opens render node `renderD<minor>` (see [`Platform::open_render`]).
    ///
    /// # Errors
    /// As `P`'s, unless the view refuses.
    fn open_render(&self, inner: &P, minor: u32) -> Result<RenderNode<P::Device>, IoctlError> {
        inner.open_render(minor)
    }

    /// The KFD topology root (see [`Platform::topology_root`]).
    fn topology_root(&self, inner: &P) -> PathBuf {
        inner.topology_root()
    }
}

/// Platform `inner` as `view` changes it.
#[derive(Debug)]
pub struct Viewed<P, V> {
    /// The platform underneath.
    pub inner: P,
    /// What the test changes.
    pub view: V,
}

impl<P: Platform, V: View<P>> Viewed<P, V> {
    fn kfd(&self, kfd: Kfd<P::Device>) -> Kfd<V::Device> {
        let label = kfd.label().to_owned();
        Kfd::new(self.view.device(kfd.into_transport()), label)
    }

    fn render(&self, render: RenderNode<P::Device>) -> RenderNode<V::Device> {
        let label = render.label().to_owned();
        RenderNode::new(self.view.device(render.into_transport()), label)
    }
}

impl<P: Platform, V: View<P>> Platform for Viewed<P, V> {
    type Device = V::Device;

    fn open_kfd(&self) -> Result<Kfd<Self::Device>, IoctlError> {
        self.inner.open_kfd().map(|k| self.kfd(k))
    }

    fn open_render(&self, minor: u32) -> Result<RenderNode<Self::Device>, IoctlError> {
        self.view
            .open_render(&self.inner, minor)
            .map(|r| self.render(r))
    }

    fn kfd_from_fd(&self, fd: OwnedFd) -> Result<Kfd<Self::Device>, IoctlError> {
        self.inner.kfd_from_fd(fd).map(|k| self.kfd(k))
    }

    fn render_from_fd(&self, fd: OwnedFd) -> Result<RenderNode<Self::Device>, IoctlError> {
        self.inner.render_from_fd(fd).map(|r| self.render(r))
    }

    fn identify(&self, fd: BorrowedFd<'_>) -> io::Result<DeviceKind> {
        self.inner.identify(fd)
    }

    fn identify_rdev(&self, rdev: u64) -> DeviceKind {
        self.inner.identify_rdev(rdev)
    }

    fn topology_root(&self) -> PathBuf {
        self.view.topology_root(&self.inner)
    }

    fn process_id(&self) -> u32 {
        self.inner.process_id()
    }

    fn fd_of_process(&self, pid: u32, raw: RawFd) -> io::Result<OwnedFd> {
        self.inner.fd_of_process(pid, raw)
    }

    fn parent_of(&self, pid: u32) -> Option<u32> {
        self.inner.parent_of(pid)
    }

    fn hsakmt_shm_path(&self) -> PathBuf {
        self.inner.hsakmt_shm_path()
    }
}
