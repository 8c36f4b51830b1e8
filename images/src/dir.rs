//! Files relative to the image directory's fd: criu hands the plugin an fd, not a path.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd};

/// Mode of every image file we create, as upstream: owner read/write only.
pub const IMAGE_FILE_MODE: libc::mode_t = 0o600;

fn c_name(name: &str) -> io::Result<CString> {
    if name.is_empty() || name.contains('/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a plain file name"),
        ));
    }
    CString::new(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

fn open_at(dir: BorrowedFd<'_>, name: &str, flags: libc::c_int) -> io::Result<File> {
    let c = c_name(name)?;
    loop {
        // SAFETY: `dir` is a live fd for the duration of the borrow, `c` is a NUL-terminated
        // string that outlives the call, and the mode argument is passed as the variadic
        // `mode_t` (promoted to `c_uint`) that openat reads when O_CREAT is set.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                c.as_ptr(),
                flags,
                libc::c_uint::from(IMAGE_FILE_MODE),
            )
        };
        if fd >= 0 {
            // SAFETY: openat just returned this fd to us; nothing else owns it.
            return Ok(unsafe { File::from_raw_fd(fd) });
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Creates `name` in `dir` for writing: mode 0600 when new, old content truncated, close-on-exec.
///
/// # Errors
/// The `openat(2)` error (for example `EACCES`, `ENOSPC`), or `InvalidInput` when `name` is not
/// a plain file name.
pub fn create_at(dir: BorrowedFd<'_>, name: &str) -> io::Result<File> {
    open_at(
        dir,
        name,
        libc::O_CREAT | libc::O_TRUNC | libc::O_WRONLY | libc::O_CLOEXEC,
    )
}

/// Opens `name` in `dir` read-only, close-on-exec.
///
/// # Errors
/// The `openat(2)` error (`NotFound` when there is no such image), or `InvalidInput` when `name`
/// is not a plain file name.
pub fn open_read_at(dir: BorrowedFd<'_>, name: &str) -> io::Result<File> {
    open_at(dir, name, libc::O_RDONLY | libc::O_CLOEXEC)
}

/// Drops the page cache of `file` (`posix_fadvise(POSIX_FADV_DONTNEED)` over the whole file),
/// so that the next read comes from the device. Dirty pages must be synced first to be dropped.
///
/// # Errors
/// The `posix_fadvise(2)` error.
pub fn drop_page_cache(file: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: posix_fadvise reads only the fd number and the range; it touches no memory of ours.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// Advises the kernel that `file` will be read sequentially (`POSIX_FADV_SEQUENTIAL`: a larger
/// read-ahead window). Only a hint: errors are ignored.
pub fn advise_sequential(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: posix_fadvise reads only the fd number and the range; it touches no memory of ours.
    let _ = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL) };
}

/// Starts reading `[offset, offset + len)` of `file` into the page cache in the background
/// (`POSIX_FADV_WILLNEED`), so that later reads find it there. Only a hint: errors (and ranges
/// past the end) are ignored.
pub fn read_ahead(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(off), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return;
    };
    // SAFETY: as in `advise_sequential`.
    let _ = unsafe { libc::posix_fadvise(file.as_raw_fd(), off, len, libc::POSIX_FADV_WILLNEED) };
}

/// Starts writing back `[offset, offset + len)` of `file` (`sync_file_range` with
/// `SYNC_FILE_RANGE_WRITE`: queues the dirty pages for the disk without waiting for them). Only a
/// hint: errors are ignored.
pub fn write_behind(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(off), Ok(len)) = (
        libc::off64_t::try_from(offset),
        libc::off64_t::try_from(len),
    ) else {
        return;
    };
    // SAFETY: sync_file_range reads only the fd number, the range and the flags.
    let _ =
        unsafe { libc::sync_file_range(file.as_raw_fd(), off, len, libc::SYNC_FILE_RANGE_WRITE) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn create_is_0600_and_truncates() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = File::open(tmp.path()).unwrap();
        std::fs::write(tmp.path().join("a.img"), b"old content, longer").unwrap();
        let mut f = create_at(dir.as_fd(), "a.img").unwrap();
        f.write_all(b"new").unwrap();
        drop(f);
        let mut s = String::new();
        open_read_at(dir.as_fd(), "a.img")
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "new");
        create_at(dir.as_fd(), "b.img").unwrap();
        let mode = std::fs::metadata(tmp.path().join("b.img"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn rejects_paths_and_reports_missing() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = File::open(tmp.path()).unwrap();
        let e = create_at(dir.as_fd(), "../x.img").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let e = open_read_at(dir.as_fd(), "missing.img").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }
}
