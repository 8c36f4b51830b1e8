//! CPU mappings of `/dev/kfd`: a GPU's doorbell slice and MMIO remap page, the process's
//! signal (events) page, and raw offsets as a restore returns them.

use crate::error::Result;
use crate::handle::DeviceFile;
use crate::mapping::{Mapping, Place, Prot, Share};
use crate::transport::Transport;
use crate::types::GpuId;

use super::Kfd;

impl<T: Transport> Kfd<T> {
    /// Maps the doorbell slice of this process on `gpu` (`mmap` at `TYPE_DOORBELL | gpu_id`),
    /// `len` bytes: the driver takes exactly the slice (8 KiB on gfx9). A queue's doorbell is at
    /// its `doorbell_offset` minus the mapping offset.
    ///
    /// # Errors
    ///
    /// `EINVAL` wrong length or no access to `gpu`, `ENODEV` unknown `gpu`.
    pub fn map_doorbells(&self, gpu: GpuId, len: usize) -> Result<Mapping> {
        use crate::types::mmap_offset as mo;
        let off = mo::TYPE_DOORBELL | mo::gpu_id(gpu.get());
        self.map(
            "mmap(DOORBELL)",
            Place::Anywhere(len),
            off,
            Prot::RW,
            Share::Shared,
        )
    }

    /// Maps `len` bytes of the process's signal (events) page (`mmap` at `TYPE_EVENTS`).
    ///
    /// # Errors
    ///
    /// `EINVAL` longer than the page or no signal page yet.
    pub fn map_events(&self, len: usize) -> Result<Mapping> {
        use crate::types::mmap_offset as mo;
        self.map(
            "mmap(EVENTS)",
            Place::Anywhere(len),
            mo::TYPE_EVENTS,
            Prot::RW,
            Share::Shared,
        )
    }

    /// Maps the MMIO remap (HDP flush) page of `gpu` (`mmap` at `TYPE_MMIO | gpu_id`), one page.
    ///
    /// # Errors
    ///
    /// `EINVAL` not one page, `ENODEV` unknown `gpu`.
    pub fn map_mmio(&self, gpu: GpuId, len: usize) -> Result<Mapping> {
        use crate::types::mmap_offset as mo;
        let off = mo::TYPE_MMIO | mo::gpu_id(gpu.get());
        self.map(
            "mmap(MMIO)",
            Place::Anywhere(len),
            off,
            Prot::RW,
            Share::Shared,
        )
    }

    /// Maps `len` bytes of `/dev/kfd` at a raw `offset` (a restored doorbell or MMIO offset as
    /// `CRIU_OP(RESTORE)` returns it).
    ///
    /// # Errors
    ///
    /// The driver's errno for the offset and length.
    pub fn map_offset(&self, offset: u64, len: usize, prot: Prot, share: Share) -> Result<Mapping> {
        self.map("mmap", Place::Anywhere(len), offset, prot, share)
    }

    /// [`map_offset`](Self::map_offset) over the reservation `at`, at its address.
    ///
    /// # Errors
    ///
    /// The driver's errno for the offset and length.
    pub fn map_offset_at(
        &self,
        at: Mapping,
        offset: u64,
        prot: Prot,
        share: Share,
    ) -> Result<Mapping> {
        self.map("mmap", Place::Over(at), offset, prot, share)
    }
}
