//! Restoring a process's `/dev/kfd` state, in the restored process.
//!
//! Everything that can be checked before the driver is touched is checked first: the image
//! decodes, its counts agree, every pages file has the length its BOs add up to (and a checksum
//! list that describes it), and every GPU of the image maps onto a local GPU. Only then does
//! `CRIU_OP(RESTORE)` run. Page data is verified chunk by chunk while it streams into the GPUs
//! (reading multi-GB files twice would halve restore speed); a mismatch fails the restore before
//! RESUME, and every fd the restore opened is closed on the way out, so the half-restored state
//! goes away with the restored process that criu then kills.
//!
//! On a node with more GPUs than the image, the mapping takes a subset (see `topology::map`) and
//! the process keeps its image's gpu_ids on it. The 6.1 driver's RESTORE wants one device bucket
//! per GPU of the restoring process (`num_devices` equal to its per-device records, one per GPU
//! its device cgroup allows), so the other GPUs are listed too, with no state and ids the image
//! does not use (`SpareGpu`), and the private data gets their records
//! (module `priv_data`). A host process therefore has those GPUs after the restore (it never
//! names them: its runtime enumerated GPUs before the checkpoint); a container that must not have
//! them is given only its GPUs by its device cgroup.
//!
//! Beside it, the rest of a restore: `render` (render-node buffers), `vma` (which restored
//! buffer a device VMA maps), `sharing` (the table the restored tasks share their buffers in)
//! and `parallel` (buffer contents restored from criu's master: wire format, socket calls,
//! workers).

use std::collections::BTreeMap;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use images::proto::{CriuKfd, KfdBoEntry};
use images::{pages, ImageFile, KfdImage, PagesFile, PagesReader};
use kfd_abi::criu::{RestoreBo, RestoreDevice};
use kfd_abi::{AllocFlags, GpuId, Kfd, RenderNode, Transport};
use topology::{CheckOptions, Mapping};

use crate::copy::{Progress, Reading, Staging};
use crate::shm::SharedMem;

use kfd_abi::platform::Platform;

mod contents;
mod error;
mod gpus;
mod lookup;
pub(crate) mod parallel;
pub(crate) mod render;
pub(crate) mod sharing;
pub(crate) mod vma;

pub(crate) use contents::fill_job;
use contents::{copy_contents, hand_off};
use error::inconsistent;
pub use error::RestoreError;
use gpus::{spare_gpus, targets_of};
pub(crate) use gpus::{usable_topology, UsableGpus};
pub(crate) use lookup::{has_kfd_image, kfd_image_of, pid_needs_resume, render_minor_for};
use vma::VmaRemaps;

/// How to restore.
#[derive(Clone, Debug, Default)]
pub(crate) struct RestoreOptions {
    /// Staging geometry per GPU.
    pub staging: Staging,
    /// How the pages files are read (see [`crate::copy::restore_gpu`]).
    pub reading: Reading,
    /// The `KFD_*_CHECK` rules of the GPU mapping.
    pub checks: CheckOptions,
    /// Counts the bytes copied.
    pub progress: Progress,
    /// When set, the contents are not copied in the restored task: its BOs go to criu's master,
    /// which fills them (see `parallel`).
    pub handoff: Option<std::sync::Arc<parallel::Hub>>,
}

/// Per GPU, what a restore did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GpuRestore {
    /// The GPU's id in the image (what the process keeps using).
    pub gpu_id: u32,
    /// The local GPU it was restored onto.
    pub actual_gpu_id: u32,
    /// BOs whose contents were written.
    pub bos: usize,
    /// Bytes written.
    pub bytes: u64,
    /// Whether the bytes were verified against checksums.
    pub verified: bool,
}

/// A GPU of the restoring process that the image did not have (a node with more GPUs): the
/// 6.1 driver's RESTORE needs it listed, under an id the process does not use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SpareGpu {
    /// Its gpu_id on this machine.
    pub gpu_id: u32,
    /// The id the restored process has for it (its own gpu_id unless the image uses that id).
    pub user_gpu_id: u32,
    /// Its render minor.
    pub render_minor: u32,
}

/// A restored `/dev/kfd`: the files the restored process keeps, and what criu still needs.
#[derive(Debug)]
pub(crate) struct Restored<T: Transport> {
    /// The process's new `/dev/kfd` (its fd goes back to criu).
    pub kfd: Kfd<T>,
    /// The render-node files whose VMs the process uses, by image GPU id.
    pub renders: BTreeMap<u32, RenderNode<T>>,
    /// The GPU mapping used.
    pub mapping: Mapping,
    /// Offset changes for UPDATE_VMA_MAP.
    pub vmas: VmaRemaps,
    /// Per GPU.
    pub gpus: Vec<GpuRestore>,
    /// The pid recorded in the image.
    pub pid: u32,
    /// Time from reading the image to the last byte written.
    pub elapsed: Duration,
    /// Dma-bufs of the restored BOs that other files import or hold, by their key
    /// (`kfd_bo_entry.handle`), for the other restored tasks.
    pub shared: Vec<(u32, std::os::fd::OwnedFd)>,
}

impl<T: Transport> Restored<T> {
    /// Bytes of BO contents written.
    pub(crate) fn bytes(&self) -> u64 {
        self.gpus.iter().map(|g| g.bytes).sum()
    }
}

/// The image's BOs as `CRIU_OP(RESTORE)` takes them, in image order.
pub fn restore_bos(entries: &[KfdBoEntry]) -> Vec<RestoreBo> {
    entries
        .iter()
        .map(|b| RestoreBo {
            addr: b.addr,
            size: b.size,
            offset: b.offset,
            gpu_id: b.gpu_id,
            alloc_flags: AllocFlags::from_bits_retain(b.alloc_flags),
        })
        .collect()
}

/// Whether an image has no device state at all (no BOs, queues, events or SVM ranges): nothing
/// to RESTORE or RESUME.
pub(crate) fn is_empty(msg: &CriuKfd) -> bool {
    msg.bo_entries.is_empty() && msg.num_of_objects == 0
}

/// Checks the counts of a `criu_kfd` message against its lists.
fn check_counts(id: u32, msg: &CriuKfd) -> Result<(), RestoreError> {
    if msg.num_of_bos != msg.bo_entries.len() as u64 {
        return Err(inconsistent(
            id,
            format!(
                "num_of_bos is {} but {} BO entries follow",
                msg.num_of_bos,
                msg.bo_entries.len()
            ),
        ));
    }
    let gpus = msg.device_entries.iter().filter(|d| d.gpu_id != 0).count();
    if msg.num_of_gpus as usize != gpus {
        return Err(inconsistent(
            id,
            format!(
                "num_of_gpus is {} but {gpus} GPU entries follow",
                msg.num_of_gpus
            ),
        ));
    }
    if let Some(b) = msg.bo_entries.iter().find(|b| {
        !msg.device_entries
            .iter()
            .any(|d| d.gpu_id == b.gpu_id && d.gpu_id != 0)
    }) {
        return Err(inconsistent(
            id,
            format!(
                "the BO at {:#x} is on GPU {:#x}, which has no device entry",
                b.addr, b.gpu_id
            ),
        ));
    }
    Ok(())
}

/// Everything a restore checks before it touches the driver: the image, its pages files (opened,
/// lengths and checksum lists checked) and the GPU mapping onto the local topology.
#[derive(Debug)]
pub struct Plan {
    /// The image id.
    pub id: u32,
    /// The decoded `criu_kfd` message.
    pub image: CriuKfd,
    /// The image's GPU ids, in image order.
    pub gpu_ids: Vec<u32>,
    /// An open, pre-checked reader per GPU with contents.
    pub readers: BTreeMap<u32, PagesReader>,
    /// The mapping of the image's GPUs onto the local ones.
    pub mapping: Mapping,
}

/// Reads and checks image `id` in `dir` and maps its GPUs onto `local` under `checks`.
/// `Ok(None)`: there is no KFD image of that id.
pub fn plan(
    id: u32,
    dir: BorrowedFd<'_>,
    local: &topology::Topology,
    checks: &CheckOptions,
) -> Result<Option<Plan>, RestoreError> {
    let Some(image) = KfdImage::try_read(dir, id)? else {
        return Ok(None);
    };
    check_counts(id, &image)?;
    let gpu_ids: Vec<u32> = image
        .device_entries
        .iter()
        .filter(|d| d.gpu_id != 0)
        .map(|d| d.gpu_id)
        .collect();
    let readers = open_readers(id, dir, &image, &gpu_ids)?;
    let source = crate::topology_image::from_device_entries(&image.device_entries);
    let mapping = topology::map_gpus(&source, local, checks)?;
    Ok(Some(Plan {
        id,
        image,
        gpu_ids,
        readers,
        mapping,
    }))
}

/// An open, pre-checked reader of the pages file of each GPU of `gpu_ids` that has contents.
fn open_readers(
    id: u32,
    dir: BorrowedFd<'_>,
    image: &CriuKfd,
    gpu_ids: &[u32],
) -> Result<BTreeMap<u32, PagesReader>, RestoreError> {
    let mut readers = BTreeMap::new();
    for &gpu in gpu_ids {
        let len = pages::kfd_pages_len(&image.bo_entries, gpu);
        let sums = pages::find_checksums(&image.pages_checksums, gpu);
        let which = PagesFile::Kfd { id, gpu_id: gpu };
        if len == 0 && sums.is_none() {
            continue; // upstream writes an empty file; nothing to read
        }
        readers.insert(gpu, PagesReader::open(dir, which, len, sums)?);
    }
    Ok(readers)
}

/// Restores the KFD state of image `id` from `dir` into the calling process, on the GPUs of
/// `usable` (those of this node the process may use: [`usable_topology`]). `Ok(None)`: there is
/// no KFD image of that id (the object is not ours). `preopened` holds render nodes restored before this `/dev/kfd` (by GPU user id): the
/// driver gets those files, so that they are the process's compute VMs.
pub(crate) fn restore_kfd<P: Platform>(
    platform: &P,
    usable: &UsableGpus,
    id: u32,
    dir: BorrowedFd<'_>,
    opts: &RestoreOptions,
    mut preopened: BTreeMap<u32, RenderNode<P::Device>>,
    keep: &dyn Fn(u32) -> bool,
) -> Result<Option<Restored<P::Device>>, RestoreError> {
    let start = Instant::now();
    let local = &usable.topology;
    let Some(Plan {
        image: msg,
        gpu_ids,
        readers,
        mapping,
        ..
    }) = plan(id, dir, local, &opts.checks)?
    else {
        return Ok(None);
    };
    log::info!("GPU mapping for image {id}:\n{mapping}");

    let kfd = platform.open_kfd()?;
    crate::kfd_version::check(&kfd)?;
    // A process without device state needs no RESTORE, so no bucket for any GPU.
    let spares = if is_empty(&msg) {
        Vec::new()
    } else {
        spare_gpus(&kfd, &mapping, &gpu_ids, usable)?
    };
    let spare_ids: Vec<u32> = spares.iter().map(|g| g.user_gpu_id).collect();
    let priv_data = if spares.is_empty() {
        std::borrow::Cow::Borrowed(&msg.priv_data)
    } else {
        std::borrow::Cow::Owned(crate::priv_data::for_more_devices(
            &msg.priv_data,
            gpu_ids.len(),
            msg.bo_entries.len(),
            msg.num_of_objects,
            &spare_ids,
        )?)
    };
    let mut renders = BTreeMap::new();
    for &gpu in &gpu_ids {
        let m = mapping
            .gpu(gpu)
            .ok_or_else(|| inconsistent(id, format!("GPU {gpu:#x} was not mapped")))?;
        let render = match preopened.remove(&gpu) {
            Some(r) => r,
            None => platform.open_render(m.destination_render_minor)?,
        };
        renders.insert(gpu, render);
    }
    // The driver keeps a reference to each render file it takes a VM from: the spares' files
    // need not outlive the RESTORE in this process.
    let spare_renders = spares
        .iter()
        .map(|g| platform.open_render(g.render_minor))
        .collect::<Result<Vec<_>, _>>()?;
    let mut devices = gpu_ids
        .iter()
        .map(|&gpu| {
            let m = mapping
                .gpu(gpu)
                .ok_or_else(|| inconsistent(id, format!("GPU {gpu:#x} was not mapped")))?;
            let bad = || inconsistent(id, format!("GPU id 0 in the mapping of {gpu:#x}"));
            Ok(RestoreDevice {
                user_gpu_id: GpuId::new(gpu).ok_or_else(bad)?,
                actual_gpu_id: GpuId::new(m.destination_gpu_id).ok_or_else(bad)?,
                drm: renders.get(&gpu).map(AsFd::as_fd).ok_or_else(bad)?,
            })
        })
        .collect::<Result<Vec<_>, RestoreError>>()?;
    for (g, render) in spares.iter().zip(&spare_renders) {
        let bad = || inconsistent(id, format!("GPU id 0 among the spare GPUs {spares:?}"));
        devices.push(RestoreDevice {
            user_gpu_id: GpuId::new(g.user_gpu_id).ok_or_else(bad)?,
            actual_gpu_id: GpuId::new(g.gpu_id).ok_or_else(bad)?,
            drm: render.as_fd(),
        });
    }
    let bos = restore_bos(&msg.bo_entries);
    // A process that opened /dev/kfd but has no buffers and no queues or events has no device
    // state: its fresh /dev/kfd is all it needs (and 6.1's RESTORE refuses zero BOs).
    let mut restored = if is_empty(&msg) {
        log::info!("image {id} holds no GPU state; /dev/kfd is reopened only");
        Vec::new()
    } else {
        kfd.criu_restore(&devices, &bos, &priv_data, msg.num_of_objects)?
    };
    drop(devices);
    drop(spare_renders);

    let gpus = match &opts.handoff {
        Some(hub) => hand_off(
            hub,
            platform.process_id(),
            id,
            &mapping,
            &msg,
            &restored,
            &readers,
        )?,
        None => {
            let targets = targets_of(&mapping);
            let dmabufs: Vec<Option<BorrowedFd<'_>>> = restored
                .iter()
                .map(|r| r.dmabuf.as_ref().map(AsFd::as_fd))
                .collect();
            copy_contents(platform, &targets, &msg, &dmabufs, readers, opts)?
        }
    };

    if msg.shared_mem_size != 0 {
        let shm = SharedMem {
            size: msg.shared_mem_size,
            magic: msg.shared_mem_magic,
        };
        let path = platform.hsakmt_shm_path();
        if let Err(e) = shm.recreate(&path) {
            log::warn!("recreating {}: {e}", path.display());
        }
        // libhsakmt's semaphore beside it, as upstream recreates it (see crate::shm).
        let dir = path.parent().unwrap_or_else(|| std::path::Path::new("/"));
        match crate::shm::recreate_semaphore(dir, crate::shm::HSAKMT_SEM_FILE) {
            Ok(true) => log::info!(
                "recreated libhsakmt's semaphore {}",
                dir.join(crate::shm::HSAKMT_SEM_FILE).display()
            ),
            Ok(false) => {}
            Err(e) => log::warn!(
                "recreating libhsakmt's semaphore {}: {e}",
                dir.join(crate::shm::HSAKMT_SEM_FILE).display()
            ),
        }
    }

    let offsets: Vec<u64> = restored.iter().map(|r| r.restored_offset).collect();
    let vmas = VmaRemaps::new(&msg, &offsets);
    let shared = msg
        .bo_entries
        .iter()
        .zip(restored.iter_mut())
        .filter(|(b, _)| b.handle != u32::MAX && keep(b.handle))
        .filter_map(|(b, r)| Some((b.handle, r.dmabuf.take()?)))
        .collect();

    Ok(Some(Restored {
        kfd,
        renders,
        mapping,
        vmas,
        gpus,
        pid: msg.pid,
        elapsed: start.elapsed(),
        shared,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_process_finds_its_own_kfd_image_by_pid() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = std::fs::File::open(tmp.path()).unwrap();
        for (id, pid) in [(8, 100), (12, 200), (30, 300)] {
            let msg = CriuKfd {
                pid,
                ..Default::default()
            };
            KfdImage::write(dir.as_fd(), id, &msg).unwrap();
        }
        // Other files of the directory are not KFD images.
        for name in [
            "amdgpu-kfd-x.img",
            "amdgpu-pages-12-1e52.img",
            "core-200.img",
        ] {
            std::fs::write(tmp.path().join(name), b"not ours").unwrap();
        }
        assert_eq!(kfd_image_of(dir.as_fd(), 200).unwrap(), Some(12));
        assert_eq!(kfd_image_of(dir.as_fd(), 300).unwrap(), Some(30));
        assert_eq!(kfd_image_of(dir.as_fd(), 400).unwrap(), None);
    }
}
