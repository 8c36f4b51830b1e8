//! What the bench reports: per direction our time and throughput against the raw limit,
//! upstream's data path beside it, CPU per direction split into the simulated engine's, the
//! plugin's own and the raw I/O's; as JSON (its shape is fixed: `scripts/bench-targets.sh` and
//! `amdgpu-cr bench --judge` read it) and as text.

use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{HumanSize, Outcome, Report};

/// One direction's numbers.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Phase {
    /// Bytes moved.
    pub(crate) bytes: u64,
    /// Seconds taken.
    pub(crate) seconds: f64,
    /// Bytes per second.
    pub(crate) throughput: f64,
    /// The raw limit, bytes per second.
    pub(crate) raw_throughput: f64,
    /// `throughput / raw_throughput`.
    pub(crate) ratio: f64,
    /// Dump only: bytes the file system holds for the checkpoint's files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) bytes_on_disk: Option<u64>,
}

impl Phase {
    pub(super) fn new(bytes: u64, took: Duration, raw: Duration) -> Self {
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
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct UpstreamPhase {
    /// Seconds taken.
    pub(crate) seconds: f64,
    /// Bytes per second.
    pub(crate) throughput: f64,
    /// Peak anonymous memory beyond the simulated VRAM during the phase.
    pub(crate) peak_extra_anon_bytes: u64,
}

impl UpstreamPhase {
    pub(super) fn new(bytes: u64, took: Duration, peak: u64) -> Self {
        Self {
            seconds: took.as_secs_f64(),
            throughput: per_second(bytes, took),
            peak_extra_anon_bytes: peak,
        }
    }
}

/// Upstream's strategy on the same work.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Upstream {
    /// Its dump.
    pub(crate) dump: UpstreamPhase,
    /// Its restore.
    pub(crate) restore: UpstreamPhase,
}

/// Ours over upstream's: its seconds over ours (above 1 is faster).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Speedup {
    /// Dump.
    pub(crate) dump: f64,
    /// Restore.
    pub(crate) restore: f64,
}

/// CPU seconds of one direction.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct CpuPhase {
    /// The simulated SDMA engines' (what the GPU does on hardware).
    pub(crate) engine_seconds: f64,
    /// The plugin's own: the process's, minus the engines' and the memory sampler's.
    pub(crate) plugin_seconds: f64,
    /// The raw write's (dump) or read's (restore), the run that used less.
    pub(crate) raw_seconds: f64,
}

/// CPU seconds per direction.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Cpu {
    /// Dump against raw write.
    pub(crate) dump: CpuPhase,
    /// Restore against raw read.
    pub(crate) restore: CpuPhase,
}

/// What the bench measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct BenchReport {
    /// Dump against raw sequential write.
    pub(crate) dump: Phase,
    /// Restore against raw sequential read.
    pub(crate) restore: Phase,
    /// Peak anonymous memory beyond the simulated VRAM, during dump and restore.
    pub(crate) peak_extra_anon_bytes: u64,
    /// Staging memory per GPU times GPUs.
    pub(crate) staging_bytes: u64,
    /// Whether page checksums were written and verified.
    pub(crate) checksums: bool,
    /// Upstream's data path on the same work (`None`: skipped, [`Detail::upstream_skipped`]
    /// says why).
    pub(crate) upstream: Option<Upstream>,
    /// Ours over upstream's.
    pub(crate) speedup: Option<Speedup>,
    /// CPU seconds: the simulated engines', the plugin's own, the raw I/O's.
    pub(crate) cpu: Cpu,
    /// Not in the JSON (its shape is fixed): how the run was set up, and both raw runs.
    #[serde(skip)]
    pub(crate) detail: Detail,
}

/// What the human report adds to the JSON.
#[derive(Clone, Debug, Default)]
pub(crate) struct Detail {
    /// GPUs.
    pub(crate) gpus: usize,
    /// Buffers per GPU.
    pub(crate) bos_per_gpu: usize,
    /// Bytes per buffer.
    pub(crate) bo_size: u64,
    /// Raw write throughputs, before and after the dump.
    pub(crate) raw_writes: [f64; 2],
    /// Raw read throughputs, before and after the restore.
    pub(crate) raw_reads: [f64; 2],
    /// CPU seconds (user + system, all threads) the process used during the dump.
    pub(crate) cpu_dump: f64,
    /// CPU seconds of the raw write that used fewer.
    pub(crate) cpu_raw_write: f64,
    /// CPU seconds during the restore.
    pub(crate) cpu_restore: f64,
    /// CPU seconds of the raw read that used fewer.
    pub(crate) cpu_raw_read: f64,
    /// Whether writes were synced and caches dropped.
    pub(crate) sync: bool,
    /// The directory measured.
    pub(crate) dir: PathBuf,
    /// The fraction of every buffer left zero.
    pub(crate) zero_fraction: f64,
    /// Peak extra anonymous memory of our dump and of our restore.
    pub(crate) peaks: [u64; 2],
    /// Why upstream's data path did not run.
    pub(crate) upstream_skipped: Option<String>,
    /// Its host buffers, all GPUs together.
    pub(crate) upstream_buffers: u64,
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
            "{} x {} of {}; raw write before/after the dump {} / {}, raw read \
             before/after the restore {} / {} (the faster is the limit); {}; in {}",
            crate::count(d.gpus, "GPU", "GPUs"),
            crate::count(d.bos_per_gpu, "BO", "BOs"),
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

/// Bytes per second of `bytes` moved in `took`.
#[allow(clippy::cast_precision_loss)]
pub(super) fn per_second(bytes: u64, took: Duration) -> f64 {
    bytes as f64 / took.as_secs_f64().max(1e-9)
}
