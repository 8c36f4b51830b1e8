//! The SOPC rows of the opcode table (scalar compares that set SCC, and `s_setvskip` and
//! `s_set_gpr_idx_on`) with their executors.

use super::{cmp32, gpr_idx_on, S32, S64, S64_32};
use crate::table::Encoding::Sopc as SC;
use crate::table::{flag, row, unsupported, OpDef};
use crate::valu::ex;

/// SOPC opcodes.
pub(crate) static SOPC: &[OpDef] = &[
    row(
        SC,
        0x00,
        "s_cmp_eq_i32",
        ex!(|c, i| cmp32(c, i, |a, b| a == b)),
        S32,
        0,
    ),
    row(
        SC,
        0x01,
        "s_cmp_lg_i32",
        ex!(|c, i| cmp32(c, i, |a, b| a != b)),
        S32,
        0,
    ),
    row(
        SC,
        0x02,
        "s_cmp_gt_i32",
        ex!(|c, i| cmp32(c, i, |a, b| (a as i32) > (b as i32))),
        S32,
        0,
    ),
    row(
        SC,
        0x03,
        "s_cmp_ge_i32",
        ex!(|c, i| cmp32(c, i, |a, b| (a as i32) >= (b as i32))),
        S32,
        0,
    ),
    row(
        SC,
        0x04,
        "s_cmp_lt_i32",
        ex!(|c, i| cmp32(c, i, |a, b| (a as i32) < (b as i32))),
        S32,
        0,
    ),
    row(
        SC,
        0x05,
        "s_cmp_le_i32",
        ex!(|c, i| cmp32(c, i, |a, b| (a as i32) <= (b as i32))),
        S32,
        0,
    ),
    row(
        SC,
        0x06,
        "s_cmp_eq_u32",
        ex!(|c, i| cmp32(c, i, |a, b| a == b)),
        S32,
        0,
    ),
    row(
        SC,
        0x07,
        "s_cmp_lg_u32",
        ex!(|c, i| cmp32(c, i, |a, b| a != b)),
        S32,
        0,
    ),
    row(
        SC,
        0x08,
        "s_cmp_gt_u32",
        ex!(|c, i| cmp32(c, i, |a, b| a > b)),
        S32,
        0,
    ),
    row(
        SC,
        0x09,
        "s_cmp_ge_u32",
        ex!(|c, i| cmp32(c, i, |a, b| a >= b)),
        S32,
        0,
    ),
    row(
        SC,
        0x0a,
        "s_cmp_lt_u32",
        ex!(|c, i| cmp32(c, i, |a, b| a < b)),
        S32,
        0,
    ),
    row(
        SC,
        0x0b,
        "s_cmp_le_u32",
        ex!(|c, i| cmp32(c, i, |a, b| a <= b)),
        S32,
        0,
    ),
    row(
        SC,
        0x0c,
        "s_bitcmp0_b32",
        ex!(|c, i| cmp32(c, i, |a, b| a >> (b & 31) & 1 == 0)),
        S32,
        0,
    ),
    row(
        SC,
        0x0d,
        "s_bitcmp1_b32",
        ex!(|c, i| cmp32(c, i, |a, b| a >> (b & 31) & 1 != 0)),
        S32,
        0,
    ),
    row(
        SC,
        0x0e,
        "s_bitcmp0_b64",
        ex!(|c, i| {
            c.w.scc = c.s64(i.src[0]) >> (c.s32(i.src[1]) & 63) & 1 == 0;
            Ok(())
        }),
        S64_32,
        0,
    ),
    row(
        SC,
        0x0f,
        "s_bitcmp1_b64",
        ex!(|c, i| {
            c.w.scc = c.s64(i.src[0]) >> (c.s32(i.src[1]) & 63) & 1 != 0;
            Ok(())
        }),
        S64_32,
        0,
    ),
    unsupported(SC, 0x10, "s_setvskip"),
    row(
        SC,
        0x11,
        "s_set_gpr_idx_on",
        gpr_idx_on,
        S32,
        flag::SRC1_IMM,
    ),
    row(
        SC,
        0x12,
        "s_cmp_eq_u64",
        ex!(|c, i| {
            c.w.scc = c.s64(i.src[0]) == c.s64(i.src[1]);
            Ok(())
        }),
        S64,
        0,
    ),
    row(
        SC,
        0x13,
        "s_cmp_lg_u64",
        ex!(|c, i| {
            c.w.scc = c.s64(i.src[0]) != c.s64(i.src[1]);
            Ok(())
        }),
        S64,
        0,
    ),
];
