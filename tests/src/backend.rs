//! The switch between the simulator and real hardware for the tests that can run on both.
//!
//! `AMDGPU_CR_BACKEND=hardware` (the hardware lane on MI-series runners) runs them against this
//! machine's `/dev/kfd`, render nodes and sysfs topology ([`kfd_abi::HostPlatform`], paths
//! overridable with the `AMDGPU_CR_*` variables); anything else, or nothing, runs them against
//! the in-process simulator, on the preset named by `AMDGPU_CR_SIM_PRESET` (default `mi210x2`).
//! A test written once as a [`PlatformTest`] runs on either, unchanged: the same binaries serve
//! both lanes. Tests that only make sense on the simulator (several simulated processes in one
//! OS process, fault injection) ask [`Backend::is_simulator`] and say why they skip.

use kfd_abi::{HostPlatform, Platform};
use kfd_sim::preset::Preset;
use kfd_sim::{Machine, SimPlatform};

/// Environment variable selecting the backend.
pub const ENV_BACKEND: &str = "AMDGPU_CR_BACKEND";
/// Environment variable naming the simulator preset.
pub const ENV_SIM_PRESET: &str = "AMDGPU_CR_SIM_PRESET";

/// A test body that runs on any platform.
pub trait PlatformTest {
    /// Runs the test on `platform`.
    fn run<P: Platform>(&self, platform: &P);
}

/// Where the tests run.
#[derive(Debug)]
pub enum Backend {
    /// The in-process simulator, with its sysfs tree in a temporary directory.
    Simulator {
        /// The platform of one simulated process.
        platform: SimPlatform,
        /// Keeps the topology tree alive.
        topology: tempfile::TempDir,
    },
    /// This machine's driver.
    Hardware(HostPlatform),
}

impl Backend {
    /// The backend the environment asks for.
    ///
    /// # Panics
    /// When the simulator preset is unknown or cannot be built: a misconfigured lane must fail,
    /// not pass by testing nothing.
    pub fn from_env() -> Self {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// As [`Backend::from_env`] with a lookup function.
    ///
    /// # Panics
    /// As [`Backend::from_env`].
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        if lookup(ENV_BACKEND).is_some_and(|b| b.eq_ignore_ascii_case("hardware")) {
            return Backend::Hardware(HostPlatform::from_lookup(|k| lookup(k).map(Into::into)));
        }
        let name = lookup(ENV_SIM_PRESET).unwrap_or_else(|| "mi210x2".into());
        let preset = Preset::by_name(&name).unwrap_or_else(|e| panic!("{ENV_SIM_PRESET}: {e}"));
        let machine = Machine::new(&preset).unwrap_or_else(|e| panic!("simulated {name}: {e}"));
        let topology = tempfile::tempdir().unwrap_or_else(|e| panic!("a temporary directory: {e}"));
        let platform = SimPlatform::new(machine, topology.path()).unwrap_or_else(|e| panic!("{e}"));
        Backend::Simulator { platform, topology }
    }

    /// Whether this is the simulator.
    pub fn is_simulator(&self) -> bool {
        matches!(self, Backend::Simulator { .. })
    }

    /// A name for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Simulator { .. } => "simulator",
            Backend::Hardware(_) => "hardware",
        }
    }

    /// Runs `test` on this backend's platform.
    pub fn run(&self, test: &impl PlatformTest) {
        match self {
            Backend::Simulator { platform, .. } => test.run(platform),
            Backend::Hardware(platform) => test.run(platform),
        }
    }
}
