//! The caller of an ioctl issued in process: a simulated pid with its capabilities, sharing this
//! OS process's fd table and memory.

use std::os::fd::{IntoRawFd, OwnedFd, RawFd};

use kfd_abi::Errno;

use crate::client::Client;
use crate::host::{self, FileKey, Vma};
use crate::hw::backing::ProcessMemory;

/// A caller inside this OS process: a simulated pid with its capabilities, sharing our fd table
/// and our memory.
#[derive(Debug)]
pub(crate) struct InProcessClient<'a> {
    pub(crate) pid: u32,
    pub(crate) capable: bool,
    pub(crate) machine: &'a crate::state::machine::MachineInner,
    pub(crate) mem: ProcessMemory,
    /// A signal sent to the simulated process ([`SimProcess::signal`](crate::SimProcess::signal)),
    /// taken by the first interruptible sleep that sees it (its handler would run when the call
    /// returns).
    pub(crate) signal: &'a std::sync::atomic::AtomicBool,
    /// The device mappings simulated processes made in process (none known: `None`).
    pub(crate) device_vmas: Option<&'a super::vmas::DeviceVmas>,
}

impl Client for InProcessClient<'_> {
    fn signal_pending(&self) -> bool {
        self.signal.swap(false, std::sync::atomic::Ordering::SeqCst)
    }

    fn pid(&self) -> u32 {
        self.pid
    }

    fn can_checkpoint_restore(&self) -> bool {
        self.capable
    }

    fn is_ptrace_parent_of(&self, pid: u32) -> bool {
        self.machine.tracer_of(pid) == Some(self.pid)
    }

    fn read_user(&self, addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
        self.mem.read(addr, buf)
    }

    fn write_user(&self, addr: u64, buf: &[u8]) -> Result<(), Errno> {
        self.mem.write(addr, buf)
    }

    fn resolve_fd(&self, raw: i32) -> Result<FileKey, Errno> {
        host::raw_file_key(raw)
    }

    fn install_fd(&self, fd: OwnedFd) -> Result<i32, Errno> {
        // The fd stays open in our table; the caller adopts it with `Transport::adopt_fd`.
        Ok(fd.into_raw_fd())
    }

    fn uninstall_fd(&self, raw: RawFd) {
        host::close_raw(raw);
    }

    fn process_memory(&self) -> ProcessMemory {
        self.mem
    }

    /// This OS process's mappings, with the device mappings the simulated process made in
    /// process (plain shared mappings of memfds here) marked as the device VMAs they are.
    fn vmas(&self) -> Result<Vec<Vma>, Errno> {
        let device = self.device_vmas.map(|d| d.of(self.pid)).unwrap_or_default();
        let mut all = host::vmas_of(self.mem.pid()).map_err(|_| Errno::EFAULT)?;
        for v in &mut all {
            v.device |= device.iter().any(|d| d.start < v.end && v.start < d.end);
        }
        Ok(all)
    }
}
