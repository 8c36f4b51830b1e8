//! The amdgpu CRIU plugin: engine, amdgpu_plugin.so and the amdgpu-cr command.
