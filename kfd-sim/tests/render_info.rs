//! The render node as libdrm_amdgpu meets it: the DRM core ioctls as the kernel answers them on a
//! render node (`drm_ioctl.c`), and the `AMDGPU_INFO` queries of `amdgpu_device_initialize` and
//! `amdgpu_query_*` (`amdgpu_kms.c`), with values true to each preset's GPU.

#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)] // tests panic on failure

mod common;

use common::*;
use kfd_abi::ioctl::{drm as codes, encode, Dir};
use kfd_abi::render::GemDomain;
use kfd_abi::{Errno, IoctlError, RenderNode};
use kfd_sim::{Preset, SimFile};
use kfd_sys as sys;
use rstest::rstest;
use topology::model::keys;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn node(e: &Env, g: usize) -> RenderNode<SimFile> {
    RenderNode::new(
        kfd_abi::Transport::try_clone(&e.renders[g]).unwrap(),
        "renderD (sim)",
    )
}

fn errno<T: std::fmt::Debug>(r: Result<T, IoctlError>) -> Errno {
    r.unwrap_err().errno().unwrap()
}

fn presets() -> [Preset; 4] {
    [
        Preset::mi50x1(),
        Preset::mi100x4(),
        Preset::mi210x2(),
        Preset::mi250x8(),
    ]
}

#[test]
fn version_is_amdgpu_3_49_as_in_linux_6_1() {
    for p in presets() {
        let e = env(p);
        let v = node(&e, 0).version().unwrap();
        assert_eq!((v.major, v.minor, v.patchlevel), (3, 49, 0));
        assert_eq!(v.name, "amdgpu");
        assert_eq!(v.date, "20150101");
        assert_eq!(v.desc, "AMD GPU");
    }
}

#[test]
fn version_copies_at_most_the_callers_lengths_and_reports_the_full_ones() {
    let e = env(Preset::mi210x2());
    let mut name = [0xaau8; 8];
    let mut v = sys::drm_version {
        name_len: 3,
        name: name.as_mut_ptr().cast(),
        ..Default::default()
    };
    raw(&e.renders[0], codes::VERSION, &mut v).unwrap();
    assert_eq!(&name[..4], b"amd\xaa");
    assert_eq!((v.name_len, v.date_len, v.desc_len), (6, 8, 7));
    // A name buffer that cannot be written: EFAULT.
    v.name_len = 6;
    v.name = 0x10 as *mut _;
    assert_eq!(
        raw(&e.renders[0], codes::VERSION, &mut v),
        Err(Errno::EFAULT)
    );
}

#[rstest]
#[case::timestamp_monotonic(sys::DRM_CAP_TIMESTAMP_MONOTONIC, 1)]
#[case::prime(sys::DRM_CAP_PRIME, 3)]
#[case::syncobj(sys::DRM_CAP_SYNCOBJ, 1)]
#[case::syncobj_timeline(sys::DRM_CAP_SYNCOBJ_TIMELINE, 1)]
#[case::dumb_buffer(sys::DRM_CAP_DUMB_BUFFER, 1)]
#[case::preferred_depth(sys::DRM_CAP_DUMB_PREFERRED_DEPTH, 0)]
#[case::cursor_width(sys::DRM_CAP_CURSOR_WIDTH, 64)]
#[case::addfb2_modifiers(sys::DRM_CAP_ADDFB2_MODIFIERS, 1)]
fn get_cap_answers_as_amdgpu_without_display(#[case] cap: u32, #[case] want: u64) {
    let e = env(Preset::mi100x4());
    assert_eq!(node(&e, 0).get_cap(u64::from(cap)).unwrap(), want);
}

#[test]
fn get_cap_of_an_unknown_capability_is_einval() {
    let e = env(Preset::mi100x4());
    assert_eq!(errno(node(&e, 0).get_cap(0x77)), Errno::EINVAL);
}

/// Every core ioctl that is not render-allowed, and amdgpu's master-only one, is refused on a
/// render node with EACCES (drm_ioctl_permit), after its argument was copied in.
#[rstest]
#[case::get_unique(codes::GET_UNIQUE)]
#[case::get_magic(codes::GET_MAGIC)]
#[case::get_client(codes::GET_CLIENT)]
#[case::set_version(codes::SET_VERSION)]
#[case::set_client_cap(codes::SET_CLIENT_CAP)]
#[case::auth_magic(codes::AUTH_MAGIC)]
#[case::amdgpu_sched(codes::AMDGPU_SCHED)]
#[case::gem_flink(encode(Dir::ReadWrite, b'd', 0x0a, 8))]
#[case::mode_getresources(encode(Dir::ReadWrite, b'd', 0xa0, 64))]
#[case::set_master(encode(Dir::None, b'd', 0x1e, 0))]
fn render_nodes_refuse_what_is_not_render_allowed(#[case] cmd: u32) {
    let e = env(Preset::mi210x2());
    let mut buf = [0u8; 64];
    assert_eq!(raw(&e.renders[0], cmd, &mut buf), Err(Errno::EACCES));
}

#[test]
fn the_copy_in_fails_before_the_permission_check() {
    let e = env(Preset::mi210x2());
    // SAFETY: the simulator only accesses the argument through process_vm_readv.
    let r = unsafe { kfd_abi::Transport::ioctl(&e.renders[0], codes::GET_CLIENT, 8 as *mut _) };
    assert_eq!(r, Err(Errno::EFAULT));
}

#[test]
fn set_client_cap_through_the_typed_api_is_eacces() {
    let e = env(Preset::mi50x1());
    let r = node(&e, 0).set_client_cap(u64::from(sys::DRM_CLIENT_CAP_ATOMIC), 1);
    assert_eq!(errno(r), Errno::EACCES);
}

#[rstest]
#[case::syncobj_create(encode(Dir::ReadWrite, b'd', 0xbf, 8))]
#[case::amdgpu_wait_fences(codes::AMDGPU_WAIT_FENCES)]
#[case::amdgpu_vm(codes::AMDGPU_VM)]
#[case::amdgpu_fence_to_handle(codes::AMDGPU_FENCE_TO_HANDLE)]
fn render_allowed_ioctls_the_simulator_does_not_run_are_einval(#[case] cmd: u32) {
    let e = env(Preset::mi210x2());
    let mut buf = [0u8; 64];
    assert_eq!(raw(&e.renders[0], cmd, &mut buf), Err(Errno::EINVAL));
}

// ---- amdgpu_device_initialize ---------------------------------------------------------------

/// What libdrm's `amdgpu_query_gpu_info_init` reads, for each model.
#[rstest]
#[case::mi50(Preset::mi50x1(), 0x66a1, 0x02, 0x28, 4, 60, 0x2a11_4042)]
#[case::mi100(Preset::mi100x4(), 0x738c, 0x01, 0x33, 8, 120, 0x2219_4042)]
#[case::mi210(Preset::mi210x2(), 0x740f, 0x02, 0x3d, 8, 104, 0x2219_4042)]
#[case::mi250x(Preset::mi250x8(), 0x740c, 0x01, 0x3d, 8, 110, 0x2219_4042)]
fn device_initialize_gets_the_models_dev_info(
    #[case] preset: Preset,
    #[case] device: u32,
    #[case] pci_rev: u32,
    #[case] external_rev: u32,
    #[case] engines: u32,
    #[case] cus: u32,
    #[case] gb_addr_config: u32,
) {
    let t = preset.to_topology().unwrap();
    let e = env(preset);
    for (g, n) in t.gpus().enumerate() {
        let r = node(&e, g);
        assert!(r.accel_working().unwrap());
        let d = r.dev_info_raw().unwrap();
        assert_eq!(d.device_id, device);
        assert_eq!(d.pci_rev, pci_rev);
        assert_eq!(d.external_rev, external_rev);
        assert_eq!(d.family, sys::AMDGPU_FAMILY_AI);
        assert_eq!(d.num_shader_engines, engines);
        assert_eq!(d.num_shader_arrays_per_engine, 1);
        assert_eq!(d.cu_active_number, cus);
        assert_eq!(
            u64::from(d.cu_active_number) * n.prop(keys::SIMD_PER_CU),
            n.prop(keys::SIMD_COUNT)
        );
        let bits: u32 = d.cu_bitmap.iter().flatten().map(|b| b.count_ones()).sum();
        assert_eq!(bits, cus);
        assert_eq!(u64::from(d.num_cu_per_sh), n.prop(keys::CU_PER_SIMD_ARRAY));
        assert_eq!(
            d.max_engine_clock,
            n.prop(keys::MAX_ENGINE_CLK_FCOMPUTE) * 1000
        );
        assert_eq!(d.gpu_counter_freq, 100_000);
        assert_eq!(d.vram_type, sys::AMDGPU_VRAM_TYPE_HBM);
        assert_eq!(d.vram_bit_width, 4096);
        assert_eq!(d.wave_front_size, 64);
        assert_eq!(
            (d.virtual_address_offset, d.virtual_address_max),
            (2 * MIB, 1 << 47)
        );
        assert_eq!(d.high_va_offset, 0xffff_8000_0000_0000);
        assert_eq!(
            r.read_mmr_reg(0x263e, 1, 0xffff_ffff).unwrap(),
            [gb_addr_config]
        );
    }
}

#[rstest]
#[case::mi50(Preset::mi50x1(), (9, 4, 0), 1, (4, 2, 0), 1, 0)]
#[case::mi100(Preset::mi100x4(), (9, 4, 1), 0, (4, 2, 2), 0, 1)]
#[case::mi210(Preset::mi210x2(), (9, 4, 2), 0, (4, 4, 0), 0, 1)]
fn hw_ips_are_the_chips(
    #[case] preset: Preset,
    #[case] gc: (u32, u32, u32),
    #[case] gfx_rings: u32,
    #[case] sdma: (u32, u32, u32),
    #[case] uvd: u32,
    #[case] vcn: u32,
) {
    let e = env(preset);
    let r = node(&e, 0);
    let v = |(a, b, c): (u32, u32, u32)| a << 16 | b << 8 | c;
    let gfx = r.hw_ip_info(sys::AMDGPU_HW_IP_GFX, 0).unwrap();
    assert_eq!((gfx.major, gfx.minor), (9, 0));
    assert_eq!(gfx.ip_discovery_version, v(gc));
    assert_eq!(gfx.available_rings, gfx_rings);
    let compute = r.hw_ip_info(sys::AMDGPU_HW_IP_COMPUTE, 0).unwrap();
    assert_eq!(compute.available_rings, 0xf, "4 entities per context");
    assert_eq!(compute.ib_start_alignment, 32);
    let dma = r.hw_ip_info(sys::AMDGPU_HW_IP_DMA, 0).unwrap();
    assert_eq!((dma.major, dma.minor), (4, 0));
    assert_eq!(dma.ip_discovery_version, v(sdma));
    assert_eq!(dma.available_rings, 0x3, "2 entities per context");
    assert_eq!((dma.ib_start_alignment, dma.ib_size_alignment), (256, 4));
    for ty in [
        sys::AMDGPU_HW_IP_GFX,
        sys::AMDGPU_HW_IP_COMPUTE,
        sys::AMDGPU_HW_IP_DMA,
    ] {
        assert_eq!(r.hw_ip_count(ty).unwrap(), 1);
    }
    assert_eq!(r.hw_ip_count(sys::AMDGPU_HW_IP_UVD).unwrap(), uvd);
    assert_eq!(r.hw_ip_count(sys::AMDGPU_HW_IP_VCN_DEC).unwrap(), vcn);
    // An IP the chip lacks: zeros.
    let missing = if uvd == 0 {
        sys::AMDGPU_HW_IP_UVD
    } else {
        sys::AMDGPU_HW_IP_VCN_DEC
    };
    assert_eq!(r.hw_ip_info(missing, 0).unwrap().available_rings, 0);
    assert_eq!(errno(r.hw_ip_info(sys::AMDGPU_HW_IP_DMA, 1)), Errno::EINVAL);
    assert_eq!(errno(r.hw_ip_info(9, 0)), Errno::EINVAL);
    assert_eq!(errno(r.hw_ip_count(9)), Errno::EINVAL);
}

#[rstest]
#[case::mi50(Preset::mi50x1(), 2)]
#[case::mi100(Preset::mi100x4(), 8)]
#[case::mi210(Preset::mi210x2(), 5)]
#[case::mi250x(Preset::mi250x8(), 5)]
fn firmware_versions_agree_with_the_topology(#[case] preset: Preset, #[case] sdma_engines: u32) {
    let t = preset.to_topology().unwrap();
    let n = t.gpus().next().unwrap();
    let e = env(preset);
    let r = node(&e, 0);
    let mec = r
        .firmware_version(sys::AMDGPU_INFO_FW_GFX_MEC, 0, 0)
        .unwrap();
    assert_eq!(u64::from(mec.0), n.prop(keys::FW_VERSION));
    assert_eq!(
        r.firmware_version(sys::AMDGPU_INFO_FW_GFX_MEC, 0, 1)
            .unwrap(),
        mec
    );
    for i in 0..sdma_engines {
        let (ver, _) = r.firmware_version(sys::AMDGPU_INFO_FW_SDMA, 0, i).unwrap();
        assert_eq!(u64::from(ver), n.prop(keys::SDMA_FW_VERSION));
    }
    let past = r.firmware_version(sys::AMDGPU_INFO_FW_SDMA, 0, sdma_engines);
    assert_eq!(errno(past), Errno::EINVAL);
    assert_eq!(
        errno(r.firmware_version(sys::AMDGPU_INFO_FW_GFX_MEC, 0, 2)),
        Errno::EINVAL
    );
    assert_eq!(
        errno(r.firmware_version(sys::AMDGPU_INFO_FW_GFX_MEC, 1, 0)),
        Errno::EINVAL
    );
    assert_eq!(errno(r.firmware_version(0x99, 0, 0)), Errno::EINVAL);
    assert!(r.firmware_version(sys::AMDGPU_INFO_FW_SOS, 0, 0).unwrap().0 != 0);
}

#[test]
fn memory_queries_follow_vram_and_gtt_use() {
    // MI210: 64 GiB of VRAM, large BAR; 512 GiB of RAM, so 256 GiB of GTT.
    let e = env(Preset::mi210x2());
    let r = node(&e, 0);
    let vg = r.vram_gtt().unwrap();
    assert_eq!(vg.vram_size, 64 * GIB - 8 * MIB);
    assert_eq!(vg.vram_cpu_accessible_size, vg.vram_size);
    assert_eq!(vg.gtt_size, 256 * GIB);
    assert_eq!(r.vram_usage().unwrap(), 0);
    let bo = r.gem_create(16 * MIB, 0, GemDomain::VRAM, 0).unwrap();
    assert_eq!(r.vram_usage().unwrap(), 16 * MIB);
    assert_eq!(r.vis_vram_usage().unwrap(), 16 * MIB);
    let gtt = r.gem_create(4 * MIB, 0, GemDomain::GTT, 0).unwrap();
    assert_eq!(r.gtt_usage().unwrap(), 4 * MIB);
    let m = r.memory_info().unwrap();
    assert_eq!(m.vram.total, 64 * GIB);
    assert_eq!(m.vram.usable, 64 * GIB - 8 * MIB);
    assert_eq!(m.vram.usage, 16 * MIB);
    assert_eq!(m.vram.max_allocation, m.vram.usable / 4 * 3);
    assert_eq!(m.gtt.total, 256 * GIB);
    assert_eq!(m.gtt.usage, 4 * MIB);
    // The other GPU's VRAM is untouched.
    assert_eq!(node(&e, 1).vram_usage().unwrap(), 0);
    r.gem_close(bo).unwrap();
    r.gem_close(gtt).unwrap();
    assert_eq!(r.vram_usage().unwrap(), 0);
}

#[test]
fn read_mmr_reg_refuses_what_the_driver_refuses() {
    let e = env(Preset::mi100x4());
    let r = node(&e, 0);
    // Not in soc15_allowed_read_registers: EFAULT.
    assert_eq!(errno(r.read_mmr_reg(0x1234, 1, 0xffff_ffff)), Errno::EFAULT);
    // Too many, or an engine or array past the hardware's: EINVAL.
    assert_eq!(
        errno(r.read_mmr_reg(0x263e, 129, 0xffff_ffff)),
        Errno::EINVAL
    );
    assert_eq!(errno(r.read_mmr_reg(0x263e, 1, 4)), Errno::EINVAL);
    assert_eq!(errno(r.read_mmr_reg(0x263e, 1, 2 << 8)), Errno::EINVAL);
    // An engine that exists.
    assert_eq!(r.read_mmr_reg(0x263e, 1, 0xff << 8 | 3).unwrap().len(), 1);
    // A listed status register: its value is not simulated.
    assert_eq!(errno(r.read_mmr_reg(0x2004, 1, 0xffff_ffff)), Errno::EINVAL);
}

#[test]
fn small_queries_of_an_idle_gpu() {
    let e = env(Preset::mi50x1());
    let t = &e.renders[0];
    let mut v = [0xffu8; 8];
    let mut q = |query: u32, size: u32| {
        let mut a = sys::drm_amdgpu_info {
            return_pointer: v.as_mut_ptr() as u64,
            return_size: size,
            query,
            __bindgen_anon_1: Default::default(),
        };
        raw(t, codes::AMDGPU_INFO, &mut a)
    };
    for query in [
        sys::AMDGPU_INFO_NUM_BYTES_MOVED,
        sys::AMDGPU_INFO_NUM_EVICTIONS,
        sys::AMDGPU_INFO_NUM_VRAM_CPU_PAGE_FAULTS,
        sys::AMDGPU_INFO_VRAM_LOST_COUNTER,
    ] {
        assert_eq!(q(query, 8), Ok(0));
    }
    assert_eq!(q(sys::AMDGPU_INFO_TIMESTAMP, 8), Ok(0));
    // No CRTCs on a board without display hardware.
    assert_eq!(q(sys::AMDGPU_INFO_CRTC_FROM_ID, 4), Err(Errno::EINVAL));
    // Not simulated.
    assert_eq!(q(sys::AMDGPU_INFO_SENSOR, 4), Err(Errno::EINVAL));
    let mut a = sys::drm_amdgpu_info {
        return_pointer: v.as_mut_ptr() as u64,
        return_size: 8,
        query: sys::AMDGPU_INFO_NUM_HANDLES,
        __bindgen_anon_1: Default::default(),
    };
    a.__bindgen_anon_1.query_hw_ip.type_ = sys::AMDGPU_HW_IP_UVD;
    assert_eq!(raw(t, codes::AMDGPU_INFO, &mut a), Err(Errno::ENODATA));
    a.__bindgen_anon_1.query_hw_ip.type_ = sys::AMDGPU_HW_IP_DMA;
    assert_eq!(raw(t, codes::AMDGPU_INFO, &mut a), Err(Errno::EINVAL));
}

#[test]
fn gem_wait_idle_of_a_bo_is_idle_and_of_an_unknown_handle_enoent() {
    let e = env(Preset::mi50x1());
    let r = node(&e, 0);
    let bo = r.gem_create(MIB, 0, GemDomain::GTT, 0).unwrap();
    assert!(!r.gem_wait_idle(bo, u64::MAX).unwrap());
    r.gem_close(bo).unwrap();
    assert_eq!(errno(r.gem_wait_idle(bo, u64::MAX)), Errno::ENOENT);
}
