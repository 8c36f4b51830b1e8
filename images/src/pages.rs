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

use std::fs::File;
use std::io::{self, Write};
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::FileExt;

use crate::checksum::{self, ChecksumAlgorithm, Chunker};
use crate::dir;
use crate::direct;
use crate::frame::{Framing, HeaderFault, HEADER_LEN};
use crate::names::PagesFile;
use crate::proto::{KfdBoEntry, PagesChecksums};
use crate::readahead::{ReadAhead, ReadAheadSchedule};
use crate::sparse::{self, Extents};

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

/// Writes one pages file as a stream. See the [module docs](self).
#[derive(Debug)]
pub struct PagesWriter {
    file: File,
    name: String,
    file_key: u32,
    total: u64,
    written: u64,
    /// Payload bytes left as holes because they were zero.
    zeros: u64,
    /// Whether written data is handed to the disk as it goes, and how far it was.
    write_behind: bool,
    behind: u64,
    checksums: Option<(Chunker, u32, Vec<u64>)>,
    /// The file opened again for direct I/O, once the caller chose it
    /// ([`PagesWriter::use_direct_io`]), and the bytes of the page the writer is in that are
    /// not written yet (from the page's start to the position: the header at first).
    direct: Option<(File, Vec<u8>)>,
}

impl PagesWriter {
    /// Creates `which` in `dir` (mode 0600, old content truncated: the holes the writer leaves
    /// for zeros read as zeros) and writes the length header `total_len`. `chunk_size`: `Some(n)` computes a CRC-32C per `n`-byte chunk (use
    /// [`checksum::DEFAULT_CHUNK_SIZE`]), `None` writes no checksums (as upstream).
    ///
    /// # Errors
    /// [`PagesError::InvalidChunkSize`], [`PagesError::Create`], [`PagesError::Write`].
    pub fn new(
        dir: BorrowedFd<'_>,
        which: PagesFile,
        total_len: u64,
        chunk_size: Option<u32>,
    ) -> Result<Self, PagesError> {
        let name = which.file_name();
        if chunk_size == Some(0) {
            return Err(PagesError::InvalidChunkSize { file: name });
        }
        let mut file = dir::create_at(dir, &name).map_err(|source| PagesError::Create {
            file: name.clone(),
            source,
        })?;
        file.write_all(&total_len.to_ne_bytes())
            .map_err(|source| PagesError::Write {
                file: name.clone(),
                offset: 0,
                source,
            })?;
        let checksums = chunk_size.map(|cs| {
            (
                Chunker::new(ChecksumAlgorithm::Crc32c, cs, total_len),
                cs,
                Vec::new(),
            )
        });
        Ok(Self {
            file,
            name,
            file_key: which.file_key(),
            total: total_len,
            written: 0,
            zeros: 0,
            write_behind: false,
            behind: 0,
            checksums,
            direct: None,
        })
    }

    /// Switches the writer to direct I/O (`O_DIRECT`, see [`crate::direct`]) before any payload
    /// is written, where the file system takes it; whether it did. The caller then writes with
    /// [`PagesWriter::write_direct`]: from the staging buffer to the device, without a copy into
    /// the page cache or its memory, for a dump that must be on the disk anyway.
    pub fn use_direct_io(&mut self) -> bool {
        if self.direct.is_some() {
            return true;
        }
        if self.written > 0 {
            return false;
        }
        match direct::reopen_direct_write(&self.file) {
            Ok(f) => {
                log::debug!("{}: writing it with direct I/O", self.name);
                self.direct = Some((f, self.total.to_ne_bytes().to_vec()));
                true
            }
            Err(e) => {
                log::debug!(
                    "{}: no direct I/O here ({e}): writing it buffered",
                    self.name
                );
                false
            }
        }
    }

    /// Whether the writer writes with direct I/O.
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// As [`PagesWriter::write_chunk`] for the next `len` payload bytes, which lie in `window`
    /// at [`buffer_offset`]`(pos)` (`pos`: the payload written so far), written with direct
    /// I/O. `window` starts on a [`direct::DIRECT_ALIGN`] boundary and has room for the whole
    /// pages of the `len` bytes: its bytes before them take the part of the page the previous
    /// call left unwritten, and after them, zeros to fill the file's last page. The pages whose
    /// bytes are all complete are written, in one call per run of pages that are not all zero
    /// (zero pages stay holes); the last, partial page waits for the next call or, at the end
    /// of the payload, is written whole and the file cut to its length in
    /// [`PagesWriter::finish`].
    ///
    /// # Errors
    /// [`PagesError::Overrun`]; [`PagesError::Write`] when the writer is not direct, `window` is
    /// too small or misaligned, or the write fails.
    pub fn write_direct(&mut self, window: &mut [u8], len: usize) -> Result<(), PagesError> {
        let (pos, off) = (self.written, buffer_offset(self.written));
        let base = page_offset(pos);
        let fail = |name: &str, at: u64, source: io::Error| PagesError::Write {
            file: name.to_owned(),
            offset: at,
            source,
        };
        if len as u64 > self.total - pos {
            return Err(PagesError::Overrun {
                file: self.name.clone(),
                offset: pos + HEADER_LEN,
                len: len as u64,
                total: self.total,
            });
        }
        let end = off + len;
        let last = pos + len as u64 == self.total;
        let align = direct::DIRECT_ALIGN;
        let full = if last {
            end.next_multiple_of(align)
        } else {
            end / align * align
        };
        let Some((_, carry)) = &self.direct else {
            return Err(fail(
                &self.name,
                base,
                io::Error::new(
                    io::ErrorKind::Unsupported,
                    "the writer was not switched to direct I/O",
                ),
            ));
        };
        if window.len() < full.max(end) || carry.len() != off {
            return Err(fail(
                &self.name,
                base,
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "a window of {} bytes for {} (the page's first {} bytes carried)",
                        window.len(),
                        full.max(end),
                        carry.len()
                    ),
                ),
            ));
        }
        window[..off].copy_from_slice(carry);
        if last {
            window[end..full].fill(0);
        }
        // Checksums and zero counts as the buffered writer takes them, slice by slice.
        let mut at = off;
        while at < end {
            let n = next_slice(base + at as u64, end - at);
            self.account(&window[at..at + n], base + at as u64);
            at += n;
        }
        // The complete pages, written in runs of pages that are not all zero.
        let mut runs: Vec<Range<usize>> = Vec::new();
        let mut at = 0;
        while at < full {
            let n = next_slice(base + at as u64, full - at);
            if let Some(span) = sparse::nonzero_span(&window[at..at + n], base + at as u64) {
                let run = at + span.start..at + span.end;
                match runs.last_mut() {
                    Some(prev) if prev.end == run.start => prev.end = run.end,
                    _ => runs.push(run),
                }
            }
            at += n;
        }
        if let Some((file, carry)) = &mut self.direct {
            for run in runs {
                let at = base + run.start as u64;
                direct::write_direct_at(file, &window[run], at)
                    .map_err(|e| fail(&self.name, at, e))?;
            }
            carry.clear();
            if !last {
                carry.extend_from_slice(&window[full..end]);
            }
        }
        Ok(())
    }

    /// Takes payload `piece` (at file offset `offset`, the position) into the checksums, counts
    /// it as zeros when it is all zero, and moves the position past it; returns the part of it
    /// to write ([`sparse::nonzero_span`]), `None` for none.
    fn account(&mut self, piece: &[u8], offset: u64) -> Option<Range<usize>> {
        let span = sparse::nonzero_span(piece, offset);
        if let Some((chunker, _, sums)) = &mut self.checksums {
            let push = |_, sum| -> Result<(), std::convert::Infallible> {
                sums.push(sum);
                Ok(())
            };
            let Ok(()) = match span {
                None => chunker.update_zeros(piece.len() as u64, push),
                Some(_) => chunker.update(piece, push),
            };
        }
        let written = span.as_ref().map_or(0, ExactSizeIterator::len);
        self.zeros += (piece.len() - written) as u64;
        self.written += piece.len() as u64;
        span
    }

    /// The file's name in the image directory.
    pub fn file_name(&self) -> &str {
        &self.name
    }

    /// Write-behind: every [`WRITE_BEHIND`] bytes, start writing them back to the disk
    /// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`) instead of leaving them dirty in the page cache
    /// until the kernel or a later `fsync` gets to them. The writer then runs at about the disk's
    /// speed, and an `fsync` after it finds little left to do; without it, writing into the page
    /// cache is faster as long as memory lasts.
    pub fn set_write_behind(&mut self, on: bool) {
        self.write_behind = on;
    }

    /// Payload bytes written so far (holes for zeros included).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Payload bytes so far that were zero and left as holes instead of written (whole zero
    /// file-system blocks).
    pub fn zero_bytes(&self) -> u64 {
        self.zeros
    }

    /// Appends `data` to the payload: the next piece in order, of any length (pieces need not
    /// line up with checksum chunks). Written straight from `data`, without a copy, in calls of
    /// up to [`IO_SLICE`] bytes; file-system blocks that are all zero at the start or the end of
    /// a call's range, or all of it, are not written (the file keeps holes there).
    ///
    /// # Errors
    /// [`PagesError::Overrun`] when `data` goes past the announced length (nothing is written
    /// then), [`PagesError::Write`].
    pub fn write_chunk(&mut self, data: &[u8]) -> Result<(), PagesError> {
        let len = data.len() as u64;
        let offset = self.written + HEADER_LEN;
        if len > self.total - self.written {
            return Err(PagesError::Overrun {
                file: self.name.clone(),
                offset,
                len,
                total: self.total,
            });
        }
        // Checksum a slice, then write it while it is still in cache. Without checksums the
        // writes are the same size: the I/O pattern (and so a comparison of the two) stays the
        // same, and on the bench machine single 8 MiB writes from a staging buffer were not
        // faster than 256 KiB ones. Slices end at multiples of IO_SLICE in the file (see
        // `buffer_offset`).
        let mut rest = data;
        while !rest.is_empty() {
            let n = next_slice(self.written + HEADER_LEN, rest.len());
            let (piece, tail) = rest.split_at(n);
            rest = tail;
            let offset = self.written + HEADER_LEN;
            // Only the blocks that hold data are written: zero blocks around them stay holes.
            if let Some(span) = self.account(piece, offset) {
                let at = offset + span.start as u64;
                self.file
                    .write_all_at(&piece[span], at)
                    .map_err(|source| PagesError::Write {
                        file: self.name.clone(),
                        offset: at,
                        source,
                    })?;
            }
            if self.write_behind && self.written - self.behind >= WRITE_BEHIND {
                dir::write_behind(
                    &self.file,
                    self.behind + HEADER_LEN,
                    self.written - self.behind,
                );
                self.behind = self.written;
            }
        }
        Ok(())
    }

    /// Checks that the whole announced payload was written, gives the file its full length
    /// (zeros at the end were not written), closes it and returns the checksums to store in the
    /// message image (`None` when written without checksums).
    ///
    /// # Errors
    /// [`PagesError::Incomplete`], [`PagesError::Write`].
    pub fn finish(self) -> Result<Option<PagesChecksums>, PagesError> {
        if self.written != self.total {
            return Err(PagesError::Incomplete {
                file: self.name,
                written: self.written,
                total: self.total,
            });
        }
        if self.zeros > 0 || self.direct.is_some() {
            // Extends the file over a trailing hole, or cuts the last page a direct write wrote
            // whole; a no-op otherwise.
            let len = HEADER_LEN + self.total;
            self.file.set_len(len).map_err(|source| PagesError::Write {
                file: self.name.clone(),
                offset: len,
                source,
            })?;
        }
        log::debug!(
            "wrote {}: {} payload bytes, {} of them zero (left as holes)",
            self.name,
            self.total,
            self.zeros
        );
        Ok(self
            .checksums
            .map(|(_, chunk_size, chunk_sums)| PagesChecksums {
                file_key: self.file_key,
                total_size: self.total,
                chunk_size,
                algorithm: ChecksumAlgorithm::Crc32c.as_u32(),
                chunk_sums,
            }))
    }
}

/// Reads one pages file as a stream, verifying checksums when the image has them. See the
/// [module docs](self).
#[derive(Debug)]
pub struct PagesReader {
    file: File,
    name: String,
    total: u64,
    pos: u64,
    /// The read-ahead of the pages the reader reads next.
    ahead: ReadAheadSchedule,
    verify: Option<(Chunker, PagesChecksums)>,
    /// Where the file's holes are.
    extents: Extents,
    /// The file opened again for direct I/O, once the caller chose it
    /// ([`PagesReader::use_direct_io_if_cold`]).
    direct: Option<File>,
}

impl PagesReader {
    /// Opens `which` in `dir` and checks, before any data is read: the file holds the length
    /// header; the header equals `expected_len` (the sum of the BO sizes the image lists for
    /// this file); the file is exactly header + payload long; and, when `checksums` is given,
    /// that the list describes this file (key, total, chunk count, known algorithm).
    /// `checksums: None` reads an image without checksums (upstream's) unverified.
    ///
    /// # Errors
    /// [`PagesError::Open`], [`PagesError::Read`], [`PagesError::Header`],
    /// [`PagesError::HeaderMismatch`], [`PagesError::BadChecksumList`].
    pub fn open(
        dir: BorrowedFd<'_>,
        which: PagesFile,
        expected_len: u64,
        checksums: Option<&PagesChecksums>,
    ) -> Result<Self, PagesError> {
        let name = which.file_name();
        let file = dir::open_read_at(dir, &name).map_err(|source| PagesError::Open {
            file: name.clone(),
            source,
        })?;
        Self::from_file(file, which, expected_len, checksums)
    }

    /// Opens a render-node BO's pages file written by upstream's development-branch plugin,
    /// which leaves its length header uninitialised (it writes a `size_t` it never set): the
    /// header is not trusted, the file must hold exactly `expected_len` bytes after it (the BO's
    /// size), and nothing is verified (upstream writes no checksums).
    ///
    /// # Errors
    /// [`PagesError::Open`], [`PagesError::Read`], [`PagesError::Header`] (the file is shorter
    /// than a header), [`PagesError::HeaderMismatch`] (the payload is not `expected_len` bytes;
    /// `header` then gives the payload's length).
    pub fn open_ignoring_header(
        dir: BorrowedFd<'_>,
        which: PagesFile,
        expected_len: u64,
    ) -> Result<Self, PagesError> {
        let name = which.file_name();
        let mut file = dir::open_read_at(dir, &name).map_err(|source| PagesError::Open {
            file: name.clone(),
            source,
        })?;
        let framing = Framing::read(&mut file).map_err(|e| PagesError::header(name.clone(), e))?;
        if framing.available != expected_len {
            return Err(PagesError::HeaderMismatch {
                file: name,
                header: framing.available,
                expected: expected_len,
            });
        }
        Ok(Self::at_payload(file, name, expected_len, None))
    }

    /// A reader of `file` (named `name`), positioned after its header, with `total` payload
    /// bytes and `verify`'s chunker and checksums if any; the kernel is told it reads on, and the
    /// read-ahead of the whole file is scheduled.
    fn at_payload(
        file: File,
        name: String,
        total: u64,
        verify: Option<(Chunker, PagesChecksums)>,
    ) -> Self {
        dir::advise_sequential(&file);
        let ahead = ReadAheadSchedule::new(ReadAhead::for_file(&file), 0, HEADER_LEN + total);
        Self {
            file,
            name,
            total,
            pos: 0,
            ahead,
            verify,
            extents: Extents::default(),
            direct: None,
        }
    }

    /// Like [`PagesReader::open`], for a file the caller opened, positioned at its start.
    ///
    /// # Errors
    /// As [`PagesReader::open`], except `Open`.
    pub fn from_file(
        mut file: File,
        which: PagesFile,
        expected_len: u64,
        checksums: Option<&PagesChecksums>,
    ) -> Result<Self, PagesError> {
        let name = which.file_name();
        let framing = Framing::read(&mut file).map_err(|e| PagesError::header(name.clone(), e))?;
        if framing.header != expected_len {
            return Err(PagesError::HeaderMismatch {
                file: name,
                header: framing.header,
                expected: expected_len,
            });
        }
        let header = framing
            .exact()
            .map_err(|fault| PagesError::header(name.clone(), fault))?;
        let verify = match checksums {
            None => None,
            Some(sums) => {
                let algorithm =
                    checksum::validate(sums, which.file_key(), header).map_err(|reason| {
                        PagesError::BadChecksumList {
                            file: name.clone(),
                            reason,
                        }
                    })?;
                Some((
                    Chunker::new(algorithm, sums.chunk_size, header),
                    sums.clone(),
                ))
            }
        };
        Ok(Self::at_payload(file, name, header, verify))
    }

    /// The file's name in the image directory.
    pub fn file_name(&self) -> &str {
        &self.name
    }

    /// Payload bytes in the file.
    pub fn len(&self) -> u64 {
        self.total
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Payload bytes not read yet.
    pub fn remaining(&self) -> u64 {
        self.total - self.pos
    }

    /// Whether the reader verifies checksums.
    pub fn is_verified(&self) -> bool {
        self.verify.is_some()
    }

    /// Fills all of `buf` with the next payload bytes, verifying every chunk that completes.
    /// Data of a chunk is checked when the chunk's last byte is read: when an error is returned,
    /// the content of `buf` must not be used, nor the reader any more. Reading in multiples of
    /// the chunk size makes every returned buffer fully verified.
    ///
    /// # Errors
    /// [`PagesError::ReadPastEnd`], [`PagesError::Read`], [`PagesError::ChecksumMismatch`].
    pub fn read_exact_into(&mut self, buf: &mut [u8]) -> Result<(), PagesError> {
        for r in self.read_skipping_holes(buf)? {
            buf[r].fill(0);
        }
        Ok(())
    }

    /// As [`PagesReader::read_exact_into`], except that whole chunks the file holds as holes
    /// (zeros the dump did not write) are not read: their ranges in `buf` are returned (in
    /// order, adjacent ones merged) and those bytes of `buf` are left as they were. The caller
    /// writes zeros there its own way (the plugin: an SDMA constant fill).
    ///
    /// A chunk is skipped only when it lies wholly in this read and is a hole of the file except
    /// for short stretches that read as zeros; with checksums,
    /// only when its recorded checksum is the checksum of zeros, so it is verified too.
    /// Chunks are those of the checksum list, or of [`checksum::DEFAULT_CHUNK_SIZE`] without one.
    ///
    /// # Errors
    /// As [`PagesReader::read_exact_into`].
    pub fn read_skipping_holes(&mut self, buf: &mut [u8]) -> Result<Vec<Range<usize>>, PagesError> {
        self.next_skipping_holes(buf.len(), |r, range| r.read_data(&mut buf[range]))
    }

    /// As [`PagesReader::read_skipping_holes`] for the next `len` payload bytes, without reading
    /// them: the caller has them in memory already, mapped from this file (see
    /// [`PagesReader::file`]), and `data(range)` returns the bytes of `range` (offsets into the
    /// `len` bytes); each range is asked for once, in order, and never one of the returned hole
    /// ranges (their pages need not be touched at all). The bytes are verified as
    /// [`PagesReader::read_exact_into`] verifies what it reads.
    ///
    /// # Errors
    ///
    /// [`PagesError::ReadPastEnd`]; [`PagesError::Read`] when `data` fails (a mapping that
    /// cannot be read: the file shrank, an I/O error); [`PagesError::ChecksumMismatch`].
    pub fn verify_skipping_holes<'a>(
        &mut self,
        len: usize,
        mut data: impl FnMut(Range<usize>) -> io::Result<&'a [u8]>,
    ) -> Result<Vec<Range<usize>>, PagesError> {
        self.next_skipping_holes(len, |r, range| {
            let offset = r.pos + HEADER_LEN;
            let want = range.len();
            let bytes = data(range)
                .and_then(|b| {
                    if b.len() == want {
                        Ok(b)
                    } else {
                        Err(io::ErrorKind::UnexpectedEof.into())
                    }
                })
                .map_err(|source| PagesError::Read {
                    file: r.name.clone(),
                    offset,
                    source,
                })?;
            r.verify_piece(bytes)?;
            r.pos += bytes.len() as u64;
            Ok(())
        })
    }

    /// Switches the reader to direct I/O (`O_DIRECT`, see [`crate::direct`]) when less than
    /// `cached` (a share, 0.0 to 1.0) of the payload not read yet is in the page cache and the
    /// file system reads the file directly; whether it did. From then on the caller reads with
    /// [`PagesReader::read_direct_skipping_holes`] and the reader asks for no read-ahead. Taken
    /// before the first read: the read-ahead of the first read would fill the cache.
    pub fn use_direct_io_if_cold(&mut self, cached: f64) -> bool {
        if self.direct.is_some() {
            return true;
        }
        let (from, end) = (page_offset(self.pos), HEADER_LEN + self.total);
        let share = match direct::cached_fraction(&self.file, from, end - from) {
            Ok(share) => share,
            Err(e) => {
                log::debug!(
                    "{}: cannot tell what is cached ({e}): reading it buffered",
                    self.name
                );
                return false;
            }
        };
        if share >= cached {
            log::debug!(
                "{}: {:.0}% in the page cache: reading it buffered",
                self.name,
                share * 100.0
            );
            return false;
        }
        // A file system may open for direct I/O and still refuse the read: try its first page.
        let mut probe = direct::AlignedBuf::new(direct::DIRECT_ALIGN);
        match direct::reopen_direct(&self.file)
            .and_then(|f| direct::read_direct_at(&f, probe.as_mut_slice(), 0).map(|_| f))
        {
            Ok(f) => {
                log::debug!(
                    "{}: {:.0}% in the page cache: reading it with direct I/O",
                    self.name,
                    share * 100.0
                );
                self.direct = Some(f);
                true
            }
            Err(e) => {
                log::debug!(
                    "{}: no direct I/O here ({e}): reading it buffered",
                    self.name
                );
                false
            }
        }
    }

    /// Whether the reader reads with direct I/O.
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// As [`PagesReader::read_skipping_holes`] for the next `len` payload bytes, read with direct
    /// I/O into `window`, a buffer whose start is aligned to [`direct::DIRECT_ALIGN`] and whose
    /// byte [`buffer_offset`]`(pos)` is to hold payload byte `pos` (the position): the pages that
    /// hold the `len` bytes are read whole, in one direct read, and the bytes are verified in
    /// `window` as [`PagesReader::verify_skipping_holes`] verifies a mapping. Holes are returned
    /// as there; `window`'s bytes outside the `len` bytes (and in holes) are left undefined.
    ///
    /// # Errors
    /// [`PagesError::ReadPastEnd`]; [`PagesError::Read`] when the reader is not direct, `window`
    /// is too small or misaligned, or the read fails or ends early;
    /// [`PagesError::ChecksumMismatch`].
    pub fn read_direct_skipping_holes(
        &mut self,
        window: &mut [u8],
        len: usize,
    ) -> Result<Vec<Range<usize>>, PagesError> {
        let from = page_offset(self.pos);
        let off = buffer_offset(self.pos);
        let fail = |source: io::Error| PagesError::Read {
            file: self.name.clone(),
            offset: from,
            source,
        };
        if len as u64 > self.remaining() {
            return Err(PagesError::ReadPastEnd {
                file: self.name.clone(),
                offset: self.pos + HEADER_LEN,
                len: len as u64,
                total: self.total,
            });
        }
        let Some(direct) = &self.direct else {
            return Err(fail(io::Error::new(
                io::ErrorKind::Unsupported,
                "the reader was not switched to direct I/O",
            )));
        };
        let want = (off + len).next_multiple_of(direct::DIRECT_ALIGN);
        let Some(buf) = window.get_mut(..want) else {
            return Err(fail(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a window of {} bytes for {want}", window.len()),
            )));
        };
        let got = direct::read_direct_at(direct, buf, from).map_err(fail)?;
        if got < off + len {
            return Err(fail(io::ErrorKind::UnexpectedEof.into()));
        }
        let window = &*window;
        self.verify_skipping_holes(len, |r| Ok(&window[off + r.start..off + r.end]))
    }

    /// The file, for callers that map it: payload byte `pos` is at file offset `pos + 8`. The
    /// reader checked its length when it opened it; reading it does not move the reader.
    pub fn file(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// The next `len` payload bytes, chunk by chunk: holes are skipped (see
    /// [`PagesReader::read_skipping_holes`]) and returned, `data(self, range)` takes in the
    /// others (offsets into the `len` bytes) and moves the position past them.
    fn next_skipping_holes(
        &mut self,
        len: usize,
        mut data: impl FnMut(&mut Self, Range<usize>) -> Result<(), PagesError>,
    ) -> Result<Vec<Range<usize>>, PagesError> {
        let len = len as u64;
        let offset = self.pos + HEADER_LEN;
        if len > self.remaining() {
            return Err(PagesError::ReadPastEnd {
                file: self.name.clone(),
                offset,
                len,
                total: self.total,
            });
        }
        self.read_ahead(len);
        let (start, end) = (self.pos, self.pos + len);
        let chunk = self
            .verify
            .as_ref()
            .map_or(u64::from(checksum::DEFAULT_CHUNK_SIZE), |(_, sums)| {
                u64::from(sums.chunk_size.max(1))
            });
        let mut zeros: Vec<Range<usize>> = Vec::new();
        while self.pos < end {
            let chunk_end = (self.pos - self.pos % chunk + chunk).min(self.total);
            let stop = chunk_end.min(end);
            #[allow(clippy::cast_possible_truncation)] // offsets inside the `len` bytes
            let (a, b) = ((self.pos - start) as usize, (stop - start) as usize);
            if self.pos % chunk == 0 && stop == chunk_end && self.hole(self.pos, chunk_end)? {
                match zeros.last_mut() {
                    Some(last) if last.end == a => last.end = b,
                    _ => zeros.push(a..b),
                }
            } else {
                data(self, a..b)?;
            }
        }
        Ok(zeros)
    }

    /// Whether payload bytes `[from, to)` (one whole chunk, at the position) are a hole of the
    /// file; if so, moves past them (verifying them as zeros).
    fn hole(&mut self, from: u64, to: u64) -> Result<bool, PagesError> {
        let len = to - from;
        if let Some((chunker, sums)) = &mut self.verify {
            let index = usize::try_from(from / u64::from(sums.chunk_size.max(1))).ok();
            let expected = index.and_then(|i| sums.chunk_sums.get(i).copied());
            if expected != Some(chunker.zero_sum(len)) {
                return Ok(false);
            }
        }
        let (file_len, offset) = (HEADER_LEN + self.total, HEADER_LEN + from);
        let zero = self
            .extents
            .is_zero(&self.file, offset, offset + len, file_len)
            .map_err(|source| PagesError::Read {
                file: self.name.clone(),
                offset,
                source,
            })?;
        if zero {
            self.verify_zeros(len)?;
            self.pos = to;
        }
        Ok(zero)
    }

    /// Reads `piece.len()` bytes at the position into `piece` and verifies them.
    fn read_data(&mut self, piece: &mut [u8]) -> Result<(), PagesError> {
        let verify = self.verify.is_some();
        let mut rest = piece;
        while !rest.is_empty() {
            let offset = self.pos + HEADER_LEN;
            // Verified: slices small enough to still be in cache when they are checksummed,
            // ending at multiples of IO_SLICE in the file (see `buffer_offset`).
            let n = if verify {
                next_slice(offset, rest.len())
            } else {
                rest.len()
            };
            let (part, tail) = std::mem::take(&mut rest).split_at_mut(n);
            rest = tail;
            self.file
                .read_exact_at(part, offset)
                .map_err(|source| PagesError::Read {
                    file: self.name.clone(),
                    offset,
                    source,
                })?;
            self.verify_piece(part)?;
            self.pos += part.len() as u64;
        }
        Ok(())
    }

    /// Keeps the kernel reading ahead of a read of `len` bytes at the position: the pieces of
    /// the device's size that the schedule asks for now ([`ReadAheadSchedule`]), so that the disk
    /// stays busy with large requests while the reader checksums and the copiers move the
    /// previous pieces, instead of waiting for each read to come back.
    fn read_ahead(&mut self, len: u64) {
        if self.direct.is_some() {
            return;
        }
        self.ahead
            .advance_and_ask(&self.file, HEADER_LEN + self.pos + len);
    }

    fn verify_piece(&mut self, piece: &[u8]) -> Result<(), PagesError> {
        let Some((chunker, sums)) = &mut self.verify else {
            return Ok(());
        };
        let (name, total) = (&self.name, self.total);
        chunker.update(piece, |chunk, actual| {
            check_chunk(name, total, sums, chunk, actual)
        })
    }

    /// Verifies `len` zero bytes at the position (a hole) without reading them.
    fn verify_zeros(&mut self, len: u64) -> Result<(), PagesError> {
        let Some((chunker, sums)) = &mut self.verify else {
            return Ok(());
        };
        let (name, total) = (&self.name, self.total);
        chunker.update_zeros(len, |chunk, actual| {
            check_chunk(name, total, sums, chunk, actual)
        })
    }

    /// Reads the next `min(buf.len(), remaining)` payload bytes into the front of `buf` and
    /// returns how many; 0 at the end. Same verification as [`PagesReader::read_exact_into`].
    ///
    /// # Errors
    /// As [`PagesReader::read_exact_into`].
    pub fn read_chunk(&mut self, buf: &mut [u8]) -> Result<usize, PagesError> {
        let n = usize::try_from(self.remaining()).map_or(buf.len(), |r| r.min(buf.len()));
        self.read_exact_into(&mut buf[..n])?;
        Ok(n)
    }

    /// Payload offset of the first byte not yet covered by a verified checksum (equals the
    /// position when there is no chunk in progress or no verification).
    pub fn verified_up_to(&self) -> u64 {
        match &self.verify {
            Some((chunker, _)) if self.pos < self.total => chunker.chunk_start(),
            _ => self.pos,
        }
    }
}

/// Compares chunk `chunk`'s checksum `actual` with the one `sums` recorded.
fn check_chunk(
    name: &str,
    total: u64,
    sums: &PagesChecksums,
    chunk: u64,
    actual: u64,
) -> Result<(), PagesError> {
    // `validate` checked the list has one entry per chunk.
    let expected = usize::try_from(chunk)
        .ok()
        .and_then(|i| sums.chunk_sums.get(i).copied())
        .unwrap_or(!actual);
    if expected == actual {
        return Ok(());
    }
    let chunk_size = u64::from(sums.chunk_size);
    let start = chunk * chunk_size;
    Err(PagesError::ChecksumMismatch {
        file: name.to_owned(),
        chunk,
        offset: start + HEADER_LEN,
        len: chunk_size.min(total - start),
        expected,
        actual,
    })
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
