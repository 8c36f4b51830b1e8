//! The data pattern of the workload's buffers: a pure function of the position, so any process
//! that knows the seed can check a buffer without a copy of it.

/// The pattern byte stream of buffer `index` on GPU number `gpu`: 8-byte words of a
/// splitmix64-style hash of the position.
pub(crate) fn pattern(seed: u64, gpu: usize, index: u32, offset: u64, out: &mut [u8]) {
    let key = seed ^ ((gpu as u64) << 48) ^ (u64::from(index) << 32);
    let mut pos = offset;
    let mut i = 0;
    while i < out.len() {
        let word = pos / 8;
        let mut z = key.wrapping_add(word.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let bytes = z.to_le_bytes();
        #[allow(clippy::cast_possible_truncation)] // pos % 8 < 8
        let skip = (pos % 8) as usize;
        let n = (8 - skip).min(out.len() - i);
        out[i..i + n].copy_from_slice(&bytes[skip..skip + n]);
        i += n;
        pos += n as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_position_addressed() {
        let mut whole = vec![0u8; 64];
        pattern(7, 1, 2, 0, &mut whole);
        let mut part = vec![0u8; 13];
        pattern(7, 1, 2, 21, &mut part);
        assert_eq!(&whole[21..34], &part[..]);
        let mut other = vec![0u8; 64];
        pattern(7, 1, 3, 0, &mut other);
        assert_ne!(whole, other);
    }
}
