//! An AQL queue as ROCr sets one up, driven through kfd-abi against the in-process simulator:
//! `amd_queue_t`, the ring and the signals in GTT buffers mapped for the GPU and the CPU, the
//! events page, the queue made with CREATE_QUEUE and rung through the mapped doorbell slice; the
//! committed test kernels loaded into host-visible VRAM.

#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap
)]

use std::cell::Cell;
use std::time::{Duration, Instant};

use kfd_abi::kfd::QueueDesc;
use kfd_abi::{
    AllocFlags, EventId, EventType, GpuId, Mapping, Prot, QueueType, RenderNode, Share, WaitResult,
};
use kfd_shader::elf::CodeObject;
use kfd_sim::SimFile;

use super::{Env, GTT_W, VRAM_W};

/// The committed test kernels.
pub(crate) const CODE_OBJECT: &[u8] = include_bytes!("../../shader/kernels/kernels.co");
/// The byte-granular copy kernel (`copy_misaligned`), the shape of the runtimes' misaligned
/// blits.
pub(crate) const MISALIGNED: &[u8] = include_bytes!("../../shader/kernels/misaligned.co");

/// `hsa_packet_type_t`.
pub(crate) const INVALID: u8 = 1;
pub(crate) const KERNEL_DISPATCH: u8 = 2;
pub(crate) const BARRIER_AND: u8 = 3;
pub(crate) const BARRIER_OR: u8 = 5;
pub(crate) const VENDOR_SPECIFIC: u8 = 0;

/// Offsets in `amd_queue_t`.
pub(crate) const READ_DISPATCH_ID: usize = 128;
pub(crate) const TMPRING: usize = 140;
pub(crate) const SCRATCH_RSRC: usize = 144;
pub(crate) const SCRATCH_BASE: usize = 160;
pub(crate) const PROPERTIES: usize = 180;
pub(crate) const INACTIVE_SIGNAL: usize = 192;

/// Where the rig's buffers go in the GPU VM.
const FIRST_VA: u64 = 0x7f00_0000_0000;
const EVENTS_BYTES: u64 = 4096 * 8;

/// A buffer mapped in the GPU VM and for the CPU.
pub(crate) struct Buf {
    pub(crate) va: u64,
    pub(crate) map: Mapping,
    pub(crate) handle: kfd_abi::MemHandle,
}

impl Buf {
    pub(crate) fn write(&self, off: usize, b: &[u8]) {
        assert!(self.map.write(off, b));
    }
    pub(crate) fn read(&self, off: usize, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        assert!(self.map.read(off, &mut b));
        b
    }
    pub(crate) fn u32s(&self, off: usize, n: usize) -> Vec<u32> {
        self.read(off, n * 4)
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }
    pub(crate) fn put_u32s(&self, off: usize, v: &[u32]) {
        let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.write(off, &b);
    }
    pub(crate) fn u64_at(&self, off: usize) -> u64 {
        self.map.load_u64(off).unwrap()
    }
}

/// An `amd_signal_t` in GTT, with a KFD signal event whose mailbox is its events-page slot.
pub(crate) struct Signal {
    pub(crate) va: u64,
    pub(crate) event: Option<EventId>,
}

/// A process on the simulator with one GPU's kernels loaded.
pub(crate) struct Rig {
    pub(crate) e: Env,
    pub(crate) render: RenderNode<SimFile>,
    pub(crate) g: GpuId,
    next_va: Cell<u64>,
    pub(crate) code: Buf,
    symbols: Vec<(String, u64)>,
    pub(crate) events: Buf,
    pub(crate) signals: Buf,
    next_signal: Cell<usize>,
    pub(crate) kernargs: Buf,
    next_kernarg: Cell<usize>,
}

/// A fresh buffer of `bytes` (GTT or VRAM) at the next free VA, mapped on `g` and for the CPU.
fn alloc(
    e: &Env,
    render: &RenderNode<SimFile>,
    g: GpuId,
    next: &Cell<u64>,
    bytes: u64,
    flags: AllocFlags,
) -> Buf {
    let bytes = bytes.div_ceil(4096).max(1) * 4096;
    let va = next.get();
    next.set(va + bytes.div_ceil(1 << 21) * (1 << 21) + (1 << 21));
    let bo = e.kfd.alloc_memory(va, bytes, g, flags).unwrap();
    e.kfd.map_memory_to_gpu(bo.handle, &[g]).unwrap();
    let map = render
        .map_bo(bo.mmap_offset, bytes as usize, Prot::RW, Share::Shared)
        .unwrap();
    Buf {
        va,
        map,
        handle: bo.handle,
    }
}

/// A code object's segments in host-visible VRAM, as a loader copies them, and its symbols.
pub(crate) struct Code {
    pub(crate) code: Buf,
    symbols: Vec<(String, u64)>,
}

impl Code {
    /// The kernel object of `kernel` and its group and private sizes.
    pub(crate) fn kernel(&self, kernel: &str) -> (u64, u32, u32) {
        kernel_in(&self.code, &self.symbols, kernel)
    }
}

fn load(
    e: &Env,
    render: &RenderNode<SimFile>,
    g: GpuId,
    next: &Cell<u64>,
    code_object: &[u8],
) -> Code {
    let co = CodeObject::parse(code_object).unwrap();
    let segs = co.segments().unwrap();
    let end = segs.iter().map(|s| s.vaddr + s.memsz).max().unwrap();
    let code = alloc(e, render, g, next, end, VRAM_W | AllocFlags::PUBLIC);
    for s in &segs {
        code.write(s.vaddr as usize, &s.data);
    }
    let symbols = co.symbols().map(|(n, v)| (n.to_string(), v)).collect();
    Code { code, symbols }
}

fn kernel_in(code: &Buf, symbols: &[(String, u64)], kernel: &str) -> (u64, u32, u32) {
    let name = format!("{kernel}.kd");
    let off = symbols
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no kernel {kernel}"))
        .1;
    let kd = code.u32s(off as usize, 2);
    (code.va + off, kd[0], kd[1])
}

impl Rig {
    pub(crate) fn new(e: Env) -> Self {
        let g = e.gpus[0];
        let render = RenderNode::new(e.renders[0].used_by(&e.proc).unwrap(), "render");
        let next_va = Cell::new(FIRST_VA);
        let events = alloc(
            &e,
            &render,
            g,
            &next_va,
            EVENTS_BYTES,
            GTT_W | AllocFlags::COHERENT,
        );
        let signals = alloc(&e, &render, g, &next_va, 64 << 10, GTT_W);
        let kernargs = alloc(&e, &render, g, &next_va, 64 << 10, GTT_W);
        // The events page: the first signal event makes the buffer the signal page.
        let first = e
            .kfd
            .create_event(EventType::Signal, true, Some(events.handle))
            .unwrap();
        e.kfd.destroy_event(first.event_id).unwrap();
        let Code { code, symbols } = load(&e, &render, g, &next_va, CODE_OBJECT);
        Self {
            e,
            render,
            g,
            next_va,
            code,
            symbols,
            events,
            signals,
            next_signal: Cell::new(0),
            kernargs,
            next_kernarg: Cell::new(0),
        }
    }

    /// A fresh buffer of `bytes` (GTT or VRAM) mapped on the rig's GPU and for the CPU.
    pub(crate) fn buf(&self, bytes: u64, flags: AllocFlags) -> Buf {
        alloc(&self.e, &self.render, self.g, &self.next_va, bytes, flags)
    }

    /// The kernel object (descriptor address) of `kernel` and its group and private sizes.
    pub(crate) fn kernel(&self, kernel: &str) -> (u64, u32, u32) {
        kernel_in(&self.code, &self.symbols, kernel)
    }

    /// Another code object loaded into the rig's VRAM.
    pub(crate) fn load(&self, code_object: &[u8]) -> Code {
        load(&self.e, &self.render, self.g, &self.next_va, code_object)
    }

    /// A signal of initial `value`; with an event when `event`.
    pub(crate) fn signal(&self, value: i64, event: bool) -> Signal {
        let k = self.next_signal.get();
        self.next_signal.set(k + 1);
        let off = k * 64;
        let va = self.signals.va + off as u64;
        let mut s = [0u8; 64];
        s[0..8].copy_from_slice(&1i64.to_le_bytes());
        s[8..16].copy_from_slice(&value.to_le_bytes());
        let ev = event.then(|| {
            let ev = self
                .e
                .kfd
                .create_event(EventType::Signal, true, None)
                .unwrap();
            let mailbox = self.events.va + u64::from(ev.slot_index) * 8;
            s[16..24].copy_from_slice(&mailbox.to_le_bytes());
            s[24..28].copy_from_slice(&ev.event_id.get().to_le_bytes());
            ev.event_id
        });
        self.signals.write(off, &s);
        Signal { va, event: ev }
    }

    /// The value of a signal.
    pub(crate) fn value(&self, s: &Signal) -> i64 {
        self.signals.u64_at((s.va - self.signals.va) as usize + 8) as i64
    }

    /// Kernel arguments in GTT; their address.
    pub(crate) fn kernargs(&self, bytes: &[u8]) -> u64 {
        let at = self.next_kernarg.get();
        self.next_kernarg
            .set(at + bytes.len().div_ceil(64).max(1) * 64);
        self.kernargs.write(at, bytes);
        self.kernargs.va + at as u64
    }

    /// Waits up to 20 s until `s` reads `want`.
    pub(crate) fn wait_value(&self, s: &Signal, want: i64) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.value(s) != want {
            assert!(
                Instant::now() < deadline,
                "signal at {:#x} is {}, want {want}",
                s.va,
                self.value(s)
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits up to 20 s on the signal's event.
    pub(crate) fn wait_event(&self, s: &Signal) {
        let ev = s.event.unwrap();
        assert_eq!(
            self.e.kfd.wait_events(&[ev], false, 20_000).unwrap(),
            WaitResult::Complete
        );
    }
}

/// Kernel arguments, each aligned to its size.
#[allow(unused_imports)] // not every test binary dispatches kernels
pub(crate) use kfd_shader::testmem::Args;

/// An AQL queue of the rig's GPU.
pub(crate) struct Queue {
    pub(crate) amd: Buf,
    pub(crate) ring: Buf,
    pub(crate) slots: u64,
    doorbells: Mapping,
    doorbell: usize,
    write_index: Cell<u64>,
    pub(crate) inactive: Signal,
    pub(crate) id: kfd_abi::QueueId,
    _host: Vec<u8>,
}

impl Queue {
    /// A queue of `slots` packets whose scratch is `scratch` (a GTT buffer, `wave_bytes` per
    /// wave for `waves` waves) if given.
    pub(crate) fn new(rig: &Rig, slots: u64, scratch: Option<(&Buf, u32, u32)>) -> Self {
        Self::with_save_area(rig, slots, scratch, None)
    }

    /// A queue as [`Queue::new`] makes it, whose context save area is `area` (GPU VA and bytes;
    /// ROCr 5.2 allocates it as a KFD BO) if given, else host memory the GPU cannot reach.
    pub(crate) fn with_save_area(
        rig: &Rig,
        slots: u64,
        scratch: Option<(&Buf, u32, u32)>,
        area: Option<(u64, u32)>,
    ) -> Self {
        let ring = rig.buf(slots * 64, GTT_W | AllocFlags::EXECUTABLE);
        for i in 0..slots as usize {
            ring.write(i * 64, &[INVALID, 0]);
        }
        let amd = rig.buf(4096, GTT_W);
        let inactive = rig.signal(0, true);
        let mut q = [0u8; 256];
        q[8..16].copy_from_slice(&ring.va.to_le_bytes());
        q[24..28].copy_from_slice(&(slots as u32).to_le_bytes());
        q[136..140].copy_from_slice(&(READ_DISPATCH_ID as u32).to_le_bytes());
        if let Some((buf, waves, wave_bytes)) = scratch {
            let tmpring = waves | (wave_bytes / 1024) << 12;
            q[TMPRING..TMPRING + 4].copy_from_slice(&tmpring.to_le_bytes());
            let rsrc = kfd_shader::testmem::scratch_resource(buf.va, waves * wave_bytes);
            for (k, w) in rsrc.iter().enumerate() {
                q[SCRATCH_RSRC + 4 * k..SCRATCH_RSRC + 4 * k + 4].copy_from_slice(&w.to_le_bytes());
            }
            q[SCRATCH_BASE..SCRATCH_BASE + 8].copy_from_slice(&buf.va.to_le_bytes());
        }
        q[INACTIVE_SIGNAL..INACTIVE_SIGNAL + 8].copy_from_slice(&inactive.va.to_le_bytes());
        amd.write(0, &q);
        let host = vec![0u8; 4096 + (64 << 10)];
        let mut d = QueueDesc::new(rig.g, QueueType::ComputeAql);
        d.ring_base = ring.va;
        d.ring_size = (slots * 64) as u32;
        d.read_ptr = amd.va + READ_DISPATCH_ID as u64;
        d.write_ptr = amd.va + 56;
        d.eop_buffer = host.as_ptr() as u64;
        d.eop_buffer_size = 4096;
        (d.ctx_save_restore, d.ctx_save_restore_size) =
            area.unwrap_or((host.as_ptr() as u64 + 4096, 64 << 10));
        d.ctl_stack_size = 4096;
        // SAFETY: ring and pointers are GPU-mapped buffers of the rig, the EOP buffer and save
        // area are `host`, all alive as long as the queue.
        let created = unsafe { rig.e.kfd.create_queue(&d) }.unwrap();
        Self {
            amd,
            ring,
            slots,
            doorbells: rig.e.kfd.map_doorbells(rig.g, 8192).unwrap(),
            doorbell: (created.doorbell_offset & 0x1fff) as usize,
            write_index: Cell::new(0),
            inactive,
            id: created.queue_id,
            _host: host,
        }
    }

    /// Writes `p` into the next slot (the header last) and rings the doorbell; the index.
    pub(crate) fn submit(&self, p: [u8; 64]) -> u64 {
        let i = self.reserve(p);
        self.ring_doorbell(i);
        i
    }

    /// Writes `p` into the next slot without ringing.
    pub(crate) fn reserve(&self, p: [u8; 64]) -> u64 {
        let i = self.write_index.get();
        self.write_index.set(i + 1);
        let at = (i % self.slots) as usize * 64;
        self.ring.write(at + 2, &p[2..]);
        self.ring.write(at, &p[..2]);
        i
    }

    pub(crate) fn ring_doorbell(&self, index: u64) {
        assert!(self.doorbells.write_u64(self.doorbell, index));
    }

    /// `read_dispatch_id`.
    pub(crate) fn read_index(&self) -> u64 {
        self.amd.u64_at(READ_DISPATCH_ID)
    }

    /// Waits up to 20 s until the read index reaches `want`.
    pub(crate) fn wait_read_index(&self, want: u64) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.read_index() < want {
            assert!(
                Instant::now() < deadline,
                "read index {}",
                self.read_index()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The header byte of slot `index`.
    pub(crate) fn header(&self, index: u64) -> u8 {
        self.ring.read((index % self.slots) as usize * 64, 1)[0]
    }
}

/// A KERNEL_DISPATCH packet.
pub(crate) fn dispatch_packet(
    kernel: (u64, u32, u32),
    grid: [u32; 3],
    wg: [u16; 3],
    kernarg: u64,
    signal: u64,
) -> [u8; 64] {
    let dims = if grid[2] > 1 {
        3u16
    } else if grid[1] > 1 {
        2
    } else {
        1
    };
    let mut p = [0u8; 64];
    // Type, barrier bit, system acquire and release fences, as ROCr writes them.
    let header = u16::from(KERNEL_DISPATCH) | 1 << 8 | 2 << 9 | 2 << 11;
    p[0..2].copy_from_slice(&header.to_le_bytes());
    p[2..4].copy_from_slice(&dims.to_le_bytes());
    for d in 0..3 {
        p[4 + 2 * d..6 + 2 * d].copy_from_slice(&wg[d].to_le_bytes());
        p[12 + 4 * d..16 + 4 * d].copy_from_slice(&grid[d].to_le_bytes());
    }
    p[24..28].copy_from_slice(&kernel.2.to_le_bytes());
    p[28..32].copy_from_slice(&kernel.1.to_le_bytes());
    p[32..40].copy_from_slice(&kernel.0.to_le_bytes());
    p[40..48].copy_from_slice(&kernarg.to_le_bytes());
    p[56..64].copy_from_slice(&signal.to_le_bytes());
    p
}

/// A BARRIER_AND or BARRIER_OR packet.
pub(crate) fn barrier_packet(ty: u8, deps: &[u64], signal: u64) -> [u8; 64] {
    let mut p = [0u8; 64];
    p[0..2].copy_from_slice(&(u16::from(ty) | 1 << 8).to_le_bytes());
    for (k, d) in deps.iter().enumerate() {
        p[8 + 8 * k..16 + 8 * k].copy_from_slice(&d.to_le_bytes());
    }
    p[56..64].copy_from_slice(&signal.to_le_bytes());
    p
}
