//! Image files of the amdgpu CRIU plugin, compatible with the upstream C plugin.
//!
//! - [`proto`]: the criu-amdgpu.proto messages (prost, generated, committed).
//! - [`frame`]: the 8-byte length framing and typed message images ([`KfdImage`], ...).
//! - [`pages`]: pages files as streams ([`PagesWriter`], [`PagesReader`]) with our per-chunk
//!   checksums ([`checksum`]).
//! - [`names`]: file names exactly as upstream; [`dir`]: files relative to the image dir fd.
//! - [`sparse`]: zeros are not written (pages files keep holes) and holes are not read.
//!
//! See `images/README.md` for the format and the checksum extension.

pub mod checksum;
pub mod dir;
pub mod frame;
#[doc(hidden)]
pub mod fuzz;
pub mod names;
pub mod pages;
pub mod proto;
pub mod sparse;

pub use checksum::{ChecksumAlgorithm, DEFAULT_CHUNK_SIZE};
pub use frame::{
    DmabufImage, FrameError, HeaderFault, ImageChecksumFault, ImageFile, Integrity, KfdImage,
    RenderNodeImage,
};
pub use names::PagesFile;
pub use pages::{PagesError, PagesReader, PagesWriter};
