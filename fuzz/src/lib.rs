//! The fuzz targets of the workspace, as plain functions over bytes.
//!
//! Each target's body is a function `fn(&[u8])` that panics when, and only when, the input
//! found a bug; everything else an input can cause (a refused image, an errno) is a normal
//! outcome. The bodies run three ways:
//!
//! - under AFL++ on stable Rust: `fuzz/afl` is a thin wrapper, one binary taking the target's
//!   name (`scripts/fuzz.sh TARGET SECONDS`);
//! - as property tests and seed tests under `cargo nextest` (`fuzz/tests/`), so they cannot rot;
//! - on one file at a time, uninstrumented, to replay a crash: `cargo run -p fuzz -- run TARGET
//!   FILE`.
//!
//! | target | body | input |
//! |---|---|---|
//! | `images` | [`image_files::decode_images`] | a framed image of any message type |
//! | `pages` | [`image_files::pages_reader`] | reader parameters, then a pages file |
//! | `restore` | [`restore::restore`] | a KFD image, restored beside real pages files |
//! | `ioctls` | [`ioctls::ioctls`] | a program of ioctls on the simulator ([`ioctls::Program`]) |
//!
//! [`seeds`] makes each target's starting inputs from the project's own demo and workloads.

mod fds;
pub mod image_files;
pub mod ioctls;
pub mod restore;
pub mod seeds;

/// One fuzz target.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// Its name (`scripts/fuzz.sh NAME`).
    pub name: &'static str,
    /// One line on what it fuzzes.
    pub about: &'static str,
    /// Its body: panics on a finding.
    pub body: fn(&[u8]),
    /// What the body sets up once per process: the AFL++ wrapper runs it before the fork
    /// server starts, so that no input pays for it (or looks like a hang because of it).
    pub init: fn(),
}

fn nothing() {}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "images",
        about: "the image decoders (criu_kfd, render node, dma-buf messages, framed and bare)",
        body: image_files::decode_images,
        init: nothing,
    },
    Target {
        name: "pages",
        about: "the pages-file reader, with and without per-chunk checksums",
        body: image_files::pages_reader,
        init: nothing,
    },
    Target {
        name: "restore",
        about: "a damaged KFD image restored by the plugin engine onto the simulator",
        body: restore::restore,
        init: restore::init,
    },
    Target {
        name: "ioctls",
        about: "random ioctl sequences on the simulator's /dev/kfd and render nodes",
        body: ioctls::ioctls,
        init: nothing,
    },
];

/// The target named `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}
