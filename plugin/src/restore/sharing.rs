//! Render-node buffers shared between the restored tasks.
//!
//! A task that criu forks from a restored parent may map its parent's buffers without having
//! restored anything itself: a forked ROCm child inherits the render-node mappings of its parent's
//! host-visible buffers (the driver's `/dev/kfd` mappings, doorbells, events and MMIO, are
//! `VM_DONTCOPY` and are not inherited). criu forks every task from its own process after the
//! plugin's `init`, runs RESTORE_EXT_FILE for `/dev/kfd` in the task that owns the file, and calls
//! UPDATE_VMA_MAP in each task that maps a device; a task that shares the owner's files receives
//! them in its `prepare_fds`, after the owner restored them, and maps its VMAs after that. The
//! restored-buffer table of the owner lives in the owner's memory, so the owners also publish
//! their render-node buffers in a [`SharedVmas`] table, made at `init` in criu's process as
//! shared memory, which every task forked afterwards sees.

use std::collections::BTreeSet;
use std::os::fd::AsFd;

use kfd_abi::{Mapping, Place, Prot, Share};

/// One restored render-node buffer as the other tasks of the restore see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SharedBuffer {
    /// The task that restored it (and holds its render node).
    pub owner: u32,
    /// The render minor of its GPU at checkpoint (the VMA's path).
    pub old_minor: u32,
    /// GPU VA of the buffer (where its CPU mapping starts).
    pub addr: u64,
    /// Size.
    pub size: u64,
    /// The mmap offset at checkpoint.
    pub old_offset: u64,
    /// The mmap offset now.
    pub new_offset: u64,
    /// The owner's fd of the restored render node the buffer is mapped from.
    pub fd: i32,
    /// The render minor the buffer's GPU has now.
    pub new_minor: u32,
}

impl SharedBuffer {
    /// The restored mapping of a VMA of render minor `old_minor` at `addr` that had offset
    /// `old_pgoff` (bytes) at checkpoint, as
    /// [`VmaRemaps::find`](super::vma::VmaRemaps::find) answers it.
    pub(crate) fn answer(&self, old_minor: u32, addr: u64, old_pgoff: u64) -> Option<u64> {
        if old_minor != self.old_minor {
            return None;
        }
        let delta = addr.checked_sub(self.addr)?;
        let inside = delta < self.size.max(1);
        (inside && self.old_offset.checked_add(delta) == Some(old_pgoff))
            .then(|| self.new_offset.wrapping_add(delta))
    }
}

/// What publishing to a [`SharedVmas`] table could not do.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the table of restored buffers shared with forked tasks holds {capacity} buffers: {lost} of \
     this process's are not in it (a task that inherited their mappings cannot map them)"
)]
pub(crate) struct TableFull {
    /// The table's capacity.
    pub capacity: usize,
    /// Buffers left out.
    pub lost: usize,
}

/// Why a task's VMA could not be given an owner.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum InheritedError {
    /// More than one restored process had a buffer there, and none of them is this task's
    /// ancestor.
    #[error(
        "restored processes {owners:?} each had a buffer at {addr:#x} with offset {old_pgoff:#x} \
         on renderD{minor}, and none of them is an ancestor of pid {pid}"
    )]
    Ambiguous {
        /// The candidates.
        owners: Vec<u32>,
        /// The VMA.
        addr: u64,
        /// Its offset at checkpoint.
        old_pgoff: u64,
        /// Its render minor at checkpoint.
        minor: u32,
        /// The asking task.
        pid: u32,
    },
}

/// The buffer a task's render VMA maps, among the buffers other tasks restored: the only
/// owner's, or, when several processes had a buffer there (the same program restored twice), the
/// nearest ancestor's (`parent_of` walks up from `pid`).
pub(crate) fn find_inherited(
    buffers: &[SharedBuffer],
    pid: u32,
    old_minor: u32,
    addr: u64,
    old_pgoff: u64,
    parent_of: impl Fn(u32) -> Option<u32>,
) -> Result<Option<(SharedBuffer, u64)>, InheritedError> {
    let hits: Vec<(SharedBuffer, u64)> = buffers
        .iter()
        .filter(|b| b.owner != pid)
        .filter_map(|b| Some((*b, b.answer(old_minor, addr, old_pgoff)?)))
        .collect();
    let owners: BTreeSet<u32> = hits.iter().map(|(b, _)| b.owner).collect();
    if owners.len() <= 1 {
        return Ok(hits.into_iter().next());
    }
    let mut at = pid;
    // A pid chain ends at init; the bound only guards against a platform that answers in a loop.
    for _ in 0..4096 {
        let Some(parent) = parent_of(at) else { break };
        if let Some(hit) = hits.iter().find(|(b, _)| b.owner == parent) {
            return Ok(Some(*hit));
        }
        at = parent;
    }
    Err(InheritedError::Ambiguous {
        owners: owners.into_iter().collect(),
        addr,
        old_pgoff,
        minor: old_minor,
        pid,
    })
}

/// Words of the table's header: the next free record, the records that did not fit.
const HEADER_BYTES: usize = 64;
const NEXT: usize = 0;
const LOST: usize = 8;
/// Bytes of one record: a ready word, then the buffer's seven words.
const RECORD_BYTES: usize = 64;

/// The render-node buffers restored by the tasks of one restore, in shared memory that criu's
/// process makes at `init` and every task it forks afterwards sees (`MAP_SHARED` anonymous
/// memory). Fixed capacity; records are claimed with an atomic counter and marked ready after
/// they are written, so tasks restoring at the same time never see each other's half-written
/// records.
pub(crate) struct SharedVmas {
    mem: Mapping,
    capacity: usize,
}

impl std::fmt::Debug for SharedVmas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedVmas")
            .field("capacity", &self.capacity)
            .field("used", &self.used())
            .finish()
    }
}

impl SharedVmas {
    /// How many buffers the table made at `init` holds (4 MiB of address space, touched only as
    /// far as it is used).
    pub(crate) const CAPACITY: usize = 65_536;

    /// A table of [`Self::CAPACITY`] buffers.
    ///
    /// # Errors
    ///
    /// Opening `/dev/zero` or mapping it.
    pub(crate) fn new() -> std::io::Result<Self> {
        Self::with_capacity(Self::CAPACITY)
    }

    /// A table of `capacity` buffers (at least one).
    ///
    /// # Errors
    ///
    /// Opening `/dev/zero` or mapping it.
    pub(crate) fn with_capacity(capacity: usize) -> std::io::Result<Self> {
        let capacity = capacity.max(1);
        let len = HEADER_BYTES + capacity * RECORD_BYTES;
        let zero = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/zero")?;
        // A shared mapping of /dev/zero is shared anonymous memory: zero-filled, and the same
        // pages in every process forked after this.
        let mem = Mapping::map_fd(
            Place::Anywhere(len),
            zero.as_fd(),
            0,
            Prot::RW,
            Share::Shared,
        )
        .map_err(|e| std::io::Error::from_raw_os_error(e.0))?;
        Ok(Self { mem, capacity })
    }

    /// Its capacity in buffers.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    fn used(&self) -> usize {
        let next = self.mem.load_u64(NEXT).unwrap_or(0);
        usize::try_from(next).map_or(self.capacity, |n| n.min(self.capacity))
    }

    /// Buffers that did not fit, over every publisher.
    pub(crate) fn lost(&self) -> u64 {
        self.mem.load_u64(LOST).unwrap_or(0)
    }

    /// Adds `buffers` (one restored process's); those beyond the capacity are left out.
    ///
    /// # Errors
    ///
    /// [`TableFull`] with the count left out.
    pub(crate) fn publish(&self, buffers: &[SharedBuffer]) -> Result<(), TableFull> {
        if buffers.is_empty() {
            return Ok(());
        }
        let n = buffers.len() as u64;
        let start = self.mem.fetch_add_u64(NEXT, n).unwrap_or(u64::MAX);
        let start = usize::try_from(start).unwrap_or(usize::MAX);
        let fits = self.capacity.saturating_sub(start).min(buffers.len());
        for (i, b) in buffers.iter().take(fits).enumerate() {
            let at = HEADER_BYTES + (start + i) * RECORD_BYTES;
            let words = [
                u64::from(b.owner) | u64::from(b.old_minor) << 32,
                b.addr,
                b.size,
                b.old_offset,
                b.new_offset,
                u64::from(b.fd.unsigned_abs()) | u64::from(b.new_minor) << 32,
                0,
            ];
            for (w, v) in words.iter().enumerate() {
                self.mem.write_u64(at + 8 + w * 8, *v);
            }
            // Ready: the atomic add orders the words above before it for every reader.
            self.mem.fetch_add_u64(at, 1);
        }
        let lost = buffers.len() - fits;
        if lost > 0 {
            self.mem.fetch_add_u64(LOST, lost as u64);
            return Err(TableFull {
                capacity: self.capacity,
                lost,
            });
        }
        Ok(())
    }

    /// Every buffer published so far and ready.
    pub(crate) fn buffers(&self) -> Vec<SharedBuffer> {
        (0..self.used())
            .filter_map(|i| {
                let at = HEADER_BYTES + i * RECORD_BYTES;
                if self.mem.load_u64(at)? == 0 {
                    return None;
                }
                let w = |k: usize| self.mem.read_u64(at + 8 + k * 8);
                let (owner, old_minor) = halves(w(0)?);
                let (fd, new_minor) = halves(w(5)?);
                Some(SharedBuffer {
                    owner,
                    old_minor,
                    addr: w(1)?,
                    size: w(2)?,
                    old_offset: w(3)?,
                    new_offset: w(4)?,
                    fd: i32::try_from(fd).ok()?,
                    new_minor,
                })
            })
            .collect()
    }
}

/// The low and the high 32 bits of a table word.
fn halves(w: u64) -> (u32, u32) {
    let low = u32::try_from(w & u64::from(u32::MAX)).unwrap_or(u32::MAX);
    let high = u32::try_from(w >> 32).unwrap_or(u32::MAX);
    (low, high)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    /// Every render node's fake offsets start here (kernel and simulator alike).
    const BASE: u64 = 0x1_0000_0000;

    fn shared(owner: u32, minor: u32, addr: u64, old: u64, new: u64) -> SharedBuffer {
        SharedBuffer {
            owner,
            old_minor: minor,
            addr,
            size: 0x20_0000,
            old_offset: old,
            new_offset: new,
            fd: 40 + i32::try_from(owner).unwrap(),
            new_minor: minor + 2,
        }
    }

    #[test]
    fn the_shared_table_gives_back_what_was_published_up_to_its_capacity() {
        let table = SharedVmas::with_capacity(3).unwrap();
        assert_eq!(table.buffers(), []);
        let a = [shared(10, 128, 0x7000_0000_0000, BASE, BASE + 0x1000)];
        let b = [
            shared(20, 128, 0x7100_0000_0000, BASE, BASE + 0x2000),
            shared(20, 129, 0x7200_0000_0000, BASE, BASE + 0x3000),
            shared(20, 129, 0x7300_0000_0000, BASE + 0x20_0000, BASE + 0x4000),
        ];
        table.publish(&a).unwrap();
        assert_eq!(
            table.publish(&b),
            Err(TableFull {
                capacity: 3,
                lost: 1
            })
        );
        assert_eq!(table.buffers(), [a[0], b[0], b[1]]);
        assert_eq!(table.lost(), 1);
        assert_eq!(
            table.publish(&a),
            Err(TableFull {
                capacity: 3,
                lost: 1
            }),
            "a full table takes nothing more"
        );
        assert_eq!(table.buffers().len(), 3);
        assert_eq!(table.lost(), 2);
    }

    /// Pid 30 is the child of 20; 10 and 20 run the same program (the same layout).
    fn parents(pid: u32) -> Option<u32> {
        match pid {
            30 => Some(20),
            20 | 10 => Some(1),
            _ => None,
        }
    }

    #[rstest]
    #[case::the_only_owner(&[shared(20, 128, 0x7000_0000_0000, BASE, BASE + 0x40_0000)], 0x7000_0000_1000, BASE + 0x1000, Some((20, BASE + 0x40_1000)))]
    #[case::other_minor(&[shared(20, 129, 0x7000_0000_0000, BASE, BASE + 0x40_0000)], 0x7000_0000_0000, BASE, None)]
    #[case::offset_does_not_match(&[shared(20, 128, 0x7000_0000_0000, BASE, BASE + 0x40_0000)], 0x7000_0000_1000, BASE, None)]
    #[case::the_ancestor_of_two(&[shared(10, 128, 0x7000_0000_0000, BASE, BASE + 0x40_0000), shared(20, 128, 0x7000_0000_0000, BASE, BASE + 0x80_0000)], 0x7000_0000_0000, BASE, Some((20, BASE + 0x80_0000)))]
    #[case::its_own_are_not_inherited(&[shared(30, 128, 0x7000_0000_0000, BASE, BASE + 0x40_0000)], 0x7000_0000_0000, BASE, None)]
    fn a_forked_task_maps_the_buffer_its_ancestor_restored(
        #[case] buffers: &[SharedBuffer],
        #[case] addr: u64,
        #[case] old: u64,
        #[case] expected: Option<(u32, u64)>,
    ) {
        let found = find_inherited(buffers, 30, 128, addr, old, parents).unwrap();
        assert_eq!(found.map(|(b, new)| (b.owner, new)), expected);
    }

    #[test]
    fn two_owners_and_no_ancestor_among_them_is_an_error() {
        let buffers = [
            shared(10, 128, 0x7000_0000_0000, BASE, BASE + 0x40_0000),
            shared(20, 128, 0x7000_0000_0000, BASE, BASE + 0x80_0000),
        ];
        let e = find_inherited(&buffers, 50, 128, 0x7000_0000_0000, BASE, parents).unwrap_err();
        assert_eq!(
            e,
            InheritedError::Ambiguous {
                owners: vec![10, 20],
                addr: 0x7000_0000_0000,
                old_pgoff: BASE,
                minor: 128,
                pid: 50
            }
        );
        assert!(e
            .to_string()
            .contains("none of them is an ancestor of pid 50"));
    }
}
