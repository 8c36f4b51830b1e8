//! Workgroups and the executor: round-robin scheduling of a workgroup's waves, `s_barrier`,
//! budgeted runs that stop at instruction boundaries, the decoded-instruction cache, and a
//! helper that runs a whole dispatch on several threads.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::decode::{self, Inst};
use crate::dispatch::{Apertures, Dispatch};
use crate::error::ShaderError;
use crate::exec::{Ctx, Exit, WgEnv};
use crate::memory::{Clock, Memory, Tlb};
use crate::wave::{Wave, WaveRun};

/// A workgroup: its waves, its LDS, and what they share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workgroup {
    /// Workgroup id (x, y, z).
    pub id: [u32; 3],
    /// The waves, in order of their work-items.
    pub waves: Vec<Wave>,
    /// The workgroup's LDS (the group segment, rounded up to the allocation granule).
    pub lds: Vec<u8>,
    pub(crate) env: WgEnv,
    /// The wave the scheduler runs next.
    pub(crate) next: u32,
}

impl Workgroup {
    pub(crate) fn new(id: [u32; 3], waves: Vec<Wave>, lds: Vec<u8>, env: WgEnv) -> Self {
        Self {
            id,
            waves,
            lds,
            env,
            next: 0,
        }
    }

    /// A workgroup of the given waves (their indices renumbered in order) with `lds_bytes` of
    /// zeroed LDS: for running hand-made programs.
    pub fn from_waves(mut waves: Vec<Wave>, lds_bytes: usize, apertures: Apertures) -> Self {
        for (k, w) in waves.iter_mut().enumerate() {
            w.index = k as u32;
        }
        let env = WgEnv {
            apertures,
            waves: waves.len() as u32,
            gpr_alloc: 0,
            lds_alloc: 0,
        };
        Self::new([0; 3], waves, vec![0; lds_bytes.min(64 << 10)], env)
    }

    /// Whether every wave has ended.
    pub fn done(&self) -> bool {
        self.waves.iter().all(|w| w.run == WaveRun::Ended)
    }

    /// Releases the barrier if every wave that has not ended waits at it.
    fn release_barrier(&mut self) {
        let live = self.waves.iter().filter(|w| w.run != WaveRun::Ended);
        let mut any = false;
        for w in live {
            if w.run != WaveRun::AtBarrier {
                return;
            }
            any = true;
        }
        if any {
            for w in &mut self.waves {
                if w.run == WaveRun::AtBarrier {
                    w.run = WaveRun::Ready;
                }
            }
        }
    }
}

/// Why a run stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// Every wave has ended.
    Done,
    /// The instruction budget is used up; run again to go on.
    Budget,
    /// A wave sent MSG_INTERRUPT (`s_sendmsg`) with this M0; it goes on at the next run.
    Interrupt {
        /// Index of the wave in its workgroup.
        wave: u32,
        /// M0 when the message was sent.
        m0: u32,
    },
    /// A wave executed `s_trap`.
    Trap {
        /// Index of the wave in its workgroup.
        wave: u32,
        /// The trap id (SIMM16 bits 7:0).
        trap_id: u8,
        /// Address of the `s_trap`.
        pc: u64,
    },
    /// A wave cannot go on (unsupported instruction, memory fault); its PC is at the
    /// instruction.
    Error {
        /// Index of the wave in its workgroup.
        wave: u32,
        /// What went wrong.
        error: ShaderError,
    },
}

/// The result of [`Executor::run`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunStatus {
    /// Why the run stopped.
    pub stop: Stop,
    /// Instructions executed (wave instructions, not lanes).
    pub instructions: u64,
    /// Lane-instructions executed: the sum of the active lanes (EXEC) of every instruction.
    pub lane_instructions: u64,
}

const PAGE_SHIFT: u32 = 12;
const SLOTS: usize = 1 << (PAGE_SHIFT - 2);

/// Decoded instructions by address, a page of slots at a time.
#[derive(Debug, Default)]
struct CodeCache {
    pages: Vec<(u64, Box<[Option<Inst>]>)>,
    last: usize,
}

impl CodeCache {
    fn slot(&mut self, pc: u64) -> &mut Option<Inst> {
        let page = pc >> PAGE_SHIFT;
        let idx = ((pc as usize) >> 2) & (SLOTS - 1);
        if self.pages.get(self.last).is_none_or(|p| p.0 != page) {
            match self.pages.iter().position(|p| p.0 == page) {
                Some(i) => self.last = i,
                None => {
                    self.pages
                        .push((page, vec![None; SLOTS].into_boxed_slice()));
                    self.last = self.pages.len() - 1;
                }
            }
        }
        &mut self.pages[self.last].1[idx]
    }
}

/// Runs workgroups: one per thread that executes shaders. It keeps the decoded instructions
/// (valid while the code in memory does not change: make a new executor, or call
/// [`Executor::flush_code`], when it may have) and the translations of the current run.
#[derive(Debug)]
pub struct Executor {
    tlb: Tlb,
    code: CodeCache,
    quantum: u64,
}

impl Default for Executor {
    fn default() -> Self {
        Self::new()
    }
}

impl Executor {
    /// An executor with empty caches.
    pub fn new() -> Self {
        Self {
            tlb: Tlb::default(),
            code: CodeCache::default(),
            quantum: 4096,
        }
    }

    /// Forgets every decoded instruction.
    pub fn flush_code(&mut self) {
        self.code = CodeCache::default();
    }

    /// Sets how many instructions a wave runs before the next wave of its workgroup gets a
    /// turn (default 4096; at least 1).
    pub fn set_quantum(&mut self, n: u64) {
        self.quantum = n.max(1);
    }

    /// Runs `wg` for at most `budget` instructions, until every wave has ended, or until an
    /// instruction stops it (interrupt, trap, error). Stops only at instruction boundaries:
    /// the workgroup can be saved and resumed from there.
    pub fn run(
        &mut self,
        wg: &mut Workgroup,
        mem: &dyn Memory,
        clock: &dyn Clock,
        budget: u64,
    ) -> RunStatus {
        self.tlb.clear();
        let mut done = 0u64;
        let mut lanes = 0u64;
        let n = wg.waves.len();
        let status = |stop, instructions, lane_instructions| RunStatus {
            stop,
            instructions,
            lane_instructions,
        };
        loop {
            if wg.done() {
                return status(Stop::Done, done, lanes);
            }
            if done >= budget {
                return status(Stop::Budget, done, lanes);
            }
            wg.release_barrier();
            // The next ready wave, round-robin.
            let start = wg.next as usize % n.max(1);
            let Some(wi) = (0..n)
                .map(|k| (start + k) % n)
                .find(|&k| wg.waves[k].run == WaveRun::Ready)
            else {
                // Every live wave waits at the barrier and release_barrier found none: cannot
                // happen, but never spin.
                return status(Stop::Done, done, lanes);
            };
            let slice = self.quantum.min(budget - done);
            let (ran, ran_lanes, exit) = self.run_wave(wg, wi, mem, clock, slice);
            done += ran;
            lanes += ran_lanes;
            wg.next = ((wi + 1) % n) as u32;
            let wave = wi as u32;
            let stop = match exit {
                None | Some(Exit::Yield) => continue,
                Some(Exit::Barrier) => {
                    wg.waves[wi].run = WaveRun::AtBarrier;
                    wg.release_barrier();
                    continue;
                }
                Some(Exit::End) => {
                    wg.waves[wi].run = WaveRun::Ended;
                    wg.release_barrier();
                    continue;
                }
                Some(Exit::Interrupt(m0)) => Stop::Interrupt { wave, m0 },
                Some(Exit::Trap(trap_id)) => Stop::Trap {
                    wave,
                    trap_id,
                    pc: wg.waves[wi].pc.wrapping_sub(4),
                },
                Some(Exit::Error(error)) => Stop::Error { wave, error },
            };
            return status(stop, done, lanes);
        }
    }

    /// Runs wave `wi` for at most `slice` instructions; returns how many ran and the exit of
    /// the last one if it stopped the wave.
    fn run_wave(
        &mut self,
        wg: &mut Workgroup,
        wi: usize,
        mem: &dyn Memory,
        clock: &dyn Clock,
        slice: u64,
    ) -> (u64, u64, Option<Exit>) {
        let Workgroup {
            waves, lds, env, ..
        } = wg;
        let Some(w) = waves.get_mut(wi) else {
            return (0, 0, Some(Exit::End));
        };
        let Executor { tlb, code, .. } = self;
        let mut ran = 0u64;
        let mut lanes = 0u64;
        while ran < slice {
            let pc = w.pc;
            if code.slot(pc).is_none() {
                let d = decode::decode(pc, |a| {
                    tlb.read_u32(mem, a)
                        .map_err(|fault| ShaderError::MemoryFault { fault, pc })
                });
                match d {
                    Ok(i) => *code.slot(pc) = Some(i),
                    Err(e) => return (ran, lanes, Some(Exit::Error(e))),
                }
            }
            let Some(inst) = code.slot(pc).as_ref() else {
                return (ran, lanes, Some(Exit::End));
            };
            w.pc = pc.wrapping_add(u64::from(inst.len));
            let exec = w.exec();
            let mut ctx = Ctx {
                w,
                lds,
                mem,
                tlb,
                env,
                clock,
                pc,
                wmask: exec,
            };
            let Some(f) = inst.def.exec else {
                return (
                    ran,
                    lanes,
                    Some(Exit::Error(ShaderError::UnsupportedOpcode {
                        encoding: inst.enc,
                        opcode: inst.def.code,
                        mnemonic: Some(inst.def.name),
                        pc,
                    })),
                );
            };
            let r = f(&mut ctx, inst);
            match r {
                Ok(()) => {
                    ran += 1;
                    lanes += u64::from(exec.count_ones());
                }
                Err(Exit::Error(e)) => {
                    // The faulting instruction has not happened: the wave stays at it.
                    w.pc = pc;
                    return (ran, lanes, Some(Exit::Error(e)));
                }
                Err(e) => return (ran + 1, lanes + u64::from(exec.count_ones()), Some(e)),
            }
        }
        (ran, lanes, None)
    }
}

/// What [`run_dispatch`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchOutcome {
    /// Instructions executed over all workgroups.
    pub instructions: u64,
    /// Lane-instructions executed over all workgroups.
    pub lane_instructions: u64,
    /// M0 of every MSG_INTERRUPT, in the order they were sent.
    pub interrupts: Vec<u32>,
    /// The stop that ended the dispatch early (trap, error, or the budget), if any; Done
    /// otherwise.
    pub stop: Stop,
}

/// Runs every workgroup of `dispatch` to its end on `threads` threads (workgroup `k` of each
/// thread uses scratch wave slots from `thread * waves_per_workgroup`), for at most `budget`
/// instructions in all. A convenience for tests, benchmarks and simple callers; a command
/// processor that must preempt runs [`Executor::run`] itself.
pub fn run_dispatch(
    dispatch: &Dispatch,
    mem: &dyn Memory,
    clock: &dyn Clock,
    threads: usize,
    budget: u64,
) -> DispatchOutcome {
    let total = dispatch.workgroup_count();
    let next = AtomicU64::new(0);
    let used = AtomicU64::new(0);
    let lane_count = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let interrupts = Mutex::new(Vec::new());
    let stop = Mutex::new(Stop::Done);
    let threads = threads.max(1);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (next, used, failed, interrupts, stop) =
                (&next, &used, &failed, &interrupts, &stop);
            let lane_count = &lane_count;
            s.spawn(move || {
                let mut ex = Executor::new();
                let slot = t as u32 * dispatch.waves_per_workgroup();
                while !failed.load(Ordering::Relaxed) {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= total {
                        break;
                    }
                    let mut wg = dispatch.workgroup(k, slot);
                    loop {
                        let left = budget.saturating_sub(used.load(Ordering::Relaxed));
                        let st = ex.run(&mut wg, mem, clock, left.min(1 << 20));
                        used.fetch_add(st.instructions, Ordering::Relaxed);
                        lane_count.fetch_add(st.lane_instructions, Ordering::Relaxed);
                        match st.stop {
                            Stop::Done => break,
                            Stop::Interrupt { m0, .. } => {
                                if let Ok(mut v) = interrupts.lock() {
                                    v.push(m0);
                                }
                            }
                            Stop::Budget if used.load(Ordering::Relaxed) < budget => {}
                            other => {
                                failed.store(true, Ordering::Relaxed);
                                if let Ok(mut s) = stop.lock() {
                                    if *s == Stop::Done {
                                        *s = other;
                                    }
                                }
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    DispatchOutcome {
        instructions: used.into_inner(),
        lane_instructions: lane_count.into_inner(),
        interrupts: interrupts.into_inner().unwrap_or_default(),
        stop: stop.into_inner().unwrap_or(Stop::Done),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send<T: Send>() {}
    fn sync<T: Sync>() {}

    #[test]
    fn executors_and_workgroups_move_between_threads_and_dispatches_are_shared() {
        send::<Executor>();
        send::<Workgroup>();
        sync::<Dispatch>();
    }
}
