//! Which simulated memory backs a CPU mapping of one of our devices, decided as the 6.1 drivers
//! decide it, with their checks in their order and their errno:
//!
//! - `/dev/kfd` (`kfd_mmap`): the caller must have a KFD process (else `EINVAL`); bits 63-62 of
//!   the offset pick the type, bits 61-46 the (actual) gpu id, unknown or 0 `ENODEV`.
//!   DOORBELL: exactly the process's doorbell slice (8 KiB) of that GPU, else `EINVAL`;
//!   EVENTS: at most the order of the full signal page (32 KiB), and a signal page must exist,
//!   else `EINVAL`; RESERVED_MEM (the CWSR area of APUs): exactly 2 pages, a fresh zeroed area each
//!   time; MMIO: exactly one page, the GPU's HDP flush page. Flags as `kfd_*_mmap` set them:
//!   `VM_IO | VM_DONTCOPY | VM_DONTEXPAND | VM_NORESERVE | VM_DONTDUMP` (`VM_PFNMAP` aside: see
//!   the module's README).
//! - Render nodes (`drm_gem_mmap`, `amdgpu_gem_object_mmap`, `ttm_bo_mmap_obj`): the offset must
//!   be exactly a BO's fake offset on this device and the length at most the BO's size
//!   (`EINVAL`); the BO must be one of this file's (a KFD BO of a process whose VM is this file,
//!   or a GEM handle of it), else `EACCES`; userptr and no-CPU-access BOs `EPERM` (KFD VRAM
//!   without PUBLIC is created no-CPU-access); copy-on-write mappings `EINVAL`, except
//!   `PROT_NONE` private ones, which lose `VM_MAYWRITE` instead (amdgpu's workaround for the
//!   thunk). Flags: `VM_IO | VM_DONTEXPAND | VM_DONTDUMP`, readable through ptrace (TTM's
//!   `access`), inherited by fork.
//!
//! What the simulator did not have and the bridge adds, as the minimum that backs these pages:
//! a doorbell page per (process, GPU), an MMIO page per GPU, and the kernel's own signal page
//! (made when first mapped: all slots unsignaled, as the kernel fills it). Nothing reads the
//! doorbells yet (the simulated queues run without them).
//!
//! The caller's mmap lock is held while the daemon answers, so nothing here touches the caller's
//! memory, and the simulator's locks are taken with a bound ([`LOCK_WAIT`]): a daemon thread
//! that holds one while it reads that process's memory would otherwise wait on us for ever.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use kfd_abi::mmap_offset as mo;
use kfd_abi::Errno;

use super::proto::{self, MmapQuery};
use crate::machine::{lock, lock_within, FileKind, MachineInner, OpenFile};
use crate::memory::{Backing, Domain};
use crate::process::limits::{DOORBELL_SLICE, PAGE_SIZE, SIGNAL_EVENT_LIMIT};
use crate::process::{KfdProcess, ProcState, SignalPage};
use crate::render::RenderFile;

/// How long the answer waits for a lock of the simulator's state before it gives up (`EAGAIN`).
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(2);

/// `KFD_CWSR_TBA_TMA_SIZE`: the reserved-memory (CWSR) area of one process on one GPU.
const CWSR_SIZE: u64 = 2 * PAGE_SIZE;

/// Flags of the KFD mappings.
const KFD_VMA: u32 =
    proto::VMA_IO | proto::VMA_DONTCOPY | proto::VMA_NORESERVE | proto::VMA_DONTDUMP;
/// Flags of render-node mappings.
const RENDER_VMA: u32 = proto::VMA_IO | proto::VMA_DONTDUMP | proto::VMA_ACCESS;

/// The memory behind one mapping.
#[derive(Debug)]
pub(crate) struct Target {
    /// The memfd.
    pub backing: Arc<Backing>,
    /// Byte offset of the mapping's first page in it.
    pub offset: u64,
    /// `VMA_*` flags for the module.
    pub vma: u32,
}

/// A doorbell page of one process on one GPU.
#[derive(Debug)]
struct DoorbellPage {
    process: Weak<KfdProcess>,
    dev: usize,
    page: Arc<Backing>,
}

/// The pages the bridge adds to the simulator (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct Backings {
    doorbells: Mutex<Vec<DoorbellPage>>,
    mmio: Mutex<Vec<(usize, Arc<Backing>)>>,
}

fn page(size: u64, dev: usize) -> Result<Arc<Backing>, Errno> {
    Backing::new(size, Domain::Gtt, dev, true)
        .map(Arc::new)
        .map_err(|e| {
            log::warn!("kfd-simd: cannot back a {size}-byte device page: {e}");
            Errno::ENOMEM
        })
}

impl Backings {
    /// The doorbell slice of `process` on device `dev` (the same pages for every mapping).
    fn doorbell(&self, process: &Arc<KfdProcess>, dev: usize) -> Result<Arc<Backing>, Errno> {
        let mut all = lock(&self.doorbells);
        all.retain(|d| d.process.strong_count() > 0);
        if let Some(d) = all.iter().find(|d| {
            d.dev == dev
                && d.process
                    .upgrade()
                    .is_some_and(|p| Arc::ptr_eq(&p, process))
        }) {
            return Ok(Arc::clone(&d.page));
        }
        let page = page(DOORBELL_SLICE, dev)?;
        all.push(DoorbellPage {
            process: Arc::downgrade(process),
            dev,
            page: Arc::clone(&page),
        });
        Ok(page)
    }

    /// The MMIO remap (HDP flush) page of device `dev`, shared by every process.
    fn mmio(&self, dev: usize) -> Result<Arc<Backing>, Errno> {
        let mut all = lock(&self.mmio);
        if let Some((_, p)) = all.iter().find(|(d, _)| *d == dev) {
            return Ok(Arc::clone(p));
        }
        let p = page(PAGE_SIZE, dev)?;
        all.push((dev, Arc::clone(&p)));
        Ok(p)
    }
}

/// The kernel's `get_order`: log2 of the number of pages, rounded up.
fn order(bytes: u64) -> u32 {
    let pages = bytes.div_ceil(PAGE_SIZE).max(1);
    pages.next_power_of_two().trailing_zeros()
}

/// Answers one query on an open file of ours; `caller` is the calling process's KFD process.
pub(crate) fn resolve(
    m: &MachineInner,
    backings: &Backings,
    file: &OpenFile,
    caller: Option<&Arc<KfdProcess>>,
    q: &MmapQuery,
) -> Result<Target, Errno> {
    match &file.kind {
        FileKind::Kfd(_) => kfd(m, backings, caller, q),
        FileKind::Render(r) => render(m, file, r, q),
    }
}

fn proc_state(p: &KfdProcess) -> Result<std::sync::MutexGuard<'_, ProcState>, Errno> {
    lock_within(&p.state, LOCK_WAIT).ok_or_else(|| {
        log::warn!(
            "kfd-simd: pid {}: the KFD process stayed busy; mmap answered EAGAIN",
            p.pid
        );
        Errno::EAGAIN
    })
}

/// `kfd_mmap`.
fn kfd(
    m: &MachineInner,
    backings: &Backings,
    caller: Option<&Arc<KfdProcess>>,
    q: &MmapQuery,
) -> Result<Target, Errno> {
    // kfd_get_process(current).
    let p = caller.ok_or(Errno::EINVAL)?;
    let gpu_id = mo::get_gpu_id(q.offset);
    let dev = if gpu_id == 0 {
        None
    } else {
        m.device_by_gpu_id(gpu_id)
    };
    let target = |backing, vma| Target {
        backing,
        offset: 0,
        vma,
    };
    let has_pdd = |st: &ProcState, dev: usize| st.pdds.iter().any(|pdd| pdd.dev == dev);
    match q.offset & mo::TYPE_MASK {
        mo::TYPE_DOORBELL => {
            let dev = dev.ok_or(Errno::ENODEV)?;
            if q.length != DOORBELL_SLICE {
                return Err(Errno::EINVAL);
            }
            if !has_pdd(&*proc_state(p)?, dev) {
                return Err(Errno::EINVAL);
            }
            Ok(target(backings.doorbell(p, dev)?, KFD_VMA))
        }
        mo::TYPE_EVENTS => {
            if order(u64::from(SIGNAL_EVENT_LIMIT) * 8) < order(q.length) {
                return Err(Errno::EINVAL);
            }
            let mut st = proc_state(p)?;
            let signal = st.signal.as_mut().ok_or(Errno::EINVAL)?;
            let backing = signal_page(signal)?;
            // The kernel maps what the page's address is followed by; we back only the page.
            if q.length > backing.size {
                return Err(Errno::EINVAL);
            }
            Ok(target(backing, KFD_VMA))
        }
        mo::TYPE_RESERVED_MEM => {
            let dev = dev.ok_or(Errno::ENODEV)?;
            if q.length != CWSR_SIZE {
                return Err(Errno::EINVAL);
            }
            if !has_pdd(&*proc_state(p)?, dev) {
                return Err(Errno::EINVAL);
            }
            Ok(target(page(CWSR_SIZE, dev)?, KFD_VMA))
        }
        // TYPE_MMIO (the two bits leave no other value).
        _ => {
            let dev = dev.ok_or(Errno::ENODEV)?;
            if q.length != PAGE_SIZE {
                return Err(Errno::EINVAL);
            }
            Ok(target(backings.mmio(dev)?, KFD_VMA))
        }
    }
}

/// The memory of the signal page: the BO userspace gave, or the kernel's own page, made now (all
/// slots unsignaled, as `allocate_signal_page` fills it; nothing wrote to it before).
fn signal_page(signal: &mut SignalPage) -> Result<Arc<Backing>, Errno> {
    if let Some(b) = &signal.backing {
        return Ok(Arc::clone(b));
    }
    let size = u64::from(SIGNAL_EVENT_LIMIT) * 8;
    let b = page(size, 0)?;
    let unsignaled = vec![0xffu8; usize::try_from(size).map_err(|_| Errno::ENOMEM)?];
    if !b.write(0, &unsignaled) {
        return Err(Errno::ENOMEM);
    }
    signal.backing = Some(Arc::clone(&b));
    Ok(b)
}

/// A BO found at the requested fake offset.
struct Found {
    backing: Option<Arc<Backing>>,
    size: u64,
    allowed: bool,
    userptr: bool,
    no_cpu_access: bool,
}

/// `drm_gem_mmap` on a render node.
fn render(
    m: &MachineInner,
    file: &OpenFile,
    rf: &RenderFile,
    q: &MmapQuery,
) -> Result<Target, Errno> {
    let found = match rf.mmap_object(q.offset, LOCK_WAIT)? {
        Some(g) => Some(Found {
            userptr: g.backing.is_none(),
            backing: g.backing,
            size: g.size,
            allowed: true,
            no_cpu_access: g.no_cpu_access,
        }),
        None => kfd_bo(m, file, rf.device, q.offset)?,
    };
    // The offset manager finds a node only where the whole range fits in it.
    let found = found
        .filter(|f| q.length <= crate::process::align_up(f.size))
        .ok_or(Errno::EINVAL)?;
    if !found.allowed {
        return Err(Errno::EACCES);
    }
    if found.userptr || found.no_cpu_access {
        return Err(Errno::EPERM);
    }
    let mut vma = RENDER_VMA;
    let cow = q.flags & (proto::MAP_SHARED | proto::MAP_MAYWRITE) == proto::MAP_MAYWRITE;
    if cow {
        if q.flags & (proto::MAP_READ | proto::MAP_WRITE | proto::MAP_EXEC) != 0 {
            return Err(Errno::EINVAL);
        }
        vma |= proto::VMA_NO_MAYWRITE;
    }
    // A doorbell or MMIO BO has no memory of its own here: nothing to map.
    let backing = found.backing.ok_or(Errno::EINVAL)?;
    Ok(Target {
        backing,
        offset: 0,
        vma,
    })
}

/// The KFD BO on device `dev` whose fake offset is `offset`, in any process (offsets are unique
/// per device); it may be mapped through `file` only if that is the process's VM on `dev`.
fn kfd_bo(
    m: &MachineInner,
    file: &OpenFile,
    dev: usize,
    offset: u64,
) -> Result<Option<Found>, Errno> {
    use kfd_sys::{
        KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC as PUBLIC, KFD_IOC_ALLOC_MEM_FLAGS_USERPTR as USERPTR,
        KFD_IOC_ALLOC_MEM_FLAGS_VRAM as VRAM,
    };
    for p in m.processes() {
        let st = proc_state(&p)?;
        for pdd in st.pdds.iter().filter(|pdd| pdd.dev == dev) {
            let Some(bo) = pdd.bos.values().find(|bo| bo.mmap_offset == offset) else {
                continue;
            };
            return Ok(Some(Found {
                backing: bo.backing.clone(),
                size: bo.size,
                allowed: pdd.drm.as_ref().is_some_and(|d| d.key == file.key),
                userptr: bo.flags & USERPTR != 0,
                no_cpu_access: bo.flags & VRAM != 0 && bo.flags & PUBLIC == 0,
            }));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_the_kernels_get_order() {
        assert_eq!(order(1), 0);
        assert_eq!(order(4096), 0);
        assert_eq!(order(4097), 1);
        assert_eq!(order(8192), 1);
        assert_eq!(order(12288), 2);
        assert_eq!(order(32768), 3);
        assert_eq!(order(32769), 4);
    }
}
