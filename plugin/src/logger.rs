//! A [`log::Log`] that writes into criu's log through criu's exported `print_on_level`.
//!
//! criu exports `void print_on_level(unsigned level, const char *fmt, ...)` (it links with
//! `-rdynamic`); the C ABI shim looks it up with `dlsym(RTLD_DEFAULT, ..)`, never linked against,
//! and [`install`] takes it from the host the shim installed ([`crate::host::criu`]), because the
//! same code runs in binaries without criu (`amdgpu-cr`, tests), where lines go to stderr
//! instead. Every line is passed as the argument of a `"%s"` format, never as the
//! format itself, prefixed `amdgpu_plugin: ` and ended with a newline as criu's own lines are.
//! criu filters by its own log level (`-v`).

use std::ffi::{c_char, c_uint, c_void, CString};
use std::io::Write;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

use log::{Level, LevelFilter, Log, Metadata, Record};

/// criu's `LOG_ERROR` (criu/include/log.h).
pub(crate) const LOG_ERROR: c_uint = 1;
/// criu's `LOG_WARN`.
pub(crate) const LOG_WARN: c_uint = 2;
/// criu's `LOG_INFO`.
pub(crate) const LOG_INFO: c_uint = 3;
/// criu's `LOG_DEBUG` (its most verbose level).
pub(crate) const LOG_DEBUG: c_uint = 4;

/// Prefix of every line, as criu users grep for it.
pub(crate) const PREFIX: &str = "amdgpu_plugin: ";

type PrintOnLevel = unsafe extern "C" fn(c_uint, *const c_char, ...);

/// The logger: criu's `print_on_level` when found, stderr otherwise.
#[derive(Debug)]
pub(crate) struct CriuLogger {
    /// `print_on_level`, or null.
    print: AtomicPtr<c_void>,
    /// criu's log writer keeps its buffer in globals: one line at a time from our threads.
    lock: Mutex<()>,
}

static LOGGER: CriuLogger = CriuLogger {
    print: AtomicPtr::new(std::ptr::null_mut()),
    lock: Mutex::new(()),
};

/// Finds criu's `print_on_level` and installs the logger for this copy of the `log` crate.
/// If another logger is already installed (a binary that set its own), it is left alone.
pub(crate) fn install() {
    let print = crate::host::criu().print_on_level();
    LOGGER.print.store(print, Ordering::Release);
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(LevelFilter::Debug);
    }
}

/// Whether lines go to criu's log (rather than stderr).
/// What a caught panic said: its `&str` or `String` payload, or "(no message)".
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

#[cfg(test)]
fn writes_to_criu() -> bool {
    !LOGGER.print.load(Ordering::Acquire).is_null()
}

/// criu's level for a `log` level (trace is criu's debug: criu has nothing finer).
pub(crate) fn criu_level(level: Level) -> c_uint {
    match level {
        Level::Error => LOG_ERROR,
        Level::Warn => LOG_WARN,
        Level::Info => LOG_INFO,
        Level::Debug | Level::Trace => LOG_DEBUG,
    }
}

/// The text as criu receives it: every line of the message prefixed (so that grepping criu's log
/// for the prefix finds all of a multi-line explanation), ended with a newline; an interior NUL
/// is shown as `\0` rather than cutting the text short.
pub(crate) fn render(args: &std::fmt::Arguments<'_>) -> CString {
    let message = args.to_string().replace('\0', "\\0");
    let mut text = String::with_capacity(message.len() + PREFIX.len() + 1);
    for line in message.lines() {
        text.push_str(PREFIX);
        text.push_str(line);
        text.push('\n');
    }
    if text.is_empty() {
        text = format!("{PREFIX}\n");
    }
    CString::new(text).unwrap_or_default()
}

impl Log for CriuLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let line = render(record.args());
        let print = self.print.load(Ordering::Acquire);
        // A poisoned lock only means another thread panicked while logging: keep logging.
        let _serial = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        if print.is_null() {
            let mut err = std::io::stderr().lock();
            // Nothing to do if stderr is gone.
            let _ = err.write_all(line.as_bytes());
        } else {
            // SAFETY: `print` is criu's `print_on_level` (found by name in criu's exports), whose
            // signature is `void (unsigned, const char *, ...)`; the format is the literal "%s"
            // and its one argument a NUL-terminated string that outlives the call.
            unsafe {
                let print = std::mem::transmute::<*mut c_void, PrintOnLevel>(print);
                print(criu_level(record.level()), c"%s".as_ptr(), line.as_ptr());
            }
        }
    }

    fn flush(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_match_criu_log_h() {
        assert_eq!(criu_level(Level::Error), 1);
        assert_eq!(criu_level(Level::Warn), 2);
        assert_eq!(criu_level(Level::Info), 3);
        assert_eq!(criu_level(Level::Debug), 4);
        assert_eq!(criu_level(Level::Trace), 4);
    }

    #[test]
    fn lines_are_prefixed_terminated_and_keep_percent_signs() {
        let line = render(&format_args!("dumped {}% of {}", 50, "bo"));
        assert_eq!(line.as_bytes(), b"amdgpu_plugin: dumped 50% of bo\n");
        let line = render(&format_args!("a{}b", '\0'));
        assert_eq!(line.as_bytes(), b"amdgpu_plugin: a\\0b\n");
        let lines = render(&format_args!("no mapping:\n  GPU 0x1: fw"));
        assert_eq!(
            lines.as_bytes(),
            b"amdgpu_plugin: no mapping:\namdgpu_plugin:   GPU 0x1: fw\n"
        );
    }

    #[test]
    fn no_criu_in_a_test_process() {
        install();
        assert!(!writes_to_criu());
        log::info!("stderr fallback works");
    }
}
