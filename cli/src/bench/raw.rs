//! The raw limits of the bench directory: the same bytes written with plain `write(2)` and read
//! with `read(2)`, in the plugin's I/O shape (one file and thread per GPU, calls of the pages
//! writer's size, its read-ahead and write-behind cadence).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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

/// Writes `bytes` split evenly over the new files `paths`, each by its own thread with
/// sequential [`RAW_IO`]-byte write(2) calls from a buffer written beforehand, each ending with
/// `fsync` when `sync`; returns the time from the first `open` to the last thread's end.
pub(super) fn raw_write(paths: &[PathBuf], bytes: u64, sync: bool) -> io::Result<Duration> {
    let share = bytes / paths.len().max(1) as u64;
    let mut bufs: Vec<Vec<u8>> = paths.iter().map(|_| vec![0xa5u8; RAW_IO]).collect();
    for b in &mut bufs {
        // Written, not only allocated: no page fault inside the timed part.
        b.fill(0x5a);
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
                    let mut f = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(path)?;
                    let (mut left, mut behind, mut done) = (len, 0u64, 0u64);
                    while left > 0 {
                        let n = usize::try_from(left.min(RAW_IO as u64)).unwrap_or(RAW_IO);
                        f.write_all(&buf[..n])?;
                        left -= n as u64;
                        done += n as u64;
                        // The dump's write-behind, which --sync turns on, at the same cadence.
                        if sync && done - behind >= images::pages::WRITE_BEHIND {
                            images::dir::write_behind(&f, behind, done - behind);
                            behind = done;
                        }
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

/// Reads the files `paths` to the end, each by its own thread with sequential [`RAW_IO`]-byte
/// read(2) calls into a buffer written beforehand, with the pages reader's read-ahead
/// (`POSIX_FADV_SEQUENTIAL`, and `WILLNEED` in pieces of the device's size kept ahead by the same
/// [`images::readahead::ReadAheadSchedule`]); returns the time taken.
pub(super) fn raw_read(paths: &[PathBuf]) -> io::Result<Duration> {
    let mut bufs: Vec<Vec<u8>> = paths.iter().map(|_| vec![0xa5u8; RAW_IO]).collect();
    let start = Instant::now();
    std::thread::scope(|s| {
        let threads: Vec<_> = paths
            .iter()
            .zip(&mut bufs)
            .map(|(path, buf)| {
                s.spawn(move || -> io::Result<()> {
                    let mut f = File::open(path)?;
                    images::dir::advise_sequential(&f);
                    let len = f.metadata()?.len();
                    let mut ahead = ReadAheadSchedule::new(ReadAhead::for_file(&f), 0, len);
                    let mut pos = 0u64;
                    loop {
                        ahead.advance_and_ask(&f, pos + RAW_IO as u64);
                        let n = f.read(buf)?;
                        if n == 0 {
                            return Ok(());
                        }
                        pos += n as u64;
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

/// The file system's limit: the faster of two runs.
pub(super) fn best(a: Duration, b: Duration) -> Duration {
    a.min(b)
}
