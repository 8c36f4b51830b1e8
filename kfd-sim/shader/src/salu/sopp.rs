//! The SOPP rows of the opcode table (program control: end, branches, barrier, waits, sleep,
//! messages, traps, VGPR indexing off) with their executors.

use super::{branch, gpr_idx_mode, gpr_idx_off, S32};
use crate::decode::Inst;
use crate::exec::{Ctx, Exit};
use crate::table::Encoding::Sopp as SP;
use crate::table::{row, OpDef};
use crate::valu::{ex, R};
use crate::wave::reg;

fn nop(_c: &mut Ctx<'_>, _i: &Inst) -> R {
    Ok(())
}

fn end(_c: &mut Ctx<'_>, _i: &Inst) -> R {
    Err(Exit::End)
}

fn barrier(_c: &mut Ctx<'_>, _i: &Inst) -> R {
    Err(Exit::Barrier)
}

/// s_sethalt and s_sleep: the wave gives up its turn.
fn yield_wave(_c: &mut Ctx<'_>, _i: &Inst) -> R {
    Err(Exit::Yield)
}

fn trap(_c: &mut Ctx<'_>, i: &Inst) -> R {
    Err(Exit::Trap((i.imm & 0xff) as u8))
}

/// SOPP opcodes.
pub(crate) static SOPP: &[OpDef] = &[
    row(SP, 0x00, "s_nop", nop, S32, 0),
    row(SP, 0x01, "s_endpgm", end, S32, 0),
    row(
        SP,
        0x02,
        "s_branch",
        ex!(|c, i| branch(c, i, |_| true)),
        S32,
        0,
    ),
    row(SP, 0x03, "s_wakeup", nop, S32, 0),
    row(
        SP,
        0x04,
        "s_cbranch_scc0",
        ex!(|c, i| branch(c, i, |w| !w.scc)),
        S32,
        0,
    ),
    row(
        SP,
        0x05,
        "s_cbranch_scc1",
        ex!(|c, i| branch(c, i, |w| w.scc)),
        S32,
        0,
    ),
    row(
        SP,
        0x06,
        "s_cbranch_vccz",
        ex!(|c, i| branch(c, i, |w| w.vcc() == 0)),
        S32,
        0,
    ),
    row(
        SP,
        0x07,
        "s_cbranch_vccnz",
        ex!(|c, i| branch(c, i, |w| w.vcc() != 0)),
        S32,
        0,
    ),
    row(
        SP,
        0x08,
        "s_cbranch_execz",
        ex!(|c, i| branch(c, i, |w| w.exec() == 0)),
        S32,
        0,
    ),
    row(
        SP,
        0x09,
        "s_cbranch_execnz",
        ex!(|c, i| branch(c, i, |w| w.exec() != 0)),
        S32,
        0,
    ),
    row(SP, 0x0a, "s_barrier", barrier, S32, 0),
    row(SP, 0x0b, "s_setkill", nop, S32, 0),
    row(SP, 0x0c, "s_waitcnt", nop, S32, 0),
    row(SP, 0x0d, "s_sethalt", yield_wave, S32, 0),
    row(SP, 0x0e, "s_sleep", yield_wave, S32, 0),
    row(SP, 0x0f, "s_setprio", nop, S32, 0),
    row(SP, 0x10, "s_sendmsg", sendmsg, S32, 0),
    row(SP, 0x11, "s_sendmsghalt", sendmsg, S32, 0),
    row(SP, 0x12, "s_trap", trap, S32, 0),
    row(SP, 0x13, "s_icache_inv", nop, S32, 0),
    row(SP, 0x14, "s_incperflevel", nop, S32, 0),
    row(SP, 0x15, "s_decperflevel", nop, S32, 0),
    row(SP, 0x16, "s_ttracedata", nop, S32, 0),
    row(SP, 0x17, "s_cbranch_cdbgsys", nop, S32, 0),
    row(SP, 0x18, "s_cbranch_cdbguser", nop, S32, 0),
    row(SP, 0x19, "s_cbranch_cdbgsys_or_user", nop, S32, 0),
    row(SP, 0x1a, "s_cbranch_cdbgsys_and_user", nop, S32, 0),
    row(SP, 0x1b, "s_endpgm_saved", end, S32, 0),
    row(SP, 0x1c, "s_set_gpr_idx_off", gpr_idx_off, S32, 0),
    row(SP, 0x1d, "s_set_gpr_idx_mode", gpr_idx_mode, S32, 0),
];

/// The message id of `s_sendmsg` that raises an interrupt.
const MSG_INTERRUPT: u32 = 1;

fn sendmsg(c: &mut Ctx<'_>, i: &Inst) -> R {
    if i.imm & 0xf == MSG_INTERRUPT {
        return Err(Exit::Interrupt(c.w.sgpr[reg::M0]));
    }
    log::debug!("s_sendmsg {:#x} ignored at pc {:#x}", i.imm, c.pc);
    Ok(())
}
