//! The parallel restore's workers in criu's master: the receiver thread that assembles the
//! tasks' parts into jobs, a thread per job that fills it, and the wait before the tasks resume
//! ([`Hub`]).

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use super::socket::{recv_message, Received, TaskEnd};
use super::wire::{Assembler, Job, Part, ProtocolError};

/// How often the master's receiver looks at its stop flag.
const POLL_MS: i32 = 100;

/// What filling a job did: bytes written, or why it failed.
pub(crate) type FillResult = Result<u64, String>;

/// Fills one job (the engine's copy through the copy engine).
pub(crate) type Filler = dyn Fn(Job) -> FillResult + Send + Sync;

#[derive(Debug, Default)]
struct HubState {
    assembler: Assembler,
    /// Fills running.
    running: usize,
    /// Jobs filled: (image, pid, bytes).
    filled: Vec<(u32, u32, u64)>,
    /// Everything that failed, as messages.
    errors: Vec<String>,
}

/// What RESUME_DEVICES_LATE learns once every fill is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Summary {
    /// Jobs filled.
    pub jobs: usize,
    /// Bytes written.
    pub bytes: u64,
}

/// The master's end: receives parts, runs fills, answers RESUME_DEVICES_LATE.
pub(crate) struct Hub {
    sock: OwnedFd,
    /// What the tasks use.
    pub task_end: TaskEnd,
    /// The pid (as the platform sees it) of the process that made it.
    pub owner: u32,
    fill: Arc<Filler>,
    state: Mutex<HubState>,
    done: Condvar,
    receiving: Mutex<()>,
    stop: AtomicBool,
    pub(super) worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("sock", &self.sock)
            .field("task_end", &self.task_end)
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Spawns `f` with SIGCHLD blocked in the new thread: criu's master handles SIGCHLD of its
/// tasks in its main thread, and a thread of ours must never take it.
fn spawn_quiet(
    name: &str,
    f: impl FnOnce() + Send + 'static,
) -> io::Result<std::thread::JoinHandle<()>> {
    // SAFETY: sigset_t is plain data, initialised by sigemptyset before use.
    let (mut block, mut old): (libc::sigset_t, libc::sigset_t) =
        unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    // SAFETY: both sets are valid sigset_t; pthread_sigmask changes only this thread's mask,
    // and the old mask is put back right after the spawn (the new thread inherits the blocked
    // one).
    unsafe {
        libc::sigemptyset(&mut block);
        libc::sigaddset(&mut block, libc::SIGCHLD);
        libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old);
    }
    let handle = std::thread::Builder::new().name(name.to_owned()).spawn(f);
    // SAFETY: `old` is the mask pthread_sigmask returned above.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
    handle
}

/// Fills `job`, a panic of the filler becoming its error: the fill is counted as finished
/// either way, so [`Hub::wait`] reports it rather than waiting for it for ever.
///
/// `AssertUnwindSafe`: the filler's own state after a panic is not looked at again; the job's
/// buffers keep whatever was written, and the error fails the restore.
fn fill_caught(fill: &Filler, job: Job) -> FillResult {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fill(job))).unwrap_or_else(|payload| {
        let what = crate::logger::panic_message(&*payload);
        Err(format!(
            "the fill thread panicked ({what}); please report this as a bug"
        ))
    })
}

impl Hub {
    /// A hub on `sock` whose tasks use `task_end`, filling jobs with `fill`.
    pub(crate) fn new(sock: OwnedFd, task_end: TaskEnd, owner: u32, fill: Arc<Filler>) -> Self {
        Self {
            sock,
            task_end,
            owner,
            fill,
            state: Mutex::new(HubState::default()),
            done: Condvar::new(),
            receiving: Mutex::new(()),
            stop: AtomicBool::new(false),
            worker: Mutex::new(None),
        }
    }

    /// Takes every message waiting in the socket, starting a fill for each complete job;
    /// `false` when the socket failed (nothing more will come).
    pub(crate) fn pump(self: &Arc<Self>) -> bool {
        let _one = lock(&self.receiving);
        loop {
            match recv_message(self.sock.as_fd()) {
                Ok(None) => return true,
                Ok(Some(m)) => self.take(m),
                Err(e) => {
                    log::error!("parallel restore: receiving from the restored tasks: {e}");
                    lock(&self.state)
                        .errors
                        .push(format!("receiving from the restored tasks: {e}"));
                    return false;
                }
            }
        }
    }

    fn take(self: &Arc<Self>, m: Received) {
        let decoded = if m.truncated {
            Err(ProtocolError::Truncated)
        } else {
            Part::decode(&m.bytes, m.fds.len())
        };
        let mut state = lock(&self.state);
        let job = decoded.and_then(|part| state.assembler.add(part, m.fds));
        let job = match job {
            Ok(Some(job)) => job,
            Ok(None) => return,
            Err(e) => {
                log::error!("parallel restore: a message from a restored task refused: {e}");
                state.errors.push(e.to_string());
                return;
            }
        };
        state.running += 1;
        drop(state);
        let (image, pid) = (job.image, job.pid);
        log::info!(
            "parallel restore: filling image {image} (pid {pid}): {} buffers",
            job.bos.len()
        );
        let hub = Arc::clone(self);
        let spawned = spawn_quiet(&format!("amdgpu-fill-{image}"), move || {
            let r = fill_caught(&*hub.fill, job);
            hub.finish(image, pid, r);
        });
        if let Err(e) = spawned {
            self.finish(image, pid, Err(format!("starting a fill thread: {e}")));
        }
    }

    fn finish(&self, image: u32, pid: u32, r: FillResult) {
        let mut state = lock(&self.state);
        state.running -= 1;
        match r {
            Ok(bytes) => {
                log::info!("parallel restore: image {image} (pid {pid}): {bytes} bytes written");
                state.filled.push((image, pid, bytes));
            }
            Err(e) => {
                log::error!("parallel restore: image {image} (pid {pid}): {e}");
                state.errors.push(format!("image {image} (pid {pid}): {e}"));
            }
        }
        drop(state);
        self.done.notify_all();
    }

    /// Starts the receiver thread (POST_FORKING).
    pub(crate) fn start(self: &Arc<Self>) -> io::Result<()> {
        let mut worker = lock(&self.worker);
        if worker.is_some() {
            return Ok(());
        }
        let hub = Arc::clone(self);
        *worker = Some(spawn_quiet("amdgpu-parallel", move || {
            while !hub.stop.load(Ordering::SeqCst) {
                let mut pfd = libc::pollfd {
                    fd: hub.sock.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                let n = unsafe { libc::poll(&mut pfd, 1, POLL_MS) };
                if n > 0 && !hub.pump() {
                    break;
                }
                // Every task end closed (or the socket broken): what was queued is taken, and
                // nothing else can come; RESUME_DEVICES_LATE sees any job left incomplete.
                if pfd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
                    break;
                }
            }
        })?);
        Ok(())
    }

    /// Takes what is waiting, waits for every fill, and says whether all went well.
    pub(crate) fn wait(self: &Arc<Self>) -> Result<Summary, String> {
        let _ = self.pump();
        let state = self.idle();
        let mut errors = state.errors.clone();
        errors.extend(
            state
                .assembler
                .incomplete()
                .into_iter()
                .map(|(image, got, total)| {
                    format!("image {image}: {got} of the job's {total} buffers arrived")
                }),
        );
        if errors.is_empty() {
            Ok(Summary {
                jobs: state.filled.len(),
                bytes: state.filled.iter().map(|f| f.2).sum(),
            })
        } else {
            Err(errors.join("; "))
        }
    }

    /// Stops the receiver and waits for running fills (criu's `exit`).
    pub(crate) fn shut_down(&self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(w) = lock(&self.worker).take() {
            let _ = w.join();
        }
        drop(self.idle());
    }

    /// The state, once no fill runs any more.
    fn idle(&self) -> std::sync::MutexGuard<'_, HubState> {
        let mut state = lock(&self.state);
        while state.running > 0 {
            state = self
                .done
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        state
    }
}
