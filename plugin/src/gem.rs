//! Render-node buffers (GEM objects) and dma-bufs shared between processes, as Linux 6.18 lets a
//! checkpoint see them and as upstream's development-branch plugin saves them.
//!
//! Here: what both phases name, a buffer object's identity ([`ObjectId`]) and what can fail
//! ([`GemError`]). The dump lists and saves the buffers (`dump::gem`) and finds which entries are
//! one object (`dump::sharing`); the restore makes them again (`restore::render`).

use std::os::fd::BorrowedFd;
use std::os::unix::fs::MetadataExt;

use images::{FrameError, PagesError};
use kfd_abi::render::GemDomain;
use kfd_abi::{Errno, IoctlError};

use crate::copy::CopyError;

/// A buffer object's identity across files and processes: its dma-buf's device and inode (one
/// dma-buf file per object, whichever file exports it).
pub(crate) type ObjectId = (u64, u64);

/// The identity of the object whose dma-buf is `fd`.
pub(crate) fn object_id(fd: BorrowedFd<'_>) -> std::io::Result<ObjectId> {
    let meta = std::fs::File::from(fd.try_clone_to_owned()?).metadata()?;
    Ok((meta.dev(), meta.ino()))
}

/// Why dumping or restoring render-node buffers or a dma-buf failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GemError {
    /// A render-node call failed.
    #[error("{what}: {source}")]
    Ioctl {
        /// What was being done.
        what: String,
        /// The failed call.
        #[source]
        source: IoctlError,
    },
    /// A userptr GEM object: the listing does not say which memory it wraps.
    #[error(
        "renderD{minor}: GEM handle {handle} wraps process memory (AMDGPU_GEM_USERPTR); Linux's \
         AMDGPU_GEM_LIST_HANDLES does not say which, so it cannot be recreated: refused"
    )]
    Userptr {
        /// The render minor.
        minor: u32,
        /// The handle.
        handle: u32,
    },
    /// Copying a buffer's contents failed.
    #[error("the buffer at GEM handle {handle} of renderD{minor}: {source}")]
    Copy {
        /// The render minor.
        minor: u32,
        /// The handle.
        handle: u32,
        /// What failed.
        #[source]
        source: CopyError,
    },
    /// A pages file.
    #[error(transparent)]
    Pages(#[from] PagesError),
    /// An image file.
    #[error(transparent)]
    Image(#[from] FrameError),
    /// Sharing that upstream's image format cannot name.
    #[error("{0}")]
    Unshareable(String),
    /// Buffers to restore on a kernel without 6.18's ioctls.
    #[error(
        "{file}: the image holds {count} buffer(s) of render node renderD{minor}; recreating \
         them at their GEM handles needs Linux 6.18 (AMDGPU_GEM_LIST_HANDLES, \
         DRM_IOCTL_GEM_CHANGE_HANDLE), which this kernel does not have (AMDGPU_GEM_LIST_HANDLES \
         answered EINVAL): refused before anything was created. Restore it on Linux 6.18 or \
         later"
    )]
    NeedsLinux618 {
        /// The render image.
        file: String,
        /// Its buffers.
        count: usize,
        /// The render minor at checkpoint.
        minor: u32,
    },
    /// A buffer's old handle number that a kernel without `GEM_CHANGE_HANDLE` cannot give it.
    #[error(
        "{file}: GEM handle {handle}: {why}; this kernel cannot move a buffer to another handle \
         (DRM_IOCTL_GEM_CHANGE_HANDLE answered EINVAL), so the buffer cannot get its old number: \
         refused"
    )]
    HandleUnreachable {
        /// The render image.
        file: String,
        /// The handle number the image gives the buffer.
        handle: u32,
        /// Why it cannot be reached.
        why: String,
    },
    /// A shared buffer's creator did not publish it in time.
    #[error(
        "{what}: no restored process published the buffer shared as GEM handle {key} within \
         {secs} s (the file that creates it was not restored, or waits for this one)"
    )]
    NotPublished {
        /// What needed it.
        what: String,
        /// Its key.
        key: u32,
        /// How long was waited.
        secs: u64,
    },
    /// An image contradicts itself.
    #[error("{file}: {what}")]
    Inconsistent {
        /// The image file.
        file: String,
        /// What is wrong.
        what: String,
    },
}

impl GemError {
    /// The errno criu gets.
    pub(crate) fn errno(&self) -> Errno {
        match self {
            Self::Ioctl { source, .. } => source.errno().unwrap_or(Errno::EIO),
            Self::Userptr { .. }
            | Self::Unshareable(_)
            | Self::Inconsistent { .. }
            | Self::HandleUnreachable { .. } => Errno::EINVAL,
            // Not ENOTSUP: criu takes that for "not ours".
            Self::NeedsLinux618 { .. } => Errno::EINVAL,
            Self::NotPublished { .. } => Errno::ETIMEDOUT,
            Self::Copy { .. } | Self::Pages(_) | Self::Image(_) => Errno::EIO,
        }
    }
}

pub(crate) fn ioctl(what: impl Into<String>) -> impl FnOnce(IoctlError) -> GemError {
    let what = what.into();
    move |source| GemError::Ioctl { what, source }
}

/// `AMDGPU_GEM_DOMAIN_VRAM | AMDGPU_GEM_DOMAIN_GTT`: buffers with contents.
pub(crate) fn has_contents(domains: u32) -> bool {
    GemDomain::from_bits_retain(u64::from(domains)).intersects(GemDomain::VRAM | GemDomain::GTT)
}

/// Page size of the alignment `GEM_LIST_HANDLES` reports in pages.
pub(crate) const PAGE: u64 = 4096;
