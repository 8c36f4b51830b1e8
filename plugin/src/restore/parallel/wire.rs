//! The parallel restore's wire format: a job's [`Part`]s as the tasks send them, and the
//! [`Assembler`] that puts them together again (see the [module](super) for the layout).

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;

/// The first word of every message ("AMPR").
pub(crate) const MAGIC: u32 = 0x414d_5052;

/// The header's size: eight `u32` words.
pub(crate) const HEADER_BYTES: usize = 32;

/// At most this many dma-bufs per message.
pub(crate) const MAX_FDS_PER_PART: usize = 250;

/// At most this many GPUs in a GPU map.
pub(crate) const MAX_GPUS: usize = 128;

/// The largest message: header, GPU map and indices.
pub(crate) const MAX_MESSAGE: usize = HEADER_BYTES + MAX_GPUS * 8 + MAX_FDS_PER_PART * 4;

/// A message that is not a part of a job, or a part that does not fit the job.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum ProtocolError {
    /// Shorter than the header.
    #[error("a message of {0} bytes is shorter than the {HEADER_BYTES}-byte header")]
    Short(usize),
    /// Not our magic number.
    #[error("a message starts with {0:#010x}, not the parallel-restore magic {MAGIC:#010x}")]
    Magic(u32),
    /// The kernel cut the message or its fds (`MSG_TRUNC`, `MSG_CTRUNC`).
    #[error("a message or its fds were truncated in the socket")]
    Truncated,
    /// The length does not match the counts of the header.
    #[error(
        "image {image}: a message of {len} bytes, but its counts ({gpus} GPUs, {count} \
         buffers) need {need}"
    )]
    Length {
        /// The image id.
        image: u32,
        /// Bytes received.
        len: usize,
        /// GPU map entries announced.
        gpus: u32,
        /// Buffers announced.
        count: u32,
        /// Bytes those counts need.
        need: usize,
    },
    /// The message carries another number of fds than buffers.
    #[error("image {image}: a part of {count} buffers carries {fds} fds")]
    FdCount {
        /// The image id.
        image: u32,
        /// Buffers announced.
        count: u32,
        /// Fds received.
        fds: usize,
    },
    /// Counts out of range: an empty part, too many buffers or GPUs, a part beyond the job.
    #[error("image {image}: {what}")]
    Counts {
        /// The image id.
        image: u32,
        /// What is wrong.
        what: String,
    },
    /// Parts out of order or repeated.
    #[error("image {image}: {what}")]
    Sequence {
        /// The image id.
        image: u32,
        /// What is wrong.
        what: String,
    },
}

/// One message: some buffers of one image's job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Part {
    /// The `/dev/kfd` image id.
    pub image: u32,
    /// The sending task's pid, as it sees itself (for messages).
    pub pid: u32,
    /// Buffers in the whole job.
    pub total: u32,
    /// Index in the job of this part's first buffer.
    pub first: u32,
    /// (image GPU id, render minor on this node): in the first part only.
    pub gpus: Vec<(u32, u32)>,
    /// The image BO index of each buffer of this part (its dma-buf is the fd at the same place).
    pub bos: Vec<u32>,
}

fn word(bytes: &[u8], i: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&bytes[i * 4..i * 4 + 4]);
    u32::from_ne_bytes(w)
}

impl Part {
    /// The message bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let words = [
            MAGIC,
            self.image,
            self.pid,
            self.total,
            self.first,
            u32::try_from(self.bos.len()).unwrap_or(u32::MAX),
            u32::try_from(self.gpus.len()).unwrap_or(u32::MAX),
            0,
        ];
        let mut out = Vec::with_capacity(HEADER_BYTES + self.gpus.len() * 8 + self.bos.len() * 4);
        for w in words
            .into_iter()
            .chain(self.gpus.iter().flat_map(|&(g, m)| [g, m]))
            .chain(self.bos.iter().copied())
        {
            out.extend_from_slice(&w.to_ne_bytes());
        }
        out
    }

    /// Decodes a message that came with `fds` fds.
    pub(crate) fn decode(bytes: &[u8], fds: usize) -> Result<Part, ProtocolError> {
        if bytes.len() < HEADER_BYTES {
            return Err(ProtocolError::Short(bytes.len()));
        }
        let magic = word(bytes, 0);
        if magic != MAGIC {
            return Err(ProtocolError::Magic(magic));
        }
        let (image, pid, total, first, count, gpus) = (
            word(bytes, 1),
            word(bytes, 2),
            word(bytes, 3),
            word(bytes, 4),
            word(bytes, 5),
            word(bytes, 6),
        );
        let counts = |what: String| ProtocolError::Counts { image, what };
        if count as usize > MAX_FDS_PER_PART {
            return Err(counts(format!(
                "a part of {count} buffers (at most {MAX_FDS_PER_PART})"
            )));
        }
        if gpus as usize > MAX_GPUS {
            return Err(counts(format!(
                "a GPU map of {gpus} GPUs (at most {MAX_GPUS})"
            )));
        }
        let need = HEADER_BYTES + gpus as usize * 8 + count as usize * 4;
        if bytes.len() != need {
            return Err(ProtocolError::Length {
                image,
                len: bytes.len(),
                gpus,
                count,
                need,
            });
        }
        if fds != count as usize {
            return Err(ProtocolError::FdCount { image, count, fds });
        }
        if count == 0 {
            return Err(counts("a part without buffers".to_owned()));
        }
        if first.checked_add(count).is_none_or(|end| end > total) {
            return Err(counts(format!(
                "buffers {first}..{} of a job of {total}",
                u64::from(first) + u64::from(count)
            )));
        }
        if (first == 0) != (gpus > 0) {
            return Err(counts(format!(
                "the part at buffer {first} has {gpus} GPU map entries (the first part has the \
                 map, the others none)"
            )));
        }
        let map_at = HEADER_BYTES / 4;
        let gpus = (0..gpus as usize)
            .map(|i| (word(bytes, map_at + 2 * i), word(bytes, map_at + 2 * i + 1)))
            .collect::<Vec<_>>();
        let bos_at = map_at + gpus.len() * 2;
        let bos = (0..count as usize)
            .map(|i| word(bytes, bos_at + i))
            .collect();
        Ok(Part {
            image,
            pid,
            total,
            first,
            gpus,
            bos,
        })
    }
}

/// Every part of one image's job: what the master fills.
#[derive(Debug)]
pub(crate) struct Job {
    /// The `/dev/kfd` image id.
    pub image: u32,
    /// The task's pid, as it sees itself.
    pub pid: u32,
    /// Image GPU id to render minor on this node.
    pub gpus: BTreeMap<u32, u32>,
    /// (image BO index, its dma-buf), in the order sent.
    pub bos: Vec<(u32, OwnedFd)>,
}

/// Collects parts into jobs.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    partial: BTreeMap<u32, Job>,
    totals: BTreeMap<u32, u32>,
    finished: std::collections::BTreeSet<u32>,
}

impl Assembler {
    /// Takes `part` and its fds; a complete job comes back.
    pub(crate) fn add(
        &mut self,
        part: Part,
        fds: Vec<OwnedFd>,
    ) -> Result<Option<Job>, ProtocolError> {
        let image = part.image;
        let seq = |what: String| ProtocolError::Sequence { image, what };
        if self.finished.contains(&image) {
            return Err(seq("a part after its job was complete".to_owned()));
        }
        match self.partial.get(&image) {
            None if part.first != 0 => {
                return Err(seq(format!(
                    "the part at buffer {} came before the first",
                    part.first
                )))
            }
            None => {
                let mut gpus = BTreeMap::new();
                for &(g, m) in &part.gpus {
                    if gpus.insert(g, m).is_some() {
                        return Err(seq(format!("GPU {g:#x} is twice in the GPU map")));
                    }
                }
                self.totals.insert(image, part.total);
                self.partial.insert(
                    image,
                    Job {
                        image,
                        pid: part.pid,
                        gpus,
                        bos: Vec::with_capacity(part.total as usize),
                    },
                );
            }
            Some(job) => {
                let total = self.totals.get(&image).copied().unwrap_or(0);
                if part.first as usize != job.bos.len() || part.total != total {
                    return Err(seq(format!(
                        "a part at buffer {} of a job of {} after {} of {total} buffers",
                        part.first,
                        part.total,
                        job.bos.len()
                    )));
                }
            }
        }
        let Some(job) = self.partial.get_mut(&image) else {
            return Ok(None);
        };
        job.bos.extend(part.bos.into_iter().zip(fds));
        if job.bos.len() as u64 == u64::from(part.total) {
            self.finished.insert(image);
            self.totals.remove(&image);
            return Ok(self.partial.remove(&image));
        }
        Ok(None)
    }

    /// Jobs some of whose parts never came, as (image, received, total).
    pub(crate) fn incomplete(&self) -> Vec<(u32, usize, u32)> {
        self.partial
            .values()
            .map(|j| {
                (
                    j.image,
                    j.bos.len(),
                    self.totals.get(&j.image).copied().unwrap_or(0),
                )
            })
            .collect()
    }
}

/// The parts of a job of `bos` (image index, dma-buf) with GPU map `gpus`.
pub(crate) fn parts(image: u32, pid: u32, gpus: &[(u32, u32)], bos: &[u32]) -> Vec<Part> {
    let total = u32::try_from(bos.len()).unwrap_or(u32::MAX);
    bos.chunks(MAX_FDS_PER_PART)
        .enumerate()
        .map(|(i, chunk)| Part {
            image,
            pid,
            total,
            first: u32::try_from(i * MAX_FDS_PER_PART).unwrap_or(u32::MAX),
            gpus: if i == 0 { gpus.to_vec() } else { Vec::new() },
            bos: chunk.to_vec(),
        })
        .collect()
}
