//! The one table of opcodes: for every (encoding, opcode) the core knows, its mnemonic, the
//! types of its operands (which decide how inline constants and literals read) and the
//! function that executes it. The rows live beside their semantics (`salu`, `smem`, `valu`,
//! `vopc`, `vop3p`, `lds`, `vmem`); this module gathers them into the decoder's lookup.

use std::sync::OnceLock;

use crate::decode::Inst;
use crate::exec::{Ctx, Exit};

/// The instruction encodings of gfx9 (gfx90a).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// Scalar, two sources.
    Sop2,
    /// Scalar with a 16-bit immediate.
    Sopk,
    /// Scalar, one source.
    Sop1,
    /// Scalar compare.
    Sopc,
    /// Scalar program control.
    Sopp,
    /// Scalar memory.
    Smem,
    /// Vector, two sources.
    Vop2,
    /// Vector, one source.
    Vop1,
    /// Vector compare.
    Vopc,
    /// Vector, three sources (64-bit encoding, also of VOP1/VOP2/VOPC opcodes).
    Vop3,
    /// Vector packed math (and MAI).
    Vop3p,
    /// Local data share.
    Ds,
    /// Flat memory.
    Flat,
    /// Global memory.
    Global,
    /// Scratch (private) memory.
    Scratch,
    /// Untyped buffer memory.
    Mubuf,
    /// Typed buffer memory.
    Mtbuf,
    /// Image memory.
    Mimg,
    /// Export.
    Exp,
    /// Interpolation.
    Vintrp,
}

impl Encoding {
    /// The encoding's name as the ISA documents spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sop2 => "SOP2",
            Self::Sopk => "SOPK",
            Self::Sop1 => "SOP1",
            Self::Sopc => "SOPC",
            Self::Sopp => "SOPP",
            Self::Smem => "SMEM",
            Self::Vop2 => "VOP2",
            Self::Vop1 => "VOP1",
            Self::Vopc => "VOPC",
            Self::Vop3 => "VOP3",
            Self::Vop3p => "VOP3P",
            Self::Ds => "DS",
            Self::Flat => "FLAT",
            Self::Global => "GLOBAL",
            Self::Scratch => "SCRATCH",
            Self::Mubuf => "MUBUF",
            Self::Mtbuf => "MTBUF",
            Self::Mimg => "MIMG",
            Self::Exp => "EXP",
            Self::Vintrp => "VINTRP",
        }
    }
}

/// An operand's type: its width, and how inline constants and literals read for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    /// 16-bit integer (float inline constants read as f16 bits).
    B16,
    /// 32-bit integer (float inline constants read as f32 bits).
    B32,
    /// 64-bit integer, zero-extending literals (float inline constants read as f64 bits).
    B64,
    /// 64-bit signed integer: literals sign-extend.
    I64,
    /// IEEE half.
    F16,
    /// IEEE single.
    F32,
    /// IEEE double: a literal is the high dword.
    F64,
}

impl Ty {
    /// Whether the operand is 64 bits wide.
    pub fn is_64(self) -> bool {
        matches!(self, Ty::B64 | Ty::I64 | Ty::F64)
    }
}

/// The function executing one instruction.
pub(crate) type ExecFn = fn(&mut Ctx<'_>, &Inst) -> Result<(), Exit>;

/// Row flags.
pub(crate) mod flag {
    /// The VOP3 form has an SDST field (carry out, div_scale's VCC).
    pub(crate) const VOP3B: u16 = 1;
    /// VOP2 form reads VCC as its third source (carry in, cndmask's mask).
    pub(crate) const VCC_IN: u16 = 2;
    /// VOP2 `v_madmk`: a literal K is the second multiplicand.
    pub(crate) const MADMK: u16 = 4;
    /// VOP2 `v_madak`: a literal K is the addend.
    pub(crate) const MADAK: u16 = 8;
    /// Accumulates into its destination (`v_mac`, `v_fmac`): the destination is the third source.
    pub(crate) const MAC: u16 = 16;
    /// The scalar destination field is a source (`s_cmpk_*`, `s_addk`, `s_setreg`, `s_cmovk`).
    pub(crate) const SDST_IS_SRC: u16 = 32;
    /// A 32-bit literal always follows (`s_setreg_imm32_b32`).
    pub(crate) const LITERAL: u16 = 64;
    /// SSRC1 is an immediate, not an operand (`s_set_gpr_idx_on`).
    pub(crate) const SRC1_IMM: u16 = 128;
    /// The destination is a scalar register (`v_readfirstlane`, `v_readlane`).
    pub(crate) const SDST: u16 = 256;
    /// The source is an AGPR (`v_accvgpr_read`).
    pub(crate) const SRC_AGPR: u16 = 512;
    /// The destination is an AGPR (`v_accvgpr_write`).
    pub(crate) const DST_AGPR: u16 = 1024;
    /// 16-bit VOP3 op whose OPSEL selects halves.
    pub(crate) const OPSEL16: u16 = 2048;
    /// A matrix instruction (VOP3P-MAI fields, `v_mfma_*`).
    pub(crate) const MFMA: u16 = 4096;
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct OpDef {
    /// The encoding the opcode belongs to (VOP1/VOP2/VOPC opcodes are also reachable through
    /// VOP3 at their offsets there).
    pub enc: Encoding,
    /// The opcode number in that encoding.
    pub code: u16,
    /// The mnemonic.
    pub name: &'static str,
    pub(crate) exec: Option<ExecFn>,
    /// Operand types: destination, src0, src1, src2.
    pub ty: [Ty; 4],
    pub(crate) flags: u16,
}

impl OpDef {
    /// Whether the core executes this opcode (rows without are named, for error messages).
    pub fn supported(&self) -> bool {
        self.exec.is_some()
    }

    pub(crate) fn has(&self, f: u16) -> bool {
        self.flags & f != 0
    }
}

/// Shorthands for rows.
pub(crate) const fn row(
    enc: Encoding,
    code: u16,
    name: &'static str,
    exec: ExecFn,
    ty: [Ty; 4],
    flags: u16,
) -> OpDef {
    OpDef {
        enc,
        code,
        name,
        exec: Some(exec),
        ty,
        flags,
    }
}

/// A known opcode the core does not execute.
pub(crate) const fn unsupported(enc: Encoding, code: u16, name: &'static str) -> OpDef {
    OpDef {
        enc,
        code,
        name,
        exec: None,
        ty: [Ty::B32; 4],
        flags: 0,
    }
}

/// Concatenates rows at compile time (families built from several macro-made arrays).
pub(crate) const fn concat<const N: usize>(parts: &[&[OpDef]]) -> [OpDef; N] {
    let mut out = [unsupported(Encoding::Sopp, 0, ""); N];
    let mut k = 0;
    let mut p = 0;
    while p < parts.len() {
        let mut j = 0;
        while j < parts[p].len() {
            out[k] = parts[p][j];
            k += 1;
            j += 1;
        }
        p += 1;
    }
    out
}

/// All rows, from every family.
fn families() -> [&'static [OpDef]; 16] {
    [
        crate::salu::SOP2,
        crate::salu::SOPK,
        crate::salu::SOP1,
        crate::salu::SOPC,
        crate::salu::SOPP,
        crate::smem::SMEM,
        crate::valu::VOP2,
        crate::valu::VOP1,
        crate::valu::VOP3,
        crate::vopc::VOPC,
        crate::vop3p::VOP3P,
        crate::lds::DS,
        crate::vmem::FLAT,
        crate::vmem::GLOBAL,
        crate::vmem::SCRATCH,
        crate::vmem::MUBUF,
    ]
}

/// Every row of the table, in family order.
pub fn rows() -> impl Iterator<Item = &'static OpDef> {
    families().into_iter().flatten()
}

struct Lookup {
    by_enc: Vec<(Encoding, Vec<Option<&'static OpDef>>)>,
}

fn lookup_table() -> &'static Lookup {
    static LOOKUP: OnceLock<Lookup> = OnceLock::new();
    LOOKUP.get_or_init(|| {
        let mut by_enc: Vec<(Encoding, Vec<Option<&'static OpDef>>)> = Vec::new();
        for d in rows() {
            let i = match by_enc.iter().position(|(e, _)| *e == d.enc) {
                Some(i) => i,
                None => {
                    by_enc.push((d.enc, vec![None; 1024]));
                    by_enc.len() - 1
                }
            };
            if let Some(slot) = by_enc[i].1.get_mut(usize::from(d.code)) {
                // The first row of a code wins; a test checks there are no duplicates.
                if slot.is_none() {
                    *slot = Some(d);
                }
            }
        }
        Lookup { by_enc }
    })
}

/// The row for `code` in `enc` (VOP3 codes of VOP1/VOP2/VOPC opcodes are found in those
/// families).
pub fn lookup(enc: Encoding, code: u16) -> Option<&'static OpDef> {
    let t = lookup_table();
    let (enc, code) = match enc {
        Encoding::Vop3 if code < 0x100 => (Encoding::Vopc, code),
        Encoding::Vop3 if code < 0x140 => (Encoding::Vop2, code - 0x100),
        Encoding::Vop3 if code < 0x1c0 => (Encoding::Vop1, code - 0x140),
        e => (e, code),
    };
    let (_, v) = t.by_enc.iter().find(|(e, _)| *e == enc)?;
    v.get(usize::from(code)).copied().flatten()
}
