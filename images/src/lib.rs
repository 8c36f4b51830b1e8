//! Image files of the amdgpu CRIU plugin, compatible with the upstream C plugin.

pub mod proto;
