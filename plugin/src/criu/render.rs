//! Render-node files and dma-bufs: their images at dump (a render node's buffers and mappings,
//! the GPU under the id its process uses, dma-bufs as the buffer they share), and the render
//! nodes at restore (the open file the process's KFD restore gave the driver, or one opened
//! early for a process that opened it first).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};

use images::proto::{CriuDmabufNode, CriuRenderNode};
use images::{DmabufImage, ImageFile, KfdImage, RenderNodeImage};
use kfd_abi::platform::Platform;
use kfd_abi::Errno;

use super::{caused, dup, failed, gem_failed, Engine};
use crate::dump::gem as dump_gem;
use crate::dump::sharing::Patch;
use crate::gem;
use crate::hooks::{HookError, HookResult};
use crate::restore;

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

    /// `render` moved to the lowest free fd number at or above `next`.
    pub(super) fn render_at_or_above(
        &self,
        render: &kfd_abi::RenderNode<P::Device>,
        next: RawFd,
    ) -> HookResult<kfd_abi::RenderNode<P::Device>> {
        let high = kfd_abi::transport::dup_at_or_above(render.as_fd(), next)
            .map_err(|e| caused(Errno::from_io(&e), e))?;
        self.platform
            .render_from_fd(high)
            .map_err(|e| caused(Errno::EIO, e))
    }

    /// Restores a render-node file as the same open file that the process's KFD restore gave
    /// the driver for that GPU: its VM is the process's compute VM, as it was before the dump.
    /// A render node restored before its process's `/dev/kfd` (the process opened it first) is
    /// opened on the GPU the restore will map it to and handed to the KFD restore later; in a
    /// process without `/dev/kfd` it is the GPU of the same id on this machine.
    pub(super) fn restore_render(
        &self,
        id: u32,
        msg: &CriuRenderNode,
    ) -> HookResult<Option<OwnedFd>> {
        let known = self.with_restore(|state| {
            state
                .restored
                .iter()
                .find_map(|r| r.renders.get(&msg.gpu_id))
                .or_else(|| state.preopened.get(&msg.gpu_id))
                .map(kfd_abi::RenderNode::try_clone)
        });
        if let Some(render) = known {
            let render = render.map_err(|e| caused(Errno::EIO, e))?;
            self.restore_gem(id, msg, &render)?;
            return dup(render.as_fd()).map(Some);
        }
        let render = self.open_render_early(id, msg)?;
        // Kept until the KFD restore: above every fd the task will have, like the KFD's files.
        let render = match crate::shim::unused_fd_of(self.platform.process_id()) {
            Some(next) => self.render_at_or_above(&render, next)?,
            None => render,
        };
        self.restore_gem(id, msg, &render)?;
        let fd = dup(render.as_fd())?;
        self.with_restore(|r| r.preopened.insert(msg.gpu_id, render));
        Ok(Some(fd))
    }

    /// Opens the render node for render image `id` before any `/dev/kfd` of this process was
    /// restored.
    fn open_render_early(
        &self,
        id: u32,
        msg: &CriuRenderNode,
    ) -> HookResult<kfd_abi::RenderNode<P::Device>> {
        let dir = self.dir()?;
        let image = RenderNodeImage::file_name(id);
        let err = |e: restore::RestoreError| HookError::failed(e.errno(), format!("{image}: {e}"));
        let local = self.usable_topology()?;
        let cached = self.with_restore(|r| r.own_kfd_image);
        let kfd_id = match cached {
            Some(k) => k,
            None => {
                let k = restore::kfd_image_of(dir, self.platform.process_id()).map_err(err)?;
                self.with_restore(|r| r.own_kfd_image = Some(k));
                k
            }
        };
        let checks = self.settings().checks;
        let minor = restore::render_minor_for(msg.gpu_id, kfd_id, dir, &local.topology, &checks)
            .map_err(err)?
            .ok_or_else(|| {
                let kfd = match kfd_id {
                    Some(k) => format!(", and the process's /dev/kfd image {k} does not use it"),
                    None => String::new(),
                };
                failed(
                    Errno::ENODEV,
                    format!(
                        "{image}: renderD{} (GPU {:#x}) at the dump: this machine has no GPU of \
                         that id{kfd}",
                        msg.drm_render_minor, msg.gpu_id
                    ),
                )
            })?;
        log::info!(
            "{image}: GPU {:#x} opened as renderD{minor} before its process's /dev/kfd{}",
            msg.gpu_id,
            if kfd_id.is_some() {
                " (handed to the KFD restore)"
            } else {
                " (the process has none)"
            }
        );
        self.platform
            .open_render(minor)
            .map_err(|e| caused(e.errno().unwrap_or(Errno::EIO), e))
    }
}

/// Refuses a render-node image whose counts contradict its lists (`num_of_bos` against
/// `bo_entries`, each buffer's `num_of_vms` against its `vm_entries`) before anything of it is
/// restored: its buffers would be restored short.
pub(super) fn check_render_counts(id: u32, msg: &CriuRenderNode) -> HookResult<()> {
    let listed = msg.bo_entries.len() as u64;
    let what = if msg.num_of_bos != listed {
        format!(
            "num_of_bos says {} but it lists {listed} buffer(s)",
            msg.num_of_bos
        )
    } else if let Some((i, b)) = msg
        .bo_entries
        .iter()
        .enumerate()
        .find(|(_, b)| b.num_of_vms as usize != b.vm_entries.len())
    {
        format!(
            "buffer {i} (GEM handle {}): num_of_vms says {} but it lists {} mapping(s)",
            b.handle,
            b.num_of_vms,
            b.vm_entries.len()
        )
    } else {
        return Ok(());
    };
    Err(HookError::failed(
        Errno::EINVAL,
        format!(
            "{}: the image of render node renderD{} contradicts itself: {what}: refused",
            RenderNodeImage::file_name(id),
            msg.drm_render_minor
        ),
    ))
}
