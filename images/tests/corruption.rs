//! Damaged images: each kind of damage gives its own error, naming the file and the offset.
#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)]

mod common;

use std::os::fd::AsFd;

use common::*;
use images::{
    FrameError, HeaderFault, ImageFile, KfdImage, PagesError, PagesFile, PagesReader, PagesWriter,
};

const KFD: PagesFile = PagesFile::Kfd {
    id: 3,
    gpu_id: 0xc1a5,
};
const NAME: &str = "amdgpu-pages-3-c1a5.img";
const LEN: usize = 10_000;
const CHUNK: u32 = 4096;

fn setup() -> (Dir, images::proto::PagesChecksums) {
    let d = dir();
    let data: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
    let mut w = PagesWriter::new(d.fd.as_fd(), KFD, LEN as u64, Some(CHUNK)).unwrap();
    w.write_chunk(&data).unwrap();
    (d, w.finish().unwrap().unwrap())
}

fn read_all(d: &Dir, sums: Option<&images::proto::PagesChecksums>) -> Result<(), PagesError> {
    let mut r = PagesReader::open(d.fd.as_fd(), KFD, LEN as u64, sums)?;
    let mut buf = vec![0; 3000];
    while r.read_chunk(&mut buf)? != 0 {}
    Ok(())
}

fn assert_names(e: &impl std::fmt::Display, file: &str, offset: &str) {
    let s = e.to_string();
    assert!(s.contains(file) && s.contains(offset), "{s}");
}

#[test]
fn flipped_byte_is_a_checksum_mismatch_at_its_chunk() {
    let (d, sums) = setup();
    let mut raw = std::fs::read(d.path(NAME)).unwrap();
    raw[8 + 5000] ^= 0x01;
    std::fs::write(d.path(NAME), &raw).unwrap();
    let e = read_all(&d, Some(&sums)).unwrap_err();
    assert!(
        matches!(
            e,
            PagesError::ChecksumMismatch {
                chunk: 1,
                offset: 4104,
                len: 4096,
                ..
            }
        ),
        "{e}"
    );
    assert_names(&e, NAME, "offset 4104");
    // Without checksums (an upstream image) the damage goes unnoticed, as upstream.
    read_all(&d, None).unwrap();
}

#[test]
fn flipped_byte_in_last_short_chunk() {
    let (d, sums) = setup();
    let mut raw = std::fs::read(d.path(NAME)).unwrap();
    raw[8 + LEN - 1] ^= 0x80;
    std::fs::write(d.path(NAME), &raw).unwrap();
    let e = read_all(&d, Some(&sums)).unwrap_err();
    assert!(
        matches!(
            e,
            PagesError::ChecksumMismatch {
                chunk: 2,
                offset: 8200,
                len: 1808,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn truncated_pages_file_is_refused_up_front() {
    let (d, sums) = setup();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(d.path(NAME))
        .unwrap();
    f.set_len(8 + 6000).unwrap();
    let e = PagesReader::open(d.fd.as_fd(), KFD, LEN as u64, Some(&sums)).unwrap_err();
    assert!(
        matches!(
            e,
            PagesError::Header {
                fault: HeaderFault::Truncated {
                    header: 10_000,
                    available: 6000,
                },
                ..
            }
        ),
        "{e}"
    );
    assert_names(&e, NAME, "offset 6008");
    f.set_len(5).unwrap();
    let e = PagesReader::open(d.fd.as_fd(), KFD, LEN as u64, None).unwrap_err();
    assert!(
        matches!(
            e,
            PagesError::Header {
                fault: HeaderFault::ShortHeader { size: 5 },
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn inflated_length_header_disagrees_with_bo_sizes() {
    let (d, sums) = setup();
    for header in [LEN as u64 + 1, 1 << 63, u64::MAX] {
        let mut raw = std::fs::read(d.path(NAME)).unwrap();
        raw[..8].copy_from_slice(&header.to_ne_bytes());
        std::fs::write(d.path(NAME), &raw).unwrap();
        let e = PagesReader::open(d.fd.as_fd(), KFD, LEN as u64, Some(&sums)).unwrap_err();
        assert!(
            matches!(
                e,
                PagesError::HeaderMismatch {
                    expected: 10_000,
                    ..
                }
            ),
            "{e}"
        );
        assert_names(&e, NAME, "offset 0");
        // Even a caller that expects the inflated size gets "truncated", never an allocation.
        let e = PagesReader::open(d.fd.as_fd(), KFD, header, None).unwrap_err();
        assert!(
            matches!(
                e,
                PagesError::Header {
                    fault: HeaderFault::Truncated {
                        available: 10_000,
                        ..
                    },
                    ..
                }
            ),
            "{e}"
        );
    }
}

#[test]
fn appended_bytes_are_refused() {
    let (d, _) = setup();
    let mut raw = std::fs::read(d.path(NAME)).unwrap();
    raw.extend_from_slice(b"junk");
    std::fs::write(d.path(NAME), &raw).unwrap();
    let e = PagesReader::open(d.fd.as_fd(), KFD, LEN as u64, None).unwrap_err();
    assert!(
        matches!(
            e,
            PagesError::Header {
                fault: HeaderFault::TrailingData { extra: 4, .. },
                ..
            }
        ),
        "{e}"
    );
    assert_names(&e, NAME, "offset 10008");
}

#[test]
fn checksum_list_that_does_not_fit_is_refused() {
    let (d, sums) = setup();
    let bad = [
        images::proto::PagesChecksums {
            chunk_sums: vec![1, 2],
            ..sums.clone()
        },
        images::proto::PagesChecksums {
            algorithm: 99,
            ..sums.clone()
        },
        images::proto::PagesChecksums {
            chunk_size: 0,
            ..sums.clone()
        },
        images::proto::PagesChecksums {
            total_size: 1,
            ..sums.clone()
        },
        images::proto::PagesChecksums {
            file_key: 1,
            ..sums.clone()
        },
    ];
    for b in &bad {
        let e = PagesReader::open(d.fd.as_fd(), KFD, LEN as u64, Some(b)).unwrap_err();
        assert!(matches!(e, PagesError::BadChecksumList { .. }), "{e}");
        assert_names(&e, NAME, "");
    }
}

#[test]
fn missing_pages_file() {
    let d = dir();
    let e = PagesReader::open(d.fd.as_fd(), KFD, 0, None).unwrap_err();
    assert!(matches!(e, PagesError::Open { .. }), "{e}");
    assert_names(&e, NAME, "");
}

fn write_kfd(d: &Dir) -> Vec<u8> {
    KfdImage::write(d.fd.as_fd(), 1, &sample_kfd()).unwrap();
    std::fs::read(d.path("amdgpu-kfd-1.img")).unwrap()
}

#[test]
fn kfd_image_truncated_mid_message() {
    let d = dir();
    let raw = write_kfd(&d);
    let cut = raw.len() / 2;
    std::fs::write(d.path("amdgpu-kfd-1.img"), &raw[..cut]).unwrap();
    let e = KfdImage::read(d.fd.as_fd(), 1).unwrap_err();
    assert!(
        matches!(
            e,
            FrameError::Header {
                fault: HeaderFault::Truncated { .. },
                ..
            }
        ),
        "{e}"
    );
    assert_names(&e, "amdgpu-kfd-1.img", &format!("offset {cut}"));
    std::fs::write(d.path("amdgpu-kfd-1.img"), &raw[..3]).unwrap();
    let e = KfdImage::read(d.fd.as_fd(), 1).unwrap_err();
    assert!(
        matches!(
            e,
            FrameError::Header {
                fault: HeaderFault::ShortHeader { size: 3 },
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn kfd_image_cut_with_matching_header_fails_to_decode_at_an_offset() {
    let d = dir();
    let mut raw = write_kfd(&d);
    // Cut inside the second device entry (field 4), and make the header agree with the cut.
    let cut = raw.len() - 200;
    raw.truncate(cut);
    raw[..8].copy_from_slice(&((cut - 8) as u64).to_ne_bytes());
    std::fs::write(d.path("amdgpu-kfd-1.img"), &raw).unwrap();
    let e = KfdImage::read(d.fd.as_fd(), 1).unwrap_err();
    let FrameError::Decode { field, offset, .. } = &e else {
        panic!("{e}")
    };
    assert!(
        field.is_some() && *offset >= 8 && *offset < cut as u64,
        "{e}"
    );
    assert_names(&e, "amdgpu-kfd-1.img", &format!("offset {offset}"));
}

#[test]
fn kfd_image_with_bad_nested_field_names_its_top_level_field() {
    let d = dir();
    // pid, then field 4 (device entry) holding a wire-type-2 field 1 where a varint belongs.
    let bad_dev = Wire::default().bytes(1, b"xx").0;
    let w = Wire::default().uint(1, 1).bytes(4, &bad_dev);
    std::fs::write(d.path("amdgpu-kfd-1.img"), w.framed()).unwrap();
    let e = KfdImage::read(d.fd.as_fd(), 1).unwrap_err();
    assert!(
        matches!(
            e,
            FrameError::Decode {
                field: Some(4),
                offset: 10,
                ..
            }
        ),
        "{e}"
    );
    assert_names(&e, "criu_kfd", "field 4 at offset 10");
}

#[test]
fn kfd_image_with_huge_length_header_does_not_allocate() {
    let d = dir();
    let mut raw = write_kfd(&d);
    raw[..8].copy_from_slice(&(1u64 << 63).to_ne_bytes());
    std::fs::write(d.path("amdgpu-kfd-1.img"), &raw).unwrap();
    let e = KfdImage::read_with_limit(d.fd.as_fd(), 1, u64::MAX).unwrap_err();
    assert!(
        matches!(
            e,
            FrameError::Header {
                fault: HeaderFault::Truncated {
                    header: 0x8000_0000_0000_0000,
                    ..
                },
                ..
            }
        ),
        "{e}"
    );
}
