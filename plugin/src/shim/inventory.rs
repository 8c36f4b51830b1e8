//! criu's plugin inventory functions (criu 4.1+), looked up in the running criu.
//!
//! criu exports, from its executable (no header declares them for plugins):
//! `int add_inventory_plugin(const char *name)` (0 on success) and
//! `bool check_and_remove_inventory_plugin(const char *name, size_t n)`. criu 3.17 has neither,
//! so they are found with `dlsym` when used, never linked: the same `.so` loads into both.

use std::ffi::{c_char, c_int, c_void};

use super::{lookup_symbol, PLUGIN_NAME};
use crate::inventory::{Inventory, RecordError};

type AddFn = unsafe extern "C" fn(*const c_char) -> c_int;
type CheckFn = unsafe extern "C" fn(*const c_char, usize) -> bool;

/// The inventory of the criu this plugin runs in (none outside criu, or in criu before 4.1).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct HostInventory;

fn add_fn() -> Option<AddFn> {
    let f = lookup_symbol(c"add_inventory_plugin");
    // SAFETY: criu's `int add_inventory_plugin(const char *name)` (criu/image.c, 4.1+); a non-null
    // data pointer to a function converts to that function's pointer.
    (!f.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, AddFn>(f) })
}

fn check_fn() -> Option<CheckFn> {
    let f = lookup_symbol(c"check_and_remove_inventory_plugin");
    // SAFETY: criu's `bool check_and_remove_inventory_plugin(const char *name, size_t n)`
    // (criu/image.c, 4.1+; C `bool` is `_Bool`, which Rust's `bool` matches); a non-null data
    // pointer to a function converts to that function's pointer.
    (!f.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, CheckFn>(f) })
}

impl Inventory for HostInventory {
    fn present(&self) -> bool {
        add_fn().is_some() && check_fn().is_some()
    }

    fn record(&self) -> Result<(), RecordError> {
        let Some(add) = add_fn() else {
            return Ok(());
        };
        // SAFETY: `PLUGIN_NAME` is a static NUL-terminated string; criu copies it.
        match unsafe { add(PLUGIN_NAME.as_ptr()) } {
            0 => Ok(()),
            _ => Err(RecordError {
                name: crate::inventory::NAME,
            }),
        }
    }

    fn claim(&self) -> bool {
        let Some(check) = check_fn() else {
            return true;
        };
        let name = PLUGIN_NAME.to_bytes();
        // SAFETY: `name` points to `name.len()` readable bytes (criu compares at most that many).
        unsafe { check(name.as_ptr().cast::<c_char>(), name.len()) }
    }
}
