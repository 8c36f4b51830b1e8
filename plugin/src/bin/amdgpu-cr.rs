//! `amdgpu-cr`: the tool people run beside criu.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kfd_abi::{Errno, Kfd, KFD_PATH};

#[derive(Parser)]
#[command(
    name = "amdgpu-cr",
    version,
    about = "Checkpoint/restore of AMD GPU (ROCm) processes with CRIU"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Report the KFD driver of this machine (interface version), or that there is none.
    Probe {
        /// The KFD node.
        #[arg(long, default_value = KFD_PATH)]
        kfd: PathBuf,
    },
}

fn probe(path: &std::path::Path) -> ExitCode {
    match Kfd::open(path).and_then(|kfd| kfd.get_version()) {
        Ok(v) => {
            println!(
                "{}: KFD ioctl interface {}.{}",
                path.display(),
                v.major,
                v.minor
            );
            ExitCode::SUCCESS
        }
        Err(e) if e.errno() == Some(Errno::ENOENT) => {
            println!(
                "{}: not present: this machine has no amdkfd driver loaded (no AMD GPU).",
                path.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("amdgpu-cr: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Probe { kfd } => probe(&kfd),
    }
}
