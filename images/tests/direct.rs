//! Direct reads of files not in the page cache: aligned reads up to the end of the file, refused
//! when misaligned, and the page cache's share of a file as the kernel reports it.
#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)]

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;

use images::direct::{cached_fraction, read_direct_at, reopen_direct, AlignedBuf, DIRECT_ALIGN};

/// A file of `len` patterned bytes in a directory on a disk (not tmpfs), if the test machine
/// has one that takes direct I/O.
fn disk_file(len: usize) -> Option<(tempfile::TempDir, File, Vec<u8>)> {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).ok()?;
    let path = dir.path().join("pages.img");
    let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    File::create(&path).ok()?.write_all(&data).ok()?;
    let file = File::open(&path).ok()?;
    reopen_direct(&file).ok()?;
    Some((dir, file, data))
}

#[test]
fn a_direct_read_returns_the_file_up_to_its_end() {
    let Some((_dir, file, data)) = disk_file(3 * DIRECT_ALIGN + 100) else {
        eprintln!("no file system here takes direct I/O: skipped");
        return;
    };
    let direct = reopen_direct(&file).unwrap();
    let mut buf = AlignedBuf::new(8 * DIRECT_ALIGN);
    let n = read_direct_at(&direct, buf.as_mut_slice(), DIRECT_ALIGN as u64).unwrap();
    assert_eq!(n, 2 * DIRECT_ALIGN + 100);
    assert_eq!(&buf.as_slice()[..n], &data[DIRECT_ALIGN..]);
}

#[test]
fn a_misaligned_direct_read_is_refused_before_the_kernel_sees_it() {
    let file = tempfile::tempfile().unwrap();
    let mut buf = AlignedBuf::new(2 * DIRECT_ALIGN);
    for (range, offset) in [
        (1..DIRECT_ALIGN + 1, 0),
        (0..DIRECT_ALIGN + 8, 0),
        (0..DIRECT_ALIGN, 8),
    ] {
        let e = read_direct_at(&file, &mut buf.as_mut_slice()[range], offset).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    }
}

#[test]
fn the_cached_fraction_follows_the_page_cache() {
    let Some((_dir, file, data)) = disk_file(64 * DIRECT_ALIGN) else {
        eprintln!("no file system here takes direct I/O: skipped");
        return;
    };
    let len = data.len() as u64;
    file.sync_all().unwrap();
    images::dir::drop_page_cache(&file).unwrap();
    let cold = cached_fraction(&file, 0, len).unwrap();
    let mut back = vec![0u8; data.len()];
    file.read_exact_at(&mut back[..len as usize / 2], 0)
        .unwrap();
    let half = cached_fraction(&file, 0, len).unwrap();
    let first_half = cached_fraction(&file, 0, len / 2).unwrap();
    assert!(cold < half, "dropped {cold}, half read {half}");
    assert!(first_half > 0.99, "the half read: {first_half} cached");
    assert!((cached_fraction(&file, 8, 0).unwrap() - 1.0).abs() < f64::EPSILON);
}

#[test]
fn the_probe_of_a_directory_agrees_with_a_direct_open_and_leaves_nothing() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let supported = images::direct::supported_in(dir.path()).unwrap();
    assert_eq!(supported, disk_file(4096).is_some());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
