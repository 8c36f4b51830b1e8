//! The body of every exported hook, with the [`CriuHooks`] object as a parameter.
//!
//! Each function converts criu's C arguments, calls the hook, and turns the result into criu's
//! return convention. All of them run inside [`guard`], so a panic in the engine is logged and
//! becomes `-EIO`; it never unwinds into criu. The `extern "C"` functions in [`super`] only pick
//! the process's hooks object and call these, which keeps this part testable with any
//! [`CriuHooks`] implementation.

use std::ffi::{c_char, c_int, CStr, OsStr};
use std::os::fd::{BorrowedFd, IntoRawFd};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use crate::hooks::{CriuHooks, HookError, HookResult, Stage};

/// Runs `body`, turning a panic into `fallback` (logged). criu must never see an unwind.
///
/// `AssertUnwindSafe`: after a panic the engine's state may be half-updated; criu treats the error
/// we return as fatal for the dump or restore, and the engine must tolerate `fini` afterwards.
pub(crate) fn guard<T>(hook: &str, fallback: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(value) => value,
        Err(payload) => {
            let what = crate::logger::panic_message(&*payload);
            log::error!("{hook}: internal error (panic: {what}); please report this as a bug");
            fallback
        }
    }
}

/// The value a panicking hook returns to criu.
pub(crate) const PANIC_RESULT: c_int = -libc::EIO;

/// `HookResult<()>` to criu's convention: 0, `-ENOTSUP` for "not ours", `-errno` (logged).
fn status(hook: &str, result: HookResult<()>) -> c_int {
    match result {
        Ok(()) => 0,
        Err(e) => failure(hook, &e),
    }
}

/// The criu value of an error; failures (not "not ours") are logged with their message and
/// what caused them.
fn failure(hook: &str, e: &HookError) -> c_int {
    if !matches!(e, HookError::NotOurs) {
        log::error!("{hook}: {}", e.chain());
    }
    e.to_criu()
}

/// criu passes 32-bit ids (`u32` in its images) through `int` parameters: take the bits back.
fn id_bits(id: c_int) -> u32 {
    u32::from_ne_bytes(id.to_ne_bytes())
}

/// `init(stage)`. "Not ours" is no error here: a non-zero result would abort criu.
pub(crate) fn init(hooks: &dyn CriuHooks, stage: c_int) -> c_int {
    guard("init", PANIC_RESULT, || {
        match hooks.init(Stage::from(stage)) {
            Ok(()) | Err(HookError::NotOurs) => 0,
            Err(e) => failure("init", &e),
        }
    })
}

/// `exit(stage, ret)`.
pub(crate) fn exit(hooks: &dyn CriuHooks, stage: c_int, ret: c_int) {
    guard("exit", (), || hooks.fini(Stage::from(stage), ret));
}

/// HANDLE_DEVICE_VMA: `int(int fd, const struct stat *st)`; the hook gets `st_rdev`.
///
/// # Safety
///
/// `fd` is open for the duration of the call or negative; `st` is null or points to a valid
/// `struct stat`.
pub(crate) unsafe fn handle_device_vma(
    hooks: &dyn CriuHooks,
    fd: c_int,
    st: *const libc::stat,
) -> c_int {
    const HOOK: &str = "HANDLE_DEVICE_VMA";
    guard(HOOK, PANIC_RESULT, || {
        if st.is_null() {
            log::error!("{HOOK}: criu passed no stat");
            return -libc::EINVAL;
        }
        // SAFETY: non-null, and the caller guarantees it points to a valid `struct stat`.
        let rdev: u64 = unsafe { (*st).st_rdev };
        // SAFETY: the caller guarantees `fd` is open for this call when it is not negative.
        match unsafe { borrow(HOOK, fd) } {
            Ok(fd) => status(HOOK, hooks.handle_device_vma(fd, rdev)),
            Err(code) => code,
        }
    })
}

/// DUMP_EXT_FILE: `int(int fd, int id)`.
///
/// # Safety
///
/// `fd` is open for the duration of the call or negative.
pub(crate) unsafe fn dump_ext_file(hooks: &dyn CriuHooks, fd: c_int, id: c_int) -> c_int {
    const HOOK: &str = "DUMP_EXT_FILE";
    guard(HOOK, PANIC_RESULT, || {
        // SAFETY: the caller guarantees `fd` is open for this call when it is not negative.
        match unsafe { borrow(HOOK, fd) } {
            Ok(fd) => status(HOOK, hooks.dump_ext_file(fd, id_bits(id))),
            Err(code) => code,
        }
    })
}

/// RESTORE_EXT_FILE: returns the restored fd (criu owns it). `retry_needed` is null when the host
/// criu calls the one-argument form; then a request to be called again is an error.
///
/// # Safety
///
/// `retry_needed` is null or points to a writable `bool` for the duration of the call.
pub(crate) unsafe fn restore_ext_file(
    hooks: &dyn CriuHooks,
    id: c_int,
    retry_needed: *mut bool,
) -> c_int {
    const HOOK: &str = "RESTORE_EXT_FILE";
    let set_retry = |value: bool| {
        if !retry_needed.is_null() {
            // SAFETY: non-null, and the caller guarantees it points to a writable bool.
            unsafe { retry_needed.write(value) };
        }
    };
    set_retry(false);
    guard(HOOK, PANIC_RESULT, || {
        match hooks.restore_ext_file(id_bits(id)) {
            Ok(Some(fd)) if fd >= 0 => fd,
            Ok(Some(fd)) => {
                log::error!("{HOOK}: file {id:#x}: the engine returned fd {fd}");
                -libc::EBADF
            }
            Ok(None) if !retry_needed.is_null() => {
                set_retry(true);
                0
            }
            Ok(None) => {
                log::error!(
                    "{HOOK}: file {id:#x} cannot be restored yet, and this criu cannot call the \
                 plugin again for it; a newer criu can"
                );
                -libc::EAGAIN
            }
            Err(e) => failure(HOOK, &e),
        }
    })
}

/// UPDATE_VMA_MAP: 1 with `*new_pgoff` and `*plugin_fd` (-1 when none; criu owns a real one) set
/// when the VMA is ours, 0 when nothing matches.
///
/// # Safety
///
/// `path` is null or a NUL-terminated string; `new_pgoff` and `plugin_fd` are null or writable,
/// all for the duration of the call.
pub(crate) unsafe fn update_vma_map(
    hooks: &dyn CriuHooks,
    path: *const c_char,
    addr: u64,
    old_pgoff: u64,
    new_pgoff: *mut u64,
    plugin_fd: *mut c_int,
) -> c_int {
    const HOOK: &str = "UPDATE_VMA_MAP";
    guard(HOOK, PANIC_RESULT, || {
        if path.is_null() || new_pgoff.is_null() || plugin_fd.is_null() {
            log::error!("{HOOK}: criu passed a null pointer (path, new_pgoff or plugin_fd)");
            return -libc::EINVAL;
        }
        // SAFETY: non-null, and the caller guarantees a NUL-terminated string.
        let path = Path::new(OsStr::from_bytes(
            unsafe { CStr::from_ptr(path) }.to_bytes(),
        ));
        match hooks.update_vma_map(path, addr, old_pgoff) {
            Ok(Some(update)) => {
                let fd = update.fd.map_or(-1, IntoRawFd::into_raw_fd);
                // SAFETY: both non-null, and the caller guarantees they are writable.
                unsafe {
                    new_pgoff.write(update.new_pgoff);
                    plugin_fd.write(fd);
                }
                1
            }
            Ok(None) => 0,
            Err(e) => failure(HOOK, &e),
        }
    })
}

/// RESUME_DEVICES_LATE: `int(int pid)`.
pub(crate) fn resume_devices_late(hooks: &dyn CriuHooks, pid: c_int) -> c_int {
    const HOOK: &str = "RESUME_DEVICES_LATE";
    guard(HOOK, PANIC_RESULT, || {
        status(HOOK, hooks.resume_devices_late(pid))
    })
}

/// POST_FORKING: `int(void)`.
pub(crate) fn post_forking(hooks: &dyn CriuHooks) -> c_int {
    const HOOK: &str = "POST_FORKING";
    guard(HOOK, PANIC_RESULT, || status(HOOK, hooks.post_forking()))
}

/// RESTORE_INIT: `int(void)`.
pub(crate) fn restore_init(hooks: &dyn CriuHooks) -> c_int {
    const HOOK: &str = "RESTORE_INIT";
    guard(HOOK, PANIC_RESULT, || status(HOOK, hooks.restore_init()))
}

/// DUMP_DEVICES_LATE: `int(int id)`.
pub(crate) fn dump_devices_late(hooks: &dyn CriuHooks, id: c_int) -> c_int {
    const HOOK: &str = "DUMP_DEVICES_LATE";
    guard(HOOK, PANIC_RESULT, || {
        status(HOOK, hooks.dump_devices_late(id_bits(id)))
    })
}

/// Borrows criu's fd for the call; a negative one is `-EBADF`.
///
/// # Safety
///
/// `fd`, when not negative, stays open for the lifetime the caller gives the result.
unsafe fn borrow<'fd>(hook: &str, fd: c_int) -> Result<BorrowedFd<'fd>, c_int> {
    if fd < 0 {
        log::error!("{hook}: criu passed fd {fd}");
        return Err(-libc::EBADF);
    }
    // SAFETY: not -1, and the caller guarantees it is open for 'fd.
    Ok(unsafe { BorrowedFd::borrow_raw(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::VmaUpdate;
    use kfd_abi::Errno;
    use std::os::fd::{AsRawFd, OwnedFd, RawFd};
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Panics in every hook.
    struct Panicking;

    impl CriuHooks for Panicking {
        fn init(&self, _: Stage) -> HookResult<()> {
            panic!("init exploded")
        }
        fn fini(&self, _: Stage, _: i32) {
            panic!("fini exploded")
        }
        fn handle_device_vma(&self, _: BorrowedFd<'_>, _: u64) -> HookResult<()> {
            panic!("vma exploded")
        }
        fn dump_ext_file(&self, _: BorrowedFd<'_>, _: u32) -> HookResult<()> {
            panic!("{}", String::from("dump exploded (String payload)"))
        }
        fn restore_ext_file(&self, _: u32) -> HookResult<Option<RawFd>> {
            panic!("restore exploded")
        }
        fn update_vma_map(&self, _: &Path, _: u64, _: u64) -> HookResult<Option<VmaUpdate>> {
            panic!("update exploded")
        }
        fn resume_devices_late(&self, _: i32) -> HookResult<()> {
            panic!("resume exploded")
        }
        fn post_forking(&self) -> HookResult<()> {
            panic!("post_forking exploded")
        }
        fn restore_init(&self) -> HookResult<()> {
            panic!("restore_init exploded")
        }
        fn dump_devices_late(&self, _: u32) -> HookResult<()> {
            panic!("dump_devices_late exploded")
        }
    }

    /// Answers with fixed values and records what it was given.
    #[derive(Default)]
    struct Scripted {
        last_id: AtomicU32,
        last_rdev: std::sync::Mutex<Option<u64>>,
        last_path: std::sync::Mutex<Option<std::path::PathBuf>>,
        restore: std::sync::Mutex<Option<HookResult<Option<RawFd>>>>,
        update_fd: std::sync::Mutex<Option<OwnedFd>>,
    }

    impl CriuHooks for Scripted {
        fn init(&self, stage: Stage) -> HookResult<()> {
            match stage {
                Stage::Dump => Ok(()),
                Stage::PreDump => Err(HookError::NotOurs),
                _ => Err(HookError::failed(Errno(libc::EPERM), "init refused")),
            }
        }
        fn fini(&self, _: Stage, _: i32) {}
        fn handle_device_vma(&self, _: BorrowedFd<'_>, rdev: u64) -> HookResult<()> {
            *self.last_rdev.lock().expect("lock") = Some(rdev);
            Err(HookError::NotOurs)
        }
        fn dump_ext_file(&self, _: BorrowedFd<'_>, id: u32) -> HookResult<()> {
            self.last_id.store(id, Ordering::SeqCst);
            Err(HookError::failed(
                Errno(libc::ENOSPC),
                "image directory is full",
            ))
        }
        fn restore_ext_file(&self, id: u32) -> HookResult<Option<RawFd>> {
            self.last_id.store(id, Ordering::SeqCst);
            self.restore
                .lock()
                .expect("lock")
                .take()
                .unwrap_or(Err(HookError::NotOurs))
        }
        fn update_vma_map(
            &self,
            path: &Path,
            addr: u64,
            old: u64,
        ) -> HookResult<Option<VmaUpdate>> {
            *self.last_path.lock().expect("lock") = Some(path.to_owned());
            if addr == 0x1000 && old == 7 {
                Ok(Some(VmaUpdate {
                    new_pgoff: 42,
                    fd: self.update_fd.lock().expect("lock").take(),
                }))
            } else {
                Ok(None)
            }
        }
        fn resume_devices_late(&self, pid: i32) -> HookResult<()> {
            if pid == 1 {
                Ok(())
            } else {
                Err(HookError::NotOurs)
            }
        }
        fn post_forking(&self) -> HookResult<()> {
            Ok(())
        }
        fn restore_init(&self) -> HookResult<()> {
            Err(HookError::NotOurs)
        }
        fn dump_devices_late(&self, id: u32) -> HookResult<()> {
            self.last_id.store(id, Ordering::SeqCst);
            Ok(())
        }
    }

    fn dev_null() -> std::fs::File {
        std::fs::File::open("/dev/null").expect("open /dev/null")
    }

    #[test]
    fn panics_become_eio_and_do_not_unwind() {
        let hooks = Panicking;
        let file = dev_null();
        let fd = file.as_raw_fd();
        // SAFETY: a zeroed `struct stat` is a valid value.
        let st: libc::stat = unsafe { std::mem::zeroed() };
        let mut pgoff = 0u64;
        let mut plugin_fd = 0;
        let mut retry = true;
        assert_eq!(init(&hooks, 0), -libc::EIO);
        exit(&hooks, 0, 0);
        // SAFETY: `fd` is open; `st` is a valid stat.
        assert_eq!(unsafe { handle_device_vma(&hooks, fd, &st) }, -libc::EIO);
        // SAFETY: `fd` is open.
        assert_eq!(unsafe { dump_ext_file(&hooks, fd, 1) }, -libc::EIO);
        // SAFETY: `retry` is a writable bool.
        let r = unsafe { restore_ext_file(&hooks, 1, &mut retry) };
        assert_eq!(r, -libc::EIO);
        assert!(!retry);
        // SAFETY: a NUL-terminated path and writable outputs.
        let r = unsafe {
            update_vma_map(
                &hooks,
                c"/dev/kfd".as_ptr(),
                0,
                0,
                &mut pgoff,
                &mut plugin_fd,
            )
        };
        assert_eq!(r, -libc::EIO);
        assert_eq!(resume_devices_late(&hooks, 1), -libc::EIO);
        assert_eq!(post_forking(&hooks), -libc::EIO);
        assert_eq!(restore_init(&hooks), -libc::EIO);
        assert_eq!(dump_devices_late(&hooks, 1), -libc::EIO);
    }

    #[test]
    fn guard_passes_values_through() {
        assert_eq!(guard("t", -1, || 5), 5);
        assert_eq!(guard("t", -1, || panic!("x")), -1);
    }

    #[test]
    fn init_maps_not_ours_to_success_and_failures_to_errno() {
        let hooks = Scripted::default();
        assert_eq!(init(&hooks, 0), 0);
        assert_eq!(init(&hooks, 1), 0);
        assert_eq!(init(&hooks, 2), -libc::EPERM);
    }

    #[test]
    fn ids_keep_all_32_bits() {
        let hooks = Scripted::default();
        let file = dev_null();
        // SAFETY: the fd is open.
        let r = unsafe { dump_ext_file(&hooks, file.as_raw_fd(), -2) };
        assert_eq!(r, -libc::ENOSPC);
        assert_eq!(hooks.last_id.load(Ordering::SeqCst), 0xFFFF_FFFE);
        assert_eq!(dump_devices_late(&hooks, 0x7FFF_0001), 0);
        assert_eq!(hooks.last_id.load(Ordering::SeqCst), 0x7FFF_0001);
    }

    #[test]
    fn bad_fds_and_null_stat_are_rejected_before_the_engine() {
        let hooks = Scripted::default();
        // SAFETY: a zeroed `struct stat` is a valid value.
        let st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: negative fd and null pointers are the cases under test.
        unsafe {
            assert_eq!(dump_ext_file(&hooks, -1, 1), -libc::EBADF);
            assert_eq!(handle_device_vma(&hooks, -1, &st), -libc::EBADF);
            assert_eq!(
                handle_device_vma(&hooks, 0, std::ptr::null()),
                -libc::EINVAL
            );
        }
        assert_eq!(*hooks.last_rdev.lock().expect("lock"), None);
    }

    #[test]
    fn handle_device_vma_passes_st_rdev() {
        let hooks = Scripted::default();
        let file = dev_null();
        // SAFETY: a zeroed `struct stat` is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        st.st_rdev = libc::makedev(226, 128);
        // SAFETY: the fd is open; `st` is valid.
        let r = unsafe { handle_device_vma(&hooks, file.as_raw_fd(), &st) };
        assert_eq!(r, -libc::ENOTSUP);
        assert_eq!(
            *hooks.last_rdev.lock().expect("lock"),
            Some(libc::makedev(226, 128))
        );
    }

    #[test]
    fn restore_returns_the_fd_and_clears_retry() {
        let hooks = Scripted::default();
        *hooks.restore.lock().expect("lock") = Some(Ok(Some(9)));
        let mut retry = true;
        // SAFETY: `retry` is writable.
        assert_eq!(unsafe { restore_ext_file(&hooks, 3, &mut retry) }, 9);
        assert!(!retry);
        *hooks.restore.lock().expect("lock") = Some(Ok(Some(10)));
        // SAFETY: null retry pointer: the one-argument host.
        let r = unsafe { restore_ext_file(&hooks, 3, std::ptr::null_mut()) };
        assert_eq!(r, 10);
    }

    #[test]
    fn restore_retry_only_where_criu_can_retry() {
        let hooks = Scripted::default();
        let mut retry = false;
        *hooks.restore.lock().expect("lock") = Some(Ok(None));
        // SAFETY: `retry` is writable.
        assert_eq!(unsafe { restore_ext_file(&hooks, 3, &mut retry) }, 0);
        assert!(retry);
        *hooks.restore.lock().expect("lock") = Some(Ok(None));
        // SAFETY: null retry pointer: the one-argument host.
        let r = unsafe { restore_ext_file(&hooks, 3, std::ptr::null_mut()) };
        assert_eq!(r, -libc::EAGAIN);
        *hooks.restore.lock().expect("lock") = Some(Ok(Some(-3)));
        // SAFETY: null retry pointer.
        let r = unsafe { restore_ext_file(&hooks, 3, std::ptr::null_mut()) };
        assert_eq!(r, -libc::EBADF);
        // Not ours.
        retry = true;
        // SAFETY: `retry` is writable.
        let r = unsafe { restore_ext_file(&hooks, 3, &mut retry) };
        assert_eq!(r, -libc::ENOTSUP);
        assert!(!retry);
    }

    #[test]
    fn update_vma_map_sets_outputs_on_match_only() {
        let hooks = Scripted::default();
        let (mut pgoff, mut fd) = (0u64, 5);
        // SAFETY: NUL-terminated path, writable outputs.
        let r = unsafe {
            update_vma_map(
                &hooks,
                c"/dev/dri/renderD128".as_ptr(),
                0x2000,
                7,
                &mut pgoff,
                &mut fd,
            )
        };
        assert_eq!((r, pgoff, fd), (0, 0, 5));
        assert_eq!(
            hooks.last_path.lock().expect("lock").as_deref(),
            Some(Path::new("/dev/dri/renderD128"))
        );
        // SAFETY: as above.
        let r =
            unsafe { update_vma_map(&hooks, c"/dev/kfd".as_ptr(), 0x1000, 7, &mut pgoff, &mut fd) };
        assert_eq!((r, pgoff, fd), (1, 42, -1));

        // With an fd: criu receives ownership of it.
        *hooks.update_fd.lock().expect("lock") = Some(OwnedFd::from(dev_null()));
        // SAFETY: as above.
        let r =
            unsafe { update_vma_map(&hooks, c"/dev/kfd".as_ptr(), 0x1000, 7, &mut pgoff, &mut fd) };
        assert_eq!(r, 1);
        assert!(fd >= 0);
        // SAFETY: the fd was handed to us (as criu) to own.
        drop(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) });
    }

    #[test]
    fn update_vma_map_rejects_null_pointers() {
        let hooks = Scripted::default();
        let mut pgoff = 0u64;
        let mut fd = 0;
        // SAFETY: null pointers are the cases under test; the others are valid.
        unsafe {
            let null_path = update_vma_map(&hooks, std::ptr::null(), 0, 0, &mut pgoff, &mut fd);
            assert_eq!(null_path, -libc::EINVAL);
            let p = c"/dev/kfd".as_ptr();
            let null_pgoff = update_vma_map(&hooks, p, 0x1000, 7, std::ptr::null_mut(), &mut fd);
            assert_eq!(null_pgoff, -libc::EINVAL);
            let null_fd = update_vma_map(&hooks, p, 0x1000, 7, &mut pgoff, std::ptr::null_mut());
            assert_eq!(null_fd, -libc::EINVAL);
        }
        assert_eq!(*hooks.last_path.lock().expect("lock"), None);
    }

    #[test]
    fn simple_hooks_map_results() {
        let hooks = Scripted::default();
        assert_eq!(resume_devices_late(&hooks, 1), 0);
        assert_eq!(resume_devices_late(&hooks, 2), -libc::ENOTSUP);
        assert_eq!(post_forking(&hooks), 0);
        assert_eq!(restore_init(&hooks), -libc::ENOTSUP);
    }
}
