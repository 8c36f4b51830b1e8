//! The amdgpu CRIU plugin: the checkpoint/restore engine (this rlib) and the CRIU ABI shim (the
//! cdylib `amdgpu_plugin.so`).
//!
//! Layer: above `kfd-abi` (its only way to the driver, real or simulated), `images` and
//! `topology`; below the command `amdgpu-cr` (`cli/`) and the tests. It depends on no simulator
//! and no CLI crate, so neither is in the graph of what criu loads.
//!
//! What it exposes to its users (the CLI, the simulated node harness, the tests):
//! - [`criu::Engine`] over a [`kfd_abi::Platform`], configured by [`criu::Settings`], which
//!   implements [`hooks::CriuHooks`]: every hook criu calls, in Rust types ([`hooks::Stage`],
//!   [`hooks::HookError`]); [`inventory::Inventory`] is where a dump records the plugin's name.
//! - [`restore::plan`]: the checks a restore makes before it touches the driver (image,
//!   counts, pages files, GPU mapping), for `amdgpu-cr check`; [`restore::restore_bos`].
//! - [`copy::Staging`] and [`copy::Progress`]: the staging memory per GPU, and a byte counter.
//! - [`topology_image`]: the topology recorded in an image, both ways.
//! - [`MIN_VERSION`] and [`supports_cr`]: the KFD interfaces checkpoint/restore runs on, for
//!   `amdgpu-cr probe` to answer as the plugin decides.
//!
//! Everything else is the crate's own: the C ABI (`shim`: the `CR_PLUGIN_DESC` descriptor and
//! the hook trampolines; it makes the process's engine and installs criu's exported functions as
//! `host::CriuHost`, so the engine never names the shim), the dump (`dump`: `/dev/kfd` files, render-node buffers, which
//! buffers the files share), what both phases say of render-node buffers (`gem`), criu's
//! logger, the private-data rewriting for other GPUs. The restore's own parts (render-node
//! buffers, VMAs, the parallel restore) are under [`restore`].

pub mod copy;
pub mod criu;
mod dump;
mod gem;
pub mod hooks;
mod host;
pub mod inventory;
mod kfd_version;
mod logger;
mod priv_data;
pub mod restore;
mod shim;
mod shm;
pub mod topology_image;

pub use kfd_version::{supports_cr, MIN_VERSION};
