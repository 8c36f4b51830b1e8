//! The SOP2 rows of the opcode table (two-source scalar ALU opcodes) with their executors.

use super::{bfe32, bfe64, lshl_add, nz32, nz64, sop32, sop64, S32, S64, S64_32, SI64};
use crate::table::Encoding::Sop2 as S2;
use crate::table::{row, unsupported, OpDef, Ty};
use crate::valu::ex;

/// SOP2 opcodes.
pub(crate) static SOP2: &[OpDef] = &[
    row(
        S2,
        0x00,
        "s_add_u32",
        ex!(|c, i| sop32(c, i, |a, b, _| {
            let (r, o) = a.overflowing_add(b);
            (r, Some(o))
        })),
        S32,
        0,
    ),
    row(
        S2,
        0x01,
        "s_sub_u32",
        ex!(|c, i| sop32(c, i, |a, b, _| {
            let (r, o) = a.overflowing_sub(b);
            (r, Some(o))
        })),
        S32,
        0,
    ),
    row(
        S2,
        0x02,
        "s_add_i32",
        ex!(|c, i| sop32(c, i, |a, b, _| {
            let (r, o) = (a as i32).overflowing_add(b as i32);
            (r as u32, Some(o))
        })),
        S32,
        0,
    ),
    row(
        S2,
        0x03,
        "s_sub_i32",
        ex!(|c, i| sop32(c, i, |a, b, _| {
            let (r, o) = (a as i32).overflowing_sub(b as i32);
            (r as u32, Some(o))
        })),
        S32,
        0,
    ),
    row(
        S2,
        0x04,
        "s_addc_u32",
        ex!(|c, i| sop32(c, i, |a, b, s| {
            let t = u64::from(a) + u64::from(b) + u64::from(s);
            (t as u32, Some(t >> 32 != 0))
        })),
        S32,
        0,
    ),
    row(
        S2,
        0x05,
        "s_subb_u32",
        ex!(|c, i| sop32(c, i, |a, b, s| {
            let t = i64::from(a) - i64::from(b) - i64::from(s);
            (t as u32, Some(t < 0))
        })),
        S32,
        0,
    ),
    row(
        S2,
        0x06,
        "s_min_i32",
        ex!(|c, i| sop32(c, i, |a, b, _| {
            let p = (a as i32) < (b as i32);
            (if p { a } else { b }, Some(p))
        })),
        S32,
        0,
    ),
    row(
        S2,
        0x07,
        "s_min_u32",
        ex!(|c, i| sop32(c, i, |a, b, _| {
            let p = a < b;
            (if p { a } else { b }, Some(p))
        })),
        S32,
        0,
    ),
    row(
        S2,
        0x08,
        "s_max_i32",
        ex!(|c, i| sop32(c, i, |a, b, _| {
            let p = (a as i32) > (b as i32);
            (if p { a } else { b }, Some(p))
        })),
        S32,
        0,
    ),
    row(
        S2,
        0x09,
        "s_max_u32",
        ex!(|c, i| sop32(c, i, |a, b, _| {
            let p = a > b;
            (if p { a } else { b }, Some(p))
        })),
        S32,
        0,
    ),
    row(
        S2,
        0x0a,
        "s_cselect_b32",
        ex!(|c, i| sop32(c, i, |a, b, s| (if s { a } else { b }, None))),
        S32,
        0,
    ),
    row(
        S2,
        0x0b,
        "s_cselect_b64",
        ex!(|c, i| sop64(c, i, |a, b, s| (if s { a } else { b }, None))),
        S64,
        0,
    ),
    row(
        S2,
        0x0c,
        "s_and_b32",
        ex!(|c, i| sop32(c, i, |a, b, _| nz32(a & b))),
        S32,
        0,
    ),
    row(
        S2,
        0x0d,
        "s_and_b64",
        ex!(|c, i| sop64(c, i, |a, b, _| nz64(a & b))),
        S64,
        0,
    ),
    row(
        S2,
        0x0e,
        "s_or_b32",
        ex!(|c, i| sop32(c, i, |a, b, _| nz32(a | b))),
        S32,
        0,
    ),
    row(
        S2,
        0x0f,
        "s_or_b64",
        ex!(|c, i| sop64(c, i, |a, b, _| nz64(a | b))),
        S64,
        0,
    ),
    row(
        S2,
        0x10,
        "s_xor_b32",
        ex!(|c, i| sop32(c, i, |a, b, _| nz32(a ^ b))),
        S32,
        0,
    ),
    row(
        S2,
        0x11,
        "s_xor_b64",
        ex!(|c, i| sop64(c, i, |a, b, _| nz64(a ^ b))),
        S64,
        0,
    ),
    row(
        S2,
        0x12,
        "s_andn2_b32",
        ex!(|c, i| sop32(c, i, |a, b, _| nz32(a & !b))),
        S32,
        0,
    ),
    row(
        S2,
        0x13,
        "s_andn2_b64",
        ex!(|c, i| sop64(c, i, |a, b, _| nz64(a & !b))),
        S64,
        0,
    ),
    row(
        S2,
        0x14,
        "s_orn2_b32",
        ex!(|c, i| sop32(c, i, |a, b, _| nz32(a | !b))),
        S32,
        0,
    ),
    row(
        S2,
        0x15,
        "s_orn2_b64",
        ex!(|c, i| sop64(c, i, |a, b, _| nz64(a | !b))),
        S64,
        0,
    ),
    row(
        S2,
        0x16,
        "s_nand_b32",
        ex!(|c, i| sop32(c, i, |a, b, _| nz32(!(a & b)))),
        S32,
        0,
    ),
    row(
        S2,
        0x17,
        "s_nand_b64",
        ex!(|c, i| sop64(c, i, |a, b, _| nz64(!(a & b)))),
        S64,
        0,
    ),
    row(
        S2,
        0x18,
        "s_nor_b32",
        ex!(|c, i| sop32(c, i, |a, b, _| nz32(!(a | b)))),
        S32,
        0,
    ),
    row(
        S2,
        0x19,
        "s_nor_b64",
        ex!(|c, i| sop64(c, i, |a, b, _| nz64(!(a | b)))),
        S64,
        0,
    ),
    row(
        S2,
        0x1a,
        "s_xnor_b32",
        ex!(|c, i| sop32(c, i, |a, b, _| nz32(!(a ^ b)))),
        S32,
        0,
    ),
    row(
        S2,
        0x1b,
        "s_xnor_b64",
        ex!(|c, i| sop64(c, i, |a, b, _| nz64(!(a ^ b)))),
        S64,
        0,
    ),
    row(
        S2,
        0x1c,
        "s_lshl_b32",
        ex!(|c, i| sop32(c, i, |a, b, _| nz32(a << (b & 31)))),
        S32,
        0,
    ),
    row(
        S2,
        0x1d,
        "s_lshl_b64",
        ex!(|c, i| sop64(c, i, |a, b, _| nz64(a << (b & 63)))),
        S64_32,
        0,
    ),
    row(
        S2,
        0x1e,
        "s_lshr_b32",
        ex!(|c, i| sop32(c, i, |a, b, _| nz32(a >> (b & 31)))),
        S32,
        0,
    ),
    row(
        S2,
        0x1f,
        "s_lshr_b64",
        ex!(|c, i| sop64(c, i, |a, b, _| nz64(a >> (b & 63)))),
        S64_32,
        0,
    ),
    row(
        S2,
        0x20,
        "s_ashr_i32",
        ex!(|c, i| sop32(c, i, |a, b, _| nz32(((a as i32) >> (b & 31)) as u32))),
        S32,
        0,
    ),
    row(
        S2,
        0x21,
        "s_ashr_i64",
        ex!(|c, i| sop64(c, i, |a, b, _| nz64(((a as i64) >> (b & 63)) as u64))),
        S64_32,
        0,
    ),
    row(
        S2,
        0x22,
        "s_bfm_b32",
        ex!(|c, i| sop32(c, i, |a, b, _| (
            (((1u64 << (a & 31)) - 1) as u32) << (b & 31),
            None
        ))),
        S32,
        0,
    ),
    row(
        S2,
        0x23,
        "s_bfm_b64",
        ex!(|c, i| {
            let a = c.s32(i.src[0]);
            let b = c.s32(i.src[1]);
            let m = if a & 63 == 0 {
                0
            } else {
                u64::MAX >> (64 - (a & 63))
            };
            c.set_s64(i.dst, m << (b & 63));
            Ok(())
        }),
        [Ty::B64, Ty::B32, Ty::B32, Ty::B32],
        0,
    ),
    row(
        S2,
        0x24,
        "s_mul_i32",
        ex!(|c, i| sop32(c, i, |a, b, _| (a.wrapping_mul(b), None))),
        S32,
        0,
    ),
    row(
        S2,
        0x25,
        "s_bfe_u32",
        ex!(|c, i| sop32(c, i, |a, b, _| nz32(bfe32(a, b, false)))),
        S32,
        0,
    ),
    row(
        S2,
        0x26,
        "s_bfe_i32",
        ex!(|c, i| sop32(c, i, |a, b, _| nz32(bfe32(a, b, true)))),
        S32,
        0,
    ),
    row(
        S2,
        0x27,
        "s_bfe_u64",
        ex!(|c, i| sop64(c, i, |a, b, _| nz64(bfe64(a, b, false)))),
        S64_32,
        0,
    ),
    row(
        S2,
        0x28,
        "s_bfe_i64",
        ex!(|c, i| sop64(c, i, |a, b, _| nz64(bfe64(a, b, true)))),
        SI64,
        0,
    ),
    unsupported(S2, 0x29, "s_cbranch_g_fork"),
    row(
        S2,
        0x2a,
        "s_absdiff_i32",
        ex!(|c, i| sop32(c, i, |a, b, _| nz32(
            (a as i32).wrapping_sub(b as i32).unsigned_abs()
        ))),
        S32,
        0,
    ),
    unsupported(S2, 0x2b, "s_rfe_restore_b64"),
    row(
        S2,
        0x2c,
        "s_mul_hi_u32",
        ex!(|c, i| sop32(c, i, |a, b, _| (
            ((u64::from(a) * u64::from(b)) >> 32) as u32,
            None
        ))),
        S32,
        0,
    ),
    row(
        S2,
        0x2d,
        "s_mul_hi_i32",
        ex!(|c, i| sop32(c, i, |a, b, _| (
            ((i64::from(a as i32) * i64::from(b as i32)) >> 32) as u32,
            None
        ))),
        S32,
        0,
    ),
    row(S2, 0x2e, "s_lshl1_add_u32", lshl_add::<1>, S32, 0),
    row(S2, 0x2f, "s_lshl2_add_u32", lshl_add::<2>, S32, 0),
    row(S2, 0x30, "s_lshl3_add_u32", lshl_add::<3>, S32, 0),
    row(S2, 0x31, "s_lshl4_add_u32", lshl_add::<4>, S32, 0),
    row(
        S2,
        0x32,
        "s_pack_ll_b32_b16",
        ex!(|c, i| sop32(c, i, |a, b, _| ((a & 0xffff) | (b << 16), None))),
        S32,
        0,
    ),
    row(
        S2,
        0x33,
        "s_pack_lh_b32_b16",
        ex!(|c, i| sop32(c, i, |a, b, _| ((a & 0xffff) | (b & 0xffff_0000), None))),
        S32,
        0,
    ),
    row(
        S2,
        0x34,
        "s_pack_hh_b32_b16",
        ex!(|c, i| sop32(c, i, |a, b, _| ((a >> 16) | (b & 0xffff_0000), None))),
        S32,
        0,
    ),
];
