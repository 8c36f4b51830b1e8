//! Finding a process's images in criu's directory: which `/dev/kfd` image is whose, whether a
//! process has device state to resume, which render node an image's GPU is restored on.

use std::os::fd::{AsRawFd, BorrowedFd};

use images::{ImageFile, KfdImage};
use topology::CheckOptions;

use super::{inconsistent, is_empty, plan, RestoreError};

/// Whether the KFD images in `dir` say that process `pid` has device state to RESUME:
/// `Some(false)` when its image holds none, `None` when no image of `pid` is found.
pub(crate) fn pid_needs_resume(dir: BorrowedFd<'_>, pid: u32) -> Option<bool> {
    let listing = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd())).ok()?;
    listing
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let id: u32 = name
                .strip_prefix("amdgpu-kfd-")?
                .strip_suffix(".img")?
                .parse()
                .ok()?;
            KfdImage::read(dir, id).ok()
        })
        .find(|msg| msg.pid == pid)
        .map(|msg| !is_empty(&msg))
}

/// The ids of the `/dev/kfd` images in `dir`, in order.
pub(super) fn kfd_image_ids(dir: BorrowedFd<'_>) -> Result<Vec<u32>, RestoreError> {
    let listing = format!("/proc/self/fd/{}", dir.as_raw_fd());
    let entries = std::fs::read_dir(&listing).map_err(|e| RestoreError::Inconsistent {
        file: listing.clone(),
        what: format!("listing the image directory: {e}"),
    })?;
    let mut ids: Vec<u32> = entries
        .filter_map(|e| {
            let name = e.ok()?.file_name();
            let name = name.to_str()?;
            name.strip_prefix("amdgpu-kfd-")?
                .strip_suffix(".img")?
                .parse()
                .ok()
        })
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

/// The id of the `/dev/kfd` image of process `pid` in `dir`, if there is one (a process may have
/// render nodes open and no `/dev/kfd`). Reads every KFD image of the directory: for render
/// nodes restored before their process's `/dev/kfd` only.
pub(crate) fn kfd_image_of(dir: BorrowedFd<'_>, pid: u32) -> Result<Option<u32>, RestoreError> {
    for id in kfd_image_ids(dir)? {
        if KfdImage::try_read(dir, id)?.is_some_and(|m| m.pid == pid) {
            return Ok(Some(id));
        }
    }
    Ok(None)
}

/// The render minor on this machine of GPU `gpu_id` of the process whose `/dev/kfd` image is
/// `kfd_id`: where the image maps it, as [`super::restore_kfd`] will; for a GPU the process's KFD does
/// not use (or a process without `/dev/kfd`), the GPU of that id on this machine, and where
/// this machine has none, where another process's `/dev/kfd` image of the checkpoint maps it
/// (a render-only child of a ROCm process goes where its parent goes: a buffer they share
/// stays on one GPU).
pub(crate) fn render_minor_for(
    gpu_id: u32,
    kfd_id: Option<u32>,
    dir: BorrowedFd<'_>,
    local: &topology::Topology,
    checks: &CheckOptions,
) -> Result<Option<u32>, RestoreError> {
    if let Some(kfd_id) = kfd_id {
        let plan = plan(kfd_id, dir, local, checks)?
            .ok_or_else(|| inconsistent(kfd_id, "the image disappeared"))?;
        if let Some(m) = plan.mapping.gpu(gpu_id) {
            return Ok(Some(m.destination_render_minor));
        }
    }
    if let Some(n) = local.gpus().find(|n| n.gpu_id == gpu_id) {
        return Ok(Some(n.render_minor()));
    }
    for other in kfd_image_ids(dir)?
        .into_iter()
        .filter(|&id| Some(id) != kfd_id)
    {
        match plan(other, dir, local, checks) {
            Ok(Some(plan)) => {
                if let Some(m) = plan.mapping.gpu(gpu_id) {
                    log::info!(
                        "GPU {gpu_id:#x} is not on this machine; /dev/kfd image {other} maps it \
                         to renderD{}",
                        m.destination_render_minor
                    );
                    return Ok(Some(m.destination_render_minor));
                }
            }
            Ok(None) => {}
            Err(e) => log::debug!("/dev/kfd image {other} maps no GPU here: {e}"),
        }
    }
    Ok(None)
}

/// Whether `dir` has a `/dev/kfd` image of id `id` (an existing but unreadable one counts: its
/// restore reports why).
pub(crate) fn has_kfd_image(dir: BorrowedFd<'_>, id: u32) -> bool {
    !matches!(
        images::dir::open_read_at(dir, &KfdImage::file_name(id)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound
    )
}
