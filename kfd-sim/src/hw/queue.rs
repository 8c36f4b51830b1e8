//! What the GPU reads of a user queue once the driver has mapped it: the registers of its MQD.
//! The driver keeps the rest of a queue (its ids, EOP and context-save areas, the MQD image that
//! CRIU saves) beside its ioctls; the queue scheduler ([`scheduler`](super::scheduler)) sees only
//! this.

/// Where the simulated SDMA engine is in a user-mode queue's ring: what the MQD's ring pointer
/// registers hold on hardware. Pointers count bytes since the queue was created and are
/// taken modulo the ring size to address it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RingState {
    /// Bytes the engine executed (the read pointer it writes back).
    pub rptr: u64,
    /// Bytes submitted: the write pointer latched from the doorbell.
    pub wptr: u64,
    /// The doorbell value the engine saw last (a new value is a new write pointer).
    pub doorbell: u64,
    /// The engine stopped on this queue (a bad packet or a VM fault), as a hung queue stays.
    pub hung: bool,
    /// AQL compute queues, which nothing executes: the doorbell index whose packet the engine
    /// has reported (`kfd::aql`).
    pub aql_reported: Option<u64>,
}
