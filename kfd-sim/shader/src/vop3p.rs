//! Packed math (VOP3P): two 16-bit or two 32-bit halves per lane, each source half chosen by
//! OPSEL (low result) and OPSEL_HI (high result); mixed-precision FMA, dot products, and the
//! gfx90a accumulation-register moves and matrix instructions (their arithmetic is in `mfma`).

use crate::decode::{Inst, Operand};
use crate::exec::Ctx;
use crate::float;
use crate::mfma::{self, forms};
use crate::operand::Lanes64;
use crate::table::{flag, row, Encoding, OpDef, Ty};
use crate::valu::{ex, u32_1, R};
use crate::wave::{Lanes, LANES};

/// A packed 16-bit operation: `f` gets the selected halves of each source, per result half.
#[inline(always)]
fn pk16<const N: usize>(
    c: &mut Ctx<'_>,
    i: &Inst,
    float_op: bool,
    f: impl Fn([u32; N]) -> u32,
) -> R {
    let s: [Lanes; N] = std::array::from_fn(|n| c.raw32(i.src[n], n));
    let mut r = [0u32; LANES];
    for l in 0..LANES {
        let mut out = 0u32;
        for h in 0..2 {
            let (sel, neg) = if h == 0 {
                (i.opsel, i.neg)
            } else {
                (i.opsel_hi, i.neg_hi)
            };
            let a: [u32; N] = std::array::from_fn(|n| {
                let v = (s[n][l] >> (16 * u32::from(sel >> n & 1))) & 0xffff;
                if float_op && neg >> n & 1 != 0 {
                    v ^ 0x8000
                } else {
                    v
                }
            });
            out |= (f(a) & 0xffff) << (16 * h);
        }
        r[l] = out;
    }
    c.write32(i, &r);
    Ok(())
}

/// A packed f32 operation on register pairs (gfx90a `v_pk_*_f32`).
fn pk32<const N: usize>(c: &mut Ctx<'_>, i: &Inst, f: impl Fn([f32; N]) -> f32) -> R {
    let s: [Lanes64; N] = std::array::from_fn(|n| match i.src[n] {
        Operand::Const(v) => [v & 0xffff_ffff | v << 32; LANES],
        o => c.raw64(o, n),
    });
    let mut r = [0u64; LANES];
    for l in 0..LANES {
        let mut out = 0u64;
        for h in 0..2 {
            let (sel, neg) = if h == 0 {
                (i.opsel, i.neg)
            } else {
                (i.opsel_hi, i.neg_hi)
            };
            let a: [f32; N] = std::array::from_fn(|n| {
                let v = f32::from_bits((s[n][l] >> (32 * u64::from(sel >> n & 1))) as u32);
                if neg >> n & 1 != 0 {
                    -v
                } else {
                    v
                }
            });
            out |= u64::from(f(a).to_bits()) << (32 * h);
        }
        r[l] = out;
    }
    c.write64(i, &r);
    Ok(())
}

fn pk_mov_b32(c: &mut Ctx<'_>, i: &Inst) -> R {
    let a = c.raw64(i.src[0], 0);
    let b = c.raw64(i.src[1], 1);
    let mut r = [0u64; LANES];
    for l in 0..LANES {
        let lo = a[l] >> (32 * u64::from(i.opsel & 1)) & 0xffff_ffff;
        let hi = b[l] >> (32 * u64::from(i.opsel >> 1 & 1)) & 0xffff_ffff;
        r[l] = lo | hi << 32;
    }
    c.write64(i, &r);
    Ok(())
}

/// fma_mix: each source is an f32, or (OPSEL_HI set) the f16 half OPSEL picks; NEG and
/// NEG_HI (as ABS) apply. `out`: 0 f32, 1 f16 to the low half, 2 f16 to the high half.
fn fma_mix(c: &mut Ctx<'_>, i: &Inst, out: u8) -> R {
    let s: [Lanes; 3] = std::array::from_fn(|n| c.raw32(i.src[n], n));
    let old = *c.w.v(c.dst_index(i));
    let mut r = [0u32; LANES];
    for l in 0..LANES {
        let a: [f64; 3] = std::array::from_fn(|n| {
            let raw = s[n][l];
            let mut v = if i.opsel_hi >> n & 1 != 0 {
                f64::from(float::h2f(raw >> (16 * u32::from(i.opsel >> n & 1))))
            } else {
                f64::from(f32::from_bits(raw))
            };
            if i.neg_hi >> n & 1 != 0 {
                v = v.abs();
            }
            if i.neg >> n & 1 != 0 {
                v = -v;
            }
            v
        });
        let v = a[0].mul_add(a[1], a[2]);
        r[l] = match out {
            0 => {
                let x = v as f32;
                (if i.clamp { x.clamp(0.0, 1.0) } else { x }).to_bits()
            }
            1 => (old[l] & 0xffff_0000) | float::d2h(v),
            _ => (old[l] & 0xffff) | float::d2h(v) << 16,
        };
    }
    c.write32(i, &r);
    Ok(())
}

/// Dot products: `parts` lanes of `bits` each, signed or not, plus src2.
fn dot(c: &mut Ctx<'_>, i: &Inst, bits: u32, signed: bool) -> R {
    let a = c.raw32(i.src[0], 0);
    let b = c.raw32(i.src[1], 1);
    let d = c.raw32(i.src[2], 2);
    let mut r = [0u32; LANES];
    let parts = 32 / bits;
    let mask = (1u32 << bits) - 1;
    for l in 0..LANES {
        let mut acc = i64::from(d[l] as i32);
        for k in 0..parts {
            let x = (a[l] >> (k * bits)) & mask;
            let y = (b[l] >> (k * bits)) & mask;
            let (x, y) = if signed {
                let sx = |v: u32| i64::from(((v << (32 - bits)) as i32) >> (32 - bits));
                (sx(x), sx(y))
            } else {
                (i64::from(x), i64::from(y))
            };
            acc += x * y;
        }
        r[l] = if i.clamp {
            if signed {
                acc.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32 as u32
            } else {
                acc.clamp(0, i64::from(u32::MAX)) as u32
            }
        } else {
            acc as u32
        };
    }
    c.write32(i, &r);
    Ok(())
}

fn h(x: u32) -> f32 {
    float::h2f(x)
}

fn s16(x: u32) -> i32 {
    i32::from(x as u16 as i16)
}

const PK: [Ty; 4] = [Ty::B32; 4];
const PKF: [Ty; 4] = [Ty::F16; 4];
const PK32: [Ty; 4] = [Ty::F32; 4];
const PKB64: [Ty; 4] = [Ty::B64; 4];
const PKF64: [Ty; 4] = [Ty::F64; 4];
/// MFMA operand types: D, A, B, C (they decide how an inline constant C reads).
const MF32: [Ty; 4] = [Ty::F32; 4];
const MF16: [Ty; 4] = [Ty::F32, Ty::F16, Ty::F16, Ty::F32];
const MBF16: [Ty; 4] = [Ty::F32, Ty::B16, Ty::B16, Ty::F32];

use Encoding::Vop3p as P;

/// VOP3P opcodes.
pub(crate) static VOP3P: &[OpDef] = &[
    row(
        P,
        0x00,
        "v_pk_mad_i16",
        ex!(|c, i| pk16(c, i, false, |[a, b, d]| (s16(a) * s16(b) + s16(d)) as u32)),
        PK,
        0,
    ),
    row(
        P,
        0x01,
        "v_pk_mul_lo_u16",
        ex!(|c, i| pk16(c, i, false, |[a, b]| a.wrapping_mul(b))),
        PK,
        0,
    ),
    row(
        P,
        0x02,
        "v_pk_add_i16",
        ex!(|c, i| pk16(c, i, false, |[a, b]| (s16(a) + s16(b)) as u32)),
        PK,
        0,
    ),
    row(
        P,
        0x03,
        "v_pk_sub_i16",
        ex!(|c, i| pk16(c, i, false, |[a, b]| (s16(a) - s16(b)) as u32)),
        PK,
        0,
    ),
    row(
        P,
        0x04,
        "v_pk_lshlrev_b16",
        ex!(|c, i| pk16(c, i, false, |[a, b]| b << (a & 15))),
        PK,
        0,
    ),
    row(
        P,
        0x05,
        "v_pk_lshrrev_b16",
        ex!(|c, i| pk16(c, i, false, |[a, b]| b >> (a & 15))),
        PK,
        0,
    ),
    row(
        P,
        0x06,
        "v_pk_ashrrev_i16",
        ex!(|c, i| pk16(c, i, false, |[a, b]| (s16(b) >> (a & 15)) as u32)),
        PK,
        0,
    ),
    row(
        P,
        0x07,
        "v_pk_max_i16",
        ex!(|c, i| pk16(c, i, false, |[a, b]| s16(a).max(s16(b)) as u32)),
        PK,
        0,
    ),
    row(
        P,
        0x08,
        "v_pk_min_i16",
        ex!(|c, i| pk16(c, i, false, |[a, b]| s16(a).min(s16(b)) as u32)),
        PK,
        0,
    ),
    row(
        P,
        0x09,
        "v_pk_mad_u16",
        ex!(|c, i| pk16(c, i, false, |[a, b, d]| a.wrapping_mul(b).wrapping_add(d))),
        PK,
        0,
    ),
    row(
        P,
        0x0a,
        "v_pk_add_u16",
        ex!(|c, i| pk16(c, i, false, |[a, b]| a.wrapping_add(b))),
        PK,
        0,
    ),
    row(
        P,
        0x0b,
        "v_pk_sub_u16",
        ex!(|c, i| pk16(c, i, false, |[a, b]| a.wrapping_sub(b))),
        PK,
        0,
    ),
    row(
        P,
        0x0c,
        "v_pk_max_u16",
        ex!(|c, i| pk16(c, i, false, |[a, b]| a.max(b))),
        PK,
        0,
    ),
    row(
        P,
        0x0d,
        "v_pk_min_u16",
        ex!(|c, i| pk16(c, i, false, |[a, b]| a.min(b))),
        PK,
        0,
    ),
    row(
        P,
        0x0e,
        "v_pk_fma_f16",
        ex!(|c, i| pk16(c, i, true, |[a, b, d]| {
            float::d2h(f64::from(h(a)).mul_add(f64::from(h(b)), f64::from(h(d))))
        })),
        PKF,
        0,
    ),
    row(
        P,
        0x0f,
        "v_pk_add_f16",
        ex!(|c, i| pk16(c, i, true, |[a, b]| float::f2h(h(a) + h(b)))),
        PKF,
        0,
    ),
    row(
        P,
        0x10,
        "v_pk_mul_f16",
        ex!(|c, i| pk16(c, i, true, |[a, b]| float::f2h(h(a) * h(b)))),
        PKF,
        0,
    ),
    row(
        P,
        0x11,
        "v_pk_min_f16",
        ex!(|c, i| pk16(c, i, true, |[a, b]| float::f2h(h(a).min(h(b))))),
        PKF,
        0,
    ),
    row(
        P,
        0x12,
        "v_pk_max_f16",
        ex!(|c, i| pk16(c, i, true, |[a, b]| float::f2h(h(a).max(h(b))))),
        PKF,
        0,
    ),
    row(
        P,
        0x20,
        "v_fma_mix_f32",
        ex!(|c, i| fma_mix(c, i, 0)),
        PK32,
        0,
    ),
    row(
        P,
        0x21,
        "v_fma_mixlo_f16",
        ex!(|c, i| fma_mix(c, i, 1)),
        PK32,
        0,
    ),
    row(
        P,
        0x22,
        "v_fma_mixhi_f16",
        ex!(|c, i| fma_mix(c, i, 2)),
        PK32,
        0,
    ),
    row(
        P,
        0x23,
        "v_dot2_f32_f16",
        ex!(|c, i| {
            let a = c.raw32(i.src[0], 0);
            let b = c.raw32(i.src[1], 1);
            let d = c.raw32(i.src[2], 2);
            let mut r = [0u32; LANES];
            for l in 0..LANES {
                let lo = f64::from(h(a[l])) * f64::from(h(b[l]));
                let hi = f64::from(h(a[l] >> 16)) * f64::from(h(b[l] >> 16));
                r[l] = ((lo + hi + f64::from(f32::from_bits(d[l]))) as f32).to_bits();
            }
            c.write32(i, &r);
            Ok(())
        }),
        [Ty::F32, Ty::F16, Ty::F16, Ty::F32],
        0,
    ),
    row(
        P,
        0x26,
        "v_dot2_i32_i16",
        ex!(|c, i| dot(c, i, 16, true)),
        PK,
        0,
    ),
    row(
        P,
        0x27,
        "v_dot2_u32_u16",
        ex!(|c, i| dot(c, i, 16, false)),
        PK,
        0,
    ),
    row(
        P,
        0x28,
        "v_dot4_i32_i8",
        ex!(|c, i| dot(c, i, 8, true)),
        PK,
        0,
    ),
    row(
        P,
        0x29,
        "v_dot4_u32_u8",
        ex!(|c, i| dot(c, i, 8, false)),
        PK,
        0,
    ),
    row(
        P,
        0x2a,
        "v_dot8_i32_i4",
        ex!(|c, i| dot(c, i, 4, true)),
        PK,
        0,
    ),
    row(
        P,
        0x2b,
        "v_dot8_u32_u4",
        ex!(|c, i| dot(c, i, 4, false)),
        PK,
        0,
    ),
    row(
        P,
        0x30,
        "v_pk_fma_f32",
        ex!(|c, i| pk32(c, i, |[a, b, d]| a.mul_add(b, d))),
        PK32,
        0,
    ),
    row(
        P,
        0x31,
        "v_pk_mul_f32",
        ex!(|c, i| pk32(c, i, |[a, b]| a * b)),
        PK32,
        0,
    ),
    row(
        P,
        0x32,
        "v_pk_add_f32",
        ex!(|c, i| pk32(c, i, |[a, b]| a + b)),
        PK32,
        0,
    ),
    row(P, 0x33, "v_pk_mov_b32", pk_mov_b32, PKB64, 0),
    row(
        P,
        0x40,
        "v_mfma_f32_32x32x1f32",
        ex!(|c, i| mfma::exec(c, i, &forms::F32_32X32X1)),
        MF32,
        flag::MFMA,
    ),
    row(
        P,
        0x41,
        "v_mfma_f32_16x16x1f32",
        ex!(|c, i| mfma::exec(c, i, &forms::F32_16X16X1)),
        MF32,
        flag::MFMA,
    ),
    row(
        P,
        0x42,
        "v_mfma_f32_4x4x1f32",
        ex!(|c, i| mfma::exec(c, i, &forms::F32_4X4X1)),
        MF32,
        flag::MFMA,
    ),
    row(
        P,
        0x44,
        "v_mfma_f32_32x32x2f32",
        ex!(|c, i| mfma::exec(c, i, &forms::F32_32X32X2)),
        MF32,
        flag::MFMA,
    ),
    row(
        P,
        0x45,
        "v_mfma_f32_16x16x4f32",
        ex!(|c, i| mfma::exec(c, i, &forms::F32_16X16X4)),
        MF32,
        flag::MFMA,
    ),
    row(
        P,
        0x48,
        "v_mfma_f32_32x32x4f16",
        ex!(|c, i| mfma::exec(c, i, &forms::F16_32X32X4)),
        MF16,
        flag::MFMA,
    ),
    row(
        P,
        0x49,
        "v_mfma_f32_16x16x4f16",
        ex!(|c, i| mfma::exec(c, i, &forms::F16_16X16X4)),
        MF16,
        flag::MFMA,
    ),
    row(
        P,
        0x4a,
        "v_mfma_f32_4x4x4f16",
        ex!(|c, i| mfma::exec(c, i, &forms::F16_4X4X4)),
        MF16,
        flag::MFMA,
    ),
    row(
        P,
        0x4c,
        "v_mfma_f32_32x32x8f16",
        ex!(|c, i| mfma::exec(c, i, &forms::F16_32X32X8)),
        MF16,
        flag::MFMA,
    ),
    row(
        P,
        0x4d,
        "v_mfma_f32_16x16x16f16",
        ex!(|c, i| mfma::exec(c, i, &forms::F16_16X16X16)),
        MF16,
        flag::MFMA,
    ),
    row(
        P,
        0x50,
        "v_mfma_i32_32x32x4i8",
        ex!(|c, i| mfma::exec(c, i, &forms::I8_32X32X4)),
        PK,
        flag::MFMA,
    ),
    row(
        P,
        0x51,
        "v_mfma_i32_16x16x4i8",
        ex!(|c, i| mfma::exec(c, i, &forms::I8_16X16X4)),
        PK,
        flag::MFMA,
    ),
    row(
        P,
        0x52,
        "v_mfma_i32_4x4x4i8",
        ex!(|c, i| mfma::exec(c, i, &forms::I8_4X4X4)),
        PK,
        flag::MFMA,
    ),
    row(
        P,
        0x54,
        "v_mfma_i32_32x32x8i8",
        ex!(|c, i| mfma::exec(c, i, &forms::I8_32X32X8)),
        PK,
        flag::MFMA,
    ),
    row(
        P,
        0x55,
        "v_mfma_i32_16x16x16i8",
        ex!(|c, i| mfma::exec(c, i, &forms::I8_16X16X16)),
        PK,
        flag::MFMA,
    ),
    row(
        P,
        0x58,
        "v_accvgpr_read_b32",
        ex!(|c, i| u32_1(c, i, |a| a)),
        PK,
        flag::SRC_AGPR,
    ),
    row(
        P,
        0x59,
        "v_accvgpr_write_b32",
        ex!(|c, i| u32_1(c, i, |a| a)),
        PK,
        flag::DST_AGPR,
    ),
    row(
        P,
        0x63,
        "v_mfma_f32_32x32x4bf16_1k",
        ex!(|c, i| mfma::exec(c, i, &forms::BF16_1K_32X32X4)),
        MBF16,
        flag::MFMA,
    ),
    row(
        P,
        0x64,
        "v_mfma_f32_16x16x4bf16_1k",
        ex!(|c, i| mfma::exec(c, i, &forms::BF16_1K_16X16X4)),
        MBF16,
        flag::MFMA,
    ),
    row(
        P,
        0x65,
        "v_mfma_f32_4x4x4bf16_1k",
        ex!(|c, i| mfma::exec(c, i, &forms::BF16_1K_4X4X4)),
        MBF16,
        flag::MFMA,
    ),
    row(
        P,
        0x66,
        "v_mfma_f32_32x32x8bf16_1k",
        ex!(|c, i| mfma::exec(c, i, &forms::BF16_1K_32X32X8)),
        MBF16,
        flag::MFMA,
    ),
    row(
        P,
        0x67,
        "v_mfma_f32_16x16x16bf16_1k",
        ex!(|c, i| mfma::exec(c, i, &forms::BF16_1K_16X16X16)),
        MBF16,
        flag::MFMA,
    ),
    row(
        P,
        0x68,
        "v_mfma_f32_32x32x2bf16",
        ex!(|c, i| mfma::exec(c, i, &forms::BF16_32X32X2)),
        MBF16,
        flag::MFMA,
    ),
    row(
        P,
        0x69,
        "v_mfma_f32_16x16x2bf16",
        ex!(|c, i| mfma::exec(c, i, &forms::BF16_16X16X2)),
        MBF16,
        flag::MFMA,
    ),
    row(
        P,
        0x6b,
        "v_mfma_f32_4x4x2bf16",
        ex!(|c, i| mfma::exec(c, i, &forms::BF16_4X4X2)),
        MBF16,
        flag::MFMA,
    ),
    row(
        P,
        0x6c,
        "v_mfma_f32_32x32x4bf16",
        ex!(|c, i| mfma::exec(c, i, &forms::BF16_32X32X4)),
        MBF16,
        flag::MFMA,
    ),
    row(
        P,
        0x6d,
        "v_mfma_f32_16x16x8bf16",
        ex!(|c, i| mfma::exec(c, i, &forms::BF16_16X16X8)),
        MBF16,
        flag::MFMA,
    ),
    row(
        P,
        0x6e,
        "v_mfma_f64_16x16x4f64",
        ex!(|c, i| mfma::exec(c, i, &forms::F64_16X16X4)),
        PKF64,
        flag::MFMA,
    ),
    row(
        P,
        0x6f,
        "v_mfma_f64_4x4x4f64",
        ex!(|c, i| mfma::exec(c, i, &forms::F64_4X4X4)),
        PKF64,
        flag::MFMA,
    ),
];
