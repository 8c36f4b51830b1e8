//! Compute wave save/restore: a dispatch stopped by an eviction, written where the hardware
//! writes it, and read back when the queue runs again.
//!
//! - **Where.** The queue's context save area (`ctx_save_restore_address`, in the client's
//!   memory, reached through the process's GPU VM as the CP reaches it: a KFD BO with ROCr 5.2,
//!   an SVM-registered anonymous region with 6.1) holds the wave data from `cntl_stack_size` up;
//!   its first 40 bytes are the header the thunk wrote, left alone. The control stack is the
//!   MQD-side buffer of `cntl_stack_size` bytes that CRIU's CHECKPOINT copies into the queue's
//!   private data; it grows down from its end. The MQD's `cntl_stack_offset` and
//!   `wg_state_offset` say how much of each is used, as the driver reads them
//!   (`ctl_stack_used_size = cntl_stack_size - cntl_stack_offset`, `save_area_used_size =
//!   wg_state_offset - cntl_stack_size`); both equal `cntl_stack_size` when nothing is saved.
//! - **Wave data** (this simulator's encoding; the hardware's per-wave blocks are
//!   firmware-defined): one block per stopped workgroup, [`kfd_shader::Workgroup::save`]'s
//!   bytes: every wave's VGPRs and AGPRs, SGPRs (with EXEC, VCC, M0), PC, SCC, MODE, STATUS,
//!   TRAPSTS, barrier state, and the workgroup's LDS once.
//! - **Control stack** (also this simulator's encoding), from the low end of its used part up:
//!   one 8-byte entry per saved wave (`u32` workgroup block, `u32` wave index), one 16-byte
//!   entry per workgroup block (`u32` offset in the wave data, `u32` length, `u32` scratch wave
//!   slot, `u32` waves), and on top the dispatch's progress (56 bytes: magic `KCWS`, version,
//!   `u64` packet index, completion signal, start timestamp, workgroups started, workgroups in
//!   the grid, `u32` blocks, `u32` waves). Workgroups below "started" that have no block are
//!   done; those from it on have not started. The packet itself stays valid at the read index,
//!   and the packets after it stay in the ring.

use kfd_abi::Errno;

use super::super::sdma::{read_va, write_va, Fault};
use super::super::vm::Vm;
use super::memory::SvmView;
use crate::lock_order::Ordered;

/// Byte offsets of the CWSR registers in the simulator's compute MQD image.
pub(crate) mod regs {
    /// `cp_hqd_ctx_save_base_addr` (u64).
    pub(crate) const CTX_SAVE_BASE: usize = 56;
    /// `cp_hqd_ctx_save_size` (u32).
    pub(crate) const CTX_SAVE_SIZE: usize = 64;
    /// `cp_hqd_cntl_stack_size` (u32).
    pub(crate) const CNTL_STACK_SIZE: usize = 68;
    /// `cp_hqd_cntl_stack_offset` (u32): the control stack's used part starts here.
    pub(crate) const CNTL_STACK_OFFSET: usize = 72;
    /// `cp_hqd_wg_state_offset` (u32): the wave data end here, from the area's start.
    pub(crate) const WG_STATE_OFFSET: usize = 76;
}

const MAGIC: u32 = u32::from_le_bytes(*b"KCWS");
const VERSION: u32 = 1;
/// Bytes of the dispatch entry on top of the control stack.
pub(crate) const DISPATCH_ENTRY: usize = 56;
/// Bytes of a workgroup entry.
pub(crate) const GROUP_ENTRY: usize = 16;
/// Bytes of a wave entry.
pub(crate) const WAVE_ENTRY: usize = 8;

/// Why waves could not be saved or restored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CwsrError {
    /// The queue has no context save area.
    #[error("the queue has no context save area")]
    NoArea,
    /// The control stack cannot hold the entries.
    #[error("the control stack holds {have} bytes, the saved waves need {need}")]
    ControlStack {
        /// Bytes needed.
        need: usize,
        /// Bytes there.
        have: usize,
    },
    /// The save area cannot hold the wave data.
    #[error("the context save area holds {have} bytes, the saved waves need {need}")]
    Area {
        /// Bytes needed (from the area's start).
        need: u64,
        /// Bytes there.
        have: u64,
    },
    /// The save area is not reachable through the GPU VM.
    #[error("context save area: {0}")]
    Memory(#[from] Fault),
    /// The save area is an SVM range whose memory could not be read or written.
    #[error("context save area in an SVM range: {0}")]
    Svm(Errno),
    /// The control stack does not hold what this simulator writes.
    #[error("the control stack is not a saved dispatch: {0}")]
    Format(&'static str),
    /// A workgroup block is not a saved workgroup.
    #[error("saved workgroup: {0}")]
    Workgroup(#[from] kfd_shader::RestoreError),
}

/// One stopped workgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SavedGroup {
    /// The scratch wave slot it owns.
    pub slot: u32,
    /// Its waves.
    pub waves: u32,
    /// [`kfd_shader::Workgroup::save`]'s bytes.
    pub bytes: Vec<u8>,
}

/// A dispatch stopped by an eviction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SavedDispatch {
    /// The packet's index in the ring.
    pub index: u64,
    /// Its completion signal.
    pub signal: u64,
    /// When it started (profiling).
    pub start_ts: u64,
    /// Workgroups started (in order); those without a block are done.
    pub next: u64,
    /// Workgroups in the grid.
    pub total: u64,
    /// The stopped workgroups.
    pub groups: Vec<SavedGroup>,
}

/// What the control stack's used part says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    /// The dispatch, its blocks still empty.
    pub dispatch: SavedDispatch,
    /// Each block's offset and length in the wave data.
    pub blocks: Vec<(u32, u32)>,
}

fn put32(o: &mut Vec<u8>, v: u32) {
    o.extend_from_slice(&v.to_le_bytes());
}

fn put64(o: &mut Vec<u8>, v: u64) {
    o.extend_from_slice(&v.to_le_bytes());
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    b.get(o..o + 4)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    b.get(o..o + 8)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

fn len32(n: usize) -> Result<u32, CwsrError> {
    u32::try_from(n).map_err(|_| CwsrError::Format("a size over 4 GiB"))
}

impl SavedDispatch {
    /// The used part of the control stack and the wave data.
    pub(crate) fn encode(&self) -> Result<(Vec<u8>, Vec<u8>), CwsrError> {
        let waves: u32 = self.groups.iter().map(|g| g.waves).sum();
        let mut ctl = Vec::with_capacity(
            DISPATCH_ENTRY + GROUP_ENTRY * self.groups.len() + WAVE_ENTRY * waves as usize,
        );
        for (k, g) in self.groups.iter().enumerate() {
            for w in 0..g.waves {
                put32(&mut ctl, len32(k)?);
                put32(&mut ctl, w);
            }
        }
        let mut data = Vec::new();
        for g in &self.groups {
            put32(&mut ctl, len32(data.len())?);
            put32(&mut ctl, len32(g.bytes.len())?);
            put32(&mut ctl, g.slot);
            put32(&mut ctl, g.waves);
            data.extend_from_slice(&g.bytes);
        }
        put32(&mut ctl, MAGIC);
        put32(&mut ctl, VERSION);
        put64(&mut ctl, self.index);
        put64(&mut ctl, self.signal);
        put64(&mut ctl, self.start_ts);
        put64(&mut ctl, self.next);
        put64(&mut ctl, self.total);
        put32(&mut ctl, len32(self.groups.len())?);
        put32(&mut ctl, waves);
        Ok((ctl, data))
    }
}

impl Layout {
    /// The used part of a control stack; `None` when nothing is saved (empty, or zeros: a
    /// stack the simulator never wrote).
    pub(crate) fn decode(used: &[u8]) -> Result<Option<Self>, CwsrError> {
        if used.len() < DISPATCH_ENTRY {
            return if used.iter().all(|&b| b == 0) {
                Ok(None)
            } else {
                Err(CwsrError::Format("shorter than its dispatch entry"))
            };
        }
        let top = &used[used.len() - DISPATCH_ENTRY..];
        if u32_at(top, 0) != MAGIC {
            return if used.iter().all(|&b| b == 0) {
                Ok(None)
            } else {
                Err(CwsrError::Format("no dispatch entry on top"))
            };
        }
        if u32_at(top, 4) != VERSION {
            return Err(CwsrError::Format("another version"));
        }
        let ngroups = u32_at(top, 48) as usize;
        let nwaves = u32_at(top, 52) as usize;
        let want = ngroups.checked_mul(GROUP_ENTRY).and_then(|g| {
            nwaves
                .checked_mul(WAVE_ENTRY)
                .map(|w| g + w + DISPATCH_ENTRY)
        });
        if want != Some(used.len()) {
            return Err(CwsrError::Format("entry counts disagree with its size"));
        }
        let groups_at = nwaves * WAVE_ENTRY;
        let mut blocks = Vec::with_capacity(ngroups);
        let mut groups = Vec::with_capacity(ngroups);
        let mut waves_seen = 0u64;
        for k in 0..ngroups {
            let e = &used[groups_at + k * GROUP_ENTRY..groups_at + (k + 1) * GROUP_ENTRY];
            blocks.push((u32_at(e, 0), u32_at(e, 4)));
            groups.push(SavedGroup {
                slot: u32_at(e, 8),
                waves: u32_at(e, 12),
                bytes: Vec::new(),
            });
            waves_seen += u64::from(u32_at(e, 12));
        }
        if waves_seen != nwaves as u64 {
            return Err(CwsrError::Format(
                "wave entries disagree with the workgroups",
            ));
        }
        let dispatch = SavedDispatch {
            index: u64_at(top, 8),
            signal: u64_at(top, 16),
            start_ts: u64_at(top, 24),
            next: u64_at(top, 32),
            total: u64_at(top, 40),
            groups,
        };
        if dispatch.next > dispatch.total || ngroups as u64 > dispatch.next {
            return Err(CwsrError::Format("progress past the grid"));
        }
        Ok(Some(Self { dispatch, blocks }))
    }
}

/// A queue's context save area and its MQD-side control stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Area {
    /// GPU VA of the area (0: none).
    pub base: u64,
    /// Bytes of the area.
    pub size: u64,
    /// Bytes of the control stack (`cntl_stack_size`): the wave data start there in the area.
    pub ctl_size: usize,
}

/// The SVM range of `svm` that holds `[va, va + len)`, with the memory it is.
fn svm_range(svm: &SvmView, va: u64, len: u64) -> Option<crate::hw::backing::ProcessMemory> {
    let end = va.checked_add(len)?;
    let mem = svm.mem?;
    svm.ranges
        .iter()
        .any(|&(lo, hi)| lo <= va && end <= hi)
        .then_some(mem)
}

/// Writes `bytes` at `va` as the CP does: through the GPU VM (a KFD BO: ROCr 5.2's area), else
/// into the SVM range that holds it (ROCr 6.1's area: anonymous memory at the same address).
fn write_gpu(vm: &Ordered<Vm>, svm: &SvmView, va: u64, bytes: &[u8]) -> Result<(), CwsrError> {
    match write_va(vm, va, bytes) {
        Ok(()) => Ok(()),
        Err(e) => match svm_range(svm, va, bytes.len() as u64) {
            Some(mem) => mem.write(va, bytes).map_err(CwsrError::Svm),
            None => Err(e.into()),
        },
    }
}

/// Reads `len` bytes at `va` as [`write_gpu`] writes them.
fn read_gpu(vm: &Ordered<Vm>, svm: &SvmView, va: u64, len: u64) -> Result<Vec<u8>, CwsrError> {
    match read_va(vm, va, len) {
        Ok(b) => Ok(b),
        Err(e) => match svm_range(svm, va, len) {
            Some(mem) => {
                let n = usize::try_from(len).map_err(|_| CwsrError::Svm(Errno::EFAULT))?;
                let mut b = vec![0; n];
                mem.read(va, &mut b).map_err(CwsrError::Svm)?;
                Ok(b)
            }
            None => Err(e.into()),
        },
    }
}

impl Area {
    /// Writes `d`'s wave data into the area through `vm` (or the SVM ranges of `svm`); the
    /// control stack's used part, to go at its end, and the bytes of wave data.
    pub(crate) fn save(
        &self,
        vm: &Ordered<Vm>,
        svm: &SvmView,
        d: &SavedDispatch,
    ) -> Result<(Vec<u8>, usize), CwsrError> {
        if self.base == 0 {
            return Err(CwsrError::NoArea);
        }
        let (ctl, data) = d.encode()?;
        if ctl.len() > self.ctl_size {
            return Err(CwsrError::ControlStack {
                need: ctl.len(),
                have: self.ctl_size,
            });
        }
        let need = self.ctl_size as u64 + data.len() as u64;
        if need > self.size {
            return Err(CwsrError::Area {
                need,
                have: self.size,
            });
        }
        write_gpu(vm, svm, self.base + self.ctl_size as u64, &data)?;
        Ok((ctl, data.len()))
    }

    /// Reads the wave data `l` names from the area as [`Area::save`] wrote them: the saved
    /// dispatch.
    pub(crate) fn load(
        &self,
        vm: &Ordered<Vm>,
        svm: &SvmView,
        l: Layout,
    ) -> Result<SavedDispatch, CwsrError> {
        if self.base == 0 {
            return Err(CwsrError::NoArea);
        }
        let end = l
            .blocks
            .iter()
            .map(|&(off, len)| u64::from(off) + u64::from(len))
            .max()
            .unwrap_or(0);
        let need = self.ctl_size as u64 + end;
        if need > self.size {
            return Err(CwsrError::Area {
                need,
                have: self.size,
            });
        }
        let data = read_gpu(vm, svm, self.base + self.ctl_size as u64, end)?;
        let mut d = l.dispatch;
        for (g, &(off, len)) in d.groups.iter_mut().zip(&l.blocks) {
            let (off, len) = (off as usize, len as usize);
            g.bytes = data
                .get(off..off + len)
                .ok_or(CwsrError::Format("a block past the wave data"))?
                .to_vec();
        }
        Ok(d)
    }
}

/// The MQD's CWSR registers of a compute queue as the driver's `init_mqd` sets them: nothing
/// saved.
pub(crate) fn init_regs(mqd: &mut [u8], base: u64, size: u32, ctl_size: u32) {
    set_u64(mqd, regs::CTX_SAVE_BASE, base);
    set_u32(mqd, regs::CTX_SAVE_SIZE, size);
    set_u32(mqd, regs::CNTL_STACK_SIZE, ctl_size);
    set_regs_used(mqd, ctl_size, 0, 0);
}

/// Records in the MQD how much of the control stack and of the wave data are used.
pub(crate) fn set_regs_used(mqd: &mut [u8], ctl_size: u32, ctl_used: u32, data_used: u32) {
    set_u32(
        mqd,
        regs::CNTL_STACK_OFFSET,
        ctl_size.saturating_sub(ctl_used),
    );
    set_u32(
        mqd,
        regs::WG_STATE_OFFSET,
        ctl_size.saturating_add(data_used),
    );
}

/// What the MQD says is used: (control stack bytes, wave data bytes).
pub(crate) fn regs_used(mqd: &[u8], ctl_size: usize) -> (usize, usize) {
    let offset = u32_at(mqd, regs::CNTL_STACK_OFFSET) as usize;
    let wg = u32_at(mqd, regs::WG_STATE_OFFSET) as usize;
    (
        ctl_size.saturating_sub(offset.min(ctl_size)),
        wg.saturating_sub(ctl_size),
    )
}

/// Writes the used part of a control stack at the end of `stack` (zeros below it) and the MQD
/// registers that say so.
pub(crate) fn store_stack(stack: &mut [u8], mqd: &mut [u8], used: &[u8], data_used: usize) {
    let size = stack.len();
    let at = size.saturating_sub(used.len());
    stack.fill(0);
    if let Some(dst) = stack.get_mut(at..) {
        dst.copy_from_slice(&used[used.len() - dst.len()..]);
    }
    let c = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    set_regs_used(mqd, c(size), c(used.len()), c(data_used));
}

/// Takes the saved dispatch's layout off a control stack (leaving it empty, the MQD saying
/// so); `None` when nothing is saved.
pub(crate) fn take_stack(stack: &mut [u8], mqd: &mut [u8]) -> Result<Option<Layout>, CwsrError> {
    let size = stack.len();
    let (used, data) = regs_used(mqd, size);
    if used == 0 && data == 0 {
        return Ok(None);
    }
    let r = Layout::decode(&stack[size - used..]);
    store_stack(stack, mqd, &[], 0);
    r
}

fn set_u32(b: &mut [u8], off: usize, v: u32) {
    if let Some(d) = b.get_mut(off..off + 4) {
        d.copy_from_slice(&v.to_le_bytes());
    }
}

fn set_u64(b: &mut [u8], off: usize, v: u64) {
    if let Some(d) = b.get_mut(off..off + 8) {
        d.copy_from_slice(&v.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]

    use crate::lock_order::rank;
    use std::sync::Arc;

    use kfd_shader::Dispatch;
    use proptest::prelude::*;
    use rstest::rstest;

    use super::super::super::backing::{Backing, Domain};
    use super::super::super::vm::{VmMapping, VmTarget};
    use super::super::dispatch::{InFlight, RoundEnd};
    use super::*;

    fn sample(groups: usize) -> SavedDispatch {
        SavedDispatch {
            index: 7,
            signal: 0x1000,
            start_ts: 99,
            next: 5,
            total: 9,
            groups: (0..groups)
                .map(|k| SavedGroup {
                    slot: k as u32 * 4,
                    waves: 1 + k as u32,
                    bytes: vec![k as u8; 100 + k],
                })
                .collect(),
        }
    }

    #[test]
    fn a_control_stack_round_trips_through_the_mqd_registers() {
        let d = sample(3);
        let (used, data) = d.encode().unwrap();
        assert_eq!(
            used.len(),
            DISPATCH_ENTRY + 3 * GROUP_ENTRY + 6 * WAVE_ENTRY
        );
        let mut stack = vec![0xaa; 4096];
        let mut mqd = vec![0; 2048];
        init_regs(&mut mqd, 0x1000, 1 << 20, 4096);
        assert_eq!(regs_used(&mqd, 4096), (0, 0));
        store_stack(&mut stack, &mut mqd, &used, data.len());
        assert_eq!(regs_used(&mqd, 4096), (used.len(), data.len()));
        assert_eq!(&stack[4096 - used.len()..], &used[..]);
        let l = take_stack(&mut stack, &mut mqd).unwrap().unwrap();
        assert_eq!(regs_used(&mqd, 4096), (0, 0), "taken: nothing saved");
        assert!(stack.iter().all(|&b| b == 0));
        let mut back = l.dispatch.clone();
        for (g, (off, len)) in back.groups.iter_mut().zip(&l.blocks) {
            g.bytes = data[*off as usize..(*off + *len) as usize].to_vec();
        }
        assert_eq!(back, d);
        assert_eq!(take_stack(&mut stack, &mut mqd), Ok(None));
    }

    #[test]
    fn a_stack_that_is_no_saved_dispatch_is_refused() {
        let (mut used, _) = sample(1).encode().unwrap();
        assert_eq!(Layout::decode(&[]), Ok(None));
        assert_eq!(Layout::decode(&[0; 512]), Ok(None));
        assert!(Layout::decode(&used[1..]).is_err());
        let n = used.len();
        used[n - 4] ^= 1;
        assert_eq!(
            Layout::decode(&used),
            Err(CwsrError::Format("entry counts disagree with its size"))
        );
    }

    /// A dispatch of one of the committed test kernels in a GPU VM of GTT memory, with a
    /// context save area and a control stack beside it.
    struct Case {
        vm: Arc<Ordered<Vm>>,
        svm: Arc<SvmView>,
        dispatch: Dispatch,
        slots: Vec<u32>,
        out: (u64, u64),
        area: Area,
        stack: Vec<u8>,
        mqd: Vec<u8>,
    }

    const CODE_OBJECT: &[u8] = include_bytes!("../../../shader/kernels/kernels.co");
    const AREA_VA: u64 = 0x5_0000_0000;

    fn inputs(n: u32) -> Vec<u32> {
        (0..n).map(|i| i.wrapping_mul(2_654_435_761) >> 9).collect()
    }

    /// Kernel 0: LDS and a barrier per level, four waves per workgroup; 1: private arrays in
    /// scratch; 2: global atomics, whose end values do not depend on the order.
    fn case(kernel: usize) -> Case {
        use kfd_shader::testmem::{layout::*, Args, Rig};
        let mut rig = Rig::new(CODE_OBJECT, 1 << 20).unwrap();
        let (name, grid, wg, args, out) = match kernel {
            0 => {
                let pin = rig.alloc(1024 * 4).unwrap();
                let pout = rig.alloc(16).unwrap();
                rig.mem.write_u32s(pin, &inputs(1024));
                (
                    "lds_reduce",
                    1024,
                    256,
                    Args::default().u64(pin).u64(pout),
                    (pout, 16),
                )
            }
            1 => {
                let pin = rig.alloc(512).unwrap();
                let pidx = rig.alloc(512).unwrap();
                let pout = rig.alloc(512).unwrap();
                rig.mem.write_u32s(pin, &inputs(128));
                let idx: Vec<u32> = inputs(128).iter().map(|x| x >> 3).collect();
                rig.mem.write_u32s(pidx, &idx);
                let a = Args::default().u64(pin).u64(pidx).u64(pout);
                ("scratch", 128, 64, a, (pout, 512))
            }
            _ => {
                let counters = rig.alloc(16).unwrap();
                let wide = rig.alloc(24).unwrap();
                let slots = rig.alloc(512).unwrap();
                let vals = rig.alloc(512).unwrap();
                let v: Vec<u32> = inputs(128).iter().map(|x| x % 97).collect();
                rig.mem.write_u32s(vals, &v);
                rig.mem
                    .write_u32s(counters, &[0, i32::MAX as u32, i32::MIN as u32, 0]);
                let a = Args::default().u64(counters).u64(wide).u64(slots).u64(vals);
                ("atomics", 128, 32, a, (counters, 16))
            }
        };
        let dispatch = rig
            .dispatch(name, [grid, 1, 1], [wg, 1, 1], &args.0, 1)
            .unwrap();
        // The rig's memory, copied into GTT mapped at the same addresses.
        let co = kfd_shader::elf::CodeObject::parse(CODE_OBJECT).unwrap();
        let code_end = co
            .segments()
            .unwrap()
            .iter()
            .map(|s| s.vaddr + s.memsz)
            .max()
            .unwrap();
        let mut vm = Vm::new();
        for (va, len) in [
            (CODE_VA, code_end.div_ceil(4096) * 4096 + 4096),
            (DATA_VA, 1 << 20),
            (KERNARG_VA, 4096),
            (PACKET_VA, 4096),
            (QUEUE_VA, 4096),
            (SCRATCH_VA, SCRATCH_BYTES),
            (AREA_VA, 1 << 20),
        ] {
            let backing = Backing::new(len, Domain::Gtt, 0, false).unwrap();
            if let Some(bytes) = rig.mem.read(va, len as usize) {
                assert!(backing.write(0, &bytes));
            }
            let target = VmTarget::Memory {
                backing: Arc::new(backing),
                offset: 0,
            };
            vm.map(
                va,
                VmMapping {
                    size: len,
                    target,
                    writable: true,
                },
            )
            .unwrap();
        }
        Case {
            vm: Arc::new(Ordered::new(rank::VM, vm)),
            svm: Arc::new(SvmView::default()),
            dispatch,
            slots: vec![0],
            out,
            area: Area {
                base: AREA_VA,
                size: 1 << 20,
                ctl_size: 4096,
            },
            stack: vec![0; 4096],
            mqd: vec![0; 2048],
        }
    }

    /// Runs the dispatch of `c`; at each of `stops` (instruction counts from its start) it is
    /// evicted: saved into the area and the control stack, dropped, read back and resumed as
    /// a restored queue does. The output and the instructions executed.
    fn run(mut c: Case, stops: &[u64]) -> (Vec<u8>, u64) {
        init_regs(&mut c.mqd, c.area.base, 1 << 20, 4096);
        let mut d = InFlight::new(0, 0x40, 0, c.dispatch.clone(), c.slots.clone());
        let mut done = 0u64;
        let mut stops = stops.to_vec();
        stops.sort_unstable();
        stops.dedup();
        for s in stops {
            let (end, n) = d.round_for(&c.vm, &c.svm, s - done);
            done += n;
            match end {
                RoundEnd::Done => break,
                RoundEnd::More => {}
                RoundEnd::Failed(f) => panic!("{f:?}"),
            }
            let saved = d.snapshot();
            drop(d);
            let (used, data) = c.area.save(&c.vm, &c.svm, &saved).unwrap();
            store_stack(&mut c.stack, &mut c.mqd, &used, data);
            let layout = take_stack(&mut c.stack, &mut c.mqd).unwrap().unwrap();
            let back = c.area.load(&c.vm, &c.svm, layout).unwrap();
            assert_eq!(
                back, saved,
                "the area and the control stack give the dispatch back"
            );
            d = InFlight::resume(c.dispatch.clone(), c.slots.clone(), back).unwrap();
        }
        let (end, n) = d.round_for(&c.vm, &c.svm, u64::MAX);
        assert_eq!(end, RoundEnd::Done);
        done += n;
        let out = read_va(&c.vm, c.out.0, c.out.1).unwrap();
        (out, done)
    }

    #[test]
    fn waves_that_do_not_fit_the_area_or_the_control_stack_are_not_saved() {
        let c = case(0);
        let mut d = InFlight::new(0, 0, 0, c.dispatch.clone(), c.slots.clone());
        assert_eq!(d.round_for(&c.vm, &c.svm, 300).0, RoundEnd::More);
        let saved = d.snapshot();
        assert_eq!(saved.groups.len(), 1);
        let small = Area {
            size: 4096 + 1000,
            ..c.area
        };
        assert!(matches!(
            small.save(&c.vm, &c.svm, &saved),
            Err(CwsrError::Area { have: 5096, .. })
        ));
        let short = Area {
            ctl_size: 64,
            ..c.area
        };
        assert_eq!(
            short.save(&c.vm, &c.svm, &saved),
            Err(CwsrError::ControlStack {
                need: DISPATCH_ENTRY + GROUP_ENTRY + 4 * WAVE_ENTRY,
                have: 64
            })
        );
        let unmapped = Area {
            base: 0x9_0000_0000,
            ..c.area
        };
        assert!(matches!(
            unmapped.save(&c.vm, &c.svm, &saved),
            Err(CwsrError::Memory(_))
        ));
        let none = Area { base: 0, ..c.area };
        assert_eq!(none.save(&c.vm, &c.svm, &saved), Err(CwsrError::NoArea));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        /// Evicted and resumed at any instruction boundaries, with workgroups done, stopped
        /// (at a barrier, with LDS or scratch in use) and not started, a dispatch ends with the
        /// memory of a run never stopped, and no instruction runs twice.
        #[test]
        fn a_dispatch_evicted_anywhere_ends_with_the_same_memory(
            kernel in 0usize..3,
            fractions in prop::collection::vec(0.0f64..1.0, 1..6),
        ) {
            let (want, total) = run(case(kernel), &[]);
            let stops: Vec<u64> =
                fractions.iter().map(|f| 1 + (f * (total - 1) as f64) as u64).collect();
            let (got, n) = run(case(kernel), &stops);
            prop_assert_eq!(got, want);
            prop_assert_eq!(n, total);
        }
    }

    #[rstest]
    #[case::lds_reduce(0)]
    #[case::scratch(1)]
    #[case::atomics(2)]
    fn a_dispatch_evicted_at_each_of_many_points_ends_with_the_same_memory(#[case] kernel: usize) {
        let (want, total) = run(case(kernel), &[]);
        // About 40 points spread over the run, each its own eviction.
        for s in (1..total).step_by((total / 40).max(1) as usize) {
            let (got, n) = run(case(kernel), &[s]);
            assert_eq!(got, want, "evicted after {s} of {total} instructions");
            assert_eq!(n, total);
        }
    }
}
