//! `drm_gem_mmap` on a render node: the render half of [`crate::vma`].

use std::sync::Arc;

use kfd_abi::Errno;

use crate::hw::backing::Backing;
use crate::state::machine::{FileKind, MachineInner, OpenFile};
use crate::state::render_file::RenderFile;
use crate::vma::{proc_state, MmapRequest, Target, LOCK_WAIT};
use crate::vma::{MAP_EXEC, MAP_MAYWRITE, MAP_READ, MAP_SHARED, MAP_WRITE};
use crate::vma::{VMA_ACCESS, VMA_DONTDUMP, VMA_IO, VMA_NO_MAYWRITE};

/// Flags of render-node mappings.
pub(crate) const RENDER_VMA: u32 = VMA_IO | VMA_DONTDUMP | VMA_ACCESS;

/// A BO found at the requested fake offset.
struct Found {
    backing: Option<Arc<Backing>>,
    size: u64,
    allowed: bool,
    userptr: bool,
    no_cpu_access: bool,
}

/// `drm_gem_mmap` on a render node.
pub(crate) fn gem_mmap(
    m: &MachineInner,
    file: &OpenFile,
    rf: &RenderFile,
    q: &MmapRequest,
) -> Result<Target, Errno> {
    let found = match gem(rf, q.offset, true)? {
        Some(f) => Some(f),
        None => match other_files_gem(m, file, rf.device, q.offset)? {
            Some(f) => Some(f),
            None => kfd_bo(m, file, rf.device, q.offset)?,
        },
    };
    // The offset manager finds a node only where the whole range fits in it.
    let found = found
        .filter(|f| q.length <= crate::limits::align_up(f.size))
        .ok_or(Errno::EINVAL)?;
    if !found.allowed {
        return Err(Errno::EACCES);
    }
    if found.userptr || found.no_cpu_access {
        return Err(Errno::EPERM);
    }
    let mut vma = RENDER_VMA;
    let cow = q.flags & (MAP_SHARED | MAP_MAYWRITE) == MAP_MAYWRITE;
    if cow {
        if q.flags & (MAP_READ | MAP_WRITE | MAP_EXEC) != 0 {
            return Err(Errno::EINVAL);
        }
        vma |= VMA_NO_MAYWRITE;
    }
    // A doorbell or MMIO BO has no memory of its own here: nothing to map.
    let backing = found.backing.ok_or(Errno::EINVAL)?;
    Ok(Target {
        backing,
        offset: 0,
        vma,
    })
}

/// The GEM object of one of `rf`'s handles at `offset`.
fn gem(rf: &RenderFile, offset: u64, allowed: bool) -> Result<Option<Found>, Errno> {
    Ok(rf.mmap_object(offset, LOCK_WAIT)?.map(|g| Found {
        userptr: g.backing.is_none(),
        backing: g.backing,
        size: g.size,
        allowed,
        no_cpu_access: g.no_cpu_access,
    }))
}

/// A GEM object of another render file of device `dev` at `offset`: the offset exists, but not
/// for `file` (`drm_vma_node_is_allowed`).
fn other_files_gem(
    m: &MachineInner,
    file: &OpenFile,
    dev: usize,
    offset: u64,
) -> Result<Option<Found>, Errno> {
    for f in m.files() {
        if f.key == file.key {
            continue;
        }
        if let FileKind::Render(r) = &f.kind {
            if r.device == dev {
                if let Some(found) = gem(r, offset, false)? {
                    return Ok(Some(found));
                }
            }
        }
    }
    Ok(None)
}

/// The KFD BO on device `dev` whose fake offset is `offset`, in any process (offsets are unique
/// per device); it may be mapped through `file` only if that is the process's VM on `dev`.
fn kfd_bo(
    m: &MachineInner,
    file: &OpenFile,
    dev: usize,
    offset: u64,
) -> Result<Option<Found>, Errno> {
    use kfd_sys::KFD_IOC_ALLOC_MEM_FLAGS_USERPTR as USERPTR;
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
                // KFD VRAM BOs are never created NO_CPU_ACCESS (since 5.14, "drm/amdkfd: Allow
                // CPU access for all VRAM BOs"): libhsakmt maps every VRAM BO, the invisible ones
                // PROT_NONE and private, for the debugger.
                no_cpu_access: false,
            }));
        }
    }
    Ok(None)
}
