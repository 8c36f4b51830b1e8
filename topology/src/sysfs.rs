//! Reading one sysfs file the way the kernel serves it: a regular file of at most a page.
//!
//! A sysfs attribute's `show()` writes at most `PAGE_SIZE` bytes, and reading it never waits. A
//! topology root given by a user may hold anything instead: a link to `/dev/zero` (which would
//! be read until memory runs out), a FIFO (whose open and read would wait for a writer forever),
//! a file far larger than any attribute. [`read_sysfs_file`] refuses all of these at once,
//! naming what the file is, and needs no timeout because nothing it does can wait.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The most bytes a sysfs attribute holds: one page (`sysfs_emit` writes at most `PAGE_SIZE`).
#[must_use]
pub fn sysfs_file_limit() -> u64 {
    // SAFETY: sysconf(3) reads a configuration value; it has no memory effects.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(page).ok().filter(|&p| p > 0).unwrap_or(4096)
}

/// What a file that is not a regular file is, for messages: "a FIFO", "a character device".
#[must_use]
pub fn special_kind(t: std::fs::FileType) -> Option<&'static str> {
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else if t.is_socket() {
        Some("a socket")
    } else {
        Some("not a regular file")
    }
}

/// Opens `path` for reading without waiting (a FIFO's open returns at once) and refuses anything
/// but a regular file.
///
/// # Errors
///
/// The open's error, or [`io::ErrorKind::InvalidInput`] naming what the file is instead.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)?;
    match special_kind(file.metadata()?.file_type()) {
        None => Ok(file),
        Some(kind) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("it is {kind}, not a regular file"),
        )),
    }
}

/// Reads `path` whole, at most `limit` bytes, as text.
///
/// # Errors
///
/// [`open_regular`]'s; [`io::ErrorKind::InvalidData`] when it holds more than `limit` bytes or
/// is not UTF-8; the read's error.
pub fn read_bounded(path: &Path, limit: u64) -> io::Result<String> {
    let file = open_regular(path)?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("it holds more than {limit} bytes, more than the kernel writes there"),
        ));
    }
    String::from_utf8(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Reads a sysfs attribute: [`read_bounded`] with [`sysfs_file_limit`].
///
/// # Errors
///
/// See [`read_bounded`].
pub fn read_sysfs_file(path: &Path) -> io::Result<String> {
    read_bounded(path, sysfs_file_limit())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_small_regular_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("gpu_id");
        std::fs::write(&p, "1234\n").unwrap();
        assert_eq!(read_sysfs_file(&p).unwrap(), "1234\n");
    }

    /// procfs files are regular files whose size says 0: read to their end all the same.
    #[test]
    fn a_proc_file_is_read() {
        let status = read_bounded(Path::new("/proc/self/status"), 64 << 10).unwrap();
        assert!(status.contains("\nPid:"), "{status}");
    }

    #[test]
    fn the_limit_is_exact() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("properties");
        std::fs::write(&p, "x".repeat(10)).unwrap();
        assert_eq!(read_bounded(&p, 10).unwrap().len(), 10);
        let e = read_bounded(&p, 9).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("more than 9 bytes"), "{e}");
    }

    #[test]
    fn dev_zero_and_a_fifo_are_refused_without_reading() {
        let dir = tempfile::tempdir().unwrap();
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let e = read_sysfs_file(&zero).unwrap_err();
        assert!(e.to_string().contains("a character device"), "{e}");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo(3) with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_sysfs_file(&fifo).unwrap_err();
        assert!(e.to_string().contains("a FIFO"), "{e}");
    }
}
