//! `amdgpu-cr demo`: the whole product on the in-process simulator, no GPU and no root.
//!
//! A simulated node runs the model ROCm workload (VRAM and GTT buffers on every GPU filled with
//! known patterns, queues, signal events). The plugin engine checkpoints it through the same
//! hooks criu calls, as criu would (a tracer process, DUMP_EXT_FILE for `/dev/kfd` and each
//! render node), into an image directory. A second simulated node — the same GPUs under other
//! gpu ids, so the GPUs are remapped — restores it (RESTORE_EXT_FILE in a fresh process, then
//! RESUME_DEVICES_LATE from criu's side), and every byte, queue and event is verified. The node,
//! the workload and criu's part are the `harness` crate's; this module is the command.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use amdgpu_plugin::copy::Progress;
use amdgpu_plugin::criu::Settings;
use harness::workload::Spec;
use harness::{NodeError, SimNode};
use kfd_sim::Preset;
use serde::Serialize;

use super::{CliError, HumanSize, Outcome, Report, Run};

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> NodeError {
    let what = what.into();
    move |source| NodeError::Io { what, source }
}

/// `amdgpu-cr demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// The simulated node.
    #[arg(long, default_value = "mi210x2", value_parser = preset_names())]
    pub preset: String,
    /// Keep the image files in DIR (created if needed; default: a temporary directory, removed
    /// afterwards, also when the demo is interrupted). A directory that already holds amdgpu
    /// images is refused: two checkpoints in one directory do not restore.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// With --dir: remove the amdgpu images already in DIR before the dump.
    #[arg(long, requires = "dir")]
    pub force: bool,
    /// VRAM buffers per GPU, in MiB (comma-separated; each at least 1, together at most the
    /// GPU's VRAM less 64 MiB).
    #[arg(long, value_delimiter = ',', default_value = "24,4,1", value_parser = mib)]
    pub vram_mib: Vec<u64>,
    /// GTT buffers per GPU, in MiB (comma-separated; each at least 1).
    #[arg(long, value_delimiter = ',', default_value = "2", value_parser = mib)]
    pub gtt_mib: Vec<u64>,
    /// Write images without page checksums (as the upstream plugin does).
    #[arg(long)]
    pub no_checksums: bool,
    /// Flip one byte of the first pages file between dump and restore (shows what a corrupt
    /// image does: refused with checksums, caught by verification without).
    #[arg(long, hide = true)]
    pub corrupt_pages: bool,
    /// Print one JSON document (docs/json.md) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The presets `--preset` takes, listed in `--help` and in the error for another name.
fn preset_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(
        kfd_sim::preset::BUILTIN
            .iter()
            .map(|(name, about)| clap::builder::PossibleValue::new(*name).help(*about)),
    )
}

/// A buffer size in MiB: decimal, at least 1, at most 1 TiB (the VRAM limit is the preset's,
/// checked once the preset is known).
fn mib(value: &str) -> Result<u64, String> {
    super::args::count(value, 1, 1 << 20)
}

/// The MiB a GPU's VRAM keeps free of the demo's buffers (the workload's queues, rings).
const VRAM_RESERVE_MIB: u64 = 64;

/// A GPU's buffers in the image.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct GpuEnd {
    /// Its gpu_id (JSON: a hex string).
    #[serde(serialize_with = "crate::json::hex32")]
    pub(crate) gpu_id: u32,
    /// Its render minor.
    pub(crate) render_minor: u32,
}

/// Where an image GPU went at restore.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Mapped {
    /// The GPU in the image.
    pub(crate) from: GpuEnd,
    /// The GPU it was restored onto.
    pub(crate) to: GpuEnd,
}

/// One image file the dump wrote.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ImageFile {
    /// Its name.
    pub(crate) name: String,
    /// Its size in bytes.
    pub(crate) size: u64,
}

/// A timed phase.
#[derive(Clone, Copy, Debug, Serialize)]
pub(crate) struct Phase {
    /// Seconds it took.
    pub(crate) seconds: f64,
    /// Bytes of GPU buffers it moved.
    pub(crate) bytes: u64,
}

/// How the restored workload compared with the one dumped.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub(crate) enum Verification {
    /// Every byte, queue and event matched.
    Verified {
        /// Buffers compared.
        buffers: usize,
        /// Bytes compared.
        bytes: u64,
        /// Queues that answered.
        queues: usize,
        /// Events whose state matched.
        events: usize,
        /// The workload's generation on every GPU.
        generation: u32,
    },
    /// The restore ran, and something differs.
    Mismatch {
        /// What differs.
        error: String,
    },
    /// The dump or the restore failed (a damaged image is refused).
    Failed {
        /// Which phase (`dump` or `restore`).
        phase: &'static str,
        /// Why, with its causes.
        error: String,
    },
}

/// What the demo did.
#[derive(Debug, Serialize)]
pub(crate) struct DemoReport {
    /// Source preset.
    pub(crate) source: String,
    /// Destination preset (other gpu ids).
    pub(crate) destination: String,
    /// The image directory, or `null` for a temporary one (removed).
    pub(crate) dir: Option<String>,
    /// The dump.
    pub(crate) dump: Option<Phase>,
    /// The files the dump wrote.
    pub(crate) files: Vec<ImageFile>,
    /// Files of the directory that were there before the dump (not the demo's).
    pub(crate) other_files: usize,
    /// GPU mapping at restore.
    pub(crate) mapping: Vec<Mapped>,
    /// The restore.
    pub(crate) restore: Option<Phase>,
    /// The verdict.
    pub(crate) verification: Verification,
}

fn throughput(phase: Phase) -> String {
    if phase.seconds <= 0.0 {
        return "-".into();
    }
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let per_sec = (phase.bytes as f64 / phase.seconds) as u64;
    format!("{}/s", HumanSize(per_sec))
}

impl Report for DemoReport {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "source node:      {} (simulated)", self.source)?;
        writeln!(
            out,
            "destination node: {} (simulated, other gpu ids)",
            self.destination
        )?;
        writeln!(
            out,
            "image directory:  {}",
            self.dir.as_deref().unwrap_or("(temporary)")
        )?;
        if let Some(d) = self.dump {
            writeln!(
                out,
                "dump:     {} of GPU memory in {:.3}s ({})",
                HumanSize(d.bytes),
                d.seconds,
                throughput(d)
            )?;
        }
        for f in &self.files {
            writeln!(out, "  {:<36} {}", f.name, HumanSize(f.size))?;
        }
        if self.other_files > 0 {
            writeln!(
                out,
                "  ({} not listed: in the directory before the dump)",
                super::count(self.other_files, "other file", "other files")
            )?;
        }
        if !self.mapping.is_empty() {
            writeln!(out, "GPU mapping at restore:")?;
        }
        for m in &self.mapping {
            writeln!(
                out,
                "  GPU {} (renderD{}) -> GPU {} (renderD{})",
                super::hex_id(m.from.gpu_id),
                m.from.render_minor,
                super::hex_id(m.to.gpu_id),
                m.to.render_minor
            )?;
        }
        if let Some(r) = self.restore {
            writeln!(
                out,
                "restore:  {} in {:.3}s ({})",
                HumanSize(r.bytes),
                r.seconds,
                throughput(r)
            )?;
        }
        match &self.verification {
            Verification::Verified {
                buffers,
                bytes,
                queues,
                events,
                generation,
            } => writeln!(
                out,
                "verified: {} ({}), {}, {}, generation {generation}: every byte matches",
                super::count(*buffers, "buffer", "buffers"),
                HumanSize(*bytes),
                super::count(*queues, "queue", "queues"),
                super::count(*events, "event", "events"),
            ),
            Verification::Mismatch { error } => writeln!(out, "VERIFICATION FAILED: {error}"),
            Verification::Failed { phase, error } => {
                writeln!(out, "FAILED: the {phase} failed: {error}")
            }
        }
    }

    fn outcome(&self) -> Outcome {
        Outcome::from_bool(matches!(self.verification, Verification::Verified { .. }))
    }
}

/// An error and its causes, each said once.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let cause = s.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
        source = s.source();
    }
    text
}

/// A progress bar on stderr (only when it is a terminal) fed from the engine's byte counter by a
/// small thread, while a dump or a restore runs.
struct ProgressBar {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ProgressBar {
    fn start(label: &'static str, total: u64, progress: &Progress, shown: bool) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        progress.reset();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let bar = if shown {
            indicatif::ProgressBar::new(total)
        } else {
            indicatif::ProgressBar::hidden()
        };
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{msg:8} [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec})",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(label);
        let (s, p) = (std::sync::Arc::clone(&stop), progress.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                bar.set_position(p.get());
                std::thread::sleep(Duration::from_millis(50));
            }
            bar.set_position(p.get());
            bar.finish_and_clear();
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for ProgressBar {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn corrupt_first_pages_file(dir: &Path) -> Result<(), NodeError> {
    use std::os::unix::fs::FileExt;
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io_err("listing the image directory"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("amdgpu-pages-"))
        })
        .collect();
    names.sort();
    let path = names
        .first()
        .ok_or_else(|| NodeError::Machine("no pages file to corrupt".into()))?;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io_err("opening a pages file"))?;
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, 4096)
        .map_err(io_err("reading a pages file"))?;
    b[0] ^= 0x5a;
    f.write_all_at(&b, 4096)
        .map_err(io_err("writing a pages file"))
}

/// Why the demo could not run (exit status 2): a value it cannot take, or the machine's.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// An option's value, checked against the preset.
    #[error("{0}")]
    Usage(String),
    /// Setting up the simulated nodes or the image directory failed.
    #[error(transparent)]
    Setup(#[from] NodeError),
    /// The user interrupted it: no phase starts after the signal.
    #[error(transparent)]
    Interrupted(#[from] crate::interrupt::Interrupted),
}

/// The image directory: `--dir` (created, or refused when it is not a directory), or a
/// temporary one removed when the demo ends or is interrupted.
enum ImageDir {
    Kept(PathBuf),
    Temporary(crate::interrupt::ScratchDir),
}

impl ImageDir {
    fn new(dir: Option<&Path>, force: bool) -> Result<Self, DemoError> {
        let Some(d) = dir else {
            let temp = crate::interrupt::ScratchDir::new(&std::env::temp_dir(), "amdgpu-cr-demo-")
                .map_err(|e| match e.kind() {
                    io::ErrorKind::Interrupted => {
                        DemoError::Interrupted(crate::interrupt::Interrupted)
                    }
                    _ => DemoError::Setup(io_err("creating a temporary image directory")(e)),
                })?;
            return Ok(Self::Temporary(temp));
        };
        match std::fs::metadata(d) {
            Ok(m) if !m.is_dir() => Err(DemoError::Usage(format!(
                "--dir {}: not a directory; give a directory (created if it does not exist)",
                d.display()
            ))),
            Ok(_) => {
                let images = images_in(d)?;
                if !images.is_empty() && !force {
                    return Err(DemoError::Usage(format!(
                        "--dir {}: it already holds {} of a checkpoint ({}{}); a second \
                         checkpoint in it would mix with them. Give an empty or new directory, \
                         or --force to remove them first",
                        d.display(),
                        super::count(images.len(), "amdgpu image file", "amdgpu image files"),
                        images[..images.len().min(3)].join(", "),
                        if images.len() > 3 { ", ..." } else { "" }
                    )));
                }
                for name in &images {
                    std::fs::remove_file(d.join(name))
                        .map_err(io_err(format!("--force: removing {name}")))?;
                }
                Ok(Self::Kept(d.to_owned()))
            }
            Err(_) => {
                std::fs::create_dir_all(d)
                    .map_err(io_err(format!("--dir: creating {}", d.display())))?;
                Ok(Self::Kept(d.to_owned()))
            }
        }
    }

    fn path(&self) -> &Path {
        match self {
            Self::Kept(p) => p,
            Self::Temporary(dir) => dir.path(),
        }
    }
}

/// The names of the plugin's image files in `dir` (as `inspect` finds them), sorted.
fn images_in(dir: &Path) -> Result<Vec<String>, NodeError> {
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io_err("listing the image directory"))? {
        let e = e.map_err(io_err("listing the image directory"))?;
        if let Some(name) = e
            .file_name()
            .to_str()
            .filter(|n| crate::imagedir::ImageName::parse(n).is_some())
        {
            names.push(name.to_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// The files of `dir` with their sizes and modification times.
fn listing(dir: &Path) -> Result<Vec<(String, u64, std::time::SystemTime)>, NodeError> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io_err("listing the image directory"))? {
        let e = e.map_err(io_err("listing the image directory"))?;
        let Ok(m) = e.metadata() else { continue };
        if m.is_file() {
            files.push((
                e.file_name().to_string_lossy().into_owned(),
                m.len(),
                m.modified().unwrap_or(std::time::UNIX_EPOCH),
            ));
        }
    }
    files.sort();
    Ok(files)
}

/// A spinner on stderr (only on a terminal) while a phase without a byte count runs.
fn phase_spinner(shown: bool, message: &'static str) -> indicatif::ProgressBar {
    if !shown {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_message(message);
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// Checks the buffer sizes against the preset's GPUs.
fn check_sizes(args: &DemoArgs, source: &Preset) -> Result<(), DemoError> {
    let topology = source
        .to_topology()
        .map_err(|e| DemoError::Usage(e.to_string()))?;
    let vram_mib = topology
        .gpus()
        .filter_map(|g| g.vram().map(|(_, size)| size >> 20))
        .min()
        .unwrap_or(0);
    let asked: u64 = args.vram_mib.iter().sum();
    let limit = vram_mib.saturating_sub(VRAM_RESERVE_MIB);
    if asked > limit {
        return Err(DemoError::Usage(format!(
            "--vram-mib: {asked} MiB of buffers per GPU do not fit: {} has {vram_mib} MiB of VRAM \
             per GPU, of which the demo's buffers may take at most {limit} MiB",
            source.name
        )));
    }
    Ok(())
}

/// Runs the demo and returns its report; `Err` when it could not run.
pub(crate) fn run_demo(args: &DemoArgs) -> Result<DemoReport, DemoError> {
    let source = Preset::by_name(&args.preset).map_err(NodeError::from)?;
    check_sizes(args, &source)?;
    let destination = harness::remapped_variant(&source);
    let mib = |v: &[u64]| v.iter().map(|m| m << 20).collect::<Vec<_>>();
    let spec = Spec {
        vram: mib(&args.vram_mib),
        gtt: mib(&args.gtt_mib),
        ..Spec::default()
    };
    let progress = Progress::default();
    let settings = Settings {
        checksums: !args.no_checksums,
        progress: progress.clone(),
        ..Settings::from_env(false)
    };
    let bars = !args.json;
    // A topology directory of a node is removed with the node; an interrupt removes them too.
    let _topologies = crate::interrupt::remove_prefixed_on_interrupt(
        &std::env::temp_dir(),
        &kfd_sim::scratch::owned_prefix(harness::TOPOLOGY_DIR_BASE),
    );

    crate::interrupt::check()?;
    let dir = ImageDir::new(args.dir.as_deref(), args.force)?;
    let before = listing(dir.path())?;
    let mut report = DemoReport {
        source: source.name.clone(),
        destination: destination.name.clone(),
        dir: args.dir.as_ref().map(|d| d.display().to_string()),
        dump: None,
        files: Vec::new(),
        other_files: 0,
        mapping: Vec::new(),
        restore: None,
        verification: Verification::Failed {
            phase: "dump",
            error: String::new(),
        },
    };
    let failed = |phase, e: &dyn std::error::Error| Verification::Failed {
        phase,
        error: with_causes(e),
    };

    crate::interrupt::check()?;
    let spinner = phase_spinner(bars, "setting up the source node and its workload");
    let src = SimNode::new(&source)?;
    let target = harness::start_target(&src, &spec)?;
    let manifest = target.workload.manifest().clone();
    spinner.finish_and_clear();
    let bytes = manifest.buffer_bytes();
    crate::interrupt::check()?;
    let bar = ProgressBar::start("dump", bytes, &progress, bars);
    let dumped = harness::checkpoint(&src, &target, dir.path(), &settings);
    drop(bar);
    drop(target);
    drop(src);
    // A dump the user stopped failed because of the stop: no verdict, no next phase.
    crate::interrupt::check()?;
    let ids = match dumped {
        Ok((ids, time)) => {
            report.dump = Some(Phase {
                seconds: time.as_secs_f64(),
                bytes,
            });
            ids
        }
        Err(e) => {
            report.verification = failed("dump", &e);
            return Ok(report);
        }
    };
    for (name, size, modified) in listing(dir.path())? {
        let stale = before
            .iter()
            .any(|(n, s, m)| *n == name && *s == size && *m == modified);
        if stale {
            report.other_files += 1;
        } else {
            report.files.push(ImageFile { name, size });
        }
    }

    if args.corrupt_pages {
        corrupt_first_pages_file(dir.path())?;
    }

    crate::interrupt::check()?;
    let spinner = phase_spinner(bars, "setting up the destination node");
    let dst = SimNode::new(&destination)?;
    spinner.finish_and_clear();
    crate::interrupt::check()?;
    let bar = ProgressBar::start("restore", bytes, &progress, bars);
    let restored = harness::restore(&dst, dir.path(), &ids, &settings);
    drop(bar);
    crate::interrupt::check()?;
    let (restored, restore_time) = match restored {
        Ok(r) => r,
        Err(e) => {
            report.verification = failed("restore", &e);
            return Ok(report);
        }
    };
    report.restore = Some(Phase {
        seconds: restore_time.as_secs_f64(),
        bytes,
    });
    report.mapping = restored
        .mapping
        .iter()
        .map(|m| Mapped {
            from: GpuEnd {
                gpu_id: m.source_gpu_id,
                render_minor: m.source_render_minor,
            },
            to: GpuEnd {
                gpu_id: m.destination_gpu_id,
                render_minor: m.destination_render_minor,
            },
        })
        .collect();
    crate::interrupt::check()?;
    let spinner = phase_spinner(bars, "verifying every byte, queue and event");
    report.verification = match restored.verify(&manifest) {
        Ok(r) => Verification::Verified {
            buffers: r.buffers,
            bytes: r.bytes,
            queues: r.queues,
            events: r.events,
            generation: r.generation,
        },
        Err(e) => Verification::Mismatch {
            error: e.to_string(),
        },
    };
    spinner.finish_and_clear();
    Ok(report)
}

impl Run for DemoArgs {
    fn run(&self, out: &mut dyn Write) -> Result<Outcome, CliError> {
        let report = run_demo(self)?;
        report.emit(super::Format::from_json_flag(self.json), out)
    }
}
