//! A simulated amdkfd + amdgpu render node for gfx9, in process and over CUSE.
//!
//! - [`Machine`]: simulated GPUs built from a [`Topology`](topology::Topology) (a [`Preset`] or a
//!   parsed sysfs tree); [`SimProcess`]es open `/dev/kfd` and render nodes as [`SimFile`]s, which
//!   implement `kfd_abi::Transport`, so code written against `kfd-abi` runs unchanged here.
//!   [`cuse`] serves the same machine as real device nodes.
//! - The `/dev/kfd` dispatcher follows the 6.1 driver: one table on `_IOC_NR`, the kernel's size
//!   rules, the caller check, CRIU_OP's privilege check, then one function per ioctl with the
//!   driver's checks in its order and its errno, grouped by subsystem as the driver's files are
//!   (process and apertures, memory, queues, events, SVM, [`criu`]). The render node executes
//!   command submissions on the GPU's SDMA engines.
//! - All user memory goes through the caller (`process_vm_readv`/`writev`), and every copy
//!   between the caller and an ioctl's buffer through one module, so no input can make the
//!   simulator dereference a wild pointer, panic or hang.
//! - VRAM and GTT buffer objects are memfds ([`Backing`]); exported dma-bufs are real fds on the
//!   same inode. [`host`] is the glue to the host OS.
//! - [`preset`]: topology presets (`mi50x1`, `mi100x4`, `mi210x2`, `mi250x8`, `mi250x16`) and
//!   their variants, as values or TOML/JSON files; [`SimPlatform`] writes their sysfs tree.
//!   [`Asic`]: what the amdgpu driver knows of each GPU beyond its topology node (PCI identity,
//!   IP and firmware versions, clocks, shader layout); [`sysfs`]: the PCI, DRM and module
//!   entries of sysfs that AMD's userspace reads, written like the kernel lays them out;
//!   [`scratch`]: temporary directories of simulated nodes that name their owner, so that the
//!   next node removes those of processes that died without cleaning up.
//!
//! # Layers
//!
//! The source is laid out as amdkfd and amdgpu are read, driver over hardware, and arrows point
//! down: a module uses modules of its own layer or below, never above
//! (`kfd-sim/tests/layers.rs` checks every `use`).
//!
//! - **Front ends** (`inproc/`, `cuse/`): how callers reach the drivers: in process
//!   ([`SimFile`], [`SimPlatform`]), or as device nodes over CUSE ([`cuse::CuseServer`]), with
//!   the kfd_bridge protocol for mmap and installed fds (`cuse/bridge/`).
//! - **Driver**: what amdkfd and amdgpu do with a call. `kfd/`: the ioctl table and its
//!   handlers (`apertures`, `memory`, `queues`, `events`, `svm`, `criu`), the mmap offsets
//!   (`mmap`), what it hands the hardware scheduler (`runlist`). `render/` as amdgpu is split:
//!   `core` (the DRM tables), `vm`, `gem`, `prime`, `ctx`, `bo_list`, `cs`, `info`, `mmap`.
//!   Shared by both: `fops.rs` (which driver answers an ioctl or an mmap of an open file, for
//!   both front ends), `vma.rs` (the words of a CPU mapping: the request, the memory that backs
//!   it), `uaccess.rs` (copies to and from the caller), `client.rs` (the caller as the driver
//!   sees it).
//! - **State** (`state/`): what the kernel keeps. `machine` (processes, open files, dma-bufs),
//!   `accounts` (what processes and buffer objects give back to the machine when they go: they
//!   hold it, not the machine), `device`, `process` (the KFD process, its pdds and BOs),
//!   `queue`, `event`, `svm_range`, `render_file` (an open render file's GEM handles, contexts,
//!   BO lists).
//! - **Hardware** (`hw/`): what the GPU does. `backing` (the memory: memfds, user memory), `vm`
//!   (the page tables), `sdma` (the SDMA engines), `queue` (the registers of a mapped queue),
//!   `runlist` (what the driver maps for the engines, and their polling loop), `scheduler`
//!   (doorbells to the SDMA engines), `cp` (the command processor of each GPU: AQL packets,
//!   kernel dispatch on the `kfd-shader` core, compute wave save/restore). It knows no driver:
//!   the driver hands it memory, VM mappings and a runlist of queue registers, and takes its
//!   interrupts.
//! - **Base**: `host.rs` (the host OS), `scratch.rs` (temporary directories named for their
//!   process), `limits.rs` (the gfx9 numbers) and the description of the
//!   machine (`preset.rs`, `asic.rs`, `sysfs.rs`).
//!
//! The state sits above the hardware, not below: the kernel's records point into what the
//! hardware holds (a BO to its memory, a pdd to its VM, a queue to its registers), and the
//! hardware reads only that, as a GPU reads memory, page tables and MQDs, not the driver's
//! bookkeeping.
//!
//! # Threads and locks
//!
//! Besides the caller's thread (in process) or the CUSE reader threads (`kfd-simd`), a machine
//! runs one SDMA engine thread (`kfd-sim-sdma`) and one command processor thread per GPU
//! (`kfd-sim-cp<n>`), each started by the first mmap of a doorbell slice (of that GPU), polling
//! the runlist, and ending with the machine; a command processor's rounds run workgroups on
//! scoped worker threads. Locks are taken in this order only, outermost first (a thread holding
//! one takes only those after it):
//!
//! 1. an engine's or a command processor's preemption lock of a KFD process (the first lock of
//!    a round; `wait_idle` takes them with nothing held), or, in process, a `SimProcess`'s KFD
//!    process;
//! 2. a command processor's `QueueState`, or a command submission's entity lock and then an
//!    SDMA engine's busy lock;
//! 3. one KFD process's state, or one render file's state (never two of these at once);
//! 4. the CUSE server's client records, or its open files (one at a time);
//! 5. the machine's registry;
//! 6. leaves: a device's state and MMIO page, a process's doorbell pages, the mm watch, ...;
//! 7. a GPU VM, then a dispatch round's pinned memory.
//!
//! Handlers copy the caller's memory while holding a state lock of item 3; over CUSE the mmap
//! path therefore waits for those locks at most 2 s (`lock_within`, then `EAGAIN`), or a
//! client thread inside `mmap` would wait on a reader that waits on that client's `mmap_lock`.
//! Poisoned locks are taken as they are: handlers do not panic on client input, and a panic is
//! a bug whose half-done update nothing repairs. The table of every lock, what it guards and
//! what its holder may block on, why the order holds and what a panic does to each thread:
//! `kfd-sim/README.md`, section "Threads and locks"; the whole project's threads:
//! `ARCHITECTURE.md`.

mod asic;
mod client;
pub mod cuse;
mod fops;
pub mod host;
mod hw;
mod inproc;
mod kfd;
mod limits;
pub mod lock_order;
pub mod preset;
mod render;
pub mod scratch;
mod state;
pub mod sysfs;
mod uaccess;
mod vma;

pub use asic::Asic;
pub use host::FileKey;
pub use hw::backing::{Backing, ProcessMemory};
pub use hw::vm::{Vm, VmMapping, VmTarget};
pub use inproc::{DeviceVma, Machine, SimFile, SimPlatform, SimProcess, SIM_KFD_MAJOR};
pub use kfd::criu;
pub use preset::{GpuModel, PciLocation, Preset, PresetError};
pub use state::machine::{Kernel, MachineError};
