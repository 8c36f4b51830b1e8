//! Access to host memory through translated runs: the crate's only `unsafe` code.
//!
//! Every access checks that it lies inside the run the [`Memory`](crate::Memory) implementation
//! vouched for, and goes through atomic types, since the memory is shared with the host and
//! other queues (plain loads and stores compile to the same instructions as relaxed atomics).

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

use crate::memory::HostRun;

/// A translated run: `len` bytes of host memory at `ptr` for the GPU addresses from `va`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    va: u64,
    len: u64,
    ptr: *mut u8,
    writable: bool,
}

// SAFETY: a span is only a pointer the Memory implementation guarantees valid (for the run call
// that produced it) from any thread; all accesses through it are atomic.
unsafe impl Send for Span {}

impl Span {
    pub(crate) fn new(run: HostRun) -> Self {
        Self {
            va: run.va,
            len: run.len,
            ptr: run.host.as_ptr(),
            writable: run.writable,
        }
    }

    pub(crate) fn writable(&self) -> bool {
        self.writable
    }

    /// Whether `[va, va + n)` lies inside the span.
    #[inline]
    pub(crate) fn covers(&self, va: u64, n: u64) -> bool {
        let off = va.wrapping_sub(self.va);
        off < self.len && n <= self.len - off
    }

    /// The host pointer of `va` if `[va, va + n)` lies inside the span.
    #[inline]
    fn at(&self, va: u64, n: u64) -> Option<*mut u8> {
        if !self.covers(va, n) {
            return None;
        }
        let off = usize::try_from(va - self.va).ok()?;
        // SAFETY: off + n <= len, and the run's len bytes from ptr are one host allocation
        // (Memory's contract), so the offset stays inside it.
        Some(unsafe { self.ptr.add(off) })
    }

    /// The dword at `va` (None outside the span).
    #[inline]
    pub(crate) fn load_u32(&self, va: u64) -> Option<u32> {
        let p = self.at(va, 4)?;
        if p.align_offset(4) == 0 {
            // SAFETY: p is valid for 4 bytes (checked by `at`, guaranteed by Memory), aligned, and
            // only ever accessed atomically by this crate.
            Some(unsafe { AtomicU32::from_ptr(p.cast()) }.load(Ordering::Relaxed))
        } else {
            let mut b = [0u8; 4];
            self.read(va, &mut b);
            Some(u32::from_le_bytes(b))
        }
    }

    /// Stores the dword at `va`; false outside the span or if it is read-only.
    #[inline]
    pub(crate) fn store_u32(&self, va: u64, v: u32) -> bool {
        if !self.writable {
            return false;
        }
        let Some(p) = self.at(va, 4) else {
            return false;
        };
        if p.align_offset(4) == 0 {
            // SAFETY: p is valid and writable for 4 bytes (checked by `at` and `writable`,
            // guaranteed by Memory), aligned, accessed only atomically.
            unsafe { AtomicU32::from_ptr(p.cast()) }.store(v, Ordering::Relaxed);
        } else {
            self.write(va, &v.to_le_bytes());
        }
        true
    }

    /// Copies bytes from `va` into `out` (nothing outside the span: the caller checked).
    pub(crate) fn read(&self, va: u64, out: &mut [u8]) {
        let Some(p) = self.at(va, out.len() as u64) else {
            return;
        };
        for (i, b) in out.iter_mut().enumerate() {
            // SAFETY: p + i is inside the checked range; bytes are read atomically.
            *b = unsafe { AtomicU8::from_ptr(p.add(i)) }.load(Ordering::Relaxed);
        }
    }

    /// Copies `data` to `va` (nothing outside the span or if read-only).
    pub(crate) fn write(&self, va: u64, data: &[u8]) {
        if !self.writable {
            return;
        }
        let Some(p) = self.at(va, data.len() as u64) else {
            return;
        };
        for (i, b) in data.iter().enumerate() {
            // SAFETY: p + i is inside the checked, writable range; bytes are stored atomically.
            unsafe { AtomicU8::from_ptr(p.add(i)) }.store(*b, Ordering::Relaxed);
        }
    }

    /// The aligned dword at `va` as an atomic, if it is inside the span and writable.
    #[inline]
    pub(crate) fn atomic_u32(&self, va: u64) -> Option<&AtomicU32> {
        let p = self.at(va, 4)?;
        if !self.writable || p.align_offset(4) != 0 {
            return None;
        }
        // SAFETY: p is valid, writable and aligned for 4 bytes for as long as the span is (the
        // executor's run call, which outlives every use of the reference).
        Some(unsafe { AtomicU32::from_ptr(p.cast()) })
    }

    /// The aligned qword at `va` as an atomic, if it is inside the span and writable.
    #[inline]
    pub(crate) fn atomic_u64(&self, va: u64) -> Option<&AtomicU64> {
        let p = self.at(va, 8)?;
        if !self.writable || p.align_offset(8) != 0 {
            return None;
        }
        // SAFETY: as in atomic_u32, for 8 aligned bytes.
        Some(unsafe { AtomicU64::from_ptr(p.cast()) })
    }
}
