//! `AMDGPU_INFO` (`amdgpu_info_ioctl`, `amdgpu_kms.c`, 6.1): what libdrm's
//! `amdgpu_device_initialize` and `amdgpu_query_*` ask a render node, answered from the GPU's
//! [`Asic`] and its live memory use, each query copying `min(return_size, sizeof result)` bytes
//! as the driver does.
//!
//! Answered: `ACCEL_WORKING`, `CRTC_FROM_ID` (no CRTCs: `EINVAL`), `HW_IP_INFO`, `HW_IP_COUNT`,
//! `TIMESTAMP`, `FW_VERSION`, `NUM_BYTES_MOVED`, `NUM_EVICTIONS`, `NUM_VRAM_CPU_PAGE_FAULTS`,
//! `VRAM_USAGE`, `VIS_VRAM_USAGE`, `GTT_USAGE`, `GDS_CONFIG`, `VRAM_GTT`, `MEMORY`,
//! `READ_MMR_REG` (`GB_ADDR_CONFIG`; offsets outside the driver's list `EFAULT`),
//! `DEV_INFO`, `NUM_HANDLES`, `VRAM_LOST_COUNTER`. Not simulated (logged once, `EINVAL`):
//! `VCE_CLOCK_TABLE`, `VBIOS`, `SENSOR`, `RAS_ENABLED_FEATURES`, `VIDEO_CAPS`, and the
//! status registers of the `READ_MMR_REG` list, whose idle values the simulator does not know.

use std::mem::{offset_of, size_of};

use kfd_abi::Errno;
use kfd_sys as sys;

use super::vm::va;
use super::RenderCall;
use crate::asic::{self, Asic};
use crate::host::clock_ns;
use crate::host::lock;
use crate::limits::PAGE_SIZE;
use crate::uaccess::{copy_to_user, get_u32, get_u64, put_u32, put_u64, IoctlResult};

/// `AMDGPU_VM_RESERVED_VRAM`: VRAM the driver keeps for its page tables.
const VM_RESERVED_VRAM: u64 = 8 << 20;
/// `AMDGPU_GFX_MAX_SE` and `AMDGPU_GFX_MAX_SH_PER_SE`.
const MAX_SE: u32 = 4;
const MAX_SH_PER_SE: u32 = 2;
/// `amdgpu_ctx_num_entities[]`: the rings a context may use per IP type.
const CTX_NUM_ENTITIES: [u32; 9] = [1, 4, 2, 1, 1, 1, 1, 1, 1];
/// Compute rings the driver brings up (`amdgpu_num_kcq`, default 8).
const COMPUTE_RINGS: u32 = 8;
/// `mmGB_ADDR_CONFIG` as userspace addresses it (GC segment 0 base 0x2000 + 0x63e).
pub(super) const MM_GB_ADDR_CONFIG: u32 = 0x263e;
/// The other registers of `soc15_allowed_read_registers` (GC segment 0 base 0x2000; SDMA0 and
/// SDMA1 `STATUS_REG` at their blocks' bases): their values depend on what the GPU is doing.
const STATUS_REGS: &[u32] = &[
    0x2004, // GRBM_STATUS
    0x2002, // GRBM_STATUS2
    0x2005, // GRBM_STATUS_SE0
    0x2006, // GRBM_STATUS_SE1
    0x200e, // GRBM_STATUS_SE2
    0x200f, // GRBM_STATUS_SE3
    0x1265, // SDMA0_STATUS_REG
    0x1865, // SDMA1_STATUS_REG
    0x21a0, // CP_STAT
    0x219d, // CP_STALLED_STAT1
    0x219e, // CP_STALLED_STAT2
    0x219c, // CP_STALLED_STAT3
    0x21a3, // CP_CPF_BUSY_STAT
    0x21a4, // CP_CPF_STALLED_STAT1
    0x21a2, // CP_CPF_STATUS
    0x21a6, // CP_CPC_BUSY_STAT
    0x21a7, // CP_CPC_STALLED_STAT1
    0x21a5, // CP_CPC_STATUS
    0x260c, // DB_DEBUG2
];

/// Copies `min(size, bytes.len())` bytes to the query's return pointer.
fn reply(call: &RenderCall<'_>, ptr: u64, size: u32, bytes: &[u8]) -> IoctlResult {
    let n = (size as usize).min(bytes.len());
    copy_to_user(call.client, ptr, &bytes[..n])?;
    Ok(0)
}

/// A zeroed buffer the size of `T`.
fn buf<T>() -> Vec<u8> {
    vec![0u8; size_of::<T>()]
}

/// `amdgpu_info_ioctl`: a zero `return_size` or `return_pointer` `EINVAL`; then the query.
pub(super) fn info(call: &RenderCall<'_>, kdata: &mut [u8]) -> IoctlResult {
    use sys::drm_amdgpu_info as A;
    let ptr = get_u64(kdata, offset_of!(A, return_pointer));
    let size = get_u32(kdata, offset_of!(A, return_size));
    let query = get_u32(kdata, offset_of!(A, query));
    // The union after `query`: its first two u32s are (type, ip_instance), (fw_type,
    // ip_instance), (dword_offset, count) or the crtc/vbios/sensor/video type.
    let arg0 = get_u32(kdata, offset_of!(A, __bindgen_anon_1));
    let arg1 = get_u32(kdata, offset_of!(A, __bindgen_anon_1) + 4);
    let arg2 = get_u32(kdata, offset_of!(A, __bindgen_anon_1) + 8);
    let arg3 = get_u32(kdata, offset_of!(A, __bindgen_anon_1) + 12);
    if size == 0 || ptr == 0 {
        return Err(Errno::EINVAL);
    }
    let dev = call
        .machine
        .devices
        .get(call.file.device)
        .ok_or(Errno::EINVAL)?;
    let node = call.machine.topology.gpu(dev.gpu_id).ok_or(Errno::EINVAL)?;
    let asic = Asic::of_node(node);
    let u32_reply = |v: u32| reply(call, ptr, size, &v.to_le_bytes());
    let u64_reply = |v: u64| reply(call, ptr, size, &v.to_le_bytes());
    match query {
        sys::AMDGPU_INFO_ACCEL_WORKING => u32_reply(1),
        // A board without display hardware has no CRTC.
        sys::AMDGPU_INFO_CRTC_FROM_ID => Err(Errno::EINVAL),
        sys::AMDGPU_INFO_HW_IP_INFO => {
            let out = hw_ip_info(&asic, arg0, arg1)?;
            reply(call, ptr, size, &out)
        }
        sys::AMDGPU_INFO_HW_IP_COUNT => u32_reply(hw_ip_count(&asic, arg0)?),
        // The gfx9 GPU clock counter runs at 100 MHz (as GET_CLOCK_COUNTERS reports it).
        sys::AMDGPU_INFO_TIMESTAMP => u64_reply(clock_ns(libc::CLOCK_MONOTONIC_RAW) / 10),
        sys::AMDGPU_INFO_FW_VERSION => {
            // "We only support one instance of each IP block right now."
            if arg1 != 0 {
                return Err(Errno::EINVAL);
            }
            let (ver, feature) = firmware(&asic, arg0, arg2)?;
            let mut out = buf::<sys::drm_amdgpu_info_firmware>();
            put_u32(
                &mut out,
                offset_of!(sys::drm_amdgpu_info_firmware, ver),
                ver,
            );
            put_u32(
                &mut out,
                offset_of!(sys::drm_amdgpu_info_firmware, feature),
                feature,
            );
            reply(call, ptr, size, &out)
        }
        sys::AMDGPU_INFO_NUM_BYTES_MOVED
        | sys::AMDGPU_INFO_NUM_EVICTIONS
        | sys::AMDGPU_INFO_NUM_VRAM_CPU_PAGE_FAULTS => u64_reply(0),
        sys::AMDGPU_INFO_VRAM_USAGE => u64_reply(lock(&dev.state).vram_used),
        sys::AMDGPU_INFO_VIS_VRAM_USAGE => {
            let used = lock(&dev.state).vram_used;
            u64_reply(used.min(asic.visible_vram_size()))
        }
        sys::AMDGPU_INFO_GTT_USAGE => u64_reply(call.machine.system_used()),
        sys::AMDGPU_INFO_GDS_CONFIG => {
            // The chip's GDS, 64 GWS and 16 OA (gfx_v9_0_set_gds_init), all for compute.
            use sys::drm_amdgpu_info_gds as G;
            let mut out = buf::<G>();
            put_u32(
                &mut out,
                offset_of!(G, compute_partition_size),
                asic.gds_size,
            );
            put_u32(&mut out, offset_of!(G, gds_total_size), asic.gds_size);
            put_u32(&mut out, offset_of!(G, gws_per_compute_partition), 64);
            put_u32(&mut out, offset_of!(G, oa_per_compute_partition), 16);
            reply(call, ptr, size, &out)
        }
        sys::AMDGPU_INFO_VRAM_GTT => {
            use sys::drm_amdgpu_info_vram_gtt as V;
            let usable = asic.vram_size.saturating_sub(VM_RESERVED_VRAM);
            let mut out = buf::<V>();
            put_u64(&mut out, offset_of!(V, vram_size), usable);
            put_u64(
                &mut out,
                offset_of!(V, vram_cpu_accessible_size),
                asic.visible_vram_size().min(usable),
            );
            put_u64(&mut out, offset_of!(V, gtt_size), call.machine.gtt_size());
            reply(call, ptr, size, &out)
        }
        sys::AMDGPU_INFO_MEMORY => {
            let used = lock(&dev.state).vram_used;
            let out = memory_info(
                &asic,
                used,
                call.machine.gtt_size(),
                call.machine.system_used(),
            );
            reply(call, ptr, size, &out)
        }
        sys::AMDGPU_INFO_READ_MMR_REG => {
            let regs = read_mmr_reg(call, &asic, arg0, arg1, arg2)?;
            let _ = arg3; // the flags, unused by the driver
            reply(call, ptr, size, &regs)
        }
        sys::AMDGPU_INFO_DEV_INFO => reply(call, ptr, size, &dev_info(&asic)),
        sys::AMDGPU_INFO_NUM_HANDLES => {
            // UVD: unlimited handles since Polaris (ENODATA); other IPs EINVAL.
            if arg0 == sys::AMDGPU_HW_IP_UVD {
                Err(Errno::ENODATA)
            } else {
                Err(Errno::EINVAL)
            }
        }
        sys::AMDGPU_INFO_VRAM_LOST_COUNTER => u32_reply(0),
        sys::AMDGPU_INFO_VCE_CLOCK_TABLE
        | sys::AMDGPU_INFO_VBIOS
        | sys::AMDGPU_INFO_SENSOR
        | sys::AMDGPU_INFO_RAS_ENABLED_FEATURES
        | sys::AMDGPU_INFO_VIDEO_CAPS => {
            call.machine
                .unanswered(&format!("AMDGPU_INFO query {}", query_name(query)));
            Err(Errno::EINVAL)
        }
        _ => {
            // amdgpu_info_ioctl's default: "Invalid request", EINVAL.
            call.machine.log_once(
                &format!("AMDGPU_INFO query {query:#x}"),
                &format!("AMDGPU_INFO query {query:#x}: not a 6.1 query, EINVAL as 6.1 answers"),
            );
            Err(Errno::EINVAL)
        }
    }
}

/// The name of an `AMDGPU_INFO_*` query the simulator does not answer.
fn query_name(q: u32) -> &'static str {
    match q {
        sys::AMDGPU_INFO_VCE_CLOCK_TABLE => "VCE_CLOCK_TABLE",
        sys::AMDGPU_INFO_VBIOS => "VBIOS",
        sys::AMDGPU_INFO_SENSOR => "SENSOR",
        sys::AMDGPU_INFO_RAS_ENABLED_FEATURES => "RAS_ENABLED_FEATURES",
        sys::AMDGPU_INFO_VIDEO_CAPS => "VIDEO_CAPS",
        _ => "unknown",
    }
}

/// An IP block as `AMDGPU_INFO_HW_IP_INFO` describes it.
struct IpBlock {
    /// The driver block's `(major, minor)`.
    block: (u32, u32),
    /// The discovered IP version, packed.
    discovery: u32,
    /// Rings up.
    rings: u32,
    /// IB start and size alignments.
    align: (u32, u32),
}

/// The IP block serving a `AMDGPU_HW_IP_*` type, if the chip has one.
fn ip_block(a: &Asic, ty: u32) -> Result<Option<IpBlock>, Errno> {
    let block = |block: (u32, u32), discovery: u32, rings: u32, align: (u32, u32)| IpBlock {
        block,
        discovery,
        rings,
        align,
    };
    let media = |m: Option<asic::MediaBlock>, rings: u32, start: u32, size: u32| {
        m.map(|m| block(m.block, m.ip.packed(), rings, (start, size)))
    };
    Ok(match ty {
        sys::AMDGPU_HW_IP_GFX => Some(block(
            (9, 0),
            a.gc.packed(),
            u32::from(a.has_gfx_ring),
            (32, 32),
        )),
        sys::AMDGPU_HW_IP_COMPUTE => Some(block((9, 0), a.gc.packed(), COMPUTE_RINGS, (32, 32))),
        sys::AMDGPU_HW_IP_DMA => Some(block((4, 0), a.sdma.packed(), a.sdma_instances, (256, 4))),
        // Vega 20: two UVD instances with two encode rings each, VCE with three rings.
        sys::AMDGPU_HW_IP_UVD => media(a.uvd, 2, 64, 64),
        sys::AMDGPU_HW_IP_UVD_ENC => media(a.uvd, 4, 64, 64),
        sys::AMDGPU_HW_IP_VCE => media(a.vce, 3, 4, 1),
        // Arcturus and Aldebaran: two VCN instances (decode, two encode rings each) and JPEG.
        sys::AMDGPU_HW_IP_VCN_DEC => media(a.vcn, 2, 16, 16),
        sys::AMDGPU_HW_IP_VCN_ENC => media(a.vcn, 4, 64, 1),
        sys::AMDGPU_HW_IP_VCN_JPEG => media(a.jpeg, 2, 16, 16),
        _ => return Err(Errno::EINVAL),
    })
}

/// `amdgpu_hw_ip_info`: an instance past `AMDGPU_HW_IP_INSTANCE_MAX_COUNT` or an unknown type
/// `EINVAL`; an IP the chip lacks answers zeros; the rings a context may use are capped by
/// `amdgpu_ctx_num_entities`.
fn hw_ip_info(a: &Asic, ty: u32, instance: u32) -> Result<Vec<u8>, Errno> {
    use sys::drm_amdgpu_info_hw_ip as H;
    if instance >= sys::AMDGPU_HW_IP_INSTANCE_MAX_COUNT {
        return Err(Errno::EINVAL);
    }
    let mut out = buf::<H>();
    let Some(b) = ip_block(a, ty)? else {
        return Ok(out);
    };
    let entities = CTX_NUM_ENTITIES.get(ty as usize).copied().unwrap_or(0);
    let rings = b.rings.min(entities);
    let discovery = b.discovery;
    put_u32(&mut out, offset_of!(H, hw_ip_version_major), b.block.0);
    put_u32(&mut out, offset_of!(H, hw_ip_version_minor), b.block.1);
    put_u64(&mut out, offset_of!(H, capabilities_flags), 0);
    put_u32(&mut out, offset_of!(H, ib_start_alignment), b.align.0);
    put_u32(&mut out, offset_of!(H, ib_size_alignment), b.align.1);
    put_u32(
        &mut out,
        offset_of!(H, available_rings),
        (1u32 << rings) - 1,
    );
    // 6.1's uapi names the last u32 `ip_discovery_version`; libdrm 2.4.114's header (the
    // bindings') still calls it `_pad`.
    put_u32(&mut out, offset_of!(H, _pad), discovery);
    Ok(out)
}

/// `AMDGPU_INFO_HW_IP_COUNT`: how many IP blocks of the type's kind the chip has (one or none);
/// an unknown type `EINVAL`.
fn hw_ip_count(a: &Asic, ty: u32) -> Result<u32, Errno> {
    Ok(u32::from(ip_block(a, ty)?.is_some()))
}

/// `amdgpu_firmware_info`: `(ver, feature)` of a firmware type; an unknown type, a MEC index
/// past 1, an SDMA index past the engines or an unknown TA type `EINVAL`.
fn firmware(a: &Asic, fw_type: u32, index: u32) -> Result<(u32, u32), Errno> {
    let f = &a.firmware;
    let cp = |ver: u32| (ver, if ver == 0 { 0 } else { f.cp_feature });
    Ok(match fw_type {
        sys::AMDGPU_INFO_FW_VCE => (f.vce, 0),
        sys::AMDGPU_INFO_FW_UVD => (f.uvd, 0),
        sys::AMDGPU_INFO_FW_VCN => (f.vcn, 0),
        sys::AMDGPU_INFO_FW_GMC => (0, 0),
        sys::AMDGPU_INFO_FW_GFX_ME => cp(f.me),
        sys::AMDGPU_INFO_FW_GFX_PFP => cp(f.pfp),
        sys::AMDGPU_INFO_FW_GFX_CE => cp(f.ce),
        sys::AMDGPU_INFO_FW_GFX_RLC => (f.rlc, 1),
        sys::AMDGPU_INFO_FW_GFX_RLC_RESTORE_LIST_CNTL
        | sys::AMDGPU_INFO_FW_GFX_RLC_RESTORE_LIST_GPM_MEM
        | sys::AMDGPU_INFO_FW_GFX_RLC_RESTORE_LIST_SRM_MEM => (f.rlc_srl, f.rlc_srl),
        sys::AMDGPU_INFO_FW_GFX_MEC => match index {
            0 | 1 => cp(a.mec_fw),
            _ => return Err(Errno::EINVAL),
        },
        sys::AMDGPU_INFO_FW_SMC => (f.smc, 0),
        sys::AMDGPU_INFO_FW_TA => match index {
            // TA_FW_TYPE_PSP_XGMI 1, _RAS 2; HDCP, DTM, RAP, SECUREDISPLAY are not loaded on
            // these boards.
            1 => (f.ta_xgmi, 0),
            2 => (f.ta_ras, 0),
            3..=6 => (0, 0),
            _ => return Err(Errno::EINVAL),
        },
        sys::AMDGPU_INFO_FW_SDMA => {
            if index >= a.sdma_instances {
                return Err(Errno::EINVAL);
            }
            (a.sdma_fw, 0)
        }
        sys::AMDGPU_INFO_FW_SOS => (f.sos, 0),
        sys::AMDGPU_INFO_FW_ASD => (f.asd, 0),
        // DMCU, DMCUB (display), TOC, CAP, RLCP, RLCV, MES_KIQ, MES, IMU: not on these chips.
        sys::AMDGPU_INFO_FW_DMCU | sys::AMDGPU_INFO_FW_DMCUB | sys::AMDGPU_INFO_FW_TOC => (0, 0),
        22..=27 => (0, 0),
        _ => return Err(Errno::EINVAL),
    })
}

/// `AMDGPU_INFO_MEMORY`: VRAM (less what the VM keeps), its CPU-visible part and GTT, each with
/// its use and the driver's largest single allocation (three quarters of what is usable).
fn memory_info(a: &Asic, vram_used: u64, gtt_size: u64, gtt_used: u64) -> Vec<u8> {
    use sys::drm_amdgpu_heap_info as H;
    use sys::drm_amdgpu_memory_info as M;
    let mut out = buf::<M>();
    let heap = |out: &mut Vec<u8>, at: usize, total: u64, usable: u64, used: u64| {
        put_u64(out, at + offset_of!(H, total_heap_size), total);
        put_u64(out, at + offset_of!(H, usable_heap_size), usable);
        put_u64(out, at + offset_of!(H, heap_usage), used);
        put_u64(out, at + offset_of!(H, max_allocation), usable / 4 * 3);
    };
    let usable = a.vram_size.saturating_sub(VM_RESERVED_VRAM);
    heap(
        &mut out,
        offset_of!(M, vram),
        a.vram_size,
        usable,
        vram_used,
    );
    let visible = a.visible_vram_size();
    heap(
        &mut out,
        offset_of!(M, cpu_accessible_vram),
        visible,
        visible.min(usable),
        vram_used.min(visible),
    );
    heap(&mut out, offset_of!(M, gtt), gtt_size, gtt_size, gtt_used);
    out
}

/// `AMDGPU_INFO_READ_MMR_REG` (`soc15_read_register`): an SE or SH index past the hardware's
/// (other than all ones) `EINVAL`; more than 128 registers `EINVAL`; a register outside the
/// driver's list `EFAULT`. `GB_ADDR_CONFIG` is the value the driver keeps.
fn read_mmr_reg(
    call: &RenderCall<'_>,
    a: &Asic,
    offset: u32,
    count: u32,
    instance: u32,
) -> Result<Vec<u8>, Errno> {
    let se = (instance >> sys::AMDGPU_INFO_MMR_SE_INDEX_SHIFT) & sys::AMDGPU_INFO_MMR_SE_INDEX_MASK;
    let sh = (instance >> sys::AMDGPU_INFO_MMR_SH_INDEX_SHIFT) & sys::AMDGPU_INFO_MMR_SH_INDEX_MASK;
    if se != sys::AMDGPU_INFO_MMR_SE_INDEX_MASK && se >= MAX_SE {
        return Err(Errno::EINVAL);
    }
    if sh != sys::AMDGPU_INFO_MMR_SH_INDEX_MASK && sh >= MAX_SH_PER_SE {
        return Err(Errno::EINVAL);
    }
    if count > 128 {
        return Err(Errno::EINVAL);
    }
    let mut out = Vec::with_capacity(count as usize * 4);
    for i in 0..count {
        let reg = offset.wrapping_add(i);
        let v = if reg == MM_GB_ADDR_CONFIG {
            a.gb_addr_config
        } else if STATUS_REGS.contains(&reg) {
            call.machine.unanswered(&format!(
                "AMDGPU_INFO READ_MMR_REG of status register {reg:#x}"
            ));
            return Err(Errno::EINVAL);
        } else {
            log::debug!("kfd-sim: READ_MMR_REG of unlisted register {reg:#x}");
            return Err(Errno::EFAULT);
        };
        out.extend_from_slice(&v.to_le_bytes());
    }
    Ok(out)
}

/// `AMDGPU_INFO_DEV_INFO` of a gfx9 GPU.
fn dev_info(a: &Asic) -> Vec<u8> {
    use sys::drm_amdgpu_info_device as D;
    let mut d = buf::<D>();
    let p32 = |d: &mut Vec<u8>, at: usize, v: u32| put_u32(d, at, v);
    p32(&mut d, offset_of!(D, device_id), u32::from(a.device_id));
    p32(&mut d, offset_of!(D, chip_rev), a.rev_id);
    p32(&mut d, offset_of!(D, external_rev), a.external_rev_id);
    p32(&mut d, offset_of!(D, pci_rev), u32::from(a.pci_revision));
    p32(&mut d, offset_of!(D, family), sys::AMDGPU_FAMILY_AI);
    p32(&mut d, offset_of!(D, num_shader_engines), a.shader_engines);
    p32(
        &mut d,
        offset_of!(D, num_shader_arrays_per_engine),
        a.sh_per_se,
    );
    p32(
        &mut d,
        offset_of!(D, gpu_counter_freq),
        asic::GPU_COUNTER_FREQ_KHZ,
    );
    // Clocks in kHz.
    put_u64(
        &mut d,
        offset_of!(D, max_engine_clock),
        u64::from(a.max_sclk_mhz) * 1000,
    );
    put_u64(
        &mut d,
        offset_of!(D, max_memory_clock),
        u64::from(a.max_mclk_mhz) * 1000,
    );
    p32(&mut d, offset_of!(D, cu_active_number), a.active_cus);
    p32(&mut d, offset_of!(D, cu_ao_mask), a.cu_ao_mask());
    let bitmap = a.cu_bitmap();
    for (i, row) in bitmap.iter().enumerate() {
        for (j, &b) in row.iter().enumerate() {
            let cell = (i * 4 + j) * 4;
            p32(&mut d, offset_of!(D, cu_bitmap) + cell, b);
            p32(&mut d, offset_of!(D, cu_ao_bitmap) + cell, b);
        }
    }
    let rbs = a.rb_per_se * a.shader_engines;
    let rb_mask = if rbs >= 32 {
        u32::MAX
    } else {
        (1u32 << rbs) - 1
    };
    p32(&mut d, offset_of!(D, enabled_rb_pipes_mask), rb_mask);
    p32(&mut d, offset_of!(D, num_rb_pipes), rbs);
    p32(
        &mut d,
        offset_of!(D, num_hw_gfx_contexts),
        asic::MAX_HW_CONTEXTS,
    );
    put_u64(&mut d, offset_of!(D, ids_flags), 0);
    let vm_size = va::VM_SIZE - va::RESERVED;
    put_u64(&mut d, offset_of!(D, virtual_address_offset), va::RESERVED);
    put_u64(
        &mut d,
        offset_of!(D, virtual_address_max),
        vm_size.min(va::HOLE_START),
    );
    #[allow(clippy::cast_possible_truncation)] // 4 KiB
    let page = PAGE_SIZE as u32;
    p32(&mut d, offset_of!(D, virtual_address_alignment), page);
    // vm_manager.fragment_size 9: 2 MiB fragments.
    p32(&mut d, offset_of!(D, pte_fragment_size), 2 << 20);
    p32(&mut d, offset_of!(D, gart_page_size), page);
    p32(&mut d, offset_of!(D, ce_ram_size), asic::CE_RAM_SIZE);
    p32(&mut d, offset_of!(D, vram_type), asic::VRAM_TYPE_HBM);
    p32(&mut d, offset_of!(D, vram_bit_width), a.vram_bit_width);
    p32(&mut d, offset_of!(D, vce_harvest_config), 0);
    p32(&mut d, offset_of!(D, gc_double_offchip_lds_buf), 1);
    p32(&mut d, offset_of!(D, wave_front_size), 64);
    p32(
        &mut d,
        offset_of!(D, num_shader_visible_vgprs),
        asic::MAX_GPRS,
    );
    p32(&mut d, offset_of!(D, num_cu_per_sh), a.cu_per_sh);
    p32(
        &mut d,
        offset_of!(D, num_tcc_blocks),
        asic::TEXTURE_CHANNEL_CACHES,
    );
    let (table, prim, waves) = asic::GS_SIZES;
    p32(&mut d, offset_of!(D, gs_vgt_table_depth), table);
    p32(&mut d, offset_of!(D, gs_prim_buffer_depth), prim);
    p32(&mut d, offset_of!(D, max_gs_waves_per_vgt), waves);
    put_u64(&mut d, offset_of!(D, high_va_offset), va::HOLE_END);
    put_u64(&mut d, offset_of!(D, high_va_max), va::HOLE_END | vm_size);
    put_u64(&mut d, offset_of!(D, tcc_disabled_mask), 0);
    d
}
