//! The process's GPU virtual memory as the shader core reads it (kfd-shader's [`Memory`]), and
//! the command processor's own accesses to signals and queue fields.
//!
//! - **VRAM and GTT** are memfds the simulator maps ([`Backing`]): a translation is a run of the
//!   shared mapping, as long as the VM mapping, read and written in place by the shader with
//!   real atomics, shared with the client's CPU mappings and every other queue. The translating
//!   [`GpuMemory`] keeps an `Arc` of every backing it handed out, so a BO freed while a wave
//!   runs keeps its memory until the run is over (on hardware the free waits for the VM's
//!   fences).
//! - **Userptr (and SVM) memory** is the client's own: in process that is this process, over
//!   CUSE another process, which only `process_vm_readv`/`writev` reach. It is mirrored: the
//!   first translation of an address copies a window of up to [`WINDOW`] bytes around it into
//!   a buffer of ours (with a twin of what was read), the shader works on that buffer, and
//!   [`GpuMemory::flush`] writes back only the bytes that differ from the twin, after the time
//!   slice (round) that used it (one translation is shared by the workers of a round). So a
//!   workgroup sees its own writes, writes of different workgroups to different bytes of one
//!   page all land, atomics of different workgroups in one round are atomic among them, and
//!   bytes the client's CPU wrote meanwhile are not overwritten with stale copies. What it does
//!   not give: atomics on such memory are not atomic against the client's CPU, and a store
//!   becomes visible to the client at the end of the round, not at once. ROCr and HIP put
//!   kernel arguments, signals and the host side of copies there (read by the kernel, or
//!   written once by it); atomics across the host and the device belong in fine-grained memory
//!   that is a GTT BO here, which is shared for real.
//! - **Mirrors live as long as the dispatch may use them** ([`Kept`]): a dispatch's next round
//!   starts with the mirrors of its last one, unless that round executed an instruction that
//!   must see other agents' writes ([`Memory::acquire`]: an atomic, a GLC load, a cache
//!   invalidation), in which case it reads the client's memory afresh, as every round did
//!   before; and at a round's first acquire every mirror takes the client's current bytes at
//!   once (but those the GPU stored since the last write-back), so the loads after an acquire
//!   see at least what the acquire saw. This is the GPU's own rule: a dispatch's packet
//!   acquires memory when it starts (what the CPU wrote before ringing the doorbell is seen: a
//!   dispatch's mirrors are its own, made after it started), and within a kernel a plain load
//!   may be served from a cache (the L1 and L2 of gfx90a hold lines of host memory between the
//!   fences); only atomics, GLC loads (atomic loads at agent or system scope, volatile loads)
//!   and acquire fences must see the memory as it is. A CPU store to
//!   memory a running kernel reads with plain loads is a data race in HSA's and HIP's models
//!   (nothing orders it before the kernel's loads): the kernel may see either value, here the
//!   value of when its mirror was made. The GPU's writes reach the client at the end of every
//!   round, so before the completion signal (which the command processor writes after the
//!   last round's write-back), as the packet's release fence makes them visible. A kept
//!   mirror is checked against the VM before each round (still the same client memory at the
//!   same address, with the same access), and a dispatch keeps at most [`KEEP_MAX`] bytes.
//!
//! The same code runs in process (where the client is this process), so the tests exercise the
//! path the daemon takes.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use kfd_shader::{Clock, HostRun, Memory};

use super::super::backing::{Backing, ProcessMemory};
use super::super::sdma::{gpu_timestamp, read_va, write_va, Fault};
use super::super::vm::{Vm, VmTarget};
use crate::host::{lock, process_vm_write_pieces};
use crate::lock_order::{rank, Ordered};

/// The largest window of client memory one translation mirrors. Small, because a round that
/// reads client memory afresh (a dispatch's first, or one after an acquire) mirrors what its
/// waves touch, and a wave of a grid-stride copy (ROCr's and HIP's
/// blits) touches a few hundred bytes in each of several places of a large buffer: windows of
/// 256 KiB made ROCr's 1 MiB `hsa_memory_copy` read (and compare, and allocate twice) about
/// 3 MiB per workgroup, which took the whole round in a qemu TCG guest, one workgroup per
/// round, ten seconds per copy.
pub(crate) const WINDOW: u64 = 16 << 10;
/// The most bytes of mirrors a dispatch keeps from one round to the next (more: the next round
/// mirrors afresh what it touches). Each byte costs two (the mirror and its twin).
pub(crate) const KEEP_MAX: usize = 64 << 20;
const PAGE: u64 = 4096;
/// The bytes a mirror's write-back compares at once.
const CHUNK: usize = 64;

/// Client memory the GPU may reach outside its VM mappings: SVM ranges (start, end) of the
/// process, with whose memory they are.
#[derive(Clone, Debug, Default)]
pub(crate) struct SvmView {
    /// The ranges, sorted, not overlapping.
    pub ranges: Vec<(u64, u64)>,
    /// The client's memory.
    pub mem: Option<ProcessMemory>,
}

/// A mirrored window of client memory.
struct Mirror {
    /// GPU VA of its first byte.
    va: u64,
    /// Client CPU address of its first byte.
    cpu: u64,
    mem: ProcessMemory,
    /// The bytes the shader reads and writes: an allocation of `len` bytes owned by the mirror
    /// (made from a boxed slice, given back in `Drop`).
    data: NonNull<u8>,
    len: usize,
    /// What was read from the client, as last read or written back.
    twin: Box<[u8]>,
    writable: bool,
    /// Handed out writable since the last write-back: only such a mirror can have changed
    /// (reads get runs that are not writable, so a wave's first store to a window translates
    /// it again).
    written: AtomicBool,
}

// SAFETY: the mirror owns its allocation; the shader accesses it through the run it was given
// only atomically, from any thread, and the mirror reads it only in `flush`, which takes
// `&mut GpuMemory` (no run is in use then).
unsafe impl Send for Mirror {}
// SAFETY: see Send; shared references to a mirror only read its plain fields and set its
// atomic `written`.
unsafe impl Sync for Mirror {}

impl Mirror {
    /// Reads `[va, va + len)` of the client (at CPU address `cpu`); `None` if any byte is not
    /// there.
    fn read(va: u64, cpu: u64, len: u64, mem: ProcessMemory, writable: bool) -> Option<Self> {
        let n = usize::try_from(len).ok()?;
        let mut buf = vec![0u8; n];
        if let Err(e) = mem.read(cpu, &mut buf) {
            log::debug!(
                "kfd-sim: GPU read of {n} bytes of pid {}'s memory at {cpu:#x}: {e}",
                mem.pid()
            );
            return None;
        }
        let twin = buf.clone().into_boxed_slice();
        let raw = Box::into_raw(buf.into_boxed_slice());
        let data = NonNull::new(raw.cast::<u8>())?;
        Some(Self {
            va,
            cpu,
            mem,
            data,
            len: n,
            twin,
            writable,
            written: AtomicBool::new(false),
        })
    }

    fn covers(&self, va: u64) -> bool {
        va.checked_sub(self.va)
            .is_some_and(|off| off < self.len as u64)
    }

    /// Takes the client's current bytes into the mirror while runs of it may be in use: a
    /// byte still equal to the twin (the GPU has not changed it) becomes the client's, with a
    /// compare-exchange so that a wave's concurrent store is never undone; the twin follows.
    /// A window the client no longer has is left as it is.
    fn refresh(&mut self) {
        let mut fresh = vec![0u8; self.len];
        if self.mem.read(self.cpu, &mut fresh).is_err() {
            return;
        }
        for (i, (&new, old)) in fresh.iter().zip(self.twin.iter_mut()).enumerate() {
            if new == *old {
                continue;
            }
            // SAFETY: `i < len`, inside the allocation this mirror owns, which runs handed out
            // this round access only atomically (byte, dword and qword atomics of the shader
            // overlap it; x86 keeps them coherent).
            let at = unsafe { std::sync::atomic::AtomicU8::from_ptr(self.data.as_ptr().add(i)) };
            if at
                .compare_exchange(*old, new, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                *old = new;
            }
        }
    }

    /// The run of the mirror, writable if `write` (and the memory is).
    fn run(&self, write: bool) -> HostRun {
        let writable = write && self.writable;
        if writable && !self.written.load(Ordering::Relaxed) {
            self.written.store(true, Ordering::Relaxed);
        }
        HostRun {
            va: self.va,
            len: self.len as u64,
            host: self.data,
            writable,
        }
    }

    /// Writes back the bytes that differ from what was read (the twin), and only those; the
    /// first address that failed.
    ///
    /// The comparison goes by chunks of [`CHUNK`] bytes (slice equality, a `memcmp`), so an
    /// unchanged window costs one pass at memory speed and a changed one byte loops only
    /// around its changes. Runs of changed bytes are never joined across unchanged ones: a
    /// kept mirror's unchanged bytes may be older than the client's (the CPU may write other
    /// bytes of the window while a kernel runs), and writing them back would undo the CPU's
    /// stores. All runs of a window go in one `process_vm_writev`.
    fn flush(&mut self) -> Result<(), u64> {
        if !std::mem::replace(self.written.get_mut(), false) {
            // Not handed out writable since the last write-back: unchanged.
            return Ok(());
        }
        // SAFETY: `data` is the live allocation of `len` bytes this mirror owns; `&mut self`
        // means no run of it is in use (flush is called between runs); `twin` is a separate
        // allocation.
        let now = unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.len) };
        let twin = &mut self.twin;
        if now == &twin[..] {
            return Ok(());
        }
        let mut runs: Vec<(usize, usize)> = Vec::new();
        let mut c = 0;
        while c < now.len() {
            let e = (c + CHUNK).min(now.len());
            let mut k = c;
            while let Some((lo, hi)) = changed_run(&now[k..e], &twin[k..e]) {
                let (lo, hi) = (k + lo, k + hi);
                match runs.last_mut() {
                    // Continues the run of the chunk before.
                    Some(last) if last.1 == lo => last.1 = hi,
                    _ => runs.push((lo, hi)),
                }
                k = hi;
            }
            c = e;
        }
        for &(start, end) in &runs {
            twin[start..end].copy_from_slice(&now[start..end]);
        }
        process_vm_write_pieces(self.mem.pid(), self.cpu, now, &runs)
    }
}

/// The first run of bytes where `now` differs from `then` (of equal length): its first and one
/// past its last byte.
fn changed_run(now: &[u8], then: &[u8]) -> Option<(usize, usize)> {
    if now == then {
        return None;
    }
    let lo = now.iter().zip(then).position(|(a, b)| a != b)?;
    let len = now[lo..]
        .iter()
        .zip(&then[lo..])
        .position(|(a, b)| a == b)
        .unwrap_or(now.len() - lo);
    Some((lo, lo + len))
}

/// The first and one past the last byte where `now` differs from `then` (of equal length).
#[cfg(test)]
fn changed(now: &[u8], then: &[u8]) -> Option<(usize, usize)> {
    if now == then {
        return None;
    }
    let differs = |(a, b): (&u8, &u8)| a != b;
    let lo = now.iter().zip(then).position(differs)?;
    let hi = now.iter().zip(then).rposition(differs)?;
    Some((lo, hi + 1))
}

impl Drop for Mirror {
    fn drop(&mut self) {
        let slice = std::ptr::slice_from_raw_parts_mut(self.data.as_ptr(), self.len);
        // SAFETY: `data`/`len` are the boxed slice made in `read`, released only here.
        drop(unsafe { Box::from_raw(slice) });
    }
}

/// The mirrors a dispatch keeps from one round to the next ([`GpuMemory::keep`]), sorted by
/// address, not overlapping.
#[derive(Default)]
pub(crate) struct Kept(Vec<Mirror>);

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept")
            .field("mirrors", &self.0.len())
            .field("bytes", &self.bytes())
            .finish()
    }
}

impl Kept {
    /// Bytes of client memory mirrored.
    pub(crate) fn bytes(&self) -> usize {
        self.0.iter().map(|m| m.len).sum()
    }
}

/// Where a GPU address goes, as far as mirroring it is concerned.
enum Target {
    /// Memory the shader reads in place.
    Run(HostRun),
    /// Client memory: the mapping or SVM range `[lo, hi)` holding it, the client's CPU
    /// address of `lo`, whose memory, and whether the GPU may write it.
    Client {
        range: (u64, u64),
        cpu_lo: u64,
        mem: ProcessMemory,
        writable: bool,
    },
}

/// The GPU VM of one process on one GPU, translated for the shader core. One per round of a
/// dispatch, shared by its workers: what it hands out stays valid until it is dropped, and
/// [`GpuMemory::flush`] writes the client memory it mirrored back. It may start with the
/// mirrors of the dispatch's last round ([`GpuMemory::with_kept`]) and hand them on
/// ([`GpuMemory::keep`]).
pub(crate) struct GpuMemory {
    vm: Arc<Ordered<Vm>>,
    svm: Arc<SvmView>,
    pins: Ordered<Vec<Arc<Backing>>>,
    /// Sorted by address, not overlapping.
    mirrors: Ordered<Vec<Mirror>>,
    /// A wave asked for memory as other agents see it now ([`Memory::acquire`]).
    acquired: AtomicBool,
}

impl std::fmt::Debug for GpuMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuMemory").finish_non_exhaustive()
    }
}

impl GpuMemory {
    /// A translation with no mirrors yet.
    #[cfg(test)]
    pub(crate) fn new(vm: Arc<Ordered<Vm>>, svm: Arc<SvmView>) -> Self {
        Self::with_kept(vm, svm, Kept::default())
    }

    /// A translation starting with `kept`, the mirrors of the dispatch's last round, less those
    /// whose GPU addresses no longer lead to the same client memory (unmapped, mapped again
    /// elsewhere, or with other access): those are dropped, and read afresh when touched.
    pub(crate) fn with_kept(vm: Arc<Ordered<Vm>>, svm: Arc<SvmView>, kept: Kept) -> Self {
        let mem = Self {
            vm,
            svm,
            pins: Ordered::new(rank::PINS, Vec::new()),
            mirrors: Ordered::new(rank::MIRRORS, Vec::new()),
            acquired: AtomicBool::new(false),
        };
        let valid: Vec<Mirror> = kept.0.into_iter().filter(|m| mem.still(m)).collect();
        *lock(&mem.mirrors) = valid;
        mem
    }

    /// Whether `m` still mirrors what its GPU addresses lead to.
    fn still(&self, m: &Mirror) -> bool {
        match self.target(m.va) {
            Some(Target::Client {
                range: (lo, hi),
                cpu_lo,
                mem,
                writable,
            }) => {
                m.va >= lo
                    && m.va.saturating_add(m.len as u64) <= hi
                    && cpu_lo.wrapping_add(m.va - lo) == m.cpu
                    && mem.pid() == m.mem.pid()
                    && writable == m.writable
            }
            _ => false,
        }
    }

    /// Writes the changed bytes of every mirrored window back to the client; the first CPU
    /// address that could not be written (the client unmapped it).
    pub(crate) fn flush(&mut self) -> Result<(), u64> {
        let mirrors = self
            .mirrors
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut first = Ok(());
        for m in mirrors.iter_mut().filter(|m| m.writable) {
            if let Err(a) = m.flush() {
                first = first.and(Err(a));
            }
        }
        first
    }

    /// The mirrors the dispatch's next round may start with (after [`GpuMemory::flush`]): none
    /// if a wave of this round asked for memory as other agents see it now (the next round
    /// reads it afresh), or if they are more than [`KEEP_MAX`] bytes.
    pub(crate) fn keep(self) -> Kept {
        if self.acquired.load(Ordering::SeqCst) {
            return Kept::default();
        }
        let kept = Kept(
            self.mirrors
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if kept.bytes() > KEEP_MAX {
            return Kept::default();
        }
        kept
    }

    fn pin(&self, b: &Arc<Backing>) {
        let mut pins = lock(&self.pins);
        if !pins.iter().any(|p| Arc::ptr_eq(p, b)) {
            pins.push(Arc::clone(b));
        }
    }

    /// A mirror of client memory around `va`, which lies in `[lo, hi)` (a mapping or SVM
    /// range) at CPU address `cpu_lo` for `lo`; its run, writable if `write`.
    fn mirror(
        &self,
        va: u64,
        (lo, hi): (u64, u64),
        cpu_lo: u64,
        mem: ProcessMemory,
        writable: bool,
        write: bool,
    ) -> Option<HostRun> {
        let mut mirrors = lock(&self.mirrors);
        // The first mirror ending after `va`: the one covering it, or the next.
        let at = mirrors.partition_point(|m| m.va.saturating_add(m.len as u64) <= va);
        if let Some(m) = mirrors.get(at).filter(|m| m.covers(va)) {
            return Some(m.run(write));
        }
        // The window, clipped to the mapping and to the windows already made.
        let mut start = lo.max(va & !(WINDOW - 1));
        let mut end = hi.min((va & !(WINDOW - 1)).saturating_add(WINDOW));
        if let Some(prev) = at.checked_sub(1).and_then(|k| mirrors.get(k)) {
            start = start.max(prev.va + prev.len as u64);
        }
        if let Some(next) = mirrors.get(at) {
            end = end.min(next.va);
        }
        let cpu = |a: u64| cpu_lo.wrapping_add(a - lo);
        let page = (
            start.max(va & !(PAGE - 1)),
            end.min((va | (PAGE - 1)).saturating_add(1)),
        );
        let m = Mirror::read(start, cpu(start), end - start, mem, writable)
            .or_else(|| Mirror::read(page.0, cpu(page.0), page.1 - page.0, mem, writable))?;
        let run = m.run(write);
        mirrors.insert(at, m);
        Some(run)
    }

    /// What `va` leads to: memory read in place, client memory, or nothing the shader reaches.
    fn target(&self, va: u64) -> Option<Target> {
        {
            let vm = lock(&self.vm);
            if let Some((start, m)) = vm.lookup(va) {
                return match &m.target {
                    VmTarget::Memory { backing, offset } => {
                        let (host, avail) = backing.map().run_at(*offset)?;
                        let len = avail.min(m.size);
                        if va - start >= len {
                            return None;
                        }
                        self.pin(backing);
                        Some(Target::Run(HostRun {
                            va: start,
                            len,
                            host,
                            writable: m.writable,
                        }))
                    }
                    VmTarget::User { cpu_addr, mem } => Some(Target::Client {
                        range: (start, start.saturating_add(m.size)),
                        cpu_lo: *cpu_addr,
                        mem: *mem,
                        writable: m.writable,
                    }),
                    VmTarget::Doorbell | VmTarget::Mmio => None,
                };
            }
        }
        // Not in the VM: an SVM range of the process (its memory at the same address).
        let mem = self.svm.mem?;
        let &(lo, hi) = self
            .svm
            .ranges
            .iter()
            .find(|&&(lo, hi)| (lo..hi).contains(&va))?;
        Some(Target::Client {
            range: (lo, hi),
            cpu_lo: lo,
            mem,
            writable: true,
        })
    }
}

// SAFETY: every run handed out is valid until this GpuMemory is dropped, which happens after the
// executor's run calls that used it return: a memfd run lies inside a `SharedMap` whose backing
// is pinned in `pins` for the GpuMemory's life; a mirrored run is an allocation the mirror owns,
// and mirrors are only added while the GpuMemory lives (never removed, and their allocations
// never move: the list holds the mirrors, which point to them) until `keep` consumes it, which
// no run outlives. Writable runs are only handed out for writable mappings. The memory is shared
// with other threads and processes, as the trait allows.
unsafe impl Memory for GpuMemory {
    fn translate(&self, va: u64, write: bool) -> Option<HostRun> {
        match self.target(va)? {
            Target::Run(run) => (run.writable || !write).then_some(run),
            Target::Client {
                range,
                cpu_lo,
                mem,
                writable,
            } => {
                if write && !writable {
                    return None;
                }
                self.mirror(va, range, cpu_lo, mem, writable, write)
            }
        }
    }

    fn acquire(&self) {
        if self.acquired.load(Ordering::Relaxed) || self.acquired.swap(true, Ordering::SeqCst) {
            return;
        }
        // The round's first acquire: what the mirrors hold may be older than what the acquire
        // observes (a kept mirror is as old as the dispatch's last fresh round), so every
        // mirror takes the client's current bytes now, except those the GPU changed since the
        // last write-back (a store of this round wins over the client's older value).
        let mut mirrors = lock(&self.mirrors);
        for m in mirrors.iter_mut() {
            m.refresh();
        }
    }
}

/// The GPU's clocks: `s_memtime` and `s_memrealtime` both read the 100 MHz counter
/// GET_CLOCK_COUNTERS reports.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct GpuClock;

impl Clock for GpuClock {
    fn memtime(&self) -> u64 {
        gpu_timestamp()
    }
    fn memrealtime(&self) -> u64 {
        gpu_timestamp()
    }
}

/// What the VM has at `va`, for a fault's log line.
pub(crate) fn describe(vm: &Ordered<Vm>, va: u64) -> String {
    let vm = lock(vm);
    match vm.lookup(va) {
        None => "nothing mapped there".to_owned(),
        Some((start, m)) => {
            let what = match &m.target {
                VmTarget::Memory { backing, offset } => format!(
                    "{:?} memory of {:#x} bytes from offset {offset:#x}",
                    backing.domain, backing.size
                ),
                VmTarget::User { cpu_addr, mem } => {
                    let cpu = cpu_addr.wrapping_add(va - start);
                    let there = match crate::host::vmas_of(mem.pid()) {
                        Err(e) => format!("its mappings unreadable: {e}"),
                        Ok(v) => match v.iter().find(|v| (v.start..v.end).contains(&cpu)) {
                            None => format!("{cpu:#x} is not mapped in it"),
                            Some(v) if v.device => {
                                format!(
                                    "{cpu:#x} is in a device mapping {:#x}-{:#x}",
                                    v.start, v.end
                                )
                            }
                            Some(v) => {
                                format!("{cpu:#x} is in a mapping {:#x}-{:#x}", v.start, v.end)
                            }
                        },
                    };
                    format!(
                        "userptr memory of pid {} at {cpu_addr:#x}; {there}",
                        mem.pid()
                    )
                }
                VmTarget::Doorbell => "the doorbell slice".to_owned(),
                VmTarget::Mmio => "the MMIO page".to_owned(),
            };
            format!(
                "mapped at {start:#x}, {:#x} bytes{}: {what}",
                m.size,
                if m.writable { "" } else { ", read-only" }
            )
        }
    }
}

/// Reads the little-endian qword at `va`.
pub(crate) fn read_u64(vm: &Ordered<Vm>, va: u64) -> Result<u64, Fault> {
    let b = read_va(vm, va, 8)?;
    let mut q = [0u8; 8];
    q.copy_from_slice(&b);
    Ok(u64::from_le_bytes(q))
}

/// Reads the little-endian dword at `va`.
pub(crate) fn read_u32(vm: &Ordered<Vm>, va: u64) -> Result<u32, Fault> {
    let b = read_va(vm, va, 4)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// What a qword of the VM is, for an atomic on it.
enum Qword {
    /// In a memfd, at this offset.
    Shared(Arc<Backing>, u64),
    /// Client memory (or memory the GPU cannot do atomics on).
    Other,
}

fn qword(vm: &Ordered<Vm>, va: u64, write: bool) -> Result<Qword, Fault> {
    let vm = lock(vm);
    let (start, m) = vm.lookup(va).ok_or(Fault::Unmapped { va })?;
    if write && !m.writable {
        return Err(Fault::ReadOnly { va });
    }
    Ok(match &m.target {
        VmTarget::Memory { backing, offset } if va % 8 == 0 && va - start + 8 <= m.size => {
            Qword::Shared(Arc::clone(backing), offset + (va - start))
        }
        _ => Qword::Other,
    })
}

/// Adds `delta` to the qword at `va`: a real atomic on VRAM and GTT; on client memory a read
/// and a write (not atomic against the client's CPU). The old value.
pub(crate) fn fetch_add_u64(vm: &Ordered<Vm>, va: u64, delta: u64) -> Result<u64, Fault> {
    if let Qword::Shared(b, off) = qword(vm, va, true)? {
        if let Some(old) = b.map().fetch_add_u64(off, delta) {
            return Ok(old);
        }
    }
    let old = read_u64(vm, va)?;
    write_va(vm, va, &old.wrapping_add(delta).to_le_bytes())?;
    Ok(old)
}

/// Stores the qword `v` at `va` (atomically on VRAM and GTT).
pub(crate) fn store_u64(vm: &Ordered<Vm>, va: u64, v: u64) -> Result<(), Fault> {
    if let Qword::Shared(b, off) = qword(vm, va, true)? {
        if b.map().store_u64(off, v) {
            return Ok(());
        }
    }
    write_va(vm, va, &v.to_le_bytes())
}

/// Loads the qword at `va` (atomically on VRAM and GTT).
pub(crate) fn load_u64(vm: &Ordered<Vm>, va: u64) -> Result<u64, Fault> {
    if let Qword::Shared(b, off) = qword(vm, va, false)? {
        if let Some(v) = b.map().load_u64(off) {
            return Ok(v);
        }
    }
    read_u64(vm, va)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use kfd_shader::Memory;
    use rstest::rstest;

    use super::super::super::backing::ProcessMemory;
    use super::super::super::vm::{Vm, VmMapping, VmTarget};
    use super::{changed, changed_run, GpuMemory, Kept, SvmView, WINDOW};
    use crate::lock_order::{rank, Ordered};

    const VA: u64 = 0x7e00_0000_0000;

    /// `pages` pages of our own memory, page-aligned, as a client's.
    struct Client {
        bytes: Vec<u8>,
        off: usize,
        len: usize,
    }

    impl Client {
        fn new(pages: usize) -> Self {
            let len = pages * 4096;
            let bytes = vec![0u8; len + 4096];
            let off = bytes.as_ptr().align_offset(4096);
            Self { bytes, off, len }
        }
        fn cpu(&self) -> u64 {
            self.bytes[self.off..].as_ptr() as u64
        }
        fn get(&self, i: usize) -> u8 {
            // SAFETY: inside the vector; the GPU side writes it only through
            // `process_vm_writev`, between the test's own steps.
            unsafe { self.bytes.as_ptr().add(self.off + i).read_volatile() }
        }
        fn set(&mut self, i: usize, v: u8) {
            let p = self.bytes[self.off + i..].as_mut_ptr();
            // SAFETY: as in `get`.
            unsafe { p.write_volatile(v) };
        }
        /// A VM with the memory mapped at `VA` as userptr.
        fn vm(&self) -> Arc<Ordered<Vm>> {
            let mut vm = Vm::new();
            self.map_into(&mut vm);
            Arc::new(Ordered::new(rank::VM, vm))
        }
        fn map_into(&self, vm: &mut Vm) {
            let m = VmMapping {
                size: self.len as u64,
                target: VmTarget::User {
                    cpu_addr: self.cpu(),
                    mem: ProcessMemory::own(),
                },
                writable: true,
            };
            vm.map(VA, m).unwrap();
        }
    }

    /// The byte at `va` as the shader reads it.
    fn read(mem: &GpuMemory, va: u64) -> u8 {
        let r = mem.translate(va, false).unwrap();
        let off = usize::try_from(va - r.va).unwrap();
        // SAFETY: `va` lies in the run, valid while `mem` lives.
        unsafe { r.host.as_ptr().add(off).read_volatile() }
    }

    /// Stores `v` at `va` as the shader does.
    fn write(mem: &GpuMemory, va: u64, v: u8) {
        let r = mem.translate(va, true).unwrap();
        let off = usize::try_from(va - r.va).unwrap();
        // SAFETY: as in `read`; the run is writable.
        unsafe { r.host.as_ptr().add(off).write_volatile(v) };
    }

    fn round(vm: &Arc<Ordered<Vm>>, kept: Kept) -> GpuMemory {
        GpuMemory::with_kept(Arc::clone(vm), Arc::new(SvmView::default()), kept)
    }

    /// A round that executed no acquiring instruction hands its mirrors on, and the next round
    /// reads them as they were (a CPU store meanwhile is a data race the dispatch need not
    /// see); after a round that did (an atomic, a GLC load, an invalidation), the next round
    /// reads the client's memory afresh.
    #[test]
    fn mirrors_are_kept_until_a_round_acquires() {
        let mut c = Client::new(2);
        c.set(10, 1);
        let vm = c.vm();
        let mut first = GpuMemory::new(Arc::clone(&vm), Arc::new(SvmView::default()));
        assert_eq!(read(&first, VA + 10), 1);
        first.flush().unwrap();
        let kept = first.keep();
        assert_eq!(kept.bytes(), 2 * 4096);
        c.set(10, 2);
        let mut second = round(&vm, kept);
        assert_eq!(read(&second, VA + 10), 1, "the kept mirror");
        write(&second, VA + 11, 0x77);
        c.set(11, 0x33);
        second.acquire();
        assert_eq!(read(&second, VA + 10), 2, "refreshed at the acquire");
        assert_eq!(
            read(&second, VA + 11),
            0x77,
            "the GPU's store of this round stays"
        );
        second.flush().unwrap();
        assert_eq!(c.get(11), 0x77);
        let kept = second.keep();
        assert_eq!(kept.bytes(), 0, "an acquiring round keeps nothing");
        let third = round(&vm, kept);
        assert_eq!(read(&third, VA + 10), 2, "read afresh");
    }

    /// The GPU's stores reach the client at every round's write-back, kept mirror or not, and
    /// only the bytes the GPU changed are written: what the CPU stored meanwhile in other bytes
    /// of the same window stays.
    #[test]
    fn every_round_writes_back_only_what_the_gpu_changed() {
        let mut c = Client::new(1);
        let vm = c.vm();
        let mut first = round(&vm, Kept::default());
        write(&first, VA + 5, 0x55);
        c.set(6, 0x66);
        first.flush().unwrap();
        assert_eq!((c.get(5), c.get(6)), (0x55, 0x66));
        let kept = first.keep();
        c.set(8, 0x88);
        let mut second = round(&vm, kept);
        write(&second, VA + 7, 0x77);
        second.flush().unwrap();
        assert_eq!(
            (c.get(5), c.get(6), c.get(7), c.get(8)),
            (0x55, 0x66, 0x77, 0x88)
        );
    }

    #[rstest]
    #[case::equal(b"abcdef", b"abcdef", None)]
    #[case::one_byte(b"abXdef", b"abcdef", Some((2, 3)))]
    #[case::the_first_of_two(b"aXcXef", b"abcdef", Some((1, 2)))]
    #[case::to_the_end(b"abcXYZ", b"abcdef", Some((3, 6)))]
    fn a_changed_run_ends_at_the_first_equal_byte(
        #[case] now: &[u8; 6],
        #[case] then: &[u8; 6],
        #[case] want: Option<(usize, usize)>,
    ) {
        assert_eq!(changed_run(now, then), want);
    }

    /// The GPU's bytes on both sides of a byte the CPU stored meanwhile, in a kept mirror whose
    /// copy of that byte is old: the write-back writes the GPU's bytes and not the one between.
    #[test]
    fn a_write_back_leaves_the_bytes_between_the_gpu_s_alone() {
        let mut c = Client::new(1);
        let vm = c.vm();
        let mut first = round(&vm, Kept::default());
        assert_eq!(read(&first, VA + 6), 0);
        first.flush().unwrap();
        let kept = first.keep();
        c.set(6, 0x66);
        let mut second = round(&vm, kept);
        write(&second, VA + 5, 0x55);
        write(&second, VA + 7, 0x77);
        second.flush().unwrap();
        assert_eq!((c.get(5), c.get(6), c.get(7)), (0x55, 0x66, 0x77));
    }

    /// A kept mirror whose GPU addresses lead elsewhere by the next round (the BO unmapped and
    /// other memory mapped there) is dropped: the round reads the new memory. Unmapped, the
    /// address faults as before.
    #[test]
    fn a_kept_mirror_of_remapped_memory_is_dropped() {
        let mut a = Client::new(1);
        let mut b = Client::new(1);
        a.set(0, 0xa);
        b.set(0, 0xb);
        let vm = a.vm();
        let mut first = round(&vm, Kept::default());
        assert_eq!(read(&first, VA), 0xa);
        first.flush().unwrap();
        let kept = first.keep();
        vm.lock().unwrap().unmap(VA).unwrap();
        b.map_into(&mut vm.lock().unwrap());
        let mut second = round(&vm, kept);
        assert_eq!(read(&second, VA), 0xb);
        second.flush().unwrap();
        let kept = second.keep();
        vm.lock().unwrap().unmap(VA).unwrap();
        let third = round(&vm, kept);
        assert!(third.translate(VA, false).is_none());
    }

    /// Windows are at most [`WINDOW`] bytes on window boundaries, never overlap, and a window
    /// made between two others fills exactly the gap.
    #[test]
    fn windows_do_not_overlap() {
        let c = Client::new(11);
        let vm = c.vm();
        let mem = round(&vm, Kept::default());
        let a = mem.translate(VA + WINDOW + 5, false).unwrap();
        assert_eq!((a.va, a.len), (VA + WINDOW, WINDOW));
        let b = mem.translate(VA + 3, false).unwrap();
        assert_eq!((b.va, b.len), (VA, WINDOW));
        let tail = mem.translate(VA + 2 * WINDOW, false).unwrap();
        assert_eq!(
            (tail.va, tail.len),
            (VA + 2 * WINDOW, 11 * 4096 - 2 * WINDOW)
        );
        // The same windows again, from the sorted list.
        assert_eq!(mem.translate(VA + WINDOW - 1, true).unwrap().va, VA);
        assert_eq!(mem.translate(VA + WINDOW, true).unwrap().va, VA + WINDOW);
        assert_eq!(mem.keep().bytes(), 11 * 4096);
    }

    #[rstest]
    #[case::equal(b"abcdef", b"abcdef", None)]
    #[case::one_byte(b"abXdef", b"abcdef", Some((2, 3)))]
    #[case::both_ends(b"Xbcdef", b"abcdeY", Some((0, 6)))]
    #[case::a_run_with_a_gap(b"aXcXef", b"abcdef", Some((1, 4)))]
    fn changed_bytes_are_bounded_by_the_first_and_last_difference(
        #[case] now: &[u8; 6],
        #[case] then: &[u8; 6],
        #[case] want: Option<(usize, usize)>,
    ) {
        assert_eq!(changed(now, then), want);
    }
}
