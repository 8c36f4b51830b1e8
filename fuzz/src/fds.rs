//! This process's file descriptor table, to tell which fds a step left open.
//!
//! The simulator's files and the fds that its ioctls install "in the calling process" are fds of
//! this OS process, so a leak of the simulated process is a new entry here. Callers take a
//! snapshot before and after a step, with no other thread opening or closing files meanwhile
//! (each fuzz target runs one input at a time; each test that checks fds is alone in its test
//! binary or runs under nextest, one process per test).

use std::collections::BTreeMap;
use std::fmt;
use std::io;

/// The open fds of this process and what each is open on (`/proc/self/fd/N`'s link).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FdTable(BTreeMap<i32, String>);

impl FdTable {
    /// The table now. The directory stream that lists `/proc/self/fd` is not part of it.
    pub fn snapshot() -> io::Result<Self> {
        let mut fds = BTreeMap::new();
        for entry in std::fs::read_dir("/proc/self/fd")? {
            let entry = entry?;
            let Some(fd) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            // The listing's own fd is gone by the time it would be read (or links to the
            // listed directory itself).
            let Ok(target) = std::fs::read_link(entry.path()) else {
                continue;
            };
            let target = target.to_string_lossy().into_owned();
            if target.starts_with("/proc/") && target.ends_with("/fd") {
                continue;
            }
            fds.insert(fd, target);
        }
        Ok(Self(fds))
    }

    /// The fds open now that were not open (on the same file) in `earlier`.
    pub fn opened_since(&self, earlier: &FdTable) -> FdTable {
        FdTable(
            self.0
                .iter()
                .filter(|(fd, target)| earlier.0.get(fd) != Some(target))
                .map(|(fd, target)| (*fd, target.clone()))
                .collect(),
        )
    }

    /// Whether there is no fd.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The number of fds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The fd numbers.
    pub fn fds(&self) -> impl Iterator<Item = i32> + '_ {
        self.0.keys().copied()
    }
}

impl fmt::Display for FdTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (fd, target)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{fd} -> {target}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_opened_between_two_snapshots_is_reported_and_nothing_else() {
        let before = FdTable::snapshot().expect("snapshot");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("left-open");
        let file = std::fs::File::create(&path).expect("create");
        let after = FdTable::snapshot().expect("snapshot");
        let new = after.opened_since(&before);
        assert_eq!(new.len(), 1, "{new}");
        assert!(new.to_string().ends_with("/left-open"), "{new}");
        drop(file);
        let closed = FdTable::snapshot().expect("snapshot");
        assert!(closed.opened_since(&before).is_empty());
    }
}
