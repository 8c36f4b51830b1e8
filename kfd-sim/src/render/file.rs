//! The state of one open render-node file (`struct amdgpu_fpriv`): its GPU VM, its GEM handles
//! and the objects they name, its submission contexts with their fences, its BO lists.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

use kfd_abi::Errno;
use kfd_sys as sys;

use crate::host::lock;
use crate::hw::backing::{Backing, ProcessMemory};
use crate::hw::vm::{Vm, VmTarget};
use crate::machine::MachineInner;

/// How many fences a context entity remembers (`amdgpu_sched_jobs`, default 32); older sequence
/// numbers are reported signalled, as amdgpu does.
pub(super) const FENCE_WINDOW: u64 = 32;

/// The memory of a GEM object.
#[derive(Debug)]
pub(super) enum GemMemory {
    /// VRAM or GTT: created here, or imported from a dma-buf of this machine.
    Backing(Arc<Backing>),
    /// Process memory registered with `GEM_USERPTR`.
    User {
        addr: u64,
        mem: ProcessMemory,
        readonly: bool,
    },
}

/// Device or system memory charged for a GEM object created here, released with it.
#[derive(Debug)]
pub(super) struct Charge {
    pub(super) machine: Arc<MachineInner>,
    pub(super) device: usize,
    pub(super) vram: bool,
    pub(super) bytes: u64,
}

impl Drop for Charge {
    fn drop(&mut self) {
        if self.vram {
            if let Some(d) = self.machine.devices.get(self.device) {
                let mut s = lock(&d.state);
                s.vram_used = s.vram_used.saturating_sub(self.bytes);
            }
        } else {
            self.machine.release_system(self.bytes);
        }
    }
}

/// A GEM object (`struct amdgpu_bo`), shared by every handle that names it: in every file of its
/// device that imported one of its dma-bufs too (amdgpu's self-import gives the same object).
#[derive(Debug)]
pub(crate) struct Gem {
    pub(super) memory: GemMemory,
    pub(super) size: u64,
    pub(super) alignment: u64,
    /// Preferred domains (`AMDGPU_GEM_OP` can change them).
    pub(super) domains: AtomicU64,
    pub(super) flags: u64,
    pub(super) mmap_offset: u64,
    pub(super) _charge: Option<Charge>,
    /// Imported from a dma-buf of another device: it has a dma-buf attachment
    /// (`import_attach`), which `GEM_LIST_HANDLES` flags `IS_IMPORT`.
    pub(super) foreign: bool,
    /// A dma-buf of it exists (the object's `dma_buf`): `GEM_CHANGE_HANDLE` moves its PRIME
    /// entry too.
    pub(super) exported: AtomicBool,
}

impl Gem {
    /// Its alignment in pages, as the driver keeps it (`tbo.page_alignment`: the bytes asked
    /// for, rounded up to pages).
    pub(super) fn alignment_pages(&self) -> u64 {
        self.alignment.div_ceil(crate::limits::PAGE_SIZE)
    }

    /// The VM target of a mapping `offset` bytes into the object.
    pub(super) fn target(&self, offset: u64) -> VmTarget {
        match &self.memory {
            GemMemory::Backing(b) => VmTarget::Memory {
                backing: Arc::clone(b),
                offset,
            },
            GemMemory::User { addr, mem, .. } => VmTarget::User {
                cpu_addr: addr.saturating_add(offset),
                mem: *mem,
            },
        }
    }

    /// Whether `t` (at `offset` into the object) is a mapping of this object.
    pub(super) fn is_target(&self, t: &VmTarget) -> bool {
        match (&self.memory, t) {
            (GemMemory::Backing(b), VmTarget::Memory { backing, .. }) => Arc::ptr_eq(b, backing),
            (GemMemory::User { addr, .. }, VmTarget::User { cpu_addr, .. }) => {
                (*addr..addr.saturating_add(self.size)).contains(cpu_addr)
            }
            _ => false,
        }
    }
}

/// One mapping of a GEM object in a file's VM (`struct amdgpu_bo_va_mapping`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct VaMap {
    /// GPU VA.
    pub(super) va: u64,
    /// Bytes.
    pub(super) size: u64,
    /// Offset in the object.
    pub(super) offset: u64,
    /// Page-table flags (`amdgpu_gem_va_map_flags` of the `GEM_VA` flags).
    pub(super) pte: u64,
}

/// A GEM handle of a file, with the mappings of its object in the file's VM (the `bo_va`), the
/// newest first.
#[derive(Debug)]
pub(super) struct Handle {
    pub(super) gem: Arc<Gem>,
    pub(super) vas: Vec<VaMap>,
}

/// The fences of one (context, ring) entity.
#[derive(Debug)]
pub(super) struct Entity {
    /// The next sequence number (the first is 1).
    pub(super) next: u64,
    /// Results of the last [`FENCE_WINDOW`] submissions.
    pub(super) done: VecDeque<(u64, Result<(), Errno>)>,
    /// Held while one of its jobs executes: an entity's jobs run one after the other, in order,
    /// as a scheduler entity's jobs do.
    pub(super) running: Arc<Mutex<()>>,
}

impl Default for Entity {
    fn default() -> Self {
        Self {
            next: 1,
            done: VecDeque::new(),
            running: Arc::new(Mutex::new(())),
        }
    }
}

/// A submission context (`struct amdgpu_ctx`).
#[derive(Debug, Default)]
pub(super) struct Ctx {
    /// A submission of it faulted: further ones are refused (`ECANCELED`).
    pub(super) guilty: bool,
    /// DMA ring entities by ring index.
    pub(super) rings: BTreeMap<u32, Entity>,
}

/// Lowest free id from 1 in `map` (`idr_alloc(.., 1, 0)`), below `limit`.
pub(super) fn free_id<V>(map: &BTreeMap<u32, V>, limit: u32) -> Option<u32> {
    (1..limit).find(|i| !map.contains_key(i))
}

/// The GEM handles, contexts and BO lists of a file.
#[derive(Debug, Default)]
pub(super) struct FileState {
    pub(super) handles: BTreeMap<u32, Handle>,
    pub(super) ctxs: BTreeMap<u32, Ctx>,
    pub(super) bo_lists: BTreeMap<u32, Vec<u32>>,
}

/// The state of one open render-node file.
#[derive(Debug)]
pub(crate) struct RenderFile {
    /// Index of the GPU in the machine.
    pub device: usize,
    /// The file's VM.
    pub vm: Arc<Mutex<Vm>>,
    pub(super) state: Mutex<FileState>,
}

impl FileState {
    /// A new handle of `gem` (the lowest free id from 1; `ENOSPC` when there is none), not
    /// mapped anywhere yet.
    pub(super) fn add_handle(&mut self, gem: Gem) -> Result<u32, Errno> {
        self.add_object(Arc::new(gem))
    }

    /// A new handle of the existing object `gem`.
    pub(super) fn add_object(&mut self, gem: Arc<Gem>) -> Result<u32, Errno> {
        let id = free_id(&self.handles, u32::MAX).ok_or(Errno::ENOSPC)?;
        self.handles.insert(
            id,
            Handle {
                gem,
                vas: Vec::new(),
            },
        );
        Ok(id)
    }
}

impl RenderFile {
    /// A new open file on device index `device`, with an empty VM.
    pub(crate) fn new(device: usize) -> Self {
        Self {
            device,
            vm: Arc::new(Mutex::new(Vm::new())),
            state: Mutex::new(FileState::default()),
        }
    }
}

/// A GEM object as a CPU mapping at its fake offset sees it (`drm_gem_mmap`).
#[derive(Debug)]
pub(crate) struct MmapObject {
    /// Its memory; `None` for a userptr object.
    pub backing: Option<Arc<Backing>>,
    /// Bytes.
    pub size: u64,
    /// Created with `AMDGPU_GEM_CREATE_NO_CPU_ACCESS`.
    pub no_cpu_access: bool,
}

impl RenderFile {
    /// The GEM object of one of this file's handles whose fake mmap offset is `offset`. `EAGAIN`
    /// when the file stays busy for `wait` (the caller of an mmap must not wait for ever).
    pub(crate) fn mmap_object(
        &self,
        offset: u64,
        wait: std::time::Duration,
    ) -> Result<Option<MmapObject>, Errno> {
        let st = crate::host::lock_within(&self.state, wait).ok_or(Errno::EAGAIN)?;
        Ok(st
            .handles
            .values()
            .find(|h| h.gem.mmap_offset == offset)
            .map(|h| MmapObject {
                backing: match &h.gem.memory {
                    GemMemory::Backing(b) => Some(Arc::clone(b)),
                    GemMemory::User { .. } => None,
                },
                size: h.gem.size,
                no_cpu_access: h.gem.flags & u64::from(sys::AMDGPU_GEM_CREATE_NO_CPU_ACCESS) != 0,
            }))
    }
}
