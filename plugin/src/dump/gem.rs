//! Render-node buffers (GEM objects) at dump.
//!
//! Per render-node file: `AMDGPU_GEM_LIST_HANDLES` gives every handle of the file with
//! its size, domains, creation flags and alignment; `GEM_OP(GET_MAPPING_INFO)` each one's
//! mappings in the file's VM; `GEM_MMAP` its fake offset (what the process's CPU mappings of it
//! were mapped at). Each VRAM or GTT buffer's contents go through the plugin's copy engine (SDMA
//! through staging buffers, checksums, zero chunks as holes) into
//! `amdgpu-drm-pages-<id>-<minor>-<index>.img`, as upstream names them. A kernel without the
//! listing (6.1 to 6.17) shows no buffers: the image lists none, as before.
//!

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use images::proto::{DrmBoEntry, DrmVmEntry, PagesChecksums};
use images::{PagesFile, PagesWriter};
use kfd_abi::{Errno, Platform, RenderNode, Transport};

use super::DumpOptions;
use crate::copy::{self, BoSource};
use crate::gem::{has_contents, ioctl, object_id, GemError, ObjectId};

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
    opts: &DumpOptions,
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
