//! libhsakmt's shared memory file (`/dev/shm/hsakmt_shared_mem`): its size and first word are
//! saved at dump and the file is recreated at restore when it is missing, and with it
//! libhsakmt's named semaphore (`sem_open("hsakmt_semaphore")`, the file
//! `/dev/shm/sem.hsakmt_semaphore`), as upstream's plugin does.
//!
//! libhsakmt maps both files. On the node a process is restored onto they may not exist (another
//! machine, or a reboot emptied `/dev/shm`), and criu, which restores the process's mappings of
//! them by path after its files (the plugin's RESTORE_EXT_FILE among them), would then fail. So
//! the plugin recreates them in RESTORE_EXT_FILE: the shared memory with its recorded size and
//! first word (the rest, libhsakmt's counters, is lost, as upstream loses it), the semaphore
//! unlocked.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// What is recorded of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SharedMem {
    /// Its size.
    pub size: u64,
    /// Its first four bytes, native-endian.
    pub magic: u32,
}

impl SharedMem {
    /// Reads the record of the file at `path`, `None` when there is no such file, or when it is
    /// not a regular file: opened without waiting, so that a FIFO put there cannot block the
    /// dump (as a plain open would, forever), and a device is not read.
    pub(crate) fn probe(path: &Path) -> Option<Self> {
        let mut f: File = match topology::sysfs::open_regular(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(e) => {
                log::warn!(
                    "{}: {e}; libhsakmt's shared memory is not recorded",
                    path.display()
                );
                return None;
            }
        };
        let size = f.metadata().ok()?.len();
        let mut head = [0u8; 4];
        let magic = if f.read_exact(&mut head).is_ok() {
            u32::from_ne_bytes(head)
        } else {
            0
        };
        Some(Self { size, magic })
    }

    /// Creates the file at `path` with the recorded size and first word, unless it exists.
    pub(crate) fn recreate(&self, path: &Path) -> std::io::Result<()> {
        use std::io::Write;
        let mut f = match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o666)
            .open(path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
            Err(e) => return Err(e),
        };
        f.set_len(self.size)?;
        if self.size >= 4 {
            f.write_all(&self.magic.to_ne_bytes())?;
        }
        Ok(())
    }
}

/// The file name of libhsakmt's semaphore in the shared memory directory: glibc's `sem_open`
/// keeps semaphore `NAME` in `/dev/shm/sem.NAME`, and libhsakmt's is `hsakmt_semaphore`.
pub(crate) const HSAKMT_SEM_FILE: &str = "sem.hsakmt_semaphore";

/// A process-shared POSIX semaphore with count `value`, as glibc lays out the `sem_t` that
/// `sem_open` keeps in its file on 64-bit Linux (`struct new_sem`, 32 bytes): a 64-bit word with
/// the count in its low half and the number of waiters (none) in its high half, then the futex
/// flag word of a shared semaphore (128, the value of `FUTEX_PRIVATE_FLAG`, which glibc stores for
/// shared semaphores and XORs into its futex calls), zero padding.
fn glibc_semaphore(value: u32) -> [u8; 32] {
    let mut sem = [0u8; 32];
    sem[..8].copy_from_slice(&u64::from(value).to_ne_bytes());
    sem[8..12].copy_from_slice(&128u32.to_ne_bytes());
    sem
}

/// Creates semaphore file `name` in `dir` with count 1 (unlocked) unless it exists, as
/// `sem_open(NAME, O_CREAT, 0666, 1)` does: written whole under a temporary name and linked to
/// `name`, so that a process opening it meanwhile never sees it half-written, and a semaphore
/// created meanwhile by someone else is kept. Returns whether it created it.
///
/// # Errors
/// Creating, writing or linking the file failed.
pub(crate) fn recreate_semaphore(dir: &Path, name: &str) -> io::Result<bool> {
    use std::io::Write;
    let path = dir.join(name);
    if path.exists() {
        return Ok(false);
    }
    let temp = dir.join(format!(".{name}.{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o666)
        .open(&temp)?;
    let linked = f
        .write_all(&glibc_semaphore(1))
        .and_then(|()| std::fs::hard_link(&temp, &path));
    let _ = std::fs::remove_file(&temp);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recreates_what_it_probed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hsakmt_shared_mem");
        assert_eq!(SharedMem::probe(&path), None);
        let rec = SharedMem {
            size: 4096,
            magic: 0x4b46_4453,
        };
        rec.recreate(&path).unwrap();
        assert_eq!(SharedMem::probe(&path), Some(rec));
        // An existing file is left alone.
        SharedMem { size: 8, magic: 1 }.recreate(&path).unwrap();
        assert_eq!(SharedMem::probe(&path), Some(rec));
    }

    /// A FIFO (whose plain open waits for a writer forever) or a device where the file should
    /// be: no record, at once.
    #[test]
    fn a_special_file_is_no_record() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("hsakmt_shared_mem");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo(3) with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(SharedMem::probe(&fifo), None);
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        assert_eq!(SharedMem::probe(&zero), None);
    }

    #[test]
    fn recreates_the_semaphore_unlocked_unless_it_exists() {
        let dir = tempfile::tempdir().unwrap();
        assert!(recreate_semaphore(dir.path(), HSAKMT_SEM_FILE).unwrap());
        let path = dir.path().join(HSAKMT_SEM_FILE);
        assert_eq!(std::fs::read(&path).unwrap(), glibc_semaphore(1));
        // Only the semaphore is left in the directory: the temporary name is gone.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        // An existing semaphore (here one whose count was taken) is left alone.
        std::fs::write(&path, glibc_semaphore(0)).unwrap();
        assert!(!recreate_semaphore(dir.path(), HSAKMT_SEM_FILE).unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), glibc_semaphore(0));
    }

    /// Where glibc is the C library: the file is byte for byte what glibc's `sem_open` creates,
    /// and glibc's `sem_open` and `sem_trywait` use it as an unlocked semaphore.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn the_semaphore_is_glibcs() {
        use std::ffi::CString;
        let shm = Path::new("/dev/shm");
        if !shm.is_dir() {
            eprintln!("SKIPPED: no /dev/shm");
            return;
        }
        let name = format!("amdgpu-cr-test-{}", std::process::id());
        let cname = CString::new(name.clone()).unwrap();
        let file = shm.join(format!("sem.{name}"));

        // glibc's own, created with count 1.
        // SAFETY: a valid C string; mode and value are passed as the unsigned ints sem_open reads.
        let sem = unsafe {
            libc::sem_open(
                cname.as_ptr(),
                libc::O_CREAT,
                0o666 as libc::c_uint,
                1 as libc::c_uint,
            )
        };
        assert_ne!(sem, libc::SEM_FAILED, "{}", io::Error::last_os_error());
        // SAFETY: sem came from sem_open.
        unsafe { libc::sem_close(sem) };
        let glibcs = std::fs::read(&file).unwrap();
        std::fs::remove_file(&file).unwrap();
        assert_eq!(glibcs, glibc_semaphore(1));

        // Ours, used by glibc: taken once, then busy.
        assert!(recreate_semaphore(shm, &format!("sem.{name}")).unwrap());
        // SAFETY: as above; without O_CREAT sem_open takes no further arguments.
        let sem = unsafe { libc::sem_open(cname.as_ptr(), 0) };
        assert_ne!(sem, libc::SEM_FAILED, "{}", io::Error::last_os_error());
        // SAFETY: sem came from sem_open and stays open until sem_close.
        let (first, second) = unsafe { (libc::sem_trywait(sem), libc::sem_trywait(sem)) };
        let busy = io::Error::last_os_error();
        // SAFETY: as above.
        unsafe { libc::sem_close(sem) };
        std::fs::remove_file(&file).unwrap();
        assert_eq!((first, second), (0, -1));
        assert_eq!(busy.raw_os_error(), Some(libc::EAGAIN));
    }
}
