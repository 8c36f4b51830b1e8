//! The VOP2 rows of the opcode table (two-source vector ALU opcodes, also reachable as VOP3
//! 0x100 + opcode) with their executors.

use super::{
    add_sub32, carry, den32, ex, f16_bits, f16_n, f32_n, f64_n, post32, sext16, sext24, u16_n,
    u32_2, u32_3, B16, B32, F16, F32, F64, T_F16_I, T_PK_F16,
};
use crate::float;
use crate::table::Encoding::Vop2 as V2;
use crate::table::{flag, row, OpDef, Ty};
use crate::wave::LANES;

/// The signed dot product of the `bits`-wide fields of `a` and `b` added to `d`, wrapping in 32
/// bits: the accumulating `v_dot*c_i32_*` forms (VOP2 and DPP only, so no CLAMP).
#[inline(always)]
fn dot_acc(a: u32, b: u32, d: u32, bits: u32) -> u32 {
    let field = |v: u32, k: u32| (((v >> (k * bits)) << (32 - bits)) as i32) >> (32 - bits);
    let mut acc = d;
    for k in 0..32 / bits {
        acc = acc.wrapping_add(field(a, k).wrapping_mul(field(b, k)) as u32);
    }
    acc
}

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
        add_sub32::<false, false, false>,
        B32,
        0,
    ),
    row(
        V2,
        0x35,
        "v_sub_u32",
        add_sub32::<true, false, false>,
        B32,
        0,
    ),
    row(
        V2,
        0x36,
        "v_subrev_u32",
        add_sub32::<true, true, false>,
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
    row(
        V2,
        0x38,
        "v_dot2c_i32_i16",
        ex!(|c, i| u32_3(c, i, |a, b, d| dot_acc(a, b, d, 16))),
        B32,
        flag::MAC,
    ),
    row(
        V2,
        0x39,
        "v_dot4c_i32_i8",
        ex!(|c, i| u32_3(c, i, |a, b, d| dot_acc(a, b, d, 8))),
        B32,
        flag::MAC,
    ),
    row(
        V2,
        0x3a,
        "v_dot8c_i32_i4",
        ex!(|c, i| u32_3(c, i, |a, b, d| dot_acc(a, b, d, 4))),
        B32,
        flag::MAC,
    ),
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
