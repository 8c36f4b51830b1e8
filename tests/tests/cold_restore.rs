//! A restore from images that are not in the page cache (another node, a reboot, a migration)
//! reads them with direct I/O: from the device straight into the staging buffers, so the
//! restore neither copies every byte twice nor fills the node's page cache with images it reads
//! once. Images still in the page cache (just dumped here) are read from it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::File;
use std::path::{Path, PathBuf};

use amdgpu_plugin::copy::DirectIo;
use amdgpu_plugin::criu::Settings;
use harness::workload::Spec;
use harness::{self, SimNode};
use images::direct::cached_fraction;
use kfd_sim::preset::Preset;

const M: u64 = 1 << 20;

/// The pages files of an image directory.
fn pages_files(dir: &Path) -> Vec<PathBuf> {
    let files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("amdgpu-pages-"))
        })
        .collect();
    assert!(!files.is_empty(), "no pages files in {}", dir.display());
    files
}

/// The share of the pages files' pages in the page cache (the largest of them).
fn cached(files: &[PathBuf]) -> f64 {
    files
        .iter()
        .map(|p| {
            let f = File::open(p).unwrap();
            let len = f.metadata().unwrap().len();
            cached_fraction(&f, 0, len).unwrap()
        })
        .fold(0.0, f64::max)
}

/// Whether `dir`'s file system takes direct I/O and has a page cache to drop (a disk's, not a
/// tmpfs); says so on stderr when not, and the test skips.
fn direct_io_in(dir: &Path) -> bool {
    let ok = images::direct::supported_in(dir).unwrap();
    if !ok {
        eprintln!(
            "{}: no direct I/O on this file system: skipped",
            dir.display()
        );
    }
    ok
}

/// Writes the pages files to the disk and drops them from the page cache.
fn make_cold(files: &[PathBuf]) {
    for p in files {
        let f = File::open(p).unwrap();
        f.sync_all().unwrap();
        images::dir::drop_page_cache(&f).unwrap();
    }
}

#[rstest::rstest]
#[case::cold_files_are_read_directly(DirectIo::Cold, true)]
#[case::or_through_the_page_cache_when_asked(DirectIo::Never, false)]
fn a_restore_from_a_cold_disk_leaves_the_page_cache_as_it_found_it(
    #[case] direct_io: DirectIo,
    #[case] stays_cold: bool,
) {
    let preset = Preset::by_name("mi210x2").unwrap();
    // On a disk: `/tmp` may be a tmpfs, which has neither direct I/O nor a cache to drop.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    if !direct_io_in(dir.path()) {
        return;
    }
    let spec = Spec::new(5, vec![24 * M], vec![4 * M]);
    let mut settings = Settings::from_lookup(|_| None, false);
    settings.direct_io = direct_io;
    let (ids, manifest) = harness::checkpoint_new(&preset, &spec, dir.path(), &settings).unwrap();
    let files = pages_files(dir.path());
    // Just dumped: in the page cache.
    assert!(
        cached(&files) > 0.9,
        "{} cached after the dump",
        cached(&files)
    );
    make_cold(&files);
    let before = cached(&files);
    assert!(before < 0.05, "{before} still cached after dropping it");

    let dst = SimNode::new(&preset).unwrap();
    let (restored, _) = harness::restore(&dst, dir.path(), &ids, &settings).unwrap();
    restored.verify(&manifest).unwrap();
    let after = cached(&files);
    if stays_cold {
        // The length header's page and the kernel's read-ahead of that first read.
        assert!(
            after < 0.1,
            "{after} of a pages file in the cache after the restore"
        );
    } else {
        assert!(
            after > 0.9,
            "read through the cache, {after} of it is there"
        );
    }
}

#[test]
fn images_in_the_page_cache_are_read_from_it() {
    let preset = Preset::by_name("mi50x1").unwrap();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    if !direct_io_in(dir.path()) {
        return;
    }
    let spec = Spec::new(6, vec![16 * M], vec![M]);
    let settings = Settings::from_lookup(|_| None, false);
    assert_eq!(settings.direct_io, DirectIo::Cold);
    let (ids, manifest) = harness::checkpoint_new(&preset, &spec, dir.path(), &settings).unwrap();
    let files = pages_files(dir.path());
    // Half of each file cold: not mostly cold, so read from the cache (and the rest with it).
    for p in &files {
        let f = File::open(p).unwrap();
        f.sync_all().unwrap();
        let len = f.metadata().unwrap().len();
        images::dir::drop_page_cache_from(&f, len / 2).unwrap();
    }
    let before = cached(&files);
    assert!((0.4..0.7).contains(&before), "{before} cached");
    let dst = SimNode::new(&preset).unwrap();
    let (restored, _) = harness::restore(&dst, dir.path(), &ids, &settings).unwrap();
    restored.verify(&manifest).unwrap();
    assert!(cached(&files) > 0.9, "read through the cache");
}

#[rstest::rstest]
#[case::with_write_behind(DirectIo::Cold, true)]
#[case::whenever_asked(DirectIo::Always, false)]
fn a_dump_that_must_reach_the_disk_writes_it_directly(
    #[case] direct_io: DirectIo,
    #[case] write_behind: bool,
) {
    use std::os::unix::fs::MetadataExt;
    let preset = Preset::by_name("mi210x2").unwrap();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    if !direct_io_in(dir.path()) {
        return;
    }
    // Half of each buffer never written: holes in the pages files, direct or not.
    let spec = Spec {
        untouched_permille: 500,
        ..Spec::new(7, vec![24 * M, 64 * 1024], vec![4 * M])
    };
    let mut settings = Settings::from_lookup(|_| None, false);
    settings.direct_io = direct_io;
    settings.write_behind = write_behind;
    let (ids, manifest) = harness::checkpoint_new(&preset, &spec, dir.path(), &settings).unwrap();
    let files = pages_files(dir.path());
    // Written from the staging buffers to the disk: nothing of them in the page cache.
    let after_dump = cached(&files);
    assert!(
        after_dump < 0.1,
        "{after_dump} of a pages file cached after the dump"
    );
    for p in &files {
        let f = File::open(p).unwrap();
        f.sync_all().unwrap();
        let meta = f.metadata().unwrap();
        assert!(
            meta.blocks() * 512 < meta.len() * 3 / 4,
            "{}: {} bytes on disk of {}: the zeros were written",
            p.display(),
            meta.blocks() * 512,
            meta.len()
        );
    }
    // Read back by upstream's rules (whole file, length header) and ours (checksums).
    let dst = SimNode::new(&preset).unwrap();
    let (restored, _) = harness::restore(&dst, dir.path(), &ids, &settings).unwrap();
    restored.verify(&manifest).unwrap();
}
