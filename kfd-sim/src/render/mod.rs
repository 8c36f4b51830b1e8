//! The amdgpu render node (`/dev/dri/renderD<minor>`): its open files, the per-file GPU VM, and
//! the DRM ioctls that move GPU memory for checkpoint/restore.
//!
//! Each open render file owns a GPU virtual address space ([`Vm`](crate::hw::vm::Vm)). `ACQUIRE_VM` on `/dev/kfd`
//! adopts that VM as the process's compute VM on the GPU, so `MAP_MEMORY_TO_GPU` inserts KFD BOs
//! into it and command submission on the file sees them, as on hardware.
//!
//! The parts are amdgpu's: [`core`] (the DRM core's tables, `VERSION`, `GET_CAP`), [`vm`] (the
//! VM layout, `GEM_VA`), [`gem`], [`prime`], [`ctx`], [`bo_list`], [`cs`] (with `WAIT_CS`),
//! [`info`] (`AMDGPU_INFO`), [`mmap`]; what an open file keeps (`amdgpu_fpriv`) is in the state
//! layer, [`render_file`](crate::state::render_file).
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

mod bo_list;
mod core;
mod cs;
mod ctx;
mod gem;
mod info;
pub(crate) mod mmap;
mod prime;
mod vm;

use std::sync::Arc;

use kfd_abi::ioctl::{self, drm as codes};
use kfd_abi::Errno;

use crate::client::Client;
use crate::host::lock;
use crate::state::machine::MachineInner;
use crate::state::render_file::RenderFile;
use crate::uaccess::{copy_in_kdata, copy_to_user, IoctlResult};

/// What one render-node ioctl sees: the machine, the open file, and the caller.
struct RenderCall<'a> {
    machine: &'a Arc<MachineInner>,
    file: &'a RenderFile,
    client: &'a dyn Client,
}

type Handler = fn(&RenderCall<'_>, &mut [u8]) -> IoctlResult;

/// `drm_ioctl` on a render-node file: one call made by `client`.
pub(crate) fn dispatch(
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
    let Some(row) = core::lookup(nr, machine.kernel()) else {
        let code = crate::uaccess::spell_request(cmd);
        machine.log_once(
            &format!("render node {code}"),
            &format!(
                "render node {code}: not in {}'s DRM tables, EINVAL as it answers",
                machine.kernel()
            ),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_of_kfd_abi_has_its_row() {
        for d in codes::CORE_TABLE.iter().chain(codes::AMDGPU_TABLE) {
            let row = core::lookup(d.nr, crate::state::machine::Kernel::Linux6_1)
                .unwrap_or_else(|| panic!("{}", d.name));
            assert_eq!(row.cmd, d.cmd, "{}", d.name);
        }
        let l618 = &kfd_abi::ioctl::linux618::drm::CORE_TABLE;
        for d in l618
            .iter()
            .chain(kfd_abi::ioctl::linux618::drm::AMDGPU_TABLE)
        {
            let row = core::lookup(d.nr, crate::state::machine::Kernel::Linux6_18)
                .unwrap_or_else(|| panic!("{}", d.name));
            assert_eq!(row.cmd, d.cmd, "{}", d.name);
        }
    }
}
