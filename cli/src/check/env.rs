//! The `KFD_*_CHECK` switches of the environment, as the plugin reads them at restore, with the
//! values it ignores.

use std::io::{self, Write};

use serde::Serialize;
use topology::options::parse_bool;
use topology::{Check, CheckOptions};

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IgnoredValue {
    /// The variable.
    pub variable: &'static str,
    /// Its value.
    pub value: String,
}

/// The `KFD_*_CHECK` switches in effect and where they came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EnvChecks {
    /// The switches.
    pub options: CheckOptions,
    /// Variables of the checks that are off.
    pub off: Vec<&'static str>,
    /// Values that were ignored.
    pub ignored: Vec<IgnoredValue>,
}

impl EnvChecks {
    /// From the process environment (as the plugin reads it at restore).
    #[must_use]
    pub(crate) fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// From a lookup function (name -> value).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let ignored = Check::ALL
            .iter()
            .filter_map(|c| {
                let value = lookup(c.env_var())?;
                parse_bool(&value).is_none().then_some(IgnoredValue {
                    variable: c.env_var(),
                    value,
                })
            })
            .collect();
        Self {
            ignored,
            ..Self::from_options(CheckOptions::from_lookup(lookup))
        }
    }

    /// Switches given directly (tests, callers that already hold them).
    #[must_use]
    pub fn from_options(options: CheckOptions) -> Self {
        Self {
            options,
            off: Check::ALL
                .iter()
                .filter(|c| !options.enabled(**c))
                .map(|c| c.env_var())
                .collect(),
            ignored: Vec::new(),
        }
    }

    pub(super) fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        if self.off.is_empty() {
            writeln!(out, "Checks: all KFD_*_CHECK on")?;
        } else {
            writeln!(out, "Checks off: {}", self.off.join(", "))?;
        }
        for i in &self.ignored {
            writeln!(
                out,
                "Ignored: {}={:?} (not 0, 1, NO or YES; the check stays on)",
                i.variable, i.value
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_checks_report_off_and_ignored_values() {
        let c = EnvChecks::from_lookup(|name| match name {
            "KFD_FW_VER_CHECK" => Some("0".to_owned()),
            "KFD_NUMA_CHECK" => Some("maybe".to_owned()),
            "KFD_VRAM_SIZE_CHECK" => Some("no".to_owned()),
            _ => None,
        });
        assert_eq!(c.off, ["KFD_FW_VER_CHECK", "KFD_VRAM_SIZE_CHECK"]);
        assert!(c.options.numa);
        assert_eq!(
            c.ignored,
            [IgnoredValue {
                variable: "KFD_NUMA_CHECK",
                value: "maybe".to_owned()
            }]
        );
        let mut out = Vec::new();
        c.render(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "Checks off: KFD_FW_VER_CHECK, KFD_VRAM_SIZE_CHECK\nIgnored: \
             KFD_NUMA_CHECK=\"maybe\" (not 0, 1, NO or YES; the check stays on)\n"
        );
    }
}
