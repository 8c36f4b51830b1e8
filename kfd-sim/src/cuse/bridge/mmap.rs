//! Which simulated memory backs a CPU mapping of one of our devices, decided as the 6.1 drivers
//! decide it, with their checks in their order and their errno:
//!
//! - `/dev/kfd` (`kfd_mmap`): the caller must have a KFD process (else `EINVAL`); bits 63-62 of
//!   the offset pick the type, bits 61-46 the (actual) gpu id, unknown or 0 `ENODEV`.
//!   DOORBELL: exactly the process's doorbell slice (8 KiB) of that GPU, else `EINVAL`;
//!   EVENTS: at most the order of the full signal page (32 KiB), and a signal page must exist,
//!   else `EINVAL`; RESERVED_MEM (the CWSR area of APUs): exactly 2 pages, a fresh zeroed area each
//!   time; MMIO: exactly one page, the GPU's HDP flush page. Flags as `kfd_*_mmap` set them:
//!   `VM_IO | VM_DONTCOPY | VM_DONTEXPAND | VM_NORESERVE | VM_DONTDUMP` (`VM_PFNMAP` aside: see
//!   the module's README).
//! - Render nodes (`drm_gem_mmap`, `amdgpu_gem_object_mmap`, `ttm_bo_mmap_obj`): the offset must
//!   be exactly a BO's fake offset on this device and the length at most the BO's size
//!   (`EINVAL`); the BO must be one of this file's (a KFD BO of a process whose VM is this file,
//!   or a GEM object with a handle in it), else `EACCES`; userptr and no-CPU-access BOs `EPERM`
//!   (KFD VRAM without PUBLIC is created no-CPU-access); copy-on-write mappings `EINVAL`, except
//!   `PROT_NONE` private ones, which lose `VM_MAYWRITE` instead (amdgpu's workaround for the
//!   thunk). Flags: `VM_IO | VM_DONTEXPAND | VM_DONTDUMP`, readable through ptrace (TTM's
//!   `access`), inherited by fork.
//!
//! What the simulator did not have and the bridge adds, as the minimum that backs these pages:
//! a doorbell page per (process, GPU), an MMIO page per GPU, and the kernel's own signal page
//! (made when first mapped: all slots unsignaled, as the kernel fills it). Nothing reads the
//! doorbells yet (the simulated queues run without them).
//!
//! The caller's mmap lock is held while the daemon answers, so nothing here touches the caller's
//! memory, and the simulator's locks are taken with a bound ([`LOCK_WAIT`]): a daemon thread
//! that holds one while it reads that process's memory would otherwise wait on us for ever.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use kfd_abi::mmap_offset as mo;
use kfd_abi::Errno;

use super::proto::{self, MmapQuery};
use crate::machine::{lock, lock_within, FileKind, MachineInner, OpenFile};
use crate::memory::{Backing, Domain};
use crate::process::limits::{DOORBELL_SLICE, PAGE_SIZE, SIGNAL_EVENT_LIMIT};
use crate::process::{KfdProcess, ProcState, SignalPage};
use crate::render::RenderFile;

/// How long the answer waits for a lock of the simulator's state before it gives up (`EAGAIN`).
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(2);

/// `KFD_CWSR_TBA_TMA_SIZE`: the reserved-memory (CWSR) area of one process on one GPU.
const CWSR_SIZE: u64 = 2 * PAGE_SIZE;

/// Flags of the KFD mappings.
const KFD_VMA: u32 =
    proto::VMA_IO | proto::VMA_DONTCOPY | proto::VMA_NORESERVE | proto::VMA_DONTDUMP;
/// Flags of render-node mappings.
const RENDER_VMA: u32 = proto::VMA_IO | proto::VMA_DONTDUMP | proto::VMA_ACCESS;

/// The memory behind one mapping.
#[derive(Debug)]
pub(crate) struct Target {
    /// The memfd.
    pub backing: Arc<Backing>,
    /// Byte offset of the mapping's first page in it.
    pub offset: u64,
    /// `VMA_*` flags for the module.
    pub vma: u32,
}

/// A doorbell page of one process on one GPU.
#[derive(Debug)]
struct DoorbellPage {
    process: Weak<KfdProcess>,
    dev: usize,
    page: Arc<Backing>,
}

/// The pages the bridge adds to the simulator (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct Backings {
    doorbells: Mutex<Vec<DoorbellPage>>,
    mmio: Mutex<Vec<(usize, Arc<Backing>)>>,
}

fn page(size: u64, dev: usize) -> Result<Arc<Backing>, Errno> {
    Backing::new(size, Domain::Gtt, dev, true)
        .map(Arc::new)
        .map_err(|e| {
            log::warn!("kfd-simd: cannot back a {size}-byte device page: {e}");
            Errno::ENOMEM
        })
}

impl Backings {
    /// The doorbell slice of `process` on device `dev` (the same pages for every mapping).
    fn doorbell(&self, process: &Arc<KfdProcess>, dev: usize) -> Result<Arc<Backing>, Errno> {
        let mut all = lock(&self.doorbells);
        all.retain(|d| d.process.strong_count() > 0);
        if let Some(d) = all.iter().find(|d| {
            d.dev == dev
                && d.process
                    .upgrade()
                    .is_some_and(|p| Arc::ptr_eq(&p, process))
        }) {
            return Ok(Arc::clone(&d.page));
        }
        let page = page(DOORBELL_SLICE, dev)?;
        all.push(DoorbellPage {
            process: Arc::downgrade(process),
            dev,
            page: Arc::clone(&page),
        });
        Ok(page)
    }

    /// The MMIO remap (HDP flush) page of device `dev`, shared by every process.
    fn mmio(&self, dev: usize) -> Result<Arc<Backing>, Errno> {
        let mut all = lock(&self.mmio);
        if let Some((_, p)) = all.iter().find(|(d, _)| *d == dev) {
            return Ok(Arc::clone(p));
        }
        let p = page(PAGE_SIZE, dev)?;
        all.push((dev, Arc::clone(&p)));
        Ok(p)
    }
}

/// The kernel's `get_order`: log2 of the number of pages, rounded up.
fn order(bytes: u64) -> u32 {
    let pages = bytes.div_ceil(PAGE_SIZE).max(1);
    pages.next_power_of_two().trailing_zeros()
}

/// Answers one query on an open file of ours; `caller` is the calling process's KFD process.
pub(crate) fn resolve(
    m: &MachineInner,
    backings: &Backings,
    file: &OpenFile,
    caller: Option<&Arc<KfdProcess>>,
    q: &MmapQuery,
) -> Result<Target, Errno> {
    match &file.kind {
        FileKind::Kfd(_) => kfd(m, backings, caller, q),
        FileKind::Render(r) => render(m, file, r, q),
    }
}

fn proc_state(p: &KfdProcess) -> Result<std::sync::MutexGuard<'_, ProcState>, Errno> {
    lock_within(&p.state, LOCK_WAIT).ok_or_else(|| {
        log::warn!(
            "kfd-simd: pid {}: the KFD process stayed busy; mmap answered EAGAIN",
            p.pid
        );
        Errno::EAGAIN
    })
}

/// `kfd_mmap`.
fn kfd(
    m: &MachineInner,
    backings: &Backings,
    caller: Option<&Arc<KfdProcess>>,
    q: &MmapQuery,
) -> Result<Target, Errno> {
    // kfd_get_process(current).
    let p = caller.ok_or(Errno::EINVAL)?;
    let gpu_id = mo::get_gpu_id(q.offset);
    let dev = if gpu_id == 0 {
        None
    } else {
        m.device_by_gpu_id(gpu_id)
    };
    let target = |backing, vma| Target {
        backing,
        offset: 0,
        vma,
    };
    let has_pdd = |st: &ProcState, dev: usize| st.pdds.iter().any(|pdd| pdd.dev == dev);
    match q.offset & mo::TYPE_MASK {
        mo::TYPE_DOORBELL => {
            let dev = dev.ok_or(Errno::ENODEV)?;
            if q.length != DOORBELL_SLICE {
                return Err(Errno::EINVAL);
            }
            if !has_pdd(&*proc_state(p)?, dev) {
                return Err(Errno::EINVAL);
            }
            Ok(target(backings.doorbell(p, dev)?, KFD_VMA))
        }
        mo::TYPE_EVENTS => {
            if order(u64::from(SIGNAL_EVENT_LIMIT) * 8) < order(q.length) {
                return Err(Errno::EINVAL);
            }
            let mut st = proc_state(p)?;
            let signal = st.signal.as_mut().ok_or(Errno::EINVAL)?;
            let backing = signal_page(signal)?;
            // The kernel maps what the page's address is followed by; we back only the page.
            if q.length > backing.size {
                return Err(Errno::EINVAL);
            }
            Ok(target(backing, KFD_VMA))
        }
        mo::TYPE_RESERVED_MEM => {
            let dev = dev.ok_or(Errno::ENODEV)?;
            if q.length != CWSR_SIZE {
                return Err(Errno::EINVAL);
            }
            if !has_pdd(&*proc_state(p)?, dev) {
                return Err(Errno::EINVAL);
            }
            Ok(target(page(CWSR_SIZE, dev)?, KFD_VMA))
        }
        // TYPE_MMIO (the two bits leave no other value).
        _ => {
            let dev = dev.ok_or(Errno::ENODEV)?;
            if q.length != PAGE_SIZE {
                return Err(Errno::EINVAL);
            }
            Ok(target(backings.mmio(dev)?, KFD_VMA))
        }
    }
}

/// The memory of the signal page: the BO userspace gave, or the kernel's own page, made now (all
/// slots unsignaled, as `allocate_signal_page` fills it; nothing wrote to it before).
fn signal_page(signal: &mut SignalPage) -> Result<Arc<Backing>, Errno> {
    if let Some(b) = &signal.backing {
        return Ok(Arc::clone(b));
    }
    let size = u64::from(SIGNAL_EVENT_LIMIT) * 8;
    let b = page(size, 0)?;
    let unsignaled = vec![0xffu8; usize::try_from(size).map_err(|_| Errno::ENOMEM)?];
    if !b.write(0, &unsignaled) {
        return Err(Errno::ENOMEM);
    }
    signal.backing = Some(Arc::clone(&b));
    Ok(b)
}

/// A BO found at the requested fake offset.
struct Found {
    backing: Option<Arc<Backing>>,
    size: u64,
    allowed: bool,
    userptr: bool,
    no_cpu_access: bool,
}

/// `drm_gem_mmap` on a render node.
fn render(
    m: &MachineInner,
    file: &OpenFile,
    rf: &RenderFile,
    q: &MmapQuery,
) -> Result<Target, Errno> {
    let found = match gem(rf, q.offset, true)? {
        Some(f) => Some(f),
        None => match other_files_gem(m, file, rf.device, q.offset)? {
            Some(f) => Some(f),
            None => kfd_bo(m, file, rf.device, q.offset)?,
        },
    };
    // The offset manager finds a node only where the whole range fits in it.
    let found = found
        .filter(|f| q.length <= crate::process::align_up(f.size))
        .ok_or(Errno::EINVAL)?;
    if !found.allowed {
        return Err(Errno::EACCES);
    }
    if found.userptr || found.no_cpu_access {
        return Err(Errno::EPERM);
    }
    let mut vma = RENDER_VMA;
    let cow = q.flags & (proto::MAP_SHARED | proto::MAP_MAYWRITE) == proto::MAP_MAYWRITE;
    if cow {
        if q.flags & (proto::MAP_READ | proto::MAP_WRITE | proto::MAP_EXEC) != 0 {
            return Err(Errno::EINVAL);
        }
        vma |= proto::VMA_NO_MAYWRITE;
    }
    // A doorbell or MMIO BO has no memory of its own here: nothing to map.
    let backing = found.backing.ok_or(Errno::EINVAL)?;
    Ok(Target {
        backing,
        offset: 0,
        vma,
    })
}

/// The GEM object of one of `rf`'s handles at `offset`.
fn gem(rf: &RenderFile, offset: u64, allowed: bool) -> Result<Option<Found>, Errno> {
    Ok(rf.mmap_object(offset, LOCK_WAIT)?.map(|g| Found {
        userptr: g.backing.is_none(),
        backing: g.backing,
        size: g.size,
        allowed,
        no_cpu_access: g.no_cpu_access,
    }))
}

/// A GEM object of another render file of device `dev` at `offset`: the offset exists, but not
/// for `file` (`drm_vma_node_is_allowed`).
fn other_files_gem(
    m: &MachineInner,
    file: &OpenFile,
    dev: usize,
    offset: u64,
) -> Result<Option<Found>, Errno> {
    for f in m.files() {
        if f.key == file.key {
            continue;
        }
        if let FileKind::Render(r) = &f.kind {
            if r.device == dev {
                if let Some(found) = gem(r, offset, false)? {
                    return Ok(Some(found));
                }
            }
        }
    }
    Ok(None)
}

/// The KFD BO on device `dev` whose fake offset is `offset`, in any process (offsets are unique
/// per device); it may be mapped through `file` only if that is the process's VM on `dev`.
fn kfd_bo(
    m: &MachineInner,
    file: &OpenFile,
    dev: usize,
    offset: u64,
) -> Result<Option<Found>, Errno> {
    use kfd_sys::{
        KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC as PUBLIC, KFD_IOC_ALLOC_MEM_FLAGS_USERPTR as USERPTR,
        KFD_IOC_ALLOC_MEM_FLAGS_VRAM as VRAM,
    };
    for p in m.processes() {
        let st = proc_state(&p)?;
        for pdd in st.pdds.iter().filter(|pdd| pdd.dev == dev) {
            let Some(bo) = pdd.bos.values().find(|bo| bo.mmap_offset == offset) else {
                continue;
            };
            return Ok(Some(Found {
                backing: bo.backing.clone(),
                size: bo.size,
                allowed: pdd.drm.as_ref().is_some_and(|d| d.key == file.key),
                userptr: bo.flags & USERPTR != 0,
                no_cpu_access: bo.flags & VRAM != 0 && bo.flags & PUBLIC == 0,
            }));
        }
    }
    Ok(None)
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
    use crate::{Machine, SimFile, SimProcess};

    const VA: u64 = 0x7f00_0000_0000;
    const RW: u32 = proto::MAP_READ | proto::MAP_WRITE | proto::MAP_MAYWRITE;
    const SHARED_RW: u32 = proto::MAP_SHARED | RW;

    struct Env {
        machine: Machine,
        proc: SimProcess,
        kfd: Kfd<SimFile>,
        renders: Vec<RenderNode<SimFile>>,
        gpus: Vec<u32>,
        backings: Backings,
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
            backings: Backings::default(),
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
            let q = MmapQuery {
                id: 1,
                offset,
                length,
                flags,
                tid: 0,
            };
            let caller = self.caller();
            resolve(
                self.machine.inner(),
                &self.backings,
                file.open_file(),
                Some(&caller),
                &q,
            )
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
        let q = MmapQuery {
            offset: db(e.gpus[0]),
            length: DOORBELL_SLICE,
            flags: SHARED_RW,
            ..MmapQuery::default()
        };
        let theirs = resolve(
            e.machine.inner(),
            &e.backings,
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
        let q = MmapQuery {
            offset: mo::TYPE_DOORBELL | mo::gpu_id(e.gpus[0]),
            length: DOORBELL_SLICE,
            flags: SHARED_RW,
            ..MmapQuery::default()
        };
        let r = resolve(
            e.machine.inner(),
            &e.backings,
            e.kfd.transport().open_file(),
            None,
            &q,
        );
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
            .render_map(0, bo.mmap_offset, PAGE_SIZE, proto::MAP_SHARED)
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
        proto::MAP_READ | proto::MAP_MAYWRITE,
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
        // VRAM without PUBLIC has no CPU access; with PUBLIC it maps.
        let vram = AllocFlags::VRAM | AllocFlags::WRITABLE;
        let hidden = e
            .kfd
            .alloc_memory(VA + (1 << 30), PAGE_SIZE, e.gpu(0), vram)
            .unwrap();
        assert_eq!(
            errno(e.render_map(0, hidden.mmap_offset, PAGE_SIZE, SHARED_RW)),
            Errno::EPERM
        );
        let public = vram | AllocFlags::PUBLIC;
        let shown = e
            .kfd
            .alloc_memory(VA + (2 << 30), PAGE_SIZE, e.gpu(0), public)
            .unwrap();
        e.render_map(0, shown.mmap_offset, PAGE_SIZE, SHARED_RW)
            .unwrap();
        // A PROT_NONE private mapping is allowed, without VM_MAYWRITE (amdgpu's workaround).
        let none = e
            .render_map(0, bo.mmap_offset, PAGE_SIZE, proto::MAP_MAYWRITE)
            .unwrap();
        assert_eq!(none.vma, RENDER_VMA | proto::VMA_NO_MAYWRITE);
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

    #[test]
    fn order_is_the_kernels_get_order() {
        assert_eq!(order(1), 0);
        assert_eq!(order(4096), 0);
        assert_eq!(order(4097), 1);
        assert_eq!(order(8192), 1);
        assert_eq!(order(12288), 2);
        assert_eq!(order(32768), 3);
        assert_eq!(order(32769), 4);
    }
}
