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
use harness::workload::{self, Spec};
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
    /// The simulated node (`kfd-simd presets` lists them).
    #[arg(long, default_value = "mi210x2")]
    pub preset: String,
    /// Keep the image files in DIR (default: a temporary directory, removed afterwards).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// VRAM buffers per GPU, in MiB (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "24,4,1")]
    pub vram_mib: Vec<u64>,
    /// GTT buffers per GPU, in MiB (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "2")]
    pub gtt_mib: Vec<u64>,
    /// Write images without page checksums (as the upstream plugin does).
    #[arg(long)]
    pub no_checksums: bool,
    /// Flip one byte of the first pages file between dump and restore (shows what a corrupt
    /// image does: refused with checksums, caught by verification without).
    #[arg(long, hide = true)]
    pub corrupt_pages: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What the demo did.
#[derive(Debug, Serialize)]
pub(crate) struct DemoReport {
    /// Source preset.
    pub(crate) source: String,
    /// Destination preset (other gpu ids).
    pub(crate) destination: String,
    /// The image directory.
    pub(crate) dir: String,
    /// GPU mapping, image id -> restored id.
    pub(crate) mapping: Vec<(String, String)>,
    /// Bytes of buffer contents.
    pub(crate) bytes: u64,
    /// Dump time (s).
    pub(crate) dump_seconds: f64,
    /// Restore time (s).
    pub(crate) restore_seconds: f64,
    /// Image files and sizes.
    pub(crate) files: Vec<(String, u64)>,
    /// Verification result, or what differed.
    pub(crate) verified: Result<workload::Report, String>,
}

fn throughput(bytes: u64, secs: f64) -> String {
    if secs <= 0.0 {
        return "-".into();
    }
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let per_sec = (bytes as f64 / secs) as u64;
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
        writeln!(out, "image directory:  {}", self.dir)?;
        writeln!(
            out,
            "dump:     {} of GPU memory in {:.3}s ({})",
            HumanSize(self.bytes),
            self.dump_seconds,
            throughput(self.bytes, self.dump_seconds)
        )?;
        for (name, size) in &self.files {
            writeln!(out, "  {name:<36} {}", HumanSize(*size))?;
        }
        writeln!(out, "GPU mapping at restore:")?;
        for (from, to) in &self.mapping {
            writeln!(out, "  {from} -> {to}")?;
        }
        writeln!(
            out,
            "restore:  {} in {:.3}s ({})",
            HumanSize(self.bytes),
            self.restore_seconds,
            throughput(self.bytes, self.restore_seconds)
        )?;
        match &self.verified {
            Ok(r) => writeln!(
                out,
                "verified: {} buffers ({}), {} queues, {} events, generation {}: every byte matches",
                r.buffers,
                HumanSize(r.bytes),
                r.queues,
                r.events,
                r.generation
            ),
            Err(what) => writeln!(out, "VERIFICATION FAILED: {what}"),
        }
    }

    fn outcome(&self) -> Outcome {
        Outcome::from_bool(self.verified.is_ok())
    }
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

/// Runs the demo and returns its report (`Err` for failures before verification).
pub(crate) fn run_demo(args: &DemoArgs) -> Result<DemoReport, NodeError> {
    let source = Preset::by_name(&args.preset)?;
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

    let temp;
    let dir = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(io_err(format!("creating {}", d.display())))?;
            d.clone()
        }
        None => {
            temp = tempfile::Builder::new()
                .prefix("amdgpu-cr-demo-")
                .tempdir()
                .map_err(io_err("creating a temporary image directory"))?;
            temp.path().to_owned()
        }
    };

    let src = SimNode::new(&source)?;
    let target = harness::start_target(&src, &spec)?;
    let manifest = target.workload.manifest().clone();
    let bar = ProgressBar::start("dump", manifest.buffer_bytes(), &progress, bars);
    let (ids, dump_time) = harness::checkpoint(&src, &target, &dir, &settings)?;
    drop(bar);
    drop(target);
    drop(src);

    if args.corrupt_pages {
        corrupt_first_pages_file(&dir)?;
    }

    let dst = SimNode::new(&destination)?;
    let bar = ProgressBar::start("restore", manifest.buffer_bytes(), &progress, bars);
    let (restored, restore_time) = harness::restore(&dst, &dir, &ids, &settings)?;
    drop(bar);
    let verified = restored.verify(&manifest).map_err(|e| e.to_string());

    let mut files: Vec<(String, u64)> = std::fs::read_dir(&dir)
        .map_err(io_err("listing the image directory"))?
        .filter_map(|e| {
            let e = e.ok()?;
            Some((
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().ok()?.len(),
            ))
        })
        .collect();
    files.sort();
    let mapping = restored
        .mapping
        .iter()
        .map(|m| {
            (
                format!(
                    "GPU {:#06x} (renderD{})",
                    m.source_gpu_id, m.source_render_minor
                ),
                format!(
                    "GPU {:#06x} (renderD{})",
                    m.destination_gpu_id, m.destination_render_minor
                ),
            )
        })
        .collect();
    Ok(DemoReport {
        source: source.name.clone(),
        destination: destination.name.clone(),
        dir: if args.dir.is_some() {
            dir.display().to_string()
        } else {
            "(temporary)".into()
        },
        mapping,
        bytes: manifest.pattern_bytes(),
        dump_seconds: dump_time.as_secs_f64(),
        restore_seconds: restore_time.as_secs_f64(),
        files,
        verified,
    })
}

impl Run for DemoArgs {
    fn run(&self, out: &mut dyn Write) -> Result<Outcome, CliError> {
        match run_demo(self) {
            Ok(report) => report.emit(super::Format::from_json_flag(self.json), out),
            Err(e) => {
                let mut told = e.to_string();
                writeln!(out, "demo failed: {told}")?;
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    let text = s.to_string();
                    if !told.contains(&text) {
                        writeln!(out, "  caused by: {text}")?;
                        told = text;
                    }
                    source = s.source();
                }
                Ok(Outcome::Negative)
            }
        }
    }
}
