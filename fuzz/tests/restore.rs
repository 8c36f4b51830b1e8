//! The `restore` target's body: the demo's own image restores faithfully and leaves nothing
//! behind, and damaged images never break a check.

#![allow(clippy::unwrap_used)]

use fuzz::restore::{with_trailing_priv_byte, Fixture, Outcome};
use proptest::prelude::*;

#[test]
fn the_demo_image_restores_every_byte_and_leaves_nothing_behind() {
    let fx = Fixture::shared();
    assert_eq!(fx.restore(fx.image()).unwrap(), Outcome::Restored);
    // And again: the first restore left the node as it found it.
    assert_eq!(fx.restore(fx.image()).unwrap(), Outcome::Restored);
}

#[test]
fn an_image_that_does_not_decode_is_refused_cleanly() {
    let fx = Fixture::shared();
    let outcome = fx.restore(&fx.image()[..100]).unwrap();
    assert!(matches!(outcome, Outcome::Refused(_)), "{outcome:?}");
}

/// Issue 19, item 1: kfd-sim's RESTORE returns its error without closing the dma-buf fds it
/// installed when a step after the BOs fails; the check reports those fds. Runs once the fix
/// (branch h/sim) is merged: remove the `ignore` then.
#[test]
fn a_restore_refused_after_its_buffers_were_recreated_closes_their_fds() {
    let fx = Fixture::shared();
    let image = with_trailing_priv_byte(fx.image()).unwrap();
    let outcome = fx.restore(&image).unwrap();
    assert!(matches!(outcome, Outcome::Refused(_)), "{outcome:?}");
}

fn decode(image: &[u8]) -> Option<images::proto::CriuKfd> {
    images::frame::decode_framed(image, "kfd image", "criu_kfd", u64::MAX).ok()
}

/// Where the private data lies in an encoded image.
fn priv_data_range(image: &[u8]) -> std::ops::Range<usize> {
    let msg = decode(image).unwrap();
    let p = &msg.priv_data;
    assert!(p.len() > 64, "the demo image has private data");
    let start = image
        .windows(64)
        .position(|w| w == &p[..64])
        .filter(|&s| image.get(s..s + p.len()) == Some(p.as_slice()))
        .unwrap();
    start..start + p.len()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    /// Damage outside the driver's object records (the private data and their count): damage
    /// there makes RESTORE fail after it recreated the BOs, which finds the fd leak of issue 19
    /// (see the ignored test above); widen this once that is fixed.
    #[test]
    fn damaged_images_break_no_check(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        cut in proptest::option::of(any::<usize>()),
    ) {
        let fx = Fixture::shared();
        let mut image = fx.image().to_vec();
        let private = priv_data_range(&image);
        let outside = image.len() - private.len();
        for (pos, val) in edits {
            let mut i = pos % outside;
            if i >= private.start {
                i += private.len();
            }
            image[i] = val;
        }
        if let Some(cut) = cut {
            image.truncate(cut % image.len());
        }
        let seed = decode(fx.image()).unwrap();
        prop_assume!(decode(&image).is_none_or(|m| {
            m.num_of_objects == seed.num_of_objects && m.priv_data == seed.priv_data
        }));
        if let Err(v) = fx.restore(&image) {
            panic!("{v}");
        }
    }
}
