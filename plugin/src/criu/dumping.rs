//! The engine at dump, beside the `/dev/kfd` files (in the hooks): render-node files and
//! dma-bufs. A render node's image holds its buffers and mappings, under the GPU id its process
//! uses; a dma-buf's names the buffer it shares, once a dumped file holds it; the images written
//! earlier change as the dump learns which entries are one buffer.

use std::os::fd::BorrowedFd;

use images::proto::{CriuDmabufNode, CriuRenderNode};
use images::{DmabufImage, ImageFile, KfdImage, RenderNodeImage};
use kfd_abi::platform::Platform;
use kfd_abi::Errno;

use super::{caused, dup, failed, gem_failed, Engine};
use crate::dump::gem as dump_gem;
use crate::dump::sharing::Patch;
use crate::gem;
use crate::hooks::{HookError, HookResult};

impl<P: Platform> Engine<P> {
    /// Writes the image of a render-node file. Images record the GPU under the id the process
    /// uses (which differs from the GPU's id after a restore onto other GPUs), so the restore
    /// finds it in the process's mapping; a render node dumped before its process's `/dev/kfd`
    /// is rewritten once that id is known.
    pub(super) fn dump_render(&self, fd: BorrowedFd<'_>, id: u32, minor: u32) -> HookResult<()> {
        let topo = self.local_topology()?;
        let actual = topo
            .gpus()
            .find(|n| n.render_minor() == minor)
            .ok_or_else(|| {
                failed(
                    Errno::ENODEV,
                    format!("renderD{minor} is not a GPU of the KFD topology"),
                )
            })?
            .gpu_id;
        let render = self
            .platform
            .render_from_fd(dup(fd)?)
            .map_err(|e| caused(Errno::EIO, e))?;
        let mut msg = CriuRenderNode {
            gpu_id: actual,
            id,
            drm_render_minor: minor,
            ..Default::default()
        };
        let mut patches = Vec::new();
        match dump_gem::list(&render, minor).map_err(gem_failed)? {
            None => {
                log::debug!(
                    "renderD{minor}: the kernel cannot list its buffers (AMDGPU_GEM_LIST_HANDLES, \
                     Linux 6.18): none saved"
                );
                self.with_dump(|d| d.unlisted.insert(minor));
            }
            Some(mut listed) => {
                self.with_dump(|d| {
                    for (i, l) in listed.iter_mut().enumerate() {
                        let (import, p) = d
                            .ledger
                            .render(id, i, l.entry.handle, l.object)
                            .map_err(gem_failed)?;
                        l.entry.is_import = u32::from(import);
                        patches.extend(p);
                    }
                    Ok::<(), HookError>(())
                })?;
                let settings = self.settings();
                let opts = settings.dump_options();
                msg.pages_checksums = dump_gem::dump_contents(
                    &*self.platform,
                    minor,
                    id,
                    self.dir()?,
                    &listed,
                    &opts,
                )
                .map_err(gem_failed)?;
                msg.num_of_bos = listed.len() as u64;
                msg.bo_entries = listed.into_iter().map(|l| l.entry).collect();
            }
        }
        self.with_dump(|d| {
            if let Some(&user) = d.user_ids.get(&actual) {
                msg.gpu_id = user;
            } else {
                d.pending_renders.push((id, actual, minor));
            }
        });
        RenderNodeImage::write(self.dir()?, id, &msg).map_err(|e| caused(Errno::EIO, e))?;
        log::info!(
            "dumped renderD{minor} (GPU {:#x}) as image {id}: {} buffers",
            msg.gpu_id,
            msg.bo_entries.len()
        );
        self.apply(patches)
    }

    /// Rewrites the images a [`Ledger`](crate::dump::sharing::Ledger) sighting changed.
    pub(super) fn apply(&self, patches: Vec<Patch>) -> HookResult<()> {
        let dir = self.dir()?;
        let io = |e: images::FrameError| caused(Errno::EIO, e);
        for p in patches {
            match p {
                Patch::RenderImport { id, index } => {
                    let mut m = RenderNodeImage::read(dir, id).map_err(io)?;
                    if let Some(e) = m.bo_entries.get_mut(index) {
                        e.is_import = 1;
                    }
                    RenderNodeImage::write(dir, id, &m).map_err(io)?;
                }
                Patch::KfdHandle { id, index, key } => {
                    let mut m = KfdImage::read(dir, id).map_err(io)?;
                    if let Some(e) = m.bo_entries.get_mut(index) {
                        e.handle = key;
                    }
                    KfdImage::write(dir, id, &m).map_err(io)?;
                }
                Patch::Dmabuf { id, key } => {
                    DmabufImage::write(dir, id, &CriuDmabufNode { gem_handle: key }).map_err(io)?;
                    log::info!("dumped a dma-buf as image {id}: the buffer shared as {key}");
                }
            }
        }
        Ok(())
    }

    /// A dma-buf fd: which buffer it is, once a dumped file holds that buffer.
    pub(super) fn dump_dmabuf(&self, fd: BorrowedFd<'_>, id: u32) -> HookResult<()> {
        let object = gem::object_id(fd).map_err(|e| caused(Errno::from_io(&e), e))?;
        let patches = self
            .with_dump(|d| d.ledger.dmabuf(id, object))
            .map_err(gem_failed)?;
        if patches.is_empty() {
            log::info!("dma-buf image {id}: its buffer is in a file not dumped yet");
        }
        self.apply(patches)
    }

    /// Records the user ids of a dumped KFD file and fixes the render images written before it.
    pub(super) fn learn_user_ids(&self, gpus: &[crate::dump::GpuDump]) -> HookResult<()> {
        let fixes = self.with_dump(|state| {
            for g in gpus {
                state.user_ids.insert(g.actual_gpu_id, g.gpu_id);
            }
            let mut fixes = Vec::new();
            let user_ids = &state.user_ids;
            state
                .pending_renders
                .retain(|&(id, actual, minor)| match user_ids.get(&actual) {
                    Some(&user) => {
                        fixes.push((id, user, minor));
                        false
                    }
                    None => true,
                });
            fixes
        });
        let dir = self.dir()?;
        for (id, user, minor) in fixes {
            let mut m = RenderNodeImage::read(dir, id).map_err(|e| caused(Errno::EIO, e))?;
            m.gpu_id = user;
            RenderNodeImage::write(dir, id, &m).map_err(|e| caused(Errno::EIO, e))?;
            log::info!("renderD{minor} of image {id} is GPU {user:#x} to its process");
        }
        Ok(())
    }
}
