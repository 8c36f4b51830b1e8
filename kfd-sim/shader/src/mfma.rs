//! Matrix fused multiply-add (`v_mfma_*`, gfx90a): D = A x B + C for each block of an
//! instruction, the matrices spread over the lanes and registers of the whole wave.
//!
//! A form is M x N x K (here always N = M) with some number of blocks; `kpl` = K x blocks x M / 64
//! values of k sit in each lane of A and of B (f32 and f64 1, bf16 2, f16, bf16_1k and i8 4).
//! Layouts (CDNA2, as AMD's ISA reference and its matrix instruction calculator give them):
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
//! nearest even: f32 products are rounded to f32 before the add, f16 and bf16 products are exact
//! in f32, i8 accumulates in wrapping i32, f64 in f64. The f16, bf16 and bf16_1k forms flush
//! denormal inputs (A, B and C) and outputs to zero of the same sign, as MI200 does; the f32
//! and f64 forms keep denormals. MODE's denormal and rounding fields do not apply.
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

/// Most values of A (or B) an instruction holds: 64 lanes of 4.
const MAX_AB: usize = 4 * LANES;

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
    pub(crate) const fn ab_regs(&self) -> usize {
        (self.kpl() * self.bits()).div_ceil(32)
    }

    /// Registers of C, and of D.
    pub(crate) const fn cd_regs(&self) -> usize {
        let words = if matches!(self.elem, Elem::F64) { 2 } else { 1 };
        self.blocks * self.m * self.m / LANES * words
    }

    /// Block and row of D register `r` (register pair for f64) in lanes `g * M .. (g + 1) * M`.
    #[inline]
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
    fn a_lane(&self, i: &Inst, l: usize) -> usize {
        if self.elem == Elem::F64 {
            return l;
        }
        let log_blocks = self.blocks.trailing_zeros() as usize;
        let mask = (1usize << usize::from(i.mai.cbsz).min(log_blocks)) - 1;
        let block = l / self.m;
        let src = (block & !mask) | (usize::from(i.mai.abid) & mask);
        src * self.m + l % self.m
    }

    /// The lane B is read from for lane `l`: the BLGP pattern.
    fn b_lane(&self, i: &Inst, l: usize) -> usize {
        if self.elem == Elem::F64 {
            return l;
        }
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

/// f16 bits to f32, a denormal read as a zero of its sign.
#[inline]
fn f16_ftz(h: u64) -> f32 {
    let h = (h & 0xffff) as u32;
    let sign = (h & 0x8000) << 16;
    let exp = (h >> 10) & 0x1f;
    let man = (h & 0x3ff) << 13;
    f32::from_bits(match exp {
        0 => sign,
        31 => sign | 0x7f80_0000 | man,
        e => sign | (e + 112) << 23 | man,
    })
}

/// bf16 bits to f32, a denormal read as a zero of its sign.
#[inline]
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

/// The raw bits of A or B of every lane: up to 64 bits (two registers) a lane.
fn raw_ab(c: &Ctx<'_>, f: &Form, o: Operand, n: usize) -> [u64; LANES] {
    if f.ab_regs() == 2 {
        c.raw64(o, n)
    } else {
        let v = c.raw32(o, n);
        std::array::from_fn(|l| u64::from(v[l]))
    }
}

/// A and B as dense blocks of `T`: A at `(b * M + i) * K + k`, B at `(b * K + k) * M + j`,
/// with the CBSZ/ABID and BLGP lane patterns applied.
fn operands<T: Copy + Default>(
    c: &Ctx<'_>,
    i: &Inst,
    f: &Form,
    conv: impl Fn(u64) -> T,
) -> ([T; MAX_AB], [T; MAX_AB]) {
    let ra = raw_ab(c, f, i.src[0], 0);
    let rb = raw_ab(c, f, i.src[1], 1);
    let (m, k, kpl, bits) = (f.m, f.k, f.kpl(), f.bits());
    let mut a = [T::default(); MAX_AB];
    let mut b = [T::default(); MAX_AB];
    for l in 0..LANES {
        let (row, g) = (l % m, l / m);
        let (blk, kg) = (g % f.blocks, g / f.blocks);
        let (xa, xb) = (ra[f.a_lane(i, l)], rb[f.b_lane(i, l)]);
        for kk in 0..kpl {
            let kx = kg * kpl + kk;
            let shift = kk * bits;
            a[((blk * m + row) * k + kx) % MAX_AB] = conv(xa >> shift);
            b[((blk * k + kx) * m + row) % MAX_AB] = conv(xb >> shift);
        }
    }
    (a, b)
}

/// The unified-file index of D, and C's (None for a constant C).
fn cd_index(c: &Ctx<'_>, i: &Inst) -> (usize, Option<usize>) {
    let acc = c.w.accum_offset as usize;
    let d = usize::from(i.dst) + if i.mai.acc_cd { acc } else { 0 };
    let cr = match i.src[2] {
        Operand::Vgpr(r) => Some(usize::from(r)),
        Operand::Agpr(r) => Some(acc + usize::from(r)),
        _ => None,
    };
    (d, cr)
}

/// Executes an MFMA of form `f`.
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

/// The C registers of an instruction, read before D is written where D would overwrite a C
/// register not yet read (D starting inside C, above its first register).
enum CSource {
    /// C registers read as they are needed, from this unified index.
    Live(usize),
    /// C copied out first.
    Copied(Vec<Lanes>),
    /// An inline constant (or scalar) for every element.
    Const(u64),
}

impl CSource {
    fn new(c: &Ctx<'_>, i: &Inst, n: usize) -> (usize, Self) {
        let (d, cr) = cd_index(c, i);
        let src = match cr {
            Some(cr) if cr < d && d < cr + n => {
                CSource::Copied((0..n).map(|r| *c.w.v(cr + r)).collect())
            }
            Some(cr) => CSource::Live(cr),
            None => CSource::Const(c.s64(i.src[2])),
        };
        (d, src)
    }

    /// C register `r`.
    #[inline]
    fn reg(&self, c: &Ctx<'_>, r: usize) -> Lanes {
        match self {
            CSource::Live(base) => *c.w.v(base + r),
            CSource::Copied(v) => v.get(r).copied().unwrap_or([0; LANES]),
            CSource::Const(x) => [*x as u32; LANES],
        }
    }

    /// C register pair `p` (f64), low and high words.
    #[inline]
    fn pair(&self, c: &Ctx<'_>, p: usize) -> (Lanes, Lanes) {
        match self {
            CSource::Const(x) => ([*x as u32; LANES], [(*x >> 32) as u32; LANES]),
            _ => (self.reg(c, 2 * p), self.reg(c, 2 * p + 1)),
        }
    }
}

/// Writes D register `r` in every lane.
#[inline]
fn write_d(c: &mut Ctx<'_>, d: usize, v: &Lanes) {
    if let Some(reg) = c.w.v_mut(d) {
        *reg = *v;
    }
}

/// The f32-accumulating forms (f32, f16, bf16); FTZ flushes C and D denormals.
fn float<const FTZ: bool>(c: &mut Ctx<'_>, i: &Inst, f: &Form, conv: impl Fn(u64) -> f32) {
    let (a, b) = operands(c, i, f, conv);
    let n = f.cd_regs();
    let (d, src) = CSource::new(c, i, n);
    for r in 0..n {
        let cin = src.reg(c, r);
        let out = match f.m {
            32 => float_reg::<32, FTZ>(f, &a, &b, &cin, r),
            16 => float_reg::<16, FTZ>(f, &a, &b, &cin, r),
            _ => float_reg::<4, FTZ>(f, &a, &b, &cin, r),
        };
        write_d(c, d + r, &out);
    }
}

/// D register `r` of an f32-accumulating form with M = N: each group of N lanes is one row
/// of one block, a scalar of A times a row of B added per k (this vectorises over the lanes).
#[inline(always)]
fn float_reg<const N: usize, const FTZ: bool>(
    f: &Form,
    a: &[f32; MAX_AB],
    b: &[f32; MAX_AB],
    cin: &Lanes,
    r: usize,
) -> Lanes {
    let mut out = [0u32; LANES];
    for g in 0..LANES / N {
        let (blk, row) = f.d_row(r, g);
        let mut acc = [0f32; N];
        let lanes = g * N;
        for j in 0..N {
            let x = cin[lanes + j];
            acc[j] = f32::from_bits(if FTZ { flush32(x) } else { x });
        }
        for k in 0..f.k {
            let x = a[((blk * f.m + row) * f.k + k) % MAX_AB];
            let at = (blk * f.k + k) * N;
            let Some(Ok(brow)) = b.get(at..at + N).map(<&[f32; N]>::try_from) else {
                continue;
            };
            for j in 0..N {
                acc[j] += x * brow[j];
            }
        }
        for j in 0..N {
            let x = acc[j].to_bits();
            out[lanes + j] = if FTZ { flush32(x) } else { x };
        }
    }
    out
}

/// The i8 forms: i32 accumulation, wrapping.
fn int(c: &mut Ctx<'_>, i: &Inst, f: &Form) {
    let (a, b) = operands(c, i, f, |x| i32::from(x as u8 as i8));
    let n = f.cd_regs();
    let (d, src) = CSource::new(c, i, n);
    for r in 0..n {
        let cin = src.reg(c, r);
        let out = match f.m {
            32 => int_reg::<32>(f, &a, &b, &cin, r),
            16 => int_reg::<16>(f, &a, &b, &cin, r),
            _ => int_reg::<4>(f, &a, &b, &cin, r),
        };
        write_d(c, d + r, &out);
    }
}

#[inline(always)]
fn int_reg<const N: usize>(
    f: &Form,
    a: &[i32; MAX_AB],
    b: &[i32; MAX_AB],
    cin: &Lanes,
    r: usize,
) -> Lanes {
    let mut out = [0u32; LANES];
    for g in 0..LANES / N {
        let (blk, row) = f.d_row(r, g);
        let lanes = g * N;
        let mut acc: [i32; N] = std::array::from_fn(|j| cin[lanes + j] as i32);
        for k in 0..f.k {
            let x = a[((blk * f.m + row) * f.k + k) % MAX_AB];
            let at = (blk * f.k + k) * N;
            let Some(Ok(brow)) = b.get(at..at + N).map(<&[i32; N]>::try_from) else {
                continue;
            };
            for j in 0..N {
                acc[j] = acc[j].wrapping_add(x.wrapping_mul(brow[j]));
            }
        }
        for j in 0..N {
            out[lanes + j] = acc[j] as u32;
        }
    }
    out
}

/// The f64 forms: register pairs, denormals kept.
fn double(c: &mut Ctx<'_>, i: &Inst, f: &Form) {
    let (a, b) = operands(c, i, f, f64::from_bits);
    let n = f.cd_regs();
    let (d, src) = CSource::new(c, i, n);
    for p in 0..n / 2 {
        let (lo, hi) = src.pair(c, p);
        let cin: [f64; LANES] =
            std::array::from_fn(|l| f64::from_bits(u64::from(lo[l]) | u64::from(hi[l]) << 32));
        let out = match f.m {
            16 => double_pair::<16>(f, &a, &b, &cin, p),
            _ => double_pair::<4>(f, &a, &b, &cin, p),
        };
        let lo: Lanes = std::array::from_fn(|l| out[l].to_bits() as u32);
        let hi: Lanes = std::array::from_fn(|l| (out[l].to_bits() >> 32) as u32);
        write_d(c, d + 2 * p, &lo);
        write_d(c, d + 2 * p + 1, &hi);
    }
}

#[inline(always)]
fn double_pair<const N: usize>(
    f: &Form,
    a: &[f64; MAX_AB],
    b: &[f64; MAX_AB],
    cin: &[f64; LANES],
    p: usize,
) -> [f64; LANES] {
    let mut out = [0f64; LANES];
    for g in 0..LANES / N {
        let (blk, row) = f.d_row(p, g);
        let lanes = g * N;
        let mut acc: [f64; N] = std::array::from_fn(|j| cin[lanes + j]);
        for k in 0..f.k {
            let x = a[((blk * f.m + row) * f.k + k) % MAX_AB];
            let at = (blk * f.k + k) * N;
            let Some(Ok(brow)) = b.get(at..at + N).map(<&[f64; N]>::try_from) else {
                continue;
            };
            for j in 0..N {
                acc[j] += x * brow[j];
            }
        }
        out[lanes..lanes + N].copy_from_slice(&acc);
    }
    out
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
            assert!(f.ab_regs() <= 2 && f.blocks * f.m * f.k <= MAX_AB, "{f:?}");
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
