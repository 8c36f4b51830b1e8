//! The vector ALU: the lane loops and helpers its VOP1, VOP2 and VOP3 opcodes share. Every loop
//! runs over all 64 lanes into a result array that one masked store writes back, so the compiler
//! can vectorise it. The opcodes' rows of the opcode table are in `vop1`, `vop2` and `vop3`.

use crate::decode::{Inst, Operand};
use crate::exec::{Ctx, Exit};
use crate::float::{self, Denorm, QNAN32, QNAN64};
use crate::operand::Lanes64;
use crate::table::Ty;
use crate::wave::{hwreg, Lanes, LANES};

mod vop1;
mod vop2;
mod vop3;

pub(crate) use vop1::VOP1;
pub(crate) use vop2::VOP2;
pub(crate) use vop3::VOP3;

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

/// A 32-bit add, or a subtract (`SUB`) of the sources in order or reversed (`REV`: b - a), of
/// unsigned or `SIGNED` integers: wrapping, or saturating when the instruction clamps.
#[allow(clippy::cast_possible_wrap, clippy::cast_sign_loss)]
pub(crate) fn add_sub32<const SUB: bool, const REV: bool, const SIGNED: bool>(
    c: &mut Ctx<'_>,
    i: &Inst,
) -> R {
    // The clamp is the instruction's, so it is decided once, outside the lane loop.
    let order = |a: u32, b: u32| if REV { (b, a) } else { (a, b) };
    if !i.clamp {
        return u32_2(c, i, |a, b| {
            let (a, b) = order(a, b);
            if SUB {
                a.wrapping_sub(b)
            } else {
                a.wrapping_add(b)
            }
        });
    }
    u32_2(c, i, |a, b| {
        let (a, b) = order(a, b);
        match (SIGNED, SUB) {
            (false, false) => a.saturating_add(b),
            (false, true) => a.saturating_sub(b),
            (true, false) => (a as i32).saturating_add(b as i32) as u32,
            (true, true) => (a as i32).saturating_sub(b as i32) as u32,
        }
    })
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
