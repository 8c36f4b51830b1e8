//! KFD sysfs topology parsing and GPU remapping for checkpoint/restore.
//!
//! Layer: the ground, beside `images`; it knows neither the driver (`kfd-abi`) nor the image
//! format (the conversion between images and topologies is in the plugin, its user). Its users
//! are the plugin engine, the simulator (presets and its sysfs tree) and the command
//! `amdgpu-cr`.
//!
//! What it exposes:
//! - [`parse()`] reads a topology directory (on a real system `/sys/class/kfd/kfd/topology`)
//!   into the [`Topology`] model ([`model`]: nodes, their [`Properties`], caches, memory banks,
//!   links, and the sysfs key names); [`write()`] writes a model back in the kernel's exact
//!   format (the simulator uses it), and `parse(write(t)) == t`; [`replace()`] writes over a
//!   tree already there.
//! - [`builder`] makes topologies concisely (tests, simulator presets); [`caches`] has the CU
//!   layout the driver derives its cache lists from.
//! - [`map_gpus`] finds a mapping of a checkpointed machine's GPUs onto this machine's, honouring
//!   the `KFD_*_CHECK` switches ([`CheckOptions`], [`options`]), or explains ([`MapError`]) why
//!   none exists.

pub mod builder;
pub mod caches;
pub mod map;
pub mod model;
pub mod options;
mod parse;
pub mod sysfs;
mod write;

pub use map::{map_gpus, GpuMapping, MapError, Mapping};
pub use model::{Cache, Link, LinkType, MemBank, Node, Properties, Topology};
pub use options::{Check, CheckOptions};
pub use parse::{parse, ParseError};
pub use write::{create_dir_below, replace, write, ReplaceError, WriteError};
