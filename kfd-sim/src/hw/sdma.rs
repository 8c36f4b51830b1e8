//! The SDMA engine of a simulated GPU: executes an indirect buffer of SDMA v4 packets against a
//! GPU VM, as the DMA ring does on hardware.
//!
//! Packets are decoded with [`kfd_abi::sdma::Decoder`], the same code the plugin's encoder is
//! tested against, so the count convention (`bytes - 1`, see `kfd_abi::sdma`) is one decision
//! shared by both sides.
//!
//! How memory moves:
//!
//! - each packet's whole source and destination ranges are resolved against the VM first (every
//!   byte mapped, the destination writable, no doorbell or MMIO page): a packet that would fault
//!   moves no byte; packets before it have executed, as on hardware;
//! - resolving clones the `Arc`s of the memory behind each range and releases the VM lock: a
//!   concurrent `FREE_MEMORY_OF_GPU` or `GEM_CLOSE` cannot free memory the engine is writing;
//! - VRAM/GTT <-> VRAM/GTT is a `memmove` between the shared mappings; VRAM/GTT -> userptr is one
//!   `pread` of the memfd into the user memory (in process) or one `process_vm_writev` straight
//!   out of the mapping (another process); userptr -> VRAM/GTT is one `pwrite` into the memfd
//!   straight from the user memory (in process) or `process_vm_readv` into a small per-thread
//!   bounce buffer and `pwrite` (another process), which spares fresh pages the zeroing and the
//!   page faults of a write through the mapping (see `SharedMap::read_from_process`);
//!   userptr <-> userptr goes through a bounded bounce buffer.
//! - A GPU has several engines ([`Engines`], the topology's PCIe and xGMI SDMA engines):
//!   submissions of different entities run at the same time, one per engine, each on the thread
//!   that submitted it.
//!   CONSTANT_FILL likewise, except that a fill of VRAM/GTT with zeros punches the whole pages
//!   out of the memfd (`fallocate(PUNCH_HOLE)`; they read as zeros, as after the fill) and writes
//!   only the partial pages at its ends: on hardware a fill costs the CPU nothing, and here it
//!   costs neither CPU nor memory for the pages it zeroes (see [`Backing::fill`]). Likewise a
//!   copy out of VRAM/GTT that was never written (a hole of the memfd) writes zeros to the
//!   destination without reading the hole, which would allocate it ([`Backing::write_to_process`]).
//!
//! The CPU time the engine spends (per-thread CPU clock around each submission, on the thread
//! that submitted, since execution is synchronous) is summed per machine in [`EngineTime`], so a
//! benchmark can tell the simulated GPU's work from the work of the program that drives it.
//!
//! Approximations: userptr memory that the owner unmapped is only noticed while moving (the packet
//! then stops part-way); mappings are always readable (`AMDGPU_VM_PAGE_READABLE` is not enforced,
//! `WRITEABLE` is); the IB address is aligned down to 32 bytes as the SDMA v4 ring's
//! INDIRECT_BUFFER packet takes it; IBs larger than [`MAX_IB_BYTES`] and submissions running
//! longer than [`JOB_TIMEOUT`] fail like a hung job.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kfd_abi::sdma::{DecodeError, Decoder, Packet};
use kfd_abi::Errno;

use super::backing::{Backing, ProcessMemory};
use super::vm::{Vm, VmTarget};
use crate::host::lock;
use crate::host::{self, pattern_chunk, Transfer};
use crate::lock_order::{rank, Ordered};

/// CPU time the engine has used, summed over every thread that ran a submission.
#[derive(Debug, Default)]
pub(crate) struct EngineTime {
    cpu_ns: AtomicU64,
}

impl EngineTime {
    /// Runs `f` (a submission's execution) and adds the CPU time the calling thread spent in it
    /// (`CLOCK_THREAD_CPUTIME_ID`).
    pub(crate) fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        let start = host::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID);
        let out = f();
        let spent = host::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).saturating_sub(start);
        self.cpu_ns.fetch_add(spent, Ordering::Relaxed);
        out
    }

    /// The total so far.
    pub(crate) fn cpu_time(&self) -> Duration {
        Duration::from_nanos(self.cpu_ns.load(Ordering::Relaxed))
    }
}

/// The SDMA engines of one GPU, as the DMA ring's scheduler sees them: a job runs on an idle
/// engine, and when every engine is busy it waits for one, so at most as many jobs of the GPU
/// execute at the same time as it has engines (amdgpu's scheduler gives an idle entity the least
/// busy engine, `drm_sched_pick_best`). Execution is synchronous in the submitting thread: the
/// engine a job runs on is that thread while it holds the engine.
#[derive(Debug)]
pub(crate) struct Engines {
    busy: Vec<Ordered<()>>,
    next: std::sync::atomic::AtomicUsize,
}

impl Engines {
    /// `count` engines (at least one).
    pub(crate) fn new(count: u32) -> Self {
        let count = usize::try_from(count).unwrap_or(1).max(1);
        Self {
            busy: (0..count)
                .map(|_| Ordered::new(rank::SDMA_BUSY, ()))
                .collect(),
            next: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// How many engines there are.
    #[cfg(test)]
    pub(crate) fn count(&self) -> usize {
        self.busy.len()
    }

    /// Runs `job` on an engine: the first idle one, else the next one in turn once it is free.
    pub(crate) fn run<R>(&self, job: impl FnOnce() -> R) -> R {
        for e in &self.busy {
            match e.try_lock() {
                Ok(_held) => return job(),
                Err(std::sync::TryLockError::Poisoned(p)) => {
                    let _held = p.into_inner();
                    return job();
                }
                Err(std::sync::TryLockError::WouldBlock) => {}
            }
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.busy.len();
        let _held = self.busy.get(i).map(lock);
        job()
    }
}

/// The largest IB the engine fetches (the simulator's bound).
pub(crate) const MAX_IB_BYTES: u64 = 4 << 20;
/// amdgpu's default job timeout for non-compute rings (`lockup_timeout`, 10 s): a submission
/// still running then is treated as hung.
pub(crate) const JOB_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of the bounce buffer for userptr <-> userptr moves.
const BOUNCE: usize = 64 << 10;

/// Why a submission failed on the engine (the kernel log's "VM fault" or "ring timeout").
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Fault {
    /// An address with no mapping.
    #[error("GPU VM fault at {va:#x} (not mapped)")]
    Unmapped {
        /// The faulting GPU VA.
        va: u64,
    },
    /// A write to a read-only mapping.
    #[error("GPU VM fault at {va:#x} (write to a read-only mapping)")]
    ReadOnly {
        /// The faulting GPU VA.
        va: u64,
    },
    /// A doorbell or MMIO page, which the engine does not copy to or from.
    #[error("GPU VM fault at {va:#x} (doorbell or MMIO page)")]
    NotMemory {
        /// The faulting GPU VA.
        va: u64,
    },
    /// A range that wraps around the address space.
    #[error("GPU VM fault: range at {va:#x} of {len} bytes wraps")]
    Wraps {
        /// Start of the range.
        va: u64,
        /// Its length.
        len: u64,
    },
    /// Userptr memory that is no longer there.
    #[error("userptr memory at CPU address {addr:#x} is gone")]
    UserMemory {
        /// The CPU address.
        addr: u64,
    },
    /// A malformed packet.
    #[error("bad SDMA packet: {0}")]
    Decode(#[from] DecodeError),
    /// The IB is larger than the engine fetches.
    #[error("IB of {0} bytes is too large")]
    IbTooLarge(u64),
    /// The job ran past the timeout.
    #[error("SDMA job timed out")]
    Timeout,
    /// A POLL_REGMEM on a register other than the HDP flush: the simulator has no registers.
    #[error("POLL_REGMEM on register {addr:#x}: registers are not simulated")]
    Register {
        /// The register address field.
        addr: u64,
    },
    /// A 64-bit atomic at an address that is not qword aligned.
    #[error("GPU VM fault at {va:#x} (64-bit atomic not qword aligned)")]
    Misaligned {
        /// The address.
        va: u64,
    },
}

impl Fault {
    /// What the fence of the failed submission reports: `ETIME`, as amdgpu sets on the finished
    /// fence of a job that hung and was reset (`amdgpu_job_timedout`).
    pub(crate) fn errno(&self) -> Errno {
        Errno::ETIME
    }
}

/// A part of a GPU VA range, resolved to its memory.
#[derive(Clone, Debug)]
enum Piece {
    Mem {
        backing: Arc<Backing>,
        off: u64,
        len: u64,
    },
    User {
        mem: ProcessMemory,
        addr: u64,
        len: u64,
    },
}

impl Piece {
    fn len(&self) -> u64 {
        match self {
            Piece::Mem { len, .. } | Piece::User { len, .. } => *len,
        }
    }
}

/// Resolves `[va, va + len)` in `vm` into pieces; every byte must be mapped (and writable if
/// `write`).
fn resolve(vm: &Ordered<Vm>, va: u64, len: u64, write: bool) -> Result<Vec<Piece>, Fault> {
    let end = va.checked_add(len).ok_or(Fault::Wraps { va, len })?;
    let vm = lock(vm);
    let mut pieces = Vec::new();
    let mut cur = va;
    while cur < end {
        let (start, m) = vm.lookup(cur).ok_or(Fault::Unmapped { va: cur })?;
        if write && !m.writable {
            return Err(Fault::ReadOnly { va: cur });
        }
        let within = cur - start;
        let n = (start.saturating_add(m.size)).min(end) - cur;
        pieces.push(match &m.target {
            VmTarget::Memory { backing, offset } => {
                let off = offset.saturating_add(within);
                if off.saturating_add(n) > backing.size {
                    return Err(Fault::Unmapped { va: cur });
                }
                Piece::Mem {
                    backing: Arc::clone(backing),
                    off,
                    len: n,
                }
            }
            VmTarget::User { cpu_addr, mem } => Piece::User {
                mem: *mem,
                addr: cpu_addr.saturating_add(within),
                len: n,
            },
            VmTarget::Doorbell | VmTarget::Mmio => return Err(Fault::NotMemory { va: cur }),
        });
        cur += n;
    }
    Ok(pieces)
}

/// Moves `n` bytes from `src` (at `si` into it) to `dst` (at `di`).
fn move_bytes(src: &Piece, si: u64, dst: &Piece, di: u64, n: u64) -> Result<(), Fault> {
    match (src, dst) {
        (
            Piece::Mem {
                backing: s,
                off: so,
                ..
            },
            Piece::Mem {
                backing: d,
                off: doff,
                ..
            },
        ) => {
            let (from, to) = (so + si, doff + di);
            if d.map().copy_from(to, s.map(), from, n) {
                Ok(())
            } else {
                Err(Fault::Unmapped { va: to })
            }
        }
        (Piece::User { mem, addr, .. }, Piece::Mem { backing, off, .. }) => backing
            .read_from_process(Transfer {
                offset: off + di,
                len: n,
                pid: mem.pid(),
                remote: addr + si,
            })
            .map_err(|_| Fault::UserMemory { addr: addr + si }),
        (Piece::Mem { backing, off, .. }, Piece::User { mem, addr, .. }) => backing
            .write_to_process(Transfer {
                offset: off + si,
                len: n,
                pid: mem.pid(),
                remote: addr + di,
            })
            .map_err(|_| Fault::UserMemory { addr: addr + di }),
        (
            Piece::User {
                mem: sm, addr: sa, ..
            },
            Piece::User {
                mem: dm, addr: da, ..
            },
        ) => {
            let mut buf = vec![0u8; BOUNCE];
            let mut done = 0u64;
            while done < n {
                let k = (n - done).min(BOUNCE as u64);
                #[allow(clippy::cast_possible_truncation)] // k <= BOUNCE
                let chunk = &mut buf[..k as usize];
                let (from, to) = (sa + si + done, da + di + done);
                sm.read(from, chunk)
                    .map_err(|_| Fault::UserMemory { addr: from })?;
                dm.write(to, chunk)
                    .map_err(|_| Fault::UserMemory { addr: to })?;
                done += k;
            }
            Ok(())
        }
    }
}

/// COPY_LINEAR: copies between two resolved ranges of equal length.
fn copy(src: &[Piece], dst: &[Piece]) -> Result<(), Fault> {
    let (mut i, mut j, mut si, mut dj) = (0usize, 0usize, 0u64, 0u64);
    while let (Some(s), Some(d)) = (src.get(i), dst.get(j)) {
        let n = (s.len() - si).min(d.len() - dj);
        move_bytes(s, si, d, dj, n)?;
        si += n;
        dj += n;
        if si == s.len() {
            i += 1;
            si = 0;
        }
        if dj == d.len() {
            j += 1;
            dj = 0;
        }
    }
    Ok(())
}

/// CONSTANT_FILL: writes `value` (little-endian, repeated from the first byte) over the pieces.
fn fill(dst: &[Piece], value: u32) -> Result<(), Fault> {
    let pattern = value.to_le_bytes();
    let mut at = 0u64;
    for p in dst {
        #[allow(clippy::cast_possible_truncation)] // < 4
        let phase = (at % 4) as usize;
        match p {
            Piece::Mem { backing, off, len } => {
                if !backing.fill(*off, *len, pattern, phase) {
                    return Err(Fault::Unmapped { va: *off });
                }
            }
            Piece::User { mem, addr, len } => {
                let chunk = pattern_chunk(pattern, phase);
                let mut done = 0u64;
                while done < *len {
                    let k = (*len - done).min(chunk.len() as u64);
                    #[allow(clippy::cast_possible_truncation)] // k <= chunk.len()
                    let part = &chunk[..k as usize];
                    mem.write(addr + done, part)
                        .map_err(|_| Fault::UserMemory { addr: addr + done })?;
                    done += k;
                }
            }
        }
        at += p.len();
    }
    Ok(())
}

/// Reads `len` bytes at GPU VA `va` of `vm` (every byte mapped).
pub(crate) fn read_va(vm: &Ordered<Vm>, va: u64, len: u64) -> Result<Vec<u8>, Fault> {
    let mut raw = Vec::new();
    for p in resolve(vm, va, len, false)? {
        let start = raw.len();
        let n = usize::try_from(p.len()).map_err(|_| Fault::Wraps { va, len })?;
        raw.resize(start + n, 0);
        let buf = &mut raw[start..];
        match &p {
            Piece::Mem { backing, off, .. } => {
                if !backing.read(*off, buf) {
                    return Err(Fault::Unmapped { va });
                }
            }
            Piece::User { mem, addr, .. } => {
                mem.read(*addr, buf)
                    .map_err(|_| Fault::UserMemory { addr: *addr })?;
            }
        }
    }
    Ok(raw)
}

/// Writes `bytes` at GPU VA `va` of `vm` (every byte mapped writable); nothing is written if any
/// byte is not.
pub(crate) fn write_va(vm: &Ordered<Vm>, va: u64, bytes: &[u8]) -> Result<(), Fault> {
    let mut at = 0usize;
    for p in resolve(vm, va, bytes.len() as u64, true)? {
        let n = usize::try_from(p.len()).map_err(|_| Fault::Unmapped { va })?;
        let part = bytes.get(at..at + n).ok_or(Fault::Unmapped { va })?;
        match &p {
            Piece::Mem { backing, off, .. } => {
                if !backing.write(*off, part) {
                    return Err(Fault::Unmapped { va });
                }
            }
            Piece::User { mem, addr, .. } => {
                mem.write(*addr, part)
                    .map_err(|_| Fault::UserMemory { addr: *addr })?;
            }
        }
        at += n;
    }
    Ok(())
}

/// Reads the IB of `bytes` bytes at `va` (aligned down to 32 bytes) as dwords.
fn fetch_ib(vm: &Ordered<Vm>, va: u64, bytes: u32) -> Result<Vec<u32>, Fault> {
    let dwords = u64::from(bytes / 4);
    let len = dwords * 4;
    if len > MAX_IB_BYTES {
        return Err(Fault::IbTooLarge(len));
    }
    let raw = read_va(vm, va & !0x1f, len)?;
    Ok(raw
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// What one packet did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ran {
    /// It executed; the engine goes on with the next one.
    Done,
    /// A memory poll whose condition does not hold yet: the engine polls it again later (the
    /// read pointer stays at the packet).
    Waiting,
}

/// The GPU timestamp counter (gfx9: 100 MHz), on the clock GET_CLOCK_COUNTERS reports it on.
pub(crate) fn gpu_timestamp() -> u64 {
    host::clock_ns(libc::CLOCK_MONOTONIC_RAW) / 10
}

/// Executes one packet against `vm`; a TRAP calls `on_trap` with its context (the interrupt as
/// the engine's owner models it).
///
/// Approximations: a memory poll polls for ever whatever its retry count (on hardware an
/// exhausted count raises an interrupt); the HDP flush does nothing (the simulator's memory is
/// coherent); ATOMIC ADD64 is a read and a write of the VM, not atomic against a CPU writing the
/// same qword at the same time (ROCr's completion signals are written by the engine alone while a
/// copy is in flight).
pub(crate) fn run_packet(
    vm: &Ordered<Vm>,
    packet: Packet,
    on_trap: &mut dyn FnMut(u32),
) -> Result<Ran, Fault> {
    match packet {
        Packet::Nop { .. } => {}
        Packet::CopyLinear { src, dst, bytes } => {
            let s = resolve(vm, src, bytes, false)?;
            let d = resolve(vm, dst, bytes, true)?;
            copy(&s, &d)?;
        }
        Packet::ConstFill { dst, value, bytes } => {
            let d = resolve(vm, dst, bytes, true)?;
            fill(&d, value)?;
        }
        Packet::Fence { addr, data } => write_va(vm, addr, &data.to_le_bytes())?,
        Packet::Trap { context } => on_trap(context),
        Packet::PollMem {
            addr,
            value,
            mask,
            func,
            ..
        } => {
            let raw = read_va(vm, addr, 4)?;
            let polled = u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
            if !func.holds(polled, mask, value) {
                return Ok(Ran::Waiting);
            }
        }
        Packet::HdpFlush => {}
        Packet::PollRegister { addr } => return Err(Fault::Register { addr }),
        Packet::AtomicAdd64 { addr, value } => {
            if addr % 8 != 0 {
                return Err(Fault::Misaligned { va: addr });
            }
            let raw = read_va(vm, addr, 8)?;
            let mut old = [0u8; 8];
            old.copy_from_slice(&raw);
            let new = u64::from_le_bytes(old).wrapping_add(value);
            write_va(vm, addr, &new.to_le_bytes())?;
        }
        Packet::Timestamp { addr } => write_va(vm, addr, &gpu_timestamp().to_le_bytes())?,
    }
    Ok(Ran::Done)
}

/// How long a submission waits between two polls of an unsatisfied memory poll.
const CS_POLL_INTERVAL: Duration = Duration::from_micros(200);

/// Executes the IB of `bytes` bytes at GPU VA `ib_va` against `vm`, packet by packet, until the
/// end or the first fault. `started` is when the job started (for the timeout). A TRAP in a
/// command submission interrupts only the kernel's own fence handling, which the simulator does
/// not model: it does nothing here.
pub(crate) fn execute(
    vm: &Ordered<Vm>,
    ib_va: u64,
    bytes: u32,
    started: Instant,
) -> Result<(), Fault> {
    let ib = fetch_ib(vm, ib_va, bytes)?;
    for packet in Decoder::new(&ib) {
        let packet = packet?;
        while run_packet(vm, packet, &mut |_| {})? == Ran::Waiting {
            if started.elapsed() > JOB_TIMEOUT {
                return Err(Fault::Timeout);
            }
            std::thread::sleep(CS_POLL_INTERVAL);
        }
        if started.elapsed() > JOB_TIMEOUT {
            return Err(Fault::Timeout);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::backing::Domain;
    use crate::hw::vm::VmMapping;
    use kfd_abi::sdma::IbBuilder;

    fn mem(size: u64) -> Arc<Backing> {
        Arc::new(Backing::new(size, Domain::Vram, 0, true).unwrap())
    }

    fn map(vm: &Ordered<Vm>, va: u64, b: &Arc<Backing>, offset: u64, size: u64, writable: bool) {
        lock(vm)
            .map(
                va,
                VmMapping {
                    size,
                    target: VmTarget::Memory {
                        backing: Arc::clone(b),
                        offset,
                    },
                    writable,
                },
            )
            .unwrap();
    }

    fn ib_at(vm: &Ordered<Vm>, va: u64, ib: IbBuilder) -> (Arc<Backing>, u32) {
        let dwords = ib.finish();
        let bytes: Vec<u8> = dwords.iter().flat_map(|d| d.to_le_bytes()).collect();
        let size = (bytes.len() as u64).next_multiple_of(4096);
        let b = mem(size);
        assert!(b.write(0, &bytes));
        map(vm, va, &b, 0, size, false);
        (b, u32::try_from(bytes.len()).unwrap())
    }

    /// Runs `jobs` jobs, one per thread, on `engines`; each job stays until `wanted` jobs are
    /// inside at once or `patience` has passed. Returns how many were inside at once at most.
    fn most_at_once(engines: &Engines, jobs: usize, wanted: usize, patience: Duration) -> usize {
        use std::sync::atomic::AtomicUsize;
        let (inside, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|s| {
            for _ in 0..jobs {
                s.spawn(|| {
                    engines.run(|| {
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        let until = Instant::now() + patience;
                        while most.load(Ordering::SeqCst) < wanted && Instant::now() < until {
                            std::thread::yield_now();
                        }
                        inside.fetch_sub(1, Ordering::SeqCst);
                    });
                });
            }
        });
        most.into_inner()
    }

    #[test]
    fn a_gpu_runs_as_many_jobs_at_once_as_it_has_engines() {
        // One engine: a second job never gets in while the first waits for it.
        let short = Duration::from_millis(200);
        assert_eq!(most_at_once(&Engines::new(1), 2, 2, short), 1);
        // Two engines: two jobs get in together (the wait ends as soon as they do), never three.
        let long = Duration::from_secs(30);
        assert_eq!(most_at_once(&Engines::new(2), 3, 2, long), 2);
        assert_eq!(most_at_once(&Engines::new(5), 3, 3, long), 3);
        assert_eq!(Engines::new(0).count(), 1);
    }

    #[test]
    fn copies_span_mappings_and_count_is_bytes_minus_one() {
        let vm = Ordered::new(rank::VM, Vm::new());
        let (a, b) = (mem(8192), mem(8192));
        let data: Vec<u8> = (0..8192u32).map(|i| (i * 7).to_le_bytes()[0]).collect();
        assert!(a.write(0, &data));
        // The destination is two mappings of different BOs back to back.
        let c = mem(4096);
        map(&vm, 0x10_0000, &a, 0, 8192, false);
        map(&vm, 0x20_0000, &b, 4096, 4096, true);
        map(&vm, 0x20_1000, &c, 0, 4096, true);
        let mut ib = IbBuilder::new();
        ib.copy_linear(0x10_0000 + 1, 0x20_0000 + 1, 8000);
        let (_ib, n) = ib_at(&vm, 0x90_0000, ib);
        execute(&vm, 0x90_0000, n, Instant::now()).unwrap();
        let mut got = vec![0u8; 4096];
        assert!(b.read(4096, &mut got));
        assert_eq!(got[0], 0, "byte before the range untouched");
        assert_eq!(&got[1..], &data[1..4096]);
        let mut got = vec![0u8; 4096];
        assert!(c.read(0, &mut got));
        assert_eq!(&got[..3905], &data[4096..8001]);
        assert_eq!(
            got[3905], 0,
            "exactly 8000 bytes: the count field is bytes - 1"
        );
    }

    #[test]
    fn a_faulting_packet_moves_nothing_but_earlier_ones_ran() {
        let vm = Ordered::new(rank::VM, Vm::new());
        let a = mem(4096);
        map(&vm, 0x10_0000, &a, 0, 4096, true);
        let mut ib = IbBuilder::new();
        ib.const_fill(0x10_0000, 0x0403_0201, 6);
        // Ends one byte past the mapping.
        ib.const_fill(0x10_0000 + 8, 0xffff_ffff, 4089);
        let (_ib, n) = ib_at(&vm, 0x90_0000, ib);
        let r = execute(&vm, 0x90_0000, n, Instant::now());
        assert_eq!(r, Err(Fault::Unmapped { va: 0x10_1000 }));
        let mut got = [0u8; 16];
        assert!(a.read(0, &mut got));
        assert_eq!(got, [1, 2, 3, 4, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn a_zero_fill_reads_back_as_zeros_around_unaligned_edges() {
        let vm = Ordered::new(rank::VM, Vm::new());
        let a = mem(4 * 4096);
        assert!(a.write(0, &[0xff; 4 * 4096]));
        map(&vm, 0x10_0000, &a, 0, 4 * 4096, true);
        // From the middle of page 0 to the middle of page 3: pages 1 and 2 are punched out,
        // the edges written.
        let mut ib = IbBuilder::new();
        ib.const_fill(0x10_0000 + 100, 0, 3 * 4096);
        let (_ib, n) = ib_at(&vm, 0x90_0000, ib);
        let engine = EngineTime::default();
        engine
            .run(|| execute(&vm, 0x90_0000, n, Instant::now()))
            .unwrap();
        let mut got = vec![0u8; 4 * 4096];
        assert!(a.read(0, &mut got));
        assert!(got[..100].iter().all(|&b| b == 0xff));
        assert!(got[100..100 + 3 * 4096].iter().all(|&b| b == 0));
        assert!(got[100 + 3 * 4096..].iter().all(|&b| b == 0xff));
        assert!(engine.cpu_time() > Duration::ZERO);
    }

    #[test]
    fn writes_to_read_only_mappings_and_doorbells_fault() {
        let vm = Ordered::new(rank::VM, Vm::new());
        let a = mem(4096);
        map(&vm, 0x10_0000, &a, 0, 4096, false);
        lock(&vm)
            .map(
                0x20_0000,
                VmMapping {
                    size: 8192,
                    target: VmTarget::Doorbell,
                    writable: true,
                },
            )
            .unwrap();
        let mut ib = IbBuilder::new();
        ib.const_fill(0x10_0000, 1, 4);
        let (_ib, n) = ib_at(&vm, 0x90_0000, ib);
        assert_eq!(
            execute(&vm, 0x90_0000, n, Instant::now()),
            Err(Fault::ReadOnly { va: 0x10_0000 })
        );
        let mut ib = IbBuilder::new();
        ib.copy_linear(0x10_0000, 0x20_0000, 4);
        let (_ib2, n) = ib_at(&vm, 0xa0_0000, ib);
        assert_eq!(
            execute(&vm, 0xa0_0000, n, Instant::now()),
            Err(Fault::NotMemory { va: 0x20_0000 })
        );
    }
}
