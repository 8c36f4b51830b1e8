//! Each target's starting inputs, made at fuzz time rather than kept in the repository.
//!
//! - `images`, `pages`, `restore`: from a real checkpoint of the demo workload (the
//!   [`Fixture`]): its KFD image and render-node images, framed and bare; its pages
//!   files cut to their first 4 KiB, read with and without checksums.
//! - `ioctls`: programs that drive the simulator the way the plugin and the model workload do
//!   (memory, events, queues, a whole CRIU_OP cycle, render-node buffers and dma-bufs),
//!   written with [`Program`].

use std::path::Path;

use crate::image_files::pages_input;
use crate::ioctls::{file, Fix, Program};
use crate::restore::Fixture;

/// A named seed.
pub type Seed = (String, Vec<u8>);

/// The seeds of target `name` (`None`: no such target).
///
/// # Panics
/// When the demo checkpoint cannot be made (see [`Fixture::shared`]).
pub fn seeds(name: &str) -> Option<Vec<Seed>> {
    Some(match name {
        "images" => images_seeds(Fixture::shared()),
        "pages" => pages_seeds(Fixture::shared()),
        "restore" => vec![("kfd-image".into(), Fixture::shared().image().to_vec())],
        "ioctls" => ioctl_seeds(),
        _ => return None,
    })
}

fn dir_files(dir: &Path, prefix: &str) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| {
                    let name = e.file_name().into_string().ok()?;
                    name.starts_with(prefix)
                        .then(|| Some((name, std::fs::read(e.path()).ok()?)))?
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn images_seeds(fx: &Fixture) -> Vec<Seed> {
    let mut out = vec![
        ("kfd-image".to_owned(), fx.image().to_vec()),
        (
            "kfd-payload".to_owned(),
            fx.image().get(8..).unwrap_or_default().to_vec(),
        ),
    ];
    out.extend(
        dir_files(fx.dir(), "amdgpu-renderD-")
            .into_iter()
            .map(|(n, b)| (n.trim_end_matches(".img").to_owned(), b)),
    );
    out
}

fn pages_seeds(fx: &Fixture) -> Vec<Seed> {
    let mut out = Vec::new();
    for (name, bytes) in dir_files(fx.dir(), "amdgpu-pages-") {
        let name = name.trim_end_matches(".img");
        let payload = bytes.get(8..).unwrap_or_default();
        let head = &payload[..payload.len().min(4096)];
        // Checksums computed over 512-byte chunks, then none, then the header's own size.
        out.push((format!("{name}-sums"), pages_input(2 | 4, 512, head)));
        out.push((format!("{name}-plain"), pages_input(3 << 3, 0, head)));
        out.push((format!("{name}-header"), pages_input(1 | 4 << 3, 0, head)));
    }
    out
}

const GPU_VA: u64 = 0x1_0000_0000;

fn le(fields: &[(usize, &[u8])]) -> Vec<u8> {
    let len = fields.iter().map(|(at, b)| at + b.len()).max().unwrap_or(0);
    let mut v = vec![0u8; len];
    for (at, b) in fields {
        v[*at..*at + b.len()].copy_from_slice(b);
    }
    v
}

fn ioctl_seeds() -> Vec<Seed> {
    use kfd_sys as sys;
    let vram = sys::KFD_IOC_ALLOC_MEM_FLAGS_VRAM | sys::KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE;
    let gtt = sys::KFD_IOC_ALLOC_MEM_FLAGS_GTT | sys::KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE;
    let alloc = |va: u64, size: u64, flags: u32| {
        le(&[
            (0, &va.to_le_bytes()),
            (8, &size.to_le_bytes()),
            (36, &flags.to_le_bytes()),
        ])
    };
    let gpu_at = |word: u8| (word, Fix::Gpu(0));
    let p = file::P_KFD;

    let basics = Program::new(false, true)
        .kfd(p, 0x01, &[], &[])
        .kfd(
            p,
            0x14,
            &le(&[(8, &1u32.to_le_bytes())]),
            &[(0, Fix::Scratch(0))],
        )
        .kfd(p, 0x23, &[], &[gpu_at(2)])
        .kfd(p, 0x05, &[], &[gpu_at(8)])
        .kfd(p, 0x21, &(-1i32).to_le_bytes(), &[])
        .kfd(p, 0x0d, &[], &[]);

    // ALLOC, MAP on the GPU (device id list in scratch 1), UNMAP, FREE.
    let memory = Program::new(false, true)
        .kfd(p, 0x16, &alloc(GPU_VA, 1 << 16, vram), &[gpu_at(8)])
        .fill(1, 0, &[], &[(0, Fix::Gpu(0))])
        .kfd(
            p,
            0x18,
            &le(&[(16, &1u32.to_le_bytes())]),
            &[(0, Fix::Earlier { back: 0, word: 4 }), (2, Fix::Scratch(1))],
        )
        .kfd(
            p,
            0x19,
            &le(&[(16, &1u32.to_le_bytes())]),
            &[(0, Fix::Earlier { back: 1, word: 4 }), (2, Fix::Scratch(1))],
        )
        .kfd(p, 0x17, &[], &[(0, Fix::Earlier { back: 2, word: 4 })]);

    // The event page, a signal event on it, SET, WAIT (immediate), RESET, DESTROY.
    let events = Program::new(false, true)
        .kfd(p, 0x16, &alloc(GPU_VA, 1 << 15, gtt), &[gpu_at(8)])
        .kfd(
            p,
            0x08,
            &le(&[(16, &1u32.to_le_bytes())]),
            &[(0, Fix::Earlier { back: 0, word: 4 })],
        )
        .kfd(p, 0x0a, &[], &[(0, Fix::Earlier { back: 0, word: 6 })])
        .fill(2, 0, &[], &[(10, Fix::Earlier { back: 1, word: 6 })])
        .kfd(
            p,
            0x0c,
            &le(&[(8, &1u32.to_le_bytes()), (12, &1u32.to_le_bytes())]),
            &[(0, Fix::Scratch(2))],
        )
        .kfd(p, 0x0b, &[], &[(0, Fix::Earlier { back: 2, word: 6 })])
        .kfd(p, 0x09, &[], &[(0, Fix::Earlier { back: 3, word: 6 })]);

    // An AQL queue with its ring and pointers in scratch, then destroyed.
    let queue = Program::new(false, true)
        .kfd(
            p,
            0x02,
            &le(&[
                (32, &4096u32.to_le_bytes()),
                (40, &sys::KFD_IOC_QUEUE_TYPE_COMPUTE_AQL.to_le_bytes()),
                (44, &100u32.to_le_bytes()),
                (48, &7u32.to_le_bytes()),
            ]),
            &[
                (0, Fix::Scratch(3)),
                (2, Fix::Scratch(5)),
                (4, Fix::Scratch(4)),
                (9, Fix::Gpu(0)),
            ],
        )
        .kfd(p, 0x03, &[], &[(0, Fix::Earlier { back: 0, word: 13 })]);

    // P has a VRAM buffer; its tracer checkpoints it (PROCESS_INFO, CHECKPOINT into scratch
    // 0-2, UNPAUSE); R restores it with its own render node and is resumed.
    let gpus = 1;
    let (t, r) = (file::t_kfd(gpus), file::r_kfd(gpus));
    let criu = |op: u32| le(&[(48, &op.to_le_bytes())]);
    let buckets = [
        (0, Fix::Scratch(0)),
        (2, Fix::Scratch(1)),
        (4, Fix::Scratch(2)),
    ];
    let counts = |back: u8| {
        [
            (6, Fix::Earlier { back, word: 6 }),
            (8, Fix::Earlier { back, word: 8 }),
            (10, Fix::Earlier { back, word: 10 }),
        ]
    };
    let checkpoint_fixes: Vec<(u8, Fix)> = buckets.iter().copied().chain(counts(0)).collect();
    let restore_fixes: Vec<(u8, Fix)> = buckets.iter().copied().chain(counts(2)).collect();
    let criu_cycle = Program::new(false, true)
        .kfd(p, 0x16, &alloc(GPU_VA, 1 << 16, vram), &[gpu_at(8)])
        .kfd(t, 0x22, &criu(0), &[])
        .kfd(t, 0x22, &criu(1), &checkpoint_fixes)
        .kfd(t, 0x22, &criu(2), &[])
        .fill(0, 0, &[], &[(2, Fix::File(file::r_render(gpus, 0)))])
        .kfd(r, 0x22, &criu(3), &restore_fixes)
        .kfd(r, 0x22, &criu(4), &[(11, Fix::Pid(true))]);

    // A GEM buffer exported as a dma-buf and imported on R's render node; a context; DEV_INFO.
    let pr = file::p_render(0);
    let rr = file::r_render(gpus, 0);
    let o_rdwr = u8::try_from(libc::O_RDWR.trailing_zeros()).unwrap_or(1);
    let render = Program::new(false, true)
        .render(
            pr,
            3,
            &le(&[
                (0, &(1u64 << 16).to_le_bytes()),
                (16, &u64::from(sys::AMDGPU_GEM_DOMAIN_GTT).to_le_bytes()),
            ]),
            &[],
        )
        .render(
            pr,
            1,
            &[],
            &[
                (0, Fix::Earlier { back: 0, word: 0 }),
                (1, Fix::Bit(o_rdwr)),
            ],
        )
        .render(rr, 2, &[], &[(2, Fix::Installed(0))])
        .render(rr, 0, &[], &[(0, Fix::Earlier { back: 0, word: 0 })])
        .render(pr, 5, &le(&[(0, &1u32.to_le_bytes())]), &[])
        .render(
            pr,
            8,
            &le(&[
                (8, &256u32.to_le_bytes()),
                (12, &sys::AMDGPU_INFO_DEV_INFO.to_le_bytes()),
            ]),
            &[(0, Fix::Scratch(6))],
        );

    let two_gpus = Program::new(true, false)
        .kfd(
            p,
            0x15,
            &[],
            &[(0, Fix::File(file::p_render(1))), (1, Fix::Gpu(1))],
        )
        .kfd(p, 0x16, &alloc(GPU_VA, 1 << 16, vram), &[(8, Fix::Gpu(1))])
        .raw_null(p, 0x1234_5678)
        .raw_null(file::p_render(0), 0xc018_6499);

    [
        ("basics", basics),
        ("memory", memory),
        ("events", events),
        ("aql-queue", queue),
        ("criu-cycle", criu_cycle),
        ("render", render),
        ("two-gpus", two_gpus),
    ]
    .into_iter()
    .map(|(n, p)| (n.to_owned(), p.bytes().to_vec()))
    .collect()
}
