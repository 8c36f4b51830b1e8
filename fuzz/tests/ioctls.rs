//! The `ioctls` target's body: its seeds do what they are written to do, and random programs
//! and damaged seeds never find anything in the simulator.

#![allow(clippy::unwrap_used)]

use fuzz::ioctls::{run, Step};
use proptest::prelude::*;
use rstest::rstest;

fn seed(name: &str) -> Vec<u8> {
    fuzz::seeds::seeds("ioctls")
        .unwrap()
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no ioctls seed {name}"))
        .1
}

fn answers(steps: &[Step]) -> Vec<String> {
    steps
        .iter()
        .map(|s| match s.result {
            Ok(_) => format!("{} ok", s.name),
            Err(e) => format!("{} {e}", s.name),
        })
        .collect()
}

#[rstest]
#[case::basics("basics", &["GET_VERSION ok", "GET_PROCESS_APERTURES_NEW ok", "AVAILABLE_MEMORY ok",
    "GET_CLOCK_COUNTERS ok", "SET_XNACK_MODE ok", "DBG_REGISTER_DEPRECATED EPERM"])]
#[case::memory("memory", &["ALLOC_MEMORY_OF_GPU ok", "MAP_MEMORY_TO_GPU ok",
    "UNMAP_MEMORY_FROM_GPU ok", "FREE_MEMORY_OF_GPU ok"])]
#[case::events("events", &["ALLOC_MEMORY_OF_GPU ok", "CREATE_EVENT ok", "SET_EVENT ok",
    "WAIT_EVENTS ok", "RESET_EVENT ok", "DESTROY_EVENT ok"])]
#[case::queue("aql-queue", &["CREATE_QUEUE ok", "DESTROY_QUEUE ok"])]
#[case::criu_cycle("criu-cycle", &["ALLOC_MEMORY_OF_GPU ok", "CRIU_OP ok", "CRIU_OP ok",
    "CRIU_OP ok", "CRIU_OP ok", "CRIU_OP ok"])]
#[case::render("render", &["AMDGPU_GEM_CREATE ok", "PRIME_HANDLE_TO_FD ok",
    "PRIME_FD_TO_HANDLE ok", "GEM_CLOSE ok", "AMDGPU_CTX ok", "AMDGPU_INFO ok"])]
#[case::two_gpus("two-gpus", &["ACQUIRE_VM ok", "ALLOC_MEMORY_OF_GPU ok", "nr 0x78 ENOTTY",
    "nr 0x99 EINVAL"])]
fn each_seed_program_gets_the_answers_it_was_written_for(
    #[case] name: &str,
    #[case] expected: &[&str],
) {
    assert_eq!(answers(&run(&seed(name))), expected);
}

#[test]
fn every_seed_is_a_seed_of_the_target() {
    let names: Vec<String> = fuzz::seeds::seeds("ioctls")
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        [
            "basics",
            "memory",
            "events",
            "aql-queue",
            "criu-cycle",
            "render",
            "two-gpus"
        ]
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_programs_find_nothing(data in proptest::collection::vec(any::<u8>(), 0..400)) {
        run(&data);
    }

    #[test]
    fn damaged_seeds_find_nothing(
        which in 0usize..7,
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
    ) {
        let mut input = fuzz::seeds::seeds("ioctls").unwrap()[which].1.clone();
        for (pos, val) in edits {
            let i = pos % input.len();
            input[i] = val;
        }
        run(&input);
    }
}
