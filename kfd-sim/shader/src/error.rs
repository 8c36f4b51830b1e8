//! What can stop a wave for good: errors the command processor turns into queue errors.

use crate::table::Encoding;

/// A memory access that could not be translated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// The GPU virtual address that did not translate.
    pub addr: u64,
    /// Whether the access was a write (or the write half of an atomic).
    pub write: bool,
}

/// Why a wave cannot go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShaderError {
    /// An opcode the table does not know, or knows and does not execute.
    #[error(
        "{} opcode {opcode:#x}{} at pc {pc:#x} is not supported",
        encoding.name(),
        mnemonic.map(|m| format!(" ({m})")).unwrap_or_default()
    )]
    UnsupportedOpcode {
        /// The encoding the instruction word has.
        encoding: Encoding,
        /// The opcode field.
        opcode: u16,
        /// The mnemonic, if the table knows the opcode.
        mnemonic: Option<&'static str>,
        /// Where the instruction is.
        pc: u64,
    },
    /// An instruction word that is no gfx90a encoding, or an operand field that names nothing.
    #[error("illegal instruction {word:#010x} at pc {pc:#x}: {what}")]
    IllegalInstruction {
        /// The first dword of the instruction.
        word: u32,
        /// Where the instruction is.
        pc: u64,
        /// What is wrong with it.
        what: &'static str,
    },
    /// A memory access (or an instruction fetch) whose address does not translate.
    #[error("memory fault at {:#x} ({}) by the instruction at pc {pc:#x}", fault.addr, if fault.write { "write" } else { "read" })]
    MemoryFault {
        /// The failed access.
        fault: Fault,
        /// The instruction that made it.
        pc: u64,
    },
}
