//! The amdgpu render node (`/dev/dri/renderD<minor>`): its open files, the per-file GPU VM, and
//! the DRM ioctls that move GPU memory for checkpoint/restore.
//!
//! Each open render file owns a GPU virtual address space ([`Vm`]). `ACQUIRE_VM` on `/dev/kfd`
//! adopts that VM as the process's compute VM on the GPU, so `MAP_MEMORY_TO_GPU` inserts KFD BOs
//! into it and command submission on the file sees them, as on hardware.
//!
//! [`dispatch`] is written like `drm_ioctl` + the amdgpu driver (6.1):
//!
//! - the type byte must be `'d'` (`ENOTTY`); `_IOC_NR` selects the row of the kernel's core or
//!   amdgpu table (`core`: every number 6.1 defines, with its flags); a number without a row is
//!   `EINVAL`, as the DRM core answers for holes and numbers past its tables;
//! - sizes as the DRM core: bytes are copied in only if both the caller's and the table's code have
//!   the write bit, copied out only if both have the read bit, the kernel buffer is the largest of
//!   the three sizes, zero-filled past what was copied in, and copied out also on failure;
//! - then `drm_ioctl_permit` as for a render client: what is not render-allowed (`GET_CLIENT`,
//!   `GET_MAGIC`, `SET_CLIENT_CAP`, mode setting, ...) or needs the master is `EACCES`;
//! - no caller check: the DRM core lets any process holding the fd issue ioctls (unlike
//!   `/dev/kfd`); userptr memory belongs to the process that registered it;
//! - one function per ioctl, named after it, with the driver's checks in its order and its errno
//!   (the source functions are named in each doc comment).
//!
//! Command submission executes synchronously inside `AMDGPU_CS` on one of the GPU's
//! [`sdma`](crate::hw::sdma) engines: the fence is signalled when the ioctl returns, `WAIT_CS`
//! reports its result. Jobs of one (context, ring) entity run in order; jobs of different
//! entities run at the same time, at most one per SDMA engine of the GPU, as amdgpu's scheduler
//! spreads idle entities over the engines ([`sdma::Engines`](crate::hw::sdma::Engines)). A faulting
//! submission's fence carries `ETIME` (what amdgpu sets on a hung job's fence) and marks the
//! context guilty, after which `AMDGPU_CS` on it fails with `ECANCELED`, as amdgpu does.
//!
//! Approximations, by design of the simulator: only the DMA IP is simulated (rings = the GPU's
//! SDMA engines, xGMI ones included); `GEM_VA` implements MAP and UNMAP (CLEAR, REPLACE and PRT
//! mappings are refused with `EINVAL`); CS chunks other than IB are refused with `EINVAL`; GDS, GWS
//! and OA domains, empty domain masks and zero sizes are `EINVAL`; context priorities are accepted
//! and ignored; an imported BO gets its own fake mmap offset; a dma-buf whose BO no longer exists
//! anywhere is not recognised any more (the simulator does not track fd lifetimes). The DRM core
//! ioctls `VERSION` and `GET_CAP` and the `AMDGPU_INFO` queries are answered as amdgpu answers
//! them for the GPU's model (`info`, from [`crate::asic`]); the render-allowed ioctls the
//! simulator does not run (sync objects, GEM metadata, fence waits and conversions, VMID
//! reservation) are logged once by name and answered `EINVAL`.

mod core;
mod info;
pub(crate) mod mmap;

pub use self::core::{DRIVER_DATE, DRIVER_DESC, DRIVER_MAJOR, DRIVER_MINOR, DRIVER_NAME};

use std::collections::{BTreeMap, VecDeque};
use std::mem::{offset_of, size_of};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use kfd_abi::ioctl::{self, drm as codes};
use kfd_abi::Errno;
use kfd_sys as sys;

use crate::client::Client;
use crate::host::lock;
use crate::hw::backing::ProcessMemory;
use crate::hw::backing::{Backing, Domain};
use crate::hw::vm::{Vm, VmMapping, VmTarget};
use crate::limits::{KVMALLOC_MAX, PAGE_SIZE};
use crate::machine::MachineInner;
use crate::uaccess::{
    check_user_range, copy_from_user, copy_in_kdata, copy_to_user, fd_from_field, get_u32, get_u64,
    put_u32, put_u64, IoctlResult,
};

/// The gfx9 GPU VM layout, as the amdgpu driver (6.1) defines it.
pub mod va {
    /// Bytes reserved at the bottom and the top of the VM for the kernel
    /// (`AMDGPU_VA_RESERVED_SIZE`).
    pub const RESERVED: u64 = 2 << 20;
    /// Size of the VM: 48-bit addresses on gfx9 (`max_pfn` << 12).
    pub const VM_SIZE: u64 = 1 << 48;
    /// Start of the hole between the low and the sign-extended high half (`AMDGPU_GMC_HOLE_START`).
    pub const HOLE_START: u64 = 0x0000_8000_0000_0000;
    /// End of the hole (`AMDGPU_GMC_HOLE_END`).
    pub const HOLE_END: u64 = 0xffff_8000_0000_0000;
    /// Mask from a high-half address to its VM address (`AMDGPU_GMC_HOLE_MASK`).
    pub const HOLE_MASK: u64 = 0x0000_ffff_ffff_ffff;
}

/// How many fences a context entity remembers (`amdgpu_sched_jobs`, default 32); older sequence
/// numbers are reported signalled, as amdgpu does.
const FENCE_WINDOW: u64 = 32;
/// Context ids are allocated in `1..AMDGPU_VM_MAX_NUM_CTX`.
const MAX_CTX: u32 = 4096;
/// `AMDGPU_GEM_CREATE_DISCARDABLE` (6.1 uapi, newer than the pinned header).
const GEM_CREATE_DISCARDABLE: u64 = 1 << 12;
/// `AMDGPU_VM_PAGE_NOALLOC` (6.1 uapi, newer than the pinned header).
const VM_PAGE_NOALLOC: u32 = 1 << 9;

/// The memory of a GEM object.
#[derive(Debug)]
enum GemMemory {
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
struct Charge {
    machine: Arc<MachineInner>,
    device: usize,
    vram: bool,
    bytes: u64,
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

/// A GEM object (`struct amdgpu_bo`), shared by every handle that names it.
#[derive(Debug)]
struct Gem {
    memory: GemMemory,
    size: u64,
    alignment: u64,
    /// Preferred domains (`AMDGPU_GEM_OP` can change them).
    domains: AtomicU64,
    flags: u64,
    mmap_offset: u64,
    _charge: Option<Charge>,
}

impl Gem {
    /// The VM target of a mapping `offset` bytes into the object.
    fn target(&self, offset: u64) -> VmTarget {
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
    fn is_target(&self, t: &VmTarget) -> bool {
        match (&self.memory, t) {
            (GemMemory::Backing(b), VmTarget::Memory { backing, .. }) => Arc::ptr_eq(b, backing),
            (GemMemory::User { addr, .. }, VmTarget::User { cpu_addr, .. }) => {
                (*addr..addr.saturating_add(self.size)).contains(cpu_addr)
            }
            _ => false,
        }
    }
}

/// A GEM handle of a file, with the VAs it is mapped at in the file's VM (the `bo_va`).
#[derive(Debug)]
struct Handle {
    gem: Arc<Gem>,
    vas: Vec<(u64, u64)>,
}

/// The fences of one (context, ring) entity.
#[derive(Debug)]
struct Entity {
    /// The next sequence number (the first is 1).
    next: u64,
    /// Results of the last [`FENCE_WINDOW`] submissions.
    done: VecDeque<(u64, Result<(), Errno>)>,
    /// Held while one of its jobs executes: an entity's jobs run one after the other, in order,
    /// as a scheduler entity's jobs do.
    running: Arc<Mutex<()>>,
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
struct Ctx {
    /// A submission of it faulted: further ones are refused (`ECANCELED`).
    guilty: bool,
    /// DMA ring entities by ring index.
    rings: BTreeMap<u32, Entity>,
}

#[derive(Debug, Default)]
struct FileState {
    handles: BTreeMap<u32, Handle>,
    ctxs: BTreeMap<u32, Ctx>,
    bo_lists: BTreeMap<u32, Vec<u32>>,
}

/// The state of one open render-node file.
#[derive(Debug)]
pub struct RenderFile {
    /// Index of the GPU in the machine.
    pub device: usize,
    /// The file's VM.
    pub vm: Arc<Mutex<Vm>>,
    state: Mutex<FileState>,
}

impl RenderFile {
    /// A new open file on device index `device`, with an empty VM.
    pub fn new(device: usize) -> Self {
        Self {
            device,
            vm: Arc::new(Mutex::new(Vm::new(device))),
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

/// What one render-node ioctl sees: the machine, the open file, and the caller.
struct RenderCall<'a> {
    machine: &'a Arc<MachineInner>,
    file: &'a RenderFile,
    client: &'a dyn Client,
}

type Handler = fn(&RenderCall<'_>, &mut [u8]) -> IoctlResult;

/// `drm_ioctl` on a render-node file: one call made by `client`.
pub fn dispatch(
    machine: &Arc<MachineInner>,
    file: &RenderFile,
    client: &dyn Client,
    cmd: u32,
    arg: u64,
) -> Result<i32, Errno> {
    if ioctl::ty(cmd) != codes::TYPE {
        let code = crate::uaccess::spell_request(cmd);
        machine.log_once(
            &format!("render node {code}"),
            &format!("render node {code}: not a DRM ioctl, ENOTTY as 6.1 answers"),
        );
        return Err(Errno::ENOTTY);
    }
    let nr = ioctl::nr(cmd);
    // A number without a row (no function): EINVAL before anything is copied.
    let Some(row) = core::lookup(nr) else {
        let code = crate::uaccess::spell_request(cmd);
        machine.log_once(
            &format!("render node {code}"),
            &format!("render node {code}: not in 6.1's DRM tables, EINVAL as 6.1 answers"),
        );
        return Err(Errno::EINVAL);
    };
    let kcmd = row.cmd;
    let (udir, kdir) = (ioctl::dir(cmd), ioctl::dir(kcmd));
    let usize_ = ioctl::size(cmd);
    let in_size = if udir.copies_in() && kdir.copies_in() {
        usize_
    } else {
        0
    };
    let out_size = if udir.copies_out() && kdir.copies_out() {
        usize_
    } else {
        0
    };
    let mut kdata = copy_in_kdata(client, arg, in_size, out_size.max(ioctl::size(kcmd)))?;
    let call = RenderCall {
        machine,
        file,
        client,
    };
    // drm_ioctl_kernel: the permission check, then the function.
    let ret =
        core::permit(row.flags, client.can_checkpoint_restore()).and_then(|()| match row.handler {
            Some(handler) => handler(&call, &mut kdata),
            None => {
                machine.unanswered(&format!("DRM_IOCTL_{}", row.name));
                Err(Errno::EINVAL)
            }
        });
    copy_to_user(client, arg, &kdata[..out_size])?;
    if ret.is_ok() && kcmd == ioctl::drm::AMDGPU_CS {
        log::debug!(
            "kfd-sim: AMDGPU_CS ok on file {:p} by pid {}",
            file,
            client.pid()
        );
    }
    if let Err(e) = ret {
        let st = lock(&file.state);
        log::debug!(
            "kfd-sim: DRM_IOCTL_{} -> {e} (file {:p}: contexts {:?}, {} GEM handles; in {:02x?})",
            row.name,
            file,
            st.ctxs.keys().collect::<Vec<_>>(),
            st.handles.len(),
            &kdata[..in_size.min(32)]
        );
    }
    ret
}

/// Whether `handle` is a GEM handle of the call's file (`drm_gem_object_lookup`).
fn has_handle(call: &RenderCall<'_>, handle: u32) -> bool {
    lock(&call.file.state).handles.contains_key(&handle)
}

/// Lowest free id from 1 in `map` (`idr_alloc(.., 1, 0)`), below `limit`.
fn free_id<V>(map: &BTreeMap<u32, V>, limit: u32) -> Option<u32> {
    (1..limit).find(|i| !map.contains_key(i))
}

/// Removes the VA mappings of `h` from `vm` (`amdgpu_vm_bo_del` at handle close).
fn unmap_all(vm: &Mutex<Vm>, h: &Handle) {
    let mut vm = lock(vm);
    for &(va, size) in &h.vas {
        let ours = vm
            .lookup(va)
            .is_some_and(|(s, m)| s == va && m.size == size && h.gem.is_target(&m.target));
        if ours {
            vm.unmap(va);
        }
    }
}

/// `drm_gem_close_ioctl`: unknown handle `EINVAL`.
fn gem_close(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    let handle = get_u32(kdata, offset_of!(sys::drm_gem_close, handle));
    let h = lock(&call.file.state)
        .handles
        .remove(&handle)
        .ok_or(Errno::EINVAL)?;
    unmap_all(&call.file.vm, &h);
    Ok(0)
}

/// `drm_prime_handle_to_fd_ioctl` + `amdgpu_gem_prime_export`: flags other than `DRM_CLOEXEC |
/// DRM_RDWR` `EINVAL`; unknown handle `ENOENT`; userptr or VM-always-valid BO `EPERM`.
fn prime_handle_to_fd(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    let handle = get_u32(kdata, offset_of!(sys::drm_prime_handle, handle));
    let flags = get_u32(kdata, offset_of!(sys::drm_prime_handle, flags));
    let cloexec = libc::O_CLOEXEC.unsigned_abs();
    let rdwr = libc::O_RDWR.unsigned_abs();
    if flags & !(cloexec | rdwr) != 0 {
        return Err(Errno::EINVAL);
    }
    let gem = lock(&call.file.state)
        .handles
        .get(&handle)
        .map(|h| Arc::clone(&h.gem))
        .ok_or(Errno::ENOENT)?;
    let GemMemory::Backing(b) = &gem.memory else {
        return Err(Errno::EPERM);
    };
    if gem.flags & u64::from(sys::AMDGPU_GEM_CREATE_VM_ALWAYS_VALID) != 0 {
        return Err(Errno::EPERM);
    }
    let fd = b
        .export(flags & rdwr != 0)
        .and_then(|fd| crate::host::set_cloexec(fd.as_fd(), flags & cloexec != 0).map(|()| fd))
        .map_err(|e| Errno::from_io(&e))?;
    let slot = crate::client::FdSlot::ArgField(offset_of!(sys::drm_prime_handle, fd));
    let raw = call.client.install_fd_at(fd, slot)?;
    put_u32(
        kdata,
        offset_of!(sys::drm_prime_handle, fd),
        raw.unsigned_abs(),
    );
    Ok(0)
}

/// `drm_gem_prime_fd_to_handle` + `amdgpu_gem_prime_import`: a closed fd `EBADF`
/// (`dma_buf_get`), an fd that is not a dma-buf of this machine `EINVAL`; a dma-buf already
/// imported into this file gives its existing handle.
fn prime_fd_to_handle(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    let fd = get_u32(kdata, offset_of!(sys::drm_prime_handle, fd));
    let key = call.client.resolve_fd(fd_from_field(fd))?;
    let b = call.machine.dmabuf(key).ok_or(Errno::EINVAL)?;
    let mut st = lock(&call.file.state);
    let existing = st.handles.iter().find_map(|(&id, h)| match &h.gem.memory {
        GemMemory::Backing(g) if Arc::ptr_eq(g, &b) => Some(id),
        _ => None,
    });
    let id = match existing {
        Some(id) => id,
        None => {
            let id = free_id(&st.handles, u32::MAX).ok_or(Errno::ENOSPC)?;
            let dev = call
                .machine
                .devices
                .get(call.file.device)
                .ok_or(Errno::EINVAL)?;
            // A foreign device's memory is attached through the GART, as amdgpu imports it.
            let domain = if b.device == call.file.device && b.domain == Domain::Vram {
                sys::AMDGPU_GEM_DOMAIN_VRAM
            } else {
                sys::AMDGPU_GEM_DOMAIN_GTT
            };
            let gem = Gem {
                size: b.size,
                alignment: PAGE_SIZE,
                domains: AtomicU64::new(u64::from(domain)),
                flags: 0,
                mmap_offset: dev.alloc_mmap_offset(b.size),
                memory: GemMemory::Backing(b),
                _charge: None,
            };
            st.handles.insert(
                id,
                Handle {
                    gem: Arc::new(gem),
                    vas: Vec::new(),
                },
            );
            id
        }
    };
    put_u32(kdata, offset_of!(sys::drm_prime_handle, handle), id);
    Ok(0)
}

/// `amdgpu_gem_create_ioctl`: unknown flags or domain bits, or `ENCRYPTED` without TMZ, `EINVAL`;
/// out of memory `ENOMEM`. VRAM that does not fit falls back to GTT, as the driver retries.
fn gem_create(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use sys::drm_amdgpu_gem_create_in as In;
    let size = get_u64(kdata, offset_of!(In, bo_size));
    let alignment = get_u64(kdata, offset_of!(In, alignment));
    let domains = get_u64(kdata, offset_of!(In, domains));
    let flags = get_u64(kdata, offset_of!(In, domain_flags));
    let valid = u64::from(
        sys::AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED
            | sys::AMDGPU_GEM_CREATE_NO_CPU_ACCESS
            | sys::AMDGPU_GEM_CREATE_CPU_GTT_USWC
            | sys::AMDGPU_GEM_CREATE_VRAM_CLEARED
            | sys::AMDGPU_GEM_CREATE_VM_ALWAYS_VALID
            | sys::AMDGPU_GEM_CREATE_EXPLICIT_SYNC
            | sys::AMDGPU_GEM_CREATE_ENCRYPTED,
    ) | GEM_CREATE_DISCARDABLE;
    if flags & !valid != 0 || domains & !u64::from(sys::AMDGPU_GEM_DOMAIN_MASK) != 0 {
        return Err(Errno::EINVAL);
    }
    // gfx9 MI parts run without TMZ.
    if flags & u64::from(sys::AMDGPU_GEM_CREATE_ENCRYPTED) != 0 {
        return Err(Errno::EINVAL);
    }
    let special = u64::from(
        sys::AMDGPU_GEM_DOMAIN_GDS | sys::AMDGPU_GEM_DOMAIN_GWS | sys::AMDGPU_GEM_DOMAIN_OA,
    );
    let memory = u64::from(
        sys::AMDGPU_GEM_DOMAIN_VRAM | sys::AMDGPU_GEM_DOMAIN_GTT | sys::AMDGPU_GEM_DOMAIN_CPU,
    );
    if domains & special != 0 || domains & memory == 0 || size == 0 {
        return Err(Errno::EINVAL);
    }
    let dev_index = call.file.device;
    let dev = call.machine.devices.get(dev_index).ok_or(Errno::EINVAL)?;
    let aligned = crate::limits::align_up(size);
    let mut vram = domains & u64::from(sys::AMDGPU_GEM_DOMAIN_VRAM) != 0;
    if vram {
        let mut s = lock(&dev.state);
        match s.vram_used.checked_add(aligned) {
            Some(total) if total <= dev.vram_size => s.vram_used = total,
            _ => vram = false,
        }
    }
    if !vram {
        call.machine.reserve_system(aligned)?;
    }
    let charge = Charge {
        machine: Arc::clone(call.machine),
        device: dev_index,
        vram,
        bytes: aligned,
    };
    let domain = if vram { Domain::Vram } else { Domain::Gtt };
    let access_required = flags & u64::from(sys::AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED) != 0;
    let backing = match Backing::new(aligned, domain, dev_index, access_required) {
        Ok(b) => Arc::new(b),
        Err(e) => {
            log::warn!("kfd-sim: cannot back a {aligned}-byte GEM object: {e}");
            return Err(Errno::ENOMEM);
        }
    };
    call.machine.register_dmabuf(&backing);
    let gem = Gem {
        memory: GemMemory::Backing(backing),
        size: aligned,
        alignment,
        domains: AtomicU64::new(domains),
        flags,
        mmap_offset: dev.alloc_mmap_offset(aligned),
        _charge: Some(charge),
    };
    let mut st = lock(&call.file.state);
    let id = free_id(&st.handles, u32::MAX).ok_or(Errno::ENOSPC)?;
    st.handles.insert(
        id,
        Handle {
            gem: Arc::new(gem),
            vas: Vec::new(),
        },
    );
    kdata.fill(0);
    put_u32(
        kdata,
        offset_of!(sys::drm_amdgpu_gem_create_out, handle),
        id,
    );
    Ok(0)
}

/// `amdgpu_gem_userptr_ioctl`: address or size not page-aligned, or unknown flags, `EINVAL`;
/// writable without `REGISTER` `EACCES`; `VALIDATE` of memory that is not there `EFAULT`.
fn gem_userptr(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use sys::drm_amdgpu_gem_userptr as A;
    let addr = get_u64(kdata, offset_of!(A, addr));
    let size = get_u64(kdata, offset_of!(A, size));
    let flags = get_u32(kdata, offset_of!(A, flags));
    if (addr | size) & (PAGE_SIZE - 1) != 0 {
        return Err(Errno::EINVAL);
    }
    let known = sys::AMDGPU_GEM_USERPTR_READONLY
        | sys::AMDGPU_GEM_USERPTR_ANONONLY
        | sys::AMDGPU_GEM_USERPTR_VALIDATE
        | sys::AMDGPU_GEM_USERPTR_REGISTER;
    if flags & !known != 0 {
        return Err(Errno::EINVAL);
    }
    let readonly = flags & sys::AMDGPU_GEM_USERPTR_READONLY != 0;
    if !readonly && flags & sys::AMDGPU_GEM_USERPTR_REGISTER == 0 {
        return Err(Errno::EACCES);
    }
    if size == 0 {
        return Err(Errno::EINVAL);
    }
    if flags & sys::AMDGPU_GEM_USERPTR_VALIDATE != 0 {
        let last = addr.checked_add(size - 1).ok_or(Errno::EFAULT)?;
        check_user_range(call.client, addr, last)?;
    }
    let dev = call
        .machine
        .devices
        .get(call.file.device)
        .ok_or(Errno::EINVAL)?;
    let gem = Gem {
        memory: GemMemory::User {
            addr,
            mem: call.client.process_memory(),
            readonly,
        },
        size,
        alignment: 0,
        domains: AtomicU64::new(u64::from(sys::AMDGPU_GEM_DOMAIN_CPU)),
        flags: 0,
        mmap_offset: dev.alloc_mmap_offset(size),
        _charge: None,
    };
    let mut st = lock(&call.file.state);
    let id = free_id(&st.handles, u32::MAX).ok_or(Errno::ENOSPC)?;
    st.handles.insert(
        id,
        Handle {
            gem: Arc::new(gem),
            vas: Vec::new(),
        },
    );
    put_u32(kdata, offset_of!(A, handle), id);
    Ok(0)
}

/// `amdgpu_mode_dumb_mmap`: unknown handle `ENOENT`; userptr or `NO_CPU_ACCESS` `EPERM`.
fn gem_mmap(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    let handle = get_u32(kdata, offset_of!(sys::drm_amdgpu_gem_mmap_in, handle));
    let st = lock(&call.file.state);
    let gem = &st.handles.get(&handle).ok_or(Errno::ENOENT)?.gem;
    if matches!(gem.memory, GemMemory::User { .. })
        || gem.flags & u64::from(sys::AMDGPU_GEM_CREATE_NO_CPU_ACCESS) != 0
    {
        return Err(Errno::EPERM);
    }
    put_u64(
        kdata,
        offset_of!(sys::drm_amdgpu_gem_mmap_out, addr_ptr),
        gem.mmap_offset,
    );
    Ok(0)
}

/// `amdgpu_gem_va_ioctl` + `amdgpu_vm_bo_map` / `amdgpu_vm_bo_unmap`, checks in the driver's
/// order: VA in the reserved bottom or in the hole `EINVAL`; past the VM `EINVAL`; unknown flags
/// `EINVAL`; unknown operation `EINVAL`; unknown handle `ENOENT`; then for MAP unaligned VA,
/// offset or size, an empty or wrapping range, a range past the BO, or an overlap `EINVAL`; for
/// UNMAP no mapping of this BO at the VA `ENOENT`.
fn gem_va(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use sys::drm_amdgpu_gem_va as A;
    let handle = get_u32(kdata, offset_of!(A, handle));
    let op = get_u32(kdata, offset_of!(A, operation));
    let flags = get_u32(kdata, offset_of!(A, flags));
    let mut addr = get_u64(kdata, offset_of!(A, va_address));
    let offset = get_u64(kdata, offset_of!(A, offset_in_bo));
    let size = get_u64(kdata, offset_of!(A, map_size));
    if addr < va::RESERVED || (va::HOLE_START..va::HOLE_END).contains(&addr) {
        return Err(Errno::EINVAL);
    }
    addr &= va::HOLE_MASK;
    let vm_size = va::VM_SIZE - va::RESERVED;
    if addr.checked_add(size).is_none_or(|end| end > vm_size) {
        return Err(Errno::EINVAL);
    }
    let valid = sys::AMDGPU_VM_DELAY_UPDATE
        | sys::AMDGPU_VM_PAGE_READABLE
        | sys::AMDGPU_VM_PAGE_WRITEABLE
        | sys::AMDGPU_VM_PAGE_EXECUTABLE
        | sys::AMDGPU_VM_MTYPE_MASK
        | VM_PAGE_NOALLOC;
    let prt = sys::AMDGPU_VM_DELAY_UPDATE | sys::AMDGPU_VM_PAGE_PRT;
    if flags & !valid != 0 && flags & !prt != 0 {
        return Err(Errno::EINVAL);
    }
    if !matches!(
        op,
        sys::AMDGPU_VA_OP_MAP
            | sys::AMDGPU_VA_OP_UNMAP
            | sys::AMDGPU_VA_OP_CLEAR
            | sys::AMDGPU_VA_OP_REPLACE
    ) {
        return Err(Errno::EINVAL);
    }
    if op == sys::AMDGPU_VA_OP_CLEAR || flags & sys::AMDGPU_VM_PAGE_PRT != 0 {
        log::warn!("kfd-sim: GEM_VA CLEAR and PRT mappings are not simulated");
        return Err(Errno::EINVAL);
    }
    let mut st = lock(&call.file.state);
    let h = st.handles.get_mut(&handle).ok_or(Errno::ENOENT)?;
    match op {
        sys::AMDGPU_VA_OP_MAP => {
            if (addr | offset | size) & (PAGE_SIZE - 1) != 0 {
                return Err(Errno::EINVAL);
            }
            let end_ok = addr.checked_add(size).is_some_and(|e| e > addr)
                && offset.checked_add(size).is_some_and(|e| e > offset);
            if !end_ok || offset + size > h.gem.size || addr + size > va::VM_SIZE {
                return Err(Errno::EINVAL);
            }
            let readonly = matches!(h.gem.memory, GemMemory::User { readonly: true, .. });
            let writable = flags & sys::AMDGPU_VM_PAGE_WRITEABLE != 0 && !readonly;
            lock(&call.file.vm).map(
                addr,
                VmMapping {
                    size,
                    target: h.gem.target(offset),
                    writable,
                },
            )?;
            h.vas.push((addr, size));
            Ok(0)
        }
        sys::AMDGPU_VA_OP_UNMAP => {
            let i = h
                .vas
                .iter()
                .position(|&(v, _)| v == addr)
                .ok_or(Errno::ENOENT)?;
            let (va, size) = h.vas.swap_remove(i);
            let mut vm = lock(&call.file.vm);
            if vm
                .lookup(va)
                .is_some_and(|(s, m)| s == va && m.size == size && h.gem.is_target(&m.target))
            {
                vm.unmap(va);
            }
            Ok(0)
        }
        _ => {
            log::warn!("kfd-sim: GEM_VA REPLACE is not simulated");
            Err(Errno::EINVAL)
        }
    }
}

/// `amdgpu_gem_op_ioctl`: unknown handle `ENOENT`; GET_GEM_CREATE_INFO writes the creation
/// parameters (`EFAULT`); SET_PLACEMENT of a userptr `EPERM`, of VRAM for an import `EINVAL`;
/// unknown op `EINVAL`.
fn gem_op(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use sys::drm_amdgpu_gem_op as A;
    let handle = get_u32(kdata, offset_of!(A, handle));
    let op = get_u32(kdata, offset_of!(A, op));
    let value = get_u64(kdata, offset_of!(A, value));
    let gem = lock(&call.file.state)
        .handles
        .get(&handle)
        .map(|h| Arc::clone(&h.gem))
        .ok_or(Errno::ENOENT)?;
    match op {
        sys::AMDGPU_GEM_OP_GET_GEM_CREATE_INFO => {
            use sys::drm_amdgpu_gem_create_in as In;
            let mut out = vec![0u8; size_of::<In>()];
            put_u64(&mut out, offset_of!(In, bo_size), gem.size);
            put_u64(&mut out, offset_of!(In, alignment), gem.alignment);
            put_u64(
                &mut out,
                offset_of!(In, domains),
                gem.domains.load(Ordering::Relaxed),
            );
            put_u64(&mut out, offset_of!(In, domain_flags), gem.flags);
            copy_to_user(call.client, value, &out)?;
            Ok(0)
        }
        sys::AMDGPU_GEM_OP_SET_PLACEMENT => {
            if matches!(gem.memory, GemMemory::User { .. }) {
                return Err(Errno::EPERM);
            }
            if gem._charge.is_none() && value & u64::from(sys::AMDGPU_GEM_DOMAIN_VRAM) != 0 {
                return Err(Errno::EINVAL);
            }
            let keep = u64::from(
                sys::AMDGPU_GEM_DOMAIN_VRAM
                    | sys::AMDGPU_GEM_DOMAIN_GTT
                    | sys::AMDGPU_GEM_DOMAIN_CPU,
            );
            gem.domains.store(value & keep, Ordering::Relaxed);
            Ok(0)
        }
        _ => Err(Errno::EINVAL),
    }
}

/// `amdgpu_ctx_ioctl`: ALLOC (ids 1..4096, `ENOSPC` past them), FREE (unknown `EINVAL`),
/// QUERY_STATE and QUERY_STATE2 (unknown `EINVAL`); other ops `EINVAL`.
fn ctx(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use sys::drm_amdgpu_ctx_in as In;
    use sys::drm_amdgpu_ctx_out__bindgen_ty_2 as State;
    let op = get_u32(kdata, offset_of!(In, op));
    let id = get_u32(kdata, offset_of!(In, ctx_id));
    let mut st = lock(&call.file.state);
    match op {
        sys::AMDGPU_CTX_OP_ALLOC_CTX => {
            let id = free_id(&st.ctxs, MAX_CTX).ok_or(Errno::ENOSPC)?;
            st.ctxs.insert(id, Ctx::default());
            put_u32(kdata, 0, id);
            Ok(0)
        }
        sys::AMDGPU_CTX_OP_FREE_CTX => st.ctxs.remove(&id).map(|_| 0).ok_or(Errno::EINVAL),
        sys::AMDGPU_CTX_OP_QUERY_STATE | sys::AMDGPU_CTX_OP_QUERY_STATE2 => {
            let guilty = st.ctxs.get(&id).ok_or(Errno::EINVAL)?.guilty;
            let (flags, status) = match (op, guilty) {
                (sys::AMDGPU_CTX_OP_QUERY_STATE, g) => (
                    0,
                    if g {
                        sys::AMDGPU_CTX_UNKNOWN_RESET
                    } else {
                        sys::AMDGPU_CTX_NO_RESET
                    },
                ),
                (_, true) => (
                    sys::AMDGPU_CTX_QUERY2_FLAGS_RESET | sys::AMDGPU_CTX_QUERY2_FLAGS_GUILTY,
                    0,
                ),
                (_, false) => (0, 0),
            };
            put_u64(kdata, offset_of!(State, flags), u64::from(flags));
            put_u32(kdata, offset_of!(State, hangs), 0);
            put_u32(kdata, offset_of!(State, reset_status), status);
            Ok(0)
        }
        _ => Err(Errno::EINVAL),
    }
}

/// `amdgpu_bo_create_list_entry_array`: reads `bo_number` entries of `bo_info_size` bytes
/// (`ENOMEM` past kvmalloc, `EFAULT`), returning the handles.
fn read_bo_entries(
    call: &RenderCall<'_>,
    ptr: u64,
    number: u32,
    info_size: u32,
) -> Result<Vec<u32>, Errno> {
    use sys::drm_amdgpu_bo_list_entry as E;
    let entry = size_of::<E>() as u64;
    if u64::from(number) * entry > KVMALLOC_MAX {
        return Err(Errno::ENOMEM);
    }
    let handle_at = offset_of!(E, bo_handle);
    let stride = u64::from(info_size);
    let handle = |e: &[u8]| {
        let mut full = [0u8; size_of::<E>()];
        full[..e.len()].copy_from_slice(e);
        get_u32(&full, handle_at)
    };
    if stride <= entry {
        // The entries are contiguous (an entry shorter than ours is zero-extended, as the
        // driver's per-entry copy leaves it): one copy of them all faults where the driver's
        // copies would. An empty entry reads nothing, and every handle is then 0.
        if stride == 0 {
            return Ok(vec![0; usize::try_from(number).map_err(|_| Errno::ENOMEM)?]);
        }
        let bytes = copy_from_user(call.client, ptr, u64::from(number) * stride)?;
        let stride = usize::try_from(stride).map_err(|_| Errno::ENOMEM)?;
        return Ok(bytes.chunks_exact(stride).map(handle).collect());
    }
    // Longer entries than ours: the driver copies the head of each, one at a time.
    let mut e = [0u8; size_of::<E>()];
    (0..u64::from(number))
        .map(|i| {
            let at = ptr.checked_add(i * stride).ok_or(Errno::EFAULT)?;
            call.client.read_user(at, &mut e)?;
            Ok(handle(&e))
        })
        .collect()
}

/// `amdgpu_bo_list_ioctl`: the entries are read first (`EFAULT`); CREATE and UPDATE need every
/// handle (`ENOENT`), UPDATE an existing list (`ENOENT`); DESTROY of an unknown list is silently
/// fine; other operations `EINVAL`.
fn bo_list(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use sys::drm_amdgpu_bo_list_in as In;
    let op = get_u32(kdata, offset_of!(In, operation));
    let list = get_u32(kdata, offset_of!(In, list_handle));
    let number = get_u32(kdata, offset_of!(In, bo_number));
    let info_size = get_u32(kdata, offset_of!(In, bo_info_size));
    let ptr = get_u64(kdata, offset_of!(In, bo_info_ptr));
    let handles = read_bo_entries(call, ptr, number, info_size)?;
    let mut st = lock(&call.file.state);
    let check = |st: &FileState| {
        if handles.iter().all(|h| st.handles.contains_key(h)) {
            Ok(())
        } else {
            Err(Errno::ENOENT)
        }
    };
    let out = match op {
        sys::AMDGPU_BO_LIST_OP_CREATE => {
            check(&st)?;
            let id = free_id(&st.bo_lists, u32::MAX).ok_or(Errno::ENOSPC)?;
            st.bo_lists.insert(id, handles);
            id
        }
        sys::AMDGPU_BO_LIST_OP_UPDATE => {
            check(&st)?;
            let slot = st.bo_lists.get_mut(&list).ok_or(Errno::ENOENT)?;
            *slot = handles;
            list
        }
        sys::AMDGPU_BO_LIST_OP_DESTROY => {
            st.bo_lists.remove(&list);
            0
        }
        _ => return Err(Errno::EINVAL),
    };
    kdata.fill(0);
    put_u32(
        kdata,
        offset_of!(sys::drm_amdgpu_bo_list_out, list_handle),
        out,
    );
    Ok(0)
}

/// The DMA rings of this file's GPU: one per SDMA engine.
fn dma_rings(call: &RenderCall<'_>) -> u32 {
    call.machine
        .devices
        .get(call.file.device)
        .map_or(0, |d| d.sdma_engines.saturating_add(d.xgmi_sdma_engines))
}

/// Scheduler entities a context has for the DMA IP (`amdgpu_ctx_num_entities`): rings 0 and 1,
/// whatever the number of SDMA engines; each entity goes to the least busy engine.
const CTX_DMA_ENTITIES: u32 = 2;

/// `amdgpu_ctx_get_entity`: an IP past `AMDGPU_HW_IP_NUM`, an instance other than 0, or a ring
/// past the context's entities of the IP, `EINVAL`. Only the DMA IP has rings here (a GPU
/// without SDMA engines has none).
fn entity_check(call: &RenderCall<'_>, ip: u32, instance: u32, ring: u32) -> Result<(), Errno> {
    if ip >= sys::AMDGPU_HW_IP_NUM || instance != 0 {
        return Err(Errno::EINVAL);
    }
    if ip != sys::AMDGPU_HW_IP_DMA || ring >= CTX_DMA_ENTITIES || dma_rings(call) == 0 {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// One IB chunk of a submission.
struct IbChunk {
    va: u64,
    bytes: u32,
    ring: u32,
}

/// Reads and checks the chunks of a submission (`amdgpu_cs_pass1`).
fn cs_chunks(call: &RenderCall<'_>, chunks: u64, num: u32) -> Result<Vec<IbChunk>, Errno> {
    use sys::drm_amdgpu_cs_chunk as C;
    use sys::drm_amdgpu_cs_chunk_ib as Ib;
    if u64::from(num) * 8 > KVMALLOC_MAX {
        return Err(Errno::ENOMEM);
    }
    let ptrs =
        copy_from_user(call.client, chunks, u64::from(num) * 8).map_err(|_| Errno::EFAULT)?;
    let mut ibs: Vec<IbChunk> = Vec::new();
    for p in ptrs.chunks_exact(8) {
        let at = get_u64(p, 0);
        let c =
            copy_from_user(call.client, at, size_of::<C>() as u64).map_err(|_| Errno::EFAULT)?;
        let id = get_u32(&c, offset_of!(C, chunk_id));
        let size = u64::from(get_u32(&c, offset_of!(C, length_dw))) * 4;
        if size > KVMALLOC_MAX {
            return Err(Errno::ENOMEM);
        }
        let data = copy_from_user(call.client, get_u64(&c, offset_of!(C, chunk_data)), size)
            .map_err(|_| Errno::EFAULT)?;
        match id {
            sys::AMDGPU_CHUNK_ID_IB => {
                if size < size_of::<Ib>() as u64 {
                    return Err(Errno::EINVAL);
                }
                let ring = get_u32(&data, offset_of!(Ib, ring));
                entity_check(
                    call,
                    get_u32(&data, offset_of!(Ib, ip_type)),
                    get_u32(&data, offset_of!(Ib, ip_instance)),
                    ring,
                )?;
                // One entity per submission (no gang submit in the simulator).
                if ibs.first().is_some_and(|f| f.ring != ring) {
                    return Err(Errno::EINVAL);
                }
                ibs.push(IbChunk {
                    va: get_u64(&data, offset_of!(Ib, va_start)),
                    bytes: get_u32(&data, offset_of!(Ib, ib_bytes)),
                    ring,
                });
            }
            sys::AMDGPU_CHUNK_ID_FENCE
            | sys::AMDGPU_CHUNK_ID_DEPENDENCIES
            | sys::AMDGPU_CHUNK_ID_SYNCOBJ_IN
            | sys::AMDGPU_CHUNK_ID_SYNCOBJ_OUT
            | sys::AMDGPU_CHUNK_ID_BO_HANDLES
            | sys::AMDGPU_CHUNK_ID_SCHEDULED_DEPENDENCIES
            | sys::AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_WAIT
            | sys::AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_SIGNAL => {
                log::warn!("kfd-sim: CS chunk {id} is not simulated");
                return Err(Errno::EINVAL);
            }
            _ => return Err(Errno::EINVAL),
        }
    }
    if ibs.is_empty() {
        return Err(Errno::EINVAL);
    }
    Ok(ibs)
}

/// `amdgpu_cs_ioctl`: no chunks `EINVAL`; unknown context `EINVAL`; guilty context `ECANCELED`;
/// chunk array or chunk unreadable `EFAULT`; an IB chunk too short, an unknown chunk id, a bad
/// IP/instance/ring, or no IB `EINVAL`; unknown BO list `ENOENT`. Then the IBs run on the SDMA
/// engine and the fence's sequence number is returned; a fault fails the fence, not the ioctl.
fn cs(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use sys::drm_amdgpu_cs_in as In;
    let ctx_id = get_u32(kdata, offset_of!(In, ctx_id));
    let list = get_u32(kdata, offset_of!(In, bo_list_handle));
    let num = get_u32(kdata, offset_of!(In, num_chunks));
    let chunks = get_u64(kdata, offset_of!(In, chunks));
    if num == 0 {
        return Err(Errno::EINVAL);
    }
    let mut st = lock(&call.file.state);
    if st.ctxs.get(&ctx_id).ok_or(Errno::EINVAL)?.guilty {
        return Err(Errno::ECANCELED);
    }
    let ibs = cs_chunks(call, chunks, num)?;
    if list != 0 && !st.bo_lists.contains_key(&list) {
        return Err(Errno::ENOENT);
    }
    let ring = ibs.first().map_or(0, |ib| ib.ring);
    let running = Arc::clone(
        &st.ctxs
            .get_mut(&ctx_id)
            .ok_or(Errno::EINVAL)?
            .rings
            .entry(ring)
            .or_default()
            .running,
    );
    // The file is free while the job runs (other entities' jobs run at the same time, on other
    // engines); the entity's lock keeps its jobs in order, and its sequence number is given
    // once the job is done, so a fence that can be waited for is always signalled.
    drop(st);
    let entity_busy = lock(&running);
    let started = Instant::now();
    let engines = call.machine.devices.get(call.file.device).map(|d| &d.dma);
    let run = || {
        call.machine.engine.run(|| {
            ibs.iter().try_for_each(|ib| {
                crate::hw::sdma::execute(&call.file.vm, ib.va, ib.bytes, started)
            })
        })
    };
    let result = match engines {
        Some(e) => e.run(run),
        None => run(),
    };
    let mut st = lock(&call.file.state);
    drop(entity_busy);
    let ctx = st.ctxs.get_mut(&ctx_id).ok_or(Errno::EINVAL)?;
    let result = result.map_err(|fault| {
        log::warn!("kfd-sim: SDMA submission on context {ctx_id} failed: {fault}");
        ctx.guilty = true;
        fault.errno()
    });
    let entity = ctx.rings.entry(ring).or_default();
    let seq = entity.next;
    entity.next += 1;
    entity.done.push_back((seq, result));
    while entity.done.len() as u64 > FENCE_WINDOW {
        entity.done.pop_front();
    }
    put_u64(kdata, offset_of!(sys::drm_amdgpu_cs_out, handle), seq);
    Ok(0)
}

/// `amdgpu_cs_wait_ioctl`: unknown context or entity `EINVAL`; a sequence number not yet issued
/// `EINVAL`; a failed fence returns its error; else `status` 0 (signalled). Every fence is
/// signalled when its CS returns, so the timeout never expires.
fn wait_cs(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use sys::drm_amdgpu_wait_cs_in as In;
    let seq = get_u64(kdata, offset_of!(In, handle));
    let ip = get_u32(kdata, offset_of!(In, ip_type));
    let instance = get_u32(kdata, offset_of!(In, ip_instance));
    let ring = get_u32(kdata, offset_of!(In, ring));
    let ctx_id = get_u32(kdata, offset_of!(In, ctx_id));
    let st = lock(&call.file.state);
    let ctx = st.ctxs.get(&ctx_id).ok_or(Errno::EINVAL)?;
    entity_check(call, ip, instance, ring)?;
    let (next, result) = match ctx.rings.get(&ring) {
        Some(e) => {
            // u64::MAX asks for the last submission.
            let seq = if seq == u64::MAX { e.next - 1 } else { seq };
            let r = e.done.iter().find(|(s, _)| *s == seq).map(|(_, r)| *r);
            (e.next, r.map(|r| (seq, r)))
        }
        None => (1, None),
    };
    if seq != u64::MAX && seq >= next {
        return Err(Errno::EINVAL);
    }
    if let Some((_, Err(e))) = result {
        return Err(e);
    }
    kdata.fill(0);
    put_u64(kdata, offset_of!(sys::drm_amdgpu_wait_cs_out, status), 0);
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_of_kfd_abi_has_its_row() {
        for d in codes::CORE_TABLE.iter().chain(codes::AMDGPU_TABLE) {
            let row = core::lookup(d.nr).unwrap_or_else(|| panic!("{}", d.name));
            assert_eq!(row.cmd, d.cmd, "{}", d.name);
        }
    }
}
