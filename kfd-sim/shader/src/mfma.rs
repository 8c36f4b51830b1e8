//! Matrix fused multiply-add (`v_mfma_*`, gfx90a): D = A x B + C for each block of an
//! instruction, the matrices spread over the lanes and registers of the whole wave.
//!
//! A form is M x N x K (here always N = M) with some number of blocks; `kpl` = K x blocks x M / 64
//! values of k sit in each lane of A and of B (f32 and f64 1, bf16 2, f16, bf16_1k and i8 4).
//! Layouts (CDNA2, as AMD's matrix instruction calculator gives them):
//!
//! - A[b][i][k] is in lane M x g + i with g = kg x blocks + b and k = kg x kpl + kk: value kk of
//!   the lane, packed from bit 0 of the first register up (a register pair for f16, bf16_1k and
//!   f64). B[b][k][j] likewise with j in place of i.
//! - C and D: lane g x N + j holds column j; register r (a pair for f64) and the lane group g
//!   give block and row ([`Form::d_row`]): 32x32 forms 16 registers a block, row
//!   8 x (r % 16 / 4) + 4 x g + r % 4; 16x16 forms 4 registers a block, row 4 x g + r % 4; 4x4
//!   forms block g, row r; 16x16x4f64 row 4 x r + g; 4x4x4f64 block g % 4, row g / 4.
//!
//! Modifiers (not for the f64 forms, which gfx90a gives none): CBSZ and ABID make block
//! ABID of each group of 2^CBSZ blocks the A of the whole group (ABID is taken modulo 2^CBSZ,
//! CBSZ is capped at log2 of the blocks); BLGP reads B from other lanes: 1 lanes 0-31 to both
//! halves, 2 lanes 32-63 to both, 3 rotated down by 16 (lane l reads l + 16), 4-7 the quarter
//! BLGP - 4 to all four quarters. Sources A and B are VGPRs or AGPRs (ACC bits); C and D are
//! both AGPRs or both VGPRs (ACC_CD); C may be an inline constant.
//!
//! Arithmetic: C first, then one product at a time in k order, each added with round to
//! nearest even: f32 and f64 products are rounded before the add (no fused multiply-add), f16
//! and bf16 products are exact in f32, i8 accumulates in wrapping i32. The f16, bf16 and
//! bf16_1k forms flush denormal inputs (A, B and C) and outputs to zero of the same sign, as
//! MI200 does; the f32 and f64 forms keep denormals. MODE's denormal and rounding fields do not
//! apply.
//!
//! A matrix instruction works on the whole wave: all 64 lanes are read and written whatever
//! EXEC holds. The instruction reads all of A, B and C before it writes D, so D may overlap
//! any source.

use crate::decode::{Inst, Operand};
use crate::exec::Ctx;
use crate::valu::R;
use crate::wave::{Lanes, LANES};

/// The element type of A and B.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Elem {
    /// IEEE single, accumulated in f32.
    F32,
    /// IEEE half, accumulated in f32 with denormals flushed.
    F16,
    /// bfloat16, accumulated in f32 with denormals flushed.
    Bf16,
    /// Signed 8-bit integers, accumulated in i32.
    I8,
    /// IEEE double, accumulated in f64.
    F64,
}

/// One MFMA form.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Form {
    /// Rows of A (and columns of B, rows and columns of C and D) per block.
    pub m: usize,
    /// The shared dimension.
    pub k: usize,
    /// Independent products per instruction.
    pub blocks: usize,
    /// The element type of A and B.
    pub elem: Elem,
}

impl Form {
    const fn new(m: usize, k: usize, blocks: usize, elem: Elem) -> Self {
        Self { m, k, blocks, elem }
    }

    /// Values of k in each lane of A and of B.
    pub(crate) const fn kpl(&self) -> usize {
        self.k * self.blocks * self.m / LANES
    }

    const fn bits(&self) -> usize {
        match self.elem {
            Elem::F32 => 32,
            Elem::F16 | Elem::Bf16 => 16,
            Elem::I8 => 8,
            Elem::F64 => 64,
        }
    }

    /// Registers of A, and of B.
    #[cfg(test)]
    pub(crate) const fn ab_regs(&self) -> usize {
        (self.kpl() * self.bits()).div_ceil(32)
    }

    /// Registers of C, and of D.
    pub(crate) const fn cd_regs(&self) -> usize {
        let words = if matches!(self.elem, Elem::F64) { 2 } else { 1 };
        self.blocks * self.m * self.m / LANES * words
    }

    /// Block and row of D register `r` (register pair for f64) in lanes `g * M .. (g + 1) * M`.
    #[inline(always)]
    fn d_row(&self, r: usize, g: usize) -> (usize, usize) {
        match (self.elem, self.m) {
            (Elem::F64, 16) => (0, 4 * r + g),
            (Elem::F64, _) => (g % self.blocks, g / self.blocks),
            (_, 32) => (r / 16, 8 * (r % 16 / 4) + 4 * g + r % 4),
            (_, 16) => (r / 4, 4 * g + r % 4),
            _ => (g, r),
        }
    }

    /// The lane A is read from for lane `l`: CBSZ/ABID broadcast of blocks.
    #[inline(always)]
    fn a_lane(&self, i: &Inst, l: usize) -> usize {
        let log_blocks = self.blocks.trailing_zeros() as usize;
        let mask = (1usize << usize::from(i.mai.cbsz).min(log_blocks)) - 1;
        let block = l / self.m;
        let src = (block & !mask) | (usize::from(i.mai.abid) & mask);
        src * self.m + l % self.m
    }

    /// The lane B is read from for lane `l`: the BLGP pattern.
    #[inline(always)]
    fn b_lane(&self, i: &Inst, l: usize) -> usize {
        match i.mai.blgp & 7 {
            0 => l,
            1 => l % 32,
            2 => 32 + l % 32,
            3 => (l + 16) % 64,
            q => 16 * usize::from(q - 4) + l % 16,
        }
    }
}

/// The MFMA forms of gfx90a, named by their mnemonic's shape.
pub(crate) mod forms {
    use super::{Elem, Form};

    pub(crate) const F32_32X32X1: Form = Form::new(32, 1, 2, Elem::F32);
    pub(crate) const F32_16X16X1: Form = Form::new(16, 1, 4, Elem::F32);
    pub(crate) const F32_4X4X1: Form = Form::new(4, 1, 16, Elem::F32);
    pub(crate) const F32_32X32X2: Form = Form::new(32, 2, 1, Elem::F32);
    pub(crate) const F32_16X16X4: Form = Form::new(16, 4, 1, Elem::F32);
    pub(crate) const F16_32X32X4: Form = Form::new(32, 4, 2, Elem::F16);
    pub(crate) const F16_16X16X4: Form = Form::new(16, 4, 4, Elem::F16);
    pub(crate) const F16_4X4X4: Form = Form::new(4, 4, 16, Elem::F16);
    pub(crate) const F16_32X32X8: Form = Form::new(32, 8, 1, Elem::F16);
    pub(crate) const F16_16X16X16: Form = Form::new(16, 16, 1, Elem::F16);
    pub(crate) const I8_32X32X4: Form = Form::new(32, 4, 2, Elem::I8);
    pub(crate) const I8_16X16X4: Form = Form::new(16, 4, 4, Elem::I8);
    pub(crate) const I8_4X4X4: Form = Form::new(4, 4, 16, Elem::I8);
    pub(crate) const I8_32X32X8: Form = Form::new(32, 8, 1, Elem::I8);
    pub(crate) const I8_16X16X16: Form = Form::new(16, 16, 1, Elem::I8);
    pub(crate) const BF16_1K_32X32X4: Form = Form::new(32, 4, 2, Elem::Bf16);
    pub(crate) const BF16_1K_16X16X4: Form = Form::new(16, 4, 4, Elem::Bf16);
    pub(crate) const BF16_1K_4X4X4: Form = Form::new(4, 4, 16, Elem::Bf16);
    pub(crate) const BF16_1K_32X32X8: Form = Form::new(32, 8, 1, Elem::Bf16);
    pub(crate) const BF16_1K_16X16X16: Form = Form::new(16, 16, 1, Elem::Bf16);
    pub(crate) const BF16_32X32X2: Form = Form::new(32, 2, 2, Elem::Bf16);
    pub(crate) const BF16_16X16X2: Form = Form::new(16, 2, 4, Elem::Bf16);
    pub(crate) const BF16_4X4X2: Form = Form::new(4, 2, 16, Elem::Bf16);
    pub(crate) const BF16_32X32X4: Form = Form::new(32, 4, 1, Elem::Bf16);
    pub(crate) const BF16_16X16X8: Form = Form::new(16, 8, 1, Elem::Bf16);
    pub(crate) const F64_16X16X4: Form = Form::new(16, 4, 1, Elem::F64);
    pub(crate) const F64_4X4X4: Form = Form::new(4, 4, 4, Elem::F64);
}

/// f16 bits to f32, a denormal read as a zero of its sign (branch-free, so that a loop of
/// them vectorises).
#[inline(always)]
fn f16_ftz(h: u64) -> f32 {
    let h = (h & 0xffff) as u32;
    let sign = (h & 0x8000) << 16;
    let body = (h & 0x7fff) << 13;
    let exp = h & 0x7c00;
    let rebiased = body + ((127 - 15) << 23);
    let bits = if exp == 0 {
        0
    } else if exp == 0x7c00 {
        body | 0x7f80_0000
    } else {
        rebiased
    };
    f32::from_bits(sign | bits)
}

/// bf16 bits to f32, a denormal read as a zero of its sign.
#[inline(always)]
fn bf16_ftz(h: u64) -> f32 {
    f32::from_bits(flush32(((h & 0xffff) as u32) << 16))
}

/// A denormal f32 (bits) as a zero of its sign.
#[inline(always)]
fn flush32(x: u32) -> u32 {
    if x & 0x7f80_0000 == 0 {
        x & 0x8000_0000
    } else {
        x
    }
}

/// The registers of source `n` (A or B): its first register and the one after it.
#[inline(always)]
fn ab_regs(c: &Ctx<'_>, o: Operand, n: usize) -> (Lanes, Lanes) {
    match o {
        Operand::Vgpr(r) => {
            let at = c.vidx(r, n);
            (*c.w.v(at), *c.w.v(at + 1))
        }
        Operand::Agpr(r) => {
            let at = c.w.accum_offset as usize + usize::from(r);
            (*c.w.v(at), *c.w.v(at + 1))
        }
        o => {
            let x = c.s64(o);
            ([x as u32; LANES], [(x >> 32) as u32; LANES])
        }
    }
}

/// Values of A (or B) by their place in the lane: `[kk][lane]` is value kk of the lane.
type Vals<T> = [[T; LANES]; 4];

/// A and B as values of `T` by lane (see [`Vals`]), with the CBSZ/ABID and BLGP lane patterns
/// applied. A[b][i][k] is then `a[k % kpl][M * (k / kpl * blocks + b) + i]`, and B[b][k][j] for
/// j = 0..N is the run of lanes from `M * (k / kpl * blocks + b)` of `b[k % kpl]`.
#[inline(always)]
fn operands<T>(
    c: &Ctx<'_>,
    i: &Inst,
    f: &Form,
    conv: impl Fn(u64) -> T,
    a: &mut Vals<T>,
    b: &mut Vals<T>,
) {
    let (mut alo, mut ahi) = ab_regs(c, i.src[0], 0);
    let (mut blo, mut bhi) = ab_regs(c, i.src[1], 1);
    if f.elem != Elem::F64 && i.mai.cbsz != 0 {
        let (lo, hi) = (alo, ahi);
        for l in 0..LANES {
            let from = f.a_lane(i, l);
            (alo[l], ahi[l]) = (lo[from], hi[from]);
        }
    }
    if f.elem != Elem::F64 && i.mai.blgp != 0 {
        let (lo, hi) = (blo, bhi);
        for l in 0..LANES {
            let from = f.b_lane(i, l);
            (blo[l], bhi[l]) = (lo[from], hi[from]);
        }
    }
    // One loop over the lanes per value of the lane (these vectorise).
    let bits = f.bits();
    for kk in 0..f.kpl().min(4) {
        if bits == 64 {
            for l in 0..LANES {
                a[kk][l] = conv(u64::from(alo[l]) | u64::from(ahi[l]) << 32);
                b[kk][l] = conv(u64::from(blo[l]) | u64::from(bhi[l]) << 32);
            }
            continue;
        }
        let at = kk * bits;
        let (ra, rb) = if at >= 32 { (&ahi, &bhi) } else { (&alo, &blo) };
        let shift = at % 32;
        for l in 0..LANES {
            a[kk][l] = conv(u64::from(ra[l] >> shift));
            b[kk][l] = conv(u64::from(rb[l] >> shift));
        }
    }
}

/// Executes an MFMA of form `f` (inlined into each row's function, where `f` is a constant).
#[inline(always)]
pub(crate) fn exec(c: &mut Ctx<'_>, i: &Inst, f: &Form) -> R {
    match f.elem {
        Elem::F32 => float::<false>(c, i, f, |x| f32::from_bits(x as u32)),
        Elem::F16 => float::<true>(c, i, f, f16_ftz),
        Elem::Bf16 => float::<true>(c, i, f, bf16_ftz),
        Elem::I8 => int(c, i, f),
        Elem::F64 => double(c, i, f),
    }
    Ok(())
}

/// The K steps of one row of one block, in k order: A[blk][row][k] and where B[blk][k][0..N]
/// starts (value `kk` of the lanes from `base`).
#[inline(always)]
fn k_steps<T: Copy + Default, const N: usize, const K: usize>(
    f: &Form,
    a: &Vals<T>,
    blk: usize,
    row: usize,
) -> [(T, usize, usize); K] {
    let lg = f.kpl().trailing_zeros() as usize;
    let mask = (1 << lg) - 1;
    std::array::from_fn(|k| {
        let kk = k & mask & 3;
        let base = (N * ((k >> lg) * f.blocks + blk)) % LANES;
        (a[kk][(base + row) % LANES], kk, base)
    })
}

/// B[blk][k][0..N] for a step of [`k_steps`].
#[inline(always)]
fn b_row<T, const N: usize>(b: &Vals<T>, kk: usize, base: usize) -> Option<&[T; N]> {
    b.get(kk)?.get(base..base + N)?.try_into().ok()
}

/// Where C comes from.
enum CSource {
    /// C registers as they are, from this unified index: D register r is written after C
    /// register r is read, so D may equal C or start below it.
    Live(usize),
    /// C copied out first: D starts inside C, above its first register (an encoding the
    /// assembler refuses; every C register is still read before D overwrites it).
    Copied(Vec<Lanes>),
    /// An inline constant (or scalar) for every element.
    Const(u64),
}

impl CSource {
    /// D's unified index and C's source for an instruction with `n` C registers.
    #[inline(always)]
    fn new(c: &Ctx<'_>, i: &Inst, n: usize) -> (usize, Self) {
        let acc = c.w.accum_offset as usize;
        let d = usize::from(i.dst) + if i.mai.acc_cd { acc } else { 0 };
        let src = match i.src[2] {
            Operand::Vgpr(r) | Operand::Agpr(r) => {
                let cr = usize::from(r) + if i.src[2] == Operand::Agpr(r) { acc } else { 0 };
                if cr < d && d < cr + n {
                    CSource::Copied((0..n).map(|r| *c.w.v(cr + r)).collect())
                } else {
                    CSource::Live(cr)
                }
            }
            o => CSource::Const(c.s64(o)),
        };
        (d, src)
    }

    /// Puts C register `r` (`words` 32-bit words of each element: 1, or 2 for f64) into D
    /// register `d + r`, which it returns to be accumulated into (None past the file's end).
    #[inline(always)]
    fn load<'w>(
        &self,
        c: &'w mut Ctx<'_>,
        d: usize,
        r: usize,
        words: usize,
    ) -> Option<&'w mut Lanes> {
        let v = match self {
            CSource::Live(base) if base + r == d + r => None,
            CSource::Live(base) => Some(*c.w.v(base + r)),
            CSource::Copied(v) => Some(v.get(r).copied().unwrap_or([0; LANES])),
            CSource::Const(x) => Some([(x >> (32 * ((r % words) as u64))) as u32; LANES]),
        };
        let dst = c.w.v_mut(d + r)?;
        if let Some(v) = v {
            *dst = v;
        }
        Some(dst)
    }
}

/// Accumulates A x B into one D register (holding C): form, A, B, the register, its number.
type RegFn<T> = fn(&Form, &Vals<T>, &Vals<T>, &mut Lanes, usize);

/// The f32-accumulating forms (f32, f16, bf16); FTZ flushes C and D denormals.
#[inline(always)]
fn float<const FTZ: bool>(c: &mut Ctx<'_>, i: &Inst, f: &Form, conv: impl Fn(u64) -> f32) {
    let mut a = [[0f32; LANES]; 4];
    let mut b = [[0f32; LANES]; 4];
    operands(c, i, f, conv, &mut a, &mut b);
    let n = f.cd_regs();
    let (d, src) = CSource::new(c, i, n);
    // The shape as constants, so that the lane loops have fixed lengths (folded to one arm:
    // `f` is a constant where this is inlined).
    let run: RegFn<f32> = match (f.m, f.k) {
        (32, 1) => float_reg::<32, 1, FTZ>,
        (32, 2) => float_reg::<32, 2, FTZ>,
        (32, 4) => float_reg::<32, 4, FTZ>,
        (32, 8) => float_reg::<32, 8, FTZ>,
        (16, 1) => float_reg::<16, 1, FTZ>,
        (16, 2) => float_reg::<16, 2, FTZ>,
        (16, 4) => float_reg::<16, 4, FTZ>,
        (16, 8) => float_reg::<16, 8, FTZ>,
        (16, 16) => float_reg::<16, 16, FTZ>,
        (4, 1) => float_reg::<4, 1, FTZ>,
        (4, 2) => float_reg::<4, 2, FTZ>,
        _ => float_reg::<4, 4, FTZ>,
    };
    for r in 0..n {
        let Some(acc) = src.load(c, d, r, 1) else {
            continue;
        };
        run(f, &a, &b, acc, r);
    }
}

/// Accumulates into D register `r` (holding C) of an f32-accumulating form with M = N: each
/// group of N lanes is one row of one block, a scalar of A times a row of B added per k (this
/// vectorises over the lanes; kept out of line so that it does, rather than being unrolled
/// with the form's constants).
#[inline(never)]
fn float_reg<const N: usize, const K: usize, const FTZ: bool>(
    f: &Form,
    a: &Vals<f32>,
    b: &Vals<f32>,
    d: &mut Lanes,
    r: usize,
) {
    for (g, lanes) in d.chunks_exact_mut(N).enumerate() {
        let Ok(lanes) = <&mut [u32; N]>::try_from(lanes) else {
            continue;
        };
        let (blk, row) = f.d_row(r, g);
        let mut acc = [0f32; N];
        for j in 0..N {
            acc[j] = f32::from_bits(if FTZ { flush32(lanes[j]) } else { lanes[j] });
        }
        for (x, kk, base) in k_steps::<f32, N, K>(f, a, blk, row) {
            let Some(brow) = b_row::<f32, N>(b, kk, base) else {
                continue;
            };
            for j in 0..N {
                acc[j] += x * brow[j];
            }
        }
        for j in 0..N {
            let x = acc[j].to_bits();
            lanes[j] = if FTZ { flush32(x) } else { x };
        }
    }
}

/// The i8 forms: i32 accumulation, wrapping.
#[inline(always)]
fn int(c: &mut Ctx<'_>, i: &Inst, f: &Form) {
    let mut a = [[0i32; LANES]; 4];
    let mut b = [[0i32; LANES]; 4];
    operands(c, i, f, |x| i32::from(x as u8 as i8), &mut a, &mut b);
    let n = f.cd_regs();
    let (d, src) = CSource::new(c, i, n);
    let run: RegFn<i32> = match (f.m, f.k) {
        (32, 8) => int_reg::<32, 8>,
        (32, _) => int_reg::<32, 4>,
        (16, 16) => int_reg::<16, 16>,
        (16, _) => int_reg::<16, 4>,
        _ => int_reg::<4, 4>,
    };
    for r in 0..n {
        let Some(acc) = src.load(c, d, r, 1) else {
            continue;
        };
        run(f, &a, &b, acc, r);
    }
}

#[inline(never)]
fn int_reg<const N: usize, const K: usize>(
    f: &Form,
    a: &Vals<i32>,
    b: &Vals<i32>,
    d: &mut Lanes,
    r: usize,
) {
    for (g, lanes) in d.chunks_exact_mut(N).enumerate() {
        let Ok(lanes) = <&mut [u32; N]>::try_from(lanes) else {
            continue;
        };
        let (blk, row) = f.d_row(r, g);
        let mut acc: [i32; N] = std::array::from_fn(|j| lanes[j] as i32);
        for (x, kk, base) in k_steps::<i32, N, K>(f, a, blk, row) {
            let Some(brow) = b_row::<i32, N>(b, kk, base) else {
                continue;
            };
            for j in 0..N {
                acc[j] = acc[j].wrapping_add(x.wrapping_mul(brow[j]));
            }
        }
        for j in 0..N {
            lanes[j] = acc[j] as u32;
        }
    }
}

/// The f64 forms: register pairs, denormals kept.
#[inline(always)]
fn double(c: &mut Ctx<'_>, i: &Inst, f: &Form) {
    let mut a = [[0f64; LANES]; 4];
    let mut b = [[0f64; LANES]; 4];
    operands(c, i, f, f64::from_bits, &mut a, &mut b);
    let n = f.cd_regs();
    let (d, src) = CSource::new(c, i, n);
    for p in 0..n / 2 {
        let lo = src.load(c, d, 2 * p, 2).map(|v| *v);
        let hi = src.load(c, d, 2 * p + 1, 2).map(|v| *v);
        let (Some(lo), Some(hi)) = (lo, hi) else {
            continue;
        };
        let mut acc: [f64; LANES] =
            std::array::from_fn(|l| f64::from_bits(u64::from(lo[l]) | u64::from(hi[l]) << 32));
        match f.m {
            16 => double_pair::<16, 4>(f, &a, &b, &mut acc, p),
            _ => double_pair::<4, 4>(f, &a, &b, &mut acc, p),
        }
        if let Some(reg) = c.w.v_mut(d + 2 * p) {
            *reg = std::array::from_fn(|l| acc[l].to_bits() as u32);
        }
        if let Some(reg) = c.w.v_mut(d + 2 * p + 1) {
            *reg = std::array::from_fn(|l| (acc[l].to_bits() >> 32) as u32);
        }
    }
}

#[inline(never)]
fn double_pair<const N: usize, const K: usize>(
    f: &Form,
    a: &Vals<f64>,
    b: &Vals<f64>,
    d: &mut [f64; LANES],
    p: usize,
) {
    for (g, lanes) in d.chunks_exact_mut(N).enumerate() {
        let Ok(acc) = <&mut [f64; N]>::try_from(lanes) else {
            continue;
        };
        let (blk, row) = f.d_row(p, g);
        for (x, kk, base) in k_steps::<f64, N, K>(f, a, blk, row) {
            let Some(brow) = b_row::<f64, N>(b, kk, base) else {
                continue;
            };
            for j in 0..N {
                acc[j] += x * brow[j];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::forms::*;
    use super::*;

    const ALL: [Form; 27] = [
        F32_32X32X1,
        F32_16X16X1,
        F32_4X4X1,
        F32_32X32X2,
        F32_16X16X4,
        F16_32X32X4,
        F16_16X16X4,
        F16_4X4X4,
        F16_32X32X8,
        F16_16X16X16,
        I8_32X32X4,
        I8_16X16X4,
        I8_4X4X4,
        I8_32X32X8,
        I8_16X16X16,
        BF16_1K_32X32X4,
        BF16_1K_16X16X4,
        BF16_1K_4X4X4,
        BF16_1K_32X32X8,
        BF16_1K_16X16X16,
        BF16_32X32X2,
        BF16_16X16X2,
        BF16_4X4X2,
        BF16_32X32X4,
        BF16_16X16X8,
        F64_16X16X4,
        F64_4X4X4,
    ];

    #[test]
    fn every_form_fits_the_wave_and_maps_each_d_element_once() {
        for f in ALL {
            assert!(f.kpl() >= 1 && f.kpl() <= 4, "{f:?}");
            assert!(
                f.ab_regs() <= 2 && f.blocks * f.m * f.k <= 4 * LANES,
                "{f:?}"
            );
            let pairs = if f.elem == Elem::F64 { 2 } else { 1 };
            let mut seen = vec![false; f.blocks * f.m * f.m];
            for r in 0..f.cd_regs() / pairs {
                for g in 0..LANES / f.m {
                    let (b, i) = f.d_row(r, g);
                    for j in 0..f.m {
                        let e = (b * f.m + i) * f.m + j;
                        assert!(!seen[e], "{f:?} ({b}, {i}, {j}) twice");
                        seen[e] = true;
                    }
                }
            }
            assert!(seen.iter().all(|&s| s), "{f:?}");
        }
    }

    #[test]
    fn f16_and_bf16_read_denormals_as_signed_zeros() {
        assert_eq!(f16_ftz(0x3c00), 1.0);
        assert_eq!(f16_ftz(0xc000), -2.0);
        assert_eq!(f16_ftz(0x7bff), 65504.0);
        assert_eq!(f16_ftz(0x0400), 2f32.powi(-14));
        assert_eq!(f16_ftz(0x0001).to_bits(), 0);
        assert_eq!(f16_ftz(0x83ff).to_bits(), 0x8000_0000);
        assert_eq!(f16_ftz(0x7c00), f32::INFINITY);
        assert!(f16_ftz(0x7e00).is_nan());
        assert_eq!(bf16_ftz(0x3f80), 1.0);
        assert_eq!(bf16_ftz(0x8001).to_bits(), 0x8000_0000);
    }
}
