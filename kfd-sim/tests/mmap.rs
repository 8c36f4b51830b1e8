//! CPU mappings of the simulated devices through `kfd_abi::Transport::mmap`, in process: the
//! driver's errno for bad requests, memory shared with the simulated GPU both ways, and the VMA
//! flags the driver gives (not inherited by fork, not dumped) as `/proc/self/smaps` shows them.

#![allow(clippy::unwrap_used)] // tests panic on failure

mod common;

use common::*;
use kfd_abi::mmap_offset as mo;
use kfd_abi::render::IbSubmit;
use kfd_abi::render::HW_IP_DMA;
use kfd_abi::sdma::IbBuilder;
use kfd_abi::{
    AllocFlags, Errno, EventType, Kfd, Mapping, Prot, RenderNode, Share, Transport, UserptrBuffer,
};
use kfd_sim::{Preset, SimFile};
use rstest::rstest;

const PAGE: usize = 4096;
const DOORBELLS: usize = 8192;
const KFD_VA: u64 = 0x7f00_0000_0000;
const VA: u64 = 0x10_0000_0000;

fn node(e: &Env, g: usize) -> RenderNode<SimFile> {
    RenderNode::new(e.renders[g].try_clone().unwrap(), "renderD (sim)")
}

fn gtt(e: &Env, g: usize, va: u64, size: u64) -> kfd_abi::kfd::Allocation {
    let a = e
        .kfd
        .alloc_memory(va, size, e.gpus[g], AllocFlags::GTT | AllocFlags::WRITABLE)
        .unwrap();
    e.kfd.map_memory_to_gpu(a.handle, &[e.gpus[g]]).unwrap();
    a
}

fn map_errno(r: kfd_abi::Result<Mapping>) -> Errno {
    r.unwrap_err().errno().unwrap()
}

#[rstest]
#[case::doorbells_one_page(mo::TYPE_DOORBELL, true, PAGE, Errno::EINVAL)]
#[case::doorbells_of_an_unknown_gpu(mo::TYPE_DOORBELL, false, DOORBELLS, Errno::ENODEV)]
#[case::mmio_two_pages(mo::TYPE_MMIO, true, 2 * PAGE, Errno::EINVAL)]
#[case::events_before_any_signal_event(mo::TYPE_EVENTS, false, PAGE, Errno::EINVAL)]
fn kfd_mappings_fail_with_the_drivers_errno(
    #[case] ty: u64,
    #[case] known_gpu: bool,
    #[case] len: usize,
    #[case] want: Errno,
) {
    let e = env(Preset::mi210x2());
    let gpu = if known_gpu {
        mo::gpu_id(e.gpus[0].get())
    } else {
        mo::gpu_id(0xbeef)
    };
    let r = e.kfd.map_offset(ty | gpu, len, Prot::RW, Share::Shared);
    assert_eq!(map_errno(r), want);
}

#[test]
fn render_mappings_fail_with_the_drivers_errno() {
    let e = env(Preset::mi210x2());
    let bo = gtt(&e, 0, KFD_VA, 2 * PAGE as u64);
    let r0 = node(&e, 0);
    // Not a buffer's offset, longer than the buffer, the other GPU's node, copy-on-write.
    assert_eq!(
        map_errno(r0.map_bo(bo.mmap_offset + PAGE as u64, PAGE, Prot::RW, Share::Shared)),
        Errno::EINVAL
    );
    assert_eq!(
        map_errno(r0.map_bo(bo.mmap_offset, 3 * PAGE, Prot::RW, Share::Shared)),
        Errno::EINVAL
    );
    assert_eq!(
        map_errno(node(&e, 1).map_bo(bo.mmap_offset, PAGE, Prot::RW, Share::Shared)),
        Errno::EINVAL
    );
    assert_eq!(
        map_errno(r0.map_bo(bo.mmap_offset, PAGE, Prot::RW, Share::Private)),
        Errno::EINVAL
    );
    // KFD VRAM without PUBLIC maps too (6.1 creates no KFD VRAM NO_CPU_ACCESS since 5.14).
    let hidden = e
        .kfd
        .alloc_memory(
            KFD_VA + (1 << 30),
            PAGE as u64,
            e.gpus[0],
            AllocFlags::VRAM | AllocFlags::WRITABLE,
        )
        .unwrap();
    drop(
        r0.map_bo(hidden.mmap_offset, PAGE, Prot::RW, Share::Shared)
            .unwrap(),
    );
    // The file is still usable.
    r0.map_bo(bo.mmap_offset, 2 * PAGE, Prot::RW, Share::Shared)
        .unwrap();
}

#[test]
fn a_private_prot_none_mapping_can_never_become_writable() {
    let e = env(Preset::mi210x2());
    let bo = gtt(&e, 0, KFD_VA, PAGE as u64);
    let m = node(&e, 0)
        .map_bo(bo.mmap_offset, PAGE, Prot::empty(), Share::Private)
        .unwrap();
    // SAFETY: mprotect of a mapping we own; it must fail, so nothing changes.
    let r = unsafe {
        libc::mprotect(
            usize::try_from(m.addr()).unwrap() as *mut libc::c_void,
            PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
        )
    };
    assert_eq!(r, -1);
    assert_eq!(Errno::last(), Errno::EACCES);
}

/// An IB on `r` that copies `len` bytes from `src` to `dst` (GPU VAs), run to completion.
fn gpu_copy(r: &RenderNode<SimFile>, src: u64, dst: u64, len: u64) {
    let ctx = r.ctx_alloc().unwrap();
    let mut ib_buf = UserptrBuffer::new(r, 64 << 10, VA).unwrap();
    let mut ib = IbBuilder::new();
    ib.copy_linear(src, dst, len);
    let dwords = ib.finish();
    for (d, w) in ib_buf.as_mut_slice().chunks_exact_mut(4).zip(&dwords) {
        d.copy_from_slice(&w.to_le_bytes());
    }
    let seq = r
        .cs_submit(&IbSubmit {
            ctx,
            bo_list: None,
            ip_type: HW_IP_DMA,
            ring: 0,
            ib_va: ib_buf.va(),
            ib_bytes: u32::try_from(dwords.len() * 4).unwrap(),
        })
        .unwrap();
    let deadline = RenderNode::<SimFile>::deadline_in(1_000_000_000);
    assert!(r.wait_cs(ctx, HW_IP_DMA, 0, seq, deadline).unwrap());
}

#[test]
fn a_buffers_mapping_is_the_memory_the_gpu_reads_and_writes() {
    let e = env(Preset::mi210x2());
    let size = 3 * PAGE as u64;
    let a = gtt(&e, 0, KFD_VA, size);
    let b = gtt(&e, 0, KFD_VA + (1 << 30), size);
    let r = node(&e, 0);
    let ma = r
        .map_bo(a.mmap_offset, 3 * PAGE, Prot::RW, Share::Shared)
        .unwrap();
    let mb = r
        .map_bo(b.mmap_offset, 3 * PAGE, Prot::READ, Share::Shared)
        .unwrap();
    let bytes: Vec<u8> = (0..3 * PAGE)
        .map(|i| u8::try_from(i % 251).unwrap())
        .collect();
    // CPU -> GPU: the copy reads what the CPU wrote through `ma`; GPU -> CPU: `mb` shows it.
    assert!(ma.write(0, &bytes));
    gpu_copy(&r, KFD_VA, KFD_VA + (1 << 30), size);
    let mut back = vec![0u8; 3 * PAGE];
    assert!(mb.read(0, &mut back));
    assert!(
        back == bytes,
        "the GPU's copy differs from what the CPU wrote"
    );
    // Two mappings of one buffer are the same memory.
    let again = r
        .map_bo(a.mmap_offset, PAGE, Prot::READ, Share::Shared)
        .unwrap();
    assert!(ma.write_u64(0, 0xfeed));
    assert_eq!(again.read_u64(0), Some(0xfeed));
}

#[test]
fn each_process_and_gpu_has_its_own_doorbells_and_the_gpu_sees_them_rung() {
    let e = env(Preset::mi210x2());
    let db0 = e.kfd.map_doorbells(e.gpus[0], DOORBELLS).unwrap();
    let db1 = e.kfd.map_doorbells(e.gpus[1], DOORBELLS).unwrap();
    assert!(db0.write_u64(8, 11));
    assert!(db1.write_u64(8, 22));
    let pid = e.proc.pid();
    assert_eq!(e.machine.doorbell(pid, e.gpus[0].get(), 8), Some(11));
    assert_eq!(e.machine.doorbell(pid, e.gpus[1].get(), 8), Some(22));
    // A second mapping is the same slice; another process's slice is its own.
    let again = e.kfd.map_doorbells(e.gpus[0], DOORBELLS).unwrap();
    assert_eq!(again.read_u64(8), Some(11));
    let other = e.machine.spawn_process();
    let their_kfd = Kfd::new(other.open_kfd().unwrap(), "/dev/kfd");
    let theirs = their_kfd.map_doorbells(e.gpus[0], DOORBELLS).unwrap();
    assert_eq!(theirs.read_u64(8), Some(0));
    assert_eq!(e.machine.doorbell(other.pid(), e.gpus[0].get(), 8), Some(0));
}

#[test]
fn the_events_page_shows_signal_slots_as_the_driver_writes_them() {
    let e = env(Preset::mi210x2());
    let ev = e.kfd.create_event(EventType::Signal, false, None).unwrap();
    let page = e.kfd.map_events(8 * PAGE).unwrap();
    let slot = usize::try_from(ev.slot_index).unwrap() * 8;
    assert_eq!(page.read_u64(slot), Some(u64::MAX), "unsignaled");
    // The next event's slot is written into the mapped page by the driver.
    let ev2 = e.kfd.create_event(EventType::Signal, false, None).unwrap();
    let slot2 = usize::try_from(ev2.slot_index).unwrap() * 8;
    assert_ne!(slot, slot2);
    assert!(page.write_u64(slot2, 0));
    assert_eq!(page.read_u64(slot2), Some(0));
    assert_eq!(
        map_errno(e.kfd.map_events(9 * PAGE)),
        Errno::EINVAL,
        "longer than the full signal page"
    );
}

/// The `VmFlags` line of the mapping at `addr` in /proc/self/smaps.
fn vm_flags(addr: u64) -> Vec<String> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let start = format!("{addr:x}-");
    let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&start));
    assert!(lines.next().is_some(), "no mapping at {addr:#x}");
    let flags = lines
        .find_map(|l| l.strip_prefix("VmFlags:"))
        .expect("a VmFlags line");
    flags.split_whitespace().map(str::to_owned).collect()
}

#[test]
fn kfd_pages_are_not_inherited_by_fork_and_no_device_mapping_is_dumped() {
    let e = env(Preset::mi210x2());
    let db = e.kfd.map_doorbells(e.gpus[0], DOORBELLS).unwrap();
    let mmio = e.kfd.map_mmio(e.gpus[0], PAGE).unwrap();
    let bo = gtt(&e, 0, KFD_VA, PAGE as u64);
    let cpu = node(&e, 0)
        .map_bo(bo.mmap_offset, PAGE, Prot::RW, Share::Shared)
        .unwrap();
    for m in [&db, &mmio] {
        let f = vm_flags(m.addr());
        assert!(f.iter().any(|f| f == "dc"), "VM_DONTCOPY: {f:?}");
        assert!(f.iter().any(|f| f == "dd"), "VM_DONTDUMP: {f:?}");
    }
    let f = vm_flags(cpu.addr());
    assert!(
        !f.iter().any(|f| f == "dc"),
        "render mappings are inherited: {f:?}"
    );
    assert!(f.iter().any(|f| f == "dd"), "VM_DONTDUMP: {f:?}");
}

#[test]
fn an_unmapped_range_is_gone_and_the_memory_stays_with_the_device() {
    let e = env(Preset::mi210x2());
    let bo = gtt(&e, 0, KFD_VA, PAGE as u64);
    let r = node(&e, 0);
    let m = r
        .map_bo(bo.mmap_offset, PAGE, Prot::RW, Share::Shared)
        .unwrap();
    assert!(m.write_u64(0, 0x5a5a));
    let addr = m.addr();
    m.unmap().unwrap();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    assert!(!maps.lines().any(|l| l.starts_with(&format!("{addr:x}-"))));
    let again = r
        .map_bo(bo.mmap_offset, PAGE, Prot::READ, Share::Shared)
        .unwrap();
    assert_eq!(again.read_u64(0), Some(0x5a5a));
}
