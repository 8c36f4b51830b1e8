//! Device mappings at restore: which restored buffer a VMA of `/dev/kfd` or a render node maps.
//!
//! criu asks UPDATE_VMA_MAP once per device VMA of a restored process, with the VMA's path as it
//! was at checkpoint, its start address and its old file offset. mmap offsets are not unique:
//! every render node's offset space starts at the same base (in the kernel and in the simulator),
//! so two GPUs' buffers, and two processes' buffers, can have had the same offset. A VMA is
//! therefore matched by its device (the render node's GPU, or `/dev/kfd`), its address inside a
//! buffer's CPU mapping (which ROCm places at the buffer's GPU virtual address) and the offset that
//! address had: the exact (address, offset) pair upstream matches, extended to VMAs that are a
//! piece of a buffer's mapping (criu sees one VMA per piece after an mprotect or a partial
//! munmap).
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

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::AsFd;
use std::path::Path;

use images::proto::CriuKfd;
use kfd_abi::{AllocFlags, Mapping, Place, Prot, Share};

/// Where a restored BO's CPU mapping lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MappedOn {
    /// `/dev/kfd` (doorbells, MMIO remap page).
    Kfd,
    /// The render node of image GPU `gpu_id`.
    Render {
        /// The GPU (image id).
        gpu_id: u32,
    },
}

/// The device file a VMA mapped at checkpoint, from its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VmaDevice {
    /// `/dev/kfd`.
    Kfd,
    /// `/dev/dri/renderD<minor>`.
    Render {
        /// The render minor at checkpoint.
        minor: u32,
    },
}

impl VmaDevice {
    /// The device of a VMA path criu reports; `None` for anything else (not ours).
    pub(crate) fn from_path(path: &Path) -> Option<Self> {
        let name = path.file_name()?.to_str()?;
        if name == "kfd" {
            return Some(VmaDevice::Kfd);
        }
        let minor = name.strip_prefix("renderD")?;
        if minor.is_empty() || !minor.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        minor.parse().ok().map(|minor| VmaDevice::Render { minor })
    }
}

/// The offset change of one BO, for UPDATE_VMA_MAP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OffsetRemap {
    /// GPU VA of the BO (where its CPU mapping starts).
    pub addr: u64,
    /// Size.
    pub size: u64,
    /// The mmap offset at checkpoint.
    pub old_offset: u64,
    /// The mmap offset now.
    pub new_offset: u64,
    /// Which file it is mapped from.
    pub on: MappedOn,
}

/// The answer for one VMA: its new offset and the file it maps now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct VmaTarget {
    /// The new mmap offset of the VMA's start.
    pub new_pgoff: u64,
    /// The file.
    pub on: MappedOn,
}

/// Every mappable BO of one restored process, and the render minors its image knew.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct VmaRemaps {
    remaps: Vec<OffsetRemap>,
    /// Render minor at checkpoint -> image GPU id.
    minors: BTreeMap<u32, u32>,
}

impl VmaRemaps {
    /// From the image and the restored offsets (`restored_offsets[i]` is BO `i`'s).
    pub(crate) fn new(image: &CriuKfd, restored_offsets: &[u64]) -> Self {
        let remaps = image
            .bo_entries
            .iter()
            .zip(restored_offsets)
            .map(|(b, &new_offset)| {
                let flags = AllocFlags::from_bits_retain(b.alloc_flags);
                let on = if flags.intersects(AllocFlags::DOORBELL | AllocFlags::MMIO_REMAP) {
                    MappedOn::Kfd
                } else {
                    MappedOn::Render { gpu_id: b.gpu_id }
                };
                OffsetRemap {
                    addr: b.addr,
                    size: b.size,
                    old_offset: b.offset,
                    new_offset,
                    on,
                }
            })
            .collect();
        let minors = image
            .device_entries
            .iter()
            .filter(|d| d.gpu_id != 0)
            .map(|d| (d.drm_render_minor, d.gpu_id))
            .collect();
        Self { remaps, minors }
    }

    /// The restored mapping for a VMA of `device` starting at `addr` that had offset `old_pgoff`
    /// (bytes) at checkpoint; `None` when no BO of this process on that device had it.
    pub(crate) fn find(&self, device: VmaDevice, addr: u64, old_pgoff: u64) -> Option<VmaTarget> {
        let wanted = match device {
            VmaDevice::Kfd => MappedOn::Kfd,
            VmaDevice::Render { minor } => MappedOn::Render {
                gpu_id: *self.minors.get(&minor)?,
            },
        };
        self.remaps.iter().find_map(|r| {
            if r.on != wanted {
                return None;
            }
            let delta = addr.checked_sub(r.addr)?;
            let inside = delta < r.size.max(1);
            (inside && r.old_offset.checked_add(delta) == Some(old_pgoff)).then(|| VmaTarget {
                new_pgoff: r.new_offset.wrapping_add(delta),
                on: r.on,
            })
        })
    }
}

impl VmaRemaps {
    /// The render-node buffers, each with the render minor its GPU had at checkpoint.
    pub(crate) fn render_buffers(&self) -> impl Iterator<Item = (u32, u32, &OffsetRemap)> + '_ {
        self.remaps.iter().filter_map(|r| match r.on {
            MappedOn::Render { gpu_id } => {
                let minor = self
                    .minors
                    .iter()
                    .find_map(|(&m, &g)| (g == gpu_id).then_some(m))?;
                Some((minor, gpu_id, r))
            }
            MappedOn::Kfd => None,
        })
    }
}

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
    /// `old_pgoff` (bytes) at checkpoint, as [`VmaRemaps::find`] answers it.
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
    use images::proto::{KfdBoEntry, KfdDeviceEntry};
    use rstest::rstest;

    const VRAM: u32 = 1;
    const DOORBELL: u32 = 1 << 3;
    /// Every render node's fake offsets start here (kernel and simulator alike).
    const BASE: u64 = 0x1_0000_0000;

    fn bo(addr: u64, size: u64, offset: u64, gpu_id: u32, flags: u32) -> KfdBoEntry {
        KfdBoEntry {
            addr,
            size,
            offset,
            alloc_flags: flags,
            gpu_id,
            ..KfdBoEntry::default()
        }
    }

    fn gpu(gpu_id: u32, minor: u32) -> KfdDeviceEntry {
        KfdDeviceEntry {
            gpu_id,
            drm_render_minor: minor,
            ..KfdDeviceEntry::default()
        }
    }

    /// Two GPUs whose first buffers had the same render-node offset, and a doorbell page each.
    fn two_gpus() -> VmaRemaps {
        let image = CriuKfd {
            device_entries: vec![gpu(0, 0), gpu(0x1111, 128), gpu(0x2222, 129)],
            bo_entries: vec![
                bo(0x7000_0000_0000, 0x20_0000, BASE, 0x1111, VRAM),
                bo(0x7100_0000_0000, 0x10_0000, BASE, 0x2222, VRAM),
                bo(
                    0x7200_0000_0000,
                    0x2000,
                    3 << 62 | 0x1111 << 46,
                    0x1111,
                    DOORBELL,
                ),
                bo(
                    0x7300_0000_0000,
                    0x2000,
                    3 << 62 | 0x2222 << 46,
                    0x2222,
                    DOORBELL,
                ),
            ],
            ..CriuKfd::default()
        };
        VmaRemaps::new(
            &image,
            &[
                BASE + 0x40_0000,
                BASE + 0x80_0000,
                3 << 62 | 0x3333 << 46,
                3 << 62 | 0x4444 << 46,
            ],
        )
    }

    fn render(minor: u32) -> VmaDevice {
        VmaDevice::Render { minor }
    }

    #[rstest]
    #[case::first_gpu(render(128), 0x7000_0000_0000, BASE, Some((BASE + 0x40_0000, MappedOn::Render { gpu_id: 0x1111 })))]
    #[case::same_offset_other_gpu(render(129), 0x7100_0000_0000, BASE, Some((BASE + 0x80_0000, MappedOn::Render { gpu_id: 0x2222 })))]
    #[case::a_piece_of_a_buffer(render(128), 0x7000_0000_1000, BASE + 0x1000, Some((BASE + 0x40_1000, MappedOn::Render { gpu_id: 0x1111 })))]
    #[case::doorbell_of_the_second_gpu(VmaDevice::Kfd, 0x7300_0000_0000, 3 << 62 | 0x2222 << 46, Some((3 << 62 | 0x4444 << 46, MappedOn::Kfd)))]
    #[case::address_of_another_gpus_buffer(render(128), 0x7100_0000_0000, BASE, None)]
    #[case::offset_does_not_match_the_address(render(128), 0x7000_0000_1000, BASE, None)]
    #[case::past_the_end(render(129), 0x7100_0010_0000, BASE + 0x10_0000, None)]
    #[case::unknown_render_node(render(130), 0x7000_0000_0000, BASE, None)]
    #[case::render_address_on_kfd(VmaDevice::Kfd, 0x7000_0000_0000, BASE, None)]
    #[case::doorbell_on_a_render_node(render(128), 0x7200_0000_0000, 3 << 62 | 0x1111 << 46, None)]
    fn a_vma_is_matched_by_device_address_and_offset(
        #[case] device: VmaDevice,
        #[case] addr: u64,
        #[case] old: u64,
        #[case] expected: Option<(u64, MappedOn)>,
    ) {
        let found = two_gpus().find(device, addr, old);
        assert_eq!(found.map(|t| (t.new_pgoff, t.on)), expected);
    }

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

    #[rstest]
    #[case("/dev/kfd", Some(VmaDevice::Kfd))]
    #[case("/dev/dri/renderD128", Some(VmaDevice::Render { minor: 128 }))]
    #[case("/dev/dri/renderD", None)]
    #[case("/dev/dri/renderD12x", None)]
    #[case("/dev/dri/card0", None)]
    #[case("/dev/kfdx", None)]
    #[case("/tmp/file", None)]
    fn vma_paths(#[case] path: &str, #[case] device: Option<VmaDevice>) {
        assert_eq!(VmaDevice::from_path(Path::new(path)), device);
    }
}
