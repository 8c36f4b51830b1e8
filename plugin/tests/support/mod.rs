//! Loading the built `libamdgpu_plugin.so` the way criu does (`dlopen`, then `CR_PLUGIN_DESC`).

#![allow(dead_code)] // each test binary uses a part

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Slots in our descriptor (the shim's `SLOTS`).
pub(crate) const SLOTS: usize = 15;

/// criu's `cr_plugin_desc_t` as our `.so` lays it out (15 slots).
#[repr(C)]
pub(crate) struct Desc {
    pub name: *const c_char,
    pub init: Option<unsafe extern "C" fn(c_int) -> c_int>,
    pub exit: Option<unsafe extern "C" fn(c_int, c_int)>,
    pub version: c_uint,
    pub max_hooks: c_uint,
    pub hooks: [*mut c_void; SLOTS],
}

pub(crate) type FdIdHook = unsafe extern "C" fn(c_int, c_int) -> c_int;
pub(crate) type IdHook = unsafe extern "C" fn(c_int) -> c_int;
pub(crate) type IdRetryHook = unsafe extern "C" fn(c_int, *mut bool) -> c_int;
pub(crate) type VoidHook = unsafe extern "C" fn() -> c_int;
pub(crate) type VmaHook = unsafe extern "C" fn(c_int, *const libc::stat) -> c_int;
pub(crate) type UpdateVmaHook =
    unsafe extern "C" fn(*const c_char, u64, u64, *mut u64, *mut c_int) -> c_int;

/// The cdylib cargo built for this test run: next to the test binary (`target/*/deps`), where
/// `cargo test` leaves it, or one level up, where `cargo build` copies it.
pub(crate) fn plugin_path() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary has a directory");
    let candidates = [
        deps.join("libamdgpu_plugin.so"),
        deps.join("..").join("libamdgpu_plugin.so"),
    ];
    candidates
        .iter()
        .find(|p| p.exists())
        .cloned()
        .unwrap_or_else(|| panic!("libamdgpu_plugin.so not found in {candidates:?}"))
}

/// `dlopen(path, flags)`, panicking with `dlerror()` on failure. Never closed.
pub(crate) fn open(path: &Path, flags: c_int) -> *mut c_void {
    let c_path = CString::new(path.as_os_str().as_bytes()).expect("path without NUL");
    // SAFETY: a NUL-terminated path; loading runs the library's constructors, which is the test.
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), flags) };
    if handle.is_null() {
        // SAFETY: dlerror returns null or a NUL-terminated message.
        let err = unsafe { libc::dlerror() };
        let msg = if err.is_null() {
            String::from("(no dlerror)")
        } else {
            // SAFETY: non-null dlerror result is a NUL-terminated string.
            unsafe { CStr::from_ptr(err) }
                .to_string_lossy()
                .into_owned()
        };
        panic!("dlopen {}: {msg}", path.display());
    }
    handle
}

/// `dlsym(handle, name)`, panicking when absent.
pub(crate) fn symbol(handle: *mut c_void, name: &CStr) -> *mut c_void {
    // SAFETY: a handle from dlopen and a NUL-terminated name.
    let sym = unsafe { libc::dlsym(handle, name.as_ptr()) };
    assert!(!sym.is_null(), "{name:?} not exported");
    sym
}

/// Loads the plugin as criu does (RTLD_LAZY) and returns its descriptor.
pub(crate) fn load_plugin() -> &'static Desc {
    let handle = open(&plugin_path(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
    let desc = symbol(handle, c"CR_PLUGIN_DESC").cast::<Desc>();
    // SAFETY: CR_PLUGIN_DESC is a static of this layout in a library that is never unloaded.
    unsafe { &*desc }
}

impl Desc {
    /// The name as a Rust string.
    pub(crate) fn name(&self) -> &str {
        assert!(!self.name.is_null(), "null name");
        // SAFETY: non-null name of a loaded plugin: a static NUL-terminated string.
        unsafe { CStr::from_ptr(self.name) }
            .to_str()
            .expect("UTF-8 name")
    }

    /// Ids of the non-null slots.
    pub(crate) fn filled(&self) -> Vec<usize> {
        (0..SLOTS).filter(|&i| !self.hooks[i].is_null()).collect()
    }

    /// Hook `id` as a function of type `F`.
    ///
    /// # Safety
    ///
    /// `F` must be the C signature of hook `id`.
    pub(crate) unsafe fn hook<F: Copy>(&self, id: usize) -> F {
        let ptr = self.hooks[id];
        assert!(!ptr.is_null(), "hook {id} is null");
        assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
        // SAFETY: non-null function pointer of the signature the caller names.
        unsafe { std::mem::transmute_copy::<*mut c_void, F>(&ptr) }
    }
}

/// Compiles `source` into `<CARGO_TARGET_TMPDIR>/c-fixtures/<name>.so` with the C compiler
/// (`$CC`, else `cc`: the one Rust links with), adding `-D` for each of `defines`.
pub(crate) fn build_c_library(name: &str, source: &str, defines: &[String]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-fixtures");
    std::fs::create_dir_all(&dir).expect("create tmp dir");
    let src = dir.join(format!("{name}.c"));
    let lib = dir.join(format!("{name}.so"));
    std::fs::write(&src, source).expect("write C source");
    let mut cc = Command::new(std::env::var("CC").unwrap_or_else(|_| String::from("cc")));
    cc.args(["-shared", "-fPIC", "-O0", "-o"])
        .arg(&lib)
        .arg(&src);
    for define in defines {
        cc.arg(format!("-D{define}"));
    }
    let out = cc
        .output()
        .expect("run the C compiler (it builds the test fixtures)");
    assert!(
        out.status.success(),
        "cc failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    lib
}
