//! The SOP1 rows of the opcode table (one-source scalar opcodes: moves, bit operations, PC and EXEC
//! handling, relative moves, VGPR indexing) with their executors.

use super::{
    bitscan, bitset, getpc, gpr_idx_idx, mov, movreld, movrels, nz32, nz64, quadmask, saveexec,
    sop32, sop64, sop64_32, wqm, wrexec, S32, S32_64, S64,
};
use crate::table::Encoding::Sop1 as S1;
use crate::table::{row, unsupported, OpDef, Ty};
use crate::valu::ex;

/// SOP1 opcodes.
pub(crate) static SOP1: &[OpDef] = &[
    row(S1, 0x00, "s_mov_b32", mov::<32, false>, S32, 0),
    row(S1, 0x01, "s_mov_b64", mov::<64, false>, S64, 0),
    row(S1, 0x02, "s_cmov_b32", mov::<32, true>, S32, 0),
    row(S1, 0x03, "s_cmov_b64", mov::<64, true>, S64, 0),
    row(
        S1,
        0x04,
        "s_not_b32",
        ex!(|c, i| sop32(c, i, |a, _, _| nz32(!a))),
        S32,
        0,
    ),
    row(
        S1,
        0x05,
        "s_not_b64",
        ex!(|c, i| sop64(c, i, |a, _, _| nz64(!a))),
        S64,
        0,
    ),
    row(
        S1,
        0x06,
        "s_wqm_b32",
        ex!(|c, i| sop32(c, i, |a, _, _| nz32(wqm(u64::from(a), 8) as u32))),
        S32,
        0,
    ),
    row(
        S1,
        0x07,
        "s_wqm_b64",
        ex!(|c, i| sop64(c, i, |a, _, _| nz64(wqm(a, 16)))),
        S64,
        0,
    ),
    row(
        S1,
        0x08,
        "s_brev_b32",
        ex!(|c, i| sop32(c, i, |a, _, _| (a.reverse_bits(), None))),
        S32,
        0,
    ),
    row(
        S1,
        0x09,
        "s_brev_b64",
        ex!(|c, i| sop64(c, i, |a, _, _| (a.reverse_bits(), None))),
        S64,
        0,
    ),
    row(
        S1,
        0x0a,
        "s_bcnt0_i32_b32",
        ex!(|c, i| sop32(c, i, |a, _, _| nz32(a.count_zeros()))),
        S32,
        0,
    ),
    row(
        S1,
        0x0b,
        "s_bcnt0_i32_b64",
        ex!(|c, i| sop64_32(c, i, |a| nz32(a.count_zeros()))),
        S32_64,
        0,
    ),
    row(
        S1,
        0x0c,
        "s_bcnt1_i32_b32",
        ex!(|c, i| sop32(c, i, |a, _, _| nz32(a.count_ones()))),
        S32,
        0,
    ),
    row(
        S1,
        0x0d,
        "s_bcnt1_i32_b64",
        ex!(|c, i| sop64_32(c, i, |a| nz32(a.count_ones()))),
        S32_64,
        0,
    ),
    row(
        S1,
        0x0e,
        "s_ff0_i32_b32",
        ex!(|c, i| sop32(c, i, |a, _, _| (
            if a == u32::MAX {
                u32::MAX
            } else {
                a.trailing_ones()
            },
            None
        ))),
        S32,
        0,
    ),
    row(
        S1,
        0x0f,
        "s_ff0_i32_b64",
        ex!(|c, i| sop64_32(c, i, |a| (
            if a == u64::MAX {
                u32::MAX
            } else {
                a.trailing_ones()
            },
            None
        ))),
        S32_64,
        0,
    ),
    row(S1, 0x10, "s_ff1_i32_b32", bitscan::<32, false>, S32, 0),
    row(S1, 0x11, "s_ff1_i32_b64", bitscan::<64, false>, S32_64, 0),
    row(S1, 0x12, "s_flbit_i32_b32", bitscan::<32, true>, S32, 0),
    row(S1, 0x13, "s_flbit_i32_b64", bitscan::<64, true>, S32_64, 0),
    row(
        S1,
        0x14,
        "s_flbit_i32",
        ex!(|c, i| sop32(c, i, |a, _, _| {
            let x = a ^ (((a as i32) >> 31) as u32);
            (if x == 0 { u32::MAX } else { x.leading_zeros() }, None)
        })),
        S32,
        0,
    ),
    row(
        S1,
        0x15,
        "s_flbit_i32_i64",
        ex!(|c, i| {
            let a = c.s64(i.src[0]);
            let x = a ^ (((a as i64) >> 63) as u64);
            c.set_s32(i.dst, if x == 0 { u32::MAX } else { x.leading_zeros() });
            Ok(())
        }),
        S32_64,
        0,
    ),
    row(
        S1,
        0x16,
        "s_sext_i32_i8",
        ex!(|c, i| sop32(c, i, |a, _, _| (a as u8 as i8 as i32 as u32, None))),
        S32,
        0,
    ),
    row(
        S1,
        0x17,
        "s_sext_i32_i16",
        ex!(|c, i| sop32(c, i, |a, _, _| (a as u16 as i16 as i32 as u32, None))),
        S32,
        0,
    ),
    row(S1, 0x18, "s_bitset0_b32", bitset::<32, false>, S32, 0),
    row(
        S1,
        0x19,
        "s_bitset0_b64",
        bitset::<64, false>,
        [Ty::B64, Ty::B32, Ty::B32, Ty::B32],
        0,
    ),
    row(S1, 0x1a, "s_bitset1_b32", bitset::<32, true>, S32, 0),
    row(
        S1,
        0x1b,
        "s_bitset1_b64",
        bitset::<64, true>,
        [Ty::B64, Ty::B32, Ty::B32, Ty::B32],
        0,
    ),
    row(S1, 0x1c, "s_getpc_b64", getpc, S64, 0),
    row(
        S1,
        0x1d,
        "s_setpc_b64",
        ex!(|c, i| {
            c.w.pc = c.s64(i.src[0]);
            Ok(())
        }),
        S64,
        0,
    ),
    row(
        S1,
        0x1e,
        "s_swappc_b64",
        ex!(|c, i| {
            let target = c.s64(i.src[0]);
            getpc(c, i)?;
            c.w.pc = target;
            Ok(())
        }),
        S64,
        0,
    ),
    unsupported(S1, 0x1f, "s_rfe_b64"),
    row(
        S1,
        0x20,
        "s_and_saveexec_b64",
        ex!(|c, i| saveexec(c, i, |a, e| a & e)),
        S64,
        0,
    ),
    row(
        S1,
        0x21,
        "s_or_saveexec_b64",
        ex!(|c, i| saveexec(c, i, |a, e| a | e)),
        S64,
        0,
    ),
    row(
        S1,
        0x22,
        "s_xor_saveexec_b64",
        ex!(|c, i| saveexec(c, i, |a, e| a ^ e)),
        S64,
        0,
    ),
    row(
        S1,
        0x23,
        "s_andn2_saveexec_b64",
        ex!(|c, i| saveexec(c, i, |a, e| a & !e)),
        S64,
        0,
    ),
    row(
        S1,
        0x24,
        "s_orn2_saveexec_b64",
        ex!(|c, i| saveexec(c, i, |a, e| a | !e)),
        S64,
        0,
    ),
    row(
        S1,
        0x25,
        "s_nand_saveexec_b64",
        ex!(|c, i| saveexec(c, i, |a, e| !(a & e))),
        S64,
        0,
    ),
    row(
        S1,
        0x26,
        "s_nor_saveexec_b64",
        ex!(|c, i| saveexec(c, i, |a, e| !(a | e))),
        S64,
        0,
    ),
    row(
        S1,
        0x27,
        "s_xnor_saveexec_b64",
        ex!(|c, i| saveexec(c, i, |a, e| !(a ^ e))),
        S64,
        0,
    ),
    row(
        S1,
        0x28,
        "s_quadmask_b32",
        ex!(|c, i| sop32(c, i, |a, _, _| nz32(quadmask(u64::from(a), 8) as u32))),
        S32,
        0,
    ),
    row(
        S1,
        0x29,
        "s_quadmask_b64",
        ex!(|c, i| sop64(c, i, |a, _, _| nz64(quadmask(a, 16)))),
        S64,
        0,
    ),
    row(S1, 0x2a, "s_movrels_b32", movrels::<32>, S32, 0),
    row(S1, 0x2b, "s_movrels_b64", movrels::<64>, S64, 0),
    row(S1, 0x2c, "s_movreld_b32", movreld::<32>, S32, 0),
    row(S1, 0x2d, "s_movreld_b64", movreld::<64>, S64, 0),
    unsupported(S1, 0x2e, "s_cbranch_join"),
    row(
        S1,
        0x30,
        "s_abs_i32",
        ex!(|c, i| sop32(c, i, |a, _, _| nz32((a as i32).wrapping_abs() as u32))),
        S32,
        0,
    ),
    row(S1, 0x32, "s_set_gpr_idx_idx", gpr_idx_idx, S32, 0),
    row(
        S1,
        0x33,
        "s_andn1_saveexec_b64",
        ex!(|c, i| saveexec(c, i, |a, e| !a & e)),
        S64,
        0,
    ),
    row(
        S1,
        0x34,
        "s_orn1_saveexec_b64",
        ex!(|c, i| saveexec(c, i, |a, e| !a | e)),
        S64,
        0,
    ),
    row(
        S1,
        0x35,
        "s_andn1_wrexec_b64",
        ex!(|c, i| wrexec(c, i, |a, e| !a & e)),
        S64,
        0,
    ),
    row(
        S1,
        0x36,
        "s_andn2_wrexec_b64",
        ex!(|c, i| wrexec(c, i, |a, e| a & !e)),
        S64,
        0,
    ),
    row(
        S1,
        0x37,
        "s_bitreplicate_b64_b32",
        ex!(|c, i| {
            let a = c.s32(i.src[0]);
            let mut r = 0u64;
            for k in 0..32 {
                if a >> k & 1 != 0 {
                    r |= 3 << (2 * k);
                }
            }
            c.set_s64(i.dst, r);
            Ok(())
        }),
        [Ty::B64, Ty::B32, Ty::B32, Ty::B32],
        0,
    ),
];
