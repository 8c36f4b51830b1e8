//! Safe, typed ioctls for `/dev/kfd` and amdgpu render nodes, over a transport seam.
//!
//! Layer: directly above `kfd-sys` (the generated uapi structs); below the plugin engine, the
//! simulator (which dispatches on the same request codes and implements [`Transport`] in
//! process) and the command `amdgpu-cr`. It knows no image format and no topology model.
//!
//! What it exposes:
//! - [`ioctl`]: every request code, declared once next to its argument struct, and the tables
//!   the simulator dispatches on.
//! - [`Transport`]: how a call reaches the driver; [`FdTransport`] is a real file descriptor
//!   (hardware, or the simulator over CUSE), the simulator implements it in process;
//!   [`transport::Forward`] wraps one transport in another.
//! - [`Kfd`]: one method per KFD 1.11 ioctl, with typed arguments and results ([`kfd`]: grouped
//!   by subsystem); [`criu`]: the `CRIU_OP` state machine as a typed API.
//! - [`RenderNode`]: the amdgpu render-node subset that checkpoint/restore uses ([`render`]),
//!   with Linux 6.18's GEM handle listing, mapping info and handle change ([`uapi618`], which
//!   also holds KFD 1.12's dma-buf export: Debian bookworm's headers lack them).
//! - [`sdma`]: SDMA v4 packet encoding and decoding; [`dma`]: host memory the GPU copies into
//!   and out of (USERPTR staging buffers, file windows) and the SDMA queue of a render node.
//! - [`Mapping`]: a CPU mapping of a device file ([`Transport::mmap`]), unmapped on drop.
//! - [`Platform`]: where the devices and the topology are ([`HostPlatform`] on a real machine).
//! - [`cuse`]: the simulator-over-CUSE fd quirk (fds returned by ioctls live in the daemon).
//! - The handle and flag types of the uapi ([`GpuId`], [`AllocFlags`], ...).
//!
//! Every failure is an [`IoctlError`] that names the ioctl, the node and the errno ([`Errno`]).

pub mod criu;
pub mod cuse;
pub mod dma;
mod errno;
mod error;
mod handle;
pub mod ioctl;
pub mod kfd;
mod mapping;
pub mod platform;
mod procfs;
pub mod render;
pub mod sdma;
mod syscall;
pub mod transport;
mod types;
pub mod uapi618;

pub use dma::{FileWindow, HostBuffer, SdmaQueue, UserptrBuffer};
pub use errno::Errno;
pub use error::{IoctlError, Result};
pub use kfd::{Kfd, KFD_PATH};
pub use mapping::{Advice, Mapping, Place, Prot, Share};
pub use platform::{DeviceKind, HostPlatform, Platform};
pub use render::RenderNode;
pub use transport::{FdTransport, Transport};
pub use types::*;
