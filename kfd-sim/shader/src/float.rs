//! Floating-point helpers: denormal flushing per MODE, the default NaN, f16 conversions, and
//! the special-case instructions of the division and square-root expansions.

use half::f16;

/// The quiet NaN the hardware produces for invalid operations.
pub(crate) const QNAN32: u32 = 0x7fc0_0000;
/// The f64 default NaN.
pub(crate) const QNAN64: u64 = 0x7ff8_0000_0000_0000;

/// Denormal handling of one MODE.FP_DENORM field.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Denorm {
    pub flush_in: bool,
    pub flush_out: bool,
}

impl Denorm {
    /// From the 2-bit field: bit 0 keeps input denormals, bit 1 keeps output denormals.
    pub(crate) fn from_field(f: u32) -> Self {
        Self {
            flush_in: f & 1 == 0,
            flush_out: f & 2 == 0,
        }
    }
}

/// A denormal f32 (bits) flushed to a zero of its sign.
#[inline]
pub(crate) fn flush32(x: u32) -> u32 {
    if x & 0x7f80_0000 == 0 {
        x & 0x8000_0000
    } else {
        x
    }
}

/// A denormal f64 (bits) flushed to a zero of its sign.
#[inline]
pub(crate) fn flush64(x: u64) -> u64 {
    if x & 0x7ff0_0000_0000_0000 == 0 {
        x & (1 << 63)
    } else {
        x
    }
}

/// A denormal f16 (bits) flushed to a zero of its sign.
#[inline]
pub(crate) fn flush16(x: u16) -> u16 {
    if x & 0x7c00 == 0 {
        x & 0x8000
    } else {
        x
    }
}

/// f16 bits to f32.
#[inline]
pub(crate) fn h2f(x: u32) -> f32 {
    f16::from_bits(x as u16).to_f32()
}

/// f32 to f16 bits (round to nearest even).
#[inline]
pub(crate) fn f2h(x: f32) -> u32 {
    u32::from(f16::from_f32(x).to_bits())
}

/// f64 to f16 bits (round to nearest even).
#[inline]
pub(crate) fn d2h(x: f64) -> u32 {
    u32::from(f16::from_f64(x).to_bits())
}

/// Exponent field of an f32.
fn exp32(x: f32) -> i32 {
    ((x.to_bits() >> 23) & 0xff) as i32
}

/// Exponent field of an f64.
fn exp64(x: f64) -> i32 {
    ((x.to_bits() >> 52) & 0x7ff) as i32
}

/// `x * 2^e` for f32, exact where representable.
pub(crate) fn ldexp32(x: f32, e: i32) -> f32 {
    let e = e.clamp(-300, 300);
    (f64::from(x) * 2f64.powi(e)) as f32
}

/// `x * 2^e` for f64.
pub(crate) fn ldexp64(x: f64, e: i32) -> f64 {
    let mut x = x;
    let mut e = e.clamp(-2200, 2200);
    while e > 1000 {
        x *= 2f64.powi(1000);
        e -= 1000;
    }
    while e < -1000 {
        x *= 2f64.powi(-1000);
        e += 1000;
    }
    x * 2f64.powi(e)
}

/// v_div_scale_f32: (result, VCC bit). `s0` is the value to scale (numerator or denominator),
/// `s1` the denominator, `s2` the numerator.
pub(crate) fn div_scale32(s0: f32, s1: f32, s2: f32) -> (f32, bool) {
    let tiny = |x: f32| x != 0.0 && x.is_subnormal();
    if s2 == 0.0 || s1 == 0.0 {
        return (f32::from_bits(QNAN32), false);
    }
    if s1.is_nan() || s2.is_nan() || s1.is_infinite() || s2.is_infinite() {
        return (s0, false);
    }
    if exp32(s2) - exp32(s1) >= 96 {
        return (if s0 == s1 { ldexp32(s0, 64) } else { s0 }, true);
    }
    if tiny(s1) {
        return (ldexp32(s0, 64), false);
    }
    let inv = 1.0 / f64::from(s1);
    let q = f64::from(s2) / f64::from(s1);
    let den = |x: f64| x != 0.0 && x.abs() < f64::from(f32::MIN_POSITIVE);
    if den(inv) && den(q) {
        return (if s0 == s1 { ldexp32(s0, 64) } else { s0 }, true);
    }
    if den(inv) {
        return (ldexp32(s0, -64), false);
    }
    if den(q) {
        return (if s0 == s2 { ldexp32(s0, 64) } else { s0 }, true);
    }
    if exp32(s2) <= 23 {
        return (ldexp32(s0, 64), false);
    }
    (s0, false)
}

/// v_div_scale_f64, as [`div_scale32`].
pub(crate) fn div_scale64(s0: f64, s1: f64, s2: f64) -> (f64, bool) {
    let tiny = |x: f64| x != 0.0 && x.is_subnormal();
    if s2 == 0.0 || s1 == 0.0 {
        return (f64::from_bits(QNAN64), false);
    }
    if s1.is_nan() || s2.is_nan() || s1.is_infinite() || s2.is_infinite() {
        return (s0, false);
    }
    if exp64(s2) - exp64(s1) >= 768 {
        return (if s0 == s1 { ldexp64(s0, 128) } else { s0 }, true);
    }
    if tiny(s1) {
        return (ldexp64(s0, 128), false);
    }
    let inv_exp = -(exp64(s1) - 1023);
    let q_exp = exp64(s2) - exp64(s1);
    let den_inv = inv_exp < -1021;
    let den_q = q_exp < -1021;
    if den_inv && den_q {
        return (if s0 == s1 { ldexp64(s0, 128) } else { s0 }, true);
    }
    if den_inv {
        return (ldexp64(s0, -128), false);
    }
    if den_q {
        return (if s0 == s2 { ldexp64(s0, 128) } else { s0 }, true);
    }
    if exp64(s2) <= 53 {
        return (ldexp64(s0, 128), false);
    }
    (s0, false)
}

/// v_div_fmas_f32: fma, rescaled when VCC says div_scale scaled.
pub(crate) fn div_fmas32(a: f32, b: f32, c: f32, vcc: bool) -> f32 {
    let r = a.mul_add(b, c);
    if vcc {
        ldexp32(r, if exp32(c) > 127 { 64 } else { -64 })
    } else {
        r
    }
}

/// v_div_fmas_f64.
pub(crate) fn div_fmas64(a: f64, b: f64, c: f64, vcc: bool) -> f64 {
    let r = a.mul_add(b, c);
    if vcc {
        ldexp64(r, if exp64(c) > 1023 { 128 } else { -128 })
    } else {
        r
    }
}

/// v_div_fixup_f32: the quotient `q` of `n / d` with the special cases fixed.
pub(crate) fn div_fixup32(q: f32, d: f32, n: f32) -> f32 {
    let neg = d.is_sign_negative() != n.is_sign_negative();
    let signed = |x: f32| if neg { -x.abs() } else { x.abs() };
    if n.is_nan() {
        return f32::from_bits(n.to_bits() | 0x0040_0000);
    }
    if d.is_nan() {
        return f32::from_bits(d.to_bits() | 0x0040_0000);
    }
    if (d == 0.0 && n == 0.0) || (d.is_infinite() && n.is_infinite()) {
        return f32::from_bits(QNAN32);
    }
    if d == 0.0 || n.is_infinite() {
        return signed(f32::INFINITY);
    }
    if d.is_infinite() || n == 0.0 {
        return signed(0.0);
    }
    if q.is_nan() {
        return signed(f32::INFINITY);
    }
    signed(q)
}

/// v_div_fixup_f64.
pub(crate) fn div_fixup64(q: f64, d: f64, n: f64) -> f64 {
    let neg = d.is_sign_negative() != n.is_sign_negative();
    let signed = |x: f64| if neg { -x.abs() } else { x.abs() };
    if n.is_nan() {
        return f64::from_bits(n.to_bits() | 0x0008_0000_0000_0000);
    }
    if d.is_nan() {
        return f64::from_bits(d.to_bits() | 0x0008_0000_0000_0000);
    }
    if (d == 0.0 && n == 0.0) || (d.is_infinite() && n.is_infinite()) {
        return f64::from_bits(QNAN64);
    }
    if d == 0.0 || n.is_infinite() {
        return signed(f64::INFINITY);
    }
    if d.is_infinite() || n == 0.0 {
        return signed(0.0);
    }
    if q.is_nan() {
        return signed(f64::INFINITY);
    }
    signed(q)
}

/// v_frexp_mant_f32: the mantissa in [0.5, 1) with the sign; NaN and infinities unchanged.
pub(crate) fn frexp_mant32(x: f32) -> f32 {
    if x.is_nan() || x.is_infinite() || x == 0.0 {
        return x;
    }
    let (m, _) = frexp64(f64::from(x));
    m as f32
}

/// v_frexp_exp_i32_f32: the exponent e with x = m * 2^e, m in [0.5, 1); 0 for NaN/inf/0.
pub(crate) fn frexp_exp32(x: f32) -> i32 {
    if x.is_nan() || x.is_infinite() || x == 0.0 {
        return 0;
    }
    frexp64(f64::from(x)).1
}

/// (mantissa, exponent) of a finite non-zero f64.
pub(crate) fn frexp64(x: f64) -> (f64, i32) {
    if x.is_nan() || x.is_infinite() || x == 0.0 {
        return (x, 0);
    }
    let (x, adj) = if x.is_subnormal() {
        (x * 2f64.powi(64), -64)
    } else {
        (x, 0)
    };
    let b = x.to_bits();
    let e = ((b >> 52) & 0x7ff) as i32 - 1022;
    let m = f64::from_bits(b & !(0x7ff << 52) | (1022 << 52));
    (m, e + adj)
}

/// v_fract_f32: x - floor(x), below 1.0.
pub(crate) fn fract32(x: f32) -> f32 {
    if x.is_infinite() {
        return f32::from_bits(QNAN32);
    }
    (x - x.floor()).min(f32::from_bits(0x3f7f_ffff))
}

/// v_fract_f64.
pub(crate) fn fract64(x: f64) -> f64 {
    if x.is_infinite() {
        return f64::from_bits(QNAN64);
    }
    (x - x.floor()).min(f64::from_bits(0x3fef_ffff_ffff_ffff))
}

/// v_cmp_class: whether `x` is in one of the classes of `mask` (bit 0 signalling NaN, 1 quiet
/// NaN, 2 -inf, 3 -normal, 4 -denormal, 5 -0, 6 +0, 7 +denormal, 8 +normal, 9 +inf).
pub(crate) fn class64(x: f64, quiet_bit: bool, mask: u32) -> bool {
    let neg = x.is_sign_negative();
    let bit = if x.is_nan() {
        if quiet_bit {
            1
        } else {
            0
        }
    } else if x.is_infinite() {
        if neg {
            2
        } else {
            9
        }
    } else if x == 0.0 {
        if neg {
            5
        } else {
            6
        }
    } else if x.is_subnormal() {
        if neg {
            4
        } else {
            7
        }
    } else if neg {
        3
    } else {
        8
    };
    mask >> bit & 1 != 0
}

/// IEEE minNum/maxNum as the hardware's v_min/v_max: a NaN operand loses to a number.
#[inline]
pub(crate) fn fmin32(a: f32, b: f32) -> f32 {
    a.min(b)
}

/// See [`fmin32`].
#[inline]
pub(crate) fn fmax32(a: f32, b: f32) -> f32 {
    a.max(b)
}

/// Median of three (v_med3_f32): NaN-ignoring.
pub(crate) fn med3_32(a: f32, b: f32, c: f32) -> f32 {
    if a.is_nan() || b.is_nan() || c.is_nan() {
        return fmin32(fmin32(a, b), c);
    }
    let mx = a.max(b).max(c);
    if mx == a {
        b.max(c)
    } else if mx == b {
        a.max(c)
    } else {
        a.max(b)
    }
}

/// f32 to i32 the way v_cvt_i32_f32 converts: truncate, saturate, NaN to 0.
#[inline]
pub(crate) fn f2i(x: f32) -> u32 {
    (x as i32) as u32
}

/// f32 to u32: truncate, saturate, NaN to 0.
#[inline]
pub(crate) fn f2u(x: f32) -> u32 {
    x as u32
}
