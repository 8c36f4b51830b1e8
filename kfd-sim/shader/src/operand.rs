//! Reading and writing operands: scalar values, the 64 lanes of a vector source (with VGPR
//! indexing, SDWA selects, DPP lane moves and ABS/NEG applied) and masked vector writes.

use crate::decode::{Dpp, Inst, Operand};
use crate::exec::Ctx;
use crate::table::{flag, Ty};
use crate::wave::{hwreg, reg, Lanes, LANES};

/// 64 lanes of 64-bit values.
pub(crate) type Lanes64 = [u64; LANES];

impl Ctx<'_> {
    /// A scalar operand's 32-bit value.
    #[inline]
    pub(crate) fn s32(&self, o: Operand) -> u32 {
        match o {
            Operand::Sgpr(r) => self.w.sgpr.get(usize::from(r)).copied().unwrap_or(0),
            Operand::Const(v) => v as u32,
            Operand::SharedBase => (self.env.apertures.shared_base >> 32) as u32,
            Operand::SharedLimit => (self.env.apertures.shared_limit() >> 32) as u32,
            Operand::PrivateBase => (self.env.apertures.private_base >> 32) as u32,
            Operand::PrivateLimit => (self.env.apertures.private_limit() >> 32) as u32,
            Operand::Vccz => u32::from(self.w.vcc() == 0),
            Operand::Execz => u32::from(self.w.exec() == 0),
            Operand::Scc => u32::from(self.w.scc),
            Operand::Vgpr(r) => self.w.v(usize::from(r))[0],
            Operand::Agpr(r) => self.w.v(self.w.accum_offset as usize + usize::from(r))[0],
            Operand::PopsExitingWaveId | Operand::None => 0,
        }
    }

    /// A scalar operand's 64-bit value (a register pair, or a 64-bit constant).
    #[inline]
    pub(crate) fn s64(&self, o: Operand) -> u64 {
        match o {
            Operand::Sgpr(r) => self.w.sgpr64(usize::from(r)),
            Operand::Const(v) => v,
            Operand::SharedBase => self.env.apertures.shared_base,
            Operand::SharedLimit => self.env.apertures.shared_limit(),
            Operand::PrivateBase => self.env.apertures.private_base,
            Operand::PrivateLimit => self.env.apertures.private_limit(),
            o => u64::from(self.s32(o)),
        }
    }

    /// Writes a scalar destination.
    #[inline]
    pub(crate) fn set_s32(&mut self, r: u8, v: u32) {
        self.w.set_sgpr(usize::from(r), v);
    }

    /// Writes a scalar destination pair.
    #[inline]
    pub(crate) fn set_s64(&mut self, r: u8, v: u64) {
        self.w.set_sgpr64(usize::from(r), v);
    }

    /// The unified-file index of VGPR `r` as source `n` (3 = destination) of a VALU
    /// instruction, with `s_set_gpr_idx_on` indexing applied.
    #[inline]
    pub(crate) fn vidx(&self, r: u8, n: usize) -> usize {
        let mut idx = usize::from(r);
        if self.w.mode & hwreg::MODE_GPR_IDX_EN != 0 {
            let m0 = self.w.sgpr[reg::M0];
            if m0 >> (12 + n) & 1 != 0 {
                idx += (m0 & 0xff) as usize;
            }
        }
        idx
    }

    /// Raw 32-bit lanes of operand `o` as source `n`.
    #[inline]
    pub(crate) fn raw32(&self, o: Operand, n: usize) -> Lanes {
        match o {
            Operand::Vgpr(r) => *self.w.v(self.vidx(r, n)),
            Operand::Agpr(r) => *self.w.v(self.w.accum_offset as usize + usize::from(r)),
            o => [self.s32(o); LANES],
        }
    }

    /// Raw 64-bit lanes of operand `o` as source `n` (a register pair).
    #[inline]
    pub(crate) fn raw64(&self, o: Operand, n: usize) -> Lanes64 {
        match o {
            Operand::Vgpr(r) | Operand::Agpr(r) => {
                let base = match o {
                    Operand::Agpr(_) => self.w.accum_offset as usize + usize::from(r),
                    _ => self.vidx(r, n),
                };
                let lo = self.w.v(base);
                let hi = self.w.v(base + 1);
                let mut out = [0u64; LANES];
                for l in 0..LANES {
                    out[l] = u64::from(lo[l]) | u64::from(hi[l]) << 32;
                }
                out
            }
            o => [self.s64(o); LANES],
        }
    }

    /// Source `n` of a VALU instruction as 32-bit lanes, with SDWA, DPP, OPSEL (16-bit VOP3)
    /// and ABS/NEG applied.
    pub(crate) fn src32(&mut self, i: &Inst, n: usize) -> Lanes {
        let mut v = self.raw32(i.src[n], n);
        let ty = i.def.ty[n + 1];
        if n == 0 {
            if let Some(dpp) = i.dpp {
                v = self.dpp(&v, dpp);
            }
        }
        if let Some(sdwa) = i.sdwa {
            if n < 2 {
                let (sel, sx) = (sdwa.src_sel[n], sdwa.sext[n]);
                if sel != 6 {
                    for x in v.iter_mut() {
                        *x = select(*x, sel, sx);
                    }
                }
            }
        } else if i.opsel >> n & 1 != 0 && matches!(ty, Ty::B16 | Ty::F16) {
            for x in v.iter_mut() {
                *x >>= 16;
            }
        }
        let (abs, neg) = (i.abs >> n & 1 != 0, i.neg >> n & 1 != 0);
        if abs || neg {
            let sign = match ty {
                Ty::F16 => 0x8000,
                Ty::F32 => 0x8000_0000,
                _ => 0,
            };
            if sign != 0 {
                for x in v.iter_mut() {
                    if abs {
                        *x &= !sign;
                    }
                    if neg {
                        *x ^= sign;
                    }
                }
            }
        }
        v
    }

    /// Source `n` as 64-bit lanes, with ABS/NEG applied for f64.
    pub(crate) fn src64(&mut self, i: &Inst, n: usize) -> Lanes64 {
        let mut v = self.raw64(i.src[n], n);
        if i.def.ty[n + 1] == Ty::F64 {
            let (abs, neg) = (i.abs >> n & 1 != 0, i.neg >> n & 1 != 0);
            for x in v.iter_mut() {
                if abs {
                    *x &= !(1 << 63);
                }
                if neg {
                    *x ^= 1 << 63;
                }
            }
        }
        v
    }

    /// The unified-file index of a memory instruction's data or destination register: an AGPR
    /// when the instruction has the ACC bit.
    #[inline]
    pub(crate) fn data_reg(&self, i: &Inst, o: Operand) -> usize {
        let r = match o {
            Operand::Vgpr(r) => usize::from(r),
            _ => 0,
        };
        if i.mem & crate::decode::mflag::ACC != 0 {
            self.w.accum_offset as usize + r
        } else {
            r
        }
    }

    /// The destination register of a VALU instruction in the unified file.
    #[inline]
    pub(crate) fn dst_index(&self, i: &Inst) -> usize {
        if i.def.has(flag::DST_AGPR) {
            self.w.accum_offset as usize + usize::from(i.dst)
        } else {
            self.vidx(i.dst, 3)
        }
    }

    /// Writes 32-bit results to the destination VGPR, in the lanes of `wmask`, through the
    /// SDWA destination select.
    pub(crate) fn write32(&mut self, i: &Inst, v: &Lanes) {
        let d = self.dst_index(i);
        let mask = self.wmask;
        let sdwa = i.sdwa;
        let Some(dst) = self.w.v_mut(d) else { return };
        if let Some(s) = sdwa.filter(|s| s.dst_sel != 6) {
            for l in 0..LANES {
                if mask >> l & 1 != 0 {
                    dst[l] = place(dst[l], v[l], s.dst_sel, s.dst_unused);
                }
            }
            return;
        }
        masked_store(dst, v, mask);
    }

    /// Writes 64-bit results to the destination VGPR pair in the lanes of `wmask`.
    pub(crate) fn write64(&mut self, i: &Inst, v: &Lanes64) {
        let d = self.dst_index(i);
        self.write64_at(d, v);
    }

    /// Writes 64-bit lanes to the pair at unified index `d`.
    pub(crate) fn write64_at(&mut self, d: usize, v: &Lanes64) {
        let mask = self.wmask;
        let mut lo = [0u32; LANES];
        let mut hi = [0u32; LANES];
        for l in 0..LANES {
            lo[l] = v[l] as u32;
            hi[l] = (v[l] >> 32) as u32;
        }
        if let Some(r) = self.w.v_mut(d) {
            masked_store(r, &lo, mask);
        }
        if let Some(r) = self.w.v_mut(d + 1) {
            masked_store(r, &hi, mask);
        }
    }

    /// DPP: the lane moves of `ctrl`; narrows `wmask` to the lanes that write.
    fn dpp(&mut self, v: &Lanes, d: Dpp) -> Lanes {
        let exec = self.w.exec();
        let mut out = [0u32; LANES];
        let mut write = 0u64;
        for l in 0..LANES {
            let row = l / 16;
            let bank = (l % 16) / 4;
            if d.row_mask >> row & 1 == 0 || d.bank_mask >> bank & 1 == 0 {
                continue;
            }
            match dpp_source(d.ctrl, l).filter(|s| exec >> s & 1 != 0) {
                Some(s) => {
                    out[l] = v[s];
                    write |= 1 << l;
                }
                None if d.bound_ctrl => write |= 1 << l,
                None => {}
            }
        }
        self.wmask &= write;
        out
    }
}

/// The lane DPP control `ctrl` reads for lane `l`, or None if out of range.
pub(crate) fn dpp_source(ctrl: u16, l: usize) -> Option<usize> {
    let row = l & !15;
    let lr = l % 16;
    let n = usize::from(ctrl & 0xf);
    match ctrl {
        0x00..=0xff => Some((l & !3) + usize::from((ctrl >> (2 * (l % 4))) & 3)),
        0x101..=0x10f => (lr + n < 16).then_some(l + n),
        0x111..=0x11f => (lr >= n).then(|| l - n),
        0x121..=0x12f => Some(row + (lr + 16 - n) % 16),
        0x130 => (l < 63).then_some(l + 1),
        0x134 => Some((l + 1) % 64),
        0x138 => l.checked_sub(1),
        0x13c => Some((l + 63) % 64),
        0x140 => Some(row + 15 - lr),
        0x141 => Some((l & !7) + 7 - l % 8),
        0x142 => (row > 0 && lr < 16).then(|| row - 1),
        0x143 => (l >= 32).then_some(31),
        _ => None,
    }
}

/// SDWA source select: byte 0-3, word 4/5 (6 = dword), zero- or sign-extended.
#[inline]
pub(crate) fn select(x: u32, sel: u8, sext: bool) -> u32 {
    let (shift, bits) = match sel {
        0..=3 => (u32::from(sel) * 8, 8),
        4 | 5 => (u32::from(sel - 4) * 16, 16),
        _ => return x,
    };
    let v = (x >> shift) & ((1 << bits) - 1);
    if sext {
        (((v << (32 - bits)) as i32) >> (32 - bits)) as u32
    } else {
        v
    }
}

/// SDWA destination select: `v`'s low bits into `old` at `sel`, the rest per `unused` (0 zero,
/// 1 sign extension, 2 preserve).
#[inline]
pub(crate) fn place(old: u32, v: u32, sel: u8, unused: u8) -> u32 {
    let (shift, bits) = match sel {
        0..=3 => (u32::from(sel) * 8, 8u32),
        4 | 5 => (u32::from(sel - 4) * 16, 16u32),
        _ => return v,
    };
    let field_mask = ((1u64 << bits) - 1) as u32;
    let field = (v & field_mask) << shift;
    let mask = field_mask << shift;
    match unused {
        2 => old & !mask | field,
        1 => {
            let sign = v >> (bits - 1) & 1 != 0;
            let above = if shift + bits >= 32 {
                0
            } else {
                u32::MAX << (shift + bits)
            };
            field | if sign { above } else { 0 }
        }
        _ => field,
    }
}

/// `dst[l] = v[l]` for the lanes of `mask`, written so that it vectorises.
#[inline]
pub(crate) fn masked_store(dst: &mut Lanes, v: &Lanes, mask: u64) {
    if mask == u64::MAX {
        *dst = *v;
        return;
    }
    for l in 0..LANES {
        let on = (mask >> l) & 1 != 0;
        dst[l] = if on { v[l] } else { dst[l] };
    }
}
