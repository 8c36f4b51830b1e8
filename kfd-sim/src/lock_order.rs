//! The lock order of kfd-sim/README.md ("Lock order"), checked in debug builds.
//!
//! Every lock the table orders is an [`Ordered`] mutex that carries its [`Rank`]: the row of the
//! table and the lock's name. In a debug build each thread keeps the ranks it holds; taking an
//! [`Ordered`] lock that blocks ([`Ordered::lock`], and so `host::lock`) while holding one of
//! the same row or a lower one (a higher row number) panics, naming both locks. The checks cost
//! a thread-local push and pop per lock, and are compiled out of release builds, where an
//! [`Ordered`] is a `Mutex` and its rank.
//!
//! What is not checked: a lock that does not block ([`Ordered::try_lock`], `host::lock_within`,
//! whose bound is the answer to the cycle the README describes) cannot wait on its holder, so it
//! is recorded (what is taken under it is checked) but not asserted; a condition variable's wait
//! releases and retakes the lock with the thread's other locks held, and keeps its rank.
//!
//! Poisoning: [`Ordered`] answers as `std::sync::Mutex` does (a poisoned lock is an `Err` whose
//! guard [`PoisonError::into_inner`] recovers); `host::lock` and `host::lock_within` recover it.
//! The README's Poisoning section says why that is sound for the simulator's locks.

use std::ops::{Deref, DerefMut};
use std::sync::{
    Condvar, LockResult, Mutex, MutexGuard, PoisonError, TryLockError, TryLockResult,
    WaitTimeoutResult,
};
use std::time::Duration;

/// A lock's place in the order: its row of the README's table (1 is taken first) and its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rank {
    row: u8,
    name: &'static str,
}

impl Rank {
    const fn new(row: u8, name: &'static str) -> Self {
        Self { row, name }
    }

    /// The row of the table.
    pub fn row(&self) -> u8 {
        self.row
    }

    /// The lock's name, as the table gives it.
    pub fn name(&self) -> &'static str {
        self.name
    }
}

impl std::fmt::Display for Rank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (row {})", self.name, self.row)
    }
}

/// The ranks of the table, row by row (kfd-sim/README.md, "Lock order").
pub(crate) mod rank {
    use crate::lock_order::Rank;

    /// Row 1: a simulated process's KFD process (`inproc/mod.rs`).
    pub(crate) const PROC_KFD: Rank = Rank::new(1, "ProcInner::kfd");
    /// Row 1: "the SDMA engine runs a packet of this process" (`state/process.rs`).
    pub(crate) const ENGINE_PREEMPTION: Rank = Rank::new(1, "KfdProcess::engine");
    /// Row 1: "a command processor runs a round of this process" (`state/process.rs`).
    pub(crate) const CP_PREEMPTION: Rank = Rank::new(1, "KfdProcess::cp");
    /// Row 2: the command processor's state of one AQL queue (`hw/cp/state.rs`).
    pub(crate) const QUEUE_STATE: Rank = Rank::new(2, "QueueState");
    /// Row 2: the order of one (context, ring)'s jobs (`state/render_file.rs`).
    pub(crate) const ENTITY_RUNNING: Rank = Rank::new(2, "Entity::running");
    /// Row 3: one SDMA engine of a GPU (`hw/sdma.rs`).
    pub(crate) const SDMA_BUSY: Rank = Rank::new(3, "Engines::busy");
    /// Row 4: a KFD process's state (`state/process.rs`).
    pub(crate) const PROC_STATE: Rank = Rank::new(4, "KfdProcess::state");
    /// Row 4: an open render file's state (`state/render_file.rs`).
    pub(crate) const RENDER_FILE_STATE: Rank = Rank::new(4, "RenderFile::state");
    /// Row 5: the daemon's client records (`cuse/shared.rs`).
    pub(crate) const CUSE_PROCS: Rank = Rank::new(5, "Shared::procs");
    /// Row 5: the daemon's open files (`cuse/shared.rs`).
    pub(crate) const CUSE_FILES: Rank = Rank::new(5, "Shared::files");
    /// Row 6: the machine's registry (`state/machine.rs`).
    pub(crate) const REGISTRY: Rank = Rank::new(6, "MachineInner::reg");
    /// Row 7: a GPU's counters and slots (`state/device.rs`).
    pub(crate) const DEVICE_STATE: Rank = Rank::new(7, "Device::state");
    /// Row 7: a GPU's MMIO page (`state/device.rs`).
    pub(crate) const DEVICE_MMIO: Rank = Rank::new(7, "Device::mmio");
    /// Row 7: a process's doorbell pages (`state/process.rs`).
    pub(crate) const DOORBELLS: Rank = Rank::new(7, "KfdProcess::doorbells");
    /// Row 7: the bridge as mm watch (`state/accounts.rs`).
    pub(crate) const MM_WATCH: Rank = Rank::new(7, "Accounts::mm_watch");
    /// Row 7: system memory in use (`state/accounts.rs`).
    pub(crate) const SYSTEM_USED: Rank = Rank::new(7, "Accounts::system_used");
    /// Row 7: the logged-once keys (`state/machine.rs`).
    pub(crate) const UNANSWERED: Rank = Rank::new(7, "MachineInner::unanswered");
    /// Row 7: the GPUs a simulated process may use (`inproc/mod.rs`).
    pub(crate) const CALLER_DEVICES: Rank = Rank::new(7, "Caller::devices");
    /// Row 7: the device mappings of the simulated processes (`inproc/vmas.rs`).
    pub(crate) const DEVICE_VMAS: Rank = Rank::new(7, "DeviceVmas");
    /// Row 7: the GPUs whose command processor runs (`hw/cp/mod.rs`).
    pub(crate) const CP_STARTED: Rank = Rank::new(7, "CommandProcessors::started");
    /// Row 7: the bridge's fds handed over (`cuse/bridge/mod.rs`).
    pub(crate) const HAND_OVERS: Rank = Rank::new(7, "HandOvers");
    /// Row 7: the module's control file (`cuse/shared.rs`).
    pub(crate) const CUSE_BRIDGE: Rank = Rank::new(7, "Shared::bridge");
    /// Row 7: the reader threads' handles (`cuse/shared.rs`).
    pub(crate) const CUSE_THREADS: Rank = Rank::new(7, "Shared::threads");
    /// Row 7: the ioctls in flight of a served device (`cuse/threads.rs`).
    pub(crate) const CUSE_INFLIGHT: Rank = Rank::new(7, "Device::inflight");
    /// Row 8: a GPU VM (`hw/vm.rs`).
    pub(crate) const VM: Rank = Rank::new(8, "Vm");
    /// Row 9: the memory a dispatch round pinned (`hw/cp/memory.rs`).
    pub(crate) const PINS: Rank = Rank::new(9, "GpuMemory::pins");
    /// Row 9: a dispatch round's mirrors of client memory (`hw/cp/memory.rs`).
    pub(crate) const MIRRORS: Rank = Rank::new(9, "GpuMemory::mirrors");
}

/// The ranks this thread holds (debug builds).
#[cfg(debug_assertions)]
mod held {
    use std::cell::RefCell;

    use crate::lock_order::Rank;

    thread_local! {
        static HELD: RefCell<Vec<Rank>> = const { RefCell::new(Vec::new()) };
    }

    /// Panics if a thread holding what it holds may not wait for `rank`.
    pub(super) fn check(rank: Rank) {
        let above = HELD.with(|h| h.borrow().iter().copied().max_by_key(|r| r.row));
        if let Some(held) = above.filter(|held| held.row >= rank.row) {
            panic!(
                "lock order: taking {rank} while holding {held}; a thread takes locks of \
                 higher rows only (kfd-sim/README.md, Lock order)"
            );
        }
    }

    pub(super) fn push(rank: Rank) {
        HELD.with(|h| h.borrow_mut().push(rank));
    }

    pub(super) fn pop(rank: Rank) {
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if let Some(at) = h.iter().rposition(|r| *r == rank) {
                h.remove(at);
            }
        });
    }
}

/// A hold of a rank: gives it back when dropped (debug builds; nothing in release builds).
#[derive(Debug)]
struct Hold {
    #[cfg(debug_assertions)]
    rank: Rank,
}

impl Hold {
    fn new(_rank: Rank) -> Self {
        #[cfg(debug_assertions)]
        held::push(_rank);
        Self {
            #[cfg(debug_assertions)]
            rank: _rank,
        }
    }
}

#[cfg(debug_assertions)]
impl Drop for Hold {
    fn drop(&mut self) {
        held::pop(self.rank);
    }
}

/// A mutex of the lock order: `std::sync::Mutex` with its [`Rank`], and the same API.
pub struct Ordered<T: ?Sized> {
    rank: Rank,
    mutex: Mutex<T>,
}

impl<T: std::fmt::Debug> std::fmt::Debug for Ordered<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ordered")
            .field("rank", &self.rank)
            .field("mutex", &self.mutex)
            .finish()
    }
}

impl<T> Ordered<T> {
    /// A mutex of rank `rank` holding `value`.
    pub(crate) const fn new(rank: Rank, value: T) -> Self {
        Self {
            rank,
            mutex: Mutex::new(value),
        }
    }

    /// The value, the mutex consumed (nothing can hold it).
    pub fn into_inner(self) -> LockResult<T> {
        self.mutex.into_inner()
    }
}

impl<T: ?Sized> Ordered<T> {
    /// Its rank.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// Takes the lock, waiting for it. In a debug build, panics if this thread holds a lock of
    /// the same row or a lower one. Poisoning as `Mutex::lock`.
    pub fn lock(&self) -> LockResult<OrderedGuard<'_, T>> {
        #[cfg(debug_assertions)]
        held::check(self.rank);
        match self.mutex.lock() {
            Ok(g) => Ok(self.guard(g)),
            Err(p) => Err(PoisonError::new(self.guard(p.into_inner()))),
        }
    }

    /// Takes the lock if it is free, without a check of the order (it cannot wait). Poisoning as
    /// `Mutex::try_lock`.
    pub fn try_lock(&self) -> TryLockResult<OrderedGuard<'_, T>> {
        match self.mutex.try_lock() {
            Ok(g) => Ok(self.guard(g)),
            Err(TryLockError::Poisoned(p)) => Err(TryLockError::Poisoned(PoisonError::new(
                self.guard(p.into_inner()),
            ))),
            Err(TryLockError::WouldBlock) => Err(TryLockError::WouldBlock),
        }
    }

    /// The value, through a unique borrow (nothing can hold the lock).
    pub fn get_mut(&mut self) -> LockResult<&mut T> {
        self.mutex.get_mut()
    }

    fn guard<'a>(&'a self, guard: MutexGuard<'a, T>) -> OrderedGuard<'a, T> {
        OrderedGuard {
            guard,
            _hold: Hold::new(self.rank),
        }
    }
}

/// The guard of an [`Ordered`] lock: the value while the lock is held.
#[derive(Debug)]
pub struct OrderedGuard<'a, T: ?Sized> {
    guard: MutexGuard<'a, T>,
    _hold: Hold,
}

impl<'a, T> OrderedGuard<'a, T> {
    /// `Condvar::wait` on this guard (poisoning recovered, as `host::lock` does).
    pub(crate) fn wait(self, cv: &Condvar) -> Self {
        let OrderedGuard { guard, _hold } = self;
        let guard = cv.wait(guard).unwrap_or_else(PoisonError::into_inner);
        OrderedGuard { guard, _hold }
    }

    /// `Condvar::wait_timeout` on this guard (poisoning recovered, as `host::lock` does).
    pub(crate) fn wait_timeout(self, cv: &Condvar, timeout: Duration) -> (Self, WaitTimeoutResult) {
        let OrderedGuard { guard, _hold } = self;
        let (guard, timed_out) = cv
            .wait_timeout(guard, timeout)
            .unwrap_or_else(PoisonError::into_inner);
        (OrderedGuard { guard, _hold }, timed_out)
    }
}

impl<T: ?Sized> Deref for OrderedGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T: ?Sized> DerefMut for OrderedGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

/// A mutex [`lock`] and [`lock_within`] take: a `std::sync::Mutex`, or an [`Ordered`] one of the
/// lock order (whose [`Ordered::lock`] checks the order in debug builds).
pub(crate) trait Lockable {
    /// What holding it gives.
    type Guard<'a>
    where
        Self: 'a;

    /// Takes it, waiting; a poisoned lock is taken as it is.
    fn lock_recovered(&self) -> Self::Guard<'_>;

    /// Takes it if it is free (`None` if another thread holds it); a poisoned lock is taken as
    /// it is.
    fn try_lock_recovered(&self) -> Option<Self::Guard<'_>>;
}

impl<T: ?Sized> Lockable for Mutex<T> {
    type Guard<'a>
        = MutexGuard<'a, T>
    where
        T: 'a;

    fn lock_recovered(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn try_lock_recovered(&self) -> Option<MutexGuard<'_, T>> {
        match self.try_lock() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}

impl<T: ?Sized> Lockable for Ordered<T> {
    type Guard<'a>
        = OrderedGuard<'a, T>
    where
        T: 'a;

    fn lock_recovered(&self) -> OrderedGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn try_lock_recovered(&self) -> Option<OrderedGuard<'_, T>> {
        match self.try_lock() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}

impl<L: Lockable + ?Sized> Lockable for std::sync::Arc<L> {
    type Guard<'a>
        = L::Guard<'a>
    where
        L: 'a;

    fn lock_recovered(&self) -> L::Guard<'_> {
        (**self).lock_recovered()
    }

    fn try_lock_recovered(&self) -> Option<L::Guard<'_>> {
        (**self).try_lock_recovered()
    }
}

/// Locks a mutex, ignoring poisoning (kfd-sim/README.md, Poisoning, says why the data behind
/// the simulator's locks is used as a panic left it); an [`Ordered`] one checks the lock order
/// in debug builds.
pub(crate) fn lock<L: Lockable + ?Sized>(m: &L) -> L::Guard<'_> {
    m.lock_recovered()
}

/// [`lock`], giving up after `wait` (`None`): for a thread that must not wait for ever on a lock
/// that another thread may hold while it waits for this one's caller. Not checked against the
/// lock order (it cannot wait for ever), but what is taken under it is.
pub(crate) fn lock_within<L: Lockable + ?Sized>(
    m: &L,
    wait: std::time::Duration,
) -> Option<L::Guard<'_>> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        if let Some(g) = m.try_lock_recovered() {
            return Some(g);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order the README's table gives, as the ranks carry it.
    #[test]
    fn the_ranks_follow_the_readme_table() {
        let rows = [
            (rank::PROC_KFD, 1),
            (rank::ENGINE_PREEMPTION, 1),
            (rank::QUEUE_STATE, 2),
            (rank::SDMA_BUSY, 3),
            (rank::PROC_STATE, 4),
            (rank::CUSE_PROCS, 5),
            (rank::REGISTRY, 6),
            (rank::DEVICE_STATE, 7),
            (rank::VM, 8),
            (rank::PINS, 9),
        ];
        for (rank, row) in rows {
            assert_eq!(rank.row(), row, "{rank}");
        }
    }

    #[test]
    fn locks_taken_down_the_table_pass() {
        let state = Ordered::new(rank::PROC_STATE, 1);
        let reg = Ordered::new(rank::REGISTRY, 2);
        let vm = Ordered::new(rank::VM, 3);
        let (a, b, c) = (
            state.lock().unwrap(),
            reg.lock().unwrap(),
            vm.lock().unwrap(),
        );
        assert_eq!(*a + *b + *c, 6);
        drop((a, b, c));
        // Released, a lock of any row may be taken again.
        drop(state.lock().unwrap());
    }

    #[cfg(debug_assertions)]
    #[rstest::rstest]
    #[case::up_the_table(
        rank::VM,
        rank::PROC_STATE,
        "taking KfdProcess::state (row 4) while holding Vm (row 8)"
    )]
    #[case::same_row(
        rank::PROC_STATE,
        rank::RENDER_FILE_STATE,
        "taking RenderFile::state (row 4) while holding KfdProcess::state (row 4)"
    )]
    #[case::registry_then_state(
        rank::REGISTRY,
        rank::PROC_STATE,
        "taking KfdProcess::state (row 4) while holding MachineInner::reg (row 6)"
    )]
    fn a_lock_taken_out_of_order_panics_naming_both(
        #[case] first: Rank,
        #[case] second: Rank,
        #[case] message: &str,
    ) {
        let (a, b) = (Ordered::new(first, ()), Ordered::new(second, ()));
        let caught = std::thread::scope(|s| {
            s.spawn(|| {
                let _a = a.lock().unwrap();
                let _b = b.lock();
            })
            .join()
        });
        let payload = caught.expect_err("the second lock must panic");
        let text = payload
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(text.contains(message), "{text}");
    }

    #[cfg(debug_assertions)]
    #[test]
    fn a_try_lock_is_not_checked_but_counts_for_what_is_taken_under_it() {
        let vm = Ordered::new(rank::VM, ());
        let state = Ordered::new(rank::PROC_STATE, ());
        let pins = Ordered::new(rank::PINS, ());
        let _vm = vm.lock().unwrap();
        // It cannot wait, so it cannot deadlock.
        let st = state.try_lock().unwrap();
        drop(st);
        drop(_vm);
        let _st = state.try_lock().unwrap();
        drop(pins.lock().unwrap());
        let caught = std::thread::scope(|s| {
            s.spawn(|| {
                let _vm = vm.lock().unwrap();
                let _again = vm.lock();
            })
            .join()
        });
        assert!(caught.is_err(), "taking a lock twice is out of order");
    }

    #[test]
    fn a_poisoned_lock_is_reported_and_recovered() {
        let m = Ordered::new(rank::PINS, 7);
        let _ = std::thread::scope(|s| {
            s.spawn(|| {
                let _g = m.lock().unwrap();
                panic!("poisoning it");
            })
            .join()
        });
        let g = m.lock().unwrap_or_else(PoisonError::into_inner);
        assert_eq!(*g, 7);
        drop(g);
        // The panicking thread's hold ended with it: this thread may take any lock.
        drop(Ordered::new(rank::PROC_KFD, ()).lock().unwrap());
    }
}
