//! The subcommands of `amdgpu-cr` as a library: each computes a report value (serializable, for
//! `--json`) and renders it as text into any [`Write`]; the binary only parses arguments and
//! picks the output.
//!
//! - [`inspect`]: what an image directory holds (`amdgpu-cr inspect DIR [--verify]`).
//! - [`check`]: whether an image restores on a topology and onto which GPUs
//!   (`amdgpu-cr check DIR`), and the mapping between two topology trees (`amdgpu-cr map`).
//! - [`topo`]: a topology as a table (`amdgpu-cr topology`).
//! - [`probe`]: the KFD interface of this machine (`amdgpu-cr probe`).
//! - [`json`]: the conventions of every `--json` document (`docs/json.md`).
//!
//! Every subcommand's arguments are a `clap::Args` struct implementing [`Run`], so a new
//! subcommand is one enum variant and one match arm in the binary.
//!
//! Exit status: 0 when the answer is yes (restorable, mapped, images sound), 1 when it is no
//! ([`Outcome::Negative`]), 2 on usage or I/O errors ([`CliError`], [`EXIT_ERROR`]).

use std::fmt;
use std::io::{self, Write};
use std::path::PathBuf;

use serde::Serialize;

pub mod app;
pub mod args;
pub mod bench;
pub mod check;
pub mod demo;
mod imagedir;
pub mod inspect;
pub mod interrupt;
pub mod json;
pub mod probe;
pub mod provenance;
mod table;
pub mod topo;
mod upstream;
mod validate;

/// Exit status for usage and I/O errors (clap also exits with 2 on bad arguments).
pub const EXIT_ERROR: u8 = 2;

/// The answer of a subcommand that ran to completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Yes: restorable, mapped, images sound (exit status 0).
    Success,
    /// No: not restorable, no mapping, damaged images (exit status 1).
    Negative,
}

impl Outcome {
    /// The process exit status.
    #[must_use]
    pub fn exit_code(self) -> u8 {
        match self {
            Outcome::Success => 0,
            Outcome::Negative => 1,
        }
    }

    /// `Success` when `ok`.
    #[must_use]
    pub(crate) fn from_bool(ok: bool) -> Self {
        if ok {
            Outcome::Success
        } else {
            Outcome::Negative
        }
    }
}

/// Why a subcommand could not answer (exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The image directory cannot be opened or listed.
    #[error("cannot read image directory {dir}: {source}; check the path and its permissions")]
    ImageDir {
        /// The directory as given.
        dir: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// An image file the user may not read (criu's images are root's, mode 0600).
    #[error(
        "cannot read {}: permission denied; run as the user who can read it (criu's images are \
         root's, mode 0600)",
        file.display()
    )]
    ImagePermission {
        /// The file.
        file: PathBuf,
        /// The open's error.
        #[source]
        source: io::Error,
    },
    /// A topology tree cannot be read.
    #[error("reading the GPU topology under {root}: {source}")]
    Topology {
        /// The topology root.
        root: PathBuf,
        /// What failed (it names the file).
        #[source]
        source: topology::ParseError,
    },
    /// `check --devices` names no GPU of the topology.
    #[error(transparent)]
    Devices(#[from] check::DeviceListError),
    /// `probe` could not ask the KFD node (it exists but does not open or answer).
    #[error("cannot ask {path} for its KFD interface version: {source}")]
    Probe {
        /// The node.
        path: String,
        /// The open or the ioctl that failed.
        #[source]
        source: kfd_abi::IoctlError,
    },
    /// `demo` could not run: a value it cannot take, or the simulated node's setup.
    #[error(transparent)]
    Demo(#[from] demo::DemoError),
    /// `bench` could not measure: options that do not go together, or a phase that failed.
    #[error(transparent)]
    Bench(#[from] bench::BenchFailure),
    /// `bench --judge` could not read the runs' reports.
    #[error(transparent)]
    Judge(#[from] bench::JudgeError),
    /// The user interrupted the command (Ctrl-C, SIGTERM, SIGHUP): it says nothing more, and the
    /// binary exits with the signal's status.
    #[error(transparent)]
    Interrupted(#[from] interrupt::Interrupted),
    /// `man` could not write a page.
    #[error("writing {}: {source}", path.display())]
    Install {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// Writing the output failed (a closed pipe, a full disk).
    #[error("writing the output: {0}")]
    Output(#[from] io::Error),
    /// Encoding the JSON document failed.
    #[error("encoding the JSON output: {0}")]
    Json(#[from] serde_json::Error),
}

impl CliError {
    /// Whether this is a write into a pipe whose reader has gone (`EPIPE`): not worth a message.
    #[must_use]
    pub fn is_broken_pipe(&self) -> bool {
        let kind = match self {
            Self::Output(e) => Some(e.kind()),
            Self::Json(e) => e.io_error_kind(),
            _ => None,
        };
        kind == Some(io::ErrorKind::BrokenPipe)
    }
}

/// Output format of a report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// Human-readable text.
    #[default]
    Text,
    /// One JSON document.
    Json,
}

impl Format {
    /// `Json` when `json`.
    #[must_use]
    pub(crate) fn from_json_flag(json: bool) -> Self {
        if json {
            Format::Json
        } else {
            Format::Text
        }
    }
}

/// A subcommand's report: serializable for `--json`, renderable as text.
pub trait Report: Serialize {
    /// Writes the human-readable form.
    ///
    /// # Errors
    ///
    /// The writer's.
    fn render(&self, out: &mut dyn Write) -> io::Result<()>;

    /// The answer it gives.
    fn outcome(&self) -> Outcome;

    /// Writes the report in `format`: text, or one JSON document (its fields after
    /// `schema_version`, see [`json`]) and a newline. A reader that closed the pipe early (`|
    /// head`) is not an error: the answer stands.
    ///
    /// # Errors
    ///
    /// [`CliError::Output`], [`CliError::Json`]; [`CliError::Interrupted`] once an interrupt has
    /// been taken (nothing is written).
    fn emit(&self, format: Format, out: &mut dyn Write) -> Result<Outcome, CliError> {
        // A run the user stopped has no answer to print (its failures are the interrupt's).
        interrupt::check()?;
        let written = match format {
            Format::Text => self.render(out).map_err(CliError::from),
            Format::Json => serde_json::to_writer_pretty(&mut *out, &json::Document::new(self))
                .map_err(CliError::from)
                .and_then(|()| Ok(writeln!(out)?)),
        };
        match written {
            Err(e) if e.is_broken_pipe() => Ok(self.outcome()),
            Err(e) => Err(e),
            Ok(()) => Ok(self.outcome()),
        }
    }
}

/// A subcommand: parsed arguments that run against the process environment and write to `out`.
pub trait Run {
    /// Runs the subcommand.
    ///
    /// # Errors
    ///
    /// [`CliError`] when it cannot answer (exit status [`EXIT_ERROR`]).
    fn run(&self, out: &mut dyn Write) -> Result<Outcome, CliError>;
}

/// A byte count in binary units, exact where it can be: `512 B`, `64 KiB`, `1.5 GiB`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HumanSize(pub(crate) u64);

impl fmt::Display for HumanSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
        let n = self.0;
        if n < 1024 {
            return write!(f, "{n} B");
        }
        let mut unit = 1024u64;
        let mut name = UNITS[0];
        for (i, u) in UNITS.iter().enumerate().skip(1) {
            let next = 1u64 << (10 * (i + 1));
            if n < next {
                break;
            }
            unit = next;
            name = u;
        }
        let whole = n / unit;
        let rest = n % unit;
        if rest == 0 {
            write!(f, "{whole} {name}")
        } else {
            // One decimal, truncated: never claims more than there is.
            let tenths = u128::from(rest) * 10 / u128::from(unit);
            write!(f, "{whole}.{tenths} {name}")
        }
    }
}

/// `n` and the noun, singular or plural as `n` asks: `1 CPU node`, `2 CPU nodes`, `0 GPUs`.
#[must_use]
pub(crate) fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `0x1234`-style id (at least four hex digits, as the plugin's logs print gpu_ids).
#[must_use]
pub(crate) fn hex_id(id: u32) -> String {
    format!("{id:#06x}")
}

/// The marketing name of a few known AMD Instinct device ids (informational only).
#[must_use]
pub(crate) fn model_name(vendor_id: u64, device_id: u64) -> Option<&'static str> {
    if vendor_id != 0x1002 {
        return None;
    }
    Some(match device_id {
        0x66a0 => "MI60",
        0x66a1 => "MI50",
        0x738c => "MI100",
        0x740f => "MI210",
        0x7408 | 0x740c => "MI250X/MI250",
        0x74a1 => "MI300X",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_binary_and_never_rounded_up() {
        let cases = [
            (0, "0 B"),
            (1023, "1023 B"),
            (1024, "1 KiB"),
            (1536, "1.5 KiB"),
            (64 << 20, "64 MiB"),
            ((1 << 30) - 1, "1023.9 MiB"),
            (3 << 29, "1.5 GiB"),
            (32 << 30, "32 GiB"),
            (u64::MAX, "15.9 EiB"),
        ];
        for (n, want) in cases {
            assert_eq!(HumanSize(n).to_string(), want, "{n}");
        }
    }

    #[test]
    fn counts_agree_with_their_nouns() {
        assert_eq!(count(0, "GPU", "GPUs"), "0 GPUs");
        assert_eq!(count(1, "CPU node", "CPU nodes"), "1 CPU node");
        assert_eq!(count(2, "BO", "BOs"), "2 BOs");
    }

    #[test]
    fn exit_codes() {
        assert_eq!(Outcome::Success.exit_code(), 0);
        assert_eq!(Outcome::Negative.exit_code(), 1);
        assert_eq!(EXIT_ERROR, 2);
    }
}
