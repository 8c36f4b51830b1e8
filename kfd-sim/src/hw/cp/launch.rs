//! KERNEL_DISPATCH: reading the kernel descriptor, scratch requests, running the workgroups in
//! rounds, and what a failed dispatch does to the queue.

use std::sync::atomic::AtomicBool;

use kfd_shader::{
    Apertures, Dispatch, DispatchError, DispatchPacket, KernelDescriptor, ScratchSetup, ShaderError,
};

use super::dispatch::{self, Failure, InFlight, RoundEnd};
use super::memory::{self, load_u64, read_u64};
use super::packet::{code, off, u32_at, u64_at, SENDMSG_ID_BITS};
use super::{QueueRun, Step};
use crate::hw::runlist::{MappedProcess, Runlist};
use crate::hw::sdma::{gpu_timestamp, read_va};

impl<R: Runlist> QueueRun<'_, R> {
    /// Starts the KERNEL_DISPATCH `p` at `at` (the scratch handshake first if it needs one).
    pub(super) fn start_dispatch(&mut self, p: &[u8; 64], at: u64, signal: u64) -> Step {
        let queue_va = match self.queue_va() {
            Ok(q) => q,
            Err(e) => return self.memory_error("amd_queue_t", &e),
        };
        let q = match read_va(self.vm(), queue_va, off::QUEUE_BYTES) {
            Ok(b) => b,
            Err(e) => return self.memory_error("amd_queue_t", &e),
        };
        let dims = u16::from_le_bytes([p[2], p[3]]) & 3;
        if dims == 0 {
            return self.dispatch_error(code::DIMENSIONS, "no dimensions");
        }
        let packet = DispatchPacket::parse(p, at, queue_va, self.st.rptr);
        // Scratch: bytes per wave and wave slots of the queue's scratch.
        let tmpring = u32_at(&q, off::TMPRING);
        let waves = u64::from(tmpring & 0xfff);
        let wave_bytes = u64::from((tmpring >> 12) & 0x1fff) * 1024;
        let base = u64_at(&q, off::SCRATCH_BASE);
        let kd_bytes = match read_va(self.vm(), packet.kernel_object, 64) {
            Ok(b) => b,
            Err(e) => {
                self.log_failure(
                    "AQL kernel object",
                    &format!(
                        "kernel descriptor at {:#x} unreadable ({e}): queue error",
                        packet.kernel_object
                    ),
                );
                return self.queue_error(code::BAD_CODE);
            }
        };
        let kd = match KernelDescriptor::parse(&kd_bytes) {
            Ok(kd) => kd,
            Err(e) => return self.dispatch_error(code::BAD_CODE, &e.to_string()),
        };
        let mut resource = [0u32; 4];
        for (k, r) in resource.iter_mut().enumerate() {
            *r = u32_at(&q, off::SCRATCH_RSRC + 4 * k);
        }
        let scratch = ScratchSetup {
            resource,
            base,
            wave_bytes,
        };
        let d = match Dispatch::new(kd, packet, scratch, Apertures::KFD_GFX9) {
            Ok(d) => d,
            Err(e @ DispatchError::Dimensions { .. }) => {
                return self.dispatch_error(code::DIMENSIONS, &e.to_string())
            }
            Err(e @ DispatchError::GroupSegment(_)) => {
                return self.dispatch_error(code::GROUP_TOO_LARGE, &e.to_string())
            }
            Err(e @ DispatchError::ShortDescriptor(_)) => {
                return self.dispatch_error(code::BAD_CODE, &e.to_string())
            }
        };
        let per_wg = u64::from(d.waves_per_workgroup().max(1));
        let workers = dispatch::workers() as u64;
        let slots: Vec<u32> = if packet.private_segment_size == 0 {
            vec![0; usize::try_from(workers).unwrap_or(1)]
        } else {
            let need = u64::from(packet.private_segment_size) * 64;
            let fits = need <= wave_bytes && waves >= per_wg && base != 0;
            if !fits {
                return self.scratch_request(need, wave_bytes, waves);
            }
            (0..(waves / per_wg).min(workers))
                .filter_map(|k| u32::try_from(k * per_wg).ok())
                .collect()
        };
        self.st.scratch_answered = false;
        // Where the client put what the dispatch reads, once per machine (looked up once per
        // queue: describing userptr memory reads the client's mappings): which memory ROCr and
        // HIP use for rings, kernels, arguments and signals.
        if !self.st.described {
            self.st.described = true;
            self.describe_dispatch(&packet, &d, at, queue_va, signal);
        }
        log::debug!(
            "kfd-sim: pid {}: AQL queue {}: dispatch {} of {} workgroups at {:#x}",
            self.p.pid(),
            self.w.qid,
            self.st.rptr,
            d.workgroup_count(),
            d.entry()
        );
        let in_flight = match self.st.resume.take() {
            Some(saved) if saved.index == self.st.rptr && saved.signal == signal => {
                match InFlight::resume(d, slots, saved) {
                    Ok(f) => f,
                    Err(e) => {
                        return self.dispatch_error(
                            code::MEMORY_VIOLATION,
                            &format!("saved waves do not resume: {e}"),
                        )
                    }
                }
            }
            other => {
                if let Some(saved) = other {
                    self.log_once(
                        "AQL CWSR stale",
                        &format!(
                            "saved waves of dispatch {} dropped: the read index is at {}",
                            saved.index, self.st.rptr
                        ),
                    );
                }
                InFlight::new(self.st.rptr, signal, gpu_timestamp(), d, slots)
            }
        };
        self.round(in_flight)
    }

    /// Asks ROCr for more scratch (or waits for its answer).
    pub(super) fn scratch_request(&mut self, need: u64, have: u64, waves: u64) -> Step {
        let Ok(queue_va) = self.queue_va() else {
            return self.queue_error(code::NO_SCRATCH);
        };
        let sig = read_u64(self.vm(), queue_va + off::INACTIVE_SIGNAL as u64).unwrap_or(0);
        if self.st.scratch_wait {
            match load_u64(self.vm(), sig.wrapping_add(off::SIG_VALUE)) {
                Ok(0) => {
                    // Answered: the dispatch is looked at again with the new scratch fields.
                    self.st.scratch_wait = false;
                    self.st.scratch_answered = true;
                    return Step::Ran;
                }
                Ok(_) => return Step::Wait,
                Err(e) => return self.memory_error("queue_inactive_signal", &e),
            }
        }
        if self.st.scratch_answered || sig == 0 {
            log::warn!(
                "kfd-sim: pid {}: AQL queue {}: the dispatch needs {need} bytes of scratch per wave, \
                 the queue has {have} in {waves} waves: queue error",
                self.p.pid(),
                self.w.qid
            );
            return self.queue_error(code::NO_SCRATCH);
        }
        log::debug!(
            "kfd-sim: pid {}: AQL queue {}: scratch request ({need} bytes per wave, the queue has {have})",
            self.p.pid(),
            self.w.qid
        );
        if let Err(e) = self.signal_store(sig, code::NO_SCRATCH) {
            return self.memory_error("queue_inactive_signal", &e);
        }
        self.st.scratch_wait = true;
        Step::Wait
    }

    /// Runs a round of the dispatch in flight.
    pub(super) fn round(&mut self, mut d: InFlight) -> Step {
        let mut interrupts = Vec::new();
        let stop = AtomicBool::new(false);
        let end = d.round(&self.w.vm, &self.w.svm, &mut interrupts, &stop);
        if !interrupts.is_empty() {
            let qid = self.w.qid;
            self.p.with_queues(|qs| {
                for m0 in interrupts {
                    qs.interrupt(qid, m0 & 0xff_ffff, SENDMSG_ID_BITS);
                }
            });
        }
        match end {
            RoundEnd::More => {
                self.st.dispatch = Some(d);
                Step::Ran
            }
            RoundEnd::Done => {
                log::debug!(
                    "kfd-sim: pid {}: AQL queue {}: dispatch {} done",
                    self.p.pid(),
                    self.w.qid,
                    d.index
                );
                self.complete(d.signal, Some(d.start_ts))
            }
            RoundEnd::Failed(f) => self.dispatch_failed(&f),
        }
    }

    pub(super) fn dispatch_failed(&mut self, f: &Failure) -> Step {
        let (code, what) = match f {
            Failure::Trap { id, pc } => (code::TRAP, format!("s_trap {id} at pc {pc:#x}")),
            Failure::Shader(e @ ShaderError::MemoryFault { fault, .. }) => {
                let qid = self.w.qid;
                let (va, write) = (fault.addr, fault.write);
                self.p.with_queues(|qs| qs.vm_fault(qid, va, write));
                (
                    code::MEMORY_VIOLATION,
                    format!("{e} (the VM: {})", memory::describe(self.vm(), va)),
                )
            }
            Failure::Shader(e) => (code::ILLEGAL_INSTRUCTION, e.to_string()),
            Failure::WriteBack { addr } => (
                code::MEMORY_VIOLATION,
                format!("client memory at {addr:#x} the kernel wrote is gone"),
            ),
        };
        let key = match f {
            Failure::Shader(ShaderError::UnsupportedOpcode {
                encoding,
                opcode,
                mnemonic,
                ..
            }) => {
                format!(
                    "shader {} {}",
                    encoding.name(),
                    mnemonic.map_or_else(|| format!("{opcode:#x}"), str::to_owned)
                )
            }
            Failure::Shader(ShaderError::IllegalInstruction { word, .. }) => {
                format!("shader illegal {word:#x}")
            }
            Failure::Shader(ShaderError::MemoryFault { .. }) => "shader memory fault".to_owned(),
            Failure::Trap { id, .. } => format!("shader s_trap {id}"),
            Failure::WriteBack { .. } => "shader write-back".to_owned(),
        };
        self.log_failure(
            &key,
            &format!(
                "dispatch {} stopped: {what}: queue error {code:#x}",
                self.st.rptr
            ),
        );
        self.queue_error(code)
    }

    /// Logs (once per machine) where the client put what a dispatch reads.
    pub(super) fn describe_dispatch(
        &self,
        packet: &DispatchPacket,
        d: &Dispatch,
        at: u64,
        queue_va: u64,
        signal: u64,
    ) {
        let vm = self.vm();
        self.log_once(
            "AQL first KERNEL_DISPATCH",
            &format!(
                "first KERNEL_DISPATCH: grid {:?} in workgroups of {:?}; ring at {:#x} ({}); \
                 amd_queue_t at {queue_va:#x} ({}); kernel object {:#x} ({}); entry {:#x} ({}); \
                 kernel arguments at {:#x} ({}); completion signal {signal:#x} ({})",
                packet.grid_size,
                packet.workgroup_size,
                at,
                memory::describe(vm, at),
                memory::describe(vm, queue_va),
                packet.kernel_object,
                memory::describe(vm, packet.kernel_object),
                d.entry(),
                memory::describe(vm, d.entry()),
                packet.kernarg_address,
                memory::describe(vm, packet.kernarg_address),
                memory::describe(vm, signal),
            ),
        );
    }

    pub(super) fn dispatch_error(&mut self, code: u64, what: &str) -> Step {
        self.log_once(
            &format!("AQL dispatch error {code:#x}"),
            &format!(
                "KERNEL_DISPATCH at index {}: {what}: queue error {code:#x}",
                self.st.rptr
            ),
        );
        self.queue_error(code)
    }
}
