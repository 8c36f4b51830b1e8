//! The kfd_bridge module's interface, mirrored from `ci/kmod/kfd_bridge/kfd_bridge.h` (which
//! `ci/kmod/kfd_bridge/README.md` describes): request codes of the control device, their
//! argument structs, and the one request the module sends to our CUSE devices.

use std::mem::size_of;

use kfd_abi::ioctl::{encode, Dir};

/// `KFD_BRIDGE_VERSION`: the protocol version this daemon speaks.
pub(crate) const VERSION: u32 = 4;

/// The oldest module version this daemon still works with: 1 lacks [`IOC_OPEN_ACCESS`], so the
/// caller's device cgroup is not applied (every GPU gets a per-device record); 1 and 2 lack
/// [`IOC_TAKE_UNMAPS`], so SVM ranges outlive the clients' unmaps; 1 to 3 lack
/// [`UNMAPS_RELEASED`], so the queues of a process that exits run until its files close.
pub(crate) const OLDEST_VERSION: u32 = 1;

/// The first version with [`IOC_OPEN_ACCESS`].
pub(crate) const VERSION_OPEN_ACCESS: u32 = 2;

/// The first version with [`IOC_TAKE_UNMAPS`].
pub(crate) const VERSION_UNMAPS: u32 = 3;

/// The first version with [`UNMAPS_RELEASED`] and the take of no entries (a look).
pub(crate) const VERSION_RELEASED: u32 = 4;

const TYPE: u8 = 0xB7;

/// `KFD_BRIDGE_IOC_VERSION`: the module's protocol version.
pub(crate) const IOC_VERSION: u32 = encode(Dir::Read, TYPE, 0, size_of::<u32>());
/// `KFD_BRIDGE_IOC_CREATE`: a proxy device in front of one of our CUSE devices.
pub(crate) const IOC_CREATE: u32 = encode(Dir::ReadWrite, TYPE, 1, size_of::<Create>());
/// `KFD_BRIDGE_IOC_MMAP_QUERY`: what a pending mmap asks for.
pub(crate) const IOC_MMAP_QUERY: u32 = encode(Dir::ReadWrite, TYPE, 2, size_of::<MmapQuery>());
/// `KFD_BRIDGE_IOC_MMAP_ANSWER`: the memory that backs it.
pub(crate) const IOC_MMAP_ANSWER: u32 = encode(Dir::Write, TYPE, 3, size_of::<MmapAnswer>());
/// `KFD_BRIDGE_IOC_PUSH_FDS`: fds to install into the caller of the ioctl being served.
pub(crate) const IOC_PUSH_FDS: u32 = encode(Dir::Write, TYPE, 4, size_of::<PushFds>());

/// `KFD_BRIDGE_IOC_OPEN_ACCESS` (version 2): the device cgroup's verdicts of an open in flight.
pub(crate) const IOC_OPEN_ACCESS: u32 = encode(Dir::ReadWrite, TYPE, 5, size_of::<OpenAccess>());

/// `KFD_BRIDGE_IOC_TAKE_UNMAPS` (version 3): the ranges a process unmapped since the last take.
pub(crate) const IOC_TAKE_UNMAPS: u32 = encode(Dir::ReadWrite, TYPE, 6, size_of::<TakeUnmaps>());

/// `KFD_BRIDGE_UNMAPS_LOST`: some unmaps went unrecorded (the module's queue was full).
pub(crate) const UNMAPS_LOST: u32 = 1 << 0;
/// `KFD_BRIDGE_UNMAPS_MORE`: more are recorded than fitted; take again.
pub(crate) const UNMAPS_MORE: u32 = 1 << 1;
/// `KFD_BRIDGE_UNMAPS_RELEASED` (version 4): the process's mm was torn down (it exited, or
/// called execve with no proxy file open from its new mm): the MMU notifier's release.
pub(crate) const UNMAPS_RELEASED: u32 = 1 << 2;

/// `KFD_BRIDGE_SIM_MMAP` (`_IO('K', 0x7c)`): the module asks the device to answer mmap query
/// `arg`. Outside amdkfd's table (0x01..0x24) and amdgpu's driver ioctls, like the other
/// simulator-only codes; the proxies refuse it from userspace.
pub(crate) const SIM_MMAP: u32 = encode(Dir::None, b'K', 0x7c, 0);

/// `struct kfd_bridge_create`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Create {
    /// Path of the CUSE node, NUL-terminated.
    pub backend: [u8; 128],
    /// Device name (`!` for `/`), NUL-terminated.
    pub name: [u8; 64],
    /// In: 0 for a dynamic major; out: the major.
    pub major: u32,
    /// The minor (in and out).
    pub minor: u32,
}

/// `struct kfd_bridge_mmap_query`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct MmapQuery {
    /// The query (the SIM_MMAP argument).
    pub id: u64,
    /// Byte offset of the mapping in the device (`vm_pgoff << PAGE_SHIFT`).
    pub offset: u64,
    /// Bytes.
    pub length: u64,
    /// `KFD_BRIDGE_MAP_*`: the driver model's `MAP_*` bits (`crate::vma`), which the header
    /// defines alike.
    pub flags: u32,
    /// The mapping thread (our pid namespace).
    pub tid: u32,
}

/// `struct kfd_bridge_mmap_answer`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct MmapAnswer {
    /// The query.
    pub id: u64,
    /// Our memfd.
    pub fd: i32,
    /// `KFD_BRIDGE_VMA_*`: the driver model's `VMA_*` bits (`crate::vma`), which the header
    /// defines alike.
    pub flags: u32,
    /// Byte offset in the memfd of the mapping's first page.
    pub offset: u64,
}

/// `struct kfd_bridge_fd`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PushFd {
    /// Our fd of the file to install.
    pub fd: i32,
    /// 0 or `O_CLOEXEC`.
    pub flags: u32,
    /// The caller's address of the `u32` that receives the number.
    pub addr: u64,
}

/// `struct kfd_bridge_push_fds`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PushFds {
    /// The calling thread (the pid of the FUSE request).
    pub tid: u32,
    /// Entries.
    pub count: u32,
    /// Address of `count` [`PushFd`]s.
    pub fds: u64,
}

/// `struct kfd_bridge_dev_access`: what the opener's device cgroup says of one proxy.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DevAccess {
    /// The proxy's major.
    pub major: u32,
    /// The proxy's minor.
    pub minor: u32,
    /// `devcgroup_check_permission(DEVCG_DEV_CHAR, major, minor, READ | WRITE)`: 0 allowed,
    /// else -errno (`-EPERM`).
    pub result: i32,
    /// Zero.
    pub pad: u32,
}

/// `struct kfd_bridge_open_access`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct OpenAccess {
    /// In: the opening thread (the pid of the FUSE_OPEN request).
    pub tid: u32,
    /// In: room at `devs`; out: the number of proxies (entries written: the smaller).
    pub count: u32,
    /// Address of `count` [`DevAccess`]es.
    pub devs: u64,
}

/// `struct kfd_bridge_unmap`: an address range a client unmapped.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Unmap {
    /// Start address (bytes).
    pub start: u64,
    /// End address (bytes, exclusive).
    pub end: u64,
}

/// `struct kfd_bridge_take_unmaps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TakeUnmaps {
    /// In: the process (our pid namespace).
    pub tgid: u32,
    /// In: room at `ranges`; out: entries written.
    pub count: u32,
    /// Out: [`UNMAPS_LOST`], [`UNMAPS_MORE`], [`UNMAPS_RELEASED`].
    pub flags: u32,
    /// Zero.
    pub pad: u32,
    /// Address of `count` [`Unmap`]s.
    pub ranges: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values the C header's macros give (printed by a C program built with kfd_bridge.h).
    #[test]
    fn request_codes_match_the_header() {
        assert_eq!(IOC_VERSION, 0x8004_b700);
        assert_eq!(IOC_CREATE, 0xc0c8_b701);
        assert_eq!(IOC_MMAP_QUERY, 0xc020_b702);
        assert_eq!(IOC_MMAP_ANSWER, 0x4018_b703);
        assert_eq!(IOC_PUSH_FDS, 0x4010_b704);
        assert_eq!(IOC_OPEN_ACCESS, 0xc010_b705);
        assert_eq!(IOC_TAKE_UNMAPS, 0xc018_b706);
        assert_eq!(SIM_MMAP, 0x0000_4b7c);
    }

    /// `KFD_BRIDGE_MAP_*` and `KFD_BRIDGE_VMA_*` of the header: the driver model's bits cross
    /// the module boundary unchanged.
    #[test]
    fn flag_bits_match_the_header() {
        use crate::vma::*;
        let map = [MAP_SHARED, MAP_READ, MAP_WRITE, MAP_EXEC, MAP_MAYWRITE];
        assert_eq!(map, [1, 2, 4, 8, 16]);
        let vma = [
            VMA_IO,
            VMA_DONTCOPY,
            VMA_NORESERVE,
            VMA_DONTDUMP,
            VMA_ACCESS,
            VMA_NO_MAYWRITE,
        ];
        assert_eq!(vma, [1, 2, 4, 8, 16, 32]);
    }

    #[test]
    fn struct_sizes_match_the_header() {
        assert_eq!(size_of::<Create>(), 200);
        assert_eq!(size_of::<MmapQuery>(), 32);
        assert_eq!(size_of::<MmapAnswer>(), 24);
        assert_eq!(size_of::<PushFd>(), 16);
        assert_eq!(size_of::<PushFds>(), 16);
        assert_eq!(size_of::<DevAccess>(), 16);
        assert_eq!(size_of::<OpenAccess>(), 16);
        assert_eq!(size_of::<Unmap>(), 16);
        assert_eq!(size_of::<TakeUnmaps>(), 24);
    }

    /// Field offsets of the version 2 structs, as `offsetof` gives them for kfd_bridge.h.
    #[test]
    fn open_access_layout_matches_the_header() {
        use std::mem::offset_of;
        assert_eq!(offset_of!(DevAccess, major), 0);
        assert_eq!(offset_of!(DevAccess, minor), 4);
        assert_eq!(offset_of!(DevAccess, result), 8);
        assert_eq!(offset_of!(DevAccess, pad), 12);
        assert_eq!(offset_of!(OpenAccess, tid), 0);
        assert_eq!(offset_of!(OpenAccess, count), 4);
        assert_eq!(offset_of!(OpenAccess, devs), 8);
    }

    /// Field offsets of the version 3 structs, as `offsetof` gives them for kfd_bridge.h.
    #[test]
    fn take_unmaps_layout_matches_the_header() {
        use std::mem::offset_of;
        assert_eq!(offset_of!(Unmap, start), 0);
        assert_eq!(offset_of!(Unmap, end), 8);
        assert_eq!(offset_of!(TakeUnmaps, tgid), 0);
        assert_eq!(offset_of!(TakeUnmaps, count), 4);
        assert_eq!(offset_of!(TakeUnmaps, flags), 8);
        assert_eq!(offset_of!(TakeUnmaps, pad), 12);
        assert_eq!(offset_of!(TakeUnmaps, ranges), 16);
        assert_eq!(
            (UNMAPS_LOST, UNMAPS_MORE, UNMAPS_RELEASED),
            (1, 2, 4),
            "KFD_BRIDGE_UNMAPS_*"
        );
    }

    #[test]
    fn sim_mmap_is_outside_both_drivers_and_the_other_simulator_codes() {
        assert!(kfd_abi::ioctl::kfd::lookup(SIM_MMAP).is_none());
        for other in [
            super::super::super::SIM_PROBE,
            kfd_abi::cuse::SIM_DAEMON_PID,
            kfd_abi::cuse::SIM_CLOSE_FD,
        ] {
            assert_ne!(SIM_MMAP, other);
        }
    }
}
