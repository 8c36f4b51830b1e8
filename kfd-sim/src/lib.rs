//! A simulated amdkfd + amdgpu render node for gfx9, in process and over CUSE.
//!
//! - [`Machine`]: simulated GPUs built from a [`Topology`](topology::Topology) (a [`Preset`] or a
//!   parsed sysfs tree); [`SimProcess`]es open `/dev/kfd` and render nodes as [`SimFile`]s, which
//!   implement `kfd_abi::Transport`, so code written against `kfd-abi` runs unchanged here.
//!   [`cuse`] serves the same machine as real device nodes.
//! - The `/dev/kfd` dispatcher follows the 6.1 driver: one table on `_IOC_NR`, the kernel's size
//!   rules, the caller check, CRIU_OP's privilege check, then one function per ioctl with the
//!   driver's checks in its order and its errno, grouped by subsystem as the driver's files are
//!   (process and apertures, memory, queues, events, SVM, [`criu`]). The render node
//!   ([`render`]) executes command submissions on its SDMA engine ([`sdma`]).
//! - All user memory goes through a [`Client`] (`process_vm_readv`/`writev`), and every copy
//!   between the caller and an ioctl's buffer through one module, so no input can make the
//!   simulator dereference a wild pointer, panic or hang.
//! - State is kept per process and per device as the driver keeps it ([`process`], [`machine`]);
//!   VRAM and GTT buffer objects are memfds ([`memory`]); exported dma-bufs are real fds on the
//!   same inode. [`host`] is the glue to the host OS.
//! - `CRIU_OP` with `priv_data` in the kernel's version-1 layout ([`criu`]).
//! - [`preset`]: topology presets (`mi50x1`, `mi100x4`, `mi210x2`, `mi250x8`, `mi250x16`) and
//!   their variants, as values or TOML/JSON files; [`SimPlatform`] writes their sysfs tree.
//! - [`asic`]: what the amdgpu driver knows of each GPU beyond its topology node (PCI identity,
//!   IP and firmware versions, clocks, shader layout); [`sysfs`]: the PCI, DRM and module
//!   entries of sysfs that AMD's userspace reads, written like the kernel lays them out;
//!   [`scratch`]: temporary directories of simulated nodes that name their owner, so that the
//!   next node removes those of processes that died without cleaning up.

pub mod asic;
pub mod client;
pub mod cuse;
pub mod host;
mod inproc;
mod kfd;
pub mod machine;
pub mod memory;
mod mmap;
pub mod preset;
pub mod process;
pub mod render;
pub mod scratch;
pub mod sdma;
pub mod sysfs;
mod uaccess;

pub use client::{Client, FdSlot, InProcessClient, ProcessMemory};
pub use host::FileKey;
pub use inproc::{DeviceVma, Machine, SimFile, SimPlatform, SimProcess, SIM_KFD_MAJOR};
pub use kfd::criu;
pub use machine::MachineError;
pub use preset::{GpuModel, PciLocation, Preset, PresetError};
