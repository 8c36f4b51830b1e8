//! `kfd_mmap`: the `/dev/kfd` half of [`crate::vma`]: what the mmap offsets of `/dev/kfd`
//! (doorbells, events page, CWSR area, MMIO page) map.

use std::sync::Arc;

use kfd_abi::mmap_offset as mo;
use kfd_abi::Errno;

use crate::hw::backing::{device_page, Backing};
use crate::limits::{DOORBELL_SLICE, PAGE_SIZE, SIGNAL_EVENT_LIMIT};
use crate::state::event::SignalPage;
use crate::state::machine::MachineInner;
use crate::state::process::{KfdProcess, ProcState};
use crate::vma::{proc_state, MmapRequest, Target};
use crate::vma::{VMA_DONTCOPY, VMA_DONTDUMP, VMA_IO, VMA_NORESERVE};

/// `KFD_CWSR_TBA_TMA_SIZE`: the reserved-memory (CWSR) area of one process on one GPU.
pub(crate) const CWSR_SIZE: u64 = 2 * PAGE_SIZE;

/// Flags of the KFD mappings.
pub(crate) const KFD_VMA: u32 = VMA_IO | VMA_DONTCOPY | VMA_NORESERVE | VMA_DONTDUMP;

/// The kernel's `get_order`: log2 of the number of pages, rounded up.
fn order(bytes: u64) -> u32 {
    let pages = bytes.div_ceil(PAGE_SIZE).max(1);
    pages.next_power_of_two().trailing_zeros()
}

/// `kfd_mmap`.
pub(crate) fn kfd_mmap(
    m: &Arc<MachineInner>,
    caller: Option<&Arc<KfdProcess>>,
    q: &MmapRequest,
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
            let page = p.doorbell_page(dev)?;
            log::debug!(
                "kfd-sim: pid {}: doorbell slice of device {dev} mapped",
                p.pid
            );
            // The process can ring its queues from now on: SDMA queues on the engines, AQL
            // queues on the GPU's command processor.
            m.scheduler.start(m);
            m.cp.start(m, dev);
            Ok(target(page, KFD_VMA))
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
            // kfd_event_mmap: the mapped length becomes the slot limit (up to 4096 slots: the
            // order check above), whatever it was (256 for the kernel's own page, the BO's size
            // for a page userspace gave).
            signal.slots = u32::try_from(q.length / 8)
                .unwrap_or(SIGNAL_EVENT_LIMIT)
                .min(SIGNAL_EVENT_LIMIT);
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
            Ok(target(device_page(CWSR_SIZE, dev)?, KFD_VMA))
        }
        // TYPE_MMIO (the two bits leave no other value).
        _ => {
            let dev = dev.ok_or(Errno::ENODEV)?;
            if q.length != PAGE_SIZE {
                return Err(Errno::EINVAL);
            }
            let device = m.devices.get(dev).ok_or(Errno::ENODEV)?;
            Ok(target(device.mmio_page(dev)?, KFD_VMA))
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
    let b = device_page(size, 0)?;
    let unsignaled = vec![0xffu8; usize::try_from(size).map_err(|_| Errno::ENOMEM)?];
    if !b.write(0, &unsignaled) {
        return Err(Errno::ENOMEM);
    }
    signal.backing = Some(Arc::clone(&b));
    Ok(b)
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
