//! The local data share: the LDS access and per-lane address helpers, and the executors of the DS
//! loads, stores, atomics and cross-lane moves on the workgroup's LDS, whose rows of the opcode
//! table are in `ds`. Addresses outside the workgroup's allocation read 0 and drop writes.

use crate::atom::{self, op};
use crate::decode::{Inst, Operand};
use crate::exec::Ctx;
use crate::valu::R;
use crate::wave::{Lanes, LANES};

mod ds;

pub(crate) use ds::DS;

/// Reads `out.len()` bytes of LDS at `a` (zeros if any is out of range).
#[inline]
pub(crate) fn read(lds: &[u8], a: u64, out: &mut [u8]) {
    let n = out.len();
    match usize::try_from(a)
        .ok()
        .and_then(|a| lds.get(a..a.checked_add(n)?))
    {
        Some(s) => out.copy_from_slice(s),
        None => out.fill(0),
    }
}

/// Writes `data` to LDS at `a` (dropped if any byte is out of range).
#[inline]
pub(crate) fn write(lds: &mut [u8], a: u64, data: &[u8]) {
    let n = data.len();
    if let Some(s) = usize::try_from(a)
        .ok()
        .and_then(|a| lds.get_mut(a..a.checked_add(n)?))
    {
        s.copy_from_slice(data);
    }
}

#[inline]
pub(crate) fn read_u32(lds: &[u8], a: u64) -> u32 {
    let mut b = [0u8; 4];
    read(lds, a, &mut b);
    u32::from_le_bytes(b)
}

#[inline]
pub(crate) fn read_u64(lds: &[u8], a: u64) -> u64 {
    let mut b = [0u8; 8];
    read(lds, a, &mut b);
    u64::from_le_bytes(b)
}

fn dst_reg(c: &Ctx<'_>, i: &Inst) -> usize {
    c.data_reg(i, Operand::Vgpr(i.dst))
}

/// Per-lane LDS addresses: the ADDR VGPR plus `off`.
fn addrs(c: &Ctx<'_>, i: &Inst, off: u32) -> [u64; LANES] {
    let a = c.raw32(i.src[0], 0);
    let mut out = [0u64; LANES];
    for l in 0..LANES {
        out[l] = u64::from(a[l]) + u64::from(off);
    }
    out
}

/// Writes `vals[k]` (dword k of each lane) to the destination registers in the EXEC lanes.
fn put(c: &mut Ctx<'_>, d: usize, vals: &[Lanes]) {
    let exec = c.w.exec();
    for (k, v) in vals.iter().enumerate() {
        if let Some(r) = c.w.v_mut(d + k) {
            crate::operand::masked_store(r, v, exec);
        }
    }
}

/// A load of `BYTES` (1, 2, 4, 8, 12, 16) bytes, sign-extended if `SEXT`.
fn ds_read<const BYTES: usize, const SEXT: bool>(c: &mut Ctx<'_>, i: &Inst) -> R {
    let a = addrs(c, i, i.imm & 0xffff);
    let exec = c.w.exec();
    let nd = BYTES.div_ceil(4);
    let mut vals = [[0u32; LANES]; 4];
    for l in 0..LANES {
        if exec >> l & 1 == 0 {
            continue;
        }
        let mut b = [0u8; 16];
        read(c.lds, a[l], &mut b[..BYTES]);
        if SEXT && BYTES < 4 && b[BYTES - 1] & 0x80 != 0 {
            b[BYTES..4].fill(0xff);
        }
        for k in 0..nd {
            vals[k][l] = u32::from_le_bytes([b[4 * k], b[4 * k + 1], b[4 * k + 2], b[4 * k + 3]]);
        }
    }
    let d = dst_reg(c, i);
    put(c, d, &vals[..nd]);
    Ok(())
}

/// A 1- or 2-byte load into one half of the destination, keeping the other.
fn ds_read_d16<const BYTES: usize, const SEXT: bool, const HI: bool>(
    c: &mut Ctx<'_>,
    i: &Inst,
) -> R {
    let a = addrs(c, i, i.imm & 0xffff);
    let exec = c.w.exec();
    let d = dst_reg(c, i);
    let old = *c.w.v(d);
    let mut v = old;
    for l in 0..LANES {
        if exec >> l & 1 == 0 {
            continue;
        }
        let mut b = [0u8; 2];
        read(c.lds, a[l], &mut b[..BYTES]);
        let mut x = u32::from(u16::from_le_bytes(b));
        if BYTES == 1 && SEXT {
            x = u32::from(b[0] as i8 as i16 as u16);
        }
        v[l] = if HI {
            (old[l] & 0xffff) | x << 16
        } else {
            (old[l] & 0xffff_0000) | x
        };
    }
    put(c, d, &[v]);
    Ok(())
}

/// A store of `BYTES` bytes from DATA0 (the high half of it with `HI`).
fn ds_write<const BYTES: usize, const HI: bool>(c: &mut Ctx<'_>, i: &Inst) -> R {
    let a = addrs(c, i, i.imm & 0xffff);
    let exec = c.w.exec();
    let dr = c.data_reg(i, i.src[1]);
    let nd = BYTES.div_ceil(4);
    let data: [Lanes; 4] =
        std::array::from_fn(|k| if k < nd { *c.w.v(dr + k) } else { [0; LANES] });
    for l in 0..LANES {
        if exec >> l & 1 == 0 {
            continue;
        }
        let mut b = [0u8; 16];
        for k in 0..nd {
            let x = if HI { data[k][l] >> 16 } else { data[k][l] };
            b[4 * k..4 * k + 4].copy_from_slice(&x.to_le_bytes());
        }
        write(c.lds, a[l], &b[..BYTES]);
    }
    Ok(())
}

/// read2: two loads of `4 << W64` bytes at offset0 and offset1 (x 64 with ST64).
fn ds_read2<const W64: bool, const ST64: bool>(c: &mut Ctx<'_>, i: &Inst) -> R {
    let size = if W64 { 8u64 } else { 4 };
    let scale = if ST64 { size * 64 } else { size };
    let base = addrs(c, i, 0);
    let exec = c.w.exec();
    let nd = if W64 { 4 } else { 2 };
    let mut vals = [[0u32; LANES]; 4];
    for l in 0..LANES {
        if exec >> l & 1 == 0 {
            continue;
        }
        for (h, off) in [(0, i.imm & 0xff), (1, (i.imm >> 8) & 0xff)] {
            let a = base[l] + u64::from(off) * scale;
            if W64 {
                let v = read_u64(c.lds, a);
                vals[2 * h][l] = v as u32;
                vals[2 * h + 1][l] = (v >> 32) as u32;
            } else {
                vals[h][l] = read_u32(c.lds, a);
            }
        }
    }
    let d = dst_reg(c, i);
    put(c, d, &vals[..nd]);
    Ok(())
}

/// write2: DATA0 at offset0 and DATA1 at offset1 (x 64 with ST64).
fn ds_write2<const W64: bool, const ST64: bool>(c: &mut Ctx<'_>, i: &Inst) -> R {
    let size = if W64 { 8u64 } else { 4 };
    let scale = if ST64 { size * 64 } else { size };
    let base = addrs(c, i, 0);
    let exec = c.w.exec();
    let d0 = c.data_reg(i, i.src[1]);
    let d1 = c.data_reg(i, i.src[2]);
    let n = if W64 { 2 } else { 1 };
    let data: [[Lanes; 2]; 2] = [
        [*c.w.v(d0), if n == 2 { *c.w.v(d0 + 1) } else { [0; LANES] }],
        [*c.w.v(d1), if n == 2 { *c.w.v(d1 + 1) } else { [0; LANES] }],
    ];
    for l in 0..LANES {
        if exec >> l & 1 == 0 {
            continue;
        }
        for (h, off) in [(0usize, i.imm & 0xff), (1, (i.imm >> 8) & 0xff)] {
            let a = base[l] + u64::from(off) * scale;
            if W64 {
                let v = u64::from(data[h][0][l]) | u64::from(data[h][1][l]) << 32;
                write(c.lds, a, &v.to_le_bytes());
            } else {
                write(c.lds, a, &data[h][0][l].to_le_bytes());
            }
        }
    }
    Ok(())
}

/// A 32-bit atomic; DS data order: DATA0 is the operand (the compare value for cmpst), DATA1
/// the second operand (the new value for cmpst, the or-value for mskor).
fn ds_atomic32<const OP: u8, const RTN: bool>(c: &mut Ctx<'_>, i: &Inst) -> R {
    let a = addrs(c, i, i.imm & 0xffff);
    let exec = c.w.exec();
    let d0 = *c.w.v(c.data_reg(i, i.src[1]));
    let d1 = *c.w.v(c.data_reg(i, i.src[2]));
    let mut ret = [0u32; LANES];
    for l in 0..LANES {
        if exec >> l & 1 == 0 {
            continue;
        }
        let old = read_u32(c.lds, a[l]);
        let new = if OP == op::CMPSWAP {
            atom::apply::<u32>(op::CMPSWAP, old, d1[l], d0[l])
        } else {
            atom::apply::<u32>(OP, old, d0[l], d1[l])
        };
        write(c.lds, a[l], &new.to_le_bytes());
        ret[l] = old;
    }
    if RTN {
        let d = dst_reg(c, i);
        put(c, d, &[ret]);
    }
    Ok(())
}

/// A 64-bit atomic, operands as in [`ds_atomic32`] but register pairs.
fn ds_atomic64<const OP: u8, const RTN: bool>(c: &mut Ctx<'_>, i: &Inst) -> R {
    let a = addrs(c, i, i.imm & 0xffff);
    let exec = c.w.exec();
    let r0 = c.data_reg(i, i.src[1]);
    let r1 = c.data_reg(i, i.src[2]);
    let pair = |c: &Ctx<'_>, r: usize| -> [u64; LANES] {
        let (lo, hi) = (c.w.v(r), c.w.v(r + 1));
        std::array::from_fn(|l| u64::from(lo[l]) | u64::from(hi[l]) << 32)
    };
    let d0 = pair(c, r0);
    let d1 = pair(c, r1);
    let mut lo = [0u32; LANES];
    let mut hi = [0u32; LANES];
    for l in 0..LANES {
        if exec >> l & 1 == 0 {
            continue;
        }
        let old = read_u64(c.lds, a[l]);
        let new = if OP == op::CMPSWAP {
            atom::apply::<u64>(op::CMPSWAP, old, d1[l], d0[l])
        } else {
            atom::apply::<u64>(OP, old, d0[l], d1[l])
        };
        write(c.lds, a[l], &new.to_le_bytes());
        lo[l] = old as u32;
        hi[l] = (old >> 32) as u32;
    }
    if RTN {
        let d = dst_reg(c, i);
        put(c, d, &[lo, hi]);
    }
    Ok(())
}

fn ds_swizzle(c: &mut Ctx<'_>, i: &Inst) -> R {
    let exec = c.w.exec();
    let src = *c.w.v(c.data_reg(i, i.src[0]));
    let off = i.imm & 0xffff;
    let mut out = [0u32; LANES];
    for l in 0..LANES {
        let s = if off & 0x8000 != 0 {
            (l & !3) + ((off >> (2 * (l & 3))) & 3) as usize
        } else {
            let and = (off & 0x1f) as usize;
            let or = ((off >> 5) & 0x1f) as usize;
            let xor = ((off >> 10) & 0x1f) as usize;
            (l & 32) + ((((l & 31) & and) | or) ^ xor)
        };
        out[l] = if exec >> s & 1 != 0 { src[s] } else { 0 };
    }
    let d = dst_reg(c, i);
    put(c, d, &[out]);
    Ok(())
}

/// ds_permute_b32 (`BACK` false: lane l sends DATA0 to lane addr/4) and ds_bpermute_b32 (lane
/// l reads DATA0 of lane addr/4).
fn ds_permute<const BACK: bool>(c: &mut Ctx<'_>, i: &Inst) -> R {
    let exec = c.w.exec();
    let a = addrs(c, i, i.imm & 0xffff);
    let data = *c.w.v(c.data_reg(i, i.src[1]));
    let mut out = [0u32; LANES];
    for l in 0..LANES {
        if exec >> l & 1 == 0 {
            continue;
        }
        let t = ((a[l] / 4) % 64) as usize;
        if BACK {
            out[l] = if exec >> t & 1 != 0 { data[t] } else { 0 };
        } else {
            out[t] = data[l];
        }
    }
    let d = dst_reg(c, i);
    put(c, d, &[out]);
    Ok(())
}
