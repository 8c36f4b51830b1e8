//! `amdgpu-cr check DIR`: will this image restore here, onto which GPUs, and if not, why; and
//! `amdgpu-cr map --from SRC --to DEST`: the GPU mapping between two topology trees.
//!
//! `check` runs, per KFD image, the restore's own up-front checks
//! ([`amdgpu_plugin::restore::plan`]: the image decodes, its counts agree, its pages files have
//! the right lengths and checksum lists, and the GPU mapping exists) without touching a driver.
//! When the mapping is refused it also searches for the `KFD_*_CHECK` variables that, set to 0,
//! would make it succeed.
//!
//! Inside: the image directory's verdict (`image`), a mapping and its remedy (`mapping`), the
//! `map` report (`map`), the `KFD_*_CHECK` switches of the environment (`env`), and the
//! `--devices` list of a container (`devices`).

use std::io::Write;
use std::path::PathBuf;

use kfd_abi::platform::{HostPlatform, Platform};

use super::topo::read_topology;
use super::{CliError, Format, Outcome, Report, Run};

mod devices;
mod env;
mod image;
mod map;
mod mapping;

pub use devices::{render_minors, DeviceListError};
pub use env::{EnvChecks, IgnoredValue};
pub use image::{check_dir, check_dir_on, CheckReport, ImageProblem, KfdCheck, RenderCheck};
pub use map::MapReport;
pub use mapping::{MapOutcome, MappedCpu, MappedGpu, MappingSummary, Remedy};

/// Arguments of `amdgpu-cr check`.
#[derive(Clone, Debug, clap::Args)]
pub struct CheckArgs {
    /// The image directory (criu's -D).
    pub dir: PathBuf,
    /// Topology root to restore onto (default: this machine's, or $AMDGPU_CR_TOPOLOGY_ROOT).
    #[arg(long = "topology-root", visible_alias = "topology", value_name = "DIR")]
    pub topology: Option<PathBuf>,
    /// Only the GPUs of these device files are candidates, as for a container given them
    /// (`podman run --device ...`): render nodes `/dev/dri/renderD<minor>`, comma-separated or
    /// repeated; `/dev/kfd` may be listed and is ignored.
    #[arg(long, value_name = "DEVICES", value_delimiter = ',')]
    pub devices: Vec<String>,
    /// Print one JSON document.
    #[arg(long)]
    pub json: bool,
}

impl Run for CheckArgs {
    fn run(&self, out: &mut dyn Write) -> Result<Outcome, CliError> {
        let root = self
            .topology
            .clone()
            .unwrap_or_else(|| HostPlatform::from_env().topology_root());
        let node = read_topology(&root)?;
        let shown_root = root.display().to_string();
        let devices = if self.devices.is_empty() {
            None
        } else {
            Some(render_minors(&self.devices, &node, &shown_root)?)
        };
        let checks = EnvChecks::from_env();
        let report = check_dir_on(
            &self.dir,
            &self.dir.display().to_string(),
            &shown_root,
            &node,
            devices.as_deref(),
            &checks,
        )?;
        report.emit(Format::from_json_flag(self.json), out)
    }
}

/// Arguments of `amdgpu-cr map`.
#[derive(Clone, Debug, clap::Args)]
pub struct MapArgs {
    /// Topology root of the checkpointed machine.
    #[arg(long, value_name = "SRC_ROOT")]
    pub from: PathBuf,
    /// Topology root of the machine to restore on.
    #[arg(long, value_name = "DEST_ROOT")]
    pub to: PathBuf,
    /// Print one JSON document.
    #[arg(long)]
    pub json: bool,
}

impl Run for MapArgs {
    fn run(&self, out: &mut dyn Write) -> Result<Outcome, CliError> {
        let source = read_topology(&self.from)?;
        let destination = read_topology(&self.to)?;
        MapReport::new(
            &self.from.display().to_string(),
            &source,
            &self.to.display().to_string(),
            &destination,
            &EnvChecks::from_env(),
        )
        .emit(Format::from_json_flag(self.json), out)
    }
}
