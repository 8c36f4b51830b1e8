//! CRIU_OP failures leave nothing behind outside the calling process.
//!
//! - A RESTORE that fails after it has installed dma-buf fds for the BOs (a later BO, the copy-out
//!   of the buckets, a queue, event or SVM record, or the final size check) closes them again, as
//!   the driver does. The BOs it restored stay with the restoring process (the 6.1 driver does not
//!   roll them back); when that process ends, all device memory is free again and a new restore
//!   on the same machine succeeds.
//! - A RESTORE that fails at the device buckets has installed nothing and taken no memory.
//! - A CHECKPOINT that fails after it has installed dma-buf fds (the copy-out of the buckets)
//!   closes them again; the process stays paused and can be checkpointed again.
//!
//! The checks read this OS process's fd table (`/proc/self/fd`), which all in-process simulated
//! processes share, so the tests of this file take turns ([`serial`]).

#![allow(clippy::unwrap_used)] // test helpers, like the tests themselves, panic on failure

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::MetadataExt;
use std::sync::{Mutex, MutexGuard, PoisonError};

use common::criu::*;
use common::*;
use kfd_abi::criu::{Checkpoint, RestoredBo};
use kfd_abi::ioctl::kfd::CRIU_OP;
use kfd_abi::{Errno, IoctlError, Kfd};
use kfd_sim::criu::{
    BO_PRIV_SIZE, DEVICE_PRIV_SIZE, EVENT_PRIV_SIZE, OBJECT_EVENT, OBJECT_QUEUE, OBJECT_SVM_RANGE,
    PROCESS_PRIV_SIZE, QUEUE_PRIV_SIZE, SVM_PRIV_SIZE,
};
use kfd_sim::{Machine, Preset, SimFile, SimProcess};
use kfd_sys as sys;
use rstest::rstest;

static SERIAL: Mutex<()> = Mutex::new(());

/// One test at a time: they compare snapshots of the shared fd table.
fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The simulator's VRAM and GTT memfds open in this OS process (BO memory, and dma-bufs of it),
/// by fd number, with the inode each one is open on.
fn memory_fds() -> BTreeMap<i32, u64> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap() {
        let entry = entry.unwrap();
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue; // closed since the listing
        };
        let target = target.to_string_lossy();
        if !(target.starts_with("/memfd:kfd-sim:vram") || target.starts_with("/memfd:kfd-sim:gtt"))
        {
            continue;
        }
        let fd: i32 = entry.file_name().to_str().unwrap().parse().unwrap();
        if let Ok(meta) = std::fs::metadata(entry.path()) {
            out.insert(fd, meta.ino());
        }
    }
    out
}

/// The fds of `now` that `before` did not have.
fn added(before: &BTreeMap<i32, u64>, now: &BTreeMap<i32, u64>) -> BTreeMap<i32, u64> {
    now.iter()
        .filter(|(fd, ino)| before.get(fd) != Some(ino))
        .map(|(&fd, &ino)| (fd, ino))
        .collect()
}

/// Of the memory fds opened since `before`, none is a second handle on the same memory: the BOs
/// that a failed RESTORE leaves in the restoring process keep their memory (one memfd each), and
/// every dma-buf it installed on that memory is closed again.
fn assert_no_second_handle(before: &BTreeMap<i32, u64>) {
    let new = added(before, &memory_fds());
    let inodes: BTreeSet<u64> = new.values().copied().collect();
    assert_eq!(inodes.len(), new.len(), "dma-buf fds left open: {new:?}");
}

/// Offsets of the object records in `c`'s private data, with their types.
fn objects(c: &Checkpoint) -> Vec<(u32, usize)> {
    let p = &c.priv_data;
    let at = |off: usize| u32::from_le_bytes(p[off..off + 4].try_into().unwrap());
    let ndev = c.devices.len();
    let mut off = PROCESS_PRIV_SIZE + DEVICE_PRIV_SIZE * ndev + BO_PRIV_SIZE * c.bos.len();
    let mut out = Vec::new();
    for _ in 0..c.num_objects {
        let ty = at(off);
        out.push((ty, off));
        off += match ty {
            OBJECT_QUEUE => QUEUE_PRIV_SIZE + at(off + 108) as usize + at(off + 112) as usize,
            OBJECT_EVENT => EVENT_PRIV_SIZE,
            OBJECT_SVM_RANGE => SVM_PRIV_SIZE + 8 * (4 + ndev),
            t => panic!("object type {t}"),
        };
    }
    out
}

/// The offset of the `n`-th object record of type `ty`.
fn object(c: &Checkpoint, ty: u32, n: usize) -> usize {
    objects(c)
        .into_iter()
        .filter(|&(t, _)| t == ty)
        .nth(n)
        .unwrap()
        .1
}

/// A fresh process on a machine, with `/dev/kfd` and a render node per GPU, that restores.
struct Restorer {
    proc: SimProcess,
    kfd: Kfd<SimFile>,
    renders: Vec<SimFile>,
}

impl Restorer {
    fn new(m: &Machine) -> Self {
        let proc = m.spawn_process();
        let kfd = Kfd::new(proc.open_kfd().unwrap(), "/dev/kfd (restoring)");
        let renders = m
            .render_minors()
            .into_iter()
            .map(|x| proc.open_render(x).unwrap())
            .collect();
        Self { proc, kfd, renders }
    }

    fn restore(&self, c: &Checkpoint, priv_data: &[u8]) -> Result<Vec<RestoredBo>, IoctlError> {
        let devices = restore_devices(c, self.proc.machine(), &self.renders);
        self.kfd
            .criu_restore(&devices, &restore_bos(c), priv_data, c.num_objects)
    }
}

/// Everything the process's end must give back: VRAM on every GPU, and its KFD process.
fn assert_all_released(m: &Machine, pid: u32) {
    for g in m.gpu_ids() {
        assert_eq!(m.vram_used(g), Some(0), "VRAM in use on GPU {g:#x}");
    }
    assert!(!m.has_kfd_process(pid), "KFD process of pid {pid} left");
}

/// A page of our memory that the simulator can read but not write (`copy_to_user` fails).
struct ReadOnlyPage {
    addr: *mut libc::c_void,
}

impl ReadOnlyPage {
    const LEN: usize = 4096;

    fn with(bytes: &[u8]) -> Self {
        assert!(bytes.len() <= Self::LEN);
        // SAFETY: a new private anonymous mapping; no existing memory is touched.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                Self::LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(addr, libc::MAP_FAILED);
        // SAFETY: the mapping is ours, writable and LEN >= bytes.len() bytes long.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr.cast(), bytes.len()) };
        // SAFETY: changes the protection of our own mapping only.
        let r = unsafe { libc::mprotect(addr, Self::LEN, libc::PROT_READ) };
        assert_eq!(r, 0, "mprotect");
        Self { addr }
    }

    fn addr(&self) -> u64 {
        self.addr as u64
    }
}

impl Drop for ReadOnlyPage {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping made in `with`, which nothing refers to any more.
        unsafe { libc::munmap(self.addr, Self::LEN) };
    }
}

fn bytes_of<T: Copy>(items: &[T]) -> Vec<u8> {
    // SAFETY: the kfd-sys bucket structs are plain integers without padding.
    unsafe { std::slice::from_raw_parts(items.as_ptr().cast::<u8>(), std::mem::size_of_val(items)) }
        .to_vec()
}

/// Where a RESTORE is made to fail: after the BOs, and their dma-buf fds, are (partly) in place.
#[derive(Clone, Copy, Debug)]
enum LateFailure {
    /// The second BO record reuses the first one's IDR handle (ENOMEM).
    TakenIdrHandle,
    /// The first object record has an unknown type (EINVAL).
    UnknownObjectType,
    /// The first queue's id is 1024 or more (EINVAL).
    QueueIdOutOfRange,
    /// The second queue has the first one's id (ENOSPC).
    QueueIdInUse,
    /// The second event has the first one's id (ENOSPC).
    EventIdInUse,
    /// The last SVM record is cut short (EINVAL).
    SvmRecordCutShort,
    /// Bytes are left over after the last record (EINVAL).
    PrivateDataLeftOver,
}

impl LateFailure {
    fn corrupt(self, c: &Checkpoint, p: &mut Vec<u8>) {
        let bo1_idr = PROCESS_PRIV_SIZE + DEVICE_PRIV_SIZE * c.devices.len() + BO_PRIV_SIZE + 8;
        match self {
            Self::TakenIdrHandle => p[bo1_idr] = 0,
            Self::UnknownObjectType => p[objects(c)[0].1] = 9,
            Self::QueueIdOutOfRange => p[object(c, OBJECT_QUEUE, 0) + 77] = 0x10,
            Self::QueueIdInUse => p[object(c, OBJECT_QUEUE, 1) + 76] = 0,
            Self::EventIdInUse => p[object(c, OBJECT_EVENT, 1) + 16] = 0,
            Self::SvmRecordCutShort => p.truncate(p.len() - 8),
            Self::PrivateDataLeftOver => p.extend_from_slice(&[0; 8]),
        }
    }
}

#[rstest]
#[case::taken_idr_handle(LateFailure::TakenIdrHandle, Errno::ENOMEM)]
#[case::unknown_object_type(LateFailure::UnknownObjectType, Errno::EINVAL)]
#[case::queue_id_out_of_range(LateFailure::QueueIdOutOfRange, Errno::EINVAL)]
#[case::queue_id_in_use(LateFailure::QueueIdInUse, Errno::ENOSPC)]
#[case::event_id_in_use(LateFailure::EventIdInUse, Errno::ENOSPC)]
#[case::svm_record_cut_short(LateFailure::SvmRecordCutShort, Errno::EINVAL)]
#[case::private_data_left_over(LateFailure::PrivateDataLeftOver, Errno::EINVAL)]
fn a_restore_that_fails_late_closes_the_dmabufs_it_installed(
    #[case] failure: LateFailure,
    #[case] want: Errno,
) {
    let _turn = serial();
    let (_src, c) = dump();
    let m = Machine::new(&Preset::mi210x2()).unwrap();
    let mut p = c.priv_data.clone();
    failure.corrupt(&c, &mut p);
    let before = memory_fds();

    let r = Restorer::new(&m);
    let pid = r.proc.pid();
    assert_eq!(r.restore(&c, &p).unwrap_err().errno(), Some(want));
    // The BOs restored before the failure keep their memory, but the dma-bufs are closed again.
    assert_no_second_handle(&before);

    // The restoring process ends: its memory goes, and the fd table is as it was.
    drop(r);
    assert_all_released(&m, pid);
    assert_eq!(memory_fds(), before);
    // Nothing of the failed restore is in the way of the next one.
    let again = Restorer::new(&m);
    let restored = again.restore(&c, &c.priv_data).unwrap();
    assert_eq!(restored.len(), c.bos.len());
}

#[test]
fn a_restore_that_cannot_copy_the_buckets_back_closes_the_dmabufs_it_installed() {
    let _turn = serial();
    let (_src, c) = dump();
    let m = Machine::new(&Preset::mi210x2()).unwrap();
    let r = Restorer::new(&m);
    let pid = r.proc.pid();
    let devices: Vec<sys::kfd_criu_device_bucket> = restore_devices(&c, &m, &r.renders)
        .iter()
        .map(|d| sys::kfd_criu_device_bucket {
            user_gpu_id: d.user_gpu_id.get(),
            actual_gpu_id: d.actual_gpu_id.get(),
            drm_fd: d.drm.as_raw_fd().unsigned_abs(),
            pad: 0,
        })
        .collect();
    let bos: Vec<sys::kfd_criu_bo_bucket> = restore_bos(&c)
        .iter()
        .map(|b| sys::kfd_criu_bo_bucket {
            addr: b.addr,
            size: b.size,
            offset: b.offset,
            gpu_id: b.gpu_id,
            alloc_flags: b.alloc_flags.bits(),
            ..Default::default()
        })
        .collect();
    // RESTORE reads the BO buckets and writes them back with the new fds and offsets.
    let read_only_bos = ReadOnlyPage::with(&bytes_of(&bos));
    let mut priv_data = c.priv_data.clone();
    let mut a = sys::kfd_ioctl_criu_args {
        devices: devices.as_ptr() as u64,
        bos: read_only_bos.addr(),
        priv_data: priv_data.as_mut_ptr() as u64,
        priv_data_size: priv_data.len() as u64,
        num_devices: u32::try_from(devices.len()).unwrap(),
        num_bos: u32::try_from(bos.len()).unwrap(),
        num_objects: c.num_objects,
        pid: 0,
        op: sys::KFD_CRIU_OP_RESTORE,
    };
    let before = memory_fds();
    assert_eq!(raw(r.kfd.transport(), CRIU_OP, &mut a), Err(Errno::EFAULT));
    assert_no_second_handle(&before);
    drop(r);
    assert_all_released(&m, pid);
    assert_eq!(memory_fds(), before);
}

#[rstest]
#[case::unknown_actual_gpu_id(false)]
#[case::drm_fd_not_a_render_node(true)]
fn a_restore_that_fails_at_the_device_buckets_installs_nothing_and_takes_no_memory(
    #[case] bad_fd: bool,
) {
    let _turn = serial();
    let (_src, c) = dump();
    let m = Machine::new(&Preset::mi210x2()).unwrap();
    let before = memory_fds();
    let r = Restorer::new(&m);
    let pid = r.proc.pid();
    let mut devices = restore_devices(&c, &m, &r.renders);
    let last = devices.last_mut().unwrap();
    if bad_fd {
        last.drm = r.kfd.transport().as_fd();
    } else {
        last.actual_gpu_id = gpu(0x4321);
    }
    let e = r
        .kfd
        .criu_restore(&devices, &restore_bos(&c), &c.priv_data, c.num_objects)
        .unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EINVAL));
    assert_eq!(memory_fds(), before, "no BO memory, no dma-buf");
    for g in m.gpu_ids() {
        assert_eq!(m.vram_used(g), Some(0), "VRAM in use on GPU {g:#x}");
    }
    drop(devices);
    drop(r);
    assert_all_released(&m, pid);
    let again = Restorer::new(&m);
    assert_eq!(again.restore(&c, &c.priv_data).unwrap().len(), c.bos.len());
}

#[test]
fn a_checkpoint_that_cannot_copy_the_buckets_out_closes_the_dmabufs_it_installed() {
    let _turn = serial();
    let src = source();
    let e = &src.env;
    let (_criu, ck) = criu_view(&e.kfd, &e.proc);
    let info = ck.criu_process_info().unwrap();
    let mut devices = vec![sys::kfd_criu_device_bucket::default(); info.num_devices as usize];
    let mut priv_data = vec![0u8; usize::try_from(info.priv_data_size).unwrap()];
    // CHECKPOINT installs the dma-bufs, then writes the BO buckets: here into read-only memory.
    let bucket_bytes = info.num_bos as usize * std::mem::size_of::<sys::kfd_criu_bo_bucket>();
    let read_only_bos = ReadOnlyPage::with(&vec![0; bucket_bytes]);
    let mut a = sys::kfd_ioctl_criu_args {
        devices: devices.as_mut_ptr() as u64,
        bos: read_only_bos.addr(),
        priv_data: priv_data.as_mut_ptr() as u64,
        priv_data_size: info.priv_data_size,
        num_devices: info.num_devices,
        num_bos: info.num_bos,
        num_objects: info.num_objects,
        pid: 0,
        op: sys::KFD_CRIU_OP_CHECKPOINT,
    };
    let before = memory_fds();
    assert_eq!(raw(ck.transport(), CRIU_OP, &mut a), Err(Errno::EFAULT));
    assert_eq!(memory_fds(), before, "dma-buf fds left open");
    // The process is still paused: a checkpoint works, and so does UNPAUSE.
    let dump = ck.criu_checkpoint(&info).unwrap();
    let with_contents = dump.bos.iter().filter(|b| b.dmabuf.is_some()).count();
    assert_eq!(
        added(&before, &memory_fds()).len(),
        with_contents,
        "one dma-buf per VRAM/GTT BO"
    );
    drop(dump);
    assert_eq!(memory_fds(), before);
    ck.criu_unpause().unwrap();
}
