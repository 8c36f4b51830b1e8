//! Zeros in pages files: found in data before it is written, and found again as holes of the
//! file without reading them.
//!
//! A dump does not write payload that is all zeros (GPU memory a program reserved and never
//! touched): the pages file keeps a hole there. Its length and its bytes are what they would have
//! been (a hole reads as zeros, for upstream's reader too), but the blocks are not on the disk.
//! A restore asks the file system where the holes are (`lseek(SEEK_DATA / SEEK_HOLE)`) and does
//! not read them either.
//!
//! The payload starts 8 bytes into the file (the length header), so a zero range of the payload
//! is a hole only between the file-system blocks it fully covers: the block at each end also
//! holds bytes of its neighbours and is on the disk. `Extents::is_zero` therefore accepts a
//! range as zero when everything in it is a hole except short stretches of data (at most
//! [`EDGE_BYTES`] each), which it reads and checks.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Whether `data` is all zero bytes. Checks 4 KiB at a time (OR-folded, which the compiler
/// vectorises) and stops at the first block that is not zero, so data costs about nothing.
pub(crate) fn is_zero(data: &[u8]) -> bool {
    data.chunks(4096)
        .all(|block| block.iter().fold(0u8, |acc, &b| acc | b) == 0)
}

/// File-system block size assumed for holes (4 KiB; larger blocks are multiples).
const BLOCK: u64 = 4096;

/// The part of `data` (which lands at file offset `file_offset`) that must be written for the
/// file to read back as `data` when the rest is left as holes: from the start of the first
/// file-system block holding a byte that is not zero to the end of the last one (clipped to
/// `data`); `None` when every byte is zero. Data costs two 4 KiB checks (the first and the last
/// block); zero blocks are each scanned once.
pub(crate) fn nonzero_span(data: &[u8], file_offset: u64) -> Option<std::ops::Range<usize>> {
    #[allow(clippy::cast_possible_truncation)] // 4096
    let block_len = BLOCK as usize;
    // Bytes up to the first block boundary in the file (a whole block when it starts on one).
    #[allow(clippy::cast_possible_truncation)] // <= BLOCK
    let head = (BLOCK - file_offset % BLOCK) as usize;
    let block = |i: usize| -> std::ops::Range<usize> {
        let (start, end) = match i {
            0 => (0, head),
            _ => (head + (i - 1) * block_len, head + i * block_len),
        };
        start.min(data.len())..end.min(data.len())
    };
    let count = match data.len() {
        0 => 0,
        n => 1 + n.saturating_sub(head).div_ceil(block_len),
    };
    let first = (0..count).find(|&i| !is_zero(&data[block(i)]))?;
    let last = (first..count)
        .rev()
        .find(|&i| !is_zero(&data[block(i)]))
        .unwrap_or(first);
    Some(block(first).start..block(last).end)
}

/// The longest stretch of data inside a range that `Extents::is_zero` reads to check it (the
/// partial blocks at a hole's ends are at most one file-system block each; 64 KiB covers every
/// block size Linux file systems use on 4 KiB-page machines).
pub(crate) const EDGE_BYTES: u64 = 64 << 10;

/// A cursor over a file's data and hole extents (`SEEK_DATA` / `SEEK_HOLE`), remembering the
/// extent it last found: sequential questions cost one or two `lseek` calls per extent, not per
/// question.
#[derive(Debug, Default)]
pub(crate) struct Extents {
    /// The last extent found: `[start, end)` is all data (`true`) or all hole (`false`).
    known: Option<(u64, u64, bool)>,
    /// The file system does not tell holes apart (`lseek` refused `SEEK_DATA`).
    unsupported: bool,
}

impl Extents {
    /// The extent holding file offset `at` (which is below `file_len`): its end and whether it is
    /// data.
    fn extent_at(&mut self, file: &File, at: u64, file_len: u64) -> io::Result<(u64, bool)> {
        if let Some((start, end, data)) = self.known {
            if (start..end).contains(&at) {
                return Ok((end, data));
            }
        }
        if self.unsupported {
            return Ok((file_len, true));
        }
        let (end, data) = match rustix::fs::seek(file, rustix::fs::SeekFrom::Data(at)) {
            // No data at or after `at`: a hole up to the end of the file.
            Err(rustix::io::Errno::NXIO) => (file_len, false),
            Err(rustix::io::Errno::INVAL) => {
                // SEEK_DATA unsupported here: everything is data.
                self.unsupported = true;
                (file_len, true)
            }
            Err(e) => return Err(e.into()),
            Ok(next) if next > at => (next.min(file_len), false),
            Ok(_) => {
                let hole = rustix::fs::seek(file, rustix::fs::SeekFrom::Hole(at))?;
                (hole.clamp(at + 1, file_len.max(at + 1)), true)
            }
        };
        self.known = Some((at, end, data));
        Ok((end, data))
    }

    /// Whether file bytes `[start, end)` (inside a file of `file_len` bytes) read as zeros,
    /// found out from the holes of the file and reads of at most [`EDGE_BYTES`] per stretch of
    /// data between them. `Ok(false)` as soon as a longer stretch of data, or a byte that is not
    /// zero, shows up: the caller reads the range as usual then.
    ///
    /// # Errors
    /// An `lseek` or `pread` error other than the file system not supporting `SEEK_DATA`.
    pub(crate) fn is_zero(
        &mut self,
        file: &File,
        start: u64,
        end: u64,
        file_len: u64,
    ) -> io::Result<bool> {
        let end = end.min(file_len);
        let mut at = start;
        let mut edge = [0u8; 4096];
        while at < end {
            let (extent_end, data) = self.extent_at(file, at, file_len)?;
            let stop = extent_end.min(end);
            if data {
                if stop - at > EDGE_BYTES {
                    return Ok(false);
                }
                let mut pos = at;
                while pos < stop {
                    let n = usize::try_from(stop - pos).map_or(edge.len(), |n| n.min(edge.len()));
                    file.read_exact_at(&mut edge[..n], pos)?;
                    if !is_zero(&edge[..n]) {
                        return Ok(false);
                    }
                    pos += n as u64;
                }
            }
            at = stop;
        }
        Ok(true)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::cast_possible_truncation)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn zero_detection_finds_a_single_byte_anywhere() {
        let mut data = vec![0u8; 3 * 4096 + 17];
        assert!(is_zero(&data));
        assert!(is_zero(&[]));
        for at in [0, 4095, 4096, 3 * 4096 + 16] {
            data[at] = 0x80;
            assert!(!is_zero(&data), "byte {at}");
            data[at] = 0;
        }
    }

    #[test]
    fn the_span_to_write_is_whole_blocks_around_the_data() {
        let mut data = vec![0u8; 64 << 10];
        assert_eq!(nonzero_span(&data, 0), None);
        assert_eq!(nonzero_span(&data, 8), None);
        assert_eq!(nonzero_span(&[], 8), None);
        data[5000] = 1;
        assert_eq!(nonzero_span(&data, 0), Some(4096..8192));
        data[20_000] = 1;
        assert_eq!(nonzero_span(&data, 0), Some(4096..20_480));
        // Landing 8 bytes into a block: block boundaries are at 4088, 8184, ... of `data`.
        assert_eq!(nonzero_span(&data, 8), Some(4088..20_472));
        data[0] = 1;
        assert_eq!(nonzero_span(&data, 8), Some(0..20_472));
        let last = data.len() - 1;
        data[last] = 1;
        assert_eq!(nonzero_span(&data, 8), Some(0..data.len()));
        assert_eq!(nonzero_span(&[0, 0, 3], 4094), Some(2..3));
        assert_eq!(nonzero_span(&[0, 3, 0], 4094), Some(0..2));
    }

    /// A file of `len` bytes with data only at `data` (offset, length) stretches.
    fn sparse_file(len: u64, data: &[(u64, usize, u8)]) -> File {
        let mut f = tempfile::tempfile().unwrap();
        f.set_len(len).unwrap();
        for &(at, n, v) in data {
            f.write_all_at(&vec![v; n], at).unwrap();
        }
        f.flush().unwrap();
        f
    }

    #[test]
    fn a_hole_with_zero_edges_is_zero_and_data_is_not() {
        const M: u64 = 1 << 20;
        // Data, then a hole from 1 MiB + 8 (the block at 1 MiB holds 8 bytes of zeros that were
        // written), data again at 3 MiB + 8.
        let f = sparse_file(
            4 * M,
            &[
                (0, (M + 8) as usize, 0x11),
                (3 * M + 8, (M - 8) as usize, 0x22),
            ],
        );
        let mut e = Extents::default();
        if !e.is_zero(&f, M + 16, 3 * M + 8, 4 * M).unwrap() {
            // A file system without holes: nothing to find, and nothing wrong either.
            assert!(e.unsupported || e.known.is_some_and(|k| k.2));
            return;
        }
        assert!(e.is_zero(&f, 2 * M, 3 * M, 4 * M).unwrap());
        assert!(
            !e.is_zero(&f, M, 2 * M, 4 * M).unwrap(),
            "8 data bytes at 1 MiB"
        );
        assert!(!e.is_zero(&f, 2 * M, 3 * M + 9, 4 * M).unwrap());
        assert!(!e.is_zero(&f, 0, M, 4 * M).unwrap());
    }

    #[test]
    fn zero_data_at_the_edges_of_a_hole_is_read_and_accepted() {
        const M: u64 = 1 << 20;
        // The range [M + 8, 2 M + 8) is a hole but for zeros written at both ends, as a dump
        // leaves it when the chunks before and after hold data.
        let f = sparse_file(
            3 * M,
            &[
                (0, (M + 8) as usize, 0x11),
                (M + 8, 100, 0),
                (2 * M - 100, 108, 0),
                (2 * M + 8, (M - 8) as usize, 0x22),
            ],
        );
        let mut e = Extents::default();
        let zero = e.is_zero(&f, M + 8, 2 * M + 8, 3 * M).unwrap();
        assert!(zero || e.unsupported || e.known.is_some_and(|k| k.2));
    }
}
