//! The conventions of every `--json` document (described in `docs/json.md`): one object, whose
//! first field is `schema_version`; identifiers that may exceed 2^53 (hive ids, unique ids,
//! addresses) and GPU ids as `0x`-prefixed hexadecimal strings, so that a reader that keeps
//! numbers as doubles (jq, JavaScript) loses no bit; counts, sizes in bytes, node ids, minors and
//! versions as numbers.

use serde::{Serialize, Serializer};

/// The version of the documents' schema. Raised when a field changes meaning or goes away;
/// fields may be added without raising it.
pub const SCHEMA_VERSION: u32 = 1;

/// A report as its JSON document: `schema_version`, then the report's own fields.
#[derive(Debug, Serialize)]
pub(crate) struct Document<'a, R: ?Sized> {
    /// [`SCHEMA_VERSION`].
    pub(crate) schema_version: u32,
    /// The report.
    #[serde(flatten)]
    pub(crate) report: &'a R,
}

impl<'a, R: ?Sized> Document<'a, R> {
    /// The document of `report`.
    pub(crate) fn new(report: &'a R) -> Self {
        Self {
            schema_version: SCHEMA_VERSION,
            report,
        }
    }
}

/// `0x`-prefixed lowercase hexadecimal of `v`, at least four digits (as gpu ids are printed).
#[must_use]
pub(crate) fn hex(v: u64) -> String {
    format!("{v:#06x}")
}

/// Serializes a 32-bit id as [`hex`] (`#[serde(serialize_with = "json::hex32")]`).
///
/// # Errors
///
/// The serializer's.
pub(crate) fn hex32<S: Serializer>(v: &u32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex(u64::from(*v)))
}

/// Serializes a 64-bit id as [`hex`].
///
/// # Errors
///
/// The serializer's.
pub(crate) fn hex64<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex(*v))
}

/// Serializes an optional 32-bit id as [`hex`] or `null`.
///
/// # Errors
///
/// The serializer's.
#[allow(clippy::ref_option)] // serde hands serialize_with a reference to the field
pub(crate) fn opt_hex32<S: Serializer>(v: &Option<u32>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(id) => s.serialize_str(&hex(u64::from(*id))),
        None => s.serialize_none(),
    }
}

/// Serializes a list of 32-bit ids as [`hex`] strings.
///
/// # Errors
///
/// The serializer's.
pub(crate) fn hex32_list<S: Serializer>(v: &[u32], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(|&id| hex(u64::from(id))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Ids {
        #[serde(serialize_with = "hex32")]
        gpu_id: u32,
        #[serde(serialize_with = "hex64")]
        hive_id: u64,
        #[serde(serialize_with = "hex32_list")]
        gpus: Vec<u32>,
        count: u64,
    }

    #[test]
    fn ids_are_hex_strings_that_keep_every_bit_and_the_version_comes_first() {
        let ids = Ids {
            gpu_id: 0x1a2b,
            hive_id: 0x4a7e_0000_0000_0001,
            gpus: vec![1, 0xffff_ffff],
            count: 3,
        };
        let text = serde_json::to_string(&Document::new(&ids)).unwrap();
        assert_eq!(
            text,
            r#"{"schema_version":1,"gpu_id":"0x1a2b","hive_id":"0x4a7e000000000001","gpus":["0x0001","0xffffffff"],"count":3}"#
        );
    }
}
