//! `amdgpu-cr demo`: the whole product on the in-process simulator, no GPU and no root.
//!
//! A simulated node runs the model ROCm workload (VRAM and GTT buffers on every GPU filled with
//! known patterns, queues, signal events). The plugin engine checkpoints it through the same
//! hooks criu calls, as criu would (a tracer process, DUMP_EXT_FILE for `/dev/kfd` and each
//! render node), into an image directory. A second simulated node — the same GPUs under other
//! gpu ids, so the GPUs are remapped — restores it (RESTORE_EXT_FILE in a fresh process, then
//! RESUME_DEVICES_LATE from criu's side), and every byte, queue and event is verified.
//!
//! The driving code is public so the integration tests and the benchmark reuse it.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kfd_abi::{GpuId, Kfd, Platform, RenderNode};
use kfd_sim::preset::Preset;
use kfd_sim::workload::{self, Manifest, Spec, Workload};
use kfd_sim::{Machine, SimFile, SimPlatform, SimProcess};
use serde::Serialize;

use super::{CliError, HumanSize, Outcome, Report, Run};
use amdgpu_plugin::copy::Progress;
use amdgpu_plugin::criu::{Engine, Settings};
use amdgpu_plugin::hooks::{CriuHooks, HookError, Stage};

/// Why a demo step failed.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The preset is unknown or invalid.
    #[error(transparent)]
    Preset(#[from] kfd_sim::preset::PresetError),
    /// The simulated machine could not be built.
    #[error("building the simulated node: {0}")]
    Machine(String),
    /// A file or directory operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The model workload failed.
    #[error("the model workload: {0}")]
    Workload(#[from] workload::WorkloadError),
    /// A device call outside the plugin failed.
    #[error(transparent)]
    Ioctl(#[from] kfd_abi::IoctlError),
    /// The model of the upstream plugin's data path failed (`amdgpu-cr bench`).
    #[error("upstream's data path: {0}")]
    Upstream(#[from] crate::upstream::UpstreamError),
    /// A plugin hook failed, as criu would report it.
    #[error("{hook} failed: {source}")]
    Hook {
        /// The hook.
        hook: &'static str,
        /// What the plugin said.
        #[source]
        source: HookError,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> DemoError {
    let what = what.into();
    move |source| DemoError::Io { what, source }
}

fn hook(name: &'static str) -> impl FnOnce(HookError) -> DemoError {
    move |source| DemoError::Hook { hook: name, source }
}

/// A simulated node: the machine, its sysfs tree in a temporary directory, and its platform.
#[derive(Debug)]
pub struct SimNode {
    /// The preset it was built from.
    pub preset: Preset,
    /// The machine.
    pub machine: Machine,
    platform: SimPlatform,
    _topology: tempfile::TempDir,
}

impl SimNode {
    /// Builds the node of `preset` and writes its topology tree.
    pub fn new(preset: &Preset) -> Result<Self, DemoError> {
        let machine = Machine::new(preset).map_err(|e| DemoError::Machine(e.to_string()))?;
        let dir = tempfile::Builder::new()
            .prefix("amdgpu-cr-topology-")
            .tempdir()
            .map_err(io_err("creating a topology directory"))?;
        let platform = SimPlatform::new(machine.clone(), dir.path())
            .map_err(|e| DemoError::Machine(e.to_string()))?;
        Ok(Self {
            preset: preset.clone(),
            machine,
            platform,
            _topology: dir,
        })
    }

    /// The platform as seen by `process`.
    pub fn platform_of(&self, process: &SimProcess) -> SimPlatform {
        self.platform.for_process(process)
    }

    /// The topology root of the node.
    pub fn topology_root(&self) -> &Path {
        self.platform.topology_root()
    }

    /// A plugin engine over `wrap(platform of process)`, with image directory `dir`.
    pub fn engine<P: Platform, W: Fn(SimPlatform) -> P>(
        &self,
        wrap: &W,
        process: &SimProcess,
        dir: &File,
        settings: &Settings,
    ) -> Engine<P> {
        let raw = dir.as_raw_fd();
        let engine = Engine::new(wrap(self.platform_of(process)), move || Some(raw));
        engine.configure(settings.clone());
        engine
    }
}

/// A running workload process on a node.
#[derive(Debug)]
pub struct Target {
    /// The simulated process.
    pub process: SimProcess,
    /// Its workload.
    pub workload: Workload<SimFile>,
}

/// Starts the model workload with `spec` on every GPU of `node`, in a new process.
pub fn start_target(node: &SimNode, spec: &Spec) -> Result<Target, DemoError> {
    start_target_in(node, spec, None)
}

/// Starts the workload in a new process of `node` whose device cgroup allows only the render
/// nodes `minors` (`None`: every GPU), as a container given those `--device`s: its `/dev/kfd`
/// has records for those GPUs only, and the workload uses them.
pub fn start_target_in(
    node: &SimNode,
    spec: &Spec,
    minors: Option<&[u32]>,
) -> Result<Target, DemoError> {
    let process = node.machine.spawn_process();
    process.set_device_cgroup(minors);
    let platform = node.platform_of(&process);
    let kfd = platform.open_kfd()?;
    let mut gpus = Vec::new();
    for (gpu, minor) in node
        .machine
        .gpu_ids()
        .into_iter()
        .zip(node.machine.render_minors())
        .filter(|(_, m)| minors.is_none_or(|allowed| allowed.contains(m)))
    {
        let id = GpuId::new(gpu)
            .ok_or_else(|| DemoError::Machine(format!("GPU id 0 at renderD{minor}")))?;
        gpus.push((id, platform.open_render(minor)?));
    }
    let workload = Workload::start(kfd, gpus, spec)?;
    Ok(Target { process, workload })
}

/// The criu file ids of a checkpoint: `/dev/kfd` first, then one per render node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ImageIds {
    /// The checkpointed process (criu restores it under the same pid).
    pub pid: u32,
    /// Whether the process opened its render nodes before `/dev/kfd` (criu restores files in
    /// the order of their fds).
    pub renders_first: bool,
    /// The `/dev/kfd` file.
    pub kfd: u32,
    /// The render-node files, in the workload's GPU order.
    pub renders: Vec<u32>,
}

fn open_dir(dir: &Path) -> Result<File, DemoError> {
    File::open(dir).map_err(io_err(format!("opening image directory {}", dir.display())))
}

/// Checkpoints `target` into `dir` through the plugin's hooks, in criu's order, as a tracer
/// process of `node` (criu's part). Returns the file ids and the time the dump took.
pub fn checkpoint(
    node: &SimNode,
    target: &Target,
    dir: &Path,
    settings: &Settings,
) -> Result<(ImageIds, Duration), DemoError> {
    let renders: Vec<&RenderNode<SimFile>> = target.workload.renders().iter().collect();
    checkpoint_files(
        node,
        &|p| p,
        &target.process,
        target.workload.kfd(),
        &renders,
        dir,
        settings,
    )
}

/// [`checkpoint`] for any process of `node` with its `/dev/kfd` and render-node files, with the
/// engine on `wrap(platform)` (tests wrap the platform to inject faults).
pub fn checkpoint_files<P: Platform, W: Fn(SimPlatform) -> P>(
    node: &SimNode,
    wrap: &W,
    process: &SimProcess,
    kfd: &Kfd<SimFile>,
    renders: &[&RenderNode<SimFile>],
    dir: &Path,
    settings: &Settings,
) -> Result<(ImageIds, Duration), DemoError> {
    let dirf = open_dir(dir)?;
    let criu = node.machine.spawn_process();
    criu.ptrace_attach(process);
    let engine = node.engine(wrap, &criu, &dirf, settings);
    engine.init(Stage::Dump).map_err(hook("init"))?;
    let start = Instant::now();
    let mut ids = ImageIds {
        pid: process.pid(),
        renders_first: false,
        kfd: 1,
        renders: Vec::new(),
    };
    let result = (|| {
        engine
            .dump_ext_file(kfd.as_fd(), ids.kfd)
            .map_err(hook("DUMP_EXT_FILE(/dev/kfd)"))?;
        for (i, render) in renders.iter().enumerate() {
            let id = 2 + u32::try_from(i).unwrap_or(u32::MAX - 2);
            engine
                .dump_ext_file(render.as_fd(), id)
                .map_err(hook("DUMP_EXT_FILE(render node)"))?;
            ids.renders.push(id);
        }
        engine
            .dump_devices_late(process.pid())
            .or_else(|e| match e {
                HookError::NotOurs => Ok(()),
                e => Err(hook("DUMP_DEVICES_LATE")(e)),
            })
    })();
    let elapsed = start.elapsed();
    engine.fini(Stage::Dump, if result.is_ok() { 0 } else { -1 });
    criu.ptrace_detach(process);
    result.map(|()| (ids, elapsed))
}

/// The restored process: its `/dev/kfd` and render nodes as RESTORE_EXT_FILE returned them.
#[derive(Debug)]
pub struct RestoredTarget {
    /// The simulated process.
    pub process: SimProcess,
    /// Its `/dev/kfd`.
    pub kfd: Kfd<SimFile>,
    /// Its render nodes, in the workload's GPU order.
    pub renders: Vec<RenderNode<SimFile>>,
    /// The GPU mapping the plugin chose.
    pub mapping: Vec<topology::GpuMapping>,
}

impl RestoredTarget {
    /// Verifies the restored workload against its manifest.
    pub fn verify(&self, manifest: &Manifest) -> Result<workload::Report, workload::WorkloadError> {
        let renders: Vec<&RenderNode<SimFile>> = self.renders.iter().collect();
        workload::verify(&self.kfd, &renders, manifest)
    }
}

/// Restores the checkpoint in `dir` on `node` into a new process, through the plugin's hooks in
/// criu's order (RESTORE_EXT_FILE in the restored process, RESUME_DEVICES_LATE from criu).
pub fn restore(
    node: &SimNode,
    dir: &Path,
    ids: &ImageIds,
    settings: &Settings,
) -> Result<(RestoredTarget, Duration), DemoError> {
    restore_with(
        node,
        &|p| p,
        node.machine.spawn_process_as(ids.pid),
        dir,
        ids,
        settings,
    )
}

/// [`restore`] into `process`, with the engine on `wrap(platform)`.
pub fn restore_with<P: Platform, W: Fn(SimPlatform) -> P>(
    node: &SimNode,
    wrap: &W,
    process: SimProcess,
    dir: &Path,
    ids: &ImageIds,
    settings: &Settings,
) -> Result<(RestoredTarget, Duration), DemoError> {
    let dirf = open_dir(dir)?;
    let platform = node.platform_of(&process);
    let engine = node.engine(wrap, &process, &dirf, settings);
    engine.init(Stage::Restore).map_err(hook("init"))?;
    let start = Instant::now();
    let restored = (|| -> Result<RestoredTarget, DemoError> {
        let missing = |what: &str| DemoError::Hook {
            hook: "RESTORE_EXT_FILE",
            source: HookError::failed(
                kfd_abi::Errno::EAGAIN,
                format!("{what} asked to be retried"),
            ),
        };
        let restore_renders = || -> Result<Vec<RenderNode<SimFile>>, DemoError> {
            let mut renders = Vec::new();
            for &id in &ids.renders {
                let fd = engine
                    .restore_file(id)
                    .map_err(hook("RESTORE_EXT_FILE(render node)"))?
                    .ok_or_else(|| missing("a render node"))?;
                renders.push(platform.render_from_fd(fd)?);
            }
            Ok(renders)
        };
        let early = if ids.renders_first {
            Some(restore_renders()?)
        } else {
            None
        };
        let kfd_fd: OwnedFd = engine
            .restore_file(ids.kfd)
            .map_err(hook("RESTORE_EXT_FILE(/dev/kfd)"))?
            .ok_or_else(|| missing("/dev/kfd"))?;
        let kfd = platform.kfd_from_fd(kfd_fd)?;
        let renders = match early {
            Some(r) => r,
            None => restore_renders()?,
        };
        // criu's master process resumes the restored task's GPU queues.
        let criu = node.machine.spawn_process();
        let master = node.engine(wrap, &criu, &dirf, settings);
        master
            .resume_devices_late(i32::try_from(process.pid()).unwrap_or(i32::MAX))
            .map_err(hook("RESUME_DEVICES_LATE"))?;
        let mapping = engine.mappings().into_iter().flat_map(|m| m.gpus).collect();
        Ok(RestoredTarget {
            process: process.clone(),
            kfd,
            renders,
            mapping,
        })
    })();
    let elapsed = start.elapsed();
    engine.fini(Stage::Restore, if restored.is_ok() { 0 } else { -1 });
    restored.map(|r| (r, elapsed))
}

/// A variant of `preset` with other gpu ids (and render minors), so that a restore remaps.
pub fn remapped_variant(preset: &Preset) -> Preset {
    let ids: Vec<u32> = preset
        .gpus
        .iter()
        .map(|g| (g.gpu_id ^ 0x1357).max(1))
        .collect();
    let minors: Vec<u32> = (0u32..)
        .zip(&preset.gpus)
        .map(|(i, g)| g.render_minor.unwrap_or(128 + i) + 8)
        .collect();
    preset
        .clone()
        .with_gpu_ids(&ids)
        .with_render_minors(&minors)
        .with_name(&format!("{}-remapped", preset.name))
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
pub struct DemoReport {
    /// Source preset.
    pub source: String,
    /// Destination preset (other gpu ids).
    pub destination: String,
    /// The image directory.
    pub dir: String,
    /// GPU mapping, image id -> restored id.
    pub mapping: Vec<(String, String)>,
    /// Bytes of buffer contents.
    pub bytes: u64,
    /// Dump time (s).
    pub dump_seconds: f64,
    /// Restore time (s).
    pub restore_seconds: f64,
    /// Image files and sizes.
    pub files: Vec<(String, u64)>,
    /// Verification result, or what differed.
    pub verified: Result<workload::Report, String>,
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

fn corrupt_first_pages_file(dir: &Path) -> Result<(), DemoError> {
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
        .ok_or_else(|| DemoError::Machine("no pages file to corrupt".into()))?;
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
pub fn run_demo(args: &DemoArgs) -> Result<DemoReport, DemoError> {
    let source = Preset::by_name(&args.preset)?;
    let destination = remapped_variant(&source);
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
    let target = start_target(&src, &spec)?;
    let manifest = target.workload.manifest().clone();
    let bar = ProgressBar::start("dump", manifest.buffer_bytes(), &progress, bars);
    let (ids, dump_time) = checkpoint(&src, &target, &dir, &settings)?;
    drop(bar);
    drop(target);
    drop(src);

    if args.corrupt_pages {
        corrupt_first_pages_file(&dir)?;
    }

    let dst = SimNode::new(&destination)?;
    let bar = ProgressBar::start("restore", manifest.buffer_bytes(), &progress, bars);
    let (restored, restore_time) = restore(&dst, &dir, &ids, &settings)?;
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
