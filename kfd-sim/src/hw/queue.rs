//! What the GPU reads of a user queue once the driver has mapped it: the registers of its MQD
//! ([`MappedQueue`], with where the engine is in the ring, [`RingState`]). The driver keeps the
//! rest of a queue (its ids, EOP and context-save areas, the MQD image that CRIU saves) beside
//! its ioctls; the queue scheduler ([`scheduler`](super::scheduler)) sees only this.

use std::sync::Arc;

use super::backing::Backing;
use super::vm::Vm;
use crate::lock_order::Ordered;

/// Where the simulated SDMA engine is in a user-mode queue's ring: what the MQD's ring pointer
/// registers hold on hardware. Pointers count bytes since the queue was created and are
/// taken modulo the ring size to address it.
///
/// On an AQL queue the pointers count packets: `rptr` is the index of the packet the command
/// processor is at (`read_dispatch_id`), `wptr` the doorbell's last value.
#[derive(Clone, Debug, Default)]
pub(crate) struct RingState {
    /// Bytes the engine executed (the read pointer it writes back); packets on an AQL queue.
    pub rptr: u64,
    /// Bytes submitted: the write pointer latched from the doorbell; packets on an AQL queue.
    pub wptr: u64,
    /// The doorbell value the engine saw last (a new value is a new write pointer).
    pub doorbell: u64,
    /// The engine stopped on this queue (a bad packet or a VM fault), as a hung queue stays.
    pub hung: bool,
    /// AQL queues: what the command processor keeps of the queue between its passes (the
    /// dispatch in flight with its stopped waves, a wait, an error), made on its first pass.
    pub cp: Option<Arc<Ordered<super::cp::state::QueueState>>>,
}

/// The engine a user queue runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Engine {
    /// An SDMA engine (PCIe or xGMI).
    Sdma,
    /// The command processor, AQL packets.
    Aql,
    /// The command processor, PM4 packets.
    Pm4,
}

/// One queue of a process as the GPU reads it: the registers of its MQD, the doorbell slice and
/// the GPU VM of the process on the queue's GPU.
pub(crate) struct MappedQueue<'a> {
    /// The driver's queue id.
    pub qid: u32,
    /// The index of the GPU the queue is on.
    pub device: usize,
    /// The engine it runs on.
    pub engine: Engine,
    /// Whether it may run: a ring and a non-zero percentage.
    pub active: bool,
    /// GPU VA of the ring.
    pub ring: u64,
    /// Bytes of the ring.
    pub ring_size: u64,
    /// GPU VA the read pointer is written back to (AQL: `amd_queue_t.read_dispatch_id`).
    pub rptr_addr: u64,
    /// Its doorbell in the process's slice.
    pub doorbell_id: u32,
    /// Where the engine is in the ring.
    pub state: &'a mut RingState,
    /// Compute queues: the context save area's GPU VA (0: none) and size.
    pub ctx: (u64, u64),
    /// Compute queues: the control stack beside the MQD (`cntl_stack_size` bytes).
    pub ctl_stack: &'a mut [u8],
    /// The MQD image, whose CWSR registers say what the control stack and area hold.
    pub mqd: &'a mut [u8],
    /// The process's doorbell slice on the queue's GPU, once mapped.
    pub doorbells: Option<Arc<Backing>>,
    /// The process's GPU VM on the queue's GPU, once acquired.
    pub vm: Option<Arc<Ordered<Vm>>>,
}

impl MappedQueue<'_> {
    /// The 64-bit value of the queue's doorbell (`None` before its slice is mapped).
    pub(crate) fn doorbell(&self) -> Option<u64> {
        let page = self.doorbells.as_ref()?;
        let mut b = [0u8; 8];
        page.read(u64::from(self.doorbell_id) * 8, &mut b)
            .then(|| u64::from_le_bytes(b))
    }
}
