//! Parsers of the command line's numbers, for clap (`value_parser`): sizes with binary units and
//! counts, decimal only (`010` is ten), refusing what is out of range with the limit named. A
//! value clap's parser refuses is a usage error: exit status 2, the message on stderr.
//!
//! These are the tool's own options. `KFD_MAX_BUFFER_SIZE` keeps upstream's `strtoul` syntax
//! (`topology::options::parse_max_buffer_size`): it is read by the plugin too, and must mean
//! there what it means to upstream's plugin.

use crate::HumanSize;

/// Binary units a size may carry, case-insensitive, with or without `i` and `B`: `512M`,
/// `512MiB`, `512mb`, `2g`, `1T`. A bare number (or `B`) is bytes.
const UNITS: &[(&[&str], u32)] = &[
    (&["", "b"], 0),
    (&["k", "kb", "kib"], 10),
    (&["m", "mb", "mib"], 20),
    (&["g", "gb", "gib"], 30),
    (&["t", "tb", "tib"], 40),
];

/// A size: decimal digits and an optional binary unit (K, M, G, T; KiB, MB, ...), between
/// `min` and `max` bytes inclusive.
///
/// # Errors
///
/// A message saying what is wrong and what is accepted, naming the limit that is not met.
pub fn size(value: &str, min: u64, max: u64) -> Result<u64, String> {
    let v = value.trim();
    let end = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (digits, unit) = v.split_at(end);
    let accepted =
        "a number of bytes with an optional binary unit: 4096, 512K, 256M, 256MiB, 2G, 1T";
    if digits.is_empty() {
        return Err(format!("{value:?} is not a size; give {accepted}"));
    }
    let unit = unit.trim().to_ascii_lowercase();
    let Some(&(_, shift)) = UNITS
        .iter()
        .find(|(names, _)| names.contains(&unit.as_str()))
    else {
        return Err(format!(
            "{value:?}: unknown unit {unit:?}; give {accepted} (units are binary: 1K = 1024)"
        ));
    };
    let bytes = digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1u64 << shift))
        .ok_or_else(|| format!("{value:?} is too large (at most {})", HumanSize(max)))?;
    in_range(value, bytes, min, max, |n| HumanSize(n).to_string())
}

/// A count: decimal digits, between `min` and `max` inclusive.
///
/// # Errors
///
/// A message naming the limit that is not met.
pub fn count(value: &str, min: u64, max: u64) -> Result<u64, String> {
    let v = value.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{value:?} is not a whole number (decimal digits only)"
        ));
    }
    let n = v
        .parse::<u64>()
        .map_err(|_| format!("{value:?} is too large (at most {max})"))?;
    in_range(value, n, min, max, |n| n.to_string())
}

fn in_range(
    value: &str,
    n: u64,
    min: u64,
    max: u64,
    show: impl Fn(u64) -> String,
) -> Result<u64, String> {
    if n < min {
        Err(format!("{value:?} is below the minimum of {}", show(min)))
    } else if n > max {
        Err(format!("{value:?} is above the maximum of {}", show(max)))
    } else {
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    const MIB: u64 = 1 << 20;
    const TIB: u64 = 1 << 40;

    #[rstest]
    #[case("4096", 4096)]
    #[case("010", 10)]
    #[case("512K", 512 << 10)]
    #[case("512MiB", 512 * MIB)]
    #[case("512mb", 512 * MIB)]
    #[case("2g", 2 << 30)]
    #[case("2G", 2 << 30)]
    #[case("1T", TIB)]
    #[case("1 GiB", 1 << 30)]
    fn sizes_take_binary_units_in_any_case(#[case] value: &str, #[case] bytes: u64) {
        assert_eq!(size(value, 1, 4 * TIB), Ok(bytes));
    }

    #[rstest]
    #[case("1Q", "unknown unit \"q\"")]
    #[case("", "is not a size")]
    #[case("G", "is not a size")]
    #[case("-1", "is not a size")]
    #[case("0x10", "unknown unit \"x10\"")]
    #[case("1.5G", "unknown unit \".5g\"")]
    #[case("0", "below the minimum of 4 KiB")]
    #[case("8T", "above the maximum of 4 TiB")]
    #[case("99999999999999999999", "too large")]
    #[case("20000000T", "too large")]
    fn bad_sizes_say_what_is_wrong(#[case] value: &str, #[case] says: &str) {
        let e = size(value, 4096, 4 * TIB).unwrap_err();
        assert!(e.contains(says), "{value}: {e}");
        assert!(!e.contains("KFD_MAX_BUFFER_SIZE"), "{e}");
    }

    #[rstest]
    #[case("1", Ok(1))]
    #[case("016", Ok(16))]
    #[case("0", Err("below the minimum of 1"))]
    #[case("17", Err("above the maximum of 16"))]
    #[case("two", Err("not a whole number"))]
    #[case("-2", Err("not a whole number"))]
    fn counts_are_decimal_and_in_range(#[case] value: &str, #[case] want: Result<u64, &str>) {
        match (count(value, 1, 16), want) {
            (Ok(n), Ok(w)) => assert_eq!(n, w),
            (Err(e), Err(w)) => assert!(e.contains(w), "{value}: {e}"),
            (got, want) => panic!("{value}: got {got:?}, want {want:?}"),
        }
    }
}
