//! Files relative to the image directory's fd: criu hands the plugin an fd, not a path.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd};

/// Mode of every image file we create, as upstream: owner read/write only.
pub(crate) const IMAGE_FILE_MODE: libc::mode_t = 0o600;

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
pub(crate) fn create_at(dir: BorrowedFd<'_>, name: &str) -> io::Result<File> {
    open_at(
        dir,
        name,
        libc::O_CREAT | libc::O_TRUNC | libc::O_WRONLY | libc::O_CLOEXEC,
    )
}

/// A file of the image directory that is not a regular file (after symlinks): a FIFO or a
/// device can block a reader forever or never end, a directory has no content.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("it is {kind}, not a regular file; an image file must be a regular file")]
pub struct NotRegularFile {
    /// What it is instead ("a FIFO", "a character device", ...).
    pub kind: &'static str,
}

impl NotRegularFile {
    /// `Err` when `meta` is not that of a regular file.
    ///
    /// # Errors
    /// [`NotRegularFile`] naming what the file is.
    pub fn check(meta: &std::fs::Metadata) -> Result<(), Self> {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        let kind = if t.is_file() {
            return Ok(());
        } else if t.is_fifo() {
            "a FIFO"
        } else if t.is_char_device() {
            "a character device"
        } else if t.is_block_device() {
            "a block device"
        } else if t.is_dir() {
            "a directory"
        } else if t.is_socket() {
            "a socket"
        } else {
            "not a file"
        };
        Err(Self { kind })
    }
}

impl From<NotRegularFile> for io::Error {
    fn from(e: NotRegularFile) -> Self {
        io::Error::new(io::ErrorKind::InvalidInput, e)
    }
}

/// Opens `name` in `dir` read-only, close-on-exec, and refuses anything but a regular file.
///
/// The open is non-blocking (`O_NONBLOCK`): opening a FIFO for reading would otherwise wait for
/// a writer forever. On a regular file the flag changes nothing (reads, `mmap`, `lseek`).
///
/// # Errors
/// The `openat(2)` error (`NotFound` when there is no such image), `InvalidInput` when `name`
/// is not a plain file name, or `InvalidInput` holding a [`NotRegularFile`] when it is a FIFO,
/// a device, a directory or a socket.
pub fn open_read_at(dir: BorrowedFd<'_>, name: &str) -> io::Result<File> {
    let file = open_at(
        dir,
        name,
        libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK,
    )?;
    NotRegularFile::check(&file.metadata()?)?;
    Ok(file)
}

/// Drops the page cache of `file` (`posix_fadvise(POSIX_FADV_DONTNEED)` over the whole file),
/// so that the next read comes from the device. Dirty pages must be synced first to be dropped.
///
/// # Errors
/// The `posix_fadvise(2)` error.
pub fn drop_page_cache(file: &File) -> io::Result<()> {
    drop_page_cache_from(file, 0)
}

/// As [`drop_page_cache`] for the pages from file offset `offset` (rounded down to a page) to
/// the end.
///
/// # Errors
/// The `posix_fadvise(2)` error; `InvalidInput` for an offset beyond `off_t`.
pub fn drop_page_cache_from(file: &File, offset: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let offset =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: posix_fadvise reads only the fd number and the range; it touches no memory of ours.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), offset, 0, libc::POSIX_FADV_DONTNEED) };
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

    /// A FIFO with no writer: a blocking open would wait for one forever.
    #[test]
    fn a_fifo_without_a_writer_is_refused_not_waited_for() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = File::open(tmp.path()).unwrap();
        let path = CString::new(
            tmp.path()
                .join("a.img")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .unwrap();
        // SAFETY: `path` is a NUL-terminated string that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
        let e = open_read_at(dir.as_fd(), "a.img").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(
            e.to_string(),
            "it is a FIFO, not a regular file; an image file must be a regular file"
        );
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
