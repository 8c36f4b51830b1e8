//! CPU mappings of device files: what `mmap(2)` of `/dev/kfd` or a render node returns, owned.
//!
//! A [`Mapping`] is one `mmap` result; dropping it unmaps it ([`Mapping::unmap`] reports the
//! error instead). [`Transport::mmap`](crate::Transport::mmap) makes them: on a real fd with
//! `mmap(2)` at the device offset; the in-process simulator maps the memory that backs the
//! device offset, so what the CPU writes through the mapping the simulated GPU reads, and the
//! other way round.
//!
//! The mapping is addressed by the process's own pointers, so reads and writes through it are
//! checked against its length and protection and never fault on a well-formed mapping.

use std::ffi::c_void;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

use bitflags::bitflags;

use crate::errno::Errno;

bitflags! {
    /// `PROT_*` of a mapping.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Prot: u32 {
        /// `PROT_READ`.
        const READ = 1 << 0;
        /// `PROT_WRITE`.
        const WRITE = 1 << 1;
        /// `PROT_EXEC`.
        const EXEC = 1 << 2;
    }
}

impl Prot {
    /// Read and write.
    pub const RW: Self = Self::READ.union(Self::WRITE);

    fn to_libc(self) -> i32 {
        let mut p = libc::PROT_NONE;
        if self.contains(Self::READ) {
            p |= libc::PROT_READ;
        }
        if self.contains(Self::WRITE) {
            p |= libc::PROT_WRITE;
        }
        if self.contains(Self::EXEC) {
            p |= libc::PROT_EXEC;
        }
        p
    }
}

/// `MAP_SHARED` or `MAP_PRIVATE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Share {
    /// `MAP_SHARED`: writes reach the device (what ROCm maps).
    Shared,
    /// `MAP_PRIVATE`: copy-on-write, which the drivers refuse unless nothing can write.
    Private,
}

/// How a mapping is inherited and dumped, as the driver's VMA flags decide.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Advice {
    /// `VM_DONTCOPY`: a forked child does not get it (`MADV_DONTFORK`).
    pub dont_fork: bool,
    /// `VM_DONTDUMP`: not in core dumps (`MADV_DONTDUMP`).
    pub dont_dump: bool,
}

/// One CPU mapping of a device file (or of the memory that simulates it); unmapped on drop.
pub struct Mapping {
    ptr: NonNull<c_void>,
    len: usize,
    prot: Prot,
}

// SAFETY: the mapping is plain shared memory owned by this value; reads and writes through it go
// through `&self` methods that copy bytes, which is what any thread may do with shared memory.
unsafe impl Send for Mapping {}
// SAFETY: as for Send; no method hands out a reference into the mapping.
unsafe impl Sync for Mapping {}

impl fmt::Debug for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mapping")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &format_args!("{:#x}", self.len))
            .field("prot", &self.prot)
            .finish()
    }
}

/// Where a new mapping goes: what `mmap(2)`'s address, length and `MAP_FIXED` say.
#[derive(Debug)]
pub enum Place {
    /// `len` bytes wherever the kernel puts them (`mmap(NULL, len, ...)`).
    Anywhere(usize),
    /// Over this mapping (a [`Mapping::reserve`] reservation, or any mapping this process
    /// owns), which the new one replaces whole at its address (`MAP_FIXED`): how ROCm puts a
    /// buffer's CPU mapping at the buffer's GPU virtual address.
    Over(Mapping),
}

impl Place {
    /// The length of the mapping to be made.
    pub fn len(&self) -> usize {
        match self {
            Self::Anywhere(len) => *len,
            Self::Over(at) => at.len,
        }
    }

    /// Whether the length is zero (which `mmap(2)` refuses).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Mapping {
    /// Reserves `len` bytes of address space (an anonymous `PROT_NONE` mapping), as ROCm
    /// reserves its GPU virtual address range before it maps buffers into it at their GPU
    /// addresses ([`Place::Over`]).
    ///
    /// # Errors
    ///
    /// The errno of `mmap(2)`.
    pub fn reserve(len: usize) -> Result<Self, Errno> {
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        // SAFETY: a NULL hint and an anonymous private mapping: new address space that overlaps
        // nothing; the result is checked before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        let ptr = NonNull::new(p).ok_or(Errno::ENOMEM)?;
        Ok(Self {
            ptr,
            len,
            prot: Prot::empty(),
        })
    }

    /// `mmap(addr, len, prot, share, fd, offset)` at `place`: `mmap(NULL, len, ...)` for
    /// [`Place::Anywhere`], `mmap(at, at.len(), ..., share | MAP_FIXED, ...)` for
    /// [`Place::Over`].
    ///
    /// # Errors
    ///
    /// The errno of `mmap(2)` (the driver's, for a device file); `EINVAL` for a zero length.
    /// Over a mapping, its range is then unmapped.
    pub fn map_fd(
        place: Place,
        fd: BorrowedFd<'_>,
        offset: u64,
        prot: Prot,
        share: Share,
    ) -> Result<Self, Errno> {
        let len = place.len();
        // The offset is the device's to interpret: /dev/kfd's doorbell and MMIO offsets have
        // bit 63 set (its file is FMODE_UNSIGNED_OFFSET), so the bits go through unchanged, as
        // libhsakmt passes them, not as a checked conversion to a signed off_t.
        #[allow(clippy::cast_possible_wrap)]
        let off = offset as libc::off_t;
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        let mut flags = match share {
            Share::Shared => libc::MAP_SHARED,
            Share::Private => libc::MAP_PRIVATE,
        };
        let hint = match &place {
            Place::Over(r) => {
                flags |= libc::MAP_FIXED;
                r.ptr.as_ptr()
            }
            Place::Anywhere(_) => std::ptr::null_mut(),
        };
        // SAFETY: with no hint the kernel chooses an address that overlaps nothing of ours; with
        // MAP_FIXED the range is exactly that of the mapping `place` holds, which we own and give
        // up here (nothing else references it); the fd is open for the call; the result is
        // checked before use.
        let p = unsafe { libc::mmap(hint, len, prot.to_libc(), flags, fd.as_raw_fd(), off) };
        if p == libc::MAP_FAILED {
            // A mapping in `place` is dropped (unmapped) with whatever the failed call left there.
            return Err(Errno::last());
        }
        if let Place::Over(r) = place {
            // The new mapping took its place: it must not be unmapped twice.
            std::mem::forget(r);
        }
        let ptr = NonNull::new(p).ok_or(Errno::ENOMEM)?;
        Ok(Self { ptr, len, prot })
    }

    /// Applies the driver's VMA flags that userspace can express (`madvise`).
    ///
    /// # Errors
    ///
    /// The errno of `madvise(2)`.
    pub fn advise(&self, advice: Advice) -> Result<(), Errno> {
        let mut calls = Vec::with_capacity(2);
        if advice.dont_fork {
            calls.push(libc::MADV_DONTFORK);
        }
        if advice.dont_dump {
            calls.push(libc::MADV_DONTDUMP);
        }
        for c in calls {
            // SAFETY: the range is exactly this mapping, which we own; these advices change
            // only inheritance and core-dump inclusion, not the contents.
            if unsafe { libc::madvise(self.ptr.as_ptr(), self.len, c) } < 0 {
                return Err(Errno::last());
            }
        }
        Ok(())
    }

    /// The start address.
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as usize as u64
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (never: `mmap` refuses a zero length).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn range(&self, offset: usize, n: usize, need: Prot) -> Option<*mut u8> {
        if !self.prot.contains(need) || offset.checked_add(n)? > self.len {
            return None;
        }
        // SAFETY: offset + n <= len, so the pointer stays inside the mapping.
        Some(unsafe { self.ptr.as_ptr().cast::<u8>().add(offset) })
    }

    /// Copies bytes out at `offset`; `false` when the range is outside or the mapping is not
    /// readable.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> bool {
        let Some(src) = self.range(offset, buf.len(), Prot::READ) else {
            return false;
        };
        // SAFETY: `src..src+len` is inside a readable mapping we own; `buf` is a distinct Rust
        // buffer. Another party (the device) may write concurrently: bytes, not typed values,
        // are copied.
        unsafe { std::ptr::copy_nonoverlapping(src, buf.as_mut_ptr(), buf.len()) };
        true
    }

    /// Copies bytes in at `offset`; `false` when the range is outside or the mapping is not
    /// writable.
    pub fn write(&self, offset: usize, buf: &[u8]) -> bool {
        let Some(dst) = self.range(offset, buf.len(), Prot::WRITE) else {
            return false;
        };
        // SAFETY: `dst..dst+len` is inside a writable mapping we own; `buf` is a distinct buffer.
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), dst, buf.len()) };
        true
    }

    /// Reads a little-endian `u64` at `offset` with one 8-byte access (a doorbell, a signal
    /// slot); `None` when outside, unaligned or not readable.
    pub fn read_u64(&self, offset: usize) -> Option<u64> {
        if offset % 8 != 0 {
            return None;
        }
        let p = self.range(offset, 8, Prot::READ)?;
        // SAFETY: aligned, inside a readable mapping; volatile because the device writes it.
        Some(u64::from_le(unsafe { p.cast::<u64>().read_volatile() }))
    }

    /// Writes a little-endian `u64` at `offset` with one 8-byte access (ringing a doorbell);
    /// `false` when outside, unaligned or not writable.
    pub fn write_u64(&self, offset: usize, value: u64) -> bool {
        if offset % 8 != 0 {
            return false;
        }
        let Some(p) = self.range(offset, 8, Prot::WRITE) else {
            return false;
        };
        // SAFETY: aligned, inside a writable mapping; volatile because the device reads it.
        unsafe { p.cast::<u64>().write_volatile(value.to_le()) };
        true
    }

    /// Atomically adds `value` to the native-endian `u64` at `offset` (sequentially
    /// consistent, also against other processes sharing the memory) and returns the value before;
    /// `None` when outside, unaligned or not readable and writable.
    pub fn fetch_add_u64(&self, offset: usize, value: u64) -> Option<u64> {
        let p = self.atomic_at(offset, Prot::RW)?;
        Some(p.fetch_add(value, std::sync::atomic::Ordering::SeqCst))
    }

    /// Atomically loads the native-endian `u64` at `offset` (acquire: what another process wrote before
    /// its [`fetch_add_u64`](Self::fetch_add_u64) there is visible after); `None` when outside,
    /// unaligned or not readable.
    pub fn load_u64(&self, offset: usize) -> Option<u64> {
        let p = self.atomic_at(offset, Prot::READ)?;
        Some(p.load(std::sync::atomic::Ordering::Acquire))
    }

    fn atomic_at(&self, offset: usize, need: Prot) -> Option<&std::sync::atomic::AtomicU64> {
        if offset % 8 != 0 {
            return None;
        }
        let p = self.range(offset, 8, need)?;
        // SAFETY: aligned (the mapping is page-aligned and `offset` a multiple of 8), inside a
        // mapping that lives as long as `&self`; every access to these bytes from this crate's
        // side is atomic or a byte copy of shared memory, which another party may change anyway.
        Some(unsafe { std::sync::atomic::AtomicU64::from_ptr(p.cast::<u64>()) })
    }

    /// Leaves the memory mapped for good (a process that keeps its device mappings until it
    /// exits, as ROCm does) and returns its address and length.
    pub fn leak(self) -> (u64, usize) {
        let r = (self.addr(), self.len);
        std::mem::forget(self);
        r
    }

    /// `munmap(2)`, reporting its error.
    ///
    /// # Errors
    ///
    /// The errno of `munmap(2)`.
    pub fn unmap(self) -> io::Result<()> {
        let (ptr, len) = (self.ptr, self.len);
        std::mem::forget(self);
        // SAFETY: the range is a mapping this value owned and nothing references it any more.
        if unsafe { libc::munmap(ptr.as_ptr(), len) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the range is a mapping this value owns; nothing references it after drop.
        unsafe { libc::munmap(self.ptr.as_ptr(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;
    use std::os::fd::AsFd;
    use Place::Anywhere;

    fn file(bytes: &[u8]) -> std::fs::File {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        f
    }

    #[test]
    fn a_shared_mapping_reads_and_writes_the_file() {
        let f = file(&[7u8; 4096]);
        let m = Mapping::map_fd(Anywhere(4096), f.as_fd(), 0, Prot::RW, Share::Shared).unwrap();
        let mut b = [0u8; 2];
        assert!(m.read(10, &mut b));
        assert_eq!(b, [7, 7]);
        assert!(m.write_u64(8, 0x1122_3344_5566_7788));
        assert_eq!(m.read_u64(8), Some(0x1122_3344_5566_7788));
        let again =
            Mapping::map_fd(Anywhere(4096), f.as_fd(), 0, Prot::READ, Share::Shared).unwrap();
        assert_eq!(again.read_u64(8), Some(0x1122_3344_5566_7788));
        m.unmap().unwrap();
    }

    #[test]
    fn offsets_with_bit_63_set_reach_the_kernel() {
        // /dev/kfd's doorbell offsets look like this; a regular file cannot be mapped there, so
        // the kernel answers (EOVERFLOW), where a checked conversion to off_t refused first.
        let f = file(&[0u8; 4096]);
        let doorbell = (3u64 << 62) | (0x1234 << 46);
        let e = Mapping::map_fd(Anywhere(8192), f.as_fd(), doorbell, Prot::RW, Share::Shared)
            .unwrap_err();
        assert_eq!(e, Errno(libc::EOVERFLOW));
    }

    #[test]
    fn accesses_outside_or_against_the_protection_are_refused() {
        let f = file(&[0u8; 4096]);
        let ro = Mapping::map_fd(Anywhere(4096), f.as_fd(), 0, Prot::READ, Share::Shared).unwrap();
        assert!(!ro.write(0, b"x"), "read-only");
        assert!(!ro.read(4095, &mut [0u8; 2]), "past the end");
        assert_eq!(ro.read_u64(4), None, "unaligned");
        let none =
            Mapping::map_fd(Anywhere(4096), f.as_fd(), 0, Prot::empty(), Share::Private).unwrap();
        assert!(!none.read(0, &mut [0u8; 1]));
    }

    #[test]
    fn a_reservation_is_replaced_at_its_address() {
        let f = file(&[9u8; 8192]);
        let r = Mapping::reserve(8192).unwrap();
        let addr = r.addr();
        assert!(!r.read(0, &mut [0u8; 1]), "PROT_NONE");
        let m =
            Mapping::map_fd(Place::Over(r), f.as_fd(), 4096, Prot::READ, Share::Shared).unwrap();
        assert_eq!((m.addr(), m.len()), (addr, 8192));
        let mut b = [0u8; 1];
        assert!(m.read(0, &mut b));
        assert_eq!(b, [9]);
    }

    #[test]
    fn atomics_are_shared_with_every_mapping_of_the_memory() {
        let f = file(&[0u8; 4096]);
        let a = Mapping::map_fd(Anywhere(4096), f.as_fd(), 0, Prot::RW, Share::Shared).unwrap();
        let b = Mapping::map_fd(Anywhere(4096), f.as_fd(), 0, Prot::READ, Share::Shared).unwrap();
        assert_eq!(a.fetch_add_u64(16, 5), Some(0));
        assert_eq!(a.fetch_add_u64(16, 2), Some(5));
        assert_eq!(b.load_u64(16), Some(7));
        assert_eq!(b.fetch_add_u64(16, 1), None, "read-only");
        assert_eq!(a.load_u64(12), None, "unaligned");
        assert_eq!(a.load_u64(4096), None, "past the end");
    }

    #[test]
    fn mmap_errors_are_the_kernels() {
        let f = file(&[0u8; 16]);
        assert_eq!(
            Mapping::map_fd(Anywhere(0), f.as_fd(), 0, Prot::READ, Share::Shared).unwrap_err(),
            Errno::EINVAL
        );
        assert_eq!(
            Mapping::map_fd(Anywhere(4096), f.as_fd(), 1, Prot::READ, Share::Shared).unwrap_err(),
            Errno::EINVAL,
            "unaligned offset"
        );
    }
}
