//! Render-node buffers (GEM objects) and dma-bufs shared between processes, as Linux 6.18 lets a
//! checkpoint see them and as upstream's development-branch plugin saves them.
//!
//! Dump, per render-node file: `AMDGPU_GEM_LIST_HANDLES` gives every handle of the file with
//! its size, domains, creation flags and alignment; `GEM_OP(GET_MAPPING_INFO)` each one's
//! mappings in the file's VM; `GEM_MMAP` its fake offset (what the process's CPU mappings of it
//! were mapped at). Each VRAM or GTT buffer's contents go through the plugin's copy engine (SDMA
//! through staging buffers, checksums, zero chunks as holes) into
//! `amdgpu-drm-pages-<id>-<minor>-<index>.img`, as upstream names them. A kernel without the
//! listing (6.1 to 6.17) shows no buffers: the image lists none, as before.
//!
//! Sharing. A buffer can be in several files: a dma-buf of it imported into another process's
//! render node (amdgpu gives the same object back for its own device's dma-buf), a KFD BO
//! exported and imported into a render node, a dma-buf fd held by a process. Upstream's image
//! format names a shared buffer by one number, the GEM handle: the file that creates it at
//! restore (`is_import` 0, or the KFD BO whose `kfd_bo_entry.handle` is that number) and every
//! file that imports it (`is_import` 1, same handle), and `criu_dmabuf_node.gem_handle` of a
//! dma-buf fd. The [`Ledger`] finds which entries are one object by their dma-buf's inode (one
//! per object, on hardware and in the simulator) and writes the numbers so that upstream's
//! restore and ours rebuild the same sharing; an object the format cannot name (its handles
//! differ between processes, or its number is another shared buffer's) fails the dump with
//! the reason. Upstream's own dump guesses `is_import` from the handle number alone; its images
//! are restored as it restores them.
//!
//! Restore: each buffer is created (`GEM_CREATE` with the recorded parameters, the alignment
//! from pages back to bytes) or imported (the dma-buf its creator published), given its old
//! handle number, mapped at its VAs (the page-table flags turned back into `GEM_VA` flags, which
//! upstream passes unchanged), filled from its pages file, and its new fake offset answers
//! UPDATE_VMA_MAP. On a kernel without 6.18's ioctls an image with buffers is refused before
//! anything is created.
//!
//! Handle numbers. Where the kernel has `DRM_IOCTL_GEM_CHANGE_HANDLE` (6.18.0-6.18.35, 7.0.0-7.0.12,
//! mainline before 7.1-rc7) a buffer is moved to its number. The kernels fixed in June 2026 answer
//! that ioctl `EINVAL` (`drm_invalid_op`); there the numbers are reached in order instead ([`Placement`]):
//! a file allocates GEM handles lowest-free-first from 1, so buffers made in ascending handle
//! order, each after placeholder objects have taken the free numbers below it, get exactly their
//! old numbers; the placeholders are closed once all are made. A number that cannot be reached
//! that way (already taken in the file, or an import the kernel answers with the handle its
//! object already has there) refuses the restore, naming the handle: never a buffer under
//! another number.

use std::collections::{BTreeSet, HashMap};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

use images::pages::find_checksums;
use images::proto::{CriuRenderNode, DrmBoEntry, DrmVmEntry, PagesChecksums};
use images::{FrameError, ImageFile, PagesError, PagesFile, PagesReader, PagesWriter};
use kfd_abi::render::GemDomain;
use kfd_abi::{BoHandle, Errno, IoctlError, Platform, RenderNode, Transport};

use crate::copy::{self, BoSource, CopyError, Progress, Staging};

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

fn ioctl(what: impl Into<String>) -> impl FnOnce(IoctlError) -> GemError {
    let what = what.into();
    move |source| GemError::Ioctl { what, source }
}

/// `AMDGPU_GEM_DOMAIN_VRAM | AMDGPU_GEM_DOMAIN_GTT`: buffers with contents.
fn has_contents(domains: u32) -> bool {
    GemDomain::from_bits_retain(u64::from(domains)).intersects(GemDomain::VRAM | GemDomain::GTT)
}

/// Page size of the alignment `GEM_LIST_HANDLES` reports in pages.
const PAGE: u64 = 4096;

/// A buffer of a render-node file being dumped.
#[derive(Debug)]
pub(crate) struct Listed {
    /// Its image entry (`is_import` is the ledger's to set).
    pub entry: DrmBoEntry,
    /// A dma-buf of it, for the copy and its identity.
    pub dmabuf: OwnedFd,
    /// Its identity.
    pub object: ObjectId,
}

/// Lists the buffers of `render` (criu's dup of a process's render-node file on `minor`).
/// `Ok(None)`: the kernel has no `AMDGPU_GEM_LIST_HANDLES` (before 6.18).
pub(crate) fn list<T: Transport>(
    render: &RenderNode<T>,
    minor: u32,
) -> Result<Option<Vec<Listed>>, GemError> {
    let handles = match render.gem_list_handles() {
        Ok(h) => h,
        Err(e) if e.errno() == Some(Errno::EINVAL) => return Ok(None),
        Err(e) => return Err(ioctl(format!("listing the buffers of renderD{minor}"))(e)),
    };
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        let handle = h.handle.get();
        let domains = u32::try_from(h.preferred_domains.bits()).unwrap_or(u32::MAX);
        if !has_contents(domains) {
            return Err(GemError::Userptr { minor, handle });
        }
        let offset = match render.gem_mmap_offset(h.handle) {
            Ok(o) => o,
            // Without CPU access there is no CPU mapping to move.
            Err(e) if e.errno() == Some(Errno::EPERM) => 0,
            Err(e) => {
                return Err(ioctl(format!(
                    "the fake offset of handle {handle} of renderD{minor}"
                ))(e))
            }
        };
        let maps = render.gem_mapping_info(h.handle).map_err(ioctl(format!(
            "the mappings of handle {handle} of renderD{minor}"
        )))?;
        let dmabuf = render.prime_handle_to_fd(h.handle).map_err(ioctl(format!(
            "exporting handle {handle} of renderD{minor}"
        )))?;
        let object = object_id(dmabuf.as_fd()).map_err(|e| GemError::Unshareable(e.to_string()))?;
        // As upstream: the buffer's address is that of its last mapping.
        let addr = maps.last().map_or(0, |m| m.va);
        out.push(Listed {
            entry: DrmBoEntry {
                addr,
                size: h.size,
                offset,
                alloc_flags: h.alloc_flags,
                alignment: h.alignment_pages,
                preferred_domains: domains,
                handle,
                is_import: 0,
                num_of_vms: u32::try_from(maps.len()).unwrap_or(u32::MAX),
                vm_entries: maps
                    .iter()
                    .map(|m| DrmVmEntry {
                        addr: m.va,
                        size: m.size,
                        offset: m.offset,
                        flags: m.pte_flags,
                    })
                    .collect(),
            },
            dmabuf,
            object,
        });
    }
    Ok(Some(out))
}

/// Saves the contents of every listed buffer, each into its own pages file, through the copy
/// engine on the plugin's own file of render node `minor`. Returns their checksum lists.
pub(crate) fn dump_contents<P: Platform>(
    platform: &P,
    minor: u32,
    id: u32,
    dir: BorrowedFd<'_>,
    bos: &[Listed],
    opts: &crate::dump::DumpOptions,
) -> Result<Vec<PagesChecksums>, GemError> {
    if bos.is_empty() {
        return Ok(Vec::new());
    }
    let own = platform
        .open_render(minor)
        .map_err(ioctl(format!("opening renderD{minor}")))?;
    let chunk = opts.checksums.then_some(images::DEFAULT_CHUNK_SIZE);
    let mut sums = Vec::new();
    for (i, b) in bos.iter().enumerate() {
        let index = u32::try_from(i).unwrap_or(u32::MAX);
        let which = PagesFile::Drm { id, minor, index };
        let mut writer = PagesWriter::new(dir, which, b.entry.size, chunk)?;
        writer.set_write_behind(opts.write_behind);
        if opts.direct {
            writer.use_direct_io();
        }
        let src = BoSource {
            dmabuf: b.dmabuf.as_fd(),
            size: b.entry.size,
            addr: b.entry.addr,
        };
        copy::dump_gpu(&own, &[src], opts.staging, &opts.progress, &mut writer).map_err(
            |source| GemError::Copy {
                minor,
                handle: b.entry.handle,
                source,
            },
        )?;
        sums.extend(writer.finish()?);
    }
    Ok(sums)
}

/// A change the [`Ledger`] asks of an image written earlier in the same dump (or of one not
/// written yet: a dma-buf's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Patch {
    /// Render image `id`'s entry `index` imports its buffer (a KFD BO turned out to create it).
    RenderImport {
        /// The render image.
        id: u32,
        /// The entry.
        index: usize,
    },
    /// KFD image `id`'s BO `index` is shared under `key`.
    KfdHandle {
        /// The KFD image.
        id: u32,
        /// The BO.
        index: usize,
        /// The key.
        key: u32,
    },
    /// Dma-buf image `id` names the buffer shared under `key`.
    Dmabuf {
        /// The dma-buf image.
        id: u32,
        /// The key.
        key: u32,
    },
}

/// What the dump knows of one buffer object.
#[derive(Debug, Default)]
struct Object {
    /// The KFD BO it is (image, index).
    kfd: Option<(u32, usize)>,
    /// Its render-node entries (image, index, handle), in the order seen.
    renders: Vec<(u32, usize, u32)>,
    /// The number it is shared under.
    key: Option<u32>,
    /// Whether anything imports it or holds it as a dma-buf fd.
    shared: bool,
}

/// The buffer objects a dump has seen, across the processes of the tree (criu dumps them all
/// from its own process): which entries are one object, and the numbers that name it.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    objects: HashMap<ObjectId, Object>,
    /// The objects each number names as a creator.
    creators: HashMap<u32, BTreeSet<ObjectId>>,
    /// Dma-buf images waiting for their object to be seen: (image id, object).
    pending: Vec<(u32, ObjectId)>,
    /// Keys given to shared KFD BOs that no render node holds.
    next_key: u32,
}

/// Keys for shared KFD BOs that no render node names: far above any GEM handle.
const FIRST_KFD_KEY: u32 = 0x4000_0000;

impl Ledger {
    /// Refuses a key that names a shared object and another creator.
    fn check(&self, key: u32) -> Result<(), GemError> {
        let creators = self.creators.get(&key).map_or(0, BTreeSet::len);
        let shared = self
            .creators
            .get(&key)
            .into_iter()
            .flatten()
            .any(|o| self.objects.get(o).is_some_and(|x| x.shared));
        if creators > 1 && shared {
            return Err(GemError::Unshareable(format!(
                "GEM handle {key} names a buffer shared between processes and another buffer \
                 that a process created: the image format (upstream's) names shared buffers by \
                 their handle number, so it cannot tell them apart"
            )));
        }
        Ok(())
    }

    /// The dma-buf images waiting for `object`, resolved to `key`.
    fn resolve_pending(&mut self, object: ObjectId, key: u32, patches: &mut Vec<Patch>) {
        let mut rest = Vec::new();
        for (id, o) in std::mem::take(&mut self.pending) {
            if o == object {
                patches.push(Patch::Dmabuf { id, key });
            } else {
                rest.push((id, o));
            }
        }
        self.pending = rest;
    }

    fn fresh_key(&mut self) -> u32 {
        let used: BTreeSet<u32> = self.creators.keys().copied().collect();
        let mut k = self.next_key.max(FIRST_KFD_KEY);
        while used.contains(&k) {
            k += 1;
        }
        self.next_key = k + 1;
        k
    }

    /// Entry `index` of render image `id`, GEM handle `handle`, is `object`. Returns whether it
    /// imports the buffer (another entry creates it) and the changes to earlier images.
    pub(crate) fn render(
        &mut self,
        id: u32,
        index: usize,
        handle: u32,
        object: ObjectId,
    ) -> Result<(bool, Vec<Patch>), GemError> {
        let mut patches = Vec::new();
        let waiting = self.pending.iter().any(|&(_, o)| o == object);
        let o = self.objects.entry(object).or_default();
        let import = o.kfd.is_some() || !o.renders.is_empty();
        if import {
            let key = match o.key {
                Some(k) => k,
                None => {
                    // A KFD BO that no file named yet: this handle names it.
                    if let Some((kid, kindex)) = o.kfd {
                        patches.push(Patch::KfdHandle {
                            id: kid,
                            index: kindex,
                            key: handle,
                        });
                    }
                    o.key = Some(handle);
                    handle
                }
            };
            if key != handle {
                return Err(GemError::Unshareable(format!(
                    "a buffer shared between processes is GEM handle {key} in one render-node \
                     file and {handle} in another (image {id}): the image format (upstream's) \
                     names a shared buffer by one handle number in every process"
                )));
            }
            o.shared = true;
            o.renders.push((id, index, handle));
            self.creators.entry(key).or_default().insert(object);
        } else {
            o.key = Some(handle);
            o.renders.push((id, index, handle));
            if waiting {
                o.shared = true;
            }
            self.creators.entry(handle).or_default().insert(object);
        }
        let key = handle;
        self.resolve_pending(object, key, &mut patches);
        self.check(key)?;
        Ok((import, patches))
    }

    /// BO `index` of KFD image `id` is `object`. Returns the changes to images.
    pub(crate) fn kfd(
        &mut self,
        id: u32,
        index: usize,
        object: ObjectId,
    ) -> Result<Vec<Patch>, GemError> {
        let mut patches = Vec::new();
        let waiting = self.pending.iter().any(|&(_, o)| o == object);
        let mut key = None;
        {
            let o = self.objects.entry(object).or_default();
            o.kfd = Some((id, index));
            if let Some(&(rid, rindex, handle)) = o.renders.first() {
                // A render entry seen first was taken for the creator: the KFD BO is.
                patches.push(Patch::RenderImport {
                    id: rid,
                    index: rindex,
                });
                o.shared = true;
                key = Some(handle);
            } else if waiting {
                o.shared = true;
            }
        }
        if key.is_none() && waiting {
            key = Some(self.fresh_key());
        }
        if let Some(k) = key {
            if let Some(o) = self.objects.get_mut(&object) {
                o.key = Some(k);
            }
            self.creators.entry(k).or_default().insert(object);
            patches.push(Patch::KfdHandle { id, index, key: k });
            self.resolve_pending(object, k, &mut patches);
            self.check(k)?;
        }
        Ok(patches)
    }

    /// Dma-buf image `id` is a dma-buf of `object`. Returns the changes to images (its own
    /// among them once its object is known).
    pub(crate) fn dmabuf(&mut self, id: u32, object: ObjectId) -> Result<Vec<Patch>, GemError> {
        let mut patches = Vec::new();
        let Some(o) = self.objects.get_mut(&object) else {
            self.pending.push((id, object));
            return Ok(patches);
        };
        o.shared = true;
        let key = match (o.key, o.kfd) {
            (Some(k), _) => k,
            (None, Some((kid, kindex))) => {
                let k = self.fresh_key();
                if let Some(o) = self.objects.get_mut(&object) {
                    o.key = Some(k);
                }
                self.creators.entry(k).or_default().insert(object);
                patches.push(Patch::KfdHandle {
                    id: kid,
                    index: kindex,
                    key: k,
                });
                k
            }
            (None, None) => {
                self.pending.push((id, object));
                return Ok(patches);
            }
        };
        patches.push(Patch::Dmabuf { id, key });
        self.check(key)?;
        Ok(patches)
    }

    /// Dma-buf images whose buffer no dumped file holds.
    pub(crate) fn unresolved(&self) -> Vec<u32> {
        self.pending.iter().map(|&(id, _)| id).collect()
    }
}

/// A restored buffer's CPU mappings: old fake offset to new.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GemRemap {
    /// Its fake offset at checkpoint.
    pub old_offset: u64,
    /// Its size.
    pub size: u64,
    /// Its fake offset now.
    pub new_offset: u64,
}

impl GemRemap {
    /// The new offset of a mapping that had `old_pgoff` (bytes), if it is this buffer's.
    pub(crate) fn answer(&self, old_pgoff: u64) -> Option<u64> {
        let delta = old_pgoff.checked_sub(self.old_offset)?;
        // The size is the image's: an offset past what the kernel can give is no answer.
        (delta < self.size.max(1))
            .then(|| self.new_offset.checked_add(delta))
            .flatten()
    }
}

/// What restoring a render node's buffers leaves.
#[derive(Debug, Default)]
pub(crate) struct RestoredGem {
    /// Their CPU mappings' offsets.
    pub remaps: Vec<GemRemap>,
    /// Dma-bufs of the buffers this file created, by key, for the files that import them.
    pub created: Vec<(u32, OwnedFd)>,
    /// Bytes copied.
    pub bytes: u64,
}

/// How a restore gets the dma-buf of a buffer another file creates, by key.
pub(crate) type Lookup<'a> = &'a dyn Fn(u32, &str) -> Result<OwnedFd, GemError>;

/// The settings of a render-node restore.
pub(crate) struct RestoreGemOptions<'a> {
    /// Staging geometry.
    pub staging: Staging,
    /// How the pages files are read.
    pub reading: crate::copy::Reading,
    /// Byte counter.
    pub progress: &'a Progress,
    /// Where the buffers other files create come from.
    pub lookup: Lookup<'a>,
    /// Whether a key is created only by /dev/kfd images (no render-node image creates it).
    pub kfd_only: &'a dyn Fn(u32) -> bool,
}

/// One render-node image to restore: image `id` (`msg`), into `render` (the process's restored
/// file, on render node `minor` now), its pages files in `dir`.
pub(crate) struct RenderRestore<'a, P: Platform> {
    pub platform: &'a P,
    pub render: &'a RenderNode<P::Device>,
    pub minor: u32,
    pub id: u32,
    pub msg: &'a CriuRenderNode,
    pub dir: BorrowedFd<'a>,
    pub opts: &'a RestoreGemOptions<'a>,
}

/// Recreates the buffers of `job`'s image in its file, fills them from their pages files and
/// returns their offsets and the dma-bufs of the ones it created. If anything fails, the handles
/// it added to the file are closed again: a failed restore leaves the file's buffers as they were.
pub(crate) fn restore<P: Platform>(job: &RenderRestore<'_, P>) -> Result<RestoredGem, GemError> {
    let RenderRestore {
        render,
        minor,
        id,
        msg,
        ..
    } = *job;
    let file = images::RenderNodeImage::file_name(id);
    let old_minor = msg.drm_render_minor;
    let before: BTreeSet<u32> = match render.gem_list_handles() {
        Ok(listed) => listed.iter().map(|h| h.handle.get()).collect(),
        Err(e) if e.errno() == Some(Errno::EINVAL) => {
            return Err(GemError::NeedsLinux618 {
                file,
                count: msg.bo_entries.len(),
                minor: old_minor,
            })
        }
        Err(e) => return Err(ioctl(format!("{file}: listing renderD{minor}"))(e)),
    };
    let placement = if msg.bo_entries.is_empty() {
        Placement::Move
    } else {
        Placement::probe(render, &before).map_err(ioctl(format!(
            "{file}: asking renderD{minor} whether it moves handles"
        )))?
    };
    let mut made = Made {
        before,
        handles: Vec::new(),
        placeholders: Vec::new(),
    };
    let restored = recreate(job, &file, placement, &mut made);
    made.close_placeholders(render, &file);
    if restored.is_err() {
        made.undo(render, &file);
    }
    restored
}

/// How a restored buffer gets its old GEM handle number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placement {
    /// Made anywhere, then moved there with `DRM_IOCTL_GEM_CHANGE_HANDLE`.
    Move,
    /// Made in ascending handle order, each after placeholders have taken the free numbers below
    /// it: the kernel refuses `GEM_CHANGE_HANDLE` (Linux 7.1-rc7, 7.0.13, 6.18.36 and later).
    InOrder,
}

/// At most this many placeholder objects for one file: GEM handles of real processes are small
/// numbers, and an image's handle is untrusted input.
const MAX_PLACEHOLDERS: usize = 1 << 16;

impl Placement {
    /// Asks the kernel with one `GEM_CHANGE_HANDLE` of a handle `render` does not have (the
    /// lowest one not in `taken`): a kernel with the ioctl looks the handle up and answers
    /// `ENOENT`; one without it, or with it turned off, answers `EINVAL` before looking.
    fn probe<T: Transport>(
        render: &RenderNode<T>,
        taken: &BTreeSet<u32>,
    ) -> Result<Self, IoctlError> {
        let free = (1..=u32::MAX).find(|n| !taken.contains(n)).unwrap_or(1);
        let Some(h) = BoHandle::new(free) else {
            return Ok(Self::Move);
        };
        match render.gem_change_handle(h, h) {
            Err(e) if e.errno() == Some(Errno::EINVAL) => {
                log::info!(
                    "this kernel answers DRM_IOCTL_GEM_CHANGE_HANDLE with EINVAL: render-node \
                     buffers get their handle numbers by being made in ascending order"
                );
                Ok(Self::InOrder)
            }
            Err(e) if e.errno() == Some(Errno::ENOENT) => Ok(Self::Move),
            Err(e) => Err(e),
            // Nothing to move, and the kernel did not say it had nothing: it has the ioctl.
            Ok(()) => Ok(Self::Move),
        }
    }
}

/// The size of a dma-buf (`lseek(SEEK_END)`, which dma-bufs answer with their size); `None`
/// when it cannot be told.
fn dmabuf_size(dmabuf: &OwnedFd) -> Option<u64> {
    use std::io::{Seek, SeekFrom};
    let mut file = std::fs::File::from(dmabuf.try_clone().ok()?);
    file.seek(SeekFrom::End(0)).ok()
}

/// The handles a restore of a render node created in the process's file: its buffers, to close
/// if it fails, and placeholders, to close once the buffers are made.
struct Made {
    /// The file's handles before the restore (an import may give back one of them).
    before: BTreeSet<u32>,
    /// What this restore added, as the handle is now.
    handles: Vec<BoHandle>,
    /// Objects made only to take a handle number ([`Placement::InOrder`]).
    placeholders: Vec<BoHandle>,
}

impl Made {
    /// Whether handle `n` is in the file now.
    fn taken(&self, n: u32) -> bool {
        self.before.contains(&n)
            || self.handles.iter().any(|h| h.get() == n)
            || self.placeholders.iter().any(|h| h.get() == n)
    }

    /// Makes the next buffer the file allocates get handle `target`: placeholders take every
    /// free number below it. `Err` names why `target` cannot be reached.
    fn take_below<T: Transport>(
        &mut self,
        render: &RenderNode<T>,
        target: u32,
        file: &str,
    ) -> Result<(), GemError> {
        let unreachable = |why: String| GemError::HandleUnreachable {
            file: file.to_owned(),
            handle: target,
            why,
        };
        if self.taken(target) {
            return Err(unreachable(
                "the restored file already has a buffer under that number".to_owned(),
            ));
        }
        let free: Vec<u32> = (1..target)
            .filter(|&n| !self.taken(n))
            .take(MAX_PLACEHOLDERS + 1)
            .collect();
        if free.len() + self.placeholders.len() > MAX_PLACEHOLDERS {
            return Err(unreachable(format!(
                "reaching it would take more than {MAX_PLACEHOLDERS} placeholder objects"
            )));
        }
        for n in free {
            let h = render
                .gem_create(PAGE, PAGE, GemDomain::GTT, 0)
                .map_err(ioctl(format!("{file}: a placeholder for GEM handle {n}")))?;
            self.placeholders.push(h);
            if h.get() != n {
                return Err(unreachable(format!(
                    "the kernel gave a placeholder handle {h}, not the lowest free number {n}"
                )));
            }
        }
        Ok(())
    }

    /// Closes the placeholders: their numbers were only needed while the buffers were made.
    fn close_placeholders<T: Transport>(&mut self, render: &RenderNode<T>, file: &str) {
        for h in self.placeholders.drain(..) {
            if let Err(e) = render.gem_close(h) {
                log::warn!("{file}: closing placeholder GEM handle {h}: {e}");
            }
        }
    }

    /// `handle` is in the file now; it was `was` (moved) or is new.
    fn record(&mut self, was: Option<BoHandle>, handle: BoHandle) {
        if let Some(w) = was {
            self.handles.retain(|&h| h != w);
        }
        if !self.before.contains(&handle.get()) && !self.handles.contains(&handle) {
            self.handles.push(handle);
        }
    }

    /// Closes what the restore added: the file is left as it was (closing a handle unmaps the
    /// buffer from the file's VM; a buffer nothing else holds is freed).
    fn undo<T: Transport>(&self, render: &RenderNode<T>, file: &str) {
        for &h in self.handles.iter().rev() {
            if let Err(e) = render.gem_close(h) {
                log::warn!("{file}: closing GEM handle {h} of the failed restore: {e}");
            }
        }
        if !self.handles.is_empty() {
            log::info!(
                "{file}: the failed restore's {} buffer(s) closed",
                self.handles.len()
            );
        }
    }
}

/// [`restore`] once the kernel is known to list handles; what it adds to the file is in `made`.
fn recreate<P: Platform>(
    job: &RenderRestore<'_, P>,
    file: &str,
    placement: Placement,
    made: &mut Made,
) -> Result<RestoredGem, GemError> {
    let RenderRestore {
        platform,
        render,
        minor,
        id,
        msg,
        dir,
        opts,
    } = *job;
    let old_minor = msg.drm_render_minor;
    let mut out = RestoredGem::default();
    // Buffers to fill: (entry index, dma-buf).
    let mut fill: Vec<(usize, OwnedFd)> = Vec::new();
    let mut order: Vec<usize> = (0..msg.bo_entries.len()).collect();
    if placement == Placement::InOrder {
        order.sort_by_key(|&i| msg.bo_entries[i].handle);
    }
    for i in order {
        let b = &msg.bo_entries[i];
        let bad = |what: &str| GemError::Inconsistent {
            file: file.to_owned(),
            what: format!("entry {i}: {what}"),
        };
        let target = BoHandle::new(b.handle).ok_or_else(|| bad("GEM handle 0"))?;
        let what = format!("{file}: GEM handle {}", b.handle);
        // An image without checksums may be criu-dev's, whose /dev/kfd entries carry handles in
        // the plugin's own render-node file: a buffer of this file marked as an import of one of
        // them only shares its number, which says nothing of sharing.
        let by_number =
            b.is_import != 0 && msg.pages_checksums.is_empty() && (opts.kfd_only)(b.handle);
        if by_number {
            log::warn!(
                "{what}: marked as an import of the /dev/kfd buffer numbered {} in an image \
                 without checksums (criu-dev numbers /dev/kfd buffers by their handles in its own \
                 render-node file, which this file's handles repeat): restored as a buffer of its \
                 own, from its pages file",
                b.handle
            );
        }
        if placement == Placement::InOrder {
            made.take_below(render, b.handle, file)?;
        }
        let import = if b.is_import != 0 && !by_number {
            let dmabuf = (opts.lookup)(b.handle, &what)?;
            match dmabuf_size(&dmabuf) {
                Some(size) if size != b.size => {
                    // criu-dev writes, for each /dev/kfd buffer, its handle in the plugin's own
                    // render-node file, and marks every buffer of the process's file whose
                    // handle has the same number as an import of it: two numberings, one
                    // namespace. A buffer of another size is not the one this entry names.
                    log::warn!(
                        "{what}: marked as an import of the buffer shared as {}, which has {size} \
                         bytes, not its {} (criu-dev numbers /dev/kfd buffers by their handles \
                         in its own render-node file, which a handle of this file can repeat): \
                         restored as a buffer of its own, from its pages file",
                        b.handle,
                        b.size
                    );
                    None
                }
                _ => Some(
                    render
                        .prime_fd_to_handle(dmabuf.as_fd())
                        .map_err(ioctl(format!("{what}: importing its buffer")))?,
                ),
            }
        } else {
            None
        };
        let own = import.is_none();
        let handle = if let Some(imported) = import {
            imported
        } else {
            let alignment = b.alignment.saturating_mul(PAGE);
            render
                .gem_create(
                    b.size,
                    alignment,
                    GemDomain::from_bits_retain(u64::from(b.preferred_domains)),
                    b.alloc_flags,
                )
                .map_err(ioctl(format!("{what}: creating {} bytes", b.size)))?
        };
        made.record(None, handle);
        if handle != target && placement == Placement::InOrder {
            return Err(GemError::HandleUnreachable {
                file: file.to_owned(),
                handle: b.handle,
                why: format!(
                    "the kernel gave it handle {handle} (an import answers with the handle its \
                     object already has in the file)"
                ),
            });
        }
        if handle != target {
            render
                .gem_change_handle(handle, target)
                .map_err(ioctl(format!("{what}: moving it from handle {handle}")))?;
            made.record(Some(handle), target);
        }
        // The listing gives the newest mapping first: the oldest is made first again.
        for m in b.vm_entries.iter().rev() {
            let flags = kfd_abi::render::VmPageFlags::from_bits_retain(
                kfd_abi::uapi618::pte_to_va_flags(m.flags),
            );
            render
                .va_map(target, m.addr, m.offset, m.size, flags)
                .map_err(ioctl(format!("{what}: mapping it at {:#x}", m.addr)))?;
        }
        if b.offset != 0 {
            let new_offset = render
                .gem_mmap_offset(target)
                .map_err(ioctl(format!("{what}: its fake offset")))?;
            out.remaps.push(GemRemap {
                old_offset: b.offset,
                size: b.size,
                new_offset,
            });
        }
        if own {
            let dmabuf = render
                .prime_handle_to_fd(target)
                .map_err(ioctl(format!("{what}: exporting it")))?;
            if has_contents(b.preferred_domains) {
                let copy = dmabuf
                    .try_clone()
                    .map_err(|e| GemError::Unshareable(format!("{what}: {e}")))?;
                fill.push((i, copy));
            }
            // A buffer that was wrongly marked an import is not the one others share under
            // its number.
            if b.is_import == 0 {
                out.created.push((b.handle, dmabuf));
            }
        }
    }
    if !fill.is_empty() {
        let own = platform
            .open_render(minor)
            .map_err(ioctl(format!("opening renderD{minor}")))?;
        for (i, dmabuf) in fill {
            let b = &msg.bo_entries[i];
            let index = u32::try_from(i).unwrap_or(u32::MAX);
            let which = PagesFile::Drm {
                id,
                minor: old_minor,
                index,
            };
            let mut reader = match find_checksums(&msg.pages_checksums, index) {
                Some(sums) => PagesReader::open(dir, which, b.size, Some(sums))?,
                // Upstream's: no checksums, and a length header it never set.
                None => PagesReader::open_ignoring_header(dir, which, b.size)?,
            };
            let src = BoSource {
                dmabuf: dmabuf.as_fd(),
                size: b.size,
                addr: b.addr,
            };
            out.bytes += copy::restore_gpu(
                &own,
                &[src],
                opts.staging,
                opts.reading,
                opts.progress,
                &mut reader,
            )
            .map_err(|source| GemError::Copy {
                minor,
                handle: b.handle,
                source,
            })?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: ObjectId = (1, 10);
    const B: ObjectId = (1, 11);

    #[test]
    fn the_first_render_entry_creates_and_the_others_import() {
        let mut l = Ledger::default();
        assert_eq!(l.render(7, 0, 1, A).unwrap(), (false, vec![]));
        assert_eq!(l.render(9, 0, 1, A).unwrap(), (true, vec![]));
        // Another process's own buffer with the same number: not shared, fine.
        let err = l.render(11, 0, 1, B).unwrap_err().to_string();
        assert!(err.contains("cannot tell them apart"), "{err}");
    }

    #[test]
    fn a_kfd_bo_seen_after_its_render_entry_becomes_the_creator() {
        let mut l = Ledger::default();
        assert_eq!(l.render(7, 2, 3, A).unwrap(), (false, vec![]));
        assert_eq!(
            l.kfd(1, 5, A).unwrap(),
            vec![
                Patch::RenderImport { id: 7, index: 2 },
                Patch::KfdHandle {
                    id: 1,
                    index: 5,
                    key: 3
                }
            ]
        );
        // A KFD BO seen first: the render entry imports it and names it.
        assert_eq!(l.kfd(1, 6, B).unwrap(), vec![]);
        assert_eq!(
            l.render(8, 0, 4, B).unwrap(),
            (
                true,
                vec![Patch::KfdHandle {
                    id: 1,
                    index: 6,
                    key: 4
                }]
            )
        );
    }

    #[test]
    fn handles_that_differ_between_processes_cannot_be_named() {
        let mut l = Ledger::default();
        l.render(7, 0, 1, A).unwrap();
        let err = l.render(9, 0, 2, A).unwrap_err().to_string();
        assert!(
            err.contains("GEM handle 1 in one render-node file and 2"),
            "{err}"
        );
    }

    #[test]
    fn dma_bufs_wait_for_their_object() {
        let mut l = Ledger::default();
        assert_eq!(l.dmabuf(20, A).unwrap(), vec![]);
        assert_eq!(l.unresolved(), vec![20]);
        assert_eq!(
            l.render(7, 0, 5, A).unwrap(),
            (false, vec![Patch::Dmabuf { id: 20, key: 5 }])
        );
        assert!(l.unresolved().is_empty());
        // A KFD BO held only as a dma-buf gets a key of its own.
        l.kfd(1, 0, B).unwrap();
        assert_eq!(
            l.dmabuf(21, B).unwrap(),
            vec![
                Patch::KfdHandle {
                    id: 1,
                    index: 0,
                    key: FIRST_KFD_KEY
                },
                Patch::Dmabuf {
                    id: 21,
                    key: FIRST_KFD_KEY
                }
            ]
        );
    }

    #[test]
    fn a_remap_answers_offsets_inside_its_buffer() {
        let r = GemRemap {
            old_offset: 0x1000_0000,
            size: 0x20_0000,
            new_offset: 0x5000_0000,
        };
        assert_eq!(r.answer(0x1000_0000), Some(0x5000_0000));
        assert_eq!(r.answer(0x1010_0000), Some(0x5010_0000));
        assert_eq!(r.answer(0x1020_0000), None);
        assert_eq!(r.answer(0xfff_f000), None);
        // An image's size that reaches past the offsets the kernel gives: no answer, no panic.
        let huge = GemRemap {
            old_offset: 0,
            size: u64::MAX,
            new_offset: 0x5000_0000,
        };
        assert_eq!(huge.answer(u64::MAX - 1), None);
        assert_eq!(huge.answer(0x1000), Some(0x5000_1000));
    }
}
