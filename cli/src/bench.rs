//! `amdgpu-cr bench`: dump and restore throughput on the in-process simulator, next to the raw
//! limits of the same directory measured in the same run.
//!
//! Method. A workload of `--size` bytes over `--gpus` GPUs (buffers of `--bo-size`, at most one
//! GPU's share) is dumped and restored through the plugin's hooks exactly as `amdgpu-cr demo`
//! does. In the same directory, the same number of bytes is written with plain sequential
//! `write(2)` calls from memory and read back with `read(2)`, in the same shape as the plugin's
//! I/O: one file per GPU, each written (read) by its own thread, concurrently, in calls of the
//! pages writer's size ([`images::pages::IO_SLICE`], 256 KiB), from a buffer written before the
//! clock starts. To keep the order of the measurements from favouring either side, each raw
//! measurement is taken twice, once before and once after the phase it is compared with (raw
//! write, dump, raw write; raw read, restore, raw read), into and from two distinct sets of
//! files, and the faster of the two is the limit.
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
use amdgpu_plugin::criu::Settings;

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
        // Durable dumps go to the disk as they are written (AMDGPU_CR_WRITE_BEHIND).
        write_behind: args.sync,
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
    let (raw1, raw2) = (raw_paths(&dir, 1, gpus), raw_paths(&dir, 2, gpus));

    let src = SimNode::new(&preset)?;
    let target = demo::start_target(&src, &spec)?;
    let manifest = target.workload.manifest().clone();
    let bytes = manifest.pattern_bytes();
    settle(&dir).map_err(io_err("syncing the bench directory"))?;

    // Write: raw, dump, raw; each right after the previous write phase's files were synced and
    // left the page cache, the first after an untimed write of the same size (a primer).
    let primer = raw_paths(&dir, 0, gpus);
    raw_write(&primer, bytes, false).map_err(io_err("writing the primer"))?;
    settle_and_drop(&dir).map_err(io_err("syncing the bench directory"))?;
    for p in &primer {
        std::fs::remove_file(p).map_err(io_err("removing the primer"))?;
    }
    let (raw_w1, cpu_w1) = with_cpu(|| raw_write(&raw1, bytes, args.sync));
    let raw_w1 = raw_w1.map_err(io_err("measuring the raw write"))?;
    settle_and_drop(&dir).map_err(io_err("syncing the bench directory"))?;
    let before = rss_anon();
    let sampler = AnonSampler::start();
    let (dumped, cpu_dump) = with_cpu(|| -> Result<_, DemoError> {
        let (ids, mut dump_time) = demo::checkpoint(&src, &target, &dir, &settings)?;
        if args.sync {
            let start = Instant::now();
            settle(&dir).map_err(io_err("syncing the image files"))?;
            dump_time += start.elapsed();
        }
        Ok((ids, dump_time))
    });
    let (ids, dump_time) = dumped?;
    let dump_peak = sampler.finish().saturating_sub(before);
    settle_and_drop(&dir).map_err(io_err("syncing the bench directory"))?;
    let (raw_w2, cpu_w2) = with_cpu(|| raw_write(&raw2, bytes, args.sync));
    let raw_w2 = raw_w2.map_err(io_err("measuring the raw write"))?;
    settle_and_drop(&dir).map_err(io_err("syncing the bench directory"))?;
    drop(target);
    drop(src);

    // Read: raw, restore, raw. With --sync from the disk (every file's page cache dropped
    // before each). Else from the page cache: each phase's files are read into it first
    // (untimed), and the restore, which allocates the new VRAM, starts right after the files of
    // the raw read before it left the page cache.
    let images = image_files(&dir).map_err(io_err("listing the image files"))?;
    let prepare = |load: &[PathBuf], done: &[PathBuf]| -> io::Result<()> {
        if args.sync {
            drop_caches(&files(&dir)?)
        } else {
            raw_read(load)?;
            drop_caches(done)
        }
    };
    prepare(&raw1, &[]).map_err(io_err("preparing the raw read"))?;
    let (raw_r1, cpu_r1) = with_cpu(|| raw_read(&raw1));
    let raw_r1 = raw_r1.map_err(io_err("measuring the raw read"))?;
    let dst = SimNode::new(&preset)?;
    prepare(&images, &raw1).map_err(io_err("preparing the restore"))?;
    let before = rss_anon();
    let sampler = AnonSampler::start();
    let (restored, cpu_restore) = with_cpu(|| demo::restore(&dst, &dir, &ids, &settings));
    let (restored, restore_time) = restored?;
    let restore_peak = sampler.finish().saturating_sub(before);
    prepare(&raw2, &images).map_err(io_err("preparing the raw read"))?;
    let (raw_r2, cpu_r2) = with_cpu(|| raw_read(&raw2));
    let raw_r2 = raw_r2.map_err(io_err("measuring the raw read"))?;
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
            cpu_dump: cpu_dump.as_secs_f64(),
            cpu_raw_write: cpu_w1.min(cpu_w2).as_secs_f64(),
            cpu_restore: cpu_restore.as_secs_f64(),
            cpu_raw_read: cpu_r1.min(cpu_r2).as_secs_f64(),
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
