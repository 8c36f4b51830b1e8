//! The verdict on an image directory: per KFD image the restore's up-front checks and the GPU
//! mapping, per render-node image the render node it would be reopened on.

use std::io::{self, Write};

use images::proto::CriuKfd;
use images::{ImageFile, KfdImage, PagesError, RenderNodeImage};
use serde::Serialize;
use topology::{CheckOptions, Topology};

use super::env::EnvChecks;
use super::mapping::{MapOutcome, IMAGE_SIDES};
use crate::imagedir::ImageDir;
use crate::{hex_id, CliError, Outcome, Report};
use amdgpu_plugin::restore::{self, RestoreError};

/// Something wrong with an image file, found before any mapping.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ImageProblem {
    /// The file concerned.
    pub file: String,
    /// What is wrong.
    pub message: String,
}

/// The verdict on one KFD image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KfdCheck {
    /// `amdgpu-kfd-<id>.img`.
    pub file: String,
    /// CRIU object id.
    pub id: u32,
    /// The pid recorded (when the image decodes).
    pub pid: Option<u32>,
    /// The image's GPU ids, in image order (empty when it does not decode; JSON: hex strings).
    #[serde(serialize_with = "crate::json::hex32_list")]
    pub gpu_ids: Vec<u32>,
    /// Image problems (the first the restore would stop at).
    pub problems: Vec<ImageProblem>,
    /// The GPU mapping (when the image decodes).
    pub mapping: Option<MapOutcome>,
    /// The pages files read to the end (when every up-front check passed).
    pub contents: Option<Contents>,
    /// Whether a restore would pass every up-front check, the page contents' included.
    pub restorable: bool,
}

/// What reading a KFD image's pages files found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Contents {
    /// Pages files read to the end.
    pub files: usize,
    /// Bytes read.
    pub bytes: u64,
    /// Whether every one had checksums, all of which matched (`false`: some are upstream's,
    /// without checksums, and were read unverified).
    pub verified: bool,
}

/// The verdict on one render-node image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RenderCheck {
    /// `amdgpu-renderD-<id>.img`.
    pub file: String,
    /// The image GPU it belongs to (when it decodes; JSON: a hex string).
    #[serde(serialize_with = "crate::json::opt_hex32")]
    pub gpu_id: Option<u32>,
    /// The local render minor it would be reopened on.
    pub local_render_minor: Option<u32>,
    /// What prevents its restore.
    pub problem: Option<String>,
}

/// The report of `amdgpu-cr check`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    /// The image directory, as given.
    pub dir: String,
    /// The topology root restored onto, as given.
    pub topology_root: String,
    /// GPUs there.
    pub node_gpus: usize,
    /// The render minors `--devices` allowed (`None`: every GPU of the node).
    pub devices: Option<Vec<u32>>,
    /// GPUs a restore may use: the node's, or those `--devices` allowed.
    pub local_gpus: usize,
    /// The `KFD_*_CHECK` switches used.
    pub checks: EnvChecks,
    /// One per KFD image, by id.
    pub images: Vec<KfdCheck>,
    /// One per render-node image, by id.
    pub render_nodes: Vec<RenderCheck>,
    /// Pages files of no image in the directory (a KFD or render-node image is missing), and
    /// dma-buf images of a buffer no image creates.
    pub orphans: Vec<ImageProblem>,
    /// Whether the directory holds any of the plugin's files.
    pub has_images: bool,
    /// Whether every image passes (and there is one).
    pub restorable: bool,
}

/// The file a pages error is about.
fn pages_error_file(e: &PagesError) -> &str {
    match e {
        PagesError::Create { file, .. }
        | PagesError::Open { file, .. }
        | PagesError::Write { file, .. }
        | PagesError::Read { file, .. }
        | PagesError::InvalidChunkSize { file }
        | PagesError::Overrun { file, .. }
        | PagesError::Incomplete { file, .. }
        | PagesError::Header { file, .. }
        | PagesError::HeaderMismatch { file, .. }
        | PagesError::BadChecksumList { file, .. }
        | PagesError::ChecksumMismatch { file, .. }
        | PagesError::ReadPastEnd { file, .. } => file,
    }
}

fn problem(file: &str, e: &dyn std::fmt::Display) -> ImageProblem {
    ImageProblem {
        file: file.to_owned(),
        message: e.to_string(),
    }
}

/// Reads every pages file of a plan to the end, verifying each chunk against the image's
/// checksums as a restore does, and counting the bytes on `progress`.
fn read_contents(
    readers: std::collections::BTreeMap<u32, images::PagesReader>,
    progress: &indicatif::ProgressBar,
) -> Result<Contents, PagesError> {
    let mut buf = vec![0u8; images::DEFAULT_CHUNK_SIZE as usize * 4];
    let mut contents = Contents {
        files: 0,
        bytes: 0,
        verified: true,
    };
    for (_, mut reader) in readers {
        loop {
            let n = reader.read_chunk(&mut buf)?;
            if n == 0 {
                break;
            }
            contents.bytes += n as u64;
            progress.inc(n as u64);
        }
        contents.files += 1;
        contents.verified &= reader.is_verified();
    }
    Ok(contents)
}

/// Judges KFD image `id` against `local`; reads its pages files with `progress`.
fn check_kfd(
    dir: &ImageDir,
    id: u32,
    local: &Topology,
    checks: &CheckOptions,
    progress: &indicatif::ProgressBar,
) -> KfdCheck {
    let file = KfdImage::file_name(id);
    let mut out = KfdCheck {
        file: file.clone(),
        id,
        pid: None,
        gpu_ids: Vec::new(),
        problems: Vec::new(),
        mapping: None,
        contents: None,
        restorable: false,
    };
    let image: CriuKfd = match KfdImage::read(dir.fd(), id) {
        Ok(m) => m,
        Err(e) => {
            out.problems.push(problem(&file, &e));
            return out;
        }
    };
    out.pid = Some(image.pid);
    out.gpu_ids = image
        .device_entries
        .iter()
        .filter(|d| d.gpu_id != 0)
        .map(|d| d.gpu_id)
        .collect();
    let source = amdgpu_plugin::topology_image::from_device_entries(&image.device_entries);
    // The validation inspect makes too: one verdict for one directory.
    let problems = crate::validate::kfd(id, &image);
    if !problems.is_empty() {
        out.problems = problems;
        // The restore stops at the image problem; still show where the GPUs would go.
        out.mapping = Some(MapOutcome::compute(&source, local, checks));
        return out;
    }
    match restore::plan(id, dir.fd(), local, checks) {
        Ok(Some(plan)) => {
            out.mapping = Some(MapOutcome::new(Ok(plan.mapping), &source, local, checks));
            match read_contents(plan.readers, progress) {
                Ok(contents) => {
                    out.contents = Some(contents);
                    out.restorable = true;
                }
                Err(e) => out.problems.push(problem(pages_error_file(&e), &e)),
            }
        }
        Ok(None) => out.problems.push(ImageProblem {
            file,
            message: "the file disappeared while it was checked".to_owned(),
        }),
        Err(RestoreError::Mapping(e)) => {
            out.mapping = Some(MapOutcome::new(Err(e), &source, local, checks));
        }
        Err(e) => {
            let at = match &e {
                RestoreError::Pages(p) => pages_error_file(p).to_owned(),
                RestoreError::Inconsistent { file, .. } => file.clone(),
                _ => file,
            };
            let message = match e {
                RestoreError::Inconsistent { what, .. } => what,
                e => e.to_string(),
            };
            out.problems.push(ImageProblem { file: at, message });
            // The restore stops at the image problem; still show where the GPUs would go.
            out.mapping = Some(MapOutcome::compute(&source, local, checks));
        }
    }
    out
}

/// Judges render-node image `id`: its GPU must be a GPU of a KFD image that maps.
fn check_render(dir: &ImageDir, id: u32, kfds: &[KfdCheck]) -> RenderCheck {
    let file = RenderNodeImage::file_name(id);
    let msg = match RenderNodeImage::read(dir.fd(), id) {
        Ok(m) => m,
        Err(e) => {
            return RenderCheck {
                file,
                gpu_id: None,
                local_render_minor: None,
                problem: Some(e.to_string()),
            }
        }
    };
    // Its buffers' pages files, as inspect judges them.
    let pages: Vec<String> = crate::validate::render_pages(dir, id, &msg)
        .into_iter()
        .map(|p| format!("{}: {}", p.file, p.message))
        .collect();
    let owner = kfds.iter().find(|k| k.gpu_ids.contains(&msg.gpu_id));
    let mapped = owner.and_then(|k| match &k.mapping {
        Some(MapOutcome::Mapped { mapping }) if k.restorable => {
            mapping.gpus.iter().find(|g| g.image_gpu_id == msg.gpu_id)
        }
        _ => None,
    });
    let problem = match owner {
        None => Some(format!(
            "its GPU {} is not a GPU of any KFD image in the directory",
            hex_id(msg.gpu_id)
        )),
        Some(k) if mapped.is_none() => Some(format!(
            "its GPU {} belongs to {}, which is not restorable",
            hex_id(msg.gpu_id),
            k.file
        )),
        Some(_) => None,
    };
    let problem = match (problem, pages.is_empty()) {
        (problem, true) => problem,
        (None, false) => Some(pages.join("; ")),
        (Some(p), false) => Some(format!("{p}; {}", pages.join("; "))),
    };
    RenderCheck {
        file,
        gpu_id: Some(msg.gpu_id),
        local_render_minor: mapped.map(|g| g.local_render_minor),
        problem,
    }
}

/// Checks every image in `dir` against the topology `local` (read from `topology_root`) under
/// `checks`. `shown` is how the directory is named in the report.
///
/// # Errors
///
/// [`CliError::ImageDir`] when the directory cannot be read.
pub fn check_dir(
    dir: &std::path::Path,
    shown: &str,
    topology_root: &str,
    local: &Topology,
    checks: &EnvChecks,
) -> Result<CheckReport, CliError> {
    check_dir_on(dir, shown, topology_root, local, None, checks)
}

/// [`check_dir`] for a container given the GPUs of `devices` (render minors) of `node`: only
/// they are candidates, and the topology is the one the container reads (the other GPUs are
/// missing, links to them invalid; see [`Topology::restricted_to`]). `None`: every GPU.
///
/// # Errors
///
/// [`CliError::ImageDir`] when the directory cannot be read.
pub fn check_dir_on(
    dir: &std::path::Path,
    shown: &str,
    topology_root: &str,
    node: &Topology,
    devices: Option<&[u32]>,
    checks: &EnvChecks,
) -> Result<CheckReport, CliError> {
    let restricted;
    let local = match devices {
        Some(minors) => {
            restricted = node.restricted_to(|n| minors.contains(&n.render_minor()));
            &restricted
        }
        None => node,
    };
    let d = ImageDir::open(dir)?;
    // Reading the page contents is the long part: a bar on stderr (a terminal only).
    let progress = indicatif::ProgressBar::new(d.pages_bytes());
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "verifying [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec})",
    ) {
        progress.set_style(style.progress_chars("=> "));
    }
    let images: Vec<KfdCheck> = d
        .kfd_ids()
        .into_iter()
        .map(|id| check_kfd(&d, id, local, &checks.options, &progress))
        .collect();
    progress.finish_and_clear();
    let render_nodes: Vec<RenderCheck> = d
        .render_ids()
        .into_iter()
        .map(|id| check_render(&d, id, &images))
        .collect();
    let mut render_nodes = render_nodes;
    let mut orphans: Vec<ImageProblem> = d
        .orphans()
        .into_iter()
        .map(|(file, message)| ImageProblem { file, message })
        .collect();
    // Files importing a buffer no image creates: a render-node image's problem, or (a dma-buf
    // image, which has no row of its own) a file whose image is missing.
    for p in crate::validate::shared_buffers(&d) {
        match render_nodes.iter_mut().find(|r| r.file == p.file) {
            Some(r) => {
                r.problem = Some(match r.problem.take() {
                    Some(first) => format!("{first}; {}", p.message),
                    None => p.message,
                });
            }
            None => orphans.push(p),
        }
    }
    let has_images = !d.entries.is_empty();
    let restorable = has_images
        && orphans.is_empty()
        && images.iter().all(|k| k.restorable)
        && render_nodes.iter().all(|r| r.problem.is_none());
    Ok(CheckReport {
        dir: shown.to_owned(),
        topology_root: topology_root.to_owned(),
        node_gpus: node.gpus().count(),
        devices: devices.map(<[u32]>::to_vec),
        local_gpus: local.gpus().count(),
        checks: checks.clone(),
        images,
        render_nodes,
        orphans,
        has_images,
        restorable,
    })
}

impl Report for CheckReport {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "Image directory: {}", self.dir)?;
        match &self.devices {
            None => writeln!(
                out,
                "Restoring onto: {} ({})",
                self.topology_root,
                crate::count(self.local_gpus, "GPU", "GPUs")
            )?,
            Some(minors) => writeln!(
                out,
                "Restoring onto: {} ({}; the devices given allow {}: {})",
                self.topology_root,
                crate::count(self.node_gpus, "GPU", "GPUs"),
                self.local_gpus,
                minors
                    .iter()
                    .map(|m| format!("renderD{m}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )?,
        }
        self.checks.render(out)?;
        if !self.has_images {
            writeln!(
                out,
                "\nNo amdgpu image files in the directory: not a checkpoint of a GPU process, or \
                 not the images directory."
            )?;
        } else if self.images.is_empty() {
            writeln!(
                out,
                "\nNo amdgpu-kfd-*.img in the directory: no GPU state to restore."
            )?;
        }
        for k in &self.images {
            write!(out, "\n{}", k.file)?;
            if let Some(pid) = k.pid {
                write!(
                    out,
                    " (pid {pid}, {})",
                    crate::count(k.gpu_ids.len(), "GPU", "GPUs")
                )?;
            }
            writeln!(
                out,
                ": {}",
                if k.restorable {
                    "restorable"
                } else {
                    "NOT restorable"
                }
            )?;
            for p in &k.problems {
                writeln!(out, "  image problem in {}: {}", p.file, p.message)?;
            }
            if let Some(c) = &k.contents {
                writeln!(
                    out,
                    "  page contents: {} read ({}), {}",
                    crate::count(c.files, "pages file", "pages files"),
                    crate::HumanSize(c.bytes),
                    if c.verified {
                        "every chunk's checksum matches"
                    } else {
                        "NOT verified: written without checksums (as upstream's plugin writes them)"
                    }
                )?;
            }
            if let Some(m) = &k.mapping {
                if !k.problems.is_empty() && m.is_mapped() {
                    writeln!(out, "  the GPUs themselves would map:")?;
                }
                m.render(out, "  ", IMAGE_SIDES)?;
            }
            if self.devices.is_some() && !k.restorable && k.gpu_ids.len() > self.local_gpus {
                writeln!(
                    out,
                    "  --devices: the node has {}, the devices given allow {}; the image needs {}",
                    crate::count(self.node_gpus, "GPU", "GPUs"),
                    self.local_gpus,
                    k.gpu_ids.len()
                )?;
            }
        }
        if !self.render_nodes.is_empty() {
            writeln!(out, "\nRender nodes")?;
            for r in &self.render_nodes {
                match (&r.problem, r.gpu_id, r.local_render_minor) {
                    (Some(p), _, _) => writeln!(out, "  {}: NOT restorable: {p}", r.file)?,
                    (None, Some(g), Some(minor)) => {
                        writeln!(out, "  {}: GPU {} -> renderD{minor}", r.file, hex_id(g))?;
                    }
                    _ => writeln!(out, "  {}: ok", r.file)?,
                }
            }
        }
        if !self.orphans.is_empty() {
            writeln!(out, "\nFiles whose image is missing")?;
            for o in &self.orphans {
                writeln!(out, "  {}: {}", o.file, o.message)?;
            }
        }
        let bad = self.images.iter().filter(|k| !k.restorable).count()
            + self
                .render_nodes
                .iter()
                .filter(|r| r.problem.is_some())
                .count()
            + self.orphans.len();
        let unverified = self
            .images
            .iter()
            .any(|k| k.contents.as_ref().is_some_and(|c| !c.verified));
        if self.restorable && unverified {
            writeln!(
                out,
                "\nResult: restorable here (page contents without checksums were read, not verified)"
            )
        } else if self.restorable {
            writeln!(out, "\nResult: restorable here (page contents verified)")
        } else if !self.has_images {
            writeln!(out, "\nResult: NOT restorable here: no amdgpu image files")
        } else {
            // Every file counted in `bad` is counted in the whole: orphan pages files too.
            let files = self.images.len() + self.render_nodes.len() + self.orphans.len();
            writeln!(
                out,
                "\nResult: NOT restorable here ({bad} of {} refused)",
                crate::count(files, "image file", "image files")
            )
        }
    }

    fn outcome(&self) -> Outcome {
        Outcome::from_bool(self.restorable)
    }
}
