//! Zeros cost nothing: zero chunks are holes of the pages file, read back the same, are not read
//! at restore, and are still covered by the checksums.
#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)]

mod common;

use std::ops::Range;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, MetadataExt};

use common::*;
use images::direct::{AlignedBuf, DIRECT_ALIGN};
use images::pages::{self, verify_pages_file};
use images::proto::PagesChecksums;
use images::{PagesError, PagesFile, PagesReader, PagesWriter, DEFAULT_CHUNK_SIZE};
use rstest::rstest;

const KFD: PagesFile = PagesFile::Kfd {
    id: 5,
    gpu_id: 0x7300,
};
const NAME: &str = "amdgpu-pages-5-7300.img";
const M: usize = 1 << 20;
/// 8 chunks of 1 MiB; chunks 2, 3, 5 and 7 (the last) are zero.
const LEN: usize = 8 * M;
const ZERO_CHUNKS: [usize; 4] = [2, 3, 5, 7];

fn payload() -> Vec<u8> {
    let mut data: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8 | 1).collect();
    for c in ZERO_CHUNKS {
        data[c * M..(c + 1) * M].fill(0);
    }
    data
}

/// The payload ranges of the zero chunks, adjacent ones merged.
fn zero_ranges() -> Vec<Range<usize>> {
    vec![2 * M..4 * M, 5 * M..6 * M, 7 * M..8 * M]
}

fn write(d: &Dir, data: &[u8], checksums: bool) -> Option<PagesChecksums> {
    write_as(d, data, checksums, Write::Buffered)
}

/// How a dump writes the pages file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Write {
    /// Through the page cache, from any buffer (`write_chunk`).
    Buffered,
    /// With direct I/O, from aligned windows congruent with the file (`write_direct`), as a
    /// dump that must reach the disk writes.
    Direct,
    /// With direct I/O, every window checksummed first (`prepare_direct`) and written after, in
    /// reverse order, through a second handle (`direct_writes`): as the dump's writing thread
    /// writes one window while the next is checksummed.
    DirectAhead,
}

impl Write {
    fn is_direct(self) -> bool {
        self != Write::Buffered
    }
}

fn write_as(d: &Dir, data: &[u8], checksums: bool, how: Write) -> Option<PagesChecksums> {
    let chunk = checksums.then_some(DEFAULT_CHUNK_SIZE);
    let mut w = PagesWriter::new(d.fd.as_fd(), KFD, data.len() as u64, chunk).unwrap();
    if how.is_direct() {
        assert!(w.use_direct_io(), "the test directory takes direct I/O");
    }
    let mut window = AlignedBuf::new(3 * M + 2 * DIRECT_ALIGN);
    let mut prepared = Vec::new();
    // Pieces that do not line up with the chunks (3 MiB, as staging buffers of another size).
    let mut pos = 0;
    for piece in data.chunks(3 * M) {
        match how {
            Write::Buffered => w.write_chunk(piece).unwrap(),
            Write::Direct => {
                let off = pages::buffer_offset(pos as u64);
                let win = window.as_mut_slice();
                win.fill(0xee);
                win[off..off + piece.len()].copy_from_slice(piece);
                w.write_direct(win, piece.len()).unwrap();
            }
            Write::DirectAhead => {
                let mut win = AlignedBuf::new(3 * M + 2 * DIRECT_ALIGN);
                let off = pages::buffer_offset(pos as u64);
                win.as_mut_slice().fill(0xee);
                win.as_mut_slice()[off..off + piece.len()].copy_from_slice(piece);
                let runs = w.prepare_direct(win.as_mut_slice(), piece.len()).unwrap();
                prepared.push((win, runs));
            }
        }
        pos += piece.len();
    }
    if let Some(disk) = w.direct_writes().unwrap() {
        for (win, runs) in prepared.iter().rev() {
            disk.write(win.as_slice(), runs).unwrap();
        }
    }
    // Zero blocks are holes; the block at each end of a zero run also holds data (the payload
    // starts 8 bytes into the file), so up to a block per run is written.
    let zeros = (ZERO_CHUNKS.len() * M) as u64;
    assert!(
        (zeros - 3 * 4096..=zeros).contains(&w.zero_bytes()),
        "{} zero bytes not written",
        w.zero_bytes()
    );
    w.finish().unwrap()
}

/// Whether the file system of the test directory keeps holes (it reports fewer blocks than the
/// file's length for a file with a hole).
fn keeps_holes(d: &Dir) -> bool {
    let f = std::fs::File::create(d.path("probe")).unwrap();
    f.set_len(1 << 20).unwrap();
    f.write_all_at(b"x", 0).unwrap();
    f.sync_all().unwrap();
    f.metadata().unwrap().blocks() * 512 < 1 << 20
}

/// How a restore reads the pages file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Read {
    /// Through the page cache, into any buffer (`read_skipping_holes`).
    Buffered,
    /// With direct I/O, into aligned windows congruent with the file
    /// (`read_direct_skipping_holes`), as the restore reads a file not in the page cache.
    Direct,
    /// With direct I/O, every window read first through a second handle (`direct_reads`) and
    /// verified after, in order (`verify_direct_skipping_holes`): as the restore's reading thread
    /// reads ahead of the verifying one.
    DirectAhead,
}

impl Read {
    fn is_direct(self) -> bool {
        self != Read::Buffered
    }
}

/// Reads the whole file in `buf`-sized reads, `how`; returns the bytes (holes as zeros) and the
/// skipped ranges, as payload offsets.
fn read_sparse(
    d: &Dir,
    sums: Option<&PagesChecksums>,
    buf: usize,
    how: Read,
) -> Result<(Vec<u8>, Vec<Range<usize>>), PagesError> {
    let mut r = PagesReader::open(d.fd.as_fd(), KFD, LEN as u64, sums)?;
    if how.is_direct() {
        // Whatever the page cache holds: the test asks for direct reads.
        assert!(r.use_direct_io(), "the test directory takes direct I/O");
    }
    // Read ahead: every window read before the first is verified.
    let mut ahead = Vec::new();
    if how == Read::DirectAhead {
        let disk = r.direct_reads()?.expect("a direct reader");
        let mut pos = 0;
        while pos < LEN {
            let n = (LEN - pos).min(buf);
            let mut w = AlignedBuf::new(buf + DIRECT_ALIGN);
            w.as_mut_slice().fill(0xee);
            disk.read(w.as_mut_slice(), pos as u64, n)?;
            ahead.push(w);
            pos += n;
        }
        ahead.reverse();
    }
    let (mut out, mut skipped) = (Vec::new(), Vec::<Range<usize>>::new());
    let mut window = AlignedBuf::new(buf + DIRECT_ALIGN);
    while r.remaining() > 0 {
        let n = (r.remaining() as usize).min(buf);
        let at = out.len();
        let off = match how {
            Read::Buffered => 0,
            Read::Direct | Read::DirectAhead => pages::buffer_offset(at as u64),
        };
        if let Some(read) = ahead.pop() {
            window = read;
        } else {
            window.as_mut_slice().fill(0xee);
        }
        let w = window.as_mut_slice();
        let zeros = match how {
            Read::Buffered => r.read_skipping_holes(&mut w[..n])?,
            Read::Direct => r.read_direct_skipping_holes(w, n)?,
            Read::DirectAhead => r.verify_direct_skipping_holes(w, n)?,
        };
        let b = &mut w[off..off + n];
        for z in zeros {
            // A direct read reads whole pages, the holes' too; a buffered one skips them.
            assert!(
                how.is_direct() || b[z.clone()].iter().all(|&x| x == 0xee),
                "a skipped range was written"
            );
            b[z.clone()].fill(0);
            match skipped.last_mut() {
                Some(last) if last.end == at + z.start => last.end = at + z.end,
                _ => skipped.push(at + z.start..at + z.end),
            }
        }
        out.extend_from_slice(b);
    }
    Ok((out, skipped))
}

#[rstest]
#[case::with_checksums(true)]
#[case::without_checksums(false)]
fn zero_chunks_are_holes_that_read_back_the_same(
    #[case] checksums: bool,
    #[values(Write::Buffered, Write::Direct, Write::DirectAhead)] written: Write,
    #[values(Read::Buffered, Read::Direct, Read::DirectAhead)] how: Read,
) {
    let d = dir();
    if (written.is_direct() || how.is_direct()) && !d.has_direct_io() {
        return;
    }
    let data = payload();
    let sums = write_as(&d, &data, checksums, written);
    // Upstream's view: the same length and the same bytes, holes included.
    let raw = std::fs::read(d.path(NAME)).unwrap();
    assert_eq!(raw.len(), 8 + LEN);
    assert_eq!(raw[..8], (LEN as u64).to_ne_bytes());
    assert!(raw[8..] == data[..], "the file's bytes are the payload");
    // Checksums cover every chunk, zero ones included, as if they were hashed.
    if let Some(s) = &sums {
        let want: Vec<u64> = data
            .chunks(M)
            .map(|c| u64::from(crc32c::crc32c(c)))
            .collect();
        assert_eq!(s.chunk_sums, want);
    }
    let holes = keeps_holes(&d);
    if holes {
        std::fs::File::open(d.path(NAME))
            .unwrap()
            .sync_all()
            .unwrap();
        let on_disk = std::fs::metadata(d.path(NAME)).unwrap().blocks() * 512;
        // 4 data chunks, plus at most one block at each end of each of the 3 holes.
        assert!(
            on_disk <= (4 * M + 6 * 4096 + 4096) as u64,
            "{on_disk} bytes on disk"
        );
    } else {
        eprintln!("the test directory's file system keeps no holes: skipping what needs them");
    }
    // A restore gets the same bytes, and is told which chunks it need not copy.
    for buf in [8 * M, 2 * M, 3 * M + 4096] {
        let (got, skipped) = read_sparse(&d, sums.as_ref(), buf, how).unwrap();
        assert!(got == data, "content read back with {buf}-byte reads");
        if holes && buf == 8 * M {
            assert_eq!(skipped, zero_ranges());
        }
        // Only whole chunks inside one read are skipped.
        assert!(skipped.iter().all(|r| r.start % M == 0
            && r.end % M == 0
            && zero_ranges()
                .iter()
                .any(|z| z.start <= r.start && r.end <= z.end)));
    }
    verify_pages_file(d.fd.as_fd(), KFD, LEN as u64, sums.as_ref(), 2 * M).unwrap();
}

#[rstest]
fn a_copy_without_holes_reads_the_same_and_skips_nothing(
    #[values(Read::Buffered, Read::Direct, Read::DirectAhead)] how: Read,
) {
    let d = dir();
    if how.is_direct() && !d.has_direct_io() {
        return;
    }
    let data = payload();
    let sums = write(&d, &data, true).unwrap();
    // Copied by a tool that writes every byte (no holes left).
    let raw = std::fs::read(d.path(NAME)).unwrap();
    std::fs::remove_file(d.path(NAME)).unwrap();
    std::fs::write(d.path(NAME), &raw).unwrap();
    let (got, skipped) = read_sparse(&d, Some(&sums), 8 * M, how).unwrap();
    assert!(got == data);
    assert_eq!(skipped, []);
}

/// Damage to `NAME` at payload offset `at`.
enum Damage {
    /// A data chunk's blocks punched out: it reads as zeros (a hole that should not be there).
    PunchHole,
    /// Zeros written over a data chunk.
    ZeroBytes,
    /// A byte written into the middle of a zero chunk's hole.
    ByteInHole,
    /// A byte written into the short zero stretch at the start of a hole (the block it shares
    /// with the chunk before).
    ByteInEdge,
}

#[rstest]
#[case::hole_where_data_was(Damage::PunchHole, 6 * M, 6)]
#[case::zeros_where_data_was(Damage::ZeroBytes, 6 * M, 6)]
#[case::data_in_a_hole(Damage::ByteInHole, 5 * M + 12_345, 5)]
#[case::data_at_a_hole_edge(Damage::ByteInEdge, 2 * M + 100, 2)]
fn damage_to_zeros_or_holes_is_a_checksum_mismatch(
    #[case] damage: Damage,
    #[case] at: usize,
    #[case] chunk: u64,
    #[values(Read::Buffered, Read::Direct, Read::DirectAhead)] how: Read,
) {
    let d = dir();
    if how.is_direct() && !d.has_direct_io() {
        return;
    }
    let sums = write(&d, &payload(), true).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(d.path(NAME))
        .unwrap();
    let file_at = (8 + at) as u64;
    match damage {
        Damage::PunchHole => {
            // The whole blocks of the chunk (its first and last block are shared with its
            // neighbours).
            let start = file_at.next_multiple_of(4096);
            let end = (file_at + M as u64) / 4096 * 4096;
            let flags =
                rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE;
            if rustix::fs::fallocate(&f, flags, start, end - start).is_err() {
                // No hole punching here: zeros written instead damage the chunk the same way.
                f.write_all_at(&vec![0u8; (end - start) as usize], start)
                    .unwrap();
            }
        }
        Damage::ZeroBytes => f.write_all_at(&vec![0u8; M], file_at).unwrap(),
        Damage::ByteInHole | Damage::ByteInEdge => f.write_all_at(&[0x42], file_at).unwrap(),
    }
    drop(f);
    for buf in [8 * M, M] {
        let e = read_sparse(&d, Some(&sums), buf, how).unwrap_err();
        assert!(
            matches!(e, PagesError::ChecksumMismatch { chunk: c, .. } if c == chunk),
            "{e}"
        );
    }
    let e = verify_pages_file(d.fd.as_fd(), KFD, LEN as u64, Some(&sums), 8 * M).unwrap_err();
    assert!(matches!(e, PagesError::ChecksumMismatch { .. }), "{e}");
}
