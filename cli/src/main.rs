//! `amdgpu-cr`: the tool people run beside criu.
//!
//! Argument parsing and printing only; the subcommands live in the library (`amdgpu_cr`). Exit
//! status: 0 yes, 1 no (not restorable, no mapping, damaged images), 2 usage or I/O error.

use std::io::Write;
use std::process::ExitCode;

use amdgpu_cr::app::Cli;
use amdgpu_cr::{self as cli, Run};
use clap::Parser;

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
    run(cli.command.args())
}
