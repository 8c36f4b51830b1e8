//! The amdgpu CRIU plugin: the checkpoint/restore engine (this rlib), the CRIU ABI shim (the
//! cdylib `amdgpu_plugin.so`) and the `amdgpu-cr` command.

pub mod cli;
pub mod copy;
pub mod criu;
pub mod dump;
pub mod hooks;
pub mod logger;
pub mod restore;
pub mod shim;
pub mod shm;
pub mod topology_image;
