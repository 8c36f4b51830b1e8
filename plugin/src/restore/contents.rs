//! Buffer contents: from the pages files into the restored BOs, in the task or handed to criu's
//! master (the parallel restore).

use std::collections::BTreeMap;
use std::os::fd::{AsFd, BorrowedFd};

use images::proto::{CriuKfd, KfdBoEntry};
use images::{ImageFile, KfdImage, PagesReader};
use kfd_abi::criu::RestoredBo;
use kfd_abi::platform::Platform;
use kfd_abi::AllocFlags;
use topology::Mapping;

use crate::copy::{self, BoSource};

use super::{check_counts, open_readers, GpuRestore, RestoreError, RestoreOptions};

/// Whether the contents of BO `b` are in its GPU's pages file (a GPU with a reader).
pub(super) fn in_pages(b: &KfdBoEntry, readers: &BTreeMap<u32, PagesReader>) -> bool {
    readers.contains_key(&b.gpu_id) && AllocFlags::from_bits_retain(b.alloc_flags).has_contents()
}

/// Sends the dma-bufs of the BOs with contents to criu's master (the parallel restore); the
/// GPUs' results say 0 bytes, which the master writes.
pub(super) fn hand_off(
    hub: &super::parallel::Hub,
    pid: u32,
    id: u32,
    mapping: &Mapping,
    msg: &CriuKfd,
    restored: &[RestoredBo],
    readers: &BTreeMap<u32, PagesReader>,
) -> Result<Vec<GpuRestore>, RestoreError> {
    let fail = |what: String| RestoreError::Handoff { id, what };
    let mut indices = Vec::new();
    let mut fds = Vec::new();
    for (i, (b, r)) in msg.bo_entries.iter().zip(restored).enumerate() {
        if !in_pages(b, readers) {
            continue;
        }
        let fd = r.dmabuf.as_ref().ok_or_else(|| {
            fail(format!(
                "the driver gave no dma-buf for the BO at {:#x} (GPU {:#x})",
                b.addr, b.gpu_id
            ))
        })?;
        indices.push(u32::try_from(i).map_err(|_| fail(format!("BO index {i}")))?);
        fds.push(fd.as_fd());
    }
    let gpus: Vec<(u32, u32)> = mapping
        .gpus
        .iter()
        .filter(|m| readers.contains_key(&m.source_gpu_id))
        .map(|m| (m.source_gpu_id, m.destination_render_minor))
        .collect();
    if !indices.is_empty() {
        let sock = hub
            .task_end
            .socket()
            .map_err(|e| fail(format!("reaching criu's master: {e}")))?;
        let mut at = 0;
        for part in super::parallel::parts(id, pid, &gpus, &indices) {
            let n = part.bos.len();
            super::parallel::send_message(sock.as_fd(), &part.encode(), &fds[at..at + n]).map_err(
                |e| {
                    fail(format!(
                        "sending buffers {at}..{} to criu's master: {e}",
                        at + n
                    ))
                },
            )?;
            at += n;
        }
        log::info!(
            "image {id}: {} buffers on {} GPUs handed to criu's master, which restores their \
             contents",
            indices.len(),
            gpus.len()
        );
    }
    Ok(mapping
        .gpus
        .iter()
        .map(|m| GpuRestore {
            gpu_id: m.source_gpu_id,
            actual_gpu_id: m.destination_gpu_id,
            bos: msg
                .bo_entries
                .iter()
                .filter(|b| b.gpu_id == m.source_gpu_id && in_pages(b, readers))
                .count(),
            bytes: 0,
            verified: false,
        })
        .collect())
}

/// In criu's master: checks a job a restored task sent against its image and writes the
/// contents of its BOs, per GPU from that GPU's own pages file. Returns the bytes written.
pub(crate) fn fill_job<P: Platform>(
    platform: &P,
    dir: BorrowedFd<'_>,
    opts: &RestoreOptions,
    job: super::parallel::Job,
) -> Result<u64, RestoreError> {
    let id = job.image;
    let fail = |what: String| RestoreError::Handoff { id, what };
    let msg = KfdImage::read(dir, id)?;
    check_counts(id, &msg)?;
    let gpu_ids: Vec<u32> = msg
        .device_entries
        .iter()
        .filter(|d| d.gpu_id != 0)
        .map(|d| d.gpu_id)
        .collect();
    let readers = open_readers(id, dir, &msg, &gpu_ids)?;
    let mut dmabufs: Vec<Option<BorrowedFd<'_>>> = vec![None; msg.bo_entries.len()];
    for (index, fd) in &job.bos {
        let slot = dmabufs.get_mut(*index as usize).ok_or_else(|| {
            fail(format!(
                "BO index {index}, but the image has {} BOs",
                msg.bo_entries.len()
            ))
        })?;
        if slot.replace(fd.as_fd()).is_some() {
            return Err(fail(format!("BO {index} sent twice")));
        }
    }
    let mut targets = BTreeMap::new();
    for (i, b) in msg.bo_entries.iter().enumerate() {
        let sent = dmabufs[i].is_some();
        if sent != in_pages(b, &readers) {
            return Err(fail(format!(
                "the BO at {:#x} (index {i}, GPU {:#x}) {}",
                b.addr,
                b.gpu_id,
                if sent {
                    "has no contents in the image but was sent"
                } else {
                    "has contents in the image but was not sent"
                }
            )));
        }
        if sent && !targets.contains_key(&b.gpu_id) {
            let minor = *job
                .gpus
                .get(&b.gpu_id)
                .ok_or_else(|| fail(format!("GPU {:#x} is not in the task's GPU map", b.gpu_id)))?;
            if !(128..=255).contains(&minor) {
                return Err(fail(format!(
                    "GPU {:#x} maps to render minor {minor}, not a render node",
                    b.gpu_id
                )));
            }
            targets.insert(b.gpu_id, (minor, 0));
        }
    }
    let gpus = copy_contents(platform, &targets, &msg, &dmabufs, readers, opts)?;
    Ok(gpus.iter().map(|g| g.bytes).sum())
}

/// Writes every GPU's pages file into its restored BOs, one thread per GPU: `dmabufs` has the
/// dma-buf of each BO of `msg` (by image index), `targets` the render minor and gpu_id of each
/// image GPU on this node.
pub(super) fn copy_contents<P: Platform>(
    platform: &P,
    targets: &BTreeMap<u32, (u32, u32)>,
    msg: &CriuKfd,
    dmabufs: &[Option<BorrowedFd<'_>>],
    readers: BTreeMap<u32, PagesReader>,
    opts: &RestoreOptions,
) -> Result<Vec<GpuRestore>, RestoreError> {
    std::thread::scope(|s| {
        let workers: Vec<_> = readers
            .into_iter()
            .map(|(gpu, mut reader)| {
                let bos: Vec<BoSource<'_>> = msg
                    .bo_entries
                    .iter()
                    .zip(dmabufs)
                    .filter(|(b, _)| {
                        b.gpu_id == gpu
                            && AllocFlags::from_bits_retain(b.alloc_flags).has_contents()
                    })
                    .map(|(b, fd)| {
                        fd.map(|fd| BoSource {
                            dmabuf: fd,
                            size: b.size,
                            addr: b.addr,
                        })
                    })
                    .collect::<Option<_>>()
                    .unwrap_or_default();
                let m = targets.get(&gpu).copied();
                s.spawn(move || -> Result<GpuRestore, RestoreError> {
                    let (minor, actual) = m.ok_or_else(|| RestoreError::Inconsistent {
                        file: KfdImage::file_name(0),
                        what: format!("GPU {gpu:#x} was not mapped"),
                    })?;
                    let render = platform.open_render(minor)?;
                    let bytes = copy::restore_gpu(
                        &render,
                        &bos,
                        opts.staging,
                        opts.reading,
                        &opts.progress,
                        &mut reader,
                    )
                    .map_err(|source| RestoreError::Copy {
                        gpu_id: gpu,
                        source,
                    })?;
                    Ok(GpuRestore {
                        gpu_id: gpu,
                        actual_gpu_id: actual,
                        bos: bos.len(),
                        bytes,
                        verified: reader.is_verified(),
                    })
                })
            })
            .collect();
        copy::join_all(workers, |source| RestoreError::Copy { gpu_id: 0, source })
    })
}
