//! The arithmetic of atomic operations, shared by LDS and global/flat/buffer atomics.

/// An atomic read-modify-write operation.
pub(crate) mod op {
    pub const SWAP: u8 = 0;
    pub const CMPSWAP: u8 = 1;
    pub const ADD: u8 = 2;
    pub const SUB: u8 = 3;
    pub const RSUB: u8 = 4;
    pub const SMIN: u8 = 5;
    pub const UMIN: u8 = 6;
    pub const SMAX: u8 = 7;
    pub const UMAX: u8 = 8;
    pub const AND: u8 = 9;
    pub const OR: u8 = 10;
    pub const XOR: u8 = 11;
    pub const INC: u8 = 12;
    pub const DEC: u8 = 13;
    pub const MSKOR: u8 = 14;
    pub const FADD: u8 = 15;
    pub const FMIN: u8 = 16;
    pub const FMAX: u8 = 17;
    /// Two f16 adds in one dword.
    pub const PK_FADD16: u8 = 18;
}

/// The new 32-bit value of `old` under `op` with data `d` (and `cmp`, for CMPSWAP the value
/// compared with, for MSKOR the value or-ed in).
#[inline]
pub(crate) fn apply32(op: u8, old: u32, d: u32, cmp: u32) -> u32 {
    match op {
        op::SWAP => d,
        op::CMPSWAP => {
            if old == cmp {
                d
            } else {
                old
            }
        }
        op::ADD => old.wrapping_add(d),
        op::SUB => old.wrapping_sub(d),
        op::RSUB => d.wrapping_sub(old),
        op::SMIN => (old as i32).min(d as i32) as u32,
        op::UMIN => old.min(d),
        op::SMAX => (old as i32).max(d as i32) as u32,
        op::UMAX => old.max(d),
        op::AND => old & d,
        op::OR => old | d,
        op::XOR => old ^ d,
        op::INC => {
            if old >= d {
                0
            } else {
                old + 1
            }
        }
        op::DEC => {
            if old == 0 || old > d {
                d
            } else {
                old - 1
            }
        }
        op::MSKOR => (old & !d) | cmp,
        op::FADD => (f32::from_bits(old) + f32::from_bits(d)).to_bits(),
        op::FMIN => f32::from_bits(old).min(f32::from_bits(d)).to_bits(),
        op::FMAX => f32::from_bits(old).max(f32::from_bits(d)).to_bits(),
        op::PK_FADD16 => {
            let h = |x: u32| crate::float::h2f(x);
            let lo = crate::float::f2h(h(old) + h(d));
            let hi = crate::float::f2h(h(old >> 16) + h(d >> 16));
            lo | hi << 16
        }
        _ => old,
    }
}

/// The new 64-bit value of `old` under `op`.
#[inline]
pub(crate) fn apply64(op: u8, old: u64, d: u64, cmp: u64) -> u64 {
    match op {
        op::SWAP => d,
        op::CMPSWAP => {
            if old == cmp {
                d
            } else {
                old
            }
        }
        op::ADD => old.wrapping_add(d),
        op::SUB => old.wrapping_sub(d),
        op::RSUB => d.wrapping_sub(old),
        op::SMIN => (old as i64).min(d as i64) as u64,
        op::UMIN => old.min(d),
        op::SMAX => (old as i64).max(d as i64) as u64,
        op::UMAX => old.max(d),
        op::AND => old & d,
        op::OR => old | d,
        op::XOR => old ^ d,
        op::INC => {
            if old >= d {
                0
            } else {
                old + 1
            }
        }
        op::DEC => {
            if old == 0 || old > d {
                d
            } else {
                old - 1
            }
        }
        op::MSKOR => (old & !d) | cmp,
        op::FADD => (f64::from_bits(old) + f64::from_bits(d)).to_bits(),
        op::FMIN => f64::from_bits(old).min(f64::from_bits(d)).to_bits(),
        op::FMAX => f64::from_bits(old).max(f64::from_bits(d)).to_bits(),
        _ => old,
    }
}
