//! The processes that use the devices, as the daemon keeps them: the kernel keys KFD processes
//! on the mm; we key them on the caller's thread-group id, read from `/proc/<tid>/status` (the
//! request header carries the thread id). A per-process record holds a pidfd (to tell a later
//! process that reuses the pid from the first: an exited pidfd is readable), the KFD process
//! (kept, like the kernel's, for the life of the process, not of the open file) and the fds
//! installed for it (see the [`client`](super::client) module). A reaper thread drops records
//! of exited processes every second.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use kfd_abi::Errno;

use super::os;
use super::shared::{ProcEntry, Shared};
use crate::host::lock;
use crate::state::process::KfdProcess;

/// Drops the records of exited processes, every second until shutdown.
pub(super) fn reaper(shared: &Shared) {
    loop {
        match os::poll(&[shared.stop_rx.as_fd()], Some(Duration::from_secs(1))) {
            Ok(r) if r.first().is_some_and(|r| r.readable || r.error) => return,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                log::error!("kfd-simd: reaper: poll: {e}");
                return;
            }
        }
        shared.reap();
    }
}

fn entry_exited(e: &ProcEntry) -> bool {
    e.pidfd.as_ref().is_none_or(|p| os::pidfd_exited(p.as_fd()))
}

impl Shared {
    /// The KFD process of live process `tgid`, if it has opened /dev/kfd (`kfd_get_process`).
    pub(super) fn kfd_process_if_any(&self, tgid: u32) -> Option<Arc<KfdProcess>> {
        lock(&self.procs)
            .get(&tgid)
            .filter(|e| !entry_exited(e))
            .and_then(|e| e.kfd.clone())
    }

    /// The KFD process of `tgid`, created on its first open of /dev/kfd (by thread `tid`) and
    /// kept until the process exits (the kernel keeps it for the life of the mm).
    pub(super) fn kfd_process_of(&self, tgid: u32, tid: u32) -> Result<Arc<KfdProcess>, Errno> {
        let mut stale = None;
        let r = {
            let mut procs = lock(&self.procs);
            let entry = self.live_entry(&mut procs, tgid, &mut stale)?;
            match &entry.kfd {
                Some(p) => Ok(Arc::clone(p)),
                None => {
                    // This process's first /dev/kfd: a KFD process of its own, whatever an
                    // earlier holder of the pid left behind.
                    // Records only for the GPUs whose render node the caller's device cgroup
                    // allows, as amdkfd's process creation. Plain CUSE cannot see it; behind
                    // the bridge the module evaluated it in the caller's context when the open
                    // went through /dev/kfd's proxy.
                    let bridge = lock(&self.bridge).clone();
                    let access = bridge.and_then(|b| b.open_access(tid));
                    match &access {
                        Some(a) if !a.refused_renders().is_empty() => log::info!(
                            "kfd-simd: pid {tgid}: its device cgroup refuses render minors \
                             {:?}: no per-device records for those GPUs",
                            a.refused_renders()
                        ),
                        Some(a) => log::info!(
                            "kfd-simd: pid {tgid}: its device cgroup allows every GPU ({a:?})"
                        ),
                        None => log::info!(
                            "kfd-simd: pid {tgid}: no device cgroup verdicts (not through a \
                             kfd_bridge v2 proxy): every GPU"
                        ),
                    }
                    let p = self.machine.new_kfd_process(tgid, &|minor| {
                        access.as_ref().is_none_or(|a| a.allows_render(minor))
                    })?;
                    entry.kfd = Some(Arc::clone(&p));
                    Ok(p)
                }
            }
        };
        drop(stale);
        r
    }

    /// The record of live process `tgid` (a record of an exited process with the same pid is
    /// moved to `stale`, to be dropped after the lock).
    fn live_entry<'a>(
        &self,
        procs: &'a mut HashMap<u32, ProcEntry>,
        tgid: u32,
        stale: &mut Option<ProcEntry>,
    ) -> Result<&'a mut ProcEntry, Errno> {
        if procs.get(&tgid).is_some_and(entry_exited) {
            *stale = procs.remove(&tgid);
        }
        match procs.entry(tgid) {
            std::collections::hash_map::Entry::Occupied(e) => Ok(e.into_mut()),
            std::collections::hash_map::Entry::Vacant(v) => {
                let pidfd = kfd_abi::cuse::pidfd_open(tgid).map_err(|e| {
                    log::debug!("kfd-simd: pidfd_open({tgid}): {e}");
                    Errno::ESRCH
                })?;
                Ok(v.insert(ProcEntry {
                    pidfd: Some(Arc::new(pidfd)),
                    ..ProcEntry::default()
                }))
            }
        }
    }

    /// A pidfd of live process `tgid`.
    pub(crate) fn pidfd_of(&self, tgid: u32) -> Result<Arc<OwnedFd>, Errno> {
        let mut stale = None;
        let r = {
            let mut procs = lock(&self.procs);
            self.live_entry(&mut procs, tgid, &mut stale)
                .and_then(|e| e.pidfd.clone().ok_or(Errno::ESRCH))
        };
        drop(stale);
        r
    }

    /// Keeps `fd` for process `tgid` until it fetches it and asks us to close it.
    pub(crate) fn install(&self, tgid: u32, fd: OwnedFd) -> Result<i32, Errno> {
        use std::os::fd::AsRawFd;
        let mut stale = None;
        let r = {
            let mut procs = lock(&self.procs);
            self.live_entry(&mut procs, tgid, &mut stale).map(|e| {
                let raw = fd.as_raw_fd();
                e.installed.insert(raw, fd);
                raw
            })
        };
        drop(stale);
        r
    }

    /// Closes our copy of an fd installed for `tgid`; `false` when there is none.
    pub(crate) fn uninstall(&self, tgid: u32, raw: RawFd) -> bool {
        let fd = lock(&self.procs)
            .get_mut(&tgid)
            .and_then(|e| e.installed.remove(&raw));
        fd.is_some()
    }

    /// How many fds installed for `tgid` wait to be fetched.
    #[cfg(test)]
    pub(crate) fn installed_count(&self, tgid: u32) -> usize {
        lock(&self.procs)
            .get(&tgid)
            .map_or(0, |e| e.installed.len())
    }

    fn reap(&self) {
        let gone: Vec<(u32, ProcEntry)> = {
            let mut procs = lock(&self.procs);
            let dead: Vec<u32> = procs
                .iter()
                .filter(|(_, e)| entry_exited(e))
                .map(|(&pid, _)| pid)
                .collect();
            dead.into_iter()
                .filter_map(|pid| procs.remove(&pid).map(|e| (pid, e)))
                .collect()
        };
        for (pid, e) in gone {
            log::debug!(
                "kfd-simd: pid {pid} exited ({} undelivered fds closed)",
                e.installed.len()
            );
        }
    }
}
