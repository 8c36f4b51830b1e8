//! Matrix instructions (MFMA) and the accumulation registers, on hand-assembled words (as Debian's
//! llvm-mc-15 -mcpu=gfx90a -show-encoding prints them, the assembly beside each): every gfx90a
//! form against a CPU reference on small integers (every sum exact), the CBSZ/ABID and BLGP
//! modifiers, sources and destinations in AGPRs and VGPRs, the rounding and denormal rules, and
//! a wave saved and restored between matrix instructions.
//!
//! The layouts below are written from the element to its register and lane, as AMD's ISA
//! reference and its matrix instruction calculator state them for CDNA2.

#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss,
    clippy::unwrap_used
)] // test code

use half::f16;
use kfd_shader::testmem::{Args, FlatMemory, Rig};
use kfd_shader::{
    decode, run_dispatch, Apertures, Dispatch, Executor, NoClock, Stop, Wave, Workgroup, LANES,
};
use rstest::rstest;

const CODE: u64 = 0x1000;
const S_ENDPGM: u32 = 0xbf81_0000;

/// The wave's unified file: v0..v63, then a0..a63 from ACCUM_OFFSET 64.
const VGPRS: usize = 128;
const ACC: usize = 64;

/// Every encoding used below: (assembly, words).
const ENCODINGS: &[(&str, &[u32])] = &[
    (
        "v_mfma_f32_32x32x1f32 a[0:31], v0, v2, a[0:31]",
        &[0xd3c0_8000, 0x0402_0500],
    ),
    (
        "v_mfma_f32_16x16x1f32 a[0:15], v0, v2, a[0:15]",
        &[0xd3c1_8000, 0x0402_0500],
    ),
    (
        "v_mfma_f32_4x4x1f32 a[0:3], v0, v2, a[0:3]",
        &[0xd3c2_8000, 0x0402_0500],
    ),
    (
        "v_mfma_f32_32x32x2f32 a[0:15], v0, v2, a[0:15]",
        &[0xd3c4_8000, 0x0402_0500],
    ),
    (
        "v_mfma_f32_16x16x4f32 a[0:3], v0, v2, a[0:3]",
        &[0xd3c5_8000, 0x0402_0500],
    ),
    (
        "v_mfma_f32_32x32x4f16 a[0:31], v[0:1], v[2:3], a[0:31]",
        &[0xd3c8_8000, 0x0402_0500],
    ),
    (
        "v_mfma_f32_16x16x4f16 a[0:15], v[0:1], v[2:3], a[0:15]",
        &[0xd3c9_8000, 0x0402_0500],
    ),
    (
        "v_mfma_f32_4x4x4f16 a[0:3], v[0:1], v[2:3], a[0:3]",
        &[0xd3ca_8000, 0x0402_0500],
    ),
    (
        "v_mfma_f32_32x32x8f16 a[0:15], v[0:1], v[2:3], a[0:15]",
        &[0xd3cc_8000, 0x0402_0500],
    ),
    (
        "v_mfma_f32_16x16x16f16 a[0:3], v[0:1], v[2:3], a[0:3]",
        &[0xd3cd_8000, 0x0402_0500],
    ),
    (
        "v_mfma_i32_32x32x4i8 a[0:31], v0, v2, a[0:31]",
        &[0xd3d0_8000, 0x0402_0500],
    ),
    (
        "v_mfma_i32_16x16x4i8 a[0:15], v0, v2, a[0:15]",
        &[0xd3d1_8000, 0x0402_0500],
    ),
    (
        "v_mfma_i32_4x4x4i8 a[0:3], v0, v2, a[0:3]",
        &[0xd3d2_8000, 0x0402_0500],
    ),
    (
        "v_mfma_i32_32x32x8i8 a[0:15], v0, v2, a[0:15]",
        &[0xd3d4_8000, 0x0402_0500],
    ),
    (
        "v_mfma_i32_16x16x16i8 a[0:3], v0, v2, a[0:3]",
        &[0xd3d5_8000, 0x0402_0500],
    ),
    (
        "v_mfma_f32_32x32x4bf16_1k a[0:31], v[0:1], v[2:3], a[0:31]",
        &[0xd3e3_8000, 0x0402_0500],
    ),
    (
        "v_mfma_f32_16x16x4bf16_1k a[0:15], v[0:1], v[2:3], a[0:15]",
        &[0xd3e4_8000, 0x0402_0500],
    ),
    (
        "v_mfma_f32_4x4x4bf16_1k a[0:3], v[0:1], v[2:3], a[0:3]",
        &[0xd3e5_8000, 0x0402_0500],
    ),
    (
        "v_mfma_f32_32x32x8bf16_1k a[0:15], v[0:1], v[2:3], a[0:15]",
        &[0xd3e6_8000, 0x0402_0500],
    ),
    (
        "v_mfma_f32_16x16x16bf16_1k a[0:3], v[0:1], v[2:3], a[0:3]",
        &[0xd3e7_8000, 0x0402_0500],
    ),
    (
        "v_mfma_f32_32x32x2bf16 a[0:31], v0, v2, a[0:31]",
        &[0xd3e8_8000, 0x0402_0500],
    ),
    (
        "v_mfma_f32_16x16x2bf16 a[0:15], v0, v2, a[0:15]",
        &[0xd3e9_8000, 0x0402_0500],
    ),
    (
        "v_mfma_f32_4x4x2bf16 a[0:3], v0, v2, a[0:3]",
        &[0xd3eb_8000, 0x0402_0500],
    ),
    (
        "v_mfma_f32_32x32x4bf16 a[0:15], v0, v2, a[0:15]",
        &[0xd3ec_8000, 0x0402_0500],
    ),
    (
        "v_mfma_f32_16x16x8bf16 a[0:3], v0, v2, a[0:3]",
        &[0xd3ed_8000, 0x0402_0500],
    ),
    (
        "v_mfma_f64_16x16x4f64 a[0:7], v[0:1], v[2:3], a[0:7]",
        &[0xd3ee_8000, 0x0402_0500],
    ),
    (
        "v_mfma_f64_4x4x4f64 a[0:1], v[0:1], v[2:3], a[0:1]",
        &[0xd3ef_8000, 0x0402_0500],
    ),
    (
        "v_mfma_f32_32x32x2f32 v[8:23], v0, v2, v[8:23]",
        &[0xd3c4_0008, 0x0422_0500],
    ),
    (
        "v_mfma_f32_32x32x2f32 v[8:23], a32, a33, v[8:23]",
        &[0xd3c4_0008, 0x1c22_4320],
    ),
    (
        "v_mfma_f32_32x32x2f32 a[0:15], a32, v2, a[16:31]",
        &[0xd3c4_8000, 0x0c42_0520],
    ),
    (
        "v_mfma_f32_32x32x2f32 a[16:31], v0, v2, a[0:15]",
        &[0xd3c4_8010, 0x0402_0500],
    ),
    (
        "v_mfma_f32_32x32x2f32 a[0:15], v0, v2, 1.0",
        &[0xd3c4_8000, 0x03ca_0500],
    ),
    (
        "v_mfma_f64_16x16x4f64 v[8:15], v[0:1], a[32:33], v[8:15]",
        &[0xd3ee_0008, 0x1422_4100],
    ),
    (
        "v_mfma_f64_16x16x4f64 a[0:7], v[0:1], v[2:3], 1.0",
        &[0xd3ee_8000, 0x03ca_0500],
    ),
    (
        "v_mfma_i32_16x16x16i8 v[8:11], a32, a33, v[8:11]",
        &[0xd3d5_0008, 0x1c22_4320],
    ),
    (
        "v_mfma_i32_32x32x8i8 a[0:15], v0, v2, -1",
        &[0xd3d4_8000, 0x0306_0500],
    ),
    (
        "v_mfma_f32_4x4x1f32 a[0:3], v0, v2, a[0:3] cbsz:2 abid:1",
        &[0xd3c2_8a00, 0x0402_0500],
    ),
    (
        "v_mfma_f32_4x4x1f32 a[0:3], v0, v2, a[0:3] cbsz:4 abid:13",
        &[0xd3c2_ec00, 0x0402_0500],
    ),
    (
        "v_mfma_f32_32x32x1f32 a[0:31], v0, v2, a[0:31] cbsz:1 abid:1",
        &[0xd3c0_8900, 0x0402_0500],
    ),
    (
        "v_mfma_f32_16x16x4f16 a[0:15], v[0:1], v[2:3], a[0:15] cbsz:2 abid:3",
        &[0xd3c9_9a00, 0x0402_0500],
    ),
    (
        "v_mfma_i32_4x4x4i8 a[0:3], v0, v2, a[0:3] cbsz:3 abid:5",
        &[0xd3d2_ab00, 0x0402_0500],
    ),
    (
        "v_mfma_f32_32x32x2f32 a[0:15], v0, v2, a[0:15] blgp:1",
        &[0xd3c4_8000, 0x2402_0500],
    ),
    (
        "v_mfma_f32_32x32x2f32 a[0:15], v0, v2, a[0:15] blgp:2",
        &[0xd3c4_8000, 0x4402_0500],
    ),
    (
        "v_mfma_f32_32x32x2f32 a[0:15], v0, v2, a[0:15] blgp:3",
        &[0xd3c4_8000, 0x6402_0500],
    ),
    (
        "v_mfma_f32_32x32x2f32 a[0:15], v0, v2, a[0:15] blgp:4",
        &[0xd3c4_8000, 0x8402_0500],
    ),
    (
        "v_mfma_f32_32x32x2f32 a[0:15], v0, v2, a[0:15] blgp:5",
        &[0xd3c4_8000, 0xa402_0500],
    ),
    (
        "v_mfma_f32_32x32x2f32 a[0:15], v0, v2, a[0:15] blgp:6",
        &[0xd3c4_8000, 0xc402_0500],
    ),
    (
        "v_mfma_f32_32x32x2f32 a[0:15], v0, v2, a[0:15] blgp:7",
        &[0xd3c4_8000, 0xe402_0500],
    ),
    (
        "v_mfma_f32_4x4x4f16 a[0:3], v[0:1], v[2:3], a[0:3] blgp:3",
        &[0xd3ca_8000, 0x6402_0500],
    ),
    (
        "v_mfma_f32_16x16x1f32 a[0:15], v0, v2, a[0:15] cbsz:2 abid:2 blgp:5",
        &[0xd3c1_9200, 0xa402_0500],
    ),
    (
        "v_mfma_f32_4x4x1f32 a[0:3], v0, v2, 0",
        &[0xd3c2_8000, 0x0202_0500],
    ),
    (
        "v_mfma_f32_4x4x4f16 a[0:3], v[0:1], v[2:3], 0",
        &[0xd3ca_8000, 0x0202_0500],
    ),
    (
        "v_mfma_f32_4x4x4bf16_1k a[0:3], v[0:1], v[2:3], 0",
        &[0xd3e5_8000, 0x0202_0500],
    ),
    (
        "v_mfma_f64_4x4x4f64 a[0:1], v[0:1], v[2:3], 0",
        &[0xd3ef_8000, 0x0202_0500],
    ),
    ("v_accvgpr_write_b32 a1, v0", &[0xd3d9_4001, 0x1800_0100]),
    ("v_accvgpr_write_b32 a2, -2.0", &[0xd3d9_4002, 0x1800_00f5]),
    ("v_accvgpr_write_b32 a3, s0", &[0xd3d9_4003, 0x1800_0000]),
    ("v_accvgpr_mov_b32 a4, a1", &[0x7e08_a501]),
    ("v_accvgpr_read_b32 v8, a4", &[0xd3d8_4008, 0x1800_0104]),
];

/// An encoding the assembler refuses ("source 2 operand must not partially overlap with dst"),
/// made by hand: D = a[8:23], C = a[0:15].
const PARTIAL_OVERLAP: (&str, &[u32]) = (
    "v_mfma_f32_32x32x2f32 a[8:23], v0, v2, a[0:15]",
    &[0xd3c4_8008, 0x0402_0500],
);

fn asm(text: &str) -> &'static [u32] {
    if text == PARTIAL_OVERLAP.0 {
        return PARTIAL_OVERLAP.1;
    }
    ENCODINGS
        .iter()
        .find(|(t, _)| *t == text)
        .map(|(_, w)| *w)
        .unwrap_or_else(|| panic!("no encoding for {text}"))
}

fn program(lines: &[&str]) -> Vec<u32> {
    let mut v: Vec<u32> = lines.iter().flat_map(|l| asm(l).iter().copied()).collect();
    v.push(S_ENDPGM);
    v
}

fn new_wave() -> Wave {
    let mut w = Wave::new(0, VGPRS, ACC as u32);
    w.pc = CODE;
    w.set_exec(u64::MAX);
    // IEEE mode; MODE flushes f32 and f16/f64 denormals, which matrix instructions ignore.
    w.mode = 1 << 9;
    w
}

fn memory(code: &[u32]) -> FlatMemory {
    let mut mem = FlatMemory::new();
    assert!(mem.map(CODE, 0x1000, false));
    assert!(mem.write_u32s(CODE, code));
    mem
}

/// Runs `lines` (then s_endpgm) on a wave `w`.
fn run_wave(lines: &[&str], w: Wave) -> Wave {
    let mem = memory(&program(lines));
    let mut wg = Workgroup::from_waves(vec![w], 0, Apertures::KFD_GFX9);
    let out = Executor::new().run(&mut wg, &mem, &NoClock, 1000);
    assert_eq!(out.stop, Stop::Done, "{lines:?}");
    wg.waves.remove(0)
}

#[test]
fn every_encoding_decodes_to_its_mnemonic() {
    for (text, words) in ENCODINGS.iter().chain([&PARTIAL_OVERLAP]) {
        let mut k = 0;
        let inst = decode::decode(CODE, |_| {
            let w = words.get(k).copied().unwrap_or(0);
            k += 1;
            Ok(w)
        })
        .unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(inst.def.name, text.split_whitespace().next().unwrap());
        assert_eq!(usize::from(inst.len), 4 * words.len(), "{text}");
    }
}

/// The element type of A and B (C and D are f32, i32 or f64).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    F32,
    F16,
    Bf16,
    I8,
    F64,
}

/// An MFMA shape: M x N x K with M = N, and its blocks.
#[derive(Debug, Clone, Copy)]
struct Shape {
    m: usize,
    k: usize,
    blocks: usize,
    ty: Ty,
}

const fn sh(m: usize, k: usize, blocks: usize, ty: Ty) -> Shape {
    Shape { m, k, blocks, ty }
}

impl Shape {
    fn bits(self) -> usize {
        match self.ty {
            Ty::F32 => 32,
            Ty::F16 | Ty::Bf16 => 16,
            Ty::I8 => 8,
            Ty::F64 => 64,
        }
    }

    /// Values of k per lane.
    fn kpl(self) -> usize {
        self.k * self.blocks * self.m / LANES
    }

    /// Registers of C and D.
    fn cd_regs(self) -> usize {
        let w = if self.ty == Ty::F64 { 2 } else { 1 };
        self.blocks * self.m * self.m / LANES * w
    }

    /// Where A[b][i][k] (or B[b][k][j], with j for i) is: (register, bit, lane).
    fn ab_place(self, b: usize, i: usize, k: usize) -> (usize, usize, usize) {
        let lane = match (self.ty, self.blocks) {
            // 4x4x4f64: lane 4 x block + 16 x k + i.
            (Ty::F64, 4) => 4 * b + 16 * k + i,
            // One block: k runs across lane groups of M, kpl values a lane.
            (_, 1) => self.m * (k / self.kpl()) + i,
            // Several blocks: a lane group of M per block, all of k in the lane.
            _ => self.m * b + i,
        };
        let bit = (k % self.kpl()) * self.bits();
        (bit / 32, bit % 32, lane)
    }

    /// Where C[b][i][j] and D[b][i][j] are: (register, lane); f64 in a register pair.
    fn cd_place(self, b: usize, i: usize, j: usize) -> (usize, usize) {
        match (self.ty, self.m) {
            (Ty::F64, 16) => (2 * (i / 4), 16 * (i % 4) + j),
            (Ty::F64, _) => (0, 16 * i + 4 * b + j),
            (_, 32) => (16 * b + 4 * (i / 8) + i % 4, 32 * (i / 4 % 2) + j),
            (_, 16) => (4 * b + i % 4, 16 * (i / 4) + j),
            _ => (i, 4 * b + j),
        }
    }

    /// Bits of an A or B element.
    fn enc_ab(self, v: f64) -> u64 {
        match self.ty {
            Ty::F32 => u64::from((v as f32).to_bits()),
            Ty::F16 => u64::from(f16::from_f64(v).to_bits()),
            Ty::Bf16 => u64::from((v as f32).to_bits() >> 16),
            Ty::I8 => u64::from(v as i8 as u8),
            Ty::F64 => v.to_bits(),
        }
    }

    fn dec_ab(self, x: u64) -> f64 {
        match self.ty {
            Ty::F32 => f64::from(f32::from_bits(x as u32)),
            Ty::F16 => f16::from_bits(x as u16).to_f64(),
            Ty::Bf16 => f64::from(f32::from_bits((x as u32) << 16)),
            Ty::I8 => f64::from(x as u8 as i8),
            Ty::F64 => f64::from_bits(x),
        }
    }

    /// Bits of a C or D element.
    fn enc_cd(self, v: f64) -> u64 {
        match self.ty {
            Ty::I8 => u64::from(v as i32 as u32),
            Ty::F64 => v.to_bits(),
            _ => u64::from((v as f32).to_bits()),
        }
    }

    fn dec_cd(self, x: u64) -> f64 {
        match self.ty {
            Ty::I8 => f64::from(x as u32 as i32),
            Ty::F64 => f64::from_bits(x),
            _ => f64::from(f32::from_bits(x as u32)),
        }
    }
}

/// Writes `width` bits of `x` at (unified register, bit, lane), across a pair if need be.
fn put(w: &mut Wave, reg: usize, bit: usize, lane: usize, width: usize, x: u64) {
    let v = u128::from(x & (u64::MAX >> (64 - width))) << bit;
    let mask = (u128::from(u64::MAX >> (64 - width))) << bit;
    for (n, r) in [reg, reg + 1].into_iter().enumerate() {
        let (vw, mw) = ((v >> (32 * n)) as u32, (mask >> (32 * n)) as u32);
        if mw != 0 {
            let cell = &mut w.v_mut(r).unwrap()[lane];
            *cell = *cell & !mw | vw;
        }
    }
}

fn get(w: &Wave, reg: usize, bit: usize, lane: usize, width: usize) -> u64 {
    let both = u64::from(w.v(reg)[lane]) | u64::from(w.v(reg + 1)[lane]) << 32;
    (both >> bit) & (u64::MAX >> (64 - width))
}

/// Small integers that differ from element to element: -3..=3 for A and B, -40..=40 for C.
fn small(seed: usize, spread: u64) -> f64 {
    let h = (seed as u64 ^ 0x9e37).wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40;
    (h % (2 * spread + 1)) as f64 - spread as f64
}

/// Where an instruction's operands are (unified register indices) and its modifiers.
#[derive(Debug, Clone, Copy)]
struct Ops {
    a: usize,
    b: usize,
    /// C's register, or None for an inline constant of value `c_const`.
    c: Option<usize>,
    c_const: f64,
    d: usize,
    cbsz: u32,
    abid: u32,
    blgp: u32,
}

/// The usual operands: A in v0(:1), B in v2(:3), C and D in a0.
const AGPR_CD: Ops = Ops {
    a: 0,
    b: 2,
    c: Some(ACC),
    c_const: 0.0,
    d: ACC,
    cbsz: 0,
    abid: 0,
    blgp: 0,
};

/// The lane B is read from for lane `l` under BLGP.
fn blgp_lane(blgp: u32, l: usize) -> usize {
    match blgp {
        0 => l,
        1 => l % 32,                         // lanes 0-31 to both halves
        2 => 32 + l % 32,                    // lanes 32-63 to both halves
        3 => (l + 16) % 64,                  // rotated down by 16
        q => 16 * (q as usize - 4) + l % 16, // one quarter to all four
    }
}

/// Fills A, B and C with small integers, runs `text`, and checks every element of D against
/// C + A x B computed here (with CBSZ/ABID and BLGP applied as the ISA defines them).
fn check(text: &str, s: Shape, o: Ops) {
    let mut w = new_wave();
    let (m, k, nb, bits) = (s.m, s.k, s.blocks, s.bits());
    let a = |b: usize, i: usize, kk: usize| small(((b * 64 + i) * 64 + kk) * 3 + 1, 3);
    let bm = |b: usize, kk: usize, j: usize| small(((b * 64 + kk) * 64 + j) * 3 + 2, 3);
    let c = |b: usize, i: usize, j: usize| match o.c {
        Some(_) => small(((b * 64 + i) * 64 + j) * 3, 40),
        None => o.c_const,
    };
    for b in 0..nb {
        for x in 0..m {
            for kk in 0..k {
                let (r, bit, lane) = s.ab_place(b, x, kk);
                put(&mut w, o.a + r, bit, lane, bits, s.enc_ab(a(b, x, kk)));
                let (r, bit, lane) = s.ab_place(b, x, kk);
                put(&mut w, o.b + r, bit, lane, bits, s.enc_ab(bm(b, kk, x)));
            }
            for j in 0..m {
                if let Some(cr) = o.c {
                    let (r, lane) = s.cd_place(b, x, j);
                    let cw = if s.ty == Ty::F64 { 64 } else { 32 };
                    put(&mut w, cr + r, 0, lane, cw, s.enc_cd(c(b, x, j)));
                }
            }
        }
    }
    let before = w.clone();
    let w = run_wave(&[text], w);
    let group = 1usize << o.cbsz;
    for b in 0..nb {
        // CBSZ/ABID: block ABID of each group of 2^CBSZ blocks is the A of the whole group.
        let ab = b / group * group + o.abid as usize;
        for i in 0..m {
            for j in 0..m {
                let mut want = c(b, i, j);
                for kk in 0..k {
                    // BLGP: B's element comes from another lane of the same register bits.
                    let (r, bit, lane) = s.ab_place(b, j, kk);
                    let bv = s.dec_ab(get(&before, o.b + r, bit, blgp_lane(o.blgp, lane), bits));
                    want += a(ab, i, kk) * bv;
                }
                let (r, lane) = s.cd_place(b, i, j);
                let cw = if s.ty == Ty::F64 { 64 } else { 32 };
                let got = s.dec_cd(get(&w, o.d + r, 0, lane, cw));
                assert_eq!(
                    got, want,
                    "{text}: D[{b}][{i}][{j}] (register {r}, lane {lane})"
                );
            }
        }
    }
    // Only D changed.
    for r in 0..VGPRS {
        if !(o.d..o.d + s.cd_regs()).contains(&r) {
            assert_eq!(w.v(r), before.v(r), "{text}: register {r} is not D");
        }
    }
}

#[rstest]
#[case::f32_32x32x1(
    "v_mfma_f32_32x32x1f32 a[0:31], v0, v2, a[0:31]",
    sh(32, 1, 2, Ty::F32)
)]
#[case::f32_16x16x1(
    "v_mfma_f32_16x16x1f32 a[0:15], v0, v2, a[0:15]",
    sh(16, 1, 4, Ty::F32)
)]
#[case::f32_4x4x1("v_mfma_f32_4x4x1f32 a[0:3], v0, v2, a[0:3]", sh(4, 1, 16, Ty::F32))]
#[case::f32_32x32x2(
    "v_mfma_f32_32x32x2f32 a[0:15], v0, v2, a[0:15]",
    sh(32, 2, 1, Ty::F32)
)]
#[case::f32_16x16x4("v_mfma_f32_16x16x4f32 a[0:3], v0, v2, a[0:3]", sh(16, 4, 1, Ty::F32))]
#[case::f16_32x32x4(
    "v_mfma_f32_32x32x4f16 a[0:31], v[0:1], v[2:3], a[0:31]",
    sh(32, 4, 2, Ty::F16)
)]
#[case::f16_16x16x4(
    "v_mfma_f32_16x16x4f16 a[0:15], v[0:1], v[2:3], a[0:15]",
    sh(16, 4, 4, Ty::F16)
)]
#[case::f16_4x4x4(
    "v_mfma_f32_4x4x4f16 a[0:3], v[0:1], v[2:3], a[0:3]",
    sh(4, 4, 16, Ty::F16)
)]
#[case::f16_32x32x8(
    "v_mfma_f32_32x32x8f16 a[0:15], v[0:1], v[2:3], a[0:15]",
    sh(32, 8, 1, Ty::F16)
)]
#[case::f16_16x16x16(
    "v_mfma_f32_16x16x16f16 a[0:3], v[0:1], v[2:3], a[0:3]",
    sh(16, 16, 1, Ty::F16)
)]
#[case::i8_32x32x4("v_mfma_i32_32x32x4i8 a[0:31], v0, v2, a[0:31]", sh(32, 4, 2, Ty::I8))]
#[case::i8_16x16x4("v_mfma_i32_16x16x4i8 a[0:15], v0, v2, a[0:15]", sh(16, 4, 4, Ty::I8))]
#[case::i8_4x4x4("v_mfma_i32_4x4x4i8 a[0:3], v0, v2, a[0:3]", sh(4, 4, 16, Ty::I8))]
#[case::i8_32x32x8("v_mfma_i32_32x32x8i8 a[0:15], v0, v2, a[0:15]", sh(32, 8, 1, Ty::I8))]
#[case::i8_16x16x16("v_mfma_i32_16x16x16i8 a[0:3], v0, v2, a[0:3]", sh(16, 16, 1, Ty::I8))]
#[case::bf16_1k_32x32x4(
    "v_mfma_f32_32x32x4bf16_1k a[0:31], v[0:1], v[2:3], a[0:31]",
    sh(32, 4, 2, Ty::Bf16)
)]
#[case::bf16_1k_16x16x4(
    "v_mfma_f32_16x16x4bf16_1k a[0:15], v[0:1], v[2:3], a[0:15]",
    sh(16, 4, 4, Ty::Bf16)
)]
#[case::bf16_1k_4x4x4(
    "v_mfma_f32_4x4x4bf16_1k a[0:3], v[0:1], v[2:3], a[0:3]",
    sh(4, 4, 16, Ty::Bf16)
)]
#[case::bf16_1k_32x32x8(
    "v_mfma_f32_32x32x8bf16_1k a[0:15], v[0:1], v[2:3], a[0:15]",
    sh(32, 8, 1, Ty::Bf16)
)]
#[case::bf16_1k_16x16x16(
    "v_mfma_f32_16x16x16bf16_1k a[0:3], v[0:1], v[2:3], a[0:3]",
    sh(16, 16, 1, Ty::Bf16)
)]
#[case::bf16_32x32x2(
    "v_mfma_f32_32x32x2bf16 a[0:31], v0, v2, a[0:31]",
    sh(32, 2, 2, Ty::Bf16)
)]
#[case::bf16_16x16x2(
    "v_mfma_f32_16x16x2bf16 a[0:15], v0, v2, a[0:15]",
    sh(16, 2, 4, Ty::Bf16)
)]
#[case::bf16_4x4x2("v_mfma_f32_4x4x2bf16 a[0:3], v0, v2, a[0:3]", sh(4, 2, 16, Ty::Bf16))]
#[case::bf16_32x32x4(
    "v_mfma_f32_32x32x4bf16 a[0:15], v0, v2, a[0:15]",
    sh(32, 4, 1, Ty::Bf16)
)]
#[case::bf16_16x16x8(
    "v_mfma_f32_16x16x8bf16 a[0:3], v0, v2, a[0:3]",
    sh(16, 8, 1, Ty::Bf16)
)]
#[case::f64_16x16x4(
    "v_mfma_f64_16x16x4f64 a[0:7], v[0:1], v[2:3], a[0:7]",
    sh(16, 4, 1, Ty::F64)
)]
#[case::f64_4x4x4(
    "v_mfma_f64_4x4x4f64 a[0:1], v[0:1], v[2:3], a[0:1]",
    sh(4, 4, 4, Ty::F64)
)]
fn every_form_computes_d_as_c_plus_a_times_b(#[case] text: &str, #[case] s: Shape) {
    check(text, s, AGPR_CD);
}

const F32_32X32X2: Shape = sh(32, 2, 1, Ty::F32);

#[rstest]
#[case::vgpr_c_and_d("v_mfma_f32_32x32x2f32 v[8:23], v0, v2, v[8:23]", Ops { c: Some(8), d: 8, ..AGPR_CD }, F32_32X32X2)]
#[case::agpr_a_and_b("v_mfma_f32_32x32x2f32 v[8:23], a32, a33, v[8:23]", Ops { a: ACC + 32, b: ACC + 33, c: Some(8), d: 8, ..AGPR_CD }, F32_32X32X2)]
#[case::agpr_a_vgpr_b("v_mfma_f32_32x32x2f32 a[0:15], a32, v2, a[16:31]", Ops { a: ACC + 32, c: Some(ACC + 16), ..AGPR_CD }, F32_32X32X2)]
#[case::d_apart_from_c("v_mfma_f32_32x32x2f32 a[16:31], v0, v2, a[0:15]", Ops { d: ACC + 16, ..AGPR_CD }, F32_32X32X2)]
#[case::d_inside_c_read_first(PARTIAL_OVERLAP.0, Ops { d: ACC + 8, ..AGPR_CD }, F32_32X32X2)]
#[case::inline_constant_c("v_mfma_f32_32x32x2f32 a[0:15], v0, v2, 1.0", Ops { c: None, c_const: 1.0, ..AGPR_CD }, F32_32X32X2)]
#[case::f64_vgpr_cd_agpr_b("v_mfma_f64_16x16x4f64 v[8:15], v[0:1], a[32:33], v[8:15]", Ops { b: ACC + 32, c: Some(8), d: 8, ..AGPR_CD }, sh(16, 4, 1, Ty::F64))]
#[case::f64_inline_constant_c("v_mfma_f64_16x16x4f64 a[0:7], v[0:1], v[2:3], 1.0", Ops { c: None, c_const: 1.0, ..AGPR_CD }, sh(16, 4, 1, Ty::F64))]
#[case::i8_agpr_sources_vgpr_cd("v_mfma_i32_16x16x16i8 v[8:11], a32, a33, v[8:11]", Ops { a: ACC + 32, b: ACC + 33, c: Some(8), d: 8, ..AGPR_CD }, sh(16, 16, 1, Ty::I8))]
#[case::i8_inline_constant_c("v_mfma_i32_32x32x8i8 a[0:15], v0, v2, -1", Ops { c: None, c_const: -1.0, ..AGPR_CD }, sh(32, 8, 1, Ty::I8))]
fn sources_and_destinations_in_agprs_vgprs_or_constants(
    #[case] text: &str,
    #[case] o: Ops,
    #[case] s: Shape,
) {
    check(text, s, o);
}

#[rstest]
#[case::f32_4x4x1_pairs_of_pairs(
    "v_mfma_f32_4x4x1f32 a[0:3], v0, v2, a[0:3] cbsz:2 abid:1",
    sh(4, 1, 16, Ty::F32),
    2,
    1,
    0
)]
#[case::f32_4x4x1_one_block_to_all(
    "v_mfma_f32_4x4x1f32 a[0:3], v0, v2, a[0:3] cbsz:4 abid:13",
    sh(4, 1, 16, Ty::F32),
    4,
    13,
    0
)]
#[case::f32_32x32x1(
    "v_mfma_f32_32x32x1f32 a[0:31], v0, v2, a[0:31] cbsz:1 abid:1",
    sh(32, 1, 2, Ty::F32),
    1,
    1,
    0
)]
#[case::f16_16x16x4(
    "v_mfma_f32_16x16x4f16 a[0:15], v[0:1], v[2:3], a[0:15] cbsz:2 abid:3",
    sh(16, 4, 4, Ty::F16),
    2,
    3,
    0
)]
#[case::i8_4x4x4(
    "v_mfma_i32_4x4x4i8 a[0:3], v0, v2, a[0:3] cbsz:3 abid:5",
    sh(4, 4, 16, Ty::I8),
    3,
    5,
    0
)]
#[case::blgp1(
    "v_mfma_f32_32x32x2f32 a[0:15], v0, v2, a[0:15] blgp:1",
    F32_32X32X2,
    0,
    0,
    1
)]
#[case::blgp2(
    "v_mfma_f32_32x32x2f32 a[0:15], v0, v2, a[0:15] blgp:2",
    F32_32X32X2,
    0,
    0,
    2
)]
#[case::blgp3(
    "v_mfma_f32_32x32x2f32 a[0:15], v0, v2, a[0:15] blgp:3",
    F32_32X32X2,
    0,
    0,
    3
)]
#[case::blgp4(
    "v_mfma_f32_32x32x2f32 a[0:15], v0, v2, a[0:15] blgp:4",
    F32_32X32X2,
    0,
    0,
    4
)]
#[case::blgp5(
    "v_mfma_f32_32x32x2f32 a[0:15], v0, v2, a[0:15] blgp:5",
    F32_32X32X2,
    0,
    0,
    5
)]
#[case::blgp6(
    "v_mfma_f32_32x32x2f32 a[0:15], v0, v2, a[0:15] blgp:6",
    F32_32X32X2,
    0,
    0,
    6
)]
#[case::blgp7(
    "v_mfma_f32_32x32x2f32 a[0:15], v0, v2, a[0:15] blgp:7",
    F32_32X32X2,
    0,
    0,
    7
)]
#[case::f16_4x4x4_blgp3(
    "v_mfma_f32_4x4x4f16 a[0:3], v[0:1], v[2:3], a[0:3] blgp:3",
    sh(4, 4, 16, Ty::F16),
    0,
    0,
    3
)]
#[case::cbsz_abid_and_blgp(
    "v_mfma_f32_16x16x1f32 a[0:15], v0, v2, a[0:15] cbsz:2 abid:2 blgp:5",
    sh(16, 1, 4, Ty::F32),
    2,
    2,
    5
)]
fn cbsz_and_abid_broadcast_a_blocks_and_blgp_moves_b_lanes(
    #[case] text: &str,
    #[case] s: Shape,
    #[case] cbsz: u32,
    #[case] abid: u32,
    #[case] blgp: u32,
) {
    check(
        text,
        s,
        Ops {
            cbsz,
            abid,
            blgp,
            ..AGPR_CD
        },
    );
}

/// Runs a 4x4 form with the same A, B and C bits in every lane and register: every element of
/// D is then C + (products of one k) x K. Returns D's first register (or pair), lane 0.
fn uniform(text: &str, a: u64, b: u64, c: u64, wide: bool) -> u64 {
    let mut w = new_wave();
    for l in 0..LANES {
        put(&mut w, 0, 0, l, 64, a);
        put(&mut w, 2, 0, l, 64, b);
        for r in 0..4 {
            w.v_mut(ACC + r).unwrap()[l] = c as u32;
        }
    }
    let w = run_wave(&[text], w);
    for l in 0..LANES {
        assert_eq!(w.v(ACC)[l], w.v(ACC)[0], "{text}: lanes agree");
    }
    get(&w, ACC, 0, 0, if wide { 64 } else { 32 })
}

const F32_4X4X1: &str = "v_mfma_f32_4x4x1f32 a[0:3], v0, v2, a[0:3]";

fn f32b(x: f32) -> u64 {
    u64::from(x.to_bits())
}

#[test]
fn f32_forms_round_to_nearest_even() {
    let p = f32b(2f32.powi(-12)); // 2^-12 x 2^-12 = 2^-24, half an ulp of 1.0
    assert_eq!(
        uniform(F32_4X4X1, p, p, f32b(1.0), false),
        f32b(1.0),
        "tie to even: down"
    );
    let odd = 1.0 + f32::EPSILON;
    let up = 1.0 + 2.0 * f32::EPSILON;
    assert_eq!(
        uniform(F32_4X4X1, p, p, f32b(odd), false),
        f32b(up),
        "tie to even: up"
    );
}

#[test]
fn f32_forms_keep_denormals_whatever_mode_says() {
    let tiny = f32::from_bits(1 << 9); // 2^-140, denormal
    let got = uniform(F32_4X4X1, f32b(tiny), f32b(2f32.powi(20)), 0, false);
    assert_eq!(got, f32b(2f32.powi(-120)), "a denormal input");
    let got = uniform(F32_4X4X1, f32b(f32::MIN_POSITIVE), f32b(0.5), 0, false);
    assert_eq!(got, f32b(2f32.powi(-127)), "a denormal result");
}

#[test]
fn f16_forms_flush_denormal_inputs_to_zero() {
    let text = "v_mfma_f32_4x4x4f16 a[0:3], v[0:1], v[2:3], a[0:3]";
    let halves = |h: u16| u64::from(h) * 0x0001_0001_0001_0001;
    let denormal = halves(0x0001); // 2^-24
    let k1024 = halves(0x6400);
    assert_eq!(
        uniform(text, denormal, k1024, f32b(1.0), false),
        f32b(1.0),
        "A"
    );
    assert_eq!(
        uniform(text, k1024, denormal, f32b(1.0), false),
        f32b(1.0),
        "B"
    );
    let min_normal = halves(0x0400); // 2^-14: kept
    let want = 1.0 + 4.0 * 2f32.powi(-14) * 1024.0;
    assert_eq!(
        uniform(text, min_normal, k1024, f32b(1.0), false),
        f32b(want)
    );
    // A denormal C reads as a zero of its sign; -0 + +0 is +0.
    assert_eq!(uniform(text, 0, 0, 0x8000_0001, false), 0, "C");
}

#[test]
fn bf16_forms_flush_denormal_results_to_zero() {
    let text = "v_mfma_f32_4x4x4bf16_1k a[0:3], v[0:1], v[2:3], a[0:3]";
    let halves = |h: u16| u64::from(h) * 0x0001_0001_0001_0001;
    let a = halves(0x2000); // 2^-63
    let b = halves(0x1e80); // 2^-66
                            // 4 x 2^-129 = 2^-127 is an f32 denormal: flushed.
    assert_eq!(uniform(text, a, b, 0, false), 0);
    let neg_a = halves(0xa000);
    assert_eq!(
        uniform(text, neg_a, b, 0, false),
        0x8000_0000,
        "to a zero of its sign"
    );
    let b = halves(0x2100); // 2^-61: 4 x 2^-124 = 2^-122, normal
    assert_eq!(uniform(text, a, b, 0, false), f32b(2f32.powi(-122)));
}

#[test]
fn f64_forms_keep_denormals() {
    let text = "v_mfma_f64_4x4x4f64 a[0:1], v[0:1], v[2:3], a[0:1]";
    let a = 2f64.powi(-1000).to_bits();
    let b = 2f64.powi(-60).to_bits();
    // 4 products of 2^-1060 (denormal) make 2^-1058.
    let got = uniform(text, a, b, 0, true);
    assert_eq!(f64::from_bits(got), 2f64.powi(-1058));
    let tiny = 1u64; // 2^-1074
    let got = uniform(text, tiny, 2f64.powi(70).to_bits(), 0, true);
    assert_eq!(
        f64::from_bits(got),
        4.0 * 2f64.powi(-1004),
        "a denormal input"
    );
}

#[test]
fn accumulation_registers_are_written_read_and_moved() {
    let mut w = new_wave();
    *w.v_mut(0).unwrap() = std::array::from_fn(|l| l as u32 * 3);
    w.sgpr[0] = 0xdead_beef;
    let w = run_wave(
        &[
            "v_accvgpr_write_b32 a1, v0",
            "v_accvgpr_write_b32 a2, -2.0",
            "v_accvgpr_write_b32 a3, s0",
            "v_accvgpr_mov_b32 a4, a1",
            "v_accvgpr_read_b32 v8, a4",
        ],
        w,
    );
    assert_eq!(w.v(ACC + 1)[5], 15, "a1 is at ACCUM_OFFSET + 1");
    assert_eq!(w.v(ACC + 2)[63], (-2f32).to_bits());
    assert_eq!(w.v(ACC + 3)[9], 0xdead_beef);
    assert_eq!(w.v(ACC + 4)[7], 21);
    assert_eq!(w.v(8)[7], 21);
    assert_eq!(w.v(1), &[0; LANES], "v1 untouched");
}

/// A wave stopped after every instruction of a run of matrix instructions, saved to bytes,
/// restored and resumed on a fresh executor, ends with the registers of a run never stopped:
/// the AGPRs (and VGPR accumulators) travel with the saved state.
#[test]
fn a_wave_saved_and_restored_between_matrix_instructions_ends_the_same() {
    let lines = [
        "v_accvgpr_write_b32 a1, v0",
        "v_mfma_f32_32x32x2f32 a[0:15], v0, v2, a[0:15]",
        "v_mfma_f32_32x32x2f32 a[16:31], v0, v2, a[0:15]",
        "v_mfma_f32_32x32x2f32 a[0:15], v0, v2, a[0:15]",
        "v_mfma_f32_32x32x2f32 v[8:23], a32, a33, v[8:23]",
        "v_mfma_f32_32x32x8f16 a[0:15], v[0:1], v[2:3], a[0:15]",
        "v_mfma_f64_4x4x4f64 a[0:1], v[0:1], v[2:3], a[0:1]",
        "v_accvgpr_read_b32 v8, a4",
    ];
    let mem = memory(&program(&lines));
    let mut w = Wave::new(0, VGPRS, 40); // AGPRs from v40: not the default place
    w.pc = CODE;
    w.set_exec(u64::MAX);
    for r in 0..VGPRS {
        *w.v_mut(r).unwrap() = std::array::from_fn(|l| {
            let v = small(r * 64 + l, 8) as f32;
            // Halves and doubles stay small too: f16 pairs, and f64 from two words.
            if r < 4 {
                u32::from(f16::from_f32(v).to_bits()) * 0x0001_0001
            } else {
                v.to_bits()
            }
        });
    }
    let whole = {
        let mut wg = Workgroup::from_waves(vec![w.clone()], 0, Apertures::KFD_GFX9);
        assert_eq!(
            Executor::new().run(&mut wg, &mem, &NoClock, 100).stop,
            Stop::Done
        );
        wg
    };
    let mut wg = Workgroup::from_waves(vec![w], 0, Apertures::KFD_GFX9);
    let mut steps = 0;
    loop {
        let out = Executor::new().run(&mut wg, &mem, &NoClock, 1);
        steps += out.instructions;
        if out.stop == Stop::Done {
            break;
        }
        assert_eq!(out.stop, Stop::Budget);
        let bytes = wg.save();
        let back = Workgroup::restore(&bytes).unwrap();
        assert_eq!(back, wg, "restored after {steps} instructions");
        wg = back;
    }
    assert_eq!(steps, lines.len() as u64 + 1);
    assert_eq!(wg.waves[0].vgpr, whole.waves[0].vgpr);
    assert_ne!(whole.waves[0].v(40), &[0; LANES], "the AGPRs hold results");
}

/// kernels/mfma.cl, built by scripts/gen-kernels.sh: square GEMMs made of one MFMA form each.
const MFMA_KERNELS: &[u8] = include_bytes!("../kernels/mfma.co");

/// The GEMM kernels: name, element type, element bytes of A and B, output tile.
const GEMMS: [(&str, Ty, usize, u32); 5] = [
    ("gemm_f32", Ty::F32, 4, 32),
    ("gemm_f16", Ty::F16, 2, 32),
    ("gemm_i8", Ty::I8, 1, 32),
    ("gemm_bf16", Ty::Bf16, 2, 32),
    ("gemm_f64", Ty::F64, 8, 16),
];

/// A GEMM of n x n matrices of small integers set up in a fresh rig: the rig, the dispatch, C's
/// address and the product computed here.
fn gemm(kernel: &str, n: usize) -> (Rig, Dispatch, u64, Vec<f64>) {
    let &(_, ty, size, tile) = GEMMS.iter().find(|g| g.0 == kernel).unwrap();
    let s = sh(4, 1, 16, ty); // only its element encodings are used
    let a: Vec<f64> = (0..n * n).map(|x| small(2 * x, 3)).collect();
    let b: Vec<f64> = (0..n * n).map(|x| small(2 * x + 1, 3)).collect();
    let bytes = |m: &[f64]| -> Vec<u8> {
        m.iter()
            .flat_map(|&v| s.enc_ab(v).to_le_bytes()[..size].to_vec())
            .collect()
    };
    let mut rig = Rig::new(MFMA_KERNELS, 1 << 20).unwrap();
    let pa = rig.alloc((n * n * size) as u64).unwrap();
    let pb = rig.alloc((n * n * size) as u64).unwrap();
    let out_size = if ty == Ty::F64 { 8 } else { 4 };
    let pc = rig.alloc((n * n * out_size) as u64).unwrap();
    assert!(rig.mem.write(pa, &bytes(&a)));
    assert!(rig.mem.write(pb, &bytes(&b)));
    let args = Args::default().u64(pa).u64(pb).u64(pc).u32(n as u32);
    let tiles = (n / tile as usize).pow(2) as u32;
    let d = rig
        .dispatch(kernel, [64 * tiles, 1, 1], [64, 1, 1], &args.0, 1)
        .unwrap();
    let mut want = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            want[i * n + j] = (0..n).map(|k| a[i * n + k] * b[k * n + j]).sum();
        }
    }
    (rig, d, pc, want)
}

/// C as the kernel left it.
fn gemm_out(rig: &Rig, kernel: &str, pc: u64, n: usize) -> Vec<f64> {
    let &(_, ty, ..) = GEMMS.iter().find(|g| g.0 == kernel).unwrap();
    let s = sh(4, 1, 16, ty);
    let size = if ty == Ty::F64 { 8 } else { 4 };
    let raw = rig.mem.read(pc, n * n * size).unwrap();
    raw.chunks(size)
        .map(|c| {
            let mut w = [0u8; 8];
            w[..size].copy_from_slice(c);
            s.dec_cd(u64::from_le_bytes(w))
        })
        .collect()
}

#[rstest]
#[case::f32_32x32x2("gemm_f32")]
#[case::f16_32x32x8("gemm_f16")]
#[case::i8_32x32x8("gemm_i8")]
#[case::bf16_1k_32x32x8("gemm_bf16")]
#[case::f64_16x16x4("gemm_f64")]
fn a_clang_built_gemm_of_mfma_matches_the_cpu(#[case] kernel: &str) {
    let n = 64;
    let (rig, d, pc, want) = gemm(kernel, n);
    let out = run_dispatch(&d, &rig.mem, &NoClock, 1, 10_000_000);
    assert_eq!(out.stop, Stop::Done, "{kernel}");
    assert_eq!(gemm_out(&rig, kernel, pc, n), want, "{kernel}");
}

/// Compute wave save/restore in the middle of a GEMM: every workgroup stopped every `every`
/// instructions, saved to bytes, restored on a fresh executor and resumed, ends with the product
/// of a run never stopped; the accumulators live in AGPRs.
#[rstest]
#[case::f32("gemm_f32", 37)]
#[case::f16("gemm_f16", 11)]
#[case::f64("gemm_f64", 23)]
fn a_gemm_checkpointed_mid_way_resumes_to_the_same_product(
    #[case] kernel: &str,
    #[case] every: u64,
) {
    let n = 64;
    let (rig, d, pc, want) = gemm(kernel, n);
    let mut saves = 0;
    for k in 0..d.workgroup_count() {
        let mut wg = d.workgroup(k, 0);
        assert!(
            wg.waves[0].accum_offset > 0
                && wg.waves[0].vgpr.len() > wg.waves[0].accum_offset as usize,
            "the descriptor gives the wave AGPRs after its VGPRs"
        );
        loop {
            let st = Executor::new().run(&mut wg, &rig.mem, &NoClock, every);
            if st.stop == Stop::Done {
                break;
            }
            assert_eq!(st.stop, Stop::Budget);
            let back = Workgroup::restore(&wg.save()).unwrap();
            assert_eq!(back, wg);
            wg = back;
            saves += 1;
        }
    }
    assert!(saves > 20, "{saves} saves");
    assert_eq!(gemm_out(&rig, kernel, pc, n), want, "{kernel}");
}
