//! Vector memory: FLAT (global, LDS or private by aperture), GLOBAL, SCRATCH and MUBUF loads,
//! stores and atomics. Global accesses go through the executor's translations: when the
//! active lanes of an instruction fall in one translated run (the usual case), every lane
//! accesses host memory directly, with no lookup per lane.

use crate::atom::{self, op};
use crate::decode::{mflag, Inst, Operand};
use crate::error::Fault;
use crate::exec::{Ctx, Exit};
use crate::lds;
use crate::table::{row, unsupported, Encoding, OpDef, Ty};
use crate::valu::R;
use crate::wave::{reg, Lanes, LANES};

/// Where one lane's access goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seg {
    /// A GPU virtual address.
    Global,
    /// An offset in the workgroup's LDS.
    Lds,
    /// An offset in the lane's private memory (swizzled into the wave's scratch).
    Private,
    /// Out of range (MUBUF): reads 0, writes dropped.
    Dropped,
}

/// Per-lane addresses of an instruction and where they go.
struct Addrs {
    a: [u64; LANES],
    /// None: every lane is global.
    seg: Option<[Seg; LANES]>,
}

/// What an access does.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// Load `bytes`, sign-extending sub-dword values if `sext`; `d16`: 0 full, 1 low half, 2
    /// high half of the destination.
    Load { bytes: u8, sext: bool, d16: u8 },
    /// Store `bytes` (from the high half of the data with `hi`).
    Store { bytes: u8, hi: bool },
    /// Atomic `op`, 64-bit if `wide`.
    Atomic { op: u8, wide: bool },
}

/// The lane's private offset `o` as a global address in the wave's scratch (ROCr's swizzle:
/// dwords of the 64 lanes interleaved).
#[inline]
fn private_va(c: &Ctx<'_>, o: u64, lane: usize) -> u64 {
    let base = c.w.sgpr64(reg::FLAT_SCRATCH);
    base.wrapping_add((o / 4) * 256 + lane as u64 * 4 + o % 4)
}

fn flat_addrs(c: &Ctx<'_>, i: &Inst) -> Addrs {
    let exec = c.w.exec();
    let r = match i.src[0] {
        Operand::Vgpr(r) => usize::from(r),
        _ => 0,
    };
    let lo = c.w.v(r);
    let hi = c.w.v(r + 1);
    let mut a = [0u64; LANES];
    for l in 0..LANES {
        a[l] = (u64::from(lo[l]) | u64::from(hi[l]) << 32).wrapping_add(u64::from(i.imm));
    }
    if i.enc == Encoding::Global {
        return Addrs { a, seg: None };
    }
    let ap = &c.env.apertures;
    let (sh, pr) = (ap.shared_base >> 32, ap.private_base >> 32);
    let mut any = false;
    for l in 0..LANES {
        let h = a[l] >> 32;
        any |= exec >> l & 1 != 0 && (h == sh || h == pr);
    }
    if !any {
        return Addrs { a, seg: None };
    }
    let mut seg = [Seg::Global; LANES];
    for l in 0..LANES {
        let h = a[l] >> 32;
        if h == sh {
            seg[l] = Seg::Lds;
            a[l] -= ap.shared_base;
        } else if h == pr {
            seg[l] = Seg::Private;
            a[l] -= ap.private_base;
        }
    }
    Addrs { a, seg: Some(seg) }
}

fn global_addrs(c: &Ctx<'_>, i: &Inst) -> Addrs {
    let off = i64::from(i.imm as i32) as u64;
    let Operand::Sgpr(_) = i.src[2] else {
        return flat_addrs(c, i);
    };
    let base = c.s64(i.src[2]);
    let v = c.raw32(i.src[0], 0);
    let mut a = [0u64; LANES];
    for l in 0..LANES {
        a[l] = base.wrapping_add(u64::from(v[l])).wrapping_add(off);
    }
    Addrs { a, seg: None }
}

fn scratch_addrs(c: &Ctx<'_>, i: &Inst) -> Addrs {
    let off = i64::from(i.imm as i32);
    let v = match i.src[2] {
        Operand::Sgpr(_) => [c.s32(i.src[2]); LANES],
        _ => c.raw32(i.src[0], 0),
    };
    let mut a = [0u64; LANES];
    for l in 0..LANES {
        a[l] = (i64::from(v[l]) + off) as u64 & 0xffff_ffff;
    }
    Addrs {
        a,
        seg: Some([Seg::Private; LANES]),
    }
}

fn mubuf_addrs(c: &Ctx<'_>, i: &Inst, bytes: u64) -> Addrs {
    let s = usize::from(i.sdst);
    let w = |k: usize| c.w.sgpr.get(s + k).copied().unwrap_or(0);
    let (w0, w1, records, w3) = (w(0), w(1), w(2), w(3));
    let base = u64::from(w0) | u64::from(w1 & 0xffff) << 32;
    let stride = u64::from((w1 >> 16) & 0x3fff);
    let swizzle = w1 >> 31 != 0;
    let elem = 2u64 << ((w3 >> 19) & 3);
    let istride = 8u64 << ((w3 >> 21) & 3);
    let add_tid = w3 >> 23 & 1 != 0;
    let soffset = u64::from(c.s32(i.src[2]));
    let vr = match i.src[0] {
        Operand::Vgpr(r) => usize::from(r),
        _ => 0,
    };
    let idxen = i.mem & mflag::IDXEN != 0;
    let offen = i.mem & mflag::OFFEN != 0;
    let vi = *c.w.v(vr);
    let vo = *c.w.v(vr + usize::from(idxen));
    let mut a = [0u64; LANES];
    let mut seg = [Seg::Global; LANES];
    let mut any_dropped = false;
    for l in 0..LANES {
        let index = if idxen { u64::from(vi[l]) } else { 0 } + if add_tid { l as u64 } else { 0 };
        let offset = if offen { u64::from(vo[l]) } else { 0 } + u64::from(i.imm);
        let rel = if swizzle {
            let (imsb, ilsb) = (index / istride, index % istride);
            let (omsb, olsb) = (offset / elem, offset % elem);
            (imsb * stride + omsb * elem) * istride + ilsb * elem + olsb
        } else {
            index * stride + offset
        };
        let out = if swizzle {
            soffset + rel + bytes > u64::from(records)
        } else if stride == 0 {
            offset + bytes > u64::from(records)
        } else {
            index >= u64::from(records)
        };
        if out {
            seg[l] = Seg::Dropped;
            any_dropped = true;
        }
        a[l] = base.wrapping_add(soffset).wrapping_add(rel);
    }
    Addrs {
        a,
        seg: any_dropped.then_some(seg),
    }
}

fn addrs(c: &Ctx<'_>, i: &Inst, bytes: u64) -> Addrs {
    match i.enc {
        Encoding::Flat => flat_addrs(c, i),
        Encoding::Global => global_addrs(c, i),
        Encoding::Scratch => scratch_addrs(c, i),
        _ => mubuf_addrs(c, i, bytes),
    }
}

/// Reads `out.len()` bytes of lane `l` at `a` in segment `seg`.
fn read_lane(c: &mut Ctx<'_>, seg: Seg, a: u64, l: usize, out: &mut [u8]) -> Result<(), Fault> {
    match seg {
        Seg::Global => c.tlb.read(c.mem, a, out),
        Seg::Lds => {
            lds::read(c.lds, a, out);
            Ok(())
        }
        Seg::Private => {
            for (k, b) in out.iter_mut().enumerate() {
                let va = private_va(c, a + k as u64, l);
                let mut one = [0u8];
                c.tlb.read(c.mem, va, &mut one)?;
                *b = one[0];
            }
            Ok(())
        }
        Seg::Dropped => {
            out.fill(0);
            Ok(())
        }
    }
}

/// Writes `data` for lane `l` at `a` in segment `seg`.
fn write_lane(c: &mut Ctx<'_>, seg: Seg, a: u64, l: usize, data: &[u8]) -> Result<(), Fault> {
    match seg {
        Seg::Global => c.tlb.write(c.mem, a, data),
        Seg::Lds => {
            lds::write(c.lds, a, data);
            Ok(())
        }
        Seg::Private => {
            if a % 4 == 0 && data.len() % 4 == 0 {
                for (k, d) in data.chunks_exact(4).enumerate() {
                    let va = private_va(c, a + 4 * k as u64, l);
                    c.tlb.write(c.mem, va, d)?;
                }
            } else {
                for (k, b) in data.iter().enumerate() {
                    let va = private_va(c, a + k as u64, l);
                    c.tlb.write(c.mem, va, &[*b])?;
                }
            }
            Ok(())
        }
        Seg::Dropped => Ok(()),
    }
}

/// The span covering every active lane's `[a, a + bytes)`, if one translated run does.
fn wave_span(
    c: &mut Ctx<'_>,
    ad: &Addrs,
    exec: u64,
    bytes: u64,
    write: bool,
) -> Result<Option<crate::host::Span>, Fault> {
    if ad.seg.is_some() || exec == 0 {
        return Ok(None);
    }
    let mut lo = u64::MAX;
    let mut hi = 0u64;
    for l in 0..LANES {
        let on = exec >> l & 1 != 0;
        lo = if on { lo.min(ad.a[l]) } else { lo };
        hi = if on { hi.max(ad.a[l]) } else { hi };
    }
    let Some(len) = (hi - lo).checked_add(bytes) else {
        return Ok(None);
    };
    match c.tlb.span(c.mem, lo, len, write) {
        Ok(s) => Ok(s),
        // The lowest address faults: let the lane loop report the first faulting lane.
        Err(_) => Ok(None),
    }
}

/// `buffer_load_dword ... lds`: each active lane's dword goes to the workgroup's LDS at M0 +
/// the instruction offset + 4 x the lane id, not to a register. Every lane reads before any
/// writes, so a faulting load changes nothing.
fn load_to_lds(c: &mut Ctx<'_>, i: &Inst) -> R {
    let exec = c.w.exec();
    let ad = addrs(c, i, 4);
    let mut vals = [[0u8; 4]; LANES];
    for l in 0..LANES {
        if exec >> l & 1 != 0 {
            let seg = ad.seg.map_or(Seg::Global, |s| s[l]);
            read_lane(c, seg, ad.a[l], l, &mut vals[l]).map_err(|f| c.fault(f))?;
        }
    }
    let base = u64::from(c.w.sgpr[reg::M0]) + u64::from(i.imm);
    for l in 0..LANES {
        if exec >> l & 1 != 0 {
            lds::write(c.lds, base + 4 * l as u64, &vals[l]);
        }
    }
    Ok(())
}

fn load(c: &mut Ctx<'_>, i: &Inst, bytes: u8, sext: bool, d16: u8) -> R {
    if i.mem & mflag::LDS != 0 {
        return load_to_lds(c, i);
    }
    let exec = c.w.exec();
    let ad = addrs(c, i, u64::from(bytes));
    let nd = usize::from(bytes).div_ceil(4);
    let mut vals = [[0u32; LANES]; 4];
    if i.mem & mflag::GLC != 0 {
        c.mem.acquire();
    }
    let span = wave_span(c, &ad, exec, u64::from(bytes), false).map_err(|f| c.fault(f))?;
    match span {
        Some(s) if bytes >= 4 && d16 == 0 => {
            // Straight into the destination registers.
            let d = c.data_reg(i, Operand::Vgpr(i.dst));
            for k in 0..nd {
                let Some(r) = c.w.v_mut(d + k) else { continue };
                for l in 0..LANES {
                    if exec >> l & 1 != 0 {
                        r[l] = s.load_u32(ad.a[l].wrapping_add(4 * k as u64)).unwrap_or(0);
                    }
                }
            }
            return Ok(());
        }
        Some(s) if bytes < 4 => {
            // Bytes and shorts (the misaligned blits' accesses): every lane from the one span,
            // no translation per lane.
            for l in 0..LANES {
                if exec >> l & 1 != 0 {
                    let mut b = [0u8; 4];
                    s.read(ad.a[l], &mut b[..usize::from(bytes)]);
                    vals[0][l] = u32::from_le_bytes(b);
                }
            }
        }
        _ => {
            for l in 0..LANES {
                if exec >> l & 1 == 0 {
                    continue;
                }
                let seg = ad.seg.map_or(Seg::Global, |s| s[l]);
                let mut b = [0u8; 16];
                read_lane(c, seg, ad.a[l], l, &mut b[..usize::from(bytes)])
                    .map_err(|f| c.fault(f))?;
                for (k, v) in vals.iter_mut().enumerate().take(nd) {
                    v[l] = u32::from_le_bytes([b[4 * k], b[4 * k + 1], b[4 * k + 2], b[4 * k + 3]]);
                }
            }
        }
    }
    if bytes < 4 {
        let bits = u32::from(bytes) * 8;
        for x in vals[0].iter_mut() {
            if sext {
                *x = (((*x << (32 - bits)) as i32) >> (32 - bits)) as u32;
            }
        }
    }
    let d = c.data_reg(i, Operand::Vgpr(i.dst));
    if d16 != 0 {
        let old = *c.w.v(d);
        for l in 0..LANES {
            let x = vals[0][l] & 0xffff;
            vals[0][l] = if d16 == 2 {
                (old[l] & 0xffff) | x << 16
            } else {
                (old[l] & 0xffff_0000) | x
            };
        }
    }
    for (k, v) in vals.iter().enumerate().take(nd) {
        if let Some(r) = c.w.v_mut(d + k) {
            crate::operand::masked_store(r, v, exec);
        }
    }
    Ok(())
}

fn store(c: &mut Ctx<'_>, i: &Inst, bytes: u8, hi: bool) -> R {
    let exec = c.w.exec();
    let ad = addrs(c, i, u64::from(bytes));
    let nd = usize::from(bytes).div_ceil(4);
    let dr = c.data_reg(i, i.src[1]);
    let span = wave_span(c, &ad, exec, u64::from(bytes), true).map_err(|f| c.fault(f))?;
    match span {
        Some(s) if bytes >= 4 => {
            // Straight from the data registers.
            for k in 0..nd {
                let v = c.w.v(dr + k);
                for l in 0..LANES {
                    if exec >> l & 1 != 0 {
                        s.store_u32(ad.a[l].wrapping_add(4 * k as u64), v[l]);
                    }
                }
            }
        }
        Some(s) if bytes < 4 => {
            // Bytes and shorts: every lane into the one span.
            let v = c.w.v(dr);
            for l in 0..LANES {
                if exec >> l & 1 != 0 {
                    let x = if hi { v[l] >> 16 } else { v[l] };
                    s.write(ad.a[l], &x.to_le_bytes()[..usize::from(bytes)]);
                }
            }
        }
        _ => {
            let data: [Lanes; 4] =
                std::array::from_fn(|k| if k < nd { *c.w.v(dr + k) } else { [0; LANES] });
            for l in 0..LANES {
                if exec >> l & 1 == 0 {
                    continue;
                }
                let seg = ad.seg.map_or(Seg::Global, |s| s[l]);
                let mut b = [0u8; 16];
                for (k, v) in data.iter().enumerate().take(nd) {
                    let x = if hi { v[l] >> 16 } else { v[l] };
                    b[4 * k..4 * k + 4].copy_from_slice(&x.to_le_bytes());
                }
                write_lane(c, seg, ad.a[l], l, &b[..usize::from(bytes)]).map_err(|f| c.fault(f))?;
            }
        }
    }
    Ok(())
}

fn atomic(c: &mut Ctx<'_>, i: &Inst, aop: u8, wide: bool) -> R {
    c.mem.acquire();
    let exec = c.w.exec();
    let bytes = if wide { 8 } else { 4 };
    let ad = addrs(c, i, bytes);
    let dr = c.data_reg(i, i.src[1]);
    let n = if wide { 2 } else { 1 };
    let val = |c: &Ctx<'_>, r: usize, l: usize| -> u64 {
        if wide {
            u64::from(c.w.v(r)[l]) | u64::from(c.w.v(r + 1)[l]) << 32
        } else {
            u64::from(c.w.v(r)[l])
        }
    };
    // Every lane's address must translate before any lane's atomic happens: a fault leaves
    // memory untouched, so the instruction can run again once the fault is resolved.
    for l in 0..LANES {
        if exec >> l & 1 != 0 && ad.seg.map_or(Seg::Global, |s| s[l]) == Seg::Global {
            for a in [ad.a[l], ad.a[l].wrapping_add(bytes - 1)] {
                c.tlb.span(c.mem, a, 1, true).map_err(|f| c.fault(f))?;
            }
        }
    }
    let mut ret = [[0u32; LANES]; 2];
    for l in 0..LANES {
        if exec >> l & 1 == 0 {
            continue;
        }
        let d = val(c, dr, l);
        let cmp = if aop == op::CMPSWAP {
            val(c, dr + n, l)
        } else {
            0
        };
        let seg = ad.seg.map_or(Seg::Global, |s| s[l]);
        let a = ad.a[l];
        let old = match seg {
            Seg::Global => global_atomic(c, a, aop, wide, d, cmp).map_err(|f| c.fault(f))?,
            _ => {
                let mut b = [0u8; 8];
                read_lane(c, seg, a, l, &mut b[..bytes as usize]).map_err(|f| c.fault(f))?;
                let old = u64::from_le_bytes(b);
                let new = atom::apply_width(aop, wide, old, d, cmp);
                write_lane(c, seg, a, l, &new.to_le_bytes()[..bytes as usize])
                    .map_err(|f| c.fault(f))?;
                old
            }
        };
        ret[0][l] = old as u32;
        ret[1][l] = (old >> 32) as u32;
    }
    if i.mem & mflag::GLC != 0 {
        let d = c.data_reg(i, Operand::Vgpr(i.dst));
        for (k, v) in ret.iter().enumerate().take(n) {
            if let Some(r) = c.w.v_mut(d + k) {
                crate::operand::masked_store(r, v, exec);
            }
        }
    }
    Ok(())
}

/// A real atomic on shared memory (a compare-exchange loop for the operations the host has
/// no instruction for); returns the old value.
fn global_atomic(
    c: &mut Ctx<'_>,
    a: u64,
    aop: u8,
    wide: bool,
    d: u64,
    cmp: u64,
) -> Result<u64, Fault> {
    use std::sync::atomic::Ordering::SeqCst;
    let bytes = if wide { 8 } else { 4 };
    let span = c.tlb.span(c.mem, a, bytes, true)?;
    // One read-modify-write on a host atomic; the host's own instruction where it has one.
    macro_rules! rmw {
        ($at:expr, $t:ty, $d:expr, $cmp:expr) => {{
            let (at, d, cmp) = ($at, $d, $cmp);
            match aop {
                op::ADD => at.fetch_add(d, SeqCst),
                op::SUB => at.fetch_sub(d, SeqCst),
                op::SWAP => at.swap(d, SeqCst),
                op::AND => at.fetch_and(d, SeqCst),
                op::OR => at.fetch_or(d, SeqCst),
                op::XOR => at.fetch_xor(d, SeqCst),
                op::UMIN => at.fetch_min(d, SeqCst),
                op::UMAX => at.fetch_max(d, SeqCst),
                op::CMPSWAP => at
                    .compare_exchange(cmp, d, SeqCst, SeqCst)
                    .unwrap_or_else(|v| v),
                _ => at
                    .fetch_update(SeqCst, SeqCst, |old| {
                        Some(atom::apply::<$t>(aop, old, d, cmp))
                    })
                    .unwrap_or_else(|v| v),
            }
        }};
    }
    if let Some(s) = span {
        if wide {
            if let Some(at) = s.atomic_u64(a) {
                return Ok(rmw!(at, u64, d, cmp));
            }
        } else if let Some(at) = s.atomic_u32(a) {
            return Ok(u64::from(rmw!(at, u32, d as u32, cmp as u32)));
        }
    }
    // Misaligned or split across runs: not atomic, as on hardware misaligned atomics are not.
    let mut b = [0u8; 8];
    c.tlb.read(c.mem, a, &mut b[..bytes as usize])?;
    let old = u64::from_le_bytes(b);
    let new = atom::apply_width(aop, wide, old, d, cmp);
    c.tlb
        .write(c.mem, a, &new.to_le_bytes()[..bytes as usize])?;
    Ok(old)
}

fn exec_kind(c: &mut Ctx<'_>, i: &Inst, k: Kind) -> R {
    match k {
        Kind::Load { bytes, sext, d16 } => load(c, i, bytes, sext, d16),
        Kind::Store { bytes, hi } => store(c, i, bytes, hi),
        Kind::Atomic { op, wide } => atomic(c, i, op, wide),
    }
}

const fn ld(bytes: u8, sext: bool, d16: u8) -> Option<Kind> {
    Some(Kind::Load { bytes, sext, d16 })
}

const fn st(bytes: u8, hi: bool) -> Option<Kind> {
    Some(Kind::Store { bytes, hi })
}

const fn at(op: u8, wide: bool) -> Option<Kind> {
    Some(Kind::Atomic { op, wide })
}

/// The access of each memory opcode (shared by FLAT, GLOBAL, SCRATCH and MUBUF).
const fn kind(code: u16) -> Option<Kind> {
    match code {
        0x10 => ld(1, false, 0),
        0x11 => ld(1, true, 0),
        0x12 => ld(2, false, 0),
        0x13 => ld(2, true, 0),
        0x14 => ld(4, false, 0),
        0x15 => ld(8, false, 0),
        0x16 => ld(12, false, 0),
        0x17 => ld(16, false, 0),
        0x18 => st(1, false),
        0x19 => st(1, true),
        0x1a => st(2, false),
        0x1b => st(2, true),
        0x1c => st(4, false),
        0x1d => st(8, false),
        0x1e => st(12, false),
        0x1f => st(16, false),
        0x20 => ld(1, false, 1),
        0x21 => ld(1, false, 2),
        0x22 => ld(1, true, 1),
        0x23 => ld(1, true, 2),
        0x24 => ld(2, false, 1),
        0x25 => ld(2, false, 2),
        0x40 => at(op::SWAP, false),
        0x41 => at(op::CMPSWAP, false),
        0x42 => at(op::ADD, false),
        0x43 => at(op::SUB, false),
        0x44 => at(op::SMIN, false),
        0x45 => at(op::UMIN, false),
        0x46 => at(op::SMAX, false),
        0x47 => at(op::UMAX, false),
        0x48 => at(op::AND, false),
        0x49 => at(op::OR, false),
        0x4a => at(op::XOR, false),
        0x4b => at(op::INC, false),
        0x4c => at(op::DEC, false),
        0x4d => at(op::FADD, false),
        0x4e => at(op::PK_FADD16, false),
        0x4f => at(op::FADD, true),
        0x50 => at(op::FMIN, true),
        0x51 => at(op::FMAX, true),
        0x60 => at(op::SWAP, true),
        0x61 => at(op::CMPSWAP, true),
        0x62 => at(op::ADD, true),
        0x63 => at(op::SUB, true),
        0x64 => at(op::SMIN, true),
        0x65 => at(op::UMIN, true),
        0x66 => at(op::SMAX, true),
        0x67 => at(op::UMAX, true),
        0x68 => at(op::AND, true),
        0x69 => at(op::OR, true),
        0x6a => at(op::XOR, true),
        0x6b => at(op::INC, true),
        0x6c => at(op::DEC, true),
        _ => None,
    }
}

/// One executor function per opcode: the access is looked up by the opcode again (a constant
/// per function after inlining).
fn mem_op<const CODE: u16>(c: &mut Ctx<'_>, i: &Inst) -> R {
    match kind(CODE) {
        Some(k) => exec_kind(c, i, k),
        None => Err(Exit::Error(crate::error::ShaderError::UnsupportedOpcode {
            encoding: i.enc,
            opcode: CODE,
            mnemonic: Some(i.def.name),
            pc: c.pc,
        })),
    }
}

fn nop(_c: &mut Ctx<'_>, _i: &Inst) -> R {
    Ok(())
}

/// `buffer_wbinvl1(_vol)`, `buffer_invl2`: the caches are coherent here, but an acquire fence
/// must see other agents' writes (`Memory::acquire`).
fn invalidate(c: &mut Ctx<'_>, _i: &Inst) -> R {
    c.mem.acquire();
    Ok(())
}

const T: [Ty; 4] = [Ty::B32; 4];

/// The load, store and atomic rows of one FLAT-like encoding; `$atomics_f32` adds the f32 and
/// packed-f16 adds (GLOBAL and MUBUF only).
macro_rules! mem_rows {
    ($e:expr, $p:literal) => {
        [
            row($e, 0x10, concat!($p, "load_ubyte"), mem_op::<0x10>, T, 0),
            row($e, 0x11, concat!($p, "load_sbyte"), mem_op::<0x11>, T, 0),
            row($e, 0x12, concat!($p, "load_ushort"), mem_op::<0x12>, T, 0),
            row($e, 0x13, concat!($p, "load_sshort"), mem_op::<0x13>, T, 0),
            row($e, 0x14, concat!($p, "load_dword"), mem_op::<0x14>, T, 0),
            row($e, 0x15, concat!($p, "load_dwordx2"), mem_op::<0x15>, T, 0),
            row($e, 0x16, concat!($p, "load_dwordx3"), mem_op::<0x16>, T, 0),
            row($e, 0x17, concat!($p, "load_dwordx4"), mem_op::<0x17>, T, 0),
            row($e, 0x18, concat!($p, "store_byte"), mem_op::<0x18>, T, 0),
            row(
                $e,
                0x19,
                concat!($p, "store_byte_d16_hi"),
                mem_op::<0x19>,
                T,
                0,
            ),
            row($e, 0x1a, concat!($p, "store_short"), mem_op::<0x1a>, T, 0),
            row(
                $e,
                0x1b,
                concat!($p, "store_short_d16_hi"),
                mem_op::<0x1b>,
                T,
                0,
            ),
            row($e, 0x1c, concat!($p, "store_dword"), mem_op::<0x1c>, T, 0),
            row($e, 0x1d, concat!($p, "store_dwordx2"), mem_op::<0x1d>, T, 0),
            row($e, 0x1e, concat!($p, "store_dwordx3"), mem_op::<0x1e>, T, 0),
            row($e, 0x1f, concat!($p, "store_dwordx4"), mem_op::<0x1f>, T, 0),
            row(
                $e,
                0x20,
                concat!($p, "load_ubyte_d16"),
                mem_op::<0x20>,
                T,
                0,
            ),
            row(
                $e,
                0x21,
                concat!($p, "load_ubyte_d16_hi"),
                mem_op::<0x21>,
                T,
                0,
            ),
            row(
                $e,
                0x22,
                concat!($p, "load_sbyte_d16"),
                mem_op::<0x22>,
                T,
                0,
            ),
            row(
                $e,
                0x23,
                concat!($p, "load_sbyte_d16_hi"),
                mem_op::<0x23>,
                T,
                0,
            ),
            row(
                $e,
                0x24,
                concat!($p, "load_short_d16"),
                mem_op::<0x24>,
                T,
                0,
            ),
            row(
                $e,
                0x25,
                concat!($p, "load_short_d16_hi"),
                mem_op::<0x25>,
                T,
                0,
            ),
        ]
    };
}

macro_rules! atomic_rows {
    ($e:expr, $p:literal) => {
        [
            row($e, 0x40, concat!($p, "atomic_swap"), mem_op::<0x40>, T, 0),
            row(
                $e,
                0x41,
                concat!($p, "atomic_cmpswap"),
                mem_op::<0x41>,
                T,
                0,
            ),
            row($e, 0x42, concat!($p, "atomic_add"), mem_op::<0x42>, T, 0),
            row($e, 0x43, concat!($p, "atomic_sub"), mem_op::<0x43>, T, 0),
            row($e, 0x44, concat!($p, "atomic_smin"), mem_op::<0x44>, T, 0),
            row($e, 0x45, concat!($p, "atomic_umin"), mem_op::<0x45>, T, 0),
            row($e, 0x46, concat!($p, "atomic_smax"), mem_op::<0x46>, T, 0),
            row($e, 0x47, concat!($p, "atomic_umax"), mem_op::<0x47>, T, 0),
            row($e, 0x48, concat!($p, "atomic_and"), mem_op::<0x48>, T, 0),
            row($e, 0x49, concat!($p, "atomic_or"), mem_op::<0x49>, T, 0),
            row($e, 0x4a, concat!($p, "atomic_xor"), mem_op::<0x4a>, T, 0),
            row($e, 0x4b, concat!($p, "atomic_inc"), mem_op::<0x4b>, T, 0),
            row($e, 0x4c, concat!($p, "atomic_dec"), mem_op::<0x4c>, T, 0),
            row(
                $e,
                0x4f,
                concat!($p, "atomic_add_f64"),
                mem_op::<0x4f>,
                T,
                0,
            ),
            row(
                $e,
                0x50,
                concat!($p, "atomic_min_f64"),
                mem_op::<0x50>,
                T,
                0,
            ),
            row(
                $e,
                0x51,
                concat!($p, "atomic_max_f64"),
                mem_op::<0x51>,
                T,
                0,
            ),
            row(
                $e,
                0x60,
                concat!($p, "atomic_swap_x2"),
                mem_op::<0x60>,
                T,
                0,
            ),
            row(
                $e,
                0x61,
                concat!($p, "atomic_cmpswap_x2"),
                mem_op::<0x61>,
                T,
                0,
            ),
            row($e, 0x62, concat!($p, "atomic_add_x2"), mem_op::<0x62>, T, 0),
            row($e, 0x63, concat!($p, "atomic_sub_x2"), mem_op::<0x63>, T, 0),
            row(
                $e,
                0x64,
                concat!($p, "atomic_smin_x2"),
                mem_op::<0x64>,
                T,
                0,
            ),
            row(
                $e,
                0x65,
                concat!($p, "atomic_umin_x2"),
                mem_op::<0x65>,
                T,
                0,
            ),
            row(
                $e,
                0x66,
                concat!($p, "atomic_smax_x2"),
                mem_op::<0x66>,
                T,
                0,
            ),
            row(
                $e,
                0x67,
                concat!($p, "atomic_umax_x2"),
                mem_op::<0x67>,
                T,
                0,
            ),
            row($e, 0x68, concat!($p, "atomic_and_x2"), mem_op::<0x68>, T, 0),
            row($e, 0x69, concat!($p, "atomic_or_x2"), mem_op::<0x69>, T, 0),
            row($e, 0x6a, concat!($p, "atomic_xor_x2"), mem_op::<0x6a>, T, 0),
            row($e, 0x6b, concat!($p, "atomic_inc_x2"), mem_op::<0x6b>, T, 0),
            row($e, 0x6c, concat!($p, "atomic_dec_x2"), mem_op::<0x6c>, T, 0),
        ]
    };
}

const FLAT_MEM: [OpDef; 22] = mem_rows!(Encoding::Flat, "flat_");
const FLAT_ATOMIC: [OpDef; 29] = atomic_rows!(Encoding::Flat, "flat_");
const GLOBAL_MEM: [OpDef; 22] = mem_rows!(Encoding::Global, "global_");
const GLOBAL_ATOMIC: [OpDef; 29] = atomic_rows!(Encoding::Global, "global_");
const GLOBAL_F: [OpDef; 2] = [
    row(
        Encoding::Global,
        0x4d,
        "global_atomic_add_f32",
        mem_op::<0x4d>,
        T,
        0,
    ),
    row(
        Encoding::Global,
        0x4e,
        "global_atomic_pk_add_f16",
        mem_op::<0x4e>,
        T,
        0,
    ),
];
const SCRATCH_MEM: [OpDef; 22] = mem_rows!(Encoding::Scratch, "scratch_");
const MUBUF_MEM: [OpDef; 22] = mem_rows!(Encoding::Mubuf, "buffer_");
const MUBUF_ATOMIC: [OpDef; 29] = atomic_rows!(Encoding::Mubuf, "buffer_");
const MUBUF_OTHER: [OpDef; 10] = [
    row(
        Encoding::Mubuf,
        0x4d,
        "buffer_atomic_add_f32",
        mem_op::<0x4d>,
        T,
        0,
    ),
    row(
        Encoding::Mubuf,
        0x4e,
        "buffer_atomic_pk_add_f16",
        mem_op::<0x4e>,
        T,
        0,
    ),
    row(Encoding::Mubuf, 0x28, "buffer_wbl2", nop, T, 0),
    row(Encoding::Mubuf, 0x29, "buffer_invl2", invalidate, T, 0),
    row(Encoding::Mubuf, 0x3e, "buffer_wbinvl1", invalidate, T, 0),
    row(
        Encoding::Mubuf,
        0x3f,
        "buffer_wbinvl1_vol",
        invalidate,
        T,
        0,
    ),
    unsupported(Encoding::Mubuf, 0x00, "buffer_load_format_x"),
    unsupported(Encoding::Mubuf, 0x01, "buffer_load_format_xy"),
    unsupported(Encoding::Mubuf, 0x04, "buffer_store_format_x"),
    unsupported(Encoding::Mubuf, 0x3d, "buffer_store_lds_dword"),
];

static FLAT_ALL: [OpDef; 51] = crate::table::concat(&[&FLAT_MEM, &FLAT_ATOMIC]);
static GLOBAL_ALL: [OpDef; 53] = crate::table::concat(&[&GLOBAL_MEM, &GLOBAL_ATOMIC, &GLOBAL_F]);
static MUBUF_ALL: [OpDef; 61] = crate::table::concat(&[&MUBUF_MEM, &MUBUF_ATOMIC, &MUBUF_OTHER]);

/// FLAT opcodes.
pub(crate) static FLAT: &[OpDef] = &FLAT_ALL;
/// GLOBAL opcodes.
pub(crate) static GLOBAL: &[OpDef] = &GLOBAL_ALL;
/// SCRATCH opcodes.
pub(crate) static SCRATCH: &[OpDef] = &SCRATCH_MEM;
/// MUBUF opcodes.
pub(crate) static MUBUF: &[OpDef] = &MUBUF_ALL;
