//! Images in upstream's two variants, made by hand with an independent wire encoder: v4.2 (no
//! `kfd_bo_entry.handle`, `criu_render_node` with only `gpu_id`) and the development branch.
#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)]

mod common;

use std::os::fd::AsFd;

use common::*;
use images::proto::*;
use images::{ImageFile, KfdImage, RenderNodeImage};

fn device_wire() -> Vec<u8> {
    let mut w = Wire::default();
    // node_id .. drm_render_minor (1..21), then hive_id (22), 23..30, vram_size (31).
    for f in 1..=31u64 {
        w = w.uint(f, f * 10);
    }
    w.bytes(32, &Wire::default().uint(1, 11).uint(2, 2).0).0
}

fn bo_wire(handle: Option<u64>) -> Vec<u8> {
    let w = Wire::default()
        .uint(1, 0x7f00_0000_0000)
        .uint(2, 0x20_0000)
        .uint(3, 0x1000)
        .uint(4, 1)
        .uint(5, 0xc1a5);
    match handle {
        Some(h) => w.uint(6, h).0,
        None => w.0,
    }
}

fn kfd_wire(handle: Option<u64>) -> Wire {
    Wire::default()
        .uint(1, 4242)
        .uint(2, 1)
        .uint(3, 0)
        .bytes(4, &device_wire())
        .uint(5, 2)
        .bytes(6, &bo_wire(handle))
        .bytes(6, &bo_wire(handle.map(|h| h + 1)))
        .uint(7, 3)
        .uint(8, 0)
        .uint(9, 0)
        .bytes(10, &[1, 2, 3, 4])
}

fn check_kfd(k: &CriuKfd, handles: [u32; 2]) {
    assert_eq!(
        (k.pid, k.num_of_gpus, k.num_of_bos, k.num_of_objects),
        (4242, 1, 2, 3)
    );
    let dev = &k.device_entries[0];
    assert_eq!(
        (
            dev.node_id,
            dev.drm_render_minor,
            dev.hive_id,
            dev.vram_size
        ),
        (10, 210, 220, 310)
    );
    assert_eq!(
        dev.iolinks,
        vec![DevIolink {
            r#type: 11,
            node_to_id: 2
        }]
    );
    assert_eq!(
        k.bo_entries.iter().map(|b| b.handle).collect::<Vec<_>>(),
        handles
    );
    assert_eq!(k.bo_entries[0].size, 0x20_0000);
    assert_eq!(k.priv_data, [1, 2, 3, 4]);
    assert!(k.pages_checksums.is_empty());
}

#[test]
fn upstream_v4_2_kfd_image_without_handle() {
    let d = dir();
    std::fs::write(d.path("amdgpu-kfd-1.img"), kfd_wire(None).framed()).unwrap();
    // No handle field: both BOs decode as "no handle".
    check_kfd(
        &KfdImage::read(d.fd.as_fd(), 1).unwrap(),
        [u32::MAX, u32::MAX],
    );
}

#[test]
fn upstream_development_kfd_image_with_handle() {
    let d = dir();
    std::fs::write(
        d.path("amdgpu-kfd-1.img"),
        kfd_wire(Some(0xffff_fffe)).framed(),
    )
    .unwrap();
    check_kfd(
        &KfdImage::read(d.fd.as_fd(), 1).unwrap(),
        [0xffff_fffe, 0xffff_ffff],
    );
}

#[test]
fn our_image_is_the_development_encoding() {
    // Re-writing a development-branch image gives the same bytes, then our image checksum: we
    // emit every upstream field, in upstream's order, our field 100 only when there are page
    // checksums, and field 101 (which upstream's readers skip) last.
    let d = dir();
    std::fs::write(d.path("amdgpu-kfd-1.img"), kfd_wire(Some(5)).framed()).unwrap();
    let k = KfdImage::read(d.fd.as_fd(), 1).unwrap();
    KfdImage::write(d.fd.as_fd(), 2, &k).unwrap();
    let ours = std::fs::read(d.path("amdgpu-kfd-2.img")).unwrap();
    let upstream = kfd_wire(Some(5)).0;
    assert_eq!(ours[8..8 + upstream.len()], upstream[..]);
    assert_eq!(
        ours[8 + upstream.len()..][..2],
        [0xaa, 0x06],
        "key of field 101"
    );
    assert_eq!(ours.len(), 8 + upstream.len() + 14);
}

#[test]
fn upstream_v4_2_render_node_image() {
    let d = dir();
    std::fs::write(
        d.path("amdgpu-renderD-4.img"),
        Wire::default().uint(1, 0xc1a5).framed(),
    )
    .unwrap();
    let rn = RenderNodeImage::read(d.fd.as_fd(), 4).unwrap();
    assert_eq!(
        rn,
        CriuRenderNode {
            gpu_id: 0xc1a5,
            ..Default::default()
        }
    );
}

#[test]
fn upstream_development_render_node_image() {
    let d = dir();
    let vm = Wire::default()
        .uint(1, 0x8000)
        .uint(2, 0x4000)
        .uint(3, 0)
        .uint(4, 0xe)
        .0;
    let mut bo = Wire::default();
    for f in 1..=9 {
        bo = bo.uint(f, f);
    }
    let bo = bo.bytes(10, &vm).0;
    let w = Wire::default()
        .uint(1, 0xc1a5)
        .uint(2, 4)
        .uint(3, 129)
        .uint(4, 1)
        .bytes(5, &bo);
    std::fs::write(d.path("amdgpu-renderD-4.img"), w.framed()).unwrap();
    let rn = RenderNodeImage::read(d.fd.as_fd(), 4).unwrap();
    assert_eq!(
        (rn.gpu_id, rn.id, rn.drm_render_minor, rn.num_of_bos),
        (0xc1a5, 4, 129, 1)
    );
    let b = &rn.bo_entries[0];
    assert_eq!(
        (b.addr, b.alignment, b.is_import, b.num_of_vms),
        (1, 5, 8, 9)
    );
    assert_eq!(
        b.vm_entries,
        vec![DrmVmEntry {
            addr: 0x8000,
            size: 0x4000,
            offset: 0,
            flags: 0xe
        }]
    );
}

#[test]
fn golden_kfd_image() {
    let d = dir();
    let k = CriuKfd {
        device_entries: vec![cpu_entry(0)],
        bo_entries: vec![bo(0x7f00_0000_0000, 0x1000, 1, 0xc1a5, 0xffff_ffff)],
        priv_data: vec![0xaa, 0xbb],
        pages_checksums: vec![PagesChecksums {
            file_key: 0xc1a5,
            total_size: 0x1000,
            chunk_size: 0x1000,
            algorithm: 1,
            chunk_sums: vec![0x1234_5678],
        }],
        ..sample_kfd()
    };
    KfdImage::write(d.fd.as_fd(), 1, &k).unwrap();
    insta::assert_snapshot!(
        "kfd_image",
        hex_dump(&std::fs::read(d.path("amdgpu-kfd-1.img")).unwrap())
    );
}
