//! Dumping a process's `/dev/kfd` state: devices, BOs and their contents, queues and events.
//!
//! `PROCESS_INFO` pauses the process's GPU queues; from then on a [`PauseGuard`] owns the duty to
//! unpause them, so every way out of [`dump_kfd`] but success — an error or a panic — leaves the
//! process running. A successful dump leaves them paused: the caller unpauses once criu has dumped
//! the tasks' memory (at DUMP_DEVICES_LATE, or in the exit hook of a criu without it), so that no
//! kernel writes host memory after the point its saved waves resume from.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use images::proto::{CriuKfd, KfdBoEntry};
use images::{ImageFile, KfdImage, PagesFile, PagesWriter};
use kfd_abi::criu::Checkpoint;
use kfd_abi::{Errno, IoctlError, Kfd, Transport};
use topology::Topology;

use crate::copy::{self, BoSource, CopyError, Progress, Staging};
use crate::shm::SharedMem;
use kfd_abi::platform::Platform;

pub(crate) mod gem;
pub(crate) mod sharing;

/// How to dump.
#[derive(Clone, Debug)]
pub(crate) struct DumpOptions {
    /// Staging geometry per GPU.
    pub staging: Staging,
    /// Write per-chunk checksums of the pages files (our extension; upstream readers ignore it).
    pub checksums: bool,
    /// Counts the bytes copied.
    pub progress: Progress,
    /// Start writing the pages files back to the disk while dumping
    /// ([`PagesWriter::set_write_behind`]).
    pub write_behind: bool,
    /// Write the pages files with direct I/O where the file system takes it
    /// ([`PagesWriter::use_direct_io`]).
    pub direct: bool,
}

impl Default for DumpOptions {
    fn default() -> Self {
        Self {
            staging: Staging::default(),
            checksums: true,
            progress: Progress::default(),
            write_behind: false,
            direct: false,
        }
    }
}

/// What a dump wrote, per GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GpuDump {
    /// The GPU's id in the image (the id the process uses).
    pub gpu_id: u32,
    /// The GPU it is on now.
    pub actual_gpu_id: u32,
    /// BOs whose contents were saved.
    pub bos: usize,
    /// Bytes saved.
    pub bytes: u64,
}

/// What a dump did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DumpReport {
    /// The pid KFD reported.
    pub pid: u32,
    /// All BOs of the process.
    pub bos: usize,
    /// Queue, event and SVM objects.
    pub objects: u32,
    /// Per GPU.
    pub gpus: Vec<GpuDump>,
    /// The buffer object of each BO with a dma-buf: (index in the image, identity).
    pub buffers: Vec<(usize, crate::gem::ObjectId)>,
    /// Time from PROCESS_INFO to the last image written.
    pub elapsed: Duration,
}

impl DumpReport {
    /// Bytes of BO contents saved.
    pub(crate) fn bytes(&self) -> u64 {
        self.gpus.iter().map(|g| g.bytes).sum()
    }
}

/// Why a dump failed. The process was unpaused in every case.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DumpError {
    /// This KFD has no checkpoint/restore interface (checked before anything is paused).
    #[error(transparent)]
    Version(#[from] crate::kfd_version::VersionError),
    /// A KFD call failed.
    #[error(transparent)]
    Kfd(#[from] IoctlError),
    /// The process uses a GPU that the topology does not show.
    #[error(
        "the process uses GPU {gpu_id:#x}, which is not in the topology at {root} \
         (a container that sees only some GPUs?)"
    )]
    UnknownGpu {
        /// The missing GPU.
        gpu_id: u32,
        /// The topology root.
        root: String,
    },
    /// Copying a GPU's memory failed.
    #[error("saving the memory of GPU {gpu_id:#x}: {source}")]
    Copy {
        /// The GPU (image id).
        gpu_id: u32,
        /// What failed.
        #[source]
        source: CopyError,
    },
    /// A pages file could not be written.
    #[error(transparent)]
    Pages(#[from] images::PagesError),
    /// The KFD image could not be written.
    #[error(transparent)]
    Image(#[from] images::FrameError),
}

impl DumpError {
    /// The errno to hand criu.
    pub(crate) fn errno(&self) -> Errno {
        match self {
            DumpError::Kfd(e) => e.errno().unwrap_or(Errno::EIO),
            DumpError::Version(_) => Errno::ENOSYS,
            DumpError::UnknownGpu { .. } => Errno::ENODEV,
            _ => Errno::EIO,
        }
    }
}

/// Unpauses the process's queues when dropped, unless told to keep them paused.
#[derive(Debug)]
pub(crate) struct PauseGuard<'k, T: Transport> {
    kfd: &'k Kfd<T>,
    armed: bool,
}

impl<'k, T: Transport> PauseGuard<'k, T> {
    fn new(kfd: &'k Kfd<T>) -> Self {
        Self { kfd, armed: true }
    }

    /// Leaves the queues paused: the caller takes over the duty to unpause.
    fn defuse(mut self) {
        self.armed = false;
    }
}

impl<T: Transport> Drop for PauseGuard<'_, T> {
    fn drop(&mut self) {
        if self.armed {
            match self.kfd.criu_unpause() {
                Ok(()) => log::debug!("unpaused the process's GPU queues"),
                Err(e) => log::error!("{e}"),
            }
        }
    }
}

/// Dumps the KFD state of the process whose `/dev/kfd` is `kfd` (criu's dup of the target's fd)
/// as image `id` into `dir`, and leaves its queues paused (the caller unpauses them); a failed
/// dump unpauses them.
pub(crate) fn dump_kfd<P: Platform>(
    platform: &P,
    topo: &Topology,
    kfd: &Kfd<P::Device>,
    id: u32,
    dir: BorrowedFd<'_>,
    opts: &DumpOptions,
) -> Result<DumpReport, DumpError> {
    let start = Instant::now();
    crate::kfd_version::check_platform(platform)?;
    let info = kfd.criu_process_info()?;
    let guard = PauseGuard::new(kfd);
    log::info!(
        "dumping pid {}: {} GPUs, {} BOs, {} objects, {} bytes of private data",
        info.pid,
        info.num_devices,
        info.num_bos,
        info.num_objects,
        info.priv_data_size
    );
    let checkpoint = kfd.criu_checkpoint(&info)?;

    // user id -> actual id, as the driver sees the process now.
    let actual: BTreeMap<u32, u32> = checkpoint
        .devices
        .iter()
        .map(|d| (d.user_gpu_id, d.actual_gpu_id))
        .collect();
    for &a in actual.values() {
        if topo.gpu(a).is_none() {
            return Err(DumpError::UnknownGpu {
                gpu_id: a,
                root: platform.topology_root().display().to_string(),
            });
        }
    }

    let buffers = checkpoint
        .bos
        .iter()
        .enumerate()
        .filter_map(|(i, b)| Some((i, crate::gem::object_id(b.dmabuf.as_ref()?.as_fd()).ok()?)))
        .collect();
    let gpus = copy_contents(platform, topo, &actual, &checkpoint, id, dir, opts)?;
    let mut msg = image_message(topo, &actual, &checkpoint, info.pid);
    msg.pages_checksums = gpus.iter().filter_map(|(_, c)| c.clone()).collect();
    if let Some(shm) = SharedMem::probe(&platform.hsakmt_shm_path()) {
        msg.shared_mem_size = shm.size;
        msg.shared_mem_magic = shm.magic;
    }
    KfdImage::write(dir, id, &msg)?;

    guard.defuse();
    Ok(DumpReport {
        pid: info.pid,
        bos: checkpoint.bos.len(),
        objects: checkpoint.num_objects,
        gpus: gpus.into_iter().map(|(g, _)| g).collect(),
        buffers,
        elapsed: start.elapsed(),
    })
}

/// The `criu_kfd` message of a checkpoint: every CPU node and the GPU nodes the process has
/// (under the ids it uses), every BO, and the driver's private data.
fn image_message(
    topo: &Topology,
    actual: &BTreeMap<u32, u32>,
    ck: &Checkpoint,
    pid: u32,
) -> CriuKfd {
    // The process's GPUs are recorded under its user ids; this is what makes re-checkpointing a
    // process restored onto other GPUs work (the ids it uses are the ids in its image).
    let user_of: BTreeMap<u32, u32> = actual.iter().map(|(&u, &a)| (a, u)).collect();
    // Only the GPUs the process has: the driver gives a process records only for the GPUs its
    // device cgroup allows (a container given one of a node's GPUs has that one), and its
    // restore needs a place for those only. criu's own view (this topology) has them all.
    let topo = topo.restricted_to(|n| user_of.contains_key(&n.gpu_id));
    let mut entries = crate::topology_image::to_device_entries(&topo);
    for e in &mut entries {
        if let Some(&user) = user_of.get(&e.gpu_id) {
            e.gpu_id = user;
        }
    }
    let num_of_gpus =
        u32::try_from(entries.iter().filter(|e| e.gpu_id != 0).count()).unwrap_or(u32::MAX);
    let num_of_cpus = u32::try_from(entries.len()).unwrap_or(u32::MAX) - num_of_gpus;
    CriuKfd {
        pid,
        num_of_gpus,
        num_of_cpus,
        device_entries: entries,
        num_of_bos: ck.bos.len() as u64,
        bo_entries: ck
            .bos
            .iter()
            .map(|b| KfdBoEntry {
                addr: b.addr,
                size: b.size,
                offset: b.offset,
                alloc_flags: b.alloc_flags.bits(),
                gpu_id: b.gpu_id,
                handle: u32::MAX,
            })
            .collect(),
        num_of_objects: ck.num_objects,
        shared_mem_size: 0,
        shared_mem_magic: 0,
        priv_data: ck.priv_data.clone(),
        pages_checksums: Vec::new(),
    }
}

/// Saves the VRAM and GTT contents of every GPU in parallel, one thread per GPU.
fn copy_contents<P: Platform>(
    platform: &P,
    topo: &Topology,
    actual: &BTreeMap<u32, u32>,
    ck: &Checkpoint,
    id: u32,
    dir: BorrowedFd<'_>,
    opts: &DumpOptions,
) -> Result<Vec<(GpuDump, Option<images::proto::PagesChecksums>)>, DumpError> {
    let chunk = opts.checksums.then_some(images::DEFAULT_CHUNK_SIZE);
    std::thread::scope(|s| {
        let workers: Vec<_> = actual
            .iter()
            .map(|(&user, &actual_id)| {
                let bos: Vec<BoSource<'_>> = ck
                    .bos
                    .iter()
                    .filter(|b| b.gpu_id == user && b.alloc_flags.has_contents())
                    .filter_map(|b| {
                        Some(BoSource {
                            dmabuf: b.dmabuf.as_ref()?.as_fd(),
                            size: b.size,
                            addr: b.addr,
                        })
                    })
                    .collect();
                let minor = topo.gpu(actual_id).map_or(0, |n| n.render_minor());
                s.spawn(move || -> Result<_, DumpError> {
                    let total: u64 = bos.iter().map(|b| b.size).sum();
                    let which = PagesFile::Kfd { id, gpu_id: user };
                    let mut writer = PagesWriter::new(dir, which, total, chunk)?;
                    writer.set_write_behind(opts.write_behind);
                    if opts.direct {
                        writer.use_direct_io();
                    }
                    if !bos.is_empty() {
                        let render = platform.open_render(minor)?;
                        copy::dump_gpu(&render, &bos, opts.staging, &opts.progress, &mut writer)
                            .map_err(|source| DumpError::Copy {
                                gpu_id: user,
                                source,
                            })?;
                    }
                    let sums = writer.finish()?;
                    Ok((
                        GpuDump {
                            gpu_id: user,
                            actual_gpu_id: actual_id,
                            bos: bos.len(),
                            bytes: total,
                        },
                        sums,
                    ))
                })
            })
            .collect();
        copy::join_all(workers, |source| DumpError::Copy { gpu_id: 0, source })
    })
}
