//! What an interrupted command leaves behind: the temporary directories it registered here are
//! removed when the binary receives SIGINT (Ctrl-C), SIGTERM or SIGHUP, before it exits.
//!
//! The binary blocks those signals before any thread starts and takes them in one thread of its
//! own (`main.rs`), which calls [`cleanup`]: no work happens in a signal handler, and the
//! threads of a running checkpoint cannot be interrupted half-way by the default action.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// What to remove on an interrupt.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    /// A directory, with everything in it.
    Dir(PathBuf),
    /// Every directory in `parent` whose name starts with `prefix` (scratch directories named
    /// for this process, made by code that does not register them one by one).
    Prefixed {
        /// Where they are.
        parent: PathBuf,
        /// The start of their names.
        prefix: String,
    },
}

/// Set when an interrupt has been taken: the command's own ending (an error from a directory
/// removed under it, or its answer) must not win the race with the cleanup's exit.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Marks the interrupt as taken; for the binary's signal thread, before [`cleanup`].
pub fn begin() {
    INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Whether an interrupt has been taken (the process is about to exit with its status).
#[must_use]
pub fn interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst)
}

/// The command was interrupted: it stops where it is, says nothing more, and leaves the exit to
/// the binary's signal thread (128 + the signal's number).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("interrupted")]
pub struct Interrupted;

/// `Err` once an interrupt has been taken: for a command between its phases, so that none
/// starts after the signal.
///
/// # Errors
///
/// [`Interrupted`].
pub fn check() -> Result<(), Interrupted> {
    if interrupted() {
        Err(Interrupted)
    } else {
        Ok(())
    }
}

/// Registered entries, by registration number.
static ENTRIES: Mutex<Vec<(u64, Entry)>> = Mutex::new(Vec::new());
/// The next registration number.
static NEXT: Mutex<u64> = Mutex::new(0);

/// A registration: dropping it unregisters the entry (the command removed the directory itself,
/// or keeps it).
#[derive(Debug)]
#[must_use = "dropping the registration unregisters it at once"]
pub struct Registration(u64);

impl Drop for Registration {
    fn drop(&mut self) {
        let mut entries = ENTRIES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        entries.retain(|(id, _)| *id != self.0);
    }
}

fn register(entry: Entry) -> Registration {
    let id = {
        let mut next = NEXT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *next += 1;
        *next
    };
    ENTRIES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push((id, entry));
    Registration(id)
}

/// Removes `dir` (and all in it) if the process is interrupted while the registration lives.
pub fn remove_dir_on_interrupt(dir: &Path) -> Registration {
    register(Entry::Dir(dir.to_owned()))
}

/// Removes every directory in `parent` whose name starts with `prefix` if the process is
/// interrupted while the registration lives.
pub fn remove_prefixed_on_interrupt(parent: &Path, prefix: &str) -> Registration {
    register(Entry::Prefixed {
        parent: parent.to_owned(),
        prefix: prefix.to_owned(),
    })
}

/// What [`cleanup`] did.
#[derive(Debug, Default)]
pub struct Cleaned {
    /// The directories removed.
    pub removed: Vec<PathBuf>,
    /// Those that could not be removed, and why.
    pub failed: Vec<(PathBuf, std::io::Error)>,
}

/// A temporary directory in `parent` named for this process (`{base}{pid}-{start}-…`, see
/// `kfd_sim::scratch`): removed when dropped and, while it lives, on an interrupt. Registered
/// before it exists, so that no interrupt finds it unregistered.
#[derive(Debug)]
pub struct ScratchDir {
    /// Removed when dropped, first.
    dir: tempfile::TempDir,
    /// Then unregistered.
    _interrupt: Registration,
}

impl ScratchDir {
    /// Makes the directory.
    ///
    /// # Errors
    ///
    /// The directory's creation error; [`std::io::ErrorKind::Interrupted`] once an interrupt has
    /// been taken (no directory is made after it).
    pub fn new(parent: &Path, base: &str) -> std::io::Result<Self> {
        let prefix = kfd_sim::scratch::owned_prefix(base);
        let interrupt = remove_prefixed_on_interrupt(parent, &prefix);
        // Registered first: an interrupt taken before this check finds the registration in its
        // cleanup; one taken after it is seen here, and nothing is made.
        if interrupted() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                Interrupted,
            ));
        }
        let dir = tempfile::Builder::new()
            .prefix(&prefix)
            .tempdir_in(parent)?;
        Ok(Self {
            dir,
            _interrupt: interrupt,
        })
    }

    /// Its path.
    #[must_use]
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// Removes what is registered. For the binary's signal thread, just before it exits.
///
/// The command's threads run on meanwhile, and one of them may have been about to make a
/// directory of a registered tree when it was removed: the registered places are swept again
/// after a short pause, until a sweep finds nothing left (a few times at most).
pub fn cleanup() -> Cleaned {
    let entries: Vec<Entry> = ENTRIES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .map(|(_, e)| e.clone())
        .collect();
    let mut done = Cleaned::default();
    for _ in 0..SWEEPS {
        let (removed, failed) = sweep(&entries);
        let settled = removed.is_empty();
        for dir in removed {
            if !done.removed.contains(&dir) {
                done.removed.push(dir);
            }
        }
        done.failed = failed;
        if settled {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    done
}

/// How many times [`cleanup`] sweeps at most.
const SWEEPS: usize = 5;

/// One pass over `entries`: the directories removed, and those that could not be.
fn sweep(entries: &[Entry]) -> (Vec<PathBuf>, Vec<(PathBuf, std::io::Error)>) {
    let (mut removed, mut failed) = (Vec::new(), Vec::new());
    for entry in entries {
        let dirs = match entry {
            Entry::Dir(dir) => vec![dir.clone()],
            Entry::Prefixed { parent, prefix } => std::fs::read_dir(parent)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(prefix.as_str()))
                .map(|e| e.path())
                .collect(),
        };
        for dir in dirs {
            match remove(&dir) {
                Ok(()) => removed.push(dir),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => failed.push((dir, e)),
            }
        }
    }
    (removed, failed)
}

/// Removes `dir` and all in it. The command's threads run on while this runs and may still be
/// writing into it (a topology tree half written): a directory that is not empty when its last
/// entry was removed is tried again, a few times.
fn remove(dir: &Path) -> std::io::Result<()> {
    let mut tries = 0;
    loop {
        match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::DirectoryNotEmpty && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            done => return done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test, so that no other test's registrations interleave with its cleanup.
    #[test]
    fn cleanup_removes_what_is_registered_while_it_is_registered() {
        let parent = tempfile::tempdir().unwrap();
        let mk = |name: &str| {
            let d = parent.path().join(name);
            std::fs::create_dir_all(d.join("nodes/0")).unwrap();
            d
        };
        let demo = mk("amdgpu-cr-demo-1");
        let kept = mk("amdgpu-cr-demo-2");
        let topo_a = mk("amdgpu-cr-topology-7-9-a");
        let topo_b = mk("amdgpu-cr-topology-7-9-b");
        let other = mk("amdgpu-cr-topology-8-9-c");
        let _demo = remove_dir_on_interrupt(&demo);
        let unregistered = remove_dir_on_interrupt(&kept);
        drop(unregistered);
        let _topo = remove_prefixed_on_interrupt(parent.path(), "amdgpu-cr-topology-7-9-");
        let done = cleanup();
        assert!(done.failed.is_empty(), "{:?}", done.failed);
        let mut removed = done.removed;
        removed.sort();
        assert_eq!(removed, [demo.clone(), topo_a.clone(), topo_b.clone()]);
        for (d, exists) in [
            (&demo, false),
            (&kept, true),
            (&topo_a, false),
            (&topo_b, false),
            (&other, true),
        ] {
            assert_eq!(d.exists(), exists, "{}", d.display());
        }
    }
}
