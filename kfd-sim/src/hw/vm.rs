//! The GPU virtual memory of a simulated GPU: one address space per render-node open file, as
//! the page tables the GPU walks translate it. A GPU VA resolves to device or GTT memory (a
//! memfd), to process memory (a userptr BO), or to a doorbell or MMIO page.
//!
//! The driver fills it (`GEM_VA`, `MAP_MEMORY_TO_GPU`); the engines read it
//! ([`sdma`](super::sdma), the queue scheduler) and know nothing else of the driver.

use std::collections::BTreeMap;
use std::sync::Arc;

use kfd_abi::Errno;

use super::backing::{Backing, ProcessMemory};

/// What a GPU virtual address range is backed by.
#[derive(Clone, Debug)]
pub enum VmTarget {
    /// Device or GTT memory (a memfd), from `offset` bytes into it.
    Memory {
        /// The memory.
        backing: Arc<Backing>,
        /// Byte offset of the mapping's start in the memory.
        offset: u64,
    },
    /// Process memory (a userptr BO), starting at this CPU address.
    User {
        /// CPU address of the mapping's start.
        cpu_addr: u64,
        /// The process whose memory it is (the one that registered the userptr).
        mem: ProcessMemory,
    },
    /// The process's doorbell slice.
    Doorbell,
    /// The MMIO remap (HDP flush) page.
    Mmio,
}

/// One mapping in a VM.
#[derive(Clone, Debug)]
pub struct VmMapping {
    /// Length in bytes.
    pub size: u64,
    /// Backing.
    pub target: VmTarget,
    /// Whether the GPU may write.
    pub writable: bool,
}

/// A GPU virtual address space (one per render-node open file).
#[derive(Debug)]
pub struct Vm {
    /// The simulated pid whose KFD process acquired this VM (the kernel's `vm->process_info`).
    pub(crate) owner: Option<u32>,
    mappings: BTreeMap<u64, VmMapping>,
}

impl Vm {
    /// An empty VM.
    pub(crate) fn new() -> Self {
        Self {
            owner: None,
            mappings: BTreeMap::new(),
        }
    }

    /// Maps `[va, va + m.size)`; `EINVAL` if it overlaps an existing mapping (as `amdgpu_vm_bo_map`).
    pub(crate) fn map(&mut self, va: u64, m: VmMapping) -> Result<(), Errno> {
        let end = va.checked_add(m.size).ok_or(Errno::EINVAL)?;
        if m.size == 0 {
            return Err(Errno::EINVAL);
        }
        if let Some((&prev, pm)) = self.mappings.range(..end).next_back() {
            if prev.saturating_add(pm.size) > va {
                return Err(Errno::EINVAL);
            }
        }
        self.mappings.insert(va, m);
        Ok(())
    }

    /// Removes the mapping that starts at `va`.
    pub(crate) fn unmap(&mut self, va: u64) -> Option<VmMapping> {
        self.mappings.remove(&va)
    }

    /// The mapping containing `va`, with its start address.
    pub fn lookup(&self, va: u64) -> Option<(u64, &VmMapping)> {
        let (&start, m) = self.mappings.range(..=va).next_back()?;
        (va < start.saturating_add(m.size)).then_some((start, m))
    }

    /// All mappings in address order.
    pub(crate) fn mappings(&self) -> impl Iterator<Item = (u64, &VmMapping)> {
        self.mappings.iter().map(|(&va, m)| (va, m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(size: u64) -> VmMapping {
        VmMapping {
            size,
            target: VmTarget::Doorbell,
            writable: true,
        }
    }

    #[test]
    fn overlapping_mappings_are_refused() {
        let mut vm = Vm::new();
        vm.map(0x1000, m(0x1000)).unwrap();
        assert_eq!(vm.map(0x1800, m(0x100)), Err(Errno::EINVAL));
        assert_eq!(vm.map(0x800, m(0x1000)), Err(Errno::EINVAL));
        vm.map(0x2000, m(0x1000)).unwrap();
        vm.map(0, m(0x1000)).unwrap();
        assert_eq!(vm.lookup(0x2fff).map(|(s, _)| s), Some(0x2000));
        assert!(vm.lookup(0x3000).is_none());
        assert_eq!(vm.map(u64::MAX, m(2)), Err(Errno::EINVAL));
    }
}
