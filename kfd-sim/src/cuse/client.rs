//! The caller of an ioctl that arrived over CUSE, as the dispatcher sees it ([`Client`]).
//!
//! - Identity: the thread-group id from `/proc/<tid>/status`; capabilities from its `CapEff`
//!   (per thread, as `capable()` looks at the calling thread); ptrace parenthood from the
//!   target's `TracerPid`, which names the tracing *thread*, compared with the calling thread
//!   (the kernel compares `ptrace_parent(lead_thread)` with `current`).
//! - User memory: `process_vm_readv`/`writev` on the calling thread (a dead or dying caller is
//!   `EFAULT` for that call). No FUSE_IOCTL_RETRY round trips, no size limit.
//! - Fds passed in (`fget`, [`Client::resolve_fd`]): `pidfd_getfd` on the caller, then `fstat`.
//!   A dma-buf is one of our memfds, so its `(st_dev, st_ino)` is the key the machine knows.
//!   A file of one of our CUSE render nodes looks the same for every open (the devtmpfs inode),
//!   so we ask the file itself which open it is: an ioctl [`SIM_PROBE`] on the fetched fd comes
//!   back to *our* render device's reader with the `fh` that the kernel keeps in that struct
//!   file, and is answered (for our own pid only) with that `fh`. This is exact for any number of
//!   opens, dups and fds passed between processes. Only `/dev/kfd` requests probe, and the probe
//!   goes to a render device, whose requests never probe, so probes cannot wait on each other;
//!   the elastic reader pool keeps a reader free for them.
//! - Fds the kernel would install ([`Client::install_fd`]): the daemon cannot put an fd into its
//!   client, so it keeps the fd in a per-process table and returns its own number; the client
//!   fetches it with `pidfd_getfd` and asks us to close our copy with
//!   `kfd_abi::cuse::SIM_CLOSE_FD` (only fds installed for that same process can be closed so).
//!   Fds never fetched are closed when the process exits. With the kernel module
//!   ([`super::bridge`]) the module installs them instead, at the end of the call.
//!
//! [`SIM_PROBE`]: super::SIM_PROBE

use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};

use kfd_abi::Errno;

use super::bridge::HandOvers;
use super::os::{self, ProcStatus};
use super::shared::Shared;
use super::{cuse_file_key, SIM_PROBE};
use crate::client::{Client, FdSlot};
use crate::host::FileKey;
use crate::hw::backing::ProcessMemory;

/// One ioctl's caller.
pub(crate) struct CuseClient<'a> {
    pub(crate) shared: &'a Shared,
    /// The calling thread (from the request header).
    pub(crate) tid: u32,
    /// Its `/proc/<tid>/status`.
    pub(crate) status: ProcStatus,
    /// Whether fds of our render nodes are identified by probing (requests on /dev/kfd only).
    pub(crate) may_probe: bool,
    /// Set when the kernel interrupts this request (FUSE_INTERRUPT).
    pub(crate) signal: &'a std::sync::atomic::AtomicBool,
    /// The ioctl's argument (the base of [`FdSlot::ArgField`]).
    pub(crate) arg: u64,
    /// With the kernel module (`super::bridge`): the fds to install into the caller when the
    /// call succeeds, with where their numbers go.
    pub(crate) handovers: Option<&'a HandOvers>,
}

impl CuseClient<'_> {
    /// The calling thread's memory (the thread is blocked in the call, so it is alive).
    fn thread_memory(&self) -> Result<ProcessMemory, Errno> {
        libc::pid_t::try_from(self.tid)
            .map(ProcessMemory::of_pid)
            .map_err(|_| Errno::EFAULT)
    }

    /// `SIM_CLOSE_FD`: the caller fetched the fd we kept for it; closes our copy.
    pub(crate) fn close_installed(&self, arg: u64) -> Result<i32, Errno> {
        let mut b = [0u8; 4];
        self.read_user(arg, &mut b)?;
        let raw = RawFd::from_ne_bytes(b);
        if self.shared.uninstall(self.status.tgid, raw) {
            Ok(0)
        } else {
            Err(Errno::EBADF)
        }
    }
}

impl Client for CuseClient<'_> {
    fn pid(&self) -> u32 {
        self.status.tgid
    }

    fn signal_pending(&self) -> bool {
        self.signal.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn can_checkpoint_restore(&self) -> bool {
        self.status.can_checkpoint_restore()
    }

    fn is_ptrace_parent_of(&self, pid: u32) -> bool {
        ProcStatus::read(pid).is_ok_and(|s| s.tracer_pid != 0 && s.tracer_pid == self.tid)
    }

    fn pid_in_own_namespace(&self, pid: u32) -> u32 {
        ProcStatus::read(pid).map_or(pid, |s| s.ns_pid)
    }

    fn read_user(&self, addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
        self.thread_memory()?.read(addr, buf)
    }

    fn write_user(&self, addr: u64, buf: &[u8]) -> Result<(), Errno> {
        self.thread_memory()?.write(addr, buf)
    }

    fn resolve_fd(&self, raw: i32) -> Result<FileKey, Errno> {
        if raw < 0 {
            return Err(Errno::EBADF);
        }
        let pidfd = self.shared.pidfd_of(self.status.tgid)?;
        let fetched: OwnedFd = kfd_abi::cuse::pidfd_getfd(pidfd.as_fd(), raw).map_err(|e| {
            log::debug!(
                "kfd-simd: pidfd_getfd(pid {}, fd {raw}): {e}",
                self.status.tgid
            );
            Errno::EBADF
        })?;
        let file = std::fs::File::from(fetched);
        let meta = file.metadata().map_err(|_| Errno::EBADF)?;
        let ours =
            meta.file_type().is_char_device() && self.shared.render_rdevs.contains(&meta.rdev());
        if ours && self.may_probe {
            let fh = os::ioctl_no_arg(file.as_fd(), SIM_PROBE).map_err(|e| {
                log::warn!(
                    "kfd-simd: probing a render-node fd of pid {}: {e}",
                    self.status.tgid
                );
                Errno::EBADF
            })?;
            let fh = u64::try_from(fh).map_err(|_| Errno::EBADF)?;
            return if self.shared.has_file(fh) {
                Ok(cuse_file_key(fh))
            } else {
                Err(Errno::EBADF)
            };
        }
        // A dma-buf (one of our memfds) or a file the machine does not know.
        Ok(FileKey {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    fn install_fd(&self, fd: OwnedFd) -> Result<i32, Errno> {
        if self.handovers.is_some() {
            // Every caller in the dispatcher names its slot; one that does not is a bug there.
            log::error!("kfd-simd: an fd to install without a slot cannot go through the bridge");
            return Err(Errno::EINVAL);
        }
        self.shared.install(self.status.tgid, fd)
    }

    /// With the bridge, the fd is held for the module, and our own number stands in the slot
    /// until the proxy writes the caller's there.
    fn install_fd_at(&self, fd: OwnedFd, slot: FdSlot) -> Result<i32, Errno> {
        match self.handovers {
            Some(h) => Ok(h.hold(fd, slot.address(self.arg))),
            None => self.install_fd(fd),
        }
    }

    fn uninstall_fd(&self, raw: RawFd) {
        let withdrawn = match self.handovers {
            Some(h) => h.withdraw(raw),
            None => self.shared.uninstall(self.status.tgid, raw),
        };
        if !withdrawn {
            log::warn!("kfd-simd: fd {raw} to take back from a failed call was not installed");
        }
    }

    fn process_memory(&self) -> ProcessMemory {
        // The process, not the thread: a userptr BO outlives the thread that registered it.
        ProcessMemory::of_pid(libc::pid_t::try_from(self.status.tgid).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    //! The fds a CRIU_OP installs, through a CUSE client in both of its modes: plain CUSE (the
    //! daemon keeps each fd for the client to fetch with `pidfd_getfd`) and the kernel module
    //! (each fd is held for the module, which installs it when the call has succeeded). An op
    //! that fails after installing dma-bufs leaves nothing with the daemon and nothing to hand
    //! to the module; one that succeeds leaves exactly its dma-bufs, at their buckets.
    //!
    //! The op runs on the in-process simulator (its callers and ptrace are simulated), and the
    //! installs go through a real [`CuseClient`] of a server on a fake kernel.

    use std::os::fd::{AsFd, AsRawFd};
    use std::sync::atomic::AtomicBool;

    use kfd_abi::criu::Checkpoint;
    use kfd_abi::ioctl::kfd::CRIU_OP;
    use kfd_abi::{AllocFlags, Kfd};
    use kfd_sys as sys;
    use rstest::rstest;

    use super::*;
    use crate::cuse::bridge::HandOver;
    use crate::cuse::server::tests::initialised_server;
    use crate::inproc::client::InProcessClient;
    use crate::kfd::criu::{BO_PRIV_SIZE, DEVICE_PRIV_SIZE, PROCESS_PRIV_SIZE};
    use crate::state::machine::{FileKind, MachineInner};
    use crate::{Machine, Preset, SimFile, SimProcess};

    const VA: u64 = 0x7f00_0000_0000;
    const MIB: u64 = 1 << 20;
    const BUCKET: usize = std::mem::size_of::<sys::kfd_criu_bo_bucket>();

    /// Memory the simulator can read but not write: `copy_to_user` into it fails (EFAULT).
    static READ_ONLY: [u8; 4096] = [0xa5; 4096];

    #[derive(Clone, Copy, Debug)]
    enum Mode {
        /// Plain CUSE.
        Plain,
        /// Through the kernel module.
        Bridge,
    }

    /// A caller that is a simulated process (identity, memory, fds it passes in) and whose
    /// installed fds go through a CUSE client.
    struct Caller<'a> {
        sim: InProcessClient<'a>,
        cuse: CuseClient<'a>,
    }

    impl Client for Caller<'_> {
        fn pid(&self) -> u32 {
            self.sim.pid()
        }
        fn can_checkpoint_restore(&self) -> bool {
            self.sim.can_checkpoint_restore()
        }
        fn is_ptrace_parent_of(&self, pid: u32) -> bool {
            self.sim.is_ptrace_parent_of(pid)
        }
        fn read_user(&self, addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
            self.sim.read_user(addr, buf)
        }
        fn write_user(&self, addr: u64, buf: &[u8]) -> Result<(), Errno> {
            self.sim.write_user(addr, buf)
        }
        fn resolve_fd(&self, raw: i32) -> Result<FileKey, Errno> {
            self.sim.resolve_fd(raw)
        }
        fn install_fd(&self, fd: OwnedFd) -> Result<i32, Errno> {
            self.cuse.install_fd(fd)
        }
        fn install_fd_at(&self, fd: OwnedFd, slot: FdSlot) -> Result<i32, Errno> {
            self.cuse.install_fd_at(fd, slot)
        }
        fn uninstall_fd(&self, raw: RawFd) {
            self.cuse.uninstall_fd(raw);
        }
    }

    /// One CRIU_OP by simulated process `who` on `file`, its fds installed by a CUSE client of
    /// `shared` (for our own OS process) in `mode`. Returns the result and, with the module,
    /// what the call would hand to it.
    fn criu_op(
        shared: &Shared,
        mode: Mode,
        who: &SimProcess,
        file: &SimFile,
        args: &mut sys::kfd_ioctl_criu_args,
    ) -> (Result<i32, Errno>, Option<Vec<HandOver>>) {
        let machine: &MachineInner = who.machine().inner();
        let FileKind::Kfd(process) = &file.open_file().kind else {
            panic!("not a /dev/kfd file");
        };
        let arg = std::ptr::addr_of_mut!(*args) as u64;
        let signal = AtomicBool::new(false);
        let handovers = matches!(mode, Mode::Bridge).then(HandOvers::default);
        let caller = Caller {
            sim: InProcessClient {
                pid: who.pid(),
                capable: true,
                machine,
                mem: ProcessMemory::own(),
                signal: &signal,
                device_vmas: None,
            },
            cuse: CuseClient {
                shared,
                tid: std::process::id(),
                status: ProcStatus::read(std::process::id()).unwrap(),
                may_probe: false,
                signal: &signal,
                arg,
                handovers: handovers.as_ref(),
            },
        };
        let r = crate::kfd::kfd_ioctl(machine, process, &caller, CRIU_OP, arg);
        (r, handovers.map(HandOvers::into_inner))
    }

    /// A process with two BOs that have contents (VRAM, GTT) on one GPU, its /dev/kfd as its
    /// tracer "criu" has it, paused by PROCESS_INFO.
    struct Dumped {
        _src: SimProcess,
        _src_kfd: Kfd<SimFile>,
        _renders: Vec<SimFile>,
        criu: SimProcess,
        kfd: Kfd<SimFile>,
        info: kfd_abi::criu::ProcessInfo,
    }

    fn paused() -> Dumped {
        let m = Machine::new(&Preset::mi210x2()).unwrap();
        let src = m.spawn_process();
        let src_kfd = Kfd::new(src.open_kfd().unwrap(), "/dev/kfd");
        let gpu = kfd_abi::GpuId::new(m.gpu_ids()[0]).unwrap();
        let renders: Vec<SimFile> = m
            .render_minors()
            .into_iter()
            .map(|minor| src.open_render(minor).unwrap())
            .collect();
        src_kfd.acquire_vm(gpu, renders[0].as_fd()).unwrap();
        let w = AllocFlags::WRITABLE;
        src_kfd
            .alloc_memory(VA, 2 * MIB, gpu, AllocFlags::VRAM | w)
            .unwrap();
        src_kfd
            .alloc_memory(VA + 16 * MIB, MIB, gpu, AllocFlags::GTT | w)
            .unwrap();
        let criu = m.spawn_process();
        criu.ptrace_attach(&src);
        let kfd = Kfd::new(src_kfd.transport().used_by(&criu).unwrap(), "criu");
        let info = kfd.criu_process_info().unwrap();
        assert_eq!(info.num_bos, 2);
        Dumped {
            _src: src,
            _src_kfd: src_kfd,
            _renders: renders,
            criu,
            kfd,
            info,
        }
    }

    /// What the process's dump gives.
    fn dump() -> Checkpoint {
        let d = paused();
        let c = d.kfd.criu_checkpoint(&d.info).unwrap();
        d.kfd.criu_unpause().unwrap();
        c
    }

    /// The address of bucket `i`'s `dmabuf_fd` in the array at `bos`.
    fn dmabuf_fd_at(bos: u64, i: usize) -> u64 {
        bos + (i * BUCKET + std::mem::offset_of!(sys::kfd_criu_bo_bucket, dmabuf_fd)) as u64
    }

    /// Checks what a successful op left: in plain mode the daemon keeps one fd per bucket, under
    /// the bucket's number, for the client to fetch; with the module, one fd per bucket is held
    /// with the address of that bucket's `dmabuf_fd`, which meanwhile carries our number.
    fn assert_delivered(
        shared: &Shared,
        mode: Mode,
        buckets: &[sys::kfd_criu_bo_bucket],
        handed: Option<Vec<HandOver>>,
    ) {
        let me = std::process::id();
        match (mode, handed) {
            (Mode::Plain, None) => {
                assert_eq!(shared.installed_count(me), buckets.len());
                for b in buckets {
                    let raw = crate::uaccess::fd_from_field(b.dmabuf_fd);
                    assert!(
                        shared.uninstall(me, raw),
                        "fd {raw} of a bucket is not kept"
                    );
                }
            }
            (Mode::Bridge, Some(handed)) => {
                assert_eq!(shared.installed_count(me), 0, "kept as if for pidfd_getfd");
                let base = buckets.as_ptr() as u64;
                let got: Vec<(u64, u32)> = handed
                    .iter()
                    .map(|h| (h.addr, crate::uaccess::fd_to_field(h.fd.as_raw_fd())))
                    .collect();
                let want: Vec<(u64, u32)> = (0..buckets.len())
                    .map(|i| (dmabuf_fd_at(base, i), buckets[i].dmabuf_fd))
                    .collect();
                assert_eq!(got, want);
            }
            other => panic!("mode and hand-over do not match: {other:?}"),
        }
    }

    /// Checks that a failed op left nothing: no fd kept by the daemon, nothing for the module.
    fn assert_nothing_left(shared: &Shared, handed: Option<Vec<HandOver>>) {
        assert_eq!(shared.installed_count(std::process::id()), 0);
        if let Some(h) = handed {
            assert!(h.is_empty(), "fds for the module after a failed op: {h:?}");
        }
    }

    /// Where a RESTORE fails, if it does.
    #[derive(Clone, Copy, Debug)]
    enum Restore {
        /// It succeeds.
        Succeeds,
        /// At the second BO, after the first one's dma-buf is installed: its IDR handle is the
        /// first one's (ENOMEM).
        FailsAtTheSecondBo,
        /// At the size check after every record, with both dma-bufs installed (EINVAL).
        FailsAtTheEnd,
    }

    #[rstest]
    fn a_restore_installs_its_dmabufs_only_when_it_succeeds(
        #[values(Mode::Plain, Mode::Bridge)] mode: Mode,
        #[values(Restore::Succeeds, Restore::FailsAtTheSecondBo, Restore::FailsAtTheEnd)]
        how: Restore,
    ) {
        let c = dump();
        let mut priv_data = c.priv_data.clone();
        let want = match how {
            Restore::Succeeds => Ok(0),
            Restore::FailsAtTheSecondBo => {
                let bo1 = PROCESS_PRIV_SIZE + DEVICE_PRIV_SIZE * c.devices.len() + BO_PRIV_SIZE;
                priv_data[bo1 + 8] = 0;
                Err(Errno::ENOMEM)
            }
            Restore::FailsAtTheEnd => {
                priv_data.extend_from_slice(&[0; 8]);
                Err(Errno::EINVAL)
            }
        };
        let (server, _kernels) = initialised_server();
        let m = Machine::new(&Preset::mi210x2()).unwrap();
        let restorer = m.spawn_process();
        let kfd = restorer.open_kfd().unwrap();
        let renders: Vec<SimFile> = m
            .render_minors()
            .into_iter()
            .map(|minor| restorer.open_render(minor).unwrap())
            .collect();
        let mut devices: Vec<sys::kfd_criu_device_bucket> = c
            .devices
            .iter()
            .zip(m.gpu_ids())
            .zip(&renders)
            .map(|((d, actual), r)| sys::kfd_criu_device_bucket {
                user_gpu_id: d.user_gpu_id,
                actual_gpu_id: actual,
                drm_fd: crate::uaccess::fd_to_field(r.as_fd().as_raw_fd()),
                pad: 0,
            })
            .collect();
        let mut bos: Vec<sys::kfd_criu_bo_bucket> = c
            .bos
            .iter()
            .map(|b| sys::kfd_criu_bo_bucket {
                addr: b.addr,
                size: b.size,
                offset: b.offset,
                gpu_id: b.gpu_id,
                alloc_flags: b.alloc_flags.bits(),
                dmabuf_fd: sys::KFD_INVALID_FD,
                ..Default::default()
            })
            .collect();
        let mut args = sys::kfd_ioctl_criu_args {
            devices: devices.as_mut_ptr() as u64,
            bos: bos.as_mut_ptr() as u64,
            priv_data: priv_data.as_mut_ptr() as u64,
            priv_data_size: priv_data.len() as u64,
            num_devices: u32::try_from(devices.len()).unwrap(),
            num_bos: u32::try_from(bos.len()).unwrap(),
            num_objects: c.num_objects,
            pid: 0,
            op: sys::KFD_CRIU_OP_RESTORE,
        };

        let (r, handed) = criu_op(server.shared(), mode, &restorer, &kfd, &mut args);
        assert_eq!(r, want);
        if r.is_ok() {
            assert_delivered(server.shared(), mode, &bos, handed);
        } else {
            assert_nothing_left(server.shared(), handed);
        }
        server.shutdown();
    }

    #[rstest]
    fn a_checkpoint_that_fails_at_the_buckets_installs_nothing(
        #[values(Mode::Plain, Mode::Bridge)] mode: Mode,
    ) {
        let d = paused();
        let (server, _kernels) = initialised_server();
        let mut devices = vec![sys::kfd_criu_device_bucket::default(); 2];
        let mut priv_data = vec![0u8; usize::try_from(d.info.priv_data_size).unwrap()];
        let mut args = sys::kfd_ioctl_criu_args {
            devices: devices.as_mut_ptr() as u64,
            bos: READ_ONLY.as_ptr() as u64,
            priv_data: priv_data.as_mut_ptr() as u64,
            priv_data_size: d.info.priv_data_size,
            num_devices: d.info.num_devices,
            num_bos: d.info.num_bos,
            num_objects: d.info.num_objects,
            pid: 0,
            op: sys::KFD_CRIU_OP_CHECKPOINT,
        };
        let file = d.kfd.transport();
        let (r, handed) = criu_op(server.shared(), mode, &d.criu, file, &mut args);
        assert_eq!(r, Err(Errno::EFAULT), "the buckets are copied out last");
        assert_nothing_left(server.shared(), handed);

        // Still paused: the same checkpoint into writable buckets succeeds.
        let mut bos = vec![sys::kfd_criu_bo_bucket::default(); 2];
        args.bos = bos.as_mut_ptr() as u64;
        let (r, handed) = criu_op(server.shared(), mode, &d.criu, file, &mut args);
        assert_eq!(r, Ok(0));
        assert_delivered(server.shared(), mode, &bos, handed);
        d.kfd.criu_unpause().unwrap();
        server.shutdown();
    }
}
