//! Round trips of every message, field order of the encoding, and the message image files.
#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)]

mod common;

use std::fmt::Debug;
use std::os::fd::AsFd;

use common::*;
use images::proto::*;
use images::{DmabufImage, ImageFile, KfdImage, RenderNodeImage};
use prost::Message;
use rstest::rstest;

fn roundtrip<M: Message + Default + PartialEq + Debug>(m: M) {
    let bytes = m.encode_to_vec();
    assert_eq!(M::decode(bytes.as_slice()).unwrap(), m);
    let framed = images::frame::encode_framed(&m);
    // The payload is the message, then our image checksum (field 101, 14 bytes).
    assert_eq!(framed[..8], (bytes.len() as u64 + 14).to_ne_bytes());
    assert_eq!(framed[8..8 + bytes.len()], bytes[..]);
    assert_eq!(field_numbers(&framed[8 + bytes.len()..]), [101]);
    let back: M = images::frame::decode_framed(&framed, "mem", "msg", u64::MAX).unwrap();
    assert_eq!(back, m);
}

/// Top-level field numbers of an encoding, in order.
fn field_numbers(mut b: &[u8]) -> Vec<u64> {
    fn varint(b: &mut &[u8]) -> u64 {
        let mut v = 0;
        for shift in (0..64).step_by(7) {
            let x = b[0];
            *b = &b[1..];
            v |= u64::from(x & 0x7f) << shift;
            if x & 0x80 == 0 {
                break;
            }
        }
        v
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let key = varint(&mut b);
        out.push(key >> 3);
        match key & 7 {
            0 => {
                varint(&mut b);
            }
            1 => b = &b[8..],
            2 => {
                let n = varint(&mut b) as usize;
                b = &b[n..];
            }
            5 => b = &b[4..],
            w => panic!("wire type {w}"),
        }
    }
    out
}

#[rstest]
#[case(DevIolink::default())]
#[case(DevIolink { r#type: 11, node_to_id: u32::MAX })]
fn dev_iolink(#[case] m: DevIolink) {
    roundtrip(m);
}

#[rstest]
#[case(KfdDeviceEntry::default())]
#[case(cpu_entry(0))]
#[case(gpu_entry(3, 0xffff))]
#[case(KfdDeviceEntry { hive_id: u64::MAX, vram_size: u64::MAX, ..gpu_entry(1, u32::MAX) })]
fn kfd_device_entry(#[case] m: KfdDeviceEntry) {
    roundtrip(m);
}

#[rstest]
#[case(KfdBoEntry::default())]
#[case(bo(0x7f00_0000_0000, 0x20_0000, 1, 0xc1a5, 7))]
#[case(bo(u64::MAX, u64::MAX, u32::MAX, u32::MAX, u32::MAX))]
fn kfd_bo_entry(#[case] m: KfdBoEntry) {
    roundtrip(m);
}

#[rstest]
#[case(PagesChecksums::default())]
#[case(PagesChecksums { file_key: 0xc1a5, total_size: 3 << 20, chunk_size: 1 << 20, algorithm: 1, chunk_sums: vec![1, 0xffff_ffff, 0] })]
fn pages_checksums(#[case] m: PagesChecksums) {
    roundtrip(m);
}

#[rstest]
#[case(CriuKfd::default())]
#[case(sample_kfd())]
#[case(CriuKfd { pages_checksums: vec![PagesChecksums { file_key: 0xc1a5, total_size: 0x3000, chunk_size: 4096, algorithm: 1, chunk_sums: vec![1, 2, 3] }], ..sample_kfd() })]
#[case(CriuKfd { priv_data: vec![0xa5; 100_000], ..sample_kfd() })]
fn criu_kfd(#[case] m: CriuKfd) {
    roundtrip(m);
}

#[rstest]
#[case(DrmVmEntry::default())]
#[case(DrmVmEntry { addr: u64::MAX, size: 1, offset: 2, flags: 3 })]
fn drm_vm_entry(#[case] m: DrmVmEntry) {
    roundtrip(m);
}

#[rstest]
#[case(DrmBoEntry::default())]
#[case(sample_render_node().bo_entries[0].clone())]
fn drm_bo_entry(#[case] m: DrmBoEntry) {
    roundtrip(m);
}

#[rstest]
#[case(CriuRenderNode::default())]
#[case(sample_render_node())]
#[case(CriuRenderNode { pages_checksums: vec![PagesChecksums { file_key: 0, total_size: 0x4000, chunk_size: 0x4000, algorithm: 1, chunk_sums: vec![9] }], ..sample_render_node() })]
fn criu_render_node(#[case] m: CriuRenderNode) {
    roundtrip(m);
}

#[rstest]
#[case(CriuDmabufNode::default())]
#[case(CriuDmabufNode { gem_handle: u32::MAX })]
fn criu_dmabuf_node(#[case] m: CriuDmabufNode) {
    roundtrip(m);
}

/// Upstream readers (protobuf-c) reject a message that lacks a required field: every upstream
/// field must be on the wire even when it is zero, in field-number order.
#[rstest]
#[case(KfdBoEntry::default().encode_to_vec(), (1..=6).collect())]
#[case(DevIolink::default().encode_to_vec(), vec![1, 2])]
#[case(KfdDeviceEntry::default().encode_to_vec(), (1..=31).collect())]
#[case(CriuKfd::default().encode_to_vec(), vec![1, 2, 3, 5, 7, 8, 9, 10])]
#[case(DrmVmEntry::default().encode_to_vec(), (1..=4).collect())]
#[case(DrmBoEntry::default().encode_to_vec(), (1..=9).collect())]
#[case(CriuRenderNode::default().encode_to_vec(), (1..=4).collect())]
#[case(CriuDmabufNode::default().encode_to_vec(), vec![1])]
fn required_fields_always_encoded_in_order(#[case] bytes: Vec<u8>, #[case] want: Vec<u64>) {
    assert_eq!(field_numbers(&bytes), want);
}

#[test]
fn image_files_round_trip() {
    let d = dir();
    let kfd = sample_kfd();
    KfdImage::write(d.fd.as_fd(), 5, &kfd).unwrap();
    assert_eq!(KfdImage::read(d.fd.as_fd(), 5).unwrap(), kfd);
    let rn = sample_render_node();
    RenderNodeImage::write(d.fd.as_fd(), 6, &rn).unwrap();
    assert_eq!(RenderNodeImage::read(d.fd.as_fd(), 6).unwrap(), rn);
    let db = CriuDmabufNode { gem_handle: 17 };
    DmabufImage::write(d.fd.as_fd(), 8, &db).unwrap();
    assert_eq!(DmabufImage::try_read(d.fd.as_fd(), 8).unwrap(), Some(db));
    assert_eq!(DmabufImage::try_read(d.fd.as_fd(), 9).unwrap(), None);
    assert_eq!(KfdImage::try_read(d.fd.as_fd(), 6).unwrap(), None);
    for name in [
        "amdgpu-kfd-5.img",
        "amdgpu-renderD-6.img",
        "amdgpu-dmabuf_8.img",
    ] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.path(name))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{name}");
    }
}

#[test]
fn rewrite_truncates_old_image() {
    let d = dir();
    KfdImage::write(
        d.fd.as_fd(),
        1,
        &CriuKfd {
            priv_data: vec![1; 5000],
            ..sample_kfd()
        },
    )
    .unwrap();
    KfdImage::write(d.fd.as_fd(), 1, &sample_kfd()).unwrap();
    assert_eq!(KfdImage::read(d.fd.as_fd(), 1).unwrap(), sample_kfd());
}

#[test]
fn read_limit_is_enforced_before_allocation() {
    let d = dir();
    KfdImage::write(d.fd.as_fd(), 1, &sample_kfd()).unwrap();
    let err = KfdImage::read_with_limit(d.fd.as_fd(), 1, 16).unwrap_err();
    assert!(
        matches!(err, images::FrameError::TooLarge { limit: 16, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("amdgpu-kfd-1.img"), "{err}");
}
