#![allow(clippy::cast_possible_truncation, clippy::unwrap_used)] // test code
//! The byte-granular copy kernel (kernels/misaligned.cl, the shape of the runtimes' misaligned
//! blits): byte loads and stores whose lanes fall in one translated run (every lane straight
//! through it) or across two runs (lane by lane), at odd offsets and lengths, checked byte for
//! byte with the bytes around the copy untouched.

use kfd_shader::testmem::{Args, Rig};
use kfd_shader::{run_dispatch, NoClock, Stop};
use rstest::rstest;

const MISALIGNED: &[u8] = include_bytes!("../kernels/misaligned.co");

/// Two regions of `len` bytes each, adjacent at `va` and `va + len`: separate host memory, so
/// one translation never covers an access across `va + len`.
const SRC_VA: u64 = 0x9000_0000;
const DST_VA: u64 = 0xa000_0000;

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| ((i * 131 + 7) % 251) as u8 ^ seed).collect()
}

#[rstest]
// Every wave inside one run.
#[case::within_a_run(3, 1, 8000, 64 * 4)]
// Waves whose 64 bytes straddle the edge between the two source regions and the two
// destination regions (lane by lane), the rest through one run.
#[case::across_runs(8192 - 30, 8192 - 61, 1000, 64 * 4)]
// More than four bytes per work-item: the grid-stride body, then the single bytes after it.
#[case::body_and_tail(5, 8192 - 1, 4 * 256 * 3 + 77, 256)]
#[case::less_than_a_wave(8190, 8191, 13, 64)]
fn copy_misaligned_moves_exactly_its_bytes(
    #[case] src_off: u64,
    #[case] dst_off: u64,
    #[case] n: usize,
    #[case] grid: u32,
) {
    let mut rig = Rig::new(MISALIGNED, 4096).unwrap();
    let len = 8192u64;
    for va in [SRC_VA, SRC_VA + len, DST_VA, DST_VA + len] {
        assert!(rig.mem.map(va, len, true));
    }
    let src = bytes(2 * len as usize, 0);
    let before = bytes(2 * len as usize, 0x5a);
    assert!(rig.mem.write(SRC_VA, &src));
    assert!(rig.mem.write(DST_VA, &before));
    let a = Args::default()
        .u64(SRC_VA + src_off)
        .u64(DST_VA + dst_off)
        .u64(n as u64);
    let d = rig
        .dispatch("copy_misaligned", [grid, 1, 1], [64, 1, 1], &a.0, 1)
        .unwrap();
    let out = run_dispatch(&d, &rig.mem, &NoClock, 1, 100_000_000);
    assert_eq!(out.stop, Stop::Done);
    let got = rig.mem.read(DST_VA, 2 * len as usize).unwrap();
    let (s, o) = (src_off as usize, dst_off as usize);
    assert_eq!(got[..o], before[..o], "bytes before the copy");
    assert_eq!(got[o..o + n], src[s..s + n], "the copy");
    assert_eq!(got[o + n..], before[o + n..], "bytes after the copy");
}
