//! Ioctls on the KFD process and its per-device data (`kfd_chardev.c`, `kfd_process.c`): the
//! interface version, the GPU apertures, memory policy, clock counters, tile config, scratch
//! backing and trap handler addresses, `ACQUIRE_VM` (the compute VM taken from a render node),
//! the XNACK mode and (KFD 1.13) the runtime's enable.

use std::sync::Arc;

use kfd_abi::Errno;
use kfd_sys as sys;

use super::{kmalloc_check, KfdCall};
use crate::host::lock;
use crate::host::{clock_ns, FileKey, Pod};
use crate::limits::*;
use crate::state::machine::{FileKind, MachineInner};
use crate::state::process::{DrmBinding, ProcState};
use crate::uaccess::{copy_to_user, fd_from_field, with_args, IoctlResult};

pub(super) fn get_version(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    let v = call.machine.kfd_version();
    with_args(kdata, |a: &mut sys::kfd_ioctl_get_version_args| {
        a.major_version = v.major;
        a.minor_version = v.minor;
        Ok(0)
    })
}

pub(super) fn set_memory_policy(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(kdata, |a: &mut sys::kfd_ioctl_set_memory_policy_args| {
        let ok = |p| {
            p == sys::KFD_IOC_CACHE_POLICY_COHERENT || p == sys::KFD_IOC_CACHE_POLICY_NONCOHERENT
        };
        if !ok(a.default_policy) || !ok(a.alternate_policy) {
            return Err(Errno::EINVAL);
        }
        let st = call.process.lock();
        let pi = st.pdd_by_user_id(a.gpu_id).ok_or(Errno::EINVAL)?;
        st.bind(pi).map_err(|_| Errno::ESRCH)?;
        Ok(0)
    })
}

pub(super) fn get_clock_counters(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(kdata, |a: &mut sys::kfd_ioctl_get_clock_counters_args| {
        let raw = clock_ns(libc::CLOCK_MONOTONIC_RAW);
        let known = call.process.lock().pdd_by_user_id(a.gpu_id).is_some();
        // The gfx9 GPU timestamp counter runs at 100 MHz.
        a.gpu_clock_counter = if known { raw / 10 } else { 0 };
        a.cpu_clock_counter = raw;
        a.system_clock_counter = clock_ns(libc::CLOCK_BOOTTIME);
        a.system_clock_freq = 1_000_000_000;
        Ok(0)
    })
}

fn apertures_of(gpu_id: u32) -> sys::kfd_process_device_apertures {
    sys::kfd_process_device_apertures {
        lds_base: LDS_BASE,
        lds_limit: LDS_BASE | 0xffff_ffff,
        scratch_base: SCRATCH_BASE,
        scratch_limit: SCRATCH_BASE | 0xffff_ffff,
        gpuvm_base: GPUVM_BASE,
        gpuvm_limit: GPUVM_LIMIT,
        gpu_id,
        pad: 0,
    }
}

/// The id the apertures report for a pdd: the device's own (`pdd->dev->id`), also after a
/// restore onto other GPUs, where every other ioctl takes the id the process knew before.
fn actual_gpu_id(call: &KfdCall<'_>, dev: usize) -> u32 {
    call.machine.devices.get(dev).map_or(0, |d| d.gpu_id)
}

pub(super) fn get_process_apertures(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(
        kdata,
        |a: &mut sys::kfd_ioctl_get_process_apertures_args| {
            let st = call.process.lock();
            a.num_of_nodes = 0;
            for (slot, pdd) in a.process_apertures.iter_mut().zip(&st.pdds) {
                *slot = apertures_of(actual_gpu_id(call, pdd.dev));
                a.num_of_nodes += 1;
            }
            Ok(0)
        },
    )
}

pub(super) fn get_process_apertures_new(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(
        kdata,
        |a: &mut sys::kfd_ioctl_get_process_apertures_new_args| {
            if a.num_of_nodes == 0 {
                a.num_of_nodes = u32::try_from(call.process.lock().pdds.len()).unwrap_or(u32::MAX);
                return Ok(0);
            }
            const APU: usize = std::mem::size_of::<sys::kfd_process_device_apertures>();
            const AP: u64 = APU as u64;
            kmalloc_check(AP * u64::from(a.num_of_nodes))?;
            let mut bytes = Vec::new();
            let st = call.process.lock();
            let mut n = 0u32;
            for pdd in st.pdds.iter().take(a.num_of_nodes as usize) {
                let mut rec = [0u8; APU];
                apertures_of(actual_gpu_id(call, pdd.dev)).write_to(&mut rec);
                bytes.extend_from_slice(&rec);
                n += 1;
            }
            drop(st);
            a.num_of_nodes = n;
            copy_to_user(call.client, a.kfd_process_device_apertures_ptr, &bytes)?;
            Ok(0)
        },
    )
}

pub(super) fn set_scratch_backing_va(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(
        kdata,
        |a: &mut sys::kfd_ioctl_set_scratch_backing_va_args| {
            let mut st = call.process.lock();
            let pi = st.pdd_by_user_id(a.gpu_id).ok_or(Errno::EINVAL)?;
            st.bind(pi)?;
            if let Some(p) = st.pdds.get_mut(pi) {
                p.scratch_va = a.va_addr;
            }
            Ok(0)
        },
    )
}

/// `GB_ADDR_CONFIG` of the gfx9 parts.
fn gb_addr_config(gfx: u32) -> u32 {
    match gfx {
        90006 => 0x2a11_4042,
        90008 => 0x2a11_4042,
        _ => 0x2a11_0042,
    }
}

pub(super) fn get_tile_config(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(kdata, |a: &mut sys::kfd_ioctl_get_tile_config_args| {
        let dev = {
            let st = call.process.lock();
            let pi = st.pdd_by_user_id(a.gpu_id).ok_or(Errno::EINVAL)?;
            st.pdds.get(pi).map(|p| p.dev).ok_or(Errno::EINVAL)?
        };
        let gfx = call
            .machine
            .devices
            .get(dev)
            .map_or(0, |d| d.gfx_target_version);
        a.gb_addr_config = gb_addr_config(gfx);
        a.num_banks = 0;
        a.num_ranks = 0;
        // gfx9 keeps 32 tile modes and 16 macro tile modes, all zero.
        a.num_tile_configs = a.num_tile_configs.min(32);
        if copy_to_user(
            call.client,
            a.tile_config_ptr,
            &vec![0u8; a.num_tile_configs as usize * 4],
        )
        .is_err()
        {
            a.num_tile_configs = 0;
            return Err(Errno::EFAULT);
        }
        a.num_macro_tile_configs = a.num_macro_tile_configs.min(16);
        let macro_bytes = vec![0u8; a.num_macro_tile_configs as usize * 4];
        if copy_to_user(call.client, a.macro_tile_config_ptr, &macro_bytes).is_err() {
            a.num_macro_tile_configs = 0;
            return Err(Errno::EFAULT);
        }
        Ok(0)
    })
}

pub(super) fn set_trap_handler(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(kdata, |a: &mut sys::kfd_ioctl_set_trap_handler_args| {
        let mut st = call.process.lock();
        let pi = st.pdd_by_user_id(a.gpu_id).ok_or(Errno::EINVAL)?;
        st.bind(pi).map_err(|_| Errno::ESRCH)?;
        if let Some(p) = st.pdds.get_mut(pi) {
            p.trap = (a.tba_addr, a.tma_addr);
        }
        Ok(0)
    })
}

pub(super) fn dbg_deprecated(_call: &KfdCall<'_>, _k: &mut [u8]) -> IoctlResult {
    Err(Errno::EPERM)
}

pub(super) fn acquire_vm(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(kdata, |a: &mut sys::kfd_ioctl_acquire_vm_args| {
        let key = call
            .client
            .resolve_fd(fd_from_field(a.drm_fd))
            .map_err(|_| Errno::EINVAL)?;
        let mut st = call.process.lock();
        let pi = st.pdd_by_user_id(a.gpu_id).ok_or(Errno::EINVAL)?;
        bind_vm(call, &mut st, pi, key, call.process.pid)
    })
}

/// `kfd_process_device_init_vm`: adopts the render file's VM as the pdd's compute VM.
///
/// As in 6.1 (`amdgpu_amdkfd_gpuvm_acquire_process_vm`), the file must be an amdgpu render file
/// whose VM is not a compute VM yet (`EINVAL` otherwise, also when this process took it for
/// another GPU); nothing checks that it belongs to the pdd's GPU, so another GPU's render node
/// is accepted and its VM becomes this GPU's compute VM (with a warning: on hardware the page
/// tables would then live on the wrong device; the simulator's VMs are plain address maps).
pub(super) fn bind_vm(
    call: &KfdCall<'_>,
    st: &mut ProcState,
    pi: usize,
    key: FileKey,
    pid: u32,
) -> IoctlResult {
    let pdd = st.pdds.get_mut(pi).ok_or(Errno::EINVAL)?;
    if let Some(drm) = &pdd.drm {
        return if drm.key == key {
            Ok(0)
        } else {
            Err(Errno::EBUSY)
        };
    }
    let file = call.machine.file(key).ok_or(Errno::EINVAL)?;
    let FileKind::Render(render) = &file.kind else {
        return Err(Errno::EINVAL);
    };
    {
        let mut vm = lock(&render.vm);
        if vm.owner.is_some() {
            return Err(Errno::EINVAL);
        }
        vm.owner = Some(pid);
    }
    if render.device != pdd.dev {
        let id = |d: usize| call.machine.devices.get(d).map_or(0, |d| d.gpu_id);
        let (mine, theirs) = (id(pdd.dev), id(render.device));
        log::warn!(
            "kfd-sim: pid {pid}: the VM of GPU {mine:#x} is taken from a render node of GPU \
             {theirs:#x}: accepted, as 6.1 checks only that the file is amdgpu's"
        );
    }
    pdd.drm = Some(DrmBinding {
        key,
        vm: Arc::clone(&render.vm),
    });
    Ok(0)
}

/// XNACK can be enabled per process only if every GPU supports it (gfx90a).
pub(super) fn xnack_supported(m: &MachineInner) -> bool {
    m.devices.iter().all(|d| d.gfx_target_version == 90010)
}

pub(super) fn set_xnack_mode(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    with_args(kdata, |a: &mut sys::kfd_ioctl_set_xnack_mode_args| {
        let mut st = call.process.lock();
        if a.xnack_enabled >= 0 {
            if !st.queues.is_empty() {
                return Err(Errno::EBUSY);
            }
            if a.xnack_enabled != 0 && !xnack_supported(call.machine) {
                return Err(Errno::EPERM);
            }
            st.xnack = a.xnack_enabled != 0;
        } else {
            a.xnack_enabled = i32::from(st.xnack);
        }
        Ok(0)
    })
}

/// `kfd_ioctl_runtime_enable` (KFD 1.13; the 6.18 and 7.2 personalities), without a debugger
/// attached: enabling a runtime that is enabled `EBUSY`, enabling it while any GPU of the process
/// has queues `EEXIST`, otherwise it records `r_debug` and the trap temporaries' setup. Disabling
/// always succeeds and forgets them. `capabilities_mask` goes back as it came.
pub(super) fn runtime_enable(call: &KfdCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use kfd_abi::uapi618::{
        kfd_ioctl_runtime_enable_args as A, KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK as ENABLE,
        KFD_RUNTIME_ENABLE_MODE_TTMP_SAVE_MASK as TTMP,
    };
    use std::mem::offset_of;
    let r_debug = crate::uaccess::get_u64(kdata, offset_of!(A, r_debug));
    let mode = crate::uaccess::get_u32(kdata, offset_of!(A, mode_mask));
    let mut st = call.process.lock();
    if mode & ENABLE == 0 {
        st.runtime = None;
        return Ok(0);
    }
    if st.runtime.is_some() {
        return Err(Errno::EBUSY);
    }
    if st.pdds.iter().any(|p| p.queue_count > 0) {
        return Err(Errno::EEXIST);
    }
    st.runtime = Some(crate::state::process::Runtime {
        r_debug,
        ttmp_setup: mode & TTMP != 0,
    });
    Ok(0)
}
