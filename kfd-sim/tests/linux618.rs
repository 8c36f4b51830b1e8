//! The simulator's two kernels: Linux 6.1 (the default) and 6.18's render-node GEM handle listing,
//! mapping info and handle change, and KFD 1.12's dma-buf export, with the checks and errno of
//! each kernel, through kfd-abi's API and raw requests.

#![allow(clippy::unwrap_used)] // tests panic on failure

mod common;

use std::os::fd::AsFd;

use common::*;
use kfd_abi::ioctl::linux618;
use kfd_abi::render::{GemDomain, VmPageFlags};
use kfd_abi::uapi618 as u;
use kfd_abi::{AllocFlags, Errno, Kfd, Prot, RenderNode, Share};
use kfd_sim::Kernel;
use kfd_sys as sys;
use rstest::rstest;

const MIB: u64 = 1 << 20;
const VA: u64 = 0x10_0000_0000;
const RW: VmPageFlags = VmPageFlags::READABLE.union(VmPageFlags::WRITEABLE);

#[rstest]
#[case::linux_6_1(Kernel::Linux6_1, (1, 11), (3, 49))]
#[case::linux_6_18(Kernel::Linux6_18, (1, 18), (3, 65))]
#[case::linux_7_2(Kernel::Linux7_2, (1, 23), (3, 64))]
fn each_kernel_reports_its_versions(
    #[case] kernel: Kernel,
    #[case] kfd: (u32, u32),
    #[case] drm: (i32, i32),
) {
    let e = env_on(machine_on(kernel));
    let v = e.kfd.get_version().unwrap();
    assert_eq!((v.major, v.minor), kfd);
    let d = render(&e, 0).version().unwrap();
    assert_eq!((d.major, d.minor), drm);
}

#[test]
fn linux_6_1_answers_the_6_18_requests_as_numbers_it_does_not_know() {
    let e = env_on(machine_on(Kernel::Linux6_1));
    let r = render(&e, 0);
    let h = r.gem_create(MIB, 0, GemDomain::VRAM, 0).unwrap();
    // No GEM_LIST_HANDLES (amdgpu number 0x19) nor GEM_CHANGE_HANDLE (core 0xd2) rows: EINVAL.
    assert_eq!(errno(r.gem_list_handles()), Some(Errno::EINVAL));
    assert_eq!(errno(r.gem_change_handle(h, bo(9))), Some(Errno::EINVAL));
    // GEM_OP with the 24-byte argument reaches 6.1's gem_op: the handle is looked up first,
    // then GET_MAPPING_INFO is an unknown op.
    assert_eq!(errno(r.gem_mapping_info(h)), Some(Errno::EINVAL));
    assert_eq!(errno(r.gem_mapping_info(bo(77))), Some(Errno::ENOENT));
    // 6.1 ignores what 6.18 calls padding.
    let mut a = u::drm_amdgpu_gem_op {
        handle: h.get(),
        op: 1, // SET_PLACEMENT
        value: u64::from(sys::AMDGPU_GEM_DOMAIN_GTT),
        num_entries: 0,
        padding: 7,
    };
    assert_eq!(
        raw(&e.renders[0], linux618::drm::AMDGPU_GEM_OP, &mut a),
        Ok(0)
    );
    // KFD 1.11 has no EXPORT_DMABUF: ENOTTY, as for every number past its table.
    let alloc = e
        .kfd
        .alloc_memory(0x7f00_0000_0000, MIB, e.gpus[0], VRAM_W)
        .unwrap();
    assert_eq!(
        errno(e.kfd.export_dmabuf(alloc.handle)),
        Some(Errno::ENOTTY)
    );
}

#[test]
fn list_handles_gives_every_handle_with_its_creation_parameters() {
    let e = env_on(machine_on(Kernel::Linux6_18));
    let r = render(&e, 0);
    assert_eq!(r.gem_list_handles().unwrap(), vec![]);
    let cpu = u64::from(sys::AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED);
    let a = r
        .gem_create(3 * MIB, 2 * MIB, GemDomain::VRAM, cpu)
        .unwrap();
    let b = r.gem_create(5000, 0, GemDomain::GTT, 0).unwrap();
    let list = r.gem_list_handles().unwrap();
    let got: Vec<_> = list
        .iter()
        .map(|h| {
            (
                h.handle,
                h.imported,
                h.size,
                h.preferred_domains,
                h.alloc_flags,
                h.alignment_pages,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (a, false, 3 * MIB, GemDomain::VRAM, cpu, 512),
            (b, false, 8192, GemDomain::GTT, 0, 0),
        ]
    );
}

#[test]
fn list_handles_with_too_little_room_only_counts() {
    let e = env_on(machine_on(Kernel::Linux6_18));
    let r = render(&e, 0);
    for _ in 0..3 {
        r.gem_create(MIB, 0, GemDomain::GTT, 0).unwrap();
    }
    let mut entries = [u::drm_amdgpu_gem_list_handles_entry {
        gem_handle: 0xdead,
        ..Default::default()
    }; 2];
    let mut a = u::drm_amdgpu_gem_list_handles {
        entries: entries.as_mut_ptr() as u64,
        num_entries: 2,
        padding: 0,
    };
    let req = linux618::drm::AMDGPU_GEM_LIST_HANDLES;
    assert_eq!(raw(&e.renders[0], req, &mut a), Ok(0));
    assert_eq!(a.num_entries, 3);
    assert!(entries.iter().all(|x| x.gem_handle == 0xdead));
    // A bad array: 6.18 returns copy_to_user's count of bytes not copied, not EFAULT.
    a.entries = 8;
    a.num_entries = 3;
    assert_eq!(raw(&e.renders[0], req, &mut a), Ok(3 * 40));
}

#[test]
fn mapping_info_gives_the_mappings_with_their_page_table_flags() {
    let e = env_on(machine_on(Kernel::Linux6_18));
    let r = render(&e, 0);
    let h = r.gem_create(4 * MIB, 0, GemDomain::VRAM, 0).unwrap();
    assert_eq!(r.gem_mapping_info(h).unwrap(), vec![]);
    r.va_map(h, VA, 0, 2 * MIB, RW).unwrap();
    r.va_map(h, VA + 16 * MIB, 2 * MIB, MIB, VmPageFlags::READABLE)
        .unwrap();
    let maps = r.gem_mapping_info(h).unwrap();
    let got: Vec<_> = maps
        .iter()
        .map(|m| (m.va, m.size, m.offset, m.pte_flags))
        .collect();
    // The newest first; READABLE | WRITEABLE are page-table bits 5 and 6.
    assert_eq!(
        got,
        vec![
            (VA + 16 * MIB, MIB, 2 * MIB, u::AMDGPU_PTE_READABLE),
            (VA, 2 * MIB, 0, 0x60),
        ]
    );
    // Room for one: only the count comes back.
    let mut entries = [u::drm_amdgpu_gem_vm_entry::default(); 1];
    let mut a = u::drm_amdgpu_gem_op {
        handle: h.get(),
        op: u::AMDGPU_GEM_OP_GET_MAPPING_INFO,
        value: entries.as_mut_ptr() as u64,
        num_entries: 1,
        padding: 0,
    };
    assert_eq!(
        raw(&e.renders[0], linux618::drm::AMDGPU_GEM_OP, &mut a),
        Ok(0)
    );
    assert_eq!((a.num_entries, entries[0].addr), (2, 0));
}

#[rstest]
#[case::padding_before_the_handle(77, 1, 0, Errno::EINVAL)]
#[case::unknown_handle(77, 0, 0, Errno::ENOENT)]
#[case::room_past_kvcalloc(1, 0, 0x0400_0000, Errno::ENOMEM)]
fn gem_op_checks_in_6_18_order(
    #[case] handle: u32,
    #[case] padding: u32,
    #[case] room: u32,
    #[case] want: Errno,
) {
    let e = env_on(machine_on(Kernel::Linux6_18));
    render(&e, 0).gem_create(MIB, 0, GemDomain::GTT, 0).unwrap();
    let mut a = u::drm_amdgpu_gem_op {
        handle,
        op: u::AMDGPU_GEM_OP_GET_MAPPING_INFO,
        value: 0,
        num_entries: room,
        padding,
    };
    assert_eq!(
        raw(&e.renders[0], linux618::drm::AMDGPU_GEM_OP, &mut a),
        Err(want)
    );
}

#[rstest]
#[case::past_int_max(1, 0x8000_0000, Errno::EINVAL)]
#[case::unknown_handle(5, 9, Errno::ENOENT)]
#[case::taken(1, 2, Errno::ENOSPC)]
fn change_handle_refuses(#[case] from: u32, #[case] to: u32, #[case] want: Errno) {
    let e = env_on(machine_on(Kernel::Linux6_18));
    let r = render(&e, 0);
    r.gem_create(MIB, 0, GemDomain::GTT, 0).unwrap();
    r.gem_create(MIB, 0, GemDomain::GTT, 0).unwrap();
    let mut a = u::drm_gem_change_handle {
        handle: from,
        new_handle: to,
    };
    let req = linux618::drm::GEM_CHANGE_HANDLE;
    assert_eq!(raw(&e.renders[0], req, &mut a), Err(want));
}

#[test]
fn change_handle_moves_the_object_with_its_mappings() {
    let e = env_on(machine_on(Kernel::Linux6_18));
    let r = render(&e, 0);
    let h = r.gem_create(2 * MIB, 0, GemDomain::VRAM, 0).unwrap();
    r.va_map(h, VA, 0, 2 * MIB, RW).unwrap();
    let req = linux618::drm::GEM_CHANGE_HANDLE;
    let mut same = u::drm_gem_change_handle {
        handle: 1,
        new_handle: 1,
    };
    assert_eq!(raw(&e.renders[0], req, &mut same), Ok(0));
    // Not exported: 6.18 returns idr_alloc's value, the new handle.
    let mut a = u::drm_gem_change_handle {
        handle: 1,
        new_handle: 40,
    };
    assert_eq!(raw(&e.renders[0], req, &mut a), Ok(40));
    assert_eq!(errno(r.gem_close(h)), Some(Errno::EINVAL));
    let list = r.gem_list_handles().unwrap();
    assert_eq!(
        list.iter().map(|x| x.handle.get()).collect::<Vec<_>>(),
        [40]
    );
    assert_eq!(r.gem_mapping_info(bo(40)).unwrap().len(), 1);
    // Exported: the PRIME entry moves too, and the call returns 0.
    let _dmabuf = r.prime_handle_to_fd(bo(40)).unwrap();
    let mut b = u::drm_gem_change_handle {
        handle: 40,
        new_handle: 3,
    };
    assert_eq!(raw(&e.renders[0], req, &mut b), Ok(0));
    r.gem_change_handle(bo(3), bo(4)).unwrap();
    let again = r.prime_fd_to_handle(_dmabuf.as_fd()).unwrap();
    assert_eq!(again, bo(4));
}

#[test]
fn a_dma_buf_of_the_same_device_imports_as_the_same_object() {
    let m = machine_on(Kernel::Linux6_18);
    let a = env_on(m.clone());
    let b = env_on(m);
    let ra = render(&a, 0);
    let rb = render(&b, 0);
    let cpu = u64::from(sys::AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED);
    let h = ra.gem_create(2 * MIB, 4096, GemDomain::VRAM, cpu).unwrap();
    ra.gem_create(MIB, 0, GemDomain::GTT, 0).unwrap();
    let dmabuf = ra.prime_handle_to_fd(h).unwrap();
    let hb = rb.prime_fd_to_handle(dmabuf.as_fd()).unwrap();
    let la = ra.gem_list_handles().unwrap();
    let lb = rb.gem_list_handles().unwrap();
    assert_eq!(lb.len(), 1);
    assert_eq!(
        (
            lb[0].imported,
            lb[0].size,
            lb[0].alloc_flags,
            lb[0].alignment_pages
        ),
        (false, la[0].size, la[0].alloc_flags, la[0].alignment_pages)
    );
    // One object: one fake offset, one memory.
    let off = ra.gem_mmap_offset(h).unwrap();
    assert_eq!(rb.gem_mmap_offset(hb).unwrap(), off);
    let len = 2 << 20;
    let wa = ra.map_bo(off, len, Prot::RW, Share::Shared).unwrap();
    let wb = rb.map_bo(off, len, Prot::RW, Share::Shared).unwrap();
    wa.write_u64(4096, 0x5eed_f00d);
    assert_eq!(wb.read_u64(4096), Some(0x5eed_f00d));
    // Another GPU's memory is an attachment: IS_IMPORT.
    let other = render(&b, 1);
    other.prime_fd_to_handle(dmabuf.as_fd()).unwrap();
    assert!(other.gem_list_handles().unwrap()[0].imported);
}

#[test]
fn kfd_1_12_exports_a_kfd_bo_that_render_nodes_import_as_one_object() {
    let m = machine_on(Kernel::Linux6_18);
    let a = env_on(m.clone());
    let b = env_on(m);
    let va = 0x7f00_0000_0000;
    let flags = VRAM_W | AllocFlags::PUBLIC;
    let alloc = a.kfd.alloc_memory(va, 2 * MIB, a.gpus[0], flags).unwrap();
    let dmabuf = a.kfd.export_dmabuf(alloc.handle).unwrap();
    let info = a.kfd.get_dmabuf_info(dmabuf.as_fd(), None).unwrap();
    assert_eq!((info.size, info.gpu_id), (2 * MIB, a.gpus[0].get()));
    let rb = render(&b, 0);
    let rb2 = RenderNode::new(
        b.proc.open_render(b.machine.render_minors()[0]).unwrap(),
        "2nd",
    );
    let h1 = rb.prime_fd_to_handle(dmabuf.as_fd()).unwrap();
    let h2 = rb2.prime_fd_to_handle(dmabuf.as_fd()).unwrap();
    assert_eq!(
        rb.gem_mmap_offset(h1).unwrap(),
        rb2.gem_mmap_offset(h2).unwrap()
    );
    let l = rb.gem_list_handles().unwrap();
    let cpu = u64::from(sys::AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED);
    assert_eq!(
        (
            l[0].imported,
            l[0].preferred_domains,
            l[0].alloc_flags & cpu
        ),
        (false, GemDomain::VRAM, cpu)
    );
    // An unknown handle, and a handle of a GPU the machine does not have: EINVAL.
    let unknown = kfd_abi::MemHandle(u64::from(a.gpus[0].get()) << 32 | 99);
    assert_eq!(errno(a.kfd.export_dmabuf(unknown)), Some(Errno::EINVAL));
    let no_gpu = kfd_abi::MemHandle(0x1234 << 32);
    assert_eq!(errno(a.kfd.export_dmabuf(no_gpu)), Some(Errno::EINVAL));
    // Only the process that owns the /dev/kfd may call it.
    let other = Kfd::new(a.kfd.transport().used_by(&b.proc).unwrap(), "kfd");
    assert_eq!(errno(other.export_dmabuf(alloc.handle)), Some(Errno::EBADF));
}
