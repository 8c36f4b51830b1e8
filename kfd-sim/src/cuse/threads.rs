//! The reader threads of a device: an elastic pool per `/dev/cuse` connection. Each reader
//! `poll`s the connection together with the shutdown socket; a reader that takes a request while
//! no other reader of its device is idle starts one more (up to
//! [`ServeConfig::max_threads`](super::ServeConfig::max_threads)), and a reader finding too many
//! idle ones after a request exits. So a client blocked in a long call (`WAIT_EVENTS`), or a
//! `/dev/kfd` call waiting for a render device to answer the probe, never starves the others.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use kfd_abi::Errno;

use super::init::READ_BUF;
use super::shared::{DeviceRole, ServedDevice, Shared};
use super::{os, proto};
use crate::host::lock;
use crate::lock_order::Ordered;

/// Idle readers per device beyond which a reader exits.
const MAX_IDLE: usize = 4;

/// One served device: its `/dev/cuse` connection and the count of its readers.
pub(super) struct Device {
    pub(super) cuse: File,
    pub(super) info: ServedDevice,
    pub(super) idle: AtomicUsize,
    pub(super) total: AtomicUsize,
    pub(super) dead: AtomicBool,
    /// The ioctls being served, by request `unique`, each with its "signal pending" flag, which
    /// FUSE_INTERRUPT sets.
    pub(super) inflight: Ordered<HashMap<u64, Arc<AtomicBool>>>,
}

/// Starts one more reader thread of `dev`.
pub(super) fn spawn_reader(shared: &Arc<Shared>, dev: &Arc<Device>) -> io::Result<()> {
    let name = match dev.info.role {
        DeviceRole::Kfd => "kfd-simd:kfd".to_owned(),
        DeviceRole::Render { minor, .. } => format!("kfd-simd:r{minor}"),
    };
    dev.total.fetch_add(1, Ordering::SeqCst);
    let (s, d) = (Arc::clone(shared), Arc::clone(dev));
    match std::thread::Builder::new()
        .name(name)
        .spawn(move || reader(&s, &d))
    {
        Ok(h) => {
            let mut threads = lock(&shared.threads);
            threads.retain(|t| !t.is_finished());
            threads.push(h);
            Ok(())
        }
        Err(e) => {
            dev.total.fetch_sub(1, Ordering::SeqCst);
            Err(e)
        }
    }
}

/// One reader thread of one device.
fn reader(shared: &Arc<Shared>, dev: &Arc<Device>) {
    let mut buf = vec![0u8; READ_BUF];
    loop {
        dev.idle.fetch_add(1, Ordering::SeqCst);
        let ready = os::poll(&[dev.cuse.as_fd(), shared.stop_rx.as_fd()], None);
        dev.idle.fetch_sub(1, Ordering::SeqCst);
        let ready = match ready {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                log::error!("kfd-simd: {}: poll: {e}", dev.info.devname);
                break;
            }
        };
        if ready.get(1).is_some_and(|r| r.readable || r.error) {
            break;
        }
        let n = match (&dev.cuse).read(&mut buf) {
            Ok(0) => {
                dead(dev, "end of file");
                break;
            }
            Ok(n) => n,
            // Another reader took the request, or it was interrupted before we got it.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EAGAIN | libc::EINTR | libc::ENOENT)
                ) =>
            {
                continue
            }
            Err(e) => {
                dead(dev, &e.to_string());
                break;
            }
        };
        if dev.idle.load(Ordering::SeqCst) == 0
            && dev.total.load(Ordering::SeqCst) < shared.max_threads
        {
            if let Err(e) = spawn_reader(shared, dev) {
                log::warn!(
                    "kfd-simd: {}: no extra reader thread: {e}",
                    dev.info.devname
                );
            }
        }
        if let Some(reply) = answer(dev, &buf[..n], |req| shared.handle(dev, req)) {
            match (&dev.cuse).write(&reply) {
                Ok(_) => {}
                // The caller is gone or the request was interrupted: nobody waits for it.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    log::debug!(
                        "kfd-simd: {}: reply to a request that is gone",
                        dev.info.devname
                    );
                }
                Err(e) => log::warn!("kfd-simd: {}: writing a reply: {e}", dev.info.devname),
            }
        }
        if dev.idle.load(Ordering::SeqCst) >= MAX_IDLE {
            break;
        }
    }
    dev.total.fetch_sub(1, Ordering::SeqCst);
}

/// `handle`'s reply to request `req`; if `handle` panics, an `EIO` reply (when the request wants
/// one), so that the calling thread, which FUSE lets nothing else end, is not left in its call,
/// and the reader goes on serving. The request's entry in [`Device::inflight`] goes too.
///
/// `AssertUnwindSafe`: a panic is a bug of the handler; the state it was changing is left as
/// the panic left it (the locks it held are released poisoned, and `host::lock` takes them as
/// they are: see kfd-sim/README.md, Poisoning), and the client learns that its call failed.
pub(super) fn answer(
    dev: &Device,
    req: &[u8],
    handle: impl FnOnce(&[u8]) -> Option<Vec<u8>>,
) -> Option<Vec<u8>> {
    let payload = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handle(req))) {
        Ok(reply) => return reply,
        Err(payload) => payload,
    };
    let what = crate::host::panic_message(&*payload);
    let header = proto::parse_request(req).ok().map(|(h, _)| h);
    log::error!(
        "kfd-simd: {}: the handler of {} panicked ({what}); the caller gets EIO; please report \
         this as a bug",
        dev.info.devname,
        header.map_or_else(
            || "a request".to_owned(),
            |h| format!("{:?} request {}", h.opcode, h.unique)
        ),
    );
    let h = header?;
    lock(&dev.inflight).remove(&h.unique);
    h.opcode
        .wants_reply()
        .then(|| proto::error_reply(h.unique, Errno::EIO))
}

fn dead(dev: &Device, why: &str) {
    if !dev.dead.swap(true, Ordering::SeqCst) {
        log::error!(
            "kfd-simd: {}: the CUSE connection is gone ({why}); the device is no longer served",
            dev.info.devname
        );
    }
}
