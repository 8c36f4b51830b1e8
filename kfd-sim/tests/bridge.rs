//! The simulator served through the VM lane's kernel module (`ci/kmod/kfd_bridge`): `kfd-simd`
//! behind the module's proxy devices, driven as ROCm drives the driver: mmap of render nodes and
//! of `/dev/kfd`, and fds the driver installs into its caller.
//!
//! These tests need the module loaded (`/dev/kfd-bridge`), `/dev/cuse` and root; elsewhere each
//! prints why it is skipped and passes. The VM lane runs them (`ci/vm-lane --scenario
//! kmod-bridge`), which also checks the kernel log and unloads the module afterwards. They share
//! the CUSE tests' lock file: every test starts its own daemon, and they all register /dev/kfd.
//!
//! Roles played by other processes (a process restoring a checkpoint, one in its own pid
//! namespace, one whose daemon goes away under its mappings) are this same binary, started again
//! with `KFD_BRIDGE_HELPER=<role>`, running only [`helper_process_entry`].

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use kfd_abi::criu::{RestoreBo, RestoreDevice};
use kfd_abi::mmap_offset as mo;
use kfd_abi::{AllocFlags, Errno, EventType, FdTransport, GpuId, Kfd, RenderNode};

mod served;

use served::{preset_gpus, read_helper_line, render_path, say, Client, Daemon};

const VA: u64 = 0x7f00_0000_0000;
const PAGE: usize = 4096;
const MIB: u64 = 1 << 20;
const MIB_USIZE: usize = 1 << 20;
const HELPER_ENV: &str = "KFD_BRIDGE_HELPER";
const HELPER_ARG_ENV: &str = "KFD_BRIDGE_HELPER_ARG";
const CONTROL: &str = "/dev/kfd-bridge";
/// `KFD_BRIDGE_SIM_MMAP`: the module's own request to the daemon.
const SIM_MMAP: u32 = 0x0000_4b7c;

/// Why these tests cannot run here, if they cannot.
fn skip_reason() -> Option<String> {
    if !Path::new(CONTROL).exists() {
        return Some(format!(
            "{CONTROL} does not exist (the kfd_bridge module is not loaded); the VM lane runs \
             these tests (ci/vm-lane --scenario kmod-bridge)"
        ));
    }
    served::cannot_serve("/dev/cuse does not exist")
}

macro_rules! bridge_test {
    () => {
        served::skip_if!(skip_reason())
    };
}

impl Daemon {
    /// A daemon behind the module: it must say that it serves through the module's proxies.
    fn start() -> Daemon {
        let d = Daemon::serve("kfd-sim-bridge");
        assert!(d.proxied, "kfd-simd did not serve through the module");
        d
    }
}

/// This process's view of the served devices.
fn client() -> Client {
    served::client(&preset_gpus())
}

impl Client {
    /// A writable GTT BO of `len` bytes at [`VA`] on the first GPU, mapped shared through its
    /// render node.
    fn mapped_gtt(&self, len: usize) -> Mapping {
        let bo = self
            .kfd
            .alloc_memory(
                VA,
                len as u64,
                self.gpus[0],
                AllocFlags::GTT | AllocFlags::WRITABLE,
            )
            .expect("GTT");
        map_shared(self.render_fd(0), bo.mmap_offset, len).expect("map")
    }

    /// A shared mapping of the doorbell pages of GPU `i`.
    fn doorbells(&self, i: usize) -> Result<Mapping, Errno> {
        map_shared(
            self.kfd_fd(),
            mo::TYPE_DOORBELL | mo::gpu_id(self.gpus[i].get()),
            2 * PAGE,
        )
    }
}

/// A CPU mapping of a device file, unmapped on drop.
struct Mapping {
    addr: usize,
    len: usize,
}

fn map(
    fd: BorrowedFd<'_>,
    offset: u64,
    len: usize,
    prot: libc::c_int,
    flags: libc::c_int,
) -> Result<Mapping, Errno> {
    // The offset is the driver's: its top bits are set for /dev/kfd (mmap takes it unsigned).
    let off = libc::off_t::from_ne_bytes(offset.to_ne_bytes());
    // SAFETY: a new mapping at an address of the kernel's choice; it overlaps nothing of ours.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd.as_raw_fd(), off) };
    if p == libc::MAP_FAILED {
        return Err(Errno::last());
    }
    Ok(Mapping {
        addr: p as usize,
        len,
    })
}

fn map_shared(fd: BorrowedFd<'_>, offset: u64, len: usize) -> Result<Mapping, Errno> {
    map(
        fd,
        offset,
        len,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_SHARED,
    )
}

impl Mapping {
    fn read(&self, at: usize, len: usize) -> Vec<u8> {
        assert!(at + len <= self.len);
        let mut v = vec![0u8; len];
        for (i, b) in v.iter_mut().enumerate() {
            // SAFETY: the byte is inside our live mapping; volatile, as device memory that
            // another party (the daemon) writes too.
            *b = unsafe { std::ptr::read_volatile((self.addr + at + i) as *const u8) };
        }
        v
    }

    fn write(&self, at: usize, data: &[u8]) {
        assert!(at + data.len() <= self.len);
        for (i, b) in data.iter().enumerate() {
            // SAFETY: the range is inside our live, writable mapping.
            unsafe { std::ptr::write_volatile((self.addr + at + i) as *mut u8, *b) };
        }
    }

    /// Unmaps `len` bytes at `at`, leaving the rest mapped (a partial munmap).
    fn unmap_part(&self, at: usize, len: usize) {
        // SAFETY: a page-aligned range inside our mapping; nothing refers to it afterwards (the
        // test never reads there again).
        let r = unsafe { libc::munmap((self.addr + at) as *mut libc::c_void, len) };
        assert_eq!(r, 0, "munmap: {}", std::io::Error::last_os_error());
    }

    /// Leaves the mapping in place (for a process that exits or forks with it).
    fn leak(self) -> usize {
        let a = self.addr;
        std::mem::forget(self);
        a
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our mapping; unmapping already-unmapped parts is harmless.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

/// The line of /proc/self/maps that contains `addr`.
fn maps_line(addr: usize) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    maps.lines()
        .find(|l| {
            let range = l.split_whitespace().next().unwrap_or("");
            let (a, b) = range.split_once('-').unwrap_or(("0", "0"));
            let a = usize::from_str_radix(a, 16).unwrap_or(0);
            let b = usize::from_str_radix(b, 16).unwrap_or(0);
            (a..b).contains(&addr)
        })
        .map(str::to_owned)
}

/// The `VmFlags` of the VMA that contains `addr` (/proc/self/smaps).
fn vm_flags(addr: usize) -> Vec<String> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
    let mut inside = false;
    for l in smaps.lines() {
        if let Some((range, _)) = l.split_once(' ') {
            if let Some((a, b)) = range.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = (a..b).contains(&addr);
                    continue;
                }
            }
        }
        if inside {
            if let Some(f) = l.strip_prefix("VmFlags:") {
                return f.split_whitespace().map(str::to_owned).collect();
            }
        }
    }
    panic!("no VMA at {addr:#x}");
}

fn errno_of(r: Result<Mapping, Errno>) -> Errno {
    match r {
        Ok(m) => panic!("mmap succeeded at {:#x}, an error was expected", m.addr),
        Err(e) => e,
    }
}

fn is_cloexec(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: F_GETFD on an fd borrowed for the call.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
    assert!(r >= 0);
    r & libc::FD_CLOEXEC != 0
}

#[test]
fn the_public_nodes_are_proxies_of_private_cuse_devices() {
    bridge_test!();
    let d = Daemon::start();
    let sysfs = |p: &Path| {
        let m = std::fs::metadata(p).expect("node");
        assert!(
            m.file_type().is_char_device(),
            "{} is not a char device",
            p.display()
        );
        let link = format!(
            "/sys/dev/char/{}:{}",
            libc::major(m.rdev()),
            libc::minor(m.rdev())
        );
        (
            (libc::major(m.rdev()), libc::minor(m.rdev())),
            std::fs::canonicalize(link).expect("sysfs link"),
        )
    };
    let (_, kfd) = sysfs(Path::new("/dev/kfd"));
    assert_eq!(kfd, Path::new("/sys/devices/virtual/kfd_bridge/kfd"));
    let (_, backend) = sysfs(Path::new("/dev/kfd-sim/kfd"));
    assert!(
        backend.starts_with("/sys/devices/virtual/cuse"),
        "{}",
        backend.display()
    );
    for (_, minor) in preset_gpus() {
        let (numbers, dev) = sysfs(&render_path(minor));
        assert_eq!(
            numbers,
            (226, minor),
            "render nodes keep the real DRM numbers"
        );
        assert_eq!(
            dev,
            PathBuf::from(format!(
                "/sys/devices/virtual/kfd_bridge/dri!renderD{minor}"
            ))
        );
        let (numbers, _) = sysfs(Path::new(&format!("/dev/kfd-sim/dri-renderD{minor}")));
        assert_ne!(numbers.0, 226, "the CUSE device leaves 226 to the proxy");
    }
    // Clients take the proxies for real devices: fds arrive installed, nothing to fetch.
    let c = client();
    assert!(!c.kfd.transport().is_cuse_served());
    assert!(!c.renders[0].transport().is_cuse_served());
    assert_eq!(c.kfd.get_version().expect("GET_VERSION").major, 1);
    drop(c);
    drop(d);
}

#[test]
fn a_render_node_mapping_shares_the_bo_with_the_simulated_gpu() {
    bridge_test!();
    let d = Daemon::start();
    let c = client();
    let len = 3 * PAGE;
    let flags = AllocFlags::GTT | AllocFlags::WRITABLE;
    let bo = c
        .kfd
        .alloc_memory(VA, len as u64, c.gpus[0], flags)
        .expect("ALLOC GTT");
    let m = map_shared(c.render_fd(0), bo.mmap_offset, len).expect("mmap of a GTT BO");
    for p in 0..3u8 {
        m.write(p as usize * PAGE, &[b'C', b'P', b'U', b'0' + p]);
    }
    // The VMA keeps the device file, with the driver's flags.
    let line = maps_line(m.addr).expect("the mapping in /proc/self/maps");
    assert!(line.ends_with("/dev/dri/renderD128"), "{line}");
    assert!(
        line.contains(&format!(" {:08x} ", bo.mmap_offset)),
        "{line}"
    );
    let f = vm_flags(m.addr);
    for want in ["sh", "io", "de", "dd"] {
        assert!(f.iter().any(|x| x == want), "VmFlags {f:?} lack {want}");
    }
    assert!(
        !f.iter().any(|x| x == "dc"),
        "render mappings are inherited: {f:?}"
    );
    // Readable by debuggers (TTM's access), though not pinnable (VM_IO).
    let mem = File::open("/proc/self/mem").expect("/proc/self/mem");
    let mut b = [0u8; 4];
    mem.read_exact_at(&mut b, (m.addr + 2 * PAGE) as u64)
        .expect("read the mapping through /proc/self/mem");
    assert_eq!(&b, b"CPU2");

    // The daemon sees the CPU's bytes: its dma-buf of the BO (a checkpoint of ourselves), which
    // arrives installed in our fd table by the module, as the driver installs it.
    let before = d.open_fds();
    let info = c.kfd.criu_process_info().expect("own PROCESS_INFO");
    let ck = c.kfd.criu_checkpoint(&info).expect("own CHECKPOINT");
    let bucket = ck
        .bos
        .iter()
        .find(|b| b.addr == VA)
        .expect("the BO's bucket");
    assert_eq!(bucket.offset, bo.mmap_offset);
    let buf: &OwnedFd = bucket.dmabuf.as_ref().expect("a dma-buf for a GTT BO");
    assert!(
        !is_cloexec(buf.as_fd()),
        "CRIU dma-bufs are installed without O_CLOEXEC"
    );
    let dmabuf = File::from(buf.try_clone().expect("dup"));
    for p in 0..3u8 {
        let mut b = [0u8; 4];
        dmabuf
            .read_exact_at(&mut b, u64::from(p) * PAGE as u64)
            .expect("read the dma-buf");
        assert_eq!(
            b,
            [b'C', b'P', b'U', b'0' + p],
            "page {p} as the daemon sees it"
        );
    }
    // And the CPU sees what the device side writes.
    dmabuf
        .write_all_at(b"GPU!", PAGE as u64 + 8)
        .expect("write the dma-buf");
    assert_eq!(m.read(PAGE + 8, 4), b"GPU!");
    drop(dmabuf);
    drop(ck);
    c.kfd.criu_unpause().expect("UNPAUSE");
    assert_eq!(
        d.open_fds(),
        before,
        "the daemon keeps no copy of the dma-bufs"
    );

    // fork: the child has the mapping, and its writes are the parent's.
    // SAFETY: the child only reads and writes our mapping and exits with _exit, no allocation.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork");
    if child == 0 {
        let ok = m.read(0, 4) == b"CPU0";
        m.write(2 * PAGE + 100, b"kid!");
        // SAFETY: leaves the child without running the parent's destructors.
        unsafe { libc::_exit(if ok { 0 } else { 3 }) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child did not see the mapping ({status:#x})"
    );
    assert_eq!(m.read(2 * PAGE + 100, 4), b"kid!");

    // A partial munmap leaves two VMAs that still map their own pages.
    m.unmap_part(PAGE, PAGE);
    assert_eq!(m.read(0, 4), b"CPU0");
    assert_eq!(m.read(2 * PAGE, 4), b"CPU2");
    assert!(
        maps_line(m.addr + PAGE).is_none(),
        "the middle page is gone"
    );
    assert!(maps_line(m.addr + 2 * PAGE).is_some_and(|l| l.ends_with("/dev/dri/renderD128")));
    drop(m);
    // The BO outlives no mapping of it: it can be freed.
    c.kfd.free_memory(bo.handle).expect("FREE");
    assert!(d.open_fds() <= before + 1);
    drop(c);
    drop(d);
}

#[test]
fn render_node_mappings_fail_as_on_the_driver() {
    bridge_test!();
    let mut d = Daemon::start();
    let c = client();
    let gtt = c
        .kfd
        .alloc_memory(
            VA,
            2 * PAGE as u64,
            c.gpus[0],
            AllocFlags::GTT | AllocFlags::WRITABLE,
        )
        .expect("GTT");
    let fd = c.render_fd(0);
    // Not a BO's offset, or only the middle of one: EINVAL.
    assert_eq!(errno_of(map_shared(fd, 0, PAGE)), Errno::EINVAL);
    assert_eq!(
        errno_of(map_shared(fd, gtt.mmap_offset + PAGE as u64, PAGE)),
        Errno::EINVAL
    );
    // Longer than the BO: EINVAL.
    assert_eq!(
        errno_of(map_shared(fd, gtt.mmap_offset, 3 * PAGE)),
        Errno::EINVAL
    );
    // Through the other GPU's render node, whose offsets are its own: EINVAL.
    assert_eq!(
        errno_of(map_shared(c.render_fd(1), gtt.mmap_offset, PAGE)),
        Errno::EINVAL
    );
    // Through another file of the same node, which is not the process's VM: EACCES.
    let other = RenderNode::open(&render_path(preset_gpus()[0].1)).expect("open");
    assert_eq!(
        errno_of(map_shared(other.transport().as_fd(), gtt.mmap_offset, PAGE)),
        Errno::EACCES
    );
    // Copy-on-write: refused (TTM); PROT_NONE private is allowed but can never become writable.
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    assert_eq!(
        errno_of(map(fd, gtt.mmap_offset, PAGE, rw, libc::MAP_PRIVATE)),
        Errno::EINVAL
    );
    let none = map(
        fd,
        gtt.mmap_offset,
        PAGE,
        libc::PROT_NONE,
        libc::MAP_PRIVATE,
    )
    .expect("PROT_NONE private mapping");
    // SAFETY: changes the protection of our own mapping.
    let r = unsafe { libc::mprotect(none.addr as *mut libc::c_void, PAGE, rw) };
    assert_eq!(r, -1, "a PROT_NONE private mapping became writable");
    assert_eq!(Errno::last(), Errno::EACCES);
    drop(none);
    // VRAM without PUBLIC is not created NO_CPU_ACCESS (since 5.14): it maps, as libhsakmt maps
    // every VRAM BO (the invisible ones PROT_NONE and private, for the debugger).
    let vram = c
        .kfd
        .alloc_memory(
            VA + 16 * MIB,
            MIB,
            c.gpus[0],
            AllocFlags::VRAM | AllocFlags::WRITABLE,
        )
        .expect("VRAM");
    let thunk = map(
        fd,
        vram.mmap_offset,
        PAGE,
        libc::PROT_NONE,
        libc::MAP_PRIVATE,
    )
    .expect("VRAM without PUBLIC, PROT_NONE private");
    drop(thunk);
    drop(map_shared(fd, vram.mmap_offset, PAGE).expect("VRAM without PUBLIC, shared"));
    // A read-only shared mapping is fine.
    let ro = map(fd, gtt.mmap_offset, PAGE, libc::PROT_READ, libc::MAP_SHARED).expect("read-only");
    drop(ro);
    // The module's own request cannot be sent from userspace.
    // SAFETY: an argument-less request on our fd.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::c_ulong::from(SIM_MMAP), 1usize) };
    assert_eq!((r, Errno::last()), (-1, Errno::EINVAL));
    assert!(d.alive());
    drop(c);
    drop(other);
    drop(d);
}

#[test]
fn kfd_mappings_are_the_drivers() {
    bridge_test!();
    let mut d = Daemon::start();
    let c = client();
    let kfd = c.kfd_fd();
    let gpu = c.gpus[0].get();
    let doorbell = mo::TYPE_DOORBELL | mo::gpu_id(gpu);
    // Before any signal event the process has no signal page.
    assert_eq!(
        errno_of(map_shared(kfd, mo::TYPE_EVENTS, PAGE)),
        Errno::EINVAL
    );

    let db = map_shared(kfd, doorbell, 2 * PAGE).expect("the doorbell slice");
    let line = maps_line(db.addr).expect("maps");
    assert!(line.ends_with("/dev/kfd"), "{line}");
    let f = vm_flags(db.addr);
    for want in ["sh", "io", "dc", "de", "dd", "nr"] {
        assert!(f.iter().any(|x| x == want), "VmFlags {f:?} lack {want}");
    }
    db.write(8, &7u64.to_le_bytes());
    // Not readable through /proc/PID/mem (a PFN map without access on the driver).
    let mem = File::open("/proc/self/mem").expect("/proc/self/mem");
    let mut b = [0u8; 8];
    let e = mem.read_exact_at(&mut b, (db.addr + 8) as u64).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    // The same process's slice, whoever maps it.
    let db2 = map_shared(kfd, doorbell, 2 * PAGE).expect("again");
    assert_eq!(db2.read(8, 8), 7u64.to_le_bytes());
    // The other GPU's slice is another page.
    let other = map_shared(
        kfd,
        mo::TYPE_DOORBELL | mo::gpu_id(c.gpus[1].get()),
        2 * PAGE,
    )
    .expect("GPU 1's doorbells");
    assert_eq!(other.read(8, 8), [0; 8]);
    // Not inherited by fork (VM_DONTCOPY).
    // SAFETY: the child reads /proc/self/maps through a fresh fd with raw syscalls and _exits.
    let child = unsafe { libc::fork() };
    assert!(child >= 0);
    if child == 0 {
        let code = if maps_line(db.addr).is_none() { 0 } else { 3 };
        // SAFETY: leaves the child without the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "a forked child has the doorbell mapping ({status:#x})"
    );

    // The driver's errno: wrong length EINVAL, unknown or no gpu id ENODEV.
    assert_eq!(errno_of(map_shared(kfd, doorbell, PAGE)), Errno::EINVAL);
    assert_eq!(
        errno_of(map_shared(
            kfd,
            mo::TYPE_DOORBELL | mo::gpu_id(0xfeed),
            2 * PAGE
        )),
        Errno::ENODEV
    );
    assert_eq!(
        errno_of(map_shared(kfd, mo::TYPE_DOORBELL, 2 * PAGE)),
        Errno::ENODEV
    );
    let mmio = mo::TYPE_MMIO | mo::gpu_id(gpu);
    let io = map_shared(kfd, mmio, PAGE).expect("the MMIO page");
    drop(io);
    assert_eq!(errno_of(map_shared(kfd, mmio, 2 * PAGE)), Errno::EINVAL);
    assert_eq!(
        errno_of(map_shared(
            kfd,
            mo::TYPE_RESERVED_MEM | mo::gpu_id(gpu),
            PAGE
        )),
        Errno::EINVAL
    );

    // The kernel's own signal page: all slots unsignaled; at most 32 KiB.
    let ev = c
        .kfd
        .create_event(EventType::Signal, true, None)
        .expect("CREATE_EVENT");
    assert_eq!(ev.page_offset, mo::TYPE_EVENTS);
    let events = map_shared(kfd, ev.page_offset, 8 * PAGE).expect("the events page");
    assert_eq!(events.read(8 * ev.slot_index as usize, 8), [0xff; 8]);
    assert!(maps_line(events.addr).is_some_and(|l| l.ends_with("/dev/kfd")));
    assert_eq!(
        errno_of(map_shared(kfd, ev.page_offset, 16 * PAGE)),
        Errno::EINVAL
    );
    // A process without a KFD process (a forked child with the parent's fd) gets EINVAL.
    // SAFETY: the child makes one mmap syscall and _exits with its errno.
    let child = unsafe { libc::fork() };
    assert!(child >= 0);
    if child == 0 {
        let code = match map_shared(kfd, doorbell, 2 * PAGE) {
            Ok(m) => {
                m.leak();
                0
            }
            Err(e) => e.0,
        };
        // SAFETY: leaves the child without the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    assert!(libc::WIFEXITED(status));
    assert_eq!(Errno(libc::WEXITSTATUS(status)), Errno::EINVAL);
    assert!(d.alive());
    drop((db, db2, other, events));
    drop(c);
    drop(d);
}

#[test]
fn criu_dmabufs_and_the_smi_fd_arrive_installed_in_the_caller() {
    bridge_test!();
    let d = Daemon::start();
    let c = client();
    let vram = c
        .kfd
        .alloc_memory(
            VA,
            2 * MIB,
            c.gpus[0],
            AllocFlags::VRAM | AllocFlags::WRITABLE | AllocFlags::PUBLIC,
        )
        .expect("VRAM");
    let gtt = c
        .kfd
        .alloc_memory(
            VA + 16 * MIB,
            MIB,
            c.gpus[1],
            AllocFlags::GTT | AllocFlags::WRITABLE,
        )
        .expect("GTT");
    let m = map_shared(c.render_fd(0), vram.mmap_offset, 2 * MIB_USIZE).expect("map VRAM");
    m.write(0, b"VRAM");
    m.write(MIB_USIZE, b"half");
    let before = d.open_fds();
    let smi = c.kfd.smi_events(c.gpus[0]).expect("SMI_EVENTS");
    assert!(File::from(smi).metadata().is_ok());
    // The daemon keeps its own end of the event channel (where the driver keeps the client's
    // kfifo) and no copy of the caller's: one fd more, until the next open finds the caller's
    // end closed and drops it.
    assert_eq!(
        d.open_fds(),
        before + 1,
        "the daemon keeps its end of the SMI channel and no copy of the caller's fd"
    );
    let again = c.kfd.smi_events(c.gpus[0]).expect("SMI_EVENTS again");
    assert_eq!(
        d.open_fds(),
        before + 1,
        "the end of the closed SMI fd is dropped at the next open"
    );
    drop(again);

    // Checkpoint ourselves, save what a restore needs, and restore it in a fresh process, which
    // gets its RESTORE dma-bufs installed, fills them, and maps the restored BO.
    let info = c.kfd.criu_process_info().expect("PROCESS_INFO");
    let ck = c.kfd.criu_checkpoint(&info).expect("CHECKPOINT");
    assert_eq!(ck.bos.len(), 2);
    let mut image = Vec::new();
    for b in &ck.bos {
        let buf = b.dmabuf.as_ref().expect("a dma-buf per VRAM/GTT BO");
        assert!(!is_cloexec(buf.as_fd()));
        if b.addr == VA {
            let f = File::from(buf.try_clone().expect("dup"));
            let mut x = [0u8; 4];
            f.read_exact_at(&mut x, MIB).expect("read");
            assert_eq!(&x, b"half");
        }
        image.push(format!(
            "bo {} {} {} {} {}",
            b.addr,
            b.size,
            b.offset,
            b.gpu_id,
            b.alloc_flags.bits()
        ));
    }
    for dev in &ck.devices {
        image.push(format!("dev {} {}", dev.user_gpu_id, dev.actual_gpu_id));
    }
    image.push(format!("objects {}", ck.num_objects));
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("priv"), &ck.priv_data).expect("write priv");
    std::fs::write(dir.path().join("image"), image.join("\n")).expect("write image");
    drop(ck);
    c.kfd.criu_unpause().expect("UNPAUSE");
    drop(m);
    let _ = (vram, gtt);

    // A RESTORE that fails after it has made the dma-bufs (bytes left over after the last
    // record): none reaches the caller, and the daemon keeps no second handle on any BO.
    let (mut child, mut out) = spawn_helper("restore-fails", &[dir.path().to_str().expect("path")]);
    assert_eq!(read_helper_line(&mut out), "failed, no fd installed");
    assert_eq!(d.bo_memory_handles(), "none twice");
    drop(child.stdin.take());
    assert!(child.wait().expect("wait").success());

    let (mut child, mut out) = spawn_helper("restore", &[dir.path().to_str().expect("path")]);
    assert_eq!(read_helper_line(&mut out), "restored");
    drop(child.stdin.take());
    assert!(child.wait().expect("wait").success());
    drop(c);
    drop(d);
}

/// Anonymous memory of `pages` pages at an address of the kernel's choice.
fn anon(pages: usize) -> Mapping {
    // SAFETY: a new private anonymous mapping; it overlaps nothing of ours.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            pages * PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(
        p,
        libc::MAP_FAILED,
        "mmap: {}",
        std::io::Error::last_os_error()
    );
    Mapping {
        addr: p as usize,
        len: pages * PAGE,
    }
}

impl Mapping {
    /// Maps `len` bytes at `at` again (fresh anonymous memory in a hole of this mapping).
    fn remap_part(&self, at: usize, len: usize) {
        let want = self.addr + at;
        // SAFETY: a hole of our own mapping's range; MAP_FIXED_NOREPLACE fails rather than
        // replace what another thread may have mapped there meanwhile.
        let p = unsafe {
            libc::mmap(
                want as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        assert_eq!(p as usize, want, "the hole was taken meanwhile");
    }
}

fn preferred_loc(value: u32) -> kfd_abi::kfd::SvmAttribute {
    kfd_abi::kfd::SvmAttribute {
        ty: kfd_sys::KFD_IOCTL_SVM_ATTR_PREFERRED_LOC,
        value,
    }
}

/// A userptr BO at `addr` (`pages` pages) on the first GPU: its errno, or freed again.
fn userptr_at(c: &Client, addr: usize, pages: usize) -> Result<(), Errno> {
    // SAFETY: the memory is the caller's mapping, which outlives the BO (freed at once).
    let bo = unsafe {
        c.kfd.alloc_userptr(
            addr as u64,
            (pages * PAGE) as u64,
            c.gpus[0],
            AllocFlags::WRITABLE,
            addr as u64,
        )
    }
    .map_err(|e| e.errno().expect("an errno"))?;
    c.kfd.free_memory(bo.handle).expect("FREE_MEMORY_OF_GPU");
    Ok(())
}

/// ROCr registers a locked host buffer as an SVM range; the program frees it, and libhsakmt
/// then allocates host memory as a userptr BO at a fresh mapping, often at the same address. The
/// module's MMU notifier tells the daemon of the munmap, which drops the range as amdkfd does.
#[test]
fn an_unmapped_svm_range_frees_its_address_for_a_userptr_bo() {
    bridge_test!();
    let mut d = Daemon::start();
    let c = client();
    let g1 = c.gpus[1].get();
    let m = anon(4);
    c.kfd
        .svm_set_attr(m.addr as u64, (4 * PAGE) as u64, &[preferred_loc(g1)])
        .expect("SVM SET_ATTR");
    assert_eq!(
        userptr_at(&c, m.addr, 4),
        Err(Errno::EADDRINUSE),
        "a live range refuses a BO"
    );
    // The middle goes: the ends keep their attributes, the middle is no range any more.
    m.unmap_part(PAGE, 2 * PAGE);
    m.remap_part(PAGE, 2 * PAGE);
    let location = |at: usize, len: usize| {
        let mut a = [preferred_loc(0)];
        c.kfd
            .svm_get_attr((m.addr + at) as u64, len as u64, &mut a)
            .expect("SVM GET_ATTR");
        a[0].value
    };
    assert_eq!(location(0, PAGE), g1);
    assert_eq!(location(3 * PAGE, PAGE), g1);
    assert_eq!(
        location(PAGE, 2 * PAGE),
        kfd_sys::KFD_IOCTL_SVM_LOCATION_UNDEFINED
    );
    assert_eq!(userptr_at(&c, m.addr + PAGE, 2), Ok(()));
    // All of it, mapped again at once.
    m.unmap_part(0, 4 * PAGE);
    m.remap_part(0, 4 * PAGE);
    assert_eq!(userptr_at(&c, m.addr, 4), Ok(()));
    drop(m);
    drop(c);
    assert!(d.alive());
    drop(d);
}

/// More unmaps between two calls than the module keeps: the daemon is told some were lost and
/// cuts the ranges to the process's mappings, so the holes are free all the same.
#[test]
fn unmaps_beyond_the_modules_queue_fall_back_to_the_mappings() {
    bridge_test!();
    let mut d = Daemon::start();
    let c = client();
    // 300 separate holes (every other page): more than the module keeps (240).
    let holes = 300;
    let m = anon(2 * holes + 1);
    c.kfd
        .svm_set_attr(
            m.addr as u64,
            m.len as u64,
            &[preferred_loc(c.gpus[1].get())],
        )
        .expect("SVM SET_ATTR");
    for i in 0..holes {
        m.unmap_part((2 * i + 1) * PAGE, PAGE);
    }
    // A call of the process: the daemon applies what it was told, and the fallback.
    let mut a = [preferred_loc(0)];
    c.kfd
        .svm_get_attr(m.addr as u64, PAGE as u64, &mut a)
        .expect("SVM GET_ATTR");
    // The last hole was not among the recorded ones.
    let last = (2 * holes - 1) * PAGE;
    m.remap_part(last, PAGE);
    assert_eq!(userptr_at(&c, m.addr + last, 1), Ok(()));
    assert_eq!(
        userptr_at(&c, m.addr + last + PAGE, 1),
        Err(Errno::EADDRINUSE),
        "the page after it is still a range"
    );
    drop(m);
    drop(c);
    assert!(d.alive());
    drop(d);
}

#[test]
fn fds_arrive_in_a_process_of_another_pid_namespace() {
    bridge_test!();
    if Command::new("unshare").arg("--version").output().is_err() {
        eprintln!("SKIPPED: no unshare(1)");
        return;
    }
    let d = Daemon::start();
    // The helper is pid 1 of a new pid namespace, where the daemon's pid does not exist: the
    // pidfd_getfd hand-over of plain CUSE fails there (ESRCH), the module's does not.
    let mut child = Command::new("unshare")
        .args(["--pid", "--fork", "--kill-child"])
        .arg(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "helper_process_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_ENV, "own-checkpoint")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("unshare");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    assert_eq!(read_helper_line(&mut out), "ok pid=1");
    drop(child.stdin.take());
    assert!(child.wait().expect("wait").success());
    drop(d);
}

#[test]
fn mappings_outlive_the_daemon_and_the_module_stays_sane() {
    bridge_test!();
    let mut d = Daemon::start();
    let (mut child, mut out) = spawn_helper("hold-mappings", &[]);
    assert_eq!(read_helper_line(&mut out), "mapped");
    // The daemon goes away under live mappings and open files.
    d.stop();
    let stdin = child.stdin.as_mut().expect("stdin");
    writeln!(stdin, "go").expect("tell the helper");
    assert_eq!(read_helper_line(&mut out), "still mapped");
    drop(child.stdin.take());
    assert!(child.wait().expect("wait").success());
    // A new daemon serves again (same names and numbers).
    drop(d);
    let d = Daemon::start();
    let c = client();
    let m = c.mapped_gtt(PAGE);
    m.write(0, b"new!");
    // A process that exits with its mappings in place.
    let (mut child, mut out) = spawn_helper("exit-mapped", &[]);
    assert_eq!(read_helper_line(&mut out), "exiting");
    assert!(child.wait().expect("wait").success());
    drop(m);
    drop(c);
    drop(d);
}

fn spawn_helper(role: &str, args: &[&str]) -> (Child, BufReader<ChildStdout>) {
    served::spawn_helper(&[(HELPER_ENV, role), (HELPER_ARG_ENV, &args.join(" "))])
}

/// Not a test of its own: the entry point of the helper processes the tests above start
/// (`KFD_BRIDGE_HELPER=<role>`); without that variable it does nothing.
#[test]
fn helper_process_entry() {
    let Ok(role) = std::env::var(HELPER_ENV) else {
        return;
    };
    let arg = std::env::var(HELPER_ARG_ENV).unwrap_or_default();
    match role.as_str() {
        "restore" => helper_restore(Path::new(&arg)),
        "restore-fails" => helper_restore_fails(Path::new(&arg)),
        "own-checkpoint" => {
            let c = client();
            let m = c.mapped_gtt(PAGE);
            m.write(0, b"nsOK");
            let info = c.kfd.criu_process_info().expect("PROCESS_INFO");
            let ck = c
                .kfd
                .criu_checkpoint(&info)
                .expect("CHECKPOINT in a pid namespace");
            let buf = ck.bos[0].dmabuf.as_ref().expect("dma-buf");
            let mut x = [0u8; 4];
            File::from(buf.try_clone().expect("dup"))
                .read_exact_at(&mut x, 0)
                .expect("read");
            assert_eq!(&x, b"nsOK");
            drop(ck);
            c.kfd.criu_unpause().expect("UNPAUSE");
            let smi = c
                .kfd
                .smi_events(c.gpus[1])
                .expect("SMI_EVENTS in a pid namespace");
            drop(smi);
            say(&format!("ok pid={}", std::process::id()));
        }
        "hold-mappings" => {
            let c = client();
            let m = c.mapped_gtt(2 * PAGE);
            m.write(PAGE, b"kept");
            let db = c.doorbells(0).expect("doorbells");
            db.write(0, b"ring");
            say("mapped");
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).expect("stdin");
            // The daemon is gone: the pages are still ours; the files answer errors.
            assert_eq!(m.read(PAGE, 4), b"kept");
            assert_eq!(db.read(0, 4), b"ring");
            m.write(0, b"late");
            assert!(c.kfd.get_version().is_err(), "a dead daemon answered");
            let line = maps_line(m.addr).expect("still in maps");
            assert!(line.contains("/dev/dri/renderD128"), "{line}");
            // A partial munmap after the daemon is gone.
            m.unmap_part(0, PAGE);
            say("still mapped");
            let mut rest = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut rest);
        }
        "hold-for-criu" => {
            // What the VM lane's scenario has criu dump: a GTT BO mapped through its render
            // node and the doorbell page, held until criu kills us.
            let c = client();
            let m = c.mapped_gtt(2 * PAGE);
            m.write(0, b"dump");
            let db = c.doorbells(0).expect("doorbells");
            say("mapped");
            loop {
                std::thread::sleep(Duration::from_secs(1));
                let _ = (m.read(0, 1), db.read(0, 1));
            }
        }
        "exit-mapped" => {
            let c = client();
            let m = c.mapped_gtt(PAGE);
            m.write(0, b"bye!");
            let _ = c.doorbells(0).map(Mapping::leak);
            m.leak();
            say("exiting");
            std::mem::forget(c);
        }
        other => panic!("unknown helper role {other}"),
    }
    std::process::exit(0);
}

/// A checkpoint as the test saved it for a helper: its BOs, (user, actual) gpu ids, object
/// count and private data.
struct SavedCheckpoint {
    bos: Vec<RestoreBo>,
    devs: Vec<(u32, u32)>,
    objects: u32,
    priv_data: Vec<u8>,
}

fn read_checkpoint(dir: &Path) -> SavedCheckpoint {
    let image = std::fs::read_to_string(dir.join("image")).expect("image");
    let priv_data = std::fs::read(dir.join("priv")).expect("priv");
    let num = |s: &str| s.parse::<u64>().expect("number");
    let mut bos = Vec::new();
    let mut devs = Vec::new();
    let mut objects = 0;
    for l in image.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        match w[0] {
            "bo" => bos.push(RestoreBo {
                addr: num(w[1]),
                size: num(w[2]),
                offset: num(w[3]),
                gpu_id: u32::try_from(num(w[4])).expect("gpu"),
                alloc_flags: AllocFlags::from_bits_retain(u32::try_from(num(w[5])).expect("flags")),
            }),
            "dev" => devs.push((
                u32::try_from(num(w[1])).expect("id"),
                u32::try_from(num(w[2])).expect("id"),
            )),
            "objects" => objects = u32::try_from(num(w[1])).expect("objects"),
            _ => panic!("bad image line {l}"),
        }
    }
    SavedCheckpoint {
        bos,
        devs,
        objects,
        priv_data,
    }
}

/// This process's open fds.
fn own_fds() -> Vec<String> {
    let mut fds: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    fds.sort();
    fds
}

/// A RESTORE of the checkpoint in `dir` with bytes left over after its last record: it fails
/// (EINVAL) after the driver has made every dma-buf, and this process gets none of them, neither
/// with the failed call nor with its next one.
fn helper_restore_fails(dir: &Path) {
    let SavedCheckpoint {
        bos,
        devs,
        objects,
        mut priv_data,
    } = read_checkpoint(dir);
    priv_data.extend_from_slice(&[0; 8]);
    let kfd = Kfd::open(Path::new("/dev/kfd")).expect("open /dev/kfd");
    let renders = open_renders(&devs);
    let devices = restore_devices(&devs, &renders);
    // (Each listing also holds its own directory fd, at the lowest free number: the same one
    // each time unless the call installed something.)
    let before = own_fds();
    let err = kfd
        .criu_restore(&devices, &bos, &priv_data, objects)
        .expect_err("a RESTORE with bytes left over");
    assert_eq!(err.errno(), Some(Errno::EINVAL), "{err}");
    assert_eq!(own_fds(), before, "a failed RESTORE installed fds");
    kfd.get_version().expect("GET_VERSION");
    assert_eq!(own_fds(), before, "fds of the failed RESTORE arrived later");
    say("failed, no fd installed");
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
}

/// The render node of each restored device's actual GPU.
fn open_renders(devs: &[(u32, u32)]) -> Vec<RenderNode> {
    devs.iter()
        .map(|(_, actual)| {
            let minor = preset_gpus()
                .iter()
                .find(|(g, _)| g.get() == *actual)
                .map(|(_, m)| *m)
                .expect("the GPU");
            RenderNode::open(&render_path(minor)).expect("render")
        })
        .collect()
}

fn restore_devices<'a>(devs: &[(u32, u32)], renders: &'a [RenderNode]) -> Vec<RestoreDevice<'a>> {
    devs.iter()
        .zip(renders)
        .map(|((user, actual), r)| RestoreDevice {
            user_gpu_id: GpuId::new(*user).expect("id"),
            actual_gpu_id: GpuId::new(*actual).expect("id"),
            drm: r.transport().as_fd(),
        })
        .collect()
}

/// Restores the checkpoint saved in `dir` into this fresh process (as the plugin does in a
/// restored task): RESTORE, then fills the BOs through the installed dma-bufs and reads them back
/// through a render-node mapping at the restored offset.
fn helper_restore(dir: &Path) {
    let SavedCheckpoint {
        bos,
        devs,
        objects,
        priv_data,
    } = read_checkpoint(dir);
    let kfd = Kfd::open(Path::new("/dev/kfd")).expect("open /dev/kfd");
    let renders = open_renders(&devs);
    let devices = restore_devices(&devs, &renders);
    let restored = kfd
        .criu_restore(&devices, &bos, &priv_data, objects)
        .expect("RESTORE");
    for (bo, r) in bos.iter().zip(&restored) {
        let buf = r
            .dmabuf
            .as_ref()
            .expect("a RESTORE dma-buf, installed in this process");
        let f = File::from(buf.try_clone().expect("dup"));
        assert_eq!(f.metadata().expect("fstat").len(), bo.size);
        f.write_all_at(b"RST!", 0).expect("fill the BO");
        // The VMA fix-up: map the restored BO through its GPU's render node at its new offset.
        let i = devs
            .iter()
            .position(|(user, _)| *user == bo.gpu_id)
            .expect("its device");
        let len = usize::try_from(bo.size).expect("size");
        let m = map_shared(renders[i].transport().as_fd(), r.restored_offset, len)
            .expect("map the restored BO");
        assert_eq!(m.read(0, 4), b"RST!");
    }
    let _ = FdTransport::from_fd;
    say("restored");
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
}
