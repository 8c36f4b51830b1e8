//! Machine code to [`Inst`]: the encodings of gfx9/gfx90a, operand codes, inline constants,
//! literals, SDWA and DPP. Everything the hot loop needs is resolved here, once per address.

use crate::error::ShaderError;
use crate::table::{self, flag, Encoding, OpDef, Ty};
use crate::wave::reg;

/// A decoded source operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operand {
    /// No operand.
    None,
    /// A scalar register by operand code (0..127: s0..s101 and the special registers).
    Sgpr(u8),
    /// A vector register.
    Vgpr(u8),
    /// An accumulation register.
    Agpr(u8),
    /// An inline constant or literal, already read for the operand's type (64 bits wide for
    /// 64-bit operands).
    Const(u64),
    /// src_shared_base: the LDS aperture's base.
    SharedBase,
    /// src_shared_limit.
    SharedLimit,
    /// src_private_base: the private aperture's base.
    PrivateBase,
    /// src_private_limit.
    PrivateLimit,
    /// VCCZ.
    Vccz,
    /// EXECZ.
    Execz,
    /// SCC.
    Scc,
    /// src_pops_exiting_wave_id (always 0 for compute).
    PopsExitingWaveId,
}

/// The SDWA fields of a VOP1/VOP2/VOPC instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sdwa {
    /// Destination select: bytes 0-3, words 4/5, dword 6.
    pub dst_sel: u8,
    /// Bits outside the destination select: 0 pad with zeros, 1 sign extend, 2 preserve.
    pub dst_unused: u8,
    /// Source selects (src0, src1).
    pub src_sel: [u8; 2],
    /// Sign-extend the selected source bits.
    pub sext: [bool; 2],
}

/// The DPP fields of a VOP1/VOP2/VOPC instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dpp {
    /// DPP_CTRL.
    pub ctrl: u16,
    /// BOUND_CTRL: lanes whose source is invalid read 0 instead of being disabled.
    pub bound_ctrl: bool,
    /// BANK_MASK: banks (lanes mod 4 groups of a row) that write.
    pub bank_mask: u8,
    /// ROW_MASK: rows of 16 lanes that write.
    pub row_mask: u8,
}

/// Memory instruction bits.
pub mod mflag {
    /// GLC.
    pub const GLC: u8 = 1;
    /// SLC.
    pub const SLC: u8 = 2;
    /// MUBUF OFFEN.
    pub const OFFEN: u8 = 4;
    /// MUBUF IDXEN.
    pub const IDXEN: u8 = 8;
    /// Data and destination are AGPRs (gfx90a ACC bit).
    pub const ACC: u8 = 16;
    /// LDS bit: the load goes to LDS at M0 (MUBUF `buffer_load_dword` only).
    pub const LDS: u8 = 32;
}

/// The VOP3P-MAI fields of a matrix instruction (`v_mfma_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Mai {
    /// CBSZ: the A block ABID names stands in for every block of its group of 2^CBSZ blocks.
    pub cbsz: u8,
    /// ABID: which block of each group of 2^CBSZ blocks is broadcast.
    pub abid: u8,
    /// BLGP: the lane pattern B is read with.
    pub blgp: u8,
    /// ACC_CD: C and D are AGPRs (else VGPRs).
    pub acc_cd: bool,
}

/// A decoded instruction.
#[derive(Debug, Clone, Copy)]
pub struct Inst {
    /// Its table row.
    pub def: &'static OpDef,
    /// The encoding it was decoded from (VOP3 for an `_e64` form).
    pub enc: Encoding,
    /// Its length in bytes (4, 8 or 12).
    pub len: u8,
    /// The destination register number: VDST, or SDST for scalar destinations.
    pub dst: u8,
    /// The second scalar destination: carry out or compare result (VCC when implicit); for
    /// MUBUF the first SGPR of the resource descriptor.
    pub sdst: u8,
    /// Sources. For memory instructions: address, data (data0), and SADDR/SOFFSET (data1 for
    /// DS).
    pub src: [Operand; 3],
    /// SIMM16, or the (sign-extended) memory offset; DS: offset0 | offset1 << 8.
    pub imm: u32,
    /// VOP3 ABS bits per source.
    pub abs: u8,
    /// VOP3 NEG bits per source (NEG_LO for VOP3P).
    pub neg: u8,
    /// VOP3P NEG_HI bits.
    pub neg_hi: u8,
    /// OPSEL bits (VOP3: bit 3 is the destination half).
    pub opsel: u8,
    /// VOP3P OPSEL_HI bits.
    pub opsel_hi: u8,
    /// Output modifier: 0 none, 1 x2, 2 x4, 3 /2.
    pub omod: u8,
    /// CLAMP.
    pub clamp: bool,
    /// Memory bits ([`mflag`]).
    pub mem: u8,
    /// SDWA form.
    pub sdwa: Option<Sdwa>,
    /// DPP form.
    pub dpp: Option<Dpp>,
    /// Matrix instruction fields (MFMA only; zero otherwise).
    pub mai: Mai,
}

fn illegal(word: u32, pc: u64, what: &'static str) -> ShaderError {
    ShaderError::IllegalInstruction { word, pc, what }
}

fn unsupported(enc: Encoding, opcode: u16, pc: u64) -> ShaderError {
    ShaderError::UnsupportedOpcode {
        encoding: enc,
        opcode,
        mnemonic: table::lookup(enc, opcode).map(|d| d.name),
        pc,
    }
}

/// The value of inline constant `code` (128..=248) for an operand of type `ty`.
pub fn inline_constant(code: u16, ty: Ty) -> Option<u64> {
    let int = |v: i64| match ty {
        Ty::B64 | Ty::I64 | Ty::F64 => v as u64,
        Ty::B16 | Ty::F16 => u64::from(v as u16),
        _ => u64::from(v as u32),
    };
    match code {
        128..=192 => Some(int(i64::from(code) - 128)),
        193..=208 => Some(int(192 - i64::from(code))),
        240..=248 => {
            let (h, s, d): (u16, u32, u64) = match code {
                240 => (0x3800, 0x3f00_0000, 0x3fe0_0000_0000_0000),
                241 => (0xb800, 0xbf00_0000, 0xbfe0_0000_0000_0000),
                242 => (0x3c00, 0x3f80_0000, 0x3ff0_0000_0000_0000),
                243 => (0xbc00, 0xbf80_0000, 0xbff0_0000_0000_0000),
                244 => (0x4000, 0x4000_0000, 0x4000_0000_0000_0000),
                245 => (0xc000, 0xc000_0000, 0xc000_0000_0000_0000),
                246 => (0x4400, 0x4080_0000, 0x4010_0000_0000_0000),
                247 => (0xc400, 0xc080_0000, 0xc010_0000_0000_0000),
                _ => (0x3118, 0x3e22_f983, 0x3fc4_5f30_6dc9_c882),
            };
            Some(match ty {
                Ty::F16 | Ty::B16 => u64::from(h),
                Ty::F64 | Ty::B64 | Ty::I64 => d,
                _ => u64::from(s),
            })
        }
        _ => None,
    }
}

/// A 32-bit literal as an operand of type `ty` reads it.
pub fn literal(lit: u32, ty: Ty) -> u64 {
    match ty {
        Ty::F64 => u64::from(lit) << 32,
        Ty::I64 => i64::from(lit as i32) as u64,
        _ => u64::from(lit),
    }
}

/// Instruction words, fetched on demand.
struct Words<'a, F: FnMut(u64) -> Result<u32, ShaderError>> {
    pc: u64,
    w: [u32; 3],
    have: usize,
    fetch: &'a mut F,
}

impl<F: FnMut(u64) -> Result<u32, ShaderError>> Words<'_, F> {
    fn get(&mut self, i: usize) -> Result<u32, ShaderError> {
        while self.have <= i {
            self.w[self.have] = (self.fetch)(self.pc.wrapping_add(4 * self.have as u64))?;
            self.have += 1;
        }
        Ok(self.w[i])
    }
}

/// Builder state while decoding one instruction.
struct Dec {
    word: u32,
    pc: u64,
    len: u8,
    literal_at: Option<usize>,
}

impl Dec {
    /// Resolves a source operand code (9-bit; SSRC codes are the same below 256). A literal
    /// makes the instruction 4 bytes longer (one literal per instruction).
    fn src<F: FnMut(u64) -> Result<u32, ShaderError>>(
        &mut self,
        code: u16,
        ty: Ty,
        words: &mut Words<'_, F>,
    ) -> Result<Operand, ShaderError> {
        Ok(match code {
            0..=127 => Operand::Sgpr(code as u8),
            128..=208 | 240..=248 => Operand::Const(inline_constant(code, ty).unwrap_or_default()),
            235 => Operand::SharedBase,
            236 => Operand::SharedLimit,
            237 => Operand::PrivateBase,
            238 => Operand::PrivateLimit,
            239 => Operand::PopsExitingWaveId,
            251 => Operand::Vccz,
            252 => Operand::Execz,
            253 => Operand::Scc,
            255 => {
                let at = *self.literal_at.get_or_insert(usize::from(self.len) / 4);
                self.len = self.len.max(((at + 1) * 4) as u8);
                Operand::Const(literal(words.get(at)?, ty))
            }
            256..=511 => Operand::Vgpr((code - 256) as u8),
            254 => {
                return Err(illegal(
                    self.word,
                    self.pc,
                    "LDS direct operands are not supported",
                ))
            }
            _ => return Err(illegal(self.word, self.pc, "reserved operand code")),
        })
    }
}

fn blank(def: &'static OpDef, enc: Encoding) -> Inst {
    Inst {
        def,
        enc,
        len: 4,
        dst: 0,
        sdst: reg::VCC as u8,
        src: [Operand::None; 3],
        imm: 0,
        abs: 0,
        neg: 0,
        neg_hi: 0,
        opsel: 0,
        opsel_hi: 0,
        omod: 0,
        clamp: false,
        mem: 0,
        sdwa: None,
        dpp: None,
        mai: Mai {
            cbsz: 0,
            abid: 0,
            blgp: 0,
            acc_cd: false,
        },
    }
}

fn sext(v: u32, bits: u32) -> u32 {
    let s = 32 - bits;
    (((v << s) as i32) >> s) as u32
}

/// The encoding of an instruction whose first dword is `w`.
pub fn encoding_of(w: u32) -> Option<Encoding> {
    Some(match w >> 23 {
        0x17d => Encoding::Sop1,
        0x17e => Encoding::Sopc,
        0x17f => Encoding::Sopp,
        _ if w >> 28 == 0xb => Encoding::Sopk,
        _ if w >> 30 == 0b10 => Encoding::Sop2,
        _ if w >> 31 == 0 => match w >> 25 {
            0x3f => Encoding::Vop1,
            0x3e => Encoding::Vopc,
            _ => Encoding::Vop2,
        },
        _ => match w >> 26 {
            0x30 => Encoding::Smem,
            0x34 if (w >> 16) & 0x3ff >= 0x380 => Encoding::Vop3p,
            0x34 => Encoding::Vop3,
            0x36 => Encoding::Ds,
            0x37 => match (w >> 14) & 3 {
                0 => Encoding::Flat,
                1 => Encoding::Scratch,
                2 => Encoding::Global,
                _ => return None,
            },
            0x38 => Encoding::Mubuf,
            0x3a => Encoding::Mtbuf,
            0x3c => Encoding::Mimg,
            0x31 => Encoding::Exp,
            0x35 => Encoding::Vintrp,
            _ => return None,
        },
    })
}

/// The opcode field of an instruction word of encoding `enc` (for VOP3 the 10-bit field, which
/// also numbers the VOP1/VOP2/VOPC opcodes' 64-bit forms).
pub fn opcode_of(enc: Encoding, w: u32) -> u16 {
    let f = |shift: u32, mask: u32| ((w >> shift) & mask) as u16;
    match enc {
        Encoding::Sop2 => f(23, 0x7f),
        Encoding::Sopk => f(23, 0x1f),
        Encoding::Sop1 => f(8, 0xff),
        Encoding::Sopc | Encoding::Sopp => f(16, 0x7f),
        Encoding::Smem => f(18, 0xff),
        Encoding::Vop2 => f(25, 0x3f),
        Encoding::Vop1 => f(9, 0xff),
        Encoding::Vopc => f(17, 0xff),
        Encoding::Vop3 => f(16, 0x3ff),
        Encoding::Vop3p => f(16, 0x7f),
        Encoding::Ds => f(17, 0xff),
        Encoding::Flat | Encoding::Global | Encoding::Scratch | Encoding::Mubuf => f(18, 0x7f),
        Encoding::Mtbuf => f(15, 0xf),
        Encoding::Mimg => f(18, 0x7f),
        Encoding::Exp | Encoding::Vintrp => 0,
    }
}

/// The length in bytes of the instruction whose first dword is `w0`, whether or not the core executes it: what a walk over machine code needs to step over an
/// instruction the decoder refuses. `None` for a word of no gfx9 encoding.
pub fn length_of(w0: u32) -> Option<u8> {
    let enc = encoding_of(w0)?;
    let lit = |code: u32| code & 0xff == 255;
    let row = table::lookup(enc, opcode_of(enc, w0));
    Some(match enc {
        Encoding::Sop2 | Encoding::Sopc => 4 + 4 * u8::from(lit(w0) || lit(w0 >> 8)),
        Encoding::Sop1 => 4 + 4 * u8::from(lit(w0)),
        Encoding::Sopk => 4 + 4 * u8::from(row.is_some_and(|d| d.has(flag::LITERAL))),
        Encoding::Sopp | Encoding::Vintrp => 4,
        Encoding::Vop1 | Encoding::Vopc => 4 + 4 * u8::from(matches!(w0 & 0x1ff, 249 | 250 | 255)),
        Encoding::Vop2 => {
            let k = row.is_some_and(|d| d.has(flag::MADMK) || d.has(flag::MADAK));
            // A K constant takes the dword a literal would: an instruction has one or the other.
            4 + 4 * u8::from(matches!(w0 & 0x1ff, 249 | 250 | 255) || k)
        }
        _ => 8,
    })
}

/// Decodes the instruction at `pc`; `fetch` reads the dword at an address (the first call is
/// for `pc`, later ones for the dwords after it, as the encoding needs them).
pub fn decode<F>(pc: u64, mut fetch: F) -> Result<Inst, ShaderError>
where
    F: FnMut(u64) -> Result<u32, ShaderError>,
{
    let w0 = fetch(pc)?;
    let mut words = Words {
        pc,
        w: [w0, 0, 0],
        have: 1,
        fetch: &mut fetch,
    };
    let enc = encoding_of(w0).ok_or_else(|| illegal(w0, pc, "no gfx9 encoding"))?;
    let mut d = Dec {
        word: w0,
        pc,
        len: 4,
        literal_at: None,
    };
    let op = |v: u32, mask: u32| (v & mask) as u16;
    let find = |enc: Encoding, code: u16| -> Result<&'static OpDef, ShaderError> {
        match table::lookup(enc, code) {
            Some(def) if def.supported() => Ok(def),
            _ => Err(unsupported(enc, code, pc)),
        }
    };
    let mut inst = match enc {
        Encoding::Sop2 => {
            let def = find(enc, op(w0 >> 23, 0x7f))?;
            let mut i = blank(def, enc);
            i.dst = ((w0 >> 16) & 0x7f) as u8;
            i.src[0] = d.src(op(w0, 0xff), def.ty[1], &mut words)?;
            i.src[1] = d.src(op(w0 >> 8, 0xff), def.ty[2], &mut words)?;
            i
        }
        Encoding::Sopk => {
            let def = find(enc, op(w0 >> 23, 0x1f))?;
            let mut i = blank(def, enc);
            i.dst = ((w0 >> 16) & 0x7f) as u8;
            i.imm = w0 & 0xffff;
            if def.has(flag::LITERAL) {
                i.src[0] = Operand::Const(u64::from(words.get(1)?));
                d.len = 8;
            }
            i
        }
        Encoding::Sop1 => {
            let def = find(enc, op(w0 >> 8, 0xff))?;
            let mut i = blank(def, enc);
            i.dst = ((w0 >> 16) & 0x7f) as u8;
            i.src[0] = d.src(op(w0, 0xff), def.ty[1], &mut words)?;
            i
        }
        Encoding::Sopc => {
            let def = find(enc, op(w0 >> 16, 0x7f))?;
            let mut i = blank(def, enc);
            i.src[0] = d.src(op(w0, 0xff), def.ty[1], &mut words)?;
            if def.has(flag::SRC1_IMM) {
                i.imm = (w0 >> 8) & 0xff;
            } else {
                i.src[1] = d.src(op(w0 >> 8, 0xff), def.ty[2], &mut words)?;
            }
            i
        }
        Encoding::Sopp => {
            let def = find(enc, op(w0 >> 16, 0x7f))?;
            let mut i = blank(def, enc);
            i.imm = w0 & 0xffff;
            i
        }
        Encoding::Smem => {
            let w1 = words.get(1)?;
            d.len = 8;
            let def = find(enc, op(w0 >> 18, 0xff))?;
            let mut i = blank(def, enc);
            i.src[0] = Operand::Sgpr(((w0 & 0x3f) << 1) as u8);
            i.dst = ((w0 >> 6) & 0x7f) as u8;
            let imm = w0 & (1 << 17) != 0;
            let soe = w0 & (1 << 14) != 0;
            if w0 & (1 << 16) != 0 {
                i.mem |= mflag::GLC;
            }
            if imm {
                i.imm = sext(w1 & 0x1f_ffff, 21);
                if soe {
                    i.src[1] = Operand::Sgpr(((w1 >> 25) & 0x7f) as u8);
                }
            } else {
                i.src[1] = Operand::Sgpr((w1 & 0x7f) as u8);
            }
            i
        }
        Encoding::Vop2 => decode_vop2(w0, &mut d, &mut words)?,
        Encoding::Vop1 => {
            let def = find(enc, op(w0 >> 9, 0xff))?;
            let mut i = blank(def, enc);
            i.dst = ((w0 >> 17) & 0xff) as u8;
            let src0 = op(w0, 0x1ff);
            i.src[0] = vop_src0(&mut i, &mut d, src0, def.ty[1], &mut words)?;
            if def.has(flag::SRC_AGPR) {
                if let Operand::Vgpr(r) = i.src[0] {
                    i.src[0] = Operand::Agpr(r);
                }
            }
            i
        }
        Encoding::Vopc => {
            let def = find(enc, op(w0 >> 17, 0xff))?;
            let mut i = blank(def, enc);
            let src0 = op(w0, 0x1ff);
            i.src[0] = vop_src0(&mut i, &mut d, src0, def.ty[1], &mut words)?;
            i.src[1] = Operand::Vgpr(((w0 >> 9) & 0xff) as u8);
            if src0 == 249 {
                let w1 = words.get(1)?;
                if w1 & (1 << 15) != 0 {
                    i.sdst = ((w1 >> 8) & 0x7f) as u8;
                }
                if w1 & (1 << 31) != 0 {
                    i.src[1] = d.src(op(w0 >> 9, 0xff), def.ty[2], &mut words)?;
                }
            }
            i
        }
        Encoding::Vop3 => decode_vop3(w0, &mut d, &mut words)?,
        Encoding::Vop3p => decode_vop3p(w0, &mut d, &mut words)?,
        Encoding::Ds => {
            let w1 = words.get(1)?;
            d.len = 8;
            let def = find(enc, op(w0 >> 17, 0xff))?;
            if w0 & (1 << 16) != 0 {
                return Err(illegal(w0, pc, "GDS is not supported"));
            }
            let mut i = blank(def, enc);
            i.imm = w0 & 0xffff;
            if w0 & (1 << 25) != 0 {
                i.mem |= mflag::ACC;
            }
            i.src[0] = Operand::Vgpr((w1 & 0xff) as u8);
            i.src[1] = Operand::Vgpr(((w1 >> 8) & 0xff) as u8);
            i.src[2] = Operand::Vgpr(((w1 >> 16) & 0xff) as u8);
            i.dst = (w1 >> 24) as u8;
            i
        }
        Encoding::Flat | Encoding::Global | Encoding::Scratch => {
            let w1 = words.get(1)?;
            d.len = 8;
            let def = find(enc, op(w0 >> 18, 0x7f))?;
            let mut i = blank(def, enc);
            i.imm = if enc == Encoding::Flat {
                w0 & 0xfff
            } else {
                sext(w0 & 0x1fff, 13)
            };
            if w0 & (1 << 13) != 0 {
                return Err(illegal(w0, pc, "FLAT LDS bit is not supported"));
            }
            if w0 & (1 << 16) != 0 {
                i.mem |= mflag::GLC;
            }
            if w0 & (1 << 17) != 0 {
                i.mem |= mflag::SLC;
            }
            if w1 & (1 << 23) != 0 {
                i.mem |= mflag::ACC;
            }
            i.src[0] = Operand::Vgpr((w1 & 0xff) as u8);
            i.src[1] = Operand::Vgpr(((w1 >> 8) & 0xff) as u8);
            let saddr = ((w1 >> 16) & 0x7f) as u8;
            i.src[2] = if enc == Encoding::Flat || saddr == 0x7f {
                Operand::None
            } else {
                Operand::Sgpr(saddr)
            };
            i.dst = (w1 >> 24) as u8;
            i
        }
        Encoding::Mubuf => {
            let w1 = words.get(1)?;
            d.len = 8;
            let def = find(enc, op(w0 >> 18, 0x7f))?;
            let mut i = blank(def, enc);
            i.imm = w0 & 0xfff;
            for (bit, f) in [
                (12, mflag::OFFEN),
                (13, mflag::IDXEN),
                (14, mflag::GLC),
                (17, mflag::SLC),
            ] {
                if w0 & (1 << bit) != 0 {
                    i.mem |= f;
                }
            }
            if w0 & (1 << 16) != 0 {
                // Loads to LDS: only the dword form (what Tensile's DirectToLds kernels use).
                if def.code != 0x14 {
                    return Err(illegal(
                        w0,
                        pc,
                        "MUBUF LDS bit is supported only on buffer_load_dword",
                    ));
                }
                i.mem |= mflag::LDS;
            }
            if w1 & (1 << 23) != 0 {
                i.mem |= mflag::ACC;
            }
            i.src[0] = Operand::Vgpr((w1 & 0xff) as u8);
            i.src[1] = Operand::Vgpr(((w1 >> 8) & 0xff) as u8);
            i.dst = ((w1 >> 8) & 0xff) as u8;
            i.sdst = (((w1 >> 16) & 0x1f) * 4) as u8;
            i.src[2] = d.src(op(w1 >> 24, 0xff), Ty::B32, &mut words)?;
            i
        }
        Encoding::Mtbuf | Encoding::Mimg | Encoding::Exp | Encoding::Vintrp => {
            return Err(unsupported(enc, 0, pc));
        }
    };
    inst.len = d.len;
    Ok(inst)
}

/// Decodes src0 of a VOP1/VOP2/VOPC: a plain operand, or the SDWA or DPP dword.
fn vop_src0<F: FnMut(u64) -> Result<u32, ShaderError>>(
    i: &mut Inst,
    d: &mut Dec,
    code: u16,
    ty: Ty,
    words: &mut Words<'_, F>,
) -> Result<Operand, ShaderError> {
    match code {
        249 => {
            let w1 = words.get(1)?;
            d.len = 8;
            let sel = |v: u32| (v & 7) as u8;
            i.sdwa = Some(Sdwa {
                dst_sel: if i.enc == Encoding::Vopc {
                    6
                } else {
                    sel(w1 >> 8)
                },
                dst_unused: if i.enc == Encoding::Vopc {
                    0
                } else {
                    ((w1 >> 11) & 3) as u8
                },
                src_sel: [sel(w1 >> 16), sel(w1 >> 24)],
                sext: [w1 & (1 << 19) != 0, w1 & (1 << 27) != 0],
            });
            if i.enc != Encoding::Vopc {
                i.clamp = w1 & (1 << 13) != 0;
                i.omod = ((w1 >> 14) & 3) as u8;
            }
            i.neg = ((w1 >> 20) & 1) as u8 | (((w1 >> 28) & 1) << 1) as u8;
            i.abs = ((w1 >> 21) & 1) as u8 | (((w1 >> 29) & 1) << 1) as u8;
            let s0 = (w1 & 0xff) as u8;
            if w1 & (1 << 23) != 0 {
                // S0: src0 is a scalar operand code.
                d.src(u16::from(s0), ty, words)
            } else {
                Ok(Operand::Vgpr(s0))
            }
        }
        250 => {
            let w1 = words.get(1)?;
            d.len = 8;
            i.dpp = Some(Dpp {
                ctrl: ((w1 >> 8) & 0x1ff) as u16,
                bound_ctrl: w1 & (1 << 19) != 0,
                bank_mask: ((w1 >> 24) & 0xf) as u8,
                row_mask: ((w1 >> 28) & 0xf) as u8,
            });
            i.neg = ((w1 >> 20) & 1) as u8 | (((w1 >> 22) & 1) << 1) as u8;
            i.abs = ((w1 >> 21) & 1) as u8 | (((w1 >> 23) & 1) << 1) as u8;
            Ok(Operand::Vgpr((w1 & 0xff) as u8))
        }
        _ => d.src(code, ty, words),
    }
}

fn decode_vop2<F: FnMut(u64) -> Result<u32, ShaderError>>(
    w0: u32,
    d: &mut Dec,
    words: &mut Words<'_, F>,
) -> Result<Inst, ShaderError> {
    let code = ((w0 >> 25) & 0x3f) as u16;
    let def = match table::lookup(Encoding::Vop2, code) {
        Some(def) if def.supported() => def,
        _ => return Err(unsupported(Encoding::Vop2, code, d.pc)),
    };
    let mut i = blank(def, Encoding::Vop2);
    i.dst = ((w0 >> 17) & 0xff) as u8;
    i.src[0] = vop_src0(&mut i, d, (w0 & 0x1ff) as u16, def.ty[1], words)?;
    let mut vsrc1 = Operand::Vgpr(((w0 >> 9) & 0xff) as u8);
    if i.sdwa.is_some() && words.get(1)? & (1 << 31) != 0 {
        vsrc1 = d.src(((w0 >> 9) & 0xff) as u16, def.ty[2], words)?;
    }
    i.src[1] = vsrc1;
    if def.has(flag::MADMK) || def.has(flag::MADAK) {
        let k = words.get(1)?;
        d.len = 8;
        let k = Operand::Const(u64::from(k));
        if def.has(flag::MADMK) {
            i.src[1] = k;
            i.src[2] = vsrc1;
        } else {
            i.src[2] = k;
        }
    }
    if def.has(flag::VCC_IN) {
        i.src[2] = Operand::Sgpr(reg::VCC as u8);
    }
    if def.has(flag::MAC) {
        i.src[2] = Operand::Vgpr(i.dst);
    }
    Ok(i)
}

/// What VOP3 and VOP3P share: the second dword, the row, the destination and the three
/// sources (no literal, SDWA or DPP in the 64-bit encodings).
fn vop3_common<F: FnMut(u64) -> Result<u32, ShaderError>>(
    enc: Encoding,
    code: u16,
    w0: u32,
    d: &mut Dec,
    words: &mut Words<'_, F>,
    nsrc: impl Fn(&OpDef) -> usize,
) -> Result<(Inst, u32), ShaderError> {
    let w1 = words.get(1)?;
    d.len = 8;
    let def = match table::lookup(enc, code) {
        Some(def) if def.supported() => def,
        _ => return Err(unsupported(enc, code, d.pc)),
    };
    let mut i = blank(def, enc);
    i.dst = (w0 & 0xff) as u8;
    i.clamp = w0 & (1 << 15) != 0;
    i.neg = ((w1 >> 29) & 7) as u8;
    let codes = [
        (w1 & 0x1ff) as u16,
        ((w1 >> 9) & 0x1ff) as u16,
        ((w1 >> 18) & 0x1ff) as u16,
    ];
    for (n, c) in codes.iter().enumerate().take(nsrc(def)) {
        if matches!(*c, 249 | 250 | 255) {
            return Err(illegal(
                w0,
                d.pc,
                "no literal, SDWA or DPP in a 64-bit VOP encoding",
            ));
        }
        i.src[n] = d.src(*c, def.ty[n + 1], words)?;
    }
    if def.has(flag::SRC_AGPR) {
        if let Operand::Vgpr(r) = i.src[0] {
            i.src[0] = Operand::Agpr(r);
        }
    }
    Ok((i, w1))
}

fn decode_vop3<F: FnMut(u64) -> Result<u32, ShaderError>>(
    w0: u32,
    d: &mut Dec,
    words: &mut Words<'_, F>,
) -> Result<Inst, ShaderError> {
    let code = ((w0 >> 16) & 0x3ff) as u16;
    let nsrc = |def: &OpDef| if def.has(flag::MAC) { 2 } else { 3 };
    let (mut i, w1) = vop3_common(Encoding::Vop3, code, w0, d, words, nsrc)?;
    if i.def.enc == Encoding::Vopc {
        i.sdst = (w0 & 0x7f) as u8;
    }
    if i.def.has(flag::VOP3B) {
        i.sdst = ((w0 >> 8) & 0x7f) as u8;
    } else {
        i.abs = ((w0 >> 8) & 7) as u8;
        i.opsel = ((w0 >> 11) & 0xf) as u8;
    }
    i.omod = ((w1 >> 27) & 3) as u8;
    if i.def.has(flag::MAC) {
        i.src[2] = Operand::Vgpr(i.dst);
    }
    Ok(i)
}

fn decode_vop3p<F: FnMut(u64) -> Result<u32, ShaderError>>(
    w0: u32,
    d: &mut Dec,
    words: &mut Words<'_, F>,
) -> Result<Inst, ShaderError> {
    let code = ((w0 >> 16) & 0x7f) as u16;
    let (mut i, w1) = vop3_common(Encoding::Vop3p, code, w0, d, words, |_| 3)?;
    if i.def.has(flag::MFMA) {
        // VOP3P-MAI: CBSZ, ABID and ACC_CD where VOP3P has NEG_HI, OPSEL and CLAMP; ACC (A and
        // B are AGPRs) where it has OPSEL_HI; BLGP where it has NEG.
        i.mai = Mai {
            cbsz: ((w0 >> 8) & 7) as u8,
            abid: ((w0 >> 11) & 0xf) as u8,
            blgp: (w1 >> 29) as u8,
            acc_cd: w0 & (1 << 15) != 0,
        };
        i.clamp = false;
        i.neg = 0;
        for n in 0..2 {
            if let Operand::Vgpr(r) = i.src[n] {
                if w1 >> (27 + n) & 1 != 0 {
                    i.src[n] = Operand::Agpr(r);
                }
            }
        }
        if let Operand::Vgpr(r) = i.src[2] {
            if i.mai.acc_cd {
                i.src[2] = Operand::Agpr(r);
            }
        }
        return Ok(i);
    }
    i.neg_hi = ((w0 >> 8) & 7) as u8;
    i.opsel = ((w0 >> 11) & 7) as u8;
    i.opsel_hi = ((w1 >> 27) & 3) as u8 | (((w0 >> 14) & 1) << 2) as u8;
    Ok(i)
}
