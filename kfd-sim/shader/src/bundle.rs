//! Clang offload bundles: how HIP libraries carry their device code objects, one entry per
//! target, inside the host library's `.hip_fatbin` section (and in `hipcc --genco` files).
//!
//! Layout (little-endian): the magic `__CLANG_OFFLOAD_BUNDLE__`, a u64 count of entries, then
//! per entry a u64 offset (from the start of the bundle), a u64 size, a u64 length of the target
//! string and the target string itself (`hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-`, the host
//! entry `host-x86_64-unknown-linux-gnu-` with no bytes). ROCm 6 can compress a whole bundle
//! (magic `CCOB`, then a zlib or zstd stream); that form is recognised and not read.

/// The magic an uncompressed bundle starts with.
pub const MAGIC: &[u8; 24] = b"__CLANG_OFFLOAD_BUNDLE__";

/// The magic of a compressed bundle.
pub const COMPRESSED_MAGIC: &[u8; 4] = b"CCOB";

/// A bundle that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    /// The bytes do not start with the bundle magic.
    #[error("not a clang offload bundle")]
    NotBundle,
    /// A compressed bundle (`CCOB`): would need a zlib/zstd decoder.
    #[error("compressed clang offload bundle (CCOB) not supported")]
    Compressed,
    /// A header or entry points outside the bytes.
    #[error("clang offload bundle truncated")]
    Truncated,
}

/// One entry of a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The target string (`hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-`).
    pub triple: String,
    /// Where its bytes start, from the start of the bundle.
    pub offset: usize,
    /// Its bytes (a code object for device entries).
    pub data: &'a [u8],
}

impl Entry<'_> {
    /// The processor of a device entry (`gfx90a`), without target features.
    pub fn processor(&self) -> Option<&str> {
        let target = self.triple.split("--").nth(1)?;
        target.split(':').next().filter(|p| !p.is_empty())
    }

    /// The target features of the entry's target ID (`xnack-`, `sramecc+`).
    pub fn features(&self) -> impl Iterator<Item = &str> {
        self.triple
            .split("--")
            .nth(1)
            .unwrap_or_default()
            .split(':')
            .skip(1)
    }
}

fn u64_at(b: &[u8], at: usize) -> Result<u64, BundleError> {
    let s = b
        .get(at..at.checked_add(8).ok_or(BundleError::Truncated)?)
        .ok_or(BundleError::Truncated)?;
    let mut w = [0u8; 8];
    w.copy_from_slice(s);
    Ok(u64::from_le_bytes(w))
}

fn usz(v: u64) -> Result<usize, BundleError> {
    usize::try_from(v).map_err(|_| BundleError::Truncated)
}

/// Parses the bundle that starts at the first byte of `bytes` (which may go on past it).
pub fn parse(bytes: &[u8]) -> Result<Vec<Entry<'_>>, BundleError> {
    if bytes.starts_with(COMPRESSED_MAGIC) {
        return Err(BundleError::Compressed);
    }
    if !bytes.starts_with(MAGIC) {
        return Err(BundleError::NotBundle);
    }
    let count = usz(u64_at(bytes, MAGIC.len())?)?;
    let mut at = MAGIC.len() + 8;
    let mut out = Vec::new();
    for _ in 0..count {
        let offset = usz(u64_at(bytes, at)?)?;
        let size = usz(u64_at(bytes, at + 8)?)?;
        let len = usz(u64_at(bytes, at + 16)?)?;
        at += 24;
        let triple = bytes
            .get(at..at.checked_add(len).ok_or(BundleError::Truncated)?)
            .ok_or(BundleError::Truncated)?;
        at += len;
        let data = bytes
            .get(offset..offset.checked_add(size).ok_or(BundleError::Truncated)?)
            .ok_or(BundleError::Truncated)?;
        out.push(Entry {
            triple: String::from_utf8_lossy(triple).into_owned(),
            offset,
            data,
        });
    }
    Ok(out)
}

/// The length of the bundle at the start of `bytes`: the end of its header or of its last
/// entry, whichever is later.
pub fn extent(entries: &[Entry<'_>]) -> usize {
    entries
        .iter()
        .map(|e| e.offset + e.data.len())
        .max()
        .unwrap_or(0)
}

/// Where bundles (uncompressed or compressed) start in `bytes`, a host library's `.hip_fatbin`
/// section: every occurrence of a magic, skipping over the bundles found.
pub fn find_all(bytes: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let Some(k) = bytes[at..]
            .windows(4)
            .position(|w| w == &MAGIC[..4] || w == COMPRESSED_MAGIC)
        else {
            break;
        };
        let start = at + k;
        let rest = &bytes[start..];
        if rest.starts_with(COMPRESSED_MAGIC) {
            out.push(start);
            at = start + COMPRESSED_MAGIC.len();
        } else if rest.starts_with(MAGIC) {
            out.push(start);
            let len = parse(rest).map(|e| extent(&e)).unwrap_or(0);
            at = start + len.max(MAGIC.len());
        } else {
            at = start + 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_ids_split_into_processor_and_features() {
        let e = Entry {
            triple: "hipv4-amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-".into(),
            offset: 0,
            data: &[],
        };
        assert_eq!(e.processor(), Some("gfx90a"));
        assert_eq!(e.features().collect::<Vec<_>>(), ["sramecc+", "xnack-"]);
        let host = Entry {
            triple: "host-x86_64-unknown-linux-gnu-".into(),
            offset: 0,
            data: &[],
        };
        assert_eq!(host.processor(), None);
    }
}
