//! Save and restore: the whole state of a stopped workgroup (every wave's registers, PC, EXEC,
//! MODE, barrier state, and the LDS) as bytes and back. Compute wave save/restore stores these
//! bytes where the hardware would store wave state, and a dispatch stopped at any instruction
//! boundary ends, after restore, with the same memory as one never stopped.
//!
//! Layout (little endian): magic `KSWG`, version u32 (1); workgroup id 3 x u32; next wave u32;
//! apertures 2 x u64; waves u32; GPR_ALLOC u32; LDS_ALLOC u32; LDS length u32 and bytes; then per
//! wave: index u32, state u8 (0 ready, 1 at barrier, 2 ended), SCC u8, PC u64, MODE u32, STATUS
//! u32, TRAPSTS u32, accum offset u32, 128 SGPRs u32, VGPR count u32 and count x 64 u32 (lane
//! order).

use crate::dispatch::Apertures;
use crate::exec::WgEnv;
use crate::wave::{reg, Wave, WaveRun, LANES};
use crate::workgroup::Workgroup;

const MAGIC: &[u8; 4] = b"KSWG";
const VERSION: u32 = 1;

/// Saved bytes that do not make a workgroup.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestoreError {
    /// Not saved by this core, or by another version of it.
    #[error("not a saved workgroup (bad magic or version)")]
    Format,
    /// The bytes end early.
    #[error("saved workgroup truncated at byte {0}")]
    Truncated(usize),
    /// A field holds a value no workgroup has.
    #[error("saved workgroup has an invalid {0}")]
    Invalid(&'static str),
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn bytes(&mut self, n: usize) -> Result<&[u8], RestoreError> {
        let s = self.at.checked_add(n).and_then(|e| self.b.get(self.at..e));
        let s = s.ok_or(RestoreError::Truncated(self.at))?;
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, RestoreError> {
        Ok(self.bytes(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, RestoreError> {
        let s = self.bytes(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self) -> Result<u64, RestoreError> {
        Ok(u64::from(self.u32()?) | u64::from(self.u32()?) << 32)
    }
}

impl Workgroup {
    /// The workgroup's whole state as bytes (see the module documentation for the layout).
    pub fn save(&self) -> Vec<u8> {
        let vgprs: usize = self.waves.iter().map(|w| w.vgpr.len()).sum();
        let mut o = Vec::with_capacity(64 + self.lds.len() + self.waves.len() * 600 + vgprs * 256);
        let put32 = |o: &mut Vec<u8>, v: u32| o.extend_from_slice(&v.to_le_bytes());
        let put64 = |o: &mut Vec<u8>, v: u64| o.extend_from_slice(&v.to_le_bytes());
        o.extend_from_slice(MAGIC);
        put32(&mut o, VERSION);
        for v in self.id {
            put32(&mut o, v);
        }
        put32(&mut o, self.next);
        put64(&mut o, self.env.apertures.shared_base);
        put64(&mut o, self.env.apertures.private_base);
        put32(&mut o, self.env.waves);
        put32(&mut o, self.env.gpr_alloc);
        put32(&mut o, self.env.lds_alloc);
        put32(&mut o, self.lds.len() as u32);
        o.extend_from_slice(&self.lds);
        put32(&mut o, self.waves.len() as u32);
        for w in &self.waves {
            put32(&mut o, w.index);
            o.push(match w.run {
                WaveRun::Ready => 0,
                WaveRun::AtBarrier => 1,
                WaveRun::Ended => 2,
            });
            o.push(u8::from(w.scc));
            put64(&mut o, w.pc);
            put32(&mut o, w.mode);
            put32(&mut o, w.status);
            put32(&mut o, w.trapsts);
            put32(&mut o, w.accum_offset);
            for s in w.sgpr {
                put32(&mut o, s);
            }
            put32(&mut o, w.vgpr.len() as u32);
            for v in &w.vgpr {
                for x in v {
                    put32(&mut o, *x);
                }
            }
        }
        o
    }

    /// A workgroup from bytes [`Workgroup::save`] made.
    pub fn restore(bytes: &[u8]) -> Result<Workgroup, RestoreError> {
        let mut r = Reader { b: bytes, at: 0 };
        if r.bytes(4)? != MAGIC || r.u32()? != VERSION {
            return Err(RestoreError::Format);
        }
        let id = [r.u32()?, r.u32()?, r.u32()?];
        let next = r.u32()?;
        let apertures = Apertures {
            shared_base: r.u64()?,
            private_base: r.u64()?,
        };
        let env = WgEnv {
            apertures,
            waves: r.u32()?,
            gpr_alloc: r.u32()?,
            lds_alloc: r.u32()?,
        };
        let lds_len = r.u32()? as usize;
        if lds_len > 64 << 10 {
            return Err(RestoreError::Invalid("LDS size"));
        }
        let lds = r.bytes(lds_len)?.to_vec();
        let n = r.u32()?;
        if n > 16 {
            return Err(RestoreError::Invalid("wave count"));
        }
        let mut waves = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let index = r.u32()?;
            let run = match r.u8()? {
                0 => WaveRun::Ready,
                1 => WaveRun::AtBarrier,
                2 => WaveRun::Ended,
                _ => return Err(RestoreError::Invalid("wave state")),
            };
            let scc = r.u8()? != 0;
            let pc = r.u64()?;
            let mode = r.u32()?;
            let status = r.u32()?;
            let trapsts = r.u32()?;
            let accum_offset = r.u32()?;
            let mut sgpr = [0u32; reg::SGPRS];
            for s in sgpr.iter_mut() {
                *s = r.u32()?;
            }
            let nv = r.u32()? as usize;
            if nv > 512 {
                return Err(RestoreError::Invalid("VGPR count"));
            }
            let mut vgpr = vec![[0u32; LANES]; nv];
            for v in vgpr.iter_mut() {
                for x in v.iter_mut() {
                    *x = r.u32()?;
                }
            }
            waves.push(Wave {
                sgpr,
                vgpr,
                accum_offset,
                pc,
                scc,
                mode,
                status,
                trapsts,
                run,
                index,
            });
        }
        if r.at != bytes.len() {
            return Err(RestoreError::Invalid("length"));
        }
        let mut wg = Workgroup::new(id, waves, lds, env);
        wg.next = next;
        Ok(wg)
    }
}
