//! Reading ahead of a sequential reader from a cold page cache: how large each
//! `POSIX_FADV_WILLNEED` is ([`ReadAhead`], from the device's limits) and when the next one is
//! asked for ([`ReadAheadSchedule`]).
//!
//! The kernel reads at most `max(max_sectors_kb, the file's read-ahead window)` bytes per
//! `WILLNEED` call and silently drops the rest of a longer range, and it cuts what it reads into
//! requests of at most 2 MiB (and `max_sectors_kb`). Asking in pieces of exactly that size
//! makes every piece read whole, in the largest requests the device takes; asking in smaller
//! pieces (the pages reader asked in 128 KiB pieces, the smallest default window) makes as
//! many small requests, which a device with a per-request cost (a virtual disk, whose host
//! handles every request) serves at a fraction of its speed. `docs/cold-restore.md` has the
//! measurements.
//!
//! The schedule keeps [`ReadAhead::depth`] bytes asked for beyond what the reader needs now, and
//! asks for the next piece as soon as the reader has moved a piece further: the device sees a
//! steady queue of large requests instead of a burst every half window.

use std::fs::File;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::path::Path;

/// The page size the pieces are aligned to.
const PAGE: u64 = 4096;

/// The smallest piece: the smallest default read-ahead window (`read_ahead_kb` 128), which the
/// kernel reads whole on any device. Used where the device's limits are unknown (a file system
/// without a block device of its own: tmpfs, NFS, overlayfs, btrfs).
pub const MIN_STEP: u64 = 128 << 10;

/// The largest piece: the kernel's own unit of forced read-ahead is 2 MiB, and larger pieces
/// only make the reader's calls longer.
pub const MAX_STEP: u64 = 16 << 20;

/// Bytes kept asked for beyond the reader's current read, at least: enough to keep a disk busy
/// while the reader waits for the copiers or checksums, and to ride out the disk's slow moments
/// (page cache, not process memory). With 32 MiB the restore's reader still waited for the disk
/// in about a fifth of its time on the bench VM; with 128 MiB, in about a tenth.
pub const MIN_DEPTH: u64 = 64 << 20;

/// Pieces in flight at least, whatever their size.
const MIN_PIECES: u64 = 4;

/// How a reader reads ahead of itself on one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadAhead {
    /// Bytes per `POSIX_FADV_WILLNEED` call: the most the kernel reads whole in one call on this
    /// device, a multiple of the page size, from [`MIN_STEP`] to [`MAX_STEP`].
    pub step: u64,
    /// Bytes kept asked for beyond the reader's current read: a multiple of `step`, at least
    /// [`MIN_DEPTH`] and four steps.
    pub depth: u64,
}

impl Default for ReadAhead {
    /// The geometry for an unknown device: [`MIN_STEP`] pieces, [`MIN_DEPTH`] ahead.
    fn default() -> Self {
        Self::for_limits(None, None)
    }
}

impl ReadAhead {
    /// The geometry for a device with a read-ahead window of `read_ahead_kb` and requests of at
    /// most `max_sectors_kb` (its `/sys/block/*/queue` values; `None` where unknown): pieces of
    /// the larger of the two, which the kernel reads whole in one call (see the module docs).
    pub fn for_limits(read_ahead_kb: Option<u64>, max_sectors_kb: Option<u64>) -> Self {
        let kib = read_ahead_kb
            .unwrap_or(0)
            .max(max_sectors_kb.unwrap_or(0))
            .saturating_mul(1024);
        let step = (kib / PAGE * PAGE).clamp(MIN_STEP, MAX_STEP);
        let depth = MIN_DEPTH.max(MIN_PIECES * step).next_multiple_of(step);
        Self { step, depth }
    }

    /// The geometry for the device that holds `file`: its block device's `read_ahead_kb` and
    /// `max_sectors_kb`, found through `/sys/dev/block/MAJOR:MINOR` (the whole disk's for a
    /// partition). A file on a file system without a block device of its own gets the
    /// [`Default`].
    pub fn for_file(file: &File) -> Self {
        let Ok(st) = rustix::fs::fstat(file) else {
            return Self::default();
        };
        let dev = st.st_dev;
        let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
        Self::for_sysfs_device(&Path::new("/sys/dev/block").join(format!("{major}:{minor}")))
    }

    /// The geometry for the block device whose sysfs directory is `dev` (`/sys/dev/block/M:m`):
    /// its `queue` directory, or its parent's when it is a partition.
    pub fn for_sysfs_device(dev: &Path) -> Self {
        let read = |name: &str| -> Option<u64> {
            [dev.join("queue"), dev.join("../queue")]
                .iter()
                .find_map(|q| read_attribute(&q.join(name)))
                .and_then(|s| s.trim().parse().ok())
        };
        Self::for_limits(read("read_ahead_kb"), read("max_sectors_kb"))
    }
}

/// A sysfs attribute of a few bytes, as the kernel serves it: a regular file, opened without
/// waiting and read to at most a page. Anything else (a FIFO or a device where a test or a
/// container put one) is no answer: `None`, at once.
fn read_attribute(path: &Path) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .ok()?;
    crate::dir::NotRegularFile::check(&file.metadata().ok()?).ok()?;
    let mut text = String::new();
    file.take(4096).read_to_string(&mut text).ok()?;
    Some(text)
}

/// When a sequential reader asks for which pieces: call [`ReadAheadSchedule::advance`] with the
/// end of each read before making it, and ask the kernel for the ranges it returns (see
/// [`will_need`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadAheadSchedule {
    plan: ReadAhead,
    /// File offset up to which pieces were asked for.
    asked_to: u64,
    /// The end of the file.
    end: u64,
}

impl ReadAheadSchedule {
    /// A schedule for reading file bytes `[start, end)` with `plan`; the pieces start at the page
    /// that holds `start` and are page-aligned.
    pub fn new(plan: ReadAhead, start: u64, end: u64) -> Self {
        Self {
            plan,
            asked_to: start / PAGE * PAGE,
            end,
        }
    }

    /// The geometry.
    pub fn plan(&self) -> ReadAhead {
        self.plan
    }

    /// File offset up to which pieces were asked for.
    pub fn asked_to(&self) -> u64 {
        self.asked_to
    }

    /// The pieces to ask for now that the reader is about to read up to file offset `need_to`:
    /// whole steps (the last piece of the file may be shorter) while the pieces asked for end
    /// less than [`ReadAhead::depth`] beyond `need_to`. Once the schedule is `depth` ahead, it
    /// asks for one piece per step the reader moves.
    pub fn advance(&mut self, need_to: u64) -> Vec<Range<u64>> {
        let want = need_to.saturating_add(self.plan.depth).min(self.end);
        let mut out = Vec::new();
        while self.asked_to < want {
            let piece_end = self.asked_to.saturating_add(self.plan.step);
            // Beyond the depth only to end the file with a shorter piece.
            if piece_end > want && want < self.end {
                break;
            }
            let piece_end = piece_end.min(self.end);
            out.push(self.asked_to..piece_end);
            self.asked_to = piece_end;
        }
        out
    }

    /// [`ReadAheadSchedule::advance`], asking the kernel for the pieces (see [`will_need`]).
    /// Returns how many pieces were asked for.
    pub fn advance_and_ask(&mut self, file: &File, need_to: u64) -> usize {
        let pieces = self.advance(need_to);
        for p in &pieces {
            will_need(file, p.clone());
        }
        pieces.len()
    }
}

/// Starts reading file bytes `range` into the page cache in the background
/// (`POSIX_FADV_WILLNEED`, one call). The kernel reads at most [`ReadAhead::step`] bytes of it
/// (see the module docs). Only a hint: errors (and ranges past the end) are ignored.
pub fn will_need(file: &File, range: Range<u64>) {
    let (Ok(off), Ok(n)) = (
        libc::off_t::try_from(range.start),
        libc::off_t::try_from(range.end.saturating_sub(range.start)),
    ) else {
        return;
    };
    if n == 0 {
        return;
    }
    // SAFETY: posix_fadvise reads only the fd number and the range; it touches no memory of ours.
    let _ = unsafe { libc::posix_fadvise(file.as_raw_fd(), off, n, libc::POSIX_FADV_WILLNEED) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;

    #[rstest]
    // A default disk: 128 KiB window, 1280 KiB requests (SATA/SCSI).
    #[case::default_disk(Some(128), Some(1280), 1280 * KIB, 65 * MIB)]
    // The bench VM's virtio disk: 8 MiB window, 4 MiB requests.
    #[case::bench_vm(Some(8192), Some(4096), 8 * MIB, 64 * MIB)]
    // NVMe with a 128 KiB window and 128 KiB requests: the smallest piece.
    #[case::small_requests(Some(128), Some(128), 128 * KIB, 64 * MIB)]
    // A huge window: pieces capped.
    #[case::huge_window(Some(65536), Some(512), 16 * MIB, 64 * MIB)]
    // Not a page multiple: rounded down.
    #[case::odd(Some(130), None, 128 * KIB, 64 * MIB)]
    #[case::unknown(None, None, 128 * KIB, 64 * MIB)]
    #[case::read_ahead_off(Some(0), Some(0), 128 * KIB, 64 * MIB)]
    fn pieces_are_what_the_kernel_reads_in_one_call(
        #[case] read_ahead_kb: Option<u64>,
        #[case] max_sectors_kb: Option<u64>,
        #[case] step: u64,
        #[case] depth: u64,
    ) {
        let plan = ReadAhead::for_limits(read_ahead_kb, max_sectors_kb);
        assert_eq!(plan, ReadAhead { step, depth });
        assert_eq!(plan.depth % plan.step, 0);
    }

    #[test]
    fn a_sysfs_device_directory_and_a_partition_of_it() {
        let tmp = tempfile::tempdir().unwrap();
        let disk = tmp.path().join("disk");
        std::fs::create_dir_all(disk.join("queue")).unwrap();
        std::fs::write(disk.join("queue/read_ahead_kb"), "128\n").unwrap();
        std::fs::write(disk.join("queue/max_sectors_kb"), "1280\n").unwrap();
        let part = disk.join("part1");
        std::fs::create_dir(&part).unwrap();
        let expected = ReadAhead::for_limits(Some(128), Some(1280));
        assert_eq!(ReadAhead::for_sysfs_device(&disk), expected);
        assert_eq!(ReadAhead::for_sysfs_device(&part), expected);
        assert_eq!(
            ReadAhead::for_sysfs_device(&tmp.path().join("missing")),
            ReadAhead::default()
        );
    }

    /// A FIFO where an attribute should be would block an open forever, `/dev/zero` would be read
    /// until memory ran out: both are no answer, at once.
    #[test]
    fn special_files_for_attributes_are_no_answer() {
        let tmp = tempfile::tempdir().unwrap();
        let disk = tmp.path().join("disk");
        std::fs::create_dir_all(disk.join("queue")).unwrap();
        let fifo = std::ffi::CString::new(
            disk.join("queue/read_ahead_kb")
                .as_os_str()
                .as_encoded_bytes(),
        )
        .unwrap();
        // SAFETY: mkfifo(3) with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        std::os::unix::fs::symlink("/dev/zero", disk.join("queue/max_sectors_kb")).unwrap();
        assert_eq!(
            ReadAhead::for_sysfs_device(&disk),
            ReadAhead::for_limits(None, None)
        );
    }

    #[test]
    fn the_device_of_a_file_gives_a_whole_number_of_pages() {
        let file = tempfile::tempfile().unwrap();
        let plan = ReadAhead::for_file(&file);
        assert!((MIN_STEP..=MAX_STEP).contains(&plan.step), "{plan:?}");
        assert_eq!(plan.step % PAGE, 0);
        assert!(plan.depth >= MIN_DEPTH.max(4 * plan.step), "{plan:?}");
    }

    /// A reader of `end` bytes from `start` in reads of `read` bytes: every piece asked for.
    fn run(plan: ReadAhead, start: u64, end: u64, read: u64) -> Vec<(u64, Vec<Range<u64>>)> {
        let mut s = ReadAheadSchedule::new(plan, start, end);
        let mut at = start;
        let mut calls = Vec::new();
        while at < end {
            let need_to = (at + read).min(end);
            let pieces = s.advance(need_to);
            // Never behind the reader, never more than depth beyond it.
            assert!(s.asked_to() >= need_to, "{at}: asked to {}", s.asked_to());
            assert!(s.asked_to() <= need_to + plan.depth, "{at}");
            calls.push((at, pieces));
            at = need_to;
        }
        calls
    }

    #[rstest]
    #[case::default_disk(ReadAhead::for_limits(Some(128), Some(1280)), 256 * KIB)]
    #[case::default_disk_windows(ReadAhead::for_limits(Some(128), Some(1280)), 8 * MIB)]
    #[case::bench_vm(ReadAhead::for_limits(Some(8192), Some(4096)), 8 * MIB)]
    #[case::unknown(ReadAhead::default(), 256 * KIB)]
    fn the_pieces_cover_the_file_once_in_whole_aligned_steps(
        #[case] plan: ReadAhead,
        #[case] read: u64,
    ) {
        // The pages files' layout: an 8-byte header, then the payload.
        let (start, end) = (8, 8 + 300 * MIB + 12345);
        let calls = run(plan, start, end, read);
        let pieces: Vec<Range<u64>> = calls.iter().flat_map(|(_, p)| p.clone()).collect();
        assert_eq!(pieces.first().unwrap().start, 0);
        assert_eq!(pieces.last().unwrap().end, end);
        for w in pieces.windows(2) {
            assert_eq!(w[0].end, w[1].start, "contiguous, no overlap");
        }
        let (last, whole) = pieces.split_last().unwrap();
        for p in whole {
            assert_eq!(p.end - p.start, plan.step, "{p:?}");
            assert_eq!(p.start % PAGE, 0, "{p:?}");
        }
        assert!(last.end - last.start <= plan.step);
        assert_eq!(
            pieces.len() as u64,
            (end - start + 8).div_ceil(plan.step),
            "as few calls as the step allows"
        );
    }

    #[test]
    fn after_the_first_read_one_piece_per_step_the_reader_moves() {
        let plan = ReadAhead::for_limits(Some(128), Some(1280));
        let read = plan.step;
        let calls = run(plan, 0, 200 * MIB, read);
        // The first read asks for its own bytes and the depth beyond them at once.
        assert_eq!(calls[0].1.len() as u64, (read + plan.depth) / plan.step);
        // Then a steady stream: one piece per read of one step, until the end is asked for.
        let steady: Vec<usize> = calls[1..]
            .iter()
            .map(|(_, p)| p.len())
            .take_while(|&n| n > 0)
            .collect();
        assert!(steady.len() > 100, "{} steady reads", steady.len());
        assert!(steady.iter().all(|&n| n == 1), "{steady:?}");
    }

    #[test]
    fn reads_smaller_than_a_step_ask_for_nothing_until_a_step_of_room_opens() {
        let plan = ReadAhead::for_limits(Some(8192), Some(4096));
        let calls = run(plan, 0, 100 * MIB, 256 * KIB);
        let asking: Vec<u64> = calls
            .iter()
            .filter(|(_, p)| !p.is_empty())
            .map(|(at, _)| *at)
            .collect();
        // One call per 8 MiB step (32 reads of 256 KiB) after the first, until the last piece
        // of the file.
        assert!(asking.len() > 5, "{asking:?}");
        for w in asking[..asking.len() - 1].windows(2).skip(1) {
            assert_eq!(w[1] - w[0], plan.step, "{asking:?}");
        }
    }

    #[test]
    fn a_file_shorter_than_a_step_is_asked_for_whole_at_once() {
        let plan = ReadAhead::for_limits(Some(8192), Some(4096));
        let mut s = ReadAheadSchedule::new(plan, 8, 8 + 100 * KIB);
        let asked = s.advance(8 + 4 * KIB);
        assert_eq!(asked.len(), 1, "{asked:?}");
        assert_eq!(asked[0], 0..8 + 100 * KIB);
        assert!(s.advance(8 + 100 * KIB).is_empty());
    }

    /// Pages of `file`'s first `len` bytes in the page cache.
    fn resident(file: &File, len: usize) -> usize {
        let pages = crate::direct::resident_pages(file, 0, len as u64).unwrap();
        usize::try_from(pages).unwrap()
    }

    /// On the device the tests run on, the pieces of the device's size are each read whole (a
    /// larger step than the kernel reads per call would leave holes in the page cache).
    #[test]
    fn the_pieces_for_this_device_are_read_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let len = 48usize << 20;
        let name = tmp.path().join("pages");
        std::fs::write(&name, vec![0x5au8; len]).unwrap();
        let file = File::open(&name).unwrap();
        file.sync_all().unwrap();
        crate::dir::drop_page_cache(&file).unwrap();
        let pages = len / 4096;
        // A file system that keeps files in memory (tmpfs) has nothing to read ahead.
        if resident(&file, len) > pages / 2 {
            eprintln!("skipped: the file system kept the file in the page cache");
            return;
        }
        crate::dir::advise_sequential(&file);
        let plan = ReadAhead::for_file(&file);
        let mut s = ReadAheadSchedule::new(plan, 0, len as u64);
        let mut at = 0;
        while at < len as u64 {
            s.advance_and_ask(&file, at);
            at += plan.step;
        }
        s.advance_and_ask(&file, len as u64);
        // The reads run in the background: wait for them. The page cache is the machine's:
        // memory pressure or another process dropping caches may evict a few pages meanwhile,
        // so all but 5% must be there; pieces larger than the kernel reads per call leave a
        // third of the range out or more.
        let want = pages - pages / 20;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut got = resident(&file, len);
        while got < want && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
            got = resident(&file, len);
        }
        assert!(
            got >= want,
            "{got} of the 48 MiB's {pages} pages in the page cache ({plan:?})"
        );
    }
}
