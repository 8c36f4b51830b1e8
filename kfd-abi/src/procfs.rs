//! Bounded reads of the `/proc` files the plugin reads at dump and restore: a leaf below the
//! transports and the platform, which both use it.

use std::io;

/// The most bytes read of a `/proc` file (`status` and `fdinfo` hold well under a page).
pub(crate) const PROC_FILE_LIMIT: u64 = 64 << 10;

/// Reads a `/proc` file the plugin reads at dump or restore (`/proc/PID/status`,
/// `/proc/self/fdinfo/FD`): opened without waiting, a regular file (procfs's are), at most
/// `PROC_FILE_LIMIT` (64 KiB) bytes. A `/proc` that is not procfs (a bind mount of anything) cannot make
/// the dump wait or read without end.
///
/// # Errors
///
/// The open's or read's error; [`io::ErrorKind::InvalidInput`] for what is not a regular file,
/// [`io::ErrorKind::InvalidData`] for more than the limit or text that is not UTF-8.
pub fn read_proc_file(path: impl AsRef<std::path::Path>) -> io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)?;
    if !file.metadata()?.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a /proc file is one)",
        ));
    }
    let mut bytes = Vec::new();
    file.take(PROC_FILE_LIMIT + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > PROC_FILE_LIMIT {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("more than {PROC_FILE_LIMIT} bytes, more than procfs writes there"),
        ));
    }
    String::from_utf8(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}
