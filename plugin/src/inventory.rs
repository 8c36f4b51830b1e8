//! criu's plugin inventory (criu 4.1 and later).
//!
//! Since criu 4.1, `inventory.img` lists the plugins a dump needs. A plugin that handled anything
//! of a dump records its name there; at restore criu refuses to start when a listed plugin did not
//! claim its entry during `init`, and a plugin that is not listed stays out of that restore. An
//! image without the list (criu before 4.1) enables every plugin.
//!
//! This is what makes images interchangeable with upstream's C plugin, which records itself and
//! disables itself when it is not listed: a dump that never records `amdgpu_plugin` cannot be
//! restored by upstream's plugin, and a restore that never claims the entry cannot read any image
//! upstream's plugin made on criu 4.1+ ("Missing required plugin: amdgpu_plugin").
//!
//! The engine sees the inventory through [`Inventory`]; the C ABI shim implements it with criu's
//! exported functions (looked up at run time: they do not exist in criu 3.17), tests with fakes.

use std::fmt;

/// The name criu records, as upstream's plugin records it (`CR_PLUGIN_DESC.name`).
pub const NAME: &str = "amdgpu_plugin";

/// Why recording the plugin in a dump's inventory failed.
#[derive(Debug, thiserror::Error)]
#[error("criu could not add {name} to the dump's plugin inventory (inventory.img)")]
pub struct RecordError {
    /// The plugin's name ([`NAME`]).
    pub name: &'static str,
}

/// What criu's inventory offers the plugin.
pub trait Inventory: Send + Sync + fmt::Debug {
    /// Whether the host keeps a plugin inventory at all (criu 4.1+).
    fn present(&self) -> bool;

    /// Dump: adds this plugin to the dump's inventory. A host without an inventory succeeds
    /// without doing anything.
    fn record(&self) -> Result<(), RecordError>;

    /// Restore, during `init`: whether the image's inventory lists this plugin, taking the entry
    /// off criu's list of plugins still to be found. An image without a list (made by criu before
    /// 4.1), and a host without an inventory, enable every plugin: `true`.
    fn claim(&self) -> bool;
}

/// A host without a plugin inventory: criu before 4.1, tests, `amdgpu-cr`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NoInventory;

impl Inventory for NoInventory {
    fn present(&self) -> bool {
        false
    }

    fn record(&self) -> Result<(), RecordError> {
        Ok(())
    }

    fn claim(&self) -> bool {
        true
    }
}
