//! `amdgpu-cr inspect DIR [--verify]`: what the plugin's files in an image directory hold.
//!
//! Without `--verify` every pages file gets the checks a restore makes when it opens it (length
//! header, size, checksum list); with `--verify` every pages file is also read to the end and
//! every chunk checked against its checksum.

use std::io::{self, ErrorKind, Write};
use std::path::{Path, PathBuf};

use images::proto::{CriuKfd, CriuRenderNode, KfdBoEntry, PagesChecksums};
use images::{
    pages, ChecksumAlgorithm, DmabufImage, ImageFile, KfdImage, PagesError, PagesFile, PagesReader,
    RenderNodeImage,
};
use kfd_abi::AllocFlags;
use serde::Serialize;

use super::imagedir::{ImageDir, ImageName};
use super::table::Table;
use super::topo::{hive_text, vram_text, Vram};
use super::{hex_id, model_name, CliError, Format, HumanSize, Outcome, Report, Run};

/// Buffer for reading pages files with `--verify`.
const VERIFY_BUFFER: usize = 1 << 20;

/// Arguments of `amdgpu-cr inspect`.
#[derive(Clone, Debug, clap::Args)]
pub struct InspectArgs {
    /// The image directory (criu's -D).
    pub dir: PathBuf,
    /// Read every pages file to the end and verify its checksums.
    #[arg(long)]
    pub verify: bool,
    /// Print one JSON document.
    #[arg(long)]
    pub json: bool,
}

impl Run for InspectArgs {
    fn run(&self, out: &mut dyn Write) -> Result<Outcome, CliError> {
        inspect(&self.dir, &self.dir.display().to_string(), self.verify)?
            .emit(Format::from_json_flag(self.json), out)
    }
}

/// The kind of a KFD BO, from its allocation flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BoKind {
    /// Device memory (contents saved).
    Vram,
    /// System memory through the GART (contents saved).
    Gtt,
    /// Process memory (not saved: criu saves it with the process).
    Userptr,
    /// Doorbell slice.
    Doorbell,
    /// HDP flush page.
    Mmio,
    /// No known domain bit.
    Other,
}

impl BoKind {
    /// The kind of a BO with `alloc_flags`.
    #[must_use]
    pub(crate) fn of(alloc_flags: u32) -> Self {
        let f = AllocFlags::from_bits_retain(alloc_flags);
        if f.contains(AllocFlags::VRAM) {
            Self::Vram
        } else if f.contains(AllocFlags::GTT) {
            Self::Gtt
        } else if f.contains(AllocFlags::USERPTR) {
            Self::Userptr
        } else if f.contains(AllocFlags::DOORBELL) {
            Self::Doorbell
        } else if f.contains(AllocFlags::MMIO_REMAP) {
            Self::Mmio
        } else {
            Self::Other
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Vram => "VRAM",
            Self::Gtt => "GTT",
            Self::Userptr => "USERPTR",
            Self::Doorbell => "DOORBELL",
            Self::Mmio => "MMIO",
            Self::Other => "other",
        }
    }
}

/// BOs of one kind on one GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct BoGroup {
    /// The kind.
    pub kind: BoKind,
    /// How many.
    pub count: u64,
    /// Their total size in bytes.
    pub size: u64,
}

/// A checksum list of a pages file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChecksumSummary {
    /// `CRC-32C`, or `unknown (N)`.
    pub algorithm: String,
    /// Bytes per chunk.
    pub chunk_size: u32,
    /// Number of chunks.
    pub chunks: usize,
    /// Payload bytes the list covers.
    pub total_size: u64,
}

impl ChecksumSummary {
    fn new(c: &PagesChecksums) -> Self {
        Self {
            algorithm: match ChecksumAlgorithm::from_u32(c.algorithm) {
                Some(ChecksumAlgorithm::Crc32c) => "CRC-32C".to_owned(),
                None => format!("unknown ({})", c.algorithm),
            },
            chunk_size: c.chunk_size,
            chunks: c.chunk_sums.len(),
            total_size: c.total_size,
        }
    }
}

/// A link recorded in a KFD image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ImageLink {
    /// `PCIe`, `xGMI`, ... (as `amdgpu-cr topology` names them).
    pub link_type: String,
    /// The node it goes to.
    pub to: u32,
}

/// A GPU recorded in a KFD image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ImageGpu {
    /// gpu_id (the id the process uses; JSON: a hex string).
    #[serde(serialize_with = "crate::json::hex32")]
    pub gpu_id: u32,
    /// Topology node id at checkpoint.
    pub node_id: u32,
    /// `vendor_id` (JSON: a hex string).
    #[serde(serialize_with = "crate::json::hex32")]
    pub vendor_id: u32,
    /// `device_id` (JSON: a hex string).
    #[serde(serialize_with = "crate::json::hex32")]
    pub device_id: u32,
    /// Known model name of the device id.
    pub model: Option<&'static str>,
    /// Compute units (`simd_count / simd_per_cu`).
    pub compute_units: u32,
    /// Frame buffer.
    pub vram: Vram,
    /// Render minor at checkpoint.
    pub render_minor: u32,
    /// PCI domain.
    pub domain: u32,
    /// xGMI hive id (0: none; JSON: a hex string, as it may exceed 2^53).
    #[serde(serialize_with = "crate::json::hex64")]
    pub hive_id: u64,
    /// `fw_version`.
    pub fw_version: u32,
    /// `sdma_fw_version`.
    pub sdma_fw_version: u32,
    /// `capability`.
    pub capability: u32,
    /// Its PCIe/xGMI links.
    pub links: Vec<ImageLink>,
    /// Its BOs by kind.
    pub bos: Vec<BoGroup>,
    /// Bytes of saved contents (VRAM and GTT BOs): the pages file's payload.
    pub contents: u64,
    /// The pages file of its contents.
    pub pages_file: String,
    /// Its checksum list, if the image has one.
    pub checksums: Option<ChecksumSummary>,
}

/// A CPU node recorded in a KFD image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ImageCpu {
    /// Node id.
    pub node_id: u32,
    /// `cpu_cores_count`.
    pub cores: u32,
    /// Target nodes of its PCIe/xGMI links.
    pub links: Vec<u32>,
}

/// libhsakmt's shared memory record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SharedMemSummary {
    /// Size of `/dev/shm/hsakmt_shared_mem`.
    pub size: u64,
    /// Its first 4 bytes.
    pub magic: u32,
}

/// What a decodable KFD image holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KfdContent {
    /// The checkpointed process.
    pub pid: u32,
    /// `num_of_gpus`.
    pub num_of_gpus: u32,
    /// `num_of_cpus`.
    pub num_of_cpus: u32,
    /// `num_of_bos`.
    pub num_of_bos: u64,
    /// `num_of_objects` (queues, events, SVM ranges in priv_data).
    pub num_of_objects: u32,
    /// Bytes of the driver's private data.
    pub priv_data_size: u64,
    /// The shared memory record (`None`: there was no such file).
    pub shared_memory: Option<SharedMemSummary>,
    /// GPU entries in image order.
    pub gpus: Vec<ImageGpu>,
    /// CPU entries in image order.
    pub cpus: Vec<ImageCpu>,
    /// BOs on a GPU with no device entry, as `(gpu_id, group)`.
    pub unassigned_bos: Vec<(u32, BoGroup)>,
    /// Number of pages files with a checksum list.
    pub checksummed_files: usize,
}

/// One KFD image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KfdSummary {
    /// `amdgpu-kfd-<id>.img`.
    pub file: String,
    /// CRIU object id.
    pub id: u32,
    /// File size.
    pub size: u64,
    /// Why it does not decode.
    pub error: Option<String>,
    /// What it holds, when it decodes.
    pub content: Option<KfdContent>,
}

/// One render-node image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RenderSummary {
    /// `amdgpu-renderD-<id>.img`.
    pub file: String,
    /// CRIU object id.
    pub id: u32,
    /// Why it does not decode.
    pub error: Option<String>,
    /// What is wrong although it decodes (its GPU is in no KFD image of the directory).
    pub problem: Option<String>,
    /// Its GPU (JSON: a hex string).
    #[serde(serialize_with = "crate::json::opt_hex32")]
    pub gpu_id: Option<u32>,
    /// Render minor at checkpoint (0 in images of criu 4.2 and older).
    pub render_minor: Option<u32>,
    /// Number of BO entries.
    pub bos: Option<u64>,
    /// Their total size.
    pub bo_bytes: Option<u64>,
}

/// One dma-buf image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DmabufSummary {
    /// `amdgpu-dmabuf_<id>.img`.
    pub file: String,
    /// CRIU object id.
    pub id: u32,
    /// Why it does not decode.
    pub error: Option<String>,
    /// The GEM handle it records.
    pub gem_handle: Option<u32>,
}

/// The state of one pages file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum PagesStatus {
    /// Sound as far as checked.
    Ok {
        /// Read to the end (`--verify`).
        read: bool,
        /// Its checksums were verified.
        verified: bool,
    },
    /// Expected but absent.
    Missing,
    /// Present but wrong.
    Bad {
        /// What is wrong.
        message: String,
        /// The chunk whose checksum fails, if that is the problem.
        chunk: Option<u64>,
    },
    /// No image in the directory refers to it.
    Orphan,
}

impl PagesStatus {
    fn is_problem(&self) -> bool {
        // An orphan means its image is gone: the checkpoint is incomplete (as `check` says).
        matches!(self, Self::Missing | Self::Bad { .. } | Self::Orphan)
    }

    fn text(&self) -> String {
        match self {
            Self::Ok {
                read: false,
                verified: _,
            } => "ok (length checked)".to_owned(),
            Self::Ok {
                read: true,
                verified: true,
            } => "ok (all chunks verified)".to_owned(),
            Self::Ok {
                read: true,
                verified: false,
            } => "ok (read; no checksums)".to_owned(),
            Self::Missing => "MISSING".to_owned(),
            Self::Bad {
                chunk: Some(c),
                message: _,
            } => format!("CORRUPT (chunk {c})"),
            Self::Bad { .. } => "BAD".to_owned(),
            Self::Orphan => "ORPHAN (no image in the directory refers to it)".to_owned(),
        }
    }
}

/// One pages file, present or expected.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PagesFileSummary {
    /// Its name.
    pub file: String,
    /// Which image and GPU or BO it belongs to.
    pub owner: Option<String>,
    /// Its size on disk (`None`: absent).
    pub size: Option<u64>,
    /// The payload the image's BOs add up to.
    pub expected_payload: Option<u64>,
    /// Its checksum list.
    pub checksums: Option<ChecksumSummary>,
    /// Its state.
    pub status: PagesStatus,
}

/// The report of `amdgpu-cr inspect`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InspectReport {
    /// The directory, as given.
    pub dir: String,
    /// Pages files were read to the end (`--verify`).
    pub verify: bool,
    /// KFD images by id.
    pub kfd: Vec<KfdSummary>,
    /// Render-node images by id.
    pub render_nodes: Vec<RenderSummary>,
    /// dma-buf images by id.
    pub dmabufs: Vec<DmabufSummary>,
    /// Pages files, by name.
    pub pages_files: Vec<PagesFileSummary>,
    /// Whether the directory holds any of the plugin's files (none is a problem).
    pub has_images: bool,
    /// Number of problems found (no images, undecodable images, missing, bad or orphan pages
    /// files, render-node images of no KFD image's GPU).
    pub problems: usize,
    /// Which plugin wrote the images, and what each plugin can restore of them.
    pub provenance: super::provenance::Provenance,
}

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
    let opened = PagesReader::open(dir.fd(), which, expected, sums);
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
                let (error, content) = match KfdImage::read(d.fd(), id) {
                    Ok(msg) => {
                        kfd_pages_files(&d, id, &msg, reading, &mut pages_files);
                        (None, Some(kfd_content(id, &msg)))
                    }
                    Err(e) => (Some(e.to_string()), None),
                };
                kfd.push(KfdSummary {
                    file: e.name.file_name(),
                    id,
                    size: e.size,
                    error,
                    content,
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
    let has_images = !d.entries.is_empty();
    let problems = usize::from(!has_images)
        + kfd.iter().filter(|k| k.error.is_some()).count()
        + render_nodes
            .iter()
            .filter(|r| r.error.is_some() || r.problem.is_some())
            .count()
        + dmabufs.iter().filter(|r| r.error.is_some()).count()
        + pages_files.iter().filter(|p| p.status.is_problem()).count()
        + kfd
            .iter()
            .filter_map(|k| k.content.as_ref())
            .filter(|c| !c.unassigned_bos.is_empty())
            .count();
    Ok(InspectReport {
        dir: shown.to_owned(),
        verify,
        kfd,
        render_nodes,
        dmabufs,
        pages_files,
        has_images,
        problems,
        provenance: super::provenance::provenance(dir, &d),
    })
}

fn size_or_dash(size: Option<u64>) -> String {
    size.map_or("-".to_owned(), |s| HumanSize(s).to_string())
}

fn render_kfd(k: &KfdSummary, out: &mut dyn Write) -> io::Result<()> {
    write!(out, "\n{} ({})", k.file, HumanSize(k.size))?;
    let Some(c) = &k.content else {
        return writeln!(
            out,
            ": DOES NOT DECODE: {}",
            k.error.as_deref().unwrap_or("?")
        );
    };
    writeln!(out, ": /dev/kfd of pid {}", c.pid)?;
    writeln!(
        out,
        "  {} GPUs, {} CPU nodes, {} BOs, {} objects, priv_data {}",
        c.num_of_gpus,
        c.num_of_cpus,
        c.num_of_bos,
        c.num_of_objects,
        HumanSize(c.priv_data_size)
    )?;
    match c.shared_memory {
        Some(s) => writeln!(
            out,
            "  shared memory (hsakmt): {}, magic {:#010x}",
            HumanSize(s.size),
            s.magic
        )?,
        None => writeln!(out, "  shared memory (hsakmt): none")?,
    }
    let with_contents = c.gpus.iter().filter(|g| g.contents > 0).count();
    if c.checksummed_files == 0 {
        writeln!(out, "  page checksums: none (image without integrity data)")?;
    } else {
        writeln!(
            out,
            "  page checksums: present for {} of {} GPUs with contents",
            c.checksummed_files, with_contents
        )?;
    }
    writeln!(out, "  GPUs")?;
    let mut t = Table::new(&[
        "gpu_id", "node", "device", "model", "CUs", "VRAM", "renderD", "hive", "fw", "sdma fw",
        "links",
    ]);
    for g in &c.gpus {
        t.row([
            hex_id(g.gpu_id),
            g.node_id.to_string(),
            format!("{:04x}:{:04x}", g.vendor_id, g.device_id),
            g.model.unwrap_or("-").to_owned(),
            g.compute_units.to_string(),
            vram_text(Some(g.vram)),
            g.render_minor.to_string(),
            hive_text(g.hive_id),
            g.fw_version.to_string(),
            g.sdma_fw_version.to_string(),
            link_list(&g.links),
        ]);
    }
    t.write(out, "    ")?;
    if !c.cpus.is_empty() {
        writeln!(out, "  CPU nodes")?;
        let mut t = Table::new(&["node", "cores", "links to"]);
        for cpu in &c.cpus {
            t.row([
                cpu.node_id.to_string(),
                cpu.cores.to_string(),
                if cpu.links.is_empty() {
                    "-".to_owned()
                } else {
                    cpu.links
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                },
            ]);
        }
        t.write(out, "    ")?;
    }
    writeln!(out, "  BOs")?;
    let mut t = Table::new(&["gpu_id", "type", "count", "size"]);
    for g in &c.gpus {
        for b in &g.bos {
            t.row([
                hex_id(g.gpu_id),
                b.kind.name().to_owned(),
                b.count.to_string(),
                HumanSize(b.size).to_string(),
            ]);
        }
    }
    for (gpu, b) in &c.unassigned_bos {
        t.row([
            format!("{} (no such GPU!)", hex_id(*gpu)),
            b.kind.name().to_owned(),
            b.count.to_string(),
            HumanSize(b.size).to_string(),
        ]);
    }
    if t.is_empty() {
        writeln!(out, "    none")?;
    } else {
        t.write(out, "    ")?;
    }
    Ok(())
}

/// `PCIe->0, xGMI->3,4` from the links, grouped by kind in order of appearance.
fn link_list(links: &[ImageLink]) -> String {
    let mut groups: Vec<(&str, Vec<String>)> = Vec::new();
    for l in links {
        match groups.iter_mut().find(|(t, _)| *t == l.link_type) {
            Some((_, v)) => v.push(l.to.to_string()),
            None => groups.push((&l.link_type, vec![l.to.to_string()])),
        }
    }
    if groups.is_empty() {
        return "-".to_owned();
    }
    groups
        .iter()
        .map(|(ty, v)| format!("{ty}->{}", v.join(",")))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Report for InspectReport {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "Image directory: {}", self.dir)?;
        if self.kfd.is_empty()
            && self.render_nodes.is_empty()
            && self.dmabufs.is_empty()
            && self.pages_files.is_empty()
        {
            writeln!(
                out,
                "\nNo amdgpu image files in the directory: not a checkpoint of a GPU process, or \
                 not the images directory."
            )?;
            return writeln!(out, "\nResult: 1 problem (no images)");
        }
        for k in &self.kfd {
            render_kfd(k, out)?;
        }
        if !self.render_nodes.is_empty() {
            writeln!(out, "\nRender-node images")?;
            for r in &self.render_nodes {
                match (&r.error, r.gpu_id, r.render_minor, r.bos, r.bo_bytes) {
                    (None, Some(g), Some(m), Some(n), Some(bytes)) => writeln!(
                        out,
                        "  {}: GPU {}, renderD{m}, {} ({}){}",
                        r.file,
                        hex_id(g),
                        crate::count(usize::try_from(n).unwrap_or(usize::MAX), "BO", "BOs"),
                        HumanSize(bytes),
                        r.problem
                            .as_ref()
                            .map_or(String::new(), |p| format!(": PROBLEM: {p}"))
                    )?,
                    (e, ..) => writeln!(
                        out,
                        "  {}: DOES NOT DECODE: {}",
                        r.file,
                        e.as_deref().unwrap_or("?")
                    )?,
                }
            }
        }
        if !self.dmabufs.is_empty() {
            writeln!(out, "\ndma-buf images")?;
            for b in &self.dmabufs {
                match (&b.error, b.gem_handle) {
                    (None, Some(h)) => writeln!(out, "  {}: GEM handle {h}", b.file)?,
                    (e, _) => writeln!(
                        out,
                        "  {}: DOES NOT DECODE: {}",
                        b.file,
                        e.as_deref().unwrap_or("?")
                    )?,
                }
            }
        }
        writeln!(out, "\nPages files")?;
        if self.pages_files.is_empty() {
            writeln!(out, "  none")?;
        } else {
            let mut t = Table::new(&["file", "size", "payload", "checksums", "status"]);
            for p in &self.pages_files {
                t.row([
                    p.file.clone(),
                    size_or_dash(p.size),
                    size_or_dash(p.expected_payload),
                    p.checksums.as_ref().map_or("-".to_owned(), |c| {
                        format!(
                            "{} x {} {}",
                            c.chunks,
                            HumanSize(c.chunk_size.into()),
                            c.algorithm
                        )
                    }),
                    p.status.text(),
                ]);
            }
            t.write(out, "  ")?;
            for p in &self.pages_files {
                if let PagesStatus::Bad { message, .. } = &p.status {
                    writeln!(out, "  {}: {message}", p.file)?;
                }
            }
        }
        self.provenance.render(out)?;
        if self.problems == 0 {
            writeln!(
                out,
                "\nResult: ok{}",
                if self.verify {
                    " (all pages files read and verified)"
                } else {
                    " (pages files not read; --verify reads and verifies them)"
                }
            )
        } else {
            writeln!(
                out,
                "\nResult: {}",
                crate::count(self.problems, "problem", "problems")
            )
        }
    }

    fn outcome(&self) -> Outcome {
        Outcome::from_bool(self.problems == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bo_kinds_follow_the_domain_bits() {
        assert_eq!(BoKind::of(AllocFlags::VRAM.bits()), BoKind::Vram);
        assert_eq!(
            BoKind::of((AllocFlags::GTT | AllocFlags::WRITABLE).bits()),
            BoKind::Gtt
        );
        assert_eq!(BoKind::of(AllocFlags::USERPTR.bits()), BoKind::Userptr);
        assert_eq!(BoKind::of(AllocFlags::DOORBELL.bits()), BoKind::Doorbell);
        assert_eq!(BoKind::of(AllocFlags::MMIO_REMAP.bits()), BoKind::Mmio);
        assert_eq!(BoKind::of(0), BoKind::Other);
    }

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
