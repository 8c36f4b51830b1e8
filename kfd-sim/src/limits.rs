//! Numbers of the gfx9 driver model: page size, doorbells, queue and event limits, apertures,
//! the allocators' bounds.

/// Page size.
pub(crate) const PAGE_SIZE: u64 = 4096;
/// Doorbells per process per device (`KFD_MAX_NUM_OF_QUEUES_PER_PROCESS`).
pub(crate) const DOORBELLS_PER_PROCESS: u32 = 1024;
/// Bytes of one process's doorbell slice on gfx9 (1024 doorbells of 8 bytes).
pub(crate) const DOORBELL_SLICE: u64 = 8192;
/// Queue ids per process.
pub(crate) const MAX_QUEUES_PER_PROCESS: u32 = 1024;
/// Queues per process per device (the HWS limit).
pub(crate) const MAX_QUEUES_PER_DEVICE: u32 = 127;
/// Largest kmalloc: larger kernel buffers fail with ENOMEM.
pub(crate) const KMALLOC_MAX: u64 = 4 << 20;
/// Largest kvmalloc (INT_MAX).
pub(crate) const KVMALLOC_MAX: u64 = i32::MAX as u64;
/// Signal event slots of a full signal page.
pub(crate) const SIGNAL_EVENT_LIMIT: u32 = 4096;
/// Slots of the kernel's own signal page when userspace gave none.
pub(crate) const DEFAULT_SIGNAL_SLOTS: u32 = 256;
/// First id of non-signal events.
pub(crate) const FIRST_NONSIGNAL_EVENT_ID: u32 = 1 << 30;
/// Last id of non-signal events.
pub(crate) const LAST_NONSIGNAL_EVENT_ID: u32 = i32::MAX as u32;
/// Start of the DRM fake mmap offset space (bytes).
pub(crate) const DRM_FILE_PAGE_OFFSET_START: u64 = 1 << 32;
/// gfx9 compute MQD size (`struct v9_mqd`, 512 dwords).
pub(crate) const MQD_SIZE_COMPUTE: u32 = 2048;
/// gfx9 SDMA MQD size (`struct v9_sdma_mqd`, 128 dwords).
pub(crate) const MQD_SIZE_SDMA: u32 = 512;
/// Largest control stack the simulator accepts (a real one is a few pages).
pub(crate) const MAX_CTL_STACK: u32 = 1 << 20;
/// Apertures of gfx9.
pub(crate) const LDS_BASE: u64 = 1 << 48;
/// Scratch aperture base.
pub(crate) const SCRATCH_BASE: u64 = 2 << 48;
/// Start of the GPUVM aperture.
pub(crate) const GPUVM_BASE: u64 = 16 << 10;
/// End of the GPUVM aperture.
pub(crate) const GPUVM_LIMIT: u64 = (1 << 47) - 1;
/// Available-memory granularity.
pub(crate) const VRAM_AVAILABILITY_ALIGN: u64 = 2 << 20;

/// Rounds up to a page.
pub(crate) fn align_up(size: u64) -> u64 {
    size.saturating_add(PAGE_SIZE - 1) & !(PAGE_SIZE - 1)
}
