//! Preemption: a dispatch stopped after any number of instructions, its workgroup saved to bytes,
//! restored into a fresh workgroup on a fresh executor and resumed, ends with the same memory as a
//! run never stopped — with LDS, barriers, scratch and atomics in flight. This is what compute
//! wave save/restore relies on.

#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::unwrap_used
)] // test code

use kfd_shader::testmem::Rig;
use kfd_shader::{Executor, NoClock, RestoreError, Stop, Workgroup};
use proptest::prelude::*;

mod common;

use common::{AtomicsBuffers, CODE_OBJECT};

/// A kernel with its inputs: the dispatch and the output range to compare.
struct Case {
    rig: Rig,
    dispatch: kfd_shader::Dispatch,
    out: (u64, usize),
}

fn args(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn inputs(n: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761) >> 7)
        .collect()
}

fn case(kernel: usize) -> Case {
    let mut rig = Rig::new(CODE_OBJECT, 1 << 20).unwrap();
    let (name, grid, wg, a, out) = match kernel {
        // LDS and a barrier per level, 4 waves per workgroup.
        0 => {
            let pin = rig.alloc(512 * 4).unwrap();
            let pout = rig.alloc(8).unwrap();
            rig.mem.write_u32s(pin, &inputs(512));
            ("lds_reduce", 512, 256, args(&[pin, pout]), (pout, 8))
        }
        // Private arrays in swizzled scratch.
        1 => {
            let pin = rig.alloc(512).unwrap();
            let pidx = rig.alloc(512).unwrap();
            let pout = rig.alloc(512).unwrap();
            rig.mem.write_u32s(pin, &inputs(128));
            rig.mem.write_u32s(
                pidx,
                &inputs(128).iter().map(|x| x >> 3).collect::<Vec<_>>(),
            );
            ("scratch", 128, 64, args(&[pin, pidx, pout]), (pout, 512))
        }
        // Flat accesses to LDS and private memory through calls.
        2 => {
            let pout = rig.alloc(256).unwrap();
            ("flat_apertures", 64, 64, args(&[pout]), (pout, 256))
        }
        // Global atomics: the end values do not depend on the order.
        _ => {
            let vals: Vec<i32> = inputs(100)
                .iter()
                .map(|x| i32::try_from(x % 97).unwrap())
                .collect();
            let b = AtomicsBuffers::new(&mut rig, &vals);
            // Slots are claimed in an order that depends on scheduling; compare the counters.
            ("atomics", 100, 32, b.args().0, (b.counters, 40))
        }
    };
    let dispatch = rig.dispatch(name, [grid, 1, 1], [wg, 1, 1], &a, 1).unwrap();
    Case { rig, dispatch, out }
}

/// Runs every workgroup in order; at each of `stops` (instruction counts from the start of the
/// dispatch) the current workgroup is saved, dropped with its executor, restored and resumed.
/// Returns the output bytes and the instructions executed.
fn run(c: &Case, stops: &[u64]) -> (Vec<u8>, u64) {
    let mut stops: Vec<u64> = stops.to_vec();
    stops.sort_unstable();
    let mut next_stop = stops.into_iter().peekable();
    let mut done = 0u64;
    let mut ex = Executor::new();
    for k in 0..c.dispatch.workgroup_count() {
        let mut wg = c.dispatch.workgroup(k, 0);
        loop {
            while next_stop.next_if(|&s| s <= done).is_some() {}
            let budget = next_stop.peek().map_or(u64::MAX, |&s| s - done);
            let st = ex.run(&mut wg, &c.rig.mem, &NoClock, budget);
            done += st.instructions;
            match st.stop {
                Stop::Done => break,
                Stop::Budget => {
                    let bytes = wg.save();
                    let back = Workgroup::restore(&bytes).unwrap();
                    assert_eq!(back, wg, "save and restore give the same workgroup");
                    drop(wg);
                    wg = back;
                    ex = Executor::new();
                }
                other => panic!("{other:?}"),
            }
        }
    }
    (c.rig.mem.read(c.out.0, c.out.1).unwrap(), done)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn a_dispatch_stopped_anywhere_and_restored_ends_with_the_same_memory(
        kernel in 0usize..4,
        fractions in prop::collection::vec(0.0f64..1.0, 1..5),
    ) {
        let (want, total) = run(&case(kernel), &[]);
        let stops: Vec<u64> = fractions.iter().map(|f| 1 + (f * (total - 1) as f64) as u64).collect();
        let (got, n) = run(&case(kernel), &stops);
        prop_assert_eq!(got, want);
        prop_assert_eq!(n, total, "no instruction ran twice or was skipped");
    }
}

#[test]
fn the_lds_reduction_restores_at_every_instruction_boundary() {
    let (want, total) = run(&case(0), &[]);
    for s in 1..total {
        let (got, _) = run(&case(0), &[s]);
        assert_eq!(got, want, "stopped after {s} instructions");
    }
}

#[test]
fn bytes_that_are_no_saved_workgroup_are_refused() {
    let c = case(2);
    let wg = c.dispatch.workgroup(0, 0);
    let bytes = wg.save();
    assert_eq!(
        Workgroup::restore(&bytes[..bytes.len() - 1]),
        Err(RestoreError::Truncated(bytes.len() - 4))
    );
    assert_eq!(Workgroup::restore(b"nope"), Err(RestoreError::Format));
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(
        Workgroup::restore(&longer),
        Err(RestoreError::Invalid("length"))
    );
}
