//! The `restore` target: a possibly damaged `amdgpu-kfd-<id>.img` restored through the plugin
//! engine onto the in-process simulator, in criu's order (RESTORE_EXT_FILE for `/dev/kfd` and
//! each render node in the restored process, then RESUME_DEVICES_LATE from criu's side).
//!
//! The input is the bytes of the KFD image. Everything else comes from a real checkpoint made
//! once per process by the simulated node of the `harness` crate ([`Fixture`]): the pages files and render-node
//! images beside the image, the criu file ids, and a destination node whose GPUs have other ids
//! (so every restore maps GPUs). The unmodified image (the seed) restores and verifies.
//!
//! Checks, after every input:
//! - no panic;
//! - when the restore fails: no KFD process is left for the restored pid, the destination's
//!   VRAM use is back to what it was, and no fd was left open in this process (the simulated
//!   process's fds are this process's);
//! - when it succeeds: the same once the restored process's files are closed; and the
//!   unmodified image restores every byte, queue and event.
//!
//! libhsakmt's shared memory file, which a restore recreates when the image records one, goes
//! to a temporary directory instead of `/dev/shm`, and is removed after each input.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use amdgpu_plugin::copy::Staging;
use amdgpu_plugin::criu::Settings;
use harness::workload::{Manifest, Spec};
use kfd_abi::{DeviceKind, IoctlError, Kfd, Platform, RenderNode};
use kfd_sim::preset::Preset;
use kfd_sim::{SimFile, SimPlatform};

use crate::fds::FdTable;
use harness::{self, ImageIds, SimNode};

/// Why the fixture could not be made.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    /// The checkpoint of the model workload failed.
    #[error("checkpointing the demo workload: {0}")]
    Checkpoint(#[from] harness::NodeError),
    /// A file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

fn io_err(what: &'static str) -> impl FnOnce(io::Error) -> FixtureError {
    move |source| FixtureError::Io { what, source }
}

/// What an input broke.
#[derive(Debug, thiserror::Error)]
pub enum Violation {
    /// Files were left open in the (restored) process.
    #[error("{count} fd(s) left open after {when}: {fds}", count = .fds.len())]
    FdLeak {
        /// After what.
        when: &'static str,
        /// The fds and what they are open on.
        fds: FdTable,
    },
    /// The restored pid still has a KFD process.
    #[error("a KFD process is left for pid {pid} after {when}")]
    KfdProcessLeft {
        /// The restored pid.
        pid: u32,
        /// After what.
        when: &'static str,
    },
    /// VRAM stayed allocated.
    #[error("VRAM of GPU {gpu_id:#x} is {now:?} bytes after {when}, was {before:?}")]
    VramLeft {
        /// The destination GPU.
        gpu_id: u32,
        /// Before the restore.
        before: Option<u64>,
        /// After it.
        now: Option<u64>,
        /// After what.
        when: &'static str,
    },
    /// The unmodified image did not restore, or restored something else.
    #[error("the demo's own image did not restore faithfully: {0}")]
    SeedBroken(String),
    /// The harness itself failed (not a finding about the code under test).
    #[error("fuzz harness: {0}")]
    Harness(String),
}

/// How a restore ended, when no check failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The image restored.
    Restored,
    /// The plugin refused it or the driver failed it; the message says why.
    Refused(String),
}

/// The workload checkpointed for the fixture: small, so that each restore is quick, and with
/// every kind of object (VRAM and GTT buffers, queues, signal events) on two GPUs.
pub fn spec() -> Spec {
    Spec::new(0xf022, vec![64 << 10, 4 << 10], vec![4 << 10])
}

/// The node the fixture dumps on; the restore runs on its remapped variant.
pub const PRESET: &str = "mi210x2";

fn settings() -> Settings {
    let mut s = Settings::from_lookup(|_| None, false);
    s.staging = Staging {
        buffer_size: 64 << 10,
        buffers: 2,
    };
    s
}

/// A real checkpoint of the demo workload, and the node to restore it on.
#[derive(Debug)]
pub struct Fixture {
    dir: tempfile::TempDir,
    ids: ImageIds,
    image: Vec<u8>,
    manifest: Manifest,
    node: SimNode,
    shm: tempfile::TempDir,
    settings: Settings,
}

impl Fixture {
    /// Checkpoints the demo workload ([`spec`] on [`PRESET`]) into a temporary directory and
    /// builds the destination node.
    pub fn new() -> Result<Self, FixtureError> {
        let preset = Preset::by_name(PRESET).map_err(harness::NodeError::from)?;
        let settings = settings();
        let dir = tempfile::Builder::new()
            .prefix("fuzz-restore-")
            .tempdir()
            .map_err(io_err("creating the image directory"))?;
        let (ids, manifest) = {
            let src = SimNode::new(&preset)?;
            let target = harness::start_target(&src, &spec())?;
            let manifest = target.workload.manifest().clone();
            let (ids, _) = harness::checkpoint(&src, &target, dir.path(), &settings)?;
            (ids, manifest)
        };
        let image = std::fs::read(dir.path().join(images::names::kfd_image(ids.kfd)))
            .map_err(io_err("reading the KFD image"))?;
        let node = SimNode::new(&harness::remapped_variant(&preset))?;
        let shm = tempfile::Builder::new()
            .prefix("fuzz-shm-")
            .tempdir()
            .map_err(io_err("creating the shared-memory directory"))?;
        Ok(Self {
            dir,
            ids,
            image,
            manifest,
            node,
            shm,
            settings,
        })
    }

    /// The one fixture of this process, made on first use.
    ///
    /// # Panics
    /// When it cannot be made (the harness cannot run at all).
    pub fn shared() -> &'static Fixture {
        static FIXTURE: OnceLock<Fixture> = OnceLock::new();
        FIXTURE.get_or_init(|| match Fixture::new() {
            Ok(f) => f,
            Err(e) => panic!("fuzz harness: {e}"),
        })
    }

    /// The KFD image as the dump wrote it: the seed of the target.
    pub fn image(&self) -> &[u8] {
        &self.image
    }

    /// The image directory (pages files, render-node images, and the last input's KFD image).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The file name of the KFD image that inputs replace.
    pub fn image_name(&self) -> String {
        images::names::kfd_image(self.ids.kfd)
    }

    fn shm_path(&self) -> PathBuf {
        self.shm.path().join("hsakmt_shared_mem")
    }

    /// Restores `image` in place of the KFD image and checks what it left behind.
    pub fn restore(&self, image: &[u8]) -> Result<Outcome, Violation> {
        let harness = |what: &str, e: io::Error| Violation::Harness(format!("{what}: {e}"));
        std::fs::write(self.dir().join(self.image_name()), image)
            .map_err(|e| harness("writing the KFD image", e))?;
        let machine = &self.node.machine;
        let gpus = machine.gpu_ids();
        let vram: Vec<Option<u64>> = gpus.iter().map(|&g| machine.vram_used(g)).collect();
        let fds = FdTable::snapshot().map_err(|e| harness("listing fds", e))?;
        let pid = self.ids.pid;

        let shm = self.shm_path();
        let wrap = |inner: SimPlatform| ShmElsewhere {
            inner,
            shm: shm.clone(),
        };
        let result = harness::restore_with(
            &self.node,
            &wrap,
            machine.spawn_process_as(pid),
            self.dir(),
            &self.ids,
            &self.settings,
        );
        let (outcome, when) = match result {
            Ok((restored, _)) => {
                if image == self.image.as_slice() {
                    restored
                        .verify(&self.manifest)
                        .map_err(|e| Violation::SeedBroken(e.to_string()))?;
                }
                // The restored process ends: its files close.
                drop(restored);
                (Outcome::Restored, "a restore, once its files were closed")
            }
            Err(e) => {
                if image == self.image.as_slice() {
                    return Err(Violation::SeedBroken(e.to_string()));
                }
                (Outcome::Refused(e.to_string()), "a failed restore")
            }
        };
        match std::fs::remove_file(&shm) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(harness("removing the shared memory file", e)),
        }

        let leaked = FdTable::snapshot()
            .map_err(|e| harness("listing fds", e))?
            .opened_since(&fds);
        if !leaked.is_empty() {
            return Err(Violation::FdLeak { when, fds: leaked });
        }
        if machine.has_kfd_process(pid) {
            return Err(Violation::KfdProcessLeft { pid, when });
        }
        for (&gpu_id, &before) in gpus.iter().zip(&vram) {
            let now = machine.vram_used(gpu_id);
            if now != before {
                return Err(Violation::VramLeft {
                    gpu_id,
                    before,
                    now,
                    when,
                });
            }
        }
        Ok(outcome)
    }
}

/// Makes the process's fixture (the `restore` target's `init`).
pub fn init() {
    Fixture::shared();
}

/// The body of the `restore` target.
///
/// # Panics
/// On any [`Violation`].
pub fn restore(data: &[u8]) {
    if let Err(v) = Fixture::shared().restore(data) {
        panic!("{v}");
    }
}

/// The simulator's platform with libhsakmt's shared memory file somewhere harmless.
#[derive(Debug)]
struct ShmElsewhere {
    inner: SimPlatform,
    shm: PathBuf,
}

impl Platform for ShmElsewhere {
    type Device = SimFile;

    fn open_kfd(&self) -> Result<Kfd<SimFile>, IoctlError> {
        self.inner.open_kfd()
    }

    fn open_render(&self, minor: u32) -> Result<RenderNode<SimFile>, IoctlError> {
        self.inner.open_render(minor)
    }

    fn kfd_from_fd(&self, fd: OwnedFd) -> Result<Kfd<SimFile>, IoctlError> {
        self.inner.kfd_from_fd(fd)
    }

    fn render_from_fd(&self, fd: OwnedFd) -> Result<RenderNode<SimFile>, IoctlError> {
        self.inner.render_from_fd(fd)
    }

    fn identify(&self, fd: BorrowedFd<'_>) -> io::Result<DeviceKind> {
        self.inner.identify(fd)
    }

    fn identify_rdev(&self, rdev: u64) -> DeviceKind {
        self.inner.identify_rdev(rdev)
    }

    fn topology_root(&self) -> PathBuf {
        Platform::topology_root(&self.inner)
    }

    fn process_id(&self) -> u32 {
        Platform::process_id(&self.inner)
    }

    fn fd_of_process(
        &self,
        pid: u32,
        raw: std::os::fd::RawFd,
    ) -> std::io::Result<std::os::fd::OwnedFd> {
        Platform::fd_of_process(&self.inner, pid, raw)
    }

    fn parent_of(&self, pid: u32) -> Option<u32> {
        Platform::parent_of(&self.inner, pid)
    }

    fn hsakmt_shm_path(&self) -> PathBuf {
        self.shm.clone()
    }
}

/// `image` (a framed `criu_kfd`) with one byte more of private data than the driver's records
/// take: the driver's RESTORE consumes every record, BOs included, and then refuses the count.
/// `None` when `image` does not decode.
pub fn with_trailing_priv_byte(image: &[u8]) -> Option<Vec<u8>> {
    let mut msg: images::proto::CriuKfd =
        images::frame::decode_framed(image, "kfd image", "criu_kfd", u64::MAX).ok()?;
    msg.priv_data.push(0);
    Some(images::frame::encode_framed(&msg))
}
