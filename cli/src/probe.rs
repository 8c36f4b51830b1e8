//! `amdgpu-cr probe [--kfd PATH]`: the KFD interface of this machine's `/dev/kfd`, and whether
//! checkpoint/restore runs on it.

use std::io::{self, Write};
use std::path::PathBuf;

use amdgpu_plugin::{supports_cr, MIN_VERSION};
use kfd_abi::{Errno, Kfd, KFD_PATH};
use serde::Serialize;

use super::{CliError, Format, Outcome, Report, Run};

/// Arguments of `amdgpu-cr probe`.
#[derive(Clone, Debug, clap::Args)]
pub struct ProbeArgs {
    /// The KFD node.
    #[arg(long, default_value = KFD_PATH, value_name = "PATH")]
    pub kfd: PathBuf,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// A KFD interface version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct InterfaceVersion {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

/// The report of `amdgpu-cr probe`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProbeReport {
    /// The KFD node asked.
    pub path: String,
    /// Whether it exists (an amdkfd driver is loaded).
    pub present: bool,
    /// Its interface version, when present.
    pub version: Option<InterfaceVersion>,
    /// The oldest interface checkpoint/restore runs on.
    pub minimum: InterfaceVersion,
    /// Whether checkpoint/restore runs on it.
    pub supported: bool,
}

impl ProbeReport {
    /// The report for `path` with `version` (`None`: no such node).
    #[must_use]
    pub fn new(path: &str, version: Option<kfd_abi::kfd::Version>) -> Self {
        let minimum = InterfaceVersion {
            major: MIN_VERSION.major,
            minor: MIN_VERSION.minor,
        };
        Self {
            path: path.to_owned(),
            present: version.is_some(),
            version: version.map(|v| InterfaceVersion {
                major: v.major,
                minor: v.minor,
            }),
            minimum,
            supported: version.is_some_and(supports_cr),
        }
    }
}

impl Report for ProbeReport {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        let min = format!("{}.{}", self.minimum.major, self.minimum.minor);
        match self.version {
            None => writeln!(
                out,
                "{}: not present: no amdkfd driver is loaded here (no AMD GPU, or amdgpu not \
                 loaded); checkpoint/restore of GPU processes needs it",
                self.path
            ),
            Some(v) if self.supported => writeln!(
                out,
                "{}: KFD ioctl interface {}.{}: checkpoint/restore supported ({min} or later)",
                self.path, v.major, v.minor
            ),
            Some(v) => writeln!(
                out,
                "{}: KFD ioctl interface {}.{}: checkpoint/restore needs {min} or later (a newer \
                 kernel)",
                self.path, v.major, v.minor
            ),
        }
    }

    fn outcome(&self) -> Outcome {
        Outcome::from_bool(self.supported)
    }
}

impl Run for ProbeArgs {
    fn run(&self, out: &mut dyn Write) -> Result<Outcome, CliError> {
        let path = self.kfd.display().to_string();
        let version = match Kfd::open(&self.kfd).and_then(|kfd| kfd.get_version()) {
            Ok(v) => Some(v),
            Err(e) if e.errno() == Some(Errno::ENOENT) => None,
            Err(source) => return Err(CliError::Probe { path, source }),
        };
        ProbeReport::new(&path, version).emit(Format::from_json_flag(self.json), out)
    }
}
