//! How the workload moves data on one GPU ([`Mover`]): a staging buffer in the GPU's VM and a way
//! to run SDMA packets, over which buffers are filled with their pattern and checked against it.
//! [`GpuDma`] is the render node's command submission ([`Dma::Cs`](super::Dma::Cs), and every
//! verification from outside the process); the user-mode queue is in [`super::user_queue`].

use std::time::Duration;

use kfd_abi::sdma::IbBuilder;
use kfd_abi::{RenderNode, SdmaQueue, Transport, UserptrBuffer};

use super::manifest::{Buffer, Spec, WorkloadError};
use super::pattern::pattern;

/// Bytes of the staging buffer the workload fills and reads buffers through.
const STAGING: usize = 4 << 20;
/// Bytes of its indirect buffer.
const IB_BYTES: usize = 16 << 10;
/// Where its VA allocator starts (above the 16 KiB GPUVM base, 2 MiB aligned).
pub(super) const VA_BASE: u64 = 0x10_0000_0000;
/// How long one submission may take.
pub(super) const FENCE: Duration = Duration::from_secs(30);

/// The pieces `(offset, length)` of `len` bytes moved through a staging buffer of `piece` bytes.
fn pieces(len: u64, piece: u64) -> impl Iterator<Item = (u64, u64)> {
    let piece = piece.max(1);
    (0..len.div_ceil(piece)).map(move |i| {
        let off = i * piece;
        (off, (len - off).min(piece))
    })
}

/// What a patterned buffer holds: the pattern of `seed` for GPU number `gpu`, but zero in its
/// last `untouched` bytes.
pub(super) struct Contents<'b> {
    seed: u64,
    gpu: usize,
    buffer: &'b Buffer,
    untouched: u64,
}

impl<'b> Contents<'b> {
    /// Buffer `buffer` of GPU number `gpu` of a workload of `spec`.
    pub(super) fn of(spec: &Spec, gpu: usize, buffer: &'b Buffer) -> Self {
        Self {
            seed: spec.seed,
            gpu,
            buffer,
            untouched: spec.untouched_bytes(buffer.size),
        }
    }

    /// Bytes written with the pattern, from the start.
    fn written(&self) -> u64 {
        self.buffer.size - self.untouched.min(self.buffer.size)
    }

    /// Fills `out` with the bytes at `offset` of the buffer.
    fn expected(&self, offset: u64, out: &mut [u8]) {
        #[allow(clippy::cast_possible_truncation)] // < out.len()
        let patterned = self.written().saturating_sub(offset).min(out.len() as u64) as usize;
        let (data, zeros) = out.split_at_mut(patterned);
        pattern(self.seed, self.gpu, self.buffer.index, offset, data);
        zeros.fill(0);
    }
}

/// A way to move data on one GPU: a staging buffer in the GPU's VM and a way to run packets.
pub(super) trait Mover {
    fn gpu_id(&self) -> u32;
    /// The staging buffer's GPU VA and size.
    fn staging(&self) -> (u64, u64);
    /// Fills the first `n` bytes of the staging buffer with `fill`.
    fn stage_in(&mut self, n: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), WorkloadError>;
    /// The first `n` bytes of the staging buffer.
    fn stage_out(&self, n: usize) -> Result<Vec<u8>, WorkloadError>;
    /// Runs `ib` and waits for it.
    fn run(&mut self, ib: IbBuilder) -> Result<(), WorkloadError>;

    /// Writes `c` into its buffer by SDMA.
    fn fill(&mut self, c: &Contents<'_>) -> Result<(), WorkloadError> {
        let (va, size) = self.staging();
        let b = c.buffer;
        for (off, n) in pieces(c.written(), size) {
            #[allow(clippy::cast_possible_truncation)] // n <= the staging size
            self.stage_in(n as usize, &mut |buf| c.expected(off, buf))?;
            let mut ib = IbBuilder::new();
            ib.copy_linear(va, b.va + off, n);
            self.run(ib)?;
        }
        Ok(())
    }

    /// Reads `c`'s buffer back by SDMA and compares it with `c`.
    fn check(&mut self, c: &Contents<'_>) -> Result<(), WorkloadError> {
        let (va, size) = self.staging();
        let b = c.buffer;
        for (off, n) in pieces(b.size, size) {
            let mut ib = IbBuilder::new();
            ib.copy_linear(b.va + off, va, n);
            self.run(ib)?;
            #[allow(clippy::cast_possible_truncation)] // n <= the staging size
            let n = n as usize;
            let mut want = vec![0u8; n];
            c.expected(off, &mut want);
            let got = self.stage_out(n)?;
            if got != want {
                let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
                return Err(WorkloadError::Mismatch(format!(
                    "GPU {:#x} buffer {} ({:?} at {:#x}): byte {} is {:#04x}, expected {:#04x}",
                    self.gpu_id(),
                    b.index,
                    b.kind,
                    b.va,
                    off + at as u64,
                    got[at],
                    want[at]
                )));
            }
        }
        Ok(())
    }

    fn write_counter(&mut self, va: u64, generation: u32) -> Result<(), WorkloadError> {
        let mut ib = IbBuilder::new();
        ib.const_fill(va, generation, 4);
        self.run(ib)
    }

    /// The `n` bytes at GPU VA `va`, read by SDMA.
    fn read_gpu(&mut self, va: u64, n: usize) -> Result<Vec<u8>, WorkloadError> {
        let mut ib = IbBuilder::new();
        ib.copy_linear(va, self.staging().0, n as u64);
        self.run(ib)?;
        self.stage_out(n)
    }

    fn read_counter(&mut self, va: u64) -> Result<u32, WorkloadError> {
        let s = self.read_gpu(va, 4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
}

/// The process's SDMA tools on one GPU: an IB and a staging buffer in its render-node VM.
pub(super) struct GpuDma<'r, T: Transport> {
    gpu_id: u32,
    queue: SdmaQueue<'r, T>,
    staging: UserptrBuffer<'r, T>,
}

impl<'r, T: Transport> GpuDma<'r, T> {
    /// The tools on `render` (GPU `gpu_id`), at the next VAs of `va`.
    pub(super) fn new(
        gpu_id: u32,
        render: &'r RenderNode<T>,
        va: &mut u64,
    ) -> Result<Self, WorkloadError> {
        let queue = SdmaQueue::new(render, bump(va, IB_BYTES as u64), IB_BYTES)?;
        let staging = UserptrBuffer::new(render, STAGING, bump(va, STAGING as u64))?;
        Ok(Self {
            gpu_id,
            queue,
            staging,
        })
    }
}

impl<T: Transport> Mover for GpuDma<'_, T> {
    fn gpu_id(&self) -> u32 {
        self.gpu_id
    }

    fn staging(&self) -> (u64, u64) {
        (self.staging.va(), STAGING as u64)
    }

    fn stage_in(&mut self, n: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), WorkloadError> {
        fill(&mut self.staging.as_mut_slice()[..n]);
        Ok(())
    }

    fn stage_out(&self, n: usize) -> Result<Vec<u8>, WorkloadError> {
        Ok(self.staging.as_slice()[..n].to_vec())
    }

    fn run(&mut self, ib: IbBuilder) -> Result<(), WorkloadError> {
        if self.queue.run(&ib.finish(), FENCE)? {
            Ok(())
        } else {
            Err(WorkloadError::Fence {
                gpu_id: self.gpu_id,
            })
        }
    }
}

/// The next VA of `next` for `size` bytes (2 MiB aligned); advances `next` past it.
pub(super) fn bump(next: &mut u64, size: u64) -> u64 {
    let va = *next;
    *next += size.next_multiple_of(2 << 20);
    va
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_length_once_in_staging_sized_steps() {
        let all = |len, piece| pieces(len, piece).collect::<Vec<_>>();
        assert_eq!(all(0, 4), vec![]);
        assert_eq!(all(4, 4), vec![(0, 4)]);
        assert_eq!(all(10, 4), vec![(0, 4), (4, 4), (8, 2)]);
        assert_eq!(all(3, 8), vec![(0, 3)]);
    }
}
