//! Which instructions of a code object's kernels the core cannot execute.
//!
//! [`scan`] walks the machine code of every kernel of a code object (from its descriptor's entry
//! point to the end of its function symbol, or, where the symbol has no size as in Tensile's
//! assembly kernels, to the next function or kernel entry) and decodes each instruction with
//! the core's own decoder; the zero words that align the next kernel are not walked. An
//! instruction the decoder refuses is a [`Gap`]; its length comes from [`decode::length_of`] so
//! the walk goes on. A kernel is runnable only when its walk met no gap.
//!
//! Calls (`s_swappc_b64`) are not followed from a kernel; instead every function symbol that is
//! no kernel's entry is walked on its own as a callee ([`KernelScan::callee`]), so what the
//! callees need shows too, though not which kernels call them.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::decode::{self, encoding_of, length_of, opcode_of};
use crate::dispatch::KernelDescriptor;
use crate::elf::{CodeObject, ElfError};
use crate::error::ShaderError;
use crate::table;

/// An instruction the core cannot execute, as the decoder names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Gap {
    /// The encoding's name (`VOP3`, `MUBUF`).
    pub encoding: &'static str,
    /// The opcode field.
    pub opcode: u16,
    /// The mnemonic, where the core's table knows the opcode.
    pub mnemonic: Option<&'static str>,
    /// Why: `not executed` (a row without semantics), `unknown opcode` (no row), or what the
    /// decoder says is wrong (an LDS bit, GDS, a literal in a 64-bit encoding).
    pub reason: &'static str,
}

impl std::fmt::Display for Gap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.mnemonic {
            Some(m) => write!(f, "{m}"),
            None if self.encoding == "?" => write!(f, "(no gfx9 encoding)"),
            None => write!(f, "{} {:#x}", self.encoding, self.opcode),
        }
    }
}

/// What the walk over one kernel found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelScan {
    /// The kernel's name (its descriptor symbol without `.kd`).
    pub name: String,
    /// Instructions walked (decoded, or stepped over as gaps).
    pub instructions: u64,
    /// Bytes of machine code walked.
    pub bytes: u64,
    /// Each gap and how often it occurs in the kernel.
    pub gaps: BTreeMap<Gap, u64>,
    /// Each mnemonic the core decoded and how often.
    pub mnemonics: BTreeMap<&'static str, u64>,
    /// Each DPP_CTRL value of the decoded DPP instructions and how often (the decoder takes any
    /// value; which ones the core models is a question for the run, not the decode).
    pub dpp_ctrls: BTreeMap<u16, u64>,
    /// The walk ran into bytes that are not in the file (a bad descriptor or symbol).
    pub truncated: bool,
    /// Not a kernel but a function of the code object that is no kernel's entry (a callee,
    /// reached by `s_swappc_b64`): walked so that its gaps are seen, not counted as a kernel.
    pub callee: bool,
}

impl KernelScan {
    /// Whether every instruction of the kernel executes.
    pub fn runnable(&self) -> bool {
        self.gaps.is_empty() && !self.truncated
    }
}

/// Reads dwords at virtual addresses of a code object's loadable segments.
struct Image<'a> {
    segments: Vec<(u64, &'a [u8])>,
}

impl Image<'_> {
    fn segment(&self, va: u64) -> Option<(u64, &[u8])> {
        self.segments
            .iter()
            .find(|(base, data)| va >= *base && va - *base < data.len() as u64)
            .map(|(b, d)| (*b, *d))
    }

    fn bytes(&self, va: u64, len: usize) -> Option<&[u8]> {
        let (base, data) = self.segment(va)?;
        let at = usize::try_from(va - base).ok()?;
        data.get(at..at.checked_add(len)?)
    }

    fn word(&self, va: u64) -> Option<u32> {
        let b = self.bytes(va, 4)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The end of the segment holding `va`.
    fn end(&self, va: u64) -> Option<u64> {
        self.segment(va).map(|(b, d)| b + d.len() as u64)
    }
}

/// The gap an instruction the decoder refused is, or `None` for a fetch fault.
fn gap_of(e: &ShaderError) -> Option<Gap> {
    match *e {
        ShaderError::UnsupportedOpcode {
            encoding,
            opcode,
            mnemonic,
            ..
        } => Some(Gap {
            encoding: encoding.name(),
            opcode,
            mnemonic,
            reason: if mnemonic.is_some() {
                "not executed"
            } else {
                "unknown opcode"
            },
        }),
        ShaderError::IllegalInstruction { word, what, .. } => Some(match encoding_of(word) {
            Some(enc) => {
                let opcode = opcode_of(enc, word);
                Gap {
                    encoding: enc.name(),
                    opcode,
                    mnemonic: table::lookup(enc, opcode).map(|d| d.name),
                    reason: what,
                }
            }
            None => Gap {
                encoding: "?",
                opcode: 0,
                mnemonic: None,
                reason: what,
            },
        }),
        ShaderError::MemoryFault { .. } => None,
    }
}

/// Walks the instructions in `[start, end)`.
fn walk(image: &Image<'_>, name: String, start: u64, end: u64) -> KernelScan {
    let mut k = KernelScan {
        name,
        ..KernelScan::default()
    };
    let fault = |addr: u64| ShaderError::MemoryFault {
        fault: crate::error::Fault { addr, write: false },
        pc: addr,
    };
    let mut pc = start;
    while pc < end {
        let Some(w0) = image.word(pc) else {
            k.truncated = true;
            break;
        };
        let len = match decode::decode(pc, |a| image.word(a).ok_or_else(|| fault(a))) {
            Ok(inst) => {
                *k.mnemonics.entry(inst.def.name).or_default() += 1;
                if let Some(d) = inst.dpp {
                    *k.dpp_ctrls.entry(d.ctrl).or_default() += 1;
                }
                u64::from(inst.len)
            }
            Err(e) => {
                let Some(gap) = gap_of(&e) else {
                    k.truncated = true;
                    break;
                };
                *k.gaps.entry(gap).or_default() += 1;
                u64::from(length_of(w0).unwrap_or(4))
            }
        };
        k.instructions += 1;
        k.bytes += len;
        pc += len;
    }
    k
}

/// Scans every kernel of a code object.
pub fn scan(bytes: &[u8]) -> Result<Vec<KernelScan>, ElfError> {
    let co = CodeObject::parse(bytes)?;
    let image = Image {
        segments: co.loaded()?,
    };
    let symbols = co.symbol_table();
    // Every place code starts: functions and kernel entries.
    let mut entries = Vec::new();
    for s in symbols {
        let Some(name) = s.name.strip_suffix(".kd") else {
            continue;
        };
        let kd = image
            .bytes(s.value, 64)
            .and_then(|b| KernelDescriptor::parse(b).ok());
        let entry = kd.map(|kd| s.value.wrapping_add_signed(kd.entry_offset));
        entries.push((name.to_string(), entry));
    }
    let mut starts: Vec<u64> = symbols
        .iter()
        .filter(|s| s.func)
        .map(|s| s.value)
        .chain(entries.iter().filter_map(|(_, e)| *e))
        .collect();
    starts.sort_unstable();
    starts.dedup();
    let sizes: HashMap<u64, u64> = symbols
        .iter()
        .filter(|s| s.func && s.size > 0)
        .map(|s| (s.value, s.size))
        .collect();
    let kernel_entries: HashSet<u64> = entries.iter().filter_map(|(_, e)| *e).collect();
    let mut out = Vec::with_capacity(entries.len());
    for (name, entry) in entries {
        let Some(entry) = entry else {
            out.push(KernelScan {
                name,
                truncated: true,
                ..KernelScan::default()
            });
            continue;
        };
        let sized = sizes.get(&entry).map(|s| entry + s);
        let next = starts.get(starts.partition_point(|&a| a <= entry)).copied();
        let seg_end = image.end(entry).unwrap_or(entry);
        let mut end = sized.or(next).unwrap_or(seg_end).min(seg_end);
        if sized.is_none() {
            // Kernels are aligned with zero words, which would read as `v_cndmask_b32`; no
            // kernel ends with one (the last instruction is `s_endpgm` or a branch).
            while end >= entry + 8 && image.word(end - 4) == Some(0) {
                end -= 4;
            }
        }
        out.push(walk(&image, name, entry, end));
    }
    for f in symbols
        .iter()
        .filter(|s| s.func && !kernel_entries.contains(&s.value))
    {
        let next = starts
            .get(starts.partition_point(|&a| a <= f.value))
            .copied();
        let seg_end = image.end(f.value).unwrap_or(f.value);
        let end = if f.size > 0 {
            f.value + f.size
        } else {
            next.unwrap_or(seg_end)
        };
        let mut k = walk(&image, f.name.clone(), f.value, end.min(seg_end));
        k.callee = true;
        out.push(k);
    }
    log::debug!("scanned {} kernels and callees", out.len());
    Ok(out)
}

/// What a Tensile kernel computes, from its name (`Cijk_Ailk_Bljk_SB_MT...`: the token after
/// the index strings names the types of A/B, then C/D and the compute type): `sgemm`, `dgemm`,
/// `hgemm` (f16 in and out), `hgemm_ex f32` (f16 in, f32 out), `bf16 gemm_ex` (bf16 in), `other
/// tensile` (complex, int8), or `rocblas` for kernels that are not Tensile's.
pub fn gemm_class(name: &str) -> &'static str {
    let mut t = name.split('_');
    let tensile = t.next().is_some_and(|c| c.starts_with("Cij"))
        && t.next().is_some_and(|a| a.starts_with('A'))
        && t.next().is_some_and(|b| b.starts_with('B'));
    let Some(types) = t.next().filter(|_| tensile) else {
        return "rocblas";
    };
    let b = types.as_bytes();
    match (b.first(), b.get(1)) {
        (Some(b'S'), _) => "sgemm",
        (Some(b'D'), _) => "dgemm",
        (Some(b'H'), Some(b'B' | b'H')) | (Some(b'H'), None) => "hgemm",
        (Some(b'H'), Some(b'S')) => "hgemm_ex f32",
        (Some(b'B'), _) => "bf16 gemm_ex",
        _ => "other tensile",
    }
}
