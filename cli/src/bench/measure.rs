//! What the bench measures of the operating system: this process's resident anonymous memory
//! (sampled every millisecond during a phase), its CPU time, the simulated engines' CPU time, and
//! the memory available.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kfd_sim::Machine;

/// The most bytes read of a `/proc` file here (statm is one line, meminfo about 1.5 KiB): a
/// `/proc` that is not procfs (a container's bind mount) cannot make the bench read without end.
const PROC_FILE_LIMIT: u64 = 64 << 10;

/// Bytes of a page (`/proc/self/statm` counts pages).
const PAGE: u64 = 4096;

/// Resident anonymous memory of this process, bytes: `resident - shared` of `/proc/self/statm`
/// (`shared` is `RssFile + RssShmem`, so the difference is `RssAnon`).
fn rss_anon() -> u64 {
    topology::sysfs::read_bounded(std::path::Path::new("/proc/self/statm"), PROC_FILE_LIMIT)
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

/// What [`measure`] saw of a phase besides its result.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Cost {
    /// CPU time of the process, the sampler's excluded.
    pub(super) cpu: Duration,
    /// CPU time of `machine`'s simulated engines.
    pub(super) engine: Duration,
    /// Peak anonymous memory above its value at the start.
    pub(super) peak: u64,
}

/// Runs `f` with the memory sampler on; its result, and its CPU time, the engines' of `machine`,
/// and its peak extra anonymous memory.
pub(super) fn measure<T>(machine: &Machine, f: impl FnOnce() -> T) -> (T, Cost) {
    let before = rss_anon();
    let sampler = AnonSampler::start();
    let engine = machine.engine_cpu_time();
    let (out, cpu) = with_cpu(f);
    let engine = machine.engine_cpu_time().saturating_sub(engine);
    let (peak, sampler_cpu) = sampler.finish();
    let cost = Cost {
        cpu: cpu.saturating_sub(sampler_cpu),
        engine,
        peak: peak.saturating_sub(before),
    };
    (out, cost)
}

/// `MemAvailable` of `/proc/meminfo`, bytes (0 when unreadable).
pub(super) fn mem_available() -> u64 {
    topology::sysfs::read_bounded(std::path::Path::new("/proc/meminfo"), PROC_FILE_LIMIT)
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("MemAvailable:"))?;
            let kib = line.split_whitespace().nth(1)?.parse::<u64>().ok()?;
            Some(kib * 1024)
        })
        .unwrap_or(0)
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
pub(super) fn with_cpu<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = cpu_time();
    let out = f();
    (out, cpu_time().saturating_sub(start))
}
