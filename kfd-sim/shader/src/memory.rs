//! What the core needs of the world: GPU virtual memory translated to host memory, and clocks.

use std::ptr::NonNull;

use crate::error::Fault;
use crate::host::Span;

/// A run of GPU virtual addresses that is backed by contiguous host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostRun {
    /// First GPU virtual address of the run.
    pub va: u64,
    /// Length of the run in bytes.
    pub len: u64,
    /// Host address of `va`.
    pub host: NonNull<u8>,
    /// Whether the run may be written.
    pub writable: bool,
}

/// The GPU virtual memory of the process a dispatch runs in.
///
/// The core asks for a translation once per run and caches it (a few runs per executor), so
/// runs should be as large as the mapping allows: a whole buffer object rather than a page.
///
/// # Safety
///
/// A [`HostRun`] returned by [`Memory::translate`] must stay valid until the [`Executor::run`]
/// (or [`run_dispatch`]) call during which it was returned has returned: `len` bytes from `host`
/// readable, and writable if `writable` says so, and not unmapped or reused meanwhile. The
/// memory may be shared with other threads and processes; the core only accesses it with
/// atomic (relaxed, or sequentially consistent for atomics) loads and stores.
///
/// [`Executor::run`]: crate::Executor::run
/// [`run_dispatch`]: crate::run_dispatch
pub unsafe trait Memory: Sync {
    /// The run containing `va`, or None if `va` is not mapped (for writing, if `write`).
    fn translate(&self, va: u64, write: bool) -> Option<HostRun>;

    /// A wave executed an instruction that, in the gfx90a memory model, must see what other
    /// agents (the host's CPU, other queues) wrote since the dispatch started: an atomic, a
    /// load with GLC (atomic loads at agent or system scope, volatile loads), or an L1/L2 or
    /// scalar cache invalidation (an acquire fence). An implementation that serves reads from
    /// copies of memory other agents write (the simulator's mirrors of a client's memory) must
    /// not keep serving the dispatch's later reads from copies made before this call; when it
    /// refreshes them is its own (the simulator: from the dispatch's next time slice on). The
    /// default does nothing: memory read in place is always current.
    fn acquire(&self) {}
}

/// The counters the shader reads.
pub trait Clock: Sync {
    /// The GPU clock counter (`s_memtime`).
    fn memtime(&self) -> u64;
    /// The constant-rate "real time" counter (`s_memrealtime`).
    fn memrealtime(&self) -> u64;
}

/// A clock that always reads 0, for callers that have none.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoClock;

impl Clock for NoClock {
    fn memtime(&self) -> u64 {
        0
    }
    fn memrealtime(&self) -> u64 {
        0
    }
}

/// The translations an executor keeps between accesses (flushed at every run call).
#[derive(Debug, Default)]
pub(crate) struct Tlb {
    spans: [Option<Span>; 8],
    next: usize,
}

impl Tlb {
    /// Forgets every translation.
    pub(crate) fn clear(&mut self) {
        self.spans = [None; 8];
        self.next = 0;
    }

    /// A span covering `[va, va + len)`, or None when no run covers it whole (the caller falls
    /// back to smaller pieces); Err when `va` does not translate.
    #[inline]
    pub(crate) fn span(
        &mut self,
        mem: &dyn Memory,
        va: u64,
        len: u64,
        write: bool,
    ) -> Result<Option<Span>, Fault> {
        for s in self.spans.iter().flatten() {
            if s.covers(va, len) && (s.writable() || !write) {
                return Ok(Some(*s));
            }
        }
        let run = mem.translate(va, write).ok_or(Fault { addr: va, write })?;
        if write && !run.writable {
            return Err(Fault { addr: va, write });
        }
        let span = Span::new(run);
        if !span.covers(va, 1) {
            return Err(Fault { addr: va, write });
        }
        self.spans[self.next] = Some(span);
        self.next = (self.next + 1) % self.spans.len();
        Ok(span.covers(va, len).then_some(span))
    }

    /// Reads `out.len()` bytes at `va`, across runs if need be.
    pub(crate) fn read(&mut self, mem: &dyn Memory, va: u64, out: &mut [u8]) -> Result<(), Fault> {
        if let Some(s) = self.span(mem, va, out.len() as u64, false)? {
            s.read(va, out);
            return Ok(());
        }
        for (i, b) in out.iter_mut().enumerate() {
            let a = va.wrapping_add(i as u64);
            let s = self.span(mem, a, 1, false)?.ok_or(Fault {
                addr: a,
                write: false,
            })?;
            let mut one = [0u8];
            s.read(a, &mut one);
            *b = one[0];
        }
        Ok(())
    }

    /// Writes `data` at `va`, across runs if need be.
    pub(crate) fn write(&mut self, mem: &dyn Memory, va: u64, data: &[u8]) -> Result<(), Fault> {
        if let Some(s) = self.span(mem, va, data.len() as u64, true)? {
            s.write(va, data);
            return Ok(());
        }
        for (i, b) in data.iter().enumerate() {
            let a = va.wrapping_add(i as u64);
            let s = self.span(mem, a, 1, true)?.ok_or(Fault {
                addr: a,
                write: true,
            })?;
            s.write(a, &[*b]);
        }
        Ok(())
    }

    /// Reads a little-endian dword at `va`.
    #[inline]
    pub(crate) fn read_u32(&mut self, mem: &dyn Memory, va: u64) -> Result<u32, Fault> {
        if let Some(s) = self.span(mem, va, 4, false)? {
            if let Some(v) = s.load_u32(va) {
                return Ok(v);
            }
        }
        let mut b = [0u8; 4];
        self.read(mem, va, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Writes a little-endian dword at `va`.
    #[inline]
    pub(crate) fn write_u32(&mut self, mem: &dyn Memory, va: u64, v: u32) -> Result<(), Fault> {
        if let Some(s) = self.span(mem, va, 4, true)? {
            if s.store_u32(va, v) {
                return Ok(());
            }
        }
        self.write(mem, va, &v.to_le_bytes())
    }
}
