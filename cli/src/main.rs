//! `amdgpu-cr`: the tool people run beside criu.
//!
//! Argument parsing and printing only; the subcommands live in the library (`amdgpu_cr`). Exit
//! status: 0 yes, 1 no (not restorable, no mapping, damaged images), 2 usage or I/O error.

use std::io::Write;
use std::process::ExitCode;

use amdgpu_cr::{self as cli, Run};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "amdgpu-cr",
    version,
    about = "Checkpoint/restore of AMD GPU (ROCm) processes with CRIU",
    after_help = "Exit status: 0 yes (restorable, mapped, images sound); 1 no; 2 usage or I/O \
                  error. check and map honour the KFD_*_CHECK variables as a restore would."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Checkpoint and restore a model GPU workload on the in-process simulator (no GPU needed),
    /// onto a node with other gpu ids, and verify every byte.
    Demo(cli::demo::DemoArgs),
    /// Measure dump and restore throughput on the simulator against the raw I/O limit of the
    /// same directory, and the plugin's memory use.
    Bench(cli::bench::BenchArgs),
    /// Report the KFD driver of this machine (interface version) and whether checkpoint/restore
    /// runs on it, or that there is none.
    Probe(cli::probe::ProbeArgs),
    /// Summarise the amdgpu images in a criu image directory.
    Inspect(cli::inspect::InspectArgs),
    /// Tell whether the images in a directory restore on this node, onto which GPUs, or why not.
    Check(cli::check::CheckArgs),
    /// Print the KFD topology of this node (or of a topology tree).
    Topology(cli::topo::TopologyArgs),
    /// Map the GPUs of one topology tree onto another's, or explain why they do not map.
    Map(cli::check::MapArgs),
}

/// Runs a library subcommand on stdout and turns its answer into the exit status.
fn run(command: &dyn Run) -> ExitCode {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let result = command.run(&mut out).and_then(|o| {
        out.flush()?;
        Ok(o)
    });
    if cli::interrupt::interrupted() {
        // The signal thread is cleaning up and exits with the signal's status: neither this
        // answer nor an error of a directory removed under the command is the process's.
        loop {
            std::thread::park();
        }
    }
    match result {
        Ok(outcome) => ExitCode::from(outcome.exit_code()),
        // The reader went away (`| head`): nothing to say, to no one.
        Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("amdgpu-cr: {e}");
            ExitCode::from(cli::EXIT_ERROR)
        }
    }
}

/// Takes SIGINT, SIGTERM and SIGHUP in a thread of its own: removes the temporary directories
/// the command registered ([`cli::interrupt`]) and exits with 128 + the signal's number, as a
/// shell reports a process killed by it. Called before any other thread starts, so that every
/// thread inherits the blocked signals.
fn take_interrupts() {
    let signals = match kfd_sim::cuse::TermSignals::block() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("amdgpu-cr: cannot block the termination signals ({e}); an interrupt may leave temporary directories");
            return;
        }
    };
    std::thread::spawn(move || {
        let Ok(sig) = signals.wait() else { return };
        cli::interrupt::begin();
        let done = cli::interrupt::cleanup();
        for dir in done.removed {
            eprintln!("amdgpu-cr: interrupted: removed {}", dir.display());
        }
        for (dir, e) in done.failed {
            eprintln!(
                "amdgpu-cr: interrupted: cannot remove {}: {e}",
                dir.display()
            );
        }
        std::process::exit(128 + sig);
    });
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    take_interrupts();
    match cli.command {
        Command::Demo(args) => run(&args),
        Command::Bench(args) => run(&args),
        Command::Probe(args) => run(&args),
        Command::Inspect(args) => run(&args),
        Command::Check(args) => run(&args),
        Command::Topology(args) => run(&args),
        Command::Map(args) => run(&args),
    }
}
