//! Registering a device with the kernel: opening `/dev/cuse` and answering its CUSE_INIT with
//! the device's name and numbers.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::time::{Duration, Instant};

use super::os;
use super::proto::{self, Opcode};
use super::shared::{DeviceRole, ServeConfig, DRM_MAJOR};
use super::CuseError;

/// Bytes read from /dev/cuse at once: the kernel wants at least 8 KiB + max_write.
pub(super) const READ_BUF: usize = 64 * 1024 + 4096;
/// Largest read/write we announce (we serve neither; the kernel uses at least 4096).
const MAX_IO: u32 = 4096;
/// How long CUSE_INIT may take to arrive after /dev/cuse is opened.
const INIT_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens /dev/cuse (non-blocking: readers poll it with the shutdown socket).
pub(super) fn open_cuse(cfg: &ServeConfig) -> Result<File, CuseError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(&cfg.cuse_path)
        .map_err(|source| {
            if source.kind() == io::ErrorKind::NotFound {
                CuseError::NoCuse {
                    path: cfg.cuse_path.clone(),
                }
            } else {
                CuseError::Open {
                    path: cfg.cuse_path.clone(),
                    source,
                }
            }
        })
}

/// Answers the CUSE_INIT of one new connection: registers `devname` with the numbers of `role`
/// (dynamic ones behind the bridge, whose proxies take the real numbers).
pub(super) fn register(
    file: File,
    role: DeviceRole,
    devname: &str,
    bridged: bool,
) -> Result<File, CuseError> {
    let reg = |what: String| CuseError::Register {
        devname: devname.to_owned(),
        what,
    };
    let mut buf = vec![0u8; READ_BUF];
    let deadline = Instant::now() + INIT_TIMEOUT;
    let n = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(reg("no CUSE_INIT from the kernel".into()));
        }
        match os::poll(&[file.as_fd()], Some(left)) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(reg(format!("poll: {e}"))),
        }
        match (&file).read(&mut buf) {
            Ok(n) => break n,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EINTR)) => {}
            Err(e) => return Err(reg(format!("reading CUSE_INIT: {e}"))),
        }
    };
    let (h, body) = proto::parse_request(&buf[..n]).map_err(|e| reg(e.to_string()))?;
    if h.opcode != Opcode::CuseInit {
        return Err(reg(format!("expected CUSE_INIT, got {:?}", h.opcode)));
    }
    let init = proto::CuseInitIn::parse(body).map_err(|e| reg(e.to_string()))?;
    let minor = proto::negotiate_minor(&init).ok_or_else(|| {
        reg(format!(
            "the kernel speaks FUSE {}.{}, we need 7.{}+",
            init.major,
            init.minor,
            proto::CUSE_MIN_MINOR
        ))
    })?;
    if init.flags & proto::CUSE_UNRESTRICTED_IOCTL == 0 {
        return Err(reg("the kernel does not offer unrestricted ioctls".into()));
    }
    let (dev_major, dev_minor) = match role {
        DeviceRole::Render { minor, .. } if !bridged => (DRM_MAJOR, minor),
        _ => (0, 0),
    };
    let out = proto::CuseInitOut {
        minor,
        flags: proto::CUSE_UNRESTRICTED_IOCTL,
        max_read: MAX_IO,
        max_write: MAX_IO,
        dev_major,
        dev_minor,
    };
    let reply = proto::cuse_init_reply(h.unique, &out, devname).map_err(|e| reg(e.to_string()))?;
    (&file)
        .write_all(&reply)
        .map_err(|e| reg(format!("answering CUSE_INIT: {e}")))?;
    log::info!("kfd-simd: registered {devname} (FUSE 7.{minor}, unrestricted ioctl)");
    Ok(file)
}
