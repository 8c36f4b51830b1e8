//! Ioctls on events (`kfd_events.c`): creating and destroying them with their ids and signal
//! slots, the signal page, setting and resetting, waiting (interruptibly, with the driver's
//! results); and the SMI event fd (`kfd_smi_events.c`).

use std::collections::{BTreeSet, HashSet};
use std::io::Read as _;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kfd_abi::mmap_offset as mo;
use kfd_abi::Errno;
use kfd_sys as sys;

use super::memory::handle_parts;
use super::{kmalloc_check, KfdCall};
use crate::client::{Client, FdSlot};
use crate::host::Pod;
use crate::limits::*;
use crate::state::event::{waiter, Event, SignalPage};
use crate::state::process::ProcState;
use crate::uaccess::{
    copy_from_user, copy_struct_from_user, copy_to_user, fd_to_field, with_args, IoctlResult,
};

/// `kfd_kmap_event_page`: the BO behind `handle` becomes the signal page.
///
/// The driver maps it with `amdgpu_amdkfd_gpuvm_map_gtt_bo_to_kernel`, which refuses a userptr
/// BO (`EINVAL`) and pins any other BO in GTT: a VRAM BO is moved to system memory and serves
/// (6.1 creates KFD VRAM without NO_CPU_ACCESS, so the kernel mapping succeeds). Doorbell and
/// MMIO BOs have no pages of their own to map; the simulator refuses them (`EINVAL`).
pub(super) fn kmap_event_page(st: &mut ProcState, handle: u64) -> Result<(), Errno> {
    if st.signal.is_some() {
        return Err(Errno::EINVAL);
    }
    let (gpu_id, idr) = handle_parts(handle);
    let pi = st.pdd_by_user_id(gpu_id).ok_or(Errno::EINVAL)?;
    st.bind(pi)?;
    let bo = st
        .pdds
        .get(pi)
        .and_then(|p| p.bos.get(&idr))
        .ok_or(Errno::EINVAL)?;
    let backing = match &bo.backing {
        Some(b) if bo.flags & sys::KFD_IOC_ALLOC_MEM_FLAGS_USERPTR == 0 => Arc::clone(b),
        _ => return Err(Errno::EINVAL),
    };
    let slots = u32::try_from(bo.size / 8)
        .unwrap_or(u32::MAX)
        .min(SIGNAL_EVENT_LIMIT);
    let init_len = usize::try_from((u64::from(slots) * 8).min(backing.size)).unwrap_or(0);
    let init = vec![0xffu8; init_len];
    backing.write(0, &init);
    st.signal = Some(SignalPage {
        handle,
        backing: Some(backing),
        slots,
    });
    Ok(())
}

/// Creates an event (with its id at restore). Returns the id.
pub(super) fn create_event_locked(
    st: &mut ProcState,
    ty: u32,
    auto_reset: bool,
    signaled: bool,
    restore_id: Option<u32>,
) -> Result<u32, Errno> {
    let id = if Event::is_signal(ty) {
        let page = st.signal.get_or_insert_with(|| SignalPage {
            handle: 0,
            backing: None,
            slots: DEFAULT_SIGNAL_SLOTS,
        });
        let slots = page.slots;
        if st.signal_event_count >= slots {
            return Err(Errno::ENOSPC);
        }
        let id = match restore_id {
            Some(id) if st.events.contains_key(&id) => return Err(Errno::ENOSPC),
            Some(id) => id,
            None => (0..slots)
                .find(|i| !st.events.contains_key(i))
                .ok_or(Errno::ENOSPC)?,
        };
        if let Some(b) = st.signal.as_ref().and_then(|p| p.backing.as_ref()) {
            b.write(u64::from(id) * 8, &u64::MAX.to_le_bytes());
        }
        st.signal_event_count += 1;
        id
    } else {
        match restore_id {
            // idr_alloc(id, id + 1): a negative start is EINVAL, a taken id ENOSPC; a free id
            // below the non-signal range is taken as it is (only new ids start at 2^30).
            Some(id) if id > LAST_NONSIGNAL_EVENT_ID => return Err(Errno::EINVAL),
            Some(id) if st.events.contains_key(&id) => return Err(Errno::ENOSPC),
            Some(id) => id,
            None => {
                let mut cand = FIRST_NONSIGNAL_EVENT_ID;
                for &id in st
                    .events
                    .range(FIRST_NONSIGNAL_EVENT_ID..)
                    .map(|(id, _)| id)
                {
                    if id != cand {
                        break;
                    }
                    cand = cand.checked_add(1).ok_or(Errno::ENOSPC)?;
                }
                if cand > LAST_NONSIGNAL_EVENT_ID {
                    return Err(Errno::ENOSPC);
                }
                cand
            }
        }
    };
    st.events.insert(
        id,
        Event {
            ty,
            auto_reset,
            signaled,
            waiters: Vec::new(),
            exception: [0; 32],
        },
    );
    Ok(id)
}

pub(super) fn create_event(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(kdata, |a: &mut sys::kfd_ioctl_create_event_args| {
        let mut st = call.process.lock();
        if a.event_page_offset != 0 {
            kmap_event_page(&mut st, a.event_page_offset)?;
        }
        a.event_page_offset = 0;
        let id = create_event_locked(&mut st, a.event_type, a.auto_reset != 0, false, None)?;
        if Event::is_signal(a.event_type) {
            a.event_page_offset = mo::TYPE_EVENTS;
            a.event_slot_index = id;
        }
        a.event_id = id;
        a.event_trigger_data = id;
        Ok(0)
    })
}

pub(super) fn destroy_event(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(kdata, |a: &mut sys::kfd_ioctl_destroy_event_args| {
        let mut st = call.process.lock();
        let ev = st.events.remove(&a.event_id).ok_or(Errno::EINVAL)?;
        for w in &ev.waiters {
            w.store(waiter::GONE, Ordering::SeqCst);
        }
        if Event::is_signal(ev.ty) {
            st.signal_event_count = st.signal_event_count.saturating_sub(1);
        }
        call.process.events_cv.notify_all();
        Ok(0)
    })
}

/// `UNSIGNALED_EVENT_SLOT`: what a signal slot holds until the GPU writes it.
const UNSIGNALED_SLOT: u64 = u64::MAX;

/// The value of signal slot `id` (unsignaled if the page has no memory there).
fn slot_value(st: &ProcState, id: u32) -> u64 {
    let mut b = [0u8; 8];
    match st.signal.as_ref().and_then(|p| p.backing.as_ref()) {
        Some(page) if page.read(u64::from(id) * 8, &mut b) => u64::from_le_bytes(b),
        _ => UNSIGNALED_SLOT,
    }
}

/// `set_event_from_interrupt`: a signal or debug event is acknowledged (its slot unsignaled
/// again) and set.
fn set_event_from_interrupt(st: &mut ProcState, id: u32) -> bool {
    let Some(ev) = st.events.get_mut(&id) else {
        return false;
    };
    if !Event::is_signal(ev.ty) {
        return false;
    }
    ev.set();
    if let Some(page) = st.signal.as_ref().and_then(|p| p.backing.as_ref()) {
        page.write(u64::from(id) * 8, &UNSIGNALED_SLOT.to_le_bytes());
    }
    true
}

/// `kfd_signal_event_interrupt`: an interrupt naming (the low `valid_bits` bits of) an event id,
/// as an SDMA TRAP or a CP end-of-pipe interrupt delivers it. The event is set if its slot was
/// written; otherwise (a wrong id) every event whose slot was written is. Returns how many were
/// set; the caller wakes the waiters.
pub(crate) fn signal_event_interrupt(
    st: &mut ProcState,
    partial_id: u32,
    valid_bits: u32,
) -> usize {
    if st.signal.is_none() {
        return 0;
    }
    // With 28 valid bits and 4096 slots the id is whole: one lookup (the driver's fast path).
    let whole = valid_bits > 31 || (1u64 << valid_bits) >= u64::from(SIGNAL_EVENT_LIMIT);
    if valid_bits > 0
        && whole
        && partial_id < SIGNAL_EVENT_LIMIT
        && slot_value(st, partial_id) != UNSIGNALED_SLOT
        && set_event_from_interrupt(st, partial_id)
    {
        return 1;
    }
    // The id was wrong: every event whose slot was written.
    let written: Vec<u32> = st
        .events
        .range(..SIGNAL_EVENT_LIMIT)
        .map(|(&id, _)| id)
        .filter(|&id| slot_value(st, id) != UNSIGNALED_SLOT)
        .collect();
    written
        .into_iter()
        .filter(|&id| set_event_from_interrupt(st, id))
        .count()
}

/// `kfd_signal_vm_fault_event`: a GPU VM fault of the process on GPU `gpu_id` (the id the
/// process knows) at `va` sets every memory event with the fault's exception data
/// (`kfd_hsa_memory_exception_data`: failure flags NotPresent, ReadOnly, NoExecute, imprecise;
/// the faulting page's address; the GPU). Returns how many were set; the caller wakes the
/// waiters.
pub(crate) fn signal_vm_fault(st: &mut ProcState, gpu_id: u32, va: u64, write: bool) -> usize {
    let mut data = [0u8; 32];
    // Not present; read-only too for a write (the simulator does not tell the two apart).
    data[0..4].copy_from_slice(&1u32.to_le_bytes());
    data[4..8].copy_from_slice(&u32::from(write).to_le_bytes());
    data[16..24].copy_from_slice(&(va & !(PAGE_SIZE - 1)).to_le_bytes());
    data[24..28].copy_from_slice(&gpu_id.to_le_bytes());
    let mut set = 0;
    for ev in st.events.values_mut() {
        if ev.ty == sys::KFD_IOC_EVENT_MEMORY {
            ev.exception = data;
            ev.set();
            set += 1;
        }
    }
    set
}

/// The signal event `id` that SET_EVENT and RESET_EVENT act on: `EINVAL` if there is none, or
/// it is of another type.
fn signal_event(st: &mut ProcState, id: u32) -> Result<&mut Event, Errno> {
    let ev = st.events.get_mut(&id).ok_or(Errno::EINVAL)?;
    if ev.ty != sys::KFD_IOC_EVENT_SIGNAL {
        return Err(Errno::EINVAL);
    }
    Ok(ev)
}

pub(super) fn set_event(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(kdata, |a: &mut sys::kfd_ioctl_set_event_args| {
        let mut st = call.process.lock();
        signal_event(&mut st, a.event_id)?.set();
        call.process.events_cv.notify_all();
        Ok(0)
    })
}

pub(super) fn reset_event(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(kdata, |a: &mut sys::kfd_ioctl_reset_event_args| {
        let mut st = call.process.lock();
        signal_event(&mut st, a.event_id)?.signaled = false;
        Ok(0)
    })
}

const EVENT_DATA_SIZE: u64 = std::mem::size_of::<sys::kfd_event_data>() as u64;

/// Size of the kernel's per-event waiter record (for its allocation limit).
const WAITER_SIZE: u64 = 56;

const TIMEOUT_INFINITE: u32 = 0xffff_ffff;

pub(super) fn wait_events(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(kdata, |a: &mut sys::kfd_ioctl_wait_events_args| {
        let r = wait_on_events(call, a);
        match r {
            Ok(result) => {
                a.wait_result = result;
                if result == sys::KFD_IOC_WAIT_RESULT_FAIL {
                    return Err(Errno::EIO);
                }
                Ok(0)
            }
            Err(e) => {
                a.wait_result = sys::KFD_IOC_WAIT_RESULT_FAIL;
                Err(e)
            }
        }
    })
}

/// The caller's array of `kfd_event_data`, read a batch at a time where the driver copies one
/// element at a time: the same outcome for fewer copies. A batch that faults is given up for a
/// copy of the one element asked for, so the first element that faults fails where the
/// driver's copy does.
struct EventSlots<'c> {
    client: &'c dyn Client,
    base: u64,
    first: u64,
    batch: Vec<u8>,
}

impl<'c> EventSlots<'c> {
    const BATCH: u64 = 1024;

    fn new(client: &'c dyn Client, base: u64) -> Self {
        Self {
            client,
            base,
            first: 0,
            batch: Vec::new(),
        }
    }

    /// Element `i` of `n`.
    fn get(&mut self, i: u64, n: u64) -> Result<sys::kfd_event_data, Errno> {
        let size = std::mem::size_of::<sys::kfd_event_data>();
        let held = (self.batch.len() / size) as u64;
        if !(self.first..self.first + held).contains(&i) {
            let count = (n - i).min(Self::BATCH);
            let addr = self
                .base
                .checked_add(i * EVENT_DATA_SIZE)
                .ok_or(Errno::EFAULT)?;
            self.first = i;
            self.batch.clear();
            if let Ok(bytes) = copy_from_user(self.client, addr, count * EVENT_DATA_SIZE) {
                self.batch = bytes;
            } else {
                return copy_struct_from_user(self.client, addr);
            }
        }
        let at = usize::try_from(i - self.first).map_err(|_| Errno::EFAULT)? * size;
        sys::kfd_event_data::read_from(&self.batch[at..at + size]).ok_or(Errno::EFAULT)
    }
}

/// Takes `waiters` off their events' wait lists (the driver's `free_waiters`): once per event,
/// so that a wait on many slots of one event costs linear time, not quadratic.
fn forget_waiters(st: &mut ProcState, waiters: &[(u32, Arc<AtomicU8>)]) {
    let mine: HashSet<*const AtomicU8> = waiters.iter().map(|(_, w)| Arc::as_ptr(w)).collect();
    let ids: BTreeSet<u32> = waiters.iter().map(|&(id, _)| id).collect();
    for id in ids {
        if let Some(ev) = st.events.get_mut(&id) {
            ev.waiters.retain(|x| !mine.contains(&Arc::as_ptr(x)));
        }
    }
}

/// What the driver's `free_waiters` does for a wait that ends in `-ERESTARTSYS`
/// (`undo_auto_reset`, from the 6.1 change that also writes the time left back): every auto-reset
/// event that had already activated one of `waiters` (and so was reset by it) is set again, so
/// that the restarted call counts that signal again. Without it a signal that arrives as the
/// event fires (criu freezing a process waiting for its SDMA queue's completion) loses the event
/// for good. Call it after [`forget_waiters`]: setting the event wakes the other waiters on it.
/// Returns whether any event was set.
fn undo_auto_reset(st: &mut ProcState, waiters: &[(u32, Arc<AtomicU8>)]) -> bool {
    let mut set = false;
    for (id, w) in waiters {
        if w.load(Ordering::SeqCst) != waiter::ACTIVATED {
            continue;
        }
        if let Some(ev) = st.events.get_mut(id).filter(|ev| ev.auto_reset) {
            ev.set();
            set = true;
        }
    }
    set
}

/// The jiffy of Debian's kernels (`CONFIG_HZ=250`), in milliseconds.
const JIFFY_MS: u64 = 4;

/// What an interrupted wait of `timeout_ms` writes back after `elapsed`, in the driver's
/// arithmetic: it sleeps `msecs_to_jiffies(timeout_ms) + 1` jiffies (rounded up), and writes
/// back `jiffies_to_msecs(max(0, left - 1))` of the jiffies left.
fn timeout_left_ms(timeout_ms: u32, elapsed: Duration) -> u32 {
    let total = u64::from(timeout_ms).div_ceil(JIFFY_MS) + 1;
    let spent = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX) / JIFFY_MS;
    let left = total.saturating_sub(spent);
    u32::try_from(left.saturating_sub(1) * JIFFY_MS).unwrap_or(u32::MAX)
}

fn wait_on_events(
    call: &KfdCall<'_>,
    a: &mut sys::kfd_ioctl_wait_events_args,
) -> Result<u32, Errno> {
    let n = u64::from(a.num_events);
    kmalloc_check(n * WAITER_SIZE)?;
    let all = a.wait_for_all != 0;
    let mut st = call.process.lock();
    let mut waiters: Vec<(u32, Arc<AtomicU8>)> = Vec::new();
    let cleanup = forget_waiters;
    let mut slots = EventSlots::new(call.client, a.events_ptr);
    for i in 0..n {
        let data = match slots.get(i, n) {
            Ok(d) => d,
            Err(_) => {
                cleanup(&mut st, &waiters);
                return Err(Errno::EFAULT);
            }
        };
        let Some(ev) = st.events.get_mut(&data.event_id) else {
            cleanup(&mut st, &waiters);
            return Err(Errno::EINVAL);
        };
        let activated = ev.signaled;
        ev.signaled = ev.signaled && !ev.auto_reset;
        let w = Arc::new(AtomicU8::new(if activated {
            waiter::ACTIVATED
        } else {
            waiter::WAITING
        }));
        if !activated {
            ev.waiters.push(Arc::clone(&w));
        }
        waiters.push((data.event_id, w));
    }
    let condition = |waiters: &[(u32, Arc<AtomicU8>)]| {
        let mut activated = 0usize;
        for (_, w) in waiters {
            match w.load(Ordering::SeqCst) {
                waiter::GONE => return sys::KFD_IOC_WAIT_RESULT_FAIL,
                waiter::ACTIVATED if !all => return sys::KFD_IOC_WAIT_RESULT_COMPLETE,
                waiter::ACTIVATED => activated += 1,
                _ => {}
            }
        }
        if activated == waiters.len() {
            sys::KFD_IOC_WAIT_RESULT_COMPLETE
        } else {
            sys::KFD_IOC_WAIT_RESULT_TIMEOUT
        }
    };
    let started = Instant::now();
    let deadline = match a.timeout {
        0 | TIMEOUT_INFINITE => None,
        ms => started.checked_add(Duration::from_millis(u64::from(ms))),
    };
    // Events already signalled complete the wait before any sleep (or signal) is looked at.
    let first = condition(&waiters);
    let result = loop {
        if first != sys::KFD_IOC_WAIT_RESULT_TIMEOUT {
            break first;
        }
        // The driver ends the sleep with -ERESTARTSYS (FUSE can only carry EINTR), having
        // written the time left back into the arguments and set again the auto-reset events
        // this call had taken, so that a restarted call waits only for the rest and sees them.
        if call.client.signal_pending() {
            cleanup(&mut st, &waiters);
            if undo_auto_reset(&mut st, &waiters) {
                call.process.events_cv.notify_all();
            }
            if a.timeout != 0 && a.timeout != TIMEOUT_INFINITE {
                a.timeout = timeout_left_ms(a.timeout, started.elapsed());
            }
            return Err(Errno::EINTR);
        }
        let r = condition(&waiters);
        if r != sys::KFD_IOC_WAIT_RESULT_TIMEOUT || a.timeout == 0 {
            break r;
        }
        // An engine died (a simulator bug, logged when it happened): what the caller waits for
        // may never come, so the wait fails rather than sleeps.
        if let Some(engine) = call.machine.wedged() {
            log::warn!(
                "kfd-sim: pid {}: WAIT_EVENTS fails with EIO: {engine} is dead",
                call.process.pid
            );
            break sys::KFD_IOC_WAIT_RESULT_FAIL;
        }
        if a.timeout == TIMEOUT_INFINITE {
            st = st.wait(&call.process.events_cv);
            continue;
        }
        let now = Instant::now();
        let Some(left) = deadline
            .and_then(|d| d.checked_duration_since(now))
            .filter(|d| !d.is_zero())
        else {
            break condition(&waiters);
        };
        st = st.wait_timeout(&call.process.events_cv, left).0;
    };
    cleanup(&mut st, &waiters);
    if result == sys::KFD_IOC_WAIT_RESULT_COMPLETE {
        // copy_signaled_event_data: memory exception data of fired memory events.
        for (i, (id, w)) in (0u64..).zip(&waiters) {
            if w.load(Ordering::SeqCst) != waiter::ACTIVATED {
                continue;
            }
            let Some(ev) = st.events.get(id) else {
                continue;
            };
            if ev.ty == sys::KFD_IOC_EVENT_MEMORY {
                let addr = a.events_ptr.wrapping_add(i * EVENT_DATA_SIZE);
                copy_to_user(call.client, addr, &ev.exception)?;
            }
        }
    }
    Ok(result)
}

/// `kfd_ioctl_smi_events` (`kfd_smi_event_open`): a new fd that delivers the GPU's SMI events.
///
/// The simulated GPU raises none, so the fd stays empty, as the driver's does until an event:
/// it never polls readable, and a read answers `EAGAIN` (the driver's read does so on an empty
/// queue whatever the file's flags). A write sets the event mask; the driver takes the first 8
/// bytes. It is one end of a socket pair (non-blocking, so that a read cannot block where the
/// driver's would not; `F_GETFL` shows `O_NONBLOCK`, the driver's anon inode does not), whose
/// other end the process keeps; ends whose fd was closed are dropped at the next open.
pub(super) fn smi_events(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(kdata, |a: &mut sys::kfd_ioctl_smi_events_args| {
        let mut st = call.process.lock();
        if st.pdd_by_user_id(a.gpuid).is_none() {
            return Err(Errno::EINVAL);
        }
        st.smi_clients.retain(|peer| {
            // Drain the masks written; an end at EOF has lost its fd.
            let mut buf = [0u8; 64];
            loop {
                match (&*peer).read(&mut buf) {
                    Ok(0) => return false,
                    Ok(_) => continue,
                    Err(e) => return e.kind() != std::io::ErrorKind::UnexpectedEof,
                }
            }
        });
        let (theirs, ours) = UnixStream::pair().map_err(|e| Errno::from_io(&e))?;
        theirs
            .set_nonblocking(true)
            .and_then(|()| ours.set_nonblocking(true))
            .map_err(|e| Errno::from_io(&e))?;
        st.smi_clients.push(ours);
        drop(st);
        let fd = OwnedFd::from(theirs);
        let slot = FdSlot::ArgField(std::mem::offset_of!(
            sys::kfd_ioctl_smi_events_args,
            anon_fd
        ));
        let raw = call.client.install_fd_at(fd, slot)?;
        a.anon_fd = fd_to_field(raw);
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kfd_abi::kfd::WAIT_INFINITE;
    use kfd_abi::{EventType, Kfd, WaitResult};

    /// A client in an infinite WAIT_EVENTS when an engine thread panics wakes with `EIO`, and
    /// later waits fail at once, instead of sleeping for what the dead engine will never signal;
    /// a wait that does not sleep (timeout 0) still answers.
    #[test]
    fn a_waiting_client_gets_eio_when_an_engine_thread_panics() {
        let machine = crate::Machine::new(&crate::Preset::mi50x1()).unwrap();
        let proc = machine.spawn_process();
        let kfd = Kfd::new(proc.open_kfd().unwrap(), "/dev/kfd");
        let ev = kfd
            .create_event(EventType::NodeChange, false, None)
            .unwrap();
        let runlist = Arc::downgrade(machine.inner());
        std::thread::scope(|s| {
            let waiter = s.spawn(|| kfd.wait_events(&[ev.event_id], false, WAIT_INFINITE));
            std::thread::sleep(Duration::from_millis(50));
            s.spawn(move || {
                crate::hw::runlist::run_engine("the test engine", &runlist, || {
                    panic!("injected into an engine thread")
                });
            })
            .join()
            .unwrap();
            let r = waiter.join().unwrap();
            assert_eq!(r.unwrap_err().errno(), Some(Errno::EIO));
        });
        assert_eq!(machine.inner().wedged(), Some("the test engine"));
        let again = kfd.wait_events(&[ev.event_id], false, WAIT_INFINITE);
        assert_eq!(again.unwrap_err().errno(), Some(Errno::EIO));
        assert_eq!(
            kfd.wait_events(&[ev.event_id], false, 0).unwrap(),
            WaitResult::Timeout
        );
    }

    #[rstest::rstest]
    #[case::nothing_slept(10_000, 0, 10_000)]
    #[case::part_of_a_jiffy(10_000, 3, 10_000)]
    #[case::two_hundred_ms(10_000, 200, 9_800)]
    #[case::rounded_up_to_jiffies(10, 0, 12)]
    #[case::all_slept(10_000, 10_004, 0)]
    #[case::longer_than_asked(10, 1_000, 0)]
    #[case::zero_timeout(0, 0, 0)]
    fn an_interrupted_wait_writes_back_whole_jiffies_left(
        #[case] timeout_ms: u32,
        #[case] elapsed_ms: u64,
        #[case] left: u32,
    ) {
        assert_eq!(
            timeout_left_ms(timeout_ms, Duration::from_millis(elapsed_ms)),
            left
        );
    }
}
