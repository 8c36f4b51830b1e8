//! Throughput of the pages writer and reader with and without checksums, of the checksum alone,
//! of a pages file that is three quarters zeros (holes at write, skipped at read), and of kfd
//! image encode/decode. Files go to $IMAGES_BENCH_DIR (default /dev/shm when it
//! exists, so the numbers show our CPU cost rather than the disk's).
//!
//! `cargo bench -p images`

use std::fs::File;
use std::hint::black_box;
use std::os::fd::AsFd;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use images::checksum::{chunk_checksum, ChecksumAlgorithm};
use images::proto::{CriuKfd, KfdBoEntry, KfdDeviceEntry};
use images::{ImageFile, KfdImage, PagesFile, PagesReader, PagesWriter, DEFAULT_CHUNK_SIZE};

const FILE_LEN: usize = 64 << 20;
const PIECE: usize = 4 << 20;
const WHICH: PagesFile = PagesFile::Kfd {
    id: 1,
    gpu_id: 0xc1a5,
};

fn bench_dir() -> tempfile::TempDir {
    let base = std::env::var_os("IMAGES_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .or_else(|| Some(std::path::PathBuf::from("/dev/shm")).filter(|p| p.is_dir()))
        .unwrap_or_else(std::env::temp_dir);
    tempfile::tempdir_in(base).expect("bench dir")
}

fn data() -> Vec<u8> {
    (0..PIECE)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13).to_le_bytes()[0])
        .collect()
}

fn checksum(c: &mut Criterion) {
    let buf = data();
    let mut g = c.benchmark_group("checksum");
    g.throughput(Throughput::Bytes(u64::from(DEFAULT_CHUNK_SIZE)));
    g.bench_function("crc32c_1MiB", |b| {
        b.iter(|| chunk_checksum(ChecksumAlgorithm::Crc32c, black_box(&buf[..1 << 20])))
    });
    g.finish();
}

fn pages(c: &mut Criterion) {
    let tmp = bench_dir();
    let dir = File::open(tmp.path()).expect("open bench dir");
    let piece = data();
    let mut g = c.benchmark_group("pages_64MiB");
    g.throughput(Throughput::Bytes(FILE_LEN as u64));
    g.sample_size(10).measurement_time(Duration::from_secs(4));
    for (label, chunk) in [("plain", None), ("crc32c", Some(DEFAULT_CHUNK_SIZE))] {
        let mut sums = None;
        g.bench_function(BenchmarkId::new("write", label), |b| {
            b.iter(|| {
                let mut w =
                    PagesWriter::new(dir.as_fd(), WHICH, FILE_LEN as u64, chunk).expect("create");
                for _ in 0..FILE_LEN / PIECE {
                    w.write_chunk(&piece).expect("write");
                }
                sums = w.finish().expect("finish");
            })
        });
        let mut buf = vec![0u8; PIECE];
        g.bench_function(BenchmarkId::new("read", label), |b| {
            b.iter(|| {
                let mut r = PagesReader::open(dir.as_fd(), WHICH, FILE_LEN as u64, sums.as_ref())
                    .expect("open");
                while r.read_chunk(&mut buf).expect("read") != 0 {}
            })
        });
    }
    g.finish();
}

/// A 64 MiB payload whose every 4 MiB piece but one in four is zeros (a caching allocator's
/// untouched pool): the writer leaves holes for the zeros, the reader finds them without reading
/// (`read_skipping_holes`). Against `pages_64MiB`, this is what the zeros cost.
fn zeros(c: &mut Criterion) {
    let tmp = bench_dir();
    let dir = File::open(tmp.path()).expect("open bench dir");
    let (piece, zero) = (data(), vec![0u8; PIECE]);
    let pieces = FILE_LEN / PIECE;
    let mut g = c.benchmark_group("pages_64MiB_three_quarters_zero");
    g.throughput(Throughput::Bytes(FILE_LEN as u64));
    g.sample_size(10).measurement_time(Duration::from_secs(4));
    for (label, chunk) in [("plain", None), ("crc32c", Some(DEFAULT_CHUNK_SIZE))] {
        let mut sums = None;
        g.bench_function(BenchmarkId::new("write", label), |b| {
            b.iter(|| {
                let mut w =
                    PagesWriter::new(dir.as_fd(), WHICH, FILE_LEN as u64, chunk).expect("create");
                for i in 0..pieces {
                    w.write_chunk(if i % 4 == 0 { &piece } else { &zero })
                        .expect("write");
                }
                sums = w.finish().expect("finish");
            })
        });
        let mut buf = vec![0u8; PIECE];
        g.bench_function(BenchmarkId::new("read_skipping_holes", label), |b| {
            b.iter(|| {
                let mut r = PagesReader::open(dir.as_fd(), WHICH, FILE_LEN as u64, sums.as_ref())
                    .expect("open");
                let mut skipped = 0;
                for _ in 0..pieces {
                    skipped += r
                        .read_skipping_holes(&mut buf)
                        .expect("read")
                        .iter()
                        .map(|z| z.len())
                        .sum::<usize>();
                }
                // Holes are found where the file system keeps them (not on every file system).
                black_box(skipped)
            })
        });
    }
    g.finish();
}

fn kfd_image() -> CriuKfd {
    let dev = KfdDeviceEntry {
        gpu_id: 0xc1a5,
        simd_count: 240,
        vram_size: 64 << 30,
        ..Default::default()
    };
    CriuKfd {
        pid: 1,
        num_of_gpus: 8,
        device_entries: vec![dev; 8],
        num_of_bos: 10_000,
        bo_entries: (0..10_000u64)
            .map(|i| KfdBoEntry {
                addr: 0x7f00_0000_0000 + (i << 21),
                size: 2 << 20,
                offset: i << 12,
                alloc_flags: 1,
                gpu_id: 0xc1a5,
                handle: u32::try_from(i).unwrap_or(u32::MAX),
            })
            .collect(),
        priv_data: vec![0x5a; 1 << 20],
        ..Default::default()
    }
}

fn kfd(c: &mut Criterion) {
    let tmp = bench_dir();
    let dir = File::open(tmp.path()).expect("open bench dir");
    let k = kfd_image();
    let framed = images::frame::encode_framed(&k);
    let mut g = c.benchmark_group("kfd_image_10k_bos");
    g.throughput(Throughput::Bytes(framed.len() as u64));
    g.bench_function("encode", |b| {
        b.iter(|| images::frame::encode_framed(black_box(&k)))
    });
    g.bench_function("decode", |b| {
        b.iter(|| {
            images::frame::decode_framed::<CriuKfd>(black_box(&framed), "b", "criu_kfd", u64::MAX)
                .expect("decode")
        })
    });
    g.bench_function("write_read_file", |b| {
        b.iter(|| {
            KfdImage::write(dir.as_fd(), 1, &k).expect("write");
            KfdImage::read(dir.as_fd(), 1).expect("read")
        })
    });
    g.finish();
}

criterion_group!(benches, checksum, pages, zeros, kfd);
criterion_main!(benches);
