//! SDMA v4 (gfx9) packets: the encoder the plugin uses to build indirect buffers, and the decoder
//! the simulator's DMA engine executes.
//!
//! Layout, in dwords (little-endian `u32`):
//!
//! | packet | dwords |
//! |---|---|
//! | NOP | `header(op 0, count n in bits 16..30)`, then `n` ignored dwords |
//! | COPY_LINEAR | `header(op 1, sub-op 0)`, `count`, `parameter` (0), `src lo`, `src hi`, `dst lo`, `dst hi` |
//! | CONST_FILL | `header(op 11)`, `dst lo`, `dst hi`, `data`, `count` |
//! | FENCE | `header(op 5)`, `addr lo` (dword aligned), `addr hi`, `data`: writes one dword |
//! | TRAP | `header(op 6)`, `int_context` (28 bits): raises the engine's trap interrupt |
//! | POLL_REGMEM | `header(op 8; bit 26 hdp_flush, bits 28..30 func, bit 31 mem_poll)`, `addr lo`, `addr hi`, `value`, `mask`, `interval (16 bits) \| retry_count (12 bits) << 16` |
//! | ATOMIC | `header(op 10; bit 16 loop, bits 25..31 operation)`, `addr lo`, `addr hi`, `src lo`, `src hi`, `cmp lo`, `cmp hi`, `loop_interval` |
//! | TIMESTAMP | `header(op 13, sub-op 2 GET_GLOBAL)`, `addr lo`, `addr hi`: writes the 64-bit GPU timestamp |
//!
//! POLL_REGMEM, ATOMIC and TIMESTAMP are what ROCr's SDMA blits add around their copies on gfx9
//! (ROCr 5.2, measured on the simulator): an HDP flush before a copy, waits on dependency signals
//! (POLL_REGMEM on memory), the completion signal's decrement (ATOMIC ADD64 of -1), and profiling
//! timestamps. The HDP flush has two forms: the kernel's (POLL_REGMEM with `hdp_flush` set and
//! `mem_poll` clear, naming the flush request and done registers) and the parameterless one of
//! gfx9 SDMA microcode 0x1A5 and later that ROCr writes: dwords `8, 0, 0x8000_0000, 0, 0, 0`.
//!
//! FENCE and TRAP are how a user-mode SDMA queue signals completion, as ROCr does it: a FENCE
//! writes the event id into the event's slot of the signal page, then a TRAP carries the event id
//! to the driver's interrupt handler, which sets the event.
//!
//! **Count convention.** Both COPY_LINEAR and CONST_FILL carry `bytes - 1` in a 22-bit field, as
//! the amdgpu kernel driver emits them for SDMA v4 (its buffer-copy and fill helpers subtract one),
//! so one packet moves 1 to 4 MiB. The upstream CRIU plugin writes the raw byte count, which asks
//! the engine for one byte more than meant; this encoder does not. The decoder reads the field as
//! the hardware does: the low 22 bits, plus one, bits above are reserved and ignored.
//!
//! Indirect buffers are padded with single-dword NOPs to a multiple of 8 dwords, as the kernel pads
//! SDMA IBs.

/// `SDMA_OP_NOP`.
pub(crate) const OP_NOP: u32 = 0;
/// `SDMA_OP_COPY`.
pub const OP_COPY: u32 = 1;
/// `SDMA_OP_FENCE`.
pub(crate) const OP_FENCE: u32 = 5;
/// `SDMA_OP_TRAP`.
pub(crate) const OP_TRAP: u32 = 6;
/// `SDMA_OP_POLL_REGMEM`.
pub(crate) const OP_POLL_REGMEM: u32 = 8;
/// `SDMA_OP_ATOMIC`.
pub(crate) const OP_ATOMIC: u32 = 10;
/// `SDMA_OP_CONST_FILL`.
pub const OP_CONST_FILL: u32 = 11;
/// `SDMA_OP_TIMESTAMP`.
pub(crate) const OP_TIMESTAMP: u32 = 13;
/// `SDMA_SUBOP_TIMESTAMP_GET_GLOBAL`.
pub(crate) const SUBOP_TIMESTAMP_GET_GLOBAL: u32 = 2;
/// The ATOMIC operation `ADD64` (`SDMA_ATOMIC_ADD64`): adds the 64-bit source to memory.
pub(crate) const ATOMIC_ADD64: u32 = 47;
/// `SDMA_SUBOP_COPY_LINEAR`.
pub const SUBOP_COPY_LINEAR: u32 = 0;

/// Bits of the count field of COPY_LINEAR and CONST_FILL.
pub(crate) const COUNT_MASK: u32 = (1 << 22) - 1;
/// The largest number of bytes one packet moves.
pub const MAX_BYTES_PER_PACKET: u64 = COUNT_MASK as u64 + 1;
/// Dwords of a COPY_LINEAR packet.
pub const COPY_LINEAR_DWORDS: usize = 7;
/// Dwords of a CONST_FILL packet.
pub const CONST_FILL_DWORDS: usize = 5;
/// Dwords of a FENCE packet.
pub(crate) const FENCE_DWORDS: usize = 4;
/// Dwords of a TRAP packet.
pub(crate) const TRAP_DWORDS: usize = 2;
/// Dwords of a POLL_REGMEM packet.
pub(crate) const POLL_REGMEM_DWORDS: usize = 6;
/// Dwords of an ATOMIC packet.
pub(crate) const ATOMIC_DWORDS: usize = 8;
/// Dwords of a TIMESTAMP packet.
pub(crate) const TIMESTAMP_DWORDS: usize = 3;
/// POLL_REGMEM's `retry_count` that means "poll until the condition holds".
pub(crate) const POLL_RETRY_FOREVER: u32 = 0xfff;
/// Bits of a TRAP packet's interrupt context.
pub(crate) const TRAP_CONTEXT_MASK: u32 = (1 << 28) - 1;
/// IBs are padded to a multiple of this many dwords.
pub const IB_ALIGN_DWORDS: usize = 8;

const NOP_COUNT_SHIFT: u32 = 16;
const NOP_COUNT_MASK: u32 = (1 << 14) - 1;
const POLL_HDP_FLUSH: u32 = 1 << 26;
/// The gfx9 microcode's parameterless HDP flush packet (firmware 0x1A5 and later).
const MICROCODE_HDP_FLUSH: [u32; POLL_REGMEM_DWORDS] = [OP_POLL_REGMEM, 0, 0x8000_0000, 0, 0, 0];
const POLL_FUNC_SHIFT: u32 = 28;
const POLL_MEM: u32 = 1 << 31;
const ATOMIC_LOOP: u32 = 1 << 16;
const ATOMIC_OPERATION_SHIFT: u32 = 25;

/// How POLL_REGMEM compares `(polled & mask)` with `value` (the packet's `func` field).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollFunc {
    /// 0: always true.
    Always,
    /// 1: less than.
    Less,
    /// 2: less than or equal.
    LessEqual,
    /// 3: equal.
    Equal,
    /// 4: not equal.
    NotEqual,
    /// 5: greater than or equal.
    GreaterEqual,
    /// 6: greater than.
    Greater,
}

impl PollFunc {
    fn from_field(f: u32) -> Option<Self> {
        Some(match f {
            0 => Self::Always,
            1 => Self::Less,
            2 => Self::LessEqual,
            3 => Self::Equal,
            4 => Self::NotEqual,
            5 => Self::GreaterEqual,
            6 => Self::Greater,
            _ => return None,
        })
    }

    fn field(self) -> u32 {
        match self {
            Self::Always => 0,
            Self::Less => 1,
            Self::LessEqual => 2,
            Self::Equal => 3,
            Self::NotEqual => 4,
            Self::GreaterEqual => 5,
            Self::Greater => 6,
        }
    }

    /// Whether the polled dword satisfies the condition: `(polled & mask) func value`.
    pub fn holds(self, polled: u32, mask: u32, value: u32) -> bool {
        let v = polled & mask;
        match self {
            Self::Always => true,
            Self::Less => v < value,
            Self::LessEqual => v <= value,
            Self::Equal => v == value,
            Self::NotEqual => v != value,
            Self::GreaterEqual => v >= value,
            Self::Greater => v > value,
        }
    }
}

/// The header dword for `op` and `sub_op`.
pub const fn header(op: u32, sub_op: u32) -> u32 {
    (op & 0xff) | ((sub_op & 0xff) << 8)
}

/// One decoded packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packet {
    /// No operation (`skipped` extra dwords).
    Nop {
        /// Dwords skipped after the header.
        skipped: u32,
    },
    /// Copy `bytes` bytes from GPU VA `src` to GPU VA `dst`.
    CopyLinear {
        /// Source GPU virtual address.
        src: u64,
        /// Destination GPU virtual address.
        dst: u64,
        /// Length in bytes (count field + 1).
        bytes: u64,
    },
    /// Fill `bytes` bytes at `dst` with the 32-bit pattern `value` (little-endian, repeated).
    ConstFill {
        /// Destination GPU virtual address.
        dst: u64,
        /// The fill pattern.
        value: u32,
        /// Length in bytes (count field + 1).
        bytes: u64,
    },
    /// Write the dword `data` at GPU VA `addr` (the low two bits of the address are ignored).
    Fence {
        /// Destination GPU virtual address (dword aligned).
        addr: u64,
        /// The value written.
        data: u32,
    },
    /// Raise the engine's trap interrupt with `context` (28 bits).
    Trap {
        /// The interrupt context (ROCr puts the event id there).
        context: u32,
    },
    /// Wait until the dword at `addr` satisfies `func` against `value` under `mask`.
    PollMem {
        /// The polled GPU virtual address (dword aligned).
        addr: u64,
        /// The reference value.
        value: u32,
        /// Bits of the polled dword compared.
        mask: u32,
        /// The comparison.
        func: PollFunc,
        /// Polls before the engine gives up (`POLL_RETRY_FOREVER`, 0xfff: never).
        retries: u32,
    },
    /// A POLL_REGMEM with `hdp_flush` set on registers, or the microcode's parameterless HDP flush
    /// packet: flushes the host data path (writes of the host through the PCIe BAR reach VRAM
    /// before what follows).
    HdpFlush,
    /// A POLL_REGMEM on registers (not memory) without an HDP flush.
    PollRegister {
        /// The register address field.
        addr: u64,
    },
    /// Add `value` to the 64-bit word at `addr` (ATOMIC ADD64).
    AtomicAdd64 {
        /// The GPU virtual address (qword aligned).
        addr: u64,
        /// The addend (two's complement: -1 decrements).
        value: u64,
    },
    /// Write the 64-bit GPU timestamp at `addr` (TIMESTAMP GET_GLOBAL).
    Timestamp {
        /// The GPU virtual address.
        addr: u64,
    },
}

/// Why an IB could not be decoded. The engine fails the submission with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The packet at `at` ends after the IB.
    #[error("packet at dword {at} is truncated")]
    Truncated {
        /// Dword index of the header.
        at: usize,
    },
    /// An op or sub-op the engine does not implement.
    #[error("unsupported SDMA packet op {op} sub-op {sub_op} at dword {at}")]
    Unsupported {
        /// Dword index of the header.
        at: usize,
        /// The op field.
        op: u32,
        /// The sub-op field.
        sub_op: u32,
    },
    /// An ATOMIC operation other than ADD64, or an ATOMIC with its loop bit set.
    #[error("unsupported SDMA ATOMIC operation {operation} (loop {looped}) at dword {at}")]
    UnsupportedAtomic {
        /// Dword index of the header.
        at: usize,
        /// The operation field.
        operation: u32,
        /// The loop bit.
        looped: bool,
    },
    /// A POLL_REGMEM whose `func` is the reserved value 7.
    #[error("SDMA POLL_REGMEM with reserved function 7 at dword {at}")]
    BadPollFunc {
        /// Dword index of the header.
        at: usize,
    },
}

/// Builds an indirect buffer of SDMA packets.
#[derive(Clone, Debug, Default)]
pub struct IbBuilder {
    dwords: Vec<u32>,
}

fn lo(v: u64) -> u32 {
    (v & 0xffff_ffff) as u32
}

fn hi(v: u64) -> u32 {
    (v >> 32) as u32
}

/// Splits `len` bytes into per-packet `(offset, bytes)` pieces.
fn pieces(len: u64) -> impl Iterator<Item = (u64, u64)> {
    (0..len.div_ceil(MAX_BYTES_PER_PACKET)).map(move |i| {
        let off = i * MAX_BYTES_PER_PACKET;
        (off, (len - off).min(MAX_BYTES_PER_PACKET))
    })
}

fn count_field(bytes: u64) -> u32 {
    debug_assert!((1..=MAX_BYTES_PER_PACKET).contains(&bytes));
    lo(bytes - 1) & COUNT_MASK
}

impl IbBuilder {
    /// An empty IB.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends COPY_LINEAR packets copying `len` bytes from `src` to `dst`, split at
    /// [`MAX_BYTES_PER_PACKET`]. A zero length adds nothing.
    pub fn copy_linear(&mut self, src: u64, dst: u64, len: u64) -> &mut Self {
        for (off, bytes) in pieces(len) {
            let (s, d) = (src + off, dst + off);
            self.dwords.extend_from_slice(&[
                header(OP_COPY, SUBOP_COPY_LINEAR),
                count_field(bytes),
                0,
                lo(s),
                hi(s),
                lo(d),
                hi(d),
            ]);
        }
        self
    }

    /// Appends CONST_FILL packets writing the pattern `value` over `len` bytes at `dst`.
    pub fn const_fill(&mut self, dst: u64, value: u32, len: u64) -> &mut Self {
        for (off, bytes) in pieces(len) {
            let d = dst + off;
            self.dwords.extend_from_slice(&[
                header(OP_CONST_FILL, 0),
                lo(d),
                hi(d),
                value,
                count_field(bytes),
            ]);
        }
        self
    }

    /// Appends a FENCE packet writing `data` at `addr` (aligned down to a dword).
    pub fn fence(&mut self, addr: u64, data: u32) -> &mut Self {
        let a = addr & !3;
        self.dwords
            .extend_from_slice(&[header(OP_FENCE, 0), lo(a), hi(a), data]);
        self
    }

    /// Appends a TRAP packet with the interrupt context `context` (its low 28 bits).
    pub fn trap(&mut self, context: u32) -> &mut Self {
        self.dwords
            .extend_from_slice(&[header(OP_TRAP, 0), context & TRAP_CONTEXT_MASK]);
        self
    }

    /// Appends a POLL_REGMEM on memory: wait until `(dword at addr & mask) func value`, polling
    /// forever.
    pub fn poll_mem(&mut self, addr: u64, value: u32, mask: u32, func: PollFunc) -> &mut Self {
        let a = addr & !3;
        self.dwords.extend_from_slice(&[
            header(OP_POLL_REGMEM, 0) | POLL_MEM | func.field() << POLL_FUNC_SHIFT,
            lo(a),
            hi(a),
            value,
            mask,
            10 | POLL_RETRY_FOREVER << 16,
        ]);
        self
    }

    /// Appends an HDP flush (POLL_REGMEM on registers with `hdp_flush` set; the register fields
    /// are left 0).
    pub fn hdp_flush(&mut self) -> &mut Self {
        self.dwords.extend_from_slice(&[
            header(OP_POLL_REGMEM, 0) | POLL_HDP_FLUSH | PollFunc::Equal.field() << POLL_FUNC_SHIFT,
            0,
            0,
            0,
            0xffff_ffff,
            10 | POLL_RETRY_FOREVER << 16,
        ]);
        self
    }

    /// Appends an ATOMIC ADD64 of `value` to the qword at `addr`.
    pub fn atomic_add64(&mut self, addr: u64, value: u64) -> &mut Self {
        self.dwords.extend_from_slice(&[
            header(OP_ATOMIC, 0) | ATOMIC_ADD64 << ATOMIC_OPERATION_SHIFT,
            lo(addr),
            hi(addr),
            lo(value),
            hi(value),
            0,
            0,
            0,
        ]);
        self
    }

    /// Appends a TIMESTAMP GET_GLOBAL writing the GPU timestamp at `addr`.
    pub fn timestamp(&mut self, addr: u64) -> &mut Self {
        self.dwords.extend_from_slice(&[
            header(OP_TIMESTAMP, SUBOP_TIMESTAMP_GET_GLOBAL),
            lo(addr),
            hi(addr),
        ]);
        self
    }

    /// The packets so far, without padding (what a ring takes: ring packets need no alignment).
    pub fn packets(&self) -> &[u32] {
        &self.dwords
    }

    /// Number of dwords so far, without padding.
    pub fn len(&self) -> usize {
        self.dwords.len()
    }

    /// Whether no packet was added.
    pub fn is_empty(&self) -> bool {
        self.dwords.is_empty()
    }

    /// The IB, padded with NOPs to a multiple of [`IB_ALIGN_DWORDS`].
    pub fn finish(mut self) -> Vec<u32> {
        let padded = self.dwords.len().div_ceil(IB_ALIGN_DWORDS).max(1) * IB_ALIGN_DWORDS;
        self.dwords.resize(padded, header(OP_NOP, 0));
        self.dwords
    }

    /// How many dwords an IB copying `len` bytes in one go takes, padding included.
    pub fn copy_dwords(len: u64) -> usize {
        let packets = usize::try_from(len.div_ceil(MAX_BYTES_PER_PACKET)).unwrap_or(usize::MAX);
        (packets.saturating_mul(COPY_LINEAR_DWORDS))
            .div_ceil(IB_ALIGN_DWORDS)
            .max(1)
            * IB_ALIGN_DWORDS
    }
}

/// Walks the packets of an IB.
#[derive(Clone, Debug)]
pub struct Decoder<'a> {
    ib: &'a [u32],
    at: usize,
}

impl<'a> Decoder<'a> {
    /// Decodes `ib` from its first dword.
    pub fn new(ib: &'a [u32]) -> Self {
        Self { ib, at: 0 }
    }

    /// The dword index of the next packet (after the last one decoded).
    pub fn position(&self) -> usize {
        self.at
    }

    fn take(&mut self, at: usize, n: usize) -> Result<&'a [u32], DecodeError> {
        let end = at.checked_add(n).ok_or(DecodeError::Truncated { at })?;
        let body = self.ib.get(at..end).ok_or(DecodeError::Truncated { at })?;
        self.at = end;
        Ok(body)
    }
}

impl Iterator for Decoder<'_> {
    type Item = Result<Packet, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        let at = self.at;
        let &h = self.ib.get(at)?;
        let (op, sub_op) = (h & 0xff, (h >> 8) & 0xff);
        let packet = match (op, sub_op) {
            (OP_NOP, _) => {
                let skipped = (h >> NOP_COUNT_SHIFT) & NOP_COUNT_MASK;
                self.take(at, 1 + skipped as usize)
                    .map(|_| Packet::Nop { skipped })
            }
            (OP_COPY, SUBOP_COPY_LINEAR) => {
                self.take(at, COPY_LINEAR_DWORDS)
                    .map(|p| Packet::CopyLinear {
                        bytes: u64::from(p[1] & COUNT_MASK) + 1,
                        src: u64::from(p[3]) | u64::from(p[4]) << 32,
                        dst: u64::from(p[5]) | u64::from(p[6]) << 32,
                    })
            }
            (OP_CONST_FILL, _) => self.take(at, CONST_FILL_DWORDS).map(|p| Packet::ConstFill {
                dst: u64::from(p[1]) | u64::from(p[2]) << 32,
                value: p[3],
                bytes: u64::from(p[4] & COUNT_MASK) + 1,
            }),
            (OP_FENCE, _) => self.take(at, FENCE_DWORDS).map(|p| Packet::Fence {
                addr: (u64::from(p[1]) | u64::from(p[2]) << 32) & !3,
                data: p[3],
            }),
            (OP_TRAP, _) => self.take(at, TRAP_DWORDS).map(|p| Packet::Trap {
                context: p[1] & TRAP_CONTEXT_MASK,
            }),
            (OP_POLL_REGMEM, _) => self.take(at, POLL_REGMEM_DWORDS).and_then(|p| {
                let addr = u64::from(p[1]) | u64::from(p[2]) << 32;
                if h & POLL_MEM == 0 {
                    return Ok(if h & POLL_HDP_FLUSH != 0 || p == MICROCODE_HDP_FLUSH {
                        Packet::HdpFlush
                    } else {
                        Packet::PollRegister { addr }
                    });
                }
                let func = PollFunc::from_field((h >> POLL_FUNC_SHIFT) & 7)
                    .ok_or(DecodeError::BadPollFunc { at })?;
                Ok(Packet::PollMem {
                    addr: addr & !3,
                    value: p[3],
                    mask: p[4],
                    func,
                    retries: (p[5] >> 16) & POLL_RETRY_FOREVER,
                })
            }),
            (OP_ATOMIC, _) => self.take(at, ATOMIC_DWORDS).and_then(|p| {
                let operation = h >> ATOMIC_OPERATION_SHIFT;
                let looped = h & ATOMIC_LOOP != 0;
                if operation != ATOMIC_ADD64 || looped {
                    return Err(DecodeError::UnsupportedAtomic {
                        at,
                        operation,
                        looped,
                    });
                }
                Ok(Packet::AtomicAdd64 {
                    addr: u64::from(p[1]) | u64::from(p[2]) << 32,
                    value: u64::from(p[3]) | u64::from(p[4]) << 32,
                })
            }),
            (OP_TIMESTAMP, SUBOP_TIMESTAMP_GET_GLOBAL) => {
                self.take(at, TIMESTAMP_DWORDS).map(|p| Packet::Timestamp {
                    addr: u64::from(p[1]) | u64::from(p[2]) << 32,
                })
            }
            _ => Err(DecodeError::Unsupported { at, op, sub_op }),
        };
        if packet.is_err() {
            // Stop after an error: the engine fails the whole submission.
            self.at = self.ib.len();
        }
        Some(packet)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rstest::rstest;

    #[test]
    fn copy_linear_writes_bytes_minus_one_in_seven_dwords() {
        let mut ib = IbBuilder::new();
        ib.copy_linear(0x1_2345_6780, 0xa_bcde_f000, 4096);
        let ib = ib.finish();
        assert_eq!(
            ib,
            [
                0x0000_0001,
                4095,
                0,
                0x2345_6780,
                0x1,
                0xbcde_f000,
                0xa,
                OP_NOP
            ]
        );
    }

    #[test]
    fn const_fill_writes_bytes_minus_one_last() {
        let mut ib = IbBuilder::new();
        ib.const_fill(0x10_0000, 0xdead_beef, 8);
        assert_eq!(
            ib.finish()[..5],
            [0x0000_000b, 0x10_0000, 0, 0xdead_beef, 7]
        );
    }

    #[rstest]
    #[case::one_byte(1, 1)]
    #[case::exactly_one_packet(MAX_BYTES_PER_PACKET, 1)]
    #[case::one_byte_over(MAX_BYTES_PER_PACKET + 1, 2)]
    #[case::ten_mib(10 << 20, 3)]
    fn copies_split_at_four_mib(#[case] len: u64, #[case] packets: usize) {
        let mut ib = IbBuilder::new();
        ib.copy_linear(0x1000, 0x8000_0000, len);
        let ib = ib.finish();
        assert_eq!(ib.len() % IB_ALIGN_DWORDS, 0);
        assert_eq!(ib.len(), IbBuilder::copy_dwords(len));
        let decoded: Vec<_> = Decoder::new(&ib)
            .map(Result::unwrap)
            .filter(|p| !matches!(p, Packet::Nop { .. }))
            .collect();
        assert_eq!(decoded.len(), packets);
        let total: u64 = decoded
            .iter()
            .map(|p| match p {
                Packet::CopyLinear { bytes, .. } => *bytes,
                _ => 0,
            })
            .sum();
        assert_eq!(total, len);
    }

    #[test]
    fn empty_ib_is_one_aligned_block_of_nops() {
        assert_eq!(IbBuilder::new().finish(), vec![0; 8]);
    }

    #[rstest]
    #[case::truncated_copy(&[header(OP_COPY, 0), 1, 0], DecodeError::Truncated { at: 0 })]
    #[case::truncated_fill(&[0, header(OP_CONST_FILL, 0), 1], DecodeError::Truncated { at: 1 })]
    #[case::nop_count_past_end(&[0x0005_0000, 0], DecodeError::Truncated { at: 0 })]
    #[case::unknown_op(&[0x0000_0042], DecodeError::Unsupported { at: 0, op: 0x42, sub_op: 0 })]
    #[case::tiled_copy(&[0x0000_0101], DecodeError::Unsupported { at: 0, op: 1, sub_op: 1 })]
    #[case::atomic_cmpswap(&[header(OP_ATOMIC, 0) | 40 << 25, 0, 0, 0, 0, 0, 0, 0],
        DecodeError::UnsupportedAtomic { at: 0, operation: 40, looped: false })]
    #[case::atomic_add64_looped(&[header(OP_ATOMIC, 0) | 47 << 25 | 1 << 16, 0, 0, 0, 0, 0, 0, 0],
        DecodeError::UnsupportedAtomic { at: 0, operation: 47, looped: true })]
    #[case::poll_reserved_func(&[header(OP_POLL_REGMEM, 0) | 1 << 31 | 7 << 28, 0, 0, 0, 0, 0],
        DecodeError::BadPollFunc { at: 0 })]
    #[case::truncated_poll(&[header(OP_POLL_REGMEM, 0), 0, 0, 0, 0], DecodeError::Truncated { at: 0 })]
    #[case::timestamp_get_local(&[header(OP_TIMESTAMP, 1), 0, 0],
        DecodeError::Unsupported { at: 0, op: 13, sub_op: 1 })]
    fn malformed_ibs_are_errors(#[case] ib: &[u32], #[case] err: DecodeError) {
        let last = Decoder::new(ib).last().unwrap();
        assert_eq!(last, Err(err));
    }

    #[test]
    fn fence_and_trap_are_what_rocr_signals_with() {
        let mut ib = IbBuilder::new();
        ib.fence(0x7f00_1234_5679, 3).trap(0xf000_0003);
        assert_eq!(
            ib.packets(),
            [5, 0x1234_5678, 0x7f00, 3, 6, 0x0000_0003],
            "the address is dword aligned, the context 28 bits"
        );
        let mut d = Decoder::new(ib.packets());
        assert_eq!(
            d.next(),
            Some(Ok(Packet::Fence {
                addr: 0x7f00_1234_5678,
                data: 3
            }))
        );
        assert_eq!(d.position(), FENCE_DWORDS);
        assert_eq!(d.next(), Some(Ok(Packet::Trap { context: 3 })));
        assert_eq!(d.position(), FENCE_DWORDS + TRAP_DWORDS);
        assert_eq!(d.next(), None);
        let cut = [header(OP_FENCE, 0), 0, 0];
        assert_eq!(
            Decoder::new(&cut).next(),
            Some(Err(DecodeError::Truncated { at: 0 }))
        );
    }

    #[test]
    fn the_microcode_hdp_flush_is_a_flush_and_other_register_polls_are_not() {
        let ib = [8, 0, 0x8000_0000, 0, 0, 0, 8, 4, 0x8000_0000, 0, 0, 0];
        let got: Vec<_> = Decoder::new(&ib).collect();
        assert_eq!(
            got,
            vec![
                Ok(Packet::HdpFlush),
                Ok(Packet::PollRegister {
                    addr: 0x8000_0000_0000_0004
                })
            ]
        );
    }

    /// The packets ROCr's SDMA blit writes around a copy on gfx9, as raw dwords: an HDP flush
    /// (register poll, func equal, retry forever), a wait for a dependency signal to reach 0, the
    /// completion signal's decrement, a global timestamp.
    #[test]
    fn rocr_blit_packets_decode() {
        let hdp = [0x3400_0008, 0x0000_1234, 0, 0, 0xffff_ffff, 0x0fff_000a];
        let poll = [0xb000_0008, 0x1000_0104, 0x7f, 0, 0xffff_ffff, 0x0fff_000a];
        let atomic = [
            0x5e00_000a,
            0x2000_0008,
            0x7f,
            0xffff_ffff,
            0xffff_ffff,
            0,
            0,
            0,
        ];
        let ts = [0x0000_020d, 0x3000_0020, 0x7f];
        let ib: Vec<u32> = [&hdp[..], &poll, &atomic, &ts].concat();
        let got: Vec<_> = Decoder::new(&ib).collect();
        assert_eq!(
            got,
            vec![
                Ok(Packet::HdpFlush),
                Ok(Packet::PollMem {
                    addr: 0x7f_1000_0104,
                    value: 0,
                    mask: 0xffff_ffff,
                    func: PollFunc::Equal,
                    retries: POLL_RETRY_FOREVER,
                }),
                Ok(Packet::AtomicAdd64 {
                    addr: 0x7f_2000_0008,
                    value: u64::MAX,
                }),
                Ok(Packet::Timestamp {
                    addr: 0x7f_3000_0020
                }),
            ]
        );
        let mut built = IbBuilder::new();
        built
            .hdp_flush()
            .poll_mem(0x7f_1000_0104, 0, 0xffff_ffff, PollFunc::Equal)
            .atomic_add64(0x7f_2000_0008, u64::MAX)
            .timestamp(0x7f_3000_0020);
        let mut want = ib.clone();
        want[1] = 0; // the builder leaves the flush's register field 0
        assert_eq!(built.packets(), &want[..]);
    }

    #[rstest]
    #[case::always(PollFunc::Always, 5, 0xff, 9, true)]
    #[case::less(PollFunc::Less, 5, 0xff, 6, true)]
    #[case::less_not(PollFunc::Less, 6, 0xff, 6, false)]
    #[case::less_equal(PollFunc::LessEqual, 6, 0xff, 6, true)]
    #[case::equal_masked(PollFunc::Equal, 0x100, 0xff, 0, true)]
    #[case::not_equal(PollFunc::NotEqual, 1, 0xff, 0, true)]
    #[case::greater_equal(PollFunc::GreaterEqual, 3, 0xff, 4, false)]
    #[case::greater(PollFunc::Greater, 5, 0xff, 4, true)]
    fn poll_compares_the_masked_dword(
        #[case] func: PollFunc,
        #[case] polled: u32,
        #[case] mask: u32,
        #[case] value: u32,
        #[case] holds: bool,
    ) {
        assert_eq!(func.holds(polled, mask, value), holds);
    }

    #[test]
    fn nop_with_count_skips_its_body() {
        let ib = [0x0002_0000, 0xffff_ffff, 0xffff_ffff, 0];
        let packets: Vec<_> = Decoder::new(&ib).collect();
        assert_eq!(
            packets,
            vec![
                Ok(Packet::Nop { skipped: 2 }),
                Ok(Packet::Nop { skipped: 0 })
            ]
        );
    }

    #[test]
    fn reserved_count_bits_are_ignored_like_hardware() {
        let ib = [header(OP_COPY, 0), 0xffc0_0003, 0, 0, 0, 0, 0];
        assert_eq!(
            Decoder::new(&ib).next(),
            Some(Ok(Packet::CopyLinear {
                src: 0,
                dst: 0,
                bytes: 4
            }))
        );
    }

    proptest! {
        #[test]
        fn encode_decode_round_trips(
            ops in proptest::collection::vec(
                (any::<bool>(), any::<u64>(), any::<u64>(), any::<u32>(), 1u64..(12 << 20)), 0..8)
        ) {
            let mut ib = IbBuilder::new();
            let mut want = Vec::new();
            for (copy, a, b, value, len) in ops {
                if copy {
                    let (src, dst) = (a >> 1, b >> 1); // keep room for the split offsets
                    ib.copy_linear(src, dst, len);
                    want.extend(pieces(len).map(|(o, n)| Packet::CopyLinear { src: src + o, dst: dst + o, bytes: n }));
                } else {
                    let dst = a >> 1;
                    ib.const_fill(dst, value, len);
                    want.extend(pieces(len).map(|(o, n)| Packet::ConstFill { dst: dst + o, value, bytes: n }));
                }
            }
            let ib = ib.finish();
            let got: Vec<_> = Decoder::new(&ib)
                .map(Result::unwrap)
                .filter(|p| !matches!(p, Packet::Nop { .. }))
                .collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn decoder_never_panics(ib in proptest::collection::vec(any::<u32>(), 0..64)) {
            for p in Decoder::new(&ib) {
                let _ = p;
            }
        }
    }
}
