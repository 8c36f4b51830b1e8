//! Safe, typed ioctls for `/dev/kfd` and amdgpu render nodes, over a transport seam.
//!
//! - [`ioctl`]: every request code, declared once next to its argument struct.
//! - [`Transport`]: how a call reaches the driver; [`FdTransport`] is a real file descriptor
//!   (hardware, or the simulator over CUSE), the simulator implements it in process.
//! - [`Kfd`]: one method per KFD 1.11 ioctl, with typed arguments and results; [`criu`]: the
//!   `CRIU_OP` state machine as a typed API.
//! - [`RenderNode`]: the amdgpu render-node subset that checkpoint/restore uses.
//! - [`sdma`]: SDMA v4 packet encoding and decoding.
//! - [`Mapping`]: a CPU mapping of a device file ([`Transport::mmap`]), unmapped on drop.
//! - [`cuse`]: the simulator-over-CUSE fd quirk (fds returned by ioctls live in the daemon).
//!
//! Every failure is an [`IoctlError`] that names the ioctl, the node and the errno.

pub mod criu;
pub mod cuse;
pub mod dma;
pub mod errno;
pub mod error;
mod handle;
pub mod ioctl;
pub mod kfd;
pub mod mapping;
pub mod platform;
pub mod render;
pub mod sdma;
pub mod transport;
pub mod types;

pub use dma::{FileWindow, HostBuffer, SdmaQueue, UserptrBuffer};
pub use errno::Errno;
pub use error::{IoctlError, Result};
pub use kfd::{Kfd, KFD_PATH};
pub use mapping::{Advice, Mapping, Prot, Share};
pub use platform::{DeviceKind, HostPlatform, Platform};
pub use render::{render_node_path, RenderNode};
pub use transport::{FdTransport, Transport};
pub use types::*;
