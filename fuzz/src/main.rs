//! `fuzz`: lists the fuzz targets, writes their seeds, and replays inputs (a crash AFL++ found)
//! through a target's body, uninstrumented: `cargo run -p fuzz -- run restore CRASH-FILE`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "fuzz",
    about = "The workspace's fuzz targets: list, seed, replay"
)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Name every target, one per line (`--long`: with what it fuzzes).
    List {
        /// Also say what each target fuzzes.
        #[arg(long)]
        long: bool,
    },
    /// Write TARGET's seeds into DIR (created if missing).
    Seeds {
        /// The target.
        target: String,
        /// Where to write them.
        dir: PathBuf,
    },
    /// Run TARGET's body on each FILE; a finding panics with its message (exit status 101).
    Run {
        /// The target.
        target: String,
        /// Inputs.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    match args.command {
        Command::List { long } => {
            let mut out = std::io::stdout().lock();
            for t in fuzz::TARGETS {
                let line = if long {
                    writeln!(out, "{:<8} {}", t.name, t.about)
                } else {
                    writeln!(out, "{}", t.name)
                };
                // A reader that stops early (`| head`) is not an error.
                if line.is_err() {
                    break;
                }
            }
            ExitCode::SUCCESS
        }
        Command::Seeds { target, dir } => {
            let Some(seeds) = fuzz::seeds::seeds(&target) else {
                eprintln!("fuzz: no target named {target:?} (see `fuzz list`)");
                return ExitCode::from(2);
            };
            if let Err(e) = std::fs::create_dir_all(&dir) {
                eprintln!("fuzz: creating {}: {e}", dir.display());
                return ExitCode::from(2);
            }
            for (name, bytes) in &seeds {
                let path = dir.join(name);
                if let Err(e) = std::fs::write(&path, bytes) {
                    eprintln!("fuzz: writing {}: {e}", path.display());
                    return ExitCode::from(2);
                }
            }
            println!("{} seed(s) of {target} in {}", seeds.len(), dir.display());
            ExitCode::SUCCESS
        }
        Command::Run { target, files } => {
            let Some(t) = fuzz::target(&target) else {
                eprintln!("fuzz: no target named {target:?} (see `fuzz list`)");
                return ExitCode::from(2);
            };
            for path in files {
                let data = match std::fs::read(&path) {
                    Ok(d) => d,
                    Err(e) => {
                        eprintln!("fuzz: reading {}: {e}", path.display());
                        return ExitCode::from(2);
                    }
                };
                println!("{}: {} bytes", path.display(), data.len());
                (t.body)(&data);
                println!("{}: no finding", path.display());
            }
            ExitCode::SUCCESS
        }
    }
}
