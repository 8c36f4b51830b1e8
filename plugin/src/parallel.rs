//! Restoring buffer contents from criu's master process while the restored tasks go on
//! restoring (criu's development branch, which calls RESTORE_INIT and POST_FORKING).
//!
//! # The path
//!
//! - RESTORE_INIT (criu's master, before it forks the tasks): a `SOCK_SEQPACKET` socket pair. The
//!   master keeps one end ([`Hub`]); the other ([`TaskEnd`]) reaches the restored tasks through
//!   criu's fd store (`fdstore_add` here, `fdstore_get` in the task): criu closes every fd a task
//!   inherited before it restores the task's files, except its service fds, and the store is one
//!   of them. Outside criu (the in-process harness) the tasks share the end directly.
//! - RESTORE_EXT_FILE (the task): after `CRIU_OP(RESTORE)` created the BOs, the task sends the
//!   dma-bufs of the BOs with contents, their indices in the image, the image id and the GPU map
//!   (image GPU id to this node's render minor) as one or more [`Part`]s, and returns without
//!   copying anything. The fds it gets from the store and the dma-bufs are closed before the hook
//!   returns, so they never take a number one of the task's own files needs.
//! - POST_FORKING (the master, after the tasks were forked): a receiver thread starts. Each
//!   complete job (every part of an image) is checked against the image and filled in a thread of
//!   its own, through the copy engine, per GPU from that GPU's own pages file in its own order, as
//!   the in-task path does.
//! - RESUME_DEVICES_LATE (the master): takes what is still in the socket, waits for every fill of
//!   the restore (not only those of the pid it resumes: a task's queues may use a buffer another
//!   task created, and criu resumes them one by one), and fails if any fill, part or job failed.
//!   criu's development branch only logs a failing RESUME_DEVICES_LATE, so the plugin also kills
//!   the task it was asked to resume: criu's next step on that task (setting its registers before
//!   detaching) fails, and criu kills the tree and reports the restore failed. No task has run a
//!   single instruction of its own by then, and its queues were never started.
//!
//! # Wire format
//!
//! One message per part, native byte order (both ends are the same binary on the same machine):
//! a [`HEADER_BYTES`]-byte header (magic, image id, pid, buffers in the job, index of the first
//! buffer of this part, buffers in this part, GPU map entries, zero), then the GPU map (pairs of
//! image GPU id and render minor; in the first part only), then one image BO index per buffer;
//! the buffers' dma-bufs travel as `SCM_RIGHTS`, one per index, in the same order. A part has at
//! most [`MAX_FDS_PER_PART`] fds (the kernel's limit per message is 253).

use std::collections::BTreeMap;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The first word of every message ("AMPR").
pub(crate) const MAGIC: u32 = 0x414d_5052;

/// The header's size: eight `u32` words.
pub(crate) const HEADER_BYTES: usize = 32;

/// At most this many dma-bufs per message.
pub(crate) const MAX_FDS_PER_PART: usize = 250;

/// At most this many GPUs in a GPU map.
pub(crate) const MAX_GPUS: usize = 128;

/// The largest message: header, GPU map and indices.
pub(crate) const MAX_MESSAGE: usize = HEADER_BYTES + MAX_GPUS * 8 + MAX_FDS_PER_PART * 4;

/// How long a task's send may block on a full socket (the master's receiver gone or stuck).
const SEND_TIMEOUT: Duration = Duration::from_secs(120);

/// How often the master's receiver looks at its stop flag.
const POLL_MS: i32 = 100;

/// A message that is not a part of a job, or a part that does not fit the job.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum ProtocolError {
    /// Shorter than the header.
    #[error("a message of {0} bytes is shorter than the {HEADER_BYTES}-byte header")]
    Short(usize),
    /// Not our magic number.
    #[error("a message starts with {0:#010x}, not the parallel-restore magic {MAGIC:#010x}")]
    Magic(u32),
    /// The kernel cut the message or its fds (`MSG_TRUNC`, `MSG_CTRUNC`).
    #[error("a message or its fds were truncated in the socket")]
    Truncated,
    /// The length does not match the counts of the header.
    #[error(
        "image {image}: a message of {len} bytes, but its counts ({gpus} GPUs, {count} \
         buffers) need {need}"
    )]
    Length {
        /// The image id.
        image: u32,
        /// Bytes received.
        len: usize,
        /// GPU map entries announced.
        gpus: u32,
        /// Buffers announced.
        count: u32,
        /// Bytes those counts need.
        need: usize,
    },
    /// The message carries another number of fds than buffers.
    #[error("image {image}: a part of {count} buffers carries {fds} fds")]
    FdCount {
        /// The image id.
        image: u32,
        /// Buffers announced.
        count: u32,
        /// Fds received.
        fds: usize,
    },
    /// Counts out of range: an empty part, too many buffers or GPUs, a part beyond the job.
    #[error("image {image}: {what}")]
    Counts {
        /// The image id.
        image: u32,
        /// What is wrong.
        what: String,
    },
    /// Parts out of order or repeated.
    #[error("image {image}: {what}")]
    Sequence {
        /// The image id.
        image: u32,
        /// What is wrong.
        what: String,
    },
}

/// One message: some buffers of one image's job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Part {
    /// The `/dev/kfd` image id.
    pub image: u32,
    /// The sending task's pid, as it sees itself (for messages).
    pub pid: u32,
    /// Buffers in the whole job.
    pub total: u32,
    /// Index in the job of this part's first buffer.
    pub first: u32,
    /// (image GPU id, render minor on this node): in the first part only.
    pub gpus: Vec<(u32, u32)>,
    /// The image BO index of each buffer of this part (its dma-buf is the fd at the same place).
    pub bos: Vec<u32>,
}

/// A small size as the `u32` the C interfaces take (saturating: never reached here).
fn c_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn word(bytes: &[u8], i: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&bytes[i * 4..i * 4 + 4]);
    u32::from_ne_bytes(w)
}

impl Part {
    /// The message bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let words = [
            MAGIC,
            self.image,
            self.pid,
            self.total,
            self.first,
            u32::try_from(self.bos.len()).unwrap_or(u32::MAX),
            u32::try_from(self.gpus.len()).unwrap_or(u32::MAX),
            0,
        ];
        let mut out = Vec::with_capacity(HEADER_BYTES + self.gpus.len() * 8 + self.bos.len() * 4);
        for w in words
            .into_iter()
            .chain(self.gpus.iter().flat_map(|&(g, m)| [g, m]))
            .chain(self.bos.iter().copied())
        {
            out.extend_from_slice(&w.to_ne_bytes());
        }
        out
    }

    /// Decodes a message that came with `fds` fds.
    pub(crate) fn decode(bytes: &[u8], fds: usize) -> Result<Part, ProtocolError> {
        if bytes.len() < HEADER_BYTES {
            return Err(ProtocolError::Short(bytes.len()));
        }
        let magic = word(bytes, 0);
        if magic != MAGIC {
            return Err(ProtocolError::Magic(magic));
        }
        let (image, pid, total, first, count, gpus) = (
            word(bytes, 1),
            word(bytes, 2),
            word(bytes, 3),
            word(bytes, 4),
            word(bytes, 5),
            word(bytes, 6),
        );
        let counts = |what: String| ProtocolError::Counts { image, what };
        if count as usize > MAX_FDS_PER_PART {
            return Err(counts(format!(
                "a part of {count} buffers (at most {MAX_FDS_PER_PART})"
            )));
        }
        if gpus as usize > MAX_GPUS {
            return Err(counts(format!(
                "a GPU map of {gpus} GPUs (at most {MAX_GPUS})"
            )));
        }
        let need = HEADER_BYTES + gpus as usize * 8 + count as usize * 4;
        if bytes.len() != need {
            return Err(ProtocolError::Length {
                image,
                len: bytes.len(),
                gpus,
                count,
                need,
            });
        }
        if fds != count as usize {
            return Err(ProtocolError::FdCount { image, count, fds });
        }
        if count == 0 {
            return Err(counts("a part without buffers".to_owned()));
        }
        if first.checked_add(count).is_none_or(|end| end > total) {
            return Err(counts(format!(
                "buffers {first}..{} of a job of {total}",
                u64::from(first) + u64::from(count)
            )));
        }
        if (first == 0) != (gpus > 0) {
            return Err(counts(format!(
                "the part at buffer {first} has {gpus} GPU map entries (the first part has the \
                 map, the others none)"
            )));
        }
        let map_at = HEADER_BYTES / 4;
        let gpus = (0..gpus as usize)
            .map(|i| (word(bytes, map_at + 2 * i), word(bytes, map_at + 2 * i + 1)))
            .collect::<Vec<_>>();
        let bos_at = map_at + gpus.len() * 2;
        let bos = (0..count as usize)
            .map(|i| word(bytes, bos_at + i))
            .collect();
        Ok(Part {
            image,
            pid,
            total,
            first,
            gpus,
            bos,
        })
    }
}

/// Every part of one image's job: what the master fills.
#[derive(Debug)]
pub(crate) struct Job {
    /// The `/dev/kfd` image id.
    pub image: u32,
    /// The task's pid, as it sees itself.
    pub pid: u32,
    /// Image GPU id to render minor on this node.
    pub gpus: BTreeMap<u32, u32>,
    /// (image BO index, its dma-buf), in the order sent.
    pub bos: Vec<(u32, OwnedFd)>,
}

/// Collects parts into jobs.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    partial: BTreeMap<u32, Job>,
    totals: BTreeMap<u32, u32>,
    finished: std::collections::BTreeSet<u32>,
}

impl Assembler {
    /// Takes `part` and its fds; a complete job comes back.
    pub(crate) fn add(
        &mut self,
        part: Part,
        fds: Vec<OwnedFd>,
    ) -> Result<Option<Job>, ProtocolError> {
        let image = part.image;
        let seq = |what: String| ProtocolError::Sequence { image, what };
        if self.finished.contains(&image) {
            return Err(seq("a part after its job was complete".to_owned()));
        }
        match self.partial.get(&image) {
            None if part.first != 0 => {
                return Err(seq(format!(
                    "the part at buffer {} came before the first",
                    part.first
                )))
            }
            None => {
                let mut gpus = BTreeMap::new();
                for &(g, m) in &part.gpus {
                    if gpus.insert(g, m).is_some() {
                        return Err(seq(format!("GPU {g:#x} is twice in the GPU map")));
                    }
                }
                self.totals.insert(image, part.total);
                self.partial.insert(
                    image,
                    Job {
                        image,
                        pid: part.pid,
                        gpus,
                        bos: Vec::with_capacity(part.total as usize),
                    },
                );
            }
            Some(job) => {
                let total = self.totals.get(&image).copied().unwrap_or(0);
                if part.first as usize != job.bos.len() || part.total != total {
                    return Err(seq(format!(
                        "a part at buffer {} of a job of {} after {} of {total} buffers",
                        part.first,
                        part.total,
                        job.bos.len()
                    )));
                }
            }
        }
        let Some(job) = self.partial.get_mut(&image) else {
            return Ok(None);
        };
        job.bos.extend(part.bos.into_iter().zip(fds));
        if job.bos.len() as u64 == u64::from(part.total) {
            self.finished.insert(image);
            self.totals.remove(&image);
            return Ok(self.partial.remove(&image));
        }
        Ok(None)
    }

    /// Jobs some of whose parts never came, as (image, received, total).
    pub(crate) fn incomplete(&self) -> Vec<(u32, usize, u32)> {
        self.partial
            .values()
            .map(|j| {
                (
                    j.image,
                    j.bos.len(),
                    self.totals.get(&j.image).copied().unwrap_or(0),
                )
            })
            .collect()
    }
}

/// The parts of a job of `bos` (image index, dma-buf) with GPU map `gpus`.
pub(crate) fn parts(image: u32, pid: u32, gpus: &[(u32, u32)], bos: &[u32]) -> Vec<Part> {
    let total = u32::try_from(bos.len()).unwrap_or(u32::MAX);
    bos.chunks(MAX_FDS_PER_PART)
        .enumerate()
        .map(|(i, chunk)| Part {
            image,
            pid,
            total,
            first: u32::try_from(i * MAX_FDS_PER_PART).unwrap_or(u32::MAX),
            gpus: if i == 0 { gpus.to_vec() } else { Vec::new() },
            bos: chunk.to_vec(),
        })
        .collect()
}

/// `sendmsg` of `bytes` with `fds` as `SCM_RIGHTS`.
pub(crate) fn send_message(
    sock: BorrowedFd<'_>,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
) -> io::Result<()> {
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let fd_bytes = std::mem::size_of_val(raw.as_slice());
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(c_u32(fd_bytes)) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr().cast_mut().cast(),
        iov_len: bytes.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty one.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !raw.is_empty() {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: the control buffer is `space` bytes, room for one header and `raw`; the header
        // pointer is into it.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(c_u32(fd_bytes)) as _;
            std::ptr::copy_nonoverlapping(
                raw.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(cmsg),
                fd_bytes,
            );
        }
    }
    loop {
        // SAFETY: `msg` points to `iov` and `control`, which live across the call.
        let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if let Ok(n) = usize::try_from(n) {
            return if n == bytes.len() {
                Ok(())
            } else {
                Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!("sent {n} of {} bytes", bytes.len()),
                ))
            };
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// One message as received: its bytes, its fds, and whether the kernel truncated either.
#[derive(Debug)]
pub(crate) struct Received {
    /// The bytes.
    pub bytes: Vec<u8>,
    /// The fds (owned: closed with it).
    pub fds: Vec<OwnedFd>,
    /// `MSG_TRUNC` or `MSG_CTRUNC`.
    pub truncated: bool,
}

/// A non-blocking `recvmsg`: `Ok(None)` when nothing is waiting (or the peer is gone).
pub(crate) fn recv_message(sock: BorrowedFd<'_>) -> io::Result<Option<Received>> {
    let mut bytes = vec![0u8; MAX_MESSAGE + 1];
    let fd_room = (MAX_FDS_PER_PART + 8) * size_of::<RawFd>();
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(c_u32(fd_room)) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: bytes.as_mut_ptr().cast(),
        iov_len: bytes.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty one.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    let n = loop {
        // SAFETY: `msg` points to `iov` and `control`, which live across the call.
        let n = unsafe {
            libc::recvmsg(
                sock.as_raw_fd(),
                &mut msg,
                libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
            )
        };
        if let Ok(n) = usize::try_from(n) {
            break n;
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => return Ok(None),
            _ => return Err(e),
        }
    };
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `control` up to `msg_controllen`; the CMSG macros walk it within
    // those bounds, and each SCM_RIGHTS fd is a new fd of this process that nothing else owns.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let len = (*cmsg).cmsg_len as usize - (data as usize - cmsg as usize);
                for i in 0..len / size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if n == 0 && fds.is_empty() {
        return Ok(None);
    }
    bytes.truncate(n.min(MAX_MESSAGE + 1));
    Ok(Some(Received {
        truncated: msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 || n > MAX_MESSAGE,
        bytes,
        fds,
    }))
}

/// A connected `SOCK_SEQPACKET` pair (close-on-exec).
pub(crate) fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: `fds` has room for the two fds socketpair writes.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socketpair returned two new fds that nothing else owns.
    let pair = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let tv = libc::timeval {
        tv_sec: libc::time_t::try_from(SEND_TIMEOUT.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_usec: 0,
    };
    // SAFETY: `tv` is a timeval of the size given.
    let r = unsafe {
        libc::setsockopt(
            pair.1.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            std::ptr::from_ref(&tv).cast(),
            c_u32(size_of::<libc::timeval>()),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pair)
}

/// How the restored tasks reach the master's socket.
#[derive(Debug)]
pub(crate) enum TaskEnd {
    /// In criu's fd store under this id (criu closes the tasks' inherited fds).
    Stored(i32),
    /// Shared directly (outside criu: the in-process harness's tasks).
    Inherited(OwnedFd),
}

impl TaskEnd {
    /// An fd of the socket in the calling task (closed by the caller before its hook returns).
    pub(crate) fn socket(&self) -> io::Result<OwnedFd> {
        match self {
            TaskEnd::Stored(id) => crate::shim::fdstore_get(*id).ok_or_else(|| {
                io::Error::other(format!("criu's fd store has no socket under id {id}"))
            }),
            TaskEnd::Inherited(fd) => fd.try_clone(),
        }
    }
}

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
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
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
            let r = (hub.fill)(job);
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

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn fds(n: usize) -> Vec<OwnedFd> {
        (0..n)
            .map(|_| OwnedFd::from(std::fs::File::open("/dev/null").unwrap()))
            .collect()
    }

    fn part(first: u32, total: u32, bos: Vec<u32>) -> Part {
        Part {
            image: 7,
            pid: 100,
            total,
            first,
            gpus: if first == 0 {
                vec![(0x1111, 128), (0x2222, 129)]
            } else {
                Vec::new()
            },
            bos,
        }
    }

    #[test]
    fn a_part_decodes_to_itself() {
        let p = part(0, 3, vec![0, 2, 5]);
        assert_eq!(Part::decode(&p.encode(), 3), Ok(p));
    }

    fn header(words: [u32; 8]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_ne_bytes()).collect()
    }

    #[rstest]
    #[case::empty(
        Vec::new(),
        0,
        "a message of 0 bytes is shorter than the 32-byte header"
    )]
    #[case::short(vec![0; 31], 0, "a message of 31 bytes is shorter than the 32-byte header")]
    #[case::magic(header([1, 7, 1, 1, 0, 1, 0, 0]), 0, "not the parallel-restore magic")]
    #[case::missing_indices(
        header([MAGIC, 7, 1, 2, 0, 2, 0, 0]), 2,
        "image 7: a message of 32 bytes, but its counts (0 GPUs, 2 buffers) need 40"
    )]
    #[case::too_many_buffers(
        header([MAGIC, 7, 1, 1000, 0, 999, 0, 0]), 0, "a part of 999 buffers (at most 250)"
    )]
    #[case::too_many_gpus(header([MAGIC, 7, 1, 1, 0, 1, 4096, 0]), 1, "a GPU map of 4096 GPUs")]
    fn bad_headers_are_refused(
        #[case] bytes: Vec<u8>,
        #[case] nfds: usize,
        #[case] expected: &str,
    ) {
        let e = Part::decode(&bytes, nfds).unwrap_err();
        assert!(e.to_string().contains(expected), "{e}");
    }

    #[rstest]
    #[case::fewer_fds(part(0, 3, vec![0, 1, 2]), 2, "image 7: a part of 3 buffers carries 2 fds")]
    #[case::more_fds(part(0, 1, vec![0]), 2, "image 7: a part of 1 buffers carries 2 fds")]
    #[case::beyond_the_job(part(0, 2, vec![0, 1, 2]), 3, "buffers 0..3 of a job of 2")]
    #[case::empty_part(part(0, 0, vec![]), 0, "a part without buffers")]
    #[case::no_map_first(Part { gpus: vec![], ..part(0, 1, vec![0]) }, 1, "0 GPU map entries")]
    #[case::map_later(
        Part { gpus: vec![(1, 128)], ..part(1, 2, vec![1]) }, 1, "1 GPU map entries"
    )]
    fn counts_that_disagree_are_refused(
        #[case] p: Part,
        #[case] nfds: usize,
        #[case] expected: &str,
    ) {
        let e = Part::decode(&p.encode(), nfds).unwrap_err();
        assert!(e.to_string().contains(expected), "{e}");
    }

    #[test]
    fn a_job_is_assembled_from_its_parts_in_order() {
        let mut a = Assembler::default();
        assert!(a.add(part(0, 3, vec![4, 5]), fds(2)).unwrap().is_none());
        assert_eq!(a.incomplete(), vec![(7, 2, 3)]);
        let job = a.add(part(2, 3, vec![9]), fds(1)).unwrap().unwrap();
        assert_eq!(job.bos.iter().map(|b| b.0).collect::<Vec<_>>(), [4, 5, 9]);
        assert_eq!(job.gpus, BTreeMap::from([(0x1111, 128), (0x2222, 129)]));
        assert!(a.incomplete().is_empty());
        let e = a.add(part(0, 1, vec![1]), fds(1)).unwrap_err();
        assert!(e.to_string().contains("after its job was complete"), "{e}");
    }

    #[rstest]
    #[case::later_part_first(vec![part(1, 2, vec![1])], "came before the first")]
    #[case::gap(vec![part(0, 4, vec![0]), part(2, 4, vec![2])], "a part at buffer 2 of a job of 4 after 1")]
    #[case::total_changes(vec![part(0, 4, vec![0]), part(1, 5, vec![1])], "of a job of 5 after 1 of 4")]
    #[case::gpu_twice(
        vec![Part { gpus: vec![(1, 128), (1, 129)], ..part(0, 1, vec![0]) }],
        "GPU 0x1 is twice"
    )]
    fn parts_out_of_sequence_are_refused(#[case] parts: Vec<Part>, #[case] expected: &str) {
        let mut a = Assembler::default();
        let n = parts.len();
        let mut last = None;
        for (i, p) in parts.into_iter().enumerate() {
            let k = p.bos.len();
            let r = a.add(p, fds(k));
            if i + 1 == n {
                last = Some(r);
            } else {
                r.unwrap();
            }
        }
        let e = last.unwrap().unwrap_err();
        assert!(e.to_string().contains(expected), "{e}");
    }

    #[test]
    fn a_large_job_is_split_below_the_kernels_fd_limit() {
        let bos: Vec<u32> = (0..600).collect();
        let ps = parts(3, 9, &[(1, 128)], &bos);
        assert_eq!(
            ps.iter()
                .map(|p| (p.first, p.bos.len(), p.gpus.len()))
                .collect::<Vec<_>>(),
            [(0, 250, 1), (250, 250, 0), (500, 100, 0)]
        );
        let mut a = Assembler::default();
        let mut job = None;
        for p in ps {
            let bytes = p.encode();
            let p = Part::decode(&bytes, p.bos.len()).unwrap();
            let k = p.bos.len();
            job = a.add(p, fds(k)).unwrap();
        }
        assert_eq!(job.unwrap().bos.len(), 600);
    }

    #[test]
    fn messages_and_fds_cross_the_socket() {
        let (master, task) = socket_pair().unwrap();
        assert!(
            recv_message(master.as_fd()).unwrap().is_none(),
            "nothing yet"
        );
        let p = part(0, 2, vec![3, 8]);
        let files = fds(2);
        let borrowed: Vec<BorrowedFd<'_>> = files.iter().map(AsFd::as_fd).collect();
        send_message(task.as_fd(), &p.encode(), &borrowed).unwrap();
        let m = recv_message(master.as_fd()).unwrap().unwrap();
        assert!(!m.truncated);
        assert_eq!(m.fds.len(), 2);
        assert_eq!(Part::decode(&m.bytes, m.fds.len()), Ok(p));
    }

    #[test]
    fn garbage_from_a_task_fails_the_wait_with_its_reason() {
        let (master, task) = socket_pair().unwrap();
        let filler: Arc<Filler> = Arc::new(|job: Job| Ok(job.bos.len() as u64));
        let hub = Arc::new(Hub::new(master, TaskEnd::Inherited(task), 1, filler));
        let sock = hub.task_end.socket().unwrap();
        send_message(sock.as_fd(), b"short", &[]).unwrap();
        let good = part(0, 1, vec![0]);
        let one = fds(1);
        send_message(sock.as_fd(), &good.encode(), &[one[0].as_fd()]).unwrap();
        let e = hub.wait().unwrap_err();
        assert!(e.contains("a message of 5 bytes is shorter"), "{e}");
        hub.shut_down();
    }

    #[test]
    fn a_complete_job_is_filled_and_counted() {
        let (master, task) = socket_pair().unwrap();
        let filler: Arc<Filler> = Arc::new(|job: Job| Ok(100 * job.bos.len() as u64));
        let hub = Arc::new(Hub::new(master, TaskEnd::Inherited(task), 1, filler));
        hub.start().unwrap();
        let sock = hub.task_end.socket().unwrap();
        let bos: Vec<u32> = (0..300).collect();
        let files = fds(300);
        for p in parts(5, 2, &[(1, 128)], &bos) {
            let start = p.first as usize;
            let these: Vec<BorrowedFd<'_>> = files[start..start + p.bos.len()]
                .iter()
                .map(AsFd::as_fd)
                .collect();
            send_message(sock.as_fd(), &p.encode(), &these).unwrap();
        }
        assert_eq!(
            hub.wait(),
            Ok(Summary {
                jobs: 1,
                bytes: 30_000
            })
        );
        hub.shut_down();
    }

    #[test]
    fn the_receiver_ends_when_every_task_end_is_closed() {
        let (master, task) = socket_pair().unwrap();
        let filler: Arc<Filler> = Arc::new(|job: Job| Ok(job.bos.len() as u64));
        let sock = task.try_clone().unwrap();
        drop(task);
        let (spare, _) = socket_pair().unwrap();
        let hub = Arc::new(Hub::new(master, TaskEnd::Inherited(spare), 1, filler));
        hub.start().unwrap();
        let one = fds(1);
        send_message(
            sock.as_fd(),
            &part(0, 1, vec![0]).encode(),
            &[one[0].as_fd()],
        )
        .unwrap();
        drop(sock);
        // The receiver takes what was queued and stops by itself (no stop flag: a receiver
        // that went on would hang the test here).
        let receiver = lock(&hub.worker).take().unwrap();
        receiver.join().unwrap();
        assert_eq!(hub.wait(), Ok(Summary { jobs: 1, bytes: 1 }));
    }

    #[test]
    fn an_incomplete_job_fails_the_wait() {
        let (master, task) = socket_pair().unwrap();
        let filler: Arc<Filler> = Arc::new(|_| Ok(0));
        let hub = Arc::new(Hub::new(master, TaskEnd::Inherited(task), 1, filler));
        let sock = hub.task_end.socket().unwrap();
        let one = fds(1);
        send_message(
            sock.as_fd(),
            &part(0, 2, vec![0]).encode(),
            &[one[0].as_fd()],
        )
        .unwrap();
        assert_eq!(
            hub.wait(),
            Err("image 7: 1 of the job's 2 buffers arrived".to_owned())
        );
    }
}
