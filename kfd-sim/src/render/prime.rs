//! PRIME (`drm_prime.c`, `amdgpu_dma_buf.c`): a GEM object exported as a dma-buf fd, and a
//! dma-buf of this machine imported as a GEM handle.

use std::mem::offset_of;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use kfd_abi::Errno;
use kfd_sys as sys;

use super::RenderCall;
use crate::host::lock;
use crate::hw::backing::Domain;
use crate::limits::PAGE_SIZE;
use crate::state::render_file::{Gem, GemMemory};
use crate::uaccess::{fd_from_field, get_u32, put_u32, IoctlResult};

/// `AMDGPU_GEM_CREATE_VRAM_WIPE_ON_RELEASE`, which KFD sets on its VRAM BOs.
const GEM_CREATE_VRAM_WIPE_ON_RELEASE: u64 = 1 << 9;

/// `drm_prime_handle_to_fd_ioctl` + `amdgpu_gem_prime_export`: flags other than `DRM_CLOEXEC |
/// DRM_RDWR` `EINVAL`; unknown handle `ENOENT`; userptr or VM-always-valid BO `EPERM`.
pub(super) fn prime_handle_to_fd(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
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
    gem.exported.store(true, Ordering::Relaxed);
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
/// imported into this file gives its existing handle; a dma-buf of this device's memory gives a
/// new handle of the same object (its size, domains, flags and fake offset), one of another
/// device's an attachment in GTT.
pub(super) fn prime_fd_to_handle(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
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
            let dev = call
                .machine
                .devices
                .get(call.file.device)
                .ok_or(Errno::EINVAL)?;
            let gem = if b.device == call.file.device {
                // amdgpu_gem_prime_import: a dma-buf of this device's own memory is the same
                // object, in every file that imports it.
                match call.machine.gem(b.key()) {
                    Some(g) => g,
                    None => {
                        // Memory of this device without a GEM object here yet: a KFD BO, which
                        // amdgpu_amdkfd_gpuvm_alloc_memory_of_gpu created with these
                        // parameters.
                        let (domain, flags) = match b.domain {
                            Domain::Vram => (
                                sys::AMDGPU_GEM_DOMAIN_VRAM,
                                GEM_CREATE_VRAM_WIPE_ON_RELEASE
                                    | if b.cpu_access_required {
                                        u64::from(sys::AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED)
                                    } else {
                                        0
                                    },
                            ),
                            Domain::Gtt => (sys::AMDGPU_GEM_DOMAIN_GTT, 0),
                        };
                        let g = Arc::new(Gem {
                            size: b.size,
                            alignment: PAGE_SIZE,
                            domains: AtomicU64::new(u64::from(domain)),
                            flags,
                            mmap_offset: dev.alloc_mmap_offset(b.size),
                            memory: GemMemory::Backing(Arc::clone(&b)),
                            _charge: None,
                            foreign: false,
                            exported: AtomicBool::new(true),
                        });
                        call.machine.register_gem(b.key(), &g);
                        g
                    }
                }
            } else {
                // Another device's memory is attached through the GART, as amdgpu imports it.
                Arc::new(Gem {
                    size: b.size,
                    alignment: PAGE_SIZE,
                    domains: AtomicU64::new(u64::from(sys::AMDGPU_GEM_DOMAIN_GTT)),
                    flags: 0,
                    mmap_offset: dev.alloc_mmap_offset(b.size),
                    memory: GemMemory::Backing(b),
                    _charge: None,
                    foreign: true,
                    exported: AtomicBool::new(true),
                })
            };
            gem.exported.store(true, Ordering::Relaxed);
            st.add_object(gem)?
        }
    };
    put_u32(kdata, offset_of!(sys::drm_prime_handle, handle), id);
    Ok(0)
}
