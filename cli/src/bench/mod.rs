//! `amdgpu-cr bench`: dump and restore throughput on the in-process simulator, next to the raw
//! limits of the same directory and to the upstream plugin's data path, measured in the same run.
//!
//! How it measures (the raw I/O's shape, the memory state every phase starts from, CPU and
//! memory accounting, the cache policy with and without `--sync`) is written down in
//! `docs/bench.md`. Inside: one run in its order (`run`), what it reports (`report`), what it
//! measures of the OS (`measure`), the bench directory's files (`files`), the raw-I/O baselines
//! (`raw`), and the targets the figures are judged against (`targets`, `judge`); upstream's data
//! path is `crate::upstream`.

use std::io::{self, Write};
use std::path::PathBuf;

use harness::workload::WorkloadError;
use harness::NodeError;
use kfd_sim::PresetError;

use super::upstream::UpstreamError;
use super::{CliError, Outcome, Report, Run};

mod files;
mod judge;
mod measure;
mod raw;
mod report;
mod run;
mod targets;

pub use judge::JudgeError;
use run::run_bench;

/// Why the bench failed.
/// Why `amdgpu-cr bench` could not measure (exit status 2).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct BenchFailure(#[from] BenchError);

/// What failed in the bench.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BenchError {
    /// Options that do not go together (named, with the limit).
    #[error("{0}")]
    Usage(String),
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
    /// Total bytes of GPU buffers, over all GPUs (binary units: 512M, 2G, 2GiB, 1T; at least
    /// 1 MiB, at most 63 GiB per GPU).
    #[arg(long, default_value = "2G", value_parser = parse_size)]
    pub size: u64,
    /// Number of GPUs (a node of MI210s; 1 to 16).
    #[arg(long, default_value_t = 2, value_parser = parse_gpus)]
    pub gpus: usize,
    /// Size of each buffer (binary units; at least 4 KiB, at most the size per GPU).
    #[arg(long, default_value = "256M", value_parser = parse_bo_size)]
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
    /// Print the targets the bench is judged against, and the runs they are judged on; run
    /// nothing.
    #[arg(long, conflicts_with_all = ["plan", "judge"])]
    pub targets: bool,
    /// Print the runs of the targets, one a line (`NAME each|once light|heavy ARGS...`), for
    /// `scripts/bench-targets.sh`; run nothing.
    #[arg(long, conflicts_with = "judge")]
    pub plan: bool,
    /// Judge the targets on the JSON reports of the runs in DIR (`NAME-1.json`... of each
    /// repeated run, `NAME.json` of one run once); exit 0 when every target is met.
    #[arg(long, value_name = "DIR")]
    pub judge: Option<PathBuf>,
}

/// The most GPUs of the bench's node (the driver's MAX_GPU_INSTANCE).
pub(crate) const MAX_GPUS: u64 = 16;
/// The most bytes of buffers per GPU: an MI210's 64 GiB of VRAM less 1 GiB for the rest.
pub(crate) const MAX_PER_GPU: u64 = 63 << 30;

fn parse_size(s: &str) -> Result<u64, String> {
    super::args::size(s, 1 << 20, MAX_PER_GPU * MAX_GPUS)
}

fn parse_bo_size(s: &str) -> Result<u64, String> {
    super::args::size(s, 4096, MAX_PER_GPU)
}

fn parse_gpus(s: &str) -> Result<usize, String> {
    super::args::count(s, 1, MAX_GPUS).map(|n| usize::try_from(n).unwrap_or(usize::MAX))
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("{s:?} is not a fraction from 0 to 1")),
    }
}

impl Run for BenchArgs {
    fn run(&self, out: &mut dyn Write) -> Result<Outcome, CliError> {
        let format = super::Format::from_json_flag(self.json);
        if self.targets {
            return targets::TargetsReport::new().emit(format, out);
        }
        if self.plan {
            targets::write_plan(out)?;
            return Ok(Outcome::Success);
        }
        if let Some(dir) = &self.judge {
            return judge::judge(dir)?.emit(format, out);
        }
        let report = run_bench(self).map_err(BenchFailure::from)?;
        report.emit(format, out)
    }
}
