//! The engine at restore: the `/dev/kfd` files of a restored process, its render nodes (the
//! open file the process's KFD restore gave the driver, or one opened early for a process that
//! opened it first), the fds it keeps out of the way of the task's own, the answer to
//! UPDATE_VMA_MAP from what the task restored, and the parallel restore's start in criu's
//! master. What the restored tasks share is in `shared`.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use images::proto::CriuRenderNode;
use images::{DmabufImage, ImageFile, RenderNodeImage};
use kfd_abi::platform::Platform;
use kfd_abi::Errno;

use super::session::RestoreSession;
use super::{caused, dup, failed, Engine};
use crate::hooks::{HookError, HookResult, VmaUpdate};
use crate::restore::vma::{MappedOn, VmaDevice};
use crate::restore::{self, Restored};

impl<P: Platform> Engine<P> {
    /// The GPUs of this node that the calling restored process may use
    /// ([`restore::usable_topology`]), probed on first use in this process.
    pub(super) fn usable_topology(&self) -> HookResult<std::sync::Arc<restore::UsableGpus>> {
        let pid = self.platform.process_id();
        let known = self.with_restore(|r| match &r.usable {
            Some((owner, t)) if *owner == pid => Some(std::sync::Arc::clone(t)),
            _ => None,
        });
        if let Some(t) = known {
            return Ok(t);
        }
        let t = std::sync::Arc::new(restore::usable_topology(
            &*self.platform,
            &*self.local_topology()?,
        ));
        self.with_restore(|r| r.usable = Some((pid, std::sync::Arc::clone(&t))));
        Ok(t)
    }

    /// RESTORE_EXT_FILE in Rust terms: recreates file `id` in the calling (restored) process
    /// and returns its fd; `Ok(None)` asks to be called again later.
    pub fn restore_file(&self, id: u32) -> HookResult<Option<OwnedFd>> {
        self.enabled()?;
        let dir = self.dir()?;
        if let Some(msg) =
            RenderNodeImage::try_read(dir, id).map_err(|e| caused(Errno::EINVAL, e))?
        {
            check_render_counts(id, &msg)?;
            return self.restore_render(id, &msg);
        }
        let handoff = self.with_restore(|r| r.parallel.clone());
        let opts = self.settings().restore_options(handoff);
        if !restore::has_kfd_image(dir, id) {
            if let Some(msg) =
                DmabufImage::try_read(dir, id).map_err(|e| caused(Errno::EINVAL, e))?
            {
                return self.restore_dmabuf(id, msg).map(Some);
            }
            return Err(HookError::NotOurs);
        }
        let local = self.usable_topology()?;
        let preopened = self.with_restore(|r| std::mem::take(&mut r.preopened));
        let needed = self.needed_keys();
        let keep = |key: u32| needed.contains(&key);
        let mut restored =
            restore::restore_kfd(&*self.platform, &local, id, dir, &opts, preopened, &keep)
                .map_err(|e| caused(e.errno(), e))?
                .ok_or(HookError::NotOurs)?;
        let shared = std::mem::take(&mut restored.shared);
        log::info!(
            "restored image {id}: {} bytes of GPU memory in {:.3}s",
            restored.bytes(),
            restored.elapsed.as_secs_f64()
        );
        let restored = self.keep_out_of_the_way(restored)?;
        let fd = dup(restored.kfd.as_fd())?;
        self.publish(&restored);
        self.with_restore(|r| r.restored.push(restored));
        self.publish_dmabufs(shared)?;
        Ok(Some(fd))
    }

    /// Moves the files the plugin keeps in the restored task (its `/dev/kfd` and the render nodes
    /// whose VMs the driver uses) above every fd number the task itself will have, so that criu
    /// restoring the task's own files never lands on them.
    fn keep_out_of_the_way(&self, mut r: Restored<P::Device>) -> HookResult<Restored<P::Device>> {
        let Some(mut next) = crate::host::criu().unused_fd_of(r.pid) else {
            return Ok(r);
        };
        log::debug!("keeping the restored task's device files from fd {next} up");
        let io = |e: std::io::Error| caused(Errno::from_io(&e), e);
        let high = kfd_abi::transport::dup_at_or_above(r.kfd.as_fd(), next).map_err(io)?;
        next = high.as_raw_fd() + 1;
        r.kfd = self
            .platform
            .kfd_from_fd(high)
            .map_err(|e| caused(Errno::EIO, e))?;
        for render in r.renders.values_mut() {
            *render = self.render_at_or_above(render, next)?;
            next = render.as_fd().as_raw_fd() + 1;
        }
        Ok(r)
    }

    /// RESTORE_INIT with the parallel restore on: the socket the restored tasks send their BOs
    /// on, and the fills in this (criu's master) process.
    pub(super) fn start_parallel(&self) -> HookResult<()> {
        let dir = self.dir()?;
        let opts = self.settings().restore_options(None);
        let io = |e: std::io::Error| caused(Errno::from_io(&e), e);
        let (master, task) = crate::restore::parallel::socket_pair().map_err(io)?;
        let task_end = if crate::host::criu().in_criu() {
            match crate::host::criu().fdstore_add(task.as_fd()) {
                Some(id) => crate::restore::parallel::TaskEnd::Stored(id),
                None => {
                    log::warn!(
                        "criu's fd store did not take the parallel restore's socket: buffer \
                         contents are restored in the restored tasks"
                    );
                    return Err(HookError::NotOurs);
                }
            }
        } else {
            crate::restore::parallel::TaskEnd::Inherited(task)
        };
        let platform = std::sync::Arc::clone(&self.platform);
        let fill: std::sync::Arc<crate::restore::parallel::Filler> =
            std::sync::Arc::new(move |job: crate::restore::parallel::Job| {
                restore::fill_job(&*platform, dir, &opts, job).map_err(|e| e.to_string())
            });
        let hub =
            crate::restore::parallel::Hub::new(master, task_end, self.platform.process_id(), fill);
        self.with_restore(|r| r.parallel = Some(std::sync::Arc::new(hub)));
        log::info!(
            "parallel restore on: the restored tasks hand their buffers to criu's master, which \
             restores their contents"
        );
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
        let render = match crate::host::criu().unused_fd_of(self.platform.process_id()) {
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

/// The answer to UPDATE_VMA_MAP from what this task restored itself: a BO of a restored
/// `/dev/kfd` file, or a render-node buffer; `None` if neither had the VMA.
pub(super) fn restored_vma<P: Platform>(
    state: &RestoreSession<P>,
    device: VmaDevice,
    addr: u64,
    old_pgoff: u64,
) -> HookResult<Option<VmaUpdate>> {
    let Some((r, target)) = state
        .restored
        .iter()
        .find_map(|r| Some((r, r.vmas.find(device, addr, old_pgoff)?)))
    else {
        if let VmaDevice::Render { minor } = device {
            let hit = state
                .gem_remaps
                .iter()
                .filter(|(old, _, _)| *old == minor)
                .find_map(|(_, remaps, render)| {
                    Some((remaps.iter().find_map(|r| r.answer(old_pgoff))?, render))
                });
            if let Some((new_pgoff, render)) = hit {
                let fd = dup(render.as_fd())?;
                return Ok(Some(VmaUpdate {
                    new_pgoff,
                    fd: Some(fd),
                }));
            }
        }
        return Ok(None);
    };
    let fd = match target.on {
        MappedOn::Kfd => None,
        MappedOn::Render { gpu_id } => {
            let render = r.renders.get(&gpu_id).ok_or_else(|| {
                failed(
                    Errno::EINVAL,
                    format!("no render node was restored for GPU {gpu_id:#x}"),
                )
            })?;
            Some(dup(render.as_fd())?)
        }
    };
    Ok(Some(VmaUpdate {
        new_pgoff: target.new_pgoff,
        fd,
    }))
}
