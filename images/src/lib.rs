//! Image files of the amdgpu CRIU plugin, compatible with the upstream C plugin.
//!
//! Layer: the ground, beside `topology`; it knows neither the driver (`kfd-abi`) nor the
//! topology model. Its users are the plugin engine, which writes and reads the images, and the
//! command `amdgpu-cr` (inspect, check, bench).
//!
//! What it exposes:
//! - [`proto`]: the criu-amdgpu.proto messages (prost, generated, committed).
//! - [`frame`]: the 8-byte length framing and typed message images ([`ImageFile`]:
//!   [`KfdImage`], [`RenderNodeImage`], [`DmabufImage`]) with their errors ([`FrameError`]).
//! - [`pages`]: pages files as streams ([`PagesWriter`], [`PagesReader`]) with our per-chunk
//!   checksums ([`checksum`]); zeros are not written (pages files keep holes) and holes are not
//!   read.
//! - [`names`]: file names exactly as upstream ([`PagesFile`]); [`dir`]: files relative to the
//!   image dir fd, and the page-cache hints the plugin and the bench use; [`readahead`]: the
//!   read-ahead of the pages reader (and of the bench's raw read), sized for the device.
//!
//! See `images/README.md` for the format and the checksum extension.

pub mod checksum;
pub mod dir;
pub mod direct;
pub mod frame;
pub mod names;
pub mod pages;
pub mod proto;
pub mod readahead;
mod sparse;
pub mod wire;

pub use checksum::{ChecksumAlgorithm, DEFAULT_CHUNK_SIZE};
pub use frame::{
    DmabufImage, FrameError, HeaderFault, ImageChecksumFault, ImageFile, Integrity, KfdImage,
    RenderNodeImage,
};
pub use names::PagesFile;
pub use pages::{PagesError, PagesReader, PagesWriter};
