//! Vector compares (VOPC, and their VOP3 forms): a lane mask to VCC or an SGPR pair, and for
//! `v_cmpx_*` to EXEC as well.

use crate::decode::Inst;
use crate::exec::Ctx;
use crate::float;
use crate::table::{row, Encoding, OpDef, Ty};
use crate::valu::{den32, den64, R};
use crate::wave::{Lanes, LANES};

/// The 16 conditions by their code: f, lt, eq, le, gt, lg, ge, o, u, nge, nlg, ngt, nle, neq,
/// nlt, tru. The integer compares are the first 8, named f, lt, eq, le, gt, ne, ge, t: on values
/// that are always ordered, lg is ne and o is t. The negated ones are true for unordered (NaN)
/// operands: written as negations on purpose.
#[inline(always)]
#[allow(clippy::neg_cmp_op_on_partial_ord)]
fn cond<const C: u8, T: PartialOrd>(a: T, b: T) -> bool {
    match C {
        0 => false,
        1 => a < b,
        2 => a == b,
        3 => a <= b,
        4 => a > b,
        5 => a.partial_cmp(&b).is_some_and(|o| o.is_ne()),
        6 => a >= b,
        7 => a.partial_cmp(&b).is_some(),
        8 => a.partial_cmp(&b).is_none(),
        9 => !(a >= b),
        10 => a.partial_cmp(&b).is_none_or(|o| o.is_eq()),
        11 => !(a > b),
        12 => !(a <= b),
        13 => a != b,
        14 => !(a < b),
        _ => true,
    }
}

/// Writes a compare's lane mask: to SDST, and to EXEC for cmpx.
fn finish(c: &mut Ctx<'_>, i: &Inst, m: u64, cmpx: bool) -> R {
    let m = m & c.wmask;
    c.set_s64(i.sdst, m);
    if cmpx {
        c.w.set_exec(m);
    }
    Ok(())
}

#[inline(always)]
fn lanes_mask(f: impl Fn(usize) -> bool) -> u64 {
    let mut m = 0u64;
    for l in 0..LANES {
        m |= u64::from(f(l)) << l;
    }
    m
}

fn flush_lanes32(c: &Ctx<'_>, v: &mut Lanes) {
    if den32(c).flush_in {
        for x in v.iter_mut() {
            *x = float::flush32(*x);
        }
    }
}

fn cmp_f32<const C: u8, const X: bool>(c: &mut Ctx<'_>, i: &Inst) -> R {
    let mut a = c.src32(i, 0);
    let mut b = c.src32(i, 1);
    flush_lanes32(c, &mut a);
    flush_lanes32(c, &mut b);
    let m = lanes_mask(|l| {
        cond::<C, f64>(
            f64::from(f32::from_bits(a[l])),
            f64::from(f32::from_bits(b[l])),
        )
    });
    finish(c, i, m, X)
}

fn cmp_f16<const C: u8, const X: bool>(c: &mut Ctx<'_>, i: &Inst) -> R {
    let a = c.src32(i, 0);
    let b = c.src32(i, 1);
    let m =
        lanes_mask(|l| cond::<C, f64>(f64::from(float::h2f(a[l])), f64::from(float::h2f(b[l]))));
    finish(c, i, m, X)
}

fn cmp_f64<const C: u8, const X: bool>(c: &mut Ctx<'_>, i: &Inst) -> R {
    let mut a = c.src64(i, 0);
    let mut b = c.src64(i, 1);
    if den64(c).flush_in {
        for x in a.iter_mut().chain(b.iter_mut()) {
            *x = float::flush64(*x);
        }
    }
    let m = lanes_mask(|l| cond::<C, f64>(f64::from_bits(a[l]), f64::from_bits(b[l])));
    finish(c, i, m, X)
}

/// An integer compare: its name, the width of the sources read, the type compared, and how a
/// source's bits become that type.
macro_rules! int_cmp {
    ($name:ident, $src:ident, $t:ty, $conv:expr) => {
        fn $name<const C: u8, const X: bool>(c: &mut Ctx<'_>, i: &Inst) -> R {
            let a = c.$src(i, 0);
            let b = c.$src(i, 1);
            let conv = $conv;
            let m = lanes_mask(|l| cond::<C, $t>(conv(a[l]), conv(b[l])));
            finish(c, i, m, X)
        }
    };
}

int_cmp!(cmp_i32, src32, i32, |x: u32| x as i32);
int_cmp!(cmp_u32, src32, u32, |x: u32| x);
int_cmp!(cmp_i16, src32, i16, |x: u32| x as u16 as i16);
int_cmp!(cmp_u16, src32, u16, |x: u32| x as u16);
int_cmp!(cmp_i64, src64, i64, |x: u64| x as i64);
int_cmp!(cmp_u64, src64, u64, |x: u64| x);

fn class_f32<const X: bool>(c: &mut Ctx<'_>, i: &Inst) -> R {
    let a = c.src32(i, 0);
    let b = c.src32(i, 1);
    let m = lanes_mask(|l| {
        let x = f32::from_bits(a[l]);
        float::class64(f64::from(x), a[l] & 0x0040_0000 != 0, b[l])
    });
    finish(c, i, m, X)
}

fn class_f64<const X: bool>(c: &mut Ctx<'_>, i: &Inst) -> R {
    let a = c.src64(i, 0);
    let b = c.src32(i, 1);
    let m = lanes_mask(|l| float::class64(f64::from_bits(a[l]), a[l] & (1 << 51) != 0, b[l]));
    finish(c, i, m, X)
}

fn class_f16<const X: bool>(c: &mut Ctx<'_>, i: &Inst) -> R {
    let a = c.src32(i, 0);
    let b = c.src32(i, 1);
    let m = lanes_mask(|l| {
        let h = a[l] & 0xffff;
        let sub = h & 0x7c00 == 0 && h & 0x3ff != 0;
        // A half denormal is a normal f32: classify it by its half bits.
        let cls = if sub {
            if h & 0x8000 != 0 {
                4
            } else {
                7
            }
        } else {
            let x = f64::from(float::h2f(h));
            (0..10)
                .find(|k| float::class64(x, h & 0x200 != 0, 1 << k))
                .unwrap_or(0)
        };
        b[l] >> cls & 1 != 0
    });
    finish(c, i, m, X)
}

const T32: [Ty; 4] = [Ty::B64, Ty::F32, Ty::F32, Ty::B32];
const T16: [Ty; 4] = [Ty::B64, Ty::F16, Ty::F16, Ty::B32];
const T64: [Ty; 4] = [Ty::B64, Ty::F64, Ty::F64, Ty::B32];
const TI32: [Ty; 4] = [Ty::B64, Ty::B32, Ty::B32, Ty::B32];
const TI16: [Ty; 4] = [Ty::B64, Ty::B16, Ty::B16, Ty::B32];
const TI64: [Ty; 4] = [Ty::B64, Ty::I64, Ty::I64, Ty::B32];
const TU64: [Ty; 4] = [Ty::B64, Ty::B64, Ty::B64, Ty::B32];
const TC32: [Ty; 4] = [Ty::B64, Ty::F32, Ty::B32, Ty::B32];
const TC16: [Ty; 4] = [Ty::B64, Ty::F16, Ty::B32, Ty::B32];
const TC64: [Ty; 4] = [Ty::B64, Ty::F64, Ty::B32, Ty::B32];

use Encoding::Vopc as VC;

/// The compare rows of one type at `base`: one row per `offset name` pair, the mnemonic made of
/// the prefix, the predicate's name and the type, the predicate's number its offset.
macro_rules! cmp_rows {
    ($base:expr, $f:ident, $t:expr, $x:expr, $p:expr, $ty:expr; $($i:literal $n:literal),+) => {
        [$(row(VC, $base + $i, concat!($p, $n, "_", $ty), $f::<$i, $x>, $t, 0)),+]
    };
}

/// The 16 float compares of one type at `base`.
macro_rules! fcmps {
    ($base:expr, $f:ident, $t:expr, $x:expr, $p:expr, $ty:expr) => {
        cmp_rows!($base, $f, $t, $x, $p, $ty;
            0 "f", 1 "lt", 2 "eq", 3 "le", 4 "gt", 5 "lg", 6 "ge", 7 "o",
            8 "u", 9 "nge", 10 "nlg", 11 "ngt", 12 "nle", 13 "neq", 14 "nlt", 15 "tru")
    };
}

/// The 8 integer compares of one type at `base`.
macro_rules! icmps {
    ($base:expr, $f:ident, $ty:ident, $t:expr, $x:expr, $p:expr) => {
        cmp_rows!($base, $f, $t, $x, $p, stringify!($ty);
            0 "f", 1 "lt", 2 "eq", 3 "le", 4 "gt", 5 "ne", 6 "ge", 7 "t")
    };
}

const CLASS: [OpDef; 6] = [
    row(VC, 0x10, "v_cmp_class_f32", class_f32::<false>, TC32, 0),
    row(VC, 0x11, "v_cmpx_class_f32", class_f32::<true>, TC32, 0),
    row(VC, 0x12, "v_cmp_class_f64", class_f64::<false>, TC64, 0),
    row(VC, 0x13, "v_cmpx_class_f64", class_f64::<true>, TC64, 0),
    row(VC, 0x14, "v_cmp_class_f16", class_f16::<false>, TC16, 0),
    row(VC, 0x15, "v_cmpx_class_f16", class_f16::<true>, TC16, 0),
];

const F16C: [OpDef; 16] = fcmps!(0x20, cmp_f16, T16, false, "v_cmp_", "f16");
const F16X: [OpDef; 16] = fcmps!(0x30, cmp_f16, T16, true, "v_cmpx_", "f16");
const F32C: [OpDef; 16] = fcmps!(0x40, cmp_f32, T32, false, "v_cmp_", "f32");
const F32X: [OpDef; 16] = fcmps!(0x50, cmp_f32, T32, true, "v_cmpx_", "f32");
const F64C: [OpDef; 16] = fcmps!(0x60, cmp_f64, T64, false, "v_cmp_", "f64");
const F64X: [OpDef; 16] = fcmps!(0x70, cmp_f64, T64, true, "v_cmpx_", "f64");
const I16C: [OpDef; 8] = icmps!(0xa0, cmp_i16, i16, TI16, false, "v_cmp_");
const U16C: [OpDef; 8] = icmps!(0xa8, cmp_u16, u16, TI16, false, "v_cmp_");
const I16X: [OpDef; 8] = icmps!(0xb0, cmp_i16, i16, TI16, true, "v_cmpx_");
const U16X: [OpDef; 8] = icmps!(0xb8, cmp_u16, u16, TI16, true, "v_cmpx_");
const I32C: [OpDef; 8] = icmps!(0xc0, cmp_i32, i32, TI32, false, "v_cmp_");
const U32C: [OpDef; 8] = icmps!(0xc8, cmp_u32, u32, TI32, false, "v_cmp_");
const I32X: [OpDef; 8] = icmps!(0xd0, cmp_i32, i32, TI32, true, "v_cmpx_");
const U32X: [OpDef; 8] = icmps!(0xd8, cmp_u32, u32, TI32, true, "v_cmpx_");
const I64C: [OpDef; 8] = icmps!(0xe0, cmp_i64, i64, TI64, false, "v_cmp_");
const U64C: [OpDef; 8] = icmps!(0xe8, cmp_u64, u64, TU64, false, "v_cmp_");
const I64X: [OpDef; 8] = icmps!(0xf0, cmp_i64, i64, TI64, true, "v_cmpx_");
const U64X: [OpDef; 8] = icmps!(0xf8, cmp_u64, u64, TU64, true, "v_cmpx_");

static ALL: [OpDef; 198] = crate::table::concat(&[
    &CLASS, &F16C, &F16X, &F32C, &F32X, &F64C, &F64X, &I16C, &U16C, &I16X, &U16X, &I32C, &U32C,
    &I32X, &U32X, &I64C, &U64C, &I64X, &U64X,
]);

/// VOPC opcodes (also VOP3 opcodes 0x00..0xff).
pub(crate) static VOPC: &[OpDef] = &ALL;
