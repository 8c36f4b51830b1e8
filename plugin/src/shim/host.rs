//! Which criu loaded us: its hook count, learnt from the size of its hook table.
//!
//! See the module documentation of [`crate::shim`] for the method, the facts it rests on and its
//! limits. [`decide`] is the whole decision as a pure function of [`HostFacts`]; [`probe`] gathers
//! the facts from the running process; [`host`] caches `decide(&probe())`.

use std::ffi::{c_void, CStr};
use std::sync::OnceLock;

use super::{hook, SLOTS};

/// The hook count every criu with the device hooks has (3.17 to 3.19), and the set we assume when
/// we cannot measure: every criu that has HANDLE_DEVICE_VMA accepts `max_hooks == 10`.
pub(crate) const BASELINE_HOOKS: u32 = 10;

/// Above this a measured hook count is taken for a misreading (criu had 17 in 2026).
const PLAUSIBLE_MAX_HOOKS: u64 = 256;

/// How [`HostCriu::hooks`] was learnt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Detection {
    /// criu's exported API is absent (a test, `amdgpu-cr`): the 3.17 set is assumed.
    NotCriu,
    /// Measured from the size of criu's `cr_plugin_ctl` hook table.
    HookTable,
    /// criu's API is there but its hook table could not be measured: the 3.17 set is assumed.
    Assumed,
}

/// What the process we were loaded into offers, as [`probe`] finds it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct HostFacts {
    /// criu's `print_on_level` is visible through `dlsym(RTLD_DEFAULT, ..)`.
    pub print_on_level: bool,
    /// Size in bytes of criu's `cr_plugin_ctl` (from its dynamic symbol), when it is found in the
    /// same object as `print_on_level`.
    pub hook_table_bytes: Option<u64>,
}

/// The host criu as the plugin sees it. Copied out of [`host`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HostCriu {
    /// criu's hook count (`CR_PLUGIN_HOOK__MAX`), measured or assumed (see [`Self::detection`]).
    pub hooks: u32,
    /// How `hooks` was learnt.
    pub detection: Detection,
    /// POST_FORKING (12) is registered and will be called.
    pub has_post_forking: bool,
    /// RESTORE_INIT (13) is registered and will be called.
    pub has_restore_init: bool,
    /// DUMP_DEVICES_LATE (14) is registered and will be called: the engine may leave the dumped
    /// processes paused after DUMP_EXT_FILE and unpause them there. When `false`, the engine must
    /// unpause inside DUMP_EXT_FILE.
    pub has_dump_devices_late: bool,
    /// criu calls RESTORE_EXT_FILE as `int(int id, bool *retry_needed)`, so an
    /// `Ok(None)` ("call me again") from the engine can be passed on. When `false`, the engine must
    /// finish each file in one call.
    pub restore_ext_file_retry: bool,
}

impl HostCriu {
    /// The `max_hooks` the descriptor declares: criu's count, capped at the slots we have.
    pub(crate) fn max_hooks(&self) -> u32 {
        self.hooks.min(SLOTS_U32)
    }

    /// Whether hook `id` is within the declared range (criu reads only `hooks[..max_hooks]`).
    pub(crate) fn declares(&self, id: usize) -> bool {
        u32::try_from(id).is_ok_and(|id| id < self.max_hooks())
    }

    fn with_hooks(hooks: u32, detection: Detection) -> Self {
        let declared = hooks.min(SLOTS_U32);
        let has = |id: usize| u32::try_from(id).is_ok_and(|id| id < declared);
        let has_dump_devices_late = has(hook::DUMP_DEVICES_LATE);
        HostCriu {
            hooks,
            detection,
            has_post_forking: has(hook::POST_FORKING),
            has_restore_init: has(hook::RESTORE_INIT),
            has_dump_devices_late,
            // The retry argument came in with the hook set that has DUMP_DEVICES_LATE (see the
            // module documentation); a host that has 14 hooks or fewer gets the one-argument form.
            restore_ext_file_retry: has_dump_devices_late,
        }
    }
}

/// [`SLOTS`] as criu's `unsigned` (15: the cast cannot truncate, the assertion checks it).
#[allow(clippy::cast_possible_truncation)]
const SLOTS_U32: u32 = {
    assert!(SLOTS <= 64);
    SLOTS as u32
};

/// `struct list_head` (two pointers): the element of criu's hook table.
const LIST_HEAD_BYTES: u64 = 2 * std::mem::size_of::<*const c_void>() as u64;

/// The decision, as a pure function of what the process offers.
///
/// `cr_plugin_ctl` is `{ list_head head; list_head hook_chain[CR_PLUGIN_HOOK__MAX]; }`, so its size
/// is `(1 + hooks) * size_of(list_head)`. A size that does not fit that shape, or no size, falls
/// back to the 3.17 set, which every criu with the device hooks accepts.
pub(crate) fn decide(facts: &HostFacts) -> HostCriu {
    if !facts.print_on_level {
        return HostCriu::with_hooks(BASELINE_HOOKS, Detection::NotCriu);
    }
    let measured = facts
        .hook_table_bytes
        .filter(|bytes| bytes % LIST_HEAD_BYTES == 0)
        .map(|bytes| bytes / LIST_HEAD_BYTES)
        .filter(|heads| (2..=PLAUSIBLE_MAX_HOOKS + 1).contains(heads))
        .and_then(|heads| u32::try_from(heads - 1).ok());
    match measured {
        Some(hooks) => HostCriu::with_hooks(hooks, Detection::HookTable),
        None => HostCriu::with_hooks(BASELINE_HOOKS, Detection::Assumed),
    }
}

/// The host of this process, probed once (at load time, from the `.init_array` constructor of the
/// `.so`; elsewhere on first use).
pub(crate) fn host() -> HostCriu {
    static HOST: OnceLock<HostCriu> = OnceLock::new();
    *HOST.get_or_init(|| decide(&probe()))
}

/// Looks at the running process: criu's exported `print_on_level` and `cr_plugin_ctl`.
pub(crate) fn probe() -> HostFacts {
    let print = lookup(c"print_on_level");
    let table = lookup(c"cr_plugin_ctl");
    let print_on_level = !print.is_null();
    let hook_table_bytes = if print_on_level && !table.is_null() {
        object_base(print)
            .filter(|base| object_base(table) == Some(*base))
            .and_then(|_| symbol_size(table))
    } else {
        None
    };
    HostFacts {
        print_on_level,
        hook_table_bytes,
    }
}

/// `dlsym(RTLD_DEFAULT, name)`: the global scope (criu's own dynamic symbols, as it links with
/// `-rdynamic`), never a link-time reference.
pub(crate) fn lookup(name: &CStr) -> *mut c_void {
    // SAFETY: `name` is NUL-terminated; RTLD_DEFAULT is a valid pseudo-handle for dlsym.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) }
}

/// Load address of the object that holds `addr`.
fn object_base(addr: *mut c_void) -> Option<usize> {
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads `addr` as a number and fills `info`, which lives for the call.
    let found = unsafe { libc::dladdr(addr, &mut info) };
    (found != 0 && !info.dli_fbase.is_null()).then_some(info.dli_fbase as usize)
}

/// `st_size` of the dynamic symbol that starts exactly at `addr` (glibc's `dladdr1`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn symbol_size(addr: *mut c_void) -> Option<u64> {
    #[cfg(target_pointer_width = "64")]
    type ElfSym = libc::Elf64_Sym;
    #[cfg(target_pointer_width = "32")]
    type ElfSym = libc::Elf32_Sym;
    /// glibc's `RTLD_DL_SYMENT`: `extra_info` receives a pointer to the symbol's `ElfW(Sym)`.
    const RTLD_DL_SYMENT: libc::c_int = 1;

    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    let mut sym: *const ElfSym = std::ptr::null();
    // SAFETY: dladdr1 reads `addr` as a number and fills `info` and `sym` (a pointer into the
    // object's dynamic symbol table, valid while the object stays loaded: the main program).
    let found = unsafe {
        libc::dladdr1(
            addr,
            &mut info,
            (&mut sym as *mut *const ElfSym).cast::<*mut c_void>(),
            RTLD_DL_SYMENT,
        )
    };
    if found == 0 || sym.is_null() || info.dli_saddr != addr {
        return None;
    }
    // SAFETY: non-null `sym` points at an entry of the loaded object's dynamic symbol table.
    let size = unsafe { (*sym).st_size };
    #[allow(clippy::useless_conversion)] // `Elf32_Sym::st_size` is a u32
    Some(u64::from(size))
}

/// Without glibc's `dladdr1` the table cannot be measured: the caller assumes the 3.17 set.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn symbol_size(_addr: *mut c_void) -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn table(hooks: u64) -> Option<u64> {
        Some((1 + hooks) * LIST_HEAD_BYTES)
    }

    /// Hook counts per criu release (the project's CRIU reference, section 1, and the stored
    /// criu-plugin.h versions): 3.17-3.19 10, 4.0/4.1 12, 4.2 13, development 15, later 17.
    #[rstest]
    #[case::not_criu(false, None, 10, Detection::NotCriu, 10, [false, false, false, false])]
    #[case::not_criu_with_table(false, table(15), 10, Detection::NotCriu, 10, [false, false, false, false])]
    #[case::criu_3_17(true, table(10), 10, Detection::HookTable, 10, [false, false, false, false])]
    #[case::criu_4_0(true, table(12), 12, Detection::HookTable, 12, [false, false, false, false])]
    #[case::criu_4_2(true, table(13), 13, Detection::HookTable, 13, [true, false, false, false])]
    #[case::dev_restore_init_only(true, table(14), 14, Detection::HookTable, 14, [true, true, false, false])]
    #[case::criu_dev(true, table(15), 15, Detection::HookTable, 15, [true, true, true, true])]
    #[case::criu_later(true, table(17), 17, Detection::HookTable, 15, [true, true, true, true])]
    #[case::criu_old(true, table(7), 7, Detection::HookTable, 7, [false, false, false, false])]
    #[case::no_table(true, None, 10, Detection::Assumed, 10, [false, false, false, false])]
    #[case::odd_size(true, Some(100), 10, Detection::Assumed, 10, [false, false, false, false])]
    #[case::only_head(true, table(0), 10, Detection::Assumed, 10, [false, false, false, false])]
    #[case::empty(true, Some(0), 10, Detection::Assumed, 10, [false, false, false, false])]
    #[case::absurd(true, table(100_000), 10, Detection::Assumed, 10, [false, false, false, false])]
    fn decision_table(
        #[case] print_on_level: bool,
        #[case] hook_table_bytes: Option<u64>,
        #[case] hooks: u32,
        #[case] detection: Detection,
        #[case] max_hooks: u32,
        #[case] features: [bool; 4],
    ) {
        let host = decide(&HostFacts {
            print_on_level,
            hook_table_bytes,
        });
        assert_eq!(host.hooks, hooks);
        assert_eq!(host.detection, detection);
        assert_eq!(host.max_hooks(), max_hooks);
        assert_eq!(
            [
                host.has_post_forking,
                host.has_restore_init,
                host.has_dump_devices_late,
                host.restore_ext_file_retry,
            ],
            features
        );
    }

    #[test]
    fn test_process_is_not_criu() {
        // This test binary exports no criu API: the shim must fall back to the 3.17 set.
        let host = host();
        assert_eq!(host.detection, Detection::NotCriu);
        assert_eq!(host.max_hooks(), BASELINE_HOOKS);
        assert!(!host.restore_ext_file_retry);
    }

    #[test]
    fn symbol_size_reads_a_known_glibc_symbol() {
        // `environ` is a data symbol of libc with the size of one pointer.
        let addr = lookup(c"environ");
        assert!(!addr.is_null());
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        assert_eq!(
            symbol_size(addr),
            Some(std::mem::size_of::<*const c_void>() as u64)
        );
    }
}
