//! The execution context an instruction's function gets, and how an instruction can stop its
//! wave.

use crate::dispatch::Apertures;
use crate::error::{Fault, ShaderError};
use crate::memory::{Clock, Memory, Tlb};
use crate::wave::Wave;

/// Why an instruction stops its wave's run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Exit {
    /// `s_barrier`: the wave waits for its workgroup.
    Barrier,
    /// `s_endpgm`.
    End,
    /// `s_trap` with its trap id.
    Trap(u8),
    /// `s_sendmsg MSG_INTERRUPT` with M0; the wave goes on after it.
    Interrupt(u32),
    /// `s_sleep`/`s_sethalt`-like waits: give the other waves a turn.
    Yield,
    /// The wave cannot go on.
    Error(ShaderError),
}

impl From<ShaderError> for Exit {
    fn from(e: ShaderError) -> Self {
        Exit::Error(e)
    }
}

/// What a workgroup's waves share and the instructions need to know of their dispatch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WgEnv {
    /// The LDS and private apertures.
    pub apertures: Apertures,
    /// Waves in the workgroup.
    pub waves: u32,
    /// HW_REG_GPR_ALLOC value.
    pub gpr_alloc: u32,
    /// HW_REG_LDS_ALLOC value.
    pub lds_alloc: u32,
}

/// One instruction's view of the machine.
pub(crate) struct Ctx<'a> {
    pub w: &'a mut Wave,
    pub lds: &'a mut [u8],
    pub mem: &'a dyn Memory,
    pub tlb: &'a mut Tlb,
    pub env: &'a WgEnv,
    pub clock: &'a dyn Clock,
    /// Address of the executing instruction (the wave's PC already points past it).
    pub pc: u64,
    /// Lanes a VALU result is written to (EXEC, narrowed by DPP masks).
    pub wmask: u64,
}

impl Ctx<'_> {
    /// A memory fault of this instruction.
    pub(crate) fn fault(&self, f: Fault) -> Exit {
        Exit::Error(ShaderError::MemoryFault {
            fault: f,
            pc: self.pc,
        })
    }
}
