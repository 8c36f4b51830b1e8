//! A simulated amdkfd + amdgpu render node for gfx9, in process (and, later, over CUSE).
//!
//! - [`Machine`]: simulated GPUs built from a [`Topology`](topology::Topology) (a [`Preset`] or a
//!   parsed sysfs tree); [`SimProcess`]es open `/dev/kfd` and render nodes as [`SimFile`]s, which
//!   implement `kfd_abi::Transport`, so code written against `kfd-abi` runs unchanged here.
//! - The dispatcher follows the 6.1 driver: one table on `_IOC_NR`, the kernel's size rules,
//!   the caller check, CRIU_OP's privilege check, the driver's checks in its order and its errno;
//!   all user memory goes through a [`Client`] (`process_vm_readv`/`writev`), so no input can
//!   make the simulator dereference a wild pointer, panic or hang.
//! - VRAM and GTT buffer objects are memfds; exported dma-bufs are real fds on the same inode.
//! - `CRIU_OP` with `priv_data` in the kernel's version-1 layout ([`criu`]).
//! - [`preset`]: topology presets (`mi50x1`, `mi100x4`, `mi210x2`, `mi250x8`, `mi250x16`) and
//!   their variants, as values or TOML/JSON files; [`SimPlatform`] writes their sysfs tree.

pub mod client;
pub mod criu;
pub mod cuse;
mod dispatch;
mod inproc;
pub mod machine;
pub mod memory;
pub mod preset;
pub mod process;
pub mod render;
pub mod sdma;
pub mod sys;
pub mod workload;

pub use client::{Client, InProcessClient, ProcessMemory};
pub use inproc::{Machine, SimFile, SimPlatform, SimProcess};
pub use machine::MachineError;
pub use preset::{GpuModel, PciLocation, Preset, PresetError};
pub use sys::FileKey;
