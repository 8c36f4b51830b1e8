//! Gathering the inspect report: decoding each image file of the directory and checking its pages
//! files, into the model of the parent module.

use std::io::ErrorKind;
use std::path::Path;

use images::proto::{CriuKfd, CriuRenderNode, KfdBoEntry, PagesChecksums};
use images::{
    pages, DmabufImage, ImageFile, KfdImage, PagesError, PagesFile, PagesReader, RenderNodeImage,
};

use super::{
    BoGroup, BoKind, ChecksumSummary, DmabufSummary, ImageCpu, ImageGpu, ImageLink, InspectReport,
    KfdContent, KfdSummary, PagesFileSummary, PagesStatus, RenderSummary, SharedMemSummary,
};
use crate::imagedir::{ImageDir, ImageName};
use crate::topo::Vram;
use crate::{hex_id, model_name, CliError};

/// Buffer for reading pages files with `--verify`.
const VERIFY_BUFFER: usize = 1 << 20;

fn bo_groups<'a>(bos: impl Iterator<Item = &'a KfdBoEntry>) -> Vec<BoGroup> {
    let mut groups: Vec<BoGroup> = Vec::new();
    for b in bos {
        let kind = BoKind::of(b.alloc_flags);
        match groups.iter_mut().find(|g| g.kind == kind) {
            Some(g) => {
                g.count += 1;
                g.size = g.size.saturating_add(b.size);
            }
            None => groups.push(BoGroup {
                kind,
                count: 1,
                size: b.size,
            }),
        }
    }
    groups.sort_by_key(|g| g.kind);
    groups
}

fn kfd_content(id: u32, msg: &CriuKfd) -> KfdContent {
    let gpus: Vec<ImageGpu> = msg
        .device_entries
        .iter()
        .filter(|d| d.gpu_id != 0)
        .map(|d| ImageGpu {
            gpu_id: d.gpu_id,
            node_id: d.node_id,
            vendor_id: d.vendor_id,
            device_id: d.device_id,
            model: model_name(d.vendor_id.into(), d.device_id.into()),
            compute_units: d.simd_count / d.simd_per_cu.max(1),
            vram: Vram {
                size: d.vram_size,
                public: d.vram_public != 0,
            },
            render_minor: d.drm_render_minor,
            domain: d.domain,
            hive_id: d.hive_id,
            fw_version: d.fw_version,
            sdma_fw_version: d.sdma_fw_version,
            capability: d.capability,
            links: d
                .iolinks
                .iter()
                .map(|l| ImageLink {
                    link_type: topology::LinkType::from_u32(l.r#type).to_string(),
                    to: l.node_to_id,
                })
                .collect(),
            bos: bo_groups(msg.bo_entries.iter().filter(|b| b.gpu_id == d.gpu_id)),
            contents: pages::kfd_pages_len(&msg.bo_entries, d.gpu_id),
            pages_file: images::names::kfd_pages(id, d.gpu_id),
            checksums: pages::find_checksums(&msg.pages_checksums, d.gpu_id)
                .map(ChecksumSummary::new),
        })
        .collect();
    let cpus = msg
        .device_entries
        .iter()
        .filter(|d| d.gpu_id == 0)
        .map(|d| ImageCpu {
            node_id: d.node_id,
            cores: d.cpu_cores_count,
            links: d.iolinks.iter().map(|l| l.node_to_id).collect(),
        })
        .collect();
    let mut orphan_gpus: Vec<u32> = msg
        .bo_entries
        .iter()
        .map(|b| b.gpu_id)
        .filter(|g| !gpus.iter().any(|d| d.gpu_id == *g))
        .collect();
    orphan_gpus.sort_unstable();
    orphan_gpus.dedup();
    let unassigned_bos = orphan_gpus
        .into_iter()
        .flat_map(|g| {
            bo_groups(msg.bo_entries.iter().filter(move |b| b.gpu_id == g))
                .into_iter()
                .map(move |grp| (g, grp))
        })
        .collect();
    KfdContent {
        pid: msg.pid,
        num_of_gpus: msg.num_of_gpus,
        num_of_cpus: msg.num_of_cpus,
        num_of_bos: msg.num_of_bos,
        num_of_objects: msg.num_of_objects,
        priv_data_size: msg.priv_data.len() as u64,
        shared_memory: (msg.shared_mem_size != 0).then_some(SharedMemSummary {
            size: msg.shared_mem_size,
            magic: msg.shared_mem_magic,
        }),
        checksummed_files: gpus.iter().filter(|g| g.checksums.is_some()).count(),
        gpus,
        cpus,
        unassigned_bos,
    }
}

/// Checks one pages file: the restore's open-time checks, and with `verify` every chunk.
fn pages_status(
    dir: &ImageDir,
    which: PagesFile,
    expected: u64,
    sums: Option<&PagesChecksums>,
    verify: Option<&indicatif::ProgressBar>,
) -> PagesStatus {
    // A render-node pages file without checksums is opened as the restore opens it: criu-dev's
    // plugin writes whatever is in its stack where the length header goes.
    let header_unset = matches!(which, PagesFile::Drm { .. }) && sums.is_none();
    let opened = if header_unset {
        PagesReader::open_ignoring_header(dir.fd(), which, expected)
    } else {
        PagesReader::open(dir.fd(), which, expected, sums)
    };
    // With --verify, every chunk is read (and checked against its checksum), counted on the
    // bar as it goes.
    let result = match (opened, verify) {
        (Ok(mut reader), Some(bar)) => {
            let mut buf = vec![0u8; VERIFY_BUFFER];
            loop {
                match reader.read_chunk(&mut buf) {
                    Ok(0) => break Ok(()),
                    Ok(n) => bar.inc(n as u64),
                    Err(e) => break Err(e),
                }
            }
        }
        (opened, _) => opened.map(drop),
    };
    let verify = verify.is_some();
    match result {
        Ok(()) if header_unset => PagesStatus::HeaderUnset { read: verify },
        Ok(()) => PagesStatus::Ok {
            read: verify,
            verified: verify && sums.is_some(),
        },
        Err(PagesError::Open { source, .. }) if source.kind() == ErrorKind::NotFound => {
            PagesStatus::Missing
        }
        Err(e) => PagesStatus::Bad {
            chunk: match &e {
                PagesError::ChecksumMismatch { chunk, .. } => Some(*chunk),
                _ => None,
            },
            message: e.to_string(),
        },
    }
}

fn kfd_pages_files(
    dir: &ImageDir,
    id: u32,
    msg: &CriuKfd,
    verify: Option<&indicatif::ProgressBar>,
    out: &mut Vec<PagesFileSummary>,
) {
    let file = KfdImage::file_name(id);
    for d in msg.device_entries.iter().filter(|d| d.gpu_id != 0) {
        let which = PagesFile::Kfd {
            id,
            gpu_id: d.gpu_id,
        };
        let len = pages::kfd_pages_len(&msg.bo_entries, d.gpu_id);
        let sums = pages::find_checksums(&msg.pages_checksums, d.gpu_id);
        let size = dir.size_of(ImageName::KfdPages {
            id,
            gpu_id: d.gpu_id,
        });
        if len == 0 && sums.is_none() && size.is_none() {
            continue; // nothing saved, nothing needed
        }
        out.push(PagesFileSummary {
            file: which.file_name(),
            owner: Some(format!("{file} GPU {}", hex_id(d.gpu_id))),
            size,
            expected_payload: Some(len),
            checksums: sums.map(ChecksumSummary::new),
            status: pages_status(dir, which, len, sums, verify),
        });
    }
}

fn drm_pages_files(
    dir: &ImageDir,
    id: u32,
    msg: &CriuRenderNode,
    verify: Option<&indicatif::ProgressBar>,
    out: &mut Vec<PagesFileSummary>,
) {
    let file = RenderNodeImage::file_name(id);
    for (i, bo) in msg.bo_entries.iter().enumerate() {
        let Ok(index) = u32::try_from(i) else { break };
        let which = PagesFile::Drm {
            id,
            minor: msg.drm_render_minor,
            index,
        };
        let sums = pages::find_checksums(&msg.pages_checksums, index);
        let size = dir.size_of(ImageName::DrmPages {
            id,
            minor: msg.drm_render_minor,
            index,
        });
        if size.is_none() && sums.is_none() {
            continue; // contents not saved for this BO
        }
        out.push(PagesFileSummary {
            file: which.file_name(),
            owner: Some(format!("{file} BO {index}")),
            size,
            expected_payload: Some(bo.size),
            checksums: sums.map(ChecksumSummary::new),
            status: pages_status(dir, which, bo.size, sums, verify),
        });
    }
}

/// Inspects the plugin's files in `dir`; `shown` is how the directory is named in the report.
/// With `verify`, every pages file is read to the end and its checksums verified.
///
/// # Errors
///
/// [`CliError::ImageDir`] when the directory cannot be read. Damaged files are reported in the
/// report, not as errors.
pub fn inspect(dir: &Path, shown: &str, verify: bool) -> Result<InspectReport, CliError> {
    let d = ImageDir::open(dir)?;
    // --verify reads every byte of the pages files: a bar on stderr (a terminal only).
    let bar = indicatif::ProgressBar::new(d.pages_bytes());
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "verifying [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec})",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    let reading = verify.then_some(&bar);
    let mut pages_files = Vec::new();
    let mut kfd = Vec::new();
    let mut render_nodes = Vec::new();
    let mut dmabufs = Vec::new();
    for e in &d.entries {
        match e.name {
            ImageName::Kfd { id } => {
                let (error, content, problems) = match KfdImage::read(d.fd(), id) {
                    Ok(msg) => {
                        kfd_pages_files(&d, id, &msg, reading, &mut pages_files);
                        let problems = crate::validate::kfd(id, &msg)
                            .into_iter()
                            .map(|p| p.message)
                            .collect();
                        (None, Some(kfd_content(id, &msg)), problems)
                    }
                    Err(e) => (Some(e.to_string()), None, Vec::new()),
                };
                kfd.push(KfdSummary {
                    file: e.name.file_name(),
                    id,
                    size: e.size,
                    error,
                    content,
                    problems,
                });
            }
            ImageName::Render { id } => {
                let summary = match RenderNodeImage::read(d.fd(), id) {
                    Ok(msg) => {
                        drm_pages_files(&d, id, &msg, reading, &mut pages_files);
                        RenderSummary {
                            file: e.name.file_name(),
                            id,
                            error: None,
                            problem: None,
                            gpu_id: Some(msg.gpu_id),
                            render_minor: Some(msg.drm_render_minor),
                            bos: Some(msg.num_of_bos),
                            bo_bytes: Some(
                                msg.bo_entries
                                    .iter()
                                    .fold(0u64, |a, b| a.saturating_add(b.size)),
                            ),
                        }
                    }
                    Err(err) => RenderSummary {
                        file: e.name.file_name(),
                        id,
                        error: Some(err.to_string()),
                        problem: None,
                        gpu_id: None,
                        render_minor: None,
                        bos: None,
                        bo_bytes: None,
                    },
                };
                render_nodes.push(summary);
            }
            ImageName::Dmabuf { id } => {
                let (error, gem_handle) = match DmabufImage::read(d.fd(), id) {
                    Ok(msg) => (None, Some(msg.gem_handle)),
                    Err(err) => (Some(err.to_string()), None),
                };
                dmabufs.push(DmabufSummary {
                    file: e.name.file_name(),
                    id,
                    error,
                    gem_handle,
                    problem: None,
                });
            }
            ImageName::KfdPages { .. } | ImageName::DrmPages { .. } => {}
        }
    }
    for e in &d.entries {
        if matches!(
            e.name,
            ImageName::KfdPages { .. } | ImageName::DrmPages { .. }
        ) && !pages_files.iter().any(|p| p.file == e.name.file_name())
        {
            pages_files.push(PagesFileSummary {
                file: e.name.file_name(),
                owner: None,
                size: Some(e.size),
                expected_payload: None,
                checksums: None,
                status: PagesStatus::Orphan,
            });
        }
    }
    bar.finish_and_clear();
    pages_files.sort_by(|a, b| a.file.cmp(&b.file));
    // A render node restores onto the GPU its KFD image maps: one of no KFD image cannot.
    let image_gpus: Vec<u32> = kfd
        .iter()
        .filter_map(|k| k.content.as_ref())
        .flat_map(|c| c.gpus.iter().map(|g| g.gpu_id))
        .collect();
    for r in &mut render_nodes {
        if let Some(g) = r.gpu_id.filter(|g| !image_gpus.contains(g)) {
            r.problem = Some(format!(
                "its GPU {} is not a GPU of any KFD image in the directory",
                hex_id(g)
            ));
        }
    }
    for p in crate::validate::shared_buffers(&d) {
        let slot = render_nodes
            .iter_mut()
            .find(|r| r.file == p.file)
            .map(|r| &mut r.problem)
            .or_else(|| {
                dmabufs
                    .iter_mut()
                    .find(|b| b.file == p.file)
                    .map(|b| &mut b.problem)
            });
        if let Some(slot) = slot {
            *slot = Some(match slot.take() {
                Some(first) => format!("{first}; {}", p.message),
                None => p.message,
            });
        }
    }
    let has_images = !d.entries.is_empty();
    let problems = usize::from(!has_images)
        + kfd.iter().filter(|k| k.error.is_some()).count()
        + render_nodes
            .iter()
            .filter(|r| r.error.is_some() || r.problem.is_some())
            .count()
        + dmabufs
            .iter()
            .filter(|r| r.error.is_some() || r.problem.is_some())
            .count()
        + pages_files.iter().filter(|p| p.status.is_problem()).count()
        // BOs of no GPU are among these (`validate::kfd` names them).
        + kfd.iter().map(|k| k.problems.len()).sum::<usize>();
    let mut provenance = crate::provenance::provenance(dir, &d);
    provenance.refused_by_ours(problems);
    Ok(InspectReport {
        dir: shown.to_owned(),
        verify,
        kfd,
        render_nodes,
        dmabufs,
        pages_files,
        has_images,
        problems,
        provenance,
    })
}

#[cfg(test)]
mod tests {
    use kfd_abi::AllocFlags;

    use super::*;

    #[test]
    fn bo_groups_count_and_sum_per_kind_in_kind_order() {
        let bo = |flags: AllocFlags, size| KfdBoEntry {
            size,
            alloc_flags: flags.bits(),
            ..Default::default()
        };
        let bos = [
            bo(AllocFlags::GTT, 4096),
            bo(AllocFlags::VRAM, 1 << 20),
            bo(AllocFlags::VRAM, 1 << 20),
        ];
        assert_eq!(
            bo_groups(bos.iter()),
            [
                BoGroup {
                    kind: BoKind::Vram,
                    count: 2,
                    size: 2 << 20
                },
                BoGroup {
                    kind: BoKind::Gtt,
                    count: 1,
                    size: 4096
                }
            ]
        );
    }
}
