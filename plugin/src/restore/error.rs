//! What can go wrong restoring a `/dev/kfd` image, and the errno criu gets for it.

use images::{ImageFile, KfdImage};
use kfd_abi::{Errno, IoctlError};

use crate::copy::CopyError;

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

pub(super) fn inconsistent(id: u32, what: impl Into<String>) -> RestoreError {
    RestoreError::Inconsistent {
        file: KfdImage::file_name(id),
        what: what.into(),
    }
}
