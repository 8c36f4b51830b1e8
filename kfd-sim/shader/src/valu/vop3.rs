//! The rows of the opcode table for the vector ALU opcodes only the VOP3 encoding has (0x1c0 and
//! up: three-source arithmetic, 64-bit shifts and multiplies, lane reads and writes, packing).

use super::{
    add_sub32, bfe_i, bfe_u, den32, div_fmas_f32, div_fmas_f64, div_scale_f32, div_scale_f64, ex,
    f16_bits, f16_n, f32_n, f64_n, ldexp_f64, mad_64_32, mbcnt, med3, mul_legacy, perm, post32,
    rtz_f16, sad_u8, sext16, sext24, shift64, snorm16, u16_n, u32_2, u32_3, unorm16, v_readlane,
    v_writelane, B16, B32, F16, F32, F64, T_CVT_PK, T_F32_I, T_F64_I32, T_MAD16, T_MAD64, T_PK_F16,
    T_SHIFT64,
};
use crate::float;
use crate::table::Encoding::Vop3 as V3;
use crate::table::{flag, row, unsupported, OpDef, Ty};
use crate::wave::LANES;

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
        add_sub32::<false, false, true>,
        B32,
        0,
    ),
    row(
        V3,
        0x29d,
        "v_sub_i32",
        add_sub32::<true, false, true>,
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
