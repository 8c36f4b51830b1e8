//! Restore-time options from the environment: the seven `KFD_*_CHECK` switches and
//! `KFD_MAX_BUFFER_SIZE`. The environment is read in one place ([`CheckOptions::from_env`]);
//! everything else takes the values, so tests never touch process-wide state.

use serde::Serialize;

/// One of the optional compatibility checks, each switched by an environment variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Check {
    /// `KFD_FW_VER_CHECK`: source fw_version <= destination.
    FwVersion,
    /// `KFD_SDMA_FW_VER_CHECK`: source sdma_fw_version <= destination.
    SdmaFwVersion,
    /// `KFD_CACHES_COUNT_CHECK`: source caches_count <= destination.
    CachesCount,
    /// `KFD_NUM_GWS_CHECK`: source num_gws <= destination.
    NumGws,
    /// `KFD_VRAM_SIZE_CHECK`: source VRAM size <= destination.
    VramSize,
    /// `KFD_NUMA_CHECK`: each GPU stays on the (mapped) NUMA node it was on, CPU nodes one to one.
    Numa,
    /// `KFD_CAPABILITY_CHECK`: capability equal.
    Capability,
}

impl Check {
    /// All checks, in the order they are evaluated and reported.
    pub const ALL: [Check; 7] = [
        Check::FwVersion,
        Check::SdmaFwVersion,
        Check::CachesCount,
        Check::NumGws,
        Check::VramSize,
        Check::Numa,
        Check::Capability,
    ];

    /// The environment variable that switches the check.
    #[must_use]
    pub fn env_var(self) -> &'static str {
        match self {
            Check::FwVersion => "KFD_FW_VER_CHECK",
            Check::SdmaFwVersion => "KFD_SDMA_FW_VER_CHECK",
            Check::CachesCount => "KFD_CACHES_COUNT_CHECK",
            Check::NumGws => "KFD_NUM_GWS_CHECK",
            Check::VramSize => "KFD_VRAM_SIZE_CHECK",
            Check::Numa => "KFD_NUMA_CHECK",
            Check::Capability => "KFD_CAPABILITY_CHECK",
        }
    }
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.env_var())
    }
}

/// Which optional checks the remapping applies. `Default` enables all of them, as the plugin
/// does when no variable is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[allow(clippy::struct_excessive_bools)] // one switch per environment variable, by design
pub struct CheckOptions {
    /// `KFD_FW_VER_CHECK`.
    pub fw_version: bool,
    /// `KFD_SDMA_FW_VER_CHECK`.
    pub sdma_fw_version: bool,
    /// `KFD_CACHES_COUNT_CHECK`.
    pub caches_count: bool,
    /// `KFD_NUM_GWS_CHECK`.
    pub num_gws: bool,
    /// `KFD_VRAM_SIZE_CHECK`.
    pub vram_size: bool,
    /// `KFD_NUMA_CHECK`.
    pub numa: bool,
    /// `KFD_CAPABILITY_CHECK`.
    pub capability: bool,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self::all(true)
    }
}

impl CheckOptions {
    /// Every check on (`true`) or off.
    #[must_use]
    pub fn all(enabled: bool) -> Self {
        Self {
            fw_version: enabled,
            sdma_fw_version: enabled,
            caches_count: enabled,
            num_gws: enabled,
            vram_size: enabled,
            numa: enabled,
            capability: enabled,
        }
    }

    /// Whether `check` is on.
    #[must_use]
    pub fn enabled(&self, check: Check) -> bool {
        *self.slot(check)
    }

    /// Switches `check`.
    pub fn set(&mut self, check: Check, enabled: bool) {
        *self.slot_mut(check) = enabled;
    }

    /// [`set`](Self::set), builder style.
    #[must_use]
    pub fn with(mut self, check: Check, enabled: bool) -> Self {
        self.set(check, enabled);
        self
    }

    fn slot(&self, check: Check) -> &bool {
        match check {
            Check::FwVersion => &self.fw_version,
            Check::SdmaFwVersion => &self.sdma_fw_version,
            Check::CachesCount => &self.caches_count,
            Check::NumGws => &self.num_gws,
            Check::VramSize => &self.vram_size,
            Check::Numa => &self.numa,
            Check::Capability => &self.capability,
        }
    }

    fn slot_mut(&mut self, check: Check) -> &mut bool {
        match check {
            Check::FwVersion => &mut self.fw_version,
            Check::SdmaFwVersion => &mut self.sdma_fw_version,
            Check::CachesCount => &mut self.caches_count,
            Check::NumGws => &mut self.num_gws,
            Check::VramSize => &mut self.vram_size,
            Check::Numa => &mut self.numa,
            Check::Capability => &mut self.capability,
        }
    }

    /// Reads the seven `KFD_*_CHECK` variables from the process environment.
    #[must_use]
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the seven variables through `lookup` (name -> value). "0"/"NO" turn a check off,
    /// "1"/"YES" on (case-insensitive); anything else is logged and ignored, leaving the
    /// default (on).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let mut options = Self::default();
        for check in Check::ALL {
            let name = check.env_var();
            if let Some(value) = lookup(name) {
                match parse_bool(&value) {
                    Some(enabled) => options.set(check, enabled),
                    None => log::warn!(
                        "ignoring {name}={value:?}: expected 0, 1, NO or YES; the check stays on"
                    ),
                }
            }
        }
        options
    }
}

/// "0"/"NO" -> false, "1"/"YES" -> true, case-insensitive; otherwise `None`.
#[must_use]
pub fn parse_bool(value: &str) -> Option<bool> {
    if value == "0" || value.eq_ignore_ascii_case("no") {
        Some(false)
    } else if value == "1" || value.eq_ignore_ascii_case("yes") {
        Some(true)
    } else {
        None
    }
}

/// The environment variable that caps the plugin's host bounce buffer.
pub(crate) const MAX_BUFFER_SIZE_VAR: &str = "KFD_MAX_BUFFER_SIZE";

/// A `KFD_MAX_BUFFER_SIZE` value that is not a size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid {MAX_BUFFER_SIZE_VAR}={value:?}: {reason}; expected a number (decimal, 0x hex or \
     0 octal) with an optional k/K, M or G suffix, e.g. 64M"
)]
pub struct BufferSizeError {
    /// The value as given.
    pub value: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Parses a `KFD_MAX_BUFFER_SIZE` value: like C's `strtoul` with base 0 (leading white space,
/// optional `+`, `0x`/`0X` hexadecimal, leading `0` octal, else decimal), then an optional
/// suffix `k`/`K` (KiB), `M` (MiB) or `G` (GiB). Unlike `strtoul`, a minus sign, other trailing
/// text and overflow are errors rather than silently odd values.
///
/// # Errors
///
/// [`BufferSizeError`] saying what is wrong.
pub fn parse_max_buffer_size(value: &str) -> Result<u64, BufferSizeError> {
    let err = |reason| BufferSizeError {
        value: value.to_owned(),
        reason,
    };
    let s = value.trim_start();
    let s = s.strip_prefix('+').unwrap_or(s);
    if s.starts_with('-') {
        return Err(err("negative size"));
    }
    let (radix, digits_and_rest) =
        if let Some(rest) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            (16, rest)
        } else if s.len() > 1 && s.starts_with('0') && s.as_bytes()[1].is_ascii_digit() {
            (8, s)
        } else {
            (10, s)
        };
    let end = digits_and_rest
        .find(|c: char| !c.is_digit(radix))
        .unwrap_or(digits_and_rest.len());
    let (digits, suffix) = digits_and_rest.split_at(end);
    if digits.is_empty() {
        return Err(err("no digits"));
    }
    let number = u64::from_str_radix(digits, radix).map_err(|_| err("number too large"))?;
    let shift = match suffix {
        "" => 0,
        "k" | "K" => 10,
        "M" => 20,
        "G" => 30,
        _ => return Err(err("unknown suffix")),
    };
    number
        .checked_mul(1u64 << shift)
        .ok_or_else(|| err("number too large"))
}

/// Reads `KFD_MAX_BUFFER_SIZE` through `lookup`: `Ok(None)` when unset.
///
/// # Errors
///
/// [`BufferSizeError`] when set to something that is not a size.
pub fn max_buffer_size_from_lookup(
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Option<u64>, BufferSizeError> {
    lookup(MAX_BUFFER_SIZE_VAR)
        .map(|v| parse_max_buffer_size(&v))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn lookup<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn all_checks_are_on_when_nothing_is_set() {
        assert_eq!(CheckOptions::from_lookup(|_| None), CheckOptions::all(true));
    }

    #[rstest]
    #[case::zero("0", false)]
    #[case::no_upper("NO", false)]
    #[case::no_lower("no", false)]
    #[case::no_mixed("No", false)]
    #[case::one("1", true)]
    #[case::yes_upper("YES", true)]
    #[case::yes_lower("yes", true)]
    fn values_switch_every_check(#[case] value: &str, #[case] expected: bool) {
        for check in Check::ALL {
            let options = CheckOptions::from_lookup(lookup(&[(check.env_var(), value)]));
            for other in Check::ALL {
                let want = if other == check { expected } else { true };
                assert_eq!(
                    options.enabled(other),
                    want,
                    "{other} after {check}={value}"
                );
            }
        }
    }

    #[rstest]
    #[case::empty("")]
    #[case::word("off")]
    #[case::two("2")]
    #[case::padded(" 0")]
    fn other_values_are_ignored_and_the_check_stays_on(#[case] value: &str) {
        let options = CheckOptions::from_lookup(lookup(&[("KFD_NUMA_CHECK", value)]));
        assert!(options.numa);
    }

    #[test]
    fn variable_names_are_upstreams() {
        let names: Vec<_> = Check::ALL.iter().map(|c| c.env_var()).collect();
        assert_eq!(
            names,
            [
                "KFD_FW_VER_CHECK",
                "KFD_SDMA_FW_VER_CHECK",
                "KFD_CACHES_COUNT_CHECK",
                "KFD_NUM_GWS_CHECK",
                "KFD_VRAM_SIZE_CHECK",
                "KFD_NUMA_CHECK",
                "KFD_CAPABILITY_CHECK",
            ]
        );
    }

    #[rstest]
    #[case::decimal("4096", 4096)]
    #[case::hex("0x1000", 4096)]
    #[case::hex_upper("0X1000", 4096)]
    #[case::octal("010", 8)]
    #[case::zero("0", 0)]
    #[case::kib_lower("4k", 4 << 10)]
    #[case::kib_upper("4K", 4 << 10)]
    #[case::mib("64M", 64 << 20)]
    #[case::gib("2G", 2 << 30)]
    #[case::hex_with_suffix("0x10M", 16 << 20)]
    #[case::leading_space_and_plus("  +12", 12)]
    fn buffer_sizes_parse_like_strtoul_base_0(#[case] value: &str, #[case] expected: u64) {
        assert_eq!(parse_max_buffer_size(value), Ok(expected));
    }

    #[rstest]
    #[case::empty("", "no digits")]
    #[case::word("big", "no digits")]
    #[case::negative("-1", "negative size")]
    #[case::lower_m("64m", "unknown suffix")]
    #[case::trailing("64MB", "unknown suffix")]
    #[case::octal_digit_9("09", "unknown suffix")]
    #[case::overflow("99999999999999999999", "number too large")]
    #[case::overflow_by_suffix("0xffffffffffffG", "number too large")]
    fn bad_buffer_sizes_are_refused_with_a_reason(#[case] value: &str, #[case] reason: &str) {
        let e = parse_max_buffer_size(value).unwrap_err();
        assert_eq!(e.reason, reason);
        assert!(e.to_string().contains("KFD_MAX_BUFFER_SIZE"));
    }

    #[test]
    fn unset_buffer_size_is_none() {
        assert_eq!(max_buffer_size_from_lookup(|_| None), Ok(None));
        assert_eq!(
            max_buffer_size_from_lookup(lookup(&[("KFD_MAX_BUFFER_SIZE", "1K")])),
            Ok(Some(1024))
        );
    }
}
