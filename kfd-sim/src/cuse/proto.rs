//! The FUSE/CUSE wire format, as much of it as a CUSE device server needs: request parsing and
//! reply encoding, pure functions over bytes (native endian, as `<linux/fuse.h>` lays them out).
//!
//! Layouts (all fields native-endian, sizes in bytes):
//! - `fuse_in_header` (40): len u32, opcode u32, unique u64, nodeid u64, uid u32, gid u32,
//!   pid u32 (the caller's thread id), total_extlen u16, padding u16.
//! - `fuse_out_header` (16): len u32, error i32 (0 or -errno), unique u64.
//! - `cuse_init_in` (16): major, minor, unused, flags (u32 each).
//! - `cuse_init_out` (72): major, minor, unused, flags, max_read, max_write, dev_major, dev_minor,
//!   `spare[10]` (u32 each), followed by the device info: NUL-terminated `KEY=VALUE` strings.
//! - `fuse_open_in` (8): flags, open_flags; `fuse_open_out` (16): fh u64, open_flags, padding.
//! - `fuse_release_in` (24): fh u64, flags, release_flags, lock_owner u64.
//! - `fuse_ioctl_in` (32): fh u64, flags u32, cmd u32, arg u64, in_size u32, out_size u32;
//!   `fuse_ioctl_out` (16): result i32, flags, in_iovs, out_iovs.
//! - `fuse_interrupt_in` (8): unique u64.

use kfd_abi::Errno;

/// The FUSE protocol major version (7).
pub(super) const FUSE_KERNEL_VERSION: u32 = 7;
/// The protocol minor we speak at most; the kernel needs at least 11 from a CUSE server.
pub(super) const FUSE_KERNEL_MINOR_VERSION: u32 = 31;
/// The oldest minor the kernel accepts in a CUSE_INIT reply.
pub(super) const CUSE_MIN_MINOR: u32 = 11;
/// `cuse_init_in/out.flags`: ioctls are passed unrestricted (raw command and argument address).
pub(super) const CUSE_UNRESTRICTED_IOCTL: u32 = 1 << 0;
/// `fuse_ioctl_in.flags`: the ioctl is unrestricted (what the kernel sends us, since we ask for
/// it; the tests play the kernel).
#[cfg(test)]
pub(super) const FUSE_IOCTL_UNRESTRICTED: u32 = 1 << 1;
/// The device info string may be at most this long (one page).
pub(super) const CUSE_INFO_MAX: usize = 4096;

/// Size of `fuse_in_header`.
pub(super) const IN_HEADER_LEN: usize = 40;
/// Size of `fuse_out_header`.
pub(super) const OUT_HEADER_LEN: usize = 16;
/// Size of `cuse_init_out`.
pub(super) const CUSE_INIT_OUT_LEN: usize = 72;

/// A request opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Opcode {
    /// FUSE_OPEN (14).
    Open,
    /// FUSE_READ (15).
    Read,
    /// FUSE_WRITE (16).
    Write,
    /// FUSE_RELEASE (18).
    Release,
    /// FUSE_FSYNC (20).
    Fsync,
    /// FUSE_FLUSH (25).
    Flush,
    /// FUSE_INTERRUPT (36): no reply.
    Interrupt,
    /// FUSE_DESTROY (38).
    Destroy,
    /// FUSE_IOCTL (39).
    Ioctl,
    /// FUSE_POLL (40).
    Poll,
    /// FUSE_FORGET (2) and FUSE_BATCH_FORGET (42): no reply.
    Forget,
    /// CUSE_INIT (4096).
    CuseInit,
    /// Anything else.
    Unknown(u32),
}

impl Opcode {
    /// Decodes an opcode.
    pub(super) fn from_u32(v: u32) -> Self {
        match v {
            14 => Self::Open,
            15 => Self::Read,
            16 => Self::Write,
            18 => Self::Release,
            20 => Self::Fsync,
            25 => Self::Flush,
            36 => Self::Interrupt,
            38 => Self::Destroy,
            39 => Self::Ioctl,
            40 => Self::Poll,
            2 | 42 => Self::Forget,
            4096 => Self::CuseInit,
            other => Self::Unknown(other),
        }
    }

    /// Whether the kernel expects an answer to this request.
    pub(super) fn wants_reply(self) -> bool {
        !matches!(self, Self::Interrupt | Self::Forget)
    }
}

/// Why bytes read from /dev/cuse are not a request we understand.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum ProtoError {
    /// Fewer bytes than a header, or than the header's `len`.
    #[error("short request: {got} bytes, need {need}")]
    Short {
        /// Bytes available.
        got: usize,
        /// Bytes needed.
        need: usize,
    },
    /// The header's `len` disagrees with the bytes read.
    #[error("request length {len} but {got} bytes were read")]
    Length {
        /// `fuse_in_header.len`.
        len: u32,
        /// Bytes read.
        got: usize,
    },
    /// The device name cannot be registered.
    #[error("bad device name {0:?}: must be non-empty, without NUL, and short")]
    DevName(String),
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(off..off + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(off..off + 8)?.try_into().ok()?))
}

fn need(b: &[u8], n: usize) -> Result<(), ProtoError> {
    if b.len() < n {
        Err(ProtoError::Short {
            got: b.len(),
            need: n,
        })
    } else {
        Ok(())
    }
}

/// `fuse_in_header`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct InHeader {
    /// Total request length, header included.
    pub len: u32,
    /// The operation.
    pub opcode: Opcode,
    /// The request id, echoed in the reply.
    pub unique: u64,
    /// Node id (unused by CUSE).
    pub nodeid: u64,
    /// Caller's fsuid.
    pub uid: u32,
    /// Caller's fsgid.
    pub gid: u32,
    /// Caller's thread id (0 when the kernel has none to give, e.g. a release at exit).
    pub pid: u32,
    /// Length of extensions, in 8-byte units.
    pub total_extlen: u16,
}

/// Splits one request read from /dev/cuse into its header and body.
pub(super) fn parse_request(buf: &[u8]) -> Result<(InHeader, &[u8]), ProtoError> {
    need(buf, IN_HEADER_LEN)?;
    let short = || ProtoError::Short {
        got: buf.len(),
        need: IN_HEADER_LEN,
    };
    let len = u32_at(buf, 0).ok_or_else(short)?;
    let h = InHeader {
        len,
        opcode: Opcode::from_u32(u32_at(buf, 4).ok_or_else(short)?),
        unique: u64_at(buf, 8).ok_or_else(short)?,
        nodeid: u64_at(buf, 16).ok_or_else(short)?,
        uid: u32_at(buf, 24).ok_or_else(short)?,
        gid: u32_at(buf, 28).ok_or_else(short)?,
        pid: u32_at(buf, 32).ok_or_else(short)?,
        total_extlen: u16_at(buf, 36).ok_or_else(short)?,
    };
    if usize::try_from(len).ok() != Some(buf.len()) || buf.len() < IN_HEADER_LEN {
        return Err(ProtoError::Length {
            len,
            got: buf.len(),
        });
    }
    Ok((h, &buf[IN_HEADER_LEN..]))
}

/// `cuse_init_in`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct CuseInitIn {
    /// Protocol major of the kernel.
    pub major: u32,
    /// Protocol minor of the kernel.
    pub minor: u32,
    /// Flags the kernel offers (`CUSE_UNRESTRICTED_IOCTL`).
    pub flags: u32,
}

impl CuseInitIn {
    /// Decodes the body of a CUSE_INIT request.
    pub(super) fn parse(body: &[u8]) -> Result<Self, ProtoError> {
        need(body, 16)?;
        Ok(Self {
            major: u32_at(body, 0).unwrap_or(0),
            minor: u32_at(body, 4).unwrap_or(0),
            flags: u32_at(body, 12).unwrap_or(0),
        })
    }
}

/// What the server answers to CUSE_INIT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct CuseInitOut {
    /// Protocol minor (major is always 7).
    pub minor: u32,
    /// `CUSE_UNRESTRICTED_IOCTL` or 0.
    pub flags: u32,
    /// Largest read the server handles (the kernel uses at least 4096).
    pub max_read: u32,
    /// Largest write the server handles (the kernel uses at least 4096).
    pub max_write: u32,
    /// Character device major (0: the kernel picks one).
    pub dev_major: u32,
    /// Character device minor.
    pub dev_minor: u32,
}

/// The protocol minor to answer with: ours, or the kernel's when that is older. `None` when the
/// kernel is too old for CUSE as we use it.
pub(super) fn negotiate_minor(init: &CuseInitIn) -> Option<u32> {
    if init.major != FUSE_KERNEL_VERSION {
        return None;
    }
    let minor = init.minor.min(FUSE_KERNEL_MINOR_VERSION);
    (minor >= CUSE_MIN_MINOR).then_some(minor)
}

fn header(buf: &mut Vec<u8>, error: i32, unique: u64) {
    buf.extend_from_slice(&0u32.to_ne_bytes()); // len, set by `finish`
    buf.extend_from_slice(&error.to_ne_bytes());
    buf.extend_from_slice(&unique.to_ne_bytes());
}

fn finish(mut buf: Vec<u8>) -> Vec<u8> {
    let len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
    buf[..4].copy_from_slice(&len.to_ne_bytes());
    buf
}

/// The reply to CUSE_INIT: header, `cuse_init_out`, then `DEVNAME=<devname>\0`.
pub(super) fn cuse_init_reply(
    unique: u64,
    out: &CuseInitOut,
    devname: &str,
) -> Result<Vec<u8>, ProtoError> {
    let info = format!("DEVNAME={devname}\0");
    if devname.is_empty() || devname.contains('\0') || info.len() > CUSE_INFO_MAX {
        return Err(ProtoError::DevName(devname.to_owned()));
    }
    let mut b = Vec::with_capacity(OUT_HEADER_LEN + CUSE_INIT_OUT_LEN + info.len());
    header(&mut b, 0, unique);
    for v in [
        FUSE_KERNEL_VERSION,
        out.minor,
        0,
        out.flags,
        out.max_read,
        out.max_write,
        out.dev_major,
        out.dev_minor,
    ] {
        b.extend_from_slice(&v.to_ne_bytes());
    }
    b.extend_from_slice(&[0u8; 40]); // spare[10]
    b.extend_from_slice(info.as_bytes());
    Ok(finish(b))
}

/// An error reply (`-errno` in the header, no body).
pub(super) fn error_reply(unique: u64, errno: Errno) -> Vec<u8> {
    let mut b = Vec::with_capacity(OUT_HEADER_LEN);
    header(&mut b, -errno.0, unique);
    finish(b)
}

/// A success reply without a body (RELEASE, FLUSH).
pub(super) fn empty_reply(unique: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(OUT_HEADER_LEN);
    header(&mut b, 0, unique);
    finish(b)
}

/// `fuse_open_in`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct OpenIn {
    /// The open(2) flags.
    pub flags: u32,
}

impl OpenIn {
    /// Decodes the body of FUSE_OPEN.
    pub(super) fn parse(body: &[u8]) -> Result<Self, ProtoError> {
        need(body, 8)?;
        Ok(Self {
            flags: u32_at(body, 0).unwrap_or(0),
        })
    }
}

/// The reply to FUSE_OPEN: the file handle the kernel passes back with every later request.
pub(super) fn open_reply(unique: u64, fh: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(OUT_HEADER_LEN + 16);
    header(&mut b, 0, unique);
    b.extend_from_slice(&fh.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes()); // open_flags
    b.extend_from_slice(&0u32.to_ne_bytes()); // padding
    finish(b)
}

/// The file handle at the start of the bodies of RELEASE, READ, WRITE, FLUSH, FSYNC, POLL.
pub(super) fn fh_of(body: &[u8]) -> Result<u64, ProtoError> {
    need(body, 8)?;
    Ok(u64_at(body, 0).unwrap_or(0))
}

/// `fuse_interrupt_in`: the request being interrupted.
pub(super) fn interrupted_unique(body: &[u8]) -> Result<u64, ProtoError> {
    need(body, 8)?;
    Ok(u64_at(body, 0).unwrap_or(0))
}

/// `fuse_ioctl_in`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct IoctlIn {
    /// File handle from FUSE_OPEN.
    pub fh: u64,
    /// `FUSE_IOCTL_*` flags.
    pub flags: u32,
    /// The request code, as the caller passed it.
    pub cmd: u32,
    /// The argument: an address in the caller's memory.
    pub arg: u64,
    /// Bytes of argument data that follow (0 for a first unrestricted call).
    pub in_size: u32,
    /// Bytes of output the kernel can take back in the reply.
    pub out_size: u32,
}

impl IoctlIn {
    /// Decodes the body of FUSE_IOCTL.
    pub(super) fn parse(body: &[u8]) -> Result<Self, ProtoError> {
        need(body, 32)?;
        Ok(Self {
            fh: u64_at(body, 0).unwrap_or(0),
            flags: u32_at(body, 8).unwrap_or(0),
            cmd: u32_at(body, 12).unwrap_or(0),
            arg: u64_at(body, 16).unwrap_or(0),
            in_size: u32_at(body, 24).unwrap_or(0),
            out_size: u32_at(body, 28).unwrap_or(0),
        })
    }
}

/// The final reply to FUSE_IOCTL: `fuse_ioctl_out {result}` with no data (the server wrote the
/// caller's memory itself). An error goes in `result` as `-errno`, so that the caller sees the
/// exact errno (an error in the header would turn ENOSYS into ENOTTY).
pub(super) fn ioctl_reply(unique: u64, result: Result<i32, Errno>) -> Vec<u8> {
    let result = match result {
        Ok(v) => v,
        Err(e) => -e.0,
    };
    let mut b = Vec::with_capacity(OUT_HEADER_LEN + 16);
    header(&mut b, 0, unique);
    b.extend_from_slice(&result.to_ne_bytes());
    b.extend_from_slice(&[0u8; 12]); // flags, in_iovs, out_iovs
    finish(b)
}

/// A request as the kernel sends it (uid 1000, gid 100), for tests of the protocol and the server.
#[cfg(test)]
pub(crate) fn request(opcode: u32, unique: u64, pid: u32, body: &[u8]) -> Vec<u8> {
    let len = u32::try_from(IN_HEADER_LEN + body.len()).unwrap_or(u32::MAX);
    let mut b = Vec::new();
    b.extend_from_slice(&len.to_ne_bytes());
    b.extend_from_slice(&opcode.to_ne_bytes());
    b.extend_from_slice(&unique.to_ne_bytes());
    b.extend_from_slice(&0u64.to_ne_bytes()); // nodeid
    b.extend_from_slice(&1000u32.to_ne_bytes()); // uid
    b.extend_from_slice(&100u32.to_ne_bytes()); // gid
    b.extend_from_slice(&pid.to_ne_bytes());
    b.extend_from_slice(&[0u8; 4]);
    b.extend_from_slice(body);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(b: &[u8]) -> Vec<u32> {
        b.chunks(4)
            .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn header_is_parsed_field_by_field() {
        let body = [7u8; 8];
        let raw = request(14, 0x1122_3344_5566_7788, 4242, &body);
        let (h, rest) = parse_request(&raw).unwrap();
        assert_eq!(h.len, 48);
        assert_eq!(h.opcode, Opcode::Open);
        assert_eq!(h.unique, 0x1122_3344_5566_7788);
        assert_eq!(h.uid, 1000);
        assert_eq!(h.gid, 100);
        assert_eq!(h.pid, 4242);
        assert_eq!(rest, &body);
    }

    #[test]
    fn short_and_inconsistent_requests_are_errors() {
        let raw = request(39, 1, 1, &[0; 32]);
        assert_eq!(
            parse_request(&raw[..39]),
            Err(ProtoError::Short { got: 39, need: 40 })
        );
        // The header claims 72 bytes; only 60 were read.
        assert_eq!(
            parse_request(&raw[..60]),
            Err(ProtoError::Length { len: 72, got: 60 })
        );
        let mut long = raw.clone();
        long.push(0);
        assert!(matches!(
            parse_request(&long),
            Err(ProtoError::Length { .. })
        ));
        assert!(IoctlIn::parse(&[0; 31]).is_err());
        assert!(OpenIn::parse(&[0; 7]).is_err());
        assert!(CuseInitIn::parse(&[0; 15]).is_err());
    }

    #[test]
    fn opcodes_decode_with_an_unknown_escape() {
        assert_eq!(Opcode::from_u32(4096), Opcode::CuseInit);
        assert_eq!(Opcode::from_u32(39), Opcode::Ioctl);
        assert_eq!(Opcode::from_u32(18), Opcode::Release);
        assert_eq!(Opcode::from_u32(1), Opcode::Unknown(1));
        assert!(!Opcode::Interrupt.wants_reply());
        assert!(!Opcode::Forget.wants_reply());
        assert!(Opcode::Ioctl.wants_reply());
    }

    #[test]
    fn cuse_init_reply_layout() {
        let init = CuseInitIn::parse(&words_to_bytes(&[7, 38, 0, 1])).unwrap();
        assert_eq!(
            init,
            CuseInitIn {
                major: 7,
                minor: 38,
                flags: CUSE_UNRESTRICTED_IOCTL
            }
        );
        assert_eq!(negotiate_minor(&init), Some(31));
        let out = CuseInitOut {
            minor: 31,
            flags: CUSE_UNRESTRICTED_IOCTL,
            max_read: 4096,
            max_write: 4096,
            dev_major: 226,
            dev_minor: 128,
        };
        let r = cuse_init_reply(0xabcd, &out, "dri/renderD128").unwrap();
        let info = b"DEVNAME=dri/renderD128\0";
        assert_eq!(r.len(), 16 + 72 + info.len());
        let w = words(&r[..16 + 72]);
        assert_eq!(w[0] as usize, r.len()); // len
        assert_eq!(w[1], 0); // error
        assert_eq!(u64::from(w[2]) | (u64::from(w[3]) << 32), 0xabcd); // unique (little endian)
        assert_eq!(&w[4..12], &[7, 31, 0, 1, 4096, 4096, 226, 128]);
        assert!(w[12..].iter().all(|&s| s == 0)); // spare
        assert_eq!(&r[88..], info);
    }

    #[test]
    fn init_from_old_or_foreign_kernels_is_refused() {
        let mk = |major, minor| CuseInitIn {
            major,
            minor,
            flags: 1,
        };
        assert_eq!(negotiate_minor(&mk(7, 10)), None);
        assert_eq!(negotiate_minor(&mk(8, 31)), None);
        assert_eq!(negotiate_minor(&mk(7, 11)), Some(11));
        assert_eq!(negotiate_minor(&mk(7, 31)), Some(31));
    }

    #[test]
    fn bad_device_names_are_refused() {
        let out = CuseInitOut {
            minor: 31,
            flags: 1,
            max_read: 0,
            max_write: 0,
            dev_major: 0,
            dev_minor: 0,
        };
        assert!(cuse_init_reply(1, &out, "").is_err());
        assert!(cuse_init_reply(1, &out, "kf\0d").is_err());
        assert!(cuse_init_reply(1, &out, &"x".repeat(5000)).is_err());
        assert!(cuse_init_reply(1, &out, "kfd").is_ok());
    }

    #[test]
    fn ioctl_request_is_parsed() {
        let mut body = Vec::new();
        body.extend_from_slice(&77u64.to_ne_bytes()); // fh
        body.extend_from_slice(&FUSE_IOCTL_UNRESTRICTED.to_ne_bytes());
        body.extend_from_slice(&0xc038_4b22u32.to_ne_bytes()); // CRIU_OP
        body.extend_from_slice(&0x7ffd_1234_5678u64.to_ne_bytes());
        body.extend_from_slice(&0u32.to_ne_bytes());
        body.extend_from_slice(&0u32.to_ne_bytes());
        let raw = request(39, 9, 300, &body);
        let (h, body) = parse_request(&raw).unwrap();
        assert_eq!(h.opcode, Opcode::Ioctl);
        let io = IoctlIn::parse(body).unwrap();
        assert_eq!(
            io,
            IoctlIn {
                fh: 77,
                flags: FUSE_IOCTL_UNRESTRICTED,
                cmd: 0xc038_4b22,
                arg: 0x7ffd_1234_5678,
                in_size: 0,
                out_size: 0,
            }
        );
    }

    #[test]
    fn ioctl_reply_carries_result_or_negative_errno() {
        let ok = ioctl_reply(5, Ok(3));
        assert_eq!(ok.len(), 32);
        assert_eq!(&words(&ok)[..2], &[32, 0]);
        assert_eq!(i32::from_ne_bytes(ok[16..20].try_into().unwrap()), 3);
        assert!(ok[20..].iter().all(|&b| b == 0));
        let e = ioctl_reply(5, Err(Errno::ENOSYS));
        assert_eq!(i32::from_ne_bytes(e[16..20].try_into().unwrap()), -38);
        assert_eq!(i32::from_ne_bytes(e[4..8].try_into().unwrap()), 0);
    }

    #[test]
    fn open_error_and_empty_replies() {
        let o = open_reply(11, 0x1_0000_0002);
        assert_eq!(o.len(), 32);
        assert_eq!(u64::from_ne_bytes(o[8..16].try_into().unwrap()), 11);
        assert_eq!(
            u64::from_ne_bytes(o[16..24].try_into().unwrap()),
            0x1_0000_0002
        );
        let e = error_reply(12, Errno::EBADF);
        assert_eq!(e.len(), 16);
        assert_eq!(i32::from_ne_bytes(e[4..8].try_into().unwrap()), -9);
        assert_eq!(empty_reply(13).len(), 16);
        assert_eq!(fh_of(&[1, 0, 0, 0, 0, 0, 0, 0, 9]).unwrap(), 1);
        assert_eq!(interrupted_unique(&42u64.to_ne_bytes()).unwrap(), 42);
    }

    fn words_to_bytes(w: &[u32]) -> Vec<u8> {
        w.iter().flat_map(|v| v.to_ne_bytes()).collect()
    }
}
