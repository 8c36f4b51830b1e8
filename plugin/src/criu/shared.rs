//! Buffers shared between the restored tasks: render-node buffers that another task's file
//! imports and dma-bufs, published by the task whose file creates them (through the mapping criu's
//! process made at `init`) and looked up by the tasks that use them.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use images::proto::{CriuDmabufNode, CriuRenderNode};
use images::{DmabufImage, ImageFile, KfdImage, RenderNodeImage};
use kfd_abi::platform::{DeviceKind, Platform};
use kfd_abi::Errno;

use super::{caused, failed, gem_failed, Engine};
use crate::gem::GemError;
use crate::hooks::{HookError, HookResult, VmaUpdate};
use crate::restore::render::{self, RenderRestore, RestoreGemOptions};
use crate::restore::sharing::{self, SharedBuffer};
use crate::restore::Restored;

/// `SharedBuffer::old_minor` of a published dma-buf (render minors are 128..255): its `addr` is
/// the buffer's key, its `fd` the publisher's fd of the dma-buf.
const DMABUF_MARK: u32 = u32::MAX;

/// How long a restore waits for the file that creates a shared buffer to publish it.
const SHARE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Which keys of the images [`Engine::scan_keys`] collects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Keys {
    /// Of buffers that render-node and dma-buf images import.
    Imported,
    /// Of buffers that render-node or /dev/kfd images create.
    Created,
    /// Of buffers that render-node images create.
    RenderCreated,
}

impl<P: Platform> Engine<P> {
    /// The keys of the buffers that some file of the checkpoint imports or holds as a dma-buf
    /// (read once from the image directory): their creators publish them.
    pub(super) fn needed_keys(&self) -> std::sync::Arc<std::collections::BTreeSet<u32>> {
        if let Some(n) = self.with_restore(|r| r.needed.clone()) {
            return n;
        }
        let keys = std::sync::Arc::new(self.scan_keys(Keys::Imported));
        self.with_restore(|r| r.needed = Some(std::sync::Arc::clone(&keys)));
        keys
    }

    /// The keys of the buffers that some file of the checkpoint creates: render-node buffers
    /// that are not imports, and `/dev/kfd` BOs named by a handle (read once).
    fn created_keys(&self) -> std::sync::Arc<std::collections::BTreeSet<u32>> {
        if let Some(c) = self.with_restore(|r| r.created.clone()) {
            return c;
        }
        let keys = std::sync::Arc::new(self.scan_keys(Keys::Created));
        self.with_restore(|r| r.created = Some(std::sync::Arc::clone(&keys)));
        keys
    }

    /// The keys of `which` buffers of the directory's images. An image that cannot be read adds
    /// none: its own restore says why.
    fn scan_keys(&self, which: Keys) -> std::collections::BTreeSet<u32> {
        let created = which != Keys::Imported;
        let mut keys = std::collections::BTreeSet::new();
        if let Ok(dir) = self.dir() {
            let path = format!("/proc/self/fd/{}", dir.as_raw_fd());
            for name in std::fs::read_dir(path)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
            {
                let id = |prefix: &str| {
                    name.strip_prefix(prefix)?
                        .strip_suffix(".img")?
                        .parse::<i32>()
                        .ok()
                        .map(|v| u32::from_ne_bytes(v.to_ne_bytes()))
                };
                if let Some(id) = id("amdgpu-renderD-") {
                    if let Ok(m) = RenderNodeImage::read(dir, id) {
                        keys.extend(
                            m.bo_entries
                                .iter()
                                .filter(|b| (b.is_import == 0) == created)
                                .map(|b| b.handle),
                        );
                    }
                } else if let Some(id) = id("amdgpu-dmabuf_").filter(|_| !created) {
                    if let Ok(m) = DmabufImage::read(dir, id) {
                        keys.insert(m.gem_handle);
                    }
                } else if let Some(id) = id("amdgpu-kfd-").filter(|_| which == Keys::Created) {
                    if let Ok(m) = KfdImage::read(dir, id) {
                        keys.extend(
                            m.bo_entries
                                .iter()
                                .map(|b| b.handle)
                                .filter(|&h| h != u32::MAX),
                        );
                    }
                }
            }
        }
        keys
    }

    /// Publishes the dma-bufs of buffers created in this task that other files need, for the
    /// other restored tasks (kept open here, above the task's own fds).
    pub(super) fn publish_dmabufs(&self, created: Vec<(u32, OwnedFd)>) -> HookResult<()> {
        let needed = self.needed_keys();
        let Some(shared) = self.with_restore(|r| r.shared.clone()) else {
            return Ok(());
        };
        let owner = self.platform.process_id();
        let published: std::collections::BTreeSet<u64> = shared
            .buffers()
            .iter()
            .filter(|b| b.old_minor == DMABUF_MARK)
            .map(|b| b.addr)
            .collect();
        let mut records = Vec::new();
        let mut kept = Vec::new();
        for (key, fd) in created {
            if !needed.contains(&key) || published.contains(&u64::from(key)) {
                continue;
            }
            let fd = match crate::host::criu().unused_fd_of(owner) {
                Some(next) => kfd_abi::transport::dup_at_or_above(fd.as_fd(), next)
                    .map_err(|e| caused(Errno::from_io(&e), e))?,
                None => fd,
            };
            records.push(SharedBuffer {
                owner,
                old_minor: DMABUF_MARK,
                addr: u64::from(key),
                size: 0,
                old_offset: 0,
                new_offset: 0,
                fd: fd.as_raw_fd(),
                new_minor: 0,
            });
            kept.push(fd);
        }
        shared
            .publish(&records)
            .map_err(|e| caused(Errno::ENOSPC, e))?;
        for r in &records {
            log::info!("pid {owner}: published the buffer shared as {}", r.addr);
        }
        self.with_restore(|r| r.kept.extend(kept));
        Ok(())
    }

    /// The dma-buf of the buffer shared as `key`, once the task that creates it published it.
    fn lookup_shared(&self, key: u32, what: &str) -> Result<OwnedFd, GemError> {
        let not_published = |secs| GemError::NotPublished {
            what: what.to_owned(),
            key,
            secs,
        };
        if !self.created_keys().contains(&key) {
            return Err(GemError::Inconsistent {
                file: what.to_owned(),
                what: format!(
                    "no image of the checkpoint creates the buffer shared as GEM handle {key} (no \
                     render-node buffer of that handle that is not an import, no /dev/kfd buffer \
                     shared under it)"
                ),
            });
        }
        let Some(shared) = self.with_restore(|r| r.shared.clone()) else {
            return Err(not_published(0));
        };
        let start = std::time::Instant::now();
        loop {
            let hit = shared
                .buffers()
                .into_iter()
                .find(|b| b.old_minor == DMABUF_MARK && b.addr == u64::from(key));
            if let Some(b) = hit {
                return self.platform.fd_of_process(b.owner, b.fd).map_err(|e| {
                    GemError::Unshareable(format!(
                        "{what}: taking the buffer shared as {key} (fd {} of pid {}): {e}",
                        b.fd, b.owner
                    ))
                });
            }
            if start.elapsed() >= SHARE_WAIT {
                return Err(not_published(SHARE_WAIT.as_secs()));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// A dma-buf fd: the dma-buf of the restored buffer it shares.
    pub(super) fn restore_dmabuf(&self, id: u32, msg: CriuDmabufNode) -> HookResult<OwnedFd> {
        let what = DmabufImage::file_name(id);
        let fd = self
            .lookup_shared(msg.gem_handle, &what)
            .map_err(gem_failed)?;
        log::info!(
            "{what}: restored as the buffer shared as {}",
            msg.gem_handle
        );
        Ok(fd)
    }

    /// Recreates the buffers of render image `id` in `render`, the process's restored file.
    pub(super) fn restore_gem(
        &self,
        id: u32,
        msg: &CriuRenderNode,
        render: &kfd_abi::RenderNode<P::Device>,
    ) -> HookResult<()> {
        if msg.bo_entries.is_empty() {
            return Ok(());
        }
        let minor = match self.platform.identify(render.as_fd()) {
            Ok(DeviceKind::Render { minor }) => minor,
            other => {
                return Err(failed(
                    Errno::EINVAL,
                    format!("the restored render node of image {id} is not one: {other:?}"),
                ))
            }
        };
        let settings = self.settings();
        let lookup = |key: u32, what: &str| self.lookup_shared(key, what);
        // The render images' keys are read once, and only for an image that asks (criu-dev's).
        let render_created = std::cell::OnceCell::new();
        let kfd_only = |key: u32| {
            self.created_keys().contains(&key)
                && !render_created
                    .get_or_init(|| self.scan_keys(Keys::RenderCreated))
                    .contains(&key)
        };
        let opts = RestoreGemOptions {
            staging: settings.staging,
            reading: settings.reading(),
            progress: &settings.progress,
            lookup: &lookup,
            kfd_only: &kfd_only,
        };
        let restored = render::restore(&RenderRestore {
            platform: &*self.platform,
            render,
            minor,
            id,
            msg,
            dir: self.dir()?,
            opts: &opts,
        })
        .map_err(gem_failed)?;
        log::info!(
            "{}: {} buffers of renderD{} restored on renderD{minor}, {} bytes",
            RenderNodeImage::file_name(id),
            msg.bo_entries.len(),
            msg.drm_render_minor,
            restored.bytes
        );
        self.publish_dmabufs(restored.created)?;
        // Kept for UPDATE_VMA_MAP: above every fd the task will have, like the KFD's files (at
        // the lowest free number it took an fd criu then restores the task's own file at).
        let above = crate::host::criu()
            .unused_fd_of(self.platform.process_id())
            .unwrap_or(0);
        let keep = self.render_at_or_above(render, above)?;
        self.with_restore(|r| {
            r.gem_remaps
                .push((msg.drm_render_minor, restored.remaps, keep));
        });
        Ok(())
    }

    /// Puts the render-node buffers of a process restored here in the table the other restored
    /// tasks see: a child that shares this process's files (forked before the dump) maps them
    /// through this task's render nodes.
    pub(super) fn publish(&self, r: &Restored<P::Device>) {
        let Some(shared) = self.with_restore(|r| r.shared.clone()) else {
            return;
        };
        let owner = self.platform.process_id();
        let buffers: Vec<SharedBuffer> = r
            .vmas
            .render_buffers()
            .filter_map(|(old_minor, gpu_id, b)| {
                let render = r.renders.get(&gpu_id)?;
                Some(SharedBuffer {
                    owner,
                    old_minor,
                    addr: b.addr,
                    size: b.size,
                    old_offset: b.old_offset,
                    new_offset: b.new_offset,
                    fd: render.as_fd().as_raw_fd(),
                    new_minor: r
                        .mapping
                        .gpu(gpu_id)
                        .map_or(0, |g| g.destination_render_minor),
                })
            })
            .collect();
        match shared.publish(&buffers) {
            Ok(()) => log::debug!(
                "pid {owner}: {} render-node buffers shared with the other restored tasks",
                buffers.len()
            ),
            Err(e) => log::warn!("pid {owner}: {e}"),
        }
    }

    /// UPDATE_VMA_MAP for a render VMA of a task that restored no buffer there: one that another
    /// task restored (the task's parent, which it shares the files with), mapped through that
    /// task's render node.
    pub(super) fn inherited_vma(
        &self,
        minor: u32,
        addr: u64,
        old_pgoff: u64,
    ) -> HookResult<Option<VmaUpdate>> {
        let pid = self.platform.process_id();
        let find = |buffers: &[SharedBuffer]| {
            sharing::find_inherited(buffers, pid, minor, addr, old_pgoff, |p| {
                self.platform.parent_of(p)
            })
            .map_err(|e| caused(Errno::EINVAL, e))
        };
        let found = self.with_restore(|state| {
            let Some(shared) = state.shared.clone() else {
                return Ok(None);
            };
            let mut hit = find(&state.inherited)?;
            if hit.is_none() {
                // Published since this task last looked.
                state.inherited = shared.buffers();
                hit = find(&state.inherited)?;
            }
            Ok::<_, HookError>(Some((shared, hit)))
        })?;
        let Some((shared, hit)) = found else {
            return Ok(None);
        };
        let Some((b, new_pgoff)) = hit else {
            if shared.lost() > 0 {
                return Err(failed(
                    Errno::ENOSPC,
                    format!(
                        "no restored buffer had renderD{minor} at {addr:#x} with offset \
                         {old_pgoff:#x}, and {} buffers did not fit in the table of {} shared \
                         with forked tasks",
                        shared.lost(),
                        shared.capacity()
                    ),
                ));
            }
            return Ok(None);
        };
        let fd = self.platform.fd_of_process(b.owner, b.fd).map_err(|e| {
            failed(
                Errno::from_io(&e),
                format!(
                    "taking renderD{} (fd {}) from pid {}, which restored the buffer at \
                         {addr:#x}: {e}",
                    b.new_minor, b.fd, b.owner
                ),
            )
        })?;
        log::info!(
            "pid {pid}: renderD{minor} at {addr:#x} maps the buffer pid {} restored (offset \
             {old_pgoff:#x} -> {new_pgoff:#x}, renderD{})",
            b.owner,
            b.new_minor
        );
        Ok(Some(VmaUpdate {
            new_pgoff,
            fd: Some(fd),
        }))
    }
}
