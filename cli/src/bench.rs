//! `amdgpu-cr bench`: dump and restore throughput on the in-process simulator, next to the raw
//! limits of the same directory and to the upstream plugin's data path, measured in the same run.
//!
//! Method. A workload of `--size` bytes over `--gpus` GPUs (buffers of `--bo-size`, at most one
//! GPU's share; with `--zero-fraction F` the last F of every buffer is never written, so it is
//! zero) is dumped and restored through the plugin's hooks exactly as `amdgpu-cr demo` does. In
//! the same directory, the same number of bytes is written with plain sequential `write(2)` calls
//! from memory and read back with `read(2)`, in the same shape as the plugin's I/O: one file per
//! GPU, each written (read) by its own thread, concurrently, in calls of the pages writer's size
//! ([`images::pages::IO_SLICE`], 256 KiB), from a buffer written before the clock starts. To keep
//! the order of the measurements from favouring either side, each raw measurement is taken
//! twice, once before and once after the phase it is compared with (raw write, dump, raw write;
//! raw read, restore, raw read), and the faster of the two is the limit. The first raw write's
//! files are deleted once it is measured, and both raw reads read the second raw write's files:
//! the disk holds two sets of files at most (the image and the raw files; then upstream's).
//!
//! Upstream's strategy ([`crate::upstream`]) then dumps the same process (kept running for it)
//! and restores it onto a third node of the same GPUs, once the raw files and our pages files
//! are deleted, under the same memory and cache policy; its time, throughput and peak extra
//! memory are reported beside ours, and our speedup over it (its seconds over ours).
//! It is skipped (`upstream: null` in the JSON) with `--no-upstream`, or when its host buffers
//! (each GPU's largest buffer) would take more than half of the memory available then
//! (`MemAvailable`): with one 8 GiB buffer it needs 8 GiB of anonymous memory, the failure
//! criu issue 1927 reports.
//!
//! CPU. The simulated SDMA engine runs inside the plugin's threads (command submission executes
//! synchronously), so the CPU time of the process mixes the plugin's work with the work a GPU
//! does on hardware. The simulator sums its engines' CPU time (a per-thread CPU clock around
//! every submission, [`kfd_sim::Machine::engine_cpu_time`]); the plugin's own CPU time is the
//! process's (`getrusage`, ended threads included) minus the engine's and minus the memory
//! sampler's own (its thread CPU clock). The raw write's and read's CPU time is the process's
//! during them. The report gives each per GiB of payload.
//!
//! Zeros. `dump.bytes_on_disk` is what the file system holds for the checkpoint's files
//! (`st_blocks`, after they are synced): the pages files keep holes for zero chunks.
//!
//! Why the shape matters (the raw write used to be one file written in 8 MiB calls, and ran at
//! 0.3-1 GiB/s, below `dd`, while the dump wrote the same bytes at 2.4 GiB/s): the size of a
//! buffered write decides the size of the page-cache folios the kernel allocates for it (ext4
//! allocates large folios, up to 2 MiB for writes of 2 MiB and more). On a VM with free page
//! reporting (Firecracker's balloon), free blocks of 2 MiB and more are handed back to the host,
//! and the first write into them costs a host fault per page: writes of 2 MiB or more into the
//! page cache ran at 0.3-1.5 GiB/s (87% of the time in the kernel's copy into the new folios),
//! 256 KiB writes at 4-5 GiB/s, and the plugin writes 256 KiB at a time. A single writer also
//! used one core where the dump uses both: two 256 KiB writers reach 6.5-7.5 GiB/s into the
//! page cache where one reaches 4-5.
//!
//! Memory state, the same for every phase. Every measured phase starts with nothing dirty in
//! the page cache: after each write phase (untimed) every file of the directory is `fsync`ed, so
//! that no phase pays for the write-back of another. And every phase that allocates memory
//! (a write phase allocates 2 GiB of page cache, the restore 2 GiB of simulated VRAM) starts
//! right after the previous phase's files left the page cache (`posix_fadvise(DONTNEED)`): on a
//! VM with free page reporting, only memory the guest freed moments ago is still backed by the
//! host, and the first touch of any other free page costs a host fault (about 10 us a page, seen
//! as system time of whoever touches it). Without this the phases drew from a shrinking pool of
//! backed memory: on the bench VM, 2 GiB writes into the page cache ran at 4-8 GiB/s while the
//! pool lasted (about 4 GiB) and at 0.2-0.6 GiB/s after, so the raw write after the dump was
//! 3-8 times slower than the one before; touching and freeing anonymous memory before each
//! phase (what the bench did before) did not help. With it, five 2 GiB writes in a row all run
//! at 7.5-8 GiB/s. The first raw write follows an untimed write of the same size (dropped the
//! same way). Then, for reads from the page cache, each read phase's files are read into it
//! (untimed) just before the phase.
//!
//! Durability and cache policy are the same on both sides. Default: no `fsync` (criu does not
//! sync the plugin's files; it syncs the image directory itself when asked) and the page cache
//! kept, so both the restore and the raw read read files that are in the page cache (the
//! machine's memory permitting). With `--sync`: the dump and the raw write both end with `fsync`
//! (timed), both hand their data to the disk as they write (the plugin's write-behind,
//! `AMDGPU_CR_WRITE_BEHIND`, and the same `sync_file_range` cadence on the raw side), and the page
//! cache of every file is dropped (`posix_fadvise(DONTNEED)`, after the `fsync`) before each of
//! the three reads, so they all read from the disk.
//!
//! Memory. The simulated VRAM is shared memory (memfds), which `/proc/self/statm` counts as
//! `shared`, not anonymous. A thread samples `resident - shared` of `/proc/self/statm` (that is
//! `RssAnon` of `/proc/self/status`, cheaper to read) every millisecond during each dump and
//! restore (ours and upstream's); the peak minus its value when the phase started is the extra
//! anonymous memory the phase used (staging or host buffers included). Sampling can miss a spike
//! shorter than a millisecond; the buffers, which dominate, live for the whole copy.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::workload::{Spec, WorkloadError};
use harness::{NodeError, SimNode};
use kfd_sim::{Machine, Preset, PresetError};
use serde::Serialize;

use super::upstream::{self, UpstreamError};
use super::{CliError, HumanSize, Outcome, Report, Run};
use amdgpu_plugin::criu::Settings;

/// Why the bench failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The preset of the bench's node is invalid.
    #[error(transparent)]
    Preset(#[from] PresetError),
    /// Building a node, running the workload, or the plugin's checkpoint or restore failed.
    #[error(transparent)]
    Node(#[from] NodeError),
    /// The model of the upstream plugin's data path failed.
    #[error("upstream's data path: {0}")]
    Upstream(#[from] UpstreamError),
    /// A restored workload did not verify.
    #[error("the model workload: {0}")]
    Workload(#[from] WorkloadError),
    /// A file or directory operation of the bench failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

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
    /// Fraction (0 to 1) at the end of every buffer that the workload never writes (zero), like
    /// a caching allocator's reserved but untouched pool.
    #[arg(long, default_value_t = 0.0, value_parser = parse_fraction)]
    pub zero_fraction: f64,
    /// Do not run the upstream plugin's data path as a baseline.
    #[arg(long)]
    pub no_upstream: bool,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

fn parse_size(s: &str) -> Result<u64, String> {
    topology::options::parse_max_buffer_size(s).map_err(|e| e.to_string())
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("{s:?} is not a fraction from 0 to 1")),
    }
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
    /// Dump only: bytes the file system holds for the checkpoint's files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_on_disk: Option<u64>,
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
            bytes_on_disk: None,
        }
    }
}

/// One direction of upstream's data path.
#[derive(Clone, Debug, Serialize)]
pub struct UpstreamPhase {
    /// Seconds taken.
    pub seconds: f64,
    /// Bytes per second.
    pub throughput: f64,
    /// Peak anonymous memory beyond the simulated VRAM during the phase.
    pub peak_extra_anon_bytes: u64,
}

impl UpstreamPhase {
    fn new(bytes: u64, took: Duration, peak: u64) -> Self {
        Self {
            seconds: took.as_secs_f64(),
            throughput: per_second(bytes, took),
            peak_extra_anon_bytes: peak,
        }
    }
}

/// Upstream's strategy on the same work.
#[derive(Clone, Debug, Serialize)]
pub struct Upstream {
    /// Its dump.
    pub dump: UpstreamPhase,
    /// Its restore.
    pub restore: UpstreamPhase,
}

/// Ours over upstream's: its seconds over ours (above 1 is faster).
#[derive(Clone, Debug, Serialize)]
pub struct Speedup {
    /// Dump.
    pub dump: f64,
    /// Restore.
    pub restore: f64,
}

/// CPU seconds of one direction.
#[derive(Clone, Debug, Serialize)]
pub struct CpuPhase {
    /// The simulated SDMA engines' (what the GPU does on hardware).
    pub engine_seconds: f64,
    /// The plugin's own: the process's, minus the engines' and the memory sampler's.
    pub plugin_seconds: f64,
    /// The raw write's (dump) or read's (restore), the run that used less.
    pub raw_seconds: f64,
}

/// CPU seconds per direction.
#[derive(Clone, Debug, Serialize)]
pub struct Cpu {
    /// Dump against raw write.
    pub dump: CpuPhase,
    /// Restore against raw read.
    pub restore: CpuPhase,
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
    /// Upstream's data path on the same work (`None`: skipped, [`Detail::upstream_skipped`]
    /// says why).
    pub upstream: Option<Upstream>,
    /// Ours over upstream's.
    pub speedup: Option<Speedup>,
    /// CPU seconds: the simulated engines', the plugin's own, the raw I/O's.
    pub cpu: Cpu,
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
    /// CPU seconds (user + system, all threads) the process used during the dump.
    pub cpu_dump: f64,
    /// CPU seconds of the raw write that used fewer.
    pub cpu_raw_write: f64,
    /// CPU seconds during the restore.
    pub cpu_restore: f64,
    /// CPU seconds of the raw read that used fewer.
    pub cpu_raw_read: f64,
    /// Whether writes were synced and caches dropped.
    pub sync: bool,
    /// The directory measured.
    pub dir: PathBuf,
    /// The fraction of every buffer left zero.
    pub zero_fraction: f64,
    /// Peak extra anonymous memory of our dump and of our restore.
    pub peaks: [u64; 2],
    /// Why upstream's data path did not run.
    pub upstream_skipped: Option<String>,
    /// Its host buffers, all GPUs together.
    pub upstream_buffers: u64,
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
        match (&self.upstream, &self.speedup) {
            (Some(u), Some(x)) => {
                writeln!(
                    out,
                    "upstream's data path (one thread per GPU, host buffers of the largest \
                     buffer: {} in all, no overlap):",
                    HumanSize(d.upstream_buffers)
                )?;
                writeln!(
                    out,
                    "{:<8} {:>9} {:>13} {:>16} {:>9}",
                    "", "seconds", "throughput", "peak extra anon", "speedup"
                )?;
                for (name, p, speedup) in [
                    ("dump", &u.dump, x.dump),
                    ("restore", &u.restore, x.restore),
                ] {
                    writeln!(
                        out,
                        "{name:<8} {:>9.3} {:>13} {:>16} {:>8.2}x",
                        p.seconds,
                        rate(p.throughput),
                        HumanSize(p.peak_extra_anon_bytes).to_string(),
                        speedup
                    )?;
                }
            }
            _ => writeln!(
                out,
                "upstream's data path: not run ({})",
                d.upstream_skipped.as_deref().unwrap_or("skipped")
            )?,
        }
        #[allow(clippy::cast_precision_loss)]
        let gib = (self.dump.bytes as f64 / f64::from(1u32 << 30)).max(1e-9);
        for (name, c, raw) in [
            ("dump", &self.cpu.dump, "raw write"),
            ("restore", &self.cpu.restore, "raw read"),
        ] {
            writeln!(
                out,
                "CPU s/GiB, {name}: plugin {:.3}, {raw} {:.3} (plugin / raw {:.2}); simulated \
                 engine {:.3}",
                c.plugin_seconds / gib,
                c.raw_seconds / gib,
                c.plugin_seconds / c.raw_seconds.max(1e-9),
                c.engine_seconds / gib
            )?;
        }
        if let Some(disk) = self.dump.bytes_on_disk {
            writeln!(
                out,
                "on disk: {} for {} of buffers ({:.0}% of every buffer zero)",
                HumanSize(disk),
                HumanSize(self.dump.bytes),
                d.zero_fraction * 100.0
            )?;
        }
        writeln!(
            out,
            "peak extra anonymous memory: {} (dump {}, restore {}; staging buffers: {}); \
             checksums: {}",
            HumanSize(self.peak_extra_anon_bytes),
            HumanSize(d.peaks[0]),
            HumanSize(d.peaks[1]),
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
        )?;
        writeln!(
            out,
            "CPU seconds (all threads, the simulated GPU's copies included): dump {:.2} (raw \
             write {:.2}), restore {:.2} (raw read {:.2})",
            d.cpu_dump, d.cpu_raw_write, d.cpu_restore, d.cpu_raw_read
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

/// Samples `RssAnon` until finished: the highest value seen, and the CPU time the sampling
/// thread itself used (so that it can be told apart from the work measured).
struct AnonSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<Duration>>,
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
            Duration::from_nanos(kfd_sim::host::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID))
        });
        Self {
            stop,
            peak,
            thread: Some(thread),
        }
    }

    /// The peak, and the sampler's own CPU time.
    fn finish(mut self) -> (u64, Duration) {
        self.stop.store(true, Ordering::Relaxed);
        let own = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        (self.peak.load(Ordering::Relaxed).max(rss_anon()), own)
    }
}

/// What [`measure`] saw of a phase.
struct Measured<T> {
    out: T,
    /// CPU time of the process, the sampler's excluded.
    cpu: Duration,
    /// CPU time of `machine`'s simulated engines.
    engine: Duration,
    /// Peak anonymous memory above its value at the start.
    peak: u64,
}

/// Runs `f` with the memory sampler on; its CPU time, the engines' of `machine`, and its peak
/// extra anonymous memory.
fn measure<T>(machine: &Machine, f: impl FnOnce() -> T) -> Measured<T> {
    let before = rss_anon();
    let sampler = AnonSampler::start();
    let engine = machine.engine_cpu_time();
    let (out, cpu) = with_cpu(f);
    let engine = machine.engine_cpu_time().saturating_sub(engine);
    let (peak, sampler_cpu) = sampler.finish();
    Measured {
        out,
        cpu: cpu.saturating_sub(sampler_cpu),
        engine,
        peak: peak.saturating_sub(before),
    }
}

/// `MemAvailable` of `/proc/meminfo`, bytes (0 when unreadable).
fn mem_available() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("MemAvailable:"))?;
            let kib = line.split_whitespace().nth(1)?.parse::<u64>().ok()?;
            Some(kib * 1024)
        })
        .unwrap_or(0)
}

/// Bytes the file system holds for `paths` (`st_blocks`).
fn on_disk(paths: &[PathBuf]) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    paths.iter().try_fold(
        0u64,
        |sum, p| Ok(sum + std::fs::metadata(p)?.blocks() * 512),
    )
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

/// Drops the page cache of `paths` (after [`settle`], so all of it can go).
fn drop_caches(paths: &[PathBuf]) -> io::Result<()> {
    for p in paths {
        drop_cache(p)?;
    }
    Ok(())
}

/// [`settle`], then drops the page cache of every file in `dir`: the next write phase gets the
/// memory the previous one just gave back (see the module docs).
fn settle_and_drop(dir: &Path) -> io::Result<()> {
    settle(dir)?;
    drop_caches(&files(dir)?)
}

/// The files of the checkpoint in `dir` (all but the raw files).
fn image_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    Ok(files(dir)?
        .into_iter()
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("raw-limit-"))
        })
        .collect())
}

/// Size of each raw `write(2)` and `read(2)`: the pages writer's and reader's (see the module
/// docs for why the write size matters).
const RAW_IO: usize = images::pages::IO_SLICE;

/// The raw files of one measurement: one per GPU, as the dump writes one pages file per GPU.
fn raw_paths(dir: &Path, run: u32, streams: usize) -> Vec<PathBuf> {
    (0..streams.max(1))
        .map(|i| dir.join(format!("raw-limit-{run}-{i}.bin")))
        .collect()
}

/// Writes `bytes` split evenly over the new files `paths`, each by its own thread with
/// sequential [`RAW_IO`]-byte write(2) calls from a buffer written beforehand, each ending with
/// `fsync` when `sync`; returns the time from the first `open` to the last thread's end.
fn raw_write(paths: &[PathBuf], bytes: u64, sync: bool) -> io::Result<Duration> {
    let share = bytes / paths.len().max(1) as u64;
    let mut bufs: Vec<Vec<u8>> = paths.iter().map(|_| vec![0xa5u8; RAW_IO]).collect();
    for b in &mut bufs {
        // Written, not only allocated: no page fault inside the timed part.
        b.fill(0x5a);
    }
    let start = Instant::now();
    std::thread::scope(|s| {
        let threads: Vec<_> = paths
            .iter()
            .zip(&bufs)
            .enumerate()
            .map(|(i, (path, buf))| {
                // The last file takes the remainder.
                let len = if i + 1 == paths.len() {
                    bytes - share * i as u64
                } else {
                    share
                };
                s.spawn(move || -> io::Result<()> {
                    let mut f = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(path)?;
                    let (mut left, mut behind, mut done) = (len, 0u64, 0u64);
                    while left > 0 {
                        let n = usize::try_from(left.min(RAW_IO as u64)).unwrap_or(RAW_IO);
                        f.write_all(&buf[..n])?;
                        left -= n as u64;
                        done += n as u64;
                        // The dump's write-behind, which --sync turns on, at the same cadence.
                        if sync && done - behind >= images::pages::WRITE_BEHIND {
                            images::dir::write_behind(&f, behind, done - behind);
                            behind = done;
                        }
                    }
                    if sync {
                        f.sync_all()?;
                    }
                    Ok(())
                })
            })
            .collect();
        threads.into_iter().try_for_each(|t| {
            t.join()
                .unwrap_or_else(|_| Err(io::Error::other("raw writer panicked")))
        })
    })?;
    Ok(start.elapsed())
}

/// Reads the files `paths` to the end, each by its own thread with sequential [`RAW_IO`]-byte
/// read(2) calls into a buffer written beforehand, with the pages reader's read-ahead hints
/// (`POSIX_FADV_SEQUENTIAL`, and `WILLNEED` kept [`images::pages::READ_AHEAD`] bytes ahead);
/// returns the time taken.
fn raw_read(paths: &[PathBuf]) -> io::Result<Duration> {
    let mut bufs: Vec<Vec<u8>> = paths.iter().map(|_| vec![0xa5u8; RAW_IO]).collect();
    let start = Instant::now();
    std::thread::scope(|s| {
        let threads: Vec<_> = paths
            .iter()
            .zip(&mut bufs)
            .map(|(path, buf)| {
                s.spawn(move || -> io::Result<()> {
                    let mut f = File::open(path)?;
                    images::dir::advise_sequential(&f);
                    let ahead = images::pages::READ_AHEAD;
                    let (mut pos, mut ahead_to) = (0u64, 0u64);
                    loop {
                        if pos + ahead / 2 >= ahead_to {
                            images::dir::read_ahead(&f, ahead_to, pos + ahead - ahead_to);
                            ahead_to = pos + ahead;
                        }
                        let n = f.read(buf)?;
                        if n == 0 {
                            return Ok(());
                        }
                        pos += n as u64;
                    }
                })
            })
            .collect();
        threads.into_iter().try_for_each(|t| {
            t.join()
                .unwrap_or_else(|_| Err(io::Error::other("raw reader panicked")))
        })
    })?;
    Ok(start.elapsed())
}

/// CPU time (user and system) this process has used so far, its ended threads included
/// (`getrusage(RUSAGE_SELF)`).
fn cpu_time() -> Duration {
    // SAFETY: an all-zero `rusage` is a valid value (integers and timevals), and getrusage only
    // writes into the struct it is given, which lives for the call.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF is a valid `who` and `u` is a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Runs `f`; returns its result and the CPU time the process used meanwhile.
fn with_cpu<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = cpu_time();
    let out = f();
    (out, cpu_time().saturating_sub(start))
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
fn preset(gpus: usize) -> Result<Preset, BenchError> {
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
pub fn run_bench(args: &BenchArgs) -> Result<BenchReport, BenchError> {
    let io_err = |what: &'static str| move |source| BenchError::Io { what, source };
    let gpus = args.gpus.max(1);
    let preset = preset(gpus)?;
    let per_gpu = args.size / gpus as u64;
    let bo = args.bo_size.clamp(4096, per_gpu.max(4096));
    let count = usize::try_from(per_gpu / bo).unwrap_or(0).max(1);
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // 0..=1000
    let untouched_permille = (args.zero_fraction.clamp(0.0, 1.0) * 1000.0).round() as u32;
    let spec = Spec {
        seed: 1,
        vram: vec![bo; count],
        gtt: Vec::new(),
        queues: 1,
        events: 2,
        untouched_permille,
    };
    let settings = Settings {
        checksums: !args.no_checksums,
        // Durable dumps go to the disk as they are written (AMDGPU_CR_WRITE_BEHIND).
        write_behind: args.sync,
        ..Settings::from_env(false)
    };
    // Upstream's host buffer follows KFD_MAX_BUFFER_SIZE too.
    let max_buffer =
        topology::options::max_buffer_size_from_lookup(|k| std::env::var(k).ok()).unwrap_or(None);
    let upstream_buffers =
        upstream::bounce_bytes(spec.vram.iter().copied(), max_buffer).saturating_mul(gpus as u64);

    let mut builder = tempfile::Builder::new();
    builder.prefix("amdgpu-cr-bench-");
    let temp = match &args.dir {
        Some(d) => builder.tempdir_in(d),
        None => builder.tempdir(),
    }
    .map_err(io_err("creating a directory for the bench"))?;
    let dir = temp.path().to_owned();
    // Upstream's pages files, apart from ours (same names).
    let up_dir = dir.join("upstream");
    std::fs::create_dir(&up_dir).map_err(io_err("creating a directory for the bench"))?;
    let (raw1, raw2) = (raw_paths(&dir, 1, gpus), raw_paths(&dir, 2, gpus));
    let settle_both = || -> io::Result<()> {
        settle_and_drop(&dir)?;
        settle_and_drop(&up_dir)
    };

    let src = SimNode::new(&preset)?;
    let target = harness::start_target(&src, &spec)?;
    let manifest = target.workload.manifest().clone();
    let bytes = manifest.pattern_bytes();
    settle(&dir).map_err(io_err("syncing the bench directory"))?;

    // Write: raw, dump, raw, upstream's dump; each right after the previous write phase's files
    // were synced and left the page cache, the first after an untimed write of the same size (a
    // primer).
    let primer = raw_paths(&dir, 0, gpus);
    raw_write(&primer, bytes, false).map_err(io_err("writing the primer"))?;
    settle_and_drop(&dir).map_err(io_err("syncing the bench directory"))?;
    remove(&primer).map_err(io_err("removing the primer"))?;
    let (raw_w1, cpu_w1) = with_cpu(|| raw_write(&raw1, bytes, args.sync));
    let raw_w1 = raw_w1.map_err(io_err("measuring the raw write"))?;
    settle_and_drop(&dir).map_err(io_err("syncing the bench directory"))?;
    remove(&raw1).map_err(io_err("removing the raw files"))?;
    let dumped = measure(&src.machine, || -> Result<_, BenchError> {
        let (ids, mut dump_time) = harness::checkpoint(&src, &target, &dir, &settings)?;
        if args.sync {
            let start = Instant::now();
            settle(&dir).map_err(io_err("syncing the image files"))?;
            dump_time += start.elapsed();
        }
        Ok((ids, dump_time))
    });
    let (ids, dump_time) = dumped.out?;
    settle_and_drop(&dir).map_err(io_err("syncing the bench directory"))?;
    let images = image_files(&dir).map_err(io_err("listing the image files"))?;
    let bytes_on_disk = on_disk(&images).map_err(io_err("measuring the image files"))?;
    let (raw_w2, cpu_w2) = with_cpu(|| raw_write(&raw2, bytes, args.sync));
    let raw_w2 = raw_w2.map_err(io_err("measuring the raw write"))?;
    settle_both().map_err(io_err("syncing the bench directory"))?;
    let upstream_skipped = if args.no_upstream {
        Some("--no-upstream".to_owned())
    } else {
        let available = mem_available();
        (upstream_buffers > available / 2).then(|| {
            format!(
                "its host buffers, {} (the largest buffer of each GPU), would take more than \
                 half of the {} of memory available",
                HumanSize(upstream_buffers),
                HumanSize(available)
            )
        })
    };
    // The source stays for upstream's dump, which comes last (so that the disk holds two sets
    // of files at most).
    let source = match upstream_skipped {
        Some(_) => {
            drop(target);
            drop(src);
            None
        }
        None => Some((src, target)),
    };

    // Read: raw, restore, raw. With --sync from the disk (every file's page cache dropped
    // before each). Else from the page cache: each phase's files are read into it first
    // (untimed), and each phase that allocates new VRAM starts right after the files of the
    // phase before it left the page cache.
    let prepare = |load: &[PathBuf], done: &[PathBuf]| -> io::Result<()> {
        if args.sync {
            drop_caches(&files(&dir)?)?;
            drop_caches(&files(&up_dir)?)
        } else {
            raw_read(load)?;
            drop_caches(done)
        }
    };
    prepare(&raw2, &[]).map_err(io_err("preparing the raw read"))?;
    let (raw_r1, cpu_r1) = with_cpu(|| raw_read(&raw2));
    let raw_r1 = raw_r1.map_err(io_err("measuring the raw read"))?;
    let dst = SimNode::new(&preset)?;
    prepare(&images, &raw2).map_err(io_err("preparing the restore"))?;
    let restored = measure(&dst.machine, || {
        harness::restore(&dst, &dir, &ids, &settings)
    });
    let (target_back, restore_time) = restored.out?;
    prepare(&raw2, &images).map_err(io_err("preparing the raw read"))?;
    let (raw_r2, cpu_r2) = with_cpu(|| raw_read(&raw2));
    let raw_r2 = raw_r2.map_err(io_err("measuring the raw read"))?;
    target_back.verify(&manifest)?;
    drop(target_back);
    drop(dst);

    // Upstream's dump and restore, after the raw files and our pages files are gone (its
    // restore reads our KFD image, which names the same buffers).
    let upstream_run = match source {
        None => None,
        Some((src, target)) => {
            remove(&raw2).map_err(io_err("removing the raw files"))?;
            let pages: Vec<PathBuf> = images
                .iter()
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("amdgpu-pages-"))
                })
                .cloned()
                .collect();
            remove(&pages).map_err(io_err("removing the pages files"))?;
            settle_both().map_err(io_err("syncing the bench directory"))?;
            let dumped = measure(&src.machine, || -> Result<_, BenchError> {
                let mut took = upstream::dump(&src, &target, &up_dir, ids.kfd, max_buffer)?;
                if args.sync {
                    let start = Instant::now();
                    settle(&up_dir).map_err(io_err("syncing upstream's files"))?;
                    took += start.elapsed();
                }
                Ok(took)
            });
            let dump_took = dumped.out?;
            settle_both().map_err(io_err("syncing the bench directory"))?;
            drop(target);
            drop(src);
            let up_files = files(&up_dir).map_err(io_err("listing upstream's files"))?;
            let node = SimNode::new(&preset)?;
            prepare(&up_files, &[]).map_err(io_err("preparing upstream's restore"))?;
            let restored = measure(&node.machine, || {
                upstream::restore(&node, &dir, &up_dir, &ids, max_buffer)
            });
            let (back, restore_took) = restored.out?;
            back.verify(&manifest)?;
            Some(Upstream {
                dump: UpstreamPhase::new(bytes, dump_took, dumped.peak),
                restore: UpstreamPhase::new(bytes, restore_took, restored.peak),
            })
        }
    };
    drop(temp);

    let staging = settings.staging.bytes() as u64 * gpus as u64;
    let dump = Phase {
        bytes_on_disk: Some(bytes_on_disk),
        ..Phase::new(bytes, dump_time, best(raw_w1, raw_w2))
    };
    let restore = Phase::new(bytes, restore_time, best(raw_r1, raw_r2));
    let speedup = upstream_run.as_ref().map(|u| Speedup {
        dump: u.dump.seconds / dump.seconds,
        restore: u.restore.seconds / restore.seconds,
    });
    let plugin = |m_cpu: Duration, engine: Duration| m_cpu.saturating_sub(engine).as_secs_f64();
    let cpu = Cpu {
        dump: CpuPhase {
            engine_seconds: dumped.engine.as_secs_f64(),
            plugin_seconds: plugin(dumped.cpu, dumped.engine),
            raw_seconds: cpu_w1.min(cpu_w2).as_secs_f64(),
        },
        restore: CpuPhase {
            engine_seconds: restored.engine.as_secs_f64(),
            plugin_seconds: plugin(restored.cpu, restored.engine),
            raw_seconds: cpu_r1.min(cpu_r2).as_secs_f64(),
        },
    };
    Ok(BenchReport {
        dump,
        restore,
        peak_extra_anon_bytes: dumped.peak.max(restored.peak),
        staging_bytes: staging,
        checksums: settings.checksums,
        upstream: upstream_run,
        speedup,
        cpu,
        detail: Detail {
            gpus,
            bos_per_gpu: count,
            bo_size: bo,
            raw_writes: [per_second(bytes, raw_w1), per_second(bytes, raw_w2)],
            raw_reads: [per_second(bytes, raw_r1), per_second(bytes, raw_r2)],
            cpu_dump: dumped.cpu.as_secs_f64(),
            cpu_raw_write: cpu_w1.min(cpu_w2).as_secs_f64(),
            cpu_restore: restored.cpu.as_secs_f64(),
            cpu_raw_read: cpu_r1.min(cpu_r2).as_secs_f64(),
            sync: args.sync,
            dir: args.dir.clone().unwrap_or_else(std::env::temp_dir),
            zero_fraction: f64::from(untouched_permille) / 1000.0,
            peaks: [dumped.peak, restored.peak],
            upstream_skipped,
            upstream_buffers,
        },
    })
}

/// Removes the files `paths`.
fn remove(paths: &[PathBuf]) -> io::Result<()> {
    paths.iter().try_for_each(std::fs::remove_file)
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
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use amdgpu_plugin::copy::Staging;
    use images::PagesFile;

    fn keys(v: &serde_json::Value) -> Vec<&str> {
        let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        k.sort_unstable();
        k
    }

    #[test]
    fn small_bench_reports_every_key_and_keeps_memory_bounded() {
        let args = BenchArgs {
            size: 16 << 20,
            gpus: 2,
            bo_size: 4 << 20,
            dir: None,
            sync: false,
            no_checksums: false,
            zero_fraction: 0.5,
            no_upstream: false,
            json: true,
        };
        let report = run_bench(&args).unwrap();
        assert_eq!(report.dump.bytes, 16 << 20);
        assert_eq!(report.restore.bytes, 16 << 20);
        assert!(report.checksums);
        // The memory bound of the issue: 64 MiB plus the staging buffers.
        assert!(report.peak_extra_anon_bytes <= (64 << 20) + report.staging_bytes);
        // Upstream's host buffer is a whole buffer per GPU, and it is all touched.
        let up = report.upstream.as_ref().expect("upstream's data path ran");
        assert!(up.dump.peak_extra_anon_bytes >= 4 << 20);
        assert!(up.restore.peak_extra_anon_bytes >= 4 << 20);
        // Half of every buffer is zero: at most half of the payload on the disk, plus the
        // headers' blocks and, per GPU, the workload's user-mode queue buffers (a 1 MiB staging
        // buffer it moved the data through, and its ring with its pointers' page), which are
        // process memory outside the payload.
        let disk = report.dump.bytes_on_disk.unwrap();
        let queue_buffers = 2 * ((1 << 20) + (64 << 10) + 4096);
        assert!(
            disk <= (8 << 20) + (1 << 20) + queue_buffers,
            "{disk} bytes on disk"
        );
        assert!(report.cpu.dump.engine_seconds > 0.0);
        assert!(report.cpu.restore.plugin_seconds > 0.0);

        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(
            keys(&json),
            [
                "checksums",
                "cpu",
                "dump",
                "peak_extra_anon_bytes",
                "restore",
                "speedup",
                "staging_bytes",
                "upstream"
            ]
        );
        assert_eq!(
            keys(&json["dump"]),
            [
                "bytes",
                "bytes_on_disk",
                "ratio",
                "raw_throughput",
                "seconds",
                "throughput"
            ]
        );
        assert_eq!(
            keys(&json["restore"]),
            ["bytes", "ratio", "raw_throughput", "seconds", "throughput"]
        );
        for phase in ["dump", "restore"] {
            assert_eq!(
                keys(&json["upstream"][phase]),
                ["peak_extra_anon_bytes", "seconds", "throughput"]
            );
            assert_eq!(
                keys(&json["cpu"][phase]),
                ["engine_seconds", "plugin_seconds", "raw_seconds"]
            );
            assert!(json["speedup"][phase].as_f64().unwrap() > 0.0);
        }
        let mut text = Vec::new();
        report.render(&mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.contains("upstream's data path (one thread per GPU"),
            "{text}"
        );
        assert!(text.contains("50% of every buffer zero"), "{text}");
    }

    #[test]
    fn without_upstream_the_keys_are_null() {
        let args = BenchArgs {
            size: 4 << 20,
            gpus: 1,
            bo_size: 4 << 20,
            dir: None,
            sync: false,
            no_checksums: true,
            zero_fraction: 0.0,
            no_upstream: true,
            json: true,
        };
        let report = run_bench(&args).unwrap();
        let json = serde_json::to_value(&report).unwrap();
        assert!(json["upstream"].is_null() && json["speedup"].is_null());
        assert_eq!(
            report.detail.upstream_skipped.as_deref(),
            Some("--no-upstream")
        );
    }

    fn one_buffer(size: u64) -> Spec {
        Spec {
            seed: 3,
            vram: vec![size],
            gtt: Vec::new(),
            queues: 1,
            events: 1,
            untouched_permille: 0,
        }
    }

    /// Our dump and restore of a buffer 32 times the staging memory stay within the staging
    /// memory (plus the simulator's own bounce buffers and allocator slack); upstream's model
    /// takes a host buffer of the whole buffer.
    #[test]
    fn a_buffer_far_larger_than_staging_moves_in_staging_memory() {
        const BO: u64 = 64 << 20;
        let preset = preset(1).unwrap();
        let mut settings = Settings::from_lookup(|_| None, false);
        settings.staging = Staging {
            buffer_size: 1 << 20,
            buffers: 2,
        };
        let dir = tempfile::tempdir().unwrap();
        let up_dir = tempfile::tempdir().unwrap();
        let src = SimNode::new(&preset).unwrap();
        let target = harness::start_target(&src, &one_buffer(BO)).unwrap();
        let manifest = target.workload.manifest().clone();
        let ours = measure(&src.machine, || {
            harness::checkpoint(&src, &target, dir.path(), &settings)
        });
        let (ids, _) = ours.out.unwrap();
        let theirs = measure(&src.machine, || {
            upstream::dump(&src, &target, up_dir.path(), ids.kfd, None)
        });
        theirs.out.unwrap();
        let bound = (2 << 20) + (3 << 20);
        assert!(ours.peak <= bound, "our dump: {} extra bytes", ours.peak);
        assert!(
            theirs.peak >= BO,
            "upstream's dump: {} extra bytes",
            theirs.peak
        );
        drop(target);

        let dst = SimNode::new(&preset).unwrap();
        let ours = measure(&dst.machine, || {
            harness::restore(&dst, dir.path(), &ids, &settings)
        });
        let (back, _) = ours.out.unwrap();
        back.verify(&manifest).unwrap();
        assert!(ours.peak <= bound, "our restore: {} extra bytes", ours.peak);
        let dst2 = SimNode::new(&preset).unwrap();
        let theirs = measure(&dst2.machine, || {
            upstream::restore(&dst2, dir.path(), up_dir.path(), &ids, None)
        });
        let (back, _) = theirs.out.unwrap();
        back.verify(&manifest).unwrap();
        assert!(
            theirs.peak >= BO,
            "upstream's restore: {} extra bytes",
            theirs.peak
        );
    }

    /// Upstream's model and the plugin write the same pages files (ours with holes for zeros,
    /// upstream's with every byte), and each restores the workload exactly.
    #[test]
    fn upstream_model_writes_the_same_pages_files_as_the_plugin() {
        let preset = preset(2).unwrap();
        let spec = Spec {
            seed: 5,
            vram: vec![3 << 20, 5 << 20],
            gtt: vec![1 << 20],
            queues: 1,
            events: 2,
            untouched_permille: 600,
        };
        let settings = Settings::from_lookup(|_| None, false);
        let (dir, up_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let src = SimNode::new(&preset).unwrap();
        let target = harness::start_target(&src, &spec).unwrap();
        let manifest = target.workload.manifest().clone();
        let (ids, _) = harness::checkpoint(&src, &target, dir.path(), &settings).unwrap();
        upstream::dump(&src, &target, up_dir.path(), ids.kfd, Some(2 << 20)).unwrap();
        drop(target);
        for g in &manifest.gpus {
            let name = PagesFile::Kfd {
                id: ids.kfd,
                gpu_id: g.gpu_id,
            }
            .file_name();
            let ours = std::fs::read(dir.path().join(&name)).unwrap();
            let theirs = std::fs::read(up_dir.path().join(&name)).unwrap();
            assert!(ours.len() > 8 << 20, "{name}: {} bytes", ours.len());
            assert!(ours == theirs, "{name} differs");
        }
        let dst = SimNode::new(&preset).unwrap();
        let (back, _) = upstream::restore(&dst, dir.path(), up_dir.path(), &ids, None).unwrap();
        back.verify(&manifest).unwrap();
    }
}
