//! `kfd-workload`: the model ROCm process, on whatever `/dev/kfd` this machine has — the
//! simulator served over CUSE, or real hardware.
//!
//! It opens `/dev/kfd` and every GPU's render node (paths and topology root from the
//! `AMDGPU_CR_*` environment variables, as the plugin finds them), builds the workload of
//! `harness::workload`, then ticks: each tick advances the generation counter on every GPU by
//! SDMA and prints `tick <generation>`. When the file given with `--verify-trigger` appears (a
//! test creates it after criu restored the process), it verifies every buffer, queue and event and
//! prints one line, `VERIFY OK ...` or `VERIFY FAIL <what differed>`, then removes the file.
//! A second thread plays a ROCm runtime's event thread: it sits in an infinite `WAIT_EVENTS` on an
//! event that every tick sets (so a checkpoint usually finds it inside that call), retrying on
//! `EINTR`; verification checks that it still wakes up (`wakeups=` in the VERIFY line).
//! It moves data through a user-mode SDMA queue per GPU rung through the mapped doorbell page
//! (`--dma queues`), or by the render node's command submission (`--dma cs`); the default
//! (`auto`) takes queues when `/dev/kfd` can be mapped (not over a plain CUSE device) and says
//! which it took in its `started` line (`dma=queues|cs`).
//! With queues it maps the events (signal) page from `/dev/kfd` too, at the page's GPU address;
//! `page_slots=` in the VERIFY line counts the slots it checked through that mapping (its
//! generation stamp and every event's slot; 0 with `--dma cs`).
//! `rebuilds=` in the VERIFY line counts the tick steps that were checkpointed mid-step and had
//! to run again on new render-node objects (`--dma cs` only; see `Workload::tick`).
//! While the file given with `--hold-trigger` exists it does not tick (it still verifies when
//! asked), and says so once with a `HOLD <generation>` line: a checkpoint taken after that line
//! holds no submission in flight, so a restore whose GPU state is known to be wrong can be
//! verified before any tick runs into it.
//! With `--share-child KIB` it shares a render-node buffer with a child process through a
//! dma-buf, as multi-process inference does (Linux 6.18 carries that across a checkpoint): it
//! creates the buffer on its first GPU's render node (VRAM the CPU can map), maps it in its VM at
//! `SHARED_VA` and for the CPU, exports it and starts a child (this program again) that imports
//! the dma-buf into a render-node file of its own at the same GEM handle number, maps it too, and
//! keeps the dma-buf fd (`--share-keep-fd`) or closes it; the parent closes its own. The two talk
//! over a socket pair. Each tick one side writes the whole buffer through its mapping and the
//! other checks it through its own (they take turns); VERIFY checks it from both sides (the
//! parent through its mapping and by SDMA at its GPU address, the child through its mapping, its
//! handle, VA and dma-buf fd) and has each side write once more for the other to read:
//! `shared=<bytes> shared_handle=<handle> shared_sides=2 child=<what it checked>`.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use harness::workload::{
    check_mapping, fill_mapping, Dma, Importer, SharedContents, SharedSide, Spec, Workload, Writer,
    SHARED_VA,
};
use kfd_abi::{
    BoHandle, Errno, EventId, EventType, FdTransport, GpuId, HostPlatform, IoctlError, Kfd,
    Mapping, Platform, WaitResult,
};

#[derive(Parser)]
#[command(
    name = "kfd-workload",
    version,
    about = "A model ROCm process for checkpoint/restore tests"
)]
struct Args {
    /// VRAM buffers per GPU, in KiB (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "4096,64")]
    vram_kib: Vec<u64>,
    /// GTT buffers per GPU, in KiB (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "256")]
    gtt_kib: Vec<u64>,
    /// Buffers per GPU allocated through the render node (GEM_CREATE in VRAM, mapped with
    /// GEM_VA), in KiB (comma-separated; default none). A checkpoint carries them on Linux 6.18.
    #[arg(long, value_delimiter = ',')]
    render_kib: Vec<u64>,
    /// AQL queues per GPU.
    #[arg(long, default_value_t = 1)]
    queues: u32,
    /// Signal events.
    #[arg(long, default_value_t = 4)]
    events: u32,
    /// Per mille of each buffer, at its end, that is never written and stays zero (a caching
    /// allocator's reserved but untouched memory): what a dump may leave as holes of its pages
    /// files.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1000))]
    untouched_permille: u32,
    /// Seed of the data pattern.
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// Time between ticks, in milliseconds.
    #[arg(long, default_value_t = 200)]
    tick_ms: u64,
    /// Verify (and print a VERIFY line) when this file exists; it is removed afterwards.
    #[arg(long)]
    verify_trigger: Option<PathBuf>,
    /// Do not tick while this file exists (print `HOLD <generation>` once when holding starts).
    #[arg(long)]
    hold_trigger: Option<PathBuf>,
    /// Verify once right after start and exit (a smoke test of the device).
    #[arg(long)]
    once: bool,
    /// Use only the GPUs with these render minors (comma-separated), as a process in a container
    /// given some of the node's GPUs; default: every GPU of the topology.
    #[arg(long, value_delimiter = ',')]
    render_minors: Vec<u32>,
    /// Stop after this many ticks (default: run until killed).
    #[arg(long)]
    ticks: Option<u64>,
    /// Fork a child once the GPU state is built: it inherits `/dev/kfd` and the render nodes (the
    /// same open files) and sleeps, like a worker forked by a ROCm process, and dies with it.
    #[arg(long)]
    fork_child: bool,
    /// Open the render nodes before `/dev/kfd` (so their fds come first, and criu restores them
    /// first), as a process that used libdrm before the ROCm runtime does.
    #[arg(long)]
    render_first: bool,
    /// How data moves: user-mode SDMA queues rung through the mapped doorbell page (as ROCr),
    /// the render node's command submission (for devices that cannot be mapped), or `auto`.
    #[arg(long, value_enum, default_value_t = DmaArg::Auto)]
    dma: DmaArg,
    /// Share a render-node buffer of this many KiB with a child process through a dma-buf: the
    /// child imports it into a render-node file of its own; each tick one writes it and the
    /// other checks it. A checkpoint carries it on Linux 6.18.
    #[arg(long)]
    share_child: Option<u64>,
    /// With `--share-child`: the child keeps the dma-buf fd after importing it (by default it
    /// closes it and holds the buffer through its GEM handle only). On kfd-simd a dma-buf is a
    /// memfd of the simulator, which criu checkpoints as a memfd without asking a plugin: the
    /// restored fd is a copy of the bytes, and VERIFY says the child's fd is no longer its
    /// buffer.
    #[arg(long)]
    share_keep_fd: bool,
    /// The child of `--share-child` (started by the workload itself):
    /// `SOCKET_FD,DMABUF_FD,RENDER_MINOR,GEM_HANDLE,BYTES`.
    #[arg(long, hide = true)]
    share_importer: Option<String>,
}

/// `--dma`: the workload's [`Dma`] as a command-line value.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum DmaArg {
    /// User-mode queues if `/dev/kfd` can be mapped (the doorbell page), else command submission.
    Auto,
    /// KFD user-mode SDMA queues rung through the mapped doorbell page, as ROCr moves data.
    Queues,
    /// The render node's command submission, for devices that cannot be mapped.
    Cs,
}

impl From<DmaArg> for Dma {
    fn from(arg: DmaArg) -> Self {
        match arg {
            DmaArg::Auto => Dma::Auto,
            DmaArg::Queues => Dma::Queues,
            DmaArg::Cs => Dma::Cs,
        }
    }
}

/// Forks the idle child of `--fork-child`; returns its pid. Called while this process has one
/// thread, so the child may do anything; it only sleeps.
fn fork_idle_child() -> std::io::Result<libc::pid_t> {
    // SAFETY: the process is single-threaded here (the event thread starts later), and the child
    // runs only async-signal-safe calls (prctl, getppid, pause) before it is killed.
    match unsafe { libc::fork() } {
        -1 => Err(std::io::Error::last_os_error()),
        0 => {
            // SAFETY: prctl/getppid/pause/_exit take no pointers.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() == 1 {
                    libc::_exit(0);
                }
                loop {
                    libc::pause();
                }
            }
        }
        pid => Ok(pid),
    }
}

/// How long one side of a shared buffer waits for the other's answer.
const SHARE_TIMEOUT: Duration = Duration::from_secs(60);

/// The exporting side of `--share-child`: the buffer on the first GPU's render node of the
/// workload, its CPU mapping, the socket to the child, and the last round written.
struct ShareParent {
    side: SharedSide,
    map: Mapping,
    size: usize,
    seed: u64,
    round: u64,
    sock: BufReader<UnixStream>,
}

/// `fd` kept open across exec.
fn inheritable(fd: BorrowedFd<'_>) -> Result<(), String> {
    // SAFETY: fcntl on an fd this process owns, with integer arguments only.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, 0) };
    if r < 0 {
        return Err(format!("fcntl: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

impl ShareParent {
    fn start(w: &Workload<FdTransport>, minor: u32, args: &Args, kib: u64) -> Result<Self, String> {
        let render = w
            .renders()
            .first()
            .ok_or("no render node to share a buffer on")?;
        let bytes = kib << 10;
        let size = usize::try_from(bytes).map_err(|_| "--share-child: too large")?;
        let (side, dmabuf) =
            SharedSide::create(render, bytes, SHARED_VA).map_err(|e| e.to_string())?;
        let map = side.cpu_map(render).map_err(|e| e.to_string())?;
        fill_mapping(&map, size, SharedContents::of_round(args.seed, 1))
            .map_err(|e| e.to_string())?;
        let (ours, theirs) = UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
        inheritable(theirs.as_fd())?;
        inheritable(dmabuf.as_fd())?;
        let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
        let mut cmd = std::process::Command::new(exe);
        cmd.arg("--share-importer")
            .arg(format!(
                "{},{},{minor},{},{bytes}",
                theirs.as_raw_fd(),
                dmabuf.as_raw_fd(),
                side.handle().get()
            ))
            .arg("--seed")
            .arg(args.seed.to_string());
        if args.share_keep_fd {
            cmd.arg("--share-keep-fd");
        }
        // The child dies with this process (its parent-death signal) and says its pid itself.
        cmd.spawn()
            .map_err(|e| format!("starting the child: {e}"))?;
        // The exporter holds the buffer through its handle and mapping only.
        drop(theirs);
        drop(dmabuf);
        ours.set_read_timeout(Some(SHARE_TIMEOUT))
            .map_err(|e| e.to_string())?;
        let mut p = Self {
            side,
            map,
            size,
            seed: args.seed,
            round: 1,
            sock: BufReader::new(ours),
        };
        let ready = p.read_line()?;
        if !ready.starts_with("ready ") {
            return Err(format!("the share child: {ready}"));
        }
        p.ask("check 1 e")?;
        println!(
            "share child {} handle={} bytes={bytes} keep_fd={}",
            &ready["ready ".len()..],
            p.side.handle().get(),
            args.share_keep_fd,
        );
        Ok(p)
    }

    fn read_line(&mut self) -> Result<String, String> {
        let mut line = String::new();
        match self.sock.read_line(&mut line) {
            Ok(0) => Err("the share child is gone (its socket closed)".into()),
            Ok(_) => Ok(line.trim_end().to_owned()),
            Err(e) => Err(format!("no answer from the share child: {e}")),
        }
    }

    /// Sends `command` to the child; its answer after `ok`.
    fn ask(&mut self, command: &str) -> Result<String, String> {
        writeln!(self.sock.get_mut(), "{command}")
            .map_err(|e| format!("telling the share child {command:?}: {e}"))?;
        let answer = self.read_line()?;
        match answer.strip_prefix("ok") {
            Some(rest) => Ok(rest.trim().to_owned()),
            None => Err(format!("the share child, asked {command:?}: {answer}")),
        }
    }

    /// One more round: one side writes, the other checks.
    fn exchange(&mut self) -> Result<(), String> {
        let round = self.round + 1;
        let contents = SharedContents::of_round(self.seed, round);
        match contents.writer {
            Writer::Exporter => {
                fill_mapping(&self.map, self.size, contents).map_err(|e| e.to_string())?;
                self.round = round;
                self.ask(&format!("check {round} e"))?;
            }
            Writer::Importer => {
                self.ask(&format!("write {round}"))?;
                self.round = round;
                check_mapping(&self.map, self.size, contents)
                    .map_err(|e| format!("the parent's side: {e}"))?;
            }
        }
        Ok(())
    }

    /// Checks the buffer from both sides as the last round left it, then has each side write
    /// once for the other. Returns the VERIFY line's part.
    fn verify(&mut self, w: &Workload<FdTransport>) -> Result<String, String> {
        let contents = SharedContents::of_round(self.seed, self.round);
        let SharedContents { round, writer, .. } = contents;
        check_mapping(&self.map, self.size, contents)
            .map_err(|e| format!("the parent's side: {e}"))?;
        // What the GPU sees at the buffer's address in the parent's VM, a page in the middle.
        let page = 4096.min(self.size);
        let at = (self.size / 2) & !(page - 1);
        let by_gpu = w
            .read_gpu(0, SHARED_VA + at as u64, page)
            .map_err(|e| format!("the parent's side, by SDMA: {e}"))?;
        let mut want = vec![0u8; page];
        contents.bytes_at(at as u64, &mut want);
        if by_gpu != want {
            return Err(format!(
                "the parent's side: SDMA reads other bytes at {:#x} than round {round} put                  there",
                SHARED_VA + at as u64
            ));
        }
        let child = self.ask(&format!("verify {round} {}", writer.letter()))?;
        self.exchange()?;
        self.exchange()?;
        Ok(format!(
            " shared={} shared_handle={} shared_sides=2 child={}",
            self.size,
            self.side.handle().get(),
            child.replace(' ', ",")
        ))
    }
}

/// The child of `--share-child`: imports the dma-buf and answers the parent until its socket
/// closes.
fn share_importer(spec: &str, args: &Args) -> Result<(), String> {
    // SAFETY: prctl/getppid take no pointers.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if libc::getppid() == 1 {
            return Err("the parent is gone".into());
        }
    }
    let bad = || format!("--share-importer {spec:?}: SOCKET_FD,DMABUF_FD,MINOR,HANDLE,BYTES");
    let v: Vec<u64> = spec
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|_| bad())?;
    let [sock, dmabuf, minor, handle, bytes] = v[..] else {
        return Err(bad());
    };
    let fd = |n: u64| -> Result<OwnedFd, String> {
        let raw = i32::try_from(n).map_err(|_| bad())?;
        // SAFETY: the parent passed these fds, open across exec, for this process alone; nothing
        // else in it owns them.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: fcntl on the fd just taken, integer arguments only.
        unsafe { libc::fcntl(raw, libc::F_SETFD, libc::FD_CLOEXEC) };
        Ok(fd)
    };
    let sock = UnixStream::from(fd(sock)?);
    let dmabuf = fd(dmabuf)?;
    let minor = u32::try_from(minor).map_err(|_| bad())?;
    let handle = u32::try_from(handle)
        .ok()
        .and_then(BoHandle::new)
        .ok_or_else(bad)?;
    let platform = HostPlatform::from_env();
    let render = platform.open_render(minor).map_err(|e| e.to_string())?;
    let mut out = sock.try_clone().map_err(|e| e.to_string())?;
    let imported = Importer::import(render, dmabuf, handle, bytes, args.seed, args.share_keep_fd);
    let me = match imported {
        Ok(me) => me,
        Err(e) => {
            let _ = writeln!(out, "err {e}");
            return Err(e.to_string());
        }
    };
    writeln!(
        out,
        "ready pid={} fillers={}",
        std::process::id(),
        me.fillers()
    )
    .map_err(|e| e.to_string())?;
    for line in BufReader::new(sock).lines() {
        let line = line.map_err(|e| format!("reading the parent's commands: {e}"))?;
        writeln!(out, "{}", me.answer(&line)).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The first GPU's render minor, as [`start`] picks the GPUs.
fn first_minor(args: &Args) -> Result<u32, String> {
    let platform = HostPlatform::from_env();
    let topo = topology::parse(&platform.topology_root()).map_err(|e| e.to_string())?;
    let minor = topo
        .gpus()
        .map(|n| n.render_minor())
        .find(|m| args.render_minors.is_empty() || args.render_minors.contains(m));
    minor.ok_or_else(|| "no GPU to share a buffer on".into())
}

fn start(args: &Args) -> Result<Workload<kfd_abi::FdTransport>, String> {
    let platform = HostPlatform::from_env();
    let topo = topology::parse(&platform.topology_root()).map_err(|e| e.to_string())?;
    let open_kfd = || platform.open_kfd().map_err(|e| e.to_string());
    let early_kfd = if args.render_first {
        None
    } else {
        Some(open_kfd()?)
    };
    let mut gpus = Vec::new();
    for node in topo.gpus() {
        if !args.render_minors.is_empty() && !args.render_minors.contains(&node.render_minor()) {
            continue;
        }
        let id = GpuId::new(node.gpu_id).ok_or("a GPU node with gpu_id 0")?;
        gpus.push((
            id,
            platform
                .open_render(node.render_minor())
                .map_err(|e| e.to_string())?,
        ));
    }
    let kfd = match early_kfd {
        Some(k) => k,
        None => open_kfd()?,
    };
    if gpus.is_empty() {
        return Err(format!(
            "no GPU{} in the topology at {}",
            if args.render_minors.is_empty() {
                String::new()
            } else {
                format!(" with render minor {:?}", args.render_minors)
            },
            platform.topology_root().display()
        ));
    }
    let kib = |v: &[u64]| v.iter().map(|k| k << 10).collect::<Vec<_>>();
    let spec = Spec {
        seed: args.seed,
        vram: kib(&args.vram_kib),
        gtt: kib(&args.gtt_kib),
        queues: args.queues,
        events: args.events,
        untouched_permille: args.untouched_permille,
        render: kib(&args.render_kib),
    };
    Workload::start_with(kfd, gpus, &spec, args.dma.into()).map_err(|e| e.to_string())
}

/// The event thread of a ROCm runtime: blocked in an infinite `WAIT_EVENTS` on a signal event of
/// its own, which every tick sets. It retries on `EINTR` as libhsakmt does, which is also how it
/// comes back after criu froze it inside the call and restored it.
struct EventThread {
    event: EventId,
    wakeups: Arc<AtomicU64>,
    failed: Arc<Mutex<Option<String>>>,
}

impl EventThread {
    fn start(kfd: &Kfd<FdTransport>) -> Result<Self, String> {
        let kfd = kfd.try_clone().map_err(|e| e.to_string())?;
        let event = kfd
            .create_event(EventType::Signal, true, None)
            .map_err(|e| e.to_string())?
            .event_id;
        let wakeups = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(Mutex::new(None));
        let (n, f) = (Arc::clone(&wakeups), Arc::clone(&failed));
        std::thread::Builder::new()
            .name("events".into())
            .spawn(move || loop {
                let why = match kfd.wait_events(&[event], true, kfd_abi::kfd::WAIT_INFINITE) {
                    Ok(WaitResult::Complete) => {
                        n.fetch_add(1, Ordering::SeqCst);
                        continue;
                    }
                    Err(IoctlError::Failed { errno, .. }) if errno == Errno::EINTR => continue,
                    Ok(other) => format!("WAIT_EVENTS returned {other:?}"),
                    Err(e) => e.to_string(),
                };
                *f.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(why);
                return;
            })
            .map_err(|e| e.to_string())?;
        Ok(Self {
            event,
            wakeups,
            failed,
        })
    }

    fn failure(&self) -> Option<String> {
        self.failed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Sets the event and waits (up to 10 s) until the thread has woken up for it.
    fn answers(&self, kfd: &Kfd<FdTransport>) -> Result<u64, String> {
        let before = self.wakeups.load(Ordering::SeqCst);
        kfd.set_event(self.event).map_err(|e| e.to_string())?;
        let start = Instant::now();
        loop {
            if let Some(why) = self.failure() {
                return Err(format!("the event thread failed: {why}"));
            }
            let now = self.wakeups.load(Ordering::SeqCst);
            if now > before {
                return Ok(now);
            }
            if start.elapsed() > Duration::from_secs(10) {
                return Err("the event thread did not wake up within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn verify_line(
    w: &Workload<FdTransport>,
    events: Option<&EventThread>,
    share: Option<&mut ShareParent>,
) -> (bool, String) {
    let wakeups = match events.map(|t| t.answers(w.kfd())).transpose() {
        Ok(n) => n,
        Err(e) => return (false, format!("VERIFY FAIL {e}")),
    };
    let shared = match share.map(|s| s.verify(w)).transpose() {
        Ok(s) => s.unwrap_or_default(),
        Err(e) => return (false, format!("VERIFY FAIL shared buffer: {e}")),
    };
    match w.verify() {
        Ok(r) => (
            true,
            format!(
                "VERIFY OK buffers={} bytes={} queues={} events={} generation={} rebuilds={} \
                 page_slots={}{}{shared}",
                r.buffers,
                r.bytes,
                r.queues,
                r.events,
                r.generation,
                w.rebuilds(),
                r.page_slots,
                wakeups.map(|n| format!(" wakeups={n}")).unwrap_or_default()
            ),
        ),
        Err(e) => (false, format!("VERIFY FAIL {e}")),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(spec) = &args.share_importer {
        return match share_importer(spec, &args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("kfd-workload (share child): {e}");
                ExitCode::FAILURE
            }
        };
    }
    let mut w = match start(&args) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("kfd-workload: {e}");
            return ExitCode::FAILURE;
        }
    };
    let m = w.manifest();
    println!(
        "started pid={} gpus={} bytes={} queues={} events={} dma={}",
        std::process::id(),
        m.gpus.len(),
        m.pattern_bytes(),
        m.gpus.iter().map(|g| g.queues.len()).sum::<usize>(),
        m.events.len(),
        match w.dma() {
            Dma::Queues => "queues",
            _ => "cs",
        }
    );
    let mut share = match args.share_child {
        Some(kib) => match first_minor(&args).and_then(|m| ShareParent::start(&w, m, &args, kib)) {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("kfd-workload: sharing a buffer with a child: {e}");
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    if args.once {
        let (ok, line) = verify_line(&w, None, share.as_mut());
        println!("{line}");
        return if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    if args.fork_child {
        match fork_idle_child() {
            Ok(pid) => println!("child pid={pid}"),
            Err(e) => {
                eprintln!("kfd-workload: fork: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let events = match EventThread::start(w.kfd()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("kfd-workload: starting the event thread: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut ticks = 0u64;
    let mut holding = false;
    loop {
        std::thread::sleep(Duration::from_millis(args.tick_ms));
        if let Some(trigger) = &args.verify_trigger {
            if trigger.exists() {
                let (_, line) = verify_line(&w, Some(&events), share.as_mut());
                println!("{line}");
                let _ = std::fs::remove_file(trigger);
            }
        }
        if args.hold_trigger.as_ref().is_some_and(|f| f.exists()) {
            if !holding {
                println!("HOLD {}", w.manifest().generation);
                holding = true;
            }
            continue;
        }
        holding = false;
        let rebuilds = w.rebuilds();
        match w.tick() {
            Ok(g) => {
                if w.rebuilds() > rebuilds {
                    eprintln!(
                        "kfd-workload: tick {g}: a step lost its render-node objects (restored \
                         mid-step) and ran again on new ones"
                    );
                }
                if let Some(Err(e)) = share.as_mut().map(ShareParent::exchange) {
                    println!("TICK FAIL shared buffer: {e}");
                    return ExitCode::FAILURE;
                }
                if let Err(e) = w.kfd().set_event(events.event) {
                    println!("TICK FAIL setting the event thread's event: {e}");
                    return ExitCode::FAILURE;
                }
                println!("tick {g}");
            }
            Err(e) => {
                println!("TICK FAIL {e}");
                return ExitCode::FAILURE;
            }
        }
        ticks += 1;
        if args.ticks.is_some_and(|n| ticks >= n) {
            return ExitCode::SUCCESS;
        }
    }
}
