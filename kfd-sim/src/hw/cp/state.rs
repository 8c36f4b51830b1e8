//! What the command processor keeps of one AQL queue between its passes, in the queue's
//! registers ([`RingState::cp`](crate::hw::queue::RingState::cp)).

use super::cwsr::{CwsrError, Layout, SavedDispatch};
use super::dispatch::InFlight;

/// What the command processor keeps of one AQL queue.
#[derive(Debug, Default)]
pub(crate) struct QueueState {
    /// The read index was taken from memory.
    pub(super) started: bool,
    /// The index of the packet the command processor is at.
    pub(super) rptr: u64,
    /// The dispatch in flight.
    pub(super) dispatch: Option<InFlight>,
    /// A control stack taken when the queue was mapped again: its waves are still to be read
    /// from the context save area.
    pub(super) saved_layout: Option<Result<Layout, CwsrError>>,
    /// A dispatch read back from the context save area, resumed when the command processor
    /// meets its packet at the read index.
    pub(super) resume: Option<SavedDispatch>,
    /// A scratch request is out: wait until ROCr answers it.
    pub(super) scratch_wait: bool,
    /// A scratch request was answered for the packet at the read index.
    pub(super) scratch_answered: bool,
    /// The queue stopped with this error code.
    pub(super) stopped: Option<u64>,
    /// Where its first dispatch's ring, kernel, arguments and signal are was logged.
    pub(super) described: bool,
}
