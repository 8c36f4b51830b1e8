//! Request codes: the one place where every ioctl number of `/dev/kfd` and of the amdgpu render
//! node is declared, next to the struct it carries.
//!
//! The codes are computed from the argument struct's size (as the C `_IOWR` macros do), so a layout
//! mistake in `kfd-sys` changes the code and fails the tests against the header's literal values.
//! Each code is declared once, as a constant typed by its argument struct and direction (used by
//! this crate's call helpers, so that a struct or a direction other than the header's does not
//! compile), from which the public `u32` constant and the table row are derived.
//! The module is public because the simulator dispatches on the same table, as the kernel's
//! dispatcher and its uapi header share one definition.

use std::marker::PhantomData;
use std::mem::size_of;

use kfd_sys as sys;

/// `_IOC_NRBITS` etc. of the asm-generic ioctl encoding (x86-64, arm64).
const NR_SHIFT: u32 = 0;
const TYPE_SHIFT: u32 = 8;
const SIZE_SHIFT: u32 = 16;
const DIR_SHIFT: u32 = 30;
const SIZE_MASK: u32 = (1 << 14) - 1;

/// The direction bits of a request code, as seen from userspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// `_IO`: no argument.
    None = 0,
    /// `_IOW`: userspace writes, the kernel reads.
    Write = 1,
    /// `_IOR`: the kernel writes, userspace reads.
    Read = 2,
    /// `_IOWR`: both.
    ReadWrite = 3,
}

impl Dir {
    /// Whether the kernel copies the argument in.
    pub const fn copies_in(self) -> bool {
        matches!(self, Dir::Write | Dir::ReadWrite)
    }

    /// Whether the kernel copies the argument back out.
    pub const fn copies_out(self) -> bool {
        matches!(self, Dir::Read | Dir::ReadWrite)
    }
}

/// Encodes a request code like the C `_IOC` macro. `size` must fit in 14 bits.
pub const fn encode(dir: Dir, ty: u8, nr: u8, size: usize) -> u32 {
    assert!(
        size <= SIZE_MASK as usize,
        "ioctl argument too large for the size field"
    );
    #[allow(clippy::cast_possible_truncation)] // checked just above
    let size = size as u32;
    ((dir as u32) << DIR_SHIFT)
        | (size << SIZE_SHIFT)
        | ((ty as u32) << TYPE_SHIFT)
        | (nr as u32) << NR_SHIFT
}

/// The `_IOC_NR` field of a request code.
pub const fn nr(cmd: u32) -> u8 {
    (cmd & 0xff) as u8
}

/// The `_IOC_TYPE` field of a request code.
pub const fn ty(cmd: u32) -> u8 {
    ((cmd >> TYPE_SHIFT) & 0xff) as u8
}

/// The `_IOC_SIZE` field of a request code.
pub const fn size(cmd: u32) -> usize {
    ((cmd >> SIZE_SHIFT) & SIZE_MASK) as usize
}

/// The `_IOC_DIR` field of a request code.
pub const fn dir(cmd: u32) -> Dir {
    match cmd >> DIR_SHIFT {
        0 => Dir::None,
        1 => Dir::Write,
        2 => Dir::Read,
        _ => Dir::ReadWrite,
    }
}

/// One row of an ioctl table: number, name, and the request code the header defines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoctlDesc {
    /// `_IOC_NR`.
    pub nr: u8,
    /// The name without its `AMDKFD_IOC_` / `DRM_IOCTL_` prefix.
    pub name: &'static str,
    /// The full request code.
    pub cmd: u32,
}

/// The direction of a typed request code ([`Ioctl`]), as a type: one of [`Read`], [`Write`] and
/// [`ReadWrite`].
pub(crate) trait Direction {
    /// The direction bits this type stands for.
    const DIR: Dir;
}

/// `_IOR`: the kernel writes the argument, userspace reads it (a getter).
#[derive(Debug)]
pub(crate) enum Read {}
/// `_IOW`: userspace writes the argument, the kernel reads it (a setter).
#[derive(Debug)]
pub(crate) enum Write {}
/// `_IOWR`: the kernel reads the argument and writes it back.
#[derive(Debug)]
pub(crate) enum ReadWrite {}

impl Direction for Read {
    const DIR: Dir = Dir::Read;
}
impl Direction for Write {
    const DIR: Dir = Dir::Write;
}
impl Direction for ReadWrite {
    const DIR: Dir = Dir::ReadWrite;
}

/// A request code typed by the struct `A` it carries and its direction `D`.
///
/// Its size field is `size_of::<A>()` and its direction bits are `D`'s, both fixed when the
/// constant is evaluated at compile time (a struct too large for the 14-bit size field fails the
/// build), so the call helpers of [`crate::handle::DeviceFile`] cannot issue it with another
/// struct, and a getter cannot be issued with a code that the kernel does not copy back.
pub(crate) struct Ioctl<A, D> {
    code: u32,
    arg: PhantomData<fn() -> (A, D)>,
}

impl<A, D> Clone for Ioctl<A, D> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A, D> Copy for Ioctl<A, D> {}

impl<A, D: Direction> Ioctl<A, D> {
    /// The request `nr` of type `ty`, carrying an `A`.
    const fn new(ty: u8, nr: u8) -> Self {
        Self {
            code: encode(D::DIR, ty, nr, size_of::<A>()),
            arg: PhantomData,
        }
    }

    /// The request code.
    pub(crate) const fn code(self) -> u32 {
        self.code
    }

    /// The same request carrying `size` bytes instead of an `A` (a header followed by a
    /// variable-length array, as `SVM` takes). `size` must fit the 14-bit size field.
    pub(crate) const fn with_size(self, size: usize) -> u32 {
        encode(D::DIR, ty(self.code), nr(self.code), size)
    }
}

/// Declares the request codes of one node type: for each, a typed constant in the crate-private
/// module `req` ([`Ioctl`], for the call helpers), the public `u32` constant derived from it (for
/// the simulator and for tests), and one table per group.
macro_rules! ioctl_table {
    ($ty:expr, $(
        $(#[$table_doc:meta])* $table:ident at $base:expr => {
            $( $(#[$doc:meta])* $name:ident = $dir:ident($nr:literal, $arg:ty); )*
        }
    )*) => {
        /// The request codes typed by argument struct and direction.
        pub(crate) mod req {
            use super::*;
            $($(
                #[allow(clippy::cast_possible_truncation)]
                pub(crate) const $name: Ioctl<$arg, $crate::ioctl::$dir> =
                    Ioctl::new($ty, ($base + $nr) as u8);
            )*)*
        }
        $($(
            $(#[$doc])*
            pub const $name: u32 = req::$name.code();
        )*)*
        $(
            $(#[$table_doc])*
            pub const $table: &[IoctlDesc] = &[
                $( IoctlDesc { nr: nr($name), name: stringify!($name), cmd: $name }, )*
            ];
        )*
    };
}

/// `/dev/kfd` request codes (`AMDKFD_IOC_*`, type `'K'`), KFD ioctl 1.11.
pub mod kfd {
    use super::*;

    /// The ioctl type of `/dev/kfd`.
    pub const TYPE: u8 = b'K';
    /// `AMDKFD_COMMAND_START`.
    pub(crate) const COMMAND_START: u8 = 0x01;
    /// `AMDKFD_COMMAND_END`: one past the last number of KFD 1.11.
    pub(crate) const COMMAND_END: u8 = 0x24;

    ioctl_table!(TYPE,
        /// Every KFD 1.11 ioctl in number order, as the kernel's dispatch table holds them.
        TABLE at 0u32 => {
        GET_VERSION = Read(0x01, sys::kfd_ioctl_get_version_args);
        CREATE_QUEUE = ReadWrite(0x02, sys::kfd_ioctl_create_queue_args);
        DESTROY_QUEUE = ReadWrite(0x03, sys::kfd_ioctl_destroy_queue_args);
        SET_MEMORY_POLICY = Write(0x04, sys::kfd_ioctl_set_memory_policy_args);
        GET_CLOCK_COUNTERS = ReadWrite(0x05, sys::kfd_ioctl_get_clock_counters_args);
        GET_PROCESS_APERTURES = Read(0x06, sys::kfd_ioctl_get_process_apertures_args);
        UPDATE_QUEUE = Write(0x07, sys::kfd_ioctl_update_queue_args);
        CREATE_EVENT = ReadWrite(0x08, sys::kfd_ioctl_create_event_args);
        DESTROY_EVENT = Write(0x09, sys::kfd_ioctl_destroy_event_args);
        SET_EVENT = Write(0x0a, sys::kfd_ioctl_set_event_args);
        RESET_EVENT = Write(0x0b, sys::kfd_ioctl_reset_event_args);
        WAIT_EVENTS = ReadWrite(0x0c, sys::kfd_ioctl_wait_events_args);
        /// Deprecated: the kernel answers `EPERM`.
        DBG_REGISTER_DEPRECATED = Write(0x0d, sys::kfd_ioctl_dbg_register_args);
        /// Deprecated: the kernel answers `EPERM`.
        DBG_UNREGISTER_DEPRECATED = Write(0x0e, sys::kfd_ioctl_dbg_unregister_args);
        /// Deprecated: the kernel answers `EPERM`.
        DBG_ADDRESS_WATCH_DEPRECATED = Write(0x0f, sys::kfd_ioctl_dbg_address_watch_args);
        /// Deprecated: the kernel answers `EPERM`.
        DBG_WAVE_CONTROL_DEPRECATED = Write(0x10, sys::kfd_ioctl_dbg_wave_control_args);
        SET_SCRATCH_BACKING_VA = ReadWrite(0x11, sys::kfd_ioctl_set_scratch_backing_va_args);
        GET_TILE_CONFIG = ReadWrite(0x12, sys::kfd_ioctl_get_tile_config_args);
        SET_TRAP_HANDLER = Write(0x13, sys::kfd_ioctl_set_trap_handler_args);
        GET_PROCESS_APERTURES_NEW = ReadWrite(0x14, sys::kfd_ioctl_get_process_apertures_new_args);
        ACQUIRE_VM = Write(0x15, sys::kfd_ioctl_acquire_vm_args);
        ALLOC_MEMORY_OF_GPU = ReadWrite(0x16, sys::kfd_ioctl_alloc_memory_of_gpu_args);
        FREE_MEMORY_OF_GPU = Write(0x17, sys::kfd_ioctl_free_memory_of_gpu_args);
        MAP_MEMORY_TO_GPU = ReadWrite(0x18, sys::kfd_ioctl_map_memory_to_gpu_args);
        UNMAP_MEMORY_FROM_GPU = ReadWrite(0x19, sys::kfd_ioctl_unmap_memory_from_gpu_args);
        SET_CU_MASK = Write(0x1a, sys::kfd_ioctl_set_cu_mask_args);
        GET_QUEUE_WAVE_STATE = ReadWrite(0x1b, sys::kfd_ioctl_get_queue_wave_state_args);
        GET_DMABUF_INFO = ReadWrite(0x1c, sys::kfd_ioctl_get_dmabuf_info_args);
        IMPORT_DMABUF = ReadWrite(0x1d, sys::kfd_ioctl_import_dmabuf_args);
        ALLOC_QUEUE_GWS = ReadWrite(0x1e, sys::kfd_ioctl_alloc_queue_gws_args);
        SMI_EVENTS = ReadWrite(0x1f, sys::kfd_ioctl_smi_events_args);
        SVM = ReadWrite(0x20, sys::kfd_ioctl_svm_args);
        SET_XNACK_MODE = ReadWrite(0x21, sys::kfd_ioctl_set_xnack_mode_args);
        CRIU_OP = ReadWrite(0x22, sys::kfd_ioctl_criu_args);
        AVAILABLE_MEMORY = ReadWrite(0x23, sys::kfd_ioctl_get_available_memory_args);
        }
    );

    /// The row for `_IOC_NR(cmd)`, ignoring the caller's type, direction and size bits as the
    /// kernel does.
    pub fn lookup(cmd: u32) -> Option<&'static IoctlDesc> {
        let n = nr(cmd);
        if (COMMAND_START..COMMAND_END).contains(&n) {
            TABLE.get(usize::from(n - COMMAND_START))
        } else {
            None
        }
    }
}

/// Render-node request codes: the generic DRM ioctls (type `'d'`) that concern a render node, and
/// the amdgpu ones (`DRM_COMMAND_BASE + n`).
pub mod drm {
    use super::*;

    /// The ioctl type of DRM devices (`DRM_IOCTL_BASE`).
    pub const TYPE: u8 = sys::DRM_IOCTL_BASE;

    ioctl_table!(TYPE,
        /// The generic DRM ioctls a render node answers or refuses, as clients issue them.
        CORE_TABLE at 0u32 => {
        VERSION = ReadWrite(0x00, sys::drm_version);
        /// Not render-allowed: a render node refuses it.
        GET_UNIQUE = ReadWrite(0x01, sys::drm_unique);
        /// Not render-allowed: a render node refuses it.
        GET_MAGIC = Read(0x02, sys::drm_auth);
        /// Not render-allowed: a render node refuses it (libdrm asks for it only on nodes it
        /// does not know as render nodes).
        GET_CLIENT = ReadWrite(0x05, sys::drm_client);
        /// Master only.
        SET_VERSION = ReadWrite(0x07, sys::drm_set_version);
        GEM_CLOSE = Write(0x09, sys::drm_gem_close);
        GET_CAP = ReadWrite(0x0c, sys::drm_get_cap);
        /// Not render-allowed: a render node refuses it.
        SET_CLIENT_CAP = Write(0x0d, sys::drm_set_client_cap);
        /// Master only.
        AUTH_MAGIC = Write(0x11, sys::drm_auth);
        PRIME_HANDLE_TO_FD = ReadWrite(0x2d, sys::drm_prime_handle);
        PRIME_FD_TO_HANDLE = ReadWrite(0x2e, sys::drm_prime_handle);
        }
        /// The amdgpu ioctls (numbers relative to `DRM_COMMAND_BASE` in the header).
        AMDGPU_TABLE at sys::DRM_COMMAND_BASE => {
        AMDGPU_GEM_CREATE = ReadWrite(0x00, sys::drm_amdgpu_gem_create);
        AMDGPU_GEM_MMAP = ReadWrite(0x01, sys::drm_amdgpu_gem_mmap);
        AMDGPU_CTX = ReadWrite(0x02, sys::drm_amdgpu_ctx);
        AMDGPU_BO_LIST = ReadWrite(0x03, sys::drm_amdgpu_bo_list);
        AMDGPU_CS = ReadWrite(0x04, sys::drm_amdgpu_cs);
        AMDGPU_INFO = Write(0x05, sys::drm_amdgpu_info);
        AMDGPU_GEM_METADATA = ReadWrite(0x06, sys::drm_amdgpu_gem_metadata);
        AMDGPU_GEM_WAIT_IDLE = ReadWrite(0x07, sys::drm_amdgpu_gem_wait_idle);
        AMDGPU_GEM_VA = Write(0x08, sys::drm_amdgpu_gem_va);
        AMDGPU_WAIT_CS = ReadWrite(0x09, sys::drm_amdgpu_wait_cs);
        AMDGPU_GEM_OP = ReadWrite(0x10, sys::drm_amdgpu_gem_op);
        AMDGPU_GEM_USERPTR = ReadWrite(0x11, sys::drm_amdgpu_gem_userptr);
        AMDGPU_WAIT_FENCES = ReadWrite(0x12, sys::drm_amdgpu_wait_fences);
        AMDGPU_VM = ReadWrite(0x13, sys::drm_amdgpu_vm);
        AMDGPU_FENCE_TO_HANDLE = ReadWrite(0x14, sys::drm_amdgpu_fence_to_handle);
        /// Master only.
        AMDGPU_SCHED = Write(0x15, sys::drm_amdgpu_sched);
        }
    );

    /// The row for a render-node request code (matched on its number, like the DRM core).
    pub fn lookup(cmd: u32) -> Option<&'static IoctlDesc> {
        let n = nr(cmd);
        CORE_TABLE.iter().chain(AMDGPU_TABLE).find(|d| d.nr == n)
    }
}

/// Request codes that Linux 6.18 has and Debian bookworm's 6.1 headers do not (KFD 1.12's
/// dma-buf export among them), over the hand-written structs of [`crate::uapi618`]. A 6.1 kernel
/// answers them as numbers it does not know: `ENOTTY` on `/dev/kfd`, `EINVAL` on a render node;
/// `AMDGPU_GEM_OP` with the 6.18 struct reaches 6.1's `amdgpu_gem_op_ioctl`, which does not know
/// `GET_MAPPING_INFO` (`EINVAL`).
pub mod linux618 {
    /// On `/dev/kfd`.
    pub mod kfd {
        use super::super::*;
        use crate::uapi618 as u;

        const TY: u8 = crate::ioctl::kfd::TYPE;

        ioctl_table!(TY,
            /// The KFD ioctls after 1.11 that the simulator's 6.18 and 7.2 personalities answer.
            TABLE at 0u32 => {
            /// KFD 1.12: a dma-buf fd of a KFD BO.
            EXPORT_DMABUF = ReadWrite(0x24, u::kfd_ioctl_export_dmabuf_args);
            /// KFD 1.13: the runtime is up (or down).
            RUNTIME_ENABLE = ReadWrite(0x25, u::kfd_ioctl_runtime_enable_args);
            }
        );
    }

    /// On a render node.
    pub mod drm {
        use super::super::*;
        use crate::uapi618 as u;

        const TY: u8 = crate::ioctl::drm::TYPE;

        ioctl_table!(TY,
            /// The generic DRM ioctl 6.18 added for checkpoint/restore.
            CORE_TABLE at 0u32 => {
            /// Moves a GEM object to a chosen handle.
            GEM_CHANGE_HANDLE = ReadWrite(0xd2, u::drm_gem_change_handle);
            }
            /// The amdgpu ioctls as 6.18 declares them (numbers relative to `DRM_COMMAND_BASE`).
            AMDGPU_TABLE at sys::DRM_COMMAND_BASE => {
            /// `AMDGPU_GEM_OP` with its 24-byte 6.18 argument (`GET_MAPPING_INFO`).
            AMDGPU_GEM_OP = ReadWrite(0x10, u::drm_amdgpu_gem_op);
            /// Every GEM handle of the file.
            AMDGPU_GEM_LIST_HANDLES = ReadWrite(0x19, u::drm_amdgpu_gem_list_handles);
            }
        );
    }
}

/// The printable name of a request code on either kind of node, for error messages.
pub fn name(cmd: u32) -> &'static str {
    match ty(cmd) {
        kfd::TYPE => kfd::lookup(cmd)
            .or_else(|| linux618::kfd::TABLE.iter().find(|d| d.nr == nr(cmd)))
            .map_or("unknown KFD ioctl", |d| d.name),
        drm::TYPE => linux618::drm::CORE_TABLE
            .iter()
            .chain(linux618::drm::AMDGPU_TABLE)
            .find(|d| d.cmd == cmd)
            .or_else(|| drm::lookup(cmd))
            .map_or("unknown DRM ioctl", |d| d.name),
        _ => "unknown ioctl",
    }
}

/// `size_of::<T>()` as the `u32` that size fields of ioctl arguments hold.
pub(crate) const fn size_u32<T>() -> u32 {
    let n = size_of::<T>();
    assert!(n <= u32::MAX as usize);
    #[allow(clippy::cast_possible_truncation)] // checked just above
    {
        n as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resized_request_keeps_its_type_number_and_direction() {
        let svm = kfd::req::SVM;
        let resized = svm.with_size(24 + 8 * 5);
        assert_eq!(resized, encode(Dir::ReadWrite, b'K', 0x20, 64));
        assert_eq!(svm.with_size(size(kfd::SVM)), kfd::SVM);
    }
}
