//! A simulated amdkfd + amdgpu render node for gfx9, in process and over CUSE.
