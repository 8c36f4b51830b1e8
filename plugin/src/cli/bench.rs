//! `amdgpu-cr bench`: dump and restore throughput on the in-process simulator, next to the raw
//! limits of the same directory measured in the same run.
//!
//! Method. A workload of `--size` bytes over `--gpus` GPUs (buffers of `--bo-size`) is dumped
//! and restored through the plugin's hooks exactly as `amdgpu-cr demo` does. In the same
//! directory, the same number of bytes is then written with plain sequential `write(2)` calls
//! from memory (8 MiB at a time) and read back. Both sides use the same durability and cache
//! policy: no `fsync` and the page cache kept (the dump does not fsync; criu syncs the image
//! directory itself if asked); with `--sync` both the dump and the raw write end with `fsync`
//! and the page cache of the files is dropped (`posix_fadvise(DONTNEED)`) before both reads.
//!
//! Memory. The simulated VRAM is shared memory (memfds), so it does not count as anonymous
//! memory; the peak of `RssAnon` in `/proc/self/status`, sampled every 2 ms during the dump and
//! the restore, minus its value before, is the extra anonymous memory the plugin used
//! (staging buffers included).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kfd_sim::preset::Preset;
use kfd_sim::workload::Spec;
use serde::Serialize;

use super::demo::{self, DemoError, SimNode};
use super::{CliError, HumanSize, Outcome, Report, Run};
use crate::criu::Settings;

/// `amdgpu-cr bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Total bytes of GPU buffers (suffixes K, M, G).
    #[arg(long, default_value = "2G", value_parser = parse_size)]
    pub size: u64,
    /// Number of GPUs (a node of MI210s).
    #[arg(long, default_value_t = 2)]
    pub gpus: usize,
    /// Size of each buffer (suffixes K, M, G).
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    pub bo_size: u64,
    /// Directory for the images and the raw files (its file system is what is measured).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// End writes with fsync and drop the page cache before reads (both sides).
    #[arg(long)]
    pub sync: bool,
    /// Write no page checksums.
    #[arg(long)]
    pub no_checksums: bool,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

fn parse_size(s: &str) -> Result<u64, String> {
    topology::options::parse_max_buffer_size(s).map_err(|e| e.to_string())
}

/// One direction's numbers.
#[derive(Clone, Debug, Serialize)]
pub struct Phase {
    /// Bytes moved.
    pub bytes: u64,
    /// Seconds taken.
    pub seconds: f64,
    /// Bytes per second.
    pub throughput: f64,
    /// The raw limit, bytes per second.
    pub raw_throughput: f64,
    /// `throughput / raw_throughput`.
    pub ratio: f64,
}

impl Phase {
    fn new(bytes: u64, took: Duration, raw: Duration) -> Self {
        #[allow(clippy::cast_precision_loss)]
        let b = bytes as f64;
        let (t, r) = (took.as_secs_f64().max(1e-9), raw.as_secs_f64().max(1e-9));
        Self {
            bytes,
            seconds: t,
            throughput: b / t,
            raw_throughput: b / r,
            ratio: r / t,
        }
    }
}

/// What the bench measured.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    /// Dump against raw sequential write.
    pub dump: Phase,
    /// Restore against raw sequential read.
    pub restore: Phase,
    /// Peak anonymous memory beyond the simulated VRAM, during dump and restore.
    pub peak_extra_anon_bytes: u64,
    /// Staging memory per GPU times GPUs.
    pub staging_bytes: u64,
    /// Whether page checksums were written and verified.
    pub checksums: bool,
}

fn rate(bytes_per_s: f64) -> String {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let b = bytes_per_s as u64;
    format!("{}/s", HumanSize(b))
}

impl Report for BenchReport {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(
            out,
            "{:<8} {:>10} {:>9} {:>13} {:>13} {:>6}",
            "", "bytes", "seconds", "throughput", "raw limit", "ratio"
        )?;
        for (name, p) in [("dump", &self.dump), ("restore", &self.restore)] {
            writeln!(
                out,
                "{name:<8} {:>10} {:>9.3} {:>13} {:>13} {:>6.2}",
                HumanSize(p.bytes).to_string(),
                p.seconds,
                rate(p.throughput),
                rate(p.raw_throughput),
                p.ratio
            )?;
        }
        writeln!(
            out,
            "peak extra anonymous memory: {} (staging buffers: {}); checksums: {}",
            HumanSize(self.peak_extra_anon_bytes),
            HumanSize(self.staging_bytes),
            if self.checksums { "on" } else { "off" }
        )
    }

    fn outcome(&self) -> Outcome {
        Outcome::Success
    }
}

/// `RssAnon` of this process, bytes.
fn rss_anon() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("RssAnon:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// Samples `RssAnon` until dropped; `peak()` is the highest value seen.
struct AnonSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl AnonSampler {
    fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(rss_anon()));
        let (s, p) = (Arc::clone(&stop), Arc::clone(&peak));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(rss_anon(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        Self {
            stop,
            peak,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.peak.load(Ordering::Relaxed).max(rss_anon())
    }
}

fn drop_cache(path: &Path) -> io::Result<()> {
    images::dir::drop_page_cache(&File::open(path)?)
}

const RAW_CHUNK: usize = 8 << 20;

/// Writes `bytes` to `path` with sequential write(2) calls; returns the time taken.
fn raw_write(path: &Path, bytes: u64, sync: bool) -> io::Result<Duration> {
    let buf = vec![0xa5u8; RAW_CHUNK];
    let start = Instant::now();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    let mut left = bytes;
    while left > 0 {
        let n = usize::try_from(left.min(RAW_CHUNK as u64)).unwrap_or(RAW_CHUNK);
        f.write_all(&buf[..n])?;
        left -= n as u64;
    }
    if sync {
        f.sync_all()?;
    }
    Ok(start.elapsed())
}

/// Reads `path` to the end with sequential read(2) calls; returns the time taken.
fn raw_read(path: &Path) -> io::Result<Duration> {
    let mut buf = vec![0u8; RAW_CHUNK];
    let start = Instant::now();
    let mut f = File::open(path)?;
    while f.read(&mut buf)? > 0 {}
    Ok(start.elapsed())
}

fn pages_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("amdgpu-pages-"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Runs the benchmark.
pub fn run_bench(args: &BenchArgs) -> Result<BenchReport, DemoError> {
    let io_err = |what: &'static str| {
        move |source| DemoError::Io {
            what: what.into(),
            source,
        }
    };
    let mut preset = Preset::by_name("mi210x2")?;
    let template = preset.gpus[0].clone();
    preset.gpus = (0..args.gpus.max(1))
        .map(|i| {
            let mut g = template.clone();
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            g.gpu_id = 0x7300 + i;
            g.pci.bus = u8::try_from(0x10 + i).unwrap_or(0xff);
            g.render_minor = Some(128 + i);
            g
        })
        .collect();
    preset.name = format!("mi210x{}", args.gpus);
    let per_gpu = args.size / args.gpus.max(1) as u64;
    let bo = args.bo_size.clamp(4096, per_gpu.max(4096));
    let count = usize::try_from(per_gpu / bo).unwrap_or(0).max(1);
    let spec = Spec {
        seed: 1,
        vram: vec![bo; count],
        gtt: Vec::new(),
        queues: 1,
        events: 2,
    };
    let settings = Settings {
        checksums: !args.no_checksums,
        ..Settings::from_env(false)
    };

    let temp;
    let dir = match &args.dir {
        Some(d) => {
            let t = tempfile::Builder::new()
                .prefix("amdgpu-cr-bench-")
                .tempdir_in(d)
                .map_err(io_err("creating a directory for the bench"))?;
            temp = t;
            temp.path().to_owned()
        }
        None => {
            temp = tempfile::Builder::new()
                .prefix("amdgpu-cr-bench-")
                .tempdir()
                .map_err(io_err("creating a temporary directory"))?;
            temp.path().to_owned()
        }
    };

    let src = SimNode::new(&preset)?;
    let target = demo::start_target(&src, &spec)?;
    let manifest = target.workload.manifest().clone();
    let bytes = manifest.pattern_bytes();

    let before = rss_anon();
    let sampler = AnonSampler::start();
    let (ids, dump_time) = demo::checkpoint(&src, &target, &dir, &settings)?;
    let dump_peak = sampler.finish();
    let mut dump_time = dump_time;
    if args.sync {
        let start = Instant::now();
        for p in pages_files(&dir) {
            File::open(&p)
                .and_then(|f| f.sync_all())
                .map_err(io_err("syncing the pages files"))?;
        }
        dump_time += start.elapsed();
    }
    drop(target);
    drop(src);
    if args.sync {
        for p in pages_files(&dir) {
            drop_cache(&p).map_err(io_err("dropping the page cache"))?;
        }
    }

    let dst = SimNode::new(&preset)?;
    let before_restore = rss_anon();
    let sampler = AnonSampler::start();
    let (restored, restore_time) = demo::restore(&dst, &dir, &ids, &settings)?;
    let restore_peak = sampler.finish();
    restored.verify(&manifest)?;
    drop(restored);
    drop(dst);

    let raw = dir.join("raw-limit.bin");
    let raw_w = raw_write(&raw, bytes, args.sync).map_err(io_err("measuring the raw write"))?;
    if args.sync {
        drop_cache(&raw).map_err(io_err("dropping the page cache"))?;
    }
    let raw_r = raw_read(&raw).map_err(io_err("measuring the raw read"))?;
    let _ = std::fs::remove_file(&raw);

    let staging = settings.staging.bytes() as u64 * args.gpus as u64;
    Ok(BenchReport {
        dump: Phase::new(bytes, dump_time, raw_w),
        restore: Phase::new(bytes, restore_time, raw_r),
        peak_extra_anon_bytes: dump_peak
            .saturating_sub(before)
            .max(restore_peak.saturating_sub(before_restore)),
        staging_bytes: staging,
        checksums: settings.checksums,
    })
}

impl Run for BenchArgs {
    fn run(&self, out: &mut dyn Write) -> Result<Outcome, CliError> {
        match run_bench(self) {
            Ok(report) => report.emit(super::Format::from_json_flag(self.json), out),
            Err(e) => {
                writeln!(out, "bench failed: {e}")?;
                Ok(Outcome::Negative)
            }
        }
    }
}
