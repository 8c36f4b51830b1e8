//! Simulated device memory: VRAM and GTT buffer objects are memfds, mapped shared.
//!
//! A BO's exported dma-buf is a dup of its memfd, so the simulator recognises it again by inode
//! ([`Backing::key`]) when it comes back (IMPORT_DMABUF, GET_DMABUF_INFO, later PRIME import).

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use crate::host::{self, FileKey, SharedMap};

/// Where a BO's memory lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Domain {
    /// Device memory.
    Vram,
    /// System memory in the GART.
    Gtt,
}

/// The memory of one VRAM or GTT BO.
#[derive(Debug)]
pub struct Backing {
    memfd: OwnedFd,
    map: SharedMap,
    key: FileKey,
    /// Size in bytes.
    pub size: u64,
    /// VRAM or GTT.
    pub domain: Domain,
    /// Index of the GPU it belongs to.
    pub device: usize,
    /// Whether the CPU may map it (PUBLIC VRAM, or GTT).
    pub cpu_visible: bool,
}

impl Backing {
    /// A zero-filled (sparse) memfd of `size` bytes, mapped shared.
    pub fn new(size: u64, domain: Domain, device: usize, cpu_visible: bool) -> io::Result<Self> {
        let name = match domain {
            Domain::Vram => "kfd-sim:vram",
            Domain::Gtt => "kfd-sim:gtt",
        };
        let memfd = host::memfd(name)?;
        let map = SharedMap::new(memfd.as_fd(), size)?;
        let key = host::file_key(memfd.as_fd())?;
        Ok(Self {
            memfd,
            map,
            key,
            size,
            domain,
            device,
            cpu_visible,
        })
    }

    /// The inode identity shared by the memfd and every dma-buf exported from it.
    pub fn key(&self) -> FileKey {
        self.key
    }

    /// A dma-buf fd for this memory: a dup of the memfd if `writable`, else a read-only reopen.
    /// Not close-on-exec, as the kernel installs it.
    pub fn export(&self, writable: bool) -> io::Result<OwnedFd> {
        if writable {
            host::dup_inheritable(self.memfd.as_fd())
        } else {
            let ro = host::reopen_readonly(self.memfd.as_fd())?;
            // The reopen is close-on-exec from std; make an inheritable copy as fd_install would.
            host::dup_inheritable(ro.as_fd())
        }
    }

    /// Reads bytes at `offset`; `false` if out of range.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> bool {
        self.map.read(offset, buf)
    }

    /// Writes bytes at `offset`; `false` if out of range.
    pub fn write(&self, offset: u64, buf: &[u8]) -> bool {
        self.map.write(offset, buf)
    }

    /// Fills `len` bytes at `offset` from process `pid`'s memory at `remote` (see
    /// [`SharedMap::read_from_process`]); `EFAULT` when out of range or on a failed transfer.
    pub fn read_from_process(
        &self,
        offset: u64,
        len: u64,
        pid: libc::pid_t,
        remote: u64,
    ) -> Result<(), kfd_abi::Errno> {
        self.map
            .read_from_process(self.memfd.as_fd(), offset, len, pid, remote)
    }

    /// The shared mapping (what the SDMA engine copies into and out of).
    pub fn map(&self) -> &SharedMap {
        &self.map
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom, Write};

    #[test]
    fn dmabuf_is_the_same_inode_and_sees_the_same_bytes() {
        let b = Backing::new(8192, Domain::Vram, 0, true).unwrap();
        assert!(b.write(4096, b"hello"));
        let fd = b.export(true).unwrap();
        assert_eq!(host::file_key(fd.as_fd()).unwrap(), b.key());
        let mut f = std::fs::File::from(fd);
        f.seek(SeekFrom::Start(4096)).unwrap();
        let mut s = [0u8; 5];
        f.read_exact(&mut s).unwrap();
        assert_eq!(&s, b"hello");
        f.seek(SeekFrom::Start(0)).unwrap();
        f.write_all(b"xy").unwrap();
        let mut back = [0u8; 2];
        assert!(b.read(0, &mut back));
        assert_eq!(&back, b"xy");
    }

    #[test]
    fn read_only_export_refuses_writes() {
        let b = Backing::new(4096, Domain::Gtt, 0, true).unwrap();
        let fd = b.export(false).unwrap();
        assert_eq!(host::file_key(fd.as_fd()).unwrap(), b.key());
        let mut f = std::fs::File::from(fd);
        assert!(f.write_all(b"x").is_err());
    }
}
