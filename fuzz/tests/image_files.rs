//! The `images` and `pages` targets' bodies ([`fuzz::image_files`], run under AFL++ by
//! `scripts/fuzz.sh`) run here as property tests, so the normal test suite exercises them on
//! every build: random bytes, and the demo checkpoint's images and pages with random damage.
#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)]

use std::sync::OnceLock;

use fuzz::image_files::{decode_images, pages_input, pages_reader};
use proptest::prelude::*;

/// The framed KFD image and a render-node image of the demo checkpoint.
fn valid_images() -> &'static [Vec<u8>] {
    static IMAGES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    IMAGES.get_or_init(|| {
        let seeds = fuzz::seeds::seeds("images").unwrap();
        let get = |n: &str| seeds.iter().find(|(name, _)| name == n).unwrap().1.clone();
        vec![get("kfd-image"), get("amdgpu-renderD-2")]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn decode_random_bytes(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        decode_images(&data);
    }

    #[test]
    fn decode_damaged_images(which in 0usize..2, edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6), cut in any::<usize>()) {
        let mut img = valid_images()[which].clone();
        for (pos, val) in edits {
            let i = pos % img.len();
            img[i] = val;
        }
        img.truncate(8 + cut % img.len());
        decode_images(&img);
        // With the header fixed up, the decoder itself gets the damaged payload.
        let len = (img.len() - 8) as u64;
        img[..8].copy_from_slice(&len.to_ne_bytes());
        decode_images(&img);
    }

    #[test]
    fn pages_random_bytes(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        pages_reader(&data);
    }

    #[test]
    fn pages_valid_and_damaged(flags in any::<u8>(), chunk in 1u16..300, payload in proptest::collection::vec(any::<u8>(), 0..2000), flip in any::<Option<(usize, u8)>>()) {
        // Checksums computed over `payload`.
        let mut input = pages_input((flags & !64) | 2 | 4, chunk, &payload);
        if let Some((pos, bit)) = flip {
            let i = pos % input.len();
            input[i] ^= 1 << (bit % 8);
        }
        pages_reader(&input);
    }
}
