//! The caller of an ioctl, as the dispatcher sees it.
//!
//! The dispatcher never touches a caller's memory or fd table itself. Everything the kernel would
//! do through `current` goes through a [`Client`]: who is calling (the simulated pid that keys
//! KFD processes, as the kernel keys them on the mm), which capabilities it has, whether it traces
//! a given process, `copy_from_user` / `copy_to_user`, `fget` of an fd number and `fd_install`.
//!
//! User memory is always accessed with `process_vm_readv` / `process_vm_writev` on a real pid
//! ([`ProcessMemory`]): in process that is our own pid, over CUSE the client's. A wild pointer is
//! therefore an `EFAULT` from a syscall, never a dereference.

use std::os::fd::OwnedFd;

use kfd_abi::Errno;

use crate::host::{self, FileKey, Vma};
use crate::hw::backing::ProcessMemory;

/// What the dispatcher needs of the calling task.
pub(crate) trait Client {
    /// The caller's simulated pid (its thread-group leader; the "mm" KFD processes are keyed on).
    fn pid(&self) -> u32;

    /// `capable(CAP_CHECKPOINT_RESTORE) || capable(CAP_SYS_ADMIN)`.
    fn can_checkpoint_restore(&self) -> bool;

    /// Whether the caller is the ptrace parent of the simulated process `pid`.
    fn is_ptrace_parent_of(&self, pid: u32) -> bool;

    /// The pid process `pid` has in its own pid namespace
    /// (`task_pid_nr_ns(task, task_active_pid_ns(task))`), which CRIU_OP(PROCESS_INFO) reports:
    /// 1 for a container's init. By default `pid` itself (simulated processes have no
    /// namespaces); over CUSE, the last `NSpid` of `/proc/<pid>/status`.
    fn pid_in_own_namespace(&self, pid: u32) -> u32 {
        pid
    }

    /// `copy_from_user`: fills `buf` from the caller's address `addr`, or `EFAULT`.
    fn read_user(&self, addr: u64, buf: &mut [u8]) -> Result<(), Errno>;

    /// `copy_to_user`: writes `buf` at the caller's address `addr`, or `EFAULT`.
    fn write_user(&self, addr: u64, buf: &[u8]) -> Result<(), Errno>;

    /// `fget`: which open file the caller's fd number `raw` is (`EBADF` if it is not open).
    fn resolve_fd(&self, raw: i32) -> Result<FileKey, Errno>;

    /// `fd_install`: puts `fd` into the caller's table and returns its number.
    fn install_fd(&self, fd: OwnedFd) -> Result<i32, Errno>;

    /// [`install_fd`](Self::install_fd) of an fd whose number the ioctl then writes at `slot`.
    ///
    /// A front end that can only install the fd after the call returns (the kernel module of the
    /// VM lane, `ci/kmod/kfd_bridge`) needs to know where the number goes, to write the real one
    /// there; the others ignore `slot`.
    fn install_fd_at(&self, fd: OwnedFd, slot: FdSlot) -> Result<i32, Errno> {
        let _ = slot;
        self.install_fd(fd)
    }

    /// Undoes an [`install_fd`](Self::install_fd) on a later failure of the same ioctl (the
    /// kernel's `close_fd` on its error path).
    fn uninstall_fd(&self, raw: i32);

    /// `signal_pending(current)`: whether the caller has a signal to handle, which ends an
    /// interruptible sleep. Over CUSE, the kernel's FUSE_INTERRUPT; in process, a signal sent
    /// with `SimProcess::signal`.
    fn signal_pending(&self) -> bool {
        false
    }

    /// The caller's memory as an OS process (the `mm` a userptr BO keeps: the SDMA engine reads
    /// and writes userptr memory through it later, whoever submits the copy).
    ///
    /// By default the OS process whose pid is [`pid`](Self::pid), which is right where that is a
    /// real pid (over CUSE); the in-process client, whose pids are simulated, overrides it.
    fn process_memory(&self) -> ProcessMemory {
        ProcessMemory::of_pid(libc::pid_t::try_from(self.pid()).unwrap_or(0))
    }

    /// Whether the caller's fd `raw` is a dma-buf (`dma_buf_get` succeeds): its file system is
    /// the dma-buf one (`statfs` of `/proc/PID/fd/N`, magic `DMA_BUF_MAGIC`).
    fn is_dmabuf(&self, raw: i32) -> bool {
        host::is_dmabuf(self.process_memory().pid(), raw)
    }

    /// The caller's mappings in address order, as `find_vma` walks them: those of the OS
    /// process of [`process_memory`](Self::process_memory) (`/proc/PID/smaps`, device mappings
    /// told by their `VmFlags`). `EFAULT` when they cannot be read.
    fn vmas(&self) -> Result<Vec<Vma>, Errno> {
        host::vmas_of(self.process_memory().pid()).map_err(|_| Errno::EFAULT)
    }
}

/// Where the number of an fd the driver installs goes in the caller's memory: a `u32` that the
/// ioctl fills in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FdSlot {
    /// A field at this byte offset of the ioctl's argument struct (copied out at its `arg`).
    ArgField(usize),
    /// This address (an array the ioctl fills, such as CRIU_OP's BO buckets).
    User(u64),
}

impl FdSlot {
    /// The slot's address in the caller's memory, for an ioctl whose argument is at `arg`
    /// (wrapping: a wild address is the caller's `EFAULT` when the number is written).
    pub(crate) fn address(self, arg: u64) -> u64 {
        match self {
            Self::ArgField(off) => arg.wrapping_add(u64::try_from(off).unwrap_or(u64::MAX)),
            Self::User(addr) => addr,
        }
    }
}
