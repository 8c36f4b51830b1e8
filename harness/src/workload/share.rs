//! A render-node buffer shared between two processes through a dma-buf, as multi-process
//! inference and RCCL share GPU memory: one process creates it on its render node and exports
//! it, the other imports the dma-buf into its own render-node file, each maps it at a VA of its
//! own VM and for the CPU, and what one writes the other reads. Each side is a [`SharedSide`]
//! over that process's render-node file; after a restore the same sides are found again at the
//! same GEM handle ([`SharedSide::at`]), which is what a checkpoint on Linux 6.18 keeps.
//!
//! The two sides take turns ([`Writer`]): in round `r` one of them fills the whole buffer with
//! the [`SharedContents`] of `(seed, r, writer)` through its CPU mapping and the other checks it
//! through its own ([`fill_mapping`], [`check_mapping`]), so each side can tell what the buffer
//! must hold without a copy of it.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use kfd_abi::render::{GemDomain, VmPageFlags};
use kfd_abi::{BoHandle, Mapping, Prot, RenderNode, Share, Transport};

use super::manifest::WorkloadError;
use super::pattern::pattern;

/// Which side of a shared buffer wrote its contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writer {
    /// The process that created the buffer and exported it.
    Exporter,
    /// The process that imported its dma-buf.
    Importer,
}

impl Writer {
    /// The writer of round `round`: the exporter in odd rounds, the importer in even ones.
    pub fn of_round(round: u64) -> Self {
        if round % 2 == 1 {
            Self::Exporter
        } else {
            Self::Importer
        }
    }

    /// Its one-letter name (`e` or `i`), as the workload's processes tell each other.
    pub fn letter(self) -> char {
        match self {
            Self::Exporter => 'e',
            Self::Importer => 'i',
        }
    }

    /// The writer named by `letter`.
    pub fn from_letter(letter: &str) -> Option<Self> {
        match letter {
            "e" => Some(Self::Exporter),
            "i" => Some(Self::Importer),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Exporter => "exporter",
            Self::Importer => "importer",
        }
    }
}

/// The contents `writer` gives a shared buffer in `round` of the workload seeded with `seed`: a
/// pure function of `(seed, round, writer, position)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedContents {
    /// The workload's seed.
    pub seed: u64,
    /// The round (the first is 1).
    pub round: u64,
    /// The side that writes it.
    pub writer: Writer,
}

impl SharedContents {
    /// Round `round`'s contents as its writer ([`Writer::of_round`]) gives them.
    pub fn of_round(seed: u64, round: u64) -> Self {
        Self {
            seed,
            round,
            writer: Writer::of_round(round),
        }
    }

    /// Fills `out` with the bytes at `offset`.
    pub fn bytes_at(&self, offset: u64, out: &mut [u8]) {
        let side = match self.writer {
            Writer::Exporter => 0x5e,
            Writer::Importer => 0x51,
        };
        #[allow(clippy::cast_possible_truncation)] // the round's low bits select the stream
        let index = self.round as u32;
        pattern(self.seed ^ (self.round >> 32), side, index, offset, out);
    }
}

/// Piece size of [`fill_mapping`] and [`check_mapping`].
const PIECE: usize = 64 << 10;

fn short(map: &Mapping, size: usize) -> WorkloadError {
    WorkloadError::Mismatch(format!(
        "the shared buffer's mapping of {} bytes is shorter than {size}",
        map.len()
    ))
}

/// Writes `contents` into the first `size` bytes of `map` (a CPU mapping of the shared buffer).
///
/// # Errors
/// [`WorkloadError::Mismatch`] when the mapping is shorter than `size`.
pub fn fill_mapping(
    map: &Mapping,
    size: usize,
    contents: SharedContents,
) -> Result<(), WorkloadError> {
    let mut buf = vec![0u8; PIECE.min(size)];
    let mut at = 0;
    while at < size {
        let n = PIECE.min(size - at);
        contents.bytes_at(at as u64, &mut buf[..n]);
        if !map.write(at, &buf[..n]) {
            return Err(short(map, size));
        }
        at += n;
    }
    Ok(())
}

/// Checks that the first `size` bytes of `map` hold `contents`.
///
/// # Errors
/// [`WorkloadError::Mismatch`] naming the first byte that differs.
pub fn check_mapping(
    map: &Mapping,
    size: usize,
    contents: SharedContents,
) -> Result<(), WorkloadError> {
    let SharedContents { round, writer, .. } = contents;
    let mut want = vec![0u8; PIECE.min(size)];
    let mut found = vec![0u8; PIECE.min(size)];
    let mut at = 0;
    while at < size {
        let n = PIECE.min(size - at);
        contents.bytes_at(at as u64, &mut want[..n]);
        if !map.read(at, &mut found[..n]) {
            return Err(short(map, size));
        }
        if let Some(i) = (0..n).find(|&i| want[i] != found[i]) {
            return Err(WorkloadError::Mismatch(format!(
                "shared buffer byte {:#x} is {:#04x}, expected {:#04x} (round {round} as the {} \
                 wrote it)",
                at + i,
                found[i],
                want[i],
                writer.name()
            )));
        }
        at += n;
    }
    Ok(())
}

/// A GPU VA for shared buffers, far from the workload's own allocations (which grow from
/// 64 GiB) and from its staging VAs.
pub const SHARED_VA: u64 = 0x100_0000_0000;

/// One process's view of a shared buffer: its GEM handle in that process's render-node file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedSide {
    handle: BoHandle,
    size: u64,
}

fn rw() -> VmPageFlags {
    VmPageFlags::READABLE | VmPageFlags::WRITEABLE
}

impl SharedSide {
    /// The exporter: a VRAM buffer of `size` bytes the CPU can map, created on `render`, mapped
    /// at `va` in its VM; returns it with its dma-buf (to hand to the other process).
    ///
    /// # Errors
    /// A failed render-node call.
    pub fn create<T: Transport>(
        render: &RenderNode<T>,
        size: u64,
        va: u64,
    ) -> Result<(Self, OwnedFd), WorkloadError> {
        let cpu = u64::from(kfd_sys::AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED);
        let handle = render.gem_create(size, 4096, GemDomain::VRAM, cpu)?;
        render.va_map(handle, va, 0, size, rw())?;
        let dmabuf = render.prime_handle_to_fd(handle)?;
        Ok((Self { handle, size }, dmabuf))
    }

    /// The importer: the buffer of `dmabuf` (`size` bytes) imported into `render` and mapped at
    /// `va` in its VM.
    ///
    /// # Errors
    /// A failed render-node call.
    pub fn import<T: Transport>(
        render: &RenderNode<T>,
        dmabuf: BorrowedFd<'_>,
        size: u64,
        va: u64,
    ) -> Result<Self, WorkloadError> {
        let handle = render.prime_fd_to_handle(dmabuf)?;
        render.va_map(handle, va, 0, size, rw())?;
        Ok(Self { handle, size })
    }

    /// The side at GEM handle `handle` of a render-node file (after a restore: the handle it had).
    pub fn at(handle: BoHandle, size: u64) -> Self {
        Self { handle, size }
    }

    /// Its GEM handle.
    pub fn handle(&self) -> BoHandle {
        self.handle
    }

    /// Its size.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Writes `bytes` at `offset` through a CPU mapping of the buffer from `render` (this side's
    /// render-node file).
    ///
    /// # Errors
    /// A failed render-node call; [`WorkloadError::Mismatch`] for a range outside the buffer.
    pub fn write<T: Transport>(
        &self,
        render: &RenderNode<T>,
        offset: u64,
        bytes: &[u8],
    ) -> Result<(), WorkloadError> {
        let map = self.map(render)?;
        let at = self.range(offset, bytes.len())?;
        if map.write(at, bytes) {
            Ok(())
        } else {
            Err(self.outside(offset, bytes.len()))
        }
    }

    /// Reads `len` bytes at `offset` through a CPU mapping of the buffer from `render`.
    ///
    /// # Errors
    /// As [`SharedSide::write`].
    pub fn read<T: Transport>(
        &self,
        render: &RenderNode<T>,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, WorkloadError> {
        let map = self.map(render)?;
        let at = self.range(offset, len)?;
        let mut out = vec![0u8; len];
        if map.read(at, &mut out) {
            Ok(out)
        } else {
            Err(self.outside(offset, len))
        }
    }

    /// Fills the whole buffer with `contents`, through a CPU mapping from `render` (this side's
    /// render-node file).
    ///
    /// # Errors
    /// A failed render-node call.
    pub fn fill<T: Transport>(
        &self,
        render: &RenderNode<T>,
        contents: SharedContents,
    ) -> Result<(), WorkloadError> {
        fill_mapping(&self.map(render)?, self.len()?, contents)
    }

    /// Checks the whole buffer against `contents`, through a CPU mapping from `render`.
    ///
    /// # Errors
    /// A failed render-node call; [`WorkloadError::Mismatch`] naming the first byte that
    /// differs.
    pub fn check<T: Transport>(
        &self,
        render: &RenderNode<T>,
        contents: SharedContents,
    ) -> Result<(), WorkloadError> {
        check_mapping(&self.map(render)?, self.len()?, contents)
    }

    fn len(&self) -> Result<usize, WorkloadError> {
        usize::try_from(self.size).map_err(|_| self.outside(0, usize::MAX))
    }

    /// A CPU mapping of the whole buffer from `render` (this side's render-node file), which
    /// the caller may keep: a process that keeps it holds a device mapping of the render node
    /// across a checkpoint.
    ///
    /// # Errors
    /// A failed render-node call.
    pub fn cpu_map<T: Transport>(&self, render: &RenderNode<T>) -> Result<Mapping, WorkloadError> {
        self.map(render)
    }

    fn map<T: Transport>(&self, render: &RenderNode<T>) -> Result<kfd_abi::Mapping, WorkloadError> {
        let offset = render.gem_mmap_offset(self.handle)?;
        let len = self.len()?;
        Ok(render.map_bo(offset, len, Prot::RW, Share::Shared)?)
    }

    fn range(&self, offset: u64, len: usize) -> Result<usize, WorkloadError> {
        let end = offset.checked_add(len as u64);
        match (usize::try_from(offset), end) {
            (Ok(at), Some(end)) if end <= self.size => Ok(at),
            _ => Err(self.outside(offset, len)),
        }
    }

    fn outside(&self, offset: u64, len: usize) -> WorkloadError {
        WorkloadError::Mismatch(format!(
            "{len} bytes at {offset:#x} are outside the shared buffer at GEM handle {} ({} bytes)",
            self.handle, self.size
        ))
    }
}

/// The importing process's side of a shared buffer as the workload's child keeps it: the
/// buffer imported into its own render-node file at the exporter's GEM handle number (upstream's
/// image format names a shared buffer by one number in every process), mapped in its VM at
/// [`SHARED_VA`] and for the CPU, and the dma-buf fd if it keeps it. It answers the exporter's
/// one-line commands ([`Importer::answer`]).
#[derive(Debug)]
pub struct Importer<T: Transport> {
    render: RenderNode<T>,
    side: SharedSide,
    map: Mapping,
    dmabuf: Option<OwnedFd>,
    seed: u64,
    fillers: usize,
}

impl<T: Transport> Importer<T> {
    /// Imports `dmabuf` (`size` bytes) into `render`, a render-node file of this process with
    /// nothing in it yet, at GEM handle `handle` (the exporter's): first it creates buffers of
    /// its own (64 KiB of GTT each, never mapped) at the handles below it, as a process that
    /// allocated before it imported. Keeps the dma-buf fd when `keep_fd`, else closes it (the
    /// process then holds the buffer through its handle only).
    ///
    /// # Errors
    /// A failed render-node call; [`WorkloadError::Mismatch`] when the import does not land at
    /// `handle` (the file had buffers already).
    pub fn import(
        render: RenderNode<T>,
        dmabuf: OwnedFd,
        handle: BoHandle,
        size: u64,
        seed: u64,
        keep_fd: bool,
    ) -> Result<Self, WorkloadError> {
        let mut fillers = 0;
        let mut last = 0;
        while last + 1 < handle.get() {
            last = render.gem_create(64 << 10, 0, GemDomain::GTT, 0)?.get();
            fillers += 1;
        }
        let side = SharedSide::import(&render, dmabuf.as_fd(), size, SHARED_VA)?;
        if side.handle() != handle {
            return Err(WorkloadError::Mismatch(format!(
                "the import is GEM handle {} in the importer's render-node file, not the \
                 exporter's {handle}",
                side.handle()
            )));
        }
        let map = side.cpu_map(&render)?;
        Ok(Self {
            render,
            side,
            map,
            dmabuf: keep_fd.then_some(dmabuf),
            seed,
            fillers,
        })
    }

    /// The side after a restore: the import at GEM handle `handle` of the restored `render`,
    /// mapped for the CPU anew, and the restored dma-buf fd if it kept one (in process; criu
    /// restores the process's own mapping).
    ///
    /// # Errors
    /// A failed render-node call.
    pub fn restored(
        render: RenderNode<T>,
        dmabuf: Option<OwnedFd>,
        handle: BoHandle,
        size: u64,
        seed: u64,
    ) -> Result<Self, WorkloadError> {
        let side = SharedSide::at(handle, size);
        let map = side.cpu_map(&render)?;
        Ok(Self {
            render,
            side,
            map,
            dmabuf,
            seed,
            fillers: 0,
        })
    }

    /// Its side of the buffer.
    pub fn side(&self) -> SharedSide {
        self.side
    }

    /// How many buffers of its own it created below the import.
    pub fn fillers(&self) -> usize {
        self.fillers
    }

    /// The dma-buf fd it keeps, if it does.
    pub fn dmabuf(&self) -> Option<BorrowedFd<'_>> {
        self.dmabuf.as_ref().map(AsFd::as_fd)
    }

    /// Its render-node file.
    pub fn render(&self) -> &RenderNode<T> {
        &self.render
    }

    fn size(&self) -> Result<usize, WorkloadError> {
        self.side.len()
    }

    /// What `writer` puts in the buffer in `round` of this workload.
    fn contents(&self, round: u64, writer: Writer) -> SharedContents {
        SharedContents {
            seed: self.seed,
            round,
            writer,
        }
    }

    /// Checks, besides the contents of round `round` by `writer` through its mapping, that the
    /// buffer is still its import: the handle is in its render-node file, mapped at
    /// [`SHARED_VA`] in its VM (where the kernel can say: Linux 6.18), and a kept dma-buf fd
    /// resolves to that handle. Returns what it checked.
    fn verify(&self, round: u64, writer: Writer) -> Result<String, WorkloadError> {
        check_mapping(&self.map, self.size()?, self.contents(round, writer))?;
        let h = self.side.handle();
        self.render.gem_mmap_offset(h).map_err(|e| {
            WorkloadError::Mismatch(format!(
                "GEM handle {h} is not in its render-node file: {e}"
            ))
        })?;
        let va = match self.render.gem_mapping_info(h) {
            Ok(maps) if maps.iter().any(|m| m.va == SHARED_VA) => "ok",
            Ok(maps) => {
                return Err(WorkloadError::Mismatch(format!(
                    "GEM handle {h} is not mapped at {SHARED_VA:#x} in its VM (mappings at {:x?})",
                    maps.iter().map(|m| m.va).collect::<Vec<_>>()
                )))
            }
            Err(e) if e.errno() == Some(kfd_abi::Errno::EINVAL) => "unknown",
            Err(e) => return Err(e.into()),
        };
        let fd = match &self.dmabuf {
            Some(fd) => {
                let of = self.render.prime_fd_to_handle(fd.as_fd())?;
                if of != h {
                    return Err(WorkloadError::Mismatch(format!(
                        "its dma-buf fd is GEM handle {of} in its render-node file, not {h}"
                    )));
                }
                "kept"
            }
            None => "closed",
        };
        Ok(format!("handle={} va={va} fd={fd}", h.get()))
    }

    /// Answers one command of the exporter: `write R` (fill the buffer with round R's contents
    /// as the importer writes them), `check R W` (check round R as writer W, `e` or `i`, wrote
    /// it), `verify R W` (check that, and that the buffer is still its import). The answer is
    /// `ok[ what]` or `err <why>`, one line without its newline.
    pub fn answer(&self, command: &str) -> String {
        let words: Vec<&str> = command.split_whitespace().collect();
        let round = |i: usize| words.get(i).and_then(|w| w.parse::<u64>().ok());
        let writer = |i: usize| words.get(i).and_then(|w| Writer::from_letter(w));
        let done = match (words.first().copied(), round(1), writer(2)) {
            (Some("write"), Some(r), _) => self
                .size()
                .and_then(|n| fill_mapping(&self.map, n, self.contents(r, Writer::Importer)))
                .map(|()| String::new()),
            (Some("check"), Some(r), Some(w)) => self
                .size()
                .and_then(|n| check_mapping(&self.map, n, self.contents(r, w)))
                .map(|()| String::new()),
            (Some("verify"), Some(r), Some(w)) => self.verify(r, w).map(|s| format!(" {s}")),
            _ => return format!("err no such command: {command:?}"),
        };
        match done {
            Ok(what) => format!("ok{what}"),
            Err(e) => format!("err {e}"),
        }
    }
}
