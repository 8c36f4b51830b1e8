//! A user queue as the driver keeps it (`struct queue`, `kfd_queue.c`): its type, ids, the areas
//! userspace gave, the MQD image CRIU saves, and the registers the GPU reads ([`RingState`]).

use crate::hw::queue::RingState;

/// The driver-internal queue type (as priv_data records it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QueueKind {
    /// Compute (PM4 or AQL).
    Compute,
    /// SDMA.
    Sdma,
    /// SDMA on an xGMI engine.
    SdmaXgmi,
}

impl QueueKind {
    /// The internal number (`KFD_QUEUE_TYPE_*`).
    pub(crate) fn internal(self) -> u32 {
        match self {
            QueueKind::Compute => 0,
            QueueKind::Sdma => 1,
            QueueKind::SdmaXgmi => 4,
        }
    }

    /// From the internal number.
    pub(crate) fn from_internal(v: u32) -> Option<Self> {
        match v {
            0 => Some(QueueKind::Compute),
            1 => Some(QueueKind::Sdma),
            4 => Some(QueueKind::SdmaXgmi),
            _ => None,
        }
    }
}

/// A user queue.
#[derive(Clone, Debug)]
pub(crate) struct Queue {
    /// Index of the pdd (device) in the process.
    pub pdd: usize,
    /// Type.
    pub kind: QueueKind,
    /// AQL format (else PM4).
    pub aql: bool,
    /// Ring address.
    pub ring: u64,
    /// Ring size.
    pub ring_size: u64,
    /// Read pointer address.
    pub rptr: u64,
    /// Write pointer address.
    pub wptr: u64,
    /// EOP buffer address.
    pub eop: u64,
    /// EOP buffer size.
    pub eop_size: u32,
    /// Context save/restore area.
    pub ctx: u64,
    /// Context save/restore area size.
    pub ctx_size: u32,
    /// Priority.
    pub priority: u32,
    /// Percentage.
    pub percent: u32,
    /// Doorbell id in the process slice.
    pub doorbell_id: u32,
    /// Absolute doorbell index (dwords) in the device's doorbell BAR.
    pub doorbell_off: u64,
    /// SDMA slot (SDMA queues).
    pub sdma_id: u32,
    /// Whether the queue holds the GWS.
    pub gws: bool,
    /// The MQD.
    pub mqd: Vec<u8>,
    /// The control stack.
    pub ctl_stack: Vec<u8>,
    /// CU mask.
    pub cu_mask: Vec<u32>,
    /// Where the simulated engine is in the ring (SDMA queues).
    pub ring_state: RingState,
}

/// Byte offsets of the fields the simulator keeps in its MQD image (its own layout; the real
/// MQD is opaque to userspace and to the plugin).
pub(crate) mod mqd_layout {
    /// Magic header dword.
    pub(crate) const MAGIC: usize = 0;
    /// Ring base address.
    pub(crate) const RING: usize = 8;
    /// Ring size.
    pub(crate) const RING_SIZE: usize = 16;
    /// Doorbell index.
    pub(crate) const DOORBELL: usize = 24;
    /// Queue id.
    pub(crate) const QUEUE_ID: usize = 32;
    /// Ring read pointer: bytes executed (SDMA queues).
    pub(crate) const RPTR: usize = 40;
    /// Ring write pointer: bytes submitted (SDMA queues); the index of the last valid packet
    /// (AQL queues: the doorbell's value, latched at checkpoint).
    pub(crate) const WPTR: usize = 48;
    /// Magic value of a compute MQD.
    pub(crate) const COMPUTE_MAGIC: u32 = 0xC031_0800;
    /// Magic value of an SDMA MQD.
    pub(crate) const SDMA_MAGIC: u32 = 0x5D4A_0009;
}

impl Queue {
    /// Whether the queue can run once its process is not evicted: it has a ring and a non-zero
    /// percentage.
    pub(crate) fn runnable(&self) -> bool {
        self.ring_size > 0 && self.ring != 0 && self.percent > 0
    }

    /// The ring pointers of a restored SDMA MQD image, and the last valid packet of an AQL
    /// queue's (zero for anything else: an MQD the simulator did not write starts its ring
    /// afresh).
    pub(crate) fn ring_state_from_mqd(&self) -> RingState {
        let u64_at = |off: usize| {
            self.mqd
                .get(off..off + 8)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_le_bytes)
        };
        let magic = self
            .mqd
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes);
        if self.kind == QueueKind::Compute {
            return if self.aql && magic == Some(mqd_layout::COMPUTE_MAGIC) {
                RingState {
                    wptr: u64_at(mqd_layout::WPTR),
                    ..RingState::default()
                }
            } else {
                RingState::default()
            };
        }
        if magic != Some(mqd_layout::SDMA_MAGIC) {
            return RingState::default();
        }
        RingState {
            rptr: u64_at(mqd_layout::RPTR),
            wptr: u64_at(mqd_layout::WPTR),
            doorbell: 0,
            hung: false,
            cp: None,
        }
    }

    /// Whether the MQD image is the simulator's compute MQD, which holds the CWSR registers (an
    /// image of another driver's MQD has none the simulator can read).
    pub(crate) fn cwsr_mqd(&self) -> bool {
        self.kind == QueueKind::Compute
            && self.mqd.get(..4) == Some(&mqd_layout::COMPUTE_MAGIC.to_le_bytes()[..])
    }

    /// Writes the fields the simulator tracks into the MQD image.
    pub(crate) fn refresh_mqd(&mut self, qid: u32) {
        let magic = match self.kind {
            QueueKind::Compute => mqd_layout::COMPUTE_MAGIC,
            _ => mqd_layout::SDMA_MAGIC,
        };
        let fields: [(usize, &[u8]); 7] = [
            (mqd_layout::MAGIC, &magic.to_le_bytes()),
            (mqd_layout::RING, &self.ring.to_le_bytes()),
            (mqd_layout::RING_SIZE, &self.ring_size.to_le_bytes()),
            (mqd_layout::DOORBELL, &self.doorbell_off.to_le_bytes()),
            (mqd_layout::QUEUE_ID, &qid.to_le_bytes()),
            (mqd_layout::RPTR, &self.ring_state.rptr.to_le_bytes()),
            (mqd_layout::WPTR, &self.ring_state.wptr.to_le_bytes()),
        ];
        for (off, bytes) in fields {
            if let Some(dst) = self.mqd.get_mut(off..off + bytes.len()) {
                dst.copy_from_slice(bytes);
            }
        }
    }
}

/// gfx9 reserved doorbell ids (the SDMA/IH range and its mirror).
pub(crate) fn doorbell_reserved(id: u32) -> bool {
    (id & 0x1e0) == 0x0e0
}

/// The doorbell id of an SDMA queue: engine base, odd queues in the mirror half.
pub(crate) fn sdma_doorbell_id(engine: u32, queue: u32) -> u32 {
    0xe0 + engine.saturating_mul(4) + (queue & 1) * 512 + (queue >> 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_doorbells_are_the_sdma_window_and_its_mirror() {
        assert!(doorbell_reserved(0xe0) && doorbell_reserved(0xff) && doorbell_reserved(0x2e0));
        assert!(!doorbell_reserved(0) && !doorbell_reserved(0x100) && !doorbell_reserved(0x1e0));
        for e in 0..8 {
            for q in 0..8 {
                assert!(doorbell_reserved(sdma_doorbell_id(e, q)));
            }
        }
    }
}
