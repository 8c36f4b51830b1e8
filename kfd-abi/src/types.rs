//! Typed handles, flags and enums of the KFD and amdgpu ABI.

use std::fmt;

use bitflags::bitflags;
use kfd_sys as sys;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident($inner:ty), nonzero) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(transparent)]
        pub struct $name($inner);

        impl $name {
            /// Validates a value coming from the driver or an image: zero is not an id.
            pub const fn new(v: $inner) -> Option<Self> {
                if v == 0 { None } else { Some(Self(v)) }
            }

            /// The raw value.
            pub const fn get(self) -> $inner {
                self.0
            }
        }

        id_type!(@fmt $name);
    };
    ($(#[$doc:meta])* $name:ident($inner:ty)) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(transparent)]
        pub struct $name(pub $inner);

        impl $name {
            /// The raw value.
            pub const fn get(self) -> $inner {
                self.0
            }
        }

        id_type!(@fmt $name);
    };
    (@fmt $name:ident) => {
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:#x})"), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:#x}", self.0)
            }
        }
    };
}

id_type!(
    /// A GPU as KFD names it (`gpu_id` in sysfs and in every ioctl). Never zero.
    GpuId(u32), nonzero
);
id_type!(
    /// A KFD memory handle: `gpu_id << 32 | idr` as `ALLOC_MEMORY_OF_GPU` returns it.
    MemHandle(u64)
);
id_type!(
    /// A KFD queue id, the lowest free bit of the process's queue bitmap (0 is valid).
    QueueId(u32)
);
id_type!(
    /// A KFD event id. Signal events use 1..=4096, other types ids from 2^30.
    EventId(u32)
);
id_type!(
    /// A GEM handle on one render-node file. Never zero.
    BoHandle(u32), nonzero
);
id_type!(
    /// An amdgpu submission context on one render-node file.
    ContextId(u32)
);
id_type!(
    /// An amdgpu BO list on one render-node file.
    BoListHandle(u32)
);

impl MemHandle {
    /// Builds a handle as the driver does: the GPU in the high half, the IDR in the low half.
    pub const fn from_parts(gpu_id: GpuId, idr: u32) -> Self {
        Self(((gpu_id.0 as u64) << 32) | idr as u64)
    }

    /// The GPU half (the user gpu_id the BO was allocated on).
    pub const fn gpu_id(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// The per-device IDR half.
    pub const fn idr(self) -> u32 {
        (self.0 & 0xffff_ffff) as u32
    }
}

bitflags! {
    /// `KFD_IOC_ALLOC_MEM_FLAGS_*`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct AllocFlags: u32 {
        /// Device memory.
        const VRAM = sys::KFD_IOC_ALLOC_MEM_FLAGS_VRAM;
        /// System memory in the GART.
        const GTT = sys::KFD_IOC_ALLOC_MEM_FLAGS_GTT;
        /// Existing process memory (the CPU address comes in `mmap_offset`).
        const USERPTR = sys::KFD_IOC_ALLOC_MEM_FLAGS_USERPTR;
        /// The process's doorbell slice on that GPU.
        const DOORBELL = sys::KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL;
        /// The HDP flush page.
        const MMIO_REMAP = sys::KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP;
        /// Writable by the GPU.
        const WRITABLE = sys::KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE;
        /// Executable by the GPU.
        const EXECUTABLE = sys::KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE;
        /// CPU-visible VRAM.
        const PUBLIC = sys::KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC;
        /// No fallback to another domain.
        const NO_SUBSTITUTE = sys::KFD_IOC_ALLOC_MEM_FLAGS_NO_SUBSTITUTE;
        /// Queue ring memory, mapped twice (va and va + size).
        const AQL_QUEUE_MEM = sys::KFD_IOC_ALLOC_MEM_FLAGS_AQL_QUEUE_MEM;
        /// Coherent.
        const COHERENT = sys::KFD_IOC_ALLOC_MEM_FLAGS_COHERENT;
        /// Uncached.
        const UNCACHED = sys::KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED;

        // Flags of later headers pass through unchanged.
        const _ = !0;
    }
}

impl AllocFlags {
    /// The memory domain bits alone.
    pub const DOMAINS: Self = Self::VRAM
        .union(Self::GTT)
        .union(Self::USERPTR)
        .union(Self::DOORBELL)
        .union(Self::MMIO_REMAP);

    /// Whether CRIU saves this BO's contents (VRAM and GTT BOs).
    pub fn has_contents(self) -> bool {
        self.intersects(Self::VRAM | Self::GTT)
    }
}

macro_rules! kernel_enum {
    ($(#[$doc:meta])* $name:ident { $( $(#[$vdoc:meta])* $var:ident = $val:expr, )* }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vdoc])* $var, )*
            /// A value this crate does not know.
            Unknown(u32),
        }

        impl From<u32> for $name {
            fn from(v: u32) -> Self {
                match v {
                    $( x if x == $val => Self::$var, )*
                    other => Self::Unknown(other),
                }
            }
        }

        impl From<$name> for u32 {
            fn from(v: $name) -> u32 {
                match v {
                    $( $name::$var => $val, )*
                    $name::Unknown(other) => other,
                }
            }
        }
    };
}

kernel_enum!(
    /// `KFD_IOC_QUEUE_TYPE_*` (the ioctl's numbering, not the driver's internal one).
    QueueType {
        /// PM4 compute queue.
        Compute = sys::KFD_IOC_QUEUE_TYPE_COMPUTE,
        /// SDMA queue.
        Sdma = sys::KFD_IOC_QUEUE_TYPE_SDMA,
        /// AQL compute queue (what ROCm uses).
        ComputeAql = sys::KFD_IOC_QUEUE_TYPE_COMPUTE_AQL,
        /// SDMA queue on an xGMI engine.
        SdmaXgmi = sys::KFD_IOC_QUEUE_TYPE_SDMA_XGMI,
    }
);

kernel_enum!(
    /// `KFD_IOC_EVENT_*`.
    EventType {
        /// A signal event (slot in the signal page).
        Signal = sys::KFD_IOC_EVENT_SIGNAL,
        /// Topology change.
        NodeChange = sys::KFD_IOC_EVENT_NODECHANGE,
        /// Device state change.
        DeviceStateChange = sys::KFD_IOC_EVENT_DEVICESTATECHANGE,
        /// Hardware exception.
        HwException = sys::KFD_IOC_EVENT_HW_EXCEPTION,
        /// System event.
        SystemEvent = sys::KFD_IOC_EVENT_SYSTEM_EVENT,
        /// Debug event.
        DebugEvent = sys::KFD_IOC_EVENT_DEBUG_EVENT,
        /// Profile event.
        ProfileEvent = sys::KFD_IOC_EVENT_PROFILE_EVENT,
        /// Queue event.
        QueueEvent = sys::KFD_IOC_EVENT_QUEUE_EVENT,
        /// Memory exception.
        Memory = sys::KFD_IOC_EVENT_MEMORY,
    }
);

kernel_enum!(
    /// `KFD_IOC_WAIT_RESULT_*`.
    WaitResult {
        /// The wait condition was met.
        Complete = sys::KFD_IOC_WAIT_RESULT_COMPLETE,
        /// The timeout expired.
        Timeout = sys::KFD_IOC_WAIT_RESULT_TIMEOUT,
        /// The wait failed.
        Fail = sys::KFD_IOC_WAIT_RESULT_FAIL,
    }
);

kernel_enum!(
    /// `KFD_CRIU_OP_*`.
    CriuOp {
        /// Pause the process and report counts.
        ProcessInfo = sys::KFD_CRIU_OP_PROCESS_INFO,
        /// Save buckets and private data.
        Checkpoint = sys::KFD_CRIU_OP_CHECKPOINT,
        /// Resume the queues after a checkpoint.
        Unpause = sys::KFD_CRIU_OP_UNPAUSE,
        /// Recreate the state in a new process.
        Restore = sys::KFD_CRIU_OP_RESTORE,
        /// Start the restored process's queues.
        Resume = sys::KFD_CRIU_OP_RESUME,
    }
);

impl CriuOp {
    /// The name used in error messages: `CRIU_OP(CHECKPOINT)`.
    pub fn ioctl_name(self) -> std::borrow::Cow<'static, str> {
        match self {
            CriuOp::ProcessInfo => "CRIU_OP(PROCESS_INFO)".into(),
            CriuOp::Checkpoint => "CRIU_OP(CHECKPOINT)".into(),
            CriuOp::Unpause => "CRIU_OP(UNPAUSE)".into(),
            CriuOp::Restore => "CRIU_OP(RESTORE)".into(),
            CriuOp::Resume => "CRIU_OP(RESUME)".into(),
            CriuOp::Unknown(n) => format!("CRIU_OP({n})").into(),
        }
    }
}

/// KFD mmap offset encoding (`KFD_MMAP_TYPE_*`, `KFD_MMAP_GPU_ID`).
pub mod mmap_offset {
    /// Bits 63-62: the type.
    pub(crate) const TYPE_SHIFT: u32 = 62;
    /// Doorbell pages.
    pub const TYPE_DOORBELL: u64 = 3 << TYPE_SHIFT;
    /// The signal event page.
    pub const TYPE_EVENTS: u64 = 2 << TYPE_SHIFT;
    /// Reserved memory.
    pub const TYPE_RESERVED_MEM: u64 = 1 << TYPE_SHIFT;
    /// The MMIO remap page.
    pub const TYPE_MMIO: u64 = 0;
    /// Bits 61-46: the gpu id.
    pub(crate) const GPU_ID_SHIFT: u32 = 46;
    /// Mask of the gpu id field.
    pub(crate) const GPU_ID_MASK: u64 = ((1 << 16) - 1) << GPU_ID_SHIFT;
    /// Mask of the type field.
    pub const TYPE_MASK: u64 = 3 << TYPE_SHIFT;

    /// `KFD_MMAP_GPU_ID(gpu_id)`.
    pub const fn gpu_id(gpu_id: u32) -> u64 {
        ((gpu_id as u64) << GPU_ID_SHIFT) & GPU_ID_MASK
    }

    /// The gpu id field of an offset.
    pub const fn get_gpu_id(offset: u64) -> u32 {
        ((offset & GPU_ID_MASK) >> GPU_ID_SHIFT) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_is_not_a_gpu_id_or_bo_handle() {
        assert_eq!(GpuId::new(0), None);
        assert_eq!(BoHandle::new(0), None);
        assert_eq!(GpuId::new(0x1234).map(GpuId::get), Some(0x1234));
    }

    #[test]
    fn mem_handle_splits_into_gpu_and_idr() {
        let h = MemHandle::from_parts(GpuId::new(0xbeef).unwrap(), 7);
        assert_eq!(h.get(), 0xbeef_0000_0007);
        assert_eq!((h.gpu_id(), h.idr()), (0xbeef, 7));
    }

    #[test]
    fn unknown_enum_values_round_trip() {
        assert_eq!(QueueType::from(2), QueueType::ComputeAql);
        assert_eq!(QueueType::from(9), QueueType::Unknown(9));
        assert_eq!(u32::from(QueueType::Unknown(9)), 9);
        assert_eq!(CriuOp::Checkpoint.ioctl_name(), "CRIU_OP(CHECKPOINT)");
    }

    #[test]
    fn mmap_offsets_encode_type_and_gpu() {
        let off = mmap_offset::TYPE_DOORBELL | mmap_offset::gpu_id(0xabcd);
        assert_eq!(off, 0xc000_0000_0000_0000 | (0xabcd << 46));
        assert_eq!(mmap_offset::get_gpu_id(off), 0xabcd);
    }
}
