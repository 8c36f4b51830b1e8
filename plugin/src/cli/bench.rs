//! `amdgpu-cr bench`: dump and restore throughput on the in-process simulator, next to the raw
//! limits of the same directory measured in the same run.
//!
//! Method. A workload of `--size` bytes over `--gpus` GPUs (buffers of `--bo-size`, at most one
//! GPU's share) is dumped and restored through the plugin's hooks exactly as `amdgpu-cr demo`
//! does. In the same directory, the same number of bytes is written with plain sequential
//! `write(2)` calls from memory (8 MiB at a time) and read back with `read(2)`. To keep the order
//! of the measurements from favouring either side, each raw measurement is taken twice, once
//! before and once after the phase it is compared with (raw write, dump, raw write; raw read,
//! restore, raw read), into and from two distinct files, and the faster of the two is the limit.
//! Every measured phase starts with nothing dirty in the page cache: after each write phase
//! (untimed) every file of the directory is `fsync`ed, so that no phase pays for the write-back
//! of another.
//!
//! Durability and cache policy are the same on both sides. Default: no `fsync` (criu does not
//! sync the plugin's files; it syncs the image directory itself when asked) and the page cache
//! kept, so both the restore and the raw read read files that are in the page cache (the
//! machine's memory permitting). With `--sync`: the dump and the raw write both end with `fsync`
//! (timed), and the page cache of every file is dropped (`posix_fadvise(DONTNEED)`, after the
//! `fsync`) before each of the three reads, so they all read from the disk.
//!
//! Memory. The simulated VRAM is shared memory (memfds), which `/proc/self/statm` counts as
//! `shared`, not anonymous. A thread samples `resident - shared` of `/proc/self/statm` (that is
//! `RssAnon` of `/proc/self/status`, cheaper to read) every millisecond during the dump and the
//! restore; the peak minus its value when the phase started is the extra anonymous memory the
//! plugin used (staging buffers included). Sampling can miss a spike shorter than a millisecond;
//! the staging buffers, which dominate, live for the whole copy.

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
    /// Not in the JSON (its shape is fixed): how the run was set up, and both raw runs.
    #[serde(skip)]
    pub detail: Detail,
}

/// What the human report adds to the JSON.
#[derive(Clone, Debug, Default)]
pub struct Detail {
    /// GPUs.
    pub gpus: usize,
    /// Buffers per GPU.
    pub bos_per_gpu: usize,
    /// Bytes per buffer.
    pub bo_size: u64,
    /// Raw write throughputs, before and after the dump.
    pub raw_writes: [f64; 2],
    /// Raw read throughputs, before and after the restore.
    pub raw_reads: [f64; 2],
    /// Whether writes were synced and caches dropped.
    pub sync: bool,
    /// The directory measured.
    pub dir: PathBuf,
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
        let d = &self.detail;
        writeln!(
            out,
            "peak extra anonymous memory: {} (staging buffers: {}); checksums: {}",
            HumanSize(self.peak_extra_anon_bytes),
            HumanSize(self.staging_bytes),
            if self.checksums { "on" } else { "off" }
        )?;
        writeln!(
            out,
            "{} GPUs x {} BOs of {}; raw write before/after the dump {} / {}, raw read \
             before/after the restore {} / {} (the faster is the limit); {}; in {}",
            d.gpus,
            d.bos_per_gpu,
            HumanSize(d.bo_size),
            rate(d.raw_writes[0]),
            rate(d.raw_writes[1]),
            rate(d.raw_reads[0]),
            rate(d.raw_reads[1]),
            if d.sync {
                "writes end with fsync, reads from disk (page cache dropped)"
            } else {
                "no fsync, reads from the page cache"
            },
            d.dir.display()
        )
    }

    fn outcome(&self) -> Outcome {
        Outcome::Success
    }
}

/// Bytes of a page (`/proc/self/statm` counts pages).
const PAGE: u64 = 4096;

/// Resident anonymous memory of this process, bytes: `resident - shared` of `/proc/self/statm`
/// (`shared` is `RssFile + RssShmem`, so the difference is `RssAnon`).
fn rss_anon() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            let mut f = s.split_whitespace().skip(1);
            let resident = f.next()?.parse::<u64>().ok()?;
            let shared = f.next()?.parse::<u64>().ok()?;
            Some(resident.saturating_sub(shared) * PAGE)
        })
        .unwrap_or(0)
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
                std::thread::sleep(Duration::from_millis(1));
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

/// Every regular file in `dir`.
fn files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_file() {
            out.push(e.path());
        }
    }
    Ok(out)
}

/// `fsync`s every file in `dir` (and the directory): the next phase starts with nothing of
/// ours dirty in the page cache.
fn settle(dir: &Path) -> io::Result<()> {
    for p in files(dir)? {
        File::open(&p)?.sync_all()?;
    }
    File::open(dir)?.sync_all()
}

/// Drops the page cache of every file in `dir` (after [`settle`], so all of it can go).
fn drop_caches(dir: &Path) -> io::Result<()> {
    for p in files(dir)? {
        drop_cache(&p)?;
    }
    Ok(())
}

const RAW_CHUNK: usize = 8 << 20;

/// Writes `bytes` to a new file `path` with sequential write(2) calls, ending with `fsync` when
/// `sync`; returns the time taken.
fn raw_write(path: &Path, bytes: u64, sync: bool) -> io::Result<Duration> {
    let buf = vec![0xa5u8; RAW_CHUNK];
    let start = Instant::now();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
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

/// Touches and frees `bytes` of anonymous memory, so that the next phase's page cache and
/// memfd pages come from memory the hypervisor has backed. On VMs that hand free guest memory
/// back to the host (virtio-balloon free page reporting, as on Firecracker), the first touch of
/// a reported page costs a host fault: on such a VM, writes into fresh pages ran up to 10 times
/// slower, so whichever phase happened to get reported pages lost. Freed pages are reported
/// after about 2 s, and unreported ones are handed out first, so each measured phase starts
/// right after this warm-up, the same for the raw runs and ours.
fn warm_up(bytes: u64) {
    let n = usize::try_from(bytes).unwrap_or(usize::MAX);
    let mut v: Vec<u8> = Vec::new();
    if v.try_reserve_exact(n).is_ok() {
        v.resize(n, 1);
        std::hint::black_box(&v);
    }
}

/// The file system's limit: the faster of two runs.
fn best(a: Duration, b: Duration) -> Duration {
    a.min(b)
}

#[allow(clippy::cast_precision_loss)]
fn per_second(bytes: u64, took: Duration) -> f64 {
    bytes as f64 / took.as_secs_f64().max(1e-9)
}

/// A node of `gpus` MI210s.
fn preset(gpus: usize) -> Result<Preset, DemoError> {
    let mut preset = Preset::by_name("mi210x2")?;
    let template = preset.gpus[0].clone();
    preset.gpus = (0..gpus)
        .map(|i| {
            let mut g = template.clone();
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            g.gpu_id = 0x7300 + i;
            g.pci.bus = u8::try_from(0x10 + i).unwrap_or(0xff);
            g.render_minor = Some(128 + i);
            g
        })
        .collect();
    preset.name = format!("mi210x{gpus}");
    Ok(preset)
}

/// Runs the benchmark.
pub fn run_bench(args: &BenchArgs) -> Result<BenchReport, DemoError> {
    let io_err = |what: &'static str| {
        move |source| DemoError::Io {
            what: what.into(),
            source,
        }
    };
    let gpus = args.gpus.max(1);
    let preset = preset(gpus)?;
    let per_gpu = args.size / gpus as u64;
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

    let mut builder = tempfile::Builder::new();
    builder.prefix("amdgpu-cr-bench-");
    let temp = match &args.dir {
        Some(d) => builder.tempdir_in(d),
        None => builder.tempdir(),
    }
    .map_err(io_err("creating a directory for the bench"))?;
    let dir = temp.path().to_owned();
    let (raw1, raw2) = (dir.join("raw-limit-1.bin"), dir.join("raw-limit-2.bin"));

    let src = SimNode::new(&preset)?;
    let target = demo::start_target(&src, &spec)?;
    let manifest = target.workload.manifest().clone();
    let bytes = manifest.pattern_bytes();
    settle(&dir).map_err(io_err("syncing the bench directory"))?;

    // Write: raw, dump, raw; each from a clean page cache.
    let warm = bytes + bytes / 4 + settings.staging.bytes() as u64 * gpus as u64;
    warm_up(warm);
    let raw_w1 = raw_write(&raw1, bytes, args.sync).map_err(io_err("measuring the raw write"))?;
    settle(&dir).map_err(io_err("syncing the bench directory"))?;
    warm_up(warm);
    let before = rss_anon();
    let sampler = AnonSampler::start();
    let (ids, mut dump_time) = demo::checkpoint(&src, &target, &dir, &settings)?;
    if args.sync {
        let start = Instant::now();
        settle(&dir).map_err(io_err("syncing the image files"))?;
        dump_time += start.elapsed();
    }
    let dump_peak = sampler.finish().saturating_sub(before);
    settle(&dir).map_err(io_err("syncing the bench directory"))?;
    warm_up(warm);
    let raw_w2 = raw_write(&raw2, bytes, args.sync).map_err(io_err("measuring the raw write"))?;
    settle(&dir).map_err(io_err("syncing the bench directory"))?;
    drop(target);
    drop(src);

    // Read: raw, restore, raw; from the disk with --sync, else from the page cache.
    let cold = |what| -> Result<(), DemoError> {
        if args.sync {
            drop_caches(&dir).map_err(io_err(what))?;
        }
        Ok(())
    };
    cold("dropping the page cache")?;
    warm_up(warm);
    let raw_r1 = raw_read(&raw1).map_err(io_err("measuring the raw read"))?;
    let dst = SimNode::new(&preset)?;
    cold("dropping the page cache")?;
    warm_up(warm);
    let before = rss_anon();
    let sampler = AnonSampler::start();
    let (restored, restore_time) = demo::restore(&dst, &dir, &ids, &settings)?;
    let restore_peak = sampler.finish().saturating_sub(before);
    cold("dropping the page cache")?;
    warm_up(warm);
    let raw_r2 = raw_read(&raw2).map_err(io_err("measuring the raw read"))?;
    restored.verify(&manifest)?;
    drop(restored);
    drop(dst);
    drop(temp);

    let staging = settings.staging.bytes() as u64 * gpus as u64;
    Ok(BenchReport {
        dump: Phase::new(bytes, dump_time, best(raw_w1, raw_w2)),
        restore: Phase::new(bytes, restore_time, best(raw_r1, raw_r2)),
        peak_extra_anon_bytes: dump_peak.max(restore_peak),
        staging_bytes: staging,
        checksums: settings.checksums,
        detail: Detail {
            gpus,
            bos_per_gpu: count,
            bo_size: bo,
            raw_writes: [per_second(bytes, raw_w1), per_second(bytes, raw_w2)],
            raw_reads: [per_second(bytes, raw_r1), per_second(bytes, raw_r2)],
            sync: args.sync,
            dir: args.dir.clone().unwrap_or_else(std::env::temp_dir),
        },
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_bench_runs_and_keeps_memory_bounded() {
        let args = BenchArgs {
            size: 16 << 20,
            gpus: 2,
            bo_size: 4 << 20,
            dir: None,
            sync: false,
            no_checksums: false,
            json: true,
        };
        let report = run_bench(&args).unwrap();
        assert_eq!(report.dump.bytes, 16 << 20);
        assert_eq!(report.restore.bytes, 16 << 20);
        assert!(report.checksums);
        // The memory bound of the issue: 64 MiB plus the staging buffers.
        assert!(report.peak_extra_anon_bytes <= (64 << 20) + report.staging_bytes);
        let json = serde_json::to_value(&report).unwrap();
        let mut keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "checksums",
                "dump",
                "peak_extra_anon_bytes",
                "restore",
                "staging_bytes"
            ]
        );
        let mut phase: Vec<&str> = json["dump"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        phase.sort_unstable();
        assert_eq!(
            phase,
            ["bytes", "ratio", "raw_throughput", "seconds", "throughput"]
        );
    }
}
