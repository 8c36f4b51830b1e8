//! An SVM range as the driver keeps it (`struct svm_range`, `kfd_svm.h`).

/// Per-GPU access of an SVM range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SvmAccess {
    /// No access.
    None,
    /// Access (may migrate).
    Access,
    /// Access in place.
    InPlace,
}

/// An SVM range with its attributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SvmRange {
    /// Start address (bytes, page aligned).
    pub start: u64,
    /// Size (bytes, pages).
    pub size: u64,
    /// Preferred location (gpu_id, 0 sysmem, 0xffffffff undefined).
    pub preferred: u32,
    /// Prefetch location.
    pub prefetch: u32,
    /// `KFD_IOCTL_SVM_FLAG_*`.
    pub flags: u32,
    /// Migration granularity (log2 pages).
    pub granularity: u32,
    /// Access per pdd index.
    pub access: Vec<SvmAccess>,
}

impl SvmRange {
    /// The end address (exclusive).
    pub(crate) fn end(&self) -> u64 {
        self.start.saturating_add(self.size)
    }
}

/// An SVM range read at RESTORE: start, size, attributes `(type, value)`.
pub(crate) type RestoredSvm = (u64, u64, Vec<(u32, u32)>);
