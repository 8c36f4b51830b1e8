//! `amdgpu-cr bench --judge DIR`: every target of [`TARGETS`] judged on the runs' JSON reports
//! in `DIR` (`NAME-1.json` .. `NAME-N.json` of a repeated run, `NAME.json` of one run once), on
//! the median of its figure over the repetitions: on the 2-vCPU VMs the bench runs on, the same
//! run differs by up to 2-3x from one minute to the next (`docs/bench.md`).

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::report::BenchReport;
use super::targets::{run, Check, Direction, RunConfig, RUNS, TARGETS};
use crate::{Outcome, Report};

const MIB: f64 = 1024.0 * 1024.0;
const GIB: f64 = MIB * 1024.0;

/// Why the runs could not be judged.
#[derive(Debug, thiserror::Error)]
pub enum JudgeError {
    /// A report could not be read or parsed.
    #[error("reading the bench report {}: {source}", path.display())]
    Report {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: io::Error,
    },
    /// The directory of the reports is not there (or not a directory).
    #[error(
        "--judge {}: {source}; give the directory the runs wrote their reports into \
         (scripts/bench-targets.sh's --dir)",
        dir.display()
    )]
    Directory {
        /// The directory.
        dir: PathBuf,
        /// Why it cannot be read.
        #[source]
        source: io::Error,
    },
    /// A repeated run has no report at all.
    #[error("no report of run {run} in {} ({run}-1.json ...)", dir.display())]
    Missing {
        /// The run.
        run: &'static str,
        /// The directory.
        dir: PathBuf,
    },
}

/// One target's verdict.
#[derive(Debug, Serialize)]
pub(crate) struct Verdict {
    /// The target.
    pub(crate) target: String,
    /// `met`, `NOT MET`, or `skipped`.
    pub(crate) result: &'static str,
    /// The figures it was judged on.
    pub(crate) figures: String,
}

/// `amdgpu-cr bench --judge DIR`: every target's verdict.
#[derive(Debug, Serialize)]
pub(crate) struct Judgement {
    /// Repetitions found of the repeated runs.
    pub(crate) repetitions: usize,
    /// The verdicts, in the order of [`TARGETS`].
    pub(crate) verdicts: Vec<Verdict>,
}

impl Report for Judgement {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        let w = self
            .verdicts
            .iter()
            .map(|v| v.target.len())
            .max()
            .unwrap_or(0);
        writeln!(out, "{:<w$}  {:<8}  figures", "target", "result")?;
        for v in &self.verdicts {
            writeln!(out, "{:<w$}  {:<8}  {}", v.target, v.result, v.figures)?;
        }
        Ok(())
    }

    fn outcome(&self) -> Outcome {
        Outcome::from_bool(self.verdicts.iter().all(|v| v.result != "NOT MET"))
    }
}

/// The median (of an even count, the mean of the middle two); 0 of none.
fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// ` (a, b, c)`: every repetition's figure, when there are several.
fn each(xs: &[f64], precision: usize) -> String {
    if xs.len() < 2 {
        return String::new();
    }
    let all: Vec<String> = xs.iter().map(|x| format!("{x:.precision$}")).collect();
    format!(" ({})", all.join(", "))
}

#[allow(clippy::cast_precision_loss)]
fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB
}

#[allow(clippy::cast_precision_loss)]
fn gib(bytes: u64) -> f64 {
    bytes as f64 / GIB
}

/// The reports found in a directory, by run.
struct Reports {
    dir: PathBuf,
    repetitions: usize,
}

impl Reports {
    fn read(path: &Path) -> Result<Option<BenchReport>, JudgeError> {
        let text = match std::fs::read(path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(JudgeError::Report {
                    path: path.to_owned(),
                    source,
                })
            }
        };
        serde_json::from_slice(&text)
            .map(Some)
            .map_err(|e| JudgeError::Report {
                path: path.to_owned(),
                source: e.into(),
            })
    }

    /// Every repetition of `run` (or its one report), none when it was not run.
    fn of(&self, run: &'static RunConfig) -> Result<Vec<BenchReport>, JudgeError> {
        if !run.repeated {
            return Ok(Self::read(&self.dir.join(format!("{}.json", run.name)))?
                .into_iter()
                .collect());
        }
        let mut all = Vec::new();
        for i in 1..=self.repetitions {
            let path = self.dir.join(format!("{}-{i}.json", run.name));
            all.extend(Self::read(&path)?);
        }
        if all.is_empty() {
            return Err(JudgeError::Missing {
                run: run.name,
                dir: self.dir.clone(),
            });
        }
        Ok(all)
    }
}

/// Judges every target on the reports in `dir` (as `scripts/bench-targets.sh --out DIR` leaves
/// them).
///
/// # Errors
///
/// [`JudgeError`] when a report is unreadable or a repeated run has none.
pub(crate) fn judge(dir: &Path) -> Result<Judgement, JudgeError> {
    // Before: a missing directory judged every target "skipped", exit 0.
    std::fs::read_dir(dir).map_err(|source| JudgeError::Directory {
        dir: dir.to_owned(),
        source,
    })?;
    let first = RUNS.iter().find(|r| r.repeated).map_or("", |r| r.name);
    let repetitions = (1..)
        .take_while(|i| dir.join(format!("{first}-{i}.json")).exists())
        .count();
    let reports = Reports {
        dir: dir.to_owned(),
        repetitions,
    };
    let mut verdicts = Vec::new();
    for t in TARGETS {
        let target = t.describe();
        let verdict = match judge_one(t, &reports)? {
            Some((ok, figures)) => Verdict {
                target,
                result: if ok { "met" } else { "NOT MET" },
                figures,
            },
            None => Verdict {
                target,
                result: "skipped",
                figures: "not run (--skip-8g)".into(),
            },
        };
        verdicts.push(verdict);
    }
    Ok(Judgement {
        repetitions,
        verdicts,
    })
}

fn run_label(name: &str) -> &'static str {
    run(name).label
}

/// Whether `t` is met and the figures it was judged on; `None` when its run was not run.
fn judge_one(t: &Check, reports: &Reports) -> Result<Option<(bool, String)>, JudgeError> {
    let of = |name| reports.of(run(name));
    let med = |rs: &[BenchReport], f: &dyn Fn(&BenchReport) -> f64| {
        median(&rs.iter().map(f).collect::<Vec<_>>())
    };
    Ok(Some(match *t {
        Check::Speedup { run, min } => {
            let rs = of(run)?;
            let speedups = |f: fn(&super::report::Speedup) -> f64| -> Vec<f64> {
                rs.iter()
                    .map(|r| r.speedup.as_ref().map_or(0.0, f))
                    .collect()
            };
            let (sd, sr) = (speedups(|s| s.dump), speedups(|s| s.restore));
            let up = |f: fn(&super::report::Upstream) -> f64| {
                med(&rs, &|r| r.upstream.as_ref().map_or(0.0, f))
            };
            (
                median(&sd) >= min && median(&sr) >= min,
                format!(
                    "dump {:.2}x{}, restore {:.2}x{}; median seconds ours {:.2} / {:.2}, \
                     upstream {:.2} / {:.2}",
                    median(&sd),
                    each(&sd, 2),
                    median(&sr),
                    each(&sr, 2),
                    med(&rs, &|r| r.dump.seconds),
                    med(&rs, &|r| r.restore.seconds),
                    up(|u| u.dump.seconds),
                    up(|u| u.restore.seconds),
                ),
            )
        }
        Check::Memory {
            run,
            slack_mib,
            largest_mib,
        } => {
            let rs = of(run)?;
            let ours = rs
                .iter()
                .map(|r| r.peak_extra_anon_bytes)
                .max()
                .unwrap_or(0);
            let staging = rs.first().map_or(0, |r| r.staging_bytes);
            let up = rs
                .iter()
                .map(|r| {
                    r.upstream.as_ref().map_or(0, |u| {
                        u.dump
                            .peak_extra_anon_bytes
                            .max(u.restore.peak_extra_anon_bytes)
                    })
                })
                .min()
                .unwrap_or(0);
            (
                ours <= staging + (slack_mib << 20) && up >= largest_mib << 20,
                format!(
                    "ours {:.1} MiB at most (staging {:.0} MiB), upstream {:.1} MiB at least",
                    mib(ours),
                    mib(staging),
                    mib(up)
                ),
            )
        }
        Check::PluginCpu {
            run,
            direction,
            max,
        } => {
            let rs = of(run)?;
            let cpu = |r: &BenchReport| match direction {
                Direction::Dump => r.cpu.dump.clone(),
                Direction::Restore => r.cpu.restore.clone(),
            };
            let ratios: Vec<f64> = rs
                .iter()
                .map(|r| cpu(r).plugin_seconds / cpu(r).raw_seconds.max(1e-9))
                .collect();
            let per_gib = gib(rs.first().map_or(0, |r| r.dump.bytes)).max(1e-9);
            (
                median(&ratios) <= max,
                format!(
                    "{:.2}x{}; medians {:.3} vs {:.3} s/GiB (engine {:.3} s/GiB)",
                    median(&ratios),
                    each(&ratios, 2),
                    med(&rs, &|r| cpu(r).plugin_seconds) / per_gib,
                    med(&rs, &|r| cpu(r).raw_seconds) / per_gib,
                    med(&rs, &|r| cpu(r).engine_seconds) / per_gib,
                ),
            )
        }
        Check::OnDisk { run, max } => {
            let rs = of(run)?;
            #[allow(clippy::cast_precision_loss)]
            let disk = rs
                .iter()
                .map(|r| r.dump.bytes_on_disk.unwrap_or(u64::MAX) as f64 / r.dump.bytes as f64)
                .fold(0.0, f64::max);
            (
                disk <= max,
                format!(
                    "{disk:.3} of {:.1} GiB at most",
                    gib(rs.first().map_or(0, |r| r.dump.bytes))
                ),
            )
        }
        Check::Faster {
            run,
            baseline,
            restore,
            dump,
        } => {
            let (rs, base) = (of(run)?, of(baseline)?);
            let rz = med(&base, &|r| r.restore.seconds) / med(&rs, &|r| r.restore.seconds);
            let dz = med(&base, &|r| r.dump.seconds) / med(&rs, &|r| r.dump.seconds);
            (
                rz >= restore && dz >= dump,
                format!("restore {rz:.2}x, dump {dz:.2}x"),
            )
        }
        Check::SameMemory {
            run,
            compare,
            slack_mib,
        } => {
            let Some(b) = of(run)?.into_iter().next() else {
                return Ok(None);
            };
            let others = of(compare)?;
            // Both stage through the same buffers per GPU: the ratio of their staging is the
            // ratio of their GPUs.
            let gpus = others
                .first()
                .map_or(1, |o| (o.staging_bytes / b.staging_bytes.max(1)).max(1));
            let peak = others.iter().map(|r| r.peak_extra_anon_bytes).max();
            (
                b.peak_extra_anon_bytes <= b.staging_bytes + (slack_mib << 20),
                format!(
                    "{:.1} MiB (staging {:.0} MiB; {}: {:.1} MiB per GPU)",
                    mib(b.peak_extra_anon_bytes),
                    mib(b.staging_bytes),
                    run_label(compare),
                    mib(peak.unwrap_or(0) / gpus)
                ),
            )
        }
        Check::RawRatio { run, dump, restore } => {
            let rs = of(run)?;
            let dr: Vec<f64> = rs.iter().map(|r| r.dump.ratio).collect();
            let rr: Vec<f64> = rs.iter().map(|r| r.restore.ratio).collect();
            (
                dump.is_none_or(|b| median(&dr) >= b) && restore.is_none_or(|b| median(&rr) >= b),
                format!(
                    "dump {:.2}{}, restore {:.2}{}",
                    median(&dr),
                    each(&dr, 2),
                    median(&rr),
                    each(&rr, 2)
                ),
            )
        }
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::report::{Cpu, CpuPhase, Detail, Phase, Speedup, Upstream, UpstreamPhase};
    use super::*;
    use rstest::rstest;

    #[test]
    fn medians_are_those_of_statistics() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }

    /// A report of `gpus` GPUs in which every bound of the targets is met with `margin` above 1
    /// and missed with `margin` below 1 / 1.35.
    fn report(gpus: u64, margin: f64) -> BenchReport {
        let staging = (32 << 20) * gpus;
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let bytes = |x: f64| x as u64;
        let payload = 2u64 << 30;
        #[allow(clippy::cast_precision_loss)]
        let phase = |seconds: f64| Phase {
            bytes: payload,
            seconds,
            throughput: 1.0,
            raw_throughput: 1.0,
            ratio: margin,
            bytes_on_disk: Some(bytes(payload as f64 * 0.3 / margin)),
        };
        let up = |seconds| UpstreamPhase {
            seconds,
            throughput: 1.0,
            peak_extra_anon_bytes: bytes(MIB * 512.0 * margin),
        };
        let cpu = CpuPhase {
            engine_seconds: 1.0,
            plugin_seconds: 0.5 / margin,
            raw_seconds: 0.5,
        };
        BenchReport {
            dump: phase(1.0),
            restore: phase(1.0),
            peak_extra_anon_bytes: staging + bytes(MIB / margin),
            staging_bytes: staging,
            checksums: true,
            upstream: Some(Upstream {
                dump: up(2.0 * margin),
                restore: up(2.0 * margin),
            }),
            speedup: Some(Speedup {
                dump: 2.0 * margin,
                restore: 2.0 * margin,
            }),
            cpu: Cpu {
                dump: cpu.clone(),
                restore: cpu,
            },
            detail: Detail::default(),
        }
    }

    /// Writes every run's reports into a new directory (the 8 GiB one unless `skip_big`), with
    /// the zero run `zeros_faster` times faster than the 1-GPU one.
    fn runs(margin: f64, zeros_faster: f64, skip_big: bool) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for r in RUNS {
            let gpus = if r.args.contains(&"1") { 1 } else { 2 };
            let mut rep = report(gpus, margin);
            if r.name == "zeros" {
                rep.dump.seconds /= zeros_faster;
                rep.restore.seconds /= zeros_faster;
            }
            let names = if r.repeated {
                (1..=3).map(|i| format!("{}-{i}.json", r.name)).collect()
            } else if skip_big {
                Vec::new()
            } else {
                vec![format!("{}.json", r.name)]
            };
            for name in names {
                let file = std::fs::File::create(dir.path().join(name)).unwrap();
                serde_json::to_writer(file, &rep).unwrap();
            }
        }
        dir
    }

    #[rstest]
    #[case::all_met(1.1, 3.0, false, "met", Outcome::Success)]
    #[case::all_missed(0.4, 1.1, false, "NOT MET", Outcome::Negative)]
    fn every_target_is_judged_on_its_runs(
        #[case] margin: f64,
        #[case] zeros_faster: f64,
        #[case] skip_big: bool,
        #[case] result: &str,
        #[case] outcome: Outcome,
    ) {
        let dir = runs(margin, zeros_faster, skip_big);
        let j = judge(dir.path()).unwrap();
        assert_eq!(j.repetitions, 3);
        assert_eq!(j.verdicts.len(), TARGETS.len());
        for v in &j.verdicts {
            assert_eq!(v.result, result, "{v:?}");
        }
        assert_eq!(j.outcome(), outcome);
    }

    #[test]
    fn without_the_8_gib_run_its_target_is_skipped_not_missed() {
        let dir = runs(1.1, 3.0, true);
        let j = judge(dir.path()).unwrap();
        let skipped: Vec<_> = j
            .verdicts
            .iter()
            .filter(|v| v.result == "skipped")
            .collect();
        assert_eq!(skipped.len(), 1, "{:?}", j.verdicts);
        assert!(skipped[0].target.starts_with("one 8 GiB BO"));
        assert_eq!(j.outcome(), Outcome::Success);
    }

    #[test]
    fn a_direction_without_a_bound_is_shown_not_judged() {
        let dir = runs(1.1, 3.0, false);
        // The 1-GPU `--sync` runs' dumps far below the raw write: only the restore is bounded
        // there (the dump's ratio is judged on the 2-GPU runs).
        for i in 1..=3 {
            let mut rep = report(1, 1.1);
            rep.dump.ratio = 0.1;
            let file = std::fs::File::create(dir.path().join(format!("gpu1-sync-{i}.json")));
            serde_json::to_writer(file.unwrap(), &rep).unwrap();
        }
        let j = judge(dir.path()).unwrap();
        let v = j
            .verdicts
            .iter()
            .find(|v| {
                v.target
                    .starts_with("1 GPU, --sync, median: restore >= 0.85")
            })
            .unwrap_or_else(|| panic!("{:?}", j.verdicts));
        assert_eq!(v.result, "met", "{v:?}");
        assert!(v.figures.starts_with("dump 0.10"), "{v:?}");
    }

    #[test]
    fn a_directory_without_the_runs_is_an_error_naming_the_first_run() {
        let dir = tempfile::tempdir().unwrap();
        let err = judge(dir.path()).unwrap_err().to_string();
        assert!(err.contains("no report of run gpu1"), "{err}");
    }
}
