//! A small reader of AMDGPU code objects (ELF64): finds a kernel's descriptor (`NAME.kd`) and
//! the bytes of the loadable segments, enough to load a code object into test memory, and the
//! sections of any ELF64 file by name (a host library's `.hip_fatbin`).

use std::collections::HashSet;

/// `e_machine` of AMDGPU code objects.
pub const EM_AMDGPU: u16 = 224;

/// A code object that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ElfError {
    /// Not a little-endian ELF64 file.
    #[error("not an ELF64 little-endian file")]
    NotElf,
    /// A header or table points outside the file.
    #[error("ELF structure out of bounds")]
    Truncated,
    /// No symbol of that name.
    #[error("no symbol {0}")]
    NoSymbol(String),
}

/// A loadable segment: `data` at virtual address `vaddr`, `memsz` bytes in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Virtual address (relative to the load base).
    pub vaddr: u64,
    /// Bytes in memory (the rest after `data` is zero).
    pub memsz: u64,
    /// The file bytes.
    pub data: Vec<u8>,
}

/// A PT_LOAD segment as its program header gives it, the file bytes borrowed.
struct Load<'a> {
    vaddr: u64,
    memsz: u64,
    data: &'a [u8],
}

/// A symbol of the symbol tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    /// Its name.
    pub name: String,
    /// Its value (an address relative to the load base).
    pub value: u64,
    /// Its size (0 where the assembler gave none, as Tensile's assembly kernels do).
    pub size: u64,
    /// Whether it is a function (`STT_FUNC`): the code of a kernel or of a callee.
    pub func: bool,
}

/// A parsed code object.
#[derive(Debug, Clone)]
pub struct CodeObject<'a> {
    bytes: &'a [u8],
    symbols: Vec<Symbol>,
}

fn rd<const N: usize>(b: &[u8], at: usize) -> Result<[u8; N], ElfError> {
    let s = b
        .get(at..at.checked_add(N).ok_or(ElfError::Truncated)?)
        .ok_or(ElfError::Truncated)?;
    let mut out = [0u8; N];
    out.copy_from_slice(s);
    Ok(out)
}

fn u16_at(b: &[u8], at: usize) -> Result<u16, ElfError> {
    Ok(u16::from_le_bytes(rd(b, at)?))
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, ElfError> {
    Ok(u32::from_le_bytes(rd(b, at)?))
}

fn u64_at(b: &[u8], at: usize) -> Result<u64, ElfError> {
    Ok(u64::from_le_bytes(rd(b, at)?))
}

fn usz(v: u64) -> Result<usize, ElfError> {
    usize::try_from(v).map_err(|_| ElfError::Truncated)
}

fn check_elf(bytes: &[u8]) -> Result<(), ElfError> {
    if bytes.get(..4) != Some(b"\x7fELF") || bytes.get(4) != Some(&2) || bytes.get(5) != Some(&1) {
        return Err(ElfError::NotElf);
    }
    Ok(())
}

/// `e_machine` of an ELF64 little-endian file ([`EM_AMDGPU`] for a code object, 62 for an x86-64
/// host library).
pub fn machine(bytes: &[u8]) -> Result<u16, ElfError> {
    check_elf(bytes)?;
    u16_at(bytes, 0x12)
}

/// The contents of the section called `name` of an ELF64 little-endian file (`None` when it has
/// none, or the section has no file bytes).
pub fn section<'b>(bytes: &'b [u8], name: &str) -> Result<Option<&'b [u8]>, ElfError> {
    check_elf(bytes)?;
    let shoff = usz(u64_at(bytes, 0x28)?)?;
    let shentsize = usize::from(u16_at(bytes, 0x3a)?);
    let shnum = usize::from(u16_at(bytes, 0x3c)?);
    let shstrndx = usize::from(u16_at(bytes, 0x3e)?);
    let strsh = shoff.saturating_add(shstrndx.saturating_mul(shentsize));
    let stroff = usz(u64_at(bytes, strsh.saturating_add(0x18))?)?;
    for k in 0..shnum {
        let sh = shoff.saturating_add(k * shentsize);
        let name_off = u32_at(bytes, sh)? as usize;
        let start = stroff.saturating_add(name_off);
        let rest = bytes.get(start..).ok_or(ElfError::Truncated)?;
        if rest.get(..name.len()) != Some(name.as_bytes()) || rest.get(name.len()) != Some(&0) {
            continue;
        }
        // SHT_NOBITS has no file bytes.
        if u32_at(bytes, sh.saturating_add(4))? == 8 {
            return Ok(None);
        }
        let off = usz(u64_at(bytes, sh.saturating_add(0x18))?)?;
        let size = usz(u64_at(bytes, sh.saturating_add(0x20))?)?;
        return bytes
            .get(off..off.saturating_add(size))
            .map(Some)
            .ok_or(ElfError::Truncated);
    }
    Ok(None)
}

impl<'a> CodeObject<'a> {
    /// Parses the headers and the symbol table.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, ElfError> {
        check_elf(bytes)?;
        let shoff = usz(u64_at(bytes, 0x28)?)?;
        let shentsize = usize::from(u16_at(bytes, 0x3a)?);
        let shnum = usize::from(u16_at(bytes, 0x3c)?);
        let mut symbols = Vec::new();
        let mut seen = HashSet::new();
        for k in 0..shnum {
            let sh = shoff.saturating_add(k * shentsize);
            let ty = u32_at(bytes, sh.saturating_add(4))?;
            // SHT_SYMTAB 2, SHT_DYNSYM 11
            if ty != 2 && ty != 11 {
                continue;
            }
            let off = usz(u64_at(bytes, sh.saturating_add(0x18))?)?;
            let size = usz(u64_at(bytes, sh.saturating_add(0x20))?)?;
            let link = u32_at(bytes, sh.saturating_add(0x28))? as usize;
            let entsize = usz(u64_at(bytes, sh.saturating_add(0x38))?)?.max(24);
            let strsh = shoff.saturating_add(link * shentsize);
            let stroff = usz(u64_at(bytes, strsh.saturating_add(0x18))?)?;
            for s in (off..off.saturating_add(size)).step_by(entsize) {
                let name_off = u32_at(bytes, s)? as usize;
                let info = *bytes.get(s.saturating_add(4)).ok_or(ElfError::Truncated)?;
                let value = u64_at(bytes, s.saturating_add(8))?;
                let sz = u64_at(bytes, s.saturating_add(16))?;
                let start = stroff.saturating_add(name_off);
                let rest = bytes.get(start..).ok_or(ElfError::Truncated)?;
                let end = rest
                    .iter()
                    .position(|&c| c == 0)
                    .ok_or(ElfError::Truncated)?;
                let name = String::from_utf8_lossy(&rest[..end]).into_owned();
                if !name.is_empty() && seen.insert(name.clone()) {
                    symbols.push(Symbol {
                        name,
                        value,
                        size: sz,
                        func: info & 0xf == 2,
                    });
                }
            }
        }
        Ok(Self { bytes, symbols })
    }

    /// (address, size) of a symbol.
    pub fn symbol(&self, name: &str) -> Result<(u64, u64), ElfError> {
        self.symbols
            .iter()
            .find(|s| s.name == name)
            .map(|s| (s.value, s.size))
            .ok_or_else(|| ElfError::NoSymbol(name.to_string()))
    }

    /// Every symbol: (name, address).
    pub fn symbols(&self) -> impl Iterator<Item = (&str, u64)> {
        self.symbols.iter().map(|s| (s.name.as_str(), s.value))
    }

    /// Every symbol with its size and kind.
    pub fn symbol_table(&self) -> &[Symbol] {
        &self.symbols
    }

    /// Names of the kernels (symbols `NAME.kd`).
    pub fn kernels(&self) -> Vec<String> {
        self.symbols
            .iter()
            .filter_map(|s| s.name.strip_suffix(".kd").map(String::from))
            .collect()
    }

    /// The file bytes of the PT_LOAD segments, borrowed: (virtual address, bytes).
    pub fn loaded(&self) -> Result<Vec<(u64, &'a [u8])>, ElfError> {
        Ok(self
            .load_headers()?
            .into_iter()
            .map(|l| (l.vaddr, l.data))
            .collect())
    }

    /// The PT_LOAD segments.
    pub fn segments(&self) -> Result<Vec<Segment>, ElfError> {
        Ok(self
            .load_headers()?
            .into_iter()
            .map(|l| Segment {
                vaddr: l.vaddr,
                memsz: l.memsz,
                data: l.data.to_vec(),
            })
            .collect())
    }

    /// Each PT_LOAD program header, its file bytes borrowed.
    fn load_headers(&self) -> Result<Vec<Load<'a>>, ElfError> {
        let b = self.bytes;
        let phoff = usz(u64_at(b, 0x20)?)?;
        let phentsize = usize::from(u16_at(b, 0x36)?);
        let phnum = usize::from(u16_at(b, 0x38)?);
        let mut out = Vec::new();
        for k in 0..phnum {
            let ph = phoff.saturating_add(k * phentsize);
            if u32_at(b, ph)? != 1 {
                continue;
            }
            let off = usz(u64_at(b, ph.saturating_add(8))?)?;
            let vaddr = u64_at(b, ph.saturating_add(16))?;
            let filesz = usz(u64_at(b, ph.saturating_add(32))?)?;
            let memsz = u64_at(b, ph.saturating_add(40))?;
            let data = b
                .get(off..off.saturating_add(filesz))
                .ok_or(ElfError::Truncated)?;
            out.push(Load { vaddr, memsz, data });
        }
        Ok(out)
    }
}
