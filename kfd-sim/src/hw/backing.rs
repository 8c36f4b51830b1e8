//! The memory the simulated GPUs read and write: VRAM and GTT buffer objects are memfds, mapped
//! shared; userptr memory is the process's own ([`ProcessMemory`]).
//!
//! A BO's exported dma-buf is a dup of its memfd, so the simulator recognises it again by inode
//! ([`Backing::key`]) when it comes back (IMPORT_DMABUF, GET_DMABUF_INFO, later PRIME import).

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use kfd_abi::Errno;

use crate::host::{self, FileKey, SharedMap, Transfer};

/// Bytes a copy out of a BO moves between two looks for a hole ([`Backing::write_to_process`]).
const DATA_STEP: u64 = 1 << 20;

/// Where a BO's memory lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Domain {
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
    pub(crate) size: u64,
    /// VRAM or GTT.
    pub(crate) domain: Domain,
    /// Index of the GPU it belongs to.
    pub(crate) device: usize,
    /// Created with `AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED` (KFD: VRAM allocated PUBLIC; GEM: the
    /// flag itself): what GET_DMABUF_INFO reports as `KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC`.
    pub(crate) cpu_access_required: bool,
}

impl Backing {
    /// A zero-filled (sparse) memfd of `size` bytes, mapped shared.
    pub(crate) fn new(
        size: u64,
        domain: Domain,
        device: usize,
        cpu_access_required: bool,
    ) -> io::Result<Self> {
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
            cpu_access_required,
        })
    }

    /// The inode identity shared by the memfd and every dma-buf exported from it.
    pub(crate) fn key(&self) -> FileKey {
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
    pub(crate) fn read(&self, offset: u64, buf: &mut [u8]) -> bool {
        self.map.read(offset, buf)
    }

    /// Writes bytes at `offset`; `false` if out of range.
    pub(crate) fn write(&self, offset: u64, buf: &[u8]) -> bool {
        self.map.write(offset, buf)
    }

    /// Fills the transfer's `len` bytes at `offset` from process `pid`'s memory at `remote` (see
    /// [`SharedMap::read_from_process`]); `EFAULT` when out of range or on a failed transfer.
    pub(crate) fn read_from_process(&self, t: Transfer) -> Result<(), kfd_abi::Errno> {
        self.map.read_from_process(self.memfd.as_fd(), t)
    }

    /// Fills `len` bytes at `offset` with `pattern` repeated from byte `phase` of it; `false` if
    /// out of range. A fill with zeros punches the whole pages of the range out of the memfd
    /// (they read as zeros and hold no memory, as a fresh BO's) and writes only the partial pages
    /// at its ends; where punching is refused, it writes every byte.
    pub(crate) fn fill(&self, offset: u64, len: u64, pattern: [u8; 4], phase: usize) -> bool {
        let page = crate::limits::PAGE_SIZE;
        let Some(end) = offset.checked_add(len).filter(|&e| e <= self.size) else {
            return false;
        };
        let (first, last) = (offset.next_multiple_of(page), end / page * page);
        if pattern != [0; 4] || first >= last {
            return self.map.fill(offset, len, pattern, phase);
        }
        if host::punch_hole(self.memfd.as_fd(), first, last - first).is_err() {
            return self.map.fill(offset, len, pattern, phase);
        }
        self.map.fill(offset, first - offset, pattern, phase)
            && self.map.fill(last, end - last, pattern, phase)
    }

    /// Writes the transfer's `len` bytes at `offset` into process `pid`'s memory at `remote` (see
    /// [`SharedMap::write_to_process`]). Ranges of the memfd that were never written (its holes)
    /// are sent as zeros without being read: a read of a hole through the shared mapping would
    /// allocate and clear memory for it, which VRAM that nobody wrote does not cost on hardware.
    /// `EFAULT` when out of range or on a failed transfer.
    pub(crate) fn write_to_process(&self, t: Transfer) -> Result<(), kfd_abi::Errno> {
        let Transfer {
            offset,
            len,
            pid,
            remote,
        } = t;
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.size)
            .ok_or(kfd_abi::Errno::EFAULT)?;
        let mut at = offset;
        while at < end {
            let to = remote + (at - offset);
            match host::next_data(self.memfd.as_fd(), at) {
                // Data here: copied a step at a time, so that a hole right after it is read
                // (and allocated) for at most one step.
                Some(next) if next == at => {
                    let stop = (at + DATA_STEP).min(end);
                    let step = Transfer {
                        offset: at,
                        len: stop - at,
                        pid,
                        remote: to,
                    };
                    self.map.write_to_process(self.memfd.as_fd(), step)?;
                    at = stop;
                }
                hole_to => {
                    let stop = hole_to.map_or(end, |n| n.min(end));
                    host::process_vm_write_zeros(pid, to, stop - at)?;
                    at = stop;
                }
            }
        }
        Ok(())
    }

    /// The shared mapping (what the SDMA engine copies into and out of).
    pub(crate) fn map(&self) -> &SharedMap {
        &self.map
    }
}

/// A device page of `size` bytes (doorbells, MMIO, signal page), zero-filled; `ENOMEM` when no
/// memfd can back it.
pub(crate) fn device_page(size: u64, dev: usize) -> Result<Arc<Backing>, Errno> {
    Backing::new(size, Domain::Gtt, dev, false)
        .map(Arc::new)
        .map_err(|e| {
            log::warn!("kfd-sim: cannot back a {size}-byte device page: {e}");
            Errno::ENOMEM
        })
}

/// User memory of a real OS process, through `process_vm_readv` / `process_vm_writev`.
#[derive(Clone, Copy, Debug)]
pub struct ProcessMemory {
    pid: libc::pid_t,
}

impl ProcessMemory {
    /// The memory of OS process `pid`.
    pub fn of_pid(pid: libc::pid_t) -> Self {
        Self { pid }
    }

    /// Our own memory (the in-process front end).
    pub fn own() -> Self {
        Self {
            pid: host::own_pid(),
        }
    }

    /// The OS pid whose memory this is.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// `copy_from_user`.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
        host::process_vm_read(self.pid, addr, buf)
    }

    /// `copy_to_user`.
    pub fn write(&self, addr: u64, buf: &[u8]) -> Result<(), Errno> {
        host::process_vm_write(self.pid, addr, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom, Write};
    use std::os::unix::fs::MetadataExt;

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
    fn a_zero_fill_frees_the_pages_it_covers_and_writes_the_edges() {
        let b = Backing::new(8 * 4096, Domain::Vram, 0, true).unwrap();
        assert!(b.write(0, &[0xab; 8 * 4096]));
        let blocks = |b: &Backing| {
            std::fs::File::from(b.export(true).unwrap())
                .metadata()
                .unwrap()
                .blocks()
        };
        assert_eq!(blocks(&b) * 512, 8 * 4096);
        assert!(b.fill(10, 8 * 4096 - 20, [0; 4], 0));
        // Only the two edge pages still hold memory (until something reads the others through
        // the shared mapping, which allocates them again).
        assert_eq!(blocks(&b) * 512, 2 * 4096);
        let mut got = vec![0u8; 8 * 4096];
        assert!(b.read(0, &mut got));
        assert!(got[..10].iter().all(|&x| x == 0xab));
        assert!(got[10..8 * 4096 - 10].iter().all(|&x| x == 0));
        assert!(got[8 * 4096 - 10..].iter().all(|&x| x == 0xab));
        // Other patterns, and ranges out of bounds, as before.
        assert!(b.fill(4096, 8, [1, 2, 3, 4], 1));
        assert!(b.read(4096, &mut got[..8]));
        assert_eq!(&got[..8], &[2, 3, 4, 1, 2, 3, 4, 1]);
        assert!(!b.fill(8 * 4096 - 4, 8, [0; 4], 0));
    }

    #[test]
    fn copies_out_of_holes_are_zeros_and_allocate_at_most_a_step() {
        const SIZE: usize = 8 << 20;
        let b = Backing::new(SIZE as u64, Domain::Vram, 0, true).unwrap();
        // Data from the middle of the page at 2 MiB, holes elsewhere.
        let data_at = (2 << 20) + 100;
        assert!(b.write(data_at as u64, &[0x5a; 8000]));
        let blocks = |b: &Backing| {
            std::fs::File::from(b.export(true).unwrap())
                .metadata()
                .unwrap()
                .blocks()
                * 512
        };
        let before = blocks(&b);
        let mut out = vec![0xeeu8; SIZE - 50];
        b.write_to_process(Transfer {
            offset: 50,
            len: out.len() as u64,
            pid: host::own_pid(),
            remote: out.as_mut_ptr() as u64,
        })
        .unwrap();
        let mut want = vec![0u8; SIZE];
        want[data_at..data_at + 8000].fill(0x5a);
        assert!(out == want[50..]);
        // The 6 MiB of hole after the data cost one step of reading at most, the 2 MiB before
        // it nothing.
        let after = blocks(&b);
        assert!(
            after <= before + DATA_STEP,
            "{before} -> {after} bytes held"
        );
        assert!(b
            .write_to_process(Transfer {
                offset: 1,
                len: SIZE as u64,
                pid: host::own_pid(),
                remote: out.as_mut_ptr() as u64,
            })
            .is_err());
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
