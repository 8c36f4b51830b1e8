//! `/dev/kfd`: the ioctl table and its dispatcher, written like the driver's (`kfd_chardev.c`):
//! one table keyed on `_IOC_NR`, the kernel's size rules, the caller and capability checks, then
//! one function per ioctl, named after it, with the driver's checks in the driver's order.
//!
//! The handlers live with their subsystem, as the driver's do:
//!
//! - [`apertures`]: the version, apertures, memory policy, clock counters, tile config, scratch
//!   and trap handler, `ACQUIRE_VM` and the XNACK mode (`kfd_chardev.c`, `kfd_process.c`);
//! - [`memory`]: allocation, freeing, mapping and unmapping of BOs, dma-buf info and import,
//!   available memory (`amdgpu_amdkfd_gpuvm.c`);
//! - [`queues`]: user queues, CU masks, wave state, GWS (`kfd_process_queue_manager.c`);
//! - [`events`]: events and waiting on them (`kfd_events.c`), SMI event fds;
//! - [`svm`]: shared virtual memory ranges and their attributes (`kfd_svm.c`);
//! - [`criu`]: checkpoint and restore, `CRIU_OP` (`kfd_chardev.c`);
//! - [`mmap`]: what the mmap offsets of `/dev/kfd` map (`kfd_mmap`);
//! - [`runlist`]: what the driver hands the hardware scheduler, and the interrupt handler.
//!
//! What the driver keeps is in the state layer: [`process`](crate::state::process) (the KFD
//! process, its pdds and BOs), [`queue`](crate::state::queue), [`event`](crate::state::event),
//! [`svm_range`](crate::state::svm_range). The render node is
//! [`render`](crate::render), the GPU's engines are [`hw`](crate::hw); every user access goes
//! through [`uaccess`](crate::uaccess).
//!
//! Client-controlled values are never indexed or unwrapped: every lookup is checked and every
//! user access goes through the [`Client`], so no input can panic the simulator.

mod apertures;
pub mod criu;
mod events;
mod memory;
pub(crate) mod mmap;
mod queues;
mod runlist;
pub(crate) mod svm;

use std::sync::Arc;

use kfd_abi::ioctl::{self, kfd};
use kfd_abi::Errno;

use crate::client::Client;
use crate::limits::KMALLOC_MAX;
use crate::state::machine::MachineInner;
use crate::state::process::KfdProcess;
use crate::uaccess::{copy_in_kdata, copy_to_user, IoctlResult};

/// What one `/dev/kfd` ioctl sees: the machine, the file's KFD process, and the caller.
pub(crate) struct KfdCall<'a> {
    /// The simulated machine.
    pub machine: &'a MachineInner,
    /// The KFD process of the file the ioctl is issued on.
    pub process: &'a KfdProcess,
    /// The calling task (its memory and fd table).
    pub client: &'a dyn Client,
}

type Handler = fn(&KfdCall<'_>, &mut [u8]) -> IoctlResult;

/// The dispatch table, indexed by `_IOC_NR - 1`, in the order of `kfd_abi::ioctl::kfd::TABLE`.
const HANDLERS: [Handler; 35] = [
    apertures::get_version,
    queues::create_queue,
    queues::destroy_queue,
    apertures::set_memory_policy,
    apertures::get_clock_counters,
    apertures::get_process_apertures,
    queues::update_queue,
    events::create_event,
    events::destroy_event,
    events::set_event,
    events::reset_event,
    events::wait_events,
    apertures::dbg_deprecated,
    apertures::dbg_deprecated,
    apertures::dbg_deprecated,
    apertures::dbg_deprecated,
    apertures::set_scratch_backing_va,
    apertures::get_tile_config,
    apertures::set_trap_handler,
    apertures::get_process_apertures_new,
    apertures::acquire_vm,
    memory::alloc_memory_of_gpu,
    memory::free_memory_of_gpu,
    memory::map_memory_to_gpu,
    memory::unmap_memory_from_gpu,
    queues::set_cu_mask,
    queues::get_queue_wave_state,
    memory::get_dmabuf_info,
    memory::import_dmabuf,
    queues::alloc_queue_gws,
    events::smi_events,
    svm::svm,
    apertures::set_xnack_mode,
    criu::criu_op,
    memory::available_memory,
];

/// The names of request numbers outside KFD 1.11 that clients issue: later upstream ioctls and
/// the ROCm DKMS driver's own range from 0x80 (`AMDKFD_COMMAND_START_2`).
fn foreign_name(nr: u8) -> Option<&'static str> {
    Some(match nr {
        0x24 => "AMDKFD_IOC_EXPORT_DMABUF (KFD 1.12)",
        0x25 => "AMDKFD_IOC_RUNTIME_ENABLE (KFD 1.13)",
        0x26 => "AMDKFD_IOC_DBG_TRAP (KFD 1.13)",
        0x27 => "AMDKFD_IOC_CREATE_PROCESS (KFD 1.19)",
        0x28 => "AMDKFD_IOC_PROFILER (KFD 1.23)",
        0x80 => "AMDKFD_IOC_IPC_IMPORT_HANDLE (ROCm DKMS)",
        0x81 => "AMDKFD_IOC_IPC_EXPORT_HANDLE (ROCm DKMS)",
        0x82 => "AMDKFD_IOC_DBG_TRAP (ROCm DKMS, later DBG_TRAP_DEPRECATED)",
        0x83 => "AMDKFD_IOC_CROSS_MEMORY_COPY (ROCm DKMS)",
        0x84 => "AMDKFD_IOC_RLC_SPM (ROCm DKMS)",
        0x85 => "AMDKFD_IOC_PC_SAMPLE (ROCm DKMS)",
        0x86 => "AMDKFD_IOC_PROFILER (ROCm DKMS)",
        _ => return None,
    })
}

/// The handler of a KFD ioctl after 1.11 that the 6.18 and 7.2 personalities answer.
fn later_handler(nr: u8) -> Option<Handler> {
    match nr {
        0x24 => Some(memory::export_dmabuf),
        0x25 => Some(apertures::runtime_enable),
        _ => None,
    }
}

/// `kfd_ioctl`: one call on a `/dev/kfd` file owned by `process`, made by `client`.
pub(crate) fn kfd_ioctl(
    machine: &MachineInner,
    process: &Arc<KfdProcess>,
    client: &dyn Client,
    cmd: u32,
    arg: u64,
) -> IoctlResult {
    // 1. Only _IOC_NR selects; a number outside the table (or 0) is ENOTTY, as the current
    //    6.1.y kernel answers (kfd_ioctl: `nr >= AMDKFD_CORE_IOCTL_COUNT` and numbers below
    //    AMDKFD_COMMAND_START; 6.1.0 answered EINVAL). Each is logged once per machine: numbers
    //    clients are known to issue by their name, others by their request code.
    // 0. The 6.18 and 7.2 personalities' own numbers (KFD 1.12's dma-buf export, 1.13's runtime
    //    enable).
    let later = if machine.kernel().has_gem_listing() {
        ioctl::linux618::kfd::TABLE
            .iter()
            .find(|d| d.nr == ioctl::nr(cmd))
            .and_then(|d| Some((d, later_handler(d.nr)?)))
    } else {
        None
    };
    let found = match later {
        Some(found) => Some(found),
        None => kfd::lookup(cmd).and_then(|d| {
            let h = usize::from(d.nr)
                .checked_sub(1)
                .and_then(|i| HANDLERS.get(i))?;
            Some((d, *h))
        }),
    };
    let Some((desc, handler)) = found else {
        let nr = ioctl::nr(cmd);
        let kernel = machine.kernel();
        match foreign_name(nr) {
            Some(name) if kernel.has_gem_listing() && nr < 0x80 => machine.log_once(
                name,
                &format!("{name}, nr {nr:#x}: not simulated on Linux {kernel}, ENOTTY"),
            ),
            Some(name) => machine.log_once(
                name,
                &format!("{name}, nr {nr:#x}: not a KFD 1.11 ioctl, ENOTTY as 6.1.y answers"),
            ),
            None => {
                let code = crate::uaccess::spell_request(cmd);
                machine.log_once(
                    &format!("/dev/kfd {code}"),
                    &format!("/dev/kfd {code}: no such KFD ioctl, ENOTTY as 6.1.y answers"),
                );
            }
        }
        return Err(Errno::ENOTTY);
    };
    // 2. The caller must be the opener, or (CRIU_OP only) its ptrace parent.
    let criu = desc.cmd == kfd::CRIU_OP;
    let traced = criu && client.is_ptrace_parent_of(process.pid);
    if client.pid() != process.pid && !traced {
        return Err(Errno::EBADF);
    }
    // 3. CRIU_OP needs CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN.
    if criu && !client.can_checkpoint_restore() {
        return Err(Errno::EACCES);
    }
    // 4. Sizes: usize from the caller's code, the kernel's own direction and size.
    let usize_ = ioctl::size(cmd);
    let dir = ioctl::dir(desc.cmd);
    let copy_in = if dir.copies_in() { usize_ } else { 0 };
    let mut kdata = copy_in_kdata(client, arg, copy_in, usize_.max(ioctl::size(desc.cmd)))?;
    // 5. The entry's own check of what was copied against the caller's size, before the handler
    //    and without a copy back (6.1.y's `validate` hook; only SVM has one).
    if desc.cmd == kfd::SVM {
        svm::validate(&kdata, usize_)?;
    }
    let call = KfdCall {
        machine,
        process,
        client,
    };
    let ret = handler(&call, &mut kdata);
    if dir.copies_out() {
        copy_to_user(client, arg, &kdata[..usize_])?;
    }
    if let Err(e) = ret {
        log::debug!("kfd-sim: {} -> {e}", desc.name);
    }
    ret
}

/// `kmalloc` of `bytes` fails past the allocator's limit.
fn kmalloc_check(bytes: u64) -> Result<(), Errno> {
    if bytes > KMALLOC_MAX {
        Err(Errno::ENOMEM)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_the_kernel_numbering() {
        assert_eq!(HANDLERS.len(), kfd::TABLE.len());
        for (i, d) in kfd::TABLE.iter().enumerate() {
            assert_eq!(usize::from(d.nr), i + 1, "{}", d.name);
        }
    }
}
