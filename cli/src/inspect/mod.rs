//! `amdgpu-cr inspect DIR [--verify]`: what the plugin's files in an image directory hold.
//!
//! Without `--verify` every pages file gets the checks a restore makes when it opens it (length
//! header, size, checksum list); with `--verify` every pages file is also read to the end and
//! every chunk checked against its checksum.
//!
//! This module holds the command's arguments and the report's model (whose `Serialize` is the
//! JSON form); `gather` builds the report from a directory and `render` writes its text form.

use std::io::Write;
use std::path::PathBuf;

use images::proto::PagesChecksums;
use images::ChecksumAlgorithm;
use kfd_abi::AllocFlags;
use serde::Serialize;

use super::topo::Vram;
use super::{CliError, Format, Outcome, Report, Run};

mod gather;
mod render;

pub use gather::inspect;

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
    /// What a restore refuses in it although it decodes (the validation `check` makes too).
    pub problems: Vec<String>,
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
    /// What is wrong although it decodes (no image creates the buffer it shares).
    pub problem: Option<String>,
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
    /// A render-node pages file without checksums, whose length header is not checked: criu-dev's
    /// plugin never sets it (the restore ignores it too); sound as far as checked.
    HeaderUnset {
        /// Read to the end (`--verify`).
        read: bool,
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
            Self::HeaderUnset { read: false } => {
                "ok (length header not checked: criu-dev leaves it unset)".to_owned()
            }
            Self::HeaderUnset { read: true } => {
                "ok (read; no checksums; length header not checked)".to_owned()
            }
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
    /// Number of problems found (no images, undecodable images, images a restore refuses,
    /// missing, bad or orphan pages files, render-node images of no KFD image's GPU, files that
    /// import a buffer no image creates).
    pub problems: usize,
    /// Which plugin wrote the images, and what each plugin can restore of them.
    pub provenance: super::provenance::Provenance,
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
}
