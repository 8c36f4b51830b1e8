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
//! A task forked from a restored parent finds its parent's render-node buffers in the
//! [`sharing`](super::sharing) table.

use std::collections::BTreeMap;
use std::path::Path;

use images::proto::CriuKfd;
use kfd_abi::AllocFlags;

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
