//! The command line as clap defines it: what the binary parses, and what its man pages and
//! shell completions are generated from (`amdgpu-cr man`, `amdgpu-cr completions`), so that they
//! never disagree with it.

use std::io::Write;
use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand};

use super::{CliError, Outcome, Run};

/// `amdgpu-cr`.
#[derive(Debug, Parser)]
#[command(
    name = "amdgpu-cr",
    version,
    about = "Checkpoint/restore of AMD GPU (ROCm) processes with CRIU",
    after_help = "Exit status: 0 yes (restorable, mapped, images sound); 1 no; 2 usage or I/O \
                  error. check and map honour the KFD_*_CHECK variables as a restore would."
)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Checkpoint and restore a model GPU workload on the in-process simulator (no GPU needed),
    /// onto a node with other gpu ids, and verify every byte.
    Demo(super::demo::DemoArgs),
    /// Measure dump and restore throughput on the simulator against the raw I/O limit of the
    /// same directory, and the plugin's memory use.
    Bench(super::bench::BenchArgs),
    /// Report the KFD driver of this machine (interface version) and whether checkpoint/restore
    /// runs on it, or that there is none.
    Probe(super::probe::ProbeArgs),
    /// Summarise the amdgpu images in a criu image directory.
    Inspect(super::inspect::InspectArgs),
    /// Tell whether the images in a directory restore on this node, onto which GPUs, or why not.
    Check(super::check::CheckArgs),
    /// Print the KFD topology of this node (or of a topology tree).
    Topology(super::topo::TopologyArgs),
    /// Map the GPUs of one topology tree onto another's, or explain why they do not map.
    Map(super::check::MapArgs),
    /// Write a man page per command (amdgpu-cr.1, amdgpu-cr-check.1, ...) into a directory.
    Man(ManArgs),
    /// Print the shell completion script for a shell.
    Completions(CompletionsArgs),
}

impl Command {
    /// The subcommand's arguments, to run.
    #[must_use]
    pub fn args(&self) -> &dyn Run {
        match self {
            Self::Demo(a) => a,
            Self::Bench(a) => a,
            Self::Probe(a) => a,
            Self::Inspect(a) => a,
            Self::Check(a) => a,
            Self::Topology(a) => a,
            Self::Map(a) => a,
            Self::Man(a) => a,
            Self::Completions(a) => a,
        }
    }
}

/// Arguments of `amdgpu-cr man`.
#[derive(Clone, Debug, clap::Args)]
pub struct ManArgs {
    /// The directory to write the pages into (created if needed), e.g.
    /// /usr/local/share/man/man1.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

/// The man pages of the command line: `(file name, roff text)`, the command's first, then one
/// per subcommand (`amdgpu-cr-check.1`, ...).
///
/// # Errors
///
/// Rendering into memory does not fail; the error is `clap_mangen`'s writer's.
pub fn man_pages() -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let cmd = Cli::command();
    let mut pages = Vec::new();
    let mut top = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut top)?;
    pages.push(("amdgpu-cr.1".to_owned(), top));
    for sub in cmd.get_subcommands() {
        let name = format!("amdgpu-cr-{}", sub.get_name());
        let sub = sub
            .clone()
            .name(name.clone())
            .bin_name(format!("amdgpu-cr {}", sub.get_name()))
            .version(cmd.get_version().unwrap_or_default().to_owned());
        let mut page = Vec::new();
        clap_mangen::Man::new(sub).render(&mut page)?;
        pages.push((format!("{name}.1"), page));
    }
    Ok(pages)
}

impl Run for ManArgs {
    fn run(&self, out: &mut dyn Write) -> Result<Outcome, CliError> {
        let failed = |source| CliError::Install {
            path: self.out.clone(),
            source,
        };
        std::fs::create_dir_all(&self.out).map_err(failed)?;
        for (name, page) in man_pages()? {
            let path = self.out.join(&name);
            std::fs::write(&path, page).map_err(|source| CliError::Install {
                path: path.clone(),
                source,
            })?;
            writeln!(out, "wrote {}", path.display())?;
        }
        Ok(Outcome::Success)
    }
}

/// Arguments of `amdgpu-cr completions`.
#[derive(Clone, Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

impl Run for CompletionsArgs {
    fn run(&self, out: &mut dyn Write) -> Result<Outcome, CliError> {
        let mut cmd = Cli::command();
        let mut script = Vec::new();
        clap_complete::generate(self.shell, &mut cmd, "amdgpu-cr", &mut script);
        out.write_all(&script)?;
        Ok(Outcome::Success)
    }
}
