//! Scalar memory: loads and stores of SGPRs through the GPU VM, the scalar cache controls and
//! the clock counters.

use crate::decode::Inst;
use crate::exec::Ctx;
use crate::table::{row, Encoding, OpDef, Ty};
use crate::valu::{ex, R};

/// The address of an SMEM access: the SGPR-pair base plus the offset (and SOFFSET), dword
/// aligned.
fn address(c: &Ctx<'_>, i: &Inst) -> u64 {
    let base = c.s64(i.src[0]) & 0xffff_ffff_ffff;
    let off = i64::from(i.imm as i32) + i64::from(c.s32(i.src[1]));
    base.wrapping_add(off as u64) & !3
}

/// s_load_dword(xN): N dwords from the scalar address into consecutive SGPRs.
fn load<const N: usize>(c: &mut Ctx<'_>, i: &Inst) -> R {
    if i.mem & crate::decode::mflag::GLC != 0 {
        c.mem.acquire();
    }
    let a = address(c, i);
    for k in 0..N {
        let v = c
            .tlb
            .read_u32(c.mem, a.wrapping_add(4 * k as u64))
            .map_err(|f| c.fault(f))?;
        c.w.set_sgpr(usize::from(i.dst) + k, v);
    }
    Ok(())
}

/// s_buffer_load_dword(xN): the base is a buffer resource (4 SGPRs); dwords past NUM_RECORDS read 0.
fn buffer_load<const N: usize>(c: &mut Ctx<'_>, i: &Inst) -> R {
    let r = usize::from(match i.src[0] {
        crate::decode::Operand::Sgpr(r) => r,
        _ => 0,
    });
    let w0 = c.w.sgpr.get(r).copied().unwrap_or(0);
    let w1 = c.w.sgpr.get(r + 1).copied().unwrap_or(0);
    let records = c.w.sgpr.get(r + 2).copied().unwrap_or(0);
    let base = u64::from(w0) | u64::from(w1 & 0xffff) << 32;
    let off = (i.imm as i32).wrapping_add(c.s32(i.src[1]) as i32) as u32 & !3;
    for k in 0..N {
        let o = off.wrapping_add(4 * k as u32);
        let v = if o >= records {
            0
        } else {
            c.tlb
                .read_u32(c.mem, base + u64::from(o))
                .map_err(|f| c.fault(f))?
        };
        c.w.set_sgpr(usize::from(i.dst) + k, v);
    }
    Ok(())
}

/// s_store_dword(xN): N consecutive SGPRs to the scalar address.
fn store<const N: usize>(c: &mut Ctx<'_>, i: &Inst) -> R {
    let a = address(c, i);
    for k in 0..N {
        let v = c.w.sgpr.get(usize::from(i.dst) + k).copied().unwrap_or(0);
        c.tlb
            .write_u32(c.mem, a.wrapping_add(4 * k as u64), v)
            .map_err(|f| c.fault(f))?;
    }
    Ok(())
}

/// s_dcache_inv(_vol): the scalar cache is coherent here, but an acquire fence must see other
/// agents' writes (`Memory::acquire`).
fn invalidate(c: &mut Ctx<'_>, _i: &Inst) -> R {
    c.mem.acquire();
    Ok(())
}

/// s_memtime (the GPU's clock) and s_memrealtime (the constant-rate clock) into an SGPR pair.
fn time<const REAL: bool>(c: &mut Ctx<'_>, i: &Inst) -> R {
    let t = if REAL {
        c.clock.memrealtime()
    } else {
        c.clock.memtime()
    };
    c.set_s64(i.dst, t);
    Ok(())
}

const T: [Ty; 4] = [Ty::B32; 4];
use Encoding::Smem as S;

/// SMEM opcodes.
pub(crate) static SMEM: &[OpDef] = &[
    row(S, 0x00, "s_load_dword", load::<1>, T, 0),
    row(S, 0x01, "s_load_dwordx2", load::<2>, T, 0),
    row(S, 0x02, "s_load_dwordx4", load::<4>, T, 0),
    row(S, 0x03, "s_load_dwordx8", load::<8>, T, 0),
    row(S, 0x04, "s_load_dwordx16", load::<16>, T, 0),
    row(S, 0x08, "s_buffer_load_dword", buffer_load::<1>, T, 0),
    row(S, 0x09, "s_buffer_load_dwordx2", buffer_load::<2>, T, 0),
    row(S, 0x0a, "s_buffer_load_dwordx4", buffer_load::<4>, T, 0),
    row(S, 0x0b, "s_buffer_load_dwordx8", buffer_load::<8>, T, 0),
    row(S, 0x0c, "s_buffer_load_dwordx16", buffer_load::<16>, T, 0),
    row(S, 0x10, "s_store_dword", store::<1>, T, 0),
    row(S, 0x11, "s_store_dwordx2", store::<2>, T, 0),
    row(S, 0x12, "s_store_dwordx4", store::<4>, T, 0),
    row(S, 0x20, "s_dcache_inv", invalidate, T, 0),
    row(S, 0x21, "s_dcache_wb", ex!(|_c, _i| Ok(())), T, 0),
    row(S, 0x22, "s_dcache_inv_vol", invalidate, T, 0),
    row(S, 0x23, "s_dcache_wb_vol", ex!(|_c, _i| Ok(())), T, 0),
    row(S, 0x24, "s_memtime", time::<false>, T, 0),
    row(S, 0x25, "s_memrealtime", time::<true>, T, 0),
    row(S, 0x26, "s_atc_probe", ex!(|_c, _i| Ok(())), T, 0),
    row(S, 0x27, "s_atc_probe_buffer", ex!(|_c, _i| Ok(())), T, 0),
];
