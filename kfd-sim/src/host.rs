//! The simulator model's glue to the host OS: memfds, shared mappings, cross-process memory
//! access, fd identity, clocks, locks, and plain-data views of the `kfd-sys` argument structs.
//!
//! The raw OS calls of the device model live here, each `unsafe` block with its `SAFETY`
//! argument. The crate's other `unsafe` code: the CUSE front end's system calls (`cuse::os`),
//! the bridge's control ioctls (`cuse::bridge::sys`), the in-process `Transport` (an `unsafe`
//! trait of `kfd-abi`) and the command processor's GPU memory for the shader core
//! (`hw::cp::memory`, kfd-shader's `unsafe` trait `Memory`).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

use kfd_abi::Errno;

pub(crate) use crate::lock_order::{lock, lock_within};

/// Identity of an open file as `fstat` gives it: `(st_dev, st_ino)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileKey {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
}

/// `fstat(2)` identity of an fd.
pub fn file_key(fd: BorrowedFd<'_>) -> io::Result<FileKey> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: `fd` is a valid open fd for the borrow; `st` points to writable memory of the size
    // fstat expects.
    let r = unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat succeeded and filled the struct (and it was zero-initialised before).
    let st = unsafe { st.assume_init() };
    Ok(FileKey {
        dev: st.st_dev,
        ino: st.st_ino,
    })
}

/// `fstat(2)` identity of an fd number in our own table; `EBADF` if it is not open.
pub(crate) fn raw_file_key(raw: RawFd) -> Result<FileKey, Errno> {
    if raw < 0 {
        return Err(Errno::EBADF);
    }
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: fstat only writes into `st`; an invalid fd number yields EBADF, nothing else.
    let r = unsafe { libc::fstat(raw, st.as_mut_ptr()) };
    if r < 0 {
        return Err(Errno::last());
    }
    // SAFETY: fstat succeeded and filled the struct.
    let st = unsafe { st.assume_init() };
    Ok(FileKey {
        dev: st.st_dev,
        ino: st.st_ino,
    })
}

/// `memfd_create(name, MFD_CLOEXEC)`.
pub(crate) fn memfd(name: &str) -> io::Result<OwnedFd> {
    let name = CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `name` is a valid NUL-terminated string for the duration of the call.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `dup(2)` without close-on-exec, as the kernel's `fd_install` of a dma-buf leaves it.
pub(crate) fn dup_inheritable(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // SAFETY: `fd` is valid for the borrow; dup returns a new fd or -1.
    let r = unsafe { libc::dup(fd.as_raw_fd()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: dup returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

/// A close-on-exec copy of fd number `raw` of our own table (`fcntl(F_DUPFD_CLOEXEC)`); `EBADF`
/// when it is not open.
pub(crate) fn dup_raw(raw: RawFd) -> io::Result<OwnedFd> {
    if raw < 0 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: fcntl on an integer fd number: a closed number yields EBADF and nothing else; the
    // new fd is ours.
    let r = unsafe { libc::fcntl(raw, libc::F_DUPFD_CLOEXEC, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: F_DUPFD_CLOEXEC returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

/// A new read-only open file on the same inode (`/proc/self/fd/N` reopened `O_RDONLY`).
pub(crate) fn reopen_readonly(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let file = std::fs::OpenOptions::new().read(true).open(path)?;
    Ok(file.into())
}

/// Takes back an fd number that was given away with `into_raw_fd` and closes it.
pub fn close_raw(raw: RawFd) {
    if raw >= 0 {
        // SAFETY: the caller gave this number away itself (install_fd) and nobody adopted it;
        // closing an already-closed number only returns EBADF.
        unsafe { libc::close(raw) };
    }
}

/// A copy between `len` bytes at `offset` of device memory (a [`SharedMap`] or the backing it
/// maps) and process `pid`'s memory at `remote`, in the direction the method taking it says.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Transfer {
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) pid: libc::pid_t,
    pub(crate) remote: u64,
}

/// A `MAP_SHARED` read-write mapping of a memfd: the simulated device memory of one BO.
#[derive(Debug)]
pub(crate) struct SharedMap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; all access goes through bounds-checked copies and
// concurrent access is as racy as the GPU's (no Rust references into it are handed out).
unsafe impl Send for SharedMap {}
// SAFETY: see Send.
unsafe impl Sync for SharedMap {}

impl SharedMap {
    /// Sizes the memfd to `len` bytes (sparse) and maps it shared.
    pub(crate) fn new(fd: BorrowedFd<'_>, len: u64) -> io::Result<Self> {
        let size =
            libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::ENOMEM))?;
        let len = usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::ENOMEM))?;
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: ftruncate on a valid fd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh shared mapping of a valid fd; the kernel picks the address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_NORESERVE,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(Self { ptr, len })
    }

    /// Copies `buf.len()` bytes at `offset` out of the mapping; `false` if out of bounds.
    pub(crate) fn read(&self, offset: u64, buf: &mut [u8]) -> bool {
        let Some(off) = self.check(offset, buf.len()) else {
            return false;
        };
        // SAFETY: [off, off + len) is inside the live mapping (checked); `buf` is a distinct
        // Rust buffer, so the ranges do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), buf.as_mut_ptr(), buf.len())
        };
        true
    }

    /// Copies `buf` into the mapping at `offset`; `false` if out of bounds.
    pub(crate) fn write(&self, offset: u64, buf: &[u8]) -> bool {
        let Some(off) = self.check(offset, buf.len()) else {
            return false;
        };
        // SAFETY: as in `read`, with the roles swapped.
        unsafe {
            std::ptr::copy_nonoverlapping(buf.as_ptr(), self.ptr.as_ptr().add(off), buf.len())
        };
        true
    }

    /// The host address of byte `offset` and how many bytes of the mapping follow it (at least
    /// one): what the shader core reads and writes directly. The address stays valid for as long
    /// as this mapping lives; every access through it must be atomic or a bounds-checked copy.
    pub(crate) fn run_at(&self, offset: u64) -> Option<(NonNull<u8>, u64)> {
        let off = self.check(offset, 1)?;
        // SAFETY: off < len (checked), so the result stays inside the live mapping.
        let p = unsafe { self.ptr.as_ptr().add(off) };
        Some((NonNull::new(p)?, (self.len - off) as u64))
    }

    /// The aligned qword at `offset` as an atomic, if it lies inside the mapping.
    fn atomic_u64(&self, offset: u64) -> Option<&std::sync::atomic::AtomicU64> {
        let off = self.check(offset, 8)?;
        if off % 8 != 0 {
            return None;
        }
        // SAFETY: [off, off + 8) is inside the live mapping (checked) and 8-aligned (the mapping
        // is page aligned); the reference lives no longer than `self`, and the memory is only
        // ever accessed atomically or by plain copies racing as the GPU's accesses do.
        Some(unsafe { std::sync::atomic::AtomicU64::from_ptr(self.ptr.as_ptr().add(off).cast()) })
    }

    /// Atomically adds `v` to the aligned qword at `offset` (a real host atomic: the CPU of the
    /// client and other engines see one read-modify-write); the old value, or `None` when the
    /// qword is misaligned or out of bounds.
    pub(crate) fn fetch_add_u64(&self, offset: u64, v: u64) -> Option<u64> {
        Some(
            self.atomic_u64(offset)?
                .fetch_add(v, std::sync::atomic::Ordering::SeqCst),
        )
    }

    /// Atomically stores `v` into the aligned qword at `offset`; `false` when misaligned or out
    /// of bounds.
    pub(crate) fn store_u64(&self, offset: u64, v: u64) -> bool {
        self.atomic_u64(offset)
            .map(|a| a.store(v, std::sync::atomic::Ordering::SeqCst))
            .is_some()
    }

    /// Atomically loads the aligned qword at `offset`.
    pub(crate) fn load_u64(&self, offset: u64) -> Option<u64> {
        Some(
            self.atomic_u64(offset)?
                .load(std::sync::atomic::Ordering::SeqCst),
        )
    }

    fn check(&self, offset: u64, len: usize) -> Option<usize> {
        let off = usize::try_from(offset).ok()?;
        (off.checked_add(len)? <= self.len).then_some(off)
    }

    /// The mapping's byte range `[offset, offset + len)` for a transfer with another process, as
    /// `(offset, len)`; `EFAULT` when it does not lie inside the mapping.
    fn transfer_range(&self, offset: u64, len: u64) -> Result<(usize, usize), Errno> {
        let len = usize::try_from(len).map_err(|_| Errno::EFAULT)?;
        let off = self.check(offset, len).ok_or(Errno::EFAULT)?;
        Ok((off, len))
    }

    /// Copies `len` bytes from `src` at `src_off` to this mapping at `dst_off` (`memmove`: the
    /// ranges may overlap when both are the same mapping); `false` if either is out of bounds.
    pub(crate) fn copy_from(&self, dst_off: u64, src: &SharedMap, src_off: u64, len: u64) -> bool {
        let Ok(len) = usize::try_from(len) else {
            return false;
        };
        let (Some(d), Some(s)) = (self.check(dst_off, len), src.check(src_off, len)) else {
            return false;
        };
        // SAFETY: both ranges lie inside live mappings (checked); `ptr::copy` allows overlap. No
        // Rust reference into either mapping exists.
        unsafe { std::ptr::copy(src.ptr.as_ptr().add(s), self.ptr.as_ptr().add(d), len) };
        true
    }

    /// Fills `len` bytes at `offset` with `pattern` repeated, starting `phase` bytes into it;
    /// `false` if out of bounds.
    pub(crate) fn fill(&self, offset: u64, len: u64, pattern: [u8; 4], phase: usize) -> bool {
        let Ok(len) = usize::try_from(len) else {
            return false;
        };
        let Some(off) = self.check(offset, len) else {
            return false;
        };
        if pattern.iter().all(|&b| b == pattern[0]) {
            // SAFETY: [off, off + len) is inside the live mapping (checked).
            unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(off), pattern[0], len) };
            return true;
        }
        let chunk = pattern_chunk(pattern, phase);
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len());
            // SAFETY: [off + done, off + done + n) is inside the checked range; `chunk` is a
            // distinct Rust buffer. The chunk length is a multiple of 4, so every piece starts at
            // the same phase.
            unsafe {
                std::ptr::copy_nonoverlapping(chunk.as_ptr(), self.ptr.as_ptr().add(off + done), n)
            };
            done += n;
        }
        true
    }

    /// Fills the transfer's `len` bytes at `offset` of this mapping of `fd` (the memfd it maps)
    /// from process `pid`'s memory at `remote`. Out of bounds or a failed or short transfer is
    /// `EFAULT` (bytes before the failure may have been written).
    ///
    /// The bytes go through a small per-thread bounce buffer: `process_vm_readv` into it, then
    /// `pwrite(2)` into the memfd. Writing fresh memfd pages through the file allocates them
    /// without zeroing them first (a whole page is about to be written) and without faulting
    /// them into this mapping, where a `process_vm_readv` straight into the mapping first had to
    /// fault in (allocate, zero and map) every page: on a restore, which writes only fresh
    /// pages, that fault path took two thirds of the engine's time, far more than the extra copy
    /// out of a cache-resident buffer.
    ///
    /// When `pid` is this process (the in-process front end, where the user memory is ours),
    /// the bytes go straight from that memory into the memfd with `pwrite(2)`: one copy instead
    /// of two, and still checked, since the kernel reads the user range with `copy_from_user`,
    /// which fails cleanly (`EFAULT`) on memory that is not mapped.
    pub(crate) fn read_from_process(&self, fd: BorrowedFd<'_>, t: Transfer) -> Result<(), Errno> {
        let Transfer { pid, remote, .. } = t;
        let (off, len) = self.transfer_range(t.offset, t.len)?;
        if pid == own_pid() {
            return pwrite_from_user(fd, remote, len, off as u64);
        }
        BOUNCE.with_borrow_mut(|bounce| {
            if bounce.is_empty() {
                bounce.resize(BOUNCE_BYTES, 0);
            }
            let mut done = 0usize;
            while done < len {
                let want = (len - done).min(bounce.len());
                let got = process_vm_read_some(pid, remote, done, &mut bounce[..want])?;
                pwrite_all(fd, &bounce[..got], (off + done) as u64)?;
                done += got;
            }
            Ok(())
        })
    }

    /// Writes the transfer's `len` bytes at `offset` of this mapping of `fd` (the memfd it maps)
    /// straight into process `pid`'s memory at `remote` (`process_vm_writev` out of the
    /// mapping). When `pid` is this process, `pread(2)` of the memfd into that memory instead:
    /// the same one copy, without faulting the memfd's pages into this mapping first (the kernel
    /// copies out of its page cache), checked as in
    /// [`read_from_process`](Self::read_from_process). Errors as there.
    pub(crate) fn write_to_process(&self, fd: BorrowedFd<'_>, t: Transfer) -> Result<(), Errno> {
        let Transfer { pid, remote, .. } = t;
        let (off, len) = self.transfer_range(t.offset, t.len)?;
        if pid == own_pid() {
            return pread_into_user(fd, off as u64, len, remote);
        }
        // SAFETY: the local range lies inside the live mapping (checked), which the kernel only
        // reads; the remote range is only touched by the kernel, which fails cleanly.
        unsafe { vm_transfer(pid, self.ptr.as_ptr().add(off), remote, len, true) }
    }
}

/// Bytes of the per-thread bounce buffer of [`SharedMap::read_from_process`]: small enough to
/// stay in the CPU cache between its two copies.
const BOUNCE_BYTES: usize = 256 << 10;

thread_local! {
    static BOUNCE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One `process_vm_readv` of up to `buf.len()` bytes from `pid`'s memory at `remote + done`;
/// returns how many bytes it moved (at least one), `EFAULT` for none.
fn process_vm_read_some(
    pid: libc::pid_t,
    remote: u64,
    done: usize,
    buf: &mut [u8],
) -> Result<usize, Errno> {
    let r = addr_at(remote, done, buf.len())?;
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let riov = libc::iovec {
        iov_base: r as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes our own writable buffer; the remote range is only accessed by
    // the kernel, which fails cleanly on unmapped memory.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &riov, 1, 0) };
    match usize::try_from(n) {
        Ok(0) | Err(_) => Err(Errno::EFAULT),
        Ok(n) => Ok(n),
    }
}

/// `pwrite(2)` of all of `buf` at `offset` of `fd`; any failure is `EFAULT` (the engine's view of
/// memory it could not write).
fn pwrite_all(fd: BorrowedFd<'_>, mut buf: &[u8], mut offset: u64) -> Result<(), Errno> {
    while !buf.is_empty() {
        let at = libc::off_t::try_from(offset).map_err(|_| Errno::EFAULT)?;
        // SAFETY: `buf` is our own readable buffer of `buf.len()` bytes; pwrite only reads it.
        let n = unsafe { libc::pwrite(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len(), at) };
        match usize::try_from(n) {
            Ok(n) if n > 0 => {
                buf = &buf[n..];
                offset += n as u64;
            }
            _ if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => {}
            _ => return Err(Errno::EFAULT),
        }
    }
    Ok(())
}

/// `pwrite(2)` of `len` bytes of our own memory at user address `addr` into `fd` at `offset`.
/// The kernel reads the user range (`copy_from_user`): unmapped memory ends the transfer with a
/// short count or `EFAULT`, and any failure is `EFAULT` (bytes before it may have been written).
fn pwrite_from_user(fd: BorrowedFd<'_>, addr: u64, len: usize, offset: u64) -> Result<(), Errno> {
    user_file_io(addr, len, offset, |ptr, n, at| {
        // SAFETY: the kernel only reads `[ptr, ptr + n)` of our address space, through
        // copy_from_user, which fails cleanly on unmapped memory; no Rust reference to that
        // memory exists here (it is user memory of a simulated process, as for
        // process_vm_readv).
        unsafe { libc::pwrite(fd.as_raw_fd(), ptr as *const libc::c_void, n, at) }
    })
}

/// `pread(2)` of `len` bytes of `fd` at `offset` into our own memory at user address `addr`.
/// The kernel writes the user range (`copy_to_user`): unmapped or read-only memory ends the
/// transfer with a short count or `EFAULT`, and any failure, or the end of the file, is
/// `EFAULT`.
fn pread_into_user(fd: BorrowedFd<'_>, offset: u64, len: usize, addr: u64) -> Result<(), Errno> {
    user_file_io(addr, len, offset, |ptr, n, at| {
        // SAFETY: the kernel only writes `[ptr, ptr + n)` of our address space, through
        // copy_to_user, which fails cleanly on unmapped or read-only memory; no Rust reference
        // to that memory exists here (user memory of a simulated process, which
        // process_vm_writev would write the same way).
        unsafe { libc::pread(fd.as_raw_fd(), ptr as *mut libc::c_void, n, at) }
    })
}

/// Moves `len` bytes between our own memory at user address `addr` and a file at `offset`, one
/// call of `call(user pointer, bytes, file offset)` (a `pread` or `pwrite`) at a time until all
/// are moved; interrupted calls are retried. A failed call, one that moved nothing (the end of
/// the file), or a range beyond the user address space is `EFAULT`.
fn user_file_io(
    addr: u64,
    len: usize,
    offset: u64,
    mut call: impl FnMut(usize, usize, libc::off_t) -> isize,
) -> Result<(), Errno> {
    let mut done = 0usize;
    while done < len {
        let ptr = addr_at(addr, done, len - done)?;
        let at = libc::off_t::try_from(offset + done as u64).map_err(|_| Errno::EFAULT)?;
        match usize::try_from(call(ptr, len - done, at)) {
            Ok(n) if n > 0 => done += n,
            Err(_) if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => {}
            _ => return Err(Errno::EFAULT),
        }
    }
    Ok(())
}

/// 64 KiB of `pattern` repeated from byte `phase` of it.
pub(crate) fn pattern_chunk(pattern: [u8; 4], phase: usize) -> Vec<u8> {
    (0..64 << 10).map(|i| pattern[(i + phase) % 4]).collect()
}

/// One `process_vm_readv` (`to_remote` false) or `process_vm_writev` loop between `len` local
/// bytes at `local` and process `pid`'s memory at `remote`; any failure is `EFAULT`.
///
/// # Safety
///
/// `local..local + len` must be valid for writes (read) or reads (write) for the whole call.
unsafe fn vm_transfer(
    pid: libc::pid_t,
    local: *mut u8,
    remote: u64,
    len: usize,
    to_remote: bool,
) -> Result<(), Errno> {
    let mut done = 0usize;
    while done < len {
        let r = addr_at(remote, done, len - done)?;
        let liov = libc::iovec {
            // SAFETY: `done < len`, so the pointer stays inside the caller's range.
            iov_base: unsafe { local.add(done) }.cast(),
            iov_len: len - done,
        };
        let riov = libc::iovec {
            iov_base: r as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: `liov` describes memory the caller vouches for; the remote side is only
        // accessed by the kernel, which fails cleanly on unmapped memory.
        let n = unsafe {
            if to_remote {
                libc::process_vm_writev(pid, &liov, 1, &riov, 1, 0)
            } else {
                libc::process_vm_readv(pid, &liov, 1, &riov, 1, 0)
            }
        };
        match usize::try_from(n) {
            Ok(0) | Err(_) => return Err(Errno::EFAULT),
            Ok(n) => done += n,
        }
    }
    Ok(())
}

/// Sets or clears close-on-exec on an fd (`DRM_CLOEXEC` of a PRIME export).
pub(crate) fn set_cloexec(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    // SAFETY: F_GETFD/F_SETFD on a valid fd touch only its descriptor flags.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let flags = if on {
        flags | libc::FD_CLOEXEC
    } else {
        flags & !libc::FD_CLOEXEC
    };
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, flags) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: ptr/len describe a mapping created in `new` and never unmapped before.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// The highest user address plus one on x86-64 (`TASK_SIZE_MAX`), as `access_ok` checks it.
pub(crate) const TASK_SIZE_MAX: u64 = (1 << 47) - 4096;

/// `access_ok(addr, size)`: the range lies in the user half of the address space. Says nothing
/// about whether it is mapped.
pub(crate) fn access_ok(addr: u64, size: u64) -> bool {
    addr.checked_add(size)
        .is_some_and(|end| end <= TASK_SIZE_MAX)
}

/// Reads another (or our own) process's memory with `process_vm_readv`. Any failure or short
/// transfer is `EFAULT`: nothing is ever dereferenced directly.
pub fn process_vm_read(pid: libc::pid_t, addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
    // SAFETY: `buf` is ours and writable for the whole call.
    unsafe { vm_transfer(pid, buf.as_mut_ptr(), addr, buf.len(), false) }
}

/// Writes into a process's memory with `process_vm_writev`; any failure is `EFAULT`.
pub(crate) fn process_vm_write(pid: libc::pid_t, addr: u64, buf: &[u8]) -> Result<(), Errno> {
    // SAFETY: `buf` is ours and readable for the whole call; writing to the remote side, the
    // kernel only reads the local one.
    unsafe { vm_transfer(pid, buf.as_ptr().cast_mut(), addr, buf.len(), true) }
}

/// The most pieces one `process_vm_writev` is given (the kernel's `UIO_MAXIOV` is 1024).
const PIECES_PER_CALL: usize = 1024;

/// Writes the pieces `[start, end)` of `buf` into process `pid`'s memory at `remote + start`,
/// with one `process_vm_writev` for up to [`PIECES_PER_CALL`] of them; the remote address of the
/// first piece that could not be written whole (the others are written).
pub(crate) fn process_vm_write_pieces(
    pid: libc::pid_t,
    remote: u64,
    buf: &[u8],
    pieces: &[(usize, usize)],
) -> Result<(), u64> {
    let at = |start: usize| remote.wrapping_add(start as u64);
    let mut first = Ok(());
    for batch in pieces.chunks(PIECES_PER_CALL) {
        let mut local = Vec::with_capacity(batch.len());
        let mut far = Vec::with_capacity(batch.len());
        let mut total = 0usize;
        let mut valid = true;
        for &(start, end) in batch {
            let Some(bytes) = buf.get(start..end) else {
                valid = false;
                break;
            };
            let Ok(r) = addr_at(at(start), 0, bytes.len()) else {
                valid = false;
                break;
            };
            local.push(libc::iovec {
                iov_base: bytes.as_ptr().cast_mut().cast(),
                iov_len: bytes.len(),
            });
            far.push(libc::iovec {
                iov_base: r as *mut libc::c_void,
                iov_len: bytes.len(),
            });
            total += bytes.len();
        }
        if valid && !local.is_empty() {
            // SAFETY: every local iovec is a piece of `buf`, readable for the call (writing to
            // the remote side, the kernel only reads the local one); the remote side is only
            // accessed by the kernel, which fails cleanly on unmapped memory. The counts are at
            // most PIECES_PER_CALL.
            let n = unsafe {
                libc::process_vm_writev(
                    pid,
                    local.as_ptr(),
                    local.len() as libc::c_ulong,
                    far.as_ptr(),
                    far.len() as libc::c_ulong,
                    0,
                )
            };
            if usize::try_from(n).is_ok_and(|n| n == total) {
                continue;
            }
        }
        // A piece could not be written (or is out of range): each on its own, to find which.
        for &(start, end) in batch {
            let ok = buf
                .get(start..end)
                .is_some_and(|b| process_vm_write(pid, at(start), b).is_ok());
            if !ok {
                first = first.and(Err(at(start)));
            }
        }
    }
    first
}

fn addr_at(addr: u64, done: usize, len: usize) -> Result<usize, Errno> {
    let start = addr.checked_add(done as u64).ok_or(Errno::EFAULT)?;
    let end = start.checked_add(len as u64).ok_or(Errno::EFAULT)?;
    if end > TASK_SIZE_MAX {
        return Err(Errno::EFAULT);
    }
    usize::try_from(start).map_err(|_| Errno::EFAULT)
}

/// Frees `[offset, offset + len)` of `fd`'s storage, keeping its size
/// (`fallocate(PUNCH_HOLE | KEEP_SIZE)`): the range reads as zeros afterwards, also through
/// shared mappings of it.
pub(crate) fn punch_hole(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<()> {
    let flags = rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE;
    rustix::fs::fallocate(fd, flags, offset, len).map_err(io::Error::from)
}

/// Where the next data of `fd` at or after offset `at` starts (`lseek(SEEK_DATA)`): `None` when
/// only a hole follows. Where the file system does not tell, `Some(at)`: everything is data.
/// Cheap: for shmem it returns at once when `at` holds data and skips holes by the page cache's
/// tree (`SEEK_HOLE`, by contrast, walks every page of data up to the hole).
pub(crate) fn next_data(fd: BorrowedFd<'_>, at: u64) -> Option<u64> {
    match rustix::fs::seek(fd, rustix::fs::SeekFrom::Data(at)) {
        Ok(next) => Some(next.max(at)),
        Err(rustix::io::Errno::NXIO) => None,
        Err(_) => Some(at),
    }
}

/// Zeros that are never written: pages of it that are read map the kernel's shared zero page.
static ZEROS: [u8; 1 << 20] = [0; 1 << 20];

/// Writes `len` zero bytes into process `pid`'s memory at `addr` (`process_vm_writev` out of a
/// static zero buffer); any failure is `EFAULT`.
pub(crate) fn process_vm_write_zeros(pid: libc::pid_t, addr: u64, len: u64) -> Result<(), Errno> {
    let mut done = 0u64;
    while done < len {
        let n = usize::try_from(len - done).map_or(ZEROS.len(), |l| l.min(ZEROS.len()));
        let at = addr.checked_add(done).ok_or(Errno::EFAULT)?;
        process_vm_write(pid, at, &ZEROS[..n])?;
        done += n as u64;
    }
    Ok(())
}

/// `DMA_BUF_MAGIC`, the file system magic of dma-buf files.
const DMA_BUF_MAGIC: u64 = 0x444d_4142;

/// Whether fd `raw` of OS process `pid` is a dma-buf (by its file system's magic).
pub(crate) fn is_dmabuf(pid: libc::pid_t, raw: RawFd) -> bool {
    rustix::fs::statfs(format!("/proc/{pid}/fd/{raw}").as_str())
        .is_ok_and(|s| u64::try_from(s.f_type).is_ok_and(|t| t == DMA_BUF_MAGIC))
}

/// One mapping of a process's address space, as `/proc/PID/smaps` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Vma {
    /// Start address.
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// A device mapping: `VM_IO`, `VM_PFNMAP` or `VM_MIXEDMAP` (`io`, `pf`, `mm` in `VmFlags`).
    pub device: bool,
}

/// The mappings of OS process `pid`, in address order (`/proc/PID/smaps`).
pub(crate) fn vmas_of(pid: libc::pid_t) -> io::Result<Vec<Vma>> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps"))?;
    let mut out: Vec<Vma> = Vec::new();
    for line in smaps.lines() {
        if let Some(flags) = line.strip_prefix("VmFlags:") {
            if let Some(last) = out.last_mut() {
                last.device = flags
                    .split_whitespace()
                    .any(|f| matches!(f, "io" | "pf" | "mm"));
            }
            continue;
        }
        let Some((range, _)) = line.split_once(' ') else {
            continue;
        };
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        if let (Ok(start), Ok(end)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
            out.push(Vma {
                start,
                end,
                device: false,
            });
        }
    }
    Ok(out)
}

/// Nanoseconds of a clock (`CLOCK_MONOTONIC_RAW`, `CLOCK_BOOTTIME`).
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into `ts` only.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nsecs = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nsecs)
}

/// Our own pid.
pub fn own_pid() -> libc::pid_t {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

/// Plain data: any byte pattern of `size_of::<Self>()` bytes is a valid value, and the type has no
/// padding, so its bytes can be copied out.
///
/// # Safety
///
/// Implement only for `repr(C)` structs of integers (and arrays/unions of such) without padding.
pub(crate) unsafe trait Pod: Copy + 'static {
    /// Reads a value from the start of `bytes`; `None` if there are too few bytes.
    fn read_from(bytes: &[u8]) -> Option<Self> {
        if bytes.len() < std::mem::size_of::<Self>() {
            return None;
        }
        // SAFETY: the source has at least size_of::<Self>() initialised bytes, the read is
        // unaligned-safe, and every bit pattern is valid for Self (trait contract).
        Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<Self>()) })
    }

    /// Writes the value's bytes to the start of `bytes`; `false` if there is no room.
    fn write_to(&self, bytes: &mut [u8]) -> bool {
        let n = std::mem::size_of::<Self>();
        if bytes.len() < n {
            return false;
        }
        // SAFETY: Self has no padding (trait contract), so all n bytes are initialised; the
        // destination has room for n bytes and is a distinct buffer.
        unsafe {
            std::ptr::copy_nonoverlapping((self as *const Self).cast::<u8>(), bytes.as_mut_ptr(), n)
        };
        true
    }
}

macro_rules! pod {
    ($($t:ty),* $(,)?) => {
        $(
            // SAFETY: a bindgen repr(C) struct of u32/u64 fields laid out without padding (its
            // size equals the sum of its fields; checked by `pod_types_have_no_padding`).
            unsafe impl Pod for $t {}
        )*
    };
}

use kfd_sys as sys;

pod!(
    sys::kfd_ioctl_get_version_args,
    sys::kfd_ioctl_create_queue_args,
    sys::kfd_ioctl_destroy_queue_args,
    sys::kfd_ioctl_update_queue_args,
    sys::kfd_ioctl_set_cu_mask_args,
    sys::kfd_ioctl_get_queue_wave_state_args,
    sys::kfd_ioctl_get_available_memory_args,
    sys::kfd_ioctl_set_memory_policy_args,
    sys::kfd_ioctl_get_clock_counters_args,
    sys::kfd_process_device_apertures,
    sys::kfd_ioctl_get_process_apertures_args,
    sys::kfd_ioctl_get_process_apertures_new_args,
    sys::kfd_ioctl_create_event_args,
    sys::kfd_ioctl_destroy_event_args,
    sys::kfd_ioctl_set_event_args,
    sys::kfd_ioctl_reset_event_args,
    sys::kfd_event_data,
    sys::kfd_ioctl_wait_events_args,
    sys::kfd_ioctl_set_scratch_backing_va_args,
    sys::kfd_ioctl_get_tile_config_args,
    sys::kfd_ioctl_set_trap_handler_args,
    sys::kfd_ioctl_acquire_vm_args,
    sys::kfd_ioctl_alloc_memory_of_gpu_args,
    sys::kfd_ioctl_free_memory_of_gpu_args,
    sys::kfd_ioctl_map_memory_to_gpu_args,
    sys::kfd_ioctl_unmap_memory_from_gpu_args,
    sys::kfd_ioctl_alloc_queue_gws_args,
    sys::kfd_ioctl_get_dmabuf_info_args,
    sys::kfd_ioctl_import_dmabuf_args,
    sys::kfd_ioctl_smi_events_args,
    sys::kfd_ioctl_set_xnack_mode_args,
    sys::kfd_criu_device_bucket,
    sys::kfd_criu_bo_bucket,
    sys::kfd_ioctl_svm_attribute,
);

/// What a caught panic said: its `&str` or `String` payload, or "(no message)".
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of;

    /// The transfer of `len` bytes at `offset` with process `pid`'s memory at `remote`.
    fn transfer(offset: u64, len: u64, pid: libc::pid_t, remote: u64) -> Transfer {
        Transfer {
            offset,
            len,
            pid,
            remote,
        }
    }

    #[test]
    fn pod_types_have_no_padding() {
        // Sizes from the reference table; a padded layout would be larger than its fields.
        assert_eq!(size_of::<sys::kfd_ioctl_create_queue_args>(), 88);
        assert_eq!(size_of::<sys::kfd_event_data>(), 48);
        assert_eq!(size_of::<sys::kfd_process_device_apertures>(), 56);
        assert_eq!(size_of::<sys::kfd_ioctl_get_process_apertures_args>(), 400);
        assert_eq!(size_of::<sys::kfd_criu_bo_bucket>(), 48);
        assert_eq!(size_of::<sys::kfd_criu_device_bucket>(), 16);
        assert_eq!(size_of::<sys::kfd_ioctl_set_xnack_mode_args>(), 4);
        assert_eq!(size_of::<sys::kfd_ioctl_get_dmabuf_info_args>(), 32);
    }

    #[test]
    fn own_memory_round_trips_and_wild_pointers_fault() {
        let src = [1u8, 2, 3, 4, 5];
        let mut dst = [0u8; 5];
        process_vm_read(own_pid(), src.as_ptr() as u64, &mut dst).unwrap();
        assert_eq!(dst, src);
        let mut target = [0u8; 3];
        process_vm_write(own_pid(), target.as_mut_ptr() as u64, &[9, 8, 7]).unwrap();
        assert_eq!(target, [9, 8, 7]);
        assert_eq!(process_vm_read(own_pid(), 8, &mut dst), Err(Errno::EFAULT));
        assert_eq!(
            process_vm_read(own_pid(), u64::MAX - 2, &mut dst),
            Err(Errno::EFAULT)
        );
        assert_eq!(
            process_vm_write(own_pid(), 0xdead_0000_0000, &[1]),
            Err(Errno::EFAULT)
        );
    }

    #[test]
    fn read_from_process_fills_the_memfd_and_faults_cleanly() {
        let fd = memfd("kfd-sim:test").unwrap();
        let len = 2 * BOUNCE_BYTES + 4096;
        let map = SharedMap::new(std::os::fd::AsFd::as_fd(&fd), len as u64 + 8192).unwrap();
        let src: Vec<u8> = (0..len).map(|i| (i * 31 % 251).to_le_bytes()[0]).collect();
        let fdb = std::os::fd::AsFd::as_fd(&fd);
        map.read_from_process(
            fdb,
            transfer(4097, len as u64, own_pid(), src.as_ptr() as u64),
        )
        .unwrap();
        let mut back = vec![0u8; len + 2];
        assert!(map.read(4096, &mut back));
        assert_eq!(back[0], 0);
        assert_eq!(&back[1..=len], &src[..]);
        assert_eq!(back[len + 1], 0);
        // Out of the BO, a wild pointer, an address past the user half: EFAULT, no panic.
        let big = len as u64 + 8192;
        assert_eq!(
            map.read_from_process(fdb, transfer(big - 1, 2, own_pid(), src.as_ptr() as u64)),
            Err(Errno::EFAULT)
        );
        assert_eq!(
            map.read_from_process(fdb, transfer(0, 4096, own_pid(), 0xdead_0000_0000)),
            Err(Errno::EFAULT)
        );
        assert_eq!(
            map.read_from_process(fdb, transfer(0, 4096, own_pid(), u64::MAX - 8)),
            Err(Errno::EFAULT)
        );
    }

    /// Runs `f` with the pid of a forked child that only sleeps: its memory is a copy of ours
    /// (same addresses, same bytes at the fork), and it is another process, so a transfer with it
    /// takes the cross-process path. The child is killed and reaped afterwards.
    fn with_forked_child<R>(f: impl FnOnce(libc::pid_t) -> R) -> R {
        // SAFETY: the child calls only async-signal-safe functions (pause, _exit) before it is
        // killed; the parent goes on as usual.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork: {}", io::Error::last_os_error());
        if child == 0 {
            loop {
                // SAFETY: pause has no preconditions.
                unsafe { libc::pause() };
            }
        }
        let out = f(child);
        // SAFETY: `child` is our own child; kill and waitpid on it touch nothing else.
        unsafe {
            libc::kill(child, libc::SIGKILL);
            libc::waitpid(child, std::ptr::null_mut(), 0);
        }
        out
    }

    #[test]
    fn transfers_with_our_own_memory_and_another_process_move_the_same_bytes() {
        let len = 2 * BOUNCE_BYTES + 4096 + 3;
        let src: Vec<u8> = (0..len).map(|i| (i * 13 % 253).to_le_bytes()[0]).collect();
        let mut own_out = vec![0u8; len];
        let out_addr = own_out.as_mut_ptr() as u64;
        let fill = |pid| {
            let fd = memfd("kfd-sim:test").unwrap();
            let fdb = std::os::fd::AsFd::as_fd(&fd);
            let map = SharedMap::new(fdb, len as u64 + 8192).unwrap();
            map.read_from_process(fdb, transfer(4095, len as u64, pid, src.as_ptr() as u64))
                .unwrap();
            let mut back = vec![0u8; len];
            assert!(map.read(4095, &mut back));
            assert!(back == src, "memfd filled from pid {pid}");
            (fd, map)
        };
        let (fd, map) = fill(own_pid());
        let fdb = std::os::fd::AsFd::as_fd(&fd);
        map.write_to_process(fdb, transfer(4095, len as u64, own_pid(), out_addr))
            .unwrap();
        assert!(own_out == src, "memfd copied into our own memory");
        // The child's copy of `own_out` is at the same address; read it back from there.
        with_forked_child(|child| {
            let (fd, map) = fill(child);
            let fdb = std::os::fd::AsFd::as_fd(&fd);
            map.write_to_process(fdb, transfer(4096, 16, child, out_addr))
                .unwrap();
            let mut got = [0u8; 16];
            process_vm_read(child, out_addr, &mut got).unwrap();
            assert_eq!(got[..], src[1..17]);
            assert_eq!(
                map.write_to_process(fdb, transfer(0, 16, child, 0xdead_0000_0000)),
                Err(Errno::EFAULT)
            );
        });
        // A range that runs into unmapped memory, and a read-only destination: EFAULT.
        assert_eq!(
            map.write_to_process(fdb, transfer(0, 16, own_pid(), ZEROS.as_ptr() as u64)),
            Err(Errno::EFAULT)
        );
        assert_eq!(
            map.write_to_process(fdb, transfer(0, 4096, own_pid(), 0xdead_0000_0000)),
            Err(Errno::EFAULT)
        );
    }

    #[test]
    fn shared_map_is_bounds_checked() {
        let fd = memfd("kfd-sim:test").unwrap();
        let map = SharedMap::new(std::os::fd::AsFd::as_fd(&fd), 4096).unwrap();
        assert!(map.write(4090, &[1; 6]));
        assert!(!map.write(4091, &[1; 6]));
        let mut b = [0u8; 6];
        assert!(map.read(4090, &mut b));
        assert_eq!(b, [1; 6]);
        assert!(!map.read(u64::MAX, &mut b));
    }
}
