//! Pages files: round trips with and without checksums, upstream layout, golden bytes.
#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)]

mod common;

use std::os::fd::AsFd;

use common::*;
use images::pages::{find_checksums, kfd_pages_len, verify_pages_file};
use images::{PagesFile, PagesReader, PagesWriter};
use proptest::prelude::*;
use rstest::rstest;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

const KFD: PagesFile = PagesFile::Kfd {
    id: 3,
    gpu_id: 0xc1a5,
};

fn write_file(
    d: &Dir,
    which: PagesFile,
    data: &[u8],
    piece: usize,
    chunk: Option<u32>,
) -> Option<images::proto::PagesChecksums> {
    let mut w = PagesWriter::new(d.fd.as_fd(), which, data.len() as u64, chunk).unwrap();
    for p in data.chunks(piece.max(1)) {
        w.write_chunk(p).unwrap();
    }
    assert_eq!(w.written(), data.len() as u64);
    w.finish().unwrap()
}

fn read_file(
    d: &Dir,
    which: PagesFile,
    len: u64,
    sums: Option<&images::proto::PagesChecksums>,
    buf: usize,
) -> Result<Vec<u8>, images::PagesError> {
    let mut r = PagesReader::open(d.fd.as_fd(), which, len, sums)?;
    let mut out = Vec::new();
    let mut b = vec![0u8; buf];
    loop {
        let n = r.read_chunk(&mut b)?;
        if n == 0 {
            break;
        }
        out.extend_from_slice(&b[..n]);
    }
    assert_eq!(r.remaining(), 0);
    Ok(out)
}

#[rstest]
#[case::no_checksums(10_000, 4096, None, 1000)]
#[case::aligned(16_384, 4096, Some(4096), 4096)]
#[case::unaligned_pieces(10_001, 777, Some(1024), 333)]
#[case::one_chunk(100, 100, Some(1 << 20), 7)]
#[case::empty(0, 1, Some(4096), 16)]
#[case::chunk_of_one(50, 3, Some(1), 5)]
fn round_trip(
    #[case] len: usize,
    #[case] piece: usize,
    #[case] chunk: Option<u32>,
    #[case] buf: usize,
) {
    let d = dir();
    let data = pattern(len, 1);
    let sums = write_file(&d, KFD, &data, piece, chunk);
    assert_eq!(sums.is_some(), chunk.is_some());
    if let (Some(s), Some(c)) = (&sums, chunk) {
        assert_eq!(
            s.chunk_sums.len() as u64,
            (len as u64).div_ceil(u64::from(c))
        );
        assert_eq!(
            (s.file_key, s.total_size, s.chunk_size, s.algorithm),
            (0xc1a5, len as u64, c, 1)
        );
    }
    // Layout is upstream's: length header = total bytes, then the data.
    let raw = std::fs::read(d.path("amdgpu-pages-3-c1a5.img")).unwrap();
    assert_eq!(raw[..8], (len as u64).to_ne_bytes());
    assert_eq!(raw[8..], data[..]);
    assert_eq!(
        read_file(&d, KFD, len as u64, sums.as_ref(), buf).unwrap(),
        data
    );
    // Images without checksums (upstream's) still read.
    assert_eq!(read_file(&d, KFD, len as u64, None, buf).unwrap(), data);
    verify_pages_file(d.fd.as_fd(), KFD, len as u64, sums.as_ref(), 4096).unwrap();
}

#[test]
fn drm_pages_file_round_trip() {
    let d = dir();
    let which = PagesFile::Drm {
        id: 9,
        minor: 128,
        index: 2,
    };
    let data = pattern(5000, 9);
    let sums = write_file(&d, which, &data, 4096, Some(1024)).unwrap();
    assert_eq!(sums.file_key, 2);
    assert!(d.path("amdgpu-drm-pages-9-128-0002.img").exists());
    assert_eq!(read_file(&d, which, 5000, Some(&sums), 1024).unwrap(), data);
}

#[test]
fn upstreams_drm_pages_files_read_whatever_their_length_header_says() {
    let d = dir();
    let which = PagesFile::Drm {
        id: 4,
        minor: 129,
        index: 0,
    };
    let data = pattern(8192, 2);
    write_file(&d, which, &data, 8192, None);
    // criu-dev's plugin writes a length header it never set.
    let path = d.path("amdgpu-drm-pages-4-129-0000.img");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[..8].copy_from_slice(&0xdead_beef_u64.to_ne_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let e = read_file(&d, which, 8192, None, 4096).unwrap_err();
    assert!(
        matches!(e, images::PagesError::HeaderMismatch { .. }),
        "{e}"
    );
    let mut r = PagesReader::open_ignoring_header(d.fd.as_fd(), which, 8192).unwrap();
    let mut out = vec![0; 8192];
    r.read_exact_into(&mut out).unwrap();
    assert_eq!(out, data);
    // The payload must still be the buffer's size.
    let e = PagesReader::open_ignoring_header(d.fd.as_fd(), which, 4096).unwrap_err();
    assert!(
        matches!(
            e,
            images::PagesError::HeaderMismatch {
                header: 8192,
                expected: 4096,
                ..
            }
        ),
        "{e}"
    );
    std::fs::write(&path, &bytes[..4]).unwrap();
    let e = PagesReader::open_ignoring_header(d.fd.as_fd(), which, 8192).unwrap_err();
    assert!(matches!(e, images::PagesError::Header { .. }), "{e}");
}

#[test]
fn read_exact_into_and_verified_position() {
    let d = dir();
    let data = pattern(10_000, 4);
    let sums = write_file(&d, KFD, &data, 10_000, Some(4096)).unwrap();
    let mut r = PagesReader::open(d.fd.as_fd(), KFD, 10_000, Some(&sums)).unwrap();
    assert!(r.is_verified() && !r.is_empty() && r.len() == 10_000);
    let mut a = vec![0; 5000];
    r.read_exact_into(&mut a).unwrap();
    assert_eq!(r.verified_up_to(), 4096);
    let mut b = vec![0; 5000];
    r.read_exact_into(&mut b).unwrap();
    assert_eq!(r.verified_up_to(), 10_000);
    assert_eq!([a, b].concat(), data);
    let e = r.read_exact_into(&mut [0]).unwrap_err();
    assert!(
        matches!(e, images::PagesError::ReadPastEnd { offset: 10_008, .. }),
        "{e}"
    );
}

#[test]
fn writer_rejects_overrun_and_short_finish() {
    let d = dir();
    let mut w = PagesWriter::new(d.fd.as_fd(), KFD, 10, Some(4)).unwrap();
    w.write_chunk(&[1; 6]).unwrap();
    let e = w.write_chunk(&[1; 5]).unwrap_err();
    assert!(
        matches!(
            e,
            images::PagesError::Overrun {
                offset: 14,
                len: 5,
                total: 10,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("amdgpu-pages-3-c1a5.img"), "{e}");
    let e = w.finish().unwrap_err();
    assert!(
        matches!(
            e,
            images::PagesError::Incomplete {
                written: 6,
                total: 10,
                ..
            }
        ),
        "{e}"
    );
    let e = PagesWriter::new(d.fd.as_fd(), KFD, 10, Some(0)).unwrap_err();
    assert!(
        matches!(e, images::PagesError::InvalidChunkSize { .. }),
        "{e}"
    );
}

#[test]
fn expected_length_from_bo_entries() {
    let k = sample_kfd();
    // VRAM 0x2000 + GTT 0x1000; the third BO (doorbell) has no contents.
    assert_eq!(kfd_pages_len(&k.bo_entries, 0xc1a5), 0x3000);
    assert_eq!(kfd_pages_len(&k.bo_entries, 0x1111), 0);
    let list = vec![images::proto::PagesChecksums {
        file_key: 7,
        ..Default::default()
    }];
    assert!(find_checksums(&list, 7).is_some() && find_checksums(&list, 8).is_none());
}

#[test]
fn golden_pages_file() {
    let d = dir();
    let data: Vec<u8> = (0u8..40).collect();
    let sums = write_file(&d, KFD, &data, 16, Some(16)).unwrap();
    let raw = std::fs::read(d.path("amdgpu-pages-3-c1a5.img")).unwrap();
    insta::assert_snapshot!("pages_file", hex_dump(&raw));
    insta::assert_debug_snapshot!("pages_file_checksums", sums);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    #[test]
    fn any_pieces_any_buffers(len in 0usize..20_000, piece in 1usize..5000, chunk in 1u32..6000, buf in 1usize..7000) {
        let d = dir();
        let data = pattern(len, 7);
        let sums = write_file(&d, KFD, &data, piece, Some(chunk));
        prop_assert_eq!(read_file(&d, KFD, len as u64, sums.as_ref(), buf).unwrap(), data);
    }
}

/// Write-behind changes when the data reaches the disk, not what the file holds: across several
/// write-behind windows, with pieces that straddle them.
#[test]
fn write_behind_writes_the_same_file() {
    let d = dir();
    let len = usize::try_from(images::pages::WRITE_BEHIND).unwrap() * 2 + 12_345;
    let data = pattern(len, 9);
    let mut w = PagesWriter::new(d.fd.as_fd(), KFD, len as u64, Some(1 << 20)).unwrap();
    w.set_write_behind(true);
    for p in data.chunks(3 << 20) {
        w.write_chunk(p).unwrap();
    }
    let sums = w.finish().unwrap();
    let raw = std::fs::read(d.path("amdgpu-pages-3-c1a5.img")).unwrap();
    assert_eq!(raw[..8], (len as u64).to_ne_bytes());
    assert!(raw[8..] == data[..], "payload differs");
    assert!(read_file(&d, KFD, len as u64, sums.as_ref(), 1 << 20).unwrap() == data);
}

/// The bytes as a mapping of the file would show them: payload byte `pos` at file offset
/// `pos + 8`, the file read whole (the test's stand-in for a mapping).
fn file_bytes(d: &Dir, which: PagesFile) -> Vec<u8> {
    std::fs::read(d.tmp.path().join(which.file_name())).unwrap()
}

#[test]
fn bytes_in_memory_are_verified_as_read_ones_are() {
    let d = dir();
    let data = pattern(10_000, 5);
    let sums = write_file(&d, KFD, &data, 10_000, Some(4096)).unwrap();
    let mut file = file_bytes(&d, KFD);

    // In two pieces, each range asked for once, in order: the same checks as reading.
    let mut r = PagesReader::open(d.fd.as_fd(), KFD, 10_000, Some(&sums)).unwrap();
    let mut asked = Vec::new();
    for (start, len) in [(0usize, 5000usize), (5000, 5000)] {
        let zeros = r
            .verify_skipping_holes(len, |range| {
                asked.push(start + range.start..start + range.end);
                Ok(&file[8 + start + range.start..8 + start + range.end])
            })
            .unwrap();
        assert!(zeros.is_empty());
    }
    assert_eq!(r.verified_up_to(), 10_000);
    assert_eq!(asked.first().unwrap().start, 0);
    assert!(asked.windows(2).all(|w| w[0].end == w[1].start));
    assert_eq!(asked.last().unwrap().end, 10_000);

    // A byte changed in memory fails its chunk's checksum.
    file[8 + 6000] ^= 1;
    let mut r = PagesReader::open(d.fd.as_fd(), KFD, 10_000, Some(&sums)).unwrap();
    let e = r.verify_skipping_holes(10_000, |range| Ok(&file[8 + range.start..8 + range.end]));
    assert!(
        matches!(
            e,
            Err(images::PagesError::ChecksumMismatch { chunk: 1, .. })
        ),
        "{e:?}"
    );

    // Bytes that cannot be had (a mapping past a truncated end) are the reader's Read error, as
    // are fewer bytes than asked for.
    let mut r = PagesReader::open(d.fd.as_fd(), KFD, 10_000, Some(&sums)).unwrap();
    let e = r
        .verify_skipping_holes(10_000, |_| {
            Err(std::io::Error::from_raw_os_error(libc::EFAULT))
        })
        .unwrap_err();
    assert!(
        matches!(e, images::PagesError::Read { offset: 8, .. }),
        "{e}"
    );
    let mut r = PagesReader::open(d.fd.as_fd(), KFD, 10_000, Some(&sums)).unwrap();
    let e = r
        .verify_skipping_holes(10_000, |range| Ok(&file[8 + range.start..7 + range.end]))
        .unwrap_err();
    assert!(matches!(e, images::PagesError::Read { .. }), "{e}");
}
