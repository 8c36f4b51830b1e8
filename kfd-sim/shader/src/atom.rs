//! The arithmetic of atomic operations, shared by LDS and global/flat/buffer atomics.

/// An atomic read-modify-write operation.
pub(crate) mod op {
    pub(crate) const SWAP: u8 = 0;
    pub(crate) const CMPSWAP: u8 = 1;
    pub(crate) const ADD: u8 = 2;
    pub(crate) const SUB: u8 = 3;
    pub(crate) const RSUB: u8 = 4;
    pub(crate) const SMIN: u8 = 5;
    pub(crate) const UMIN: u8 = 6;
    pub(crate) const SMAX: u8 = 7;
    pub(crate) const UMAX: u8 = 8;
    pub(crate) const AND: u8 = 9;
    pub(crate) const OR: u8 = 10;
    pub(crate) const XOR: u8 = 11;
    pub(crate) const INC: u8 = 12;
    pub(crate) const DEC: u8 = 13;
    pub(crate) const MSKOR: u8 = 14;
    pub(crate) const FADD: u8 = 15;
    pub(crate) const FMIN: u8 = 16;
    pub(crate) const FMAX: u8 = 17;
    /// Two f16 adds in one dword.
    pub(crate) const PK_FADD16: u8 = 18;
}

/// What the atomic arithmetic needs of a 32- or 64-bit word.
pub(crate) trait Word:
    Copy
    + Ord
    + std::ops::BitAnd<Output = Self>
    + std::ops::BitOr<Output = Self>
    + std::ops::BitXor<Output = Self>
    + std::ops::Not<Output = Self>
{
    const ZERO: Self;
    const ONE: Self;
    fn wrapping_add(self, o: Self) -> Self;
    fn wrapping_sub(self, o: Self) -> Self;
    /// Signed min/max of the bit patterns.
    fn smin(self, o: Self) -> Self;
    fn smax(self, o: Self) -> Self;
    /// Float add/min/max of the bit patterns (f32 or f64).
    fn fadd(self, o: Self) -> Self;
    fn fmin(self, o: Self) -> Self;
    fn fmax(self, o: Self) -> Self;
    /// Two f16 adds in one dword (32-bit only; 64-bit words are returned unchanged).
    fn pk_fadd16(self, o: Self) -> Self;
}

impl Word for u32 {
    const ZERO: Self = 0;
    const ONE: Self = 1;
    fn wrapping_add(self, o: Self) -> Self {
        u32::wrapping_add(self, o)
    }
    fn wrapping_sub(self, o: Self) -> Self {
        u32::wrapping_sub(self, o)
    }
    fn smin(self, o: Self) -> Self {
        (self as i32).min(o as i32) as u32
    }
    fn smax(self, o: Self) -> Self {
        (self as i32).max(o as i32) as u32
    }
    fn fadd(self, o: Self) -> Self {
        (f32::from_bits(self) + f32::from_bits(o)).to_bits()
    }
    fn fmin(self, o: Self) -> Self {
        f32::from_bits(self).min(f32::from_bits(o)).to_bits()
    }
    fn fmax(self, o: Self) -> Self {
        f32::from_bits(self).max(f32::from_bits(o)).to_bits()
    }
    fn pk_fadd16(self, o: Self) -> Self {
        let h = crate::float::h2f;
        let lo = crate::float::f2h(h(self) + h(o));
        let hi = crate::float::f2h(h(self >> 16) + h(o >> 16));
        lo | hi << 16
    }
}

impl Word for u64 {
    const ZERO: Self = 0;
    const ONE: Self = 1;
    fn wrapping_add(self, o: Self) -> Self {
        u64::wrapping_add(self, o)
    }
    fn wrapping_sub(self, o: Self) -> Self {
        u64::wrapping_sub(self, o)
    }
    fn smin(self, o: Self) -> Self {
        (self as i64).min(o as i64) as u64
    }
    fn smax(self, o: Self) -> Self {
        (self as i64).max(o as i64) as u64
    }
    fn fadd(self, o: Self) -> Self {
        (f64::from_bits(self) + f64::from_bits(o)).to_bits()
    }
    fn fmin(self, o: Self) -> Self {
        f64::from_bits(self).min(f64::from_bits(o)).to_bits()
    }
    fn fmax(self, o: Self) -> Self {
        f64::from_bits(self).max(f64::from_bits(o)).to_bits()
    }
    fn pk_fadd16(self, _o: Self) -> Self {
        self
    }
}

/// The new value of `old` under `op` with data `d` (and `cmp`: for CMPSWAP the value compared
/// with, for MSKOR the value or-ed in).
#[inline]
pub(crate) fn apply<T: Word>(op: u8, old: T, d: T, cmp: T) -> T {
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
        op::SMIN => old.smin(d),
        op::UMIN => old.min(d),
        op::SMAX => old.smax(d),
        op::UMAX => old.max(d),
        op::AND => old & d,
        op::OR => old | d,
        op::XOR => old ^ d,
        op::INC => {
            if old >= d {
                T::ZERO
            } else {
                old.wrapping_add(T::ONE)
            }
        }
        op::DEC => {
            if old == T::ZERO || old > d {
                d
            } else {
                old.wrapping_sub(T::ONE)
            }
        }
        op::MSKOR => (old & !d) | cmp,
        op::FADD => old.fadd(d),
        op::FMIN => old.fmin(d),
        op::FMAX => old.fmax(d),
        op::PK_FADD16 => old.pk_fadd16(d),
        _ => old,
    }
}

/// [`apply`] on the low 32 bits, or all 64 when `wide`.
#[inline]
pub(crate) fn apply_width(op: u8, wide: bool, old: u64, d: u64, cmp: u64) -> u64 {
    if wide {
        apply::<u64>(op, old, d, cmp)
    } else {
        u64::from(apply::<u32>(op, old as u32, d as u32, cmp as u32))
    }
}
