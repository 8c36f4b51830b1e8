//! The CUSE server: one `/dev/cuse` connection per device (registered by [`init`](super::init)),
//! a pool of reader threads per connection ([`threads`](super::threads)), the request handlers
//! ([`requests`](super::requests)) and the processes they serve ([`procs`](super::procs)); what
//! they share, and the configuration, in [`shared`](super::shared).
//!
//! Shutdown writes to the shutdown socket: every reader sees it readable and returns, and the
//! `/dev/cuse` fds are closed, which removes the devices.
//!
//! Signals: a caller that gets a signal inside a call (criu freezing it, a handler, SIGKILL)
//! makes the kernel send FUSE_INTERRUPT for that request. The request's "signal pending" flag is
//! set and event waiters are woken; `WAIT_EVENTS`, the only call that sleeps, then ends with
//! `EINTR` as the driver's interruptible wait does. Without this a process blocked in an infinite
//! wait could be neither frozen nor killed promptly.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use topology::Topology;

use super::bridge::{self, Bridge};
use super::init::{open_cuse, register};
use super::procs::reaper;
use super::shared::{DeviceRole, ServeConfig, ServedDevice, Shared, DRM_MAJOR};
use super::threads::{spawn_reader, Device};
use super::CuseError;
use crate::host::lock;
use crate::lock_order::{rank, Ordered};
use crate::state::machine::MachineInner;

/// A running CUSE server: `/dev/kfd` and one render node per GPU, until [`shutdown`] or drop.
///
/// [`shutdown`]: CuseServer::shutdown
pub struct CuseServer {
    shared: Arc<Shared>,
    devices: Vec<Arc<Device>>,
    stop_tx: Option<UnixStream>,
    reaper: Option<JoinHandle<()>>,
    /// The dev root of the public nodes.
    dev_root: PathBuf,
    /// Whether the bridge's proxies exist yet (made once the CUSE nodes have appeared).
    proxies_made: AtomicBool,
}

impl std::fmt::Debug for CuseServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CuseServer")
            .field("devices", &self.devices())
            .finish()
    }
}

impl CuseServer {
    /// Registers `/dev/<kfd_name>` and `/dev/dri/renderD<minor>` for every GPU of `topology`
    /// and starts serving them. The nodes appear shortly after: see [`wait_ready`].
    ///
    /// When the kernel module's control device exists ([`ServeConfig::bridge_path`]), the CUSE
    /// devices get private names and the module's proxies the public ones (see
    /// the `bridge` module); [`wait_ready`] makes the proxies.
    ///
    /// [`wait_ready`]: CuseServer::wait_ready
    pub fn start(topology: Topology, cfg: &ServeConfig) -> Result<Self, CuseError> {
        if !cfg.cuse_path.exists() {
            return Err(CuseError::NoCuse {
                path: cfg.cuse_path.clone(),
            });
        }
        let bridge = match cfg.bridge_path.as_deref().filter(|p| p.exists()) {
            Some(p) => Some(Bridge::open(p)?),
            None => None,
        };
        Self::start_with(topology, cfg, bridge, || open_cuse(cfg))
    }

    /// [`start`](Self::start) with the connections made by `connect` (one per device, each with
    /// its CUSE_INIT request pending): `/dev/cuse`, or a fake kernel in tests.
    fn start_with(
        topology: Topology,
        cfg: &ServeConfig,
        bridge: Option<Bridge>,
        mut connect: impl FnMut() -> Result<File, CuseError>,
    ) -> Result<Self, CuseError> {
        let machine = Arc::new(MachineInner::new(topology)?);
        machine.set_kernel(cfg.kernel);
        if let Some(v) = cfg.kfd_version {
            machine.set_kfd_version(v);
        }
        let mut roles = vec![(DeviceRole::Kfd, cfg.kfd_name.clone())];
        for (index, d) in machine.devices.iter().enumerate() {
            roles.push((
                DeviceRole::Render {
                    index,
                    minor: d.render_minor,
                },
                format!("dri/renderD{}", d.render_minor),
            ));
        }
        let render_rdevs = machine
            .devices
            .iter()
            .map(|d| libc::makedev(DRM_MAJOR, d.render_minor))
            .collect();
        let (stop_tx, stop_rx) = UnixStream::pair().map_err(CuseError::Thread)?;
        let shared = Arc::new(Shared {
            machine,
            own_pid: std::process::id(),
            files: Ordered::new(rank::CUSE_FILES, HashMap::new()),
            next_fh: AtomicU64::new(1),
            procs: Ordered::new(rank::CUSE_PROCS, HashMap::new()),
            render_rdevs,
            bridge: Ordered::new(rank::CUSE_BRIDGE, None),
            stop_rx,
            max_threads: cfg.max_threads.max(2),
            threads: Ordered::new(rank::CUSE_THREADS, Vec::new()),
        });
        let mut server = Self {
            shared: Arc::clone(&shared),
            devices: Vec::new(),
            stop_tx: Some(stop_tx),
            reaper: None,
            dev_root: cfg.dev_root.clone(),
            proxies_made: AtomicBool::new(false),
        };
        let bridged = bridge.is_some();
        if let Some(b) = bridge {
            log::info!(
                "kfd-simd: serving through the kernel module ({}): mmap and installed fds",
                b.path().display()
            );
            let b = Arc::new(b);
            if b.watches_mms() {
                let watch: Arc<dyn crate::state::accounts::MmWatch> = b.clone();
                shared.machine.set_mm_watch(Some(watch));
            }
            *lock(&shared.bridge) = Some(b);
        }
        for (role, public) in roles {
            let devname = if bridged {
                bridge::backend_devname(&public)
            } else {
                public.clone()
            };
            let cuse = register(connect()?, role, &devname, bridged)?;
            let dev = Arc::new(Device {
                cuse,
                info: ServedDevice {
                    role,
                    path: cfg.dev_root.join(&public),
                    backend: bridged.then(|| cfg.dev_root.join(&devname)),
                    devname,
                },
                idle: AtomicUsize::new(0),
                total: AtomicUsize::new(0),
                dead: AtomicBool::new(false),
                inflight: Ordered::new(rank::CUSE_INFLIGHT, HashMap::new()),
            });
            spawn_reader(&shared, &dev).map_err(CuseError::Thread)?;
            server.devices.push(dev);
        }
        let reaper_shared = Arc::clone(&shared);
        server.reaper = Some(
            std::thread::Builder::new()
                .name("kfd-simd:reap".into())
                .spawn(move || reaper(&reaper_shared))
                .map_err(CuseError::Thread)?,
        );
        Ok(server)
    }

    /// The devices, KFD first.
    pub fn devices(&self) -> Vec<ServedDevice> {
        self.devices.iter().map(|d| d.info.clone()).collect()
    }

    /// Waits until every device node exists as a character device; fails when the kernel
    /// refused a device or after `timeout`. Behind the bridge: waits for the CUSE nodes, puts
    /// the module's proxies in front of them, then waits for the public nodes.
    pub fn wait_ready(&self, timeout: Duration) -> Result<(), CuseError> {
        let start = Instant::now();
        let bridge = lock(&self.shared.bridge).clone();
        if let Some(b) = bridge {
            if !self.proxies_made.load(Ordering::SeqCst) {
                self.wait_nodes(start, timeout, |d| d.backend.as_deref())?;
                for d in &self.devices {
                    let backend = d.info.backend.as_deref().unwrap_or(&d.info.path);
                    let public = d
                        .info
                        .path
                        .strip_prefix(&self.dev_root)
                        .map_or_else(|_| d.info.devname.clone(), |p| p.display().to_string());
                    let (major, minor) = match d.info.role {
                        DeviceRole::Kfd => (0, 0),
                        DeviceRole::Render { minor, .. } => (DRM_MAJOR, minor),
                    };
                    let (ma, mi) = b.create(backend, &bridge::proxy_name(&public), major, minor)?;
                    log::info!(
                        "kfd-simd: {} ({ma}:{mi}) -> {}",
                        d.info.path.display(),
                        backend.display()
                    );
                }
                self.proxies_made.store(true, Ordering::SeqCst);
            }
        }
        self.wait_nodes(start, timeout, |d| Some(&d.path))
    }

    /// Waits until the `node` of every device is a character device.
    fn wait_nodes(
        &self,
        start: Instant,
        timeout: Duration,
        node: impl Fn(&ServedDevice) -> Option<&Path>,
    ) -> Result<(), CuseError> {
        loop {
            if let Some(d) = self.devices.iter().find(|d| d.dead.load(Ordering::SeqCst)) {
                return Err(CuseError::Register {
                    devname: d.info.devname.clone(),
                    what: "the kernel dropped the CUSE connection (are the device numbers or \
                           the name already taken?)"
                        .into(),
                });
            }
            let missing: Vec<String> = self
                .devices
                .iter()
                .filter_map(|d| node(&d.info))
                .filter(|p| !is_char_device(p))
                .map(|p| p.display().to_string())
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            if start.elapsed() > timeout {
                return Err(CuseError::NotReady {
                    secs: timeout.as_secs(),
                    missing: missing.join(", "),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The state the reader threads share.
    #[cfg(test)]
    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Stops serving: readers finish their current request, the devices disappear.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let Some(mut tx) = self.stop_tx.take() else {
            return;
        };
        if let Err(e) = tx.write_all(b"x") {
            log::error!("kfd-simd: cannot signal the reader threads to stop: {e}");
        }
        loop {
            let batch: Vec<JoinHandle<()>> = std::mem::take(&mut *lock(&self.shared.threads));
            if batch.is_empty() {
                break;
            }
            // A reader sleeping in a call (WAIT_EVENTS of a live client) never looks at the stop
            // signal: its call ends as an interrupted one does (EINTR), until every reader is out.
            while !batch.iter().all(JoinHandle::is_finished) {
                for d in &self.devices {
                    for signal in lock(&d.inflight).values() {
                        signal.store(true, Ordering::SeqCst);
                    }
                }
                self.shared.wake_event_waiters();
                std::thread::sleep(Duration::from_millis(20));
            }
            for t in batch {
                if t.join().is_err() {
                    log::error!("kfd-simd: a reader thread panicked");
                }
            }
        }
        if let Some(r) = self.reaper.take() {
            let _ = r.join();
        }
        // Closing the module's control device removes the proxies (files open through them keep
        // what they opened, and get errors from here on).
        self.shared.machine.set_mm_watch(None);
        drop(lock(&self.shared.bridge).take());
        // Dropping the devices closes the /dev/cuse fds: the kernel removes the nodes.
        self.devices.clear();
        lock(&self.shared.files).clear();
        lock(&self.shared.procs).clear();
        log::info!("kfd-simd: stopped");
    }
}

impl Drop for CuseServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn is_char_device(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.file_type().is_char_device())
}

#[cfg(test)]
pub(crate) mod tests {
    //! The server against a fake kernel: a `SOCK_SEQPACKET` socket plays `/dev/cuse` (one message
    //! per request and per reply), and this test process plays the client (the header names our
    //! pid, so the server reads and writes our memory with `process_vm_*`).

    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    use std::os::fd::{AsFd, OwnedFd};

    use super::*;
    use crate::cuse::os;
    use crate::cuse::proto::{request, FUSE_IOCTL_UNRESTRICTED};
    use crate::cuse::SIM_PROBE;
    use kfd_abi::ioctl::kfd;

    pub(crate) struct FakeKernel {
        end: UnixStream,
        unique: u64,
    }

    /// `fuse_ioctl_in` of an unrestricted ioctl without in/out sizes.
    fn ioctl_body(fh: u64, cmd: u32, arg: u64) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&fh.to_ne_bytes());
        body.extend_from_slice(&FUSE_IOCTL_UNRESTRICTED.to_ne_bytes());
        body.extend_from_slice(&cmd.to_ne_bytes());
        body.extend_from_slice(&arg.to_ne_bytes());
        body.extend_from_slice(&[0u8; 8]);
        body
    }

    fn me() -> u32 {
        std::process::id()
    }

    impl FakeKernel {
        fn new() -> (Self, File) {
            let (a, b) = os::seqpacket_pair().unwrap();
            let end = UnixStream::from(a);
            end.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut k = Self { end, unique: 100 };
            // CUSE_INIT: 7.38, unrestricted ioctls offered.
            let body: Vec<u8> = [7u32, 38, 0, 1]
                .iter()
                .flat_map(|v| v.to_ne_bytes())
                .collect();
            k.send(4096, me(), &body);
            // As /dev/cuse is opened: non-blocking (readers that lose the race must not block).
            let server_end = UnixStream::from(b);
            server_end.set_nonblocking(true).unwrap();
            (k, File::from(OwnedFd::from(server_end)))
        }

        fn send(&mut self, opcode: u32, pid: u32, body: &[u8]) -> u64 {
            self.unique += 2;
            self.end
                .write_all(&request(opcode, self.unique, pid, body))
                .unwrap();
            self.unique
        }

        fn recv(&mut self) -> (i32, u64, Vec<u8>) {
            let mut b = vec![0u8; 8192];
            let n = self.end.read(&mut b).unwrap();
            b.truncate(n);
            assert_eq!(u32::from_ne_bytes(b[..4].try_into().unwrap()) as usize, n);
            let err = i32::from_ne_bytes(b[4..8].try_into().unwrap());
            let unique = u64::from_ne_bytes(b[8..16].try_into().unwrap());
            (err, unique, b[16..].to_vec())
        }

        fn open(&mut self, pid: u32) -> Result<u64, i32> {
            let u = self.send(14, pid, &[0u8; 8]);
            let (err, unique, body) = self.recv();
            assert_eq!(unique, u);
            if err != 0 {
                return Err(err);
            }
            Ok(u64::from_ne_bytes(body[..8].try_into().unwrap()))
        }

        fn ioctl(&mut self, pid: u32, fh: u64, cmd: u32, arg: u64) -> i32 {
            let u = self.send(39, pid, &ioctl_body(fh, cmd, arg));
            let (err, unique, out) = self.recv();
            assert_eq!((err, unique), (0, u));
            assert_eq!(out.len(), 16);
            i32::from_ne_bytes(out[..4].try_into().unwrap())
        }
    }

    fn server(n_devices: usize) -> (CuseServer, Vec<FakeKernel>) {
        let preset = crate::Preset::by_name("mi210x2").unwrap();
        let mut kernels = Vec::new();
        let mut files = Vec::new();
        for _ in 0..n_devices {
            let (k, f) = FakeKernel::new();
            kernels.push(k);
            files.push(f);
        }
        files.reverse();
        let s = CuseServer::start_with(
            preset.to_topology().unwrap(),
            &ServeConfig::default(),
            None,
            || Ok(files.pop().unwrap()),
        )
        .unwrap();
        (s, kernels)
    }

    /// A server for /dev/kfd and two render nodes, past CUSE_INIT.
    pub(crate) fn initialised_server() -> (CuseServer, Vec<FakeKernel>) {
        let (s, mut k) = server(3);
        for kk in &mut k {
            kk.recv();
        }
        (s, k)
    }

    #[test]
    fn init_registers_kfd_dynamic_and_render_nodes_with_drm_numbers() {
        let (s, mut k) = server(3);
        let names: Vec<String> = s.devices().into_iter().map(|d| d.devname).collect();
        assert_eq!(names, ["kfd", "dri/renderD128", "dri/renderD129"]);
        for (i, want) in [
            (0u32, 0u32, "kfd"),
            (226, 128, "dri/renderD128"),
            (226, 129, "dri/renderD129"),
        ]
        .iter()
        .enumerate()
        {
            let (err, unique, body) = k[i].recv();
            assert_eq!((err, unique), (0, 102));
            let w: Vec<u32> = body[..72]
                .chunks(4)
                .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
                .collect();
            assert_eq!(&w[..4], &[7, 31, 0, 1]);
            assert_eq!((w[6], w[7]), (want.0, want.1));
            assert_eq!(&body[72..], format!("DEVNAME={}\0", want.2).as_bytes());
        }
        s.shutdown();
        // The server closed its ends: the fake kernel sees end of file.
        let mut b = [0u8; 16];
        assert_eq!(k[0].end.read(&mut b).unwrap(), 0);
    }

    /// One request as the kernel could send it, or mangled: any opcode, a length field that may
    /// lie, any pid, any body; ioctls on open, stale or unknown handles with any command and
    /// wild arguments.
    fn any_request(fhs: Vec<u64>) -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let opcode = prop_oneof![
            prop::sample::select(vec![2u32, 14, 15, 16, 18, 20, 25, 36, 38, 39, 40, 42, 4096]),
            any::<u32>(),
        ];
        let pid = prop_oneof![Just(me()), Just(1u32), Just(0u32), any::<u32>()];
        let cmd = prop_oneof![
            prop::sample::select(kfd::TABLE.iter().map(|e| e.cmd).collect::<Vec<_>>()),
            any::<u32>(),
        ];
        let arg = prop_oneof![
            Just(0u64),
            Just(8u64),
            Just(0xffff_8000_0000_0000u64),
            any::<u64>()
        ];
        let fh = prop_oneof![prop::sample::select(fhs), any::<u64>()];
        let ioctl = (fh, cmd, arg).prop_map(|(fh, cmd, arg)| ioctl_body(fh, cmd, arg));
        let body = prop_oneof![ioctl, prop::collection::vec(any::<u8>(), 0..96)];
        (opcode, any::<u64>(), pid, body, any::<Option<u32>>()).prop_map(
            |(opcode, unique, pid, body, len)| {
                let mut r = request(opcode, unique, pid, &body);
                if let Some(len) = len {
                    r[..4].copy_from_slice(&len.to_ne_bytes());
                }
                r
            },
        )
    }

    #[test]
    fn any_request_is_answered_or_dropped_without_a_panic() {
        use proptest::prelude::*;
        let (s, mut k) = initialised_server();
        let fhs: Vec<u64> = (0..3).map(|i| k[i].open(me()).unwrap()).collect();
        let config = ProptestConfig {
            cases: 512,
            failure_persistence: None,
            ..ProptestConfig::default()
        };
        proptest!(config, |(dev in 0usize..3, reqs in prop::collection::vec(any_request(fhs.clone()), 1..8))| {
            for r in &reqs {
                // Straight into the handler, as a reader thread would, so that a panic fails
                // the test; a reply must name the request it answers.
                if let Some(reply) = s.shared.handle(&s.devices[dev], r) {
                    prop_assert!(reply.len() >= 16);
                    let len = u32::from_ne_bytes(reply[..4].try_into().unwrap()) as usize;
                    prop_assert_eq!(len, reply.len());
                }
            }
        });
        // Still serving, over the connection.
        let mut v = kfd_sys::kfd_ioctl_get_version_args::default();
        let addr = std::ptr::addr_of_mut!(v) as u64;
        let fh = k[0].open(me()).unwrap();
        assert_eq!(k[0].ioctl(me(), fh, kfd::GET_VERSION, addr), 0);
        s.shutdown();
    }

    /// A WAIT_EVENTS without a timeout on a new signal event of `fh`, sent and not answered: the
    /// memory the call reads and writes stays here until it is dropped (after the reply).
    struct InfiniteWait {
        /// The request's `unique`.
        unique: u64,
        _data: Box<kfd_sys::kfd_event_data>,
        _args: Box<kfd_sys::kfd_ioctl_wait_events_args>,
    }

    impl InfiniteWait {
        fn send(k: &mut FakeKernel, fh: u64) -> Self {
            let mut ev = kfd_sys::kfd_ioctl_create_event_args {
                event_type: kfd_sys::KFD_IOC_EVENT_SIGNAL,
                ..Default::default()
            };
            let addr = std::ptr::addr_of_mut!(ev) as u64;
            assert_eq!(k.ioctl(me(), fh, kfd::CREATE_EVENT, addr), 0);
            let mut data = Box::new(kfd_sys::kfd_event_data {
                event_id: ev.event_id,
                ..Default::default()
            });
            let mut args = Box::new(kfd_sys::kfd_ioctl_wait_events_args {
                events_ptr: std::ptr::addr_of_mut!(*data) as u64,
                num_events: 1,
                wait_for_all: 1,
                timeout: u32::MAX,
                ..Default::default()
            });
            let body = ioctl_body(fh, kfd::WAIT_EVENTS, std::ptr::addr_of_mut!(*args) as u64);
            Self {
                unique: k.send(39, me(), &body),
                _data: data,
                _args: args,
            }
        }
    }

    #[test]
    fn an_interrupt_ends_an_infinite_wait_events_with_eintr() {
        let (s, mut k) = initialised_server();
        let fh = k[0].open(me()).unwrap();
        let wait = InfiniteWait::send(&mut k[0], fh);
        let waiting = wait.unique;

        // An interrupt of a request that is not being served (answered, or not yet read): EAGAIN,
        // so that the kernel sends it again if the request is still pending.
        let stray = waiting + 1000;
        k[0].end
            .write_all(&request(36, stray | 1, me(), &stray.to_ne_bytes()))
            .unwrap();
        assert_eq!(k[0].recv(), (-libc::EAGAIN, stray | 1, Vec::new()));

        // Interrupt the wait, again for as long as the server has not started it.
        let reply = loop {
            k[0].end
                .write_all(&request(36, waiting | 1, me(), &waiting.to_ne_bytes()))
                .unwrap();
            let (err, unique, out) = k[0].recv();
            if unique == waiting | 1 {
                assert_eq!(err, -libc::EAGAIN);
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            break (err, unique, out);
        };
        assert_eq!((reply.0, reply.1), (0, waiting));
        assert_eq!(
            i32::from_ne_bytes(reply.2[..4].try_into().unwrap()),
            -libc::EINTR
        );
        // The event is still there and the file still answers.
        let mut v = kfd_sys::kfd_ioctl_get_version_args::default();
        let addr = std::ptr::addr_of_mut!(v) as u64;
        assert_eq!(k[0].ioctl(me(), fh, kfd::GET_VERSION, addr), 0);
        s.shutdown();
    }

    #[test]
    fn shutdown_ends_a_call_that_sleeps_for_ever() {
        let (s, mut k) = initialised_server();
        let fh = k[0].open(me()).unwrap();
        let wait = InfiniteWait::send(&mut k[0], fh);
        let waiting = wait.unique;
        let start = Instant::now();
        while lock(&s.devices[0].inflight).is_empty() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the wait never started"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // A client that waits for ever does not keep the daemon from stopping.
        let stopping = std::thread::spawn(move || s.shutdown());
        let start = Instant::now();
        while !stopping.is_finished() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "shutdown hangs on a sleeping call"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        stopping.join().unwrap();
        let (err, unique, out) = k[0].recv();
        assert_eq!((err, unique), (0, waiting));
        assert_eq!(
            i32::from_ne_bytes(out[..4].try_into().unwrap()),
            -libc::EINTR
        );
    }

    /// A handler that panics leaves no caller in its call: the request gets an `EIO` reply (a
    /// FORGET, which wants none, gets none), its in-flight entry goes, and the daemon goes on
    /// serving the device.
    #[test]
    fn a_handler_that_panics_answers_eio_and_the_daemon_goes_on() {
        let (s, mut k) = initialised_server();
        let dev = &s.devices[0];
        let ioctl = request(39, 4242, me(), &ioctl_body(1, kfd::GET_VERSION, 0));
        let reply = crate::cuse::threads::answer(dev, &ioctl, |_| {
            lock(&dev.inflight).insert(4242, Arc::new(AtomicBool::new(false)));
            panic!("injected into a handler")
        });
        assert_eq!(
            reply,
            Some(crate::cuse::proto::error_reply(4242, kfd_abi::Errno::EIO))
        );
        assert!(lock(&dev.inflight).is_empty());
        let forget = request(2, 4244, me(), &[0u8; 8]);
        let reply = crate::cuse::threads::answer(dev, &forget, |_| panic!("injected again"));
        assert_eq!(reply, None);
        // The same device still answers, on the same reader threads.
        let fh = k[0].open(me()).unwrap();
        let mut v = kfd_sys::kfd_ioctl_get_version_args::default();
        let addr = std::ptr::addr_of_mut!(v) as u64;
        assert_eq!(k[0].ioctl(me(), fh, kfd::GET_VERSION, addr), 0);
        assert_eq!(v.major_version, 1);
        s.shutdown();
    }

    #[test]
    fn open_ioctl_release_on_kfd() {
        let (s, mut k) = initialised_server();
        let fh = k[0].open(me()).unwrap();
        let mut v = kfd_sys::kfd_ioctl_get_version_args::default();
        let addr = std::ptr::addr_of_mut!(v) as u64;
        assert_eq!(k[0].ioctl(me(), fh, kfd::GET_VERSION, addr), 0);
        assert_eq!(v.major_version, 1);
        assert!(v.minor_version >= 11);
        // The daemon pid, written into our memory.
        let mut pid = 0u32;
        let r = k[0].ioctl(
            me(),
            fh,
            kfd_abi::cuse::SIM_DAEMON_PID,
            std::ptr::addr_of_mut!(pid) as u64,
        );
        assert_eq!((r, pid), (0, me()));
        // Errors come back as -errno in the result: a wild pointer, an unknown number, a handle
        // that was never opened, a caller that does not exist.
        assert_eq!(k[0].ioctl(me(), fh, kfd::GET_VERSION, 0x10), -libc::EFAULT);
        assert_eq!(k[0].ioctl(me(), fh, 0xdead_beef, addr), -libc::ENOTTY);
        assert_eq!(
            k[0].ioctl(me(), 999_999, kfd::GET_VERSION, addr),
            -libc::EBADF
        );
        assert_eq!(
            k[0].ioctl(u32::MAX - 1, fh, kfd::GET_VERSION, addr),
            -libc::ESRCH
        );
        // Another process (init) is not the opener: EBADF, as the driver's caller check.
        assert_eq!(k[0].ioctl(1, fh, kfd::GET_VERSION, addr), -libc::EBADF);
        // Release, then the handle is gone.
        let u = k[0].send(
            18,
            me(),
            &[fh.to_ne_bytes().as_slice(), &[0u8; 16]].concat(),
        );
        assert_eq!(k[0].recv(), (0, u, vec![]));
        assert_eq!(k[0].ioctl(me(), fh, kfd::GET_VERSION, addr), -libc::EBADF);
        s.shutdown();
    }

    #[test]
    fn installed_fds_are_kept_until_the_client_closes_them() {
        let (s, mut k) = initialised_server();
        let fh = k[0].open(me()).unwrap();
        let gpu = s.shared.machine.devices[0].gpu_id;
        let mut a = kfd_sys::kfd_ioctl_smi_events_args {
            gpuid: gpu,
            anon_fd: 0,
        };
        let addr = std::ptr::addr_of_mut!(a) as u64;
        assert_eq!(k[0].ioctl(me(), fh, kfd::SMI_EVENTS, addr), 0);
        let raw = i32::try_from(a.anon_fd).unwrap();
        // The number is the daemon's (here: ours); the client side fetches it and closes ours.
        let pidfd = kfd_abi::cuse::pidfd_open(me()).unwrap();
        let copy = kfd_abi::cuse::pidfd_getfd(pidfd.as_fd(), raw).unwrap();
        let mut n = raw;
        let close = |k: &mut FakeKernel, n: &mut i32| {
            k.ioctl(
                me(),
                fh,
                kfd_abi::cuse::SIM_CLOSE_FD,
                std::ptr::addr_of_mut!(*n) as u64,
            )
        };
        assert_eq!(close(&mut k[0], &mut n), 0);
        assert_eq!(close(&mut k[0], &mut n), -libc::EBADF);
        // Only fds installed for the caller can be closed: not the server's own /dev/cuse fd.
        n = 0;
        assert_eq!(close(&mut k[0], &mut n), -libc::EBADF);
        drop(copy);
        s.shutdown();
    }

    #[test]
    fn probe_answers_the_daemon_only_and_garbage_does_not_hurt() {
        let (s, mut k) = initialised_server();
        let fh = k[1].open(me()).unwrap();
        assert_eq!(
            k[1].ioctl(me(), fh, SIM_PROBE, 0),
            i32::try_from(fh).unwrap()
        );
        assert!(k[1].ioctl(1, fh, SIM_PROBE, 0) < 0);
        // A truncated request is answered with EINVAL; an interrupt of a request we are not
        // serving with EAGAIN (the kernel resends it while the request is pending), a truncated
        // interrupt and a forget get no answer.
        let mut short = request(39, 77, me(), &[0u8; 8]);
        short.truncate(44);
        short[..4].copy_from_slice(&44u32.to_ne_bytes());
        k[1].end.write_all(&short).unwrap();
        assert_eq!(k[1].recv(), (-libc::EINVAL, 77, vec![]));
        let u = k[1].send(36, me(), &5u64.to_ne_bytes());
        assert_eq!(k[1].recv(), (-libc::EAGAIN, u, vec![]));
        k[1].send(36, me(), &[0u8; 4]);
        k[1].send(2, me(), &[0u8; 8]);
        // Unknown opcodes, read, poll.
        let u = k[1].send(3, me(), &[0u8; 16]);
        assert_eq!(k[1].recv(), (-libc::ENOSYS, u, vec![]));
        let u = k[1].send(15, me(), &[0u8; 40]);
        assert_eq!(k[1].recv(), (-libc::EINVAL, u, vec![]));
        let u = k[1].send(40, me(), &[0u8; 24]);
        assert_eq!(k[1].recv(), (-libc::ENOSYS, u, vec![]));
        // Still serving.
        assert_eq!(
            k[1].ioctl(me(), fh, SIM_PROBE, 0),
            i32::try_from(fh).unwrap()
        );
        s.shutdown();
    }

    #[test]
    fn a_connection_dropped_by_the_kernel_is_reported() {
        let (s, mut k) = initialised_server();
        drop(k.remove(2));
        let err = s.wait_ready(Duration::from_secs(5)).unwrap_err();
        assert!(
            matches!(&err, CuseError::Register { devname, .. } if devname == "dri/renderD129"),
            "{err}"
        );
        s.shutdown();
    }
}
