//! A small reader of AMDGPU code objects (ELF64): finds a kernel's descriptor (`NAME.kd`) and
//! the bytes of the loadable segments, enough to load a code object into test memory.

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

/// A parsed code object.
#[derive(Debug, Clone)]
pub struct CodeObject<'a> {
    bytes: &'a [u8],
    symbols: Vec<(String, u64, u64)>,
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

impl<'a> CodeObject<'a> {
    /// Parses the headers and the symbol table.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, ElfError> {
        if bytes.get(..4) != Some(b"\x7fELF")
            || bytes.get(4) != Some(&2)
            || bytes.get(5) != Some(&1)
        {
            return Err(ElfError::NotElf);
        }
        let shoff = usz(u64_at(bytes, 0x28)?)?;
        let shentsize = usize::from(u16_at(bytes, 0x3a)?);
        let shnum = usize::from(u16_at(bytes, 0x3c)?);
        let mut symbols = Vec::new();
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
                let value = u64_at(bytes, s.saturating_add(8))?;
                let sz = u64_at(bytes, s.saturating_add(16))?;
                let start = stroff.saturating_add(name_off);
                let rest = bytes.get(start..).ok_or(ElfError::Truncated)?;
                let end = rest
                    .iter()
                    .position(|&c| c == 0)
                    .ok_or(ElfError::Truncated)?;
                let name = String::from_utf8_lossy(&rest[..end]).into_owned();
                if !name.is_empty() && !symbols.iter().any(|(n, _, _)| *n == name) {
                    symbols.push((name, value, sz));
                }
            }
        }
        Ok(Self { bytes, symbols })
    }

    /// (address, size) of a symbol.
    pub fn symbol(&self, name: &str) -> Result<(u64, u64), ElfError> {
        self.symbols
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, v, s)| (*v, *s))
            .ok_or_else(|| ElfError::NoSymbol(name.to_string()))
    }

    /// Every symbol: (name, address).
    pub fn symbols(&self) -> impl Iterator<Item = (&str, u64)> {
        self.symbols.iter().map(|(n, v, _)| (n.as_str(), *v))
    }

    /// Names of the kernels (symbols `NAME.kd`).
    pub fn kernels(&self) -> Vec<String> {
        self.symbols
            .iter()
            .filter_map(|(n, _, _)| n.strip_suffix(".kd").map(String::from))
            .collect()
    }

    /// The PT_LOAD segments.
    pub fn segments(&self) -> Result<Vec<Segment>, ElfError> {
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
                .ok_or(ElfError::Truncated)?
                .to_vec();
            out.push(Segment { vaddr, memsz, data });
        }
        Ok(out)
    }
}
