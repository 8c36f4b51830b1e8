//! The FUSE requests of a device and their answers: OPEN (a simulated open file), IOCTL (the
//! driver's dispatcher, through the caller as a [`CuseClient`]), RELEASE, INTERRUPT (a caller
//! with a signal pending: `WAIT_EVENTS` ends with `EINTR`), and the rest.
//!
//! Files: FUSE_OPEN creates a simulated open file, registered in the machine under a synthetic
//! key `(CUSE_FILE_DEV, fh)` ([`cuse_file_key`]), where `fh` is the handle returned to the
//! kernel, which the kernel sends back with every later request on that open file. FUSE_RELEASE
//! (the last close of the file in every process) drops it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use kfd_abi::Errno;

use super::bridge::{self, HandOvers};
use super::client::CuseClient;
use super::os::ProcStatus;
use super::proto::{self, InHeader, Opcode};
use super::shared::{DeviceRole, OpenEntry, Shared};
use super::threads::Device;
use super::{cuse_file_key, SIM_PROBE};
use crate::host::lock;
use crate::state::machine::{FileKind, OpenFile};
use crate::state::process::KfdProcess;
use crate::state::render_file::RenderFile;

impl Shared {
    /// Handles one request; `None` when the kernel wants no reply.
    pub(super) fn handle(&self, dev: &Device, req: &[u8]) -> Option<Vec<u8>> {
        let (h, body) = match proto::parse_request(req) {
            Ok(r) => r,
            Err(e) => {
                log::warn!("kfd-simd: {}: malformed request: {e}", dev.info.devname);
                // Answer it if the header at least names it, so that the caller is not stuck.
                let unique = req.get(8..16)?.try_into().ok().map(u64::from_ne_bytes)?;
                return Some(proto::error_reply(unique, Errno::EIO));
            }
        };
        let reply = match h.opcode {
            Opcode::Open => self.open(dev, &h, body),
            Opcode::Ioctl => {
                let signal = Arc::new(AtomicBool::new(false));
                lock(&dev.inflight).insert(h.unique, Arc::clone(&signal));
                let reply = self.ioctl(dev, &h, body, &signal);
                lock(&dev.inflight).remove(&h.unique);
                reply
            }
            Opcode::Release => {
                if let Ok(fh) = proto::fh_of(body) {
                    self.release(fh);
                }
                proto::empty_reply(h.unique)
            }
            // Neither /dev/kfd nor our render nodes can be read or written (no DRM events).
            Opcode::Read | Opcode::Write | Opcode::Fsync => {
                proto::error_reply(h.unique, Errno::EINVAL)
            }
            Opcode::Flush | Opcode::Destroy => proto::empty_reply(h.unique),
            // ENOSYS: the kernel stops asking and reports the default mask.
            Opcode::Poll => proto::error_reply(h.unique, Errno::ENOSYS),
            Opcode::Interrupt => return self.interrupt(dev, &h, body),
            Opcode::Forget => return None,
            Opcode::CuseInit | Opcode::Unknown(_) => proto::error_reply(h.unique, Errno::ENOSYS),
        };
        Some(reply)
    }

    fn open(&self, dev: &Device, h: &InHeader, body: &[u8]) -> Vec<u8> {
        if proto::OpenIn::parse(body).is_err() {
            return proto::error_reply(h.unique, Errno::EINVAL);
        }
        let st = match ProcStatus::read(h.pid) {
            Ok(st) => st,
            Err(_) => return proto::error_reply(h.unique, Errno::ESRCH),
        };
        let kind = match dev.info.role {
            DeviceRole::Kfd => match self.kfd_process_of(st.tgid, h.pid) {
                Ok(p) => FileKind::Kfd(p),
                Err(e) => return proto::error_reply(h.unique, e),
            },
            DeviceRole::Render { index, .. } => FileKind::Render(RenderFile::new(index)),
        };
        let fh = self.next_fh.fetch_add(1, Ordering::SeqCst);
        let file = Arc::new(OpenFile {
            key: cuse_file_key(fh),
            kind,
        });
        self.machine.register_file(&file);
        let render_ptr = match &file.kind {
            FileKind::Render(r) => r as *const RenderFile,
            FileKind::Kfd(_) => std::ptr::null(),
        };
        lock(&self.files).insert(fh, OpenEntry { file });
        log::debug!(
            "kfd-simd: {} opened by pid {} tid {} (fh {fh}, render file {:p})",
            dev.info.devname,
            st.tgid,
            h.pid,
            render_ptr
        );
        proto::open_reply(h.unique, fh)
    }

    fn release(&self, fh: u64) {
        let gone = lock(&self.files).remove(&fh);
        log::debug!("kfd-simd: release of fh {fh} ({})", gone.is_some());
        drop(gone);
    }

    /// FUSE_INTERRUPT: the caller of request `unique` has a signal pending (criu freezing it,
    /// a handler, SIGKILL). Only WAIT_EVENTS sleeps long enough to care; it is woken and answers
    /// `EINTR` (the driver's `-ERESTARTSYS`, which FUSE cannot carry; libhsakmt retries on
    /// `EINTR`). An interrupt for a request we have not started yet is answered `EAGAIN`, and the
    /// kernel sends it again; one for a request already answered needs nothing.
    fn interrupt(&self, dev: &Device, h: &InHeader, body: &[u8]) -> Option<Vec<u8>> {
        let Ok(unique) = proto::interrupted_unique(body) else {
            log::warn!("kfd-simd: {}: malformed interrupt", dev.info.devname);
            return None;
        };
        let Some(signal) = lock(&dev.inflight).get(&unique).cloned() else {
            log::debug!(
                "kfd-simd: {}: interrupt of request {unique}, not being served",
                dev.info.devname
            );
            return Some(proto::error_reply(h.unique, Errno::EAGAIN));
        };
        log::debug!(
            "kfd-simd: {}: interrupt of request {unique}",
            dev.info.devname
        );
        signal.store(true, Ordering::SeqCst);
        self.wake_event_waiters();
        None
    }

    /// Wakes every event waiter; the interrupted ones see their flag, the others sleep again.
    /// Taking each process's lock first orders the wake-up after a waiter's flag check.
    pub(super) fn wake_event_waiters(&self) {
        let procs: Vec<Arc<KfdProcess>> = lock(&self.procs)
            .values()
            .filter_map(|e| e.kfd.clone())
            .collect();
        for p in procs {
            let _state = p.lock();
            p.events_cv.notify_all();
        }
    }

    fn ioctl(&self, dev: &Device, h: &InHeader, body: &[u8], signal: &AtomicBool) -> Vec<u8> {
        let Ok(io) = proto::IoctlIn::parse(body) else {
            return proto::error_reply(h.unique, Errno::EINVAL);
        };
        let file = match lock(&self.files).get(&io.fh) {
            Some(e) => Arc::clone(&e.file),
            None => return proto::ioctl_reply(h.unique, Err(Errno::EBADF)),
        };
        let st = match ProcStatus::read(h.pid) {
            Ok(st) => st,
            Err(_) => return proto::ioctl_reply(h.unique, Err(Errno::ESRCH)),
        };
        let bridge = lock(&self.bridge).clone();
        let handovers = bridge.as_ref().map(|_| HandOvers::default());
        let client = CuseClient {
            shared: self,
            tid: h.pid,
            status: st,
            may_probe: dev.info.role == DeviceRole::Kfd,
            signal,
            arg: io.arg,
            handovers: handovers.as_ref(),
        };
        log::trace!(
            "kfd-simd: {} {} on fh {} by tid {} (tgid {})",
            dev.info.devname,
            kfd_abi::ioctl::name(io.cmd),
            io.fh,
            h.pid,
            client.status.tgid
        );
        let r = match io.cmd {
            kfd_abi::cuse::SIM_DAEMON_PID => {
                use crate::client::Client;
                client
                    .write_user(io.arg, &self.own_pid.to_ne_bytes())
                    .map(|()| 0)
            }
            kfd_abi::cuse::SIM_CLOSE_FD => client.close_installed(io.arg),
            SIM_PROBE if st.tgid == self.own_pid => i32::try_from(io.fh).map_err(|_| Errno::EBADF),
            bridge::proto::SIM_MMAP if bridge.is_some() => {
                let caller = self.kfd_process_if_any(st.tgid);
                bridge.as_ref().map_or(Err(Errno::EINVAL), |b| {
                    b.answer_mmap(&self.machine, &file, caller.as_ref(), h.pid, io.arg)
                })
            }
            cmd => {
                if let (FileKind::Kfd(p), Some(b)) = (&file.kind, &bridge) {
                    // What the process unmapped before this call, as amdkfd's notifier has
                    // applied it by now (CRIU_OP comes on the dumped process's file: its too).
                    b.apply_unmaps(p);
                    if let Some(target) = self.criu_resume_target(&client, cmd, io.arg) {
                        b.apply_unmaps(&target);
                    }
                }
                crate::fops::ioctl(&self.machine, &file, &client, cmd, io.arg)
            }
        };
        // The fds this call installs reach the caller through the module, before our answer.
        let r = match (r, bridge, handovers) {
            (Ok(v), Some(b), Some(fds)) => b.deliver(h.pid, fds.into_inner()).map(|()| v),
            (r, ..) => r,
        };
        proto::ioctl_reply(h.unique, r)
    }

    /// The process that a CRIU_OP RESUME at `arg` names, which criu issues on a file of its
    /// own, not of that process. What the restored process unmapped until now (criu's restorer
    /// moving its mappings into place) is applied before RESUME makes its SVM ranges, as amdkfd
    /// creates them only then.
    fn criu_resume_target(
        &self,
        client: &CuseClient<'_>,
        cmd: u32,
        arg: u64,
    ) -> Option<Arc<KfdProcess>> {
        use crate::client::Client;
        use std::mem::offset_of;
        if cmd != kfd_abi::ioctl::kfd::CRIU_OP {
            return None;
        }
        let field = |off: usize| {
            let mut w = [0u8; 4];
            let at = arg.checked_add(off as u64)?;
            client.read_user(at, &mut w).ok()?;
            Some(u32::from_ne_bytes(w))
        };
        if field(offset_of!(kfd_sys::kfd_ioctl_criu_args, op))? != kfd_sys::KFD_CRIU_OP_RESUME {
            return None;
        }
        let pid = field(offset_of!(kfd_sys::kfd_ioctl_criu_args, pid))?;
        self.machine.find_process(pid)
    }

    /// Whether `fh` is an open file of ours.
    pub(crate) fn has_file(&self, fh: u64) -> bool {
        lock(&self.files).contains_key(&fh)
    }
}
