//! The parallel restore's socket calls: a `SOCK_SEQPACKET` pair, a message with its dma-bufs
//! sent as `SCM_RIGHTS` and received without blocking, and how a restored task reaches the
//! master's socket ([`TaskEnd`]).

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use super::wire::{MAX_FDS_PER_PART, MAX_MESSAGE};

/// How long a task's send may block on a full socket (the master's receiver gone or stuck).
const SEND_TIMEOUT: Duration = Duration::from_secs(120);

/// A small size as the `u32` the C interfaces take (saturating: never reached here).
fn c_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
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
            TaskEnd::Stored(id) => crate::host::criu().fdstore_get(*id).ok_or_else(|| {
                io::Error::other(format!("criu's fd store has no socket under id {id}"))
            }),
            TaskEnd::Inherited(fd) => fd.try_clone(),
        }
    }
}
