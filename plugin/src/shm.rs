//! libhsakmt's shared memory file (`/dev/shm/hsakmt_shared_mem`): its size and first word are
//! saved at dump and the file is recreated at restore when it is missing.

use std::fs::File;
use std::io::Read;
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
    /// Reads the record of the file at `path`, `None` when there is no such file.
    pub(crate) fn probe(path: &Path) -> Option<Self> {
        let mut f = File::open(path).ok()?;
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
}
