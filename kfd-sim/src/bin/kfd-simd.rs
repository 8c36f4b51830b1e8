//! `kfd-simd`: the simulator's command line. For now: list the topology presets and write a
//! preset's sysfs tree; serving `/dev/kfd` over CUSE comes later.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kfd_sim::preset::{Preset, BUILTIN};

#[derive(Parser)]
#[command(
    name = "kfd-simd",
    about = "Simulated amdkfd for gfx9: topology presets and sysfs trees"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the built-in topology presets.
    Presets,
    /// Write a preset's /sys/class/kfd/kfd/topology tree into DIR.
    WriteTopology {
        /// A built-in preset (see `kfd-simd presets`).
        #[arg(long, conflicts_with = "file", required_unless_present = "file")]
        preset: Option<String>,
        /// A preset file (TOML, or JSON if it ends in .json).
        #[arg(long)]
        file: Option<PathBuf>,
        /// The directory to write (created if needed).
        dir: PathBuf,
    },
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Presets => {
            for (name, description) in BUILTIN {
                println!("{name:10} {description}");
            }
            Ok(())
        }
        Command::WriteTopology { preset, file, dir } => {
            let preset = match (preset, file) {
                (Some(name), _) => Preset::by_name(&name),
                (None, Some(path)) => Preset::load(&path),
                (None, None) => return Err("give --preset NAME or --file PRESET.toml".into()),
            }
            .map_err(|e| e.to_string())?;
            let topology = preset.to_topology().map_err(|e| e.to_string())?;
            topology::write(&topology, &dir).map_err(|e| e.to_string())?;
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
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kfd-simd: {e}");
            ExitCode::FAILURE
        }
    }
}
