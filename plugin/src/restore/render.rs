//! Render-node buffers (GEM objects) at restore.
//!
//! Each buffer is created (`GEM_CREATE` with the recorded parameters, the alignment
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

use std::collections::BTreeSet;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use images::pages::find_checksums;
use images::proto::CriuRenderNode;
use images::{ImageFile, PagesFile, PagesReader};
use kfd_abi::render::GemDomain;
use kfd_abi::{BoHandle, Errno, IoctlError, Platform, RenderNode, Transport};

use crate::copy::{self, BoSource, Progress, Staging};
use crate::gem::{has_contents, ioctl, GemError, PAGE};

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
    /// The handles in the file now.
    fn taken(&self) -> BTreeSet<u32> {
        let made = self
            .handles
            .iter()
            .chain(&self.placeholders)
            .map(|h| h.get());
        self.before.iter().copied().chain(made).collect()
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
        let taken = self.taken();
        if taken.contains(&target) {
            return Err(unreachable(
                "the restored file already has a buffer under that number".to_owned(),
            ));
        }
        let free: Vec<u32> = (1..target)
            .filter(|n| !taken.contains(n))
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
