//! One simulated GPU as the drivers keep it (`struct kfd_dev` with the `amdgpu_device` parts the
//! simulator needs): its properties from the topology, the VRAM in use, the SDMA queue slots
//! and doorbell slices handed out, the fake mmap offsets, and its SDMA engines.

use std::collections::BTreeSet;
use std::sync::Arc;

use kfd_abi::Errno;

use crate::host::lock;
use crate::hw::backing::{device_page, Backing};
use crate::hw::sdma::Engines;
use crate::limits::{align_up, PAGE_SIZE};
use crate::lock_order::Ordered;
use crate::state::queue::QueueKind;

/// Mutable per-device state shared by all processes (the device queue manager's part).
#[derive(Debug)]
pub(crate) struct DeviceState {
    pub vram_used: u64,
    pub sdma_used: Vec<bool>,
    pub xgmi_sdma_used: Vec<bool>,
    pub doorbell_slices: BTreeSet<u32>,
    pub next_mmap_offset: u64,
}

/// One simulated GPU.
#[derive(Debug)]
pub(crate) struct Device {
    pub gpu_id: u32,
    pub render_minor: u32,
    pub gfx_target_version: u32,
    pub vram_size: u64,
    pub large_bar: bool,
    pub sdma_engines: u32,
    pub xgmi_sdma_engines: u32,
    pub num_gws: u32,
    pub state: Ordered<DeviceState>,
    /// The SDMA engines that run command submissions on the DMA ring.
    pub dma: Engines,
    /// The MMIO remap (HDP flush) page, shared by every process, made on its first mapping.
    pub mmio: Ordered<Option<Arc<Backing>>>,
}

impl Device {
    /// The MMIO remap (HDP flush) page of the device (index `dev`), shared by every process.
    pub(crate) fn mmio_page(&self, dev: usize) -> Result<Arc<Backing>, Errno> {
        let mut page = lock(&self.mmio);
        if let Some(p) = page.as_ref() {
            return Ok(Arc::clone(p));
        }
        let p = device_page(PAGE_SIZE, dev)?;
        *page = Some(Arc::clone(&p));
        Ok(p)
    }

    pub(crate) fn alloc_doorbell_slice(&self) -> u32 {
        let mut s = lock(&self.state);
        let idx = (0..=u32::MAX)
            .find(|i| !s.doorbell_slices.contains(i))
            .unwrap_or(u32::MAX);
        s.doorbell_slices.insert(idx);
        idx
    }

    pub(crate) fn free_doorbell_slice(&self, idx: u32) {
        lock(&self.state).doorbell_slices.remove(&idx);
    }

    /// Takes an SDMA slot (`want`: a specific one at restore). Returns (sdma_id, engine, queue).
    pub(crate) fn alloc_sdma(
        &self,
        kind: QueueKind,
        want: Option<u32>,
    ) -> Result<(u32, u32, u32), Errno> {
        let mut s = lock(&self.state);
        let (bitmap, engines, base) = match kind {
            QueueKind::Sdma => (&mut s.sdma_used, self.sdma_engines, 0),
            _ => (
                &mut s.xgmi_sdma_used,
                self.xgmi_sdma_engines,
                self.sdma_engines,
            ),
        };
        let id = match want {
            Some(id) => {
                let slot = bitmap.get(id as usize).copied();
                match slot {
                    Some(false) => id,
                    _ => return Err(Errno::EBUSY),
                }
            }
            None => bitmap
                .iter()
                .position(|used| !used)
                .and_then(|i| u32::try_from(i).ok())
                .ok_or(Errno::ENOMEM)?,
        };
        if let Some(b) = bitmap.get_mut(id as usize) {
            *b = true;
        }
        let engines = engines.max(1);
        Ok((id, base + id % engines, id / engines))
    }

    pub(crate) fn free_sdma(&self, kind: QueueKind, id: u32) {
        let mut s = lock(&self.state);
        let bitmap = match kind {
            QueueKind::Sdma => &mut s.sdma_used,
            _ => &mut s.xgmi_sdma_used,
        };
        if let Some(b) = bitmap.get_mut(id as usize) {
            *b = false;
        }
    }

    /// A fresh render-node fake mmap offset range for a BO of `size` bytes.
    pub(crate) fn alloc_mmap_offset(&self, size: u64) -> u64 {
        let mut s = lock(&self.state);
        let off = s.next_mmap_offset;
        s.next_mmap_offset = off.saturating_add(align_up(size));
        off
    }
}
