//! The `ioctls` target: programs of ioctls on the simulator's `/dev/kfd` and render nodes.
//!
//! Checks: the simulator never panics or hangs; every failed ioctl answers an errno that the
//! driver can answer ([`KFD_ERRNOS`], [`RENDER_ERRNOS`]); afterwards it still answers
//! `GET_VERSION`; and once every simulated process and file is gone, no KFD process is left and
//! every GPU's VRAM is free.
//!
//! # Input
//!
//! `[setup] [record]...`, at most [`MAX_CALLS`] records; a record cut short by the end of the
//! input runs with what it has.
//!
//! - `setup`: bit 0 the node (`mi50x1` or `mi210x2`); bit 1 acquire the first process's GPU VMs
//!   first; bit 2 the first process lacks CAP_CHECKPOINT_RESTORE; bit 3 so does the tracer.
//! - The files, by index: the first process P's `/dev/kfd`, P's render nodes (one per GPU), P's
//!   `/dev/kfd` in the hands of P's ptrace parent T (as criu holds it), a second process R's
//!   `/dev/kfd` and R's render nodes (R is where a RESTORE goes).
//! - A record: `head`, `nr`, then as `head` says `size: u16 LE` and `dir, type`, then for a wild
//!   argument one byte choosing it, then `len`, `len` bytes of argument, `n`, `n % 9` fixups.
//!   - `head` bits 0-3: the file (modulo their number), or 15: fill a scratch buffer instead of
//!     an ioctl (then `nr` bits 0-2 choose the buffer and bits 3-7 the offset in 256-byte
//!     steps); bits 4-5: the argument (0, 1: a buffer holding the argument bytes, 2: null,
//!     3: a wild pointer); bit 6: the size field from the input (else the ioctl's own);
//!     bit 7: direction and type from the input (else the ioctl's own).
//!   - `nr`: on `/dev/kfd` the ioctl number; on a render node values below 13 name the
//!     simulated DRM ioctls in table order, others are used as they are.
//!   - A fixup, `[at, kind, param]`, writes a value at byte `4 * at` of the argument (or of the
//!     filled scratch range): kind 0 a gpu id, 1 the fd of a file, 2 a pointer to a scratch
//!     buffer, 3 eight bytes from the argument of one of the last four calls (`param & 3` back,
//!     at byte `4 * (param >> 2)`), 4 the pid of P or R, 5 an fd an earlier call installed, 6 a
//!     u32 power of two, 7 a u64 power of two.
//!
//! [`Program`] writes such inputs (the seeds and the tests use it).
//!
//! # The harness's own memory
//!
//! In process, the simulated processes' memory is this process's memory. Pointers an input can
//! make point into one scratch region (1 MiB, a fresh allocation per input) or nowhere mapped;
//! a userptr buffer the input places in the scratch region is cut to fit it, so that what the
//! simulated engines write into it cannot reach the harness. (A userptr buffer recreated by a
//! CRIU RESTORE from buckets is not cut: reaching one whose contents are then written needs a
//! consistent checkpoint of such a buffer in the input, and the fd and machine checks would
//! report the damage.) `WAIT_EVENTS` timeouts are cut to at most 1 ms: an infinite wait on an
//! event nobody signals is the driver's behaviour, not a hang of the simulator.

use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd};

use kfd_abi::ioctl::{self, Dir};
use kfd_abi::{Errno, GpuId, Kfd, Transport};
use kfd_sim::preset::Preset;
use kfd_sim::{Machine, SimFile, SimProcess};

use crate::fds::FdTable;

/// The most records one input runs.
pub const MAX_CALLS: usize = 64;

/// Every errno the 6.1 amdkfd driver answers on `/dev/kfd` ioctls (from its
/// `kfd_chardev.c` and the subsystems it calls), plus `EIO`: `WAIT_EVENTS` whose result is
/// `KFD_IOC_WAIT_RESULT_FAIL`, and `ENOTTY`: an ioctl number outside the table (6.1.y stable).
pub const KFD_ERRNOS: &[Errno] = &[
    Errno::EFAULT,
    Errno::EINVAL,
    Errno::ENOMEM,
    Errno::EBUSY,
    Errno::EPERM,
    Errno::ESRCH,
    Errno::ENODEV,
    Errno::ENOSPC,
    Errno::EACCES,
    Errno::EBADF,
    Errno::EADDRINUSE,
    Errno::ENOTSUPP,
    Errno::EOPNOTSUPP,
    Errno::EIO,
    Errno::ENOTTY,
];

/// Every errno the amdgpu DRM driver answers on the render-node ioctls the simulator serves:
/// the generic ones, `ENOENT` for unknown GEM handles and BO lists, `ENOTTY` for a request of
/// another type, `ETIME` for an SDMA submission that does not complete, `ECANCELED` for a
/// context lost to a GPU reset (a faulting submission).
pub const RENDER_ERRNOS: &[Errno] = &[
    Errno::EFAULT,
    Errno::EINVAL,
    Errno::ENOMEM,
    Errno::EBUSY,
    Errno::EPERM,
    Errno::EACCES,
    Errno::EBADF,
    Errno::ENODEV,
    Errno::ENOSPC,
    Errno::ENOENT,
    Errno::ENOTTY,
    Errno::ETIME,
    Errno::ECANCELED,
];

/// The scratch region: buffers the input fills and points to, with room behind them for what
/// the simulator writes through those pointers.
const REGION: usize = 1 << 20;
/// Scratch buffers at the start of the region.
const SLOTS: usize = 8;
/// Bytes per scratch buffer.
const SLOT: usize = 8 << 10;
/// The most a userptr buffer placed in the region may cover.
const USERPTR_MAX: u64 = 512 << 10;
/// How many earlier arguments fixups can copy from.
const HISTORY: usize = 4;
/// Head value of a record that fills scratch.
const FILL: u8 = 15;

/// Addresses nothing is mapped at (or that are not user addresses at all).
const WILD: [u64; 6] = [
    0x10,
    0x1000,
    (1 << 47) - 8,
    1 << 47,
    0xffff_8000_0000_0000,
    u64::MAX - 7,
];

/// The node and its processes an input runs on.
struct World {
    machine: Machine,
    p: SimProcess,
    r: SimProcess,
    _t: SimProcess,
    files: Vec<(SimFile, Node)>,
    gpus: Vec<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Node {
    Kfd,
    Render,
}

fn preset(setup: u8) -> Preset {
    let name = if setup & 1 == 0 { "mi50x1" } else { "mi210x2" };
    match Preset::by_name(name) {
        Ok(p) => p,
        Err(e) => panic!("fuzz harness: preset {name}: {e}"),
    }
}

fn harness<T, E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> T + '_ {
    move |e| panic!("fuzz harness: {what}: {e}")
}

impl World {
    fn new(setup: u8) -> Self {
        let machine = Machine::new(&preset(setup)).unwrap_or_else(harness("machine"));
        let gpus = machine.gpu_ids();
        let minors = machine.render_minors();
        let open = |proc: &SimProcess, files: &mut Vec<(SimFile, Node)>| {
            files.push((
                proc.open_kfd().unwrap_or_else(harness("open kfd")),
                Node::Kfd,
            ));
            for &m in &minors {
                let r = proc.open_render(m).unwrap_or_else(harness("open render"));
                files.push((r, Node::Render));
            }
        };
        let mut files = Vec::new();
        let p = machine.spawn_process();
        open(&p, &mut files);
        if setup & 2 != 0 {
            let kfd = Kfd::new(files[0].0.try_clone().unwrap_or_else(harness("dup")), "P");
            for (i, &g) in gpus.iter().enumerate() {
                if let Some(gpu) = GpuId::new(g) {
                    kfd.acquire_vm(gpu, files[1 + i].0.as_fd())
                        .unwrap_or_else(harness("acquire vm"));
                }
            }
        }
        p.set_capable(setup & 4 == 0);
        let t = machine.spawn_process();
        t.ptrace_attach(&p);
        t.set_capable(setup & 8 == 0);
        files.push((
            files[0].0.used_by(&t).unwrap_or_else(harness("dup")),
            Node::Kfd,
        ));
        let r = machine.spawn_process();
        open(&r, &mut files);
        Self {
            machine,
            p,
            r,
            _t: t,
            files,
            gpus,
        }
    }
}

/// Reads an input front to back; past its end every read is short.
struct Reader<'a> {
    data: &'a [u8],
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.data.split_first()?;
        self.data = rest;
        Some(b)
    }

    fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }
}

/// The render-node ioctls that small `nr` values of an input name, in a fixed order, so that
/// inputs (and the seeds) keep their meaning as the DRM tables grow.
const RENDER_SHORTHANDS: [u32; 13] = [
    ioctl::drm::GEM_CLOSE,
    ioctl::drm::PRIME_HANDLE_TO_FD,
    ioctl::drm::PRIME_FD_TO_HANDLE,
    ioctl::drm::AMDGPU_GEM_CREATE,
    ioctl::drm::AMDGPU_GEM_MMAP,
    ioctl::drm::AMDGPU_CTX,
    ioctl::drm::AMDGPU_BO_LIST,
    ioctl::drm::AMDGPU_CS,
    ioctl::drm::AMDGPU_INFO,
    ioctl::drm::AMDGPU_GEM_VA,
    ioctl::drm::AMDGPU_WAIT_CS,
    ioctl::drm::AMDGPU_GEM_OP,
    ioctl::drm::AMDGPU_GEM_USERPTR,
];

/// The DRM ioctls the simulator serves.
fn render_table() -> impl Iterator<Item = &'static ioctl::IoctlDesc> {
    ioctl::drm::CORE_TABLE
        .iter()
        .chain(ioctl::drm::AMDGPU_TABLE)
}

fn put(buf: &mut [u8], at: usize, value: &[u8]) {
    if let Some(dst) = at
        .checked_add(value.len())
        .and_then(|end| buf.get_mut(at..end))
    {
        dst.copy_from_slice(value);
    }
}

fn get_u64(buf: &[u8], at: usize) -> Option<u64> {
    let b = buf.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

fn get_u32(buf: &[u8], at: usize) -> Option<u32> {
    let b = buf.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

/// One ioctl a program made, and its answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// The ioctl's name (`"ALLOC_MEMORY_OF_GPU"`), or its number when it has none.
    pub name: String,
    /// Whether it went to a render node.
    pub render: bool,
    /// The answer.
    pub result: Result<i32, Errno>,
}

/// The state one program runs in.
struct Run<'w> {
    world: &'w World,
    region: Vec<u8>,
    history: VecDeque<Vec<u8>>,
    installed: Vec<i32>,
    seen: FdTable,
    steps: Vec<Step>,
}

impl Run<'_> {
    fn slot_addr(&self, slot: usize) -> u64 {
        self.region.as_ptr() as u64 + (slot % SLOTS * SLOT) as u64
    }

    fn in_region(&self, addr: u64) -> bool {
        let base = self.region.as_ptr() as u64;
        (base..base + REGION as u64).contains(&addr)
    }

    fn fixups(&self, r: &mut Reader<'_>, buf: &mut [u8]) {
        let n = r.byte().unwrap_or(0) % 9;
        for _ in 0..n {
            let [at, kind, param] = [r.byte(), r.byte(), r.byte()].map(|b| b.unwrap_or(0));
            let at = usize::from(at) * 4;
            let p = usize::from(param);
            let w = self.world;
            match kind % 8 {
                0 => {
                    let g = w.gpus.get(p % w.gpus.len().max(1)).copied().unwrap_or(0);
                    put(buf, at, &g.to_le_bytes());
                }
                1 => {
                    let fd = w.files[p % w.files.len()].0.as_fd().as_raw_fd();
                    put(buf, at, &fd.to_le_bytes());
                }
                2 => put(buf, at, &self.slot_addr(p).to_le_bytes()),
                3 => {
                    let v = self
                        .history
                        .get(p & 3)
                        .and_then(|h| get_u64(h, (p >> 2) * 4))
                        .unwrap_or(0);
                    put(buf, at, &v.to_le_bytes());
                }
                4 => {
                    let pid = if p & 1 == 0 { w.p.pid() } else { w.r.pid() };
                    put(buf, at, &pid.to_le_bytes());
                }
                5 => {
                    if let Some(fd) = self.installed.get(p % self.installed.len().max(1)) {
                        put(buf, at, &fd.to_le_bytes());
                    }
                }
                6 => put(buf, at, &(1u32 << (p % 32)).to_le_bytes()),
                _ => put(buf, at, &(1u64 << (p % 64)).to_le_bytes()),
            }
        }
    }

    fn fill(&mut self, nr: u8, r: &mut Reader<'_>) {
        let len = usize::from(r.byte().unwrap_or(0));
        let mut bytes = r.bytes(len).to_vec();
        bytes.resize(len.max(1024), 0);
        let start = usize::from(nr & 7) * SLOT + usize::from(nr >> 3) * 256;
        let end = (start + bytes.len()).min(start - start % SLOT + SLOT);
        bytes.truncate(end - start);
        let current = self.region.get(start..end).map(<[u8]>::to_vec);
        if let Some(current) = current {
            // Bytes past the payload keep what the region held (the fixups may land there).
            bytes[len.min(current.len())..].copy_from_slice(&current[len.min(current.len())..]);
        }
        self.fixups(r, &mut bytes);
        if let Some(dst) = self.region.get_mut(start..end) {
            dst.copy_from_slice(&bytes);
        }
    }

    /// Cuts what an input cannot be allowed to ask of the in-process simulator (module docs).
    fn sanitize(&self, node: Node, nr: u8, buf: &mut [u8]) {
        match (node, nr) {
            (Node::Kfd, 0x0c) if get_u32(buf, 16).is_some_and(|t| t > 1) => {
                put(buf, 16, &1u32.to_le_bytes());
            }
            (Node::Kfd, 0x16) => {
                let userptr = get_u32(buf, 36)
                    .is_some_and(|f| f & kfd_sys::KFD_IOC_ALLOC_MEM_FLAGS_USERPTR != 0);
                self.cut_userptr(buf, userptr, 24, 8);
            }
            (Node::Render, 0x51) => self.cut_userptr(buf, true, 0, 8),
            _ => {}
        }
    }

    fn cut_userptr(&self, buf: &mut [u8], userptr: bool, addr_at: usize, size_at: usize) {
        let (Some(addr), Some(size)) = (get_u64(buf, addr_at), get_u64(buf, size_at)) else {
            return;
        };
        if userptr && self.in_region(addr) && size > USERPTR_MAX {
            put(buf, size_at, &USERPTR_MAX.to_le_bytes());
        }
    }

    fn call(&mut self, head: u8, nr: u8, r: &mut Reader<'_>) {
        let w = self.world;
        let (file, node) = &w.files[usize::from(head & 15) % w.files.len()];
        let (file, node) = (file, *node);
        let nr = match node {
            Node::Render => RENDER_SHORTHANDS
                .get(usize::from(nr))
                .map_or(nr, |&cmd| ioctl::nr(cmd)),
            _ => nr,
        };
        let known = match node {
            Node::Kfd => ioctl::kfd::lookup(ioctl::encode(Dir::None, ioctl::kfd::TYPE, nr, 0)),
            Node::Render => render_table().find(|d| ioctl::nr(d.cmd) == nr),
        };
        let own = known.map(|d| d.cmd);
        let size = if head & 0x40 != 0 {
            let lo = r.byte().unwrap_or(0);
            let hi = r.byte().unwrap_or(0);
            usize::from(u16::from_le_bytes([lo, hi]) & 0x3fff)
        } else {
            own.map_or(0, ioctl::size)
        };
        let (dir, ty) = if head & 0x80 != 0 {
            let dir = match r.byte().unwrap_or(0) & 3 {
                0 => Dir::None,
                1 => Dir::Write,
                2 => Dir::Read,
                _ => Dir::ReadWrite,
            };
            (dir, r.byte().unwrap_or(0))
        } else {
            let ty = match node {
                Node::Kfd => ioctl::kfd::TYPE,
                Node::Render => ioctl::drm::TYPE,
            };
            (own.map_or(Dir::ReadWrite, ioctl::dir), ty)
        };
        let wild = if head >> 4 & 3 == 3 {
            Some(WILD[usize::from(r.byte().unwrap_or(0)) % WILD.len()])
        } else {
            None
        };
        let len = usize::from(r.byte().unwrap_or(0));
        let payload = r.bytes(len);
        let mut buf = payload.to_vec();
        buf.resize(len.max(size).max(own.map_or(0, ioctl::size)), 0);
        self.fixups(r, &mut buf);
        self.sanitize(node, nr, &mut buf);
        let cmd = ioctl::encode(dir, ty, nr, size);
        let arg = match (head >> 4 & 3, wild) {
            (2, _) => 0,
            (_, Some(addr)) => addr,
            _ => buf.as_mut_ptr() as u64,
        };
        let result = file.ioctl_at(cmd, arg);
        let name = known.map_or_else(|| format!("nr {nr:#x}"), |d| d.name.to_owned());
        self.steps.push(Step {
            name: name.clone(),
            render: node == Node::Render,
            result,
        });
        if let Err(e) = result {
            let allowed = match node {
                Node::Kfd => KFD_ERRNOS,
                Node::Render => RENDER_ERRNOS,
            };
            assert!(
                allowed.contains(&e),
                "{node:?} ioctl nr {nr:#x} ({name}), cmd {cmd:#010x}: {e} is not an errno the \
                 driver answers"
            );
        }
        let installs = match node {
            Node::Kfd => nr == 0x1f || nr == 0x22,
            Node::Render => nr == ioctl::nr(ioctl::drm::PRIME_HANDLE_TO_FD),
        };
        if result.is_ok() && installs {
            let now = FdTable::snapshot().unwrap_or_else(harness("listing fds"));
            self.installed.extend(now.opened_since(&self.seen).fds());
            self.seen = now;
        }
        self.history.push_front(buf);
        self.history.truncate(HISTORY);
    }
}

/// The body of the `ioctls` target.
///
/// # Panics
/// When the simulator answers an errno the driver does not, stops answering, or leaves state
/// behind once its processes are gone.
pub fn ioctls(data: &[u8]) {
    run(data);
}

/// Runs an `ioctls` input as [`ioctls`] does and returns the calls it made.
///
/// # Panics
/// As [`ioctls`].
pub fn run(data: &[u8]) -> Vec<Step> {
    let Some((&setup, rest)) = data.split_first() else {
        return Vec::new();
    };
    let before = FdTable::snapshot().unwrap_or_else(harness("listing fds"));
    let world = World::new(setup);
    let seen = FdTable::snapshot().unwrap_or_else(harness("listing fds"));
    let mut run = Run {
        world: &world,
        region: vec![0u8; REGION],
        history: VecDeque::new(),
        installed: Vec::new(),
        seen,
        steps: Vec::new(),
    };
    let mut r = Reader { data: rest };
    for _ in 0..MAX_CALLS {
        let (Some(head), Some(nr)) = (r.byte(), r.byte()) else {
            break;
        };
        if head & 15 == FILL {
            run.fill(nr, &mut r);
        } else {
            run.call(head, nr, &mut r);
        }
    }
    let steps = std::mem::take(&mut run.steps);
    drop(run);
    let pids = [world.p.pid(), world.r.pid()];
    let kfd = Kfd::new(
        world.files[0].0.try_clone().unwrap_or_else(harness("dup")),
        "P",
    );
    if let Err(e) = kfd.get_version() {
        panic!("GET_VERSION fails after the program: {e}");
    }
    drop(kfd);
    let World {
        machine,
        p,
        r,
        _t,
        files,
        gpus,
    } = world;
    drop(files);
    drop((p, r, _t));
    for pid in pids {
        assert!(
            !machine.has_kfd_process(pid),
            "a KFD process is left for pid {pid} once its files are closed"
        );
    }
    // What remains open now was installed in the simulated processes (dma-bufs, SMI event
    // files) and never closed by them: the process's exit closes it.
    let left = FdTable::snapshot()
        .unwrap_or_else(harness("listing fds"))
        .opened_since(&before);
    for fd in left.fds() {
        kfd_sim::host::close_raw(fd);
    }
    for g in gpus {
        assert_eq!(
            machine.vram_used(g),
            Some(0),
            "VRAM of GPU {g:#x} is still in use once every process is gone"
        );
    }
    steps
}

/// A writer of `ioctls` inputs.
#[derive(Clone, Debug)]
pub struct Program {
    bytes: Vec<u8>,
}

/// A fixup of a [`Program`] record: what to write at byte `4 * at`.
#[derive(Clone, Copy, Debug)]
pub enum Fix {
    /// The gpu id of GPU `n` (node order).
    Gpu(u8),
    /// The fd of file `n`.
    File(u8),
    /// A pointer to scratch buffer `n`.
    Scratch(u8),
    /// Eight bytes of the argument of the call `back` calls ago (0: the last one), at byte
    /// `4 * word`.
    Earlier {
        /// How many calls back.
        back: u8,
        /// Where in its argument, in 4-byte words.
        word: u8,
    },
    /// The pid of P (`false`) or R (`true`).
    Pid(bool),
    /// The `n`-th fd an earlier call installed.
    Installed(u8),
    /// The u32 `1 << n`.
    Bit(u8),
}

impl Fix {
    fn encode(self) -> [u8; 2] {
        match self {
            Fix::Gpu(n) => [0, n],
            Fix::File(n) => [1, n],
            Fix::Scratch(n) => [2, n],
            Fix::Earlier { back, word } => [3, (back & 3) | (word & 63) << 2],
            Fix::Pid(r) => [4, u8::from(r)],
            Fix::Installed(n) => [5, n],
            Fix::Bit(n) => [6, n],
        }
    }
}

/// Files of a [`Program`]'s world, by index.
pub mod file {
    /// P's `/dev/kfd`.
    pub const P_KFD: u8 = 0;
    /// P's render node of GPU `n`.
    pub const fn p_render(n: u8) -> u8 {
        1 + n
    }
    /// P's `/dev/kfd` used by its tracer, on a node with `gpus` GPUs.
    pub const fn t_kfd(gpus: u8) -> u8 {
        1 + gpus
    }
    /// R's `/dev/kfd`.
    pub const fn r_kfd(gpus: u8) -> u8 {
        2 + gpus
    }
    /// R's render node of GPU `n`.
    pub const fn r_render(gpus: u8, n: u8) -> u8 {
        3 + gpus + n
    }
}

impl Program {
    /// A program on `mi50x1` (`two_gpus`: `mi210x2`), with P's VMs acquired first or not.
    pub fn new(two_gpus: bool, acquired: bool) -> Self {
        Self {
            bytes: vec![u8::from(two_gpus) | u8::from(acquired) << 1],
        }
    }

    /// The input.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn fixups(&mut self, fixes: &[(u8, Fix)]) {
        self.bytes
            .push(u8::try_from(fixes.len().min(8)).unwrap_or(8));
        for (at, fix) in fixes.iter().take(8) {
            self.bytes.push(*at);
            self.bytes.extend_from_slice(&fix.encode());
        }
    }

    /// A KFD ioctl (`nr`) on `file` with its own size, direction and type, `arg` as the start
    /// of its argument, and fixups `(at, what)`.
    pub fn kfd(mut self, file: u8, nr: u8, arg: &[u8], fixes: &[(u8, Fix)]) -> Self {
        self.bytes.extend_from_slice(&[file & 15, nr]);
        self.arg(arg, fixes);
        self
    }

    /// A render-node ioctl: `index` in the simulated DRM table (0 GEM_CLOSE, 1
    /// PRIME_HANDLE_TO_FD, 2 PRIME_FD_TO_HANDLE, 3 GEM_CREATE, 4 GEM_MMAP, 5 CTX, 6 BO_LIST,
    /// 7 CS, 8 INFO, 9 GEM_VA, 10 WAIT_CS, 11 GEM_OP, 12 GEM_USERPTR).
    pub fn render(self, file: u8, index: u8, arg: &[u8], fixes: &[(u8, Fix)]) -> Self {
        self.kfd(file, index, arg, fixes)
    }

    /// An ioctl with a raw request code on `file`, with a null argument.
    pub fn raw_null(mut self, file: u8, cmd: u32) -> Self {
        let size = u16::try_from(ioctl::size(cmd)).unwrap_or(0).to_le_bytes();
        let dir = match ioctl::dir(cmd) {
            Dir::None => 0,
            Dir::Write => 1,
            Dir::Read => 2,
            Dir::ReadWrite => 3,
        };
        self.bytes.extend_from_slice(&[
            file & 15 | 0x20 | 0x40 | 0x80,
            ioctl::nr(cmd),
            size[0],
            size[1],
            dir,
            ioctl::ty(cmd),
            0,
            0,
        ]);
        self
    }

    /// Fills scratch buffer `slot` from byte `256 * block` with `bytes` and fixups.
    pub fn fill(mut self, slot: u8, block: u8, bytes: &[u8], fixes: &[(u8, Fix)]) -> Self {
        self.bytes
            .extend_from_slice(&[FILL, (slot & 7) | block << 3]);
        self.arg(bytes, fixes);
        self
    }

    fn arg(&mut self, arg: &[u8], fixes: &[(u8, Fix)]) {
        let arg = &arg[..arg.len().min(255)];
        self.bytes.push(u8::try_from(arg.len()).unwrap_or(255));
        self.bytes.extend_from_slice(arg);
        self.fixups(fixes);
    }
}
