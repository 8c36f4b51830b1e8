//! A simple [`Memory`]: a few regions of host memory at fixed GPU addresses, for tests,
//! benchmarks and small tools. Addresses outside every region fault.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::memory::{HostRun, Memory};

/// One region: `len` bytes at `va`.
#[derive(Debug)]
struct Region {
    va: u64,
    len: u64,
    words: Box<[AtomicU64]>,
    writable: bool,
}

/// GPU memory made of separately allocated regions.
#[derive(Debug, Default)]
pub struct FlatMemory {
    regions: Vec<Region>,
}

impl FlatMemory {
    /// No regions: every address faults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Maps `len` zeroed bytes at `va` (both multiples of 8). Returns false if it overlaps a
    /// region or is misaligned.
    pub fn map(&mut self, va: u64, len: u64, writable: bool) -> bool {
        if va % 8 != 0 || len % 8 != 0 || len == 0 {
            return false;
        }
        let end = va.saturating_add(len);
        if self.regions.iter().any(|r| va < r.va + r.len && r.va < end) {
            return false;
        }
        let Ok(n) = usize::try_from(len / 8) else {
            return false;
        };
        let words = (0..n).map(|_| AtomicU64::new(0)).collect();
        self.regions.push(Region {
            va,
            len,
            words,
            writable,
        });
        true
    }

    fn byte(&self, va: u64) -> Option<(&AtomicU64, u32)> {
        let r = self
            .regions
            .iter()
            .find(|r| va >= r.va && va - r.va < r.len)?;
        let off = va - r.va;
        let w = r.words.get(usize::try_from(off / 8).ok()?)?;
        Some((w, ((off % 8) * 8) as u32))
    }

    /// Reads bytes at `va`; None if any of them is unmapped.
    pub fn read(&self, va: u64, len: usize) -> Option<Vec<u8>> {
        (0..len as u64)
            .map(|i| {
                let (w, shift) = self.byte(va.checked_add(i)?)?;
                Some((w.load(Ordering::Relaxed) >> shift) as u8)
            })
            .collect()
    }

    /// Writes bytes at `va` (into read-only regions too); false if any of them is unmapped.
    pub fn write(&self, va: u64, data: &[u8]) -> bool {
        for (i, b) in data.iter().enumerate() {
            let Some(a) = va.checked_add(i as u64) else {
                return false;
            };
            let Some((w, shift)) = self.byte(a) else {
                return false;
            };
            let mask = !(0xffu64 << shift);
            let _ = w.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                Some(old & mask | u64::from(*b) << shift)
            });
        }
        true
    }

    /// Reads a little-endian dword.
    pub fn read_u32(&self, va: u64) -> Option<u32> {
        let b = self.read(va, 4)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Reads a little-endian qword.
    pub fn read_u64(&self, va: u64) -> Option<u64> {
        let b = self.read(va, 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(&b);
        Some(u64::from_le_bytes(a))
    }

    /// Writes dwords from `va` on.
    pub fn write_u32s(&self, va: u64, words: &[u32]) -> bool {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        self.write(va, &bytes)
    }

    /// Reads `n` dwords from `va` on.
    pub fn read_u32s(&self, va: u64, n: usize) -> Option<Vec<u32>> {
        let b = self.read(va, n * 4)?;
        Some(
            b.chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        )
    }
}

// SAFETY: each run is a whole region: a boxed slice of atomics that lives as long as the
// FlatMemory (regions are never removed), accessed by the core only atomically.
unsafe impl Memory for FlatMemory {
    fn translate(&self, va: u64, write: bool) -> Option<HostRun> {
        let r = self
            .regions
            .iter()
            .find(|r| va >= r.va && va - r.va < r.len)?;
        if write && !r.writable {
            return None;
        }
        Some(HostRun {
            va: r.va,
            len: r.len,
            host: NonNull::new(r.words.as_ptr().cast::<u8>().cast_mut())?,
            writable: r.writable,
        })
    }
}

/// Where [`Rig`] puts things in its memory.
pub mod layout {
    /// The code object's load address.
    pub const CODE_VA: u64 = 0x1_0000_0000;
    /// The data region the rig allocates from.
    pub const DATA_VA: u64 = 0x2_0000_0000;
    /// Kernel arguments.
    pub const KERNARG_VA: u64 = 0x3_0000_0000;
    /// The dispatch packet (the dispatch ptr).
    pub const PACKET_VA: u64 = 0x3_0001_0000;
    /// A stand-in `amd_queue_t` (the queue ptr).
    pub const QUEUE_VA: u64 = 0x3_0002_0000;
    /// Scratch backing memory.
    pub const SCRATCH_VA: u64 = 0x4_0000_0000;
    /// Bytes of scratch backing memory.
    pub const SCRATCH_BYTES: u64 = 8 << 20;
}

/// A rig that cannot do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RigError {
    /// The code object does not parse.
    #[error("code object: {0}")]
    Elf(#[from] crate::elf::ElfError),
    /// The dispatch is invalid.
    #[error("dispatch: {0}")]
    Dispatch(#[from] crate::dispatch::DispatchError),
    /// A region does not fit the rig's layout.
    #[error("{0} does not fit")]
    NoRoom(&'static str),
}

/// A code object loaded into a [`FlatMemory`] with room for data, kernel arguments, the packet
/// and scratch: enough to dispatch the code object's kernels in process.
#[derive(Debug)]
pub struct Rig {
    /// The memory the kernels run in.
    pub mem: FlatMemory,
    symbols: Vec<(String, u64)>,
    data_len: u64,
    data_next: u64,
}

impl Rig {
    /// Loads `code_object` and maps `data_bytes` of data memory.
    pub fn new(code_object: &[u8], data_bytes: u64) -> Result<Self, RigError> {
        use layout::*;
        let co = crate::elf::CodeObject::parse(code_object)?;
        let mut mem = FlatMemory::new();
        let segs = co.segments()?;
        let end = segs
            .iter()
            .map(|s| s.vaddr.saturating_add(s.memsz))
            .max()
            .unwrap_or(0);
        if end > DATA_VA - CODE_VA - 4096 {
            return Err(RigError::NoRoom("the code object"));
        }
        let code_len = end.div_ceil(4096) * 4096 + 4096;
        let data_len = data_bytes.div_ceil(4096) * 4096;
        if !(mem.map(CODE_VA, code_len, false)
            && mem.map(DATA_VA, data_len.max(4096), true)
            && mem.map(KERNARG_VA, 4096, true)
            && mem.map(PACKET_VA, 4096, true)
            && mem.map(QUEUE_VA, 4096, true)
            && mem.map(SCRATCH_VA, SCRATCH_BYTES, true))
        {
            return Err(RigError::NoRoom("the rig's regions"));
        }
        for s in &segs {
            if !mem.write(CODE_VA + s.vaddr, &s.data) {
                return Err(RigError::NoRoom("a code segment"));
            }
        }
        let symbols = co
            .symbols()
            .map(|(n, v)| (n.to_string(), CODE_VA + v))
            .collect();
        Ok(Self {
            mem,
            symbols,
            data_len,
            data_next: layout::DATA_VA,
        })
    }

    /// The kernels of the code object (its `NAME.kd` symbols).
    pub fn kernels(&self) -> Vec<&str> {
        self.symbols
            .iter()
            .filter_map(|(k, _)| k.strip_suffix(".kd"))
            .collect()
    }

    /// The address of a symbol.
    fn symbol(&self, name: &str) -> Option<u64> {
        self.symbols
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| *v)
    }

    /// `bytes` of data memory (256-byte aligned, zeroed when the rig was made).
    pub fn alloc(&mut self, bytes: u64) -> Result<u64, RigError> {
        let va = self.data_next;
        let end = va + bytes.div_ceil(256) * 256;
        if end > layout::DATA_VA + self.data_len {
            return Err(RigError::NoRoom("a data allocation"));
        }
        self.data_next = end;
        Ok(va)
    }

    /// Sets up a dispatch of `kernel` over `grid` work-items in workgroups of `wg`, with
    /// `kernargs` as its arguments: writes the arguments and the packet, and prepares scratch
    /// for `threads` workgroups at a time.
    pub fn dispatch(
        &self,
        kernel: &str,
        grid: [u32; 3],
        wg: [u16; 3],
        kernargs: &[u8],
        threads: u32,
    ) -> Result<crate::Dispatch, RigError> {
        use layout::*;
        // A code object v3+ kernel has its descriptor at NAME.kd; a kernel like ROCr's own blits
        // starts with a 256-byte amd_kernel_code_t at NAME (group and private sizes then come
        // from the packet alone: none here).
        let (kd_va, v3) = match self.symbol(&format!("{kernel}.kd")) {
            Some(va) => (va, true),
            None => (
                self.symbol(kernel)
                    .ok_or_else(|| crate::elf::ElfError::NoSymbol(kernel.to_string()))?,
                false,
            ),
        };
        let kd_bytes = self
            .mem
            .read(kd_va, 64)
            .ok_or(RigError::NoRoom("the descriptor"))?;
        let kd = crate::KernelDescriptor::parse(&kd_bytes)?;
        let le = |o: usize| {
            u32::from_le_bytes([
                kd_bytes[o],
                kd_bytes[o + 1],
                kd_bytes[o + 2],
                kd_bytes[o + 3],
            ])
        };
        let (group, private) = if v3 { (le(0), le(4)) } else { (0, 0) };
        if kernargs.len() > 4096 || !self.mem.write(KERNARG_VA, kernargs) {
            return Err(RigError::NoRoom("the kernel arguments"));
        }
        let packet = crate::DispatchPacket {
            workgroup_size: wg,
            grid_size: grid,
            private_segment_size: private,
            group_segment_size: group,
            kernel_object: kd_va,
            kernarg_address: KERNARG_VA,
            packet_address: PACKET_VA,
            queue_address: QUEUE_VA,
            dispatch_id: 0,
        };
        let mut p = [0u8; 64];
        p[0..2].copy_from_slice(&0x1402u16.to_le_bytes());
        p[2..4].copy_from_slice(&3u16.to_le_bytes());
        for d in 0..3 {
            p[4 + 2 * d..6 + 2 * d].copy_from_slice(&wg[d].to_le_bytes());
            p[12 + 4 * d..16 + 4 * d].copy_from_slice(&grid[d].to_le_bytes());
        }
        p[24..28].copy_from_slice(&private.to_le_bytes());
        p[28..32].copy_from_slice(&group.to_le_bytes());
        p[32..40].copy_from_slice(&kd_va.to_le_bytes());
        p[40..48].copy_from_slice(&KERNARG_VA.to_le_bytes());
        self.mem.write(PACKET_VA, &p);
        let wave_bytes = (u64::from(private) * 64).div_ceil(1024) * 1024;
        let items: u32 = wg.iter().map(|&x| u32::from(x)).product();
        let slots = u64::from(threads.max(1) * items.div_ceil(64));
        if wave_bytes * slots > SCRATCH_BYTES {
            return Err(RigError::NoRoom("scratch"));
        }
        let scratch = crate::ScratchSetup {
            resource: scratch_resource(SCRATCH_VA, SCRATCH_BYTES as u32),
            base: SCRATCH_VA,
            wave_bytes,
        };
        Ok(crate::Dispatch::new(
            kd,
            packet,
            scratch,
            crate::Apertures::KFD_GFX9,
        )?)
    }
}

/// A private segment buffer descriptor as ROCr makes it: `base`, stride 0, swizzled, `bytes`
/// records, element size 4, index stride 64, ADD_TID.
pub fn scratch_resource(base: u64, bytes: u32) -> [u32; 4] {
    [
        base as u32,
        (base >> 32) as u32 & 0xffff | 1 << 31,
        bytes,
        1 << 19 | 3 << 21 | 1 << 23,
    ]
}

/// Kernel arguments as a kernarg segment is laid out: each value appended at the next offset
/// aligned to its size.
#[derive(Clone, Debug, Default)]
pub struct Args(pub Vec<u8>);

impl Args {
    /// Appends a 64-bit value (a pointer, a size).
    #[must_use]
    pub fn u64(self, v: u64) -> Self {
        self.push(&v.to_le_bytes())
    }

    /// Appends a 32-bit value.
    #[must_use]
    pub fn u32(self, v: u32) -> Self {
        self.push(&v.to_le_bytes())
    }

    fn push(mut self, bytes: &[u8]) -> Self {
        let at = self.0.len().next_multiple_of(bytes.len());
        self.0.resize(at, 0);
        self.0.extend_from_slice(bytes);
        self
    }
}
