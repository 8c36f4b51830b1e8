//! The DRM core as a render node meets it (`drm_ioctl.c`, 6.1): the core and amdgpu ioctl tables
//! with their permission flags, `drm_ioctl_permit`, and the core ioctls a render node answers
//! (`VERSION`, `GET_CAP`).
//!
//! The tables hold every number the 6.1 kernel defines, with the direction and size of its own
//! request code (which set the copy sizes) and its flags. On a render node, `drm_ioctl_permit`
//! refuses (`EACCES`) every ioctl without `DRM_RENDER_ALLOW`, and every `DRM_MASTER` or
//! `DRM_ROOT_ONLY` one without the matching privilege: so `GET_CLIENT`, `GET_MAGIC`,
//! `AUTH_MAGIC`, `GET_UNIQUE`, `SET_CLIENT_CAP`, the legacy and mode-setting ioctls and
//! `AMDGPU_SCHED` are refused as the kernel refuses them. A number without a row (a hole of the
//! tables, or past them) is `EINVAL`, before anything is copied.
//!
//! Rows without a handler that a render node would run are the ioctls the simulator does not
//! answer (sync objects, `AMDGPU_GEM_METADATA`, `AMDGPU_WAIT_FENCES`, `AMDGPU_VM`,
//! `AMDGPU_FENCE_TO_HANDLE`): each is logged once per machine by name and answered `EINVAL`.

use std::mem::offset_of;

use kfd_abi::ioctl::{encode, Dir};
use kfd_abi::Errno;
use kfd_sys as sys;

use super::{Handler, RenderCall};
use crate::state::machine::Kernel;
use crate::uaccess::{copy_to_user, get_u32, get_u64, put_u32, put_u64, IoctlResult};

/// `DRM_AUTH`: authenticated clients only (render clients count as authenticated).
pub(super) const AUTH: u32 = 1 << 0;
/// `DRM_MASTER`: the DRM master only.
pub(super) const MASTER: u32 = 1 << 1;
/// `DRM_ROOT_ONLY`: `CAP_SYS_ADMIN` only.
pub(super) const ROOT_ONLY: u32 = 1 << 2;
/// `DRM_UNLOCKED`: no global lock (legacy drivers).
pub(super) const UNLOCKED: u32 = 1 << 4;
/// `DRM_RENDER_ALLOW`: render nodes may issue it.
pub(super) const RENDER_ALLOW: u32 = 1 << 5;
const NONE: u32 = 0;

/// `KMS_DRIVER_PATCHLEVEL`.
pub(super) const DRIVER_PATCHLEVEL: i32 = 0;
/// `DRIVER_NAME`.
pub(super) const DRIVER_NAME: &str = "amdgpu";
/// `DRIVER_DATE`.
pub(super) const DRIVER_DATE: &str = "20150101";
/// `DRIVER_DESC`.
pub(super) const DRIVER_DESC: &str = "AMD GPU";

/// One ioctl of the kernel's tables.
#[derive(Clone, Copy)]
pub(super) struct Row {
    /// `_IOC_NR`.
    pub nr: u8,
    /// The name without `DRM_IOCTL_`.
    pub name: &'static str,
    /// The kernel's own request code (its direction and size govern the copies).
    pub cmd: u32,
    /// `DRM_AUTH`, `DRM_MASTER`, ...
    pub flags: u32,
    /// What the simulator runs once the permission check passes; `None`: not simulated.
    pub handler: Option<Handler>,
}

const fn row(
    nr: u8,
    name: &'static str,
    dir: Dir,
    size: usize,
    flags: u32,
    handler: Option<Handler>,
) -> Row {
    Row {
        nr,
        name,
        cmd: encode(dir, sys::DRM_IOCTL_BASE, nr, size),
        flags,
        handler,
    }
}

/// The DRM core ioctls of 6.1 (`drm_ioctls[]`, with `CONFIG_AGP` and without `CONFIG_DRM_LEGACY`,
/// as Debian builds it: the legacy ioctls keep their rows, with `drm_invalid_op`), by number.
pub(super) const CORE: &[Row] = &[
    row(
        0x00,
        "VERSION",
        Dir::ReadWrite,
        64,
        RENDER_ALLOW,
        Some(version),
    ),
    row(0x01, "GET_UNIQUE", Dir::ReadWrite, 16, NONE, None),
    row(0x02, "GET_MAGIC", Dir::Read, 4, NONE, None),
    row(
        0x03,
        "IRQ_BUSID",
        Dir::ReadWrite,
        16,
        MASTER | ROOT_ONLY,
        None,
    ),
    row(0x04, "GET_MAP", Dir::ReadWrite, 40, NONE, None),
    row(0x05, "GET_CLIENT", Dir::ReadWrite, 40, NONE, None),
    row(0x06, "GET_STATS", Dir::Read, 248, NONE, None),
    row(0x07, "SET_VERSION", Dir::ReadWrite, 16, MASTER, None),
    row(0x08, "MODESET_CTL", Dir::Write, 8, NONE, None),
    row(
        0x09,
        "GEM_CLOSE",
        Dir::Write,
        8,
        RENDER_ALLOW,
        Some(super::gem::gem_close),
    ),
    row(0x0a, "GEM_FLINK", Dir::ReadWrite, 8, AUTH, None),
    row(0x0b, "GEM_OPEN", Dir::ReadWrite, 16, AUTH, None),
    row(
        0x0c,
        "GET_CAP",
        Dir::ReadWrite,
        16,
        RENDER_ALLOW,
        Some(get_cap),
    ),
    row(0x0d, "SET_CLIENT_CAP", Dir::Write, 16, NONE, None),
    row(
        0x10,
        "SET_UNIQUE",
        Dir::Write,
        16,
        AUTH | MASTER | ROOT_ONLY,
        None,
    ),
    row(0x11, "AUTH_MAGIC", Dir::Write, 4, MASTER, None),
    row(
        0x12,
        "BLOCK",
        Dir::ReadWrite,
        4,
        AUTH | MASTER | ROOT_ONLY,
        None,
    ),
    row(
        0x13,
        "UNBLOCK",
        Dir::ReadWrite,
        4,
        AUTH | MASTER | ROOT_ONLY,
        None,
    ),
    row(
        0x14,
        "CONTROL",
        Dir::Write,
        8,
        AUTH | MASTER | ROOT_ONLY,
        None,
    ),
    row(
        0x15,
        "ADD_MAP",
        Dir::ReadWrite,
        40,
        AUTH | MASTER | ROOT_ONLY,
        None,
    ),
    row(
        0x16,
        "ADD_BUFS",
        Dir::ReadWrite,
        32,
        AUTH | MASTER | ROOT_ONLY,
        None,
    ),
    row(
        0x17,
        "MARK_BUFS",
        Dir::Write,
        32,
        AUTH | MASTER | ROOT_ONLY,
        None,
    ),
    row(0x18, "INFO_BUFS", Dir::ReadWrite, 16, AUTH, None),
    row(0x19, "MAP_BUFS", Dir::ReadWrite, 24, AUTH, None),
    row(0x1a, "FREE_BUFS", Dir::Write, 16, AUTH, None),
    row(0x1b, "RM_MAP", Dir::Write, 40, AUTH, None),
    row(
        0x1c,
        "SET_SAREA_CTX",
        Dir::Write,
        16,
        AUTH | MASTER | ROOT_ONLY,
        None,
    ),
    row(0x1d, "GET_SAREA_CTX", Dir::ReadWrite, 16, AUTH, None),
    row(0x1e, "SET_MASTER", Dir::None, 0, NONE, None),
    row(0x1f, "DROP_MASTER", Dir::None, 0, NONE, None),
    row(0x20, "ADD_CTX", Dir::ReadWrite, 8, AUTH | ROOT_ONLY, None),
    row(
        0x21,
        "RM_CTX",
        Dir::ReadWrite,
        8,
        AUTH | MASTER | ROOT_ONLY,
        None,
    ),
    row(
        0x22,
        "MOD_CTX",
        Dir::Write,
        8,
        AUTH | MASTER | ROOT_ONLY,
        None,
    ),
    row(0x23, "GET_CTX", Dir::ReadWrite, 8, AUTH, None),
    row(
        0x24,
        "SWITCH_CTX",
        Dir::Write,
        8,
        AUTH | MASTER | ROOT_ONLY,
        None,
    ),
    row(
        0x25,
        "NEW_CTX",
        Dir::Write,
        8,
        AUTH | MASTER | ROOT_ONLY,
        None,
    ),
    row(0x26, "RES_CTX", Dir::ReadWrite, 16, AUTH, None),
    row(
        0x27,
        "ADD_DRAW",
        Dir::ReadWrite,
        4,
        AUTH | MASTER | ROOT_ONLY,
        None,
    ),
    row(
        0x28,
        "RM_DRAW",
        Dir::ReadWrite,
        4,
        AUTH | MASTER | ROOT_ONLY,
        None,
    ),
    row(0x29, "DMA", Dir::ReadWrite, 64, AUTH, None),
    row(0x2a, "LOCK", Dir::Write, 8, AUTH, None),
    row(0x2b, "UNLOCK", Dir::Write, 8, AUTH, None),
    row(0x2c, "FINISH", Dir::Write, 8, AUTH, None),
    row(
        0x2d,
        "PRIME_HANDLE_TO_FD",
        Dir::ReadWrite,
        12,
        RENDER_ALLOW,
        Some(super::prime::prime_handle_to_fd),
    ),
    row(
        0x2e,
        "PRIME_FD_TO_HANDLE",
        Dir::ReadWrite,
        12,
        RENDER_ALLOW,
        Some(super::prime::prime_fd_to_handle),
    ),
    row(
        0x30,
        "AGP_ACQUIRE",
        Dir::None,
        0,
        AUTH | MASTER | ROOT_ONLY,
        None,
    ),
    row(
        0x31,
        "AGP_RELEASE",
        Dir::None,
        0,
        AUTH | MASTER | ROOT_ONLY,
        None,
    ),
    row(
        0x32,
        "AGP_ENABLE",
        Dir::Write,
        8,
        AUTH | MASTER | ROOT_ONLY,
        None,
    ),
    row(0x33, "AGP_INFO", Dir::Read, 56, AUTH, None),
    row(
        0x34,
        "AGP_ALLOC",
        Dir::ReadWrite,
        32,
        AUTH | MASTER | ROOT_ONLY,
        None,
    ),
    row(
        0x35,
        "AGP_FREE",
        Dir::Write,
        32,
        AUTH | MASTER | ROOT_ONLY,
        None,
    ),
    row(
        0x36,
        "AGP_BIND",
        Dir::Write,
        16,
        AUTH | MASTER | ROOT_ONLY,
        None,
    ),
    row(
        0x37,
        "AGP_UNBIND",
        Dir::Write,
        16,
        AUTH | MASTER | ROOT_ONLY,
        None,
    ),
    row(
        0x38,
        "SG_ALLOC",
        Dir::ReadWrite,
        16,
        AUTH | MASTER | ROOT_ONLY,
        None,
    ),
    row(
        0x39,
        "SG_FREE",
        Dir::Write,
        16,
        AUTH | MASTER | ROOT_ONLY,
        None,
    ),
    row(0x3a, "WAIT_VBLANK", Dir::ReadWrite, 24, UNLOCKED, None),
    row(0x3b, "CRTC_GET_SEQUENCE", Dir::ReadWrite, 24, NONE, None),
    row(0x3c, "CRTC_QUEUE_SEQUENCE", Dir::ReadWrite, 24, NONE, None),
    row(
        0x3f,
        "UPDATE_DRAW",
        Dir::Write,
        24,
        AUTH | MASTER | ROOT_ONLY,
        None,
    ),
    row(0xa0, "MODE_GETRESOURCES", Dir::ReadWrite, 64, NONE, None),
    row(0xa1, "MODE_GETCRTC", Dir::ReadWrite, 104, NONE, None),
    row(0xa2, "MODE_SETCRTC", Dir::ReadWrite, 104, MASTER, None),
    row(0xa3, "MODE_CURSOR", Dir::ReadWrite, 28, MASTER, None),
    row(0xa4, "MODE_GETGAMMA", Dir::ReadWrite, 32, NONE, None),
    row(0xa5, "MODE_SETGAMMA", Dir::ReadWrite, 32, MASTER, None),
    row(0xa6, "MODE_GETENCODER", Dir::ReadWrite, 20, NONE, None),
    row(0xa7, "MODE_GETCONNECTOR", Dir::ReadWrite, 80, NONE, None),
    row(0xa8, "MODE_ATTACHMODE", Dir::ReadWrite, 72, MASTER, None),
    row(0xa9, "MODE_DETACHMODE", Dir::ReadWrite, 72, MASTER, None),
    row(0xaa, "MODE_GETPROPERTY", Dir::ReadWrite, 64, NONE, None),
    row(0xab, "MODE_SETPROPERTY", Dir::ReadWrite, 16, MASTER, None),
    row(0xac, "MODE_GETPROPBLOB", Dir::ReadWrite, 16, NONE, None),
    row(0xad, "MODE_GETFB", Dir::ReadWrite, 28, NONE, None),
    row(0xae, "MODE_ADDFB", Dir::ReadWrite, 28, NONE, None),
    row(0xaf, "MODE_RMFB", Dir::ReadWrite, 4, NONE, None),
    row(0xb0, "MODE_PAGE_FLIP", Dir::ReadWrite, 24, MASTER, None),
    row(0xb1, "MODE_DIRTYFB", Dir::ReadWrite, 24, MASTER, None),
    row(0xb2, "MODE_CREATE_DUMB", Dir::ReadWrite, 32, NONE, None),
    row(0xb3, "MODE_MAP_DUMB", Dir::ReadWrite, 16, NONE, None),
    row(0xb4, "MODE_DESTROY_DUMB", Dir::ReadWrite, 4, NONE, None),
    row(
        0xb5,
        "MODE_GETPLANERESOURCES",
        Dir::ReadWrite,
        16,
        NONE,
        None,
    ),
    row(0xb6, "MODE_GETPLANE", Dir::ReadWrite, 32, NONE, None),
    row(0xb7, "MODE_SETPLANE", Dir::ReadWrite, 48, MASTER, None),
    row(0xb8, "MODE_ADDFB2", Dir::ReadWrite, 104, NONE, None),
    row(
        0xb9,
        "MODE_OBJ_GETPROPERTIES",
        Dir::ReadWrite,
        32,
        NONE,
        None,
    ),
    row(
        0xba,
        "MODE_OBJ_SETPROPERTY",
        Dir::ReadWrite,
        24,
        MASTER,
        None,
    ),
    row(0xbb, "MODE_CURSOR2", Dir::ReadWrite, 36, MASTER, None),
    row(0xbc, "MODE_ATOMIC", Dir::ReadWrite, 56, MASTER, None),
    row(0xbd, "MODE_CREATEPROPBLOB", Dir::ReadWrite, 16, NONE, None),
    row(0xbe, "MODE_DESTROYPROPBLOB", Dir::ReadWrite, 4, NONE, None),
    row(
        0xbf,
        "SYNCOBJ_CREATE",
        Dir::ReadWrite,
        8,
        RENDER_ALLOW,
        None,
    ),
    row(
        0xc0,
        "SYNCOBJ_DESTROY",
        Dir::ReadWrite,
        8,
        RENDER_ALLOW,
        None,
    ),
    row(
        0xc1,
        "SYNCOBJ_HANDLE_TO_FD",
        Dir::ReadWrite,
        16,
        RENDER_ALLOW,
        None,
    ),
    row(
        0xc2,
        "SYNCOBJ_FD_TO_HANDLE",
        Dir::ReadWrite,
        16,
        RENDER_ALLOW,
        None,
    ),
    row(0xc3, "SYNCOBJ_WAIT", Dir::ReadWrite, 32, RENDER_ALLOW, None),
    row(
        0xc4,
        "SYNCOBJ_RESET",
        Dir::ReadWrite,
        16,
        RENDER_ALLOW,
        None,
    ),
    row(
        0xc5,
        "SYNCOBJ_SIGNAL",
        Dir::ReadWrite,
        16,
        RENDER_ALLOW,
        None,
    ),
    row(0xc6, "MODE_CREATE_LEASE", Dir::ReadWrite, 24, MASTER, None),
    row(0xc7, "MODE_LIST_LESSEES", Dir::ReadWrite, 16, MASTER, None),
    row(0xc8, "MODE_GET_LEASE", Dir::ReadWrite, 16, MASTER, None),
    row(0xc9, "MODE_REVOKE_LEASE", Dir::ReadWrite, 4, MASTER, None),
    row(
        0xca,
        "SYNCOBJ_TIMELINE_WAIT",
        Dir::ReadWrite,
        40,
        RENDER_ALLOW,
        None,
    ),
    row(
        0xcb,
        "SYNCOBJ_QUERY",
        Dir::ReadWrite,
        24,
        RENDER_ALLOW,
        None,
    ),
    row(
        0xcc,
        "SYNCOBJ_TRANSFER",
        Dir::ReadWrite,
        32,
        RENDER_ALLOW,
        None,
    ),
    row(
        0xcd,
        "SYNCOBJ_TIMELINE_SIGNAL",
        Dir::ReadWrite,
        24,
        RENDER_ALLOW,
        None,
    ),
    row(0xce, "MODE_GETFB2", Dir::ReadWrite, 104, NONE, None),
];

/// The amdgpu ioctls of 6.1 (`amdgpu_ioctls_kms[]`, numbers from `DRM_COMMAND_BASE`); the
/// numbers between `WAIT_CS` and `GEM_OP` are holes (no function: `EINVAL`).
pub(super) const AMDGPU: &[Row] = &[
    row(
        0x40,
        "AMDGPU_GEM_CREATE",
        Dir::ReadWrite,
        32,
        AUTH | RENDER_ALLOW,
        Some(super::gem::gem_create),
    ),
    row(
        0x41,
        "AMDGPU_GEM_MMAP",
        Dir::ReadWrite,
        8,
        AUTH | RENDER_ALLOW,
        Some(super::gem::gem_mmap),
    ),
    row(
        0x42,
        "AMDGPU_CTX",
        Dir::ReadWrite,
        16,
        AUTH | RENDER_ALLOW,
        Some(super::ctx::ctx),
    ),
    row(
        0x43,
        "AMDGPU_BO_LIST",
        Dir::ReadWrite,
        24,
        AUTH | RENDER_ALLOW,
        Some(super::bo_list::bo_list),
    ),
    row(
        0x44,
        "AMDGPU_CS",
        Dir::ReadWrite,
        24,
        AUTH | RENDER_ALLOW,
        Some(super::cs::cs),
    ),
    row(
        0x45,
        "AMDGPU_INFO",
        Dir::Write,
        32,
        AUTH | RENDER_ALLOW,
        Some(super::info::info),
    ),
    row(
        0x46,
        "AMDGPU_GEM_METADATA",
        Dir::ReadWrite,
        288,
        AUTH | RENDER_ALLOW,
        None,
    ),
    row(
        0x47,
        "AMDGPU_GEM_WAIT_IDLE",
        Dir::ReadWrite,
        16,
        AUTH | RENDER_ALLOW,
        Some(gem_wait_idle),
    ),
    row(
        0x48,
        "AMDGPU_GEM_VA",
        Dir::Write,
        40,
        AUTH | RENDER_ALLOW,
        Some(super::vm::gem_va),
    ),
    row(
        0x49,
        "AMDGPU_WAIT_CS",
        Dir::ReadWrite,
        32,
        AUTH | RENDER_ALLOW,
        Some(super::cs::wait_cs),
    ),
    row(
        0x50,
        "AMDGPU_GEM_OP",
        Dir::ReadWrite,
        16,
        AUTH | RENDER_ALLOW,
        Some(super::gem::gem_op),
    ),
    row(
        0x51,
        "AMDGPU_GEM_USERPTR",
        Dir::ReadWrite,
        24,
        AUTH | RENDER_ALLOW,
        Some(super::gem::gem_userptr),
    ),
    row(
        0x52,
        "AMDGPU_WAIT_FENCES",
        Dir::ReadWrite,
        24,
        AUTH | RENDER_ALLOW,
        None,
    ),
    row(
        0x53,
        "AMDGPU_VM",
        Dir::ReadWrite,
        8,
        AUTH | RENDER_ALLOW,
        None,
    ),
    row(
        0x54,
        "AMDGPU_FENCE_TO_HANDLE",
        Dir::ReadWrite,
        32,
        AUTH | RENDER_ALLOW,
        None,
    ),
    row(0x55, "AMDGPU_SCHED", Dir::Write, 16, MASTER, None),
];

/// The rows 6.18 adds or changes that the simulator's 6.18 personality runs: the core's
/// `GEM_CHANGE_HANDLE` (6.18), amdgpu's `GEM_OP` with its 24-byte argument and
/// `GEM_LIST_HANDLES` (6.18). The other numbers added since 6.1 (sync object event fds, client
/// names, user queues, ...) keep no row here: `EINVAL`, as numbers without a function.
pub(super) const LINUX_6_18: &[Row] = &[
    row(
        0xd2,
        "GEM_CHANGE_HANDLE",
        Dir::ReadWrite,
        8,
        RENDER_ALLOW,
        Some(super::gem::gem_change_handle),
    ),
    row(
        0x50,
        "AMDGPU_GEM_OP",
        Dir::ReadWrite,
        24,
        AUTH | RENDER_ALLOW,
        Some(super::gem::gem_op),
    ),
    row(
        0x59,
        "AMDGPU_GEM_LIST_HANDLES",
        Dir::ReadWrite,
        16,
        AUTH | RENDER_ALLOW,
        Some(super::gem::gem_list_handles),
    ),
];

/// The rows 7.2 has in place of 6.18's: `GEM_CHANGE_HANDLE` turned off (`drm_invalid_op`, with
/// the row's `DRM_RENDER_ALLOW` kept), as in every kernel fixed in June 2026.
pub(super) const LINUX_7_2: &[Row] = &[row(
    0xd2,
    "GEM_CHANGE_HANDLE",
    Dir::ReadWrite,
    8,
    RENDER_ALLOW,
    Some(super::gem::invalid_op),
)];

/// The row `drm_ioctl` picks for `nr` on `kernel`: driver numbers
/// (`DRM_COMMAND_BASE..DRM_COMMAND_END`) from amdgpu's table, others from the core table; on
/// 6.18 its own rows first, on 7.2 its own and then 6.18's; `None` for holes and numbers past the
/// tables.
pub(super) fn lookup(nr: u8, kernel: Kernel) -> Option<&'static Row> {
    let later: &[&[Row]] = match kernel {
        Kernel::Linux6_1 => &[],
        Kernel::Linux6_18 => &[LINUX_6_18],
        Kernel::Linux7_2 => &[LINUX_7_2, LINUX_6_18],
    };
    if let Some(r) = later.iter().flat_map(|t| t.iter()).find(|r| r.nr == nr) {
        return Some(r);
    }
    let base = sys::DRM_COMMAND_BASE;
    let end = sys::DRM_COMMAND_END;
    let table = if (base..end).contains(&u32::from(nr)) {
        AMDGPU
    } else {
        CORE
    };
    table.iter().find(|r| r.nr == nr)
}

/// `drm_ioctl_permit` for a client of a render node, which is never the DRM master, counts as
/// authenticated, and may be `CAP_SYS_ADMIN` (`sys_admin`).
pub(super) fn permit(flags: u32, sys_admin: bool) -> Result<(), Errno> {
    let render = true;
    if flags & ROOT_ONLY != 0 && !sys_admin {
        return Err(Errno::EACCES);
    }
    // DRM_AUTH passes: render clients need no authentication.
    if flags & MASTER != 0 {
        return Err(Errno::EACCES);
    }
    if flags & RENDER_ALLOW == 0 && render {
        return Err(Errno::EACCES);
    }
    Ok(())
}

/// `drm_copy_field`: writes at most `*len` bytes of `value` to `buf` (nothing when the length or
/// the pointer is zero) and sets `*len` to the value's full length.
fn copy_field(
    call: &RenderCall<'_>,
    kdata: &mut [u8],
    len_at: usize,
    buf_at: usize,
    value: &str,
) -> Result<(), Errno> {
    let room = get_u64(kdata, len_at);
    let buf = get_u64(kdata, buf_at);
    let n = usize::try_from(room).unwrap_or(usize::MAX).min(value.len());
    put_u64(kdata, len_at, value.len() as u64);
    if n > 0 && buf != 0 {
        copy_to_user(call.client, buf, &value.as_bytes()[..n])?;
    }
    Ok(())
}

/// `drm_version`: amdgpu's version 3.49.0, then name, date and description through
/// `drm_copy_field` (`EFAULT` if a buffer cannot be written).
fn version(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use sys::drm_version as V;
    let (major, minor) = call.machine.kernel().drm_version();
    put_u32(kdata, offset_of!(V, version_major), major.unsigned_abs());
    put_u32(kdata, offset_of!(V, version_minor), minor.unsigned_abs());
    put_u32(
        kdata,
        offset_of!(V, version_patchlevel),
        DRIVER_PATCHLEVEL as u32,
    );
    copy_field(
        call,
        kdata,
        offset_of!(V, name_len),
        offset_of!(V, name),
        DRIVER_NAME,
    )?;
    copy_field(
        call,
        kdata,
        offset_of!(V, date_len),
        offset_of!(V, date),
        DRIVER_DATE,
    )?;
    copy_field(
        call,
        kdata,
        offset_of!(V, desc_len),
        offset_of!(V, desc),
        DRIVER_DESC,
    )?;
    Ok(0)
}

/// `drm_getcap` for amdgpu (a KMS driver with PRIME import and export and timeline sync
/// objects) on a board without display hardware, whose mode configuration is never initialised:
/// no preferred depth, no shadow, no async flips, the default 64x64 cursor, modifiers supported.
/// Unknown capabilities `EINVAL`.
fn get_cap(_call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use sys::drm_get_cap as C;
    let cap = get_u64(kdata, offset_of!(C, capability));
    let value: u64 = match u32::try_from(cap).unwrap_or(u32::MAX) {
        sys::DRM_CAP_TIMESTAMP_MONOTONIC => 1,
        sys::DRM_CAP_PRIME => u64::from(sys::DRM_PRIME_CAP_IMPORT | sys::DRM_PRIME_CAP_EXPORT),
        sys::DRM_CAP_SYNCOBJ | sys::DRM_CAP_SYNCOBJ_TIMELINE => 1,
        sys::DRM_CAP_DUMB_BUFFER | sys::DRM_CAP_VBLANK_HIGH_CRTC => 1,
        sys::DRM_CAP_DUMB_PREFERRED_DEPTH
        | sys::DRM_CAP_DUMB_PREFER_SHADOW
        | sys::DRM_CAP_ASYNC_PAGE_FLIP => 0,
        sys::DRM_CAP_CURSOR_WIDTH | sys::DRM_CAP_CURSOR_HEIGHT => 64,
        sys::DRM_CAP_ADDFB2_MODIFIERS
        | sys::DRM_CAP_PAGE_FLIP_TARGET
        | sys::DRM_CAP_CRTC_IN_VBLANK_EVENT => 1,
        _ => {
            put_u64(kdata, offset_of!(C, value), 0);
            return Err(Errno::EINVAL);
        }
    };
    put_u64(kdata, offset_of!(C, value), value);
    Ok(0)
}

/// `amdgpu_gem_wait_idle_ioctl`: unknown handle `ENOENT`; else `status` 0 (idle): every
/// submission has completed when its `AMDGPU_CS` returns.
fn gem_wait_idle(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use sys::drm_amdgpu_gem_wait_idle_in as In;
    let handle = get_u32(kdata, offset_of!(In, handle));
    if !super::has_handle(call, handle) {
        return Err(Errno::ENOENT);
    }
    kdata.fill(0);
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kfd_abi::ioctl::drm as codes;

    #[test]
    fn rows_are_sorted_unique_and_agree_with_the_header_codes() {
        for table in [CORE, AMDGPU] {
            for w in table.windows(2) {
                assert!(w[0].nr < w[1].nr, "{} / {}", w[0].name, w[1].name);
            }
            for r in table {
                if let Some(d) = codes::lookup(r.cmd) {
                    if d.nr == r.nr {
                        assert_eq!(d.cmd, r.cmd, "{}", r.name);
                    }
                }
            }
        }
        assert_eq!(CORE.len(), 106);
        assert_eq!(AMDGPU.len(), 16);
    }

    #[test]
    fn only_render_allowed_rows_pass_on_a_render_node() {
        let allowed: Vec<&str> = CORE
            .iter()
            .chain(AMDGPU)
            .filter(|r| permit(r.flags, true).is_ok())
            .map(|r| r.name)
            .collect();
        assert!(allowed.contains(&"VERSION") && allowed.contains(&"GET_CAP"));
        assert!(!allowed.contains(&"GET_CLIENT") && !allowed.contains(&"SET_CLIENT_CAP"));
        assert!(!allowed.contains(&"AMDGPU_SCHED"));
        assert_eq!(allowed.len(), 16 + 15);
    }
}
