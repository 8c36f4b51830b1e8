//! What the simulated GPU does, below the driver: the memory it reads and writes
//! ([`backing`]), its page tables ([`vm`]), the SDMA engines ([`sdma`]), the registers of a
//! mapped user queue ([`queue`]), what the driver maps for the engines ([`runlist`]), the scheduler
//! that runs the SDMA queues when their doorbells ring ([`scheduler`]) and the command processor that runs the AQL compute queues ([`cp`]).
//!
//! Nothing here knows the driver: the driver hands the hardware what the hardware reads (memory,
//! VM mappings, queue registers, the runlist of mapped queues), and the hardware hands back what
//! it raises (faults, interrupts). The gfx90a shader core the command processor dispatches waves
//! to is its own crate (`kfd-sim/shader`).

pub(crate) mod backing;
pub(crate) mod cp;
pub(crate) mod queue;
pub(crate) mod runlist;
pub(crate) mod scheduler;
pub(crate) mod sdma;
pub(crate) mod vm;
