//! The engine behind criu's hooks, as the `.so` criu loads uses it.

use std::os::fd::{BorrowedFd, RawFd};
use std::path::Path;

use crate::hooks::{CriuHooks, HookError, HookResult, Stage, VmaUpdate};

/// The plugin state of one criu process. (Placeholder until the engine lands: claims nothing.)
#[derive(Debug, Default)]
pub struct AmdgpuPlugin;

impl CriuHooks for AmdgpuPlugin {
    fn init(&self, _stage: Stage) -> HookResult<()> {
        Ok(())
    }

    fn fini(&self, _stage: Stage, _ret: i32) {}

    fn handle_device_vma(&self, _fd: BorrowedFd<'_>, _rdev: u64) -> HookResult<()> {
        Err(HookError::NotOurs)
    }

    fn dump_ext_file(&self, _fd: BorrowedFd<'_>, _id: u32) -> HookResult<()> {
        Err(HookError::NotOurs)
    }

    fn restore_ext_file(&self, _id: u32) -> HookResult<Option<RawFd>> {
        Err(HookError::NotOurs)
    }

    fn update_vma_map(
        &self,
        _path: &Path,
        _addr: u64,
        _old_pgoff: u64,
    ) -> HookResult<Option<VmaUpdate>> {
        Err(HookError::NotOurs)
    }

    fn resume_devices_late(&self, _pid: i32) -> HookResult<()> {
        Err(HookError::NotOurs)
    }

    fn post_forking(&self) -> HookResult<()> {
        Err(HookError::NotOurs)
    }

    fn restore_init(&self) -> HookResult<()> {
        Err(HookError::NotOurs)
    }

    fn dump_devices_late(&self, _id: u32) -> HookResult<()> {
        Err(HookError::NotOurs)
    }
}

/// The hooks of this process's plugin instance.
pub fn hooks() -> &'static dyn CriuHooks {
    static PLUGIN: AmdgpuPlugin = AmdgpuPlugin;
    &PLUGIN
}
