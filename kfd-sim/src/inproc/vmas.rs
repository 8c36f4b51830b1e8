//! The device mappings that simulated processes made in process: what criu would read of them
//! in `/proc/PID/maps` and `/proc/PID/map_files` (all simulated processes share this OS
//! process's address space, so a recorded mapping counts while the range still maps its memory).

use std::path::PathBuf;

use crate::host::{lock, FileKey};
use crate::lock_order::{rank, Ordered};

/// A device mapping of a simulated process, as criu reads it from `/proc/PID/maps` and
/// `/proc/PID/map_files`: address range, file offset, path and device number of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceVma {
    /// Start address.
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// The file offset of `start` in bytes (`vm_pgoff << PAGE_SHIFT`).
    pub pgoff: u64,
    /// `/dev/kfd` or `/dev/dri/renderD<minor>`.
    pub path: PathBuf,
    /// `st_rdev` of the file.
    pub rdev: u64,
}

/// One in-process device mapping: whose, where, and which memory backs it.
#[derive(Clone, Debug)]
pub(crate) struct VmaRecord {
    pub pid: u32,
    pub vma: DeviceVma,
    pub backing: FileKey,
    pub backing_offset: u64,
}

/// The ranges of this OS process that map files: `(start, end, offset, st_dev, st_ino)` from
/// `/proc/self/maps`.
fn file_ranges() -> Vec<(u64, u64, u64, u64, u64)> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    maps.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (start, end) = f.next()?.split_once('-')?;
            let _perms = f.next()?;
            let off = f.next()?;
            let (maj, min) = f.next()?.split_once(':')?;
            let ino = f.next()?.parse().ok()?;
            let hex = |s: &str| u64::from_str_radix(s, 16).ok();
            let dev = libc::makedev(
                u32::try_from(hex(maj)?).ok()?,
                u32::try_from(hex(min)?).ok()?,
            );
            Some((hex(start)?, hex(end)?, hex(off)?, dev, ino))
        })
        .collect()
}

/// The device mappings made in process, by simulated pid.
#[derive(Debug)]
pub(crate) struct DeviceVmas(Ordered<Vec<VmaRecord>>);

impl Default for DeviceVmas {
    fn default() -> Self {
        Self(Ordered::new(rank::DEVICE_VMAS, Vec::new()))
    }
}

impl DeviceVmas {
    /// Records an in-process device mapping.
    pub(crate) fn record(&self, r: VmaRecord) {
        let mut all = lock(&self.0);
        // A mapping at the same place replaced whatever was recorded there.
        all.retain(|o| o.vma.end <= r.vma.start || o.vma.start >= r.vma.end);
        all.push(r);
    }

    /// The recorded device mappings of `pid` that still map their memory, in address order.
    pub(crate) fn of(&self, pid: u32) -> Vec<DeviceVma> {
        let live = file_ranges();
        let mut all = lock(&self.0);
        all.retain(|r| {
            live.iter().any(|&(s, e, off, dev, ino)| {
                s == r.vma.start
                    && e == r.vma.end
                    && off == r.backing_offset
                    && FileKey { dev, ino } == r.backing
            })
        });
        let mut mine: Vec<_> = all
            .iter()
            .filter(|r| r.pid == pid)
            .map(|r| r.vma.clone())
            .collect();
        mine.sort_by_key(|v| v.start);
        mine
    }
}
