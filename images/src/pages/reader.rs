//! [`PagesReader`]: a pages file read as a stream, verified chunk by chunk, buffered, mapped or
//! with direct I/O.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::FileExt;

use crate::checksum::{self, Chunker};
use crate::dir;
use crate::direct;
use crate::frame::{Framing, HEADER_LEN};
use crate::names::PagesFile;
use crate::proto::PagesChecksums;
use crate::readahead::{ReadAhead, ReadAheadSchedule};
use crate::sparse::Extents;

use super::{buffer_offset, next_slice, page_offset, PagesError};

/// Reads one pages file as a stream, verifying checksums when the image has them. See the
/// [module docs](crate::pages).
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
    direct: Option<DirectReads>,
}

/// Direct reads of a pages file's payload, without a reader's position or checksums: a second
/// handle on the file a [`PagesReader`] reads with direct I/O ([`PagesReader::direct_reads`]),
/// for a thread that reads the next window from the disk while the reader verifies the last one
/// ([`PagesReader::verify_direct_skipping_holes`]). The disk then does not wait for the
/// checksums.
#[derive(Debug)]
pub struct DirectReads {
    file: File,
    name: String,
    total: u64,
}

impl DirectReads {
    /// Reads payload bytes `pos..pos + len` into `window`, a buffer whose start is aligned to
    /// [`direct::DIRECT_ALIGN`] and whose byte [`buffer_offset`]`(pos)` is to hold payload byte
    /// `pos`: the pages that hold them are read whole, in one direct read; `window`'s bytes
    /// outside the `len` bytes are left undefined. Nothing is verified.
    ///
    /// # Errors
    /// [`PagesError::ReadPastEnd`]; [`PagesError::Read`] when `window` is too small or
    /// misaligned, or the read fails or ends early.
    pub fn read(&self, window: &mut [u8], pos: u64, len: usize) -> Result<(), PagesError> {
        let (from, off) = (page_offset(pos), buffer_offset(pos));
        let fail = |source: io::Error| PagesError::Read {
            file: self.name.clone(),
            offset: from,
            source,
        };
        if pos
            .checked_add(len as u64)
            .is_none_or(|end| end > self.total)
        {
            return Err(PagesError::ReadPastEnd {
                file: self.name.clone(),
                offset: pos.saturating_add(HEADER_LEN),
                len: len as u64,
                total: self.total,
            });
        }
        let want = (off + len).next_multiple_of(direct::DIRECT_ALIGN);
        let Some(buf) = window.get_mut(..want) else {
            return Err(fail(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a window of {} bytes for {want}", window.len()),
            )));
        };
        let got = direct::read_direct_at(&self.file, buf, from).map_err(fail)?;
        if got < off + len {
            return Err(fail(io::ErrorKind::UnexpectedEof.into()));
        }
        Ok(())
    }
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
    /// file system reads the file directly; whether it did. See
    /// [`PagesReader::use_direct_io`].
    pub fn use_direct_io_if_cold(&mut self, cached: f64) -> bool {
        if self.direct.is_some() {
            return true;
        }
        let (from, end) = (page_offset(self.pos), HEADER_LEN + self.total);
        match direct::cached_fraction(&self.file, from, end - from) {
            Ok(share) if share < cached => {
                log::debug!("{}: {:.0}% in the page cache", self.name, share * 100.0);
                self.use_direct_io()
            }
            Ok(share) => {
                log::debug!(
                    "{}: {:.0}% in the page cache: reading it buffered",
                    self.name,
                    share * 100.0
                );
                false
            }
            Err(e) => {
                log::debug!(
                    "{}: cannot tell what is cached ({e}): reading it buffered",
                    self.name
                );
                false
            }
        }
    }

    /// Switches the reader to direct I/O whatever the page cache holds, where the file system
    /// reads the file directly; whether it did. From then on the caller reads with
    /// [`PagesReader::read_direct_skipping_holes`] and the reader asks for no read-ahead. Taken
    /// before the first read: the read-ahead of the first read would fill the cache.
    pub fn use_direct_io(&mut self) -> bool {
        if self.direct.is_some() {
            return true;
        }
        match direct::open_direct_checked(&self.file) {
            Ok(file) => {
                log::debug!("{}: reading it with direct I/O", self.name);
                self.direct = Some(DirectReads {
                    file,
                    name: self.name.clone(),
                    total: self.total,
                });
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

    /// A second handle on the file for direct reads ([`DirectReads`]), once the reader was
    /// switched to direct I/O; `None` before.
    ///
    /// # Errors
    /// [`PagesError::Open`] when the file descriptor cannot be duplicated.
    pub fn direct_reads(&self) -> Result<Option<DirectReads>, PagesError> {
        let Some(d) = &self.direct else {
            return Ok(None);
        };
        let file = d.file.try_clone().map_err(|source| PagesError::Open {
            file: self.name.clone(),
            source,
        })?;
        Ok(Some(DirectReads {
            file,
            name: d.name.clone(),
            total: d.total,
        }))
    }

    /// As [`PagesReader::read_skipping_holes`] for the next `len` payload bytes, read with direct
    /// I/O into `window`, a buffer whose start is aligned to [`direct::DIRECT_ALIGN`] and whose
    /// byte [`buffer_offset`]`(pos)` is to hold payload byte `pos` (the position): the pages that
    /// hold the `len` bytes are read whole, in one direct read ([`DirectReads::read`]), and
    /// verified ([`PagesReader::verify_direct_skipping_holes`]). Holes are returned as there;
    /// `window`'s bytes outside the `len` bytes (and in holes) are left undefined.
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
        let Some(direct) = &self.direct else {
            return Err(PagesError::Read {
                file: self.name.clone(),
                offset: page_offset(self.pos),
                source: io::Error::new(
                    io::ErrorKind::Unsupported,
                    "the reader was not switched to direct I/O",
                ),
            });
        };
        direct.read(window, self.pos, len)?;
        self.verify_direct_skipping_holes(window, len)
    }

    /// As [`PagesReader::verify_skipping_holes`] for the next `len` payload bytes, which a direct
    /// read ([`DirectReads::read`] at the position) put in `window`: payload byte `pos` (the
    /// position) at `window`'s byte [`buffer_offset`]`(pos)`.
    ///
    /// # Errors
    /// [`PagesError::ReadPastEnd`]; [`PagesError::Read`] when `window` is too short;
    /// [`PagesError::ChecksumMismatch`].
    pub fn verify_direct_skipping_holes(
        &mut self,
        window: &[u8],
        len: usize,
    ) -> Result<Vec<Range<usize>>, PagesError> {
        let off = buffer_offset(self.pos);
        self.verify_skipping_holes(len, |r| {
            window
                .get(off + r.start..off + r.end)
                .ok_or_else(|| io::ErrorKind::UnexpectedEof.into())
        })
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
pub(super) fn check_chunk(
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
