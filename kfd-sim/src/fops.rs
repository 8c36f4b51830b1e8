//! The file operations of the simulated devices: which driver handles a call on an open file,
//! by its kind, as the kernel picks a `struct file`'s `file_operations`. `/dev/kfd`'s ioctls go
//! to amdkfd's table ([`kfd_ioctl`](crate::kfd::kfd_ioctl)), a render node's to amdgpu's DRM
//! tables ([`render::dispatch`](crate::render::dispatch)); an mmap to `kfd_mmap` or
//! `drm_gem_mmap` (the rules are in [`vma`](crate::vma)). Both front ends call here: the
//! in-process transport ([`SimFile`](crate::SimFile)) and the CUSE server.

use std::sync::Arc;

use kfd_abi::Errno;

use crate::client::Client;
use crate::state::machine::{FileKind, MachineInner, OpenFile};
use crate::state::process::KfdProcess;
use crate::vma::{MmapRequest, Target};

/// Issues ioctl `cmd` with its argument at `arg` in the caller's memory on `file`, by `client`.
pub(crate) fn ioctl(
    machine: &Arc<MachineInner>,
    file: &OpenFile,
    client: &dyn Client,
    cmd: u32,
    arg: u64,
) -> Result<i32, Errno> {
    match &file.kind {
        FileKind::Kfd(p) => crate::kfd::kfd_ioctl(machine, p, client, cmd, arg),
        FileKind::Render(r) => crate::render::dispatch(machine, r, client, cmd, arg),
    }
}

/// Answers one mmap of an open file of ours; `caller` is the calling process's KFD process.
pub(crate) fn mmap(
    m: &Arc<MachineInner>,
    file: &OpenFile,
    caller: Option<&Arc<KfdProcess>>,
    q: &MmapRequest,
) -> Result<Target, Errno> {
    match &file.kind {
        FileKind::Kfd(_) => crate::kfd::mmap::kfd_mmap(m, caller, q),
        FileKind::Render(r) => crate::render::mmap::gem_mmap(m, file, r, q),
    }
}
