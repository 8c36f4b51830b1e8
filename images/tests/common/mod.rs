//! Shared test helpers: sample messages and a hand-written protobuf wire encoder (so that the
//! "upstream" images of the compatibility tests are not produced by our own prost code).
#![allow(dead_code, clippy::unwrap_used, clippy::cast_possible_truncation)]

use std::fs::File;

use images::proto::*;

#[derive(Debug)]
pub(crate) struct Dir {
    pub tmp: tempfile::TempDir,
    pub fd: File,
}

/// A fresh directory under the target directory (a disk, where `/tmp` may be a tmpfs without
/// direct I/O).
pub(crate) fn dir() -> Dir {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let fd = File::open(tmp.path()).unwrap();
    Dir { tmp, fd }
}

impl Dir {
    pub(crate) fn path(&self, name: &str) -> std::path::PathBuf {
        self.tmp.path().join(name)
    }

    /// Whether the directory's file system takes direct I/O (tmpfs before Linux 6.6 does not);
    /// says so on stderr when it does not, for the tests that then skip their direct cases.
    pub(crate) fn has_direct_io(&self) -> bool {
        let ok = images::direct::supported_in(self.tmp.path()).unwrap();
        if !ok {
            eprintln!(
                "{}: no direct I/O on this file system: direct cases skipped",
                self.tmp.path().display()
            );
        }
        ok
    }
}

pub(crate) fn gpu_entry(node_id: u32, gpu_id: u32) -> KfdDeviceEntry {
    KfdDeviceEntry {
        node_id,
        gpu_id,
        cpu_cores_count: 0,
        simd_count: 240,
        mem_banks_count: 1,
        caches_count: 247,
        io_links_count: 2,
        max_waves_per_simd: 8,
        lds_size_in_kb: 64,
        gds_size_in_kb: 0,
        num_gws: 64,
        wave_front_size: 64,
        array_count: 8,
        simd_arrays_per_engine: 1,
        cu_per_simd_array: 15,
        simd_per_cu: 4,
        max_slots_scratch_cu: 32,
        vendor_id: 0x1002,
        device_id: 0x740f,
        domain: 0,
        drm_render_minor: 128 + node_id,
        hive_id: 0x1234_5678_9abc_def0,
        num_sdma_engines: 2,
        num_sdma_xgmi_engines: 3,
        num_sdma_queues_per_engine: 8,
        num_cp_queues: 24,
        fw_version: 78,
        capability: 0x0038_2280,
        sdma_fw_version: 8,
        vram_public: 1,
        vram_size: 64 << 30,
        iolinks: vec![
            DevIolink {
                r#type: 2,
                node_to_id: 0,
            },
            DevIolink {
                r#type: 11,
                node_to_id: 2,
            },
        ],
    }
}

pub(crate) fn cpu_entry(node_id: u32) -> KfdDeviceEntry {
    KfdDeviceEntry {
        node_id,
        cpu_cores_count: 64,
        iolinks: vec![DevIolink {
            r#type: 2,
            node_to_id: 1,
        }],
        ..Default::default()
    }
}

pub(crate) fn bo(addr: u64, size: u64, flags: u32, gpu_id: u32, handle: u32) -> KfdBoEntry {
    KfdBoEntry {
        addr,
        size,
        offset: addr >> 12,
        alloc_flags: flags,
        gpu_id,
        handle,
    }
}

pub(crate) fn sample_kfd() -> CriuKfd {
    CriuKfd {
        pid: 4242,
        num_of_gpus: 1,
        num_of_cpus: 1,
        device_entries: vec![cpu_entry(0), gpu_entry(1, 0xc1a5)],
        num_of_bos: 3,
        bo_entries: vec![
            bo(0x7f00_0000_0000, 0x2000, 1, 0xc1a5, 0),
            bo(0x7f00_0001_0000, 0x1000, 2, 0xc1a5, 1),
            bo(0x7f00_0002_0000, 0x1000, 1 << 2, 0xc1a5, 0xffff_ffff),
        ],
        num_of_objects: 5,
        shared_mem_size: 4096,
        shared_mem_magic: 0x4853_4d41,
        priv_data: (0u8..32).collect(),
        pages_checksums: vec![],
    }
}

pub(crate) fn sample_render_node() -> CriuRenderNode {
    CriuRenderNode {
        gpu_id: 0xc1a5,
        id: 7,
        drm_render_minor: 129,
        num_of_bos: 1,
        bo_entries: vec![DrmBoEntry {
            addr: 0x1000,
            size: 0x4000,
            offset: 0x10_0000,
            alloc_flags: 4,
            alignment: 4096,
            preferred_domains: 2,
            handle: 3,
            is_import: 1,
            num_of_vms: 1,
            vm_entries: vec![DrmVmEntry {
                addr: 0x8000_0000,
                size: 0x4000,
                offset: 0,
                flags: 0xe,
            }],
        }],
        pages_checksums: vec![],
    }
}

/// Minimal protobuf wire encoder, independent of prost.
#[derive(Debug, Default)]
pub(crate) struct Wire(pub Vec<u8>);

impl Wire {
    fn varint(&mut self, mut v: u64) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.0.push(b);
                return;
            }
            self.0.push(b | 0x80);
        }
    }
    pub(crate) fn uint(mut self, field: u64, v: u64) -> Self {
        self.varint(field << 3);
        self.varint(v);
        self
    }
    pub(crate) fn bytes(mut self, field: u64, v: &[u8]) -> Self {
        self.varint(field << 3 | 2);
        self.varint(v.len() as u64);
        self.0.extend_from_slice(v);
        self
    }
    pub(crate) fn framed(&self) -> Vec<u8> {
        let mut out = (self.0.len() as u64).to_ne_bytes().to_vec();
        out.extend_from_slice(&self.0);
        out
    }
}

/// A readable hex dump for golden snapshots: offset, 16 bytes per line.
pub(crate) fn hex_dump(bytes: &[u8]) -> String {
    let mut s = String::new();
    for (i, line) in bytes.chunks(16).enumerate() {
        s.push_str(&format!("{:08x}:", i * 16));
        for b in line {
            s.push_str(&format!(" {b:02x}"));
        }
        s.push('\n');
    }
    s
}
