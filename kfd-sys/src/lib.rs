//! Raw bindings of the KFD and amdgpu DRM userspace ABI.
//!
//! Layer: the bottom; it depends on nothing. What it exposes is the generated header subset
//! itself (structs, unions and constants, as the C headers name them), chosen by the bindgen
//! allowlist in `scripts/gen-bindings.sh` (the KFD uapi, and the DRM core and amdgpu ioctls a
//! render node answers); `kfd-abi` builds the typed API on it, and the simulator reads and
//! writes the same structs.
//!
//! `bindings.rs` is produced by `scripts/gen-bindings.sh` from `<linux/kfd_ioctl.h>` (KFD ioctl
//! 1.11, as Debian's linux-libc-dev ships it for Linux 6.1) and the subset of
//! `<libdrm/amdgpu_drm.h>` and `<libdrm/drm.h>` that checkpoint/restore and the simulated render
//! node use (the DRM core ioctls a render node answers or refuses, the `AMDGPU_INFO` queries and
//! their result structs). It is never edited by hand; `scripts/gen-bindings.sh --check` verifies
//! in CI that it is current.
//!
//! bindgen's compile-time layout assertions are kept: a struct whose size or field offset differs
//! from the C header does not compile. The request codes (`_IOWR(...)` macros, which bindgen cannot
//! evaluate) are declared next to their argument structs in `kfd-abi`.
//!
//! Function-like macros of the headers are not translated; the `drm_amdgpu_*` unions come with
//! zero-filling `Default` implementations written by bindgen.

#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]
#![allow(
    clippy::undocumented_unsafe_blocks,
    clippy::useless_transmute,
    clippy::missing_safety_doc
)]
#![allow(clippy::ptr_offset_with_cast, clippy::too_many_arguments)]
#![allow(missing_debug_implementations)]

mod bindings {
    // Generated code: see the crate documentation.
    #![allow(unsafe_op_in_unsafe_fn)]
    include!("bindings.rs");
}

pub use bindings::*;
