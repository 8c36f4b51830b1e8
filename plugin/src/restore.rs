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

use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use images::proto::{CriuKfd, KfdBoEntry};
use images::{pages, ImageFile, KfdImage, PagesFile, PagesReader};
use kfd_abi::criu::{RestoreBo, RestoreDevice, RestoredBo};
use kfd_abi::{AllocFlags, Errno, GpuId, IoctlError, Kfd, RenderNode, Transport};
use topology::{CheckOptions, Mapping};

use crate::copy::{self, BoSource, CopyError, Progress, Staging};
use crate::shm::SharedMem;
use crate::vma::VmaRemaps;
use kfd_abi::platform::Platform;

/// How to restore.
#[derive(Clone, Debug, Default)]
pub(crate) struct RestoreOptions {
    /// Staging geometry per GPU.
    pub staging: Staging,
    /// Whether the GPU copies straight out of mappings of the pages files (see
    /// [`copy::restore_gpu`]).
    pub map_pages: bool,
    /// The `KFD_*_CHECK` rules of the GPU mapping.
    pub checks: CheckOptions,
    /// Counts the bytes copied.
    pub progress: Progress,
    /// When set, the contents are not copied in the restored task: its BOs go to criu's master,
    /// which fills them (see `crate::parallel`).
    pub handoff: Option<std::sync::Arc<crate::parallel::Hub>>,
}

/// Why a restore failed.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The KFD image could not be read.
    #[error(transparent)]
    Image(#[from] images::FrameError),
    /// The image contradicts itself.
    #[error("{file}: {what}")]
    Inconsistent {
        /// The image file.
        file: String,
        /// What is wrong.
        what: String,
    },
    /// A pages file is missing, short, or corrupt.
    #[error(transparent)]
    Pages(#[from] images::PagesError),
    /// The local topology could not be read.
    #[error("reading the local GPU topology: {0}")]
    Topology(#[from] topology::ParseError),
    /// No mapping of the image's GPUs onto this machine's exists.
    #[error("the checkpointed GPUs cannot be mapped onto this machine's:\n{0}")]
    Mapping(#[from] topology::MapError),
    /// The restoring process's `/dev/kfd` does not have the GPUs the topology shows.
    #[error("{0}")]
    ProcessGpus(String),
    /// The restoring process's `/dev/kfd` has a GPU whose render node the process cannot open:
    /// it was not under its container's device rules when it opened `/dev/kfd`. Either the
    /// runtime applies them too late (crun with its own cgroup manager on cgroup v2 applies them
    /// after criu's restore), or criu moved the task out of the cgroup the runtime prepared (runc
    /// on cgroup v2 gives criu no cgroup root, so a checkpoint restored into another container,
    /// as Docker and containerd do, goes into the checkpointed container's cgroup path, which
    /// criu recreates without its rules).
    #[error(
        "the restored process's /dev/kfd has GPU {gpu_id:#x} (renderD{render_minor}), which its \
         container was not given (opening renderD{render_minor} in the restored process: \
         {errno}): the container's device cgroup was not applied yet when criu restored the \
         process (or criu had moved the process out of it), so amdkfd gave it every GPU its \
         cgroup allowed ([{process_gpus}]). Restoring would need renderD{render_minor} and would \
         give the container a GPU it may not use: refused before any GPU state was created. The \
         OCI runtime must put the restored task under the container's device rules before criu \
         restores its files, and criu must leave it there: runc does (podman --runtime runc, for \
         the run and the restore), and so does crun with the systemd cgroup manager (podman \
         --cgroup-manager systemd, the default where systemd runs); crun with --cgroup-manager \
         cgroupfs on cgroup v2 applies them only after criu's restore. Restoring into a container \
         other than the checkpointed one (a new container started from a checkpoint with Docker \
         or containerd), runc on cgroup v2 gives criu no cgroup root, and criu moves the task \
         into the checkpointed container's cgroup path, recreated without its rules: add \
         `manage-cgroups=ignore` to /etc/criu/runc.conf, so that criu leaves it in the new \
         container's cgroup"
    )]
    DeviceCgroupNotApplied {
        /// The GPU the process has but may not use (this node's id).
        gpu_id: u32,
        /// Its render minor.
        render_minor: u32,
        /// What opening its render node in the restored process returned.
        errno: Errno,
        /// The GPUs of the process's `/dev/kfd`, as a list.
        process_gpus: String,
    },
    /// The private data cannot be adapted to the restoring process's other GPUs.
    #[error(transparent)]
    PrivData(#[from] crate::priv_data::PrivDataError),
    /// This KFD has no checkpoint/restore interface (checked before anything is created).
    #[error(transparent)]
    Version(#[from] crate::kfd_version::VersionError),
    /// A KFD or render-node call failed.
    #[error(transparent)]
    Kfd(#[from] IoctlError),
    /// Handing the BOs to criu's master for the parallel restore failed, or what came to the
    /// master does not fit the image.
    #[error("parallel restore of image {id}: {what}")]
    Handoff {
        /// The image id.
        id: u32,
        /// What failed.
        what: String,
    },
    /// Writing a GPU's memory failed.
    #[error("restoring the memory of GPU {gpu_id:#x}: {source}")]
    Copy {
        /// The GPU (image id).
        gpu_id: u32,
        /// What failed.
        #[source]
        source: CopyError,
    },
}

impl RestoreError {
    /// The errno to hand criu.
    pub(crate) fn errno(&self) -> Errno {
        match self {
            RestoreError::Kfd(e) => e.errno().unwrap_or(Errno::EIO),
            RestoreError::Mapping(_) | RestoreError::ProcessGpus(_) => Errno::ENODEV,
            RestoreError::DeviceCgroupNotApplied { .. } => Errno::EACCES,
            RestoreError::PrivData(_) => Errno::EINVAL,
            RestoreError::Version(_) => Errno::ENOSYS,
            RestoreError::Image(_) | RestoreError::Inconsistent { .. } => Errno::EINVAL,
            _ => Errno::EIO,
        }
    }
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

fn inconsistent(id: u32, what: impl Into<String>) -> RestoreError {
    RestoreError::Inconsistent {
        file: KfdImage::file_name(id),
        what: what.into(),
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

/// Whether the KFD images in `dir` say that process `pid` has device state to RESUME:
/// `Some(false)` when its image holds none, `None` when no image of `pid` is found.
pub(crate) fn pid_needs_resume(dir: BorrowedFd<'_>, pid: u32) -> Option<bool> {
    let listing = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd())).ok()?;
    listing
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let id: u32 = name
                .strip_prefix("amdgpu-kfd-")?
                .strip_suffix(".img")?
                .parse()
                .ok()?;
            KfdImage::read(dir, id).ok()
        })
        .find(|msg| msg.pid == pid)
        .map(|msg| !is_empty(&msg))
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

/// The ids of the `/dev/kfd` images in `dir`, in order.
fn kfd_image_ids(dir: BorrowedFd<'_>) -> Result<Vec<u32>, RestoreError> {
    let listing = format!("/proc/self/fd/{}", dir.as_raw_fd());
    let entries = std::fs::read_dir(&listing).map_err(|e| RestoreError::Inconsistent {
        file: listing.clone(),
        what: format!("listing the image directory: {e}"),
    })?;
    let mut ids: Vec<u32> = entries
        .filter_map(|e| {
            let name = e.ok()?.file_name();
            let name = name.to_str()?;
            name.strip_prefix("amdgpu-kfd-")?
                .strip_suffix(".img")?
                .parse()
                .ok()
        })
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

/// The id of the `/dev/kfd` image of process `pid` in `dir`, if there is one (a process may have
/// render nodes open and no `/dev/kfd`). Reads every KFD image of the directory: for render
/// nodes restored before their process's `/dev/kfd` only.
pub(crate) fn kfd_image_of(dir: BorrowedFd<'_>, pid: u32) -> Result<Option<u32>, RestoreError> {
    for id in kfd_image_ids(dir)? {
        if KfdImage::try_read(dir, id)?.is_some_and(|m| m.pid == pid) {
            return Ok(Some(id));
        }
    }
    Ok(None)
}

/// The render minor on this machine of GPU `gpu_id` of the process whose `/dev/kfd` image is
/// `kfd_id`: where the image maps it, as [`restore_kfd`] will; for a GPU the process's KFD does
/// not use (or a process without `/dev/kfd`), the GPU of that id on this machine, and where
/// this machine has none, where another process's `/dev/kfd` image of the checkpoint maps it
/// (a render-only child of a ROCm process goes where its parent goes: a buffer they share
/// stays on one GPU).
pub(crate) fn render_minor_for(
    gpu_id: u32,
    kfd_id: Option<u32>,
    dir: BorrowedFd<'_>,
    local: &topology::Topology,
    checks: &CheckOptions,
) -> Result<Option<u32>, RestoreError> {
    if let Some(kfd_id) = kfd_id {
        let plan = plan(kfd_id, dir, local, checks)?
            .ok_or_else(|| inconsistent(kfd_id, "the image disappeared"))?;
        if let Some(m) = plan.mapping.gpu(gpu_id) {
            return Ok(Some(m.destination_render_minor));
        }
    }
    if let Some(n) = local.gpus().find(|n| n.gpu_id == gpu_id) {
        return Ok(Some(n.render_minor()));
    }
    for other in kfd_image_ids(dir)?
        .into_iter()
        .filter(|&id| Some(id) != kfd_id)
    {
        match plan(other, dir, local, checks) {
            Ok(Some(plan)) => {
                if let Some(m) = plan.mapping.gpu(gpu_id) {
                    log::info!(
                        "GPU {gpu_id:#x} is not on this machine; /dev/kfd image {other} maps it \
                         to renderD{}",
                        m.destination_render_minor
                    );
                    return Ok(Some(m.destination_render_minor));
                }
            }
            Ok(None) => {}
            Err(e) => log::debug!("/dev/kfd image {other} maps no GPU here: {e}"),
        }
    }
    Ok(None)
}

/// The GPUs of this node that a restoring process may use, as it sees them
/// ([`usable_topology`]).
#[derive(Clone, Debug)]
pub(crate) struct UsableGpus {
    /// This node's topology without the GPUs the process may not use.
    pub topology: topology::Topology,
    /// The GPUs left out, each with what opening its render node returned.
    pub refused: Vec<RefusedGpu>,
}

/// A GPU of this node whose render node the restoring process cannot open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RefusedGpu {
    /// Its gpu_id on this node.
    pub gpu_id: u32,
    /// Its render minor.
    pub render_minor: u32,
    /// What the open returned (`EPERM` from a device cgroup, `ENOENT` when the container's
    /// `/dev` has no such node).
    pub errno: Errno,
}

/// The GPUs of this node that the restoring process may use, as it sees them.
///
/// Its device cgroup decides (a container's `--device` list): the kernel hides the other GPUs'
/// topology from it (the parser leaves those nodes out) and refuses to open their render nodes
/// (`EPERM`). criu calls the restore hooks in the restored task itself, so what it can open here
/// is what the container allows; a GPU whose render node it cannot open is left out of the
/// mapping, so that a container given 2 of 8 GPUs is restored onto those 2 and no others.
pub(crate) fn usable_topology<P: Platform>(platform: &P, local: &topology::Topology) -> UsableGpus {
    let refused: Vec<RefusedGpu> = local
        .gpus()
        .filter_map(|n| {
            let minor = n.render_minor();
            match platform.open_render(minor) {
                Ok(_) => None,
                Err(e) => match e.errno() {
                    Some(errno @ (Errno::EPERM | Errno::EACCES | Errno::ENOENT)) => {
                        log::info!(
                            "GPU {:#x} (renderD{minor}) is not for this process: {e}",
                            n.gpu_id
                        );
                        Some(RefusedGpu {
                            gpu_id: n.gpu_id,
                            render_minor: minor,
                            errno,
                        })
                    }
                    // Not a question of access: the restore reports it if it needs the GPU.
                    _ => None,
                },
            }
        })
        .collect();
    let topology = if refused.is_empty() {
        local.clone()
    } else {
        local.restricted_to(|n| !refused.iter().any(|r| r.gpu_id == n.gpu_id))
    };
    UsableGpus { topology, refused }
}

/// Whether `dir` has a `/dev/kfd` image of id `id` (an existing but unreadable one counts: its
/// restore reports why).
pub(crate) fn has_kfd_image(dir: BorrowedFd<'_>, id: u32) -> bool {
    !matches!(
        images::dir::open_read_at(dir, &KfdImage::file_name(id)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound
    )
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

/// The restoring process's GPUs that `mapping` leaves out, with the ids the restore gives them.
///
/// Its `/dev/kfd` has a per-device record for every GPU its device cgroup lets it use
/// (`GET_PROCESS_APERTURES_NEW` lists them; the kernel filters the topology it may read by the
/// same rule), and the 6.1 driver's RESTORE wants a device bucket for each (`num_devices` must
/// equal their number). A GPU the image did not have keeps its own gpu_id as the id the process
/// knows it by, unless the image uses that id for another GPU (the restored process names its
/// GPUs by the image's ids, which must stay unambiguous); then it gets the lowest 16-bit id that
/// no GPU of the image or of this node has. The process never names these GPUs: its runtime
/// enumerated the GPUs before the checkpoint.
fn spare_gpus<T: Transport>(
    kfd: &Kfd<T>,
    mapping: &Mapping,
    image_ids: &[u32],
    usable: &UsableGpus,
) -> Result<Vec<SpareGpu>, RestoreError> {
    let local = &usable.topology;
    let own: Vec<u32> = kfd
        .get_process_apertures_new()?
        .iter()
        .map(|a| a.gpu_id)
        .collect();
    let own_list = || {
        own.iter()
            .map(|g| format!("{g:#x}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(m) = mapping
        .gpus
        .iter()
        .find(|m| !own.contains(&m.destination_gpu_id))
    {
        return Err(RestoreError::ProcessGpus(format!(
            "image GPU {:#x} maps to GPU {:#x} (renderD{}), which the restoring process may not \
             use: its /dev/kfd has GPUs [{}] (is the topology read from another node or outside \
             the container?)",
            m.source_gpu_id,
            m.destination_gpu_id,
            m.destination_render_minor,
            own_list()
        )));
    }
    let local_ids: Vec<u32> = local.gpus().map(|n| n.gpu_id).collect();
    let mut taken: Vec<u32> = image_ids.to_vec();
    let mut out = Vec::new();
    for &gpu in &own {
        if mapping.gpus.iter().any(|m| m.destination_gpu_id == gpu) {
            continue;
        }
        if let Some(r) = usable.refused.iter().find(|r| r.gpu_id == gpu) {
            return Err(RestoreError::DeviceCgroupNotApplied {
                gpu_id: gpu,
                render_minor: r.render_minor,
                errno: r.errno,
                process_gpus: own_list(),
            });
        }
        let node = local.gpus().find(|n| n.gpu_id == gpu).ok_or_else(|| {
            RestoreError::ProcessGpus(format!(
                "the restoring process's /dev/kfd has GPU {gpu:#x} (of [{}]), which the GPU \
                 topology does not show",
                own_list()
            ))
        })?;
        let user_gpu_id = if taken.contains(&gpu) {
            (1..=0xffff)
                .find(|id| !taken.contains(id) && !local_ids.contains(id) && !own.contains(id))
                .ok_or_else(|| RestoreError::ProcessGpus("no free GPU id left".to_owned()))?
        } else {
            gpu
        };
        taken.push(user_gpu_id);
        log::info!(
            "GPU {gpu:#x} (renderD{}) is the restored process's too, but not the image's: it \
             gets no state{}",
            node.render_minor(),
            if user_gpu_id == gpu {
                String::new()
            } else {
                format!(", and id {user_gpu_id:#x} (the image uses {gpu:#x} for another GPU)")
            }
        );
        out.push(SpareGpu {
            gpu_id: gpu,
            user_gpu_id,
            render_minor: node.render_minor(),
        });
    }
    Ok(out)
}

/// Per image GPU, the render minor and gpu_id on this node that `mapping` chose.
fn targets_of(mapping: &Mapping) -> BTreeMap<u32, (u32, u32)> {
    mapping
        .gpus
        .iter()
        .map(|m| {
            (
                m.source_gpu_id,
                (m.destination_render_minor, m.destination_gpu_id),
            )
        })
        .collect()
}

/// Whether the contents of BO `b` are in its GPU's pages file (a GPU with a reader).
fn in_pages(b: &KfdBoEntry, readers: &BTreeMap<u32, PagesReader>) -> bool {
    readers.contains_key(&b.gpu_id) && AllocFlags::from_bits_retain(b.alloc_flags).has_contents()
}

/// Sends the dma-bufs of the BOs with contents to criu's master (the parallel restore); the
/// GPUs' results say 0 bytes, which the master writes.
fn hand_off(
    hub: &crate::parallel::Hub,
    pid: u32,
    id: u32,
    mapping: &Mapping,
    msg: &CriuKfd,
    restored: &[RestoredBo],
    readers: &BTreeMap<u32, PagesReader>,
) -> Result<Vec<GpuRestore>, RestoreError> {
    let fail = |what: String| RestoreError::Handoff { id, what };
    let mut indices = Vec::new();
    let mut fds = Vec::new();
    for (i, (b, r)) in msg.bo_entries.iter().zip(restored).enumerate() {
        if !in_pages(b, readers) {
            continue;
        }
        let fd = r.dmabuf.as_ref().ok_or_else(|| {
            fail(format!(
                "the driver gave no dma-buf for the BO at {:#x} (GPU {:#x})",
                b.addr, b.gpu_id
            ))
        })?;
        indices.push(u32::try_from(i).map_err(|_| fail(format!("BO index {i}")))?);
        fds.push(fd.as_fd());
    }
    let gpus: Vec<(u32, u32)> = mapping
        .gpus
        .iter()
        .filter(|m| readers.contains_key(&m.source_gpu_id))
        .map(|m| (m.source_gpu_id, m.destination_render_minor))
        .collect();
    if !indices.is_empty() {
        let sock = hub
            .task_end
            .socket()
            .map_err(|e| fail(format!("reaching criu's master: {e}")))?;
        let mut at = 0;
        for part in crate::parallel::parts(id, pid, &gpus, &indices) {
            let n = part.bos.len();
            crate::parallel::send_message(sock.as_fd(), &part.encode(), &fds[at..at + n]).map_err(
                |e| {
                    fail(format!(
                        "sending buffers {at}..{} to criu's master: {e}",
                        at + n
                    ))
                },
            )?;
            at += n;
        }
        log::info!(
            "image {id}: {} buffers on {} GPUs handed to criu's master, which restores their \
             contents",
            indices.len(),
            gpus.len()
        );
    }
    Ok(mapping
        .gpus
        .iter()
        .map(|m| GpuRestore {
            gpu_id: m.source_gpu_id,
            actual_gpu_id: m.destination_gpu_id,
            bos: msg
                .bo_entries
                .iter()
                .filter(|b| b.gpu_id == m.source_gpu_id && in_pages(b, readers))
                .count(),
            bytes: 0,
            verified: false,
        })
        .collect())
}

/// In criu's master: checks a job a restored task sent against its image and writes the
/// contents of its BOs, per GPU from that GPU's own pages file. Returns the bytes written.
pub(crate) fn fill_job<P: Platform>(
    platform: &P,
    dir: BorrowedFd<'_>,
    opts: &RestoreOptions,
    job: crate::parallel::Job,
) -> Result<u64, RestoreError> {
    let id = job.image;
    let fail = |what: String| RestoreError::Handoff { id, what };
    let msg = KfdImage::read(dir, id)?;
    check_counts(id, &msg)?;
    let gpu_ids: Vec<u32> = msg
        .device_entries
        .iter()
        .filter(|d| d.gpu_id != 0)
        .map(|d| d.gpu_id)
        .collect();
    let readers = open_readers(id, dir, &msg, &gpu_ids)?;
    let mut dmabufs: Vec<Option<BorrowedFd<'_>>> = vec![None; msg.bo_entries.len()];
    for (index, fd) in &job.bos {
        let slot = dmabufs.get_mut(*index as usize).ok_or_else(|| {
            fail(format!(
                "BO index {index}, but the image has {} BOs",
                msg.bo_entries.len()
            ))
        })?;
        if slot.replace(fd.as_fd()).is_some() {
            return Err(fail(format!("BO {index} sent twice")));
        }
    }
    let mut targets = BTreeMap::new();
    for (i, b) in msg.bo_entries.iter().enumerate() {
        let sent = dmabufs[i].is_some();
        if sent != in_pages(b, &readers) {
            return Err(fail(format!(
                "the BO at {:#x} (index {i}, GPU {:#x}) {}",
                b.addr,
                b.gpu_id,
                if sent {
                    "has no contents in the image but was sent"
                } else {
                    "has contents in the image but was not sent"
                }
            )));
        }
        if sent && !targets.contains_key(&b.gpu_id) {
            let minor = *job
                .gpus
                .get(&b.gpu_id)
                .ok_or_else(|| fail(format!("GPU {:#x} is not in the task's GPU map", b.gpu_id)))?;
            if !(128..=255).contains(&minor) {
                return Err(fail(format!(
                    "GPU {:#x} maps to render minor {minor}, not a render node",
                    b.gpu_id
                )));
            }
            targets.insert(b.gpu_id, (minor, 0));
        }
    }
    let gpus = copy_contents(platform, &targets, &msg, &dmabufs, readers, opts)?;
    Ok(gpus.iter().map(|g| g.bytes).sum())
}

/// Writes every GPU's pages file into its restored BOs, one thread per GPU: `dmabufs` has the
/// dma-buf of each BO of `msg` (by image index), `targets` the render minor and gpu_id of each
/// image GPU on this node.
fn copy_contents<P: Platform>(
    platform: &P,
    targets: &BTreeMap<u32, (u32, u32)>,
    msg: &CriuKfd,
    dmabufs: &[Option<BorrowedFd<'_>>],
    readers: BTreeMap<u32, PagesReader>,
    opts: &RestoreOptions,
) -> Result<Vec<GpuRestore>, RestoreError> {
    std::thread::scope(|s| {
        let workers: Vec<_> = readers
            .into_iter()
            .map(|(gpu, mut reader)| {
                let bos: Vec<BoSource<'_>> = msg
                    .bo_entries
                    .iter()
                    .zip(dmabufs)
                    .filter(|(b, _)| {
                        b.gpu_id == gpu
                            && AllocFlags::from_bits_retain(b.alloc_flags).has_contents()
                    })
                    .map(|(b, fd)| {
                        fd.map(|fd| BoSource {
                            dmabuf: fd,
                            size: b.size,
                            addr: b.addr,
                        })
                    })
                    .collect::<Option<_>>()
                    .unwrap_or_default();
                let m = targets.get(&gpu).copied();
                s.spawn(move || -> Result<GpuRestore, RestoreError> {
                    let (minor, actual) = m.ok_or_else(|| RestoreError::Inconsistent {
                        file: KfdImage::file_name(0),
                        what: format!("GPU {gpu:#x} was not mapped"),
                    })?;
                    let render = platform.open_render(minor)?;
                    let bytes = copy::restore_gpu(
                        &render,
                        &bos,
                        opts.staging,
                        opts.map_pages,
                        &opts.progress,
                        &mut reader,
                    )
                    .map_err(|source| RestoreError::Copy {
                        gpu_id: gpu,
                        source,
                    })?;
                    Ok(GpuRestore {
                        gpu_id: gpu,
                        actual_gpu_id: actual,
                        bos: bos.len(),
                        bytes,
                        verified: reader.is_verified(),
                    })
                })
            })
            .collect();
        copy::join_all(workers, |source| RestoreError::Copy { gpu_id: 0, source })
    })
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
