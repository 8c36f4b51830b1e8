//! The simulated amdgpu render node through kfd-abi's `RenderNode` API: every ioctl's success path
//! and the errno of its bad inputs, SDMA copies between KFD VRAM and userptr buffers in the VM
//! shared with KFD, the plugin's data path (a dma-buf imported into a second file with its own
//! VM), and failed fences.

#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    clippy::too_many_arguments
)] // tests panic on failure; rstest tables take one argument per column

mod common;

use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;

use common::*;
use kfd_abi::ioctl::{drm as codes, encode, Dir};
use kfd_abi::render::{GemDomain, IbSubmit, UserptrFlags, VmPageFlags, HW_IP_DMA};
use kfd_abi::sdma::IbBuilder;
use kfd_abi::{
    BoHandle, BoListHandle, ContextId, Errno, HostBuffer, IoctlError, Kfd, RenderNode,
    UserptrBuffer,
};
use kfd_sim::{Preset, SimFile};
use kfd_sys as sys;
use rstest::rstest;

const MIB: u64 = 1 << 20;
/// Where the tests put KFD BOs.
const KFD_VA: u64 = 0x7f00_0000_0000;
/// Where the tests put render-node mappings.
const VA: u64 = 0x10_0000_0000;
const RW: VmPageFlags = VmPageFlags::READABLE.union(VmPageFlags::WRITEABLE);

fn node(e: &Env, g: usize) -> RenderNode<SimFile> {
    RenderNode::new(
        kfd_abi::Transport::try_clone(&e.renders[g]).unwrap(),
        "renderD (sim)",
    )
}

/// A second open file of GPU `g`'s render node, in the same process, with its own VM.
fn second_file(e: &Env, g: usize) -> RenderNode<SimFile> {
    let minor = e.machine.render_minors()[g];
    RenderNode::new(e.proc.open_render(minor).unwrap(), "renderD (2nd)")
}

/// An IB buffer and a context on a render node.
struct Sdma<'r> {
    r: &'r RenderNode<SimFile>,
    ctx: ContextId,
    ib: UserptrBuffer<'r, SimFile>,
}

impl<'r> Sdma<'r> {
    fn new(r: &'r RenderNode<SimFile>, ib_va: u64) -> Self {
        Self {
            r,
            ctx: r.ctx_alloc().unwrap(),
            ib: UserptrBuffer::new(r, 64 << 10, ib_va).unwrap(),
        }
    }

    /// Submits `ib`; returns the fence's sequence number.
    fn submit(&mut self, ib: IbBuilder) -> Result<u64, IoctlError> {
        let dwords = ib.finish();
        for (d, w) in self.ib.as_mut_slice().chunks_exact_mut(4).zip(&dwords) {
            d.copy_from_slice(&w.to_le_bytes());
        }
        self.r.cs_submit(&IbSubmit {
            ctx: self.ctx,
            bo_list: None,
            ip_type: HW_IP_DMA,
            ring: 0,
            ib_va: self.ib.va(),
            ib_bytes: (dwords.len() * 4) as u32,
        })
    }

    fn wait(&self, seq: u64) -> Result<bool, IoctlError> {
        self.r.wait_cs(
            self.ctx,
            HW_IP_DMA,
            0,
            seq,
            RenderNode::<SimFile>::deadline_in(1_000_000_000),
        )
    }

    /// Submits and waits.
    fn run(&mut self, ib: IbBuilder) -> Result<bool, IoctlError> {
        let seq = self.submit(ib)?;
        self.wait(seq)
    }

    fn copy(&mut self, src: u64, dst: u64, len: u64) -> Result<bool, IoctlError> {
        let mut ib = IbBuilder::new();
        ib.copy_linear(src, dst, len);
        self.run(ib)
    }
}

fn pattern(seed: u8, out: &mut [u8]) {
    for (i, b) in out.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 11) as u8;
    }
}

/// A VRAM KFD BO of `size` bytes at `va` on GPU `g`, mapped to that GPU (into its render VM).
fn kfd_vram(e: &Env, g: usize, va: u64, size: u64) -> kfd_abi::MemHandle {
    let a = e.kfd.alloc_memory(va, size, e.gpus[g], VRAM_W).unwrap();
    e.kfd.map_memory_to_gpu(a.handle, &[e.gpus[g]]).unwrap();
    a.handle
}

#[test]
fn kfd_vram_is_filled_from_a_userptr_and_read_back_into_another() {
    let e = env(Preset::mi210x2());
    let size = 9 * MIB + 4096; // three packets, the last one short
    kfd_vram(&e, 0, KFD_VA, size);
    let r = node(&e, 0);
    let mut dma = Sdma::new(&r, VA);
    let mut src = UserptrBuffer::new(&r, size as usize, VA + 64 * MIB).unwrap();
    let dst = UserptrBuffer::new(&r, size as usize, VA + 128 * MIB).unwrap();
    pattern(7, src.as_mut_slice());
    assert!(dma.copy(src.va(), KFD_VA, size).unwrap());
    assert!(dma.copy(KFD_VA, dst.va(), size).unwrap());
    assert!(dst.as_slice() == src.as_slice(), "read back differs");
}

#[test]
fn a_checkpointed_dmabuf_imported_into_a_second_file_sees_and_changes_the_same_vram() {
    let e = env(Preset::mi210x2());
    let size = 3 * MIB;
    kfd_vram(&e, 1, KFD_VA, size);
    let r = node(&e, 1);
    let mut dma = Sdma::new(&r, VA);
    let mut host = UserptrBuffer::new(&r, size as usize, VA + 64 * MIB).unwrap();
    pattern(3, host.as_mut_slice());
    assert!(dma.copy(host.va(), KFD_VA, size).unwrap());

    // The plugin's way in: criu, the ptrace parent, checkpoints the process and gets a dma-buf.
    let criu = e.machine.spawn_process();
    criu.ptrace_attach(&e.proc);
    let ck = Kfd::new(e.kfd.transport().used_by(&criu).unwrap(), "/dev/kfd (criu)");
    let info = ck.criu_process_info().unwrap();
    let c = ck.criu_checkpoint(&info).unwrap();
    let bucket = c.bos.iter().find(|b| b.addr == KFD_VA).unwrap();
    let dmabuf = bucket.dmabuf.as_ref().unwrap();

    // A render file of criu's own, with its own VM, imports and maps it at another VA.
    let minor = e.machine.render_minors()[1];
    let r2 = RenderNode::new(criu.open_render(minor).unwrap(), "renderD (criu)");
    let bo = r2.prime_fd_to_handle(dmabuf.as_fd()).unwrap();
    assert_eq!(r2.prime_fd_to_handle(dmabuf.as_fd()).unwrap(), bo);
    let at = 0x20_0000_0000;
    r2.va_map(bo, at, 0, size, RW).unwrap();
    let mut dma2 = Sdma::new(&r2, VA);
    let mut staging = UserptrBuffer::new(&r2, size as usize, VA + 64 * MIB).unwrap();
    assert!(dma2.copy(at, staging.va(), size).unwrap());
    assert!(
        staging.as_slice() == host.as_slice(),
        "read through the import"
    );

    // Writing through the import changes what the process sees in its VM.
    pattern(99, staging.as_mut_slice());
    assert!(dma2.copy(staging.va(), at, size).unwrap());
    assert!(dma.copy(KFD_VA, host.va(), size).unwrap());
    assert!(
        staging.as_slice() == host.as_slice(),
        "written through the import"
    );
    // The second file's VM is its own: the process's VA is not mapped there.
    assert_eq!(
        errno(dma2.copy(KFD_VA, staging.va(), 4096)),
        Some(Errno::ETIME)
    );
    r2.va_unmap(bo, at, 0, size).unwrap();
    r2.gem_close(bo).unwrap();
    ck.criu_unpause().unwrap();
}

#[test]
fn gem_bos_export_and_import_across_files_and_their_dmabuf_is_the_memory() {
    let e = env(Preset::mi50x1());
    let r = node(&e, 0);
    let bo = r.gem_create(2 * MIB, 4096, GemDomain::VRAM, 0).unwrap();
    r.va_map(bo, VA + 256 * MIB, 0, 2 * MIB, RW).unwrap();
    let mut dma = Sdma::new(&r, VA);
    let mut fill = IbBuilder::new();
    fill.const_fill(VA + 256 * MIB + 4, 0x0403_0201, 10);
    assert!(dma.run(fill).unwrap());
    let fd = r.prime_handle_to_fd(bo).unwrap();
    let mut bytes = [0u8; 16];
    std::fs::File::from(fd.try_clone().unwrap())
        .read_exact_at(&mut bytes, 0)
        .unwrap();
    assert_eq!(bytes, [0, 0, 0, 0, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 0, 0]);
    // Importing into the exporting file gives the same handle; another file gets its own.
    assert_eq!(r.prime_fd_to_handle(fd.as_fd()).unwrap(), bo);
    let r2 = second_file(&e, 0);
    let bo2 = r2.prime_fd_to_handle(fd.as_fd()).unwrap();
    r2.va_map(bo2, VA + 256 * MIB, 0, 2 * MIB, RW).unwrap();
    let mut dma2 = Sdma::new(&r2, VA);
    let out = UserptrBuffer::new(&r2, 4096, VA + 512 * MIB).unwrap();
    assert!(dma2.copy(VA + 256 * MIB, out.va(), 16).unwrap());
    assert_eq!(out.as_slice()[..16], bytes);
    // The exporter closing its handle does not take the memory from the importer.
    r.va_unmap(bo, VA + 256 * MIB, 0, 2 * MIB).unwrap();
    r.gem_close(bo).unwrap();
    assert!(dma2.copy(VA + 256 * MIB, out.va() + 16, 16).unwrap());
    assert_eq!(out.as_slice()[16..32], bytes);
}

#[test]
fn gtt_bos_and_cpu_domain_bos_are_created_and_vram_falls_back_to_gtt() {
    let e = env(Preset::mi50x1());
    let r = node(&e, 0);
    let before = e.machine.vram_used(e.gpus[0].get()).unwrap();
    let v = r.gem_create(MIB, 0, GemDomain::VRAM, 0).unwrap();
    assert_eq!(e.machine.vram_used(e.gpus[0].get()).unwrap(), before + MIB);
    r.gem_create(MIB, 0, GemDomain::GTT, 0).unwrap();
    r.gem_create(MIB, 0, GemDomain::CPU, 0).unwrap();
    r.gem_create(MIB, 0, GemDomain::VRAM | GemDomain::GTT, 0)
        .unwrap();
    r.gem_close(v).unwrap();
    assert_eq!(e.machine.vram_used(e.gpus[0].get()).unwrap(), before + MIB);
    // Larger than VRAM: placed in GTT, not charged to VRAM.
    let big = r.gem_create(64 << 30, 0, GemDomain::VRAM, 0).unwrap();
    assert_eq!(e.machine.vram_used(e.gpus[0].get()).unwrap(), before + MIB);
    r.gem_close(big).unwrap();
}

#[test]
fn handles_contexts_and_lists_are_lowest_free_from_one() {
    let e = env(Preset::mi50x1());
    let r = node(&e, 0);
    let a = r.gem_create(4096, 0, GemDomain::GTT, 0).unwrap();
    let b = r.gem_create(4096, 0, GemDomain::GTT, 0).unwrap();
    assert_eq!((a.get(), b.get()), (1, 2));
    r.gem_close(a).unwrap();
    assert_eq!(r.gem_create(4096, 0, GemDomain::GTT, 0).unwrap().get(), 1);
    assert_eq!(r.ctx_alloc().unwrap(), ContextId(1));
    assert_eq!(r.ctx_alloc().unwrap(), ContextId(2));
    r.ctx_free(ContextId(1)).unwrap();
    assert_eq!(r.ctx_alloc().unwrap(), ContextId(1));
    let l = r.bo_list_create(&[(a, 0), (b, 1)]).unwrap();
    assert_eq!(l, BoListHandle(1));
    r.bo_list_destroy(l).unwrap();
    assert!(r.gem_mmap_offset(b).unwrap() >= 1 << 32);
}

#[test]
fn dev_info_reports_the_gfx9_va_range_and_the_pci_device() {
    let e = env(Preset::mi210x2());
    let info = node(&e, 0).dev_info().unwrap();
    assert_eq!(info.family, sys::AMDGPU_FAMILY_AI);
    assert_eq!(info.device_id, 0x740f, "MI210");
    assert_eq!(info.virtual_address_offset, 2 * MIB);
    assert_eq!(info.virtual_address_max, 1 << 47);
    assert_eq!(info.virtual_address_alignment, 4096);
}

#[test]
fn dev_info_copies_at_most_return_size_bytes() {
    let e = env(Preset::mi210x2());
    let mut out = [0xaau8; 16];
    let mut a = sys::drm_amdgpu_info {
        return_pointer: out.as_mut_ptr() as u64,
        return_size: 8,
        query: sys::AMDGPU_INFO_DEV_INFO,
        __bindgen_anon_1: Default::default(),
    };
    raw(&e.renders[0], codes::AMDGPU_INFO, &mut a).unwrap();
    assert_eq!(u32::from_le_bytes(out[..4].try_into().unwrap()), 0x740f);
    assert_eq!(out[8..], [0xaa; 8]);
}

// ---- errno tables -------------------------------------------------------------------------

#[rstest]
#[case::unknown_domain_bit(1 << 6, 0, 4096, Errno::EINVAL)]
#[case::no_domain(0, 0, 4096, Errno::EINVAL)]
#[case::gds(sys::AMDGPU_GEM_DOMAIN_GDS as u64, 0, 4096, Errno::EINVAL)]
#[case::unknown_flag(sys::AMDGPU_GEM_DOMAIN_VRAM as u64, 1 << 20, 4096, Errno::EINVAL)]
#[case::encrypted(
    sys::AMDGPU_GEM_DOMAIN_VRAM as u64,
    sys::AMDGPU_GEM_CREATE_ENCRYPTED as u64,
    4096,
    Errno::EINVAL
)]
#[case::zero_size(sys::AMDGPU_GEM_DOMAIN_GTT as u64, 0, 0, Errno::EINVAL)]
#[case::more_than_the_system(sys::AMDGPU_GEM_DOMAIN_GTT as u64, 0, 1 << 60, Errno::ENOMEM)]
fn gem_create_errno(
    #[case] domains: u64,
    #[case] flags: u64,
    #[case] size: u64,
    #[case] want: Errno,
) {
    let e = env(Preset::mi50x1());
    let r = node(&e, 0);
    assert_eq!(
        errno(r.gem_create(size, 0, GemDomain::from_bits_retain(domains), flags)),
        Some(want)
    );
}

#[derive(Debug, Clone, Copy)]
enum VaCase {
    Map {
        va: u64,
        offset: u64,
        size: u64,
        flags: u32,
    },
    Op(u32),
    UnknownHandle,
    Twice,
    OverKfd,
    UnmapUnmapped,
}

#[rstest]
#[case::in_the_reserved_bottom(VaCase::Map { va: MIB, offset: 0, size: 4096, flags: 6 }, Errno::EINVAL)]
#[case::in_the_hole(VaCase::Map { va: 1 << 47, offset: 0, size: 4096, flags: 6 }, Errno::EINVAL)]
#[case::past_the_vm(VaCase::Map { va: 0xffff_ffff_ffff_f000, offset: 0, size: 8192, flags: 6 }, Errno::EINVAL)]
#[case::unaligned_va(VaCase::Map { va: VA + 8, offset: 0, size: 4096, flags: 6 }, Errno::EINVAL)]
#[case::unaligned_size(VaCase::Map { va: VA, offset: 0, size: 100, flags: 6 }, Errno::EINVAL)]
#[case::unaligned_offset(VaCase::Map { va: VA, offset: 12, size: 4096, flags: 6 }, Errno::EINVAL)]
#[case::zero_size(VaCase::Map { va: VA, offset: 0, size: 0, flags: 6 }, Errno::EINVAL)]
#[case::past_the_bo(VaCase::Map { va: VA, offset: 4096, size: 65536, flags: 6 }, Errno::EINVAL)]
#[case::unknown_flag(VaCase::Map { va: VA, offset: 0, size: 4096, flags: 1 << 20 }, Errno::EINVAL)]
#[case::unknown_op(VaCase::Op(7), Errno::EINVAL)]
#[case::clear_is_not_simulated(VaCase::Op(sys::AMDGPU_VA_OP_CLEAR), Errno::EINVAL)]
#[case::unknown_handle(VaCase::UnknownHandle, Errno::ENOENT)]
#[case::overlap(VaCase::Twice, Errno::EINVAL)]
#[case::overlap_with_a_kfd_bo(VaCase::OverKfd, Errno::EINVAL)]
#[case::unmap_of_nothing(VaCase::UnmapUnmapped, Errno::ENOENT)]
fn gem_va_errno(#[case] case: VaCase, #[case] want: Errno) {
    let e = env(Preset::mi50x1());
    let r = node(&e, 0);
    let bo = r.gem_create(65536, 0, GemDomain::GTT, 0).unwrap();
    let va_raw = |handle: u32, op: u32, flags: u32, va: u64, offset: u64, size: u64| {
        let mut a = sys::drm_amdgpu_gem_va {
            handle,
            _pad: 0,
            operation: op,
            flags,
            va_address: va,
            offset_in_bo: offset,
            map_size: size,
        };
        raw(&e.renders[0], codes::AMDGPU_GEM_VA, &mut a)
    };
    let got = match case {
        VaCase::Map {
            va,
            offset,
            size,
            flags,
        } => va_raw(bo.get(), sys::AMDGPU_VA_OP_MAP, flags, va, offset, size),
        VaCase::Op(op) => va_raw(bo.get(), op, 0, VA, 0, 4096),
        VaCase::UnknownHandle => va_raw(99, sys::AMDGPU_VA_OP_MAP, 6, VA, 0, 4096),
        VaCase::Twice => {
            r.va_map(bo, VA, 0, 65536, RW).unwrap();
            va_raw(bo.get(), sys::AMDGPU_VA_OP_MAP, 6, VA + 8192, 0, 4096)
        }
        VaCase::OverKfd => {
            kfd_vram(&e, 0, KFD_VA, MIB);
            va_raw(bo.get(), sys::AMDGPU_VA_OP_MAP, 6, KFD_VA + 4096, 0, 4096)
        }
        VaCase::UnmapUnmapped => {
            r.va_map(bo, VA, 0, 65536, RW).unwrap();
            va_raw(bo.get(), sys::AMDGPU_VA_OP_UNMAP, 0, VA + 4096, 0, 4096)
        }
    };
    assert_eq!(got, Err(want));
}

#[test]
fn gem_handles_errno() {
    let e = env(Preset::mi50x1());
    let r = node(&e, 0);
    let nope = BoHandle::new(77).unwrap();
    assert_eq!(errno(r.gem_close(nope)), Some(Errno::EINVAL));
    assert_eq!(errno(r.gem_mmap_offset(nope)), Some(Errno::ENOENT));
    assert_eq!(errno(r.prime_handle_to_fd(nope)), Some(Errno::ENOENT));
    assert_eq!(errno(r.bo_list_create(&[(nope, 0)])), Some(Errno::ENOENT));
    assert_eq!(errno(r.ctx_free(ContextId(5))), Some(Errno::EINVAL));
    let host = HostBuffer::new(8192).unwrap();
    // SAFETY: `host` outlives the BO (closed below).
    let u = unsafe { r.gem_userptr(host.addr(), 8192, UserptrFlags::REGISTER) }.unwrap();
    assert_eq!(errno(r.gem_mmap_offset(u)), Some(Errno::EPERM));
    assert_eq!(errno(r.prime_handle_to_fd(u)), Some(Errno::EPERM));
    r.gem_close(u).unwrap();
    let mut bad_flags = sys::drm_prime_handle {
        handle: 1,
        flags: 1 << 4,
        fd: -1,
    };
    assert_eq!(
        raw(&e.renders[0], codes::PRIME_HANDLE_TO_FD, &mut bad_flags),
        Err(Errno::EINVAL)
    );
    let mut bad_op = sys::drm_amdgpu_ctx::default();
    bad_op.in_.op = 99;
    assert_eq!(
        raw(&e.renders[0], codes::AMDGPU_CTX, &mut bad_op),
        Err(Errno::EINVAL)
    );
}

#[rstest]
#[case::unaligned_address(8, 4096, UserptrFlags::REGISTER, Errno::EINVAL)]
#[case::unaligned_size(0, 100, UserptrFlags::REGISTER, Errno::EINVAL)]
#[case::writable_without_notifier(0, 4096, UserptrFlags::ANONONLY, Errno::EACCES)]
#[case::unknown_flag(0, 4096, UserptrFlags::from_bits_retain(1 << 9), Errno::EINVAL)]
fn gem_userptr_errno(
    #[case] skew: u64,
    #[case] size: u64,
    #[case] flags: UserptrFlags,
    #[case] want: Errno,
) {
    let e = env(Preset::mi50x1());
    let r = node(&e, 0);
    let host = HostBuffer::new(8192).unwrap();
    // SAFETY: the call fails; nothing keeps the address.
    let got = unsafe { r.gem_userptr(host.addr() + skew, size, flags) };
    assert_eq!(errno(got), Some(want));
}

#[test]
fn gem_userptr_validate_faults_on_unmapped_memory() {
    let e = env(Preset::mi50x1());
    let r = node(&e, 0);
    // SAFETY: the call fails; nothing keeps the address.
    let got = unsafe {
        r.gem_userptr(
            0x7e00_0000_0000,
            4096,
            UserptrFlags::REGISTER | UserptrFlags::VALIDATE,
        )
    };
    assert_eq!(errno(got), Some(Errno::EFAULT));
}

#[test]
fn prime_import_refuses_foreign_and_closed_fds() {
    let e = env(Preset::mi50x1());
    let r = node(&e, 0);
    let file = tempfile::tempfile().unwrap();
    assert_eq!(
        errno(r.prime_fd_to_handle(file.as_fd())),
        Some(Errno::EINVAL)
    );
    // A simulated device file is not a dma-buf either.
    assert_eq!(
        errno(r.prime_fd_to_handle(e.kfd.as_fd())),
        Some(Errno::EINVAL)
    );
    for fd in [-1, 1 << 29] {
        let mut a = sys::drm_prime_handle {
            handle: 0,
            flags: 0,
            fd,
        };
        assert_eq!(
            raw(&e.renders[0], codes::PRIME_FD_TO_HANDLE, &mut a),
            Err(Errno::EBADF)
        );
    }
}

#[test]
fn dmabufs_of_other_gpus_import_too() {
    let e = env(Preset::mi100x4());
    let r0 = node(&e, 0);
    let r1 = node(&e, 1);
    let bo = r0.gem_create(MIB, 0, GemDomain::VRAM, 0).unwrap();
    let fd = r0.prime_handle_to_fd(bo).unwrap();
    r1.prime_fd_to_handle(fd.as_fd()).unwrap();
}

#[test]
fn dispatch_follows_the_drm_core() {
    let e = env(Preset::mi50x1());
    let t = &e.renders[0];
    let mut buf = [0u8; 64];
    // Another ioctl type: ENOTTY before anything else.
    let other = encode(Dir::ReadWrite, b'K', 0x09, 8);
    assert_eq!(raw(t, other, &mut buf), Err(Errno::ENOTTY));
    // Numbers without a row in the kernel's tables (holes, past the tables): EINVAL.
    for nr in [0x0e, 0x2f, 0x3d, 0x4a, 0x56, 0x60, 0xcf, 0xff] {
        let cmd = encode(Dir::ReadWrite, b'd', nr, 8);
        assert_eq!(raw(t, cmd, &mut buf), Err(Errno::EINVAL), "nr {nr:#x}");
    }
    // A wild argument pointer is EFAULT, not a crash.
    // SAFETY: the simulator only accesses the argument through process_vm_readv.
    let r = unsafe { kfd_abi::Transport::ioctl(t, codes::AMDGPU_CTX, 8 as *mut _) };
    assert_eq!(r, Err(Errno::EFAULT));
    // Without the caller's write bit nothing is copied in: a CTX "ALLOC" with op 0 is EINVAL.
    let mut a = sys::drm_amdgpu_ctx::default();
    a.in_.op = sys::AMDGPU_CTX_OP_ALLOC_CTX;
    let read_only = encode(Dir::Read, b'd', 0x42, 16);
    assert_eq!(raw(t, read_only, &mut a), Err(Errno::EINVAL));
    a.in_.op = sys::AMDGPU_CTX_OP_ALLOC_CTX;
    assert_eq!(raw(t, codes::AMDGPU_CTX, &mut a), Ok(0));
}

// ---- command submission ---------------------------------------------------------------------

/// A raw CS with one chunk, for malformed submissions.
fn cs_raw(
    t: &SimFile,
    ctx: u32,
    list: u32,
    chunk_id: u32,
    length_dw: u32,
    ib: &sys::drm_amdgpu_cs_chunk_ib,
) -> Result<i32, Errno> {
    let chunk = sys::drm_amdgpu_cs_chunk {
        chunk_id,
        length_dw,
        chunk_data: ib as *const _ as u64,
    };
    let ptrs = [&chunk as *const _ as u64];
    let mut a = sys::drm_amdgpu_cs::default();
    a.in_ = sys::drm_amdgpu_cs_in {
        ctx_id: ctx,
        bo_list_handle: list,
        num_chunks: 1,
        flags: 0,
        chunks: ptrs.as_ptr() as u64,
    };
    raw(t, codes::AMDGPU_CS, &mut a)
}

#[rstest]
#[case::unknown_ctx(9, 0, sys::AMDGPU_CHUNK_ID_IB, 8, HW_IP_DMA, 0, 0, Errno::EINVAL)]
#[case::unknown_chunk(1, 0, 42, 8, HW_IP_DMA, 0, 0, Errno::EINVAL)]
#[case::fence_chunk_not_simulated(
    1,
    0,
    sys::AMDGPU_CHUNK_ID_FENCE,
    8,
    HW_IP_DMA,
    0,
    0,
    Errno::EINVAL
)]
#[case::short_ib_chunk(1, 0, sys::AMDGPU_CHUNK_ID_IB, 7, HW_IP_DMA, 0, 0, Errno::EINVAL)]
#[case::gfx_ip(
    1,
    0,
    sys::AMDGPU_CHUNK_ID_IB,
    8,
    sys::AMDGPU_HW_IP_GFX,
    0,
    0,
    Errno::EINVAL
)]
#[case::ip_past_the_table(1, 0, sys::AMDGPU_CHUNK_ID_IB, 8, 99, 0, 0, Errno::EINVAL)]
#[case::ring_past_the_engines(1, 0, sys::AMDGPU_CHUNK_ID_IB, 8, HW_IP_DMA, 0, 99, Errno::EINVAL)]
#[case::ip_instance(1, 0, sys::AMDGPU_CHUNK_ID_IB, 8, HW_IP_DMA, 1, 0, Errno::EINVAL)]
#[case::unknown_bo_list(1, 5, sys::AMDGPU_CHUNK_ID_IB, 8, HW_IP_DMA, 0, 0, Errno::ENOENT)]
fn cs_errno(
    #[case] ctx: u32,
    #[case] list: u32,
    #[case] chunk_id: u32,
    #[case] length_dw: u32,
    #[case] ip_type: u32,
    #[case] ip_instance: u32,
    #[case] ring: u32,
    #[case] want: Errno,
) {
    let e = env(Preset::mi50x1());
    let r = node(&e, 0);
    r.ctx_alloc().unwrap();
    let ib = sys::drm_amdgpu_cs_chunk_ib {
        _pad: 0,
        flags: 0,
        va_start: VA,
        ib_bytes: 32,
        ip_type,
        ip_instance,
        ring,
    };
    assert_eq!(
        cs_raw(&e.renders[0], ctx, list, chunk_id, length_dw, &ib),
        Err(want)
    );
}

/// A context has two DMA entities (rings 0 and 1) however many SDMA engines the GPU has: ring 2
/// of an MI210 (five engines) is EINVAL, as `amdgpu_ctx_get_entity` answers.
#[rstest]
#[case::ring_0(0, None)]
#[case::ring_1(1, None)]
#[case::ring_2(2, Some(Errno::EINVAL))]
#[case::ring_4(4, Some(Errno::EINVAL))]
fn a_context_has_two_dma_rings_on_a_gpu_with_five_engines(
    #[case] ring: u32,
    #[case] want: Option<Errno>,
) {
    let e = env(Preset::mi210x2());
    let r = node(&e, 0);
    let ctx = r.ctx_alloc().unwrap();
    let submitted = r.cs_submit(&IbSubmit {
        ctx,
        bo_list: None,
        ip_type: HW_IP_DMA,
        ring,
        ib_va: 0x55_0000_0000,
        ib_bytes: 32,
    });
    assert_eq!(submitted.err().and_then(|e| e.errno()), want);
}

#[test]
fn cs_refuses_no_chunks_and_unreadable_chunks() {
    let e = env(Preset::mi50x1());
    let r = node(&e, 0);
    r.ctx_alloc().unwrap();
    let mut a = sys::drm_amdgpu_cs::default();
    a.in_ = sys::drm_amdgpu_cs_in {
        ctx_id: 1,
        bo_list_handle: 0,
        num_chunks: 0,
        flags: 0,
        chunks: 0,
    };
    assert_eq!(
        raw(&e.renders[0], codes::AMDGPU_CS, &mut a),
        Err(Errno::EINVAL)
    );
    a.in_.num_chunks = 1;
    a.in_.chunks = 0x10;
    assert_eq!(
        raw(&e.renders[0], codes::AMDGPU_CS, &mut a),
        Err(Errno::EFAULT)
    );
    a.in_.num_chunks = u32::MAX;
    assert_eq!(
        raw(&e.renders[0], codes::AMDGPU_CS, &mut a),
        Err(Errno::ENOMEM)
    );
}

#[test]
fn an_ib_at_an_unmapped_va_fails_its_fence_and_the_context_is_then_guilty() {
    let e = env(Preset::mi50x1());
    let r = node(&e, 0);
    let ctx = r.ctx_alloc().unwrap();
    let seq = r
        .cs_submit(&IbSubmit {
            ctx,
            bo_list: None,
            ip_type: HW_IP_DMA,
            ring: 1,
            ib_va: 0x55_0000_0000,
            ib_bytes: 32,
        })
        .unwrap();
    assert_eq!(seq, 1);
    let deadline = RenderNode::<SimFile>::deadline_in(0);
    assert_eq!(
        errno(r.wait_cs(ctx, HW_IP_DMA, 1, seq, deadline)),
        Some(Errno::ETIME)
    );
    let again = IbSubmit {
        ctx,
        bo_list: None,
        ip_type: HW_IP_DMA,
        ring: 1,
        ib_va: 0x55_0000_0000,
        ib_bytes: 32,
    };
    assert_eq!(errno(r.cs_submit(&again)), Some(Errno::ECANCELED));
    // A fresh context works.
    let mut dma = Sdma::new(&r, VA);
    assert!(dma.run(IbBuilder::new()).unwrap());
}

#[test]
fn faulting_copies_fail_the_fence_and_leave_memory_alone() {
    let e = env(Preset::mi50x1());
    let r = node(&e, 0);
    let ro = r.gem_create(8192, 0, GemDomain::GTT, 0).unwrap();
    r.va_map(ro, VA + 32 * MIB, 0, 8192, VmPageFlags::READABLE)
        .unwrap();
    let dmabuf = std::fs::File::from(r.prime_handle_to_fd(ro).unwrap());
    let src = UserptrBuffer::new(&r, 8192, VA + 64 * MIB).unwrap();
    let cases: [(u64, u64, u64); 3] = [
        (src.va(), VA + 32 * MIB, 16),       // read-only destination
        (src.va(), VA + 32 * MIB + 8190, 4), // ... and past its end
        (VA + 96 * MIB, src.va(), 4),        // unmapped source
    ];
    for (s, d, n) in cases {
        let mut dma = Sdma::new(&r, VA);
        assert_eq!(
            errno(dma.copy(s, d, n)),
            Some(Errno::ETIME),
            "{s:#x} -> {d:#x}"
        );
    }
    let mut bytes = vec![0xffu8; 8192];
    dmabuf.read_exact_at(&mut bytes, 0).unwrap();
    assert!(bytes.iter().all(|&b| b == 0));
}

#[test]
fn wait_cs_errno_and_old_fences() {
    let e = env(Preset::mi50x1());
    let r = node(&e, 0);
    let mut dma = Sdma::new(&r, VA);
    let d = RenderNode::<SimFile>::deadline_in(0);
    assert_eq!(
        errno(r.wait_cs(ContextId(77), HW_IP_DMA, 0, 1, d)),
        Some(Errno::EINVAL)
    );
    assert_eq!(
        errno(r.wait_cs(dma.ctx, HW_IP_DMA, 0, 1, d)),
        Some(Errno::EINVAL),
        "not issued"
    );
    assert_eq!(
        errno(r.wait_cs(dma.ctx, 0, 0, 0, d)),
        Some(Errno::EINVAL),
        "GFX"
    );
    let mut seqs = Vec::new();
    for _ in 0..40 {
        seqs.push(dma.submit(IbBuilder::new()).unwrap());
    }
    assert_eq!(seqs.first(), Some(&1));
    assert_eq!(seqs.last(), Some(&40));
    for s in seqs {
        assert!(r.wait_cs(dma.ctx, HW_IP_DMA, 0, s, d).unwrap());
    }
    assert!(r.wait_cs(dma.ctx, HW_IP_DMA, 0, u64::MAX, d).unwrap());
}

#[test]
fn info_errno() {
    let e = env(Preset::mi50x1());
    let mut out = [0u8; 8];
    let mut a = sys::drm_amdgpu_info {
        return_pointer: out.as_mut_ptr() as u64,
        return_size: 8,
        query: 0x7777,
        __bindgen_anon_1: Default::default(),
    };
    assert_eq!(
        raw(&e.renders[0], codes::AMDGPU_INFO, &mut a),
        Err(Errno::EINVAL)
    );
    a.query = sys::AMDGPU_INFO_DEV_INFO;
    a.return_size = 0;
    assert_eq!(
        raw(&e.renders[0], codes::AMDGPU_INFO, &mut a),
        Err(Errno::EINVAL)
    );
    a.return_size = 8;
    a.return_pointer = 0x10;
    assert_eq!(
        raw(&e.renders[0], codes::AMDGPU_INFO, &mut a),
        Err(Errno::EFAULT)
    );
}

#[test]
fn a_freed_kfd_bo_is_gone_from_the_vm() {
    let e = env(Preset::mi50x1());
    let h = kfd_vram(&e, 0, KFD_VA, MIB);
    let r = node(&e, 0);
    let mut dma = Sdma::new(&r, VA);
    let mut fill = IbBuilder::new();
    fill.const_fill(KFD_VA, 0x5a5a_5a5a, MIB);
    assert!(dma.run(fill).unwrap());
    e.kfd.unmap_memory_from_gpu(h, &[e.gpus[0]]).unwrap();
    e.kfd.free_memory(h).unwrap();
    let mut fill = IbBuilder::new();
    fill.const_fill(KFD_VA, 0, 4);
    assert_eq!(errno(dma.run(fill)), Some(Errno::ETIME));
}

/// BO_LIST with `bo_info_size` other than the driver's entry: shorter entries are read back to
/// back and zero-extended (a 4-byte entry is the handle alone); an empty entry reads nothing
/// and names handle 0, which never exists; longer entries are read by their heads, one stride
/// apart. The entries are read before the operation is looked at.
#[rstest]
#[case::handles_only(4, sys::AMDGPU_BO_LIST_OP_CREATE, Ok(()))]
#[case::longer_entries(12, sys::AMDGPU_BO_LIST_OP_CREATE, Ok(()))]
#[case::empty_entries(0, sys::AMDGPU_BO_LIST_OP_CREATE, Err(Errno::ENOENT))]
#[case::empty_entries_bad_op(0, 7, Err(Errno::EINVAL))]
fn bo_list_entries_of_other_sizes(
    #[case] info_size: u32,
    #[case] op: u32,
    #[case] expected: Result<(), Errno>,
) {
    let e = env(Preset::mi50x1());
    let r = node(&e, 0);
    let a = r.gem_create(4096, 0, GemDomain::GTT, 0).unwrap();
    let b = r.gem_create(4096, 0, GemDomain::GTT, 0).unwrap();
    let stride = info_size.max(4) as usize;
    let mut entries = vec![0u8; 2 * stride];
    if info_size != 0 {
        entries[..4].copy_from_slice(&a.get().to_ne_bytes());
        entries[stride..stride + 4].copy_from_slice(&b.get().to_ne_bytes());
    }
    let mut args = sys::drm_amdgpu_bo_list::default();
    args.in_.operation = op;
    args.in_.bo_number = if info_size == 0 { 1 << 20 } else { 2 };
    args.in_.bo_info_size = info_size;
    args.in_.bo_info_ptr = entries.as_ptr() as u64;
    let got = raw(&e.renders[0], codes::AMDGPU_BO_LIST, &mut args).map(|_| ());
    assert_eq!(got, expected);
}
