//! The caller of an ioctl that arrived over CUSE, as the dispatcher sees it ([`Client`]).
//!
//! - Identity: the thread-group id from `/proc/<tid>/status`; capabilities from its `CapEff`
//!   (per thread, as `capable()` looks at the calling thread); ptrace parenthood from the
//!   target's `TracerPid`, which names the tracing *thread*, compared with the calling thread
//!   (the kernel compares `ptrace_parent(lead_thread)` with `current`).
//! - User memory: `process_vm_readv`/`writev` on the calling thread (a dead or dying caller is
//!   `EFAULT` for that call). No FUSE_IOCTL_RETRY round trips, no size limit.
//! - Fds passed in (`fget`, [`Client::resolve_fd`]): `pidfd_getfd` on the caller, then `fstat`.
//!   A dma-buf is one of our memfds, so its `(st_dev, st_ino)` is the key the machine knows.
//!   A file of one of our CUSE render nodes looks the same for every open (the devtmpfs inode),
//!   so we ask the file itself which open it is: an ioctl [`SIM_PROBE`] on the fetched fd comes
//!   back to *our* render device's reader with the `fh` that the kernel keeps in that struct
//!   file, and is answered (for our own pid only) with that `fh`. This is exact for any number of
//!   opens, dups and fds passed between processes. Only `/dev/kfd` requests probe, and the probe
//!   goes to a render device, whose requests never probe, so probes cannot wait on each other;
//!   the elastic reader pool keeps a reader free for them.
//! - Fds the kernel would install ([`Client::install_fd`]): the daemon cannot put an fd into its
//!   client, so it keeps the fd in a per-process table and returns its own number; the client
//!   fetches it with `pidfd_getfd` and asks us to close our copy with
//!   `kfd_abi::cuse::SIM_CLOSE_FD` (only fds installed for that same process can be closed so).
//!   Fds never fetched are closed when the process exits. With the kernel module
//!   ([`super::bridge`]) the module installs them instead, at the end of the call.
//!
//! [`SIM_PROBE`]: super::SIM_PROBE

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::sync::Mutex;

use kfd_abi::Errno;

use super::bridge::HandOver;
use super::os::{self, ProcStatus};
use super::server::{cuse_file_key, Shared};
use super::SIM_PROBE;
use crate::client::{Client, FdSlot, ProcessMemory};
use crate::host::FileKey;
use crate::machine::lock;

/// One ioctl's caller.
pub(crate) struct CuseClient<'a> {
    pub(crate) shared: &'a Shared,
    /// The calling thread (from the request header).
    pub(crate) tid: u32,
    /// Its `/proc/<tid>/status`.
    pub(crate) status: ProcStatus,
    /// Whether fds of our render nodes are identified by probing (requests on /dev/kfd only).
    pub(crate) may_probe: bool,
    /// Set when the kernel interrupts this request (FUSE_INTERRUPT).
    pub(crate) signal: &'a std::sync::atomic::AtomicBool,
    /// The ioctl's argument (the base of [`FdSlot::ArgField`]).
    pub(crate) arg: u64,
    /// With the kernel module (`super::bridge`): the fds to install into the caller when the
    /// call succeeds, with where their numbers go.
    pub(crate) handovers: Option<&'a Mutex<Vec<HandOver>>>,
}

impl CuseClient<'_> {
    /// The calling thread's memory (the thread is blocked in the call, so it is alive).
    fn thread_memory(&self) -> Result<ProcessMemory, Errno> {
        libc::pid_t::try_from(self.tid)
            .map(ProcessMemory::of_pid)
            .map_err(|_| Errno::EFAULT)
    }

    /// `SIM_CLOSE_FD`: the caller fetched the fd we kept for it; closes our copy.
    pub(crate) fn close_installed(&self, arg: u64) -> Result<i32, Errno> {
        let mut b = [0u8; 4];
        self.read_user(arg, &mut b)?;
        let raw = RawFd::from_ne_bytes(b);
        if self.shared.uninstall(self.status.tgid, raw) {
            Ok(0)
        } else {
            Err(Errno::EBADF)
        }
    }
}

impl Client for CuseClient<'_> {
    fn pid(&self) -> u32 {
        self.status.tgid
    }

    fn signal_pending(&self) -> bool {
        self.signal.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn can_checkpoint_restore(&self) -> bool {
        self.status.can_checkpoint_restore()
    }

    fn is_ptrace_parent_of(&self, pid: u32) -> bool {
        ProcStatus::read(pid).is_ok_and(|s| s.tracer_pid != 0 && s.tracer_pid == self.tid)
    }

    fn read_user(&self, addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
        self.thread_memory()?.read(addr, buf)
    }

    fn write_user(&self, addr: u64, buf: &[u8]) -> Result<(), Errno> {
        self.thread_memory()?.write(addr, buf)
    }

    fn resolve_fd(&self, raw: i32) -> Result<FileKey, Errno> {
        if raw < 0 {
            return Err(Errno::EBADF);
        }
        let pidfd = self.shared.pidfd_of(self.status.tgid)?;
        let fetched: OwnedFd = kfd_abi::cuse::pidfd_getfd(pidfd.as_fd(), raw).map_err(|e| {
            log::debug!(
                "kfd-simd: pidfd_getfd(pid {}, fd {raw}): {e}",
                self.status.tgid
            );
            Errno::EBADF
        })?;
        let file = std::fs::File::from(fetched);
        let meta = file.metadata().map_err(|_| Errno::EBADF)?;
        let ours =
            meta.file_type().is_char_device() && self.shared.render_rdevs.contains(&meta.rdev());
        if ours && self.may_probe {
            let fh = os::ioctl_no_arg(file.as_fd(), SIM_PROBE).map_err(|e| {
                log::warn!(
                    "kfd-simd: probing a render-node fd of pid {}: {e}",
                    self.status.tgid
                );
                Errno::EBADF
            })?;
            let fh = u64::try_from(fh).map_err(|_| Errno::EBADF)?;
            return if self.shared.has_file(fh) {
                Ok(cuse_file_key(fh))
            } else {
                Err(Errno::EBADF)
            };
        }
        // A dma-buf (one of our memfds) or a file the machine does not know.
        Ok(FileKey {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    fn install_fd(&self, fd: OwnedFd) -> Result<i32, Errno> {
        if self.handovers.is_some() {
            // Every caller in the dispatcher names its slot; one that does not is a bug there.
            log::error!("kfd-simd: an fd to install without a slot cannot go through the bridge");
            return Err(Errno::EINVAL);
        }
        self.shared.install(self.status.tgid, fd)
    }

    /// With the bridge, the fd is kept for the module, and our own number stands in the slot
    /// until the proxy writes the caller's there.
    fn install_fd_at(&self, fd: OwnedFd, slot: FdSlot) -> Result<i32, Errno> {
        let Some(handovers) = self.handovers else {
            return self.install_fd(fd);
        };
        let addr = match slot {
            FdSlot::ArgField(off) => self
                .arg
                .wrapping_add(u64::try_from(off).map_err(|_| Errno::EFAULT)?),
            FdSlot::User(addr) => addr,
        };
        let raw = fd.as_raw_fd();
        lock(handovers).push(HandOver { fd, addr });
        Ok(raw)
    }

    fn uninstall_fd(&self, raw: RawFd) {
        match self.handovers {
            Some(h) => lock(h).retain(|x| x.fd.as_raw_fd() != raw),
            None => {
                self.shared.uninstall(self.status.tgid, raw);
            }
        }
    }

    fn process_memory(&self) -> ProcessMemory {
        // The process, not the thread: a userptr BO outlives the thread that registered it.
        ProcessMemory::of_pid(libc::pid_t::try_from(self.status.tgid).unwrap_or(0))
    }
}
