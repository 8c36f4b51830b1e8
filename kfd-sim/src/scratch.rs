//! Scratch directories of simulated nodes (their sysfs trees) that do not outlive a process
//! that dies without unwinding.
//!
//! A simulated node writes its topology tree into a temporary directory, removed when the node
//! is dropped. A process that ends without unwinding (killed, `exit` from a child, an abort
//! under a fuzzer) leaves it behind. So the directory's name records its owner, `{base}{pid}-
//! {start}-…` (the process id and its start time in clock ticks since boot, from
//! `/proc/PID/stat`: together they name one process, even after the pid is reused), and the
//! next node made anywhere removes the directories of owners that are gone ([`reap`]).

use std::path::Path;

/// The identity of a process: its pid and its start time (`/proc/PID/stat` field 22, clock
/// ticks since boot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The process id.
    pub pid: u32,
    /// Its start time in clock ticks since boot.
    pub start: u64,
}

impl Owner {
    /// This process.
    #[must_use]
    pub fn current() -> Option<Self> {
        Self::of(std::process::id())
    }

    /// The process `pid`, if it exists.
    #[must_use]
    pub fn of(pid: u32) -> Option<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `pid (comm) state ppid ...`: comm may hold spaces and parentheses, so the fields
        // are counted from the last `)`; field 3 (state) is the first after it, field 22
        // (starttime) the twentieth.
        let after = &stat[stat.rfind(')')? + 1..];
        let start = after.split_whitespace().nth(19)?.parse().ok()?;
        Some(Self { pid, start })
    }

    /// Whether this process still runs (the same pid with the same start time).
    #[must_use]
    pub fn is_alive(self) -> bool {
        Self::of(self.pid) == Some(self)
    }
}

/// The name prefix of a scratch directory owned by this process: `{base}{pid}-{start}-`. Give it
/// to `tempfile::Builder::prefix` (or add a unique suffix).
#[must_use]
pub fn owned_prefix(base: &str) -> String {
    match Owner::current() {
        Some(Owner { pid, start }) => format!("{base}{pid}-{start}-"),
        // No /proc: a name that reap never touches.
        None => base.to_owned(),
    }
}

/// The owner recorded in the name `name` of a scratch directory made with `base`.
fn owner_of(name: &str, base: &str) -> Option<Owner> {
    let mut parts = name.strip_prefix(base)?.splitn(3, '-');
    let pid = parts.next()?.parse().ok()?;
    let start = parts.next()?.parse().ok()?;
    parts.next()?;
    Some(Owner { pid, start })
}

/// Removes the directories `{base}{pid}-{start}-…` in `parent` (made with [`owned_prefix`])
/// whose owner has ended and that belong to this user. Returns how many it removed. Errors (a
/// directory another process removes at the same time, an unreadable `parent`) are logged and
/// skipped: this is cleanup of what others left.
pub fn reap(parent: &Path, base: &str) -> usize {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(parent) else {
        return 0;
    };
    // SAFETY: geteuid has no preconditions and touches no memory.
    let uid = unsafe { libc::geteuid() };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(owner) = name.to_str().and_then(|n| owner_of(n, base)) else {
            continue;
        };
        // A symlink or a file of that name, or another user's directory, is not ours to remove.
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != uid || owner.is_alive() {
            continue;
        }
        match std::fs::remove_dir_all(entry.path()) {
            Ok(()) => {
                log::debug!(
                    "removed {}, left by process {} which has ended",
                    entry.path().display(),
                    owner.pid
                );
                removed += 1;
            }
            Err(e) => log::debug!("cannot remove {}: {e}", entry.path().display()),
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "amdgpu-cr-topology-";

    #[test]
    fn this_process_is_alive_and_its_prefix_names_it() {
        let me = Owner::current().unwrap();
        assert!(me.is_alive());
        let prefix = owned_prefix(BASE);
        assert_eq!(owner_of(&format!("{prefix}Ab12Cd"), BASE), Some(me));
        // The same pid with another start time is another (ended) process.
        assert!(!Owner {
            start: me.start + 1,
            ..me
        }
        .is_alive());
    }

    #[test]
    fn reap_removes_the_directories_of_ended_owners_only() {
        let parent = tempfile::tempdir().unwrap();
        let me = Owner::current().unwrap();
        // A child that has exited and been waited for: its pid names no process (or, reused,
        // one with another start time).
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let child_pid = child.id();
        let child_owner = Owner::of(child_pid).unwrap_or(Owner {
            pid: child_pid,
            start: 0,
        });
        child.wait().unwrap();
        let dead = format!("{BASE}{}-{}-x1", child_owner.pid, child_owner.start);
        let reused = format!("{BASE}{}-{}-x2", me.pid, me.start + 1);
        let mine = format!("{}x3", owned_prefix(BASE));
        let old_style = format!("{BASE}AbCdEf");
        let other = "amdgpu-cr-demo-1-2-x4".to_owned();
        for d in [&dead, &reused, &mine, &old_style, &other] {
            std::fs::create_dir_all(parent.path().join(d).join("nodes/0")).unwrap();
        }
        // A file of a dead owner's name is not a directory of ours.
        let file = format!("{BASE}{}-{}-x5", child_owner.pid, child_owner.start);
        std::fs::write(parent.path().join(&file), "").unwrap();

        assert_eq!(reap(parent.path(), BASE), 2);
        for (d, kept) in [
            (&dead, false),
            (&reused, false),
            (&mine, true),
            (&old_style, true),
            (&other, true),
            (&file, true),
        ] {
            assert_eq!(parent.path().join(d).exists(), kept, "{d}");
        }
    }
}
