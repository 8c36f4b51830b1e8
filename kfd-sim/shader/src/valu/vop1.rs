//! The VOP1 rows of the opcode table (one-source vector ALU opcodes, also reachable as VOP3
//! 0x140 + opcode) with their executors.

use super::{
    den32, den64, ex, f16_bits, f16_n, f32_n, f32_to_int, f64_n, f64_to_32, from32_to_f64,
    int_to_f32, post32, post64, sext16, u16_n, u32_1, v_readfirstlane, v_swap, write16, B32, F16,
    F32, F64, T_F16_B16, T_F16_F32, T_F32_B32, T_F32_F16, T_F32_F64, T_F64_B32, T_F64_F32,
    T_I32_F32, T_I32_F64,
};
use crate::float;
use crate::table::Encoding::Vop1 as V1;
use crate::table::{flag, row, OpDef, Ty};
use crate::wave::LANES;

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
