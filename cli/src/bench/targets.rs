//! The bench's targets (issues 18 and 29), stated once: the configurations they are judged on
//! ([`RUNS`]) and every target with its bound ([`TARGETS`]). `amdgpu-cr bench --targets` prints
//! them, `--plan` lists the runs for `scripts/bench-targets.sh`, and `--judge DIR` judges them
//! ([`super::judge`]).

use std::io::{self, Write};

use serde::Serialize;

use crate::{Outcome, Report};

/// A configuration of the bench that targets are judged on.
#[derive(Clone, Copy, Debug, Serialize)]
pub(crate) struct RunConfig {
    /// Its name, and the name of its JSON reports.
    pub(crate) name: &'static str,
    /// What it measures, as the targets name it.
    pub(crate) label: &'static str,
    /// Its arguments to `amdgpu-cr bench` (besides `--dir` and `--json`).
    pub(crate) args: &'static [&'static str],
    /// Repeated (every repetition interleaved with the other repeated runs), or run once.
    pub(crate) repeated: bool,
    /// Needs 8 GiB of memory for the simulated VRAM (`scripts/bench-targets.sh --skip-8g`
    /// leaves it out, and its target is then skipped).
    pub(crate) heavy: bool,
}

/// The runs, in the order `scripts/bench-targets.sh` runs them.
pub(crate) const RUNS: &[RunConfig] = &[
    RunConfig {
        name: "gpu1",
        label: "1 GPU, page cache",
        args: &["--gpus", "1"],
        repeated: true,
        heavy: false,
    },
    RunConfig {
        name: "gpu1-sync",
        label: "1 GPU, --sync",
        args: &["--gpus", "1", "--sync"],
        repeated: true,
        heavy: false,
    },
    RunConfig {
        name: "default",
        label: "2 GPUs",
        args: &[],
        repeated: true,
        heavy: false,
    },
    RunConfig {
        name: "zeros",
        label: "--zero-fraction 0.75",
        args: &["--gpus", "1", "--zero-fraction", "0.75"],
        repeated: true,
        heavy: false,
    },
    RunConfig {
        name: "sync",
        label: "--sync (2 GPUs)",
        args: &["--sync", "--no-upstream"],
        repeated: true,
        heavy: false,
    },
    RunConfig {
        name: "big",
        label: "one 8 GiB BO (--bo-size 8G --size 8G --gpus 1)",
        args: &[
            "--bo-size",
            "8G",
            "--size",
            "8G",
            "--gpus",
            "1",
            "--no-upstream",
        ],
        repeated: false,
        heavy: true,
    },
];

/// A direction of the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Direction {
    /// The dump, against the raw write.
    Dump,
    /// The restore, against the raw read.
    Restore,
}

impl Direction {
    pub(super) fn name(self) -> &'static str {
        match self {
            Direction::Dump => "dump",
            Direction::Restore => "restore",
        }
    }

    fn raw(self) -> &'static str {
        match self {
            Direction::Dump => "raw write",
            Direction::Restore => "raw read",
        }
    }
}

/// What a target checks of its run's reports, with its bounds.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(tag = "check", rename_all = "snake_case")]
pub(crate) enum Check {
    /// Our speedup over upstream's data path, dump and restore, medians: at least `min`.
    Speedup {
        /// The run.
        run: &'static str,
        /// The bound.
        min: f64,
    },
    /// Peak extra anonymous memory in every run: ours at most the staging buffers and
    /// `slack_mib`; upstream's at least its largest buffer (`largest_mib`, the run's buffer
    /// size).
    Memory {
        /// The run.
        run: &'static str,
        /// MiB allowed beyond the staging buffers.
        slack_mib: u64,
        /// The buffer size of the run, MiB.
        largest_mib: u64,
    },
    /// The plugin's own CPU per GiB over the raw I/O's in `direction`, median: at most `max`.
    PluginCpu {
        /// The run.
        run: &'static str,
        /// The direction.
        direction: Direction,
        /// The bound.
        max: f64,
    },
    /// Bytes on disk over the payload, every run: at most `max`.
    OnDisk {
        /// The run.
        run: &'static str,
        /// The bound.
        max: f64,
    },
    /// `baseline`'s median seconds over `run`'s: restore at least `restore`, dump at least
    /// `dump` times faster.
    Faster {
        /// The run that should be faster.
        run: &'static str,
        /// The run it is compared with.
        baseline: &'static str,
        /// Bound on the restore.
        restore: f64,
        /// Bound on the dump.
        dump: f64,
    },
    /// The run's peak extra memory at most its staging buffers and `slack_mib` (beside the
    /// peak per GPU of `compare`, for the reader).
    SameMemory {
        /// The run.
        run: &'static str,
        /// The run shown beside it.
        compare: &'static str,
        /// MiB allowed beyond the staging buffers.
        slack_mib: u64,
    },
    /// Our throughput over the raw I/O's, medians: dump at least `dump`, restore at least
    /// `restore` (`None`: that direction is not judged, its figure still shown).
    RawRatio {
        /// The run.
        run: &'static str,
        /// Bound on the dump.
        dump: Option<f64>,
        /// Bound on the restore.
        restore: Option<f64>,
    },
}

/// Every target.
pub(crate) const TARGETS: &[Check] = &[
    Check::Speedup {
        run: "gpu1",
        min: 1.5,
    },
    Check::Speedup {
        run: "gpu1-sync",
        min: 1.5,
    },
    Check::Speedup {
        run: "default",
        min: 1.0,
    },
    Check::Memory {
        run: "default",
        slack_mib: 1,
        largest_mib: 256,
    },
    Check::PluginCpu {
        run: "default",
        direction: Direction::Dump,
        max: 1.35,
    },
    Check::PluginCpu {
        run: "default",
        direction: Direction::Restore,
        max: 1.35,
    },
    Check::OnDisk {
        run: "zeros",
        max: 0.3,
    },
    Check::Faster {
        run: "zeros",
        baseline: "gpu1",
        restore: 2.0,
        dump: 1.3,
    },
    Check::SameMemory {
        run: "big",
        compare: "default",
        slack_mib: 1,
    },
    Check::RawRatio {
        run: "sync",
        dump: Some(0.85),
        restore: Some(0.9),
    },
    // Issue 29's: the restore from the disk of one GPU against the raw read.
    Check::RawRatio {
        run: "gpu1-sync",
        dump: None,
        restore: Some(0.85),
    },
];

/// The run named `name` (every name a target uses is in [`RUNS`]: a test checks it).
pub(super) fn run(name: &str) -> &'static RunConfig {
    RUNS.iter().find(|r| r.name == name).unwrap_or(&RUNS[0])
}

impl Check {
    /// The runs the target is judged on.
    pub(super) fn runs(&self) -> Vec<&'static str> {
        match *self {
            Check::Faster { run, baseline, .. } => vec![run, baseline],
            Check::SameMemory { run, compare, .. } => vec![run, compare],
            Check::Speedup { run, .. }
            | Check::Memory { run, .. }
            | Check::PluginCpu { run, .. }
            | Check::OnDisk { run, .. }
            | Check::RawRatio { run, .. } => vec![run],
        }
    }

    /// The target in words, its bounds included.
    pub(crate) fn describe(&self) -> String {
        match *self {
            Check::Speedup { run: r, min } if min <= 1.0 => format!(
                "{}: never slower than upstream (speedup >= {min:.1}), medians",
                run(r).label
            ),
            Check::Speedup { run: r, min } => format!(
                "{}: speedup over upstream >= {min} (dump, restore), medians",
                run(r).label
            ),
            Check::Memory {
                run: r, slack_mib, ..
            } => format!(
                "{}: peak extra memory, ours <= staging + {slack_mib} MiB, upstream's >= largest \
                 BO (every run)",
                run(r).label
            ),
            Check::PluginCpu {
                run: r,
                direction,
                max,
            } => format!(
                "{}: plugin CPU per GiB <= {max}x the {}'s ({}), median",
                run(r).label,
                direction.raw(),
                direction.name()
            ),
            Check::OnDisk { run: r, max } => format!(
                "{}: bytes on disk <= {max} of the payload (every run)",
                run(r).label
            ),
            Check::Faster {
                run: r,
                baseline,
                restore,
                dump,
            } => format!(
                "{} against {}: restore >= {restore}x, dump >= {dump}x faster, median seconds",
                run(r).label,
                run(baseline).label,
            ),
            Check::SameMemory { run: r, .. } => format!("{}: same peak extra memory", run(r).label),
            Check::RawRatio {
                run: r,
                dump,
                restore,
            } => {
                let bounds: Vec<String> = [
                    dump.map(|b| format!("dump >= {b} of raw write")),
                    restore.map(|b| format!("restore >= {b} of raw read")),
                ]
                .into_iter()
                .flatten()
                .collect();
                format!("{}, median: {}", run(r).label, bounds.join(", "))
            }
        }
    }
}

/// `amdgpu-cr bench --targets`: the runs and the targets.
#[derive(Debug, Serialize)]
pub(crate) struct TargetsReport {
    /// The configurations.
    pub(crate) runs: &'static [RunConfig],
    /// The targets.
    pub(crate) targets: &'static [Check],
}

impl TargetsReport {
    /// The table of this build.
    #[must_use]
    pub(crate) fn new() -> Self {
        Self {
            runs: RUNS,
            targets: TARGETS,
        }
    }
}

impl Default for TargetsReport {
    fn default() -> Self {
        Self::new()
    }
}

impl Report for TargetsReport {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "targets (each judged on the runs named):")?;
        for t in self.targets {
            writeln!(out, "  {} [{}]", t.describe(), t.runs().join(", "))?;
        }
        writeln!(out, "runs (amdgpu-cr bench ARGS --json):")?;
        for r in self.runs {
            let line = format!(
                "  {:<10} {:<5} {}{}",
                r.name,
                if r.repeated { "each" } else { "once" },
                r.args.join(" "),
                if r.heavy { "  (8 GiB of memory)" } else { "" }
            );
            writeln!(out, "{}", line.trim_end())?;
        }
        Ok(())
    }

    fn outcome(&self) -> Outcome {
        Outcome::Success
    }
}

/// `amdgpu-cr bench --plan`: one line per run for `scripts/bench-targets.sh`,
/// `NAME each|once light|heavy ARGS...`.
///
/// # Errors
///
/// The writer's.
pub(crate) fn write_plan(out: &mut dyn Write) -> io::Result<()> {
    for r in RUNS {
        let mut line = vec![
            r.name,
            if r.repeated { "each" } else { "once" },
            if r.heavy { "heavy" } else { "light" },
        ];
        line.extend(r.args);
        writeln!(out, "{}", line.join(" "))?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Bench {
        #[command(flatten)]
        args: super::super::BenchArgs,
    }

    #[test]
    fn every_run_parses_and_every_target_names_runs_of_the_table() {
        for r in RUNS {
            let argv = ["bench"].iter().chain(r.args).chain(&["--json"]);
            assert!(
                Bench::try_parse_from(argv).is_ok(),
                "{}: {:?}",
                r.name,
                r.args
            );
        }
        for t in TARGETS {
            for name in t.runs() {
                assert!(RUNS.iter().any(|r| r.name == name), "{name} of {t:?}");
            }
        }
    }

    #[test]
    fn the_plan_has_one_line_per_run_in_the_table_order() {
        let mut out = Vec::new();
        write_plan(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let names: Vec<&str> = text.lines().filter_map(|l| l.split(' ').next()).collect();
        assert_eq!(names, RUNS.iter().map(|r| r.name).collect::<Vec<_>>());
        assert!(text.contains("big once heavy --bo-size 8G"), "{text}");
    }
}
