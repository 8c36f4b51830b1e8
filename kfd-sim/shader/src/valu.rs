//! The vector ALU: lane loops shared by the VOP1, VOP2 and VOP3 opcodes, and their rows of the
//! opcode table. Every loop runs over all 64 lanes into a result array that one masked store
//! writes back, so the compiler can vectorise it.

use crate::decode::{Inst, Operand};
use crate::exec::{Ctx, Exit};
use crate::float::{self, Denorm, QNAN32, QNAN64};
use crate::operand::Lanes64;
use crate::table::{flag, row, unsupported, Encoding, OpDef, Ty};
use crate::wave::{hwreg, Lanes, LANES};

pub(crate) type R = Result<(), Exit>;

/// An executor function from a block: `ex!(|c, i| body)`.
macro_rules! ex {
    (|$c:ident, $i:ident| $body:expr) => {{
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_possible_wrap
        )]
        fn f($c: &mut $crate::exec::Ctx<'_>, $i: &$crate::decode::Inst) -> $crate::valu::R {
            $body
        }
        f as $crate::table::ExecFn
    }};
}
pub(crate) use ex;

pub(crate) const B32: [Ty; 4] = [Ty::B32; 4];
pub(crate) const B16: [Ty; 4] = [Ty::B16; 4];
pub(crate) const F32: [Ty; 4] = [Ty::F32; 4];
pub(crate) const F64: [Ty; 4] = [Ty::F64; 4];
pub(crate) const F16: [Ty; 4] = [Ty::F16; 4];

// ---- sources ----

/// Whether an instruction reads its sources unmodified (no SDWA, DPP, ABS, NEG or OPSEL).
#[inline(always)]
pub(crate) fn plain(i: &Inst) -> bool {
    i.sdwa.is_none() && i.dpp.is_none() && i.abs == 0 && i.neg == 0 && i.opsel == 0
}

/// Runs `body` on the N 32-bit sources: borrowed VGPRs for an unmodified instruction (no copy
/// of the register), copies with the modifiers applied otherwise.
#[inline(always)]
pub(crate) fn with_srcs<const N: usize, T>(
    c: &mut Ctx<'_>,
    i: &Inst,
    body: impl FnOnce([&Lanes; N]) -> T,
) -> T {
    if plain(i) {
        let mut tmp = [[0u32; LANES]; N];
        for n in 0..N {
            if !matches!(i.src[n], Operand::Vgpr(_) | Operand::Agpr(_)) {
                tmp[n] = [c.s32(i.src[n]); LANES];
            }
        }
        let c = &*c;
        let refs: [&Lanes; N] = std::array::from_fn(|n| match i.src[n] {
            Operand::Vgpr(r) => c.w.v(c.vidx(r, n)),
            Operand::Agpr(r) => c.w.v(c.w.accum_offset as usize + usize::from(r)),
            _ => &tmp[n],
        });
        body(refs)
    } else {
        let owned: [Lanes; N] = std::array::from_fn(|n| c.src32(i, n));
        body(std::array::from_fn(|n| &owned[n]))
    }
}

// ---- integer lane loops ----

#[inline(always)]
pub(crate) fn u32_1(c: &mut Ctx<'_>, i: &Inst, f: impl Fn(u32) -> u32) -> R {
    let r = with_srcs(c, i, |[a]: [&Lanes; 1]| {
        let mut r = [0u32; LANES];
        for l in 0..LANES {
            r[l] = f(a[l]);
        }
        r
    });
    c.write32(i, &r);
    Ok(())
}

#[inline(always)]
pub(crate) fn u32_2(c: &mut Ctx<'_>, i: &Inst, f: impl Fn(u32, u32) -> u32) -> R {
    let r = with_srcs(c, i, |[a, b]: [&Lanes; 2]| {
        let mut r = [0u32; LANES];
        for l in 0..LANES {
            r[l] = f(a[l], b[l]);
        }
        r
    });
    c.write32(i, &r);
    Ok(())
}

#[inline(always)]
pub(crate) fn u32_3(c: &mut Ctx<'_>, i: &Inst, f: impl Fn(u32, u32, u32) -> u32) -> R {
    let r = with_srcs(c, i, |[a, b, d]: [&Lanes; 3]| {
        let mut r = [0u32; LANES];
        for l in 0..LANES {
            r[l] = f(a[l], b[l], d[l]);
        }
        r
    });
    c.write32(i, &r);
    Ok(())
}

/// 16-bit integer results: the low half, high half zeroed (or the high half with OPSEL[3]).
#[inline(always)]
pub(crate) fn u16_n<const N: usize>(c: &mut Ctx<'_>, i: &Inst, f: impl Fn([u32; N]) -> u32) -> R {
    let s: [Lanes; N] = std::array::from_fn(|n| c.src32(i, n));
    let mut r = [0u32; LANES];
    for l in 0..LANES {
        r[l] = f(std::array::from_fn(|n| s[n][l] & 0xffff)) & 0xffff;
    }
    write16(c, i, &mut r);
    Ok(())
}

/// Writes 16-bit results: into the high half (keeping the low) when VOP3 OPSEL[3] says so.
pub(crate) fn write16(c: &mut Ctx<'_>, i: &Inst, r: &mut Lanes) {
    if i.opsel & 8 != 0 && i.sdwa.is_none() {
        let old = *c.w.v(c.dst_index(i));
        for l in 0..LANES {
            r[l] = (old[l] & 0xffff) | (r[l] << 16);
        }
    }
    c.write32(i, r);
}

/// `op(S0, S1)` on 32-bit lanes with a carry/borrow out to SDST (VCC for VOP2) and, with
/// `carry_in`, a carry in from src2's lane mask.
#[inline(always)]
fn carry(c: &mut Ctx<'_>, i: &Inst, carry_in: bool, f: impl Fn(u32, u32, u32) -> (u32, bool)) -> R {
    let cin = if carry_in { c.s64(i.src[2]) } else { 0 };
    let (r, out) = with_srcs(c, i, |[a, b]: [&Lanes; 2]| {
        let mut r = [0u32; LANES];
        let mut out = 0u64;
        for l in 0..LANES {
            let (v, co) = f(a[l], b[l], (cin >> l) as u32 & 1);
            r[l] = v;
            out |= u64::from(co) << l;
        }
        (r, out)
    });
    let mask = c.wmask;
    c.write32(i, &r);
    // Lanes outside EXEC read 0 in a VALU-written mask.
    c.set_s64(i.sdst, out & mask);
    Ok(())
}

// ---- float lane loops ----

/// The denormal mode for f32.
#[inline]
pub(crate) fn den32(c: &Ctx<'_>) -> Denorm {
    Denorm::from_field(c.w.mode >> hwreg::MODE_DENORM32_SHIFT & 3)
}

/// The denormal mode for f16 and f64.
#[inline]
pub(crate) fn den64(c: &Ctx<'_>) -> Denorm {
    Denorm::from_field(c.w.mode >> hwreg::MODE_DENORM16_64_SHIFT & 3)
}

/// An f32 operation over N sources with input/output denormal flushing, the default NaN,
/// OMOD and CLAMP.
#[inline(always)]
pub(crate) fn f32_n<const N: usize>(c: &mut Ctx<'_>, i: &Inst, f: impl Fn([f32; N]) -> f32) -> R {
    let dn = den32(c);
    let mut r = with_srcs(c, i, |s: [&Lanes; N]| {
        let mut r = [0u32; LANES];
        for l in 0..LANES {
            let args: [f32; N] = std::array::from_fn(|n| {
                let x = s[n][l];
                f32::from_bits(if dn.flush_in { float::flush32(x) } else { x })
            });
            let v = f(args);
            r[l] = if v.is_nan() && !args.iter().any(|a| a.is_nan()) {
                QNAN32
            } else {
                v.to_bits()
            };
        }
        r
    });
    post32(c, i, &mut r, dn);
    c.write32(i, &r);
    Ok(())
}

/// OMOD, CLAMP and output flushing of f32 results.
#[inline]
pub(crate) fn post32(c: &Ctx<'_>, i: &Inst, r: &mut Lanes, dn: Denorm) {
    if i.omod != 0 {
        let m = [1.0f32, 2.0, 4.0, 0.5][usize::from(i.omod & 3)];
        for x in r.iter_mut() {
            *x = (f32::from_bits(*x) * m).to_bits();
        }
    }
    if i.clamp {
        let dx10 = c.w.mode & hwreg::MODE_DX10_CLAMP != 0;
        for x in r.iter_mut() {
            let v = f32::from_bits(*x);
            *x = if v.is_nan() {
                if dx10 {
                    0
                } else {
                    *x
                }
            } else {
                v.clamp(0.0, 1.0).to_bits()
            };
        }
    }
    if dn.flush_out {
        for x in r.iter_mut() {
            *x = float::flush32(*x);
        }
    }
}

/// An f64 operation over N sources, as [`f32_n`].
#[inline(always)]
pub(crate) fn f64_n<const N: usize>(c: &mut Ctx<'_>, i: &Inst, f: impl Fn([f64; N]) -> f64) -> R {
    let dn = den64(c);
    let mut s: [Lanes64; N] = std::array::from_fn(|n| c.src64(i, n));
    if dn.flush_in {
        for v in s.iter_mut() {
            for x in v.iter_mut() {
                *x = float::flush64(*x);
            }
        }
    }
    let mut r = [0u64; LANES];
    for l in 0..LANES {
        let args: [f64; N] = std::array::from_fn(|n| f64::from_bits(s[n][l]));
        let v = f(args);
        r[l] = if v.is_nan() && !args.iter().any(|a| a.is_nan()) {
            QNAN64
        } else {
            v.to_bits()
        };
    }
    post64(c, i, &mut r, dn);
    c.write64(i, &r);
    Ok(())
}

#[inline]
pub(crate) fn post64(c: &Ctx<'_>, i: &Inst, r: &mut Lanes64, dn: Denorm) {
    if i.omod != 0 {
        let m = [1.0f64, 2.0, 4.0, 0.5][usize::from(i.omod & 3)];
        for x in r.iter_mut() {
            *x = (f64::from_bits(*x) * m).to_bits();
        }
    }
    if i.clamp {
        let dx10 = c.w.mode & hwreg::MODE_DX10_CLAMP != 0;
        for x in r.iter_mut() {
            let v = f64::from_bits(*x);
            if v.is_nan() {
                if dx10 {
                    *x = 0;
                }
            } else {
                *x = v.clamp(0.0, 1.0).to_bits();
            }
        }
    }
    if dn.flush_out {
        for x in r.iter_mut() {
            *x = float::flush64(*x);
        }
    }
}

/// An f16 operation computed in f32 (exact before the one rounding to f16 for +, -, x, /).
#[inline(always)]
pub(crate) fn f16_n<const N: usize>(c: &mut Ctx<'_>, i: &Inst, f: impl Fn([f32; N]) -> f32) -> R {
    f16_bits(c, i, |a: [u32; N]| {
        let args: [f32; N] = std::array::from_fn(|n| float::h2f(a[n]));
        let v = f(args);
        if v.is_nan() && !args.iter().any(|a| a.is_nan()) {
            0x7e00
        } else {
            float::f2h(v)
        }
    })
}

/// An f16 operation on raw half bits with denormal flushing, CLAMP and 16-bit write.
#[inline(always)]
pub(crate) fn f16_bits<const N: usize>(
    c: &mut Ctx<'_>,
    i: &Inst,
    f: impl Fn([u32; N]) -> u32,
) -> R {
    let dn = den64(c);
    let s: [Lanes; N] = std::array::from_fn(|n| c.src32(i, n));
    let mut r = [0u32; LANES];
    for l in 0..LANES {
        let a: [u32; N] = std::array::from_fn(|n| {
            let h = (s[n][l] & 0xffff) as u16;
            u32::from(if dn.flush_in { float::flush16(h) } else { h })
        });
        let mut v = (f(a) & 0xffff) as u16;
        if i.clamp {
            let x = float::h2f(u32::from(v));
            v = float::f2h(if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) }) as u16;
        }
        if dn.flush_out {
            v = float::flush16(v);
        }
        r[l] = u32::from(v);
    }
    write16(c, i, &mut r);
    Ok(())
}

fn sext24(x: u32) -> i64 {
    i64::from(((x << 8) as i32) >> 8)
}

fn sext16(x: u32) -> i32 {
    i32::from(x as u16 as i16)
}

/// `a * b` the legacy way: 0 times anything (even inf or NaN) is 0.
fn mul_legacy(a: f32, b: f32) -> f32 {
    if a == 0.0 || b == 0.0 {
        0.0
    } else {
        a * b
    }
}

fn rtz_f16(x: f32) -> u32 {
    let h = float::f2h(x);
    if x.is_nan() || x.is_infinite() {
        return h;
    }
    let back = float::h2f(h);
    if back.abs() > x.abs() {
        if h & 0x7fff == 0x7c00 {
            // Rounded up to infinity: the largest finite half instead.
            return (h & 0x8000) | 0x7bff;
        }
        return h - 1;
    }
    h
}

fn v_readfirstlane(c: &mut Ctx<'_>, i: &Inst) -> R {
    let exec = c.w.exec();
    let lane = if exec == 0 {
        0
    } else {
        exec.trailing_zeros() as usize
    };
    let v = c.raw32(i.src[0], 0)[lane];
    c.set_s32(i.dst, v);
    Ok(())
}

fn v_readlane(c: &mut Ctx<'_>, i: &Inst) -> R {
    let lane = (c.s32(i.src[1]) & 63) as usize;
    let v = c.raw32(i.src[0], 0)[lane];
    c.set_s32(i.dst, v);
    Ok(())
}

fn v_writelane(c: &mut Ctx<'_>, i: &Inst) -> R {
    let lane = (c.s32(i.src[1]) & 63) as usize;
    let v = c.s32(i.src[0]);
    let d = c.dst_index(i);
    if let Some(r) = c.w.v_mut(d) {
        r[lane] = v;
    }
    Ok(())
}

fn v_swap(c: &mut Ctx<'_>, i: &Inst) -> R {
    let a = c.src32(i, 0);
    let d = c.dst_index(i);
    let old = *c.w.v(d);
    c.write32(i, &a);
    if let crate::decode::Operand::Vgpr(r) = i.src[0] {
        let s = c.vidx(r, 0);
        let mask = c.wmask;
        if let Some(dst) = c.w.v_mut(s) {
            crate::operand::masked_store(dst, &old, mask);
        }
    }
    Ok(())
}

fn mbcnt(c: &mut Ctx<'_>, i: &Inst, hi: bool) -> R {
    let a = c.src32(i, 0);
    let b = c.src32(i, 1);
    let mut r = [0u32; LANES];
    for l in 0..LANES {
        let below = if hi { l.saturating_sub(32) } else { l.min(32) };
        let m = if below >= 32 {
            u32::MAX
        } else {
            (1u32 << below) - 1
        };
        r[l] = (a[l] & m).count_ones().wrapping_add(b[l]);
    }
    c.write32(i, &r);
    Ok(())
}

fn div_scale_f32(c: &mut Ctx<'_>, i: &Inst) -> R {
    let s: [Lanes; 3] = std::array::from_fn(|n| c.src32(i, n));
    let mut r = [0u32; LANES];
    let mut vcc = 0u64;
    for l in 0..LANES {
        let (v, f) = float::div_scale32(
            f32::from_bits(s[0][l]),
            f32::from_bits(s[1][l]),
            f32::from_bits(s[2][l]),
        );
        r[l] = v.to_bits();
        vcc |= u64::from(f) << l;
    }
    let mask = c.wmask;
    c.write32(i, &r);
    c.set_s64(i.sdst, vcc & mask);
    Ok(())
}

fn div_scale_f64(c: &mut Ctx<'_>, i: &Inst) -> R {
    let s: [Lanes64; 3] = std::array::from_fn(|n| c.src64(i, n));
    let mut r = [0u64; LANES];
    let mut vcc = 0u64;
    for l in 0..LANES {
        let (v, f) = float::div_scale64(
            f64::from_bits(s[0][l]),
            f64::from_bits(s[1][l]),
            f64::from_bits(s[2][l]),
        );
        r[l] = v.to_bits();
        vcc |= u64::from(f) << l;
    }
    let mask = c.wmask;
    c.write64(i, &r);
    c.set_s64(i.sdst, vcc & mask);
    Ok(())
}

fn div_fmas_f32(c: &mut Ctx<'_>, i: &Inst) -> R {
    let vcc = c.w.vcc();
    let dn = den32(c);
    let s: [Lanes; 3] = std::array::from_fn(|n| c.src32(i, n));
    let mut r = [0u32; LANES];
    for l in 0..LANES {
        let a = |n: usize| f32::from_bits(s[n][l]);
        r[l] = float::div_fmas32(a(0), a(1), a(2), vcc >> l & 1 != 0).to_bits();
    }
    post32(c, i, &mut r, dn);
    c.write32(i, &r);
    Ok(())
}

fn div_fmas_f64(c: &mut Ctx<'_>, i: &Inst) -> R {
    let vcc = c.w.vcc();
    let dn = den64(c);
    let s: [Lanes64; 3] = std::array::from_fn(|n| c.src64(i, n));
    let mut r = [0u64; LANES];
    for l in 0..LANES {
        let a = |n: usize| f64::from_bits(s[n][l]);
        r[l] = float::div_fmas64(a(0), a(1), a(2), vcc >> l & 1 != 0).to_bits();
    }
    post64(c, i, &mut r, dn);
    c.write64(i, &r);
    Ok(())
}

fn mad_64_32(c: &mut Ctx<'_>, i: &Inst, signed: bool) -> R {
    let a = c.src32(i, 0);
    let b = c.src32(i, 1);
    let d = c.src64(i, 2);
    let mut r = [0u64; LANES];
    let mut co = 0u64;
    for l in 0..LANES {
        let (v, o) = if signed {
            let p = i128::from(a[l] as i32) * i128::from(b[l] as i32) + i128::from(d[l] as i64);
            (
                p as u64,
                p > i128::from(i64::MAX) || p < i128::from(i64::MIN),
            )
        } else {
            let p = u128::from(a[l]) * u128::from(b[l]) + u128::from(d[l]);
            (p as u64, p >> 64 != 0)
        };
        r[l] = v;
        co |= u64::from(o) << l;
    }
    let mask = c.wmask;
    c.write64(i, &r);
    c.set_s64(i.sdst, co & mask);
    Ok(())
}

/// 64-bit shifts: the shift amount is src0 (32 bits), the value src1 (64 bits).
fn shift64(c: &mut Ctx<'_>, i: &Inst, f: impl Fn(u64, u32) -> u64) -> R {
    let a = c.src32(i, 0);
    let b = c.src64(i, 1);
    let mut r = [0u64; LANES];
    for l in 0..LANES {
        r[l] = f(b[l], a[l] & 63);
    }
    c.write64(i, &r);
    Ok(())
}

/// f64 with an i32 second source (v_ldexp_f64).
fn ldexp_f64(c: &mut Ctx<'_>, i: &Inst) -> R {
    let dn = den64(c);
    let a = c.src64(i, 0);
    let b = c.src32(i, 1);
    let mut r = [0u64; LANES];
    for l in 0..LANES {
        r[l] = float::ldexp64(f64::from_bits(a[l]), b[l] as i32).to_bits();
    }
    post64(c, i, &mut r, dn);
    c.write64(i, &r);
    Ok(())
}

/// f64 source, 32-bit integer result.
fn f64_to_32(c: &mut Ctx<'_>, i: &Inst, f: impl Fn(f64) -> u32) -> R {
    let a = c.src64(i, 0);
    let mut r = [0u32; LANES];
    for l in 0..LANES {
        r[l] = f(f64::from_bits(a[l]));
    }
    c.write32(i, &r);
    Ok(())
}

/// 32-bit source, f64 result.
fn from32_to_f64(c: &mut Ctx<'_>, i: &Inst, f: impl Fn(u32) -> f64) -> R {
    let a = c.src32(i, 0);
    let mut r = [0u64; LANES];
    for l in 0..LANES {
        r[l] = f(a[l]).to_bits();
    }
    c.write64(i, &r);
    Ok(())
}

/// f32 source, integer result (no float post-processing).
fn f32_to_int(c: &mut Ctx<'_>, i: &Inst, f: impl Fn(f32) -> u32) -> R {
    let dn = den32(c);
    u32_1(c, i, |a| {
        f(f32::from_bits(if dn.flush_in {
            float::flush32(a)
        } else {
            a
        }))
    })
}

/// Integer source, f32 result.
fn int_to_f32(c: &mut Ctx<'_>, i: &Inst, f: impl Fn(u32) -> f32) -> R {
    let dn = den32(c);
    let a = c.src32(i, 0);
    let mut r = [0u32; LANES];
    for l in 0..LANES {
        r[l] = f(a[l]).to_bits();
    }
    post32(c, i, &mut r, dn);
    c.write32(i, &r);
    Ok(())
}

fn sad_u8(a: u32, b: u32) -> u32 {
    (0..4)
        .map(|k| ((a >> (8 * k)) & 0xff).abs_diff((b >> (8 * k)) & 0xff))
        .sum()
}

fn perm(a: u32, b: u32, sel: u32) -> u32 {
    let v = u64::from(a) << 32 | u64::from(b);
    let mut r = 0u32;
    for k in 0..4 {
        let s = (sel >> (8 * k)) & 0xff;
        let byte = match s {
            0..=7 => (v >> (8 * s)) & 0xff,
            8..=11 => {
                if v >> (16 * (s - 8) + 15) & 1 != 0 {
                    0xff
                } else {
                    0
                }
            }
            12 => 0,
            _ => 0xff,
        };
        r |= (byte as u32) << (8 * k);
    }
    r
}

fn bfe_u(a: u32, off: u32, w: u32) -> u32 {
    let (off, w) = (off & 31, w & 31);
    if w == 0 {
        0
    } else {
        (a >> off) & ((1u32 << w) - 1)
    }
}

fn bfe_i(a: u32, off: u32, w: u32) -> u32 {
    let (off, w) = (off & 31, w & 31);
    if w == 0 {
        0
    } else if off + w < 32 {
        (((a << (32 - off - w)) as i32) >> (32 - w)) as u32
    } else {
        ((a as i32) >> off) as u32
    }
}

fn med3<T: Ord + Copy>(a: T, b: T, c: T) -> T {
    a.max(b).min(a.min(b).max(c))
}

fn snorm16(x: f32) -> u32 {
    u32::from((x.clamp(-1.0, 1.0) * 32767.0).round_ties_even() as i16 as u16)
}

fn unorm16(x: f32) -> u32 {
    u32::from((x.clamp(0.0, 1.0) * 65535.0).round_ties_even() as u16)
}

const T_F64_I32: [Ty; 4] = [Ty::F64, Ty::F64, Ty::B32, Ty::B32];
const T_SHIFT64: [Ty; 4] = [Ty::B64, Ty::B32, Ty::B64, Ty::B32];
const T_MAD64: [Ty; 4] = [Ty::B64, Ty::B32, Ty::B32, Ty::B64];
const T_I32_F64: [Ty; 4] = [Ty::B32, Ty::F64, Ty::B32, Ty::B32];
const T_F64_B32: [Ty; 4] = [Ty::F64, Ty::B32, Ty::B32, Ty::B32];
const T_F32_F64: [Ty; 4] = [Ty::F32, Ty::F64, Ty::B32, Ty::B32];
const T_F64_F32: [Ty; 4] = [Ty::F64, Ty::F32, Ty::B32, Ty::B32];
const T_F16_F32: [Ty; 4] = [Ty::F16, Ty::F32, Ty::F32, Ty::B32];
const T_F32_F16: [Ty; 4] = [Ty::F32, Ty::F16, Ty::F16, Ty::F32];
const T_F16_B16: [Ty; 4] = [Ty::F16, Ty::B16, Ty::B32, Ty::B32];
const T_F16_I: [Ty; 4] = [Ty::F16, Ty::F16, Ty::B16, Ty::B32];
const T_F32_I: [Ty; 4] = [Ty::F32, Ty::F32, Ty::B32, Ty::B32];
const T_I32_F32: [Ty; 4] = [Ty::B32, Ty::F32, Ty::B32, Ty::B32];
const T_F32_B32: [Ty; 4] = [Ty::F32, Ty::B32, Ty::B32, Ty::B32];
const T_CVT_PK: [Ty; 4] = [Ty::B32, Ty::F32, Ty::F32, Ty::B32];
const T_MAD16: [Ty; 4] = [Ty::B32, Ty::B16, Ty::B16, Ty::B32];
const T_PK_F16: [Ty; 4] = [Ty::B32, Ty::F16, Ty::F16, Ty::B32];

use Encoding::{Vop1 as V1, Vop2 as V2, Vop3 as V3};

/// VOP2 opcodes (also VOP3 0x100 + opcode).
pub(crate) static VOP2: &[OpDef] = &[
    row(
        V2,
        0x00,
        "v_cndmask_b32",
        ex!(|c, i| {
            let m = c.s64(i.src[2]);
            let a = c.src32(i, 0);
            let b = c.src32(i, 1);
            let mut r = [0u32; LANES];
            for l in 0..LANES {
                r[l] = if m >> l & 1 != 0 { b[l] } else { a[l] };
            }
            c.write32(i, &r);
            Ok(())
        }),
        [Ty::B32, Ty::B32, Ty::B32, Ty::B64],
        flag::VCC_IN,
    ),
    row(
        V2,
        0x01,
        "v_add_f32",
        ex!(|c, i| f32_n(c, i, |[a, b]| a + b)),
        F32,
        0,
    ),
    row(
        V2,
        0x02,
        "v_sub_f32",
        ex!(|c, i| f32_n(c, i, |[a, b]| a - b)),
        F32,
        0,
    ),
    row(
        V2,
        0x03,
        "v_subrev_f32",
        ex!(|c, i| f32_n(c, i, |[a, b]| b - a)),
        F32,
        0,
    ),
    row(
        V2,
        0x04,
        "v_fmac_f64",
        ex!(|c, i| f64_n(c, i, |[a, b, d]| a.mul_add(b, d))),
        F64,
        flag::MAC,
    ),
    row(
        V2,
        0x05,
        "v_mul_f32",
        ex!(|c, i| f32_n(c, i, |[a, b]| a * b)),
        F32,
        0,
    ),
    row(
        V2,
        0x06,
        "v_mul_i32_i24",
        ex!(|c, i| u32_2(c, i, |a, b| (sext24(a) * sext24(b)) as u32)),
        B32,
        0,
    ),
    row(
        V2,
        0x07,
        "v_mul_hi_i32_i24",
        ex!(|c, i| u32_2(c, i, |a, b| ((sext24(a) * sext24(b)) >> 32) as u32)),
        B32,
        0,
    ),
    row(
        V2,
        0x08,
        "v_mul_u32_u24",
        ex!(|c, i| u32_2(c, i, |a, b| (a & 0xff_ffff).wrapping_mul(b & 0xff_ffff))),
        B32,
        0,
    ),
    row(
        V2,
        0x09,
        "v_mul_hi_u32_u24",
        ex!(|c, i| u32_2(
            c,
            i,
            |a, b| ((u64::from(a & 0xff_ffff) * u64::from(b & 0xff_ffff)) >> 32) as u32
        )),
        B32,
        0,
    ),
    row(
        V2,
        0x0a,
        "v_min_f32",
        ex!(|c, i| f32_n(c, i, |[a, b]| float::fmin32(a, b))),
        F32,
        0,
    ),
    row(
        V2,
        0x0b,
        "v_max_f32",
        ex!(|c, i| f32_n(c, i, |[a, b]| float::fmax32(a, b))),
        F32,
        0,
    ),
    row(
        V2,
        0x0c,
        "v_min_i32",
        ex!(|c, i| u32_2(c, i, |a, b| (a as i32).min(b as i32) as u32)),
        B32,
        0,
    ),
    row(
        V2,
        0x0d,
        "v_max_i32",
        ex!(|c, i| u32_2(c, i, |a, b| (a as i32).max(b as i32) as u32)),
        B32,
        0,
    ),
    row(
        V2,
        0x0e,
        "v_min_u32",
        ex!(|c, i| u32_2(c, i, |a, b| a.min(b))),
        B32,
        0,
    ),
    row(
        V2,
        0x0f,
        "v_max_u32",
        ex!(|c, i| u32_2(c, i, |a, b| a.max(b))),
        B32,
        0,
    ),
    row(
        V2,
        0x10,
        "v_lshrrev_b32",
        ex!(|c, i| u32_2(c, i, |a, b| b >> (a & 31))),
        B32,
        0,
    ),
    row(
        V2,
        0x11,
        "v_ashrrev_i32",
        ex!(|c, i| u32_2(c, i, |a, b| ((b as i32) >> (a & 31)) as u32)),
        B32,
        0,
    ),
    row(
        V2,
        0x12,
        "v_lshlrev_b32",
        ex!(|c, i| u32_2(c, i, |a, b| b << (a & 31))),
        B32,
        0,
    ),
    row(
        V2,
        0x13,
        "v_and_b32",
        ex!(|c, i| u32_2(c, i, |a, b| a & b)),
        B32,
        0,
    ),
    row(
        V2,
        0x14,
        "v_or_b32",
        ex!(|c, i| u32_2(c, i, |a, b| a | b)),
        B32,
        0,
    ),
    row(
        V2,
        0x15,
        "v_xor_b32",
        ex!(|c, i| u32_2(c, i, |a, b| a ^ b)),
        B32,
        0,
    ),
    row(
        V2,
        0x16,
        "v_mac_f32",
        ex!(|c, i| f32_n(c, i, |[a, b, d]| a * b + d)),
        F32,
        flag::MAC,
    ),
    row(
        V2,
        0x17,
        "v_madmk_f32",
        ex!(|c, i| f32_n(c, i, |[a, b, d]| a * b + d)),
        F32,
        flag::MADMK,
    ),
    row(
        V2,
        0x18,
        "v_madak_f32",
        ex!(|c, i| f32_n(c, i, |[a, b, d]| a * b + d)),
        F32,
        flag::MADAK,
    ),
    row(
        V2,
        0x19,
        "v_add_co_u32",
        ex!(|c, i| carry(c, i, false, |a, b, _| a.overflowing_add(b))),
        B32,
        flag::VOP3B,
    ),
    row(
        V2,
        0x1a,
        "v_sub_co_u32",
        ex!(|c, i| carry(c, i, false, |a, b, _| a.overflowing_sub(b))),
        B32,
        flag::VOP3B,
    ),
    row(
        V2,
        0x1b,
        "v_subrev_co_u32",
        ex!(|c, i| carry(c, i, false, |a, b, _| b.overflowing_sub(a))),
        B32,
        flag::VOP3B,
    ),
    row(
        V2,
        0x1c,
        "v_addc_co_u32",
        ex!(|c, i| carry(c, i, true, |a, b, ci| {
            let s = u64::from(a) + u64::from(b) + u64::from(ci);
            (s as u32, s >> 32 != 0)
        })),
        [Ty::B32, Ty::B32, Ty::B32, Ty::B64],
        flag::VOP3B | flag::VCC_IN,
    ),
    row(
        V2,
        0x1d,
        "v_subb_co_u32",
        ex!(|c, i| carry(c, i, true, |a, b, ci| {
            let s = i64::from(a) - i64::from(b) - i64::from(ci);
            (s as u32, s < 0)
        })),
        [Ty::B32, Ty::B32, Ty::B32, Ty::B64],
        flag::VOP3B | flag::VCC_IN,
    ),
    row(
        V2,
        0x1e,
        "v_subbrev_co_u32",
        ex!(|c, i| carry(c, i, true, |a, b, ci| {
            let s = i64::from(b) - i64::from(a) - i64::from(ci);
            (s as u32, s < 0)
        })),
        [Ty::B32, Ty::B32, Ty::B32, Ty::B64],
        flag::VOP3B | flag::VCC_IN,
    ),
    row(
        V2,
        0x1f,
        "v_add_f16",
        ex!(|c, i| f16_n(c, i, |[a, b]| a + b)),
        F16,
        flag::OPSEL16,
    ),
    row(
        V2,
        0x20,
        "v_sub_f16",
        ex!(|c, i| f16_n(c, i, |[a, b]| a - b)),
        F16,
        flag::OPSEL16,
    ),
    row(
        V2,
        0x21,
        "v_subrev_f16",
        ex!(|c, i| f16_n(c, i, |[a, b]| b - a)),
        F16,
        flag::OPSEL16,
    ),
    row(
        V2,
        0x22,
        "v_mul_f16",
        ex!(|c, i| f16_n(c, i, |[a, b]| a * b)),
        F16,
        flag::OPSEL16,
    ),
    row(
        V2,
        0x23,
        "v_mac_f16",
        ex!(|c, i| f16_bits(c, i, |[a, b, d]| {
            let p = float::f2h(float::h2f(a) * float::h2f(b));
            float::f2h(float::h2f(p) + float::h2f(d))
        })),
        F16,
        flag::MAC | flag::OPSEL16,
    ),
    row(
        V2,
        0x24,
        "v_madmk_f16",
        ex!(|c, i| f16_bits(c, i, |[a, b, d]| {
            let p = float::f2h(float::h2f(a) * float::h2f(b));
            float::f2h(float::h2f(p) + float::h2f(d))
        })),
        F16,
        flag::MADMK,
    ),
    row(
        V2,
        0x25,
        "v_madak_f16",
        ex!(|c, i| f16_bits(c, i, |[a, b, d]| {
            let p = float::f2h(float::h2f(a) * float::h2f(b));
            float::f2h(float::h2f(p) + float::h2f(d))
        })),
        F16,
        flag::MADAK,
    ),
    row(
        V2,
        0x26,
        "v_add_u16",
        ex!(|c, i| u16_n(c, i, |[a, b]| a.wrapping_add(b))),
        B16,
        flag::OPSEL16,
    ),
    row(
        V2,
        0x27,
        "v_sub_u16",
        ex!(|c, i| u16_n(c, i, |[a, b]| a.wrapping_sub(b))),
        B16,
        flag::OPSEL16,
    ),
    row(
        V2,
        0x28,
        "v_subrev_u16",
        ex!(|c, i| u16_n(c, i, |[a, b]| b.wrapping_sub(a))),
        B16,
        flag::OPSEL16,
    ),
    row(
        V2,
        0x29,
        "v_mul_lo_u16",
        ex!(|c, i| u16_n(c, i, |[a, b]| a.wrapping_mul(b))),
        B16,
        flag::OPSEL16,
    ),
    row(
        V2,
        0x2a,
        "v_lshlrev_b16",
        ex!(|c, i| u16_n(c, i, |[a, b]| b << (a & 15))),
        B16,
        flag::OPSEL16,
    ),
    row(
        V2,
        0x2b,
        "v_lshrrev_b16",
        ex!(|c, i| u16_n(c, i, |[a, b]| b >> (a & 15))),
        B16,
        flag::OPSEL16,
    ),
    row(
        V2,
        0x2c,
        "v_ashrrev_i16",
        ex!(|c, i| u16_n(c, i, |[a, b]| (sext16(b) >> (a & 15)) as u32)),
        B16,
        flag::OPSEL16,
    ),
    row(
        V2,
        0x2d,
        "v_max_f16",
        ex!(|c, i| f16_n(c, i, |[a, b]| a.max(b))),
        F16,
        flag::OPSEL16,
    ),
    row(
        V2,
        0x2e,
        "v_min_f16",
        ex!(|c, i| f16_n(c, i, |[a, b]| a.min(b))),
        F16,
        flag::OPSEL16,
    ),
    row(
        V2,
        0x2f,
        "v_max_u16",
        ex!(|c, i| u16_n(c, i, |[a, b]| a.max(b))),
        B16,
        flag::OPSEL16,
    ),
    row(
        V2,
        0x30,
        "v_max_i16",
        ex!(|c, i| u16_n(c, i, |[a, b]| sext16(a).max(sext16(b)) as u32)),
        B16,
        flag::OPSEL16,
    ),
    row(
        V2,
        0x31,
        "v_min_u16",
        ex!(|c, i| u16_n(c, i, |[a, b]| a.min(b))),
        B16,
        flag::OPSEL16,
    ),
    row(
        V2,
        0x32,
        "v_min_i16",
        ex!(|c, i| u16_n(c, i, |[a, b]| sext16(a).min(sext16(b)) as u32)),
        B16,
        flag::OPSEL16,
    ),
    row(
        V2,
        0x33,
        "v_ldexp_f16",
        ex!(|c, i| f16_bits(c, i, |[a, b]| {
            float::d2h(f64::from(float::h2f(a)) * 2f64.powi(sext16(b).clamp(-64, 64)))
        })),
        T_F16_I,
        flag::OPSEL16,
    ),
    row(
        V2,
        0x34,
        "v_add_u32",
        ex!(|c, i| {
            if i.clamp {
                u32_2(c, i, |a, b| a.saturating_add(b))
            } else {
                u32_2(c, i, |a, b| a.wrapping_add(b))
            }
        }),
        B32,
        0,
    ),
    row(
        V2,
        0x35,
        "v_sub_u32",
        ex!(|c, i| {
            if i.clamp {
                u32_2(c, i, |a, b| a.saturating_sub(b))
            } else {
                u32_2(c, i, |a, b| a.wrapping_sub(b))
            }
        }),
        B32,
        0,
    ),
    row(
        V2,
        0x36,
        "v_subrev_u32",
        ex!(|c, i| {
            if i.clamp {
                u32_2(c, i, |a, b| b.saturating_sub(a))
            } else {
                u32_2(c, i, |a, b| b.wrapping_sub(a))
            }
        }),
        B32,
        0,
    ),
    row(
        V2,
        0x37,
        "v_dot2c_f32_f16",
        ex!(|c, i| {
            let a = c.src32(i, 0);
            let b = c.src32(i, 1);
            let dn = den32(c);
            let d = *c.w.v(c.dst_index(i));
            let mut r = [0u32; LANES];
            for l in 0..LANES {
                let lo = float::h2f(a[l]) * float::h2f(b[l]);
                let hi = float::h2f(a[l] >> 16) * float::h2f(b[l] >> 16);
                r[l] = (lo + hi + f32::from_bits(d[l])).to_bits();
            }
            post32(c, i, &mut r, dn);
            c.write32(i, &r);
            Ok(())
        }),
        T_PK_F16,
        flag::MAC,
    ),
    unsupported(V2, 0x38, "v_dot2c_i32_i16"),
    unsupported(V2, 0x39, "v_dot4c_i32_i8"),
    unsupported(V2, 0x3a, "v_dot8c_i32_i4"),
    row(
        V2,
        0x3b,
        "v_fmac_f32",
        ex!(|c, i| f32_n(c, i, |[a, b, d]| a.mul_add(b, d))),
        F32,
        flag::MAC,
    ),
    row(
        V2,
        0x3c,
        "v_pk_fmac_f16",
        ex!(|c, i| u32_3(c, i, |a, b, d| {
            let h = |x: u32, s: u32| f64::from(float::h2f(x >> s));
            let lo = float::d2h(h(a, 0).mul_add(h(b, 0), h(d, 0)));
            let hi = float::d2h(h(a, 16).mul_add(h(b, 16), h(d, 16)));
            lo | hi << 16
        })),
        B32,
        flag::MAC,
    ),
    row(
        V2,
        0x3d,
        "v_xnor_b32",
        ex!(|c, i| u32_2(c, i, |a, b| !(a ^ b))),
        B32,
        0,
    ),
];

/// VOP1 opcodes (also VOP3 0x140 + opcode).
pub(crate) static VOP1: &[OpDef] = &[
    row(V1, 0x00, "v_nop", ex!(|_c, _i| Ok(())), B32, 0),
    row(
        V1,
        0x01,
        "v_mov_b32",
        ex!(|c, i| {
            let a = c.src32(i, 0);
            c.write32(i, &a);
            Ok(())
        }),
        B32,
        0,
    ),
    row(
        V1,
        0x02,
        "v_readfirstlane_b32",
        v_readfirstlane,
        B32,
        flag::SDST,
    ),
    row(
        V1,
        0x03,
        "v_cvt_i32_f64",
        ex!(|c, i| f64_to_32(c, i, |x| (x as i32) as u32)),
        T_I32_F64,
        0,
    ),
    row(
        V1,
        0x04,
        "v_cvt_f64_i32",
        ex!(|c, i| from32_to_f64(c, i, |x| f64::from(x as i32))),
        T_F64_B32,
        0,
    ),
    row(
        V1,
        0x05,
        "v_cvt_f32_i32",
        ex!(|c, i| int_to_f32(c, i, |x| x as i32 as f32)),
        T_F32_B32,
        0,
    ),
    row(
        V1,
        0x06,
        "v_cvt_f32_u32",
        ex!(|c, i| int_to_f32(c, i, |x| x as f32)),
        T_F32_B32,
        0,
    ),
    row(
        V1,
        0x07,
        "v_cvt_u32_f32",
        ex!(|c, i| f32_to_int(c, i, float::f2u)),
        T_I32_F32,
        0,
    ),
    row(
        V1,
        0x08,
        "v_cvt_i32_f32",
        ex!(|c, i| f32_to_int(c, i, float::f2i)),
        T_I32_F32,
        0,
    ),
    row(
        V1,
        0x0a,
        "v_cvt_f16_f32",
        ex!(|c, i| {
            let a = c.src32(i, 0);
            let mut r = [0u32; LANES];
            for l in 0..LANES {
                r[l] = float::f2h(f32::from_bits(a[l]));
            }
            write16(c, i, &mut r);
            Ok(())
        }),
        T_F16_F32,
        0,
    ),
    row(
        V1,
        0x0b,
        "v_cvt_f32_f16",
        ex!(|c, i| {
            let a = c.src32(i, 0);
            let dn = den32(c);
            let mut r = [0u32; LANES];
            for l in 0..LANES {
                r[l] = float::h2f(a[l]).to_bits();
            }
            post32(c, i, &mut r, dn);
            c.write32(i, &r);
            Ok(())
        }),
        T_F32_F16,
        flag::OPSEL16,
    ),
    row(
        V1,
        0x0c,
        "v_cvt_rpi_i32_f32",
        ex!(|c, i| f32_to_int(c, i, |x| float::f2i((x + 0.5).floor()))),
        T_I32_F32,
        0,
    ),
    row(
        V1,
        0x0d,
        "v_cvt_flr_i32_f32",
        ex!(|c, i| f32_to_int(c, i, |x| float::f2i(x.floor()))),
        T_I32_F32,
        0,
    ),
    row(
        V1,
        0x0e,
        "v_cvt_off_f32_i4",
        ex!(|c, i| int_to_f32(c, i, |x| (((x << 28) as i32) >> 28) as f32 / 16.0)),
        T_F32_B32,
        0,
    ),
    row(
        V1,
        0x0f,
        "v_cvt_f32_f64",
        ex!(|c, i| {
            let dn = den32(c);
            let a = c.src64(i, 0);
            let mut r = [0u32; LANES];
            for l in 0..LANES {
                r[l] = (f64::from_bits(a[l]) as f32).to_bits();
            }
            post32(c, i, &mut r, dn);
            c.write32(i, &r);
            Ok(())
        }),
        T_F32_F64,
        0,
    ),
    row(
        V1,
        0x10,
        "v_cvt_f64_f32",
        ex!(|c, i| {
            let dn = den64(c);
            let a = c.src32(i, 0);
            let mut r = [0u64; LANES];
            for l in 0..LANES {
                r[l] = f64::from(f32::from_bits(a[l])).to_bits();
            }
            post64(c, i, &mut r, dn);
            c.write64(i, &r);
            Ok(())
        }),
        T_F64_F32,
        0,
    ),
    row(
        V1,
        0x11,
        "v_cvt_f32_ubyte0",
        ex!(|c, i| int_to_f32(c, i, |x| (x & 0xff) as f32)),
        T_F32_B32,
        0,
    ),
    row(
        V1,
        0x12,
        "v_cvt_f32_ubyte1",
        ex!(|c, i| int_to_f32(c, i, |x| ((x >> 8) & 0xff) as f32)),
        T_F32_B32,
        0,
    ),
    row(
        V1,
        0x13,
        "v_cvt_f32_ubyte2",
        ex!(|c, i| int_to_f32(c, i, |x| ((x >> 16) & 0xff) as f32)),
        T_F32_B32,
        0,
    ),
    row(
        V1,
        0x14,
        "v_cvt_f32_ubyte3",
        ex!(|c, i| int_to_f32(c, i, |x| (x >> 24) as f32)),
        T_F32_B32,
        0,
    ),
    row(
        V1,
        0x15,
        "v_cvt_u32_f64",
        ex!(|c, i| f64_to_32(c, i, |x| x as u32)),
        T_I32_F64,
        0,
    ),
    row(
        V1,
        0x16,
        "v_cvt_f64_u32",
        ex!(|c, i| from32_to_f64(c, i, f64::from)),
        T_F64_B32,
        0,
    ),
    row(
        V1,
        0x17,
        "v_trunc_f64",
        ex!(|c, i| f64_n(c, i, |[a]| a.trunc())),
        F64,
        0,
    ),
    row(
        V1,
        0x18,
        "v_ceil_f64",
        ex!(|c, i| f64_n(c, i, |[a]| a.ceil())),
        F64,
        0,
    ),
    row(
        V1,
        0x19,
        "v_rndne_f64",
        ex!(|c, i| f64_n(c, i, |[a]| a.round_ties_even())),
        F64,
        0,
    ),
    row(
        V1,
        0x1a,
        "v_floor_f64",
        ex!(|c, i| f64_n(c, i, |[a]| a.floor())),
        F64,
        0,
    ),
    row(
        V1,
        0x1b,
        "v_fract_f32",
        ex!(|c, i| f32_n(c, i, |[a]| float::fract32(a))),
        F32,
        0,
    ),
    row(
        V1,
        0x1c,
        "v_trunc_f32",
        ex!(|c, i| f32_n(c, i, |[a]| a.trunc())),
        F32,
        0,
    ),
    row(
        V1,
        0x1d,
        "v_ceil_f32",
        ex!(|c, i| f32_n(c, i, |[a]| a.ceil())),
        F32,
        0,
    ),
    row(
        V1,
        0x1e,
        "v_rndne_f32",
        ex!(|c, i| f32_n(c, i, |[a]| a.round_ties_even())),
        F32,
        0,
    ),
    row(
        V1,
        0x1f,
        "v_floor_f32",
        ex!(|c, i| f32_n(c, i, |[a]| a.floor())),
        F32,
        0,
    ),
    row(
        V1,
        0x20,
        "v_exp_f32",
        ex!(|c, i| f32_n(c, i, |[a]| a.exp2())),
        F32,
        0,
    ),
    row(
        V1,
        0x21,
        "v_log_f32",
        ex!(|c, i| f32_n(c, i, |[a]| a.log2())),
        F32,
        0,
    ),
    row(
        V1,
        0x22,
        "v_rcp_f32",
        ex!(|c, i| f32_n(c, i, |[a]| 1.0 / a)),
        F32,
        0,
    ),
    row(
        V1,
        0x23,
        "v_rcp_iflag_f32",
        ex!(|c, i| f32_n(c, i, |[a]| 1.0 / a)),
        F32,
        0,
    ),
    row(
        V1,
        0x24,
        "v_rsq_f32",
        ex!(|c, i| f32_n(c, i, |[a]| 1.0 / a.sqrt())),
        F32,
        0,
    ),
    row(
        V1,
        0x25,
        "v_rcp_f64",
        ex!(|c, i| f64_n(c, i, |[a]| 1.0 / a)),
        F64,
        0,
    ),
    row(
        V1,
        0x26,
        "v_rsq_f64",
        ex!(|c, i| f64_n(c, i, |[a]| 1.0 / a.sqrt())),
        F64,
        0,
    ),
    row(
        V1,
        0x27,
        "v_sqrt_f32",
        ex!(|c, i| f32_n(c, i, |[a]| a.sqrt())),
        F32,
        0,
    ),
    row(
        V1,
        0x28,
        "v_sqrt_f64",
        ex!(|c, i| f64_n(c, i, |[a]| a.sqrt())),
        F64,
        0,
    ),
    row(
        V1,
        0x29,
        "v_sin_f32",
        ex!(
            |c, i| f32_n(c, i, |[a]| (f64::from(a) * std::f64::consts::TAU).sin()
                as f32)
        ),
        F32,
        0,
    ),
    row(
        V1,
        0x2a,
        "v_cos_f32",
        ex!(
            |c, i| f32_n(c, i, |[a]| (f64::from(a) * std::f64::consts::TAU).cos()
                as f32)
        ),
        F32,
        0,
    ),
    row(
        V1,
        0x2b,
        "v_not_b32",
        ex!(|c, i| u32_1(c, i, |a| !a)),
        B32,
        0,
    ),
    row(
        V1,
        0x2c,
        "v_bfrev_b32",
        ex!(|c, i| u32_1(c, i, u32::reverse_bits)),
        B32,
        0,
    ),
    row(
        V1,
        0x2d,
        "v_ffbh_u32",
        ex!(|c, i| u32_1(c, i, |a| if a == 0 { u32::MAX } else { a.leading_zeros() })),
        B32,
        0,
    ),
    row(
        V1,
        0x2e,
        "v_ffbl_b32",
        ex!(|c, i| u32_1(c, i, |a| if a == 0 { u32::MAX } else { a.trailing_zeros() })),
        B32,
        0,
    ),
    row(
        V1,
        0x2f,
        "v_ffbh_i32",
        ex!(|c, i| u32_1(c, i, |a| {
            let x = a ^ (((a as i32) >> 31) as u32);
            if x == 0 {
                u32::MAX
            } else {
                x.leading_zeros()
            }
        })),
        B32,
        0,
    ),
    row(
        V1,
        0x30,
        "v_frexp_exp_i32_f64",
        ex!(|c, i| f64_to_32(c, i, |x| float::frexp64(x).1 as u32)),
        T_I32_F64,
        0,
    ),
    row(
        V1,
        0x31,
        "v_frexp_mant_f64",
        ex!(|c, i| f64_n(c, i, |[a]| float::frexp64(a).0)),
        F64,
        0,
    ),
    row(
        V1,
        0x32,
        "v_fract_f64",
        ex!(|c, i| f64_n(c, i, |[a]| float::fract64(a))),
        F64,
        0,
    ),
    row(
        V1,
        0x33,
        "v_frexp_exp_i32_f32",
        ex!(|c, i| f32_to_int(c, i, |x| float::frexp_exp32(x) as u32)),
        T_I32_F32,
        0,
    ),
    row(
        V1,
        0x34,
        "v_frexp_mant_f32",
        ex!(|c, i| f32_n(c, i, |[a]| float::frexp_mant32(a))),
        F32,
        0,
    ),
    row(V1, 0x35, "v_clrexcp", ex!(|_c, _i| Ok(())), B32, 0),
    row(
        V1,
        0x39,
        "v_cvt_f16_u16",
        ex!(|c, i| f16_bits(c, i, |[a]| float::f2h(a as f32))),
        T_F16_B16,
        flag::OPSEL16,
    ),
    row(
        V1,
        0x3a,
        "v_cvt_f16_i16",
        ex!(|c, i| f16_bits(c, i, |[a]| float::f2h(sext16(a) as f32))),
        T_F16_B16,
        flag::OPSEL16,
    ),
    row(
        V1,
        0x3b,
        "v_cvt_u16_f16",
        ex!(|c, i| u16_n(c, i, |[a]| float::h2f(a) as u16 as u32)),
        [Ty::B16, Ty::F16, Ty::B32, Ty::B32],
        flag::OPSEL16,
    ),
    row(
        V1,
        0x3c,
        "v_cvt_i16_f16",
        ex!(|c, i| u16_n(c, i, |[a]| float::h2f(a) as i16 as u16 as u32)),
        [Ty::B16, Ty::F16, Ty::B32, Ty::B32],
        flag::OPSEL16,
    ),
    row(
        V1,
        0x3d,
        "v_rcp_f16",
        ex!(|c, i| f16_n(c, i, |[a]| 1.0 / a)),
        F16,
        flag::OPSEL16,
    ),
    row(
        V1,
        0x3e,
        "v_sqrt_f16",
        ex!(|c, i| f16_n(c, i, |[a]| a.sqrt())),
        F16,
        flag::OPSEL16,
    ),
    row(
        V1,
        0x3f,
        "v_rsq_f16",
        ex!(|c, i| f16_n(c, i, |[a]| 1.0 / a.sqrt())),
        F16,
        flag::OPSEL16,
    ),
    row(
        V1,
        0x40,
        "v_log_f16",
        ex!(|c, i| f16_n(c, i, |[a]| a.log2())),
        F16,
        flag::OPSEL16,
    ),
    row(
        V1,
        0x41,
        "v_exp_f16",
        ex!(|c, i| f16_n(c, i, |[a]| a.exp2())),
        F16,
        flag::OPSEL16,
    ),
    row(
        V1,
        0x42,
        "v_frexp_mant_f16",
        ex!(|c, i| f16_n(c, i, |[a]| float::frexp_mant32(a))),
        F16,
        flag::OPSEL16,
    ),
    row(
        V1,
        0x43,
        "v_frexp_exp_i16_f16",
        ex!(|c, i| u16_n(c, i, |[a]| float::frexp_exp32(float::h2f(a)) as u32)),
        [Ty::B16, Ty::F16, Ty::B32, Ty::B32],
        flag::OPSEL16,
    ),
    row(
        V1,
        0x44,
        "v_floor_f16",
        ex!(|c, i| f16_n(c, i, |[a]| a.floor())),
        F16,
        flag::OPSEL16,
    ),
    row(
        V1,
        0x45,
        "v_ceil_f16",
        ex!(|c, i| f16_n(c, i, |[a]| a.ceil())),
        F16,
        flag::OPSEL16,
    ),
    row(
        V1,
        0x46,
        "v_trunc_f16",
        ex!(|c, i| f16_n(c, i, |[a]| a.trunc())),
        F16,
        flag::OPSEL16,
    ),
    row(
        V1,
        0x47,
        "v_rndne_f16",
        ex!(|c, i| f16_n(c, i, |[a]| a.round_ties_even())),
        F16,
        flag::OPSEL16,
    ),
    row(
        V1,
        0x48,
        "v_fract_f16",
        ex!(|c, i| f16_n(c, i, |[a]| (a - a.floor()).min(float::h2f(0x3bff)))),
        F16,
        flag::OPSEL16,
    ),
    row(
        V1,
        0x49,
        "v_sin_f16",
        ex!(|c, i| f16_n(c, i, |[a]| (a * std::f32::consts::TAU).sin())),
        F16,
        flag::OPSEL16,
    ),
    row(
        V1,
        0x4a,
        "v_cos_f16",
        ex!(|c, i| f16_n(c, i, |[a]| (a * std::f32::consts::TAU).cos())),
        F16,
        flag::OPSEL16,
    ),
    row(
        V1,
        0x4b,
        "v_exp_legacy_f32",
        ex!(|c, i| f32_n(c, i, |[a]| a.exp2())),
        F32,
        0,
    ),
    row(
        V1,
        0x4c,
        "v_log_legacy_f32",
        ex!(|c, i| f32_n(c, i, |[a]| a.log2())),
        F32,
        0,
    ),
    row(V1, 0x51, "v_swap_b32", v_swap, B32, 0),
    row(
        V1,
        0x52,
        "v_accvgpr_mov_b32",
        ex!(|c, i| {
            let a = c.src32(i, 0);
            c.write32(i, &a);
            Ok(())
        }),
        B32,
        flag::SRC_AGPR | flag::DST_AGPR,
    ),
];

/// VOP3-only opcodes.
pub(crate) static VOP3: &[OpDef] = &[
    row(
        V3,
        0x1c0,
        "v_mad_legacy_f32",
        ex!(|c, i| f32_n(c, i, |[a, b, d]| mul_legacy(a, b) + d)),
        F32,
        0,
    ),
    row(
        V3,
        0x1c1,
        "v_mad_f32",
        ex!(|c, i| f32_n(c, i, |[a, b, d]| a * b + d)),
        F32,
        0,
    ),
    row(
        V3,
        0x1c2,
        "v_mad_i32_i24",
        ex!(
            |c, i| u32_3(c, i, |a, b, d| ((sext24(a) * sext24(b)) as u32)
                .wrapping_add(d))
        ),
        B32,
        0,
    ),
    row(
        V3,
        0x1c3,
        "v_mad_u32_u24",
        ex!(|c, i| u32_3(c, i, |a, b, d| (a & 0xff_ffff)
            .wrapping_mul(b & 0xff_ffff)
            .wrapping_add(d))),
        B32,
        0,
    ),
    unsupported(V3, 0x1c4, "v_cubeid_f32"),
    unsupported(V3, 0x1c5, "v_cubesc_f32"),
    unsupported(V3, 0x1c6, "v_cubetc_f32"),
    unsupported(V3, 0x1c7, "v_cubema_f32"),
    row(
        V3,
        0x1c8,
        "v_bfe_u32",
        ex!(|c, i| u32_3(c, i, bfe_u)),
        B32,
        0,
    ),
    row(
        V3,
        0x1c9,
        "v_bfe_i32",
        ex!(|c, i| u32_3(c, i, bfe_i)),
        B32,
        0,
    ),
    row(
        V3,
        0x1ca,
        "v_bfi_b32",
        ex!(|c, i| u32_3(c, i, |a, b, d| (a & b) | (!a & d))),
        B32,
        0,
    ),
    row(
        V3,
        0x1cb,
        "v_fma_f32",
        ex!(|c, i| f32_n(c, i, |[a, b, d]| a.mul_add(b, d))),
        F32,
        0,
    ),
    row(
        V3,
        0x1cc,
        "v_fma_f64",
        ex!(|c, i| f64_n(c, i, |[a, b, d]| a.mul_add(b, d))),
        F64,
        0,
    ),
    row(
        V3,
        0x1cd,
        "v_lerp_u8",
        ex!(|c, i| u32_3(c, i, |a, b, d| {
            (0..4)
                .map(|k| {
                    let x = (a >> (8 * k)) & 0xff;
                    let y = (b >> (8 * k)) & 0xff;
                    (((x + y + ((d >> (8 * k)) & 1)) >> 1) & 0xff) << (8 * k)
                })
                .sum()
        })),
        B32,
        0,
    ),
    row(
        V3,
        0x1ce,
        "v_alignbit_b32",
        ex!(|c, i| u32_3(
            c,
            i,
            |a, b, d| ((u64::from(a) << 32 | u64::from(b)) >> (d & 31)) as u32
        )),
        B32,
        0,
    ),
    row(
        V3,
        0x1cf,
        "v_alignbyte_b32",
        ex!(|c, i| u32_3(
            c,
            i,
            |a, b, d| ((u64::from(a) << 32 | u64::from(b)) >> (8 * (d & 3))) as u32
        )),
        B32,
        0,
    ),
    row(
        V3,
        0x1d0,
        "v_min3_f32",
        ex!(|c, i| f32_n(c, i, |[a, b, d]| float::fmin32(float::fmin32(a, b), d))),
        F32,
        0,
    ),
    row(
        V3,
        0x1d1,
        "v_min3_i32",
        ex!(
            |c, i| u32_3(c, i, |a, b, d| (a as i32).min(b as i32).min(d as i32)
                as u32)
        ),
        B32,
        0,
    ),
    row(
        V3,
        0x1d2,
        "v_min3_u32",
        ex!(|c, i| u32_3(c, i, |a, b, d| a.min(b).min(d))),
        B32,
        0,
    ),
    row(
        V3,
        0x1d3,
        "v_max3_f32",
        ex!(|c, i| f32_n(c, i, |[a, b, d]| float::fmax32(float::fmax32(a, b), d))),
        F32,
        0,
    ),
    row(
        V3,
        0x1d4,
        "v_max3_i32",
        ex!(
            |c, i| u32_3(c, i, |a, b, d| (a as i32).max(b as i32).max(d as i32)
                as u32)
        ),
        B32,
        0,
    ),
    row(
        V3,
        0x1d5,
        "v_max3_u32",
        ex!(|c, i| u32_3(c, i, |a, b, d| a.max(b).max(d))),
        B32,
        0,
    ),
    row(
        V3,
        0x1d6,
        "v_med3_f32",
        ex!(|c, i| f32_n(c, i, |[a, b, d]| float::med3_32(a, b, d))),
        F32,
        0,
    ),
    row(
        V3,
        0x1d7,
        "v_med3_i32",
        ex!(|c, i| u32_3(c, i, |a, b, d| med3(a as i32, b as i32, d as i32) as u32)),
        B32,
        0,
    ),
    row(
        V3,
        0x1d8,
        "v_med3_u32",
        ex!(|c, i| u32_3(c, i, med3)),
        B32,
        0,
    ),
    row(
        V3,
        0x1d9,
        "v_sad_u8",
        ex!(|c, i| u32_3(c, i, |a, b, d| sad_u8(a, b).wrapping_add(d))),
        B32,
        0,
    ),
    row(
        V3,
        0x1da,
        "v_sad_hi_u8",
        ex!(|c, i| u32_3(c, i, |a, b, d| (sad_u8(a, b) << 16).wrapping_add(d))),
        B32,
        0,
    ),
    row(
        V3,
        0x1db,
        "v_sad_u16",
        ex!(
            |c, i| u32_3(c, i, |a, b, d| ((a & 0xffff).abs_diff(b & 0xffff)
                + (a >> 16).abs_diff(b >> 16))
            .wrapping_add(d))
        ),
        B32,
        0,
    ),
    row(
        V3,
        0x1dc,
        "v_sad_u32",
        ex!(|c, i| u32_3(c, i, |a, b, d| a.abs_diff(b).wrapping_add(d))),
        B32,
        0,
    ),
    row(
        V3,
        0x1dd,
        "v_cvt_pk_u8_f32",
        ex!(|c, i| u32_3(c, i, |a, b, d| {
            let v = f32::from_bits(a).round_ties_even().clamp(0.0, 255.0) as u32;
            let sh = 8 * (b & 3);
            (d & !(0xff << sh)) | (v << sh)
        })),
        [Ty::B32, Ty::F32, Ty::B32, Ty::B32],
        0,
    ),
    row(
        V3,
        0x1de,
        "v_div_fixup_f32",
        ex!(|c, i| f32_n(c, i, |[q, d, n]| float::div_fixup32(q, d, n))),
        F32,
        0,
    ),
    row(
        V3,
        0x1df,
        "v_div_fixup_f64",
        ex!(|c, i| f64_n(c, i, |[q, d, n]| float::div_fixup64(q, d, n))),
        F64,
        0,
    ),
    row(
        V3,
        0x1e0,
        "v_div_scale_f32",
        div_scale_f32,
        F32,
        flag::VOP3B,
    ),
    row(
        V3,
        0x1e1,
        "v_div_scale_f64",
        div_scale_f64,
        F64,
        flag::VOP3B,
    ),
    row(V3, 0x1e2, "v_div_fmas_f32", div_fmas_f32, F32, 0),
    row(V3, 0x1e3, "v_div_fmas_f64", div_fmas_f64, F64, 0),
    row(
        V3,
        0x1e4,
        "v_msad_u8",
        ex!(|c, i| u32_3(c, i, |a, b, d| {
            let s: u32 = (0..4)
                .map(|k| {
                    let y = (b >> (8 * k)) & 0xff;
                    if y == 0 {
                        0
                    } else {
                        ((a >> (8 * k)) & 0xff).abs_diff(y)
                    }
                })
                .sum();
            s.wrapping_add(d)
        })),
        B32,
        0,
    ),
    row(
        V3,
        0x1e8,
        "v_mad_u64_u32",
        ex!(|c, i| mad_64_32(c, i, false)),
        T_MAD64,
        flag::VOP3B,
    ),
    row(
        V3,
        0x1e9,
        "v_mad_i64_i32",
        ex!(|c, i| mad_64_32(c, i, true)),
        [Ty::I64, Ty::B32, Ty::B32, Ty::I64],
        flag::VOP3B,
    ),
    row(
        V3,
        0x1ed,
        "v_perm_b32",
        ex!(|c, i| u32_3(c, i, perm)),
        B32,
        0,
    ),
    row(
        V3,
        0x1f1,
        "v_mad_u32_u16",
        ex!(|c, i| u32_3(c, i, |a, b, d| ((a & 0xffff) * (b & 0xffff))
            .wrapping_add(d))),
        T_MAD16,
        flag::OPSEL16,
    ),
    row(
        V3,
        0x1f2,
        "v_mad_i32_i16",
        ex!(|c, i| u32_3(
            c,
            i,
            |a, b, d| (sext16(a) * sext16(b)).wrapping_add(d as i32) as u32
        )),
        T_MAD16,
        flag::OPSEL16,
    ),
    row(
        V3,
        0x1f3,
        "v_xad_u32",
        ex!(|c, i| u32_3(c, i, |a, b, d| (a ^ b).wrapping_add(d))),
        B32,
        0,
    ),
    row(
        V3,
        0x1f4,
        "v_min3_f16",
        ex!(|c, i| f16_n(c, i, |[a, b, d]| a.min(b).min(d))),
        F16,
        flag::OPSEL16,
    ),
    row(
        V3,
        0x1f5,
        "v_min3_i16",
        ex!(
            |c, i| u16_n(c, i, |[a, b, d]| sext16(a).min(sext16(b)).min(sext16(d))
                as u32)
        ),
        B16,
        flag::OPSEL16,
    ),
    row(
        V3,
        0x1f6,
        "v_min3_u16",
        ex!(|c, i| u16_n(c, i, |[a, b, d]| a.min(b).min(d))),
        B16,
        flag::OPSEL16,
    ),
    row(
        V3,
        0x1f7,
        "v_max3_f16",
        ex!(|c, i| f16_n(c, i, |[a, b, d]| a.max(b).max(d))),
        F16,
        flag::OPSEL16,
    ),
    row(
        V3,
        0x1f8,
        "v_max3_i16",
        ex!(
            |c, i| u16_n(c, i, |[a, b, d]| sext16(a).max(sext16(b)).max(sext16(d))
                as u32)
        ),
        B16,
        flag::OPSEL16,
    ),
    row(
        V3,
        0x1f9,
        "v_max3_u16",
        ex!(|c, i| u16_n(c, i, |[a, b, d]| a.max(b).max(d))),
        B16,
        flag::OPSEL16,
    ),
    row(
        V3,
        0x1fa,
        "v_med3_f16",
        ex!(|c, i| f16_n(c, i, |[a, b, d]| float::med3_32(a, b, d))),
        F16,
        flag::OPSEL16,
    ),
    row(
        V3,
        0x1fb,
        "v_med3_i16",
        ex!(
            |c, i| u16_n(c, i, |[a, b, d]| med3(sext16(a), sext16(b), sext16(d))
                as u32)
        ),
        B16,
        flag::OPSEL16,
    ),
    row(
        V3,
        0x1fc,
        "v_med3_u16",
        ex!(|c, i| u16_n(c, i, |[a, b, d]| med3(a, b, d))),
        B16,
        flag::OPSEL16,
    ),
    row(
        V3,
        0x1fd,
        "v_lshl_add_u32",
        ex!(|c, i| u32_3(c, i, |a, b, d| (a << (b & 31)).wrapping_add(d))),
        B32,
        0,
    ),
    row(
        V3,
        0x1fe,
        "v_add_lshl_u32",
        ex!(|c, i| u32_3(c, i, |a, b, d| a.wrapping_add(b) << (d & 31))),
        B32,
        0,
    ),
    row(
        V3,
        0x1ff,
        "v_add3_u32",
        ex!(|c, i| u32_3(c, i, |a, b, d| a.wrapping_add(b).wrapping_add(d))),
        B32,
        0,
    ),
    row(
        V3,
        0x200,
        "v_lshl_or_b32",
        ex!(|c, i| u32_3(c, i, |a, b, d| (a << (b & 31)) | d)),
        B32,
        0,
    ),
    row(
        V3,
        0x201,
        "v_and_or_b32",
        ex!(|c, i| u32_3(c, i, |a, b, d| (a & b) | d)),
        B32,
        0,
    ),
    row(
        V3,
        0x202,
        "v_or3_b32",
        ex!(|c, i| u32_3(c, i, |a, b, d| a | b | d)),
        B32,
        0,
    ),
    row(
        V3,
        0x203,
        "v_mad_f16",
        ex!(|c, i| f16_bits(c, i, |[a, b, d]| {
            let p = float::f2h(float::h2f(a) * float::h2f(b));
            float::f2h(float::h2f(p) + float::h2f(d))
        })),
        F16,
        flag::OPSEL16,
    ),
    row(
        V3,
        0x204,
        "v_mad_u16",
        ex!(|c, i| u16_n(c, i, |[a, b, d]| a.wrapping_mul(b).wrapping_add(d))),
        B16,
        flag::OPSEL16,
    ),
    row(
        V3,
        0x205,
        "v_mad_i16",
        ex!(|c, i| u16_n(
            c,
            i,
            |[a, b, d]| (sext16(a) * sext16(b)).wrapping_add(sext16(d)) as u32
        )),
        B16,
        flag::OPSEL16,
    ),
    row(
        V3,
        0x206,
        "v_fma_f16",
        ex!(|c, i| f16_bits(c, i, |[a, b, d]| {
            let h = |x: u32| f64::from(float::h2f(x));
            float::d2h(h(a).mul_add(h(b), h(d)))
        })),
        F16,
        flag::OPSEL16,
    ),
    row(
        V3,
        0x207,
        "v_div_fixup_f16",
        ex!(|c, i| f16_n(c, i, |[q, d, n]| float::div_fixup32(q, d, n))),
        F16,
        flag::OPSEL16,
    ),
    row(
        V3,
        0x280,
        "v_add_f64",
        ex!(|c, i| f64_n(c, i, |[a, b]| a + b)),
        F64,
        0,
    ),
    row(
        V3,
        0x281,
        "v_mul_f64",
        ex!(|c, i| f64_n(c, i, |[a, b]| a * b)),
        F64,
        0,
    ),
    row(
        V3,
        0x282,
        "v_min_f64",
        ex!(|c, i| f64_n(c, i, |[a, b]| a.min(b))),
        F64,
        0,
    ),
    row(
        V3,
        0x283,
        "v_max_f64",
        ex!(|c, i| f64_n(c, i, |[a, b]| a.max(b))),
        F64,
        0,
    ),
    row(V3, 0x284, "v_ldexp_f64", ldexp_f64, T_F64_I32, 0),
    row(
        V3,
        0x285,
        "v_mul_lo_u32",
        ex!(|c, i| u32_2(c, i, u32::wrapping_mul)),
        B32,
        0,
    ),
    row(
        V3,
        0x286,
        "v_mul_hi_u32",
        ex!(|c, i| u32_2(c, i, |a, b| ((u64::from(a) * u64::from(b)) >> 32) as u32)),
        B32,
        0,
    ),
    row(
        V3,
        0x287,
        "v_mul_hi_i32",
        ex!(|c, i| u32_2(
            c,
            i,
            |a, b| ((i64::from(a as i32) * i64::from(b as i32)) >> 32) as u32
        )),
        B32,
        0,
    ),
    row(
        V3,
        0x288,
        "v_ldexp_f32",
        ex!(|c, i| {
            let b = c.src32(i, 1);
            let dn = den32(c);
            let a = c.src32(i, 0);
            let mut r = [0u32; LANES];
            for l in 0..LANES {
                let x = f32::from_bits(if dn.flush_in {
                    float::flush32(a[l])
                } else {
                    a[l]
                });
                r[l] = float::ldexp32(x, b[l] as i32).to_bits();
            }
            post32(c, i, &mut r, dn);
            c.write32(i, &r);
            Ok(())
        }),
        T_F32_I,
        0,
    ),
    row(V3, 0x289, "v_readlane_b32", v_readlane, B32, flag::SDST),
    row(V3, 0x28a, "v_writelane_b32", v_writelane, B32, 0),
    row(
        V3,
        0x28b,
        "v_bcnt_u32_b32",
        ex!(|c, i| u32_2(c, i, |a, b| a.count_ones().wrapping_add(b))),
        B32,
        0,
    ),
    row(
        V3,
        0x28c,
        "v_mbcnt_lo_u32_b32",
        ex!(|c, i| mbcnt(c, i, false)),
        B32,
        0,
    ),
    row(
        V3,
        0x28d,
        "v_mbcnt_hi_u32_b32",
        ex!(|c, i| mbcnt(c, i, true)),
        B32,
        0,
    ),
    row(
        V3,
        0x28f,
        "v_lshlrev_b64",
        ex!(|c, i| shift64(c, i, |v, s| v << s)),
        T_SHIFT64,
        0,
    ),
    row(
        V3,
        0x290,
        "v_lshrrev_b64",
        ex!(|c, i| shift64(c, i, |v, s| v >> s)),
        T_SHIFT64,
        0,
    ),
    row(
        V3,
        0x291,
        "v_ashrrev_i64",
        ex!(|c, i| shift64(c, i, |v, s| ((v as i64) >> s) as u64)),
        T_SHIFT64,
        0,
    ),
    unsupported(V3, 0x292, "v_trig_preop_f64"),
    row(
        V3,
        0x293,
        "v_bfm_b32",
        ex!(
            |c, i| u32_2(c, i, |a, b| ((1u64 << (a & 31)) as u32).wrapping_sub(1)
                << (b & 31))
        ),
        B32,
        0,
    ),
    row(
        V3,
        0x294,
        "v_cvt_pknorm_i16_f32",
        ex!(|c, i| u32_2(c, i, |a, b| snorm16(f32::from_bits(a))
            | snorm16(f32::from_bits(b)) << 16)),
        T_CVT_PK,
        0,
    ),
    row(
        V3,
        0x295,
        "v_cvt_pknorm_u16_f32",
        ex!(|c, i| u32_2(c, i, |a, b| unorm16(f32::from_bits(a))
            | unorm16(f32::from_bits(b)) << 16)),
        T_CVT_PK,
        0,
    ),
    row(
        V3,
        0x296,
        "v_cvt_pkrtz_f16_f32",
        ex!(|c, i| u32_2(c, i, |a, b| rtz_f16(f32::from_bits(a))
            | rtz_f16(f32::from_bits(b)) << 16)),
        T_CVT_PK,
        0,
    ),
    row(
        V3,
        0x297,
        "v_cvt_pk_u16_u32",
        ex!(|c, i| u32_2(c, i, |a, b| a.min(0xffff) | b.min(0xffff) << 16)),
        B32,
        0,
    ),
    row(
        V3,
        0x298,
        "v_cvt_pk_i16_i32",
        ex!(|c, i| u32_2(c, i, |a, b| {
            let s = |x: u32| u32::from((x as i32).clamp(-32768, 32767) as i16 as u16);
            s(a) | s(b) << 16
        })),
        B32,
        0,
    ),
    row(
        V3,
        0x29c,
        "v_add_i32",
        ex!(|c, i| {
            if i.clamp {
                u32_2(c, i, |a, b| (a as i32).saturating_add(b as i32) as u32)
            } else {
                u32_2(c, i, u32::wrapping_add)
            }
        }),
        B32,
        0,
    ),
    row(
        V3,
        0x29d,
        "v_sub_i32",
        ex!(|c, i| {
            if i.clamp {
                u32_2(c, i, |a, b| (a as i32).saturating_sub(b as i32) as u32)
            } else {
                u32_2(c, i, u32::wrapping_sub)
            }
        }),
        B32,
        0,
    ),
    row(
        V3,
        0x29e,
        "v_add_i16",
        ex!(|c, i| u16_n(c, i, |[a, b]| sext16(a).wrapping_add(sext16(b)) as u32)),
        B16,
        flag::OPSEL16,
    ),
    row(
        V3,
        0x29f,
        "v_sub_i16",
        ex!(|c, i| u16_n(c, i, |[a, b]| sext16(a).wrapping_sub(sext16(b)) as u32)),
        B16,
        flag::OPSEL16,
    ),
    row(
        V3,
        0x2a0,
        "v_pack_b32_f16",
        ex!(|c, i| u32_2(c, i, |a, b| (a & 0xffff) | (b & 0xffff) << 16)),
        T_PK_F16,
        flag::OPSEL16,
    ),
    row(
        V3,
        0x2a1,
        "v_mul_legacy_f32",
        ex!(|c, i| f32_n(c, i, |[a, b]| mul_legacy(a, b))),
        F32,
        0,
    ),
];
