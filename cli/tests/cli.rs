//! `amdgpu-cr` subcommands: reports and their text (snapshots), JSON documents, exit codes.
//!
//! Images are built with the `images` crate the way a dump writes them, topologies with
//! topology's builders and written as sysfs trees; every output is deterministic (temporary
//! paths are shown as `DIR` and `ROOT`).

#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)] // test helpers, small values

use std::fs::File;
use std::os::fd::AsFd;
use std::path::Path;
use std::process::Command;

use amdgpu_cr::check::{
    check_dir, check_dir_on, render_minors, CheckReport, EnvChecks, MapOutcome, MapReport,
};
use amdgpu_cr::inspect::{inspect, PagesStatus};
use amdgpu_cr::topo::TopologyReport;
use amdgpu_cr::{Format, Outcome, Report};
use images::proto::{CriuDmabufNode, CriuKfd, CriuRenderNode, DrmBoEntry, KfdBoEntry};
use images::{DmabufImage, ImageFile, KfdImage, PagesFile, PagesWriter, RenderNodeImage};
use kfd_abi::AllocFlags;
use tempfile::TempDir;
use topology::builder::{GpuSpec, TopologyBuilder};
use topology::model::keys;
use topology::{Check, CheckOptions, Topology};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
/// Small checksum chunks, so a few hundred KiB make several chunks.
const CHUNK: u32 = 64 << 10;

// ---------------------------------------------------------------------------------------------
// Fixtures

/// Two NUMA nodes with two MI100 each; explicit gpu_ids when given; firmware `fw`.
fn mi100x4(ids: Option<[u32; 4]>, fw: u64) -> Topology {
    let mut b = TopologyBuilder::new().cpus(2);
    for i in 0..4 {
        let mut spec = GpuSpec::mi100().numa(i / 2).prop(keys::FW_VERSION, fw);
        if let Some(ids) = ids {
            spec = spec.gpu_id(ids[i]);
        }
        b = b.gpu(spec);
    }
    b.build()
}

/// One NUMA node with two MI100.
fn mi100x2(fw: u64) -> Topology {
    TopologyBuilder::new()
        .cpus(1)
        .gpus(2, &GpuSpec::mi100().prop(keys::FW_VERSION, fw))
        .build()
}

/// Writes `t` as a sysfs tree into a new temporary directory.
fn tree(t: &Topology) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    topology::write(t, dir.path()).unwrap();
    dir
}

/// Parses the tree under `dir` (what the commands see).
fn parsed(dir: &TempDir) -> Topology {
    topology::parse(dir.path()).unwrap()
}

/// One BO of an image: the GPU's index in the topology, its flags and size.
struct Bo(usize, AllocFlags, u64);

/// A deterministic byte of the contents of GPU `gpu` at payload offset `i`.
fn byte(gpu: u32, i: u64) -> u8 {
    (i.wrapping_mul(31).wrapping_add(u64::from(gpu)) % 251) as u8
}

/// Writes `amdgpu-kfd-<id>.img` of a process on machine `t` with `bos`, and its pages files
/// (with checksums when `checksums`), as a dump does.
fn write_kfd_image(
    dir: &Path,
    id: u32,
    t: &Topology,
    bos: &[Bo],
    checksums: bool,
    shm: Option<(u64, u32)>,
) {
    let d = File::open(dir).unwrap();
    let gpus: Vec<u32> = t.gpus().map(|g| g.gpu_id).collect();
    let entries = amdgpu_plugin::topology_image::to_device_entries(t);
    let bo_entries: Vec<KfdBoEntry> = bos
        .iter()
        .enumerate()
        .map(|(i, Bo(g, flags, size))| KfdBoEntry {
            addr: 0x7f00_0000_0000 + (i as u64) * 0x1000_0000,
            size: *size,
            offset: 0x1_0000_0000 * (i as u64 + 1),
            alloc_flags: flags.bits(),
            gpu_id: gpus[*g],
            // The first BO is the one the directory's dma-buf image (GEM handle 3) shares.
            handle: if i == 0 { 3 } else { u32::MAX },
        })
        .collect();
    let mut pages_checksums = Vec::new();
    for &gpu in &gpus {
        let len = images::pages::kfd_pages_len(&bo_entries, gpu);
        if len == 0 {
            continue;
        }
        let which = PagesFile::Kfd { id, gpu_id: gpu };
        let mut w = PagesWriter::new(d.as_fd(), which, len, checksums.then_some(CHUNK)).unwrap();
        let data: Vec<u8> = (0..len).map(|i| byte(gpu, i)).collect();
        w.write_chunk(&data).unwrap();
        pages_checksums.extend(w.finish().unwrap());
    }
    let num_of_gpus = gpus.len() as u32;
    let msg = CriuKfd {
        pid: 4242,
        num_of_gpus,
        num_of_cpus: entries.len() as u32 - num_of_gpus,
        device_entries: entries,
        num_of_bos: bo_entries.len() as u64,
        bo_entries,
        num_of_objects: 7,
        shared_mem_size: shm.map_or(0, |s| s.0),
        shared_mem_magic: shm.map_or(0, |s| s.1),
        priv_data: vec![0xa5; 1536],
        pages_checksums,
    };
    KfdImage::write(d.as_fd(), id, &msg).unwrap();
}

/// A typical process: VRAM and GTT BOs with contents, plus USERPTR, doorbell and MMIO BOs, on
/// the first two GPUs of `t` (the others are visible but unused).
fn typical_bos() -> Vec<Bo> {
    vec![
        Bo(0, AllocFlags::VRAM | AllocFlags::WRITABLE, 256 * KIB),
        Bo(0, AllocFlags::VRAM, 64 * KIB),
        Bo(0, AllocFlags::GTT, 8 * KIB),
        Bo(0, AllocFlags::USERPTR, 2 * MIB),
        Bo(0, AllocFlags::DOORBELL, 8 * KIB),
        Bo(0, AllocFlags::MMIO_REMAP, 4 * KIB),
        Bo(1, AllocFlags::VRAM, 128 * KIB),
        Bo(1, AllocFlags::DOORBELL, 8 * KIB),
    ]
}

/// An image directory with one process checkpointed on `t` (id 7) and a render-node image of
/// its first GPU (id 8) and a dma-buf image (id 9).
fn image_dir(t: &Topology, checksums: bool) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_kfd_image(
        dir.path(),
        7,
        t,
        &typical_bos(),
        checksums,
        Some((4096, 0x4853_4d54)),
    );
    let d = File::open(dir.path()).unwrap();
    let first = t.gpus().next().unwrap();
    let render = CriuRenderNode {
        gpu_id: first.gpu_id,
        id: 8,
        drm_render_minor: first.render_minor(),
        ..Default::default()
    };
    RenderNodeImage::write(d.as_fd(), 8, &render).unwrap();
    DmabufImage::write(d.as_fd(), 9, &CriuDmabufNode { gem_handle: 3 }).unwrap();
    // Not ours: ignored.
    std::fs::write(dir.path().join("core-4242.img"), b"criu's own").unwrap();
    dir
}

fn text(report: &impl Report) -> String {
    let mut out = Vec::new();
    report.render(&mut out).unwrap();
    String::from_utf8(out).unwrap()
}

fn json(report: &impl Report) -> serde_json::Value {
    let mut out = Vec::new();
    report.emit(Format::Json, &mut out).unwrap();
    serde_json::from_slice(&out).unwrap()
}

fn keys_of(v: &serde_json::Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    k.sort_unstable();
    k
}

fn all_on() -> EnvChecks {
    EnvChecks::from_options(CheckOptions::default())
}

fn check(dir: &TempDir, local: &Topology, checks: &EnvChecks) -> CheckReport {
    check_dir(dir.path(), "DIR", "ROOT", local, checks).unwrap()
}

fn corrupt(path: &Path, offset: u64) {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.read_exact(&mut b).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(&[!b[0]]).unwrap();
}

// ---------------------------------------------------------------------------------------------
// inspect

#[test]
fn inspect_summarises_every_image() {
    let t = mi100x4(Some([0x1001, 0x1002, 0x1003, 0x1004]), 65);
    let dir = image_dir(&t, true);
    let report = inspect(dir.path(), "DIR", false).unwrap();
    assert_eq!(report.outcome(), Outcome::Success);
    insta::assert_snapshot!("inspect_text", text(&report));
}

/// criu-dev's plugin writes its render-node pages files without checksums and with whatever its
/// stack holds where the length header goes; inspect checks them as the restore reads them.
#[test]
fn inspect_reads_upstreams_render_pages_files_past_their_unset_length_header() {
    let t = mi100x2(65);
    let dir = image_dir(&t, false);
    let d = File::open(dir.path()).unwrap();
    let first = t.gpus().next().unwrap();
    let render = CriuRenderNode {
        gpu_id: first.gpu_id,
        id: 8,
        drm_render_minor: first.render_minor(),
        num_of_bos: 1,
        bo_entries: vec![DrmBoEntry {
            size: 64 * KIB,
            handle: 1,
            preferred_domains: 4, // VRAM
            ..Default::default()
        }],
        ..Default::default()
    };
    RenderNodeImage::write(d.as_fd(), 8, &render).unwrap();
    let file = PagesFile::Drm {
        id: 8,
        minor: first.render_minor(),
        index: 0,
    }
    .file_name();
    let mut bytes = 0x7ffd_1234_5678u64.to_ne_bytes().to_vec();
    bytes.resize(8 + 64 * 1024, 0x5a);
    std::fs::write(dir.path().join(&file), &bytes).unwrap();

    for verify in [false, true] {
        let report = inspect(dir.path(), "DIR", verify).unwrap();
        let summary = report.pages_files.iter().find(|p| p.file == file).unwrap();
        assert_eq!(summary.status, PagesStatus::HeaderUnset { read: verify });
        assert_eq!(report.outcome(), Outcome::Success, "{}", text(&report));
    }
    // A short file is still wrong.
    bytes.truncate(8 + 1024);
    std::fs::write(dir.path().join(&file), &bytes).unwrap();
    let report = inspect(dir.path(), "DIR", true).unwrap();
    let summary = report.pages_files.iter().find(|p| p.file == file).unwrap();
    assert!(
        matches!(summary.status, PagesStatus::Bad { .. }),
        "{:?}",
        summary.status
    );
}

#[test]
fn inspect_verify_reads_every_chunk_and_names_the_corrupt_one() {
    let t = mi100x2(65);
    let dir = image_dir(&t, true);
    let first = t.gpus().next().unwrap().gpu_id;
    let file = images::names::kfd_pages(7, first);
    // Payload offset 2 * CHUNK + 5 is in chunk 2; the file has an 8-byte header.
    corrupt(&dir.path().join(&file), 8 + 2 * u64::from(CHUNK) + 5);

    // Without --verify only lengths are checked: the damage is not seen.
    let quick = inspect(dir.path(), "DIR", false).unwrap();
    assert_eq!(quick.outcome(), Outcome::Success);

    let full = inspect(dir.path(), "DIR", true).unwrap();
    assert_eq!(full.outcome(), Outcome::Negative);
    let bad = full.pages_files.iter().find(|p| p.file == file).unwrap();
    assert!(
        matches!(bad.status, PagesStatus::Bad { chunk: Some(2), .. }),
        "{:?}",
        bad.status
    );
    let other = full.pages_files.iter().find(|p| p.file != file).unwrap();
    assert_eq!(
        other.status,
        PagesStatus::Ok {
            read: true,
            verified: true
        }
    );
    let out = text(&full);
    assert!(out.contains("CORRUPT (chunk 2)"), "{out}");
    assert!(out.contains("Result: 1 problem\n"), "{out}");
}

#[test]
fn inspect_without_checksums_verifies_lengths_only() {
    let t = mi100x2(65);
    let dir = image_dir(&t, false);
    let report = inspect(dir.path(), "DIR", true).unwrap();
    assert_eq!(report.outcome(), Outcome::Success);
    assert!(report.pages_files.iter().all(|p| p.status
        == PagesStatus::Ok {
            read: true,
            verified: false
        }));
    assert!(text(&report).contains("page checksums: none"));
}

#[test]
fn inspect_reports_missing_truncated_and_orphan_pages_files() {
    let t = mi100x2(65);
    let dir = image_dir(&t, true);
    let ids: Vec<u32> = t.gpus().map(|g| g.gpu_id).collect();
    std::fs::remove_file(dir.path().join(images::names::kfd_pages(7, ids[0]))).unwrap();
    let second = dir.path().join(images::names::kfd_pages(7, ids[1]));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&second)
        .unwrap();
    f.set_len(100).unwrap();
    std::fs::write(dir.path().join("amdgpu-pages-99-abcd.img"), [0u8; 8]).unwrap();

    let report = inspect(dir.path(), "DIR", false).unwrap();
    assert_eq!(report.outcome(), Outcome::Negative);
    // The missing file, the truncated one and the orphan (its image is not there).
    assert_eq!(report.problems, 3);
    let status = |name: &str| {
        &report
            .pages_files
            .iter()
            .find(|p| p.file == name)
            .unwrap()
            .status
    };
    assert_eq!(
        *status(&images::names::kfd_pages(7, ids[0])),
        PagesStatus::Missing
    );
    assert!(matches!(
        status(&images::names::kfd_pages(7, ids[1])),
        PagesStatus::Bad { chunk: None, message } if message.contains("truncated")
    ));
    assert_eq!(*status("amdgpu-pages-99-abcd.img"), PagesStatus::Orphan);
}

#[test]
fn inspect_json_is_one_document_with_the_summary() {
    let t = mi100x2(65);
    let dir = image_dir(&t, true);
    let v = json(&inspect(dir.path(), "DIR", true).unwrap());
    assert_eq!(
        keys_of(&v),
        [
            "dir",
            "dmabufs",
            "has_images",
            "kfd",
            "pages_files",
            "problems",
            "provenance",
            "render_nodes",
            "schema_version",
            "verify",
        ]
    );
    assert_eq!(v["provenance"]["writer"], "ours");
    let kfd = &v["kfd"][0];
    assert_eq!(kfd["file"], "amdgpu-kfd-7.img");
    let c = &kfd["content"];
    assert_eq!(c["pid"], 4242);
    assert_eq!(c["num_of_objects"], 7);
    assert_eq!(c["priv_data_size"], 1536);
    assert_eq!(c["shared_memory"]["size"], 4096);
    assert_eq!(c["checksummed_files"], 2);
    let gpu0 = &c["gpus"][0];
    assert_eq!(gpu0["bos"][0]["kind"], "VRAM");
    assert_eq!(gpu0["bos"][0]["count"], 2);
    assert_eq!(gpu0["bos"][0]["size"], 320 * KIB);
    assert_eq!(gpu0["contents"], 328 * KIB);
    assert_eq!(gpu0["model"], "MI100");
    assert_eq!(v["pages_files"][0]["status"]["state"], "ok");
    assert_eq!(v["pages_files"][0]["status"]["verified"], true);
    assert_eq!(
        v["render_nodes"][0]["gpu_id"],
        format!("{:#06x}", t.gpus().next().unwrap().gpu_id)
    );
    assert_eq!(gpu0["links"][0]["link_type"], "PCIe");
    assert_eq!(v["dmabufs"][0]["gem_handle"], 3);
}

#[test]
fn inspect_reports_an_image_that_does_not_decode() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("amdgpu-kfd-3.img"), [1, 2, 3]).unwrap();
    let report = inspect(dir.path(), "DIR", false).unwrap();
    assert_eq!(report.outcome(), Outcome::Negative);
    let out = text(&report);
    assert!(
        out.contains("amdgpu-kfd-3.img (3 B): DOES NOT DECODE"),
        "{out}"
    );
}

// ---------------------------------------------------------------------------------------------
// check

#[test]
fn check_restorable_with_other_gpu_ids() {
    let source = mi100x4(None, 65);
    let dir = image_dir(&source, true);
    let root = tree(&mi100x4(Some([0x1001, 0x1002, 0x1003, 0x1004]), 65));
    let report = check(&dir, &parsed(&root), &all_on());
    assert!(report.restorable);
    assert_eq!(report.outcome(), Outcome::Success);
    let Some(MapOutcome::Mapped { mapping }) = &report.images[0].mapping else {
        panic!("not mapped: {report:?}");
    };
    assert!(!mapping.identity);
    assert_eq!(report.render_nodes[0].local_render_minor, Some(128));
    insta::assert_snapshot!("check_restorable_remapped", text(&report));
}

#[test]
fn check_refuses_older_firmware_and_names_the_variable() {
    let dir = image_dir(&mi100x4(None, 65), true);
    let local = parsed(&tree(&mi100x4(None, 60)));
    let report = check(&dir, &local, &all_on());
    assert!(!report.restorable);
    assert_eq!(report.outcome(), Outcome::Negative);
    let Some(MapOutcome::Refused { remedy, .. }) = &report.images[0].mapping else {
        panic!("mapped: {report:?}");
    };
    assert_eq!(
        remedy.as_ref().map(|r| r.set_to_zero.clone()),
        Some(vec!["KFD_FW_VER_CHECK"])
    );
    let out = text(&report);
    assert!(
        out.contains("setting KFD_FW_VER_CHECK=0 would allow it"),
        "{out}"
    );
    insta::assert_snapshot!("check_refused_firmware", out);

    // Two checks fail: the smallest set that helps has both.
    let mut both = mi100x4(None, 60);
    for id in both.gpus().map(|g| g.gpu_id).collect::<Vec<_>>() {
        let node = both.gpu_mut(id).unwrap();
        node.properties.set(keys::SDMA_FW_VERSION, 1);
    }
    let report = check(&dir, &both, &all_on());
    let Some(MapOutcome::Refused { remedy, .. }) = &report.images[0].mapping else {
        panic!("mapped: {report:?}");
    };
    assert_eq!(
        remedy.as_ref().map(|r| r.set_to_zero.clone()),
        Some(vec!["KFD_FW_VER_CHECK", "KFD_SDMA_FW_VER_CHECK"])
    );

    // The same with the check off: restorable, and the report says the check is off.
    let off = EnvChecks::from_lookup(|v| (v == Check::FwVersion.env_var()).then(|| "0".into()));
    let report = check(&dir, &local, &off);
    assert!(report.restorable);
    assert!(text(&report).contains("Checks off: KFD_FW_VER_CHECK"));
}

#[test]
fn check_refuses_too_few_gpus_and_no_variable_helps() {
    let dir = image_dir(&mi100x4(None, 65), true);
    let local = parsed(&tree(&mi100x2(65)));
    let report = check(&dir, &local, &all_on());
    assert!(!report.restorable);
    let Some(MapOutcome::Refused { remedy, error, .. }) = &report.images[0].mapping else {
        panic!("mapped: {report:?}");
    };
    assert!(remedy.is_none());
    assert!(matches!(
        error,
        topology::MapError::GpuCount {
            image_gpus: 4,
            local_gpus: 2
        }
    ));
    // The render node depends on the refused KFD image.
    assert!(report.render_nodes[0].problem.is_some());
    insta::assert_snapshot!("check_refused_gpu_count", text(&report));
}

#[test]
fn check_names_a_missing_pages_file_and_still_shows_the_mapping() {
    let t = mi100x4(None, 65);
    let dir = image_dir(&t, true);
    let second = t.gpus().nth(1).unwrap().gpu_id;
    let missing = images::names::kfd_pages(7, second);
    std::fs::remove_file(dir.path().join(&missing)).unwrap();
    let report = check(&dir, &parsed(&tree(&t)), &all_on());
    assert!(!report.restorable);
    let k = &report.images[0];
    assert_eq!(k.problems.len(), 1);
    assert_eq!(k.problems[0].file, missing);
    assert!(k.mapping.as_ref().is_some_and(MapOutcome::is_mapped));
    let out = text(&report);
    assert!(
        out.contains(&format!(
            "image problem in {missing}: cannot open pages file"
        )),
        "{out}"
    );
}

#[test]
fn check_reports_bad_counts() {
    let t = mi100x2(65);
    let dir = tempfile::tempdir().unwrap();
    write_kfd_image(dir.path(), 5, &t, &typical_bos(), true, None);
    let d = File::open(dir.path()).unwrap();
    let mut msg = KfdImage::read(d.as_fd(), 5).unwrap();
    msg.num_of_bos += 1;
    KfdImage::write(d.as_fd(), 5, &msg).unwrap();
    let report = check(&dir, &t, &all_on());
    assert!(!report.restorable);
    assert_eq!(report.images[0].problems[0].file, "amdgpu-kfd-5.img");
    assert!(report.images[0].problems[0]
        .message
        .contains("num_of_bos is 9 but the image lists 8 BO entries"));
}

#[test]
fn check_json_has_the_verdict_and_the_mapping() {
    let dir = image_dir(&mi100x4(None, 65), true);
    let local = parsed(&tree(&mi100x4(None, 60)));
    let v = json(&check(&dir, &local, &all_on()));
    assert_eq!(
        keys_of(&v),
        [
            "checks",
            "devices",
            "dir",
            "has_images",
            "images",
            "local_gpus",
            "node_gpus",
            "orphans",
            "render_nodes",
            "restorable",
            "schema_version",
            "topology_root",
        ]
    );
    assert_eq!(v["restorable"], false);
    let m = &v["images"][0]["mapping"];
    assert_eq!(m["result"], "refused");
    assert_eq!(m["error"]["kind"], "no_candidate");
    assert_eq!(
        m["error"]["unplaced"][0]["rejections"][0]["reason"]["check"],
        "FwVersion"
    );
    assert_eq!(m["remedy"]["set_to_zero"][0], "KFD_FW_VER_CHECK");
    assert_eq!(m["remedy"]["mapping"]["gpus"].as_array().unwrap().len(), 4);
    assert_eq!(v["checks"]["off"].as_array().unwrap().len(), 0);
}

// ---------------------------------------------------------------------------------------------
// check onto a node with more GPUs, and for a container's devices

/// MI250X GCDs, two per CPU node, in hives of `hive`, with gpu_ids from `first_id`.
fn gcds(n: usize, hive: usize, first_id: u32) -> Topology {
    let mut b = TopologyBuilder::new().cpus(n.div_ceil(2));
    for i in 0..n {
        b = b.gpu(
            GpuSpec::mi250x_gcd()
                .numa(i / 2)
                .gpu_id(first_id + i as u32),
        );
    }
    for h in 0..n / hive {
        b = b.hive(h * hive..(h + 1) * hive);
    }
    b.build()
}

/// One MI250X (two GCDs in a hive on one CPU node), checkpointed.
fn pair_image() -> TempDir {
    image_dir(&gcds(2, 2, 0x1000), true)
}

fn check_devices(dir: &TempDir, node: &Topology, devices: &[u32]) -> CheckReport {
    check_dir_on(dir.path(), "DIR", "ROOT", node, Some(devices), &all_on()).unwrap()
}

fn mapped(report: &CheckReport) -> Vec<u32> {
    let Some(MapOutcome::Mapped { mapping }) = &report.images[0].mapping else {
        panic!("not mapped: {}", text(report));
    };
    mapping.gpus.iter().map(|g| g.local_gpu_id).collect()
}

#[test]
fn check_onto_more_gpus_says_which_it_uses_and_which_it_leaves_out() {
    let dir = pair_image();
    let report = check(&dir, &parsed(&tree(&gcds(8, 8, 0xc000))), &all_on());
    assert!(report.restorable, "{}", text(&report));
    // A pair on one CPU node, in one hive: GCDs 0 and 1.
    assert_eq!(mapped(&report), [0xc000, 0xc001]);
    assert_eq!(report.render_nodes[0].local_render_minor, Some(128));
    let out = text(&report);
    assert!(
        out.contains("Uses 2 of the 8 GPUs here; left out:"),
        "{out}"
    );
    insta::assert_snapshot!("check_subset_two_of_eight", out);
}

#[test]
fn check_with_devices_answers_for_a_container() {
    let dir = pair_image();
    let node = parsed(&tree(&gcds(8, 8, 0xc000)));
    // renderD129 on CPU node 0, renderD130 and renderD131 on CPU node 1: the pair takes those.
    let report = check_devices(&dir, &node, &[129, 130, 131]);
    assert!(report.restorable, "{}", text(&report));
    assert_eq!((report.node_gpus, report.local_gpus), (8, 3));
    assert_eq!(mapped(&report), [0xc002, 0xc003]);
    insta::assert_snapshot!("check_devices_container", text(&report));

    // Two GCDs on different CPU nodes: not for a pair from one CPU node, unless the NUMA check
    // is off.
    let report = check_devices(&dir, &node, &[128, 130]);
    assert!(!report.restorable);
    let Some(MapOutcome::Refused { remedy, .. }) = &report.images[0].mapping else {
        panic!("mapped: {}", text(&report));
    };
    assert_eq!(
        remedy.as_ref().map(|r| r.set_to_zero.clone()),
        Some(vec!["KFD_NUMA_CHECK"])
    );
    insta::assert_snapshot!("check_devices_refused_numa", text(&report));

    // One GCD is not enough for two.
    let report = check_devices(&dir, &node, &[128]);
    assert!(!report.restorable);
    assert!(text(&report).contains("has only 1"), "{}", text(&report));
}

#[test]
fn check_refuses_a_hive_when_no_hive_here_has_enough_fitting_gpus() {
    let dir = image_dir(&gcds(8, 8, 0x1000), true);
    let mut node = gcds(16, 8, 0xc000);
    for id in [0xc003, 0xc00c] {
        node.gpu_mut(id)
            .unwrap()
            .properties
            .set(keys::FW_VERSION, 10);
    }
    let report = check(&dir, &parsed(&tree(&node)), &all_on());
    assert!(!report.restorable);
    let Some(MapOutcome::Refused { error, remedy, .. }) = &report.images[0].mapping else {
        panic!("mapped: {}", text(&report));
    };
    assert!(matches!(error, topology::MapError::NoHiveFits { .. }));
    assert_eq!(
        remedy.as_ref().map(|r| r.set_to_zero.clone()),
        Some(vec!["KFD_FW_VER_CHECK"])
    );
    insta::assert_snapshot!("check_refused_no_hive_fits", text(&report));
}

#[test]
fn device_lists_name_render_nodes_of_the_topology() {
    let node = gcds(4, 4, 0xc000);
    let list = |d: &[&str]| {
        let d: Vec<String> = d.iter().map(|s| (*s).to_owned()).collect();
        render_minors(&d, &node, "ROOT")
    };
    assert_eq!(
        list(&[
            "/dev/kfd",
            "/dev/dri/renderD131",
            "renderD129",
            " /dev/dri/renderD131"
        ])
        .unwrap(),
        [131, 129]
    );
    let err = list(&["/dev/dri/card0"]).unwrap_err().to_string();
    assert!(err.contains("not a render node"), "{err}");
    let err = list(&["/dev/dri/renderD140"]).unwrap_err().to_string();
    assert!(
        err.contains("renderD140 is not a GPU of the topology at ROOT")
            && err.contains("renderD128, renderD129, renderD130, renderD131"),
        "{err}"
    );
    let err = list(&["/dev/kfd"]).unwrap_err().to_string();
    assert!(err.contains("no render node"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// topology and map

/// Two NUMA nodes; four MI250X GCDs in one xGMI hive, two per NUMA node.
fn mi250x4() -> Topology {
    TopologyBuilder::new()
        .cpus(2)
        .gpus(2, &GpuSpec::mi250x_gcd().numa(0))
        .gpus(2, &GpuSpec::mi250x_gcd().numa(1))
        .hive(0..4)
        .build()
}

#[test]
fn topology_table_of_a_four_gpu_hive() {
    let root = tree(&mi250x4());
    let report = TopologyReport::new("ROOT", &parsed(&root));
    assert_eq!(report.gpus.len(), 4);
    assert_eq!(report.hives.len(), 1);
    assert_eq!(report.gpus[2].numa_node, Some(1));
    insta::assert_snapshot!("topology_mi250x4", text(&report));
}

#[test]
fn topology_json_lists_nodes_and_hives() {
    let v = json(&TopologyReport::new("ROOT", &mi250x4()));
    assert_eq!(
        keys_of(&v),
        [
            "cpus",
            "generation_id",
            "gpus",
            "hives",
            "root",
            "schema_version"
        ]
    );
    let g = &v["gpus"][0];
    for key in [
        "gpu_id",
        "name",
        "render_minor",
        "location",
        "numa_node",
        "vram",
        "hive_id",
        "fw_version",
        "sdma_fw_version",
        "links",
    ] {
        assert!(g.get(key).is_some(), "{key} missing from {g}");
    }
    assert_eq!(g["location"], "0000:03:00.0");
    assert_eq!(v["hives"][0]["gpus"].as_array().unwrap().len(), 4);
}

#[test]
fn map_between_trees_remaps_and_explains() {
    let src = mi100x4(None, 65);
    let dst = mi100x4(Some([0x1001, 0x1002, 0x1003, 0x1004]), 65);
    let report = MapReport::new("SRC", &src, "DEST", &dst, &all_on());
    assert_eq!(report.outcome(), Outcome::Success);
    insta::assert_snapshot!("map_remapped", text(&report));

    // NUMA placement: on the destination all four GPUs hang off CPU node 0.
    let numa = TopologyBuilder::new()
        .cpus(2)
        .gpus(4, &GpuSpec::mi100().numa(0))
        .build();
    let report = MapReport::new("SRC", &src, "DEST", &numa, &all_on());
    assert_eq!(report.outcome(), Outcome::Negative);
    insta::assert_snapshot!("map_refused_numa", text(&report));
}

// ---------------------------------------------------------------------------------------------
// The binary, end to end

fn amdgpu_cr(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_amdgpu-cr"));
    cmd.args(args);
    for c in Check::ALL {
        cmd.env_remove(c.env_var());
    }
    cmd.env_remove("AMDGPU_CR_TOPOLOGY_ROOT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn p(dir: &TempDir) -> &str {
    dir.path().to_str().unwrap()
}

#[test]
fn binary_check_exit_codes_follow_the_verdict_and_the_environment() {
    let dir = image_dir(&mi100x4(None, 65), true);
    let old_fw = tree(&mi100x4(None, 60));
    let same = tree(&mi100x4(None, 65));

    let (code, out, _) = amdgpu_cr(&["check", p(&dir), "--topology", p(&same)], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("Result: restorable here"));

    let (code, out, _) = amdgpu_cr(&["check", p(&dir), "--topology", p(&old_fw)], &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("KFD_FW_VER_CHECK=0"));

    // The variable, in the environment, changes the verdict; the topology root from the
    // environment is used when --topology is not given.
    let (code, out, _) = amdgpu_cr(
        &["check", p(&dir), "--json"],
        &[
            ("KFD_FW_VER_CHECK", "no"),
            ("AMDGPU_CR_TOPOLOGY_ROOT", p(&old_fw)),
        ],
    );
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["restorable"], true);
    assert_eq!(v["checks"]["off"][0], "KFD_FW_VER_CHECK");
}

#[test]
fn binary_errors_exit_2() {
    let (code, _, err) = amdgpu_cr(&["check", "/nonexistent/images", "--topology", "/"], &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("amdgpu-cr: reading the GPU topology under /"),
        "{err}"
    );
    let topo = tree(&mi100x2(65));
    let (code, _, err) = amdgpu_cr(&["inspect", "/nonexistent/images"], &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("cannot read image directory /nonexistent/images"),
        "{err}"
    );
    let (code, _, _) = amdgpu_cr(&["map", "--from", p(&topo)], &[]);
    assert_eq!(code, 2, "a missing required argument is a usage error");
}

#[test]
fn binary_check_takes_a_container_device_list() {
    let dir = image_dir(&gcds(2, 2, 0x1000), true);
    let node = tree(&gcds(8, 8, 0xc000));
    let (code, out, _) = amdgpu_cr(
        &[
            "check",
            p(&dir),
            "--topology",
            p(&node),
            "--devices",
            "/dev/kfd,/dev/dri/renderD130",
            "--devices",
            "/dev/dri/renderD131",
            "--json",
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["devices"], serde_json::json!([130, 131]));
    assert_eq!(
        v["images"][0]["mapping"]["mapping"]["unused"],
        serde_json::json!([])
    );

    let (code, _, err) = amdgpu_cr(
        &[
            "check",
            p(&dir),
            "--topology",
            p(&node),
            "--devices",
            "/dev/dri/card0",
        ],
        &[],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("--devices: \"/dev/dri/card0\" is not a render node"),
        "{err}"
    );
}

#[test]
fn binary_map_and_topology_print_json() {
    let a = tree(&mi100x4(None, 65));
    let b = tree(&mi100x2(65));
    let (code, out, _) = amdgpu_cr(&["map", "--from", p(&a), "--to", p(&b), "--json"], &[]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["mapping"]["result"], "refused");
    assert_eq!(v["mapping"]["error"]["kind"], "gpu_count");

    let (code, out, _) = amdgpu_cr(&["topology", "--root", p(&a), "--json"], &[]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["gpus"].as_array().unwrap().len(), 4);
}

// ---------------------------------------------------------------------------------------------
// JSON documents, streams and exit codes (issue 30)

/// The topology's JSON document, whole: `schema_version` first, ids as hex strings. The hive id
/// is above 2^53, where a JSON number read as a double (jq) loses its low bits.
#[test]
fn topology_json_document_has_its_schema_version_and_hex_ids() {
    let (code, out, err) = amdgpu_cr(&["topology", "--root", p(&tree(&mi250x4())), "--json"], &[]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(out.starts_with("{\n  \"schema_version\": 1,"), "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["gpus"][0]["hive_id"], "0x4a7e000000000001");
    assert_eq!(v["hives"][0]["hive_id"], "0x4a7e000000000001");
    let mut v = v;
    v["root"] = "ROOT".into();
    insta::assert_json_snapshot!("topology_mi250x4_json", v);
}

/// `probe`: no KFD node is the answer "no" (exit 1), on stdout; a node that is not a KFD device
/// is an error (exit 2) on stderr, with nothing on stdout even with `--json`.
#[test]
fn binary_probe_answers_no_without_kfd_and_fails_on_another_device() {
    let (code, out, err) = amdgpu_cr(&["probe", "--kfd", "/nonexistent/kfd"], &[]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.starts_with("/nonexistent/kfd: not present"), "{out}");
    assert_eq!(err, "");
    let (code, out, _) = amdgpu_cr(&["probe", "--kfd", "/nonexistent/kfd", "--json"], &[]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(
        (&v["present"], &v["supported"]),
        (&false.into(), &false.into())
    );

    let (code, out, err) = amdgpu_cr(&["probe", "--kfd", "/dev/null", "--json"], &[]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(out, "");
    assert!(err.starts_with("amdgpu-cr: cannot ask /dev/null"), "{err}");
}

#[rstest::rstest]
#[case::missing("missing", None, "not present")]
#[case::too_old("too_old", Some((1, 7)), "needs 1.8 or later")]
#[case::linux_6_1("linux_6_1", Some((1, 11)), "checkpoint/restore supported")]
fn probe_report_text_and_json(
    #[case] name: &str,
    #[case] version: Option<(u32, u32)>,
    #[case] says: &str,
) {
    use amdgpu_cr::probe::ProbeReport;
    let report = ProbeReport::new(
        "/dev/kfd",
        version.map(|(major, minor)| kfd_abi::kfd::Version { major, minor }),
    );
    assert!(text(&report).contains(says), "{}", text(&report));
    assert_eq!(
        report.outcome(),
        if version == Some((1, 11)) {
            Outcome::Success
        } else {
            Outcome::Negative
        }
    );
    insta::assert_json_snapshot!(format!("probe_{name}"), json(&report));
}

/// A reader that closes the pipe before the output is written (`| head`) gets no error message,
/// and the exit status is still the answer's.
#[test]
fn binary_a_closed_pipe_is_not_an_error() {
    let root = tree(&mi250x4());
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) returns.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both are fresh descriptors of ours; each is owned exactly once.
    let (read, write) = unsafe {
        use std::os::fd::FromRawFd;
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    };
    drop(read);
    for json in [false, true] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_amdgpu-cr"));
        cmd.args(["topology", "--root", p(&root)]);
        if json {
            cmd.arg("--json");
        }
        let out = cmd
            .stdout(write.try_clone().unwrap())
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "json {json}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "json {json}");
    }
}

/// A symlinked image is listed with the size of the file it points to (before: the link's own
/// size, the length of the target's path).
#[test]
fn binary_inspect_lists_a_symlinked_image_with_its_files_size() {
    let t = mi100x2(65);
    let real = image_dir(&t, true);
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(real.path()).unwrap() {
        let e = e.unwrap();
        std::os::unix::fs::symlink(e.path(), dir.path().join(e.file_name())).unwrap();
    }
    let kfd = std::fs::read_dir(real.path())
        .unwrap()
        .map(|e| e.unwrap())
        .find(|e| e.file_name().to_string_lossy().starts_with("amdgpu-kfd-"))
        .unwrap();
    let (code, out, err) = amdgpu_cr(&["inspect", p(&dir), "--json"], &[]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["kfd"][0]["size"], kfd.metadata().unwrap().len());
}

/// bench's numbers: binary units in any case, decimal, ranges named; usage and I/O errors on
/// stderr with exit 2 and nothing on stdout. (Before: `1Q` blamed KFD_MAX_BUFFER_SIZE, `2g` was
/// refused, `010` was eight, `--gpus 0` ran one GPU, `--dir /nonexistent --json` printed its
/// error on stdout with exit 1.)
#[rstest::rstest]
#[case::unknown_unit(&["--size", "1Q"], "unknown unit \"q\"")]
#[case::lowercase_g_parses(&["--size", "2g", "--bo-size", "4G"], "--bo-size 4 GiB is larger than the 1 GiB of buffers per GPU (--size 2 GiB over 2 GPUs)")]
#[case::mib_parses(&["--size", "512MiB", "--gpus", "1", "--bo-size", "1G"], "than the 512 MiB of buffers per GPU")]
#[case::decimal_not_octal(&["--gpus", "010", "--size", "1G", "--bo-size", "1G"], "over 10 GPUs")]
#[case::no_gpus(&["--gpus", "0"], "below the minimum of 1")]
#[case::too_much_per_gpu(&["--size", "512G", "--gpus", "4"], "128 GiB per GPU, more than the 63 GiB")]
#[case::no_such_dir(&["--dir", "/nonexistent", "--json"], "creating a directory for the bench")]
fn binary_bench_refuses_what_it_cannot_take(#[case] args: &[&str], #[case] says: &str) {
    let mut all = vec!["bench"];
    all.extend_from_slice(args);
    let (code, out, err) = amdgpu_cr(&all, &[]);
    assert_eq!(code, 2, "{out}{err}");
    assert_eq!(out, "");
    assert!(err.contains(says), "{err}");
    assert!(!err.contains("KFD_MAX_BUFFER_SIZE"), "{err}");
}

/// A small bench run with --json: one document with its schema version on stdout, nothing on
/// stderr (no progress when stderr is not a terminal).
#[test]
fn binary_bench_json_is_one_document() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = amdgpu_cr(
        &[
            "bench",
            "--gpus",
            "1",
            "--size",
            "1m",
            "--bo-size",
            "256k",
            "--no-upstream",
            "--dir",
            p(&dir),
            "--json",
        ],
        &[],
    );
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "the bench cleaned up"
    );
}

/// `check` reads every pages file to the end and verifies it: a damaged chunk is not restorable
/// (before: "Result: restorable here", exit 0, the pages files never read).
#[test]
fn binary_check_reads_the_pages_files_and_refuses_a_damaged_chunk() {
    let t = mi100x4(None, 65);
    let dir = image_dir(&t, true);
    let topo = tree(&t);
    let pages = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("amdgpu-pages-")
        })
        .unwrap();
    let (code, out, _) = amdgpu_cr(&["check", p(&dir), "--topology", p(&topo)], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("every chunk's checksum matches"), "{out}");
    corrupt(&pages, 8 + 70_000);
    let (code, out, _) = amdgpu_cr(&["check", p(&dir), "--topology", p(&topo)], &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("is corrupt: chunk 1"), "{out}");
    let (code, out, _) = amdgpu_cr(&["check", p(&dir), "--topology", p(&topo), "--json"], &[]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["restorable"], false);
}

/// `inspect --verify` and `check` agree: a directory without its KFD image (orphan pages files
/// and render-node images), an empty one and one of other programs' files are all "no" for
/// both. (Before: inspect said ok for the first, check "restorable here" for the others.)
#[rstest::rstest]
#[case::kfd_image_deleted("kfd")]
#[case::empty("empty")]
#[case::other_files_only("other")]
fn binary_inspect_and_check_agree_on_incomplete_directories(#[case] what: &str) {
    let t = mi100x4(None, 65);
    let topo = tree(&t);
    let dir = match what {
        "kfd" => {
            let d = image_dir(&t, true);
            std::fs::remove_file(d.path().join("amdgpu-kfd-7.img")).unwrap();
            d
        }
        "empty" => tempfile::tempdir().unwrap(),
        _ => {
            let d = tempfile::tempdir().unwrap();
            std::fs::write(d.path().join("core-42.img"), "criu's").unwrap();
            std::fs::write(d.path().join("notes.txt"), "mine").unwrap();
            d
        }
    };
    let (code, out, _) = amdgpu_cr(&["inspect", p(&dir), "--verify"], &[]);
    assert_eq!(code, 1, "inspect: {out}");
    let (code, out, _) = amdgpu_cr(&["check", p(&dir), "--topology", p(&topo)], &[]);
    assert_eq!(code, 1, "check: {out}");
    assert!(out.contains("Result: NOT restorable here"), "{out}");
}

/// The issue's reproduction: four bytes of the KFD image overwritten where the message still
/// decodes. inspect --verify and check both refuse it, naming the file (before: "Result: ok",
/// and check blamed the VRAM size and suggested KFD_VRAM_SIZE_CHECK=0).
#[test]
fn binary_inspect_and_check_refuse_a_damaged_kfd_image_naming_it() {
    use std::os::unix::fs::FileExt;
    let t = mi100x4(None, 65);
    let dir = image_dir(&t, true);
    let topo = tree(&t);
    let kfd = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("amdgpu-kfd-7.img"))
        .unwrap();
    kfd.write_all_at(&[0xde, 0xad, 0xbe, 0xef], 200).unwrap();
    let (code, out, _) = amdgpu_cr(&["inspect", p(&dir), "--verify"], &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("image file amdgpu-kfd-7.img is damaged"),
        "{out}"
    );
    let (code, out, _) = amdgpu_cr(&["check", p(&dir), "--topology", p(&topo)], &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("image file amdgpu-kfd-7.img is damaged"),
        "{out}"
    );
    assert!(!out.contains("KFD_VRAM_SIZE_CHECK=0"), "{out}");
}
