//! Finding the plugin's files in an image directory by their names.

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use images::names;

use super::CliError;

/// A file name of the plugin's, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum ImageName {
    /// `amdgpu-kfd-<id>.img`.
    Kfd {
        /// CRIU object id.
        id: u32,
    },
    /// `amdgpu-renderD-<id>.img`.
    Render {
        /// CRIU object id.
        id: u32,
    },
    /// `amdgpu-dmabuf_<id>.img`.
    Dmabuf {
        /// CRIU object id.
        id: u32,
    },
    /// `amdgpu-pages-<id>-<gpu_id>.img`.
    KfdPages {
        /// CRIU object id of the `/dev/kfd` file.
        id: u32,
        /// The GPU.
        gpu_id: u32,
    },
    /// `amdgpu-drm-pages-<id>-<minor>-<index>.img`.
    DrmPages {
        /// CRIU object id of the render-node file.
        id: u32,
        /// Render minor.
        minor: u32,
        /// BO index.
        index: u32,
    },
}

/// A `%d`-printed id back to the `u32` bit pattern it was printed from.
fn c_int(s: &str) -> Option<u32> {
    s.parse::<i32>()
        .ok()
        .map(|v| u32::from_ne_bytes(v.to_ne_bytes()))
}

fn hex(s: &str) -> Option<u32> {
    u32::from_str_radix(s, 16).ok()
}

impl ImageName {
    /// Decodes `name`; `None` for files that are not the plugin's (criu's own images). A name is
    /// accepted only if the plugin would spell it exactly so.
    #[must_use]
    pub(crate) fn parse(name: &str) -> Option<Self> {
        let body = name.strip_prefix("amdgpu-")?.strip_suffix(".img")?;
        let parsed = if let Some(rest) = body.strip_prefix("kfd-") {
            Self::Kfd { id: c_int(rest)? }
        } else if let Some(rest) = body.strip_prefix("renderD-") {
            Self::Render { id: c_int(rest)? }
        } else if let Some(rest) = body.strip_prefix("dmabuf_") {
            Self::Dmabuf { id: c_int(rest)? }
        } else if let Some(rest) = body.strip_prefix("drm-pages-") {
            let (rest, index) = rest.rsplit_once('-')?;
            let (id, minor) = rest.rsplit_once('-')?;
            Self::DrmPages {
                id: c_int(id)?,
                minor: c_int(minor)?,
                index: hex(index)?,
            }
        } else if let Some(rest) = body.strip_prefix("pages-") {
            let (id, gpu) = rest.rsplit_once('-')?;
            Self::KfdPages {
                id: c_int(id)?,
                gpu_id: hex(gpu)?,
            }
        } else {
            return None;
        };
        (parsed.file_name() == name).then_some(parsed)
    }

    /// The file name.
    #[must_use]
    pub(crate) fn file_name(&self) -> String {
        match *self {
            Self::Kfd { id } => names::kfd_image(id),
            Self::Render { id } => names::render_node_image(id),
            Self::Dmabuf { id } => names::dmabuf_image(id),
            Self::KfdPages { id, gpu_id } => names::kfd_pages(id, gpu_id),
            Self::DrmPages { id, minor, index } => names::drm_pages(id, minor, index),
        }
    }
}

/// One of the plugin's files found in the directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// What it is.
    pub(crate) name: ImageName,
    /// Its size in bytes.
    pub(crate) size: u64,
}

/// An open image directory and the plugin's files in it, sorted by kind and ids.
#[derive(Debug)]
pub(crate) struct ImageDir {
    fd: File,
    /// The plugin's files.
    pub(crate) entries: Vec<Entry>,
}

impl ImageDir {
    /// Opens `dir` and lists the plugin's files in it.
    ///
    /// # Errors
    ///
    /// [`CliError::ImageDir`] when it cannot be opened or listed, [`CliError::ImagePermission`]
    /// when a file of the plugin's in it cannot be read for want of permission.
    pub(crate) fn open(dir: &Path) -> Result<Self, CliError> {
        let err = |source| CliError::ImageDir {
            dir: dir.to_owned(),
            source,
        };
        let fd = File::open(dir).map_err(err)?;
        let mut entries = Vec::new();
        for e in std::fs::read_dir(dir).map_err(err)? {
            let e = e.map_err(err)?;
            let Some(name) = e.file_name().to_str().and_then(ImageName::parse) else {
                continue;
            };
            // The size of what a symlink points to, as the readers see it; a dangling link
            // keeps its own (its reader then says why it cannot be opened).
            let size = std::fs::metadata(e.path())
                .or_else(|_| e.metadata())
                .map_err(err)?
                .len();
            entries.push(Entry { name, size });
        }
        entries.sort_by_key(|e| e.name);
        // An image the user may not read is the user's problem to fix (criu's images are root's,
        // mode 0600), not a damaged checkpoint: an I/O error, before any verdict, naming the
        // first such file in the listing's order (the KFD images first). The open does not wait
        // (a FIFO's would); the readers refuse what is not a regular file.
        for e in &entries {
            let file = dir.join(e.name.file_name());
            if let Err(source) = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
                .open(&file)
            {
                if source.kind() == std::io::ErrorKind::PermissionDenied {
                    return Err(CliError::ImagePermission { file, source });
                }
            }
        }
        Ok(Self { fd, entries })
    }

    /// The directory's fd, for the `images` readers.
    #[must_use]
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Ids of the KFD images, ascending.
    #[must_use]
    pub(crate) fn kfd_ids(&self) -> Vec<u32> {
        self.entries
            .iter()
            .filter_map(|e| match e.name {
                ImageName::Kfd { id } => Some(id),
                _ => None,
            })
            .collect()
    }

    /// Ids of the render-node images, ascending.
    #[must_use]
    pub(crate) fn render_ids(&self) -> Vec<u32> {
        self.entries
            .iter()
            .filter_map(|e| match e.name {
                ImageName::Render { id } => Some(id),
                _ => None,
            })
            .collect()
    }

    /// Bytes of all pages files (what reading their contents reads).
    #[must_use]
    pub(crate) fn pages_bytes(&self) -> u64 {
        self.entries
            .iter()
            .filter(|e| {
                matches!(
                    e.name,
                    ImageName::KfdPages { .. } | ImageName::DrmPages { .. }
                )
            })
            .map(|e| e.size)
            .sum()
    }

    /// Pages files whose image is not in the directory (`amdgpu-pages-<id>-*` without
    /// `amdgpu-kfd-<id>.img`, `amdgpu-drm-pages-<id>-*` without `amdgpu-renderD-<id>.img`), with
    /// why: the same judgement for `inspect` and `check`.
    #[must_use]
    pub(crate) fn orphans(&self) -> Vec<(String, String)> {
        self.entries
            .iter()
            .filter_map(|e| {
                let owner = match e.name {
                    ImageName::KfdPages { id, .. } => ImageName::Kfd { id },
                    ImageName::DrmPages { id, .. } => ImageName::Render { id },
                    _ => return None,
                };
                self.size_of(owner).is_none().then(|| {
                    (
                        e.name.file_name(),
                        format!(
                            "its image {} is not in the directory (deleted, or not copied with \
                             it)",
                            owner.file_name()
                        ),
                    )
                })
            })
            .collect()
    }

    /// The size of a file of the plugin's, if present.
    #[must_use]
    pub(crate) fn size_of(&self, name: ImageName) -> Option<u64> {
        self.entries.iter().find(|e| e.name == name).map(|e| e.size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_others_are_ignored() {
        let cases = [
            ("amdgpu-kfd-7.img", Some(ImageName::Kfd { id: 7 })),
            ("amdgpu-kfd--1.img", Some(ImageName::Kfd { id: u32::MAX })),
            ("amdgpu-renderD-12.img", Some(ImageName::Render { id: 12 })),
            ("amdgpu-dmabuf_3.img", Some(ImageName::Dmabuf { id: 3 })),
            (
                "amdgpu-pages-7-0abc.img",
                Some(ImageName::KfdPages {
                    id: 7,
                    gpu_id: 0xabc,
                }),
            ),
            (
                "amdgpu-pages--1-12345.img",
                Some(ImageName::KfdPages {
                    id: u32::MAX,
                    gpu_id: 0x12345,
                }),
            ),
            (
                "amdgpu-drm-pages-9-129-001f.img",
                Some(ImageName::DrmPages {
                    id: 9,
                    minor: 129,
                    index: 0x1f,
                }),
            ),
            ("amdgpu-kfd-07.img", None),
            ("amdgpu-pages-7-abc.img", None),
            ("amdgpu-kfd-7.img.bak", None),
            ("pages-1.img", None),
            ("amdgpu-kfd-x.img", None),
        ];
        for (name, want) in cases {
            assert_eq!(ImageName::parse(name), want, "{name}");
        }
    }
}
