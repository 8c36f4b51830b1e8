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
//!   [`GpuMemory::flush`] writes back only the bytes that differ from the twin, after the round
//!   that used it (one translation is shared by the workers of a round). So a workgroup sees its
//!   own writes, writes of different workgroups to different bytes of one page all land,
//!   atomics of different workgroups in one round are atomic among them, and bytes the client's
//!   CPU wrote meanwhile are not overwritten with stale copies. What it does not give: atomics
//!   on such memory are not atomic against the client's CPU, and a store becomes visible to the
//!   client at the end of the round, not at once. ROCr and HIP put kernel arguments, signals and the host side of copies
//!   there (read by the kernel, or written once by it); atomics across the host and the device
//!   belong in fine-grained memory that is a GTT BO here, which is shared for real.
//!
//! The same code runs in process (where the client is this process), so the tests exercise the
//! path the daemon takes.

use std::ptr::NonNull;
use std::sync::Arc;

use kfd_shader::{Clock, HostRun, Memory};

use super::super::backing::{Backing, ProcessMemory};
use super::super::sdma::{gpu_timestamp, read_va, write_va, Fault};
use super::super::vm::{Vm, VmTarget};
use crate::host::lock;
use crate::lock_order::{rank, Ordered};

/// The largest window of client memory one translation mirrors. Small, because every round
/// mirrors afresh what its waves touch, and a wave of a grid-stride copy (ROCr's and HIP's
/// blits) touches a few hundred bytes in each of several places of a large buffer: windows of
/// 256 KiB made ROCr's 1 MiB `hsa_memory_copy` read (and compare, and allocate twice) about
/// 3 MiB per workgroup, which took the whole round in a qemu TCG guest, one workgroup per
/// round, ten seconds per copy.
pub(crate) const WINDOW: u64 = 16 << 10;
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
    /// What was read from the client.
    twin: Box<[u8]>,
    writable: bool,
}

// SAFETY: the mirror owns its allocation; the shader accesses it through the run it was given
// only atomically, from any thread, and the mirror reads it only in `flush`, which takes
// `&mut GpuMemory` (no run is in use then).
unsafe impl Send for Mirror {}
// SAFETY: see Send; shared references to a mirror only read its plain fields.
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
        })
    }

    fn covers(&self, va: u64) -> bool {
        va.checked_sub(self.va)
            .is_some_and(|off| off < self.len as u64)
    }

    fn run(&self) -> HostRun {
        HostRun {
            va: self.va,
            len: self.len as u64,
            host: self.data,
            writable: self.writable,
        }
    }

    /// Writes back the bytes that differ from what was read; the first address that failed.
    ///
    /// The comparison goes by chunks of [`CHUNK`] bytes (slice equality, a `memcmp`), so an
    /// unchanged window costs one pass at memory speed and a changed one byte loops only
    /// around its changes: a copy kernel's window of host memory it only read, flushed after
    /// every round, must not cost more than the round.
    fn flush(&mut self) -> Result<(), u64> {
        let (cpu, mem) = (self.cpu, self.mem);
        // SAFETY: `data` is the live allocation of `len` bytes this mirror owns; `&mut self`
        // means no run of it is in use (flush is called between runs); `twin` is a separate
        // allocation.
        let now = unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.len) };
        let twin = &mut self.twin;
        if now == &twin[..] {
            return Ok(());
        }
        let mut first = Ok(());
        let mut run: Option<(usize, usize)> = None;
        let mut write = |(start, end): (usize, usize), twin: &mut [u8]| {
            let at = cpu + start as u64;
            if mem.write(at, &now[start..end]).is_err() {
                first = first.and(Err(at));
            }
            twin[start..end].copy_from_slice(&now[start..end]);
        };
        let mut c = 0;
        while c < now.len() {
            let e = (c + CHUNK).min(now.len());
            if let Some((lo, hi)) = changed(&now[c..e], &twin[c..e]) {
                // Joined to the run before across a gap shorter than a chunk (fewer calls; the
                // bytes in a gap are written with the value they had, which only a racing CPU
                // store could change).
                let (lo, hi) = (c + lo, c + hi);
                run = match run {
                    Some((s, end)) if lo - end < CHUNK => Some((s, hi)),
                    Some(r) => {
                        write(r, twin);
                        Some((lo, hi))
                    }
                    None => Some((lo, hi)),
                };
            }
            c = e;
        }
        if let Some(r) = run {
            write(r, twin);
        }
        first
    }
}

/// The first and one past the last byte where `now` differs from `then` (of equal length).
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

/// The GPU VM of one process on one GPU, translated for the shader core. One per round of a
/// dispatch, shared by its workers: what it hands out stays valid until it is dropped, and
/// [`GpuMemory::flush`] writes the client memory it mirrored back.
pub(crate) struct GpuMemory {
    vm: Arc<Ordered<Vm>>,
    svm: Arc<SvmView>,
    pins: Ordered<Vec<Arc<Backing>>>,
    mirrors: Ordered<Vec<Mirror>>,
}

impl std::fmt::Debug for GpuMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuMemory").finish_non_exhaustive()
    }
}

impl GpuMemory {
    pub(crate) fn new(vm: Arc<Ordered<Vm>>, svm: Arc<SvmView>) -> Self {
        Self {
            vm,
            svm,
            pins: Ordered::new(rank::PINS, Vec::new()),
            mirrors: Ordered::new(rank::MIRRORS, Vec::new()),
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

    fn pin(&self, b: &Arc<Backing>) {
        let mut pins = lock(&self.pins);
        if !pins.iter().any(|p| Arc::ptr_eq(p, b)) {
            pins.push(Arc::clone(b));
        }
    }

    /// A mirror of client memory around `va`, which lies in `[lo, hi)` (a mapping or SVM
    /// range) at CPU address `cpu_lo` for `lo`.
    fn mirror(
        &self,
        va: u64,
        (lo, hi): (u64, u64),
        cpu_lo: u64,
        mem: ProcessMemory,
        writable: bool,
    ) -> Option<HostRun> {
        let mut mirrors = lock(&self.mirrors);
        if let Some(m) = mirrors.iter().find(|m| m.covers(va)) {
            return Some(m.run());
        }
        // The window, clipped to the mapping and to the windows already made.
        let mut start = lo.max(va & !(WINDOW - 1));
        let mut end = hi.min((va & !(WINDOW - 1)).saturating_add(WINDOW));
        for m in mirrors.iter() {
            let m_end = m.va + m.len as u64;
            if m_end <= va {
                start = start.max(m_end);
            } else if m.va > va {
                end = end.min(m.va);
            }
        }
        let cpu = |a: u64| cpu_lo.wrapping_add(a - lo);
        let page = (
            start.max(va & !(PAGE - 1)),
            end.min((va | (PAGE - 1)).saturating_add(1)),
        );
        let m = Mirror::read(start, cpu(start), end - start, mem, writable)
            .or_else(|| Mirror::read(page.0, cpu(page.0), page.1 - page.0, mem, writable))?;
        let run = m.run();
        mirrors.push(m);
        Some(run)
    }
}

// SAFETY: every run handed out is valid until this GpuMemory is dropped, which happens after the
// executor's run calls that used it return: a memfd run lies inside a `SharedMap` whose backing
// is pinned in `pins` for the GpuMemory's life; a mirrored run is an allocation the mirror owns,
// and mirrors are only added while the GpuMemory lives (never removed or moved out of their
// heap allocation). Writable runs are only handed out for writable mappings. The memory is shared
// with other threads and processes, as the trait allows.
unsafe impl Memory for GpuMemory {
    fn translate(&self, va: u64, write: bool) -> Option<HostRun> {
        let found = {
            let vm = lock(&self.vm);
            match vm.lookup(va) {
                Some((start, m)) => {
                    if write && !m.writable {
                        return None;
                    }
                    match &m.target {
                        VmTarget::Memory { backing, offset } => {
                            let (host, avail) = backing.map().run_at(*offset)?;
                            let len = avail.min(m.size);
                            if va - start >= len {
                                return None;
                            }
                            self.pin(backing);
                            return Some(HostRun {
                                va: start,
                                len,
                                host,
                                writable: m.writable,
                            });
                        }
                        VmTarget::User { cpu_addr, mem } => Some((
                            (start, start.saturating_add(m.size)),
                            *cpu_addr,
                            *mem,
                            m.writable,
                        )),
                        VmTarget::Doorbell | VmTarget::Mmio => return None,
                    }
                }
                None => None,
            }
        };
        if let Some((range, cpu, mem, writable)) = found {
            return self.mirror(va, range, cpu, mem, writable);
        }
        // Not in the VM: an SVM range of the process (its memory at the same address).
        let mem = self.svm.mem?;
        let &(lo, hi) = self
            .svm
            .ranges
            .iter()
            .find(|&&(lo, hi)| (lo..hi).contains(&va))?;
        self.mirror(va, (lo, hi), lo, mem, true)
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
    use super::changed;
    use rstest::rstest;

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
