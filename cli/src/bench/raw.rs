//! The raw limits of the bench directory: the same bytes written with plain `write(2)` and read
//! with `read(2)`, or, where the plugin uses direct I/O (writes that must reach the disk, reads
//! of files not in the page cache), with direct writes and reads; in the plugin's I/O shape (one
//! file and thread per GPU, calls of the pages writer's size or of the staging buffers', its
//! read-ahead and write-behind cadence).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use images::direct::{AlignedBuf, DIRECT_ALIGN};
use images::readahead::{ReadAhead, ReadAheadSchedule};

/// Size of each raw `write(2)` and `read(2)`: the pages writer's and reader's (see
/// `docs/bench.md` for why the write size matters).
const RAW_IO: usize = images::pages::IO_SLICE;

/// The raw files of one measurement: one per GPU, as the dump writes one pages file per GPU.
pub(super) fn raw_paths(dir: &Path, run: u32, streams: usize) -> Vec<PathBuf> {
    (0..streams.max(1))
        .map(|i| dir.join(format!("raw-limit-{run}-{i}.bin")))
        .collect()
}

/// Writes `bytes` split evenly over the new files `paths`, each by its own thread, each ending
/// with `fsync` when `sync`; returns the time from the first `open` to the last thread's end.
/// With `sync` as the dump then writes (direct I/O where the file system takes it, in writes of
/// `direct_size` bytes, the staging buffers'); else, or where direct I/O is refused, with
/// sequential [`RAW_IO`]-byte write(2) calls from a buffer written beforehand (with the dump's
/// write-behind cadence when `sync`).
pub(super) fn raw_write(
    paths: &[PathBuf],
    bytes: u64,
    sync: bool,
    direct_size: usize,
) -> io::Result<Duration> {
    let share = bytes / paths.len().max(1) as u64;
    let direct_size = direct_size.next_multiple_of(DIRECT_ALIGN);
    let mut bufs: Vec<AlignedBuf> = paths
        .iter()
        .map(|_| AlignedBuf::new(if sync { direct_size } else { RAW_IO }))
        .collect();
    for b in &mut bufs {
        // Written, not only allocated: no page fault inside the timed part.
        b.as_mut_slice().fill(0x5a);
    }
    let start = Instant::now();
    std::thread::scope(|s| {
        let threads: Vec<_> = paths
            .iter()
            .zip(&bufs)
            .enumerate()
            .map(|(i, (path, buf))| {
                // The last file takes the remainder.
                let len = if i + 1 == paths.len() {
                    bytes - share * i as u64
                } else {
                    share
                };
                s.spawn(move || -> io::Result<()> {
                    let f = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(path)?;
                    let direct = sync
                        .then(|| images::direct::reopen_direct_write(&f).ok())
                        .flatten();
                    match direct {
                        Some(d) => write_direct(&d, buf.as_slice(), len)?,
                        None => write_buffered(
                            &f,
                            &buf.as_slice()[..RAW_IO.min(buf.as_slice().len())],
                            len,
                            sync,
                        )?,
                    }
                    if sync {
                        f.sync_all()?;
                    }
                    Ok(())
                })
            })
            .collect();
        threads.into_iter().try_for_each(|t| {
            t.join()
                .unwrap_or_else(|_| Err(io::Error::other("raw writer panicked")))
        })
    })?;
    Ok(start.elapsed())
}

/// `len` bytes written to `file` (opened for direct I/O) in direct writes of `buf`, the last
/// one padded to a whole page and the file then cut to `len`.
fn write_direct(file: &File, buf: &[u8], len: u64) -> io::Result<()> {
    let mut done = 0u64;
    while done < len {
        let n = usize::try_from(len - done).map_or(buf.len(), |left| left.min(buf.len()));
        let whole = n.next_multiple_of(DIRECT_ALIGN).min(buf.len());
        images::direct::write_direct_at(file, &buf[..whole], done)?;
        done += n as u64;
    }
    file.set_len(len)
}

/// `len` bytes written to `file` in sequential `buf`-sized write(2) calls, with the dump's
/// write-behind cadence when `sync`.
fn write_buffered(mut file: &File, buf: &[u8], len: u64, sync: bool) -> io::Result<()> {
    let (mut left, mut behind, mut done) = (len, 0u64, 0u64);
    while left > 0 {
        let n = usize::try_from(left).map_or(buf.len(), |l| l.min(buf.len()));
        file.write_all(&buf[..n])?;
        left -= n as u64;
        done += n as u64;
        // The dump's write-behind, which --sync turns on, at the same cadence.
        if sync && done - behind >= images::pages::WRITE_BEHIND {
            images::dir::write_behind(file, behind, done - behind);
            behind = done;
        }
    }
    Ok(())
}

/// Reads the files `paths` to the end, each by its own thread, as the restore's pages reader
/// reads them: a file mostly not in the page cache (the bench's `--sync`) with direct I/O in
/// reads of `direct_size` bytes (the restore's staging buffer) where the file system allows it;
/// else with sequential [`RAW_IO`]-byte read(2) calls into a buffer written beforehand, with the
/// reader's read-ahead (`POSIX_FADV_SEQUENTIAL`, and `WILLNEED` in pieces of the device's size
/// kept ahead by the same [`images::readahead::ReadAheadSchedule`]). Returns the time taken.
pub(super) fn raw_read(paths: &[PathBuf], direct_size: usize) -> io::Result<Duration> {
    let direct_size = direct_size.next_multiple_of(DIRECT_ALIGN);
    let start = Instant::now();
    std::thread::scope(|s| {
        let threads: Vec<_> = paths
            .iter()
            .map(|path| {
                s.spawn(move || -> io::Result<()> {
                    let f = File::open(path)?;
                    let len = f.metadata()?.len();
                    let cold = images::direct::cached_fraction(&f, 0, len)? < COLD;
                    match cold.then(|| images::direct::open_direct_checked(&f)) {
                        Some(Ok(direct)) => read_direct(&direct, direct_size),
                        _ => read_buffered(f, len),
                    }
                })
            })
            .collect();
        threads.into_iter().try_for_each(|t| {
            t.join()
                .unwrap_or_else(|_| Err(io::Error::other("raw reader panicked")))
        })
    })?;
    Ok(start.elapsed())
}

/// Reads the files `paths` through the page cache (untimed: to have them there).
pub(super) fn load_into_cache(paths: &[PathBuf]) -> io::Result<()> {
    for p in paths {
        let f = File::open(p)?;
        let len = f.metadata()?.len();
        read_buffered(f, len)?;
    }
    Ok(())
}

/// The share of a file in the page cache below which the restore reads it directly
/// (`AMDGPU_CR_DIRECT_IO`'s default).
const COLD: f64 = 0.5;

/// `file` (opened for direct I/O) read to its end in `size`-byte direct reads.
fn read_direct(file: &File, size: usize) -> io::Result<()> {
    let mut buf = AlignedBuf::new(size);
    let mut pos = 0u64;
    loop {
        let n = images::direct::read_direct_at(file, buf.as_mut_slice(), pos)?;
        if n < size {
            return Ok(());
        }
        pos += n as u64;
    }
}

/// `file` (`len` bytes) read to its end in [`RAW_IO`]-byte reads with the reader's read-ahead.
fn read_buffered(mut file: File, len: u64) -> io::Result<()> {
    let mut buf = vec![0xa5u8; RAW_IO];
    images::dir::advise_sequential(&file);
    let mut ahead = ReadAheadSchedule::new(ReadAhead::for_file(&file), 0, len);
    let mut pos = 0u64;
    loop {
        ahead.advance_and_ask(&file, pos + RAW_IO as u64);
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        pos += n as u64;
    }
}

/// The file system's limit: the faster of two runs.
pub(super) fn best(a: Duration, b: Duration) -> Duration {
    a.min(b)
}
