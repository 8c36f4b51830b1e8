//! The simulator's Linux 7.2 personality (Debian forky's kernel): 6.18's render-node
//! checkpoint ioctls with `DRM_IOCTL_GEM_CHANGE_HANDLE` turned off, as every kernel fixed in June
//! 2026 has it, and KFD 1.13's `RUNTIME_ENABLE`, which ROCm's runtime issues before it creates a
//! queue, on 6.18 and 7.2 as the driver answers it without a debugger.

#![allow(clippy::unwrap_used)] // tests panic on failure

mod common;

use common::*;
use kfd_abi::ioctl::{encode, linux618, Dir};
use kfd_abi::render::{GemDomain, VmPageFlags};
use kfd_abi::uapi618 as u;
use kfd_abi::Errno;
use kfd_sim::Kernel;
use rstest::rstest;

const MIB: u64 = 1 << 20;
const VA: u64 = 0x10_0000_0000;
const RW: VmPageFlags = VmPageFlags::READABLE.union(VmPageFlags::WRITEABLE);

#[test]
fn the_kernel_is_named_7_2_on_the_command_line() {
    assert_eq!("7.2".parse::<Kernel>(), Ok(Kernel::Linux7_2));
    assert_eq!(Kernel::Linux7_2.to_string(), "7.2");
    let err = "7.3".parse::<Kernel>().unwrap_err();
    assert!(err.contains("6.1, 6.18 or 7.2"), "{err}");
}

/// Every request 6.18 answers with a move or an errno of its own, 7.2 answers `EINVAL`: the
/// row's function is `drm_invalid_op`.
#[rstest]
#[case::a_move_6_18_makes(1, 9)]
#[case::the_same_handle(1, 1)]
#[case::an_unknown_handle(5, 9)]
#[case::a_taken_handle(1, 2)]
#[case::past_int_max(1, 0x8000_0000)]
fn change_handle_is_refused_whatever_it_asks(#[case] from: u32, #[case] to: u32) {
    let e = env_on(machine_on(Kernel::Linux7_2));
    let r = render(&e, 0);
    let a = r.gem_create(MIB, 0, GemDomain::VRAM, 0).unwrap();
    r.gem_create(MIB, 0, GemDomain::GTT, 0).unwrap();
    r.va_map(a, VA, 0, MIB, RW).unwrap();
    let mut arg = u::drm_gem_change_handle {
        handle: from,
        new_handle: to,
    };
    assert_eq!(
        raw(&e.renders[0], linux618::drm::GEM_CHANGE_HANDLE, &mut arg),
        Err(Errno::EINVAL)
    );
    // Nothing moved: the objects keep their handles and mappings.
    let handles: Vec<u32> = r
        .gem_list_handles()
        .unwrap()
        .iter()
        .map(|h| h.handle.get())
        .collect();
    assert_eq!(handles, [1, 2]);
    assert_eq!(r.gem_mapping_info(bo(1)).unwrap().len(), 1);
}

#[test]
fn handles_are_allocated_lowest_free_first_from_1() {
    // What a restore without GEM_CHANGE_HANDLE relies on (the file's idr).
    let e = env_on(machine_on(Kernel::Linux7_2));
    let r = render(&e, 0);
    for want in 1..=4 {
        assert_eq!(r.gem_create(MIB, 0, GemDomain::GTT, 0).unwrap(), bo(want));
    }
    r.gem_close(bo(3)).unwrap();
    r.gem_close(bo(1)).unwrap();
    assert_eq!(r.gem_create(MIB, 0, GemDomain::GTT, 0).unwrap(), bo(1));
    assert_eq!(r.gem_create(MIB, 0, GemDomain::GTT, 0).unwrap(), bo(3));
    assert_eq!(r.gem_create(MIB, 0, GemDomain::GTT, 0).unwrap(), bo(5));
}

#[test]
fn gem_op_keeps_6_18s_padding_check_and_mapping_info() {
    let e = env_on(machine_on(Kernel::Linux7_2));
    let r = render(&e, 0);
    let h = r.gem_create(2 * MIB, 0, GemDomain::VRAM, 0).unwrap();
    r.va_map(h, VA, 0, 2 * MIB, RW).unwrap();
    assert_eq!(r.gem_mapping_info(h).unwrap().len(), 1);
    let mut a = u::drm_amdgpu_gem_op {
        handle: 77,
        op: u::AMDGPU_GEM_OP_GET_MAPPING_INFO,
        value: 0,
        num_entries: 0,
        padding: 1,
    };
    // The padding is checked before the handle is looked up.
    assert_eq!(
        raw(&e.renders[0], linux618::drm::AMDGPU_GEM_OP, &mut a),
        Err(Errno::EINVAL)
    );
}

/// ROCr's order: enable before the first queue, disable at exit; the driver refuses a second
/// enable (`EBUSY`) and an enable while queues exist (`EEXIST`), and a disable always succeeds.
#[rstest]
#[case::linux_6_18(Kernel::Linux6_18)]
#[case::linux_7_2(Kernel::Linux7_2)]
fn runtime_enable_is_answered_as_the_driver_answers_it(#[case] kernel: Kernel) {
    let e = env_on(machine_on(kernel));
    e.kfd.runtime_enable(true, 0x7f00_1000, true).unwrap();
    assert_eq!(
        errno(e.kfd.runtime_enable(true, 0x7f00_1000, true)),
        Some(Errno::EBUSY)
    );
    e.kfd.runtime_enable(false, 0, false).unwrap();
    e.kfd.runtime_enable(false, 0, false).unwrap();
    // SAFETY: the simulator keeps the queue's addresses but never dereferences them here.
    let q = unsafe { e.kfd.create_queue(&aql_queue(&e, 1)) }.unwrap();
    assert_eq!(
        errno(e.kfd.runtime_enable(true, 0x7f00_1000, false)),
        Some(Errno::EEXIST)
    );
    e.kfd.destroy_queue(q.queue_id).unwrap();
    e.kfd.runtime_enable(true, 0x7f00_1000, false).unwrap();
}

#[test]
fn linux_6_1_has_no_runtime_enable() {
    let e = env_on(machine_on(Kernel::Linux6_1));
    assert_eq!(
        errno(e.kfd.runtime_enable(true, 0, true)),
        Some(Errno::ENOTTY)
    );
}

/// KFD 1.19's secondary contexts and 1.23's profiler are in 7.2's table but not simulated:
/// `ENOTTY`, logged once, so a client that needs them stops at a clear errno.
#[rstest]
#[case::create_process(encode(Dir::None, b'K', 0x27, 0))]
#[case::profiler(encode(Dir::ReadWrite, b'K', 0x28, 32))]
fn later_kfd_ioctls_are_not_simulated(#[case] request: u32) {
    let e = env_on(machine_on(Kernel::Linux7_2));
    let mut arg = [0u8; 32];
    assert_eq!(
        raw(e.kfd.transport(), request, &mut arg),
        Err(Errno::ENOTTY)
    );
}
