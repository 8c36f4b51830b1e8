//! The scalar ALU and program control: SOP2, SOPK, SOP1, SOPC and SOPP.

use crate::decode::{Inst, Operand};
use crate::exec::{Ctx, Exit};
use crate::table::{flag, row, unsupported, Encoding, OpDef, Ty};
use crate::valu::{ex, R};
use crate::wave::{hwreg, reg};

/// A 32-bit SOP2/SOP1 result with its SCC (None: SCC unchanged).
#[inline(always)]
fn sop32(c: &mut Ctx<'_>, i: &Inst, f: impl Fn(u32, u32, bool) -> (u32, Option<bool>)) -> R {
    let a = c.s32(i.src[0]);
    let b = c.s32(i.src[1]);
    let (r, scc) = f(a, b, c.w.scc);
    c.set_s32(i.dst, r);
    if let Some(s) = scc {
        c.w.scc = s;
    }
    Ok(())
}

/// A 64-bit result; `b` is read 64 bits wide only if `wide_b`.
#[inline(always)]
fn sop64(c: &mut Ctx<'_>, i: &Inst, f: impl Fn(u64, u64, bool) -> (u64, Option<bool>)) -> R {
    let a = c.s64(i.src[0]);
    let b = if i.def.ty[2].is_64() {
        c.s64(i.src[1])
    } else {
        u64::from(c.s32(i.src[1]))
    };
    let (r, scc) = f(a, b, c.w.scc);
    c.set_s64(i.dst, r);
    if let Some(s) = scc {
        c.w.scc = s;
    }
    Ok(())
}

/// SCC from a 32-bit compare.
#[inline(always)]
/// `s_lshlN_add_u32`: `(a << N) + b`, SCC the carry out of bit 31.
fn lshl_add<const N: u32>(c: &mut Ctx<'_>, i: &Inst) -> R {
    sop32(c, i, |a, b, _| {
        let t = (u64::from(a) << N) + u64::from(b);
        #[allow(clippy::cast_possible_truncation)]
        (t as u32, Some(t >> 32 != 0))
    })
}

/// s_ff1 (`LEADING` false: the lowest set bit) and s_flbit (true: zeros above the highest set
/// bit) of a `W`-bit source; -1 when it is zero.
fn bitscan<const W: u32, const LEADING: bool>(c: &mut Ctx<'_>, i: &Inst) -> R {
    let a = if W == 64 {
        c.s64(i.src[0])
    } else {
        u64::from(c.s32(i.src[0]))
    };
    let r = match (a, LEADING) {
        (0, _) => u32::MAX,
        (_, false) => a.trailing_zeros(),
        (_, true) => a.leading_zeros() - (64 - W),
    };
    c.set_s32(i.dst, r);
    Ok(())
}

fn cmp32(c: &mut Ctx<'_>, i: &Inst, f: impl Fn(u32, u32) -> bool) -> R {
    c.w.scc = f(c.s32(i.src[0]), c.s32(i.src[1]));
    Ok(())
}

fn nz32(r: u32) -> (u32, Option<bool>) {
    (r, Some(r != 0))
}

fn nz64(r: u64) -> (u64, Option<bool>) {
    (r, Some(r != 0))
}

fn bfe32(a: u32, b: u32, signed: bool) -> u32 {
    let off = b & 31;
    let w = (b >> 16) & 0x7f;
    if w == 0 {
        return 0;
    }
    let v = u64::from(a) >> off;
    let w = w.min(32);
    let m = if w >= 32 {
        u64::from(u32::MAX)
    } else {
        (1u64 << w) - 1
    };
    let v = (v & m) as u32;
    if signed && w < 32 {
        ((v << (32 - w)) as i32 >> (32 - w)) as u32
    } else {
        v
    }
}

fn bfe64(a: u64, b: u64, signed: bool) -> u64 {
    let off = b & 63;
    let w = ((b >> 16) & 0x7f).min(64);
    if w == 0 {
        return 0;
    }
    let v = a >> off;
    let m = if w >= 64 { u64::MAX } else { (1u64 << w) - 1 };
    let v = v & m;
    if signed && w < 64 {
        ((v << (64 - w)) as i64 >> (64 - w)) as u64
    } else {
        v
    }
}

fn wqm(v: u64, nibbles: u32) -> u64 {
    let mut r = 0u64;
    for k in 0..nibbles {
        if v >> (4 * k) & 0xf != 0 {
            r |= 0xf << (4 * k);
        }
    }
    r
}

fn quadmask(v: u64, quads: u32) -> u64 {
    let mut r = 0u64;
    for k in 0..quads {
        if v >> (4 * k) & 0xf != 0 {
            r |= 1 << k;
        }
    }
    r
}

/// s_*_saveexec: the destination gets the old EXEC, EXEC gets `f(src, exec)`.
fn saveexec(c: &mut Ctx<'_>, i: &Inst, f: impl Fn(u64, u64) -> u64) -> R {
    let a = c.s64(i.src[0]);
    let exec = c.w.exec();
    let n = f(a, exec);
    c.set_s64(i.dst, exec);
    c.w.set_exec(n);
    c.w.scc = n != 0;
    Ok(())
}

/// s_*_wrexec: EXEC and the destination get `f(src, exec)`.
fn wrexec(c: &mut Ctx<'_>, i: &Inst, f: impl Fn(u64, u64) -> u64) -> R {
    let a = c.s64(i.src[0]);
    let n = f(a, c.w.exec());
    c.w.set_exec(n);
    c.set_s64(i.dst, n);
    c.w.scc = n != 0;
    Ok(())
}

/// The SIMM16 sign-extended.
fn simm(i: &Inst) -> u32 {
    i.imm as u16 as i16 as i32 as u32
}

/// The SGPR named by the SDST field of SOPK, read as a source.
fn sdst(c: &Ctx<'_>, i: &Inst) -> u32 {
    c.s32(Operand::Sgpr(i.dst))
}

/// Reads hardware register `id`.
pub(crate) fn get_hwreg(c: &Ctx<'_>, id: u32) -> u32 {
    let ap = &c.env.apertures;
    match id {
        hwreg::MODE => c.w.mode,
        hwreg::STATUS => {
            let mut s = c.w.status_reg();
            if c.env.waves > 1 {
                s |= hwreg::STATUS_IN_TG;
            }
            s
        }
        hwreg::TRAPSTS => c.w.trapsts,
        hwreg::HW_ID => c.w.index & 0xf,
        hwreg::GPR_ALLOC => c.env.gpr_alloc,
        hwreg::LDS_ALLOC => c.env.lds_alloc,
        hwreg::SH_MEM_BASES => {
            ((ap.shared_base >> 48) as u32) << 16 | (ap.private_base >> 48) as u32
        }
        _ => 0,
    }
}

/// The (id, offset, mask) of a hwreg SIMM16.
fn hwreg_field(i: &Inst) -> (u32, u32, u32) {
    let id = i.imm & 0x3f;
    let off = (i.imm >> 6) & 0x1f;
    let size = ((i.imm >> 11) & 0x1f) + 1;
    let mask = if size >= 32 {
        u32::MAX
    } else {
        (1u32 << size) - 1
    };
    (id, off, mask)
}

fn s_getreg(c: &mut Ctx<'_>, i: &Inst) -> R {
    let (id, off, mask) = hwreg_field(i);
    let v = (get_hwreg(c, id) >> off) & mask;
    c.set_s32(i.dst, v);
    Ok(())
}

fn setreg(c: &mut Ctx<'_>, i: &Inst, v: u32) -> R {
    let (id, off, mask) = hwreg_field(i);
    let m = mask.checked_shl(off).unwrap_or(0);
    let v = v.checked_shl(off).unwrap_or(0) & m;
    match id {
        hwreg::MODE => c.w.mode = c.w.mode & !m | v,
        hwreg::TRAPSTS => c.w.trapsts = c.w.trapsts & !m | v,
        hwreg::STATUS => {
            // Only the bits that are state of their own; SCC and the like are not written so.
            let own = m & !(hwreg::STATUS_SCC
                | hwreg::STATUS_EXECZ
                | hwreg::STATUS_VCCZ
                | hwreg::STATUS_IN_BARRIER
                | hwreg::STATUS_VALID);
            c.w.status = c.w.status & !own | v & own;
        }
        _ => log::debug!(
            "s_setreg of hardware register {id} ignored at pc {:#x}",
            c.pc
        ),
    }
    Ok(())
}

fn branch(c: &mut Ctx<'_>, i: &Inst, taken: bool) -> R {
    if taken {
        c.w.pc = c.w.pc.wrapping_add(i64::from(simm(i) as i32 * 4) as u64);
    }
    Ok(())
}

// The conditions of s_branch and s_cbranch_*.
const ALWAYS: u8 = 0;
const SCC0: u8 = 1;
const SCC1: u8 = 2;
const VCCZ: u8 = 3;
const VCCNZ: u8 = 4;
const EXECZ: u8 = 5;
const EXECNZ: u8 = 6;

/// s_branch and s_cbranch_*: the relative branch, taken when `COND` holds.
fn cbranch<const COND: u8>(c: &mut Ctx<'_>, i: &Inst) -> R {
    let taken = match COND {
        SCC0 => !c.w.scc,
        SCC1 => c.w.scc,
        VCCZ => c.w.vcc() == 0,
        VCCNZ => c.w.vcc() != 0,
        EXECZ => c.w.exec() == 0,
        EXECNZ => c.w.exec() != 0,
        _ => true,
    };
    branch(c, i, taken)
}

fn movrel_src(c: &Ctx<'_>, i: &Inst) -> Option<u8> {
    match i.src[0] {
        Operand::Sgpr(r) => {
            let m0 = c.w.sgpr[reg::M0];
            u8::try_from(usize::from(r) + m0 as usize).ok()
        }
        _ => None,
    }
}

const S32: [Ty; 4] = [Ty::B32; 4];
const S64: [Ty; 4] = [Ty::B64; 4];
const S64_32: [Ty; 4] = [Ty::B64, Ty::B64, Ty::B32, Ty::B32];
const S32_64: [Ty; 4] = [Ty::B32, Ty::B64, Ty::B32, Ty::B32];
const SI64: [Ty; 4] = [Ty::I64, Ty::I64, Ty::B32, Ty::B32];

use Encoding::{Sop1 as S1, Sop2 as S2, Sopc as SC, Sopk as SK, Sopp as SP};

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
        ex!(|c, i| {
            let v = sdst(c, i);
            setreg(c, i, v)
        }),
        S32,
        flag::SDST_IS_SRC,
    ),
    row(
        SK,
        0x14,
        "s_setreg_imm32_b32",
        ex!(|c, i| {
            let v = c.s32(i.src[0]);
            setreg(c, i, v)
        }),
        S32,
        flag::LITERAL,
    ),
    row(
        SK,
        0x15,
        "s_call_b64",
        ex!(|c, i| {
            let ret = c.w.pc;
            c.set_s64(i.dst, ret);
            branch(c, i, true)
        }),
        S64,
        0,
    ),
];

/// SOP1 opcodes.
pub(crate) static SOP1: &[OpDef] = &[
    row(
        S1,
        0x00,
        "s_mov_b32",
        ex!(|c, i| {
            let v = c.s32(i.src[0]);
            c.set_s32(i.dst, v);
            Ok(())
        }),
        S32,
        0,
    ),
    row(
        S1,
        0x01,
        "s_mov_b64",
        ex!(|c, i| {
            let v = c.s64(i.src[0]);
            c.set_s64(i.dst, v);
            Ok(())
        }),
        S64,
        0,
    ),
    row(
        S1,
        0x02,
        "s_cmov_b32",
        ex!(|c, i| {
            if c.w.scc {
                let v = c.s32(i.src[0]);
                c.set_s32(i.dst, v);
            }
            Ok(())
        }),
        S32,
        0,
    ),
    row(
        S1,
        0x03,
        "s_cmov_b64",
        ex!(|c, i| {
            if c.w.scc {
                let v = c.s64(i.src[0]);
                c.set_s64(i.dst, v);
            }
            Ok(())
        }),
        S64,
        0,
    ),
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
        ex!(|c, i| {
            let a = c.s64(i.src[0]);
            let r = a.count_zeros();
            c.set_s32(i.dst, r);
            c.w.scc = r != 0;
            Ok(())
        }),
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
        ex!(|c, i| {
            let a = c.s64(i.src[0]);
            let r = a.count_ones();
            c.set_s32(i.dst, r);
            c.w.scc = r != 0;
            Ok(())
        }),
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
        ex!(|c, i| {
            let a = c.s64(i.src[0]);
            c.set_s32(
                i.dst,
                if a == u64::MAX {
                    u32::MAX
                } else {
                    a.trailing_ones()
                },
            );
            Ok(())
        }),
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
    row(
        S1,
        0x18,
        "s_bitset0_b32",
        ex!(|c, i| {
            let b = c.s32(i.src[0]) & 31;
            let v = c.s32(Operand::Sgpr(i.dst)) & !(1 << b);
            c.set_s32(i.dst, v);
            Ok(())
        }),
        S32,
        0,
    ),
    row(
        S1,
        0x19,
        "s_bitset0_b64",
        ex!(|c, i| {
            let b = c.s32(i.src[0]) & 63;
            let v = c.s64(Operand::Sgpr(i.dst)) & !(1 << b);
            c.set_s64(i.dst, v);
            Ok(())
        }),
        [Ty::B64, Ty::B32, Ty::B32, Ty::B32],
        0,
    ),
    row(
        S1,
        0x1a,
        "s_bitset1_b32",
        ex!(|c, i| {
            let b = c.s32(i.src[0]) & 31;
            let v = c.s32(Operand::Sgpr(i.dst)) | (1 << b);
            c.set_s32(i.dst, v);
            Ok(())
        }),
        S32,
        0,
    ),
    row(
        S1,
        0x1b,
        "s_bitset1_b64",
        ex!(|c, i| {
            let b = c.s32(i.src[0]) & 63;
            let v = c.s64(Operand::Sgpr(i.dst)) | (1 << b);
            c.set_s64(i.dst, v);
            Ok(())
        }),
        [Ty::B64, Ty::B32, Ty::B32, Ty::B32],
        0,
    ),
    row(
        S1,
        0x1c,
        "s_getpc_b64",
        ex!(|c, i| {
            let pc = c.w.pc;
            c.set_s64(i.dst, pc);
            Ok(())
        }),
        S64,
        0,
    ),
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
            let ret = c.w.pc;
            c.set_s64(i.dst, ret);
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
    row(
        S1,
        0x2a,
        "s_movrels_b32",
        ex!(|c, i| {
            let v = movrel_src(c, i).map_or(0, |r| c.s32(Operand::Sgpr(r)));
            c.set_s32(i.dst, v);
            Ok(())
        }),
        S32,
        0,
    ),
    row(
        S1,
        0x2b,
        "s_movrels_b64",
        ex!(|c, i| {
            let v = movrel_src(c, i).map_or(0, |r| c.s64(Operand::Sgpr(r)));
            c.set_s64(i.dst, v);
            Ok(())
        }),
        S64,
        0,
    ),
    row(
        S1,
        0x2c,
        "s_movreld_b32",
        ex!(|c, i| {
            let v = c.s32(i.src[0]);
            let d = usize::from(i.dst) + c.w.sgpr[reg::M0] as usize;
            c.w.set_sgpr(d, v);
            Ok(())
        }),
        S32,
        0,
    ),
    row(
        S1,
        0x2d,
        "s_movreld_b64",
        ex!(|c, i| {
            let v = c.s64(i.src[0]);
            let d = usize::from(i.dst) + c.w.sgpr[reg::M0] as usize;
            c.w.set_sgpr64(d, v);
            Ok(())
        }),
        S64,
        0,
    ),
    unsupported(S1, 0x2e, "s_cbranch_join"),
    row(
        S1,
        0x30,
        "s_abs_i32",
        ex!(|c, i| sop32(c, i, |a, _, _| nz32((a as i32).wrapping_abs() as u32))),
        S32,
        0,
    ),
    row(
        S1,
        0x32,
        "s_set_gpr_idx_idx",
        ex!(|c, i| {
            let v = c.s32(i.src[0]);
            let m0 = &mut c.w.sgpr[reg::M0];
            *m0 = *m0 & !0xff | v & 0xff;
            Ok(())
        }),
        S32,
        0,
    ),
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
        ex!(|c, i| {
            let v = c.s32(i.src[0]);
            c.w.mode |= hwreg::MODE_GPR_IDX_EN;
            let m0 = &mut c.w.sgpr[reg::M0];
            *m0 = *m0 & !0xf0ff | (v & 0xff) | (i.imm & 0xf) << 12;
            Ok(())
        }),
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

fn nop(_c: &mut Ctx<'_>, _i: &Inst) -> R {
    Ok(())
}

/// SOPP opcodes.
pub(crate) static SOPP: &[OpDef] = &[
    row(SP, 0x00, "s_nop", nop, S32, 0),
    row(SP, 0x01, "s_endpgm", ex!(|_c, _i| Err(Exit::End)), S32, 0),
    row(SP, 0x02, "s_branch", cbranch::<ALWAYS>, S32, 0),
    row(SP, 0x03, "s_wakeup", nop, S32, 0),
    row(SP, 0x04, "s_cbranch_scc0", cbranch::<SCC0>, S32, 0),
    row(SP, 0x05, "s_cbranch_scc1", cbranch::<SCC1>, S32, 0),
    row(SP, 0x06, "s_cbranch_vccz", cbranch::<VCCZ>, S32, 0),
    row(SP, 0x07, "s_cbranch_vccnz", cbranch::<VCCNZ>, S32, 0),
    row(SP, 0x08, "s_cbranch_execz", cbranch::<EXECZ>, S32, 0),
    row(SP, 0x09, "s_cbranch_execnz", cbranch::<EXECNZ>, S32, 0),
    row(
        SP,
        0x0a,
        "s_barrier",
        ex!(|_c, _i| Err(Exit::Barrier)),
        S32,
        0,
    ),
    row(SP, 0x0b, "s_setkill", nop, S32, 0),
    row(SP, 0x0c, "s_waitcnt", nop, S32, 0),
    row(
        SP,
        0x0d,
        "s_sethalt",
        ex!(|_c, _i| Err(Exit::Yield)),
        S32,
        0,
    ),
    row(SP, 0x0e, "s_sleep", ex!(|_c, _i| Err(Exit::Yield)), S32, 0),
    row(SP, 0x0f, "s_setprio", nop, S32, 0),
    row(SP, 0x10, "s_sendmsg", ex!(|c, i| sendmsg(c, i)), S32, 0),
    row(SP, 0x11, "s_sendmsghalt", ex!(|c, i| sendmsg(c, i)), S32, 0),
    row(
        SP,
        0x12,
        "s_trap",
        ex!(|_c, i| Err(Exit::Trap((i.imm & 0xff) as u8))),
        S32,
        0,
    ),
    row(SP, 0x13, "s_icache_inv", nop, S32, 0),
    row(SP, 0x14, "s_incperflevel", nop, S32, 0),
    row(SP, 0x15, "s_decperflevel", nop, S32, 0),
    row(SP, 0x16, "s_ttracedata", nop, S32, 0),
    row(SP, 0x17, "s_cbranch_cdbgsys", nop, S32, 0),
    row(SP, 0x18, "s_cbranch_cdbguser", nop, S32, 0),
    row(SP, 0x19, "s_cbranch_cdbgsys_or_user", nop, S32, 0),
    row(SP, 0x1a, "s_cbranch_cdbgsys_and_user", nop, S32, 0),
    row(
        SP,
        0x1b,
        "s_endpgm_saved",
        ex!(|_c, _i| Err(Exit::End)),
        S32,
        0,
    ),
    row(
        SP,
        0x1c,
        "s_set_gpr_idx_off",
        ex!(|c, _i| {
            c.w.mode &= !hwreg::MODE_GPR_IDX_EN;
            Ok(())
        }),
        S32,
        0,
    ),
    row(
        SP,
        0x1d,
        "s_set_gpr_idx_mode",
        ex!(|c, i| {
            let m0 = &mut c.w.sgpr[reg::M0];
            *m0 = *m0 & !0xf000 | (i.imm & 0xf) << 12;
            Ok(())
        }),
        S32,
        0,
    ),
];

/// The message id of `s_sendmsg` that raises an interrupt.
const MSG_INTERRUPT: u32 = 1;

fn sendmsg(c: &mut Ctx<'_>, i: &Inst) -> R {
    if i.imm & 0xf == MSG_INTERRUPT {
        return Err(Exit::Interrupt(c.w.sgpr[reg::M0]));
    }
    log::debug!("s_sendmsg {:#x} ignored at pc {:#x}", i.imm, c.pc);
    Ok(())
}
