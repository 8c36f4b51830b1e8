//! `kfd_mmap`: the `/dev/kfd` half of [`crate::mmap`], and the pages that back it.

use std::sync::{Arc, Mutex, Weak};

use kfd_abi::mmap_offset as mo;
use kfd_abi::Errno;

use crate::host::lock;
use crate::hw::backing::Backing;
use crate::limits::{DOORBELL_SLICE, PAGE_SIZE, SIGNAL_EVENT_LIMIT};
use crate::machine::MachineInner;
use crate::mmap::{page, proc_state, MmapRequest, Target};
use crate::mmap::{VMA_DONTCOPY, VMA_DONTDUMP, VMA_IO, VMA_NORESERVE};
use crate::process::{KfdProcess, ProcState, SignalPage};

/// `KFD_CWSR_TBA_TMA_SIZE`: the reserved-memory (CWSR) area of one process on one GPU.
pub(crate) const CWSR_SIZE: u64 = 2 * PAGE_SIZE;

/// Flags of the KFD mappings.
pub(crate) const KFD_VMA: u32 = VMA_IO | VMA_DONTCOPY | VMA_NORESERVE | VMA_DONTDUMP;

/// A doorbell page of one process on one GPU.
#[derive(Debug)]
struct DoorbellPage {
    process: Weak<KfdProcess>,
    dev: usize,
    page: Arc<Backing>,
}

/// The doorbell and MMIO pages of the machine's GPUs: what a KFD mapping of them shows.
#[derive(Debug, Default)]
pub(crate) struct DevicePages {
    doorbells: Mutex<Vec<DoorbellPage>>,
    mmio: Mutex<Vec<(usize, Arc<Backing>)>>,
}

impl DevicePages {
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

    /// The doorbell slice of `process` on device `dev` if it was ever mapped (what the
    /// simulated GPU reads when a doorbell is rung).
    pub(crate) fn mapped_doorbell(&self, process: &KfdProcess, dev: usize) -> Option<Arc<Backing>> {
        lock(&self.doorbells)
            .iter()
            .find(|d| d.dev == dev && std::ptr::eq(d.process.as_ptr(), process))
            .map(|d| Arc::clone(&d.page))
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

/// `kfd_mmap`.
pub(crate) fn kfd_mmap(
    m: &MachineInner,
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
            let page = m.device_pages.doorbell(p, dev)?;
            log::debug!(
                "kfd-sim: pid {}: doorbell slice of device {dev} mapped",
                p.pid
            );
            // The process can ring its SDMA queues from now on.
            p.machine.scheduler.start(&p.machine);
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
            Ok(target(m.device_pages.mmio(dev)?, KFD_VMA))
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
