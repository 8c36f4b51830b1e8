//! Every KFD ioctl through kfd-abi's public API against the in-process simulator: the success
//! path of each, and the errno of each bad input that section 6 of the reference lists.

#![allow(clippy::unwrap_used)] // test helpers, like the tests themselves, panic on failure

mod common;

use std::os::fd::{AsFd, AsRawFd};

use common::*;
use kfd_abi::ioctl::{encode, kfd as codes, Dir};
use kfd_abi::kfd::{CachePolicy, QueueDesc, SvmAttribute, WAIT_INFINITE};
use kfd_abi::{AllocFlags, Errno, EventId, EventType, MemHandle, QueueId, QueueType, WaitResult};
use kfd_sim::Preset;
use kfd_sys as sys;
use rstest::rstest;

const VA: u64 = 0x7f00_0000_0000;
const MIB: u64 = 1 << 20;

fn aql(e: &Env, g: usize) -> QueueDesc {
    aql_queue(e, g)
}

fn create_queue(e: &Env, d: &QueueDesc) -> Result<kfd_abi::kfd::CreatedQueue, kfd_abi::IoctlError> {
    // SAFETY: the simulator keeps the addresses but never dereferences them.
    unsafe { e.kfd.create_queue(d) }
}

#[test]
fn version_is_1_11() {
    let e = env(Preset::mi50x1());
    let v = e.kfd.get_version().unwrap();
    assert_eq!((v.major, v.minor), (1, 11));
}

#[test]
fn queues_are_created_with_ids_and_doorbells_and_destroyed() {
    let e = env(Preset::mi100x4());
    let q0 = create_queue(&e, &aql(&e, 0)).unwrap();
    let q1 = create_queue(&e, &aql(&e, 0)).unwrap();
    assert_eq!((q0.queue_id, q1.queue_id), (QueueId(0), QueueId(1)));
    let gpu = u64::from(e.gpus[0].get());
    assert_eq!(q0.doorbell_offset, (3 << 62) | (gpu << 46));
    assert_eq!(q1.doorbell_offset, (3 << 62) | (gpu << 46) | 8);
    let sdma = create_queue(&e, &QueueDesc::new(e.gpus[1], QueueType::Sdma)).unwrap();
    let xgmi = create_queue(&e, &QueueDesc::new(e.gpus[1], QueueType::SdmaXgmi)).unwrap();
    assert_eq!((sdma.queue_id, xgmi.queue_id), (QueueId(2), QueueId(3)));
    // SAFETY: as above.
    unsafe { e.kfd.update_queue(q1.queue_id, 0x3000_0000, 8192, 50, 3) }.unwrap();
    e.kfd
        .set_cu_mask(q1.queue_id, &[0xffff_ffff, 0xff])
        .unwrap();
    assert_eq!(e.kfd.alloc_queue_gws(q1.queue_id, 1).unwrap(), 0);
    e.kfd.destroy_queue(q0.queue_id).unwrap();
    assert_eq!(
        create_queue(&e, &aql(&e, 0)).unwrap().queue_id,
        QueueId(0),
        "lowest free id reused"
    );
}

#[test]
fn ring_size_below_the_minimum_is_clamped() {
    let e = env(Preset::mi50x1());
    let mut a = sys::kfd_ioctl_create_queue_args {
        gpu_id: e.gpus[0].get(),
        queue_type: sys::KFD_IOC_QUEUE_TYPE_COMPUTE_AQL,
        ring_size: 256,
        queue_percentage: 100,
        ..Default::default()
    };
    raw(e.kfd.transport(), codes::CREATE_QUEUE, &mut a).unwrap();
    assert_eq!(a.ring_size, 1024);
}

#[test]
fn memory_policy_scratch_trap_tile_clock_and_apertures() {
    let e = env(Preset::mi210x2());
    let g = e.gpus[1];
    e.kfd
        .set_memory_policy(g, CachePolicy::Coherent, CachePolicy::NonCoherent, 0, 0)
        .unwrap();
    e.kfd.set_scratch_backing_va(g, 0x1_0000_0000).unwrap();
    e.kfd.set_trap_handler(g, 0x1000, 0x2000).unwrap();
    let t = e.kfd.get_tile_config(g).unwrap();
    assert_ne!(t.gb_addr_config, 0);
    let c = e.kfd.get_clock_counters(g).unwrap();
    assert_eq!(c.system_freq, 1_000_000_000);
    assert!(c.gpu > 0);
    let aps = e.kfd.get_process_apertures_new().unwrap();
    assert_eq!(
        aps.iter().map(|a| a.gpu_id).collect::<Vec<_>>(),
        e.gpus.iter().map(|g| g.get()).collect::<Vec<_>>()
    );
    assert_eq!(
        (aps[0].lds_base, aps[0].scratch_base, aps[0].gpuvm_base),
        (1 << 48, 2 << 48, 16 << 10)
    );
    assert_eq!(aps[0].gpuvm_limit, (1 << 47) - 1);
    assert_eq!(e.kfd.get_process_apertures().unwrap(), aps);
}

#[test]
fn memory_is_allocated_mapped_unmapped_and_freed() {
    let e = env(Preset::mi100x4());
    let (g0, g1) = (e.gpus[0], e.gpus[1]);
    let before = e.kfd.available_memory(g0).unwrap();
    let a = e.kfd.alloc_memory(VA, 64 * MIB, g0, VRAM_W).unwrap();
    assert_eq!(a.handle, MemHandle::from_parts(g0, 0));
    assert!(a.mmap_offset >= 1 << 32, "render-node fake offset");
    assert_eq!(e.kfd.available_memory(g0).unwrap(), before - 64 * MIB);
    let b = e
        .kfd
        .alloc_memory(VA + 64 * MIB, 2 * MIB, g0, GTT_W)
        .unwrap();
    assert_eq!(b.handle.idr(), 1);
    let db = e
        .kfd
        .alloc_memory(VA + 128 * MIB, 8192, g0, AllocFlags::DOORBELL)
        .unwrap();
    let mmio = e
        .kfd
        .alloc_memory(VA + 130 * MIB, 4096, g0, AllocFlags::MMIO_REMAP)
        .unwrap();
    assert_eq!(
        mmio.mmap_offset,
        u64::from(g0.get()) << 46,
        "TYPE_MMIO | GPU_ID"
    );
    let host = vec![0u8; 8192];
    // SAFETY: `host` outlives the BO.
    let up = unsafe {
        e.kfd.alloc_userptr(
            VA + 132 * MIB,
            8192,
            g0,
            AllocFlags::WRITABLE,
            host.as_ptr() as u64,
        )
    }
    .unwrap();
    assert_eq!(e.kfd.map_memory_to_gpu(a.handle, &[g0, g1]).unwrap(), 2);
    let vm = e.renders[1].vm().unwrap();
    assert!(
        vm.lock().unwrap().lookup(VA + 4096).is_some(),
        "peer VM sees the BO"
    );
    assert_eq!(e.kfd.unmap_memory_from_gpu(a.handle, &[g0, g1]).unwrap(), 2);
    assert!(vm.lock().unwrap().lookup(VA).is_none());
    for h in [a.handle, b.handle, db.handle, mmio.handle, up.handle] {
        e.kfd.free_memory(h).unwrap();
    }
    assert_eq!(e.kfd.available_memory(g0).unwrap(), before);
}

#[test]
fn events_signal_wait_reset_and_wake_a_blocked_waiter() {
    let e = env(Preset::mi50x1());
    let page = e.kfd.alloc_memory(VA, 32 << 10, e.gpus[0], GTT_W).unwrap();
    let ev = e
        .kfd
        .create_event(EventType::Signal, true, Some(page.handle))
        .unwrap();
    assert_eq!(ev.event_id, EventId(0));
    assert_eq!(
        (ev.page_offset, ev.slot_index, ev.trigger_data),
        (2 << 62, 0, 0)
    );
    let other = e
        .kfd
        .create_event(EventType::NodeChange, false, None)
        .unwrap();
    assert_eq!(other.event_id, EventId(1 << 30));
    assert_eq!(
        e.kfd.wait_events(&[ev.event_id], false, 0).unwrap(),
        WaitResult::Timeout
    );
    e.kfd.set_event(ev.event_id).unwrap();
    assert_eq!(
        e.kfd.wait_events(&[ev.event_id], false, 0).unwrap(),
        WaitResult::Complete
    );
    assert_eq!(
        e.kfd.wait_events(&[ev.event_id], false, 0).unwrap(),
        WaitResult::Timeout,
        "auto-reset consumed"
    );
    e.kfd.set_event(ev.event_id).unwrap();
    e.kfd.reset_event(ev.event_id).unwrap();
    assert_eq!(
        e.kfd.wait_events(&[ev.event_id], false, 10).unwrap(),
        WaitResult::Timeout
    );
    // An infinite wait is woken by SET_EVENT from another thread.
    let setter = e.kfd.try_clone().unwrap();
    let id = ev.event_id;
    std::thread::scope(|s| {
        s.spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            setter.set_event(id).unwrap();
        });
        assert_eq!(
            e.kfd.wait_events(&[id], true, WAIT_INFINITE).unwrap(),
            WaitResult::Complete
        );
    });
    e.kfd.destroy_event(other.event_id).unwrap();
    assert_eq!(errno(e.kfd.free_memory(page.handle)), Some(Errno::EPERM));
}

/// WAIT_EVENTS with the caller's event array as `count` elements from `at`.
fn wait_raw(e: &Env, at: u64, count: u32) -> Result<i32, Errno> {
    let mut a = sys::kfd_ioctl_wait_events_args {
        events_ptr: at,
        num_events: count,
        wait_for_all: 0,
        timeout: 0,
        wait_result: 0,
    };
    raw(e.kfd.transport(), codes::WAIT_EVENTS, &mut a)
}

/// A wait interrupted by a signal ends with EINTR (the driver's -ERESTARTSYS, unrestarted) and
/// writes back the time left, in the driver's jiffies (`msecs_to_jiffies(t) + 1` slept, the
/// jiffies left less one written back; Debian's HZ is 250): a restarted call waits only for the
/// rest. An infinite timeout is left as it is.
#[test]
fn an_interrupted_wait_writes_back_the_time_left() {
    let e = env(Preset::mi50x1());
    let ev = e
        .kfd
        .create_event(EventType::Signal, true, None)
        .unwrap()
        .event_id;
    let data = [sys::kfd_event_data {
        event_id: ev.0,
        ..Default::default()
    }];
    let wait = |timeout| sys::kfd_ioctl_wait_events_args {
        events_ptr: data.as_ptr() as u64,
        num_events: 1,
        wait_for_all: 0,
        timeout,
        wait_result: 0,
    };
    let sender = {
        let p = e.proc.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            p.signal();
        })
    };
    let mut a = wait(10_000);
    assert_eq!(
        raw(e.kfd.transport(), codes::WAIT_EVENTS, &mut a),
        Err(Errno::EINTR)
    );
    sender.join().unwrap();
    assert_eq!(a.wait_result, sys::KFD_IOC_WAIT_RESULT_FAIL);
    // What is left of the 10 s, in whole jiffies (the arithmetic: events.rs's unit test; how
    // much of it the waiter slept depends on the scheduler, so it is not asserted here).
    assert!(a.timeout <= 10_000, "{} ms left", a.timeout);
    assert_eq!(a.timeout % 4, 0, "whole jiffies");

    e.proc.signal();
    let mut a = wait(WAIT_INFINITE);
    assert_eq!(
        raw(e.kfd.transport(), codes::WAIT_EVENTS, &mut a),
        Err(Errno::EINTR)
    );
    assert_eq!(a.timeout, WAIT_INFINITE);
    // The signal was taken: the event still works, the next wait completes.
    e.kfd.set_event(ev).unwrap();
    assert_eq!(
        e.kfd.wait_events(&[ev], false, 1000).unwrap(),
        WaitResult::Complete
    );
}

/// A wait interrupted by a signal gives back the auto-reset events it had already taken (the
/// driver's `free_waiters(..., undo_auto_reset)`): the restarted call sees them signalled. Here a
/// wait for all of two events takes the first, already set, and is interrupted while it waits
/// for the second; a signal that comes as the event fires (criu freezing a process that waits
/// for its queue's completion) takes the same path.
#[test]
fn an_interrupted_wait_gives_back_the_auto_reset_events_it_took() {
    let e = env(Preset::mi50x1());
    let create = |auto_reset| {
        e.kfd
            .create_event(EventType::Signal, auto_reset, None)
            .unwrap()
            .event_id
    };
    let (taken, pending, manual) = (create(true), create(true), create(false));
    e.kfd.set_event(taken).unwrap();
    e.kfd.set_event(manual).unwrap();
    e.proc.signal();
    assert_eq!(
        errno(
            e.kfd
                .wait_events(&[taken, manual, pending], true, WAIT_INFINITE)
        ),
        Some(Errno::EINTR)
    );
    // Both set events are signalled again; the one still pending is not.
    for ev in [taken, manual] {
        assert_eq!(
            e.kfd.wait_events(&[ev], false, 0).unwrap(),
            WaitResult::Complete,
            "{ev:?}"
        );
    }
    assert_eq!(
        e.kfd.wait_events(&[pending], false, 0).unwrap(),
        WaitResult::Timeout
    );
    // A wait that completes keeps what it took: the auto-reset event is reset again.
    assert_eq!(
        e.kfd.wait_events(&[taken], false, 0).unwrap(),
        WaitResult::Timeout
    );
}

/// Two pages of which only the first is mapped.
struct GuardedPage {
    base: *mut libc::c_void,
}

impl GuardedPage {
    const PAGE: usize = 4096;

    fn new() -> Self {
        // SAFETY: an anonymous private mapping of two fresh pages, then the second unmapped;
        // nothing else refers to them.
        let base = unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                2 * Self::PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(base, libc::MAP_FAILED);
            assert_eq!(
                libc::munmap(base.cast::<u8>().add(Self::PAGE).cast(), Self::PAGE),
                0
            );
            base
        };
        Self { base }
    }

    /// Writes `events` so that they end where the mapped page ends; returns their address.
    fn events_at_end(&self, events: &[sys::kfd_event_data]) -> u64 {
        let bytes = std::mem::size_of_val(events);
        let at = self.base as usize + Self::PAGE - bytes;
        // SAFETY: `[at, at + bytes)` lies inside the mapped first page, owned by `self`;
        // kfd_event_data is plain data.
        unsafe {
            std::ptr::copy_nonoverlapping(events.as_ptr().cast::<u8>(), at as *mut u8, bytes);
        }
        at as u64
    }
}

impl Drop for GuardedPage {
    fn drop(&mut self) {
        // SAFETY: the first page was mapped by `new` and is unmapped once.
        unsafe { libc::munmap(self.base, Self::PAGE) };
    }
}

fn event_data(id: EventId) -> sys::kfd_event_data {
    sys::kfd_event_data {
        event_id: id.get(),
        ..Default::default()
    }
}

/// The driver reads the event array one element at a time and stops at the first it cannot
/// use: an unknown event before an element it cannot read answers EINVAL, an element it cannot
/// read before an unknown event EFAULT. A long array of one event ends like a short one and
/// leaves the event as it was.
#[test]
fn wait_events_reads_the_caller_array_in_order() {
    let e = env(Preset::mi50x1());
    let ev = e
        .kfd
        .create_event(EventType::NodeChange, false, None)
        .unwrap()
        .event_id;
    let guard = GuardedPage::new();
    let unknown = event_data(EventId(77));
    let known = event_data(ev);

    let at = guard.events_at_end(&[known, known, unknown]);
    assert_eq!(wait_raw(&e, at, 3).err(), Some(Errno::EINVAL));
    assert_eq!(
        wait_raw(&e, at, 4).err(),
        Some(Errno::EINVAL),
        "unknown before unreadable"
    );
    let at = guard.events_at_end(&[known, known]);
    assert_eq!(
        wait_raw(&e, at, 3).err(),
        Some(Errno::EFAULT),
        "unreadable before unknown"
    );
    assert_eq!(wait_raw(&e, at, 2000).err(), Some(Errno::EFAULT));

    let mut many = vec![known; 70_000];
    assert_eq!(
        wait_raw(&e, many.as_ptr() as u64, 70_000),
        Ok(0),
        "a timeout of 0 with nothing signalled"
    );
    many.push(unknown);
    assert_eq!(
        wait_raw(&e, many.as_ptr() as u64, 70_001).err(),
        Some(Errno::EINVAL)
    );
    e.kfd.destroy_event(ev).unwrap();
}

/// ACQUIRE_VM with another GPU's render node is accepted, as 6.1 checks only that the file is an
/// amdgpu render file with no compute VM yet: that VM is then GPU 0's, and GPU 1's own render
/// node, whose VM is taken, can no longer serve GPU 1.
#[test]
fn acquire_vm_takes_another_gpus_render_node() {
    let (m, p, k) = bare(Preset::mi100x4());
    let ids = m.gpu_ids();
    let r1 = p.open_render(m.render_minors()[1]).unwrap();
    k.acquire_vm(gpu(ids[0]), r1.as_fd()).unwrap();
    k.acquire_vm(gpu(ids[0]), r1.as_fd()).unwrap();
    assert_eq!(
        errno(k.acquire_vm(gpu(ids[1]), r1.as_fd())),
        Some(Errno::EINVAL)
    );
    let va = k.alloc_memory(VA, MIB, gpu(ids[0]), VRAM_W).unwrap();
    k.map_memory_to_gpu(va.handle, &[gpu(ids[0])]).unwrap();
}

/// A VRAM BO serves as the event page: the driver pins it in GTT to map it into the kernel
/// (6.1's KFD VRAM has no NO_CPU_ACCESS), so CREATE_EVENT takes it, and the page is then set.
#[test]
fn a_vram_bo_serves_as_the_event_page() {
    let e = env(Preset::mi50x1());
    let g0 = e.gpus[0];
    let page = e.kfd.alloc_memory(VA, 32 << 10, g0, VRAM_W).unwrap();
    let ev = e
        .kfd
        .create_event(EventType::Signal, false, Some(page.handle))
        .unwrap();
    e.kfd.set_event(ev.event_id).unwrap();
    assert_eq!(
        e.kfd.wait_events(&[ev.event_id], false, 0).unwrap(),
        WaitResult::Complete
    );
    let gtt = e.kfd.alloc_memory(VA + MIB, 32 << 10, g0, GTT_W).unwrap();
    assert_eq!(
        errno(
            e.kfd
                .create_event(EventType::Signal, false, Some(gtt.handle))
        ),
        Some(Errno::EINVAL),
        "the page is set"
    );
}

/// The size check counts the caller's bytes: the 24-byte header with no attributes is a valid
/// SET_ATTR, 16 bytes of it are not (the table below), whatever the kernel's own struct size.
#[test]
fn svm_takes_a_bare_header_of_the_callers_size() {
    let e = env(Preset::mi210x2());
    let buf = vec![0u8; 2 * 4096];
    let start = (buf.as_ptr() as u64 + 4095) & !4095;
    let mut a = sys::kfd_ioctl_svm_args {
        start_addr: start,
        size: 4096,
        op: sys::KFD_IOCTL_SVM_OP_SET_ATTR,
        nattr: 0,
        ..Default::default()
    };
    assert_eq!(raw(e.kfd.transport(), codes::SVM, &mut a), Ok(0));
}

#[test]
fn svm_attributes_are_set_and_queried_per_range() {
    let e = env(Preset::mi210x2());
    let buf = vec![0u8; 5 * 4096];
    let start = (buf.as_ptr() as u64 + 4095) & !4095;
    let g1 = e.gpus[1].get();
    let set = [
        SvmAttribute {
            ty: sys::KFD_IOCTL_SVM_ATTR_PREFERRED_LOC,
            value: g1,
        },
        SvmAttribute {
            ty: sys::KFD_IOCTL_SVM_ATTR_ACCESS_IN_PLACE,
            value: g1,
        },
        SvmAttribute {
            ty: sys::KFD_IOCTL_SVM_ATTR_GRANULARITY,
            value: 4,
        },
    ];
    e.kfd.svm_set_attr(start, 2 * 4096, &set).unwrap();
    let mut get = [
        SvmAttribute {
            ty: sys::KFD_IOCTL_SVM_ATTR_PREFERRED_LOC,
            value: 0,
        },
        SvmAttribute {
            ty: sys::KFD_IOCTL_SVM_ATTR_ACCESS,
            value: g1,
        },
        SvmAttribute {
            ty: sys::KFD_IOCTL_SVM_ATTR_ACCESS,
            value: e.gpus[0].get(),
        },
        SvmAttribute {
            ty: sys::KFD_IOCTL_SVM_ATTR_GRANULARITY,
            value: 0,
        },
        SvmAttribute {
            ty: sys::KFD_IOCTL_SVM_ATTR_SET_FLAGS,
            value: 0,
        },
    ];
    e.kfd.svm_get_attr(start, 4096, &mut get).unwrap();
    assert_eq!(get[0].value, g1);
    assert_eq!(get[1].ty, sys::KFD_IOCTL_SVM_ATTR_ACCESS_IN_PLACE);
    assert_eq!(get[2].ty, sys::KFD_IOCTL_SVM_ATTR_NO_ACCESS);
    assert_eq!(get[3].value, 4);
    assert_eq!(
        get[4].value,
        sys::KFD_IOCTL_SVM_FLAG_HOST_ACCESS | sys::KFD_IOCTL_SVM_FLAG_COHERENT
    );
    // Over two ranges with different preferred locations, the location is no longer common.
    let sysmem = SvmAttribute {
        ty: sys::KFD_IOCTL_SVM_ATTR_PREFERRED_LOC,
        value: 0,
    };
    e.kfd
        .svm_set_attr(start + 2 * 4096, 4096, &[sysmem])
        .unwrap();
    let mut loc = [SvmAttribute {
        ty: sys::KFD_IOCTL_SVM_ATTR_PREFERRED_LOC,
        value: 0,
    }];
    e.kfd
        .svm_get_attr(start + 4096, 2 * 4096, &mut loc)
        .unwrap();
    assert_eq!(loc[0].value, sys::KFD_IOCTL_SVM_LOCATION_UNDEFINED);
}

#[test]
fn xnack_is_queried_with_minus_one_and_enabled_on_gfx90a_only() {
    let e = env(Preset::mi210x2());
    assert!(!e.kfd.xnack_mode().unwrap());
    e.kfd.set_xnack_mode(true).unwrap();
    assert!(e.kfd.xnack_mode().unwrap());
    let e = env(Preset::mi100x4());
    assert_eq!(errno(e.kfd.set_xnack_mode(true)), Some(Errno::EPERM));
}

#[test]
fn smi_events_give_an_fd() {
    let e = env(Preset::mi50x1());
    let fd = e.kfd.smi_events(e.gpus[0]).unwrap();
    assert!(kfd_sim::host::file_key(fd.as_fd()).is_ok());
}

/// An SMI event fd with no event is empty as the driver's: poll does not report it readable
/// (a poll blocks), a read answers EAGAIN rather than end of file, and the event mask is
/// written to it. Closing it and opening another works.
#[test]
fn an_smi_fd_without_events_blocks_in_poll_and_reads_eagain() {
    use std::io::{Read, Write};
    let e = env(Preset::mi50x1());
    let fd = e.kfd.smi_events(e.gpus[0]).unwrap();
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    let n = unsafe { libc::poll(&mut pfd, 1, 100) };
    assert_eq!((n, pfd.revents), (0, 0), "not readable, no hang-up");
    let mut f = std::fs::File::from(fd);
    let mut buf = [0u8; 64];
    let err = f.read(&mut buf).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EAGAIN));
    let mask = 1u64 << (sys::KFD_SMI_EVENT_VMFAULT - 1);
    assert_eq!(f.write(&mask.to_le_bytes()).unwrap(), 8);
    drop(f);
    let again = e.kfd.smi_events(e.gpus[0]).unwrap();
    let mut g = std::fs::File::from(again);
    assert_eq!(
        g.read(&mut buf).unwrap_err().raw_os_error(),
        Some(libc::EAGAIN)
    );
}

#[test]
fn dmabufs_of_a_checkpoint_are_known_and_importable() {
    let e = env(Preset::mi100x4());
    let a = e.kfd.alloc_memory(VA, 2 * MIB, e.gpus[0], VRAM_W).unwrap();
    let info = e.kfd.criu_process_info().unwrap();
    let ckpt = e.kfd.criu_checkpoint(&info).unwrap();
    e.kfd.criu_unpause().unwrap();
    let buf = ckpt.bos[0].dmabuf.as_ref().unwrap();
    let i = e.kfd.get_dmabuf_info(buf.as_fd(), None).unwrap();
    assert_eq!((i.size, i.gpu_id), (2 * MIB, e.gpus[0].get()));
    assert!(i.flags.contains(AllocFlags::VRAM));
    // VRAM allocated without PUBLIC is not CPU_ACCESS_REQUIRED: no PUBLIC flag.
    assert!(!i.flags.contains(AllocFlags::PUBLIC));
    let h = e
        .kfd
        .import_dmabuf(VA + 16 * MIB, e.gpus[0], buf.as_fd())
        .unwrap();
    assert_eq!(h.idr(), 1);
    assert_ne!(h, a.handle);
    // Not a dma-buf: EINVAL; importing on another GPU: EINVAL.
    let null = std::fs::File::open("/dev/null").unwrap();
    assert_eq!(
        errno(e.kfd.get_dmabuf_info(null.as_fd(), None)),
        Some(Errno::EINVAL)
    );
    assert_eq!(
        errno(e.kfd.import_dmabuf(VA + 32 * MIB, e.gpus[1], buf.as_fd())),
        Some(Errno::EINVAL)
    );
    assert_eq!(
        errno(e.kfd.import_dmabuf(VA + 32 * MIB, e.gpus[0], null.as_fd())),
        Some(Errno::EINVAL)
    );
    // dma_buf_get comes first: a file that is not a dma-buf is EINVAL also for a GPU without a
    // VM (which would be ENODEV).
    let (m, _p, k) = bare(Preset::mi100x4());
    let g0 = gpu(m.gpu_ids()[0]);
    assert_eq!(
        errno(k.import_dmabuf(VA, g0, null.as_fd())),
        Some(Errno::EINVAL)
    );
}

/// `amdgpu_amdkfd_get_dmabuf_info` reports PUBLIC only for BOs created CPU_ACCESS_REQUIRED:
/// VRAM allocated PUBLIC, not GTT (created without flags) and not VRAM without PUBLIC, on a
/// large-BAR board too.
#[rstest]
#[case::vram(AllocFlags::VRAM, false)]
#[case::public_vram(AllocFlags::VRAM | AllocFlags::PUBLIC, true)]
#[case::gtt(AllocFlags::GTT, false)]
fn dmabuf_info_is_public_only_for_cpu_access_required_bos(
    #[case] domain: AllocFlags,
    #[case] public: bool,
) {
    let e = env(Preset::mi210x2());
    e.kfd
        .alloc_memory(VA, 2 * MIB, e.gpus[0], domain | AllocFlags::WRITABLE)
        .unwrap();
    let info = e.kfd.criu_process_info().unwrap();
    let ckpt = e.kfd.criu_checkpoint(&info).unwrap();
    e.kfd.criu_unpause().unwrap();
    let buf = ckpt.bos[0].dmabuf.as_ref().unwrap();
    let i = e.kfd.get_dmabuf_info(buf.as_fd(), None).unwrap();
    assert_eq!(i.flags.contains(AllocFlags::PUBLIC), public);
    assert_eq!(
        i.flags.contains(AllocFlags::GTT),
        domain.contains(AllocFlags::GTT)
    );
}

#[test]
fn wave_state_of_an_evicted_idle_compute_queue_is_an_empty_control_stack() {
    let e = env(Preset::mi100x4());
    let q = create_queue(&e, &aql(&e, 0)).unwrap();
    let mut stack = vec![1u8; 0x1000];
    // SAFETY: `stack` is a live buffer of the declared size.
    let active = unsafe { e.kfd.get_queue_wave_state(q.queue_id, &mut stack) };
    assert_eq!(errno(active), Some(Errno::EINVAL), "active");
    e.kfd.criu_process_info().unwrap();
    // SAFETY: as above.
    // No wave was in flight: nothing is saved (the MQD's cntl_stack_offset is the stack's
    // size, its wg_state_offset too), and nothing is copied out.
    let (used, data) = unsafe { e.kfd.get_queue_wave_state(q.queue_id, &mut stack) }.unwrap();
    assert_eq!((used, data), (0, 0));
    assert!(stack.iter().all(|&b| b == 1));
}

#[test]
fn a_second_open_shares_the_process_and_exit_frees_its_vram() {
    let e = env(Preset::mi50x1());
    let again = e.proc.open_kfd().unwrap();
    let kfd2 = kfd_abi::Kfd::new(again, "/dev/kfd");
    e.kfd.alloc_memory(VA, 4 * MIB, e.gpus[0], VRAM_W).unwrap();
    assert_eq!(
        kfd2.alloc_memory(VA + 4 * MIB, 4 * MIB, e.gpus[0], VRAM_W)
            .unwrap()
            .handle
            .idr(),
        1
    );
    let machine = e.machine.clone();
    let id = e.gpus[0].get();
    assert_eq!(machine.vram_used(id), Some(8 * MIB));
    drop(kfd2);
    drop(e);
    assert_eq!(machine.vram_used(id), Some(0));
}

/// Runs one bad-input scenario and returns the errno it produced.
fn scenario(name: &str) -> Option<Errno> {
    let e = env(Preset::mi100x4());
    let (g0, g1) = (e.gpus[0], e.gpus[1]);
    let t = e.kfd.transport();
    match name {
        "unknown_ioctl_number" => {
            let mut a = [0u8; 8];
            raw(t, encode(Dir::ReadWrite, b'K', 0x30, 8), &mut a).err()
        }
        "number_zero" => {
            let mut a = [0u8; 8];
            raw(t, encode(Dir::ReadWrite, b'K', 0, 8), &mut a).err()
        }
        // What libhsakmt 5.2 issues at start-up: the ROCm DKMS driver's DBG_TRAP.
        "rocm_dkms_dbg_trap" => {
            let mut a = [0u8; 40];
            raw(t, encode(Dir::ReadWrite, b'K', 0x82, 40), &mut a).err()
        }
        // KFD 1.12's EXPORT_DMABUF, past 1.11's table.
        "export_dmabuf_of_kfd_1_12" => {
            let mut a = [0u8; 16];
            raw(t, encode(Dir::ReadWrite, b'K', 0x24, 16), &mut a).err()
        }
        "deprecated_debug_ioctl" => {
            let mut a = sys::kfd_ioctl_dbg_register_args {
                gpu_id: g0.get(),
                pad: 0,
            };
            raw(t, codes::DBG_REGISTER_DEPRECATED, &mut a).err()
        }
        "wild_argument_pointer" => {
            // SAFETY: the simulator reaches the address through process_vm_readv only.
            unsafe { kfd_abi::Transport::ioctl(t, codes::GET_VERSION, 0x10 as *mut _) }.err()
        }
        "kernel_space_argument_pointer" => {
            // SAFETY: as above.
            unsafe {
                kfd_abi::Transport::ioctl(
                    t,
                    codes::ALLOC_MEMORY_OF_GPU,
                    0xffff_8000_0000_0000u64 as *mut _,
                )
            }
            .err()
        }
        "alloc_zero_size" => errno(e.kfd.alloc_memory(VA, 0, g0, VRAM_W)),
        "alloc_unknown_gpu" => errno(e.kfd.alloc_memory(VA, 4096, gpu(0x9999), VRAM_W)),
        "alloc_no_domain" => errno(e.kfd.alloc_memory(VA, 4096, g0, AllocFlags::WRITABLE)),
        "alloc_doorbell_wrong_size" => {
            errno(e.kfd.alloc_memory(VA, 4096, g0, AllocFlags::DOORBELL))
        }
        "alloc_mmio_wrong_size" => errno(e.kfd.alloc_memory(VA, 8192, g0, AllocFlags::MMIO_REMAP)),
        "alloc_past_vram_capacity" => errno(e.kfd.alloc_memory(VA, 33 << 30, g0, VRAM_W)),
        "alloc_userptr_unmapped" => {
            // SAFETY: the address is never touched by anyone.
            errno(unsafe {
                e.kfd
                    .alloc_userptr(VA, 4096, g0, AllocFlags::WRITABLE, 0x10_0000)
            })
        }
        "alloc_over_svm_range" => {
            let buf = vec![0u8; 3 * 4096];
            let start = (buf.as_ptr() as u64 + 4095) & !4095;
            let attr = SvmAttribute {
                ty: sys::KFD_IOCTL_SVM_ATTR_GRANULARITY,
                value: 1,
            };
            e.kfd.svm_set_attr(start, 4096, &[attr]).unwrap();
            errno(e.kfd.alloc_memory(start, 4096, g0, VRAM_W))
        }
        "alloc_without_vm" => {
            let (_m, _p, k) = bare(Preset::mi100x4());
            errno(k.alloc_memory(VA, 4096, gpu(Preset::mi100x4().gpus[0].gpu_id), VRAM_W))
        }
        "free_unknown_handle" => errno(e.kfd.free_memory(MemHandle::from_parts(g0, 7))),
        "free_mapped" => {
            let a = e.kfd.alloc_memory(VA, 4096, g0, VRAM_W).unwrap();
            e.kfd.map_memory_to_gpu(a.handle, &[g0]).unwrap();
            errno(e.kfd.free_memory(a.handle))
        }
        "free_event_page" => {
            let p = e.kfd.alloc_memory(VA, 32 << 10, g0, GTT_W).unwrap();
            e.kfd
                .create_event(EventType::Signal, false, Some(p.handle))
                .unwrap();
            errno(e.kfd.free_memory(p.handle))
        }
        "map_no_devices" => {
            let a = e.kfd.alloc_memory(VA, 4096, g0, VRAM_W).unwrap();
            errno(e.kfd.map_memory_to_gpu(a.handle, &[]))
        }
        "map_n_success_past_n_devices" => {
            let a = e.kfd.alloc_memory(VA, 4096, g0, VRAM_W).unwrap();
            let ids = [g0.get()];
            let mut m = sys::kfd_ioctl_map_memory_to_gpu_args {
                handle: a.handle.get(),
                device_ids_array_ptr: ids.as_ptr() as u64,
                n_devices: 1,
                n_success: 2,
            };
            raw(t, codes::MAP_MEMORY_TO_GPU, &mut m).err()
        }
        "map_bad_device_array" => {
            let a = e.kfd.alloc_memory(VA, 4096, g0, VRAM_W).unwrap();
            let mut m = sys::kfd_ioctl_map_memory_to_gpu_args {
                handle: a.handle.get(),
                device_ids_array_ptr: 0xdead_0000,
                n_devices: 1,
                n_success: 0,
            };
            raw(t, codes::MAP_MEMORY_TO_GPU, &mut m).err()
        }
        "map_unknown_handle" => errno(e.kfd.map_memory_to_gpu(MemHandle::from_parts(g0, 5), &[g0])),
        "map_unknown_peer" => {
            let a = e.kfd.alloc_memory(VA, 4096, g0, VRAM_W).unwrap();
            errno(e.kfd.map_memory_to_gpu(a.handle, &[gpu(0x4242)]))
        }
        "map_overlapping_va" => {
            let a = e.kfd.alloc_memory(VA, 8192, g0, VRAM_W).unwrap();
            let b = e.kfd.alloc_memory(VA + 4096, 4096, g0, VRAM_W).unwrap();
            e.kfd.map_memory_to_gpu(a.handle, &[g0]).unwrap();
            errno(e.kfd.map_memory_to_gpu(b.handle, &[g0]))
        }
        "unmap_not_mapped" => {
            let a = e.kfd.alloc_memory(VA, 4096, g0, VRAM_W).unwrap();
            errno(e.kfd.unmap_memory_from_gpu(a.handle, &[g1]))
        }
        "unmap_unknown_handle" => errno(
            e.kfd
                .unmap_memory_from_gpu(MemHandle::from_parts(g0, 3), &[g0]),
        ),
        "acquire_vm_with_another_file" => {
            let other = e.proc.open_render(e.machine.render_minors()[0]).unwrap();
            errno(e.kfd.acquire_vm(g0, other.as_fd()))
        }
        "acquire_vm_with_a_non_render_fd" => {
            let (_m, _p, k) = bare(Preset::mi50x1());
            let null = std::fs::File::open("/dev/null").unwrap();
            errno(k.acquire_vm(gpu(Preset::mi50x1().gpus[0].gpu_id), null.as_fd()))
        }
        // The render file's VM is a compute VM already (this process took it for GPU 1).
        "acquire_vm_twice_with_one_render_node" => {
            let (m, p, k) = bare(Preset::mi100x4());
            let r1 = p.open_render(m.render_minors()[1]).unwrap();
            k.acquire_vm(gpu(m.gpu_ids()[1]), r1.as_fd()).unwrap();
            errno(k.acquire_vm(gpu(m.gpu_ids()[0]), r1.as_fd()))
        }
        "queue_bad_type" => errno(create_queue(
            &e,
            &QueueDesc {
                queue_type: 9,
                ..aql(&e, 0)
            },
        )),
        "queue_percentage_over_100" => errno(create_queue(
            &e,
            &QueueDesc {
                percentage: 101,
                ..aql(&e, 0)
            },
        )),
        "queue_priority_over_15" => errno(create_queue(
            &e,
            &QueueDesc {
                priority: 16,
                ..aql(&e, 0)
            },
        )),
        "queue_ring_not_power_of_two" => errno(create_queue(
            &e,
            &QueueDesc {
                ring_size: 3000,
                ..aql(&e, 0)
            },
        )),
        "queue_kernel_ring_address" => errno(create_queue(
            &e,
            &QueueDesc {
                ring_base: 0xffff_8000_0000_0000,
                ..aql(&e, 0)
            },
        )),
        "queue_unknown_gpu" => errno(create_queue(
            &e,
            &QueueDesc {
                gpu_id: 0x77,
                ..aql(&e, 0)
            },
        )),
        "queue_without_vm" => {
            let (m, _p, k) = bare(Preset::mi50x1());
            let mut d = QueueDesc::new(gpu(m.gpu_ids()[0]), QueueType::ComputeAql);
            d.ring_size = 4096;
            // SAFETY: never dereferenced.
            errno(unsafe { k.create_queue(&d) })
        }
        "queue_128th_on_a_device" => {
            for _ in 0..127 {
                create_queue(&e, &aql(&e, 0)).unwrap();
            }
            errno(create_queue(&e, &aql(&e, 0)))
        }
        "queue_no_sdma_slot" => {
            for _ in 0..16 {
                create_queue(&e, &QueueDesc::new(g0, QueueType::Sdma)).unwrap();
            }
            errno(create_queue(&e, &QueueDesc::new(g0, QueueType::Sdma)))
        }
        "destroy_unknown_queue" => errno(e.kfd.destroy_queue(QueueId(5))),
        "update_unknown_queue" => {
            // SAFETY: never dereferenced.
            errno(unsafe { e.kfd.update_queue(QueueId(9), 0, 4096, 100, 1) })
        }
        "cu_mask_not_multiple_of_32" => {
            let q = create_queue(&e, &aql(&e, 0)).unwrap();
            let mut a = sys::kfd_ioctl_set_cu_mask_args {
                queue_id: q.queue_id.get(),
                num_cu_mask: 33,
                cu_mask_ptr: 0,
            };
            raw(t, codes::SET_CU_MASK, &mut a).err()
        }
        "gws_second_queue_on_a_device" => {
            let a = create_queue(&e, &aql(&e, 0)).unwrap();
            let b = create_queue(&e, &aql(&e, 0)).unwrap();
            e.kfd.alloc_queue_gws(a.queue_id, 1).unwrap();
            errno(e.kfd.alloc_queue_gws(b.queue_id, 1))
        }
        "second_event_page" => {
            let p = e.kfd.alloc_memory(VA, 32 << 10, g0, GTT_W).unwrap();
            let q = e.kfd.alloc_memory(VA + MIB, 32 << 10, g0, GTT_W).unwrap();
            e.kfd
                .create_event(EventType::Signal, false, Some(p.handle))
                .unwrap();
            errno(e.kfd.create_event(EventType::Signal, false, Some(q.handle)))
        }
        // amdgpu_amdkfd_gpuvm_map_gtt_bo_to_kernel: "userptr can't be mapped to kernel".
        "event_page_in_userptr" => {
            let host = vec![0u8; 48 << 10];
            let cpu = (host.as_ptr() as u64 + 4095) & !4095;
            // SAFETY: `host` outlives the BO's use here (the process ends with the scenario).
            let p = unsafe {
                e.kfd
                    .alloc_userptr(VA, 32 << 10, g0, AllocFlags::WRITABLE, cpu)
            }
            .unwrap();
            errno(e.kfd.create_event(EventType::Signal, false, Some(p.handle)))
        }
        "signal_slots_exhausted" => {
            for _ in 0..256 {
                e.kfd.create_event(EventType::Signal, false, None).unwrap();
            }
            errno(e.kfd.create_event(EventType::Signal, false, None))
        }
        "set_unknown_event" => errno(e.kfd.set_event(EventId(77))),
        "set_non_signal_event" => {
            let ev = e
                .kfd
                .create_event(EventType::NodeChange, false, None)
                .unwrap();
            errno(e.kfd.set_event(ev.event_id))
        }
        "reset_unknown_event" => errno(e.kfd.reset_event(EventId(3))),
        "destroy_unknown_event" => errno(e.kfd.destroy_event(EventId(3))),
        "wait_unknown_event" => errno(e.kfd.wait_events(&[EventId(12)], false, 0)),
        "wait_bad_event_array" => {
            let mut a = sys::kfd_ioctl_wait_events_args {
                events_ptr: 0x30,
                num_events: 1,
                wait_for_all: 0,
                timeout: 0,
                wait_result: 0,
            };
            raw(t, codes::WAIT_EVENTS, &mut a).err()
        }
        "svm_unknown_gpu" => {
            let buf = vec![0u8; 2 * 4096];
            let start = (buf.as_ptr() as u64 + 4095) & !4095;
            let attr = SvmAttribute {
                ty: sys::KFD_IOCTL_SVM_ATTR_ACCESS,
                value: 0x1234,
            };
            errno(e.kfd.svm_set_attr(start, 4096, &[attr]))
        }
        "svm_unaligned_start"
        | "svm_unaligned_size"
        | "svm_start_zero"
        | "svm_prefetch_undefined"
        | "svm_get_no_access_as_input"
        | "svm_get_bad_type_of_unmapped_range" => {
            let buf = vec![0u8; 3 * 4096];
            let start = (buf.as_ptr() as u64 + 4095) & !4095;
            let attr = |ty, value| SvmAttribute { ty, value };
            let gran = attr(sys::KFD_IOCTL_SVM_ATTR_GRANULARITY, 1);
            match name {
                "svm_unaligned_start" => errno(e.kfd.svm_set_attr(start + 8, 4096, &[gran])),
                "svm_unaligned_size" => errno(e.kfd.svm_set_attr(start, 4000, &[gran])),
                "svm_start_zero" => errno(e.kfd.svm_set_attr(0, 4096, &[gran])),
                "svm_prefetch_undefined" => {
                    let undefined = sys::KFD_IOCTL_SVM_LOCATION_UNDEFINED;
                    let a = attr(sys::KFD_IOCTL_SVM_ATTR_PREFETCH_LOC, undefined);
                    errno(e.kfd.svm_set_attr(start, 4096, &[a]))
                }
                "svm_get_no_access_as_input" => {
                    let mut a = [attr(sys::KFD_IOCTL_SVM_ATTR_NO_ACCESS, e.gpus[0].get())];
                    errno(e.kfd.svm_get_attr(start, 4096, &mut a))
                }
                // The range is checked before the attribute types.
                _ => {
                    let mut a = [attr(0x7777, 0)];
                    errno(e.kfd.svm_get_attr(0x1000_0000_0000, 4096, &mut a))
                }
            }
        }
        // start and size only: the kernel zero-fills op (SET_ATTR) and nattr (0), but the
        // caller's 16 bytes do not hold the 24-byte header (6.1.y's kfd_ioctl_svm_validate).
        "svm_size_short_of_the_header" => {
            let buf = vec![0u8; 2 * 4096];
            let start = (buf.as_ptr() as u64 + 4095) & !4095;
            let mut a = [start, 4096u64];
            raw(t, encode(Dir::ReadWrite, b'K', 0x20, 16), &mut a).err()
        }
        "svm_unmapped_range" => {
            let attr = SvmAttribute {
                ty: sys::KFD_IOCTL_SVM_ATTR_GRANULARITY,
                value: 1,
            };
            errno(e.kfd.svm_set_attr(0x1000_0000_0000, 4096, &[attr]))
        }
        "xnack_change_with_queues" => {
            create_queue(&e, &aql(&e, 0)).unwrap();
            errno(e.kfd.set_xnack_mode(false))
        }
        "available_memory_unknown_gpu" => errno(e.kfd.available_memory(gpu(3))),
        "tile_config_unknown_gpu" => errno(e.kfd.get_tile_config(gpu(3))),
        "scratch_unknown_gpu" => errno(e.kfd.set_scratch_backing_va(gpu(3), 0)),
        "trap_handler_unknown_gpu" => errno(e.kfd.set_trap_handler(gpu(3), 0, 0)),
        "memory_policy_bad_policy" => {
            let mut a = sys::kfd_ioctl_set_memory_policy_args {
                gpu_id: g0.get(),
                default_policy: 7,
                ..Default::default()
            };
            raw(t, codes::SET_MEMORY_POLICY, &mut a).err()
        }
        "smi_unknown_gpu" => errno(e.kfd.smi_events(gpu(3))),
        "fd_used_by_another_process" => {
            let other = e.machine.spawn_process();
            let k = kfd_abi::Kfd::new(t.used_by(&other).unwrap(), "/dev/kfd");
            errno(k.get_version())
        }
        "criu_without_capability" => {
            e.proc.set_capable(false);
            errno(e.kfd.criu_process_info())
        }
        "criu_by_a_non_tracer" => {
            let criu = e.machine.spawn_process();
            let k = kfd_abi::Kfd::new(t.used_by(&criu).unwrap(), "/dev/kfd");
            errno(k.criu_process_info())
        }
        "criu_unknown_op" => {
            let mut a = sys::kfd_ioctl_criu_args {
                op: 9,
                ..Default::default()
            };
            raw(t, codes::CRIU_OP, &mut a).err()
        }
        "checkpoint_without_pause" => {
            let mut a = sys::kfd_ioctl_criu_args {
                op: 1,
                devices: 8,
                bos: 8,
                priv_data: 8,
                ..Default::default()
            };
            raw(t, codes::CRIU_OP, &mut a).err()
        }
        "checkpoint_null_buckets" => {
            e.kfd.criu_process_info().unwrap();
            let mut a = sys::kfd_ioctl_criu_args {
                op: 1,
                ..Default::default()
            };
            raw(t, codes::CRIU_OP, &mut a).err()
        }
        "checkpoint_counts_changed" => {
            let info = e.kfd.criu_process_info().unwrap();
            e.kfd.alloc_memory(VA, 4096, g0, VRAM_W).unwrap();
            errno(e.kfd.criu_checkpoint(&info))
        }
        "unpause_without_pause" => errno(e.kfd.criu_unpause()),
        "process_info_without_gpus" => {
            let mut p = Preset::mi50x1();
            p.gpus.clear();
            let (_m, _p, k) = bare(p);
            errno(k.criu_process_info())
        }
        "resume_unknown_pid" => errno(e.kfd.criu_resume(4_000_000)),
        "resume_without_restore" => errno(e.kfd.criu_resume(e.proc.pid())),
        // BOs announced without their array (no BOs and no array is a valid restore).
        "restore_bos_without_an_array" => {
            let mut a = sys::kfd_ioctl_criu_args {
                op: 3,
                devices: 8,
                priv_data: 8,
                priv_data_size: 8,
                num_devices: 4,
                num_bos: 1,
                ..Default::default()
            };
            raw(t, codes::CRIU_OP, &mut a).err()
        }
        "open_while_kfd_locked" => {
            e.machine.set_kfd_locked(true);
            let p = e.machine.spawn_process();
            p.open_kfd()
                .err()
                .and_then(|err| err.raw_os_error())
                .map(Errno)
        }
        other => panic!("no scenario {other}"),
    }
}

#[rstest]
#[case::unknown_ioctl_number("unknown_ioctl_number", Errno::ENOTTY)]
#[case::number_zero("number_zero", Errno::ENOTTY)]
#[case::rocm_dkms_dbg_trap("rocm_dkms_dbg_trap", Errno::ENOTTY)]
#[case::export_dmabuf_of_kfd_1_12("export_dmabuf_of_kfd_1_12", Errno::ENOTTY)]
#[case::deprecated_debug_ioctl("deprecated_debug_ioctl", Errno::EPERM)]
#[case::wild_argument_pointer("wild_argument_pointer", Errno::EFAULT)]
#[case::kernel_space_argument_pointer("kernel_space_argument_pointer", Errno::EFAULT)]
#[case::alloc_zero_size("alloc_zero_size", Errno::EINVAL)]
#[case::alloc_unknown_gpu("alloc_unknown_gpu", Errno::EINVAL)]
#[case::alloc_no_domain("alloc_no_domain", Errno::EINVAL)]
#[case::alloc_doorbell_wrong_size("alloc_doorbell_wrong_size", Errno::EINVAL)]
#[case::alloc_mmio_wrong_size("alloc_mmio_wrong_size", Errno::EINVAL)]
#[case::alloc_past_vram_capacity("alloc_past_vram_capacity", Errno::ENOMEM)]
#[case::alloc_userptr_unmapped("alloc_userptr_unmapped", Errno::EFAULT)]
#[case::alloc_over_svm_range("alloc_over_svm_range", Errno::EADDRINUSE)]
#[case::alloc_without_vm("alloc_without_vm", Errno::ENODEV)]
#[case::free_unknown_handle("free_unknown_handle", Errno::EINVAL)]
#[case::free_mapped("free_mapped", Errno::EBUSY)]
#[case::free_event_page("free_event_page", Errno::EPERM)]
#[case::map_no_devices("map_no_devices", Errno::EINVAL)]
#[case::map_n_success_past_n_devices("map_n_success_past_n_devices", Errno::EINVAL)]
#[case::map_bad_device_array("map_bad_device_array", Errno::EFAULT)]
#[case::map_unknown_handle("map_unknown_handle", Errno::ENOMEM)]
#[case::map_unknown_peer("map_unknown_peer", Errno::EINVAL)]
#[case::map_overlapping_va("map_overlapping_va", Errno::EINVAL)]
#[case::unmap_not_mapped("unmap_not_mapped", Errno::EINVAL)]
#[case::unmap_unknown_handle("unmap_unknown_handle", Errno::ENOMEM)]
#[case::acquire_vm_with_another_file("acquire_vm_with_another_file", Errno::EBUSY)]
#[case::acquire_vm_with_a_non_render_fd("acquire_vm_with_a_non_render_fd", Errno::EINVAL)]
#[case::acquire_vm_twice_with_one_render_node(
    "acquire_vm_twice_with_one_render_node",
    Errno::EINVAL
)]
#[case::queue_bad_type("queue_bad_type", Errno::ENOTSUPP)]
#[case::queue_percentage_over_100("queue_percentage_over_100", Errno::EINVAL)]
#[case::queue_priority_over_15("queue_priority_over_15", Errno::EINVAL)]
#[case::queue_ring_not_power_of_two("queue_ring_not_power_of_two", Errno::EINVAL)]
#[case::queue_kernel_ring_address("queue_kernel_ring_address", Errno::EFAULT)]
#[case::queue_unknown_gpu("queue_unknown_gpu", Errno::EINVAL)]
#[case::queue_without_vm("queue_without_vm", Errno::ESRCH)]
#[case::queue_128th_on_a_device("queue_128th_on_a_device", Errno::ENOSPC)]
#[case::queue_no_sdma_slot("queue_no_sdma_slot", Errno::ENOMEM)]
#[case::destroy_unknown_queue("destroy_unknown_queue", Errno::EINVAL)]
#[case::update_unknown_queue("update_unknown_queue", Errno::EFAULT)]
#[case::cu_mask_not_multiple_of_32("cu_mask_not_multiple_of_32", Errno::EINVAL)]
#[case::gws_second_queue_on_a_device("gws_second_queue_on_a_device", Errno::EBUSY)]
#[case::second_event_page("second_event_page", Errno::EINVAL)]
#[case::event_page_in_userptr("event_page_in_userptr", Errno::EINVAL)]
#[case::signal_slots_exhausted("signal_slots_exhausted", Errno::ENOSPC)]
#[case::set_unknown_event("set_unknown_event", Errno::EINVAL)]
#[case::set_non_signal_event("set_non_signal_event", Errno::EINVAL)]
#[case::reset_unknown_event("reset_unknown_event", Errno::EINVAL)]
#[case::destroy_unknown_event("destroy_unknown_event", Errno::EINVAL)]
#[case::wait_unknown_event("wait_unknown_event", Errno::EINVAL)]
#[case::wait_bad_event_array("wait_bad_event_array", Errno::EFAULT)]
#[case::svm_unknown_gpu("svm_unknown_gpu", Errno::EINVAL)]
#[case::svm_unmapped_range("svm_unmapped_range", Errno::EFAULT)]
#[case::svm_size_short_of_the_header("svm_size_short_of_the_header", Errno::EINVAL)]
#[case::svm_unaligned_start("svm_unaligned_start", Errno::EINVAL)]
#[case::svm_unaligned_size("svm_unaligned_size", Errno::EINVAL)]
#[case::svm_start_zero("svm_start_zero", Errno::EINVAL)]
#[case::svm_prefetch_undefined("svm_prefetch_undefined", Errno::EINVAL)]
#[case::svm_get_no_access_as_input("svm_get_no_access_as_input", Errno::EINVAL)]
#[case::svm_get_bad_type_of_unmapped_range("svm_get_bad_type_of_unmapped_range", Errno::EFAULT)]
#[case::xnack_change_with_queues("xnack_change_with_queues", Errno::EBUSY)]
#[case::available_memory_unknown_gpu("available_memory_unknown_gpu", Errno::EINVAL)]
#[case::tile_config_unknown_gpu("tile_config_unknown_gpu", Errno::EINVAL)]
#[case::scratch_unknown_gpu("scratch_unknown_gpu", Errno::EINVAL)]
#[case::trap_handler_unknown_gpu("trap_handler_unknown_gpu", Errno::EINVAL)]
#[case::memory_policy_bad_policy("memory_policy_bad_policy", Errno::EINVAL)]
#[case::smi_unknown_gpu("smi_unknown_gpu", Errno::EINVAL)]
#[case::fd_used_by_another_process("fd_used_by_another_process", Errno::EBADF)]
#[case::criu_without_capability("criu_without_capability", Errno::EACCES)]
#[case::criu_by_a_non_tracer("criu_by_a_non_tracer", Errno::EBADF)]
#[case::criu_unknown_op("criu_unknown_op", Errno::EINVAL)]
#[case::checkpoint_without_pause("checkpoint_without_pause", Errno::EINVAL)]
#[case::checkpoint_null_buckets("checkpoint_null_buckets", Errno::EINVAL)]
#[case::checkpoint_counts_changed("checkpoint_counts_changed", Errno::EINVAL)]
#[case::unpause_without_pause("unpause_without_pause", Errno::EINVAL)]
#[case::process_info_without_gpus("process_info_without_gpus", Errno::ENODEV)]
#[case::resume_unknown_pid("resume_unknown_pid", Errno::ESRCH)]
#[case::resume_without_restore("resume_without_restore", Errno::EINVAL)]
#[case::restore_bos_without_an_array("restore_bos_without_an_array", Errno::EINVAL)]
#[case::open_while_kfd_locked("open_while_kfd_locked", Errno::EAGAIN)]
fn bad_input_gets_the_kernels_errno(#[case] name: &str, #[case] want: Errno) {
    assert_eq!(scenario(name), Some(want), "{name}");
}

/// A process in a device cgroup that allows one render node of two (a container's `--device`)
/// sees one GPU, as the driver's `kfd_init_apertures` leaves it: its `/dev/kfd` has no record
/// of the other (apertures list one GPU, an ioctl naming the other is `EINVAL`), and the other
/// render node does not open (`EPERM`).
#[test]
fn a_device_cgroup_limits_the_gpus_a_process_has() {
    let machine = kfd_sim::Machine::new(&Preset::mi210x2()).unwrap();
    let (gpus, minors) = (machine.gpu_ids(), machine.render_minors());
    let proc = machine.spawn_process();
    proc.set_device_cgroup(Some(&minors[1..]));
    let err = proc.open_render(minors[0]).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EPERM));
    let render = proc.open_render(minors[1]).unwrap();
    let kfd = kfd_abi::Kfd::new(proc.open_kfd().unwrap(), "/dev/kfd");
    let own: Vec<u32> = kfd
        .get_process_apertures_new()
        .unwrap()
        .iter()
        .map(|a| a.gpu_id)
        .collect();
    assert_eq!(own, vec![gpus[1]]);
    assert_eq!(
        errno(kfd.alloc_memory(VA, 4096, gpu(gpus[0]), VRAM_W)),
        Some(Errno::EINVAL)
    );
    assert_eq!(
        errno(kfd.acquire_vm(gpu(gpus[0]), render.as_fd())),
        Some(Errno::EINVAL)
    );
    kfd.acquire_vm(gpu(gpus[1]), render.as_fd()).unwrap();
    kfd.alloc_memory(VA, 4096, gpu(gpus[1]), VRAM_W).unwrap();
}
