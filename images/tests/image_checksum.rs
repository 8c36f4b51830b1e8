//! Our image checksum (field 101 at the end of every message image we write): damage anywhere in
//! an image is refused naming the file, upstream's images (which have none) read unverified, and
//! upstream's readers see nothing but an unknown field.
#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)]

mod common;

use std::os::fd::AsFd;

use common::*;
use images::frame::{decode_framed, encode_framed};
use images::proto::{CriuKfd, PagesChecksums};
use images::{FrameError, ImageChecksumFault, ImageFile, Integrity, KfdImage, RenderNodeImage};
use prost::Message;
use rstest::rstest;

const NAME: &str = "amdgpu-kfd-1.img";

/// `sample_kfd` as our plugin dumps it by default: with the checksum list of its pages file.
fn ours() -> CriuKfd {
    CriuKfd {
        pages_checksums: vec![PagesChecksums {
            file_key: 0xc1a5,
            total_size: 0x4000,
            chunk_size: 0x1000,
            algorithm: 1,
            chunk_sums: vec![1, 2, 3, 4],
        }],
        ..sample_kfd()
    }
}

fn decode(bytes: &[u8]) -> Result<CriuKfd, FrameError> {
    decode_framed(bytes, NAME, "criu_kfd", u64::MAX)
}

/// The reproduction: four bytes at offset 200 overwritten (inside the GPU's device
/// entry, where the message still decodes: VRAM read "91.8 GiB"). Before the image checksum,
/// the image read as sound.
#[test]
fn overwritten_bytes_that_still_decode_are_a_checksum_mismatch_naming_the_file() {
    let d = dir();
    KfdImage::write(d.fd.as_fd(), 1, &ours()).unwrap();
    let mut raw = std::fs::read(d.path(NAME)).unwrap();
    raw[200..204].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    // The damage alone, without the checksum, decodes to another message.
    let payload_len = raw.len() - 8;
    let damaged = CriuKfd::decode(&raw[8..payload_len + 8]).unwrap();
    assert_ne!(damaged, ours());
    std::fs::write(d.path(NAME), &raw).unwrap();
    let e = KfdImage::read(d.fd.as_fd(), 1).unwrap_err();
    let FrameError::Checksum {
        file,
        fault: ImageChecksumFault::Mismatch { end, .. },
    } = &e
    else {
        panic!("{e}")
    };
    assert_eq!(file, NAME);
    assert_eq!(
        *end,
        raw.len() as u64 - 14,
        "the checksum field is 14 bytes"
    );
    let text = e.to_string();
    assert!(
        text.starts_with("image file amdgpu-kfd-1.img is damaged: "),
        "{text}"
    );
    // The same through try_read, which the restore uses.
    assert!(matches!(
        KfdImage::try_read(d.fd.as_fd(), 1),
        Err(FrameError::Checksum { .. })
    ));
}

/// No single flipped bit of our image reads as a message: every one is an error.
#[test]
fn every_flipped_bit_of_our_kfd_image_is_refused() {
    let good = encode_framed(&ours());
    assert_eq!(decode(&good).unwrap(), ours());
    for i in 0..good.len() {
        for bit in 0..8 {
            let mut raw = good.clone();
            raw[i] ^= 1 << bit;
            assert!(
                decode(&raw).is_err(),
                "bit {bit} of byte {i} flipped read as sound"
            );
        }
    }
}

/// An image without our page checksums (a dump with `--no-checksums`, a render node without
/// BOs) cannot tell a damaged checksum key from an image without one; a flip there leaves the
/// message itself intact. No flipped bit reads as another message.
#[rstest]
#[case::kfd(encode_framed(&sample_kfd()))]
#[case::render_node(encode_framed(&sample_render_node()))]
fn no_flipped_bit_of_an_image_without_page_checksums_reads_as_another_message(
    #[case] good: Vec<u8>,
) {
    let kfd = decode_framed::<CriuKfd>(&good, NAME, "criu_kfd", u64::MAX).ok();
    let render = decode_framed(&good, NAME, "criu_render_node", u64::MAX).ok();
    for i in 0..good.len() {
        for bit in 0..8 {
            let mut raw = good.clone();
            raw[i] ^= 1 << bit;
            if let Some(k) = &kfd {
                if let Ok(m) = decode_framed::<CriuKfd>(&raw, NAME, "criu_kfd", u64::MAX) {
                    assert_eq!(&m, k, "bit {bit} of byte {i}");
                }
            }
            if let Some(r) = &render {
                if let Ok(m) = decode_framed::<images::proto::CriuRenderNode>(
                    &raw,
                    NAME,
                    "criu_render_node",
                    u64::MAX,
                ) {
                    assert_eq!(&m, r, "bit {bit} of byte {i}");
                }
            }
        }
    }
}

#[test]
fn our_images_read_verified_and_upstreams_unprotected() {
    let d = dir();
    KfdImage::write(d.fd.as_fd(), 1, &ours()).unwrap();
    RenderNodeImage::write(d.fd.as_fd(), 2, &sample_render_node()).unwrap();
    assert_eq!(
        KfdImage::read_with_integrity(d.fd.as_fd(), 1).unwrap(),
        (ours(), Integrity::Verified)
    );
    assert_eq!(
        RenderNodeImage::read_with_integrity(d.fd.as_fd(), 2).unwrap(),
        (sample_render_node(), Integrity::Verified)
    );
    // Upstream's plugin writes the message alone (here with an encoder independent of ours).
    let upstream = Wire::default()
        .uint(1, 4242)
        .uint(2, 0)
        .uint(3, 0)
        .uint(5, 0)
        .uint(7, 0)
        .uint(8, 0)
        .uint(9, 0)
        .bytes(10, &[1, 2]);
    std::fs::write(d.path("amdgpu-kfd-3.img"), upstream.framed()).unwrap();
    let (k, integrity) = KfdImage::read_with_integrity(d.fd.as_fd(), 3).unwrap();
    assert_eq!((k.pid, integrity), (4242, Integrity::Unprotected));
}

/// What upstream's readers see of our image: the message, field 101 skipped as unknown.
#[test]
fn a_reader_that_skips_unknown_fields_reads_our_image_as_the_message() {
    let raw = encode_framed(&ours());
    let len = u64::from_ne_bytes(raw[..8].try_into().unwrap()) as usize;
    assert_eq!(len, raw.len() - 8);
    assert_eq!(CriuKfd::decode(&raw[8..]).unwrap(), ours());
    // The checksum field, spelled with an encoder independent of ours: key (101, wire type 2),
    // length 11, algorithm 1 (CRC-32C), value as fixed64 (key 0x11).
    let body = &raw[8..raw.len() - 14];
    let crc =
        u64::from(images::checksum::chunk_checksum(images::ChecksumAlgorithm::Crc32c, body) as u32);
    let mut seal = vec![0xaa, 0x06, 11, 0x08, 0x01, 0x11];
    seal.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(&raw[raw.len() - 14..], seal.as_slice());
}

/// Our image with its last 14 bytes (the checksum) cut off and the header made to agree.
fn without_checksum(raw: &[u8]) -> Vec<u8> {
    let mut cut = raw[..raw.len() - 14].to_vec();
    let len = (cut.len() - 8) as u64;
    cut[..8].copy_from_slice(&len.to_ne_bytes());
    cut
}

#[test]
fn our_page_checksums_without_an_image_checksum_are_refused() {
    let e = decode(&without_checksum(&encode_framed(&ours()))).unwrap_err();
    assert!(
        matches!(
            &e,
            FrameError::Checksum {
                fault: ImageChecksumFault::Missing { field: 100 },
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains(NAME), "{e}");
    // Without page checksums, the same cut is an image as upstream writes it.
    assert_eq!(
        decode(&without_checksum(&encode_framed(&sample_kfd()))).unwrap(),
        sample_kfd()
    );
}

fn append(raw: &[u8], wire: &Wire) -> Vec<u8> {
    let mut out = raw.to_vec();
    out.extend_from_slice(&wire.0);
    let len = (out.len() - 8) as u64;
    out[..8].copy_from_slice(&len.to_ne_bytes());
    out
}

#[test]
fn a_field_after_the_image_checksum_is_refused() {
    let raw = append(&encode_framed(&sample_kfd()), &Wire::default().uint(1, 7));
    let e = decode(&raw).unwrap_err();
    assert!(
        matches!(
            &e,
            FrameError::Checksum {
                fault: ImageChecksumFault::NotLast { field: 1, .. },
                ..
            }
        ),
        "{e}"
    );
}

#[rstest]
#[case::unknown_algorithm(Wire::default().uint(1, 9), "unknown checksum algorithm 9")]
#[case::varint_not_message(Wire::default(), "wire type 0")]
fn a_malformed_image_checksum_is_refused(#[case] inner: Wire, #[case] what: &str) {
    let plain = without_checksum(&encode_framed(&sample_kfd()));
    let seal = if inner.0.is_empty() {
        Wire::default().uint(101, 5)
    } else {
        Wire::default().bytes(101, &inner.0)
    };
    let e = decode(&append(&plain, &seal)).unwrap_err();
    assert!(
        matches!(
            &e,
            FrameError::Checksum {
                fault: ImageChecksumFault::Malformed { .. },
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains(what), "{e}");
}
