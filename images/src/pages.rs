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

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::BorrowedFd;

use crate::checksum::{self, ChecksumAlgorithm, Chunker};
use crate::dir;
use crate::frame::{Framing, HEADER_LEN};
use crate::names::PagesFile;
use crate::proto::{KfdBoEntry, PagesChecksums};

/// Bytes checksummed and then written (or read and then checksummed) at a time: small enough to
/// stay in the CPU cache between the two passes, large enough for efficient syscalls. Also the
/// size of each `write(2)` (with or without checksums): the size of a buffered write decides the
/// size of the page-cache folios the kernel allocates for it (ext4 allocates large folios, up to
/// 2 MiB for writes of 2 MiB and more), and on VMs that hand free memory back to the host (free
/// page reporting reports free blocks of 2 MiB and more) large folios come from memory the host
/// must fault in again: writes of 2 MiB and more ran at 0.3-1.5 GiB/s there, 256 KiB ones at
/// 4-5 GiB/s. `amdgpu-cr bench` writes its raw limit in the same size.
pub const IO_SLICE: usize = 256 << 10;

/// How far ahead of the reader's position the reader keeps asking the kernel to read
/// (`POSIX_FADV_WILLNEED`), renewed every [`READ_AHEAD`]` / 2` bytes: the disk stays busy while
/// the reader checksums and the copier moves the previous buffers, instead of waiting for each
/// read to come back. Page cache, not process memory. `amdgpu-cr bench` reads its raw limit
/// the same way.
pub const READ_AHEAD: u64 = 32 << 20;

/// With write-behind, every this many payload bytes the writer asks the kernel to start writing
/// them to the disk.
pub const WRITE_BEHIND: u64 = 32 << 20;

/// `alloc_flags` bit of a VRAM BO (`KFD_IOC_ALLOC_MEM_FLAGS_VRAM`).
pub const ALLOC_MEM_FLAGS_VRAM: u32 = 1 << 0;
/// `alloc_flags` bit of a GTT BO (`KFD_IOC_ALLOC_MEM_FLAGS_GTT`).
pub const ALLOC_MEM_FLAGS_GTT: u32 = 1 << 1;

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
    /// The file is shorter than the length header.
    #[error(
        "pages file {file} is {size} bytes long, too short for the 8-byte length header at \
         offset 0; the image is truncated"
    )]
    ShortHeader {
        /// File name in the image directory.
        file: String,
        /// The file's size.
        size: u64,
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
    /// The file ends before the payload the header announces.
    #[error(
        "pages file {file} is truncated: the length header at offset 0 says {header} payload \
         bytes, but the file ends at offset {} after {available} of them",
        available + HEADER_LEN
    )]
    Truncated {
        /// File name in the image directory.
        file: String,
        /// The length header's value.
        header: u64,
        /// Payload bytes present.
        available: u64,
    },
    /// Bytes follow the payload.
    #[error(
        "pages file {file} has {extra} unexpected bytes at offset {} after the {header}-byte \
         payload its length header announces; the image is damaged",
        header + HEADER_LEN
    )]
    TrailingData {
        /// File name in the image directory.
        file: String,
        /// The length header's value.
        header: u64,
        /// Bytes after the payload.
        extra: u64,
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
    /// Whether written data is handed to the disk as it goes, and how far it was.
    write_behind: bool,
    behind: u64,
    checksums: Option<(Chunker, u32, Vec<u64>)>,
}

impl PagesWriter {
    /// Creates `which` in `dir` (mode 0600, old content truncated) and writes the length header
    /// `total_len`. `chunk_size`: `Some(n)` computes a CRC-32C per `n`-byte chunk (use
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
            write_behind: false,
            behind: 0,
            checksums,
        })
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

    /// Payload bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Appends `data` to the payload: the next piece in order, of any length (pieces need not
    /// line up with checksum chunks). Written straight from `data`, without a copy.
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
        // faster than 256 KiB ones.
        for piece in data.chunks(IO_SLICE) {
            if let Some((chunker, _, sums)) = &mut self.checksums {
                let pushed: Result<(), std::convert::Infallible> =
                    chunker.update(piece, |_, sum| {
                        sums.push(sum);
                        Ok(())
                    });
                let Ok(()) = pushed;
            }
            let offset = self.written + HEADER_LEN;
            self.file
                .write_all(piece)
                .map_err(|source| PagesError::Write {
                    file: self.name.clone(),
                    offset,
                    source,
                })?;
            self.written += piece.len() as u64;
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

    /// Checks that the whole announced payload was written, closes the file and returns the
    /// checksums to store in the message image (`None` when written without checksums).
    ///
    /// # Errors
    /// [`PagesError::Incomplete`].
    pub fn finish(self) -> Result<Option<PagesChecksums>, PagesError> {
        if self.written != self.total {
            return Err(PagesError::Incomplete {
                file: self.name,
                written: self.written,
                total: self.total,
            });
        }
        log::debug!("wrote {}: {} payload bytes", self.name, self.total);
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
    /// File offset up to which read-ahead was asked for.
    ahead_to: u64,
    verify: Option<(Chunker, PagesChecksums)>,
}

impl PagesReader {
    /// Opens `which` in `dir` and checks, before any data is read: the file holds the length
    /// header; the header equals `expected_len` (the sum of the BO sizes the image lists for
    /// this file); the file is exactly header + payload long; and, when `checksums` is given,
    /// that the list describes this file (key, total, chunk count, known algorithm).
    /// `checksums: None` reads an image without checksums (upstream's) unverified.
    ///
    /// # Errors
    /// [`PagesError::Open`], [`PagesError::Read`], [`PagesError::ShortHeader`],
    /// [`PagesError::HeaderMismatch`], [`PagesError::Truncated`], [`PagesError::TrailingData`],
    /// [`PagesError::BadChecksumList`].
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
        let header_err = |fault| PagesError::header(name.clone(), fault);
        let framing = Framing::read(&mut file).map_err(header_err)?;
        if framing.header != expected_len {
            return Err(PagesError::HeaderMismatch {
                file: name,
                header: framing.header,
                expected: expected_len,
            });
        }
        let header = framing.exact().map_err(header_err)?;
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
        dir::advise_sequential(&file);
        Ok(Self {
            file,
            name,
            total: header,
            pos: 0,
            ahead_to: HEADER_LEN,
            verify,
        })
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
        let len = buf.len() as u64;
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
        // Slices small enough to still be in cache when they are checksummed.
        let slice = if self.verify.is_some() {
            IO_SLICE
        } else {
            buf.len().max(1)
        };
        for piece in buf.chunks_mut(slice) {
            let offset = self.pos + HEADER_LEN;
            self.file
                .read_exact(piece)
                .map_err(|source| PagesError::Read {
                    file: self.name.clone(),
                    offset,
                    source,
                })?;
            self.verify_piece(piece)?;
            self.pos += piece.len() as u64;
        }
        Ok(())
    }

    /// Keeps the kernel reading at least [`READ_AHEAD`] bytes beyond a read of `len` bytes at
    /// the position.
    fn read_ahead(&mut self, len: u64) {
        let end = HEADER_LEN + self.total;
        let want = (HEADER_LEN + self.pos + len + READ_AHEAD).min(end);
        if want > self.ahead_to && want - self.ahead_to >= (READ_AHEAD / 2).min(end - self.ahead_to)
        {
            dir::read_ahead(&self.file, self.ahead_to, want - self.ahead_to);
            self.ahead_to = want;
        }
    }

    fn verify_piece(&mut self, piece: &[u8]) -> Result<(), PagesError> {
        let Some((chunker, sums)) = &mut self.verify else {
            return Ok(());
        };
        let chunk_size = u64::from(sums.chunk_size);
        let (name, total) = (&self.name, self.total);
        chunker.update(piece, |chunk, actual| {
            // `validate` checked the list has one entry per chunk.
            let expected = usize::try_from(chunk)
                .ok()
                .and_then(|i| sums.chunk_sums.get(i).copied())
                .unwrap_or(!actual);
            if expected == actual {
                return Ok(());
            }
            let start = chunk * chunk_size;
            Err(PagesError::ChecksumMismatch {
                file: name.clone(),
                chunk,
                offset: start + HEADER_LEN,
                len: chunk_size.min(total - start),
                expected,
                actual,
            })
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
    while reader.read_chunk(&mut buf)? != 0 {}
    Ok(())
}
