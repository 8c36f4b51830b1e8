//! Safe, typed ioctls for /dev/kfd and amdgpu render nodes, over a transport seam.
