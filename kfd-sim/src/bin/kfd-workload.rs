//! `kfd-workload`: the model ROCm process, on whatever `/dev/kfd` this machine has — the
//! simulator served over CUSE, or real hardware.
//!
//! It opens `/dev/kfd` and every GPU's render node (paths and topology root from the
//! `AMDGPU_CR_*` environment variables, as the plugin finds them), builds the workload of
//! `kfd_sim::workload`, then ticks: each tick advances the generation counter on every GPU by
//! SDMA and prints `tick <generation>`. When the file given with `--verify-trigger` appears (a
//! test creates it after criu restored the process), it verifies every buffer, queue and event and
//! prints one line, `VERIFY OK ...` or `VERIFY FAIL <what differed>`, then removes the file.
//! `rebuilds=` in that line counts the tick steps that were checkpointed mid-step and had to run
//! again on new render-node objects (see `Workload::tick`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use kfd_abi::{GpuId, HostPlatform, Platform};
use kfd_sim::workload::{Spec, Workload};

#[derive(Parser)]
#[command(
    name = "kfd-workload",
    version,
    about = "A model ROCm process for checkpoint/restore tests"
)]
struct Args {
    /// VRAM buffers per GPU, in KiB (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "4096,64")]
    vram_kib: Vec<u64>,
    /// GTT buffers per GPU, in KiB (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "256")]
    gtt_kib: Vec<u64>,
    /// AQL queues per GPU.
    #[arg(long, default_value_t = 1)]
    queues: u32,
    /// Signal events.
    #[arg(long, default_value_t = 4)]
    events: u32,
    /// Seed of the data pattern.
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// Time between ticks, in milliseconds.
    #[arg(long, default_value_t = 200)]
    tick_ms: u64,
    /// Verify (and print a VERIFY line) when this file exists; it is removed afterwards.
    #[arg(long)]
    verify_trigger: Option<PathBuf>,
    /// Verify once right after start and exit (a smoke test of the device).
    #[arg(long)]
    once: bool,
    /// Stop after this many ticks (default: run until killed).
    #[arg(long)]
    ticks: Option<u64>,
}

fn start(args: &Args) -> Result<Workload<kfd_abi::FdTransport>, String> {
    let platform = HostPlatform::from_env();
    let topo = topology::parse(&platform.topology_root()).map_err(|e| e.to_string())?;
    let kfd = platform.open_kfd().map_err(|e| e.to_string())?;
    let mut gpus = Vec::new();
    for node in topo.gpus() {
        let id = GpuId::new(node.gpu_id).ok_or("a GPU node with gpu_id 0")?;
        gpus.push((
            id,
            platform
                .open_render(node.render_minor())
                .map_err(|e| e.to_string())?,
        ));
    }
    if gpus.is_empty() {
        return Err(format!(
            "no GPU in the topology at {}",
            platform.topology_root().display()
        ));
    }
    let kib = |v: &[u64]| v.iter().map(|k| k << 10).collect::<Vec<_>>();
    let spec = Spec {
        seed: args.seed,
        vram: kib(&args.vram_kib),
        gtt: kib(&args.gtt_kib),
        queues: args.queues,
        events: args.events,
    };
    Workload::start(kfd, gpus, &spec).map_err(|e| e.to_string())
}

fn verify_line(w: &Workload<kfd_abi::FdTransport>) -> (bool, String) {
    match w.verify() {
        Ok(r) => (
            true,
            format!(
                "VERIFY OK buffers={} bytes={} queues={} events={} generation={} rebuilds={}",
                r.buffers,
                r.bytes,
                r.queues,
                r.events,
                r.generation,
                w.rebuilds()
            ),
        ),
        Err(e) => (false, format!("VERIFY FAIL {e}")),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut w = match start(&args) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("kfd-workload: {e}");
            return ExitCode::FAILURE;
        }
    };
    let m = w.manifest();
    println!(
        "started pid={} gpus={} bytes={} queues={} events={}",
        std::process::id(),
        m.gpus.len(),
        m.pattern_bytes(),
        m.gpus.iter().map(|g| g.queues.len()).sum::<usize>(),
        m.events.len()
    );
    if args.once {
        let (ok, line) = verify_line(&w);
        println!("{line}");
        return if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let mut ticks = 0u64;
    loop {
        std::thread::sleep(Duration::from_millis(args.tick_ms));
        if let Some(trigger) = &args.verify_trigger {
            if trigger.exists() {
                let (_, line) = verify_line(&w);
                println!("{line}");
                let _ = std::fs::remove_file(trigger);
            }
        }
        let rebuilds = w.rebuilds();
        match w.tick() {
            Ok(g) => {
                if w.rebuilds() > rebuilds {
                    eprintln!(
                        "kfd-workload: tick {g}: a step lost its render-node objects (restored \
                         mid-step) and ran again on new ones"
                    );
                }
                println!("tick {g}");
            }
            Err(e) => {
                println!("TICK FAIL {e}");
                return ExitCode::FAILURE;
            }
        }
        ticks += 1;
        if args.ticks.is_some_and(|n| ticks >= n) {
            return ExitCode::SUCCESS;
        }
    }
}
