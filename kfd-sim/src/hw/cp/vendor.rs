//! VENDOR_SPECIFIC packets in AMD's formats: PM4 indirect buffers and BARRIER_VALUE.

use super::memory::load_u64;
use super::packet::{code, off, pm4_name, u32_at, u64_at};
use super::{QueueRun, Step};
use crate::hw::runlist::Runlist;
use crate::hw::sdma::read_va;

impl<R: Runlist> QueueRun<'_, R> {
    /// AMD's vendor-specific packets.
    pub(super) fn vendor(&mut self, p: &[u8; 64], signal: u64) -> Step {
        match p[2] {
            // A PM4 indirect buffer: INDIRECT_BUFFER (dwords 1..4 of the packet body).
            1 => {
                self.name_pm4(p);
                self.complete(signal, None)
            }
            // BARRIER_VALUE: signal @8, value @16, mask @24, condition @32. A null signal is a
            // satisfied dependency (`hsa_ext_amd.h`; HIP 5.7's streams submit such packets).
            2 => {
                let (s, value, mask, cond) =
                    (u64_at(p, 8), u64_at(p, 16), u64_at(p, 24), u32_at(p, 32));
                if s == 0 {
                    return self.complete(signal, None);
                }
                let cur = match load_u64(self.vm(), s.wrapping_add(off::SIG_VALUE)) {
                    Ok(v) => v & mask,
                    Err(e) => {
                        return self.memory_error(&format!("BARRIER_VALUE signal {s:#x}"), &e)
                    }
                };
                #[allow(clippy::cast_possible_wrap)] // signal values are i64
                let (cur, value) = (cur as i64, value as i64);
                let met = match cond {
                    0 => cur == value,
                    1 => cur != value,
                    2 => cur < value,
                    3 => cur >= value,
                    _ => {
                        self.log_once(
                            "AQL BARRIER_VALUE condition",
                            &format!("BARRIER_VALUE condition {cond}: queue error"),
                        );
                        return self.queue_error(code::BAD_FORMAT);
                    }
                };
                if met {
                    self.complete(signal, None)
                } else {
                    Step::Wait
                }
            }
            f => {
                self.log_once(
                    &format!("AQL vendor format {f}"),
                    &format!(
                        "VENDOR_SPECIFIC packet of AMD format {f}: not supported, queue error"
                    ),
                );
                self.queue_error(code::BAD_FORMAT)
            }
        }
    }

    /// Logs once each PM4 opcode of an indirect buffer (what the simulator does not execute).
    pub(super) fn name_pm4(&self, p: &[u8; 64]) {
        let hdr = u32_at(p, 4);
        let addr = u64::from(u32_at(p, 8) & !3) | u64::from(u32_at(p, 12) & 0xffff) << 32;
        let dwords = u64::from(u32_at(p, 16) & 0xf_ffff).min(256);
        let ops: Vec<u32> = if (hdr >> 8) & 0xff == 0x3f && dwords > 0 {
            match read_va(self.vm(), addr, dwords * 4) {
                Ok(b) => {
                    let mut ops = Vec::new();
                    let mut i = 0usize;
                    while i + 4 <= b.len() {
                        let h = u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
                        if h >> 30 != 3 {
                            break;
                        }
                        ops.push((h >> 8) & 0xff);
                        i += 4 * (((h >> 16) & 0x3fff) as usize + 2);
                    }
                    ops
                }
                Err(_) => Vec::new(),
            }
        } else {
            Vec::new()
        };
        for op in ops {
            let name = pm4_name(op);
            self.log_once(
                &format!("PM4 {name}"),
                &format!("PM4 indirect buffer with {name} (opcode {op:#x}): not executed (the simulated caches are coherent), its completion signal is"),
            );
        }
    }
}
