//! Ioctls on GPU memory (`amdgpu_amdkfd_gpuvm.c` and their `kfd_chardev.c` entries): allocating
//! and freeing buffer objects (VRAM, GTT, userptr, doorbell, MMIO), mapping them into and out of
//! the GPU VMs, dma-buf info and import, and the VRAM still available.

use std::sync::Arc;

use kfd_abi::mmap_offset as mo;
use kfd_abi::Errno;
use kfd_sys as sys;

use super::{kmalloc_check, KfdCall};
use crate::host::lock;
use crate::hw::backing::{Backing, Domain};
use crate::hw::vm::{VmMapping, VmTarget};
use crate::limits::align_up;
use crate::limits::*;
use crate::state::process::{domain_of, vm_unmap_bo, Bo, ProcState};
use crate::uaccess::{
    check_user_range, copy_from_user, fd_from_field, get_u32, with_args, IoctlResult,
};

/// Creates a BO's memory and accounting (`amdgpu_amdkfd_gpuvm_alloc_memory_of_gpu`).
/// `check_user` validates a userptr's pages (not at CRIU restore).
pub(super) fn new_bo(
    call: &KfdCall<'_>,
    dev: usize,
    va: u64,
    size: u64,
    flags: u32,
    user_addr: u64,
    check_user: bool,
) -> Result<Bo, Errno> {
    use sys::*;
    let device = call.machine.devices.get(dev).ok_or(Errno::EINVAL)?;
    let aligned = align_up(size);
    let domain = domain_of(flags);
    let userptr = domain.is_none() && flags & KFD_IOC_ALLOC_MEM_FLAGS_USERPTR != 0;
    if domain.is_none() && !userptr {
        if flags & (KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL | KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP) == 0 {
            return Err(Errno::EINVAL);
        }
        if size > u64::from(u32::MAX) {
            return Err(Errno::EINVAL);
        }
    }
    if userptr && user_addr == 0 {
        return Err(Errno::EINVAL);
    }
    // Memory limits.
    let vram = domain == Some(Domain::Vram);
    let system = domain == Some(Domain::Gtt) || userptr;
    if vram {
        let mut s = lock(&device.state);
        let total = s.vram_used.checked_add(aligned).ok_or(Errno::ENOMEM)?;
        if total > device.vram_size {
            return Err(Errno::ENOMEM);
        }
        s.vram_used = total;
    } else if system {
        call.machine.reserve_system(aligned)?;
    }
    let unreserve = || {
        if vram {
            let mut s = lock(&device.state);
            s.vram_used = s.vram_used.saturating_sub(aligned);
        } else if system {
            call.machine.release_system(aligned);
        }
    };
    if userptr && check_user {
        let last = user_addr.saturating_add(aligned.saturating_sub(1));
        if let Err(e) = check_user_range(call.client, user_addr, last) {
            unreserve();
            return Err(e);
        }
    }
    let backing = match domain {
        Some(d) => {
            // amdgpu_amdkfd_gpuvm_alloc_memory_of_gpu: CPU_ACCESS_REQUIRED for PUBLIC VRAM only
            // (GTT gets no creation flags).
            let access_required = d == Domain::Vram && flags & KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC != 0;
            match Backing::new(aligned, d, dev, access_required) {
                Ok(b) => {
                    let b = Arc::new(b);
                    call.machine.register_dmabuf(&b);
                    Some(b)
                }
                Err(e) => {
                    log::warn!("kfd-sim: cannot back a {aligned}-byte BO: {e}");
                    unreserve();
                    return Err(Errno::ENOMEM);
                }
            }
        }
        None => None,
    };
    Ok(Bo {
        va,
        size: aligned,
        flags,
        mmap_offset: device.alloc_mmap_offset(aligned),
        user_addr: if userptr { user_addr } else { 0 },
        user_mem: userptr.then(|| call.client.process_memory()),
        backing,
        accounted: true,
        mapped: Vec::new(),
    })
}

pub(super) fn alloc_memory_of_gpu(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use sys::*;
    with_args(kdata, |a: &mut kfd_ioctl_alloc_memory_of_gpu_args| {
        let flags = a.flags;
        if a.size == 0 {
            return Err(Errno::EINVAL);
        }
        let mut st = call.process.lock();
        let first = a.va_addr >> 12;
        let last = a.va_addr.wrapping_add(a.size - 1) >> 12;
        if st
            .svm
            .iter()
            .any(|r| (r.start >> 12) <= last && first <= (r.end() - 1) >> 12)
        {
            return Err(Errno::EADDRINUSE);
        }
        let pi = st.pdd_by_user_id(a.gpu_id).ok_or(Errno::EINVAL)?;
        let dev = st.pdds.get(pi).map(|p| p.dev).ok_or(Errno::EINVAL)?;
        let large_bar = call.machine.devices.get(dev).is_some_and(|d| d.large_bar);
        if flags & KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC != 0
            && flags & KFD_IOC_ALLOC_MEM_FLAGS_VRAM != 0
            && !large_bar
        {
            return Err(Errno::EINVAL);
        }
        st.bind(pi)?;
        if flags & KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL != 0 {
            if a.size != DOORBELL_SLICE {
                return Err(Errno::EINVAL);
            }
        } else if flags & KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP != 0 && a.size != PAGE_SIZE {
            return Err(Errno::EINVAL);
        }
        let bo = new_bo(call, dev, a.va_addr, a.size, flags, a.mmap_offset, true)?;
        let pdd = st.pdds.get_mut(pi).ok_or(Errno::EINVAL)?;
        let Some(idr) = pdd.free_idr() else {
            call.process.release_bo(dev, &bo);
            return Err(Errno::EFAULT);
        };
        let offset = bo.mmap_offset;
        pdd.bos.insert(idr, bo);
        a.handle = bo_handle(a.gpu_id, idr);
        a.mmap_offset = if flags & KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP != 0 {
            mo::TYPE_MMIO | mo::gpu_id(a.gpu_id)
        } else {
            offset
        };
        Ok(0)
    })
}

pub(super) fn free_memory_of_gpu(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(kdata, |a: &mut sys::kfd_ioctl_free_memory_of_gpu_args| {
        let mut st = call.process.lock();
        if st
            .signal
            .as_ref()
            .is_some_and(|s| s.handle != 0 && s.handle == a.handle)
        {
            return Err(Errno::EPERM);
        }
        let (gpu_id, idr) = handle_parts(a.handle);
        let pi = st.pdd_by_user_id(gpu_id).ok_or(Errno::EINVAL)?;
        let pdd = st.pdds.get_mut(pi).ok_or(Errno::EINVAL)?;
        let bo = pdd.bos.get(&idr).ok_or(Errno::EINVAL)?;
        if !bo.mapped.is_empty() {
            return Err(Errno::EBUSY);
        }
        let dev = pdd.dev;
        if let Some(bo) = pdd.bos.remove(&idr) {
            call.process.release_bo(dev, &bo);
        }
        Ok(0)
    })
}

/// The VM mapping(s) of a BO.
pub(super) fn vm_target(bo: &Bo) -> VmTarget {
    if let Some(b) = &bo.backing {
        VmTarget::Memory {
            backing: Arc::clone(b),
            offset: 0,
        }
    } else if let (true, Some(mem)) = (
        bo.flags & sys::KFD_IOC_ALLOC_MEM_FLAGS_USERPTR != 0,
        bo.user_mem,
    ) {
        VmTarget::User {
            cpu_addr: bo.user_addr,
            mem,
        }
    } else if bo.flags & sys::KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL != 0 {
        VmTarget::Doorbell
    } else {
        VmTarget::Mmio
    }
}

/// `amdgpu_amdkfd_gpuvm_map_memory_to_gpu` of BO `(pi, idr)` on the VM of pdd `peer`.
pub(super) fn map_bo_on(st: &mut ProcState, pi: usize, idr: u32, peer: usize) -> Result<(), Errno> {
    let drm = st.bind(peer)?.clone();
    let peer_dev = st.pdds.get(peer).map(|p| p.dev).ok_or(Errno::EINVAL)?;
    let bo = st
        .pdds
        .get_mut(pi)
        .and_then(|p| p.bos.get_mut(&idr))
        .ok_or(Errno::ENOMEM)?;
    if bo.mapped.contains(&peer_dev) {
        return Ok(());
    }
    let writable = bo.flags & sys::KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE != 0;
    let mut vm = lock(&drm.vm);
    vm.map(
        bo.va,
        VmMapping {
            size: bo.size,
            target: vm_target(bo),
            writable,
        },
    )?;
    if bo.flags & sys::KFD_IOC_ALLOC_MEM_FLAGS_AQL_QUEUE_MEM != 0 {
        let second = VmMapping {
            size: bo.size,
            target: vm_target(bo),
            writable,
        };
        if let Err(e) = vm.map(bo.va.saturating_add(bo.size), second) {
            vm.unmap(bo.va);
            return Err(e);
        }
    }
    bo.mapped.push(peer_dev);
    Ok(())
}

/// A BO handle as userspace holds it: the user gpu id above the IDR handle.
fn bo_handle(gpu_id: u32, idr: u32) -> u64 {
    (u64::from(gpu_id) << 32) | u64::from(idr)
}

/// A BO handle's user gpu id and IDR handle.
pub(super) fn handle_parts(handle: u64) -> (u32, u32) {
    let gpu_id = u32::try_from(handle >> 32).unwrap_or(u32::MAX);
    let idr = u32::try_from(handle & 0xffff_ffff).unwrap_or(u32::MAX);
    (gpu_id, idr)
}

/// `ENOMEM` unless the pdd `pi` has a BO with IDR handle `idr` (as the driver's lookup fails).
fn bo_exists(st: &ProcState, pi: usize, idr: u32) -> Result<(), Errno> {
    if st.pdds.get(pi).is_some_and(|p| p.bos.contains_key(&idr)) {
        Ok(())
    } else {
        Err(Errno::ENOMEM)
    }
}

/// The device list of MAP/UNMAP_MEMORY_TO/FROM_GPU: `n_devices` non-zero and not below the
/// progress `n_success` (`EINVAL`), then the array of user gpu ids (`copy_from_user`).
fn device_ids(
    call: &KfdCall<'_>,
    ptr: u64,
    n_devices: u32,
    n_success: u32,
) -> Result<Vec<u32>, Errno> {
    if n_devices == 0 || n_success > n_devices {
        return Err(Errno::EINVAL);
    }
    let bytes = u64::from(n_devices) * 4;
    kmalloc_check(bytes)?;
    let ids = copy_from_user(call.client, ptr, bytes).map_err(|_| Errno::EFAULT)?;
    Ok(ids.chunks_exact(4).map(|c| get_u32(c, 0)).collect())
}

pub(super) fn map_memory_to_gpu(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(kdata, |a: &mut sys::kfd_ioctl_map_memory_to_gpu_args| {
        let ids = device_ids(call, a.device_ids_array_ptr, a.n_devices, a.n_success)?;
        let mut st = call.process.lock();
        let (gpu_id, idr) = handle_parts(a.handle);
        let pi = st.pdd_by_user_id(gpu_id).ok_or(Errno::EINVAL)?;
        st.bind(pi)?;
        bo_exists(&st, pi, idr)?;
        for (i, &id) in ids.iter().enumerate().skip(a.n_success as usize) {
            let peer = st.pdd_by_user_id(id).ok_or(Errno::EINVAL)?;
            map_bo_on(&mut st, pi, idr, peer)?;
            a.n_success = u32::try_from(i + 1).unwrap_or(u32::MAX);
        }
        Ok(0)
    })
}

pub(super) fn unmap_memory_from_gpu(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(
        kdata,
        |a: &mut sys::kfd_ioctl_unmap_memory_from_gpu_args| {
            let ids = device_ids(call, a.device_ids_array_ptr, a.n_devices, a.n_success)?;
            let mut st = call.process.lock();
            let (gpu_id, idr) = handle_parts(a.handle);
            let pi = st.pdd_by_user_id(gpu_id).ok_or(Errno::EINVAL)?;
            bo_exists(&st, pi, idr)?;
            for (i, &id) in ids.iter().enumerate().skip(a.n_success as usize) {
                let peer = st.pdd_by_user_id(id).ok_or(Errno::EINVAL)?;
                let peer_dev = st.pdds.get(peer).map(|p| p.dev).ok_or(Errno::EINVAL)?;
                let pdds = &mut st.pdds;
                let Some(bo) = pdds.get_mut(pi).and_then(|p| p.bos.get_mut(&idr)) else {
                    return Err(Errno::ENOMEM);
                };
                let Some(pos) = bo.mapped.iter().position(|&d| d == peer_dev) else {
                    return Err(Errno::EINVAL);
                };
                bo.mapped.remove(pos);
                if let Some(bo) = pdds.get(pi).and_then(|p| p.bos.get(&idr)) {
                    vm_unmap_bo(pdds, bo, peer_dev);
                }
                a.n_success = u32::try_from(i + 1).unwrap_or(u32::MAX);
            }
            Ok(0)
        },
    )
}

pub(super) fn get_dmabuf_info(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(kdata, |a: &mut sys::kfd_ioctl_get_dmabuf_info_args| {
        if call.machine.devices.is_empty() {
            return Err(Errno::EINVAL);
        }
        if a.metadata_ptr != 0 {
            kmalloc_check(u64::from(a.metadata_size))?;
        }
        let key = call.client.resolve_fd(fd_from_field(a.dmabuf_fd))?;
        let b = call.machine.dmabuf(key).ok_or(Errno::EINVAL)?;
        let dev = call.machine.devices.get(b.device).ok_or(Errno::EINVAL)?;
        a.size = b.size;
        a.gpu_id = dev.gpu_id;
        a.flags = match b.domain {
            Domain::Vram => sys::KFD_IOC_ALLOC_MEM_FLAGS_VRAM,
            Domain::Gtt => sys::KFD_IOC_ALLOC_MEM_FLAGS_GTT,
        };
        // amdgpu_amdkfd_get_dmabuf_info: PUBLIC only for a BO created CPU_ACCESS_REQUIRED.
        if b.cpu_access_required {
            a.flags |= sys::KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC;
        }
        // No metadata is ever attached: nothing to copy.
        a.metadata_size = 0;
        Ok(0)
    })
}

pub(super) fn import_dmabuf(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(kdata, |a: &mut sys::kfd_ioctl_import_dmabuf_args| {
        // dma_buf_get first: a file that is no dma-buf at all is EINVAL before the GPU is looked
        // up (ours are memfds the simulator exported; a real one is another exporter's).
        let raw = fd_from_field(a.dmabuf_fd);
        let key = call.client.resolve_fd(raw)?;
        let ours = call.machine.dmabuf(key);
        if ours.is_none() && !call.client.is_dmabuf(raw) {
            return Err(Errno::EINVAL);
        }
        let mut st = call.process.lock();
        let pi = st.pdd_by_user_id(a.gpu_id).ok_or(Errno::EINVAL)?;
        st.bind(pi)?;
        let pdd = st.pdds.get_mut(pi).ok_or(Errno::EINVAL)?;
        // amdgpu_amdkfd_gpuvm_import_dmabuf: another exporter's dma-buf, or another GPU's BO.
        let b = ours.ok_or(Errno::EINVAL)?;
        if b.device != pdd.dev {
            return Err(Errno::EINVAL);
        }
        let domain = match b.domain {
            Domain::Vram => sys::KFD_IOC_ALLOC_MEM_FLAGS_VRAM,
            Domain::Gtt => sys::KFD_IOC_ALLOC_MEM_FLAGS_GTT,
        };
        let dev = call.machine.devices.get(pdd.dev).ok_or(Errno::EINVAL)?;
        let bo = Bo {
            va: a.va_addr,
            size: b.size,
            flags: domain
                | sys::KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE
                | sys::KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE,
            mmap_offset: dev.alloc_mmap_offset(b.size),
            user_addr: 0,
            user_mem: None,
            backing: Some(b),
            accounted: false,
            mapped: Vec::new(),
        };
        let idr = pdd.free_idr().ok_or(Errno::EFAULT)?;
        pdd.bos.insert(idr, bo);
        a.handle = bo_handle(a.gpu_id, idr);
        Ok(0)
    })
}

/// `kfd_ioctl_export_dmabuf` (KFD 1.12; the 6.18 personality): the handle's GPU is looked up by
/// its id as the machine knows it (`kfd_device_by_id`, an actual id) and must be one of the
/// process's (`EINVAL`), the handle one of its BOs there (`EINVAL`); a userptr BO `EPERM`
/// (`amdgpu_gem_prime_export`); a doorbell or MMIO BO, which the simulator backs with no
/// memory of its own, `EINVAL`. The new fd takes `flags` (`O_CLOEXEC`) and is writable if the BO
/// is.
pub(super) fn export_dmabuf(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use kfd_abi::uapi618::kfd_ioctl_export_dmabuf_args as A;
    let handle = crate::uaccess::get_u64(kdata, std::mem::offset_of!(A, handle));
    let flags = crate::uaccess::get_u32(kdata, std::mem::offset_of!(A, flags));
    let (gpu_id, idr) = handle_parts(handle);
    let dev = call.machine.device_by_gpu_id(gpu_id).ok_or(Errno::EINVAL)?;
    let (backing, writable) = {
        let st = call.process.lock();
        let pdd = st.pdds.iter().find(|p| p.dev == dev).ok_or(Errno::EINVAL)?;
        let bo = pdd.bos.get(&idr).ok_or(Errno::EINVAL)?;
        if bo.user_mem.is_some() {
            return Err(Errno::EPERM);
        }
        let b = bo.backing.clone().ok_or(Errno::EINVAL)?;
        (b, bo.flags & sys::KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE != 0)
    };
    let cloexec = flags & libc::O_CLOEXEC.unsigned_abs() != 0;
    let fd = backing
        .export(writable)
        .and_then(|fd| {
            crate::host::set_cloexec(std::os::fd::AsFd::as_fd(&fd), cloexec).map(|()| fd)
        })
        .map_err(|e| Errno::from_io(&e))?;
    let slot = crate::client::FdSlot::ArgField(std::mem::offset_of!(A, dmabuf_fd));
    let raw = call.client.install_fd_at(fd, slot)?;
    crate::uaccess::put_u32(
        kdata,
        std::mem::offset_of!(A, dmabuf_fd),
        raw.unsigned_abs(),
    );
    Ok(0)
}

pub(super) fn available_memory(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(kdata, |a: &mut sys::kfd_ioctl_get_available_memory_args| {
        let st = call.process.lock();
        let pi = st.pdd_by_user_id(a.gpu_id).ok_or(Errno::EINVAL)?;
        let dev = st
            .pdds
            .get(pi)
            .and_then(|p| call.machine.devices.get(p.dev))
            .ok_or(Errno::EINVAL)?;
        let used = lock(&dev.state).vram_used;
        a.available = dev.vram_size.saturating_sub(used) & !(VRAM_AVAILABILITY_ALIGN - 1);
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    use std::os::fd::OwnedFd;
    use std::sync::Arc;

    use super::*;
    use crate::client::Client;
    use crate::host::{FileKey, Pod};
    use crate::state::machine::MachineInner;

    /// A caller whose fd 5 is a dma-buf of another exporter (or no dma-buf at all).
    struct Caller {
        dmabuf: bool,
    }

    impl Client for Caller {
        fn pid(&self) -> u32 {
            7
        }
        fn can_checkpoint_restore(&self) -> bool {
            false
        }
        fn is_ptrace_parent_of(&self, _pid: u32) -> bool {
            false
        }
        fn read_user(&self, _addr: u64, _buf: &mut [u8]) -> Result<(), Errno> {
            Err(Errno::EFAULT)
        }
        fn write_user(&self, _addr: u64, _buf: &[u8]) -> Result<(), Errno> {
            Err(Errno::EFAULT)
        }
        fn resolve_fd(&self, raw: i32) -> Result<FileKey, Errno> {
            if raw == 5 {
                Ok(FileKey { dev: 99, ino: 5 })
            } else {
                Err(Errno::EBADF)
            }
        }
        fn install_fd(&self, _fd: OwnedFd) -> Result<i32, Errno> {
            Err(Errno::EBADF)
        }
        fn uninstall_fd(&self, _raw: i32) {}
        fn is_dmabuf(&self, _raw: i32) -> bool {
            self.dmabuf
        }
    }

    fn import(dmabuf: bool, gpu_id: u32, fd: i32) -> IoctlResult {
        let preset = crate::Preset::by_name("mi210x2").unwrap();
        let m = Arc::new(MachineInner::new(preset.to_topology().unwrap()).unwrap());
        let p = m.new_kfd_process(7, &|_| true).unwrap();
        let gpu = if gpu_id == 0 {
            m.devices[0].gpu_id
        } else {
            gpu_id
        };
        let client = Caller { dmabuf };
        let call = KfdCall {
            machine: &m,
            process: &p,
            client: &client,
        };
        let a = sys::kfd_ioctl_import_dmabuf_args {
            va_addr: 1 << 40,
            handle: 0,
            gpu_id: gpu,
            dmabuf_fd: u32::try_from(fd).unwrap_or(u32::MAX),
        };
        let mut kdata = vec![0u8; std::mem::size_of_val(&a)];
        assert!(a.write_to(&mut kdata));
        import_dmabuf(&call, &mut kdata)
    }

    /// 6.1's order: `dma_buf_get` (no such fd EBADF, no dma-buf EINVAL), the GPU (EINVAL), its
    /// VM (ENODEV), and only then whether the dma-buf is amdgpu's (EINVAL).
    #[test]
    fn a_foreign_dmabuf_is_refused_after_the_gpu_and_vm_checks() {
        assert_eq!(import(true, 0, 6), Err(Errno::EBADF));
        assert_eq!(import(false, 0, 5), Err(Errno::EINVAL), "not a dma-buf");
        assert_eq!(import(true, 0x1234, 5), Err(Errno::EINVAL), "unknown GPU");
        assert_eq!(import(true, 0, 5), Err(Errno::ENODEV), "no VM acquired yet");
    }
}
