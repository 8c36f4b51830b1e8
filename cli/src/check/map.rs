//! `amdgpu-cr map`: the mapping between two topology trees.

use std::io::{self, Write};

use serde::Serialize;
use topology::Topology;

use super::env::EnvChecks;
use super::mapping::{MapOutcome, TREE_SIDES};
use crate::{Outcome, Report};

/// The report of `amdgpu-cr map`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MapReport {
    /// Source root, as given.
    pub from: String,
    /// Source GPUs.
    pub source_gpus: usize,
    /// Destination root, as given.
    pub to: String,
    /// Destination GPUs.
    pub destination_gpus: usize,
    /// The `KFD_*_CHECK` switches used.
    pub checks: EnvChecks,
    /// The mapping or why there is none.
    pub mapping: MapOutcome,
}

impl MapReport {
    /// Maps `source` (read from `from`) onto `destination` (read from `to`).
    #[must_use]
    pub fn new(
        from: &str,
        source: &Topology,
        to: &str,
        destination: &Topology,
        checks: &EnvChecks,
    ) -> Self {
        Self {
            from: from.to_owned(),
            source_gpus: source.gpus().count(),
            to: to.to_owned(),
            destination_gpus: destination.gpus().count(),
            checks: checks.clone(),
            mapping: MapOutcome::compute(source, destination, &checks.options),
        }
    }
}

impl Report for MapReport {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(
            out,
            "From: {} ({})",
            self.from,
            crate::count(self.source_gpus, "GPU", "GPUs")
        )?;
        writeln!(
            out,
            "To:   {} ({})",
            self.to,
            crate::count(self.destination_gpus, "GPU", "GPUs")
        )?;
        self.checks.render(out)?;
        writeln!(out)?;
        self.mapping.render(out, "", TREE_SIDES)?;
        writeln!(
            out,
            "\nResult: {}",
            if self.mapping.is_mapped() {
                "mapped"
            } else {
                "no mapping"
            }
        )
    }

    fn outcome(&self) -> Outcome {
        Outcome::from_bool(self.mapping.is_mapped())
    }
}
