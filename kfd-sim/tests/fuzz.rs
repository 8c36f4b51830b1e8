//! Random ioctl numbers, sizes, directions and argument bytes (with wild pointers) never panic
//! or hang the simulator: every user access is a process_vm_readv/writev that fails cleanly.

#![allow(clippy::unwrap_used)] // test helpers, like the tests themselves, panic on failure

mod common;

use common::*;
use kfd_abi::ioctl::{encode, Dir};
use kfd_sim::Preset;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Arg {
    Null,
    Wild(u64),
    Buffer(Vec<u8>),
}

fn arg() -> impl Strategy<Value = Arg> {
    prop_oneof![
        Just(Arg::Null),
        prop_oneof![
            Just(0x10u64),
            Just(0xffff_8000_0000_0000),
            Just(u64::MAX - 7),
            Just(0x7fff_ffff_f000),
            any::<u64>()
        ]
        .prop_map(Arg::Wild),
        // Mostly small, sometimes zero-filled: zeros make many fields look plausible.
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..600),
            (0usize..600).prop_map(|n| vec![0u8; n])
        ]
        .prop_map(Arg::Buffer),
    ]
}

#[derive(Debug, Clone)]
struct Call {
    nr: u8,
    size: usize,
    dir: u8,
    ty: u8,
    arg: Arg,
    /// Write a real gpu id at this 4-byte-aligned offset of the buffer.
    gpu_at: Option<usize>,
}

fn call() -> impl Strategy<Value = Call> {
    (
        prop_oneof![0u8..0x26, any::<u8>()],
        prop_oneof![0usize..128, 0usize..0x3fff],
        0u8..4,
        prop_oneof![Just(b'K'), any::<u8>()],
        arg(),
        prop::option::of(0usize..32),
    )
        .prop_map(|(nr, size, dir, ty, arg, gpu_at)| Call {
            nr,
            size,
            dir,
            ty,
            arg,
            gpu_at,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_ioctls_never_panic_or_hang(calls in prop::collection::vec(call(), 1..6)) {
        let e = env(Preset::mi50x1());
        let t = e.kfd.transport();
        let gpu = e.gpus[0].get();
        for c in calls {
            let dir = match c.dir { 0 => Dir::None, 1 => Dir::Write, 2 => Dir::Read, _ => Dir::ReadWrite };
            let cmd = encode(dir, c.ty, c.nr, c.size);
            let mut buf;
            let addr = match c.arg {
                Arg::Null => 0,
                Arg::Wild(a) => a,
                Arg::Buffer(b) => {
                    buf = b;
                    // The kernel may copy `size` bytes back: the buffer must hold them.
                    if buf.len() < c.size { buf.resize(c.size, 0); }
                    if let Some(at) = c.gpu_at.map(|i| i * 4).filter(|at| at + 4 <= buf.len()) {
                        buf[at..at + 4].copy_from_slice(&gpu.to_le_bytes());
                    }
                    buf.as_mut_ptr() as u64
                }
            };
            let _ = t.ioctl_at(cmd, addr);
        }
        // The simulator still answers normally afterwards.
        prop_assert_eq!(e.kfd.get_version().unwrap().major, 1);
    }
}
