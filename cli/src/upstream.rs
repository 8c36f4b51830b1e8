//! The upstream C plugin's data path, modelled for `amdgpu-cr bench` as a baseline: the same
//! work through the same simulator on the same buffers, moved the way upstream moves it. This is
//! a measuring instrument of the command, not part of the plugin package.
//!
//! What the model does, per the upstream plugin's `dump_bo_contents` / `restore_bo_contents` and
//! `sdma_copy_bo` (criu 3.17 to 4.x, facts carried over, not its code):
//!
//! - one thread per GPU, nothing overlapped inside it;
//! - one host buffer per GPU thread, as large as the GPU's largest VRAM/GTT BO (or
//!   `KFD_MAX_BUFFER_SIZE` when that is set and smaller), page aligned, registered as a USERPTR
//!   BO and mapped into the thread's render-node VM;
//! - dump, for each BO in bucket order: import its dma-buf, map it; then per buffer-full (the
//!   whole BO unless it is larger than the buffer): COPY_LINEAR packets of at most 2 MiB
//!   (`SDMA_LINEAR_COPY_MAX_SIZE`) from the BO into the buffer in one submission, wait for its
//!   fence, then write the buffer-full to the pages file (`fwrite`, which hands a buffer that
//!   large to one `write(2)`);
//! - restore, the mirror image: read a buffer-full (`fread`: one `read(2)`), then copy it into
//!   the BO in one submission and wait;
//! - the pages file: the 8-byte length header and the contents, no checksums, zeros written as
//!   data.
//!
//! Simplifications that cost upstream nothing measurable: the buffer is registered once per
//! thread instead of once per BO, one SDMA context serves every submission (upstream creates one
//! per submission), and the count field is `bytes - 1` (upstream writes `bytes`, one byte too
//! many; see `kfd_abi::sdma`). Around the data path the model does what upstream does with the
//! driver: PROCESS_INFO, CHECKPOINT and UNPAUSE at dump (as criu's tracer); RESTORE with the
//! image's BOs and private data, then RESUME from criu's side, at restore. It writes no KFD image
//! of its own: a restore reads the plugin's image of the same process (the same buffers, in the
//! same order), and only the pages files come from the model.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use images::{ImageFile, KfdImage, PagesFile};
use kfd_abi::criu::RestoreDevice;
use kfd_abi::render::VmPageFlags;
use kfd_abi::sdma::IbBuilder;
use kfd_abi::{
    AllocFlags, BoHandle, GpuId, IoctlError, Platform, RenderNode, SdmaQueue, UserptrBuffer,
};
use kfd_sim::{SimFile, SimPlatform, SimProcess};

use harness::{ImageIds, RestoredTarget, SimNode};

/// Bytes per COPY_LINEAR packet upstream emits on gfx9 (`SDMA_LINEAR_COPY_MAX_SIZE`).
pub(crate) const PACKET_BYTES: u64 = 2 << 20;
/// Alignment of the VAs the model maps.
const VA_ALIGN: u64 = 2 << 20;
/// How long a submission may take.
const FENCE_TIMEOUT: Duration = Duration::from_secs(60);

/// Why the model failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpstreamError {
    /// A device call failed.
    #[error(transparent)]
    Ioctl(#[from] IoctlError),
    /// A pages file could not be written or read.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The plugin's KFD image, whose buffers the model restores, could not be read.
    #[error("reading the KFD image: {0}")]
    Image(#[from] images::FrameError),
    /// The pages file does not hold what the image says.
    #[error("{}: {what}", path.display())]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// What differs.
        what: String,
    },
    /// An SDMA submission did not finish in time.
    #[error("an SDMA copy did not finish within {}s", FENCE_TIMEOUT.as_secs())]
    Timeout,
    /// The node has no GPU of that id (the model restores onto the same GPU ids only).
    #[error("the image's GPU {0:#x} is not on this node")]
    UnknownGpu(u32),
    /// A per-GPU thread panicked.
    #[error("a per-GPU thread stopped")]
    ThreadGone,
}

/// The host buffer upstream allocates for a GPU: its largest buffer, capped by
/// `KFD_MAX_BUFFER_SIZE` (`max_buffer`) when that is set.
pub(crate) fn bounce_bytes(
    bo_sizes: impl IntoIterator<Item = u64>,
    max_buffer: Option<u64>,
) -> u64 {
    let largest = bo_sizes.into_iter().max().unwrap_or(0);
    max_buffer.map_or(largest, |m| m.min(largest))
}

/// A BO to move: its dma-buf and size.
struct Bo<'fd> {
    dmabuf: BorrowedFd<'fd>,
    size: u64,
}

/// One GPU thread's tools: its render node, an SDMA queue, the host buffer.
struct Thread<'r> {
    render: &'r RenderNode<SimFile>,
    queue: SdmaQueue<'r, SimFile>,
    buffer: UserptrBuffer<'r, SimFile>,
    next_va: u64,
}

impl<'r> Thread<'r> {
    fn new(render: &'r RenderNode<SimFile>, buffer_bytes: u64) -> Result<Self, UpstreamError> {
        let info = render.dev_info()?;
        let mut next_va = info
            .virtual_address_offset
            .max(VA_ALIGN)
            .next_multiple_of(VA_ALIGN);
        let mut alloc = |bytes: u64| {
            let va = next_va;
            next_va += bytes.next_multiple_of(VA_ALIGN);
            va
        };
        // The IB holds one buffer-full of packets (upstream: 28 bytes a packet).
        let packets = usize::try_from(buffer_bytes.div_ceil(PACKET_BYTES))
            .unwrap_or(usize::MAX)
            .max(1);
        let ib_bytes = packets
            .saturating_mul(kfd_abi::sdma::COPY_LINEAR_DWORDS)
            .next_multiple_of(kfd_abi::sdma::IB_ALIGN_DWORDS)
            .saturating_mul(4)
            .next_multiple_of(kfd_abi::dma::PAGE_SIZE);
        let queue = SdmaQueue::new(render, alloc(ib_bytes as u64), ib_bytes)?;
        let len = usize::try_from(buffer_bytes).unwrap_or(usize::MAX).max(1);
        let buffer = UserptrBuffer::new(render, len, alloc(len as u64))?;
        Ok(Self {
            render,
            queue,
            buffer,
            next_va,
        })
    }

    /// Imports and maps a BO; returns its handle and VA.
    fn import(&mut self, bo: &Bo<'_>) -> Result<(BoHandle, u64), UpstreamError> {
        let handle = self.render.prime_fd_to_handle(bo.dmabuf)?;
        let va = self.next_va;
        self.next_va += bo.size.next_multiple_of(VA_ALIGN);
        let flags = VmPageFlags::READABLE | VmPageFlags::WRITEABLE;
        if let Err(e) = self.render.va_map(handle, va, 0, bo.size, flags) {
            let _ = self.render.gem_close(handle);
            return Err(e.into());
        }
        Ok((handle, va))
    }

    fn release(&self, handle: BoHandle, va: u64, size: u64) {
        let _ = self.render.va_unmap(handle, va, 0, size);
        let _ = self.render.gem_close(handle);
    }

    /// One submission copying `len` bytes from `src` to `dst` in upstream's packet size; waits.
    fn copy(&mut self, src: u64, dst: u64, len: u64) -> Result<(), UpstreamError> {
        let mut ib = IbBuilder::new();
        let mut off = 0;
        while off < len {
            let n = (len - off).min(PACKET_BYTES);
            ib.copy_linear(src + off, dst + off, n);
            off += n;
        }
        if self.queue.run(&ib.finish(), FENCE_TIMEOUT)? {
            Ok(())
        } else {
            Err(UpstreamError::Timeout)
        }
    }

    /// Dump: per buffer-full, copy out of the BO, wait, write.
    fn save(&mut self, bo: &Bo<'_>, file: &mut File, path: &Path) -> Result<(), UpstreamError> {
        let (handle, va) = self.import(bo)?;
        let result = (|| {
            let mut done = 0;
            while done < bo.size {
                let n = (bo.size - done).min(self.buffer.len() as u64);
                self.copy(va + done, self.buffer.va(), n)?;
                #[allow(clippy::cast_possible_truncation)] // n <= the buffer's length
                let bytes = &self.buffer.as_slice()[..n as usize];
                file.write_all(bytes).map_err(io_error("writing", path))?;
                done += n;
            }
            Ok(())
        })();
        self.release(handle, va, bo.size);
        result
    }

    /// Restore: per buffer-full, read, copy into the BO, wait.
    fn load(&mut self, bo: &Bo<'_>, file: &mut File, path: &Path) -> Result<(), UpstreamError> {
        let (handle, va) = self.import(bo)?;
        let result = (|| {
            let mut done = 0;
            while done < bo.size {
                let n = (bo.size - done).min(self.buffer.len() as u64);
                #[allow(clippy::cast_possible_truncation)] // n <= the buffer's length
                let bytes = &mut self.buffer.as_mut_slice()[..n as usize];
                file.read_exact(bytes).map_err(io_error("reading", path))?;
                self.copy(self.buffer.va(), va + done, n)?;
                done += n;
            }
            Ok(())
        })();
        self.release(handle, va, bo.size);
        result
    }
}

/// The render minor of GPU `gpu_id` on `node`.
fn minor_of(node: &SimNode, gpu_id: u32) -> Result<u32, UpstreamError> {
    node.machine
        .gpu_ids()
        .into_iter()
        .zip(node.machine.render_minors())
        .find(|&(g, _)| g == gpu_id)
        .map(|(_, m)| m)
        .ok_or(UpstreamError::UnknownGpu(gpu_id))
}

/// Runs `work` for each GPU on a thread of its own; the first error, once all have stopped.
fn per_gpu<'a, I>(
    gpus: I,
    work: impl Fn(u32, Vec<Bo<'a>>) -> Result<(), UpstreamError> + Sync,
) -> Result<(), UpstreamError>
where
    I: IntoIterator<Item = (u32, Vec<Bo<'a>>)>,
{
    std::thread::scope(|s| {
        let work = &work;
        let threads: Vec<_> = gpus
            .into_iter()
            .map(|(gpu, bos)| s.spawn(move || work(gpu, bos)))
            .collect();
        let mut first = Ok(());
        for t in threads {
            let r = t.join().unwrap_or(Err(UpstreamError::ThreadGone));
            if first.is_ok() {
                first = r;
            }
        }
        first
    })
}

/// Checkpoints `process` on `node` the upstream way, through its `/dev/kfd` file `kfd_fd`, into
/// pages files in `dir` (image id `id`), as criu's tracer. Returns the time from PROCESS_INFO to UNPAUSE.
pub(crate) fn dump(
    node: &SimNode,
    (process, kfd_fd): (&SimProcess, BorrowedFd<'_>),
    dir: &Path,
    id: u32,
    max_buffer: Option<u64>,
) -> Result<Duration, UpstreamError> {
    let criu = node.machine.spawn_process();
    criu.ptrace_attach(process);
    let platform = node.platform_of(&criu);
    let result = (|| {
        let start = Instant::now();
        let fd = kfd_fd
            .try_clone_to_owned()
            .map_err(|source| UpstreamError::Io {
                what: "duplicating",
                path: "/dev/kfd".into(),
                source,
            })?;
        let kfd = platform.kfd_from_fd(fd)?;
        let info = kfd.criu_process_info()?;
        let copied = (|| {
            let ck = kfd.criu_checkpoint(&info)?;
            let gpus = ck.devices.iter().map(|d| {
                let bos = ck
                    .bos
                    .iter()
                    .filter(|b| b.gpu_id == d.user_gpu_id && b.alloc_flags.has_contents())
                    .filter_map(|b| {
                        Some(Bo {
                            dmabuf: b.dmabuf.as_ref()?.as_fd(),
                            size: b.size,
                        })
                    })
                    .collect::<Vec<_>>();
                (d.user_gpu_id, bos)
            });
            let actual = |user: u32| {
                ck.devices
                    .iter()
                    .find(|d| d.user_gpu_id == user)
                    .map_or(user, |d| d.actual_gpu_id)
            };
            per_gpu(gpus, |gpu, bos| {
                let path = dir.join(PagesFile::Kfd { id, gpu_id: gpu }.file_name());
                dump_gpu(&platform, node, actual(gpu), &bos, &path, max_buffer)
            })
        })();
        // Upstream unpauses in any case once the device files are dumped.
        let unpaused = kfd.criu_unpause();
        copied?;
        unpaused?;
        Ok(start.elapsed())
    })();
    criu.ptrace_detach(process);
    result
}

/// What turns an I/O error of `what` on `path` into an [`UpstreamError`].
fn io_error<'p>(
    what: &'static str,
    path: &'p Path,
) -> impl FnOnce(std::io::Error) -> UpstreamError + 'p {
    move |source| UpstreamError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

fn dump_gpu(
    platform: &SimPlatform,
    node: &SimNode,
    actual: u32,
    bos: &[Bo<'_>],
    path: &Path,
    max_buffer: Option<u64>,
) -> Result<(), UpstreamError> {
    let total: u64 = bos.iter().map(|b| b.size).sum();
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io_error("creating", path))?;
    file.write_all(&total.to_ne_bytes())
        .map_err(io_error("writing", path))?;
    if bos.is_empty() {
        return Ok(());
    }
    let render = platform.open_render(minor_of(node, actual)?)?;
    let mut thread = Thread::new(
        &render,
        bounce_bytes(bos.iter().map(|b| b.size), max_buffer),
    )?;
    for bo in bos {
        thread.save(bo, &mut file, path)?;
    }
    Ok(())
}

/// Restores, the upstream way, the process of the plugin's KFD image in `image_dir` (ids `ids`)
/// onto `node` (which must have the image's GPU ids), its buffer contents from the model's pages
/// files in `pages_dir`, into a new process under the image's pid; criu's side resumes it.
/// Returns the restored process and the time from reading the image to RESUME.
pub(crate) fn restore(
    node: &SimNode,
    image_dir: &Path,
    pages_dir: &Path,
    ids: &ImageIds,
    max_buffer: Option<u64>,
) -> Result<(RestoredTarget, Duration), UpstreamError> {
    let process = node.machine.spawn_process_as(ids.pid);
    let platform = node.platform_of(&process);
    let start = Instant::now();
    let dirf = File::open(image_dir).map_err(io_error("opening", image_dir))?;
    let msg = KfdImage::read(dirf.as_fd(), ids.kfd)?;
    let gpus: Vec<u32> = msg
        .device_entries
        .iter()
        .filter(|d| d.gpu_id != 0)
        .map(|d| d.gpu_id)
        .collect();
    let kfd = platform.open_kfd()?;
    let mut renders = Vec::new();
    for &gpu in &gpus {
        renders.push(platform.open_render(minor_of(node, gpu)?)?);
    }
    let devices = gpus
        .iter()
        .zip(&renders)
        .map(|(&gpu, render)| {
            let id = GpuId::new(gpu).ok_or(UpstreamError::UnknownGpu(gpu))?;
            Ok(RestoreDevice {
                user_gpu_id: id,
                actual_gpu_id: id,
                drm: render.as_fd(),
            })
        })
        .collect::<Result<Vec<_>, UpstreamError>>()?;
    let bos = amdgpu_plugin::restore::restore_bos(&msg.bo_entries);
    let restored = kfd.criu_restore(&devices, &bos, &msg.priv_data, msg.num_of_objects)?;
    drop(devices);
    let per = gpus.iter().map(|&gpu| {
        let bos = msg
            .bo_entries
            .iter()
            .zip(&restored)
            .filter(|(b, _)| {
                b.gpu_id == gpu && AllocFlags::from_bits_retain(b.alloc_flags).has_contents()
            })
            .filter_map(|(b, r)| {
                Some(Bo {
                    dmabuf: r.dmabuf.as_ref()?.as_fd(),
                    size: b.size,
                })
            })
            .collect::<Vec<_>>();
        (gpu, bos)
    });
    per_gpu(per, |gpu, bos| {
        let path = pages_dir.join(
            PagesFile::Kfd {
                id: ids.kfd,
                gpu_id: gpu,
            }
            .file_name(),
        );
        restore_gpu(&platform, node, gpu, &bos, &path, max_buffer)
    })?;
    // criu's master process resumes the restored task.
    let criu = node.machine.spawn_process();
    node.platform_of(&criu).open_kfd()?.criu_resume(ids.pid)?;
    let elapsed = start.elapsed();
    Ok((
        RestoredTarget {
            process,
            kfd,
            renders,
            mapping: Vec::new(),
        },
        elapsed,
    ))
}

fn restore_gpu(
    platform: &SimPlatform,
    node: &SimNode,
    gpu: u32,
    bos: &[Bo<'_>],
    path: &Path,
    max_buffer: Option<u64>,
) -> Result<(), UpstreamError> {
    let total: u64 = bos.iter().map(|b| b.size).sum();
    let mut file = File::open(path).map_err(io_error("opening", path))?;
    let mut header = [0u8; 8];
    file.read_exact(&mut header)
        .map_err(io_error("reading", path))?;
    let announced = u64::from_ne_bytes(header);
    if announced != total {
        return Err(UpstreamError::Mismatch {
            path: path.to_owned(),
            what: format!("{announced} bytes announced, the image's buffers hold {total}"),
        });
    }
    if bos.is_empty() {
        return Ok(());
    }
    let render = platform.open_render(minor_of(node, gpu)?)?;
    let mut thread = Thread::new(
        &render,
        bounce_bytes(bos.iter().map(|b| b.size), max_buffer),
    )?;
    for bo in bos {
        thread.load(bo, &mut file, path)?;
    }
    Ok(())
}
