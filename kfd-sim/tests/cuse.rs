//! The simulator served over CUSE (`kfd-simd serve`), driven through real device nodes with
//! kfd-abi's `FdTransport`, exactly as the plugin drives hardware.
//!
//! These tests need `/dev/cuse` and root. Where either is missing (the development machines have
//! no CUSE) each test prints why it is skipped and passes; the VM lane runs them for real
//! (`ci/vm-lane --scenario cuse-kfd`). Each test starts its own daemon; a lock file serialises
//! them (they all register `/dev/kfd`), across the processes of nextest too.
//!
//! Roles played by other processes (a process whose GPU state is checkpointed, a client killed
//! in the middle of a call) are this same binary, started again with `KFD_CUSE_HELPER=<role>`
//! running only [`helper_process_entry`].

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::thread::JoinHandleExt;
use std::path::Path;
use std::process::{Child, ChildStdout};
use std::time::{Duration, Instant};

use kfd_abi::{AllocFlags, Errno, FdTransport, IoctlError, Kfd, RenderNode};

mod served;

use served::{client, preset_gpus, read_helper_line, render_path, say, Daemon};

const VA: u64 = 0x7f00_0000_0000;
const MIB: u64 = 1 << 20;
const HELPER_ENV: &str = "KFD_CUSE_HELPER";

/// Why the CUSE tests cannot run here, if they cannot.
fn skip_reason() -> Option<String> {
    served::cannot_serve(
        "/dev/cuse does not exist (this kernel has no CUSE); the VM lane runs these tests \
         (ci/vm-lane --scenario cuse-kfd)",
    )
}

macro_rules! cuse_test {
    () => {
        served::skip_if!(skip_reason())
    };
}

impl Daemon {
    fn start() -> Daemon {
        Daemon::serve("kfd-sim-cuse")
    }
}

fn errno(e: &IoctlError) -> Option<Errno> {
    e.errno()
}

#[test]
fn kfd_and_render_nodes_are_served_like_hardware() {
    cuse_test!();
    let d = Daemon::start();
    let gpus = d.gpus();
    assert_eq!(gpus.len(), 2);
    for (_, minor) in &gpus {
        let m = std::fs::metadata(render_path(*minor)).expect("render node");
        assert_eq!(
            (libc::major(m.rdev()), libc::minor(m.rdev())),
            (226, *minor),
            "render nodes have the real DRM numbers"
        );
    }
    let c = client(&gpus);
    assert!(c.kfd.transport().is_cuse_served());
    assert!(c.renders[0].transport().is_cuse_served());
    let v = c.kfd.get_version().expect("GET_VERSION");
    assert_eq!(v.major, 1);
    assert!(v.minor >= 11);
    // ACQUIRE_VM again with the same render file is fine, with the other GPU's file is not,
    // and with a file that is not a render node at all neither.
    c.kfd
        .acquire_vm(c.gpus[0], c.renders[0].transport().as_fd())
        .expect("same file again");
    let other = RenderNode::open(&render_path(gpus[1].1)).expect("open");
    let e = c
        .kfd
        .acquire_vm(c.gpus[0], other.transport().as_fd())
        .unwrap_err();
    assert!(
        matches!(errno(&e), Some(Errno::EBUSY | Errno::EINVAL)),
        "{e}"
    );
    // The driver looks at the GPU's VM before the file: taken already, so EBUSY even for a file
    // that is not a render node.
    let null = File::open("/dev/null").expect("/dev/null");
    let e = c.kfd.acquire_vm(c.gpus[1], null.as_fd()).unwrap_err();
    assert_eq!(errno(&e), Some(Errno::EBUSY), "{e}");
    // Memory.
    let vram = AllocFlags::VRAM | AllocFlags::WRITABLE;
    let a = c
        .kfd
        .alloc_memory(VA, 4 * MIB, c.gpus[0], vram)
        .expect("ALLOC VRAM");
    assert_eq!(c.kfd.map_memory_to_gpu(a.handle, &c.gpus).expect("MAP"), 2);
    let g = c
        .kfd
        .alloc_memory(VA + 16 * MIB, MIB, c.gpus[1], AllocFlags::GTT)
        .expect("ALLOC GTT");
    c.kfd.free_memory(g.handle).expect("FREE");
    // An fd the driver installs (the SMI event fd) arrives through pidfd_getfd, and the daemon
    // keeps no copy of it, only its own end of the event channel (where the driver keeps the
    // client's kfifo), until the next open finds the caller's end closed and drops it.
    let before = d.open_fds();
    let smi = c.kfd.smi_events(c.gpus[0]).expect("SMI_EVENTS");
    assert!(File::from(smi).metadata().is_ok());
    assert_eq!(d.open_fds(), before + 1, "the daemon closed its copy");
    let again = c.kfd.smi_events(c.gpus[0]).expect("SMI_EVENTS again");
    assert_eq!(
        d.open_fds(),
        before + 1,
        "the end of the closed SMI fd is dropped at the next open"
    );
    drop(again);
}

fn spawn_helper(role: &str) -> (Child, BufReader<ChildStdout>) {
    served::spawn_helper(&[(HELPER_ENV, role)])
}

#[test]
fn checkpoint_of_another_process_hands_over_dmabufs() {
    cuse_test!();
    let d = Daemon::start();
    let (mut child, mut out) = spawn_helper("hold");
    let line = read_helper_line(&mut out);
    let kfd_fd: i32 = line.parse().expect("kfd fd number");
    let child_pid = child.id();
    // criu's view: the target's /dev/kfd file, fetched from its fd table.
    let pidfd = kfd_abi::cuse::pidfd_open(child_pid).expect("pidfd_open");
    let fd = kfd_abi::cuse::pidfd_getfd(pidfd.as_fd(), kfd_fd).expect("pidfd_getfd");
    let k = Kfd::new(FdTransport::from_fd(fd), "/dev/kfd (of the target)");
    assert!(k.transport().is_cuse_served());
    // Not the opener and not its tracer: the driver's caller check.
    assert_eq!(errno(&k.get_version().unwrap_err()), Some(Errno::EBADF));
    assert_eq!(
        errno(&k.criu_process_info().unwrap_err()),
        Some(Errno::EBADF)
    );
    // As criu: seize the target (it keeps running), then dump.
    let pid = libc::pid_t::try_from(child_pid).expect("pid");
    // SAFETY: PTRACE_SEIZE of our own child, no data pointers.
    let r = unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, 0usize, 0usize) };
    assert_eq!(r, 0, "PTRACE_SEIZE: {}", std::io::Error::last_os_error());
    assert_eq!(errno(&k.get_version().unwrap_err()), Some(Errno::EBADF));
    let info = k.criu_process_info().expect("PROCESS_INFO");
    assert_eq!(info.pid, child_pid);
    assert_eq!(info.num_devices, 2);
    assert_eq!(info.num_bos, 2);
    let ck = k.criu_checkpoint(&info).expect("CHECKPOINT");
    let mut seen = 0;
    for bo in &ck.bos {
        let buf = bo
            .dmabuf
            .as_ref()
            .expect("VRAM/GTT BOs come with a dma-buf");
        // As the driver installs them: not close-on-exec (pidfd_getfd's copy is fixed up).
        // SAFETY: F_GETFD on an fd borrowed for the call.
        let fd_flags = unsafe { libc::fcntl(buf.as_raw_fd(), libc::F_GETFD) };
        assert_eq!(
            fd_flags & libc::FD_CLOEXEC,
            0,
            "dma-buf fd is close-on-exec"
        );
        let f = File::from(buf.try_clone().expect("dup"));
        assert_eq!(f.metadata().expect("fstat").len(), bo.size);
        // The helper wrote its pattern through the dma-bufs of its own checkpoint.
        let mut b = [0u8; 4];
        f.read_exact_at(&mut b, 0).expect("read the dma-buf");
        assert_eq!(&b, b"GPU!", "contents of BO at {:#x}", bo.addr);
        seen += 1;
    }
    assert_eq!(seen, 2);
    drop(ck);
    k.criu_unpause().expect("UNPAUSE");
    // Dump again: the daemon keeps no copy of the dma-bufs it handed over (its fd count is
    // that of after the first dump, which opened a pidfd of this new caller).
    let fds = d.open_fds();
    let info = k.criu_process_info().expect("PROCESS_INFO again");
    let ck = k.criu_checkpoint(&info).expect("CHECKPOINT again");
    assert_eq!(ck.bos.iter().filter(|b| b.dmabuf.is_some()).count(), 2);
    assert_eq!(
        d.open_fds(),
        fds,
        "the daemon closed its copies of the dma-bufs"
    );
    drop(ck);
    k.criu_unpause().expect("UNPAUSE again");
    drop(child.stdin.take());
    let _ = child.kill();
    let _ = child.wait();
    drop(d);
}

#[test]
fn garbage_and_killed_clients_do_not_take_the_daemon_down() {
    cuse_test!();
    let mut d = Daemon::start();
    let gpus = d.gpus();
    {
        let kfd = File::options()
            .read(true)
            .write(true)
            .open("/dev/kfd")
            .expect("open");
        let render = File::options()
            .read(true)
            .write(true)
            .open(render_path(gpus[0].1))
            .expect("open");
        // Every request number of KFD's type with wild pointers, and random ones.
        let mut x: u32 = 0x1234_5678;
        for i in 0..600u32 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let cmd = if i < 256 {
                (x & 0xc000_0000) | ((x & 0x3fff) << 16) | 0x4b00 | i
            } else {
                x
            };
            let arg = [0usize, 8, 0xdead_0000_0000, usize::MAX - 7][(i % 4) as usize];
            for f in [&kfd, &render] {
                // SAFETY: the argument is never a valid pointer of ours; the daemon reads and
                // writes it through process_vm_*, which fails cleanly (EFAULT). The requests
                // are answered by the simulator, whose effects stay in the simulator.
                unsafe { libc::ioctl(f.as_raw_fd(), libc::c_ulong::from(cmd), arg) };
            }
        }
        let mut junk = [0u8; 16];
        assert!((&kfd).read(&mut junk).is_err());
        assert!((&kfd).write(b"junk").is_err());
    }
    assert!(d.alive(), "kfd-simd died on garbage");
    // A client killed while the daemon is in its call (WAIT_EVENTS with a timeout).
    for _ in 0..2 {
        let (mut child, mut out) = spawn_helper("wait");
        assert_eq!(read_helper_line(&mut out), "waiting");
        std::thread::sleep(Duration::from_millis(300));
        child.kill().expect("kill");
        let _ = child.wait();
    }
    // A client killed in a storm of calls.
    let (mut child, mut out) = spawn_helper("storm");
    assert_eq!(read_helper_line(&mut out), "storming");
    std::thread::sleep(Duration::from_millis(200));
    child.kill().expect("kill");
    let _ = child.wait();
    assert!(d.alive(), "kfd-simd died with its clients");
    let c = client(&gpus);
    c.kfd.get_version().expect("still serving");
    drop(c);
    drop(d);
}

/// How many times SIGUSR1's handler ran.
static SIGUSR1_SEEN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

extern "C" fn on_sigusr1(_: libc::c_int) {
    SIGUSR1_SEEN.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

#[test]
fn a_signal_ends_a_wait_for_events_as_on_the_driver_and_the_wait_is_restarted() {
    cuse_test!();
    let d = Daemon::start();
    let kfd = Kfd::open(Path::new("/dev/kfd")).expect("open /dev/kfd");
    let ev = kfd
        .create_event(kfd_abi::EventType::Signal, true, None)
        .expect("CREATE_EVENT")
        .event_id;
    // A handler without SA_RESTART: the interrupted call returns EINTR (the driver's
    // -ERESTARTSYS; over FUSE, EINTR), which is what criu's freeze of a waiting ROCm process
    // needs: a thread blocked in the call runs no handler until the call returns, so every run
    // of the handler while the waiter waits is the daemon answering an interrupt. The transport
    // then issues the wait again (as libhsakmt's kmtIoctl does), so the waiter still gets its
    // event.
    // SAFETY: a zeroed sigaction with a handler that only counts, installed for SIGUSR1 only.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigusr1 as extern "C" fn(libc::c_int) as usize;
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
    }
    let waiter = {
        let kfd = kfd.try_clone().expect("dup /dev/kfd");
        std::thread::spawn(move || kfd.wait_events(&[ev], true, kfd_abi::kfd::WAIT_INFINITE))
    };
    // Signal the waiting thread until its handler ran three times (the first signals may come
    // before the call).
    let start = Instant::now();
    while SIGUSR1_SEEN.load(std::sync::atomic::Ordering::SeqCst) < 3 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "WAIT_EVENTS did not end on a signal"
        );
        assert!(!waiter.is_finished(), "the wait ended without its event");
        std::thread::sleep(Duration::from_millis(50));
        // SAFETY: the thread has not been joined, so its pthread_t is valid.
        unsafe { libc::pthread_kill(waiter.as_pthread_t(), libc::SIGUSR1) };
    }
    std::thread::sleep(Duration::from_millis(100));
    assert!(!waiter.is_finished(), "the wait ended without its event");
    kfd.set_event(ev).expect("the event still exists");
    let r = waiter.join().expect("waiter");
    assert!(r.is_ok(), "the restarted wait: {r:?}");
    drop(kfd);
    drop(d);
}

/// Not a test of its own: the entry point of the helper processes the tests above start
/// (`KFD_CUSE_HELPER=<role>`); without that variable it does nothing.
#[test]
fn helper_process_entry() {
    let Ok(role) = std::env::var(HELPER_ENV) else {
        return;
    };
    let gpus = preset_gpus();
    match role.as_str() {
        "hold" => {
            let c = client(&gpus);
            let vram = AllocFlags::VRAM | AllocFlags::WRITABLE;
            let a = c
                .kfd
                .alloc_memory(VA, 2 * MIB, c.gpus[0], vram)
                .expect("VRAM");
            let b = c
                .kfd
                .alloc_memory(
                    VA + 16 * MIB,
                    MIB,
                    c.gpus[1],
                    AllocFlags::GTT | AllocFlags::WRITABLE,
                )
                .expect("GTT");
            let _ = (a, b);
            fill_pattern(&c.kfd);
            say(&c.kfd.transport().as_fd().as_raw_fd().to_string());
            // Hold everything until the test closes our stdin.
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
        }
        "wait" => {
            let c = client(&gpus);
            let ev = c
                .kfd
                .create_event(kfd_abi::EventType::Signal, false, None)
                .expect("CREATE_EVENT");
            say("waiting");
            let _ = c.kfd.wait_events(&[ev.event_id], false, 3000);
        }
        "storm" => {
            let c = client(&gpus);
            say("storming");
            loop {
                let _ = c.kfd.get_version();
                let _ = c.kfd.alloc_memory(VA, MIB, c.gpus[0], AllocFlags::GTT);
                let _ = c.kfd.get_process_apertures_new();
            }
        }
        other => panic!("unknown helper role {other}"),
    }
    std::process::exit(0);
}

/// Writes `GPU!` at the start of every VRAM/GTT BO of the process, through the dma-bufs of a
/// checkpoint of itself (the owner may: it passes the caller check, and runs as root), which also
/// shows the dma-buf hand-over to the process that owns the device file.
fn fill_pattern(kfd: &Kfd) {
    let info = kfd.criu_process_info().expect("own PROCESS_INFO");
    let ck = kfd.criu_checkpoint(&info).expect("own CHECKPOINT");
    for bo in &ck.bos {
        if let Some(fd) = &bo.dmabuf {
            File::from(fd.try_clone().expect("dup"))
                .write_all_at(b"GPU!", 0)
                .expect("write through the dma-buf");
        }
    }
    kfd.criu_unpause().expect("own UNPAUSE");
}
