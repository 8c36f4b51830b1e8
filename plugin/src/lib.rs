//! The amdgpu CRIU plugin: the checkpoint/restore engine (this rlib) and the CRIU ABI shim (the
//! cdylib `amdgpu_plugin.so`). The command `amdgpu-cr` is its own package (`cli/`), so neither
//! the simulator nor the CLI's crates are in the graph of what criu loads.

pub mod copy;
pub mod criu;
pub mod dump;
pub mod hooks;
pub mod inventory;
pub mod kfd_version;
pub mod logger;
pub mod priv_data;
pub mod restore;
pub mod shim;
pub mod shm;
pub mod topology_image;
pub mod vma;
