//! Zeros cost nothing, end to end: a workload whose buffers are mostly untouched (zero) is dumped
//! into pages files that keep holes for them, and restored with SDMA constant fills for those
//! holes instead of copies; every byte is verified, and a data chunk zeroed in the image is
//! refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use amdgpu_plugin::copy::DirectIo;
use amdgpu_plugin::criu::Settings;
use harness::workload::{Kind, Manifest, Spec};
use harness::{self, SimNode};
use images::PagesFile;
use kfd_sim::preset::Preset;
use kfd_sim::VmTarget;

const M: u64 = 1 << 20;

/// One VRAM buffer of 8 MiB, three quarters of it never written, and a GTT buffer of 2 MiB.
fn spec() -> Spec {
    Spec {
        untouched_permille: 750,
        ..Spec::new(9, vec![8 * M], vec![2 * M])
    }
}

/// How the restore reads the pages files.
#[derive(Clone, Copy, Debug)]
enum Read {
    /// The GPU copies out of mappings of the files.
    Mapped,
    /// Read into the staging buffers through the page cache.
    Staged,
    /// Read into the staging buffers with direct I/O.
    Direct,
}

/// Small staging buffers, the pages files read `how`.
fn settings(how: Read) -> Settings {
    let mut s = tests::staged_settings(2 << 20, 3);
    s.map_pages = matches!(how, Read::Mapped);
    s.direct_io = match how {
        Read::Direct => DirectIo::Always,
        Read::Mapped | Read::Staged => DirectIo::Never,
    };
    s
}

/// A directory for images on a disk (`/tmp` may be a tmpfs, which has no direct I/O).
fn image_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// Bytes the file system holds for `path`, after syncing it.
fn on_disk(path: &Path) -> u64 {
    std::fs::File::open(path).unwrap().sync_all().unwrap();
    std::fs::metadata(path).unwrap().blocks() * 512
}

/// The pages file of the workload's first GPU, and its payload length.
fn first_pages_file(dir: &Path, ids: &harness::ImageIds, manifest: &Manifest) -> (PathBuf, u64) {
    let gpu = &manifest.gpus[0];
    let which = PagesFile::Kfd {
        id: ids.kfd,
        gpu_id: gpu.gpu_id,
    };
    let len = gpu.buffers.iter().map(|b| b.size).sum();
    (dir.join(which.file_name()), len)
}

#[rstest::rstest]
fn untouched_memory_is_a_hole_at_dump_and_a_fill_at_restore(
    #[values(Read::Mapped, Read::Staged, Read::Direct)] how: Read,
) {
    let preset = Preset::by_name("mi210x2").unwrap();
    let dir = image_dir();
    let (ids, manifest) =
        harness::checkpoint_new(&preset, &spec(), dir.path(), &settings(Read::Mapped)).unwrap();

    // The file has its full length; of the buffers' 10 MiB, 7.5 MiB are untouched and holes.
    // The workload's user-mode queue buffers (the staging buffer it moved the data through, the
    // ring) are written memory of the process too.
    let (pages, len) = first_pages_file(dir.path(), &ids, &manifest);
    assert!(len > 10 * M);
    assert_eq!(std::fs::metadata(&pages).unwrap().len(), 8 + len);
    let queue_buffers: u64 = manifest.gpus[0]
        .buffers
        .iter()
        .filter(|b| matches!(b.kind, Kind::Ring | Kind::Staging))
        .map(|b| b.size)
        .sum();
    let disk = on_disk(&pages);
    assert!(
        disk <= 3 * M + queue_buffers,
        "{disk} bytes of the {len}-byte payload on disk"
    );

    let dst = SimNode::new(&preset).unwrap();
    let (restored, _) = harness::restore(&dst, dir.path(), &ids, &settings(how)).unwrap();
    // Before anything reads it (a read through the simulated VRAM's mapping allocates memory):
    // the restored VRAM buffer holds memory only for the quarter that was copied. Copying the
    // zeros would have allocated all of it; the fills punched it out.
    let vram = manifest.gpus[0]
        .buffers
        .iter()
        .find(|b| b.kind == Kind::Vram)
        .unwrap();
    let vm = restored.renders[0].transport().vm().unwrap();
    let backing = {
        let vm = vm.lock().unwrap();
        let (_, mapping) = vm.lookup(vram.va).unwrap();
        match &mapping.target {
            VmTarget::Memory { backing, .. } => std::sync::Arc::clone(backing),
            other => panic!("the VRAM buffer is mapped to {other:?}"),
        }
    };
    let held = std::fs::File::from(backing.export(true).unwrap())
        .metadata()
        .unwrap()
        .blocks()
        * 512;
    assert!(
        held <= 2 * M + 64 * 1024,
        "the restored 8 MiB buffer holds {held} bytes of memory"
    );
    drop(backing);
    restored.verify(&manifest).unwrap();
}

#[rstest::rstest]
fn a_data_chunk_zeroed_in_the_image_is_refused(
    #[values(Read::Mapped, Read::Staged, Read::Direct)] how: Read,
) {
    let preset = Preset::by_name("mi210x2").unwrap();
    let dir = image_dir();
    let (ids, manifest) =
        harness::checkpoint_new(&preset, &spec(), dir.path(), &settings(Read::Mapped)).unwrap();
    // The file's second MiB held data (the end of the payload's first chunk and most of its
    // second): it becomes a hole, as a zeroed-out chunk.
    let (pages, _) = first_pages_file(dir.path(), &ids, &manifest);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&pages)
        .unwrap();
    let flags = rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE;
    rustix::fs::fallocate(f.as_fd(), flags, M, M).unwrap();
    drop(f);
    let dst = SimNode::new(&preset).unwrap();
    let e = harness::restore(&dst, dir.path(), &ids, &settings(how)).unwrap_err();
    assert!(e.to_string().contains("is corrupt: chunk 0"), "{e}");
}
