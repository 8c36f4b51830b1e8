//! `kfd-simd`: the simulator's command line: list the topology presets, write a preset's sysfs
//! tree, and serve `/dev/kfd` plus its render nodes over CUSE (`serve`).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use kfd_sim::cuse::{CuseServer, ServeConfig, TermSignals};
use kfd_sim::preset::{Preset, BUILTIN};

#[derive(Parser)]
#[command(
    name = "kfd-simd",
    version,
    about = "Simulated amdkfd for gfx9: topology presets and sysfs trees",
    after_help = "Exit status: 0 done; 1 failed (a file it cannot write, a device it cannot \
                  serve); 2 usage error (an option's value, a preset it does not know), as \
                  amdgpu-cr's."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the built-in topology presets.
    Presets,
    /// Print a preset as a TOML file, optionally as a variant (other gpu ids, render minors,
    /// firmware), to edit or to serve with `--file`.
    Show {
        /// A built-in preset (see `kfd-simd presets`).
        name: String,
        /// Other gpu ids, one per GPU of the preset (decimal or 0x hex, comma-separated).
        #[arg(long, value_delimiter = ',', value_parser = parse_u32)]
        gpu_ids: Vec<u32>,
        /// Other render minors, one per GPU of the preset (comma-separated).
        #[arg(long, value_delimiter = ',')]
        render_minors: Vec<u32>,
        /// One MEC firmware version for every GPU.
        #[arg(long)]
        fw_version: Option<u32>,
    },
    /// Write a preset's /sys/class/kfd/kfd/topology tree into DIR.
    WriteTopology {
        /// A built-in preset (see `kfd-simd presets`).
        #[arg(long, conflicts_with = "file", required_unless_present = "file")]
        preset: Option<String>,
        /// A preset file (TOML, or JSON if it ends in .json).
        #[arg(long)]
        file: Option<PathBuf>,
        /// The directory to write (created if needed; a topology tree in it is replaced, a
        /// directory holding anything else is refused).
        dir: PathBuf,
    },
    /// Write the sysfs slice AMD's userspace reads (the KFD topology, the GPUs' PCI functions with
    /// their DRM minors, the amdgpu module), laid out like /sys, into DIR.
    WriteSysfs {
        /// A built-in preset (see `kfd-simd presets`).
        #[arg(long, conflicts_with = "file", required_unless_present = "file")]
        preset: Option<String>,
        /// A preset file (TOML, or JSON if it ends in .json).
        #[arg(long)]
        file: Option<PathBuf>,
        /// Also give each CUSE-served render node (devices/virtual/cuse/dri!renderD*) the device
        /// link of a DRM minor.
        #[arg(long)]
        cuse: bool,
        /// The directory to write (created if needed), standing for /sys.
        dir: PathBuf,
    },
    /// Serve /dev/kfd and one render node (/dev/dri/renderD*) per GPU over CUSE (needs root and
    /// /dev/cuse) until SIGTERM or SIGINT. Prints a `READY` line when every node exists.
    Serve {
        /// A built-in preset (see `kfd-simd presets`).
        #[arg(long, conflicts_with = "file", required_unless_present = "file")]
        preset: Option<String>,
        /// A preset file (TOML, or JSON if it ends in .json).
        #[arg(long)]
        file: Option<PathBuf>,
        /// Where to write the sysfs topology tree that clients read (AMDGPU_CR_TOPOLOGY_ROOT;
        /// a tree already there is replaced).
        #[arg(long)]
        topology_dir: PathBuf,
        /// Also write the sysfs slice AMD's userspace reads, laid out like /sys, into this
        /// directory (see `write-sysfs`; the CUSE render nodes get their device links), for
        /// ci/vm-lane.d/kfd.inc's mount_sim_sysfs to mount over /sys.
        #[arg(long)]
        sysfs_dir: Option<PathBuf>,
        /// The CUSE control device.
        #[arg(long, default_value = "/dev/cuse")]
        cuse: PathBuf,
        /// Device name of the KFD node under /dev.
        #[arg(long, default_value = "kfd")]
        kfd_name: String,
        /// Reader threads per device at most.
        #[arg(long, default_value_t = 32)]
        max_threads: usize,
        /// Seconds to wait for the device nodes to appear.
        #[arg(long, default_value_t = 10)]
        ready_timeout: u64,
        /// The control device of the kfd_bridge kernel module (ci/kmod): when it exists, the
        /// devices are served through the module's proxies, which add mmap and fds installed into
        /// the caller.
        #[arg(long, default_value = kfd_sim::cuse::BRIDGE_PATH)]
        bridge: PathBuf,
        /// Plain CUSE even when the kfd_bridge module is loaded.
        #[arg(long)]
        no_bridge: bool,
        /// The KFD interface version to report (MAJOR.MINOR, e.g. 1.7 for a kernel without
        /// checkpoint/restore); default: the simulator's own, 1.11.
        #[arg(long, value_parser = parse_version)]
        kfd_version: Option<kfd_abi::kfd::Version>,
        /// The kernel the drivers behave as: 6.1 (default), 6.18 (GEM handle listing, mapping
        /// info and handle change on the render nodes; KFD 1.18 with dma-buf export and runtime
        /// enable) or 7.2 (6.18 with KFD 1.23 and the handle change refused, EINVAL).
        #[arg(long, default_value = "6.1")]
        kernel: kfd_sim::Kernel,
    },
}

/// Why kfd-simd stopped: a usage error (exit 2, as amdgpu-cr's) or a failure (exit 1).
enum Failure {
    /// A value the command line gave that cannot be used.
    Usage(String),
    /// Something failed while doing what was asked.
    Failed(String),
}

impl From<String> for Failure {
    fn from(e: String) -> Self {
        Self::Failed(e)
    }
}

/// Exit status of a usage error.
const EXIT_USAGE: u8 = 2;

fn load_preset(preset: Option<String>, file: Option<PathBuf>) -> Result<Preset, Failure> {
    match (preset, file) {
        (Some(name), _) => Preset::by_name(&name).map_err(|e| Failure::Usage(e.to_string())),
        (None, Some(path)) => Preset::load(&path).map_err(|e| Failure::Failed(e.to_string())),
        (None, None) => Err(Failure::Usage(
            "give --preset NAME or --file PRESET.toml".into(),
        )),
    }
}

/// `values` as given for `flag`: one per GPU of `preset`, or none at all.
fn one_per_gpu(flag: &str, values: &[u32], preset: &Preset) -> Result<(), Failure> {
    let gpus = preset.gpus.len();
    if values.is_empty() || values.len() == gpus {
        return Ok(());
    }
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    Err(Failure::Usage(format!(
        "{flag}: {} given, but {} has {}; give one per GPU",
        plural(values.len(), "value", "values"),
        preset.name,
        plural(gpus, "GPU", "GPUs"),
    )))
}

struct Serve {
    preset: Option<String>,
    file: Option<PathBuf>,
    topology_dir: PathBuf,
    sysfs_dir: Option<PathBuf>,
    cfg: ServeConfig,
    ready_timeout: Duration,
}

fn serve(args: Serve) -> Result<(), Failure> {
    let preset = load_preset(args.preset, args.file)?;
    let topology = preset.to_topology().map_err(|e| e.to_string())?;
    if !args.cfg.cuse_path.exists() {
        // Before touching anything: the usual reason on development machines.
        return Err(Failure::Failed(
            kfd_sim::cuse::CuseError::NoCuse {
                path: args.cfg.cuse_path,
            }
            .to_string(),
        ));
    }
    topology::replace(&topology, &args.topology_dir).map_err(|e| e.to_string())?;
    if let Some(dir) = &args.sysfs_dir {
        let opts = kfd_sim::sysfs::SysfsOptions {
            cuse_render_nodes: true,
        };
        kfd_sim::sysfs::write(&topology, dir, opts).map_err(|e| e.to_string())?;
    }
    // Block the termination signals before any thread exists, so that only sigwait sees them.
    let signals = TermSignals::block().map_err(|e| format!("blocking signals: {e}"))?;
    let server = CuseServer::start(topology, &args.cfg).map_err(|e| e.to_string())?;
    server
        .wait_ready(args.ready_timeout)
        .map_err(|e| e.to_string())?;
    let devices = server.devices();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "kfd-simd: preset {} topology in {}",
        preset.name,
        args.topology_dir.display()
    );
    let _ = writeln!(
        out,
        "kfd-simd: clients set AMDGPU_CR_TOPOLOGY_ROOT={}{}",
        args.topology_dir.display(),
        devices
            .first()
            .filter(|d| d.path != std::path::Path::new("/dev/kfd"))
            .map(|d| format!(" AMDGPU_CR_KFD_PATH={}", d.path.display()))
            .unwrap_or_default()
    );
    if let Some(dir) = &args.sysfs_dir {
        let _ = writeln!(out, "kfd-simd: sysfs slice in {}", dir.display());
    }
    for d in &devices {
        match &d.backend {
            Some(b) => writeln!(
                out,
                "kfd-simd: serving {} (kfd_bridge proxy of {})",
                d.path.display(),
                b.display()
            ),
            None => writeln!(out, "kfd-simd: serving {}", d.path.display()),
        }
        .ok();
    }
    let paths: Vec<String> = devices
        .iter()
        .map(|d| d.path.display().to_string())
        .collect();
    let _ = writeln!(out, "READY pid={} {}", std::process::id(), paths.join(" "));
    let _ = out.flush();
    drop(out);
    let sig = signals
        .wait()
        .map_err(|e| format!("waiting for signals: {e}"))?;
    log::info!("kfd-simd: signal {sig}, stopping");
    server.shutdown();
    // Whoever read READY may have gone: a closed stdout is no reason to fail now.
    let _ = writeln!(std::io::stdout(), "kfd-simd: stopped");
    Ok(())
}

/// Log records to stderr, at the level of `KFD_SIMD_LOG` (error, warn, info, debug, trace;
/// default warn).
struct StderrLogger;

impl log::Log for StderrLogger {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            eprintln!("[{}] {}", r.level(), r.args());
        }
    }

    fn flush(&self) {}
}

fn init_log() {
    let level = std::env::var("KFD_SIMD_LOG")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(log::LevelFilter::Warn);
    if log::set_logger(&StderrLogger).is_ok() {
        log::set_max_level(level);
    }
}

fn parse_version(s: &str) -> Result<kfd_abi::kfd::Version, String> {
    let (major, minor) = s
        .split_once('.')
        .ok_or_else(|| format!("{s:?}: expected MAJOR.MINOR"))?;
    let num = |v: &str| v.parse::<u32>().map_err(|e| format!("{s:?}: {e}"));
    Ok(kfd_abi::kfd::Version {
        major: num(major)?,
        minor: num(minor)?,
    })
}

fn parse_u32(s: &str) -> Result<u32, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("{s:?}: {e}"))
}

fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Presets => {
            for (name, description) in BUILTIN {
                println!("{name:10} {description}");
            }
            Ok(())
        }
        Command::Show {
            name,
            gpu_ids,
            render_minors,
            fw_version,
        } => {
            let mut p =
                kfd_sim::Preset::by_name(&name).map_err(|e| Failure::Usage(e.to_string()))?;
            one_per_gpu("--gpu-ids", &gpu_ids, &p)?;
            one_per_gpu("--render-minors", &render_minors, &p)?;
            if !gpu_ids.is_empty() {
                p = p.with_gpu_ids(&gpu_ids);
            }
            if !render_minors.is_empty() {
                p = p.with_render_minors(&render_minors);
            }
            if let Some(fw) = fw_version {
                p = p.with_fw_version(fw);
            }
            p.validate().map_err(|e| Failure::Usage(e.to_string()))?;
            print!("{}", p.to_toml());
            Ok(())
        }
        Command::Serve {
            preset,
            file,
            topology_dir,
            sysfs_dir,
            cuse,
            kfd_name,
            max_threads,
            ready_timeout,
            bridge,
            no_bridge,
            kfd_version,
            kernel,
        } => serve(Serve {
            preset,
            file,
            topology_dir,
            sysfs_dir,
            cfg: ServeConfig {
                cuse_path: cuse,
                kfd_name,
                max_threads,
                bridge_path: (!no_bridge).then_some(bridge),
                kfd_version,
                kernel,
                ..ServeConfig::default()
            },
            ready_timeout: Duration::from_secs(ready_timeout),
        }),
        Command::WriteSysfs {
            preset,
            file,
            cuse,
            dir,
        } => {
            let preset = load_preset(preset, file)?;
            let topology = preset.to_topology().map_err(|e| e.to_string())?;
            let opts = kfd_sim::sysfs::SysfsOptions {
                cuse_render_nodes: cuse,
            };
            kfd_sim::sysfs::write(&topology, &dir, opts).map_err(|e| e.to_string())?;
            println!(
                "wrote the sysfs slice of {} to {}",
                preset.name,
                dir.display()
            );
            Ok(())
        }
        Command::WriteTopology { preset, file, dir } => {
            let preset = load_preset(preset, file)?;
            let topology = preset.to_topology().map_err(|e| e.to_string())?;
            topology::replace(&topology, &dir).map_err(|e| e.to_string())?;
            println!(
                "wrote {} ({} nodes) to {}",
                preset.name,
                topology.nodes.len(),
                dir.display()
            );
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    init_log();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(e)) => {
            eprintln!("kfd-simd: {e}");
            ExitCode::from(EXIT_USAGE)
        }
        Err(Failure::Failed(e)) => {
            eprintln!("kfd-simd: {e}");
            ExitCode::FAILURE
        }
    }
}
