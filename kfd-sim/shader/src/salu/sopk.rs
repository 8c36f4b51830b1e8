//! The SOPK rows of the opcode table (scalar opcodes with a 16-bit inline constant: moves,
//! compares, adds, hardware register reads and writes, calls) with their executors.

use super::{branch, getpc, s_getreg, s_setreg, sdst, simm, S32, S64};
use crate::table::Encoding::Sopk as SK;
use crate::table::{flag, row, unsupported, OpDef};
use crate::valu::ex;

/// SOPK opcodes.
pub(crate) static SOPK: &[OpDef] = &[
    row(
        SK,
        0x00,
        "s_movk_i32",
        ex!(|c, i| {
            c.set_s32(i.dst, simm(i));
            Ok(())
        }),
        S32,
        0,
    ),
    row(
        SK,
        0x01,
        "s_cmovk_i32",
        ex!(|c, i| {
            if c.w.scc {
                c.set_s32(i.dst, simm(i));
            }
            Ok(())
        }),
        S32,
        0,
    ),
    row(
        SK,
        0x02,
        "s_cmpk_eq_i32",
        ex!(|c, i| {
            c.w.scc = sdst(c, i) as i32 == simm(i) as i32;
            Ok(())
        }),
        S32,
        flag::SDST_IS_SRC,
    ),
    row(
        SK,
        0x03,
        "s_cmpk_lg_i32",
        ex!(|c, i| {
            c.w.scc = sdst(c, i) as i32 != simm(i) as i32;
            Ok(())
        }),
        S32,
        flag::SDST_IS_SRC,
    ),
    row(
        SK,
        0x04,
        "s_cmpk_gt_i32",
        ex!(|c, i| {
            c.w.scc = (sdst(c, i) as i32) > simm(i) as i32;
            Ok(())
        }),
        S32,
        flag::SDST_IS_SRC,
    ),
    row(
        SK,
        0x05,
        "s_cmpk_ge_i32",
        ex!(|c, i| {
            c.w.scc = sdst(c, i) as i32 >= simm(i) as i32;
            Ok(())
        }),
        S32,
        flag::SDST_IS_SRC,
    ),
    row(
        SK,
        0x06,
        "s_cmpk_lt_i32",
        ex!(|c, i| {
            c.w.scc = (sdst(c, i) as i32) < simm(i) as i32;
            Ok(())
        }),
        S32,
        flag::SDST_IS_SRC,
    ),
    row(
        SK,
        0x07,
        "s_cmpk_le_i32",
        ex!(|c, i| {
            c.w.scc = sdst(c, i) as i32 <= simm(i) as i32;
            Ok(())
        }),
        S32,
        flag::SDST_IS_SRC,
    ),
    row(
        SK,
        0x08,
        "s_cmpk_eq_u32",
        ex!(|c, i| {
            c.w.scc = sdst(c, i) == i.imm;
            Ok(())
        }),
        S32,
        flag::SDST_IS_SRC,
    ),
    row(
        SK,
        0x09,
        "s_cmpk_lg_u32",
        ex!(|c, i| {
            c.w.scc = sdst(c, i) != i.imm;
            Ok(())
        }),
        S32,
        flag::SDST_IS_SRC,
    ),
    row(
        SK,
        0x0a,
        "s_cmpk_gt_u32",
        ex!(|c, i| {
            c.w.scc = sdst(c, i) > i.imm;
            Ok(())
        }),
        S32,
        flag::SDST_IS_SRC,
    ),
    row(
        SK,
        0x0b,
        "s_cmpk_ge_u32",
        ex!(|c, i| {
            c.w.scc = sdst(c, i) >= i.imm;
            Ok(())
        }),
        S32,
        flag::SDST_IS_SRC,
    ),
    row(
        SK,
        0x0c,
        "s_cmpk_lt_u32",
        ex!(|c, i| {
            c.w.scc = sdst(c, i) < i.imm;
            Ok(())
        }),
        S32,
        flag::SDST_IS_SRC,
    ),
    row(
        SK,
        0x0d,
        "s_cmpk_le_u32",
        ex!(|c, i| {
            c.w.scc = sdst(c, i) <= i.imm;
            Ok(())
        }),
        S32,
        flag::SDST_IS_SRC,
    ),
    row(
        SK,
        0x0e,
        "s_addk_i32",
        ex!(|c, i| {
            let (r, o) = (sdst(c, i) as i32).overflowing_add(simm(i) as i32);
            c.set_s32(i.dst, r as u32);
            c.w.scc = o;
            Ok(())
        }),
        S32,
        flag::SDST_IS_SRC,
    ),
    row(
        SK,
        0x0f,
        "s_mulk_i32",
        ex!(|c, i| {
            let r = sdst(c, i).wrapping_mul(simm(i));
            c.set_s32(i.dst, r);
            Ok(())
        }),
        S32,
        flag::SDST_IS_SRC,
    ),
    unsupported(SK, 0x10, "s_cbranch_i_fork"),
    row(SK, 0x11, "s_getreg_b32", s_getreg, S32, 0),
    row(
        SK,
        0x12,
        "s_setreg_b32",
        s_setreg::<false>,
        S32,
        flag::SDST_IS_SRC,
    ),
    row(
        SK,
        0x14,
        "s_setreg_imm32_b32",
        s_setreg::<true>,
        S32,
        flag::LITERAL,
    ),
    row(
        SK,
        0x15,
        "s_call_b64",
        ex!(|c, i| {
            getpc(c, i)?;
            branch(c, i, |_| true)
        }),
        S64,
        0,
    ),
];
