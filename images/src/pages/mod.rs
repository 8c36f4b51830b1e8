//! Pages files: the contents of buffer objects, streamed.
//!
//! Layout (byte-compatible with upstream): an 8-byte native-endian length header holding the
//! total payload bytes, then the BOs' contents back to back, in the order the image lists them.
//! [`PagesWriter`] takes the payload in pieces, in order, and writes each straight from the
//! caller's buffer; [`PagesReader`] reads into the caller's buffer. Neither holds data: memory
//! stays bounded by the caller's buffers however large the file.
//!
//! With checksums on, the writer computes a checksum per fixed-size chunk while it writes and
//! returns them from [`PagesWriter::finish`]; the caller stores them in the message image
//! (written after the pages files at dump). The reader checks, when it opens the file and before
//! returning any data, that the file's size, its length header, the BO sizes and the checksum
//! list all agree; it then verifies each chunk as the chunk's last byte is read.
//!
//! Zeros cost nothing (the crate's `sparse` module): the writer does not write
//! [`IO_SLICE`]-sized pieces that are all zero, so they stay holes of the file (same length, same
//! bytes when read, fewer blocks on the disk), and checksums them without hashing. The reader
//! ([`PagesReader::read_skipping_holes`]) does not read a whole chunk the file holds as a hole:
//! it reports it to the caller, who restores it with a fill. With checksums, only a chunk whose
//! recorded checksum is that of zeros is looked for as a hole, and it is verified by that
//! equality; a chunk that should hold data and reads as a hole (damage that zeroed it) is read
//! and fails its checksum as any other damage does.

use std::io;
use std::os::fd::BorrowedFd;

use crate::frame::{HeaderFault, HEADER_LEN};
use crate::names::PagesFile;
use crate::proto::{KfdBoEntry, PagesChecksums};

mod reader;
mod writer;

pub use reader::{DirectReads, PagesReader};
pub use writer::{DirectRuns, DirectWrites, PagesWriter};

/// Bytes checksummed and then written (or read and then checksummed) at a time: small enough to
/// stay in the CPU cache between the two passes, large enough for efficient syscalls. Also the
/// size of each `write(2)` (with or without checksums): the size of a buffered write decides the
/// size of the page-cache folios the kernel allocates for it (ext4 allocates large folios, up to
/// 2 MiB for writes of 2 MiB and more), and on VMs that hand free memory back to the host (free
/// page reporting reports free blocks of 2 MiB and more) large folios come from memory the host
/// must fault in again: writes of 2 MiB and more ran at 0.3-1.5 GiB/s there, 256 KiB ones at
/// 4-5 GiB/s. `amdgpu-cr bench` writes its raw limit in the same size.
pub const IO_SLICE: usize = 256 << 10;

/// Page size assumed for the alignment of I/O buffers (4 KiB; larger pages are multiples).
const PAGE: u64 = 4096;

/// Where to put payload bytes from stream position `pos` in a page-aligned buffer: at this offset
/// into it, the buffer and the file are congruent modulo the page size (the payload starts 8
/// bytes into the file, after the length header).
///
/// The kernel's copies between the page cache and a buffer (`write(2)`, `read(2)`) run at full
/// speed only when source and destination are equally aligned: on the bench machine 1 GiB of
/// 256 KiB writes took 0.35-0.44 CPU seconds from a buffer congruent with the file and
/// 0.78-0.92 from a page-aligned buffer into file offsets 8 bytes past a page. The writer and
/// the reader also cut their calls at file offsets that are multiples of [`IO_SLICE`], so every
/// call but the first covers whole pages.
pub fn buffer_offset(pos: u64) -> usize {
    #[allow(clippy::cast_possible_truncation)] // < PAGE
    let off = ((pos + HEADER_LEN) % PAGE) as usize;
    off
}

/// The file offset of the page that holds payload byte `pos`: a mapping of the file from there
/// has that byte [`buffer_offset`]`(pos)` bytes in, as a staging buffer would.
pub fn page_offset(pos: u64) -> u64 {
    pos + HEADER_LEN - buffer_offset(pos) as u64
}

/// The length of the next I/O call at file offset `file_offset` with `left` bytes to go: up to
/// the next multiple of [`IO_SLICE`] in the file.
fn next_slice(file_offset: u64, left: usize) -> usize {
    #[allow(clippy::cast_possible_truncation)] // < IO_SLICE
    let room = IO_SLICE - (file_offset % IO_SLICE as u64) as usize;
    room.min(left)
}

/// With write-behind, every this many payload bytes the writer asks the kernel to start writing
/// them to the disk.
pub const WRITE_BEHIND: u64 = 32 << 20;

/// `alloc_flags` bit of a VRAM BO (`KFD_IOC_ALLOC_MEM_FLAGS_VRAM`).
pub(crate) const ALLOC_MEM_FLAGS_VRAM: u32 = 1 << 0;
/// `alloc_flags` bit of a GTT BO (`KFD_IOC_ALLOC_MEM_FLAGS_GTT`).
pub(crate) const ALLOC_MEM_FLAGS_GTT: u32 = 1 << 1;

/// Errors of pages files. Every message names the file and, where it applies, the byte offset
/// in that file (the payload starts at offset 8).
#[derive(Debug, thiserror::Error)]
pub enum PagesError {
    /// The file could not be created.
    #[error(
        "cannot create pages file {file}: {source}; check that the image directory is writable"
    )]
    Create {
        /// File name in the image directory.
        file: String,
        /// The `openat(2)` error.
        source: io::Error,
    },
    /// The file could not be opened.
    #[error("cannot open pages file {file}: {source}")]
    Open {
        /// File name in the image directory.
        file: String,
        /// The `openat(2)` error.
        source: io::Error,
    },
    /// A write failed.
    #[error("cannot write pages file {file} at offset {offset}: {source}")]
    Write {
        /// File name in the image directory.
        file: String,
        /// Byte offset in the file where the write started.
        offset: u64,
        /// The I/O error.
        source: io::Error,
    },
    /// A read failed (including a file that shrank while it was read).
    #[error("cannot read pages file {file} at offset {offset}: {source}")]
    Read {
        /// File name in the image directory.
        file: String,
        /// Byte offset in the file where the read started.
        offset: u64,
        /// The I/O error.
        source: io::Error,
    },
    /// A checksum chunk size of 0 was asked for.
    #[error("pages file {file}: checksum chunk size must be at least 1 byte")]
    InvalidChunkSize {
        /// File name in the image directory.
        file: String,
    },
    /// More data was written than the length header announced.
    #[error(
        "pages file {file}: writing {len} bytes at offset {offset} goes past the end of the \
         {total}-byte payload announced in the length header"
    )]
    Overrun {
        /// File name in the image directory.
        file: String,
        /// Byte offset in the file of the write.
        offset: u64,
        /// Bytes the caller tried to write.
        len: u64,
        /// Payload bytes announced.
        total: u64,
    },
    /// The writer was finished before all announced bytes were written.
    #[error(
        "pages file {file}: finished at offset {} after {written} of the {total} payload bytes \
         announced in the length header",
        written + HEADER_LEN
    )]
    Incomplete {
        /// File name in the image directory.
        file: String,
        /// Payload bytes written.
        written: u64,
        /// Payload bytes announced.
        total: u64,
    },
    /// The length header disagrees with the file.
    #[error("pages file {file} {fault}")]
    Header {
        /// File name in the image directory.
        file: String,
        /// What is wrong.
        fault: HeaderFault,
    },
    /// The length header disagrees with the sizes of the BOs the image says the file holds.
    #[error(
        "pages file {file}: the length header at offset 0 says {header} bytes, but the image's \
         BOs for this file add up to {expected} bytes; the pages file does not belong to this \
         image or is damaged"
    )]
    HeaderMismatch {
        /// File name in the image directory.
        file: String,
        /// The length header's value.
        header: u64,
        /// The sum of the BO sizes.
        expected: u64,
    },
    /// The checksum list stored in the image cannot describe this file.
    #[error("pages file {file}: its checksum list in the image does not fit the file: {reason}")]
    BadChecksumList {
        /// File name in the image directory.
        file: String,
        /// What does not fit.
        reason: String,
    },
    /// A chunk's content does not match its stored checksum.
    #[error(
        "pages file {file} is corrupt: chunk {chunk} ({len} bytes at offset {offset}) has \
         checksum {actual:#010x}, the image recorded {expected:#010x}"
    )]
    ChecksumMismatch {
        /// File name in the image directory.
        file: String,
        /// Index of the chunk.
        chunk: u64,
        /// Byte offset in the file of the chunk's start.
        offset: u64,
        /// The chunk's length.
        len: u64,
        /// The checksum recorded in the image.
        expected: u64,
        /// The checksum of the data read.
        actual: u64,
    },
    /// The caller asked for more bytes than remain.
    #[error(
        "pages file {file}: reading {len} bytes at offset {offset} goes past the end of the \
         {total}-byte payload"
    )]
    ReadPastEnd {
        /// File name in the image directory.
        file: String,
        /// Byte offset in the file of the read.
        offset: u64,
        /// Bytes asked for.
        len: u64,
        /// Payload bytes in the file.
        total: u64,
    },
}

crate::frame::header_fault_into!(PagesError);

/// Payload bytes of `amdgpu-pages-<id>-<gpu_id>.img`: the sizes of the VRAM and GTT BOs of that
/// GPU (other BOs have no saved contents). Saturates instead of overflowing (a forged image then
/// fails the header check).
pub fn kfd_pages_len(bos: &[KfdBoEntry], gpu_id: u32) -> u64 {
    bos.iter()
        .filter(|bo| {
            bo.gpu_id == gpu_id
                && bo.alloc_flags & (ALLOC_MEM_FLAGS_VRAM | ALLOC_MEM_FLAGS_GTT) != 0
        })
        .fold(0u64, |acc, bo| acc.saturating_add(bo.size))
}

/// The checksum entry for `file_key` in a message's `pages_checksums`, if it has one.
pub fn find_checksums(list: &[PagesChecksums], file_key: u32) -> Option<&PagesChecksums> {
    list.iter().find(|c| c.file_key == file_key)
}

/// Reads a whole pages file through a buffer of `buf_len` bytes and verifies it, without
/// keeping any data: the up-front checks of [`PagesReader::open`], then every chunk. For tools
/// that judge an image before a restore is attempted.
///
/// # Errors
/// Those of [`PagesReader::open`] and [`PagesReader::read_chunk`].
pub fn verify_pages_file(
    dir: BorrowedFd<'_>,
    which: PagesFile,
    expected_len: u64,
    checksums: Option<&PagesChecksums>,
    buf_len: usize,
) -> Result<(), PagesError> {
    let mut reader = PagesReader::open(dir, which, expected_len, checksums)?;
    let mut buf = vec![0u8; buf_len.max(1)];
    while reader.remaining() > 0 {
        let n = usize::try_from(reader.remaining()).map_or(buf.len(), |r| r.min(buf.len()));
        // Holes are verified without reading them; nothing looks at the bytes.
        reader.read_skipping_holes(&mut buf[..n])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_congruent_with_the_file_and_calls_end_on_slice_boundaries() {
        // Payload byte `pos` is at file offset `pos + 8`.
        assert_eq!(buffer_offset(0), 8);
        assert_eq!(buffer_offset(8 << 20), 8);
        assert_eq!(buffer_offset(4088), 0);
        assert_eq!(buffer_offset(4090), 2);
        // A mapping from the page that holds a payload byte has it where a buffer would.
        assert_eq!(page_offset(0), 0);
        assert_eq!(page_offset(4088), 4096);
        assert_eq!(page_offset(4090), 4096);
        assert_eq!(page_offset(4087), 0);
        // The first call of a file stops at the first slice boundary, the next ones are whole.
        let slice = IO_SLICE as u64;
        assert_eq!(next_slice(HEADER_LEN, 8 << 20), IO_SLICE - 8);
        assert_eq!(next_slice(slice, 8 << 20), IO_SLICE);
        assert_eq!(next_slice(slice + 100, 8 << 20), IO_SLICE - 100);
        assert_eq!(next_slice(slice, 10), 10);
    }
}
