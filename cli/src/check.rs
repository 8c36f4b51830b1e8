//! `amdgpu-cr check DIR`: will this image restore here, onto which GPUs, and if not, why; and
//! `amdgpu-cr map --from SRC --to DEST`: the GPU mapping between two topology trees.
//!
//! `check` runs, per KFD image, the restore's own up-front checks
//! ([`amdgpu_plugin::restore::plan`]: the image decodes, its counts agree, its pages files have
//! the right lengths and checksum lists, and the GPU mapping exists) without touching a driver. When the mapping is refused it also
//! searches for the `KFD_*_CHECK` variables that, set to 0, would make it succeed.

use std::io::{self, Write};
use std::path::PathBuf;

use images::proto::CriuKfd;
use images::{ImageFile, KfdImage, PagesError, RenderNodeImage};
use serde::Serialize;
use topology::map::{unused_lines, UnusedGpu, PREFERENCE_ORDER};
use topology::options::parse_bool;
use topology::{Check, CheckOptions, MapError, Mapping, Topology};

use super::imagedir::ImageDir;
use super::table::Table;
use super::topo::{pci_location, read_topology};
use super::{hex_id, CliError, Format, Outcome, Report, Run};
use amdgpu_plugin::restore::{self, RestoreError};
use kfd_abi::platform::{HostPlatform, Platform};

/// Arguments of `amdgpu-cr check`.
#[derive(Clone, Debug, clap::Args)]
pub struct CheckArgs {
    /// The image directory (criu's -D).
    pub dir: PathBuf,
    /// Topology root to restore onto (default: this machine's, or $AMDGPU_CR_TOPOLOGY_ROOT).
    #[arg(long, value_name = "ROOT")]
    pub topology: Option<PathBuf>,
    /// Only the GPUs of these device files are candidates, as for a container given them
    /// (`podman run --device ...`): render nodes `/dev/dri/renderD<minor>`, comma-separated or
    /// repeated; `/dev/kfd` may be listed and is ignored.
    #[arg(long, value_name = "DEVICES", value_delimiter = ',')]
    pub devices: Vec<String>,
    /// Print one JSON document.
    #[arg(long)]
    pub json: bool,
}

impl Run for CheckArgs {
    fn run(&self, out: &mut dyn Write) -> Result<Outcome, CliError> {
        let root = self
            .topology
            .clone()
            .unwrap_or_else(|| HostPlatform::from_env().topology_root());
        let node = read_topology(&root)?;
        let shown_root = root.display().to_string();
        let devices = if self.devices.is_empty() {
            None
        } else {
            Some(render_minors(&self.devices, &node, &shown_root)?)
        };
        let checks = EnvChecks::from_env();
        let report = check_dir_on(
            &self.dir,
            &self.dir.display().to_string(),
            &shown_root,
            &node,
            devices.as_deref(),
            &checks,
        )?;
        report.emit(Format::from_json_flag(self.json), out)
    }
}

/// A `--devices` list that does not name GPUs of the topology.
#[derive(Debug, thiserror::Error)]
#[error("--devices: {what}")]
pub struct DeviceListError {
    /// What is wrong, and what the node has.
    pub what: String,
}

/// The render minors of a `--devices` list (`/dev/dri/renderD<minor>`, also without the
/// directory; `/dev/kfd` is skipped), each a GPU of `node`, in the order given.
///
/// # Errors
///
/// [`DeviceListError`] for anything else, or a render node that is not a GPU of `node`.
pub fn render_minors(
    devices: &[String],
    node: &Topology,
    topology_root: &str,
) -> Result<Vec<u32>, DeviceListError> {
    let known: Vec<u32> = node.gpus().map(topology::Node::render_minor).collect();
    let listing = || {
        known
            .iter()
            .map(|m| format!("renderD{m}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut minors = Vec::new();
    for d in devices.iter().map(|d| d.trim()).filter(|d| !d.is_empty()) {
        let name = d.rsplit('/').next().unwrap_or(d);
        if name == "kfd" {
            continue;
        }
        let minor: u32 = name
            .strip_prefix("renderD")
            .and_then(|m| m.parse().ok())
            .ok_or_else(|| DeviceListError {
                what: format!(
                    "{d:?} is not a render node (/dev/dri/renderD<minor>) or /dev/kfd; a \
                     container's GPUs are its render nodes"
                ),
            })?;
        if !known.contains(&minor) {
            return Err(DeviceListError {
                what: format!(
                    "{d} is not a GPU of the topology at {topology_root} (its render nodes: {})",
                    listing()
                ),
            });
        }
        if !minors.contains(&minor) {
            minors.push(minor);
        }
    }
    if minors.is_empty() {
        return Err(DeviceListError {
            what: "no render node listed: a container needs at least one GPU's".to_owned(),
        });
    }
    Ok(minors)
}

/// Arguments of `amdgpu-cr map`.
#[derive(Clone, Debug, clap::Args)]
pub struct MapArgs {
    /// Topology root of the checkpointed machine.
    #[arg(long, value_name = "SRC_ROOT")]
    pub from: PathBuf,
    /// Topology root of the machine to restore on.
    #[arg(long, value_name = "DEST_ROOT")]
    pub to: PathBuf,
    /// Print one JSON document.
    #[arg(long)]
    pub json: bool,
}

impl Run for MapArgs {
    fn run(&self, out: &mut dyn Write) -> Result<Outcome, CliError> {
        let source = read_topology(&self.from)?;
        let destination = read_topology(&self.to)?;
        MapReport::new(
            &self.from.display().to_string(),
            &source,
            &self.to.display().to_string(),
            &destination,
            &EnvChecks::from_env(),
        )
        .emit(Format::from_json_flag(self.json), out)
    }
}

/// A `KFD_*_CHECK` value that is not 0/1/NO/YES (the check stays on).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IgnoredValue {
    /// The variable.
    pub variable: &'static str,
    /// Its value.
    pub value: String,
}

/// The `KFD_*_CHECK` switches in effect and where they came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EnvChecks {
    /// The switches.
    pub options: CheckOptions,
    /// Variables of the checks that are off.
    pub off: Vec<&'static str>,
    /// Values that were ignored.
    pub ignored: Vec<IgnoredValue>,
}

impl EnvChecks {
    /// From the process environment (as the plugin reads it at restore).
    #[must_use]
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// From a lookup function (name -> value).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let ignored = Check::ALL
            .iter()
            .filter_map(|c| {
                let value = lookup(c.env_var())?;
                parse_bool(&value).is_none().then_some(IgnoredValue {
                    variable: c.env_var(),
                    value,
                })
            })
            .collect();
        Self {
            ignored,
            ..Self::from_options(CheckOptions::from_lookup(lookup))
        }
    }

    /// Switches given directly (tests, callers that already hold them).
    #[must_use]
    pub fn from_options(options: CheckOptions) -> Self {
        Self {
            options,
            off: Check::ALL
                .iter()
                .filter(|c| !options.enabled(**c))
                .map(|c| c.env_var())
                .collect(),
            ignored: Vec::new(),
        }
    }

    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        if self.off.is_empty() {
            writeln!(out, "Checks: all KFD_*_CHECK on")?;
        } else {
            writeln!(out, "Checks off: {}", self.off.join(", "))?;
        }
        for i in &self.ignored {
            writeln!(
                out,
                "Ignored: {}={:?} (not 0, 1, NO or YES; the check stays on)",
                i.variable, i.value
            )?;
        }
        Ok(())
    }
}

/// Column headings of the two sides of a mapping table.
type Sides = (&'static str, &'static str);
/// `check`: an image onto this machine.
const IMAGE_SIDES: Sides = ("image GPU", "local GPU");
/// `map`: one tree onto another.
const TREE_SIDES: Sides = ("source GPU", "dest GPU");

/// One GPU of a mapping, with where it lands (for `map`: image = source, local = destination).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MappedGpu {
    /// gpu_id in the image (the source).
    pub image_gpu_id: u32,
    /// Node id in the image.
    pub image_node: u32,
    /// Render minor in the image.
    pub image_render_minor: u32,
    /// gpu_id here (the destination).
    pub local_gpu_id: u32,
    /// Node id here.
    pub local_node: u32,
    /// Render minor here (`/dev/dri/renderD<minor>`).
    pub local_render_minor: u32,
    /// The destination's `name`.
    pub local_name: String,
    /// The destination's PCI location.
    pub local_location: String,
}

/// A source CPU node and the one it maps to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct MappedCpu {
    /// Node id in the image.
    pub image_node: u32,
    /// Node id here.
    pub local_node: u32,
}

/// A mapping as reported.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MappingSummary {
    /// Per source GPU in source order.
    pub gpus: Vec<MappedGpu>,
    /// CPU nodes.
    pub cpus: Vec<MappedCpu>,
    /// Every GPU keeps its gpu_id.
    pub identity: bool,
    /// The GPUs here that the mapping leaves out (more GPUs here than in the image), with why.
    pub unused: Vec<UnusedGpu>,
}

impl MappingSummary {
    /// `m` with the destination GPUs' names and locations from `local`.
    #[must_use]
    pub fn new(m: &Mapping, local: &Topology) -> Self {
        Self {
            gpus: m
                .gpus
                .iter()
                .map(|g| {
                    let node = local.gpu(g.destination_gpu_id);
                    MappedGpu {
                        image_gpu_id: g.source_gpu_id,
                        image_node: g.source_node_id,
                        image_render_minor: g.source_render_minor,
                        local_gpu_id: g.destination_gpu_id,
                        local_node: g.destination_node_id,
                        local_render_minor: g.destination_render_minor,
                        local_name: node.map(|n| n.name.clone()).unwrap_or_default(),
                        local_location: node.map(pci_location).unwrap_or_default(),
                    }
                })
                .collect(),
            cpus: m
                .cpus
                .iter()
                .map(|&(s, d)| MappedCpu {
                    image_node: s,
                    local_node: d,
                })
                .collect(),
            identity: m.is_identity(),
            unused: m.unused.clone(),
        }
    }

    fn render(&self, out: &mut dyn Write, indent: &str, sides: Sides) -> io::Result<()> {
        let mut t = Table::new(&[
            sides.0, "node", "renderD", "", sides.1, "node", "renderD", "name", "location",
        ]);
        for g in &self.gpus {
            t.row([
                hex_id(g.image_gpu_id),
                g.image_node.to_string(),
                g.image_render_minor.to_string(),
                "->".to_owned(),
                hex_id(g.local_gpu_id),
                g.local_node.to_string(),
                g.local_render_minor.to_string(),
                g.local_name.clone(),
                g.local_location.clone(),
            ]);
        }
        t.write(out, indent)?;
        if !self.cpus.is_empty() {
            writeln!(
                out,
                "{indent}CPU nodes: {}",
                self.cpus
                    .iter()
                    .map(|c| format!("{} -> {}", c.image_node, c.local_node))
                    .collect::<Vec<_>>()
                    .join(", ")
            )?;
        }
        if self.identity {
            writeln!(out, "{indent}(every GPU keeps its gpu_id)")?;
        } else {
            writeln!(
                out,
                "{indent}(gpu_ids change: the restored process keeps using the image's ids)"
            )?;
        }
        if !self.unused.is_empty() {
            writeln!(
                out,
                "{indent}Uses {} of the {} GPUs here; left out:",
                self.gpus.len(),
                self.gpus.len() + self.unused.len()
            )?;
            for line in unused_lines(&self.unused) {
                writeln!(out, "{indent}  {line}")?;
            }
            writeln!(
                out,
                "{indent}(among the GPUs that fit, preferred: {PREFERENCE_ORDER})"
            )?;
        }
        Ok(())
    }
}

/// `KFD_*_CHECK` variables that, set to 0, make a refused mapping succeed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Remedy {
    /// The variables to set to 0 (a smallest such set).
    pub set_to_zero: Vec<&'static str>,
    /// The mapping that would result.
    pub mapping: MappingSummary,
}

/// The answer for one source topology against a destination.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum MapOutcome {
    /// A mapping exists.
    Mapped {
        /// It.
        mapping: MappingSummary,
    },
    /// None exists under the checks in effect.
    Refused {
        /// The solver's explanation, structured.
        error: MapError,
        /// The same, as text.
        explanation: String,
        /// Checks whose switching off would allow a mapping (`None`: no setting would).
        remedy: Option<Remedy>,
    },
}

impl MapOutcome {
    /// The outcome of `result`, a [`topology::map_gpus`] of `source` onto `local` under
    /// `options`; on refusal, searches for a [`Remedy`].
    #[must_use]
    pub fn new(
        result: Result<Mapping, MapError>,
        source: &Topology,
        local: &Topology,
        options: &CheckOptions,
    ) -> Self {
        match result {
            Ok(m) => Self::Mapped {
                mapping: MappingSummary::new(&m, local),
            },
            Err(error) => Self::Refused {
                explanation: error.to_string(),
                remedy: find_remedy(&error, source, local, options),
                error,
            },
        }
    }

    /// Maps `source` onto `local` under `options`.
    #[must_use]
    pub fn compute(source: &Topology, local: &Topology, options: &CheckOptions) -> Self {
        Self::new(
            topology::map_gpus(source, local, options),
            source,
            local,
            options,
        )
    }

    /// True for [`MapOutcome::Mapped`].
    #[must_use]
    pub fn is_mapped(&self) -> bool {
        matches!(self, Self::Mapped { .. })
    }

    fn render(&self, out: &mut dyn Write, indent: &str, sides: Sides) -> io::Result<()> {
        match self {
            Self::Mapped { mapping } => mapping.render(out, indent, sides),
            Self::Refused {
                explanation,
                remedy,
                ..
            } => {
                for line in explanation.lines() {
                    writeln!(out, "{indent}{line}")?;
                }
                match remedy {
                    Some(r) => {
                        let vars: Vec<String> =
                            r.set_to_zero.iter().map(|v| format!("{v}=0")).collect();
                        writeln!(
                            out,
                            "{indent}With {} it would restore as:",
                            vars.join(" and ")
                        )?;
                        r.mapping.render(out, &format!("{indent}  "), sides)
                    }
                    None => writeln!(
                        out,
                        "{indent}No KFD_*_CHECK setting would allow it: the GPUs themselves \
                         (model, count, links) do not fit."
                    ),
                }
            }
        }
    }
}

/// A smallest set of enabled checks (one, then two, then all of them) whose switching off lets
/// `source` map onto `local`. The GPU count is never lifted by a check.
fn find_remedy(
    error: &MapError,
    source: &Topology,
    local: &Topology,
    options: &CheckOptions,
) -> Option<Remedy> {
    if matches!(error, MapError::GpuCount { .. }) {
        return None;
    }
    let enabled: Vec<Check> = Check::ALL
        .into_iter()
        .filter(|c| options.enabled(*c))
        .collect();
    let mut sets: Vec<Vec<Check>> = enabled.iter().map(|&c| vec![c]).collect();
    for (i, &a) in enabled.iter().enumerate() {
        for &b in &enabled[i + 1..] {
            sets.push(vec![a, b]);
        }
    }
    if enabled.len() > 2 {
        sets.push(enabled.clone());
    }
    sets.into_iter().find_map(|set| {
        let relaxed = set.iter().fold(*options, |o, &c| o.with(c, false));
        topology::map_gpus(source, local, &relaxed)
            .ok()
            .map(|m| Remedy {
                set_to_zero: set.iter().map(|c| c.env_var()).collect(),
                mapping: MappingSummary::new(&m, local),
            })
    })
}

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
    /// The image's GPU ids, in image order (empty when it does not decode).
    pub gpu_ids: Vec<u32>,
    /// Image problems (the first the restore would stop at).
    pub problems: Vec<ImageProblem>,
    /// The GPU mapping (when the image decodes).
    pub mapping: Option<MapOutcome>,
    /// Whether a restore would pass every up-front check.
    pub restorable: bool,
}

/// The verdict on one render-node image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RenderCheck {
    /// `amdgpu-renderD-<id>.img`.
    pub file: String,
    /// The image GPU it belongs to (when it decodes).
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
    /// Whether every image passes.
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

/// Judges KFD image `id` against `local`.
fn check_kfd(dir: &ImageDir, id: u32, local: &Topology, checks: &CheckOptions) -> KfdCheck {
    let file = KfdImage::file_name(id);
    let mut out = KfdCheck {
        file: file.clone(),
        id,
        pid: None,
        gpu_ids: Vec::new(),
        problems: Vec::new(),
        mapping: None,
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
    match restore::plan(id, dir.fd(), local, checks) {
        Ok(Some(plan)) => {
            out.mapping = Some(MapOutcome::new(Ok(plan.mapping), &source, local, checks));
            out.restorable = true;
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
    let images: Vec<KfdCheck> = d
        .kfd_ids()
        .into_iter()
        .map(|id| check_kfd(&d, id, local, &checks.options))
        .collect();
    let render_nodes: Vec<RenderCheck> = d
        .render_ids()
        .into_iter()
        .map(|id| check_render(&d, id, &images))
        .collect();
    let restorable =
        images.iter().all(|k| k.restorable) && render_nodes.iter().all(|r| r.problem.is_none());
    Ok(CheckReport {
        dir: shown.to_owned(),
        topology_root: topology_root.to_owned(),
        node_gpus: node.gpus().count(),
        devices: devices.map(<[u32]>::to_vec),
        local_gpus: local.gpus().count(),
        checks: checks.clone(),
        images,
        render_nodes,
        restorable,
    })
}

impl Report for CheckReport {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "Image directory: {}", self.dir)?;
        match &self.devices {
            None => writeln!(
                out,
                "Restoring onto: {} ({} GPUs)",
                self.topology_root, self.local_gpus
            )?,
            Some(minors) => writeln!(
                out,
                "Restoring onto: {} ({} GPUs; the devices given allow {}: {})",
                self.topology_root,
                self.node_gpus,
                self.local_gpus,
                minors
                    .iter()
                    .map(|m| format!("renderD{m}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )?,
        }
        self.checks.render(out)?;
        if self.images.is_empty() {
            writeln!(
                out,
                "\nNo amdgpu-kfd-*.img in the directory: no GPU state to restore."
            )?;
        }
        for k in &self.images {
            write!(out, "\n{}", k.file)?;
            if let Some(pid) = k.pid {
                write!(out, " (pid {pid}, {} GPUs)", k.gpu_ids.len())?;
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
            if let Some(m) = &k.mapping {
                if !k.problems.is_empty() && m.is_mapped() {
                    writeln!(out, "  the GPUs themselves would map:")?;
                }
                m.render(out, "  ", IMAGE_SIDES)?;
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
        let bad = self.images.iter().filter(|k| !k.restorable).count()
            + self
                .render_nodes
                .iter()
                .filter(|r| r.problem.is_some())
                .count();
        if self.restorable {
            writeln!(out, "\nResult: restorable here")
        } else {
            writeln!(
                out,
                "\nResult: NOT restorable here ({bad} of {} image files refused)",
                self.images.len() + self.render_nodes.len()
            )
        }
    }

    fn outcome(&self) -> Outcome {
        Outcome::from_bool(self.restorable)
    }
}

/// The report of `amdgpu-cr map`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MapReport {
    /// Source root, as given.
    pub from: String,
    /// Source GPUs.
    pub source_gpus: usize,
    /// Destination root, as given.
    pub to: String,
    /// Destination GPUs.
    pub destination_gpus: usize,
    /// The `KFD_*_CHECK` switches used.
    pub checks: EnvChecks,
    /// The mapping or why there is none.
    pub mapping: MapOutcome,
}

impl MapReport {
    /// Maps `source` (read from `from`) onto `destination` (read from `to`).
    #[must_use]
    pub fn new(
        from: &str,
        source: &Topology,
        to: &str,
        destination: &Topology,
        checks: &EnvChecks,
    ) -> Self {
        Self {
            from: from.to_owned(),
            source_gpus: source.gpus().count(),
            to: to.to_owned(),
            destination_gpus: destination.gpus().count(),
            checks: checks.clone(),
            mapping: MapOutcome::compute(source, destination, &checks.options),
        }
    }
}

impl Report for MapReport {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "From: {} ({} GPUs)", self.from, self.source_gpus)?;
        writeln!(out, "To:   {} ({} GPUs)", self.to, self.destination_gpus)?;
        self.checks.render(out)?;
        writeln!(out)?;
        self.mapping.render(out, "", TREE_SIDES)?;
        writeln!(
            out,
            "\nResult: {}",
            if self.mapping.is_mapped() {
                "mapped"
            } else {
                "no mapping"
            }
        )
    }

    fn outcome(&self) -> Outcome {
        Outcome::from_bool(self.mapping.is_mapped())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_checks_report_off_and_ignored_values() {
        let c = EnvChecks::from_lookup(|name| match name {
            "KFD_FW_VER_CHECK" => Some("0".to_owned()),
            "KFD_NUMA_CHECK" => Some("maybe".to_owned()),
            "KFD_VRAM_SIZE_CHECK" => Some("no".to_owned()),
            _ => None,
        });
        assert_eq!(c.off, ["KFD_FW_VER_CHECK", "KFD_VRAM_SIZE_CHECK"]);
        assert!(c.options.numa);
        assert_eq!(
            c.ignored,
            [IgnoredValue {
                variable: "KFD_NUMA_CHECK",
                value: "maybe".to_owned()
            }]
        );
        let mut out = Vec::new();
        c.render(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "Checks off: KFD_FW_VER_CHECK, KFD_VRAM_SIZE_CHECK\nIgnored: \
             KFD_NUMA_CHECK=\"maybe\" (not 0, 1, NO or YES; the check stays on)\n"
        );
    }
}
