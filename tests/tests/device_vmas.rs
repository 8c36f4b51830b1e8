//! Device mappings through a checkpoint and restore, driven as criu drives them, in process.
//!
//! Each process maps what a ROCm process maps, at the addresses ROCm puts them (a reserved
//! range replaced by the mapping, at the buffer's GPU virtual address): a host-visible buffer
//! per GPU through its render node, the doorbell slice and the MMIO page of each GPU and the
//! events page through `/dev/kfd`, with an SDMA queue per GPU. The harness then does criu's part:
//! it enumerates the process's device mappings as criu reads `/proc/PID/maps` (address, offset,
//! device), asks HANDLE_DEVICE_VMA about each at dump, dumps the files, and at restore asks
//! UPDATE_VMA_MAP about each VMA (in the restored task, after RESTORE_EXT_FILE, before
//! RESUME_DEVICES_LATE), maps the answer, and checks that every CPU mapping shows its own
//! buffer's bytes and every doorbell rings its own queue on its own GPU.
//!
//! Render-node offsets start at the same base on every GPU, so the first buffers of the two
//! GPUs have the same offset; the doorbell offsets of two processes on one GPU are the same.
//! All simulated processes share this test's address space, so their VMAs never share an
//! address: two processes with the same addresses (the same program) are the unit tests' case
//! in `plugin/src/restore/` (`vma.rs`, `sharing.rs`); here a plugin that matched VMAs by offset
//! alone fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::File;
use std::os::fd::AsFd;
use std::path::Path;

use amdgpu_plugin::criu::Settings;
use amdgpu_plugin::hooks::{CriuHooks, Stage};
use harness::{self, remapped_variant, ImageIds, SimNode};
use kfd_abi::kfd::QueueDesc;
use kfd_abi::mmap_offset as mo;
use kfd_abi::{
    AllocFlags, EventType, GpuId, HostBuffer, Kfd, Mapping, Platform, Prot, QueueType, RenderNode,
    Share,
};
use kfd_sim::preset::Preset;
use kfd_sim::{DeviceVma, SimFile, SimProcess};
use rstest::rstest;

const PAGE: usize = 4096;
const DOORBELL_SLICE: usize = 8192;
const BUFFER: usize = 2 * PAGE;

/// What one mapping of the source process was, to check its restored twin against.
#[derive(Clone, Debug)]
enum Expect {
    /// A buffer's CPU mapping with these bytes.
    Bytes(Vec<u8>),
    /// The doorbell slice of GPU `gpu` (index), with a queue's doorbell at byte `queue_at`.
    Doorbells { gpu: usize, queue_at: usize },
    /// The MMIO remap page of GPU `gpu`.
    Mmio { gpu: usize },
    /// The events page.
    Events,
}

/// A ROCm-like process: its files, mappings (kept mapped) and queue memory.
struct Rocm {
    process: SimProcess,
    kfd: Kfd<SimFile>,
    renders: Vec<RenderNode<SimFile>>,
    /// What each mapping was, by start address.
    expect: Vec<(u64, Expect)>,
    _mappings: Vec<Mapping>,
    _queue_memory: Vec<HostBuffer>,
}

/// Distinct bytes for process `p`, GPU `g`.
fn pattern(p: u32, g: usize) -> Vec<u8> {
    (0..BUFFER)
        .map(|i| u8::try_from((i * 7 + g * 31 + p as usize * 101) % 251).unwrap())
        .collect()
}

fn start(node: &SimNode) -> Rocm {
    let process = node.machine.spawn_process();
    let platform = node.platform_of(&process);
    let kfd = platform.open_kfd().unwrap();
    let gpus: Vec<GpuId> = node
        .machine
        .gpu_ids()
        .into_iter()
        .map(|g| GpuId::new(g).unwrap())
        .collect();
    let renders: Vec<RenderNode<SimFile>> = node
        .machine
        .render_minors()
        .into_iter()
        .map(|m| platform.open_render(m).unwrap())
        .collect();
    for (g, r) in gpus.iter().zip(&renders) {
        kfd.acquire_vm(*g, r.as_fd()).unwrap();
    }
    let mut rocm = Rocm {
        process,
        kfd,
        renders,
        expect: Vec::new(),
        _mappings: Vec::new(),
        _queue_memory: Vec::new(),
    };
    for (i, &gpu) in gpus.iter().enumerate() {
        rocm.buffer(i, gpu);
        rocm.doorbells(i, gpu);
        rocm.mmio(i, gpu);
    }
    // A signal event in the kernel's own signal page, mapped through /dev/kfd.
    rocm.kfd
        .create_event(EventType::Signal, false, None)
        .unwrap();
    let events = rocm.kfd.map_events(PAGE).unwrap();
    rocm.expect.push((events.addr(), Expect::Events));
    rocm._mappings.push(events);
    rocm
}

impl Rocm {
    /// A GTT buffer mapped to GPU `gpu` and to the CPU at its GPU VA, filled with its pattern.
    fn buffer(&mut self, i: usize, gpu: GpuId) {
        let at = Mapping::reserve(BUFFER).unwrap();
        let flags = AllocFlags::GTT | AllocFlags::WRITABLE;
        let bo = self
            .kfd
            .alloc_memory(at.addr(), BUFFER as u64, gpu, flags)
            .unwrap();
        self.kfd.map_memory_to_gpu(bo.handle, &[gpu]).unwrap();
        let m = self.renders[i]
            .map_bo_at(at, bo.mmap_offset, Prot::RW, Share::Shared)
            .unwrap();
        let bytes = pattern(self.process.pid(), i);
        assert!(m.write(0, &bytes));
        self.expect.push((m.addr(), Expect::Bytes(bytes)));
        self._mappings.push(m);
    }

    /// The doorbell BO and slice of GPU `gpu` at one address, and an SDMA queue rung through it.
    fn doorbells(&mut self, i: usize, gpu: GpuId) {
        let at = Mapping::reserve(DOORBELL_SLICE).unwrap();
        let flags = AllocFlags::DOORBELL | AllocFlags::WRITABLE;
        self.kfd
            .alloc_memory(at.addr(), DOORBELL_SLICE as u64, gpu, flags)
            .unwrap();
        let offset = mo::TYPE_DOORBELL | mo::gpu_id(gpu.get());
        let m = self
            .kfd
            .map_offset_at(at, offset, Prot::RW, Share::Shared)
            .unwrap();
        let ring = HostBuffer::new(64 << 10).unwrap();
        let pointers = HostBuffer::new(PAGE).unwrap();
        let mut d = QueueDesc::new(gpu, QueueType::Sdma);
        d.ring_base = ring.addr();
        d.ring_size = 64 << 10;
        d.read_ptr = pointers.addr();
        d.write_ptr = pointers.addr() + 8;
        // SAFETY: the ring and pointers live in `_queue_memory` as long as the process's files.
        let q = unsafe { self.kfd.create_queue(&d) }.unwrap();
        self._queue_memory.extend([ring, pointers]);
        let queue_at = usize::try_from(q.doorbell_offset & (DOORBELL_SLICE as u64 - 1)).unwrap();
        self.expect
            .push((m.addr(), Expect::Doorbells { gpu: i, queue_at }));
        self._mappings.push(m);
    }

    /// The MMIO remap BO and page of GPU `gpu` at one address.
    fn mmio(&mut self, i: usize, gpu: GpuId) {
        let at = Mapping::reserve(PAGE).unwrap();
        let flags = AllocFlags::MMIO_REMAP | AllocFlags::WRITABLE;
        self.kfd
            .alloc_memory(at.addr(), PAGE as u64, gpu, flags)
            .unwrap();
        let offset = mo::TYPE_MMIO | mo::gpu_id(gpu.get());
        let m = self
            .kfd
            .map_offset_at(at, offset, Prot::RW, Share::Shared)
            .unwrap();
        self.expect.push((m.addr(), Expect::Mmio { gpu: i }));
        self._mappings.push(m);
    }
}

fn settings() -> Settings {
    Settings::from_lookup(|_| None, false)
}

/// criu's dump of `rocm` into `dir`: HANDLE_DEVICE_VMA for every device VMA of the process (as
/// `/proc/PID/maps` lists them), then the files. Returns the ids and the VMAs.
fn dump(node: &SimNode, rocm: &Rocm, dir: &Path) -> (ImageIds, Vec<DeviceVma>) {
    let vmas = rocm.process.device_vmas();
    assert_eq!(
        vmas.len(),
        rocm.expect.len(),
        "every mapping is a device VMA"
    );
    let dirf = File::open(dir).unwrap();
    let criu = node.machine.spawn_process();
    let engine = node.engine(&|p| p, &criu, &dirf, &settings());
    engine.init(Stage::Dump).unwrap();
    for v in &vmas {
        // criu opens the VMA's file through /proc/PID/map_files and passes its st_rdev.
        let file = if v.path == Path::new("/dev/kfd") {
            rocm.kfd.as_fd()
        } else {
            let minor = (libc::major(v.rdev), libc::minor(v.rdev)).1;
            let i = node
                .machine
                .render_minors()
                .iter()
                .position(|&m| m == minor)
                .unwrap();
            rocm.renders[i].as_fd()
        };
        engine
            .handle_device_vma(file, v.rdev)
            .unwrap_or_else(|e| panic!("HANDLE_DEVICE_VMA of {v:?}: {e}"));
    }
    engine.fini(Stage::Dump, 0);
    let renders: Vec<&RenderNode<SimFile>> = rocm.renders.iter().collect();
    let (ids, _) = harness::checkpoint_files(
        node,
        &|p| p,
        &rocm.process,
        &rocm.kfd,
        &renders,
        dir,
        &settings(),
    )
    .unwrap();
    (ids, vmas)
}

/// A restored process with its VMAs mapped again as UPDATE_VMA_MAP answered.
struct Restored {
    process: SimProcess,
    /// (old VMA, new offset, the mapping) for every VMA the plugin answered.
    mapped: Vec<(DeviceVma, u64, Mapping)>,
    /// The VMAs the plugin left as criu has them.
    untouched: Vec<DeviceVma>,
    /// Source gpu_id -> restored gpu_id.
    gpu_map: Vec<(u32, u32)>,
    _files: (Kfd<SimFile>, Vec<RenderNode<SimFile>>),
}

/// criu's restore of one task: RESTORE_EXT_FILE for its files, UPDATE_VMA_MAP for each device
/// VMA (mapping the answer), then RESUME_DEVICES_LATE from the master.
fn restore(node: &SimNode, dir: &Path, ids: &ImageIds, vmas: &[DeviceVma]) -> Restored {
    let dirf = File::open(dir).unwrap();
    let process = node.machine.spawn_process_as(ids.pid);
    let platform = node.platform_of(&process);
    let engine = node.engine(&|p| p, &process, &dirf, &settings());
    engine.init(Stage::Restore).unwrap();
    let kfd = platform
        .kfd_from_fd(engine.restore_file(ids.kfd).unwrap().unwrap())
        .unwrap();
    let renders: Vec<RenderNode<SimFile>> = ids
        .renders
        .iter()
        .map(|&id| {
            platform
                .render_from_fd(engine.restore_file(id).unwrap().unwrap())
                .unwrap()
        })
        .collect();
    let mut mapped = Vec::new();
    let mut untouched = Vec::new();
    for v in vmas {
        let len = usize::try_from(v.end - v.start).unwrap();
        let Some(update) = engine.update_vma_map(&v.path, v.start, v.pgoff).unwrap() else {
            untouched.push(v.clone());
            continue;
        };
        let m = match update.fd {
            // criu maps render-node VMAs from the fd the plugin gives (and closes it).
            Some(fd) => platform.render_from_fd(fd).unwrap().map_bo(
                update.new_pgoff,
                len,
                Prot::RW,
                Share::Shared,
            ),
            None => kfd.map_offset(update.new_pgoff, len, Prot::RW, Share::Shared),
        }
        .unwrap_or_else(|e| panic!("mapping {v:?} at {:#x}: {e}", update.new_pgoff));
        mapped.push((v.clone(), update.new_pgoff, m));
    }
    let gpu_map = engine
        .mappings()
        .into_iter()
        .flat_map(|m| m.gpus)
        .map(|g| (g.source_gpu_id, g.destination_gpu_id))
        .collect();
    let criu = node.machine.spawn_process();
    let master = node.engine(&|p| p, &criu, &dirf, &settings());
    master
        .resume_devices_late(i32::try_from(ids.pid).unwrap())
        .unwrap();
    engine.fini(Stage::Restore, 0);
    Restored {
        process,
        mapped,
        untouched,
        gpu_map,
        _files: (kfd, renders),
    }
}

/// Checks every restored mapping of `src` against what it was; `value` distinguishes the
/// doorbell writes of different processes.
fn check(dst: &SimNode, src_gpus: &[u32], rocm: &Rocm, r: &Restored, value: u64) {
    let dst_gpu = |i: usize| {
        let src = src_gpus[i];
        r.gpu_map
            .iter()
            .find(|(s, _)| *s == src)
            .map(|(_, d)| *d)
            .unwrap()
    };
    let mut seen = 0;
    for (vma, new_pgoff, m) in &r.mapped {
        let (_, expect) = rocm.expect.iter().find(|(a, _)| *a == vma.start).unwrap();
        seen += 1;
        match expect {
            Expect::Bytes(bytes) => {
                let mut got = vec![0u8; bytes.len()];
                assert!(m.read(0, &mut got));
                assert!(&got == bytes, "{vma:?} shows another buffer's bytes");
            }
            Expect::Doorbells { gpu, queue_at } => {
                let gpu_id = dst_gpu(*gpu);
                assert_eq!(
                    *new_pgoff,
                    mo::TYPE_DOORBELL | mo::gpu_id(gpu_id),
                    "the doorbell offset carries the restored GPU's id"
                );
                let v = value + *gpu as u64;
                assert!(m.write_u64(*queue_at, v));
                assert_eq!(
                    dst.machine
                        .doorbell(r.process.pid(), gpu_id, *queue_at as u64),
                    Some(v),
                    "the write through {vma:?} rings the queue's doorbell on GPU {gpu_id:#x}"
                );
            }
            Expect::Mmio { gpu } => {
                assert_eq!(*new_pgoff, mo::TYPE_MMIO | mo::gpu_id(dst_gpu(*gpu)));
            }
            Expect::Events => panic!("the events page is no buffer's: {vma:?} was answered"),
        }
    }
    // The events page matches no restored buffer: criu keeps it, and it maps as it was.
    assert_eq!(r.untouched.len(), 1, "{:?}", r.untouched);
    let (_, kind) = rocm
        .expect
        .iter()
        .find(|(a, _)| *a == r.untouched[0].start)
        .unwrap();
    assert!(matches!(kind, Expect::Events));
    assert_eq!(seen + 1, rocm.expect.len());
}

#[rstest]
#[case::same_gpus(false)]
#[case::remapped_gpus(true)]
fn every_restored_mapping_shows_its_own_buffer_and_rings_its_own_queue(#[case] remap: bool) {
    let preset = Preset::by_name("mi210x2").unwrap();
    let src = SimNode::new(&preset).unwrap();
    let src_gpus = src.machine.gpu_ids();
    // Two processes with the same layout on both GPUs.
    let a = start(&src);
    let b = start(&src);
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let (ids_a, vmas_a) = dump(&src, &a, dirs[0].path());
    let (ids_b, vmas_b) = dump(&src, &b, dirs[1].path());
    // Colliding offsets: both GPUs' first buffers, and both processes' doorbells.
    let render_offsets: Vec<u64> = vmas_a
        .iter()
        .filter(|v| v.path != Path::new("/dev/kfd"))
        .map(|v| v.pgoff)
        .collect();
    assert_eq!(render_offsets.len(), 2);
    assert_eq!(
        render_offsets[0], render_offsets[1],
        "the GPUs' offsets collide"
    );
    let doorbells = |vmas: &[DeviceVma]| -> Vec<u64> {
        vmas.iter()
            .filter(|v| v.pgoff & mo::TYPE_MASK == mo::TYPE_DOORBELL)
            .map(|v| v.pgoff)
            .collect()
    };
    assert_eq!(doorbells(&vmas_a), doorbells(&vmas_b));

    let dst_preset = if remap {
        remapped_variant(&preset)
    } else {
        preset.clone()
    };
    let dst = SimNode::new(&dst_preset).unwrap();
    let ra = restore(&dst, dirs[0].path(), &ids_a, &vmas_a);
    let rb = restore(&dst, dirs[1].path(), &ids_b, &vmas_b);
    if remap {
        assert!(ra.gpu_map.iter().all(|(s, d)| s != d), "{:?}", ra.gpu_map);
    }
    check(&dst, &src_gpus, &a, &ra, 0x100);
    check(&dst, &src_gpus, &b, &rb, 0x200);
    // Each process's doorbells are its own: b's writes did not land in a's slices.
    for (s, d) in &ra.gpu_map {
        let i = src_gpus.iter().position(|g| g == s).unwrap();
        let at = a
            .expect
            .iter()
            .find_map(|(_, e)| match e {
                Expect::Doorbells { gpu, queue_at } if *gpu == i => Some(*queue_at),
                _ => None,
            })
            .unwrap();
        assert_eq!(
            dst.machine.doorbell(ra.process.pid(), *d, at as u64),
            Some(0x100 + i as u64)
        );
    }
}

#[test]
fn a_vma_that_matches_no_buffer_is_left_as_criu_has_it() {
    let preset = Preset::by_name("mi210x2").unwrap();
    let src = SimNode::new(&preset).unwrap();
    let a = start(&src);
    let dir = tempfile::tempdir().unwrap();
    let (ids, vmas) = dump(&src, &a, dir.path());
    // A render VMA at an address no buffer had, and a kfd VMA with an offset nothing had.
    let stray = vec![
        DeviceVma {
            start: 0x1000,
            end: 0x3000,
            ..vmas
                .iter()
                .find(|v| v.path != Path::new("/dev/kfd"))
                .unwrap()
                .clone()
        },
        DeviceVma {
            pgoff: mo::TYPE_DOORBELL | mo::gpu_id(0x7777),
            ..vmas
                .iter()
                .find(|v| v.pgoff & mo::TYPE_MASK == mo::TYPE_DOORBELL)
                .unwrap()
                .clone()
        },
    ];
    let dst = SimNode::new(&preset).unwrap();
    let r = restore(&dst, dir.path(), &ids, &stray);
    assert!(r.mapped.is_empty());
    assert_eq!(r.untouched, stray);
}

/// A task forked by a ROCm process before the dump shares its parent's files and inherits the
/// render-node mappings of its parent's host-visible buffers (not the `/dev/kfd` ones, which the
/// driver makes `VM_DONTCOPY`), at the same addresses and offsets. criu forks both tasks from its
/// own process after the plugin's `init`; the parent, which owns `/dev/kfd`, restores the GPU
/// state; the child asks UPDATE_VMA_MAP about the same VMAs with another pid and gets its parent's
/// restored buffers, through its parent's render nodes.
#[rstest]
#[case::same_gpus(false)]
#[case::remapped_gpus(true)]
fn a_forked_child_maps_the_buffers_its_parent_restored(#[case] remap: bool) {
    let preset = Preset::by_name("mi210x2").unwrap();
    let src = SimNode::new(&preset).unwrap();
    let a = start(&src);
    let dir = tempfile::tempdir().unwrap();
    let (ids, vmas) = dump(&src, &a, dir.path());
    let inherited: Vec<DeviceVma> = vmas
        .iter()
        .filter(|v| v.path != Path::new("/dev/kfd"))
        .cloned()
        .collect();
    assert_eq!(
        inherited.len(),
        2,
        "one buffer per GPU through its render node"
    );

    let dst = SimNode::new(&if remap {
        remapped_variant(&preset)
    } else {
        preset.clone()
    })
    .unwrap();
    let dirf = File::open(dir.path()).unwrap();
    // The restored tree keeps its pids: the parent (the pid of the dump) and its child; criu's
    // own process has another.
    let parent = dst.machine.spawn_process_as(ids.pid);
    let child = dst.machine.spawn_process_as(ids.pid + 1);
    let criu = dst.machine.spawn_process();
    let master = dst.engine(&|p| p, &criu, &dirf, &settings());
    master.init(Stage::Restore).unwrap();
    // criu forks the tasks from its own process.
    let in_parent = master.forked(dst.platform_of(&parent));
    let in_child = master.forked(dst.platform_of(&child));
    // An engine that did not come from criu's process (its own init): it sees no other task's
    // buffers.
    let alone = dst.engine(&|p| p, &child, &dirf, &settings());
    alone.init(Stage::Restore).unwrap();

    // The parent restores its files and maps its own VMAs.
    let pplat = dst.platform_of(&parent);
    let _kfd = pplat
        .kfd_from_fd(in_parent.restore_file(ids.kfd).unwrap().unwrap())
        .unwrap();
    let _renders: Vec<RenderNode<SimFile>> = ids
        .renders
        .iter()
        .map(|&id| {
            pplat
                .render_from_fd(in_parent.restore_file(id).unwrap().unwrap())
                .unwrap()
        })
        .collect();
    // The child gets the same files from criu (prepare_fds), then maps its VMAs.
    let cplat = dst.platform_of(&child);
    for v in &inherited {
        assert!(
            alone
                .update_vma_map(&v.path, v.start, v.pgoff)
                .unwrap()
                .is_none(),
            "a task that restored nothing and shares no table answers nothing for {v:?}"
        );
        let own = in_parent
            .update_vma_map(&v.path, v.start, v.pgoff)
            .unwrap()
            .unwrap();
        let update = in_child
            .update_vma_map(&v.path, v.start, v.pgoff)
            .unwrap()
            .unwrap_or_else(|| panic!("the child found no buffer for {v:?}"));
        assert_eq!(update.new_pgoff, own.new_pgoff, "{v:?}");
        let len = usize::try_from(v.end - v.start).unwrap();
        let m = cplat
            .render_from_fd(update.fd.expect("a render VMA is mapped from an fd"))
            .unwrap()
            .map_bo(update.new_pgoff, len, Prot::RW, Share::Shared)
            .unwrap_or_else(|e| panic!("the child mapping {v:?}: {e}"));
        let Some((_, Expect::Bytes(bytes))) = a.expect.iter().find(|(at, _)| *at == v.start) else {
            panic!("{v:?} is no buffer of the source");
        };
        let mut got = vec![0u8; bytes.len()];
        assert!(m.read(0, &mut got));
        assert!(
            &got == bytes,
            "the child's {v:?} shows another buffer's bytes"
        );
        // What the child writes, the parent's restored buffer holds.
        assert!(m.write(0, b"child"));
        let pm = pplat
            .render_from_fd(own.fd.unwrap())
            .unwrap()
            .map_bo(own.new_pgoff, len, Prot::READ, Share::Shared)
            .unwrap();
        let mut head = [0u8; 5];
        assert!(pm.read(0, &mut head));
        assert_eq!(&head, b"child");
    }
    // A VMA at no buffer's address stays as criu has it in the child too.
    let stray = &inherited[0];
    assert!(in_child
        .update_vma_map(&stray.path, 0x1000, stray.pgoff)
        .unwrap()
        .is_none());
    master
        .resume_devices_late(i32::try_from(ids.pid).unwrap())
        .unwrap();
    master.fini(Stage::Restore, 0);
}
