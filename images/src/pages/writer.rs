//! [`PagesWriter`]: a pages file written as a stream, buffered or with direct I/O.

use std::fs::File;
use std::io::{self, Write};
use std::ops::Range;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::FileExt;

use crate::checksum::{ChecksumAlgorithm, Chunker};
use crate::dir;
use crate::direct;
use crate::frame::HEADER_LEN;
use crate::names::PagesFile;
use crate::proto::PagesChecksums;
use crate::sparse::{self};

use super::{buffer_offset, next_slice, page_offset, PagesError, WRITE_BEHIND};

/// Writes one pages file as a stream. See the [module docs](crate::pages).
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
    direct: Option<(DirectWrites, Vec<u8>)>,
}

/// Direct writes of a pages file: a second handle on the file a [`PagesWriter`] writes with
/// direct I/O ([`PagesWriter::direct_writes`]), for a thread that writes one window to the disk
/// while the writer checksums the next ([`PagesWriter::prepare_direct`]). The disk then does
/// not wait for the checksums.
#[derive(Debug)]
pub struct DirectWrites {
    file: File,
    name: String,
}

/// The runs of a window that [`PagesWriter::prepare_direct`] left to write, and where they go
/// in the file.
#[derive(Debug)]
#[must_use = "the window's pages are not on the disk until they are written"]
pub struct DirectRuns {
    /// The file offset of the window's first byte.
    base: u64,
    /// Ranges of the window to write, in order.
    runs: Vec<Range<usize>>,
}

impl DirectWrites {
    /// Writes `runs` of `window` (the window [`PagesWriter::prepare_direct`] took them from, as
    /// it left it) to the file with direct writes. Writes of different windows go to different
    /// pages: they may be issued in any order, from any thread.
    ///
    /// # Errors
    /// [`PagesError::Write`] when a run lies outside `window` or a write fails.
    pub fn write(&self, window: &[u8], runs: &DirectRuns) -> Result<(), PagesError> {
        for run in &runs.runs {
            let at = runs.base + run.start as u64;
            let fail = |source| PagesError::Write {
                file: self.name.clone(),
                offset: at,
                source,
            };
            let bytes = window.get(run.clone()).ok_or_else(|| {
                fail(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("a window of {} bytes for {run:?}", window.len()),
                ))
            })?;
            direct::write_direct_at(&self.file, bytes, at).map_err(fail)?;
        }
        Ok(())
    }
}

impl PagesWriter {
    /// Creates `which` in `dir` (mode 0600, old content truncated: the holes the writer leaves
    /// for zeros read as zeros) and writes the length header `total_len`. `chunk_size`: `Some(n)` computes a CRC-32C per `n`-byte chunk (use
    /// [`crate::checksum::DEFAULT_CHUNK_SIZE`]), `None` writes no checksums (as upstream).
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
            Ok(file) => {
                log::debug!("{}: writing it with direct I/O", self.name);
                let writes = DirectWrites {
                    file,
                    name: self.name.clone(),
                };
                self.direct = Some((writes, self.total.to_ne_bytes().to_vec()));
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

    /// A second handle on the file for direct writes ([`DirectWrites`]), once the writer was
    /// switched to direct I/O; `None` before.
    ///
    /// # Errors
    /// [`PagesError::Create`] when the file descriptor cannot be duplicated.
    pub fn direct_writes(&self) -> Result<Option<DirectWrites>, PagesError> {
        let Some((d, _)) = &self.direct else {
            return Ok(None);
        };
        let file = d.file.try_clone().map_err(|source| PagesError::Create {
            file: self.name.clone(),
            source,
        })?;
        Ok(Some(DirectWrites {
            file,
            name: d.name.clone(),
        }))
    }

    /// As [`PagesWriter::write_chunk`] for the next `len` payload bytes, which lie in `window`
    /// at [`buffer_offset`]`(pos)` (`pos`: the payload written so far), written with direct
    /// I/O: [`PagesWriter::prepare_direct`], then its runs written ([`DirectWrites::write`]).
    ///
    /// # Errors
    /// As [`PagesWriter::prepare_direct`]; [`PagesError::Write`] when a write fails.
    pub fn write_direct(&mut self, window: &mut [u8], len: usize) -> Result<(), PagesError> {
        let runs = self.prepare_direct(window, len)?;
        match &self.direct {
            Some((writes, _)) => writes.write(window, &runs),
            None => Ok(()),
        }
    }

    /// Takes the next `len` payload bytes, which lie in `window` at [`buffer_offset`]`(pos)`
    /// (`pos`: the payload written so far), for direct I/O, and returns what of `window` to
    /// write where ([`DirectWrites::write`]); the position moves past them. `window` starts on a
    /// [`direct::DIRECT_ALIGN`] boundary and has room for the whole pages of the `len` bytes:
    /// its bytes before them take the part of the page the previous call left unwritten, and
    /// after them, zeros to fill the file's last page. The pages whose bytes are all complete
    /// are to be written, in one write per run of pages that are not all zero (zero pages stay
    /// holes); the last, partial page waits for the next call or, at the end of the payload, is
    /// written whole and the file cut to its length in [`PagesWriter::finish`], which comes
    /// after every run was written.
    ///
    /// # Errors
    /// [`PagesError::Overrun`]; [`PagesError::Write`] when the writer is not direct, or `window`
    /// is too small or misaligned.
    pub fn prepare_direct(
        &mut self,
        window: &mut [u8],
        len: usize,
    ) -> Result<DirectRuns, PagesError> {
        let (pos, off) = (self.written, buffer_offset(self.written));
        let base = page_offset(pos);
        let fail = |name: &str, source: io::Error| PagesError::Write {
            file: name.to_owned(),
            offset: base,
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
                io::Error::new(
                    io::ErrorKind::Unsupported,
                    "the writer was not switched to direct I/O",
                ),
            ));
        };
        if window.len() < full.max(end)
            || carry.len() != off
            || (window.as_ptr() as usize) % align != 0
        {
            return Err(fail(
                &self.name,
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "a window of {} bytes at {:p} for {} (the page's first {} bytes \
                         carried)",
                        window.len(),
                        window.as_ptr(),
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
        // The complete pages, in runs of pages that are not all zero.
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
        if let Some((_, carry)) = &mut self.direct {
            carry.clear();
            if !last {
                carry.extend_from_slice(&window[full..end]);
            }
        }
        Ok(DirectRuns { base, runs })
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
    /// up to [`IO_SLICE`](super::IO_SLICE) bytes; file-system blocks that are all zero at the start or the end of
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
