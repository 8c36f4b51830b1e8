//! What ROCr needs of the driver on its way to a dispatch, with the 6.1 driver's errno: the
//! events page's slot limit set by the mapped length, SVM ranges validated VMA by VMA, scratch
//! and trap handler addresses, and the context save areas ROCr 5.2 (a KFD buffer) and 6.1 (an SVM
//! range) give CREATE_QUEUE.

#![allow(clippy::unwrap_used)]
#![allow(clippy::cast_possible_truncation)] // test sizes and offsets are small

mod common;

use common::{bare, env, errno, GTT_W};
use kfd_abi::kfd::{QueueDesc, SvmAttribute};
use kfd_abi::{AllocFlags, Errno, EventType, Mapping, Prot, QueueType, RenderNode, Share};
use kfd_sim::Preset;
use kfd_sys as sys;
use rstest::rstest;

/// The kernel's own signal page (no page BO given) holds 256 slots until the events page is
/// mapped; mapping it makes the mapped length the limit (up to 4096 slots: a longer mapping is
/// refused).
#[rstest]
#[case::unmapped(None, 256)]
#[case::one_page(Some(4096), 512)]
#[case::two_pages(Some(8192), 1024)]
fn the_signal_slot_limit_is_the_mapped_length(#[case] mapped: Option<usize>, #[case] slots: u32) {
    let e = env(Preset::mi210x2());
    let first = e.kfd.create_event(EventType::Signal, false, None).unwrap();
    let _map = mapped.map(|len| e.kfd.map_events(len).unwrap());
    let mut made = 1;
    loop {
        match e.kfd.create_event(EventType::Signal, false, None) {
            Ok(ev) => {
                assert!(ev.slot_index < slots);
                made += 1;
            }
            Err(err) => {
                assert_eq!(err.errno(), Some(Errno::ENOSPC));
                break;
            }
        }
        assert!(made <= 4096);
    }
    assert_eq!(made, slots);
    assert_eq!(first.slot_index, 0);
}

#[test]
fn an_events_mapping_past_the_page_is_refused() {
    let e = env(Preset::mi210x2());
    e.kfd.create_event(EventType::Signal, false, None).unwrap();
    assert_eq!(errno(e.kfd.map_events(32768 + 4096)), Some(Errno::EINVAL));
}

/// Anonymous memory of `pages` pages at a fresh address.
fn anon(pages: usize) -> Mapping {
    Mapping::reserve(pages * 4096)
        .and_then(|m| {
            // SAFETY: the reservation is ours and nothing else uses it.
            let r = unsafe {
                libc::mprotect(
                    m.addr() as *mut libc::c_void,
                    pages * 4096,
                    libc::PROT_READ | libc::PROT_WRITE,
                )
            };
            if r == 0 {
                Ok(m)
            } else {
                Err(Errno::ENOMEM)
            }
        })
        .unwrap()
}

fn access(g: u32) -> [SvmAttribute; 1] {
    [SvmAttribute {
        ty: sys::KFD_IOCTL_SVM_ATTR_ACCESS,
        value: g,
    }]
}

#[test]
fn an_svm_range_with_a_hole_inside_is_efault() {
    let e = env(Preset::mi210x2());
    let g = e.gpus[0].get();
    let m = anon(3);
    // The first and last pages are mapped; the middle one is not.
    // SAFETY: the middle page is ours, and nothing refers to it.
    let r = unsafe { libc::munmap((m.addr() + 4096) as *mut libc::c_void, 4096) };
    assert_eq!(r, 0);
    assert_eq!(
        errno(e.kfd.svm_set_attr(m.addr(), 3 * 4096, &access(g))),
        Some(Errno::EFAULT)
    );
    // Each mapped page alone is a valid range.
    e.kfd.svm_set_attr(m.addr(), 4096, &access(g)).unwrap();
    e.kfd
        .svm_set_attr(m.addr() + 2 * 4096, 4096, &access(g))
        .unwrap();
}

#[test]
fn an_svm_range_over_a_device_mapping_is_efault() {
    let e = env(Preset::mi210x2());
    let g = e.gpus[0];
    let render = RenderNode::new(e.renders[0].used_by(&e.proc).unwrap(), "render");
    let bo = e
        .kfd
        .alloc_memory(0x7f50_0000_0000, 8192, g, GTT_W)
        .unwrap();
    let dev = render
        .map_bo(bo.mmap_offset, 8192, Prot::RW, Share::Shared)
        .unwrap();
    assert_eq!(
        errno(e.kfd.svm_set_attr(dev.addr(), 8192, &access(g.get()))),
        Some(Errno::EFAULT)
    );
    // Plain memory beside it is fine.
    let m = anon(2);
    e.kfd
        .svm_set_attr(m.addr(), 8192, &access(g.get()))
        .unwrap();
}

#[test]
fn scratch_and_trap_handler_need_a_known_gpu_and_its_vm() {
    let (_m, _p, kfd) = bare(Preset::mi210x2());
    let e = env(Preset::mi210x2());
    let unknown = common::gpu(0x1234);
    assert_eq!(
        errno(e.kfd.set_scratch_backing_va(unknown, 1 << 40)),
        Some(Errno::EINVAL)
    );
    assert_eq!(
        errno(e.kfd.set_trap_handler(unknown, 0x1000, 0x2000)),
        Some(Errno::EINVAL)
    );
    // A GPU whose VM is not acquired: the bind fails, ENODEV for the scratch, ESRCH for the
    // trap handler (kfd_ioctl_set_trap_handler maps any bind failure to it).
    let g = e.gpus[0];
    assert_eq!(
        errno(kfd.set_scratch_backing_va(g, 1 << 40)),
        Some(Errno::ENODEV)
    );
    assert_eq!(
        errno(kfd.set_trap_handler(g, 0x1000, 0x2000)),
        Some(Errno::ESRCH)
    );
    e.kfd.set_scratch_backing_va(g, 1 << 40).unwrap();
    e.kfd.set_trap_handler(g, 0x1000, 0x2000).unwrap();
}

/// An AQL queue whose context save area is at `ctx` (`size` bytes) with a control stack of
/// `ctl` bytes, ring and pointers in a GTT buffer.
fn aql_queue(e: &common::Env, ctx: u64, size: u32, ctl: u32) -> Result<(), Option<Errno>> {
    let g = e.gpus[0];
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let va = 0x7f60_0000_0000 + NEXT.fetch_add(1 << 20, std::sync::atomic::Ordering::Relaxed);
    let bo = e.kfd.alloc_memory(va, 8192, g, GTT_W).unwrap();
    e.kfd.map_memory_to_gpu(bo.handle, &[g]).unwrap();
    let eop = vec![0u8; 4096];
    let mut d = QueueDesc::new(g, QueueType::ComputeAql);
    d.ring_base = va;
    d.ring_size = 4096;
    d.read_ptr = va + 4096;
    d.write_ptr = va + 4096 + 8;
    d.eop_buffer = eop.as_ptr() as u64;
    d.eop_buffer_size = 4096;
    d.ctx_save_restore = ctx;
    d.ctx_save_restore_size = size;
    d.ctl_stack_size = ctl;
    // SAFETY: the ring and pointers are GPU-mapped memory of the process, the EOP buffer `eop`
    // and the save area the caller's, all alive while the queue exists (the queue is destroyed
    // below).
    let q = unsafe { e.kfd.create_queue(&d) }.map_err(|e| e.errno())?;
    e.kfd.destroy_queue(q.queue_id).unwrap();
    Ok(())
}

#[test]
fn a_context_save_area_in_a_kfd_buffer_as_rocr_5_2_allocates_it() {
    let e = env(Preset::mi210x2());
    let g = e.gpus[0];
    let render = RenderNode::new(e.renders[0].used_by(&e.proc).unwrap(), "render");
    // libhsakmt 5.2: the area is KFD system memory, mapped for the CPU.
    let size = 1 << 20;
    let bo = e
        .kfd
        .alloc_memory(0x7f70_0000_0000, size, g, GTT_W | AllocFlags::EXECUTABLE)
        .unwrap();
    e.kfd.map_memory_to_gpu(bo.handle, &[g]).unwrap();
    let area = render
        .map_bo(bo.mmap_offset, size as usize, Prot::RW, Share::Shared)
        .unwrap();
    aql_queue(&e, area.addr(), size as u32, 0x3000).unwrap();
}

#[test]
fn a_context_save_area_in_an_svm_range_as_rocr_6_1_allocates_it() {
    let e = env(Preset::mi210x2());
    let g = e.gpus[0].get();
    // libhsakmt 6.x: anonymous memory registered as an SVM range the GPU may access.
    let area = anon(256);
    e.kfd
        .svm_set_attr(area.addr(), 256 * 4096, &access(g))
        .unwrap();
    aql_queue(&e, area.addr(), 256 * 4096, 0x3000).unwrap();
}

#[rstest]
#[case::above_user_space(1 << 47, 0x3000, Errno::EFAULT)]
#[case::control_stack_too_large(0x7f80_0000_0000, 1 << 30, Errno::ENOMEM)]
fn bad_context_save_areas_get_the_drivers_errno(
    #[case] ctx: u64,
    #[case] ctl: u32,
    #[case] want: Errno,
) {
    let e = env(Preset::mi210x2());
    assert_eq!(aql_queue(&e, ctx, 1 << 20, ctl), Err(Some(want)));
}
