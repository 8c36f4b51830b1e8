//! The fuzz targets' bodies (`images::fuzz`, run under AFL++ by `scripts/fuzz.sh`) run here
//! as property tests, so the normal test suite exercises them on every build: random bytes and
//! valid images with random damage.
#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)]

mod common;

use common::*;
use images::frame::encode_framed;
use proptest::prelude::*;

fn valid_images() -> Vec<Vec<u8>> {
    vec![
        encode_framed(&sample_kfd()),
        encode_framed(&sample_render_node()),
    ]
}

/// A pages-reader input with computed checksums over `payload`.
fn pages_input(flags: u8, chunk: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![flags | 2 | 4, chunk as u8, (chunk >> 8) as u8, 0];
    v.extend_from_slice(&(payload.len() as u64).to_ne_bytes());
    v.extend_from_slice(payload);
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn decode_random_bytes(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        images::fuzz::decode_images(&data);
    }

    #[test]
    fn decode_damaged_images(which in 0usize..2, edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6), cut in any::<usize>()) {
        let mut img = valid_images()[which].clone();
        for (pos, val) in edits {
            let i = pos % img.len();
            img[i] = val;
        }
        img.truncate(8 + cut % img.len());
        images::fuzz::decode_images(&img);
        // With the header fixed up, the decoder itself gets the damaged payload.
        let len = (img.len() - 8) as u64;
        img[..8].copy_from_slice(&len.to_ne_bytes());
        images::fuzz::decode_images(&img);
    }

    #[test]
    fn pages_random_bytes(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        images::fuzz::pages_reader(&data);
    }

    #[test]
    fn pages_valid_and_damaged(flags in any::<u8>(), chunk in 1u16..300, payload in proptest::collection::vec(any::<u8>(), 0..2000), flip in any::<Option<(usize, u8)>>()) {
        let mut input = pages_input(flags & !64, chunk, &payload);
        if let Some((pos, bit)) = flip {
            let i = pos % input.len();
            input[i] ^= 1 << (bit % 8);
        }
        images::fuzz::pages_reader(&input);
    }
}
