//! KFD sysfs topology parsing and GPU remapping for checkpoint/restore.
//!
//! - [`parse()`] reads a topology directory (default [`DEFAULT_ROOT`]) into the [`Topology`]
//!   model; [`write()`] writes a model back in the kernel's exact format (the simulator uses it),
//!   and `parse(write(t)) == t`; [`replace()`] writes over a tree already there.
//! - [`builder`] makes topologies concisely (tests, simulator presets).
//! - [`map_gpus`] finds a mapping of a checkpointed machine's GPUs onto this machine's, honouring
//!   the `KFD_*_CHECK` switches ([`CheckOptions`]), or explains ([`MapError`]) why none exists.

pub mod builder;
pub mod caches;
pub mod map;

pub mod model;
pub mod options;
pub mod parse;
pub mod write;

pub use map::{map_gpus, GpuMapping, MapError, Mapping};
pub use model::{Cache, Link, LinkType, MemBank, Node, Properties, Topology};
pub use options::{Check, CheckOptions};
pub use parse::{parse, ParseError, DEFAULT_ROOT};
pub use write::{replace, write, ReplaceError, WriteError};
