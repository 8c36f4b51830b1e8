//! The state of one wave64: everything compute wave save/restore has to carry.

/// Lanes of a wave.
pub const LANES: usize = 64;

/// One 32-bit register of every lane.
pub type Lanes = [u32; LANES];

/// Scalar register numbers (the operand codes of the special registers).
pub mod reg {
    /// FLAT_SCRATCH low dword (the pair is 102/103).
    pub const FLAT_SCRATCH: usize = 102;
    /// XNACK_MASK low dword (104/105).
    pub const XNACK_MASK: usize = 104;
    /// VCC low dword (106/107).
    pub const VCC: usize = 106;
    /// ttmp0 (ttmp0..15 are 108..123).
    pub const TTMP0: usize = 108;
    /// M0.
    pub const M0: usize = 124;
    /// EXEC low dword (126/127).
    pub const EXEC: usize = 126;
    /// The size of the scalar file as this core keeps it (operand codes 0..127).
    pub const SGPRS: usize = 128;
}

/// Hardware register ids of `s_getreg_b32`/`s_setreg_b32` and the bits this core models.
pub mod hwreg {
    /// HW_REG_MODE.
    pub const MODE: u32 = 1;
    /// HW_REG_STATUS.
    pub const STATUS: u32 = 2;
    /// HW_REG_TRAPSTS.
    pub const TRAPSTS: u32 = 3;
    /// HW_REG_HW_ID.
    pub const HW_ID: u32 = 4;
    /// HW_REG_GPR_ALLOC.
    pub const GPR_ALLOC: u32 = 5;
    /// HW_REG_LDS_ALLOC.
    pub const LDS_ALLOC: u32 = 6;
    /// HW_REG_IB_STS.
    pub const IB_STS: u32 = 7;
    /// HW_REG_SH_MEM_BASES.
    pub const SH_MEM_BASES: u32 = 15;

    /// MODE: FP_DENORM for f32, 2 bits (bit 0 of the field: keep input denormals, bit 1: keep
    /// output denormals).
    pub const MODE_DENORM32_SHIFT: u32 = 4;
    /// MODE: FP_DENORM for f16 and f64.
    pub const MODE_DENORM16_64_SHIFT: u32 = 6;
    /// MODE.DX10_CLAMP.
    pub const MODE_DX10_CLAMP: u32 = 1 << 8;
    /// MODE.IEEE.
    pub const MODE_IEEE: u32 = 1 << 9;
    /// MODE.FP16_OVFL.
    pub const MODE_FP16_OVFL: u32 = 1 << 23;
    /// MODE.GPR_IDX_EN: VGPR indexing (`s_set_gpr_idx_on`) is on.
    pub const MODE_GPR_IDX_EN: u32 = 1 << 27;

    /// STATUS.SCC.
    pub const STATUS_SCC: u32 = 1;
    /// STATUS.EXECZ.
    pub const STATUS_EXECZ: u32 = 1 << 9;
    /// STATUS.VCCZ.
    pub const STATUS_VCCZ: u32 = 1 << 10;
    /// STATUS.IN_TG: the wave belongs to a workgroup of more than one wave.
    pub const STATUS_IN_TG: u32 = 1 << 11;
    /// STATUS.IN_BARRIER.
    pub const STATUS_IN_BARRIER: u32 = 1 << 12;
    /// STATUS.HALT.
    pub const STATUS_HALT: u32 = 1 << 13;
    /// STATUS.TRAP.
    pub const STATUS_TRAP: u32 = 1 << 14;
    /// STATUS.VALID.
    pub const STATUS_VALID: u32 = 1 << 16;
}

/// Where a wave is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaveRun {
    /// Ready to execute the instruction at its PC.
    Ready,
    /// Waiting at `s_barrier` (its PC is already past it) for the rest of its workgroup.
    AtBarrier,
    /// Ended by `s_endpgm`.
    Ended,
}

static ZERO_LANES: Lanes = [0; LANES];

/// A wave64's architectural state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wave {
    /// Scalar registers by operand code: s0..s101, FLAT_SCRATCH, XNACK_MASK, VCC, ttmp0..15,
    /// M0, (125 unused), EXEC.
    pub sgpr: [u32; reg::SGPRS],
    /// The unified vector register file: the architectural VGPRs from index 0, the AGPRs from
    /// [`Wave::accum_offset`]. Reads past its end give 0, writes there are dropped.
    pub vgpr: Vec<Lanes>,
    /// Index of a0 in [`Wave::vgpr`] (gfx90a ACCUM_OFFSET, (rsrc3 bits 5:0, plus 1) x 4).
    pub accum_offset: u32,
    /// Address of the next instruction to execute.
    pub pc: u64,
    /// The scalar condition code.
    pub scc: bool,
    /// HW_REG_MODE.
    pub mode: u32,
    /// HW_REG_STATUS bits that are state of their own (PRIV, TRAP_EN, HALT, ...); SCC, EXECZ,
    /// VCCZ and IN_BARRIER are computed when read.
    pub status: u32,
    /// HW_REG_TRAPSTS.
    pub trapsts: u32,
    /// Ready, at the barrier, or ended.
    pub run: WaveRun,
    /// The wave's index in its workgroup.
    pub index: u32,
}

impl Wave {
    /// A wave with zeroed registers, `vgprs` registers in its unified file (AGPRs included).
    pub fn new(index: u32, vgprs: usize, accum_offset: u32) -> Self {
        Self {
            sgpr: [0; reg::SGPRS],
            vgpr: vec![[0; LANES]; vgprs],
            accum_offset,
            pc: 0,
            scc: false,
            mode: 0,
            status: 0,
            trapsts: 0,
            run: WaveRun::Ready,
            index,
        }
    }

    /// EXEC.
    #[inline]
    pub fn exec(&self) -> u64 {
        self.sgpr64(reg::EXEC)
    }

    /// Sets EXEC.
    #[inline]
    pub fn set_exec(&mut self, v: u64) {
        self.set_sgpr64(reg::EXEC, v);
    }

    /// VCC.
    #[inline]
    pub fn vcc(&self) -> u64 {
        self.sgpr64(reg::VCC)
    }

    /// The scalar register pair starting at `i` (a pair running past s127 reads 0 there).
    #[inline]
    pub fn sgpr64(&self, i: usize) -> u64 {
        let lo = self.sgpr.get(i).copied().unwrap_or(0);
        let hi = self.sgpr.get(i + 1).copied().unwrap_or(0);
        u64::from(lo) | u64::from(hi) << 32
    }

    /// Sets the scalar register `i` (writes past s127 are dropped).
    #[inline]
    pub fn set_sgpr(&mut self, i: usize, v: u32) {
        if let Some(r) = self.sgpr.get_mut(i) {
            *r = v;
        }
    }

    /// Sets the scalar register pair starting at `i`.
    #[inline]
    pub fn set_sgpr64(&mut self, i: usize, v: u64) {
        self.set_sgpr(i, v as u32);
        self.set_sgpr(i + 1, (v >> 32) as u32);
    }

    /// The vector register `r` of the unified file (0 past its end).
    #[inline]
    pub fn v(&self, r: usize) -> &Lanes {
        self.vgpr.get(r).unwrap_or(&ZERO_LANES)
    }

    /// The vector register `r` of the unified file, for writing (None past its end).
    #[inline]
    pub fn v_mut(&mut self, r: usize) -> Option<&mut Lanes> {
        self.vgpr.get_mut(r)
    }

    /// HW_REG_STATUS as `s_getreg_b32` reads it.
    pub fn status_reg(&self) -> u32 {
        let mut s = self.status | hwreg::STATUS_VALID;
        if self.scc {
            s |= hwreg::STATUS_SCC;
        }
        if self.exec() == 0 {
            s |= hwreg::STATUS_EXECZ;
        }
        if self.vcc() == 0 {
            s |= hwreg::STATUS_VCCZ;
        }
        if self.run == WaveRun::AtBarrier {
            s |= hwreg::STATUS_IN_BARRIER;
        }
        s
    }
}
