//! The C ABI criu loads: the `CR_PLUGIN_DESC` descriptor and one `extern "C"` function per hook.
//!
//! # What is exported
//!
//! `CR_PLUGIN_DESC` (`#[no_mangle]`, `#[repr(C)]`, plugin ABI version 0x200): name
//! `"amdgpu_plugin"`, `init`, `exit`, `max_hooks` and [`SLOTS`] (15) hook slots. Slots
//! DUMP_EXT_FILE (2), RESTORE_EXT_FILE (3), HANDLE_DEVICE_VMA (7), UPDATE_VMA_MAP (8) and
//! RESUME_DEVICES_LATE (9) are always filled; POST_FORKING (12), RESTORE_INIT (13) and
//! DUMP_DEVICES_LATE (14) only when the host criu has them; every other slot is null. Each hook
//! body lives in `trampoline`, which converts the C arguments, calls
//! the engine ([`hooks`]), maps the result to criu's convention, logs failures and never lets a
//! panic unwind into criu (it returns `-EIO`).
//!
//! # Choosing the hook set at load time
//!
//! criu refuses a plugin whose `max_hooks` exceeds its own hook count (`CR_PLUGIN_HOOK__MAX`), and
//! only reads `hooks[..max_hooks]`. criu 3.17 (Debian bookworm) has 10 hooks; 4.0/4.1 12; 4.2 13;
//! the development branch 15; later snapshots more. So one `.so` must learn the count of the criu
//! that loads it, and must do so before criu reads the descriptor.
//!
//! *When*: criu `dlopen`s each plugin and only then looks up `CR_PLUGIN_DESC`, checks it and calls
//! `init` (criu/plugin.c, `cr_lib_load`). A function in our `.init_array` runs inside that `dlopen`,
//! so it can fill in `max_hooks` and the optional slots first. The descriptor's static value is
//! the 3.17 set, so a loader that skipped constructors would still get a descriptor any criu with
//! the device hooks accepts.
//!
//! *How*: criu links its binary with `-rdynamic` (criu/Makefile), so its global symbols are in its
//! dynamic symbol table, and it has always defined the hook dispatch table as a global:
//! `cr_plugin_ctl_t cr_plugin_ctl` (criu/plugin.c), whose type is
//! `{ struct list_head head; struct list_head hook_chain[CR_PLUGIN_HOOK__MAX]; }`
//! (criu/include/plugin.h). The constructor finds it with `dlsym(RTLD_DEFAULT, "cr_plugin_ctl")`,
//! reads the symbol's `st_size` with glibc's `dladdr1(.., RTLD_DL_SYMENT)`, and computes
//! `hooks = st_size / (2 * sizeof(void *)) - 1` (176 bytes on LP64 for 3.17: 10 hooks; 256 for
//! 15). This measures the constant criu checks against, rather than guessing it from a version
//! string or from which other symbols exist, so it also works for distribution builds, git
//! snapshots and releases newer than this code. As a sanity check, the table must live in the same
//! object as criu's `print_on_level`, have the shape of an array of list heads, and give a count
//! between 1 and 256.
//!
//! *RESTORE_EXT_FILE's signature*: criu up to 4.2 calls it as `int(int id)`; the development
//! branch as `int(int id, bool *retry_needed)`. A plugin cannot see which form a caller used, so
//! the two-argument trampoline (which writes `*retry_needed`) is installed only when the host has
//! DUMP_DEVICES_LATE (15 hooks or more); otherwise the one-argument trampoline is installed and
//! never touches a second argument. This rests on: 4.2 (13 hooks) declares the one-argument form;
//! every criu-plugin.h we found that declares DUMP_DEVICES_LATE declares the two-argument form;
//! both serve the upstream amdgpu plugin's dma-buf support.
//!
//! The decision is [`decide`](host::decide), a pure function of [`HostFacts`](host::HostFacts);
//! the engine reads what it needs of it, and criu's other exported functions, through
//! [`crate::host::CriuHost`], which [`LoadedCriu`] implements and the load-time constructor
//! installs (for instance [`HostCriu::has_dump_devices_late`]: when false, the engine must unpause
//! the dumped process inside DUMP_EXT_FILE). The engine never names this module: the shim
//! depends on the engine, not the other way round. [`criu_image_dir`] calls criu's
//! `criu_get_image_dir()` the same way (looked up, never linked); the shim gives it to the
//! process's [`Engine`](crate::criu::Engine), which it makes on first use ([`hooks`]).
//!
//! The load-time choice was checked against Debian bookworm's criu 3.17.1: its `cr_plugin_ctl` is
//! a 176-byte dynamic symbol, and `tests/real_criu.rs` loads the plugin inside that binary.
//!
//! # Limits
//!
//! - Without glibc's `dladdr1` (musl), or if a criu build hid `cr_plugin_ctl`, the count cannot be
//!   measured and the 3.17 set (10 hooks) is used: the plugin loads everywhere but misses the
//!   newer hooks ([`Detection::Assumed`](host::Detection::Assumed)).
//! - A criu-dev snapshot that had DUMP_DEVICES_LATE but still the one-argument RESTORE_EXT_FILE
//!   would be misread; we know of none.
//! - In a process that is not criu (tests, `amdgpu-cr`) the 3.17 set is reported
//!   ([`Detection::NotCriu`](host::Detection::NotCriu)).
//! - A panic is only caught when the crate is built with `panic = "unwind"` (the default).

mod host;
mod inventory;
pub(crate) mod trampoline;

use std::cell::UnsafeCell;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::sync::OnceLock;

use kfd_abi::platform::HostPlatform;

use crate::criu::Engine;
use crate::hooks::CriuHooks;
use crate::host::CriuHost;

pub(crate) use host::lookup as lookup_symbol;
pub(crate) use host::{host, HostCriu, BASELINE_HOOKS};
pub(crate) use inventory::HostInventory;

/// criu's hook ids (`CR_PLUGIN_HOOK__*`) that this plugin uses.
pub(crate) mod hook {
    /// `int(int fd, int id)`.
    pub(crate) const DUMP_EXT_FILE: usize = 2;
    /// `int(int id)`; development branch: `int(int id, bool *retry_needed)`.
    pub(crate) const RESTORE_EXT_FILE: usize = 3;
    /// `int(int fd, const struct stat *st)`.
    pub(crate) const HANDLE_DEVICE_VMA: usize = 7;
    /// `int(const char *path, u64 addr, u64 old_pgoff, u64 *new_pgoff, int *plugin_fd)`.
    pub(crate) const UPDATE_VMA_MAP: usize = 8;
    /// `int(int pid)`.
    pub(crate) const RESUME_DEVICES_LATE: usize = 9;
    /// `int(void)`, criu 4.2+.
    pub(crate) const POST_FORKING: usize = 12;
    /// `int(void)`, newer criu.
    pub(crate) const RESTORE_INIT: usize = 13;
    /// `int(int id)`, newer criu.
    pub(crate) const DUMP_DEVICES_LATE: usize = 14;
}

/// Number of hook slots in our descriptor (up to DUMP_DEVICES_LATE).
pub(crate) const SLOTS: usize = hook::DUMP_DEVICES_LATE + 1;

/// criu plugin ABI version 0.2.0 (`(0 << 16) + (2 << 8) + 0`); criu accepts versions up to its own.
pub(crate) const PLUGIN_VERSION: c_uint = 0x200;

/// The name criu logs and records in inventory.img.
pub(crate) const PLUGIN_NAME: &std::ffi::CStr = c"amdgpu_plugin";

/// criu's `cr_plugin_desc_t`, with [`SLOTS`] hook slots.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct CrPluginDesc {
    /// NUL-terminated plugin name.
    pub name: *const c_char,
    /// `int init(int stage)`.
    pub init: Option<unsafe extern "C" fn(c_int) -> c_int>,
    /// `void exit(int stage, int ret)`.
    pub exit: Option<unsafe extern "C" fn(c_int, c_int)>,
    /// Plugin ABI version.
    pub version: c_uint,
    /// How many entries of `hooks` criu may read.
    pub max_hooks: c_uint,
    /// Hook functions by id; null where not implemented.
    pub hooks: [*mut c_void; SLOTS],
}

/// The exported descriptor: written only by the load-time constructor, read by criu afterwards.
#[repr(transparent)]
#[derive(Debug)]
pub(crate) struct PluginDescriptor(UnsafeCell<CrPluginDesc>);

// SAFETY: the cell is written once, by the `.init_array` constructor, while the object is being
// loaded and before any other code can know its address; afterwards it is only read.
unsafe impl Sync for PluginDescriptor {}

impl PluginDescriptor {
    /// A copy of the descriptor as criu sees it.
    #[cfg(test)]
    fn snapshot(&self) -> CrPluginDesc {
        // SAFETY: after load the descriptor is only read (see the `Sync` impl).
        let d = unsafe { &*self.0.get() };
        CrPluginDesc {
            name: d.name,
            init: d.init,
            exit: d.exit,
            version: d.version,
            max_hooks: d.max_hooks,
            hooks: d.hooks,
        }
    }
}

const fn slot_default(id: usize) -> *mut c_void {
    match id {
        hook::DUMP_EXT_FILE => dump_ext_file as *mut c_void,
        hook::RESTORE_EXT_FILE => restore_ext_file as *mut c_void,
        hook::HANDLE_DEVICE_VMA => handle_device_vma as *mut c_void,
        hook::UPDATE_VMA_MAP => update_vma_map as *mut c_void,
        hook::RESUME_DEVICES_LATE => resume_devices_late as *mut c_void,
        _ => std::ptr::null_mut(),
    }
}

const fn default_slots() -> [*mut c_void; SLOTS] {
    let mut slots = [std::ptr::null_mut(); SLOTS];
    let mut id = 0;
    while id < SLOTS {
        slots[id] = slot_default(id);
        id += 1;
    }
    slots
}

/// The descriptor criu reads. Its static value is the 3.17 set; the constructor adapts it.
#[no_mangle]
pub(crate) static CR_PLUGIN_DESC: PluginDescriptor =
    PluginDescriptor(UnsafeCell::new(CrPluginDesc {
        name: PLUGIN_NAME.as_ptr(),
        init: Some(init),
        exit: Some(exit),
        version: PLUGIN_VERSION,
        max_hooks: BASELINE_HOOKS,
        hooks: default_slots(),
    }));

/// The slot values for `host`: the always-present hooks, the optional ones it has, the
/// RESTORE_EXT_FILE form it calls, and nothing at or beyond `max_hooks`.
fn slots_for(host: &HostCriu) -> [*mut c_void; SLOTS] {
    let mut slots = default_slots();
    if host.restore_ext_file_retry {
        slots[hook::RESTORE_EXT_FILE] = restore_ext_file_retry as *mut c_void;
    }
    if host.has_post_forking {
        slots[hook::POST_FORKING] = post_forking as *mut c_void;
    }
    if host.has_restore_init {
        slots[hook::RESTORE_INIT] = restore_init as *mut c_void;
    }
    if host.has_dump_devices_late {
        slots[hook::DUMP_DEVICES_LATE] = dump_devices_late as *mut c_void;
    }
    for (id, slot) in slots.iter_mut().enumerate() {
        if !host.declares(id) {
            *slot = std::ptr::null_mut();
        }
    }
    slots
}

/// criu's image directory fd, from criu's exported `int criu_get_image_dir(void)` (criu's one
/// declared plugin API); `None` outside criu or when criu has none open.
pub(crate) fn criu_image_dir() -> Option<std::os::fd::RawFd> {
    let f = lookup_symbol(c"criu_get_image_dir");
    if f.is_null() {
        return None;
    }
    // SAFETY: the symbol is criu's `int criu_get_image_dir(void)` (criu/include/criu-plugin.h);
    // a non-null data pointer to a function converts to that function's pointer.
    let fd = unsafe {
        let get = std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> c_int>(f);
        get()
    };
    (fd >= 0).then_some(fd)
}

/// criu's `find_unused_fd_pid(pid)`: one above the highest fd that restored task `pid` will use,
/// so that fds the plugin keeps in that task never collide with the task's own. `None` outside
/// criu.
pub(crate) fn unused_fd_of(pid: u32) -> Option<std::os::fd::RawFd> {
    let f = lookup_symbol(c"find_unused_fd_pid");
    let pid = libc::pid_t::try_from(pid).ok()?;
    if f.is_null() {
        return None;
    }
    // SAFETY: the symbol is criu's `int find_unused_fd_pid(pid_t pid)` (criu/include/files.h, in
    // every criu since 3.16); a non-null data pointer to a function converts to that function's
    // pointer.
    let fd = unsafe {
        let find =
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(libc::pid_t) -> c_int>(f);
        find(pid)
    };
    (fd > 0).then_some(fd)
}

/// criu's `fdstore_add(fd)`: keeps a copy of `fd` in criu's fd store (a service socket every
/// restored task inherits) and returns its id; `None` outside criu or when criu refused.
pub(crate) fn fdstore_add(fd: std::os::fd::BorrowedFd<'_>) -> Option<i32> {
    use std::os::fd::AsRawFd;
    let f = lookup_symbol(c"fdstore_add");
    if f.is_null() {
        return None;
    }
    // SAFETY: the symbol is criu's `int fdstore_add(int fd)` (criu/include/fdstore.h, since criu
    // 3.6), which duplicates `fd` into its store; a non-null data pointer to a function converts
    // to that function's pointer.
    let id = unsafe {
        let add = std::mem::transmute::<*mut c_void, unsafe extern "C" fn(c_int) -> c_int>(f);
        add(fd.as_raw_fd())
    };
    (id >= 0).then_some(id)
}

/// criu's `fdstore_get(id)`: a new fd of what [`fdstore_add`] stored under `id`, in the calling
/// process (criu's master or a restored task); `None` outside criu or on failure.
pub(crate) fn fdstore_get(id: i32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let f = lookup_symbol(c"fdstore_get");
    if f.is_null() {
        return None;
    }
    // SAFETY: the symbol is criu's `int fdstore_get(int id)` (criu/include/fdstore.h), which
    // returns a new fd the caller owns, or -1; a non-null data pointer to a function converts to
    // that function's pointer.
    let fd = unsafe {
        let get = std::mem::transmute::<*mut c_void, unsafe extern "C" fn(c_int) -> c_int>(f);
        get(id)
    };
    // SAFETY: a non-negative result is a new fd of this process that nothing else owns.
    (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Whether this process is criu (its fd store is there to look up).
pub(crate) fn in_criu() -> bool {
    !lookup_symbol(c"fdstore_get").is_null()
}

/// Kills restored task `pid` (criu's view of it), only inside criu: a task whose buffer contents
/// could not be restored must not run, and criu fails the restore when it cannot finish a task.
/// Outside criu (tests) it does nothing and says so.
pub(crate) fn kill_restored_task(pid: i32) -> bool {
    if !in_criu() || pid <= 0 {
        return false;
    }
    // SAFETY: kill(2) has no memory effects; `pid` is a task criu restored.
    unsafe { libc::kill(pid, libc::SIGKILL) == 0 }
}

/// The criu this plugin was loaded into, as the engine and the logger see it
/// ([`crate::host::criu`]): the functions of this module.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LoadedCriu;

impl CriuHost for LoadedCriu {
    fn has_dump_devices_late(&self) -> bool {
        host().has_dump_devices_late
    }
    fn print_on_level(&self) -> *mut c_void {
        lookup_symbol(c"print_on_level")
    }
    fn unused_fd_of(&self, pid: u32) -> Option<RawFd> {
        unused_fd_of(pid)
    }
    fn fdstore_add(&self, fd: BorrowedFd<'_>) -> Option<i32> {
        fdstore_add(fd)
    }
    fn fdstore_get(&self, id: i32) -> Option<OwnedFd> {
        fdstore_get(id)
    }
    fn in_criu(&self) -> bool {
        in_criu()
    }
    fn kill_restored_task(&self, pid: i32) -> bool {
        kill_restored_task(pid)
    }
}

/// The hooks of this process's plugin instance: the engine on the real machine, with criu's
/// image directory and inventory.
pub(crate) fn hooks() -> &'static dyn CriuHooks {
    static ENGINE: OnceLock<Engine<HostPlatform>> = OnceLock::new();
    ENGINE.get_or_init(|| {
        Engine::new(HostPlatform::from_env(), criu_image_dir).with_inventory(HostInventory)
    })
}

/// Runs inside criu's `dlopen`, before criu reads the descriptor (see the module documentation).
extern "C" fn on_load() {
    trampoline::guard("load", (), || {
        crate::host::install(&LoadedCriu);
        let host = host();
        let slots = slots_for(&host);
        let d = CR_PLUGIN_DESC.0.get();
        // SAFETY: the object is being loaded: nothing else reads or writes the descriptor yet,
        // and `d` points to it.
        unsafe {
            (*d).hooks = slots;
            (*d).max_hooks = host.max_hooks();
        }
    });
}

#[cfg(target_os = "linux")]
#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;

// The functions criu calls. Each passes the process's hooks object to its trampoline.

/// `init(stage)`: installs the logger, reports the host, starts the engine.
unsafe extern "C" fn init(stage: c_int) -> c_int {
    trampoline::guard("init", trampoline::PANIC_RESULT, || {
        // Installed at load already, where a constructor ran; here for a loader that skips them.
        crate::host::install(&LoadedCriu);
        crate::logger::install();
        let host = host();
        log::info!(
            "criu has {} hooks ({:?}); declaring {}; DUMP_DEVICES_LATE: {}; RESTORE_EXT_FILE retry: {}",
            host.hooks,
            host.detection,
            host.max_hooks(),
            host.has_dump_devices_late,
            host.restore_ext_file_retry,
        );
        trampoline::init(hooks(), stage)
    })
}

unsafe extern "C" fn exit(stage: c_int, ret: c_int) {
    trampoline::exit(hooks(), stage, ret);
}

unsafe extern "C" fn dump_ext_file(fd: c_int, id: c_int) -> c_int {
    // SAFETY: criu passes an fd it keeps open for the call.
    unsafe { trampoline::dump_ext_file(hooks(), fd, id) }
}

unsafe extern "C" fn restore_ext_file(id: c_int) -> c_int {
    // SAFETY: no retry pointer: this host calls the one-argument form.
    unsafe { trampoline::restore_ext_file(hooks(), id, std::ptr::null_mut()) }
}

unsafe extern "C" fn restore_ext_file_retry(id: c_int, retry_needed: *mut bool) -> c_int {
    // SAFETY: installed only for hosts that pass a pointer to their `bool retry_needed`.
    unsafe { trampoline::restore_ext_file(hooks(), id, retry_needed) }
}

unsafe extern "C" fn handle_device_vma(fd: c_int, st: *const libc::stat) -> c_int {
    // SAFETY: criu passes an open fd and its `struct stat` for the call (null is checked).
    unsafe { trampoline::handle_device_vma(hooks(), fd, st) }
}

unsafe extern "C" fn update_vma_map(
    path: *const c_char,
    addr: u64,
    old_pgoff: u64,
    new_pgoff: *mut u64,
    plugin_fd: *mut c_int,
) -> c_int {
    // SAFETY: criu passes a path string and two writable outputs (nulls are checked).
    unsafe { trampoline::update_vma_map(hooks(), path, addr, old_pgoff, new_pgoff, plugin_fd) }
}

unsafe extern "C" fn resume_devices_late(pid: c_int) -> c_int {
    trampoline::resume_devices_late(hooks(), pid)
}

unsafe extern "C" fn post_forking() -> c_int {
    trampoline::post_forking(hooks())
}

unsafe extern "C" fn restore_init() -> c_int {
    trampoline::restore_init(hooks())
}

unsafe extern "C" fn dump_devices_late(id: c_int) -> c_int {
    trampoline::dump_devices_late(hooks(), id)
}

#[cfg(test)]
mod tests {
    use super::host::{decide, HostFacts};
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn descriptor_layout_matches_criu() {
        let ptr = size_of::<*const c_void>();
        assert_eq!(offset_of!(CrPluginDesc, name), 0);
        assert_eq!(offset_of!(CrPluginDesc, init), ptr);
        assert_eq!(offset_of!(CrPluginDesc, exit), 2 * ptr);
        assert_eq!(offset_of!(CrPluginDesc, version), 3 * ptr);
        assert_eq!(offset_of!(CrPluginDesc, max_hooks), 3 * ptr + 4);
        assert_eq!(offset_of!(CrPluginDesc, hooks), 3 * ptr + 8);
        // criu 3.17's descriptor (10 slots) is 112 bytes on LP64; ours has 5 more slots.
        #[cfg(target_pointer_width = "64")]
        assert_eq!(size_of::<CrPluginDesc>(), 112 + 5 * 8);
    }

    #[test]
    fn this_process_gets_the_3_17_set() {
        let d = CR_PLUGIN_DESC.snapshot();
        assert_eq!(d.max_hooks, 10);
        assert_eq!(d.version, 0x200);
        // SAFETY: `name` points to a static NUL-terminated string.
        let name = unsafe { std::ffi::CStr::from_ptr(d.name) };
        assert_eq!(name, c"amdgpu_plugin");
        for (id, slot) in d.hooks.iter().enumerate() {
            let expected = matches!(id, 2 | 3 | 7 | 8 | 9);
            assert_eq!(!slot.is_null(), expected, "slot {id}");
        }
        assert_eq!(d.hooks[3], restore_ext_file as *mut c_void);
    }

    #[test]
    fn the_descriptor_name_is_the_inventory_name() {
        assert_eq!(PLUGIN_NAME.to_str(), Ok(crate::inventory::NAME));
    }

    #[test]
    fn no_inventory_outside_criu() {
        use crate::inventory::Inventory;
        assert!(!HostInventory.present());
        assert!(HostInventory.record().is_ok());
        assert!(HostInventory.claim());
    }

    #[test]
    fn no_image_dir_outside_criu() {
        assert_eq!(criu_image_dir(), None);
    }

    fn host_with(hooks: u64) -> HostCriu {
        decide(&HostFacts {
            print_on_level: true,
            hook_table_bytes: Some((1 + hooks) * 2 * size_of::<*const c_void>() as u64),
        })
    }

    #[test]
    fn slots_follow_the_host() {
        let filled = |host: &HostCriu| -> Vec<usize> {
            slots_for(host)
                .iter()
                .enumerate()
                .filter(|(_, s)| !s.is_null())
                .map(|(id, _)| id)
                .collect()
        };
        assert_eq!(filled(&host_with(10)), [2, 3, 7, 8, 9]);
        assert_eq!(filled(&host_with(12)), [2, 3, 7, 8, 9]);
        assert_eq!(filled(&host_with(13)), [2, 3, 7, 8, 9, 12]);
        assert_eq!(filled(&host_with(14)), [2, 3, 7, 8, 9, 12, 13]);
        assert_eq!(filled(&host_with(15)), [2, 3, 7, 8, 9, 12, 13, 14]);
        assert_eq!(filled(&host_with(17)), [2, 3, 7, 8, 9, 12, 13, 14]);
        // An old criu without the device hooks: only what it can read.
        assert_eq!(filled(&host_with(7)), [2, 3]);

        assert_eq!(
            slots_for(&host_with(14))[hook::RESTORE_EXT_FILE],
            restore_ext_file as *mut c_void
        );
        assert_eq!(
            slots_for(&host_with(15))[hook::RESTORE_EXT_FILE],
            restore_ext_file_retry as *mut c_void
        );
    }
}
