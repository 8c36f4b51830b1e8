//! The scalar ALU and program control: the helpers its SOP2, SOPK, SOP1, SOPC and SOPP opcodes
//! share. The opcodes' rows of the opcode table are in `sop2`, `sopk`, `sop1`, `sopc` and `sopp`.

use crate::decode::{Inst, Operand};
use crate::exec::Ctx;
use crate::table::Ty;
use crate::valu::R;
use crate::wave::{hwreg, reg, Wave};

mod sop1;
mod sop2;
mod sopc;
mod sopk;
mod sopp;

pub(crate) use sop1::SOP1;
pub(crate) use sop2::SOP2;
pub(crate) use sopc::SOPC;
pub(crate) use sopk::SOPK;
pub(crate) use sopp::SOPP;

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

/// A 32-bit result of a 64-bit source (bit counts and scans), with its SCC (None: unchanged).
fn sop64_32(c: &mut Ctx<'_>, i: &Inst, f: impl Fn(u64) -> (u32, Option<bool>)) -> R {
    let (r, scc) = f(c.s64(i.src[0]));
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

/// s_mov (`COND` false) and s_cmov (true: only while SCC is set) of a `W`-bit source.
fn mov<const W: u32, const COND: bool>(c: &mut Ctx<'_>, i: &Inst) -> R {
    if COND && !c.w.scc {
        return Ok(());
    }
    if W == 64 {
        let v = c.s64(i.src[0]);
        c.set_s64(i.dst, v);
    } else {
        let v = c.s32(i.src[0]);
        c.set_s32(i.dst, v);
    }
    Ok(())
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

/// s_bitset0 (`ONE` false) and s_bitset1 (true) of a `W`-bit SDST: clears or sets the bit that
/// SSRC0 names.
fn bitset<const W: u32, const ONE: bool>(c: &mut Ctx<'_>, i: &Inst) -> R {
    let bit = 1u64 << (c.s32(i.src[0]) & (W - 1));
    let old = if W == 64 {
        c.s64(Operand::Sgpr(i.dst))
    } else {
        u64::from(c.s32(Operand::Sgpr(i.dst)))
    };
    let v = if ONE { old | bit } else { old & !bit };
    if W == 64 {
        c.set_s64(i.dst, v);
    } else {
        c.set_s32(i.dst, v as u32);
    }
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

/// s_setreg_b32 (the value in SDST), and s_setreg_imm32_b32 with `IMM32` (the literal).
fn s_setreg<const IMM32: bool>(c: &mut Ctx<'_>, i: &Inst) -> R {
    let v = if IMM32 { c.s32(i.src[0]) } else { sdst(c, i) };
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

/// s_getpc_b64, and the return address of s_swappc_b64 and s_call_b64: the address of the next
/// instruction into SDST.
fn getpc(c: &mut Ctx<'_>, i: &Inst) -> R {
    let pc = c.w.pc;
    c.set_s64(i.dst, pc);
    Ok(())
}

/// s_branch, s_cbranch_* and s_call's jump: relative to the next instruction by SIMM16 dwords,
/// when `taken` holds for the wave.
fn branch(c: &mut Ctx<'_>, i: &Inst, taken: impl Fn(&Wave) -> bool) -> R {
    if taken(c.w) {
        c.w.pc = c.w.pc.wrapping_add(i64::from(simm(i) as i32 * 4) as u64);
    }
    Ok(())
}

// VGPR indexing: M0 holds the index added to VGPR numbers (bits 7:0) and which operands it
// applies to (bits 15:12), and MODE's GPR_IDX_EN turns it on (`Ctx::vidx`).
const M0_GPR_IDX: u32 = 0xff;
const M0_GPR_IDX_MODE: u32 = 0xf000;

/// Sets the `mask` bits of M0 to those of `value`.
fn set_m0_bits(c: &mut Ctx<'_>, mask: u32, value: u32) {
    let m0 = &mut c.w.sgpr[reg::M0];
    *m0 = *m0 & !mask | value & mask;
}

/// s_set_gpr_idx_on: indexing on, with the index from SSRC0 and the mode from the immediate.
fn gpr_idx_on(c: &mut Ctx<'_>, i: &Inst) -> R {
    c.w.mode |= hwreg::MODE_GPR_IDX_EN;
    gpr_idx_idx(c, i)?;
    gpr_idx_mode(c, i)
}

/// s_set_gpr_idx_off.
fn gpr_idx_off(c: &mut Ctx<'_>, _i: &Inst) -> R {
    c.w.mode &= !hwreg::MODE_GPR_IDX_EN;
    Ok(())
}

/// s_set_gpr_idx_idx: the index from SSRC0.
fn gpr_idx_idx(c: &mut Ctx<'_>, i: &Inst) -> R {
    let index = c.s32(i.src[0]);
    set_m0_bits(c, M0_GPR_IDX, index);
    Ok(())
}

/// s_set_gpr_idx_mode: the operands indexed, from the immediate's low 4 bits.
fn gpr_idx_mode(c: &mut Ctx<'_>, i: &Inst) -> R {
    set_m0_bits(c, M0_GPR_IDX_MODE, i.imm << 12);
    Ok(())
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

/// s_movrels of a `W`-bit value: from the source SGPR plus M0 (0 past the SGPRs).
fn movrels<const W: u32>(c: &mut Ctx<'_>, i: &Inst) -> R {
    let src = movrel_src(c, i).map(Operand::Sgpr);
    if W == 64 {
        let v = src.map_or(0, |s| c.s64(s));
        c.set_s64(i.dst, v);
    } else {
        let v = src.map_or(0, |s| c.s32(s));
        c.set_s32(i.dst, v);
    }
    Ok(())
}

/// s_movreld of a `W`-bit value: to the destination SGPR plus M0.
fn movreld<const W: u32>(c: &mut Ctx<'_>, i: &Inst) -> R {
    let d = usize::from(i.dst) + c.w.sgpr[reg::M0] as usize;
    if W == 64 {
        let v = c.s64(i.src[0]);
        c.w.set_sgpr64(d, v);
    } else {
        let v = c.s32(i.src[0]);
        c.w.set_sgpr(d, v);
    }
    Ok(())
}

const S32: [Ty; 4] = [Ty::B32; 4];
const S64: [Ty; 4] = [Ty::B64; 4];
const S64_32: [Ty; 4] = [Ty::B64, Ty::B64, Ty::B32, Ty::B32];
const S32_64: [Ty; 4] = [Ty::B32, Ty::B64, Ty::B32, Ty::B32];
const SI64: [Ty; 4] = [Ty::I64, Ty::I64, Ty::B32, Ty::B32];
