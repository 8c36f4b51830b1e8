//! Render-node buffers and dma-bufs shared between processes (Linux 6.18), dumped and restored
//! through the plugin's hooks as criu calls them, on the in-process simulator: the buffers come
//! back at their handles, VAs and contents, their CPU mappings move, sharing between processes
//! stays sharing; a kernel without 6.18's ioctls restores none and says why; upstream's images
//! (no checksums, an unset length header) restore too.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use amdgpu_plugin::criu::{Engine, Settings};
use amdgpu_plugin::hooks::{CriuHooks, Stage};
use harness::workload::{SharedSide, SHARED_VA};
use harness::{remapped_variant, SimNode};
use images::{DmabufImage, ImageFile, RenderNodeImage};
use kfd_abi::render::{GemDomain, VmPageFlags};
use kfd_abi::{AllocFlags, BoHandle, GpuId, Kfd, Platform, Prot, RenderNode, Share};
use kfd_sim::preset::Preset;
use kfd_sim::{Kernel, SimFile, SimPlatform};

const MIB: u64 = 1 << 20;
const VA: u64 = 0x10_0000_0000;
const RW: VmPageFlags = VmPageFlags::READABLE.union(VmPageFlags::WRITEABLE);
const CPU: u64 = kfd_sys::AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED as u64;

fn settings() -> Settings {
    tests::staged_settings(1 << 20, 3)
}

fn node(preset: &Preset, kernel: Kernel) -> SimNode {
    let n = SimNode::new(preset).unwrap();
    n.machine.set_kernel(kernel);
    n
}

fn bo(raw: u32) -> BoHandle {
    BoHandle::new(raw).unwrap()
}

/// The bytes of buffer `h` of `r`, through a CPU mapping.
fn read_bo(r: &RenderNode<SimFile>, h: BoHandle, len: usize) -> Vec<u8> {
    let off = r.gem_mmap_offset(h).unwrap();
    let m = r.map_bo(off, len, Prot::RW, Share::Shared).unwrap();
    let mut buf = vec![0u8; len];
    assert!(m.read(0, &mut buf));
    buf
}

fn write_bo(r: &RenderNode<SimFile>, h: BoHandle, bytes: &[u8]) {
    let off = r.gem_mmap_offset(h).unwrap();
    let m = r.map_bo(off, bytes.len(), Prot::RW, Share::Shared).unwrap();
    assert!(m.write(0, bytes));
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add((i / 4096).to_le_bytes()[0]) ^ i.to_le_bytes()[0])
        .collect()
}

/// A process with `/dev/kfd` (one VRAM BO) and the render node of GPU 0 as its compute VM,
/// holding three render-node buffers: VRAM with a pattern, mapped at two VAs; GTT with a
/// pattern; VRAM left zero, not mapped.
struct Source {
    process: kfd_sim::SimProcess,
    kfd: Kfd<SimFile>,
    render: RenderNode<SimFile>,
    minor: u32,
    contents: Vec<Vec<u8>>,
}

fn source(n: &SimNode) -> Source {
    let process = n.machine.spawn_process();
    let plat = n.platform_of(&process);
    let kfd = plat.open_kfd().unwrap();
    let minor = n.machine.render_minors()[0];
    let render = plat.open_render(minor).unwrap();
    let gpu = GpuId::new(n.machine.gpu_ids()[0]).unwrap();
    kfd.acquire_vm(gpu, render.as_fd()).unwrap();
    let flags = AllocFlags::VRAM | AllocFlags::WRITABLE;
    kfd.alloc_memory(0x7f00_0000_0000, 2 * MIB, gpu, flags)
        .unwrap();
    let a = render
        .gem_create(3 * MIB, 2 * MIB, GemDomain::VRAM, CPU)
        .unwrap();
    render.va_map(a, VA, 0, 2 * MIB, RW).unwrap();
    render
        .va_map(a, VA + 64 * MIB, 2 * MIB, MIB, VmPageFlags::READABLE)
        .unwrap();
    let b = render.gem_create(64 << 10, 0, GemDomain::GTT, 0).unwrap();
    render.va_map(b, VA + 16 * MIB, 0, 64 << 10, RW).unwrap();
    render.gem_create(MIB, 0, GemDomain::VRAM, CPU).unwrap();
    let contents = vec![
        pattern(3, 3 << 20),
        pattern(9, 64 << 10),
        vec![0u8; 1 << 20],
    ];
    write_bo(&render, a, &contents[0]);
    write_bo(&render, b, &contents[1]);
    Source {
        process,
        kfd,
        render,
        minor,
        contents,
    }
}

/// criu's dump of `files` (fd, id) of `process`, in that order.
fn dump(n: &SimNode, process: &kfd_sim::SimProcess, files: &[(&OwnedFd, u32)], dir: &Path) {
    let dirf = std::fs::File::open(dir).unwrap();
    let criu = n.machine.spawn_process();
    criu.ptrace_attach(process);
    let e = n.engine(&|p| p, &criu, &dirf, &settings());
    e.init(Stage::Dump).unwrap();
    for (fd, id) in files {
        e.dump_ext_file(fd.as_fd(), *id).unwrap();
    }
    e.dump_devices_late(process.pid()).ok();
    e.fini(Stage::Dump, 0);
    criu.ptrace_detach(process);
}

fn fd_of(f: &impl AsFd) -> OwnedFd {
    f.as_fd().try_clone_to_owned().unwrap()
}

fn listing(r: &RenderNode<SimFile>) -> Vec<(u32, u64, GemDomain, u64, u64)> {
    r.gem_list_handles()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h.handle.get(),
                h.size,
                h.preferred_domains,
                h.alloc_flags,
                h.alignment_pages,
            )
        })
        .collect()
}

fn mappings(r: &RenderNode<SimFile>, h: u32) -> Vec<(u64, u64, u64, u64)> {
    r.gem_mapping_info(bo(h))
        .unwrap()
        .iter()
        .map(|m| (m.va, m.size, m.offset, m.pte_flags))
        .collect()
}

#[test]
fn render_node_buffers_come_back_at_their_handles_vas_and_contents_on_other_gpus() {
    let p = Preset::by_name("mi210x2").unwrap();
    let src = node(&p, Kernel::Linux6_18);
    let s = source(&src);
    let before = listing(&s.render);
    let maps_before = mappings(&s.render, 1);
    let old_offset = s.render.gem_mmap_offset(bo(1)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    dump(
        &src,
        &s.process,
        &[(&fd_of(&s.kfd), 1), (&fd_of(&s.render), 2)],
        dir.path(),
    );
    let dirf = std::fs::File::open(dir.path()).unwrap();
    let img = RenderNodeImage::read(dirf.as_fd(), 2).unwrap();
    assert_eq!(img.num_of_bos, 3);
    let handles: Vec<_> = img
        .bo_entries
        .iter()
        .map(|b| (b.handle, b.is_import, b.num_of_vms, b.alignment))
        .collect();
    assert_eq!(handles, [(1, 0, 2, 512), (2, 0, 1, 0), (3, 0, 0, 0)]);
    for i in 0..3 {
        let name = format!("amdgpu-drm-pages-2-{}-{i:04x}.img", s.minor);
        assert!(dir.path().join(&name).exists(), "{name}");
    }
    assert_eq!(img.pages_checksums.len(), 3, "our images carry checksums");

    // Restore on a node whose GPUs have other ids and render minors.
    let dst = node(&remapped_variant(&p), Kernel::Linux6_18);
    let restored = dst.machine.spawn_process_as(s.process.pid());
    let plat = dst.platform_of(&restored);
    let e = dst.engine(&|p| p, &restored, &dirf, &settings());
    e.init(Stage::Restore).unwrap();
    let _kfd = e.restore_file(1).unwrap().unwrap();
    let render = plat
        .render_from_fd(e.restore_file(2).unwrap().unwrap())
        .unwrap();
    assert_eq!(listing(&render), before);
    assert_eq!(mappings(&render, 1), maps_before);
    for (h, want) in (1..).zip(&s.contents) {
        assert!(read_bo(&render, bo(h), want.len()) == *want, "buffer {h}");
    }
    // criu moves the process's CPU mapping of buffer 1 to its new offset, on the new node.
    let path = format!("/dev/dri/renderD{}", s.minor);
    let update = e
        .update_vma_map(Path::new(&path), VA, old_offset + MIB)
        .unwrap()
        .expect("the buffer's mapping moves");
    assert_eq!(
        update.new_pgoff,
        render.gem_mmap_offset(bo(1)).unwrap() + MIB
    );
    e.resume_devices_late(i32::try_from(s.process.pid()).unwrap())
        .unwrap();
    e.fini(Stage::Restore, 0);
}

#[test]
fn linux_6_1_shows_no_buffers_and_refuses_an_image_that_has_some() {
    let p = Preset::by_name("mi210x2").unwrap();
    // A 6.1 dump lists none: the kernel cannot say.
    let old = node(&p, Kernel::Linux6_1);
    let s = source(&old);
    let dir = tempfile::tempdir().unwrap();
    dump(&old, &s.process, &[(&fd_of(&s.render), 2)], dir.path());
    let dirf = std::fs::File::open(dir.path()).unwrap();
    assert_eq!(
        RenderNodeImage::read(dirf.as_fd(), 2).unwrap().num_of_bos,
        0
    );

    // A 6.18 image restored on 6.1: refused with the reason, before anything is created.
    let new = node(&p, Kernel::Linux6_18);
    let s = source(&new);
    let dir = tempfile::tempdir().unwrap();
    dump(&new, &s.process, &[(&fd_of(&s.render), 2)], dir.path());
    let dirf = std::fs::File::open(dir.path()).unwrap();
    let dst = node(&p, Kernel::Linux6_1);
    let restored = dst.machine.spawn_process_as(s.process.pid());
    let e = dst.engine(&|p| p, &restored, &dirf, &settings());
    e.init(Stage::Restore).unwrap();
    let err = e.restore_file(2).unwrap_err().to_string();
    assert!(
        err.starts_with("amdgpu-renderD-2.img: the image holds 3 buffer(s) of render node renderD")
            && err.contains("needs Linux 6.18")
            && err.contains("refused before anything was created"),
        "{err}"
    );
    e.fini(Stage::Restore, -1);
}

/// What `usage` reads of every GPU of `n`'s render node.
fn in_use(n: &SimNode, usage: impl Fn(&RenderNode<SimFile>) -> u64) -> Vec<u64> {
    let p = n.machine.spawn_process();
    let plat = n.platform_of(&p);
    n.machine
        .render_minors()
        .into_iter()
        .map(|m| usage(&plat.open_render(m).unwrap()))
        .collect()
}

/// VRAM in use on every GPU of `n`, as the render nodes report it.
fn vram_in_use(n: &SimNode) -> Vec<u64> {
    in_use(n, |r| r.vram_usage().unwrap())
}

#[test]
fn a_render_restore_that_fails_midway_closes_the_buffers_it_made() {
    let p = Preset::by_name("mi210x2").unwrap();
    let src = node(&p, Kernel::Linux6_18);
    let s = source(&src);
    let dir = tempfile::tempdir().unwrap();
    dump(
        &src,
        &s.process,
        &[(&fd_of(&s.kfd), 1), (&fd_of(&s.render), 2)],
        dir.path(),
    );
    // The last buffer's contents are lost: the first two are created and filled before that
    // shows.
    let lost = format!("amdgpu-drm-pages-2-{}-0002.img", s.minor);
    std::fs::remove_file(dir.path().join(&lost)).unwrap();
    let dirf = std::fs::File::open(dir.path()).unwrap();
    let dst = node(&p, Kernel::Linux6_18);
    let restored = dst.machine.spawn_process_as(s.process.pid());
    let e = dst.engine(&|p| p, &restored, &dirf, &settings());
    e.init(Stage::Restore).unwrap();
    // The render node is the restored /dev/kfd's VM: it stays open after the failure.
    let _kfd = e.restore_file(1).unwrap().unwrap();
    let before = vram_in_use(&dst);
    let err = e.restore_file(2).unwrap_err().to_string();
    assert!(err.contains(&lost), "{err}");
    assert_eq!(vram_in_use(&dst), before, "the buffers made are freed");
    e.fini(Stage::Restore, -1);
}

#[test]
fn a_dma_buf_image_of_a_buffer_no_image_creates_is_refused_at_once() {
    let p = Preset::by_name("mi210x2").unwrap();
    let src = node(&p, Kernel::Linux6_18);
    let s = source(&src);
    let dir = tempfile::tempdir().unwrap();
    dump(&src, &s.process, &[(&fd_of(&s.render), 2)], dir.path());
    let dirf = std::fs::File::open(dir.path()).unwrap();
    // Handles 1 to 3 exist; nothing creates 99.
    let bogus = images::proto::CriuDmabufNode { gem_handle: 99 };
    DmabufImage::write(dirf.as_fd(), 5, &bogus).unwrap();
    let dst = node(&p, Kernel::Linux6_18);
    let restored = dst.machine.spawn_process_as(s.process.pid());
    let e = dst.engine(&|p| p, &restored, &dirf, &settings());
    e.init(Stage::Restore).unwrap();
    let _render = e.restore_file(2).unwrap().unwrap();
    let err = e.restore_file(5).unwrap_err().to_string();
    assert!(
        err.starts_with(
            "amdgpu-dmabuf_5.img: no image of the checkpoint creates the buffer shared \
             as GEM handle 99"
        ),
        "{err}"
    );
    e.fini(Stage::Restore, -1);
}

#[test]
fn upstreams_render_images_restore_without_checksums_and_with_an_unset_length_header() {
    let p = Preset::by_name("mi210x2").unwrap();
    let src = node(&p, Kernel::Linux6_18);
    let s = source(&src);
    let dir = tempfile::tempdir().unwrap();
    dump(&src, &s.process, &[(&fd_of(&s.render), 2)], dir.path());
    let dirf = std::fs::File::open(dir.path()).unwrap();
    // As criu-dev's plugin writes them: no checksum lists, garbage in the pages files' headers.
    let mut img = RenderNodeImage::read(dirf.as_fd(), 2).unwrap();
    img.pages_checksums.clear();
    RenderNodeImage::write(dirf.as_fd(), 2, &img).unwrap();
    for i in 0..3 {
        let path = dir
            .path()
            .join(format!("amdgpu-drm-pages-2-{}-{i:04x}.img", s.minor));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[..8].copy_from_slice(&0x7ffd_1234_5678u64.to_ne_bytes());
        std::fs::write(&path, bytes).unwrap();
    }
    let dst = node(&p, Kernel::Linux6_18);
    let restored = dst.machine.spawn_process_as(s.process.pid());
    let e = dst.engine(&|p| p, &restored, &dirf, &settings());
    e.init(Stage::Restore).unwrap();
    let render = dst
        .platform_of(&restored)
        .render_from_fd(e.restore_file(2).unwrap().unwrap())
        .unwrap();
    for (h, want) in (1..).zip(&s.contents) {
        assert!(read_bo(&render, bo(h), want.len()) == *want, "buffer {h}");
    }
    e.fini(Stage::Restore, 0);
}

/// criu-dev writes each /dev/kfd buffer's handle as a number in its own render-node file and
/// marks every buffer of the process's file whose handle repeats such a number as an import of
/// that /dev/kfd buffer. Such a buffer is restored as the buffer it is, from its own pages file:
/// when its "exporter" has another size, and, in an image without checksums (criu-dev's), when
/// only a /dev/kfd image names the number, whatever the sizes.
#[rstest::rstest]
#[case::another_size(2 * MIB, false)]
#[case::same_size_without_checksums(3 * MIB, true)]
fn a_render_buffer_marked_an_import_of_a_kfd_buffer_by_number_is_restored_as_its_own(
    #[case] kfd_size: u64,
    #[case] upstream: bool,
) {
    let p = Preset::by_name("mi210x2").unwrap();
    let src = node(&p, Kernel::Linux6_18);
    let s = source(&src);
    if kfd_size != 2 * MIB {
        let gpu = GpuId::new(src.machine.gpu_ids()[0]).unwrap();
        let flags = AllocFlags::VRAM | AllocFlags::WRITABLE;
        s.kfd
            .alloc_memory(0x7f10_0000_0000, kfd_size, gpu, flags)
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    dump(
        &src,
        &s.process,
        &[(&fd_of(&s.kfd), 1), (&fd_of(&s.render), 2)],
        dir.path(),
    );
    let dirf = std::fs::File::open(dir.path()).unwrap();
    // A /dev/kfd buffer numbered 1, as criu-dev numbers it; the process's 3 MiB render buffer at
    // handle 1 marked as its import.
    let mut kfd = images::KfdImage::read(dirf.as_fd(), 1).unwrap();
    let k = kfd
        .bo_entries
        .iter()
        .position(|b| b.size == kfd_size)
        .unwrap();
    kfd.bo_entries[k].handle = 1;
    if upstream {
        kfd.pages_checksums.clear();
    }
    images::KfdImage::write(dirf.as_fd(), 1, &kfd).unwrap();
    let mut img = RenderNodeImage::read(dirf.as_fd(), 2).unwrap();
    assert_eq!(
        (img.bo_entries[0].handle, img.bo_entries[0].size),
        (1, 3 * MIB)
    );
    img.bo_entries[0].is_import = 1;
    if upstream {
        img.pages_checksums.clear();
    }
    RenderNodeImage::write(dirf.as_fd(), 2, &img).unwrap();

    let dst = node(&p, Kernel::Linux6_18);
    let restored = dst.machine.spawn_process_as(s.process.pid());
    let e = dst.engine(&|p| p, &restored, &dirf, &settings());
    e.init(Stage::Restore).unwrap();
    let _kfd = e.restore_file(1).unwrap().unwrap();
    let render = dst
        .platform_of(&restored)
        .render_from_fd(e.restore_file(2).unwrap().unwrap())
        .unwrap();
    let listed = listing(&render);
    assert_eq!((listed[0].0, listed[0].1), (1, 3 * MIB));
    for (h, want) in (1..).zip(&s.contents) {
        assert!(read_bo(&render, bo(h), want.len()) == *want, "buffer {h}");
    }
    e.fini(Stage::Restore, 0);
}

/// Engines of two restored tasks forked from one criu process after its `init`.
fn restore_engines(
    n: &SimNode,
    dirf: &std::fs::File,
    pids: [u32; 2],
) -> (
    Engine<SimPlatform>,
    [(kfd_sim::SimProcess, Engine<SimPlatform>); 2],
) {
    let criu = n.machine.spawn_process();
    let master = n.engine(&|p| p, &criu, dirf, &settings());
    master.init(Stage::Restore).unwrap();
    let task = |pid| {
        let p = n.machine.spawn_process_as(pid);
        let e = master.forked(n.platform_of(&p));
        (p, e)
    };
    let tasks = [task(pids[0]), task(pids[1])];
    (master, tasks)
}

#[test]
fn a_buffer_shared_through_a_dma_buf_stays_one_buffer_across_processes() {
    let p = Preset::by_name("mi210x2").unwrap();
    let src = node(&p, Kernel::Linux6_18);
    let minor = src.machine.render_minors()[0];
    // The parent creates a buffer, exports it and keeps the dma-buf fd.
    let a = src.machine.spawn_process();
    let ra = src.platform_of(&a).open_render(minor).unwrap();
    let h = ra.gem_create(2 * MIB, 0, GemDomain::VRAM, CPU).unwrap();
    ra.va_map(h, VA, 0, 2 * MIB, RW).unwrap();
    let dmabuf = ra.prime_handle_to_fd(h).unwrap();
    // The child opens its own render node, imports it first, then makes a buffer of its own.
    let b = src.machine.spawn_process();
    let rb = src.platform_of(&b).open_render(minor).unwrap();
    let hb = rb.prime_fd_to_handle(dmabuf.as_fd()).unwrap();
    assert_eq!(hb, h);
    rb.va_map(hb, VA + 32 * MIB, 0, 2 * MIB, RW).unwrap();
    let own = rb.gem_create(MIB, 0, GemDomain::GTT, 0).unwrap();
    let shared = pattern(5, 2 << 20);
    write_bo(&ra, h, &shared);
    write_bo(&rb, own, &pattern(6, 1 << 20));

    let dir = tempfile::tempdir().unwrap();
    // criu dumps each process's files in fd order: here the parent's dma-buf before its render
    // node (it waits for the buffer), the child's render node before its dma-buf.
    let dmabuf_b = dmabuf.try_clone().unwrap();
    // One criu run dumps both processes.
    let dirf = std::fs::File::open(dir.path()).unwrap();
    let criu = src.machine.spawn_process();
    criu.ptrace_attach(&a);
    criu.ptrace_attach(&b);
    let e = src.engine(&|p| p, &criu, &dirf, &settings());
    e.init(Stage::Dump).unwrap();
    e.dump_ext_file(dmabuf.as_fd(), 11).unwrap();
    e.dump_ext_file(ra.as_fd(), 10).unwrap();
    e.dump_ext_file(rb.as_fd(), 20).unwrap();
    e.dump_ext_file(dmabuf_b.as_fd(), 21).unwrap();
    // Nothing was paused: "not ours", but no dma-buf is left unresolved (that fails).
    assert!(matches!(
        e.dump_devices_late(a.pid()),
        Err(amdgpu_plugin::hooks::HookError::NotOurs)
    ));
    e.fini(Stage::Dump, 0);

    let ia = RenderNodeImage::read(dirf.as_fd(), 10).unwrap();
    let ib = RenderNodeImage::read(dirf.as_fd(), 20).unwrap();
    let flags = |m: &images::proto::CriuRenderNode| -> Vec<(u32, u32)> {
        m.bo_entries
            .iter()
            .map(|b| (b.handle, b.is_import))
            .collect()
    };
    assert_eq!(flags(&ia), [(1, 0)]);
    assert_eq!(flags(&ib), [(1, 1), (2, 0)]);
    for id in [11, 21] {
        assert_eq!(DmabufImage::read(dirf.as_fd(), id).unwrap().gem_handle, 1);
    }

    // Restore: each task restores its own files, the parent first.
    let dst = node(&p, Kernel::Linux6_18);
    let (master, [(ta, ea), (tb, eb)]) = restore_engines(&dst, &dirf, [a.pid(), b.pid()]);
    let ra2 = dst
        .platform_of(&ta)
        .render_from_fd(ea.restore_file(10).unwrap().unwrap())
        .unwrap();
    let dmabuf_a2 = ea.restore_file(11).unwrap().unwrap();
    let rb2 = dst
        .platform_of(&tb)
        .render_from_fd(eb.restore_file(20).unwrap().unwrap())
        .unwrap();
    let dmabuf_b2 = eb.restore_file(21).unwrap().unwrap();
    assert!(read_bo(&rb2, bo(1), 2 << 20) == shared);
    assert!(read_bo(&rb2, bo(2), 1 << 20) == pattern(6, 1 << 20));
    // One buffer: what one process writes, the other reads; the dma-bufs are of it.
    let news = pattern(77, 2 << 20);
    write_bo(&ra2, bo(1), &news);
    assert!(read_bo(&rb2, bo(1), 2 << 20) == news);
    assert_eq!(rb2.prime_fd_to_handle(dmabuf_b2.as_fd()).unwrap(), bo(1));
    assert_eq!(ra2.prime_fd_to_handle(dmabuf_a2.as_fd()).unwrap(), bo(1));
    assert_eq!(mappings(&rb2, 1)[0].0, VA + 32 * MIB);
    for e in [ea, eb, master] {
        e.fini(Stage::Restore, 0);
    }
}

#[test]
fn on_linux_6_1_a_dma_buf_of_a_render_node_buffer_fails_the_dump_and_says_why() {
    let p = Preset::by_name("mi210x2").unwrap();
    let src = node(&p, Kernel::Linux6_1);
    let minor = src.machine.render_minors()[0];
    let a = src.machine.spawn_process();
    let ra = src.platform_of(&a).open_render(minor).unwrap();
    let h = ra.gem_create(2 * MIB, 0, GemDomain::VRAM, CPU).unwrap();
    let dmabuf = ra.prime_handle_to_fd(h).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dirf = std::fs::File::open(dir.path()).unwrap();
    let criu = src.machine.spawn_process();
    criu.ptrace_attach(&a);
    let e = src.engine(&|p| p, &criu, &dirf, &settings());
    e.init(Stage::Dump).unwrap();
    e.dump_ext_file(ra.as_fd(), 10).unwrap();
    e.dump_ext_file(dmabuf.as_fd(), 11).unwrap();
    let err = e.dump_devices_late(a.pid()).unwrap_err().to_string();
    assert!(
        err.contains("dma-buf images [11]")
            && err.contains(&format!(
                "the buffers of renderD{minor} could not be listed"
            ))
            && err.contains("needs Linux 6.18"),
        "{err}"
    );
    e.fini(Stage::Dump, -1);
}

/// The model workload with two render-node buffers per GPU besides its KFD buffers.
fn render_spec() -> harness::workload::Spec {
    harness::workload::Spec {
        render: vec![3 * MIB, 64 << 10],
        ..harness::workload::Spec::new(28, vec![2 * MIB], vec![256 << 10])
    }
}

/// On 6.18 the buffers are moved to their handles; on 7.2 (no `GEM_CHANGE_HANDLE`) they are
/// made in handle order.
#[rstest::rstest]
#[case::same_node(false, Kernel::Linux6_18)]
#[case::remapped(true, Kernel::Linux6_18)]
#[case::same_node_7_2(false, Kernel::Linux7_2)]
#[case::remapped_7_2(true, Kernel::Linux7_2)]
fn the_workloads_render_node_buffers_survive_a_checkpoint(
    #[case] remap: bool,
    #[case] kernel: Kernel,
) {
    let p = Preset::by_name("mi210x2").unwrap();
    let src = node(&p, kernel);
    let target = harness::start_target(&src, &render_spec()).unwrap();
    let manifest = target.workload.manifest().clone();
    let before = target.workload.verify().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (ids, _) = harness::checkpoint(&src, &target, dir.path(), &settings()).unwrap();
    drop(target);
    let dst = node(&if remap { remapped_variant(&p) } else { p }, kernel);
    let (restored, _) = harness::restore(&dst, dir.path(), &ids, &settings()).unwrap();
    let after = restored.verify(&manifest).unwrap();
    // Every buffer, the four render-node ones among them, at its handle, VA and contents.
    assert_eq!(after.buffers, before.buffers);
    assert_eq!(after.buffers, 2 * (1 + 1 + 2));
    assert_eq!(after.bytes, manifest.pattern_bytes());
}

#[test]
fn on_linux_6_1_the_workloads_render_node_buffers_are_lost_and_verify_says_so() {
    let p = Preset::by_name("mi210x2").unwrap();
    let src = node(&p, Kernel::Linux6_1);
    let target = harness::start_target(&src, &render_spec()).unwrap();
    let manifest = target.workload.manifest().clone();
    target.workload.verify().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (ids, _) = harness::checkpoint(&src, &target, dir.path(), &settings()).unwrap();
    drop(target);
    let dst = node(&p, Kernel::Linux6_1);
    let (restored, _) = harness::restore(&dst, dir.path(), &ids, &settings()).unwrap();
    let err = restored.verify(&manifest).unwrap_err().to_string();
    assert!(
        err.contains("render-node buffer") && err.contains("is not in the render-node file"),
        "{err}"
    );
}

/// The workload (parent) shares a render-node buffer with a child through a dma-buf: the
/// parent creates and exports it on GPU 0's render node (after the workload's two buffers there:
/// GEM handle 3); the child opens its own render-node file, creates `own` buffers of its own,
/// imports the dma-buf and keeps the fd. Returns the child, its render node and dma-buf, and
/// both sides.
fn share_with_child(
    n: &SimNode,
    target: &harness::Target,
    own: usize,
) -> (
    kfd_sim::SimProcess,
    RenderNode<SimFile>,
    OwnedFd,
    SharedSide,
    SharedSide,
) {
    let (parent, dmabuf) =
        SharedSide::create(&target.workload.renders()[0], 2 * MIB, SHARED_VA).unwrap();
    assert_eq!(parent.handle(), bo(3));
    let child = n.machine.spawn_process();
    let minor = n.machine.render_minors()[0];
    let render = n.platform_of(&child).open_render(minor).unwrap();
    for _ in 0..own {
        render.gem_create(64 << 10, 0, GemDomain::GTT, 0).unwrap();
    }
    let side = SharedSide::import(&render, dmabuf.as_fd(), 2 * MIB, SHARED_VA + 64 * MIB).unwrap();
    (child, render, dmabuf, parent, side)
}

/// The two tasks of the tree: the workload's `/dev/kfd` and render nodes, the child's render
/// node and dma-buf.
fn tree<'a>(
    target: &'a harness::Target,
    child: &'a kfd_sim::SimProcess,
    child_render: &'a RenderNode<SimFile>,
    dmabuf: &'a OwnedFd,
) -> [harness::TaskFiles<'a>; 2] {
    let w = &target.workload;
    let mut parent_files = vec![w.kfd().as_fd()];
    parent_files.extend(w.renders().iter().map(AsFd::as_fd));
    [
        harness::TaskFiles {
            process: &target.process,
            files: parent_files,
        },
        harness::TaskFiles {
            process: child,
            files: vec![child_render.as_fd(), dmabuf.as_fd()],
        },
    ]
}

#[rstest::rstest]
#[case::same_node(false)]
#[case::remapped(true)]
fn a_buffer_the_workload_shares_with_a_child_stays_shared_across_a_checkpoint(#[case] remap: bool) {
    let p = Preset::by_name("mi210x2").unwrap();
    let src = node(&p, Kernel::Linux6_18);
    let target = harness::start_target(&src, &render_spec()).unwrap();
    let manifest = target.workload.manifest().clone();
    // The child's import gets the parent's handle number (upstream's image format names a
    // shared buffer by it).
    let (child, child_render, dmabuf, parent, side) = share_with_child(&src, &target, 2);
    assert_eq!(side.handle(), parent.handle());
    let parent_render = &target.workload.renders()[0];
    // The child writes, the parent reads.
    let hello = pattern(41, 8192);
    side.write(&child_render, 4096, &hello).unwrap();
    assert!(parent.read(parent_render, 4096, 8192).unwrap() == hello);

    let dir = tempfile::tempdir().unwrap();
    let tasks = tree(&target, &child, &child_render, &dmabuf);
    let ids = harness::checkpoint_tree(&src, &tasks, dir.path(), &settings()).unwrap();
    // The child's files close (criu kills the tree after the dump).
    drop(child_render);
    drop(dmabuf);
    let parent_handle = parent.handle();
    drop(target);

    let dst = node(
        &if remap { remapped_variant(&p) } else { p },
        Kernel::Linux6_18,
    );
    let mut tasks = harness::restore_tree(&dst, dir.path(), &ids, &settings()).unwrap();
    let c = tasks.pop().unwrap();
    let t = tasks.pop().unwrap();
    let mut files = t.files.into_iter();
    let kfd = files.next().unwrap().into_kfd().unwrap();
    let renders: Vec<_> = files.map(|f| f.into_render().unwrap()).collect();
    let mut cfiles = c.files.into_iter();
    let child_render = cfiles.next().unwrap().into_render().unwrap();
    let child_dmabuf = cfiles.next().unwrap().into_other().unwrap();

    // What the child wrote before the checkpoint, both sides read; what the parent writes now,
    // the child reads: one buffer, at the old handles, and the child's dma-buf is of it.
    let parent = SharedSide::at(parent_handle, 2 * MIB);
    assert!(parent.read(&renders[0], 4096, 8192).unwrap() == hello);
    assert!(side.read(&child_render, 4096, 8192).unwrap() == hello);
    let reply = pattern(42, 1 << 20);
    parent.write(&renders[0], MIB, &reply).unwrap();
    assert!(side.read(&child_render, MIB, 1 << 20).unwrap() == reply);
    assert_eq!(
        child_render
            .prime_fd_to_handle(child_dmabuf.as_fd())
            .unwrap(),
        side.handle()
    );
    // The workload itself is whole.
    let restored = harness::RestoredTarget {
        process: t.process,
        kfd,
        renders,
        mapping: Vec::new(),
    };
    let report = restored.verify(&manifest).unwrap();
    assert_eq!(report.bytes, manifest.pattern_bytes());
}

#[test]
fn a_shared_buffer_at_other_handle_numbers_in_the_two_processes_is_refused_at_dump() {
    let p = Preset::by_name("mi210x2").unwrap();
    let src = node(&p, Kernel::Linux6_18);
    let target = harness::start_target(&src, &render_spec()).unwrap();
    // The child imports first: its handle 1 is the parent's handle 3.
    let (child, child_render, dmabuf, parent, side) = share_with_child(&src, &target, 0);
    assert_eq!((parent.handle(), side.handle()), (bo(3), bo(1)));
    let dir = tempfile::tempdir().unwrap();
    let tasks = tree(&target, &child, &child_render, &dmabuf);
    let err = harness::checkpoint_tree(&src, &tasks, dir.path(), &settings())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("is GEM handle 3 in one render-node file and 1 in another")
            && err.contains("names a shared buffer by one handle number"),
        "{err}"
    );
}

/// A KFD buffer exported as a dma-buf (KFD 1.12's EXPORT_DMABUF, in 6.18's KFD 1.18) and
/// imported into a child's render node stays one buffer: the KFD restore creates it, the child's
/// import and its dma-buf fd are of it.
#[test]
fn a_kfd_buffer_imported_into_a_childs_render_node_stays_one_buffer() {
    let p = Preset::by_name("mi210x2").unwrap();
    let src = node(&p, Kernel::Linux6_18);
    let minor = src.machine.render_minors()[0];
    let gpu = GpuId::new(src.machine.gpu_ids()[0]).unwrap();
    let parent = src.machine.spawn_process();
    let pp = src.platform_of(&parent);
    let kfd = pp.open_kfd().unwrap();
    let render = pp.open_render(minor).unwrap();
    kfd.acquire_vm(gpu, render.as_fd()).unwrap();
    let flags = AllocFlags::GTT | AllocFlags::WRITABLE;
    let a = kfd.alloc_memory(VA, 2 * MIB, gpu, flags).unwrap();
    kfd.map_memory_to_gpu(a.handle, &[gpu]).unwrap();
    let dmabuf = kfd.export_dmabuf(a.handle).unwrap();
    let child = src.machine.spawn_process();
    let child_render = src.platform_of(&child).open_render(minor).unwrap();
    let side = SharedSide::import(&child_render, dmabuf.as_fd(), 2 * MIB, SHARED_VA).unwrap();
    let written = pattern(13, 1 << 20);
    side.write(&child_render, 0, &written).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let tasks = [
        harness::TaskFiles {
            process: &parent,
            files: vec![kfd.as_fd(), render.as_fd()],
        },
        harness::TaskFiles {
            process: &child,
            files: vec![child_render.as_fd(), dmabuf.as_fd()],
        },
    ];
    let ids = harness::checkpoint_tree(&src, &tasks, dir.path(), &settings()).unwrap();
    let dirf = std::fs::File::open(dir.path()).unwrap();
    // The KFD BO is named by the child's handle; the child's entry imports it.
    let k = images::KfdImage::read(dirf.as_fd(), 1).unwrap();
    assert_eq!(k.bo_entries[0].handle, side.handle().get());
    let r = RenderNodeImage::read(dirf.as_fd(), 3).unwrap();
    let entries: Vec<_> = r
        .bo_entries
        .iter()
        .map(|b| (b.handle, b.is_import))
        .collect();
    assert_eq!(entries, [(side.handle().get(), 1)]);
    assert_eq!(
        DmabufImage::read(dirf.as_fd(), 4).unwrap().gem_handle,
        side.handle().get()
    );

    let dst = node(&remapped_variant(&p), Kernel::Linux6_18);
    let mut tasks = harness::restore_tree(&dst, dir.path(), &ids, &settings()).unwrap();
    let c = tasks.pop().unwrap();
    let mut cfiles = c.files.into_iter();
    let child_render = cfiles.next().unwrap().into_render().unwrap();
    let child_dmabuf = cfiles.next().unwrap().into_other().unwrap();
    assert!(side.read(&child_render, 0, 1 << 20).unwrap() == written);
    // The parent's buffer, through its own render node, is what the child reads and writes.
    let t = tasks.pop().unwrap();
    let mut files = t.files.into_iter();
    let _kfd = files.next().unwrap().into_kfd().unwrap();
    let parent_render = files.next().unwrap().into_render().unwrap();
    let again = parent_render
        .prime_fd_to_handle(child_dmabuf.as_fd())
        .unwrap();
    let parent_side = SharedSide::at(again, 2 * MIB);
    assert!(parent_side.read(&parent_render, 0, 1 << 20).unwrap() == written);
    let reply = pattern(14, 4096);
    parent_side.write(&parent_render, MIB, &reply).unwrap();
    assert!(side.read(&child_render, MIB, 4096).unwrap() == reply);
}

/// kfd-workload's `--share-child` as its two processes run it, in process: the workload exports
/// a buffer, its child imports it at the same handle through [`Importer`] (buffers of its own at
/// the handles below), and the two take turns writing and checking it through their mappings
/// with the child's one-line commands. The tree is checkpointed and restored through the plugin's
/// hooks (same node and other gpu ids; the child keeping its dma-buf fd or holding the handle
/// only), and the restored sides go on: the round at the checkpoint reads back on both, the
/// child's handle, VA and dma-buf fd are its import, and each side's next write is what the
/// other reads.
#[rstest::rstest]
#[case::same_node_fd_kept(false, true, Kernel::Linux6_18)]
#[case::same_node_handle_only(false, false, Kernel::Linux6_18)]
#[case::remapped_fd_kept(true, true, Kernel::Linux6_18)]
#[case::remapped_handle_only(true, false, Kernel::Linux6_18)]
#[case::remapped_fd_kept_7_2(true, true, Kernel::Linux7_2)]
#[case::remapped_handle_only_7_2(true, false, Kernel::Linux7_2)]
fn the_workloads_share_child_goes_on_sharing_after_a_checkpoint(
    #[case] remap: bool,
    #[case] keep_fd: bool,
    #[case] kernel: Kernel,
) {
    use harness::workload::{fill_mapping, Importer, SharedContents, Writer};
    const SEED: u64 = 0x5eed;
    let p = Preset::by_name("mi210x2").unwrap();
    let src = node(&p, kernel);
    let target = harness::start_target(&src, &render_spec()).unwrap();
    let manifest = target.workload.manifest().clone();
    let size = 512 << 10;
    let parent_render = &target.workload.renders()[0];
    let (parent, dmabuf) = SharedSide::create(parent_render, size, SHARED_VA).unwrap();
    let map = parent.cpu_map(parent_render).unwrap();
    let minor = src.machine.render_minors()[0];
    let child = src.machine.spawn_process();
    let child_render = src.platform_of(&child).open_render(minor).unwrap();
    let importer =
        Importer::import(child_render, dmabuf, parent.handle(), size, SEED, keep_fd).unwrap();
    assert_eq!(importer.side().handle(), parent.handle());
    assert_eq!(importer.fillers(), 2, "the workload's two render buffers");
    // Rounds 1 to 4: the exporter writes the odd ones, the importer the even ones.
    let n = usize::try_from(size).unwrap();
    for round in 1..=4u64 {
        match Writer::of_round(round) {
            Writer::Exporter => {
                fill_mapping(&map, n, SharedContents::of_round(SEED, round)).unwrap();
                assert_eq!(importer.answer(&format!("check {round} e")), "ok");
            }
            Writer::Importer => {
                assert_eq!(importer.answer(&format!("write {round}")), "ok");
                parent
                    .check(parent_render, SharedContents::of_round(SEED, round))
                    .unwrap();
            }
        }
    }
    let fd = if keep_fd { "kept" } else { "closed" };
    let handle = parent.handle();
    let verified = format!("ok handle={} va=ok fd={fd}", handle.get());
    assert_eq!(importer.answer("verify 4 i"), verified);
    // A check of a round nobody wrote fails, naming the first byte.
    let stale = importer.answer("check 3 e");
    assert!(
        stale.starts_with("err shared buffer byte 0x0 is"),
        "{stale}"
    );
    drop(map);

    let dir = tempfile::tempdir().unwrap();
    // The child's files in its fd order: its render node, then the dma-buf fd it keeps.
    let mut child_files = vec![importer.render().as_fd()];
    child_files.extend(importer.dmabuf());
    let w = &target.workload;
    let mut parent_files = vec![w.kfd().as_fd()];
    parent_files.extend(w.renders().iter().map(AsFd::as_fd));
    let tasks = [
        harness::TaskFiles {
            process: &target.process,
            files: parent_files,
        },
        harness::TaskFiles {
            process: &child,
            files: child_files,
        },
    ];
    let ids = harness::checkpoint_tree(&src, &tasks, dir.path(), &settings()).unwrap();
    let dirf = std::fs::File::open(dir.path()).unwrap();
    let dmabuf_images = (1..=6)
        .filter(|&id| DmabufImage::read(dirf.as_fd(), id).is_ok())
        .count();
    assert_eq!(dmabuf_images, usize::from(keep_fd));
    drop(importer);
    drop(target);

    let dst = node(&if remap { remapped_variant(&p) } else { p }, kernel);
    let mut tasks = harness::restore_tree(&dst, dir.path(), &ids, &settings()).unwrap();
    let c = tasks.pop().unwrap();
    let t = tasks.pop().unwrap();
    let mut cfiles = c.files.into_iter();
    let child_render = cfiles.next().unwrap().into_render().unwrap();
    let child_dmabuf = cfiles.next().map(|f| f.into_other().unwrap());
    assert_eq!(child_dmabuf.is_some(), keep_fd);
    let importer = Importer::restored(child_render, child_dmabuf, handle, size, SEED).unwrap();
    let mut files = t.files.into_iter();
    let kfd = files.next().unwrap().into_kfd().unwrap();
    let renders: Vec<_> = files.map(|f| f.into_render().unwrap()).collect();
    let parent = SharedSide::at(handle, size);

    // Round 4 (the importer's) on both sides; then one more round each way.
    parent
        .check(&renders[0], SharedContents::of_round(SEED, 4))
        .unwrap();
    assert_eq!(importer.answer("verify 4 i"), verified);
    parent
        .fill(&renders[0], SharedContents::of_round(SEED, 5))
        .unwrap();
    assert_eq!(importer.answer("check 5 e"), "ok");
    assert_eq!(importer.answer("write 6"), "ok");
    parent
        .check(&renders[0], SharedContents::of_round(SEED, 6))
        .unwrap();
    // The workload itself is whole.
    let restored = harness::RestoredTarget {
        process: t.process,
        kfd,
        renders,
        mapping: Vec::new(),
    };
    assert_eq!(
        restored.verify(&manifest).unwrap().bytes,
        manifest.pattern_bytes()
    );
}

/// A process whose render node holds buffers at handles 2, 5 and 6 only (1, 3 and 4 were
/// closed again), each with a pattern: the numbers a restore must reach across gaps.
fn sparse_source(n: &SimNode) -> (Source, Vec<u32>) {
    let process = n.machine.spawn_process();
    let plat = n.platform_of(&process);
    let kfd = plat.open_kfd().unwrap();
    let minor = n.machine.render_minors()[0];
    let render = plat.open_render(minor).unwrap();
    let gpu = GpuId::new(n.machine.gpu_ids()[0]).unwrap();
    kfd.acquire_vm(gpu, render.as_fd()).unwrap();
    let made: Vec<BoHandle> = (0..6)
        .map(|i| {
            let domain = if i % 2 == 0 {
                GemDomain::VRAM
            } else {
                GemDomain::GTT
            };
            render.gem_create(256 << 10, 0, domain, CPU).unwrap()
        })
        .collect();
    for h in [1, 3, 4] {
        render.gem_close(bo(h)).unwrap();
    }
    let kept = vec![2, 5, 6];
    assert_eq!(
        made.iter().map(|h| h.get()).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6]
    );
    let contents: Vec<Vec<u8>> = kept
        .iter()
        .map(|&h| {
            let bytes = pattern(u8::try_from(h).unwrap(), 256 << 10);
            write_bo(&render, bo(h), &bytes);
            bytes
        })
        .collect();
    render.va_map(bo(5), VA, 0, 256 << 10, RW).unwrap();
    let source = Source {
        process,
        kfd,
        render,
        minor,
        contents,
    };
    (source, kept)
}

/// Dumps `s` (kfd as image 1, its render node as 2) into a new directory.
fn dump_source(n: &SimNode, s: &Source) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    dump(
        n,
        &s.process,
        &[(&fd_of(&s.kfd), 1), (&fd_of(&s.render), 2)],
        dir.path(),
    );
    dir
}

/// Linux 6.18 moves each restored buffer to its handle with `GEM_CHANGE_HANDLE`; Linux 7.2
/// refuses that ioctl (`EINVAL`), and the restore makes the buffers in ascending handle order
/// with placeholders below each, closed afterwards: both give the same file.
#[rstest::rstest]
#[case::moved_on_6_18(Kernel::Linux6_18)]
#[case::made_in_order_on_7_2(Kernel::Linux7_2)]
fn buffers_with_gaps_between_their_handles_come_back_at_their_numbers(#[case] kernel: Kernel) {
    let p = Preset::by_name("mi210x2").unwrap();
    let src = node(&p, kernel);
    let (s, kept) = sparse_source(&src);
    let before = listing(&s.render);
    assert_eq!(before.iter().map(|b| b.0).collect::<Vec<_>>(), kept);
    let maps_before = mappings(&s.render, 5);
    let dir = dump_source(&src, &s);
    let dirf = std::fs::File::open(dir.path()).unwrap();

    let dst = node(&remapped_variant(&p), kernel);
    let restored = dst.machine.spawn_process_as(s.process.pid());
    let plat = dst.platform_of(&restored);
    let e = dst.engine(&|p| p, &restored, &dirf, &settings());
    e.init(Stage::Restore).unwrap();
    let _kfd = e.restore_file(1).unwrap().unwrap();
    let render = plat
        .render_from_fd(e.restore_file(2).unwrap().unwrap())
        .unwrap();
    // The same handles and nothing else: no placeholder is left behind.
    assert_eq!(listing(&render), before);
    assert_eq!(mappings(&render, 5), maps_before);
    for (&h, want) in kept.iter().zip(&s.contents) {
        assert!(read_bo(&render, bo(h), want.len()) == *want, "buffer {h}");
    }
    e.resume_devices_late(i32::try_from(s.process.pid()).unwrap())
        .unwrap();
    e.fini(Stage::Restore, 0);
}

/// On Linux 7.2, a handle number the ordered creation cannot reach refuses the restore, naming
/// the handle, and leaves no buffer (nor placeholder) behind: a number past what placeholders may
/// fill, and a number two entries of the image claim.
#[rstest::rstest]
#[case::too_far(i32::MAX.unsigned_abs(), "more than 65536 placeholder objects")]
#[case::taken_twice(5, "already has a buffer under that number")]
fn a_handle_number_that_cannot_be_reached_without_change_handle_is_refused(
    #[case] handle: u32,
    #[case] why: &str,
) {
    let p = Preset::by_name("mi210x2").unwrap();
    let src = node(&p, Kernel::Linux7_2);
    let (s, _) = sparse_source(&src);
    let dir = dump_source(&src, &s);
    let dirf = std::fs::File::open(dir.path()).unwrap();
    // The image's last buffer (handle 6) claims `handle` instead.
    let mut img = RenderNodeImage::read(dirf.as_fd(), 2).unwrap();
    img.bo_entries[2].handle = handle;
    RenderNodeImage::write(dirf.as_fd(), 2, &img).unwrap();

    let dst = node(&p, Kernel::Linux7_2);
    let restored = dst.machine.spawn_process_as(s.process.pid());
    let e = dst.engine(&|p| p, &restored, &dirf, &settings());
    e.init(Stage::Restore).unwrap();
    let _kfd = e.restore_file(1).unwrap().unwrap();
    let before = (vram_in_use(&dst), gtt_in_use(&dst));
    let err = e.restore_file(2).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("amdgpu-renderD-2.img: GEM handle {handle}: "))
            && err.contains(why)
            && err.contains("DRM_IOCTL_GEM_CHANGE_HANDLE answered EINVAL"),
        "{err}"
    );
    assert_eq!(
        (vram_in_use(&dst), gtt_in_use(&dst)),
        before,
        "what the restore made is freed"
    );
    e.fini(Stage::Restore, -1);
}

/// GTT in use on every GPU of `n`, as the render nodes report it.
fn gtt_in_use(n: &SimNode) -> Vec<u64> {
    in_use(n, |r| r.gtt_usage().unwrap())
}
