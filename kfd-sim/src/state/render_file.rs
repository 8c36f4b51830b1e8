//! The state of one open render-node file (`struct amdgpu_fpriv`): its GPU VM, its GEM handles
//! and the objects they name, its submission contexts with their fences, its BO lists.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

use kfd_abi::Errno;
use kfd_sys as sys;

use super::accounts::Accounts;
use crate::hw::backing::{Backing, ProcessMemory};
use crate::hw::vm::{Vm, VmTarget};
use crate::lock_order::{rank, Ordered};

/// How many fences a context entity remembers (`amdgpu_sched_jobs`, default 32); older sequence
/// numbers are reported signalled, as amdgpu does.
pub(crate) const FENCE_WINDOW: u64 = 32;

/// The memory of a GEM object.
#[derive(Debug)]
pub(crate) enum GemMemory {
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
pub(crate) struct Charge {
    pub(crate) accounts: Arc<Accounts>,
    pub(crate) device: usize,
    pub(crate) vram: bool,
    pub(crate) bytes: u64,
}

impl Drop for Charge {
    fn drop(&mut self) {
        if self.vram {
            self.accounts.release_vram(self.device, self.bytes);
        } else {
            self.accounts.release_system(self.bytes);
        }
    }
}

/// A GEM object (`struct amdgpu_bo`), shared by every handle that names it: in every file of its
/// device that imported one of its dma-bufs too (amdgpu's self-import gives the same object).
#[derive(Debug)]
pub(crate) struct Gem {
    pub(crate) memory: GemMemory,
    pub(crate) size: u64,
    pub(crate) alignment: u64,
    /// Preferred domains (`AMDGPU_GEM_OP` can change them).
    pub(crate) domains: AtomicU64,
    pub(crate) flags: u64,
    pub(crate) mmap_offset: u64,
    pub(crate) _charge: Option<Charge>,
    /// Imported from a dma-buf of another device: it has a dma-buf attachment
    /// (`import_attach`), which `GEM_LIST_HANDLES` flags `IS_IMPORT`.
    pub(crate) foreign: bool,
    /// A dma-buf of it exists (the object's `dma_buf`): `GEM_CHANGE_HANDLE` moves its PRIME
    /// entry too.
    pub(crate) exported: AtomicBool,
}

impl Gem {
    /// Its alignment in pages, as the driver keeps it (`tbo.page_alignment`: the bytes asked
    /// for, rounded up to pages).
    pub(crate) fn alignment_pages(&self) -> u64 {
        self.alignment.div_ceil(crate::limits::PAGE_SIZE)
    }

    /// The VM target of a mapping `offset` bytes into the object.
    pub(crate) fn target(&self, offset: u64) -> VmTarget {
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
    pub(crate) fn is_target(&self, t: &VmTarget) -> bool {
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
pub(crate) struct VaMap {
    /// GPU VA.
    pub(crate) va: u64,
    /// Bytes.
    pub(crate) size: u64,
    /// Offset in the object.
    pub(crate) offset: u64,
    /// Page-table flags (`amdgpu_gem_va_map_flags` of the `GEM_VA` flags).
    pub(crate) pte: u64,
}

/// A GEM handle of a file, with the mappings of its object in the file's VM (the `bo_va`), the
/// newest first.
#[derive(Debug)]
pub(crate) struct Handle {
    pub(crate) gem: Arc<Gem>,
    pub(crate) vas: Vec<VaMap>,
}

/// The fences of one (context, ring) entity.
#[derive(Debug)]
pub(crate) struct Entity {
    /// The next sequence number (the first is 1).
    pub(crate) next: u64,
    /// Results of the last [`FENCE_WINDOW`] submissions.
    pub(crate) done: VecDeque<(u64, Result<(), Errno>)>,
    /// Held while one of its jobs executes: an entity's jobs run one after the other, in order,
    /// as a scheduler entity's jobs do.
    pub(crate) running: Arc<Ordered<()>>,
}

impl Default for Entity {
    fn default() -> Self {
        Self {
            next: 1,
            done: VecDeque::new(),
            running: Arc::new(Ordered::new(rank::ENTITY_RUNNING, ())),
        }
    }
}

/// A submission context (`struct amdgpu_ctx`).
#[derive(Debug, Default)]
pub(crate) struct Ctx {
    /// A submission of it faulted: further ones are refused (`ECANCELED`).
    pub(crate) guilty: bool,
    /// DMA ring entities by ring index.
    pub(crate) rings: BTreeMap<u32, Entity>,
}

/// Lowest free id from 1 in `map` (`idr_alloc(.., 1, 0)`), below `limit`.
pub(crate) fn free_id<V>(map: &BTreeMap<u32, V>, limit: u32) -> Option<u32> {
    (1..limit).find(|i| !map.contains_key(i))
}

/// The GEM handles, contexts and BO lists of a file.
#[derive(Debug, Default)]
pub(crate) struct FileState {
    pub(crate) handles: BTreeMap<u32, Handle>,
    pub(crate) ctxs: BTreeMap<u32, Ctx>,
    pub(crate) bo_lists: BTreeMap<u32, Vec<u32>>,
}

/// The state of one open render-node file.
#[derive(Debug)]
pub(crate) struct RenderFile {
    /// Index of the GPU in the machine.
    pub device: usize,
    /// The file's VM.
    pub vm: Arc<Ordered<Vm>>,
    pub(crate) state: Ordered<FileState>,
}

impl FileState {
    /// A new handle of `gem` (the lowest free id from 1; `ENOSPC` when there is none), not
    /// mapped anywhere yet.
    pub(crate) fn add_handle(&mut self, gem: Gem) -> Result<u32, Errno> {
        self.add_object(Arc::new(gem))
    }

    /// A new handle of the existing object `gem`.
    pub(crate) fn add_object(&mut self, gem: Arc<Gem>) -> Result<u32, Errno> {
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
            vm: Arc::new(Ordered::new(rank::VM, Vm::new())),
            state: Ordered::new(rank::RENDER_FILE_STATE, FileState::default()),
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
