//! One run of the bench, in its order (`docs/bench.md`): on the write side a raw write, our
//! dump, a raw write; on the read side a raw read, our restore, a raw read; then upstream's dump
//! and restore; each phase from the same memory state.

use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use amdgpu_plugin::criu::Settings;
use harness::workload::{Manifest, Spec};
use harness::{ImageIds, RestoredTarget, SimNode, Target};
use kfd_sim::Preset;

use super::files::{drop_caches, files, image_files, on_disk, remove, settle, settle_and_drop};
use super::measure::{measure, mem_available, with_cpu, Cost};
use super::raw::{best, load_into_cache, raw_paths, raw_read, raw_write};
use super::report::{
    per_second, BenchReport, Cpu, CpuPhase, Detail, Phase, Speedup, Upstream, UpstreamPhase,
};
use super::{BenchArgs, BenchError};
use crate::upstream;
use crate::HumanSize;

/// What turns an I/O error of `what` into a [`BenchError`].
fn io_err(what: &'static str) -> impl FnOnce(io::Error) -> BenchError {
    move |source| BenchError::Io { what, source }
}

/// A node of `gpus` MI210s.
pub(super) fn preset(gpus: usize) -> Result<Preset, BenchError> {
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

/// What a run is made of, from its arguments.
struct Plan {
    gpus: usize,
    preset: Preset,
    bos_per_gpu: usize,
    bo_size: u64,
    spec: Spec,
    settings: Settings,
    /// `KFD_MAX_BUFFER_SIZE`, which upstream's host buffer follows too.
    max_buffer: Option<u64>,
    /// Upstream's host buffers, all GPUs together.
    upstream_buffers: u64,
    sync: bool,
}

impl Plan {
    fn new(args: &BenchArgs) -> Result<Self, BenchError> {
        let gpus = args.gpus;
        let per_gpu = args.size / gpus as u64;
        if per_gpu > super::MAX_PER_GPU {
            return Err(BenchError::Usage(format!(
                "--size {} over {} is {} per GPU, more than the {} an MI210 of the bench's node \
                 holds (64 GiB of VRAM less 1 GiB); give a smaller --size or more --gpus",
                HumanSize(args.size),
                crate::count(gpus, "GPU", "GPUs"),
                HumanSize(per_gpu),
                HumanSize(super::MAX_PER_GPU)
            )));
        }
        if args.bo_size > per_gpu {
            return Err(BenchError::Usage(format!(
                "--bo-size {} is larger than the {} of buffers per GPU (--size {} over {}); give \
                 a smaller --bo-size or a larger --size",
                HumanSize(args.bo_size),
                HumanSize(per_gpu),
                HumanSize(args.size),
                crate::count(gpus, "GPU", "GPUs")
            )));
        }
        let bo_size = args.bo_size;
        let bos_per_gpu = usize::try_from(per_gpu / bo_size).unwrap_or(usize::MAX);
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // 0..=1000
        let untouched_permille = (args.zero_fraction.clamp(0.0, 1.0) * 1000.0).round() as u32;
        let spec = Spec {
            untouched_permille,
            ..Spec::new(1, vec![bo_size; bos_per_gpu], Vec::new())
        };
        let settings = Settings {
            checksums: !args.no_checksums,
            // Durable dumps go to the disk as they are written (AMDGPU_CR_WRITE_BEHIND).
            write_behind: args.sync,
            ..Settings::from_env(false)
        };
        let max_buffer = topology::options::max_buffer_size_from_lookup(|k| std::env::var(k).ok())
            .unwrap_or(None);
        let upstream_buffers = upstream::bounce_bytes(spec.vram.iter().copied(), max_buffer)
            .saturating_mul(gpus as u64);
        Ok(Self {
            gpus,
            preset: preset(gpus)?,
            bos_per_gpu,
            bo_size,
            spec,
            settings,
            max_buffer,
            upstream_buffers,
            sync: args.sync,
        })
    }

    /// Why upstream's data path will not run, if it will not: `--no-upstream`, or host buffers
    /// that would take more than half of the memory available.
    fn upstream_skipped(&self, no_upstream: bool) -> Option<String> {
        if no_upstream {
            return Some("--no-upstream".to_owned());
        }
        let available = mem_available();
        (self.upstream_buffers > available / 2).then(|| {
            format!(
                "its host buffers, {} (the largest buffer of each GPU), would take more than \
                 half of the {} of memory available",
                HumanSize(self.upstream_buffers),
                HumanSize(available)
            )
        })
    }
}

/// The bench's directory: ours (images and raw files), and upstream's pages files apart from
/// ours (same names) in a directory inside it.
struct BenchDir {
    temp: crate::interrupt::ScratchDir,
    up_dir: PathBuf,
}

impl BenchDir {
    fn new(at: Option<&Path>) -> Result<Self, BenchError> {
        let parent = at.map_or_else(std::env::temp_dir, Path::to_path_buf);
        // An interrupt removes it with all the bench wrote.
        let temp = crate::interrupt::ScratchDir::new(&parent, "amdgpu-cr-bench-")
            .map_err(io_err("creating a directory for the bench"))?;
        let up_dir = temp.path().join("upstream");
        std::fs::create_dir(&up_dir).map_err(io_err("creating a directory for the bench"))?;
        Ok(Self { temp, up_dir })
    }

    fn ours(&self) -> &Path {
        self.temp.path()
    }

    /// [`settle_and_drop`] of both directories.
    fn settle_both(&self) -> io::Result<()> {
        settle_and_drop(self.ours())?;
        settle_and_drop(&self.up_dir)
    }

    /// Prepares a read phase. With `--sync` (from the disk) every file's page cache is dropped.
    /// Else (from the page cache) the phase's files `load` are read into it first, untimed, and
    /// the files of the phase before, `done`, leave it, so that a phase that allocates new VRAM
    /// starts right after they did.
    fn prepare(&self, sync: bool, load: &[PathBuf], done: &[PathBuf]) -> io::Result<()> {
        if sync {
            drop_caches(&files(self.ours())?)?;
            drop_caches(&files(&self.up_dir)?)
        } else {
            load_into_cache(load)?;
            drop_caches(done)
        }
    }
}

/// Time and CPU time of a raw run.
type Timed = (Duration, Duration);

/// The write side: our dump between two raw writes.
struct Written {
    ids: ImageIds,
    dump_time: Duration,
    dump: Cost,
    raw: [Timed; 2],
    /// The checkpoint's files, and what the file system holds for them.
    images: Vec<PathBuf>,
    bytes_on_disk: u64,
}

/// Raw write, dump, raw write; each right after the previous write phase's files were synced
/// and left the page cache, the first after an untimed write of the same size (a primer). The
/// second raw write's files (`raw2`) stay for the raw reads.
fn write_side(
    plan: &Plan,
    d: &BenchDir,
    (src, target): (&SimNode, &Target),
    bytes: u64,
    raw2: &[PathBuf],
) -> Result<Written, BenchError> {
    let dir = d.ours();
    settle(dir).map_err(io_err("syncing the bench directory"))?;
    let primer = raw_paths(dir, 0, plan.gpus);
    raw_write(&primer, bytes, false, plan.settings.staging.buffer_size)
        .map_err(io_err("writing the primer"))?;
    settle_and_drop(dir).map_err(io_err("syncing the bench directory"))?;
    remove(&primer).map_err(io_err("removing the primer"))?;
    let raw1 = raw_paths(dir, 1, plan.gpus);
    let (raw_w1, cpu_w1) =
        with_cpu(|| raw_write(&raw1, bytes, plan.sync, plan.settings.staging.buffer_size));
    let raw_w1 = raw_w1.map_err(io_err("measuring the raw write"))?;
    settle_and_drop(dir).map_err(io_err("syncing the bench directory"))?;
    remove(&raw1).map_err(io_err("removing the raw files"))?;
    let (dumped, dump) = measure(&src.machine, || -> Result<_, BenchError> {
        let (ids, mut dump_time) = harness::checkpoint(src, target, dir, &plan.settings)?;
        if plan.sync {
            let start = Instant::now();
            settle(dir).map_err(io_err("syncing the image files"))?;
            dump_time += start.elapsed();
        }
        Ok((ids, dump_time))
    });
    let (ids, dump_time) = dumped?;
    settle_and_drop(dir).map_err(io_err("syncing the bench directory"))?;
    let images = image_files(dir).map_err(io_err("listing the image files"))?;
    let bytes_on_disk = on_disk(&images).map_err(io_err("measuring the image files"))?;
    let (raw_w2, cpu_w2) =
        with_cpu(|| raw_write(raw2, bytes, plan.sync, plan.settings.staging.buffer_size));
    let raw_w2 = raw_w2.map_err(io_err("measuring the raw write"))?;
    d.settle_both()
        .map_err(io_err("syncing the bench directory"))?;
    Ok(Written {
        ids,
        dump_time,
        dump,
        raw: [(raw_w1, cpu_w1), (raw_w2, cpu_w2)],
        images,
        bytes_on_disk,
    })
}

/// Raw read, restore, raw read (of the second raw write's files, `raw2`); the restored
/// workload verified. Returns the restore's time and cost, the raw reads', and the restored
/// node with its workload.
fn read_side(
    plan: &Plan,
    d: &BenchDir,
    w: &Written,
    source: (SimNode, Target),
    raw2: &[PathBuf],
    manifest: &Manifest,
) -> Result<ReadSide, BenchError> {
    d.prepare(plan.sync, raw2, &[])
        .map_err(io_err("preparing the raw read"))?;
    let (raw_r1, cpu_r1) = with_cpu(|| raw_read(raw2, plan.settings.staging.buffer_size));
    let raw_r1 = raw_r1.map_err(io_err("measuring the raw read"))?;
    // The source's VRAM is freed just before the restore allocates its own, as the restored
    // node's is before upstream's restore: both restores start with the same memory freed.
    drop(source);
    let dst = SimNode::new(&plan.preset)?;
    d.prepare(plan.sync, &w.images, raw2)
        .map_err(io_err("preparing the restore"))?;
    let (restored, restore) = measure(&dst.machine, || {
        harness::restore(&dst, d.ours(), &w.ids, &plan.settings)
    });
    let (target_back, restore_time) = restored?;
    d.prepare(plan.sync, raw2, &w.images)
        .map_err(io_err("preparing the raw read"))?;
    let (raw_r2, cpu_r2) = with_cpu(|| raw_read(raw2, plan.settings.staging.buffer_size));
    let raw_r2 = raw_r2.map_err(io_err("measuring the raw read"))?;
    target_back.verify(manifest)?;
    Ok(ReadSide {
        time: restore_time,
        cost: restore,
        raw: [(raw_r1, cpu_r1), (raw_r2, cpu_r2)],
        restored: (dst, target_back),
    })
}

/// What the read side measured, and the restored workload (upstream dumps that one).
struct ReadSide {
    time: Duration,
    cost: Cost,
    raw: [Timed; 2],
    restored: (SimNode, RestoredTarget),
}

/// Upstream's dump and restore of the same process (as our restore left it, verified), after
/// the raw files and our pages files are gone (its restore reads our KFD image, which names the
/// same buffers); the restored workload verified.
fn upstream_side(
    plan: &Plan,
    d: &BenchDir,
    (src, target): (SimNode, RestoredTarget),
    w: &Written,
    raw2: &[PathBuf],
    manifest: &Manifest,
) -> Result<Upstream, BenchError> {
    let bytes = manifest.pattern_bytes();
    remove(raw2).map_err(io_err("removing the raw files"))?;
    let pages: Vec<PathBuf> = w
        .images
        .iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("amdgpu-pages-"))
        })
        .cloned()
        .collect();
    remove(&pages).map_err(io_err("removing the pages files"))?;
    d.settle_both()
        .map_err(io_err("syncing the bench directory"))?;
    let (dumped, dump) = measure(&src.machine, || -> Result<_, BenchError> {
        let mut took = upstream::dump(
            &src,
            (&target.process, target.kfd.as_fd()),
            &d.up_dir,
            w.ids.kfd,
            plan.max_buffer,
        )?;
        if plan.sync {
            let start = Instant::now();
            settle(&d.up_dir).map_err(io_err("syncing upstream's files"))?;
            took += start.elapsed();
        }
        Ok(took)
    });
    let dump_took = dumped?;
    d.settle_both()
        .map_err(io_err("syncing the bench directory"))?;
    drop(target);
    drop(src);
    let up_files = files(&d.up_dir).map_err(io_err("listing upstream's files"))?;
    let node = SimNode::new(&plan.preset)?;
    d.prepare(plan.sync, &up_files, &[])
        .map_err(io_err("preparing upstream's restore"))?;
    let (restored, restore) = measure(&node.machine, || {
        upstream::restore(&node, d.ours(), &d.up_dir, &w.ids, plan.max_buffer)
    });
    let (back, restore_took) = restored?;
    back.verify(manifest)?;
    Ok(Upstream {
        dump: UpstreamPhase::new(bytes, dump_took, dump.peak),
        restore: UpstreamPhase::new(bytes, restore_took, restore.peak),
    })
}

/// Runs the benchmark.
///
/// # Errors
///
/// [`BenchError`]: a node, a phase or a verification failed.
pub(crate) fn run_bench(args: &BenchArgs) -> Result<BenchReport, BenchError> {
    let plan = Plan::new(args)?;
    // The simulated nodes' topology directories go too when the bench is interrupted.
    let _topologies = crate::interrupt::remove_prefixed_on_interrupt(
        &std::env::temp_dir(),
        &kfd_sim::scratch::owned_prefix(harness::TOPOLOGY_DIR_BASE),
    );
    let d = BenchDir::new(args.dir.as_deref())?;
    let raw2 = raw_paths(d.ours(), 2, plan.gpus);
    // What runs, on stderr while it runs (a terminal only; not with --json).
    let phase = if args.json {
        indicatif::ProgressBar::hidden()
    } else {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.enable_steady_tick(Duration::from_millis(200));
        bar
    };
    phase.set_message("setting up the node and its workload");

    let src = SimNode::new(&plan.preset)?;
    let target = harness::start_target(&src, &plan.spec)?;
    let manifest = target.workload.manifest().clone();
    let bytes = manifest.pattern_bytes();
    phase.set_message(format!("dump and raw writes of {}", HumanSize(bytes)));
    let w = write_side(&plan, &d, (&src, &target), bytes, &raw2)?;
    let upstream_skipped = plan.upstream_skipped(args.no_upstream);
    phase.set_message(format!(
        "restore, verification and raw reads of {}",
        HumanSize(bytes)
    ));
    let ReadSide {
        time: restore_time,
        cost: restore_cost,
        raw: raw_r,
        restored,
    } = read_side(&plan, &d, &w, (src, target), &raw2, &manifest)?;
    // Upstream's dump, which comes last (so that the disk holds two sets of files at most),
    // dumps the workload our restore brought back.
    phase.set_message("upstream's data path: dump, restore, verification");
    let upstream_run = match upstream_skipped {
        Some(_) => None,
        None => Some(upstream_side(&plan, &d, restored, &w, &raw2, &manifest)?),
    };
    phase.finish_and_clear();
    drop(d);

    let [(raw_w1, cpu_w1), (raw_w2, cpu_w2)] = w.raw;
    let [(raw_r1, cpu_r1), (raw_r2, cpu_r2)] = raw_r;
    let dump = Phase {
        bytes_on_disk: Some(w.bytes_on_disk),
        ..Phase::new(bytes, w.dump_time, best(raw_w1, raw_w2))
    };
    let restore = Phase::new(bytes, restore_time, best(raw_r1, raw_r2));
    let speedup = upstream_run.as_ref().map(|u| Speedup {
        dump: u.dump.seconds / dump.seconds,
        restore: u.restore.seconds / restore.seconds,
    });
    let cpu_phase = |c: Cost, raw: Duration| CpuPhase {
        engine_seconds: c.engine.as_secs_f64(),
        plugin_seconds: c.cpu.saturating_sub(c.engine).as_secs_f64(),
        raw_seconds: raw.as_secs_f64(),
    };
    Ok(BenchReport {
        dump,
        restore,
        peak_extra_anon_bytes: w.dump.peak.max(restore_cost.peak),
        staging_bytes: plan.settings.staging.bytes() as u64 * plan.gpus as u64,
        checksums: plan.settings.checksums,
        upstream: upstream_run,
        speedup,
        cpu: Cpu {
            dump: cpu_phase(w.dump, cpu_w1.min(cpu_w2)),
            restore: cpu_phase(restore_cost, cpu_r1.min(cpu_r2)),
        },
        detail: Detail {
            gpus: plan.gpus,
            bos_per_gpu: plan.bos_per_gpu,
            bo_size: plan.bo_size,
            raw_writes: [per_second(bytes, raw_w1), per_second(bytes, raw_w2)],
            raw_reads: [per_second(bytes, raw_r1), per_second(bytes, raw_r2)],
            cpu_dump: w.dump.cpu.as_secs_f64(),
            cpu_raw_write: cpu_w1.min(cpu_w2).as_secs_f64(),
            cpu_restore: restore_cost.cpu.as_secs_f64(),
            cpu_raw_read: cpu_r1.min(cpu_r2).as_secs_f64(),
            sync: plan.sync,
            dir: args.dir.clone().unwrap_or_else(std::env::temp_dir),
            zero_fraction: f64::from(plan.spec.untouched_permille) / 1000.0,
            peaks: [w.dump.peak, restore_cost.peak],
            upstream_skipped,
            upstream_buffers: plan.upstream_buffers,
        },
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::Report;
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
            targets: false,
            plan: false,
            judge: None,
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
            targets: false,
            plan: false,
            judge: None,
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
            events: 1,
            ..Spec::new(3, vec![size], Vec::new())
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
        let (dumped, ours) = measure(&src.machine, || {
            harness::checkpoint(&src, &target, dir.path(), &settings)
        });
        let (ids, _) = dumped.unwrap();
        let (dumped, theirs) = measure(&src.machine, || {
            upstream::dump(
                &src,
                (&target.process, target.workload.kfd().as_fd()),
                up_dir.path(),
                ids.kfd,
                None,
            )
        });
        dumped.unwrap();
        let bound = (2 << 20) + (3 << 20);
        assert!(ours.peak <= bound, "our dump: {} extra bytes", ours.peak);
        assert!(
            theirs.peak >= BO,
            "upstream's dump: {} extra bytes",
            theirs.peak
        );
        drop(target);

        let dst = SimNode::new(&preset).unwrap();
        let (restored, ours) = measure(&dst.machine, || {
            harness::restore(&dst, dir.path(), &ids, &settings)
        });
        let (back, _) = restored.unwrap();
        back.verify(&manifest).unwrap();
        assert!(ours.peak <= bound, "our restore: {} extra bytes", ours.peak);
        let dst2 = SimNode::new(&preset).unwrap();
        let (restored, theirs) = measure(&dst2.machine, || {
            upstream::restore(&dst2, dir.path(), up_dir.path(), &ids, None)
        });
        let (back, _) = restored.unwrap();
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
            untouched_permille: 600,
            ..Spec::new(5, vec![3 << 20, 5 << 20], vec![1 << 20])
        };
        let settings = Settings::from_lookup(|_| None, false);
        let (dir, up_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let src = SimNode::new(&preset).unwrap();
        let target = harness::start_target(&src, &spec).unwrap();
        let manifest = target.workload.manifest().clone();
        let (ids, _) = harness::checkpoint(&src, &target, dir.path(), &settings).unwrap();
        upstream::dump(
            &src,
            (&target.process, target.workload.kfd().as_fd()),
            up_dir.path(),
            ids.kfd,
            Some(2 << 20),
        )
        .unwrap();
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
