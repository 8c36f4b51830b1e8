//! Every target has seeds made from the demo, and each seed goes through its body without a
//! finding; the list that `scripts/fuzz.sh --list` prints is the list of bodies.

#![allow(clippy::unwrap_used)]

use images::proto::{CriuKfd, CriuRenderNode};

#[test]
fn the_targets_are_the_four_of_the_fuzzing_section() {
    let names: Vec<&str> = fuzz::TARGETS.iter().map(|t| t.name).collect();
    assert_eq!(names, ["images", "pages", "restore", "ioctls"]);
    assert!(fuzz::target("restore").is_some());
    assert!(fuzz::target("nothing").is_none());
    assert!(fuzz::seeds::seeds("nothing").is_none());
}

#[test]
fn every_seed_runs_through_its_body_without_a_finding() {
    for t in fuzz::TARGETS {
        let seeds = fuzz::seeds::seeds(t.name).unwrap();
        assert!(!seeds.is_empty(), "{} has no seeds", t.name);
        (t.init)();
        for (name, bytes) in &seeds {
            assert!(!bytes.is_empty(), "{}/{name} is empty", t.name);
            (t.body)(bytes);
        }
    }
}

#[test]
fn the_image_seeds_are_the_demo_checkpoint_images() {
    let seeds = fuzz::seeds::seeds("images").unwrap();
    let get = |n: &str| &seeds.iter().find(|(name, _)| name == n).unwrap().1;
    let kfd: CriuKfd =
        images::frame::decode_framed(get("kfd-image"), "seed", "criu_kfd", u64::MAX).unwrap();
    assert_eq!(kfd.num_of_gpus, 2);
    assert!(!kfd.bo_entries.is_empty());
    assert!(kfd.num_of_objects > 0, "queues and events");
    assert_eq!(&get("kfd-image")[8..], get("kfd-payload").as_slice());
    let render: CriuRenderNode =
        images::frame::decode_framed(get("amdgpu-renderD-2"), "seed", "criu_render_node", 64)
            .unwrap();
    assert!(kfd.device_entries.iter().any(|d| d.gpu_id == render.gpu_id));
}

#[test]
fn the_pages_seeds_are_the_demo_pages_files_in_every_reader_mode() {
    let seeds = fuzz::seeds::seeds("pages").unwrap();
    // Two GPUs, three modes each: checksums, plain, the header's own length.
    assert_eq!(seeds.len(), 6);
    for (name, bytes) in &seeds {
        assert!(name.starts_with("amdgpu-pages-"), "{name}");
        // Reader parameters (4 bytes), the 8-byte length header, 4 KiB of the demo's data.
        assert_eq!(bytes.len(), 4 + 8 + 4096, "{name}");
        assert!(
            bytes[12..].iter().any(|&b| b != 0),
            "{name}: the workload's pattern"
        );
    }
}
