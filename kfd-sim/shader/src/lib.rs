//! A gfx90a shader core: the wave64 interpreter the simulator's AQL command processor runs
//! kernels on.
//!
//! The crate is pure: it knows no operating system and nothing of the simulator. What it needs of
//! the world comes through two traits the caller implements: [`Memory`] (the process's GPU
//! virtual memory, translated to host memory a run at a time) and [`Clock`] (the counters
//! `s_memtime` and `s_memrealtime` read).
//!
//! The pieces, bottom up:
//! - [`table`]: the one table of opcodes (encoding, opcode number, mnemonic, operand types and
//!   the function that executes it) that drives the decoder;
//! - [`decode`]: machine code to [`Inst`], decoded once per code address and cached;
//! - [`Wave`]: a wave64's registers (SGPRs, the unified VGPR/AGPR file, EXEC, VCC, M0, SCC,
//!   MODE, STATUS, TRAPSTS, PC);
//! - [`Workgroup`]: the waves of one workgroup, their LDS and their barrier;
//! - [`Executor`]: runs a workgroup for a budget of instructions and says why it stopped;
//! - [`Dispatch`]: builds the workgroups of a kernel dispatch in the initial state the hardware
//!   gives them (AMDGPUUsage "Initial Kernel Execution State");
//! - save and restore ([`Workgroup::save`], [`Workgroup::restore`]): the whole state of a
//!   stopped workgroup as bytes, so that compute wave save/restore can stop a dispatch at any
//!   instruction boundary and finish it later.
//!
//! All memory the shader touches outside its registers and LDS goes through [`Memory`]; the only
//! `unsafe` code of the crate (host memory access through translated runs) is in one private
//! module, `host`.

// An instruction-set interpreter: registers are bit patterns that each instruction reads as
// the type it wants, so truncating, wrapping and sign-changing casts are the semantics, not
// accidents. Lane loops index several 64-lane arrays by the lane number, which is what lets
// them vectorise.
#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss,
    clippy::needless_range_loop
)]

mod atom;
pub mod bundle;
pub mod coverage;
pub mod decode;
pub mod dispatch;
pub mod elf;
mod error;
mod exec;
mod float;
mod host;
mod lds;
mod memory;
mod mfma;
mod operand;
mod salu;
mod save;
mod smem;
pub mod table;
pub mod testmem;
mod valu;
mod vmem;
mod vop3p;
mod vopc;
mod wave;
mod workgroup;

pub use decode::{Inst, Mai, Operand};
pub use dispatch::{
    Apertures, Dispatch, DispatchError, DispatchPacket, KernelDescriptor, ScratchSetup,
};
pub use error::{Fault, ShaderError};
pub use memory::{Clock, HostRun, Memory, NoClock};
pub use save::RestoreError;
pub use table::Encoding;
pub use wave::{hwreg, reg, Lanes, Wave, WaveRun, LANES};
pub use workgroup::{run_dispatch, DispatchOutcome, Executor, RunStatus, Stop, Workgroup};
