//! CPU mappings of the simulated devices, the words both drivers and both front ends use: one
//! mmap as the driver sees it ([`MmapRequest`], with the `MAP_*` bits), the memory that answers
//! it ([`Target`], with the `VMA_*` bits), and the bounded wait for a process's state
//! ([`proc_state`]). Which memory backs an `mmap` of `/dev/kfd` or of a render node is decided
//! as the 6.1 drivers decide it, with their checks in their order and their errno, by each
//! driver's handler, picked per file by [`fops::mmap`](crate::fops::mmap), which serves both
//! front ends: the in-process transport ([`SimFile`](crate::SimFile) maps the memfd it names)
//! and the CUSE bridge (which hands the memfd to the `kfd_bridge` module).
//!
//! - `/dev/kfd` (`kfd_mmap`, [`crate::kfd::mmap`]): the caller must have a KFD process (else
//!   `EINVAL`); bits 63-62 of the offset pick the type, bits 61-46 the (actual) gpu id, unknown or
//!   0 `ENODEV`. DOORBELL: exactly the process's doorbell slice (8 KiB) of that GPU, else
//!   `EINVAL`; EVENTS: at most the order of the full signal page (32 KiB), and a signal page must
//!   exist, else `EINVAL`; RESERVED_MEM (the CWSR area of APUs): exactly 2 pages, a fresh zeroed
//!   area each time; MMIO: exactly one page, the GPU's HDP flush page. Flags as `kfd_*_mmap` set
//!   them: `VM_IO | VM_DONTCOPY | VM_DONTEXPAND | VM_NORESERVE | VM_DONTDUMP`.
//! - Render nodes (`drm_gem_mmap`, `amdgpu_gem_object_mmap`, `ttm_bo_mmap_obj`,
//!   [`crate::render::mmap`]): the offset must be exactly a BO's fake offset on this device and
//!   the length at most the BO's size (`EINVAL`); the BO must be one of this file's (a KFD BO of
//!   a process whose VM is this file, or a GEM object with a handle in it), else `EACCES`; userptr
//!   and no-CPU-access BOs `EPERM` (GEM objects created so; KFD VRAM is not, PUBLIC or not,
//!   since 5.14: libhsakmt maps every VRAM BO, invisible ones `PROT_NONE`);
//!   copy-on-write mappings `EINVAL`, except `PROT_NONE` private ones, which lose `VM_MAYWRITE`
//!   instead (amdgpu's workaround for the thunk). Flags: `VM_IO | VM_DONTEXPAND | VM_DONTDUMP`,
//!   readable through ptrace (TTM's `access`), inherited by fork.
//!
//! What backs the KFD pages: a doorbell page per (process, GPU), kept by the KFD process; an
//! MMIO page per GPU, kept by the device; and the kernel's own signal page (made when first
//! mapped: all slots unsignaled, as the kernel fills it).
//!
//! Over CUSE the caller's mmap lock is held while the daemon answers, so nothing here touches the
//! caller's memory, and the simulator's locks are taken with a bound ([`LOCK_WAIT`]): a daemon
//! thread that holds one while it reads that process's memory would otherwise wait on us for ever.

use std::sync::Arc;
use std::time::Duration;

use kfd_abi::Errno;

use crate::host::lock_within;
use crate::hw::backing::Backing;
use crate::lock_order::OrderedGuard;
use crate::state::process::{KfdProcess, ProcState};

/// How long an mmap waits for a lock of the simulator's state before it gives up (`EAGAIN`).
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(2);

// The bits of a mapping request (`MAP_*`) and of the VMA that answers it (`VMA_*`). The
// kfd_bridge module's protocol carries them as they are (`KFD_BRIDGE_MAP_*` and
// `KFD_BRIDGE_VMA_*` of `ci/kmod/kfd_bridge/kfd_bridge.h`, checked in `cuse::bridge::proto`).

/// `MAP_SHARED`.
pub(crate) const MAP_SHARED: u32 = 1 << 0;
/// `PROT_READ`.
pub(crate) const MAP_READ: u32 = 1 << 1;
/// `PROT_WRITE`.
pub(crate) const MAP_WRITE: u32 = 1 << 2;
/// `PROT_EXEC`.
pub(crate) const MAP_EXEC: u32 = 1 << 3;
/// `VM_MAYWRITE`: the mapping may become writable.
pub(crate) const MAP_MAYWRITE: u32 = 1 << 4;

/// `VM_IO`.
pub(crate) const VMA_IO: u32 = 1 << 0;
/// `VM_DONTCOPY`: not inherited by fork.
pub(crate) const VMA_DONTCOPY: u32 = 1 << 1;
/// `VM_NORESERVE`.
pub(crate) const VMA_NORESERVE: u32 = 1 << 2;
/// `VM_DONTDUMP`: not in core dumps.
pub(crate) const VMA_DONTDUMP: u32 = 1 << 3;
/// Readable through ptrace and `/proc/PID/mem`.
pub(crate) const VMA_ACCESS: u32 = 1 << 4;
/// `VM_MAYWRITE` cleared.
pub(crate) const VMA_NO_MAYWRITE: u32 = 1 << 5;

/// One mmap as the driver sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct MmapRequest {
    /// Byte offset in the device (`vm_pgoff << PAGE_SHIFT`).
    pub offset: u64,
    /// Bytes.
    pub length: u64,
    /// `MAP_*` bits above.
    pub flags: u32,
}

/// The memory behind one mapping.
#[derive(Debug)]
pub(crate) struct Target {
    /// The memfd.
    pub backing: Arc<Backing>,
    /// Byte offset of the mapping's first page in it.
    pub offset: u64,
    /// `VMA_*` flags of the mapping.
    pub vma: u32,
}

/// The state of `p`, waiting at most [`LOCK_WAIT`] (`EAGAIN`).
pub(crate) fn proc_state(p: &KfdProcess) -> Result<OrderedGuard<'_, ProcState>, Errno> {
    lock_within(&p.state, LOCK_WAIT).ok_or_else(|| {
        log::warn!(
            "kfd-sim: pid {}: the KFD process stayed busy; mmap answered EAGAIN",
            p.pid
        );
        Errno::EAGAIN
    })
}

#[cfg(test)]
mod tests {
    //! The rules against the in-process simulator: a process with /dev/kfd and both render nodes
    //! of an MI210x2, its VMs acquired, asking as the module would.

    use std::os::fd::AsFd;

    use kfd_abi::render::GemDomain;
    use kfd_abi::{AllocFlags, EventType, Kfd, RenderNode};
    use rstest::rstest;

    use super::*;
    use crate::fops::mmap as resolve;
    use crate::kfd::mmap::{CWSR_SIZE, KFD_VMA};
    use crate::limits::{DOORBELL_SLICE, PAGE_SIZE, SIGNAL_EVENT_LIMIT};
    use crate::render::mmap::RENDER_VMA;
    use crate::state::machine::FileKind;
    use crate::{Machine, SimFile, SimProcess};
    use kfd_abi::mmap_offset as mo;

    const VA: u64 = 0x7f00_0000_0000;
    const RW: u32 = super::MAP_READ | super::MAP_WRITE | super::MAP_MAYWRITE;
    const SHARED_RW: u32 = super::MAP_SHARED | RW;

    struct Env {
        machine: Machine,
        proc: SimProcess,
        kfd: Kfd<SimFile>,
        renders: Vec<RenderNode<SimFile>>,
        gpus: Vec<u32>,
    }

    fn env() -> Env {
        let machine = Machine::new(&crate::Preset::by_name("mi210x2").unwrap()).unwrap();
        let proc = machine.spawn_process();
        let kfd = Kfd::new(proc.open_kfd().unwrap(), "/dev/kfd");
        let gpus = machine.gpu_ids();
        let renders: Vec<RenderNode<SimFile>> = machine
            .render_minors()
            .into_iter()
            .map(|m| RenderNode::new(proc.open_render(m).unwrap(), "render"))
            .collect();
        for (g, r) in gpus.iter().zip(&renders) {
            kfd.acquire_vm(kfd_abi::GpuId::new(*g).unwrap(), r.as_fd())
                .unwrap();
        }
        Env {
            machine,
            proc,
            kfd,
            renders,
            gpus,
        }
    }

    impl Env {
        fn caller(&self) -> Arc<KfdProcess> {
            match &self.kfd.transport().open_file().kind {
                FileKind::Kfd(p) => Arc::clone(p),
                FileKind::Render(_) => unreachable!(),
            }
        }

        fn gpu(&self, i: usize) -> kfd_abi::GpuId {
            kfd_abi::GpuId::new(self.gpus[i]).unwrap()
        }

        fn ask(
            &self,
            file: &SimFile,
            offset: u64,
            length: u64,
            flags: u32,
        ) -> Result<Target, Errno> {
            let q = MmapRequest {
                offset,
                length,
                flags,
            };
            let caller = self.caller();
            resolve(self.machine.inner(), file.open_file(), Some(&caller), &q)
        }

        fn kfd_map(&self, offset: u64, length: u64) -> Result<Target, Errno> {
            self.ask(self.kfd.transport(), offset, length, SHARED_RW)
        }

        fn render_map(
            &self,
            i: usize,
            offset: u64,
            length: u64,
            flags: u32,
        ) -> Result<Target, Errno> {
            self.ask(self.renders[i].transport(), offset, length, flags)
        }
    }

    fn errno(r: Result<Target, Errno>) -> Errno {
        r.expect_err("the mapping was expected to fail")
    }

    #[test]
    fn doorbells_are_one_slice_per_process_and_gpu() {
        let e = env();
        let db = |gpu: u32| mo::TYPE_DOORBELL | mo::gpu_id(gpu);
        let a = e.kfd_map(db(e.gpus[0]), DOORBELL_SLICE).unwrap();
        assert_eq!((a.offset, a.backing.size), (0, DOORBELL_SLICE));
        assert_eq!(a.vma, KFD_VMA);
        let again = e.kfd_map(db(e.gpus[0]), DOORBELL_SLICE).unwrap();
        assert!(Arc::ptr_eq(&a.backing, &again.backing), "the same slice");
        let other_gpu = e.kfd_map(db(e.gpus[1]), DOORBELL_SLICE).unwrap();
        assert!(!Arc::ptr_eq(&a.backing, &other_gpu.backing));
        // Another process on the same GPU has its own slice.
        let e2_kfd = Kfd::new(e.machine.spawn_process().open_kfd().unwrap(), "/dev/kfd");
        let FileKind::Kfd(p2) = &e2_kfd.transport().open_file().kind else {
            unreachable!()
        };
        let q = MmapRequest {
            offset: db(e.gpus[0]),
            length: DOORBELL_SLICE,
            flags: SHARED_RW,
        };
        let theirs = resolve(
            e.machine.inner(),
            e2_kfd.transport().open_file(),
            Some(p2),
            &q,
        )
        .unwrap();
        assert!(!Arc::ptr_eq(&a.backing, &theirs.backing));
    }

    #[rstest]
    #[case::doorbell_too_short(mo::TYPE_DOORBELL, true, PAGE_SIZE, Errno::EINVAL)]
    #[case::doorbell_too_long(mo::TYPE_DOORBELL, true, 4 * PAGE_SIZE, Errno::EINVAL)]
    #[case::doorbell_without_gpu(mo::TYPE_DOORBELL, false, DOORBELL_SLICE, Errno::ENODEV)]
    #[case::mmio_two_pages(mo::TYPE_MMIO, true, 2 * PAGE_SIZE, Errno::EINVAL)]
    #[case::mmio_without_gpu(mo::TYPE_MMIO, false, PAGE_SIZE, Errno::ENODEV)]
    #[case::cwsr_one_page(mo::TYPE_RESERVED_MEM, true, PAGE_SIZE, Errno::EINVAL)]
    #[case::cwsr_without_gpu(mo::TYPE_RESERVED_MEM, false, CWSR_SIZE, Errno::ENODEV)]
    #[case::events_without_a_signal_page(mo::TYPE_EVENTS, false, PAGE_SIZE, Errno::EINVAL)]
    fn kfd_offsets_fail_with_the_drivers_errno(
        #[case] ty: u64,
        #[case] with_gpu: bool,
        #[case] length: u64,
        #[case] want: Errno,
    ) {
        let e = env();
        let gpu = if with_gpu { mo::gpu_id(e.gpus[0]) } else { 0 };
        assert_eq!(errno(e.kfd_map(ty | gpu, length)), want);
    }

    #[test]
    fn an_unknown_gpu_id_is_enodev_and_a_process_without_kfd_einval() {
        let e = env();
        let unknown = mo::gpu_id(0xfeed);
        assert_eq!(
            errno(e.kfd_map(mo::TYPE_DOORBELL | unknown, DOORBELL_SLICE)),
            Errno::ENODEV
        );
        let q = MmapRequest {
            offset: mo::TYPE_DOORBELL | mo::gpu_id(e.gpus[0]),
            length: DOORBELL_SLICE,
            flags: SHARED_RW,
        };
        let r = resolve(e.machine.inner(), e.kfd.transport().open_file(), None, &q);
        assert_eq!(errno(r), Errno::EINVAL);
    }

    #[test]
    fn mmio_is_one_page_per_gpu_and_cwsr_fresh_each_time() {
        let e = env();
        let mmio = mo::TYPE_MMIO | mo::gpu_id(e.gpus[0]);
        let a = e.kfd_map(mmio, PAGE_SIZE).unwrap();
        let b = e.kfd_map(mmio, PAGE_SIZE).unwrap();
        assert!(Arc::ptr_eq(&a.backing, &b.backing));
        let cwsr = mo::TYPE_RESERVED_MEM | mo::gpu_id(e.gpus[0]);
        let c = e.kfd_map(cwsr, CWSR_SIZE).unwrap();
        let d = e.kfd_map(cwsr, CWSR_SIZE).unwrap();
        assert!(!Arc::ptr_eq(&c.backing, &d.backing));
    }

    #[test]
    fn the_kernels_own_signal_page_is_made_unsignaled_and_kept() {
        let e = env();
        let ev = e.kfd.create_event(EventType::Signal, true, None).unwrap();
        let page = e.kfd_map(mo::TYPE_EVENTS, 8 * PAGE_SIZE).unwrap();
        assert_eq!(page.backing.size, u64::from(SIGNAL_EVENT_LIMIT) * 8);
        let mut slot = [0u8; 8];
        assert!(page.backing.read(u64::from(ev.slot_index) * 8, &mut slot));
        assert_eq!(slot, [0xff; 8]);
        // The simulator now writes the slots of new events into it.
        assert!(page.backing.write(0, &[0; 8]));
        let again = e.kfd_map(mo::TYPE_EVENTS, PAGE_SIZE).unwrap();
        assert!(Arc::ptr_eq(&page.backing, &again.backing));
        assert_eq!(
            errno(e.kfd_map(mo::TYPE_EVENTS, 9 * PAGE_SIZE)),
            Errno::EINVAL
        );
    }

    #[test]
    fn a_bo_given_as_event_page_is_what_the_events_mapping_shows() {
        let e = env();
        let gtt = AllocFlags::GTT | AllocFlags::WRITABLE;
        let bo = e.kfd.alloc_memory(VA, PAGE_SIZE, e.gpu(0), gtt).unwrap();
        e.kfd
            .create_event(EventType::Signal, false, Some(bo.handle))
            .unwrap();
        let page = e.kfd_map(mo::TYPE_EVENTS, PAGE_SIZE).unwrap();
        assert_eq!(page.backing.size, PAGE_SIZE);
        // The BO backs one page: a longer mapping has nothing behind it.
        assert_eq!(
            errno(e.kfd_map(mo::TYPE_EVENTS, 2 * PAGE_SIZE)),
            Errno::EINVAL
        );
    }

    #[test]
    fn a_kfd_bo_maps_through_the_render_node_of_its_vm() {
        let e = env();
        let gtt = AllocFlags::GTT | AllocFlags::WRITABLE;
        let bo = e
            .kfd
            .alloc_memory(VA, 2 * PAGE_SIZE, e.gpu(0), gtt)
            .unwrap();
        let t = e
            .render_map(0, bo.mmap_offset, 2 * PAGE_SIZE, SHARED_RW)
            .unwrap();
        assert_eq!((t.offset, t.vma), (0, RENDER_VMA));
        assert!(t.backing.write(0, b"same"));
        let again = e
            .render_map(0, bo.mmap_offset, PAGE_SIZE, super::MAP_SHARED)
            .unwrap();
        let mut b = [0u8; 4];
        assert!(again.backing.read(0, &mut b));
        assert_eq!(&b, b"same");
    }

    #[rstest]
    #[case::middle_of_the_bo(PAGE_SIZE, PAGE_SIZE, SHARED_RW, Errno::EINVAL)]
    #[case::longer_than_the_bo(0, 3 * PAGE_SIZE, SHARED_RW, Errno::EINVAL)]
    #[case::copy_on_write(0, PAGE_SIZE, RW, Errno::EINVAL)]
    #[case::private_read_only_that_may_become_writable(
        0,
        PAGE_SIZE,
        super::MAP_READ | super::MAP_MAYWRITE,
        Errno::EINVAL
    )]
    fn render_mappings_fail_with_the_drivers_errno(
        #[case] plus: u64,
        #[case] length: u64,
        #[case] flags: u32,
        #[case] want: Errno,
    ) {
        let e = env();
        let gtt = AllocFlags::GTT | AllocFlags::WRITABLE;
        let bo = e
            .kfd
            .alloc_memory(VA, 2 * PAGE_SIZE, e.gpu(0), gtt)
            .unwrap();
        assert_eq!(
            errno(e.render_map(0, bo.mmap_offset + plus, length, flags)),
            want
        );
    }

    #[test]
    fn render_mappings_check_the_file_and_the_cpu_access() {
        let e = env();
        let gtt = AllocFlags::GTT | AllocFlags::WRITABLE;
        let bo = e.kfd.alloc_memory(VA, PAGE_SIZE, e.gpu(0), gtt).unwrap();
        // The other GPU's node: its offsets are its own.
        assert_eq!(
            errno(e.render_map(1, bo.mmap_offset, PAGE_SIZE, SHARED_RW)),
            Errno::EINVAL
        );
        // Another file of the same node, not the process's VM.
        let other = e.proc.open_render(e.machine.render_minors()[0]).unwrap();
        assert_eq!(
            errno(e.ask(&other, bo.mmap_offset, PAGE_SIZE, SHARED_RW)),
            Errno::EACCES
        );
        // KFD VRAM maps with or without PUBLIC (6.1 creates neither NO_CPU_ACCESS): libhsakmt
        // maps the invisible BOs PROT_NONE and private.
        let vram = AllocFlags::VRAM | AllocFlags::WRITABLE;
        let hidden = e
            .kfd
            .alloc_memory(VA + (1 << 30), PAGE_SIZE, e.gpu(0), vram)
            .unwrap();
        let thunk = e
            .render_map(0, hidden.mmap_offset, PAGE_SIZE, super::MAP_MAYWRITE)
            .unwrap();
        assert_eq!(thunk.vma, RENDER_VMA | super::VMA_NO_MAYWRITE);
        e.render_map(0, hidden.mmap_offset, PAGE_SIZE, SHARED_RW)
            .unwrap();
        let public = vram | AllocFlags::PUBLIC;
        let shown = e
            .kfd
            .alloc_memory(VA + (2 << 30), PAGE_SIZE, e.gpu(0), public)
            .unwrap();
        e.render_map(0, shown.mmap_offset, PAGE_SIZE, SHARED_RW)
            .unwrap();
        // A PROT_NONE private mapping is allowed, without VM_MAYWRITE (amdgpu's workaround).
        let none = e
            .render_map(0, bo.mmap_offset, PAGE_SIZE, super::MAP_MAYWRITE)
            .unwrap();
        assert_eq!(none.vma, RENDER_VMA | super::VMA_NO_MAYWRITE);
    }

    #[test]
    fn a_gem_object_maps_through_its_own_file_only() {
        let e = env();
        let r = &e.renders[0];
        let h = r
            .gem_create(3 * PAGE_SIZE, PAGE_SIZE, GemDomain::GTT, 0)
            .unwrap();
        let off = r.gem_mmap_offset(h).unwrap();
        let t = e.render_map(0, off, 3 * PAGE_SIZE, SHARED_RW).unwrap();
        assert_eq!(t.backing.size, 3 * PAGE_SIZE);
        // Not through another file of the node, which has no handle of it.
        let other = e.proc.open_render(e.machine.render_minors()[0]).unwrap();
        assert_eq!(
            errno(e.ask(&other, off, PAGE_SIZE, SHARED_RW)),
            Errno::EACCES
        );
    }
}
