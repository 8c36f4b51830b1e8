//! A munmap under SVM ranges, as the kernel's MMU notifier reports it to amdkfd
//! (`svm_range_unmap_from_cpu`): the unmapped part of every range goes, the rest keeps its
//! attributes, and the address is free again for a userptr BO. In process, the test makes the
//! munmap and then reports it ([`SimProcess::notify_unmap`]), as the notifier runs before munmap
//! returns.

#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)] // test helpers, like the tests themselves, panic on failure; addresses and lengths of a 64-bit process

mod common;

use std::ptr;

use common::criu::criu_view;
use common::*;
use kfd_abi::kfd::SvmAttribute;
use kfd_abi::{AllocFlags, Errno};
use kfd_sim::criu::{PROCESS_PRIV_SIZE, SVM_PRIV_SIZE};
use kfd_sim::Preset;
use kfd_sys as sys;
use rstest::rstest;

const PAGE: u64 = 4096;

/// An anonymous mapping of `pages` pages that this test owns (unmapped on drop, what is left
/// of it).
struct Anon {
    start: u64,
    len: u64,
}

impl Anon {
    fn new(pages: u64) -> Self {
        let len = pages * PAGE;
        // SAFETY: a new private anonymous mapping at an address of the kernel's choice; it
        // overlaps nothing of ours.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        Self {
            start: p as u64,
            len,
        }
    }

    /// Unmaps pages `[first, first + n)` of the mapping.
    fn unmap(&self, first: u64, n: u64) {
        // SAFETY: the pages are part of our own mapping, which nothing else uses.
        let r = unsafe { libc::munmap((self.start + first * PAGE) as *mut _, (n * PAGE) as usize) };
        assert_eq!(r, 0);
    }

    /// Maps pages `[first, first + n)` again (fresh anonymous memory at the same address).
    fn remap(&self, first: u64, n: u64) {
        let at = self.start + first * PAGE;
        // SAFETY: a hole of our own mapping's range; MAP_FIXED_NOREPLACE fails rather than
        // replace whatever another thread may have mapped there meanwhile.
        let p = unsafe {
            libc::mmap(
                at as *mut _,
                (n * PAGE) as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        assert_eq!(p as u64, at, "the hole was taken meanwhile");
    }

    fn page(&self, i: u64) -> u64 {
        self.start + i * PAGE
    }
}

impl Drop for Anon {
    fn drop(&mut self) {
        // SAFETY: our own range; munmap of its holes is harmless.
        unsafe { libc::munmap(self.start as *mut _, self.len as usize) };
    }
}

fn preferred(value: u32) -> SvmAttribute {
    SvmAttribute {
        ty: sys::KFD_IOCTL_SVM_ATTR_PREFERRED_LOC,
        value,
    }
}

/// The preferred location GET_ATTR reports for `[start, start + len)`.
fn location_of(e: &Env, start: u64, len: u64) -> Result<u32, Errno> {
    let mut get = [preferred(0)];
    e.kfd
        .svm_get_attr(start, len, &mut get)
        .map_err(|err| err.errno().unwrap())?;
    Ok(get[0].value)
}

#[test]
fn unmapping_the_middle_of_a_range_leaves_its_two_ends() {
    let e = env(Preset::mi210x2());
    let g1 = e.gpus[1].get();
    let m = Anon::new(4);
    e.kfd
        .svm_set_attr(m.start, 4 * PAGE, &[preferred(g1)])
        .unwrap();

    m.unmap(1, 2);
    e.proc.notify_unmap(m.page(1), m.page(3));

    assert_eq!(location_of(&e, m.page(0), PAGE), Ok(g1));
    assert_eq!(location_of(&e, m.page(3), PAGE), Ok(g1));
    // The hole itself is no mapping: GET_ATTR refuses it, as the driver does.
    assert_eq!(location_of(&e, m.page(1), PAGE), Err(Errno::EFAULT));
    // Mapped again, the middle is no range: default attributes there.
    m.remap(1, 2);
    assert_eq!(
        location_of(&e, m.page(1), 2 * PAGE),
        Ok(sys::KFD_IOCTL_SVM_LOCATION_UNDEFINED)
    );
    // Each end is still a range of its own with its attributes.
    assert_eq!(location_of(&e, m.page(3), PAGE), Ok(g1));
}

/// libhsakmt allocates host memory as a userptr BO at a fresh mapping, often where a freed
/// buffer (whose range ROCr registered) was: once the unmap is reported the address is free;
/// without the report the stale range refuses it, as it must refuse a live range.
#[rstest]
#[case::after_the_unmap_is_reported(true, Ok(()))]
#[case::while_the_range_is_live(false, Err(Errno::EADDRINUSE))]
fn a_userptr_bo_where_a_range_was_unmapped(
    #[case] reported: bool,
    #[case] want: Result<(), Errno>,
) {
    let e = env(Preset::mi210x2());
    let g0 = e.gpus[0];
    let m = Anon::new(4);
    e.kfd
        .svm_set_attr(m.start, 4 * PAGE, &[preferred(g0.get())])
        .unwrap();
    m.unmap(0, 4);
    if reported {
        e.proc.notify_unmap(m.start, m.start + 4 * PAGE);
    }
    m.remap(0, 4);
    // SAFETY: the memory is our own mapping, alive until `m` drops, after the BO is freed.
    let r = unsafe {
        e.kfd
            .alloc_userptr(m.start, 4 * PAGE, g0, AllocFlags::WRITABLE, m.start)
    };
    assert_eq!(
        r.as_ref().map(drop).map_err(|err| err.errno().unwrap()),
        want
    );
    if let Ok(bo) = r {
        e.kfd.free_memory(bo.handle).unwrap();
    }
}

#[test]
fn an_unmap_outside_every_range_changes_nothing() {
    let e = env(Preset::mi210x2());
    let g1 = e.gpus[1].get();
    let m = Anon::new(3);
    e.kfd.svm_set_attr(m.start, PAGE, &[preferred(g1)]).unwrap();
    m.unmap(2, 1);
    e.proc.notify_unmap(m.page(2), m.page(3));
    assert_eq!(location_of(&e, m.start, PAGE), Ok(g1));
    m.remap(2, 1);
    assert_eq!(
        location_of(&e, m.page(2), PAGE),
        Ok(sys::KFD_IOCTL_SVM_LOCATION_UNDEFINED)
    );
}

/// A checkpoint after an unmap carries the ranges that are left, and PROCESS_INFO's count and
/// size say so as CHECKPOINT's records do.
#[test]
fn a_checkpoint_after_an_unmap_carries_the_remaining_ranges() {
    let e = env(Preset::mi210x2());
    let g1 = e.gpus[1].get();
    let m = Anon::new(5);
    e.kfd
        .svm_set_attr(m.start, 5 * PAGE, &[preferred(g1)])
        .unwrap();
    m.unmap(2, 1);
    e.proc.notify_unmap(m.page(2), m.page(3));

    let (_criu, ck) = criu_view(&e.kfd, &e.proc);
    let info = ck.criu_process_info().unwrap();
    assert_eq!(info.num_objects, 2, "two ranges, no queues or events");
    let c = ck.criu_checkpoint(&info).unwrap();
    ck.criu_unpause().unwrap();
    assert_eq!(c.num_objects, info.num_objects);
    assert_eq!(c.priv_data.len() as u64, info.priv_data_size);
    let ndev = c.devices.len();
    let rec = SVM_PRIV_SIZE + 8 * (4 + ndev);
    let p = &c.priv_data;
    let first = PROCESS_PRIV_SIZE
        + kfd_sim::criu::DEVICE_PRIV_SIZE * ndev
        + kfd_sim::criu::BO_PRIV_SIZE * c.bos.len();
    let u64_at = |off: usize| u64::from_le_bytes(p[off..off + 8].try_into().unwrap());
    let ranges: Vec<(u64, u64)> = (0..2)
        .map(|i| (u64_at(first + i * rec + 8), u64_at(first + i * rec + 16)))
        .collect();
    assert_eq!(ranges, [(m.start, 2 * PAGE), (m.page(3), 2 * PAGE)]);
    assert_eq!(first + 2 * rec, p.len(), "the records fill priv_data");
}
