//! A kernel dispatch in flight: its workgroups run on worker threads in time slices.
//!
//! A round ([`InFlight::round`]) runs workgroups on up to [`workers`] threads (the command
//! processor's own thread one of them) for about [`ROUND`] of time each, counted from when the
//! thread starts: a thread takes a stopped workgroup or starts the next one, runs it [`SLICE`]
//! instructions at a time until it ends or the round's time is up, and parks what is unfinished
//! in the dispatch. Every thread runs at least one slice, so a round always moves the dispatch
//! on, however slow the host is to start it. So a kernel that never ends (a wave spinning on a flag in memory)
//! uses its time and lets the command processor go on to other queues and processes, and an
//! eviction waits at most one round: the waves stop at an instruction boundary and stay parked
//! in the dispatch, which compute wave save/restore then writes out ([`InFlight::snapshot`])
//! and reads back ([`InFlight::resume`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::lock_order::Ordered;
use std::time::{Duration, Instant};

use kfd_shader::{Dispatch, Executor, ShaderError, Stop, Workgroup};

use super::super::vm::Vm;
use super::cwsr::{CwsrError, SavedDispatch, SavedGroup};
use super::memory::{GpuClock, GpuMemory, Kept, SvmView};
use crate::host::lock;

/// Instructions a workgroup runs between two looks at the clock.
pub(crate) const SLICE: u64 = 1 << 14;
/// How long the workers of one round run before the command processor goes on.
pub(crate) const ROUND: Duration = Duration::from_millis(20);

/// Worker threads a round uses: the host's cores.
pub(crate) fn workers() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// A started workgroup with the scratch wave slot it owns until it ends.
struct Live {
    wg: Workgroup,
    slot: u32,
}

/// Why a dispatch cannot go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// A wave executed `s_trap`.
    Trap {
        /// The trap id.
        id: u8,
        /// Where.
        pc: u64,
    },
    /// An unsupported or illegal instruction, or a memory fault.
    Shader(ShaderError),
    /// Client memory the waves wrote could not be written back (the client unmapped it).
    WriteBack {
        /// The CPU address.
        addr: u64,
    },
}

/// What a round ended with.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RoundEnd {
    /// Every workgroup has ended.
    Done,
    /// Workgroups are left: run another round.
    More,
    /// A wave failed; the dispatch is over.
    Failed(Failure),
}

/// A KERNEL_DISPATCH the command processor has started.
#[derive(Debug)]
pub(crate) struct InFlight {
    /// The packet's index in the ring.
    pub index: u64,
    /// The completion signal (0: none).
    pub signal: u64,
    /// The GPU timestamp when it started (profiling).
    pub start_ts: u64,
    dispatch: Dispatch,
    next: u64,
    total: u64,
    parked: Vec<Live>,
    free_slots: Vec<u32>,
    /// The client memory the last round mirrored, for the next (`memory`'s module
    /// documentation says when a round reads it afresh).
    kept: Kept,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live")
            .field("id", &self.wg.id)
            .finish_non_exhaustive()
    }
}

/// The shared part of a round.
struct Pool {
    parked: Vec<Live>,
    next: u64,
    free_slots: Vec<u32>,
}

impl InFlight {
    /// A dispatch about to start; `slots` scratch wave slots (the first wave slot of each
    /// workgroup that may run at once).
    pub(crate) fn new(
        index: u64,
        signal: u64,
        start_ts: u64,
        dispatch: Dispatch,
        slots: Vec<u32>,
    ) -> Self {
        let total = dispatch.workgroup_count();
        Self {
            index,
            signal,
            start_ts,
            dispatch,
            next: 0,
            total,
            parked: Vec::new(),
            free_slots: slots,
            kept: Kept::default(),
        }
    }

    /// The dispatch `saved` stopped, resumed: its stopped workgroups restored, those it had
    /// not started still to start; `slots` as for [`InFlight::new`], less those the restored
    /// workgroups own.
    pub(crate) fn resume(
        dispatch: Dispatch,
        mut slots: Vec<u32>,
        saved: SavedDispatch,
    ) -> Result<Self, CwsrError> {
        let total = dispatch.workgroup_count();
        if saved.total != total || saved.next > total {
            return Err(CwsrError::Format("progress of another grid"));
        }
        let mut parked = Vec::with_capacity(saved.groups.len());
        for g in saved.groups {
            let wg = Workgroup::restore(&g.bytes)?;
            if let Some(k) = slots.iter().position(|&s| s == g.slot) {
                slots.swap_remove(k);
            }
            parked.push(Live { wg, slot: g.slot });
        }
        Ok(Self {
            index: saved.index,
            signal: saved.signal,
            start_ts: saved.start_ts,
            dispatch,
            next: saved.next,
            total,
            parked,
            free_slots: slots,
            kept: Kept::default(),
        })
    }

    /// What compute wave save/restore writes of the dispatch: its progress and every stopped
    /// workgroup (they stop at an instruction boundary).
    pub(crate) fn snapshot(&self) -> SavedDispatch {
        SavedDispatch {
            index: self.index,
            signal: self.signal,
            start_ts: self.start_ts,
            next: self.next,
            total: self.total,
            groups: self
                .parked
                .iter()
                .map(|l| SavedGroup {
                    slot: l.slot,
                    waves: u32::try_from(l.wg.waves.len()).unwrap_or(u32::MAX),
                    bytes: l.wg.save(),
                })
                .collect(),
        }
    }

    /// Runs one round on `vm`; the M0 of every `s_sendmsg` interrupt goes to `interrupts`.
    /// `stop` ends the round early (at the next slice).
    pub(crate) fn round(
        &mut self,
        vm: &Arc<Ordered<Vm>>,
        svm: &Arc<SvmView>,
        interrupts: &mut Vec<u32>,
        stop: &AtomicBool,
    ) -> RoundEnd {
        self.run_round(vm, svm, interrupts, stop, None, ROUND)
    }

    /// A round as [`InFlight::round`] whose workers each run for `length` (at least one
    /// workgroup slice each, however short): a host slower than the round's own setup.
    #[cfg(test)]
    pub(crate) fn round_of(
        &mut self,
        vm: &Arc<Ordered<Vm>>,
        svm: &Arc<SvmView>,
        length: Duration,
    ) -> RoundEnd {
        self.run_round(
            vm,
            svm,
            &mut Vec::new(),
            &AtomicBool::new(false),
            None,
            length,
        )
    }

    /// A round on one worker that ends after exactly `instructions` wave instructions (or
    /// when the dispatch ends): a preemption at a chosen instruction boundary, for tests of wave
    /// save/restore. Also returns the instructions executed.
    #[cfg(test)]
    pub(crate) fn round_for(
        &mut self,
        vm: &Arc<Ordered<Vm>>,
        svm: &Arc<SvmView>,
        instructions: u64,
    ) -> (RoundEnd, u64) {
        let left = AtomicU64::new(instructions);
        let end = self.run_round(
            vm,
            svm,
            &mut Vec::new(),
            &AtomicBool::new(false),
            Some(&left),
            // The instruction budget, not the clock, ends this round.
            Duration::from_secs(3600),
        );
        (end, instructions - left.into_inner())
    }

    fn run_round(
        &mut self,
        vm: &Arc<Ordered<Vm>>,
        svm: &Arc<SvmView>,
        interrupts: &mut Vec<u32>,
        stop: &AtomicBool,
        budget: Option<&AtomicU64>,
        length: Duration,
    ) -> RoundEnd {
        let left = self.total - self.next + self.parked.len() as u64;
        let threads = if budget.is_some() {
            1
        } else {
            usize::try_from(left)
                .unwrap_or(usize::MAX)
                .min(workers())
                .max(1)
        };
        let pool = Mutex::new(Pool {
            parked: std::mem::take(&mut self.parked),
            next: self.next,
            free_slots: std::mem::take(&mut self.free_slots),
        });
        let failure: Mutex<Option<Failure>> = Mutex::new(None);
        let sent: Mutex<Vec<u32>> = Mutex::new(Vec::new());
        let failed = AtomicBool::new(false);
        let dispatch = &self.dispatch;
        let total = self.total;
        // One translation of the VM for the round, shared by its workers: mirrored client
        // memory is one copy, so atomics on it from workgroups on different workers are atomic,
        // and it is written back once, after every worker has stopped. It starts with the
        // mirrors the last round kept.
        let kept = std::mem::take(&mut self.kept);
        let mut mem = GpuMemory::with_kept(Arc::clone(vm), Arc::clone(svm), kept);
        let work = || {
            let mut ex = Executor::new();
            worker(
                dispatch, total, &pool, &mut ex, &mem, length, &failed, stop, &failure, &sent,
                budget,
            );
        };
        // The command processor's thread is one of the workers: on a host whose cores are
        // busy (a guest's vCPUs shared with a client spinning on its completion signal), a
        // thread that blocks to wait for others loses its core for long, and every round would
        // pay that.
        std::thread::scope(|s| {
            for _ in 1..threads {
                s.spawn(work);
            }
            work();
        });
        if let Err(addr) = mem.flush() {
            failed.store(true, Ordering::SeqCst);
            lock(&failure).get_or_insert(Failure::WriteBack { addr });
        }
        self.kept = mem.keep();
        interrupts.extend(sent.into_inner().unwrap_or_default());
        let pool = pool
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.parked = pool.parked;
        self.next = pool.next;
        self.free_slots = pool.free_slots;
        if let Some(f) = failure
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            return RoundEnd::Failed(f);
        }
        if self.next >= self.total && self.parked.is_empty() {
            RoundEnd::Done
        } else {
            RoundEnd::More
        }
    }
}

/// One worker of a round.
#[allow(clippy::too_many_arguments)]
fn worker(
    dispatch: &Dispatch,
    total: u64,
    pool: &Mutex<Pool>,
    ex: &mut Executor,
    mem: &GpuMemory,
    length: Duration,
    failed: &AtomicBool,
    stop: &AtomicBool,
    failure: &Mutex<Option<Failure>>,
    sent: &Mutex<Vec<u32>>,
    budget: Option<&AtomicU64>,
) {
    let clock = GpuClock;
    let slice = || budget.map_or(SLICE, |b| b.load(Ordering::SeqCst).min(SLICE));
    // The round's time counts from when this worker starts, and a worker runs at least one
    // slice before it looks at the clock: however long starting the round took (threads,
    // translations, a host whose cores are busy elsewhere), every round moves the dispatch on.
    let deadline = Instant::now() + length;
    let mut ran = false;
    loop {
        if failed.load(Ordering::SeqCst)
            || stop.load(Ordering::SeqCst)
            || (ran && Instant::now() >= deadline)
            || slice() == 0
        {
            return;
        }
        let job = {
            let mut p = lock(pool);
            if let Some(l) = p.parked.pop() {
                Some(l)
            } else if p.next < total {
                match p.free_slots.pop() {
                    Some(slot) => {
                        let k = p.next;
                        p.next += 1;
                        Some(Live {
                            wg: dispatch.workgroup(k, slot),
                            slot,
                        })
                    }
                    None => None,
                }
            } else {
                None
            }
        };
        let Some(mut live) = job else {
            return;
        };
        loop {
            let n = slice();
            if n == 0 {
                lock(pool).parked.push(live);
                return;
            }
            let st = ex.run(&mut live.wg, mem, &clock, n);
            ran = true;
            if let Some(b) = budget {
                b.fetch_sub(st.instructions.min(n), Ordering::SeqCst);
            }
            match st.stop {
                Stop::Done => {
                    lock(pool).free_slots.push(live.slot);
                    break;
                }
                Stop::Budget => {
                    if Instant::now() >= deadline
                        || stop.load(Ordering::SeqCst)
                        || failed.load(Ordering::SeqCst)
                    {
                        lock(pool).parked.push(live);
                        return;
                    }
                }
                Stop::Interrupt { m0, .. } => lock(sent).push(m0),
                Stop::Trap { trap_id, pc, .. } => {
                    fail(failed, failure, Failure::Trap { id: trap_id, pc });
                    lock(pool).parked.push(live);
                    return;
                }
                Stop::Error { error, .. } => {
                    fail(failed, failure, Failure::Shader(error));
                    lock(pool).parked.push(live);
                    return;
                }
            }
        }
    }
}

fn fail(failed: &AtomicBool, failure: &Mutex<Option<Failure>>, f: Failure) {
    failed.store(true, Ordering::SeqCst);
    lock(failure).get_or_insert(f);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::cast_possible_truncation)]

    use crate::lock_order::{rank, Ordered};
    use std::sync::Arc;

    use std::time::Duration;

    use kfd_shader::testmem::{layout::*, Args, Rig};

    use super::super::super::backing::{Backing, Domain};
    use super::super::super::sdma::read_va;
    use super::super::super::vm::{Vm, VmMapping, VmTarget};
    use super::super::memory::SvmView;
    use super::{InFlight, RoundEnd};

    /// kernels/blit.s: ROCr's blit shape (raw code behind an amd_kernel_code_t, FLAT loads and
    /// stores over a grid-stride loop).
    const BLIT: &[u8] = include_bytes!("../../../shader/kernels/blit.co");

    /// ROCr's grid for a blit, 64 x 4 work-items per CU, on a GPU of `cus` CUs, copying
    /// `n16` 16-byte chunks and `tail` bytes; the VM (GTT at the rig's addresses), the
    /// dispatch, where the copy goes and what it must hold.
    fn blit(cus: u32, n16: u64, tail: u64) -> (Arc<Ordered<Vm>>, InFlight, u64, Vec<u8>) {
        let mut rig = Rig::new(BLIT, 1 << 20).unwrap();
        let len = n16 * 16 + tail;
        let src = rig.alloc(len).unwrap();
        let dst = rig.alloc(len).unwrap();
        let bytes: Vec<u8> = (0..len).map(|i| (i * 13 + 5) as u8).collect();
        rig.mem.write(src, &bytes);
        let grid = 64 * 4 * cus;
        let a = Args::default()
            .u64(src)
            .u64(dst)
            .u64(n16)
            .u64(tail)
            .u32(grid);
        let dispatch = rig
            .dispatch("flat_blit", [grid, 1, 1], [64, 1, 1], &a.0, 1)
            .unwrap();
        let code_end = kfd_shader::elf::CodeObject::parse(BLIT)
            .unwrap()
            .segments()
            .unwrap()
            .iter()
            .map(|s| s.vaddr + s.memsz)
            .max()
            .unwrap();
        let mut vm = Vm::new();
        for (va, len) in [
            (CODE_VA, code_end.div_ceil(4096) * 4096),
            (DATA_VA, 1 << 20),
            (KERNARG_VA, 4096),
            (PACKET_VA, 4096),
        ] {
            let backing = Backing::new(len, Domain::Gtt, 0, false).unwrap();
            let bytes = rig.mem.read(va, len as usize).unwrap();
            assert!(backing.write(0, &bytes));
            let target = VmTarget::Memory {
                backing: Arc::new(backing),
                offset: 0,
            };
            let m = VmMapping {
                size: len,
                target,
                writable: true,
            };
            vm.map(va, m).unwrap();
        }
        let slots = vec![0; super::workers()];
        let d = InFlight::new(0, 0, 0, dispatch, slots);
        (Arc::new(Ordered::new(rank::VM, vm)), d, dst, bytes)
    }

    /// A host slower than a round: in the forky guest (qemu TCG, its vCPUs shared with ROCr
    /// spinning on the copy's completion signal) starting a round (threads, translations)
    /// took longer than the round's 20 ms, and the workers, finding its time up, returned
    /// without running anything: ROCr 6.4's 1 MiB `hsa_memory_copy` (416 workgroups) started
    /// 0 to 3 workgroups a round and did not finish within its 20 s. Every round now runs at
    /// least a slice on each worker, however short its time.
    #[test]
    fn a_round_shorter_than_its_setup_still_moves_a_blit_on() {
        let (vm, mut d, dst, bytes) = blit(2, 300, 7);
        let svm = Arc::new(SvmView::default());
        let total = d.total;
        let mut rounds = 0;
        loop {
            let before = d.next;
            let end = d.round_of(&vm, &svm, Duration::ZERO);
            rounds += 1;
            match end {
                RoundEnd::Done => break,
                RoundEnd::More => assert!(
                    d.next > before,
                    "round {rounds} started no workgroup ({} of {total})",
                    d.next
                ),
                RoundEnd::Failed(f) => panic!("{f:?}"),
            }
            assert!(rounds <= total, "{rounds} rounds for {total} workgroups");
        }
        assert_eq!(read_va(&vm, dst, bytes.len() as u64).unwrap(), bytes);
    }
}
