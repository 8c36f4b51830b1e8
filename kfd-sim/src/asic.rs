//! What the amdgpu driver knows about a simulated GPU beyond its KFD topology node: the PCI
//! identity (revision, subsystem ids, class), the chip's IP versions, firmware versions, clocks,
//! memory and shader-array layout. The render node's `AMDGPU_INFO` answers and the PCI/DRM sysfs
//! entries are both built from one [`Asic`], so they always agree with each other and with the
//! KFD topology (compute units, shader engines, engine clock, MEC/SDMA firmware and memory clock
//! are read from the topology node, not repeated here).
//!
//! Sources of the per-chip facts, which the driver source does not hold (they come from the
//! board's VBIOS, IP discovery table or `gpu_info` firmware):
//!
//! - PCI device, revision and subsystem ids: the `initializing kernel modesetting (CHIP
//!   0xVVVV:0xDDDD 0xSSSS:0xssss 0xRR)` lines amdgpu prints at probe, as posted in public bug
//!   reports (MI50 `VEGA20 1002:66A1 1002:0834 02`, MI100 `ARCTURUS 1002:738C 1002:0C34 01`,
//!   MI210 `ALDEBARAN 1002:740F 1002:0C34 02`), and libdrm's `amdgpu.ids` (MI250X/MI250 `740C`
//!   revision `01`). The MI250X subsystem id (`0x0b0c`, the OAM module) is as `rocm-smi`
//!   reports it; no probe line was found to confirm it.
//! - IP versions: `amdgpu_discovery_set_ip_versions` (VEGA20 GC 9.4.0, SDMA 4.2.0, UVD 7.2.0,
//!   VCE 4.1.0; ARCTURUS GC 9.4.1, SDMA 4.2.2, VCN 2.5.0; ALDEBARAN GC 9.4.2, SDMA 4.4.0,
//!   VCN 2.6.0) and the external revision offsets of `soc15_common_early_init` (0x28, 0x32,
//!   0x3c).
//! - Firmware versions other than MEC and SDMA (which are the topology's `fw_version` and
//!   `sdma_fw_version`): public `rocm-smi --showfwinfo` reports of an MI100 (RLC 24, SMC
//!   00.54.29.00, SOS 0x0017004f, TA RAS 27.00.01.62, TA XGMI 32.00.00.17, VCN 0x01101015) and an
//!   MI200 GCD (RLC 17, SMC 00.68.56.00, SOS 0x0027007f, TA RAS 27.00.01.60, TA XGMI
//!   32.00.00.13, VCN 0x0110101b). The Vega20 values are representative, not measured.
//! - Shader-array and geometry-pipe sizes (GPRs, texture channel caches, GS table depths):
//!   representative gfx9 values; the driver reads them from the `gpu_info` firmware.

use topology::model::{keys, Node};

/// The chip behind a GPU model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Chip {
    /// Vega 20 (gfx906): MI50, MI60.
    Vega20,
    /// Arcturus (gfx908): MI100.
    Arcturus,
    /// Aldebaran (gfx90a): MI210, MI250, MI250X.
    Aldebaran,
}

impl Chip {
    /// The chip of a gfx9 `gfx_target_version`, for GPUs whose device id is not in the table.
    fn from_gfx_target_version(v: u64) -> Self {
        match v {
            90008 => Chip::Arcturus,
            90010 => Chip::Aldebaran,
            _ => Chip::Vega20,
        }
    }
}

/// An IP version `(major, minor, revision)`, as `IP_VERSION()` packs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IpVersion(pub(crate) u8, pub(crate) u8, pub(crate) u8);

impl IpVersion {
    /// `IP_VERSION(maj, min, rev)`: `maj << 16 | min << 8 | rev`.
    pub(crate) fn packed(self) -> u32 {
        u32::from(self.0) << 16 | u32::from(self.1) << 8 | u32::from(self.2)
    }
}

/// A multimedia IP block of the chip (decode/encode engines): the driver block's version, the
/// discovered IP version, and its ring layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MediaBlock {
    /// The driver IP block's `major.minor` (`amdgpu_ip_block_version`).
    pub(crate) block: (u32, u32),
    /// The discovered IP version of the hardware.
    pub(crate) ip: IpVersion,
}

/// Firmware versions as `AMDGPU_INFO_FW_VERSION` reports them (`ver`; `feature` where nonzero).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Firmware {
    /// ME (graphics ring micro engine); 0 on chips without a graphics ring.
    pub(crate) me: u32,
    /// PFP (prefetch parser); 0 on chips without a graphics ring.
    pub(crate) pfp: u32,
    /// CE (constant engine); 0 on chips without a graphics ring.
    pub(crate) ce: u32,
    /// RLC.
    pub(crate) rlc: u32,
    /// RLC save/restore lists (SRLC, SRLG, SRLS).
    pub(crate) rlc_srl: u32,
    /// SMU firmware.
    pub(crate) smc: u32,
    /// PSP secure OS.
    pub(crate) sos: u32,
    /// PSP ASD.
    pub(crate) asd: u32,
    /// TA XGMI.
    pub(crate) ta_xgmi: u32,
    /// TA RAS.
    pub(crate) ta_ras: u32,
    /// UVD.
    pub(crate) uvd: u32,
    /// VCE.
    pub(crate) vce: u32,
    /// VCN.
    pub(crate) vcn: u32,
    /// Feature version of the CP microcode (ME, PFP, CE, MEC).
    pub(crate) cp_feature: u32,
}

/// The driver's view of one simulated GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Asic {
    /// The chip.
    pub(crate) chip: Chip,
    /// PCI vendor id.
    pub(crate) vendor_id: u16,
    /// PCI device id.
    pub(crate) device_id: u16,
    /// PCI revision id.
    pub(crate) pci_revision: u8,
    /// PCI subsystem vendor id.
    pub(crate) subsystem_vendor: u16,
    /// PCI subsystem device id.
    pub(crate) subsystem_device: u16,
    /// PCI class code (`0x038000`: display controller, other).
    pub(crate) pci_class: u32,
    /// The product name libdrm's `amdgpu.ids` gives this device and revision.
    pub(crate) marketing_name: &'static str,
    /// `adev->rev_id` (the die revision; `chip_rev` of DEV_INFO).
    pub(crate) rev_id: u32,
    /// `adev->external_rev_id`.
    pub(crate) external_rev_id: u32,
    /// GC (graphics and compute) IP version.
    pub(crate) gc: IpVersion,
    /// SDMA IP version.
    pub(crate) sdma: IpVersion,
    /// SDMA engines (`adev->sdma.num_instances`): the topology's PCIe and xGMI engines.
    pub(crate) sdma_instances: u32,
    /// Whether the chip has a graphics ring (Vega 20 does; the compute-only chips do not).
    pub(crate) has_gfx_ring: bool,
    /// UVD (Vega 20 only).
    pub(crate) uvd: Option<MediaBlock>,
    /// VCE (Vega 20 only).
    pub(crate) vce: Option<MediaBlock>,
    /// VCN (Arcturus, Aldebaran).
    pub(crate) vcn: Option<MediaBlock>,
    /// JPEG (Arcturus, Aldebaran).
    pub(crate) jpeg: Option<MediaBlock>,
    /// Shader engines.
    pub(crate) shader_engines: u32,
    /// Shader arrays per engine.
    pub(crate) sh_per_se: u32,
    /// CU slots per shader array (`max_cu_per_sh`).
    pub(crate) cu_per_sh: u32,
    /// Active compute units.
    pub(crate) active_cus: u32,
    /// Render backends per shader engine.
    pub(crate) rb_per_se: u32,
    /// `GB_ADDR_CONFIG` as `gfx_v9_0_gpu_early_init` leaves it.
    pub(crate) gb_addr_config: u32,
    /// Highest engine clock, MHz.
    pub(crate) max_sclk_mhz: u32,
    /// Highest memory clock, MHz.
    pub(crate) max_mclk_mhz: u32,
    /// VRAM bus width in bits.
    pub(crate) vram_bit_width: u32,
    /// VRAM size in bytes.
    pub(crate) vram_size: u64,
    /// Whether the whole VRAM is CPU-visible through the BAR (large BAR).
    pub(crate) large_bar: bool,
    /// Global data share bytes (`gfx_v9_0_set_gds_init`: Vega 20 64 KiB, Arcturus 4 KiB,
    /// Aldebaran none).
    pub(crate) gds_size: u32,
    /// Firmware versions.
    pub(crate) firmware: Firmware,
    /// MEC firmware (the topology's `fw_version`).
    pub(crate) mec_fw: u32,
    /// SDMA firmware (the topology's `sdma_fw_version`), the same on every engine.
    pub(crate) sdma_fw: u32,
}

/// `AMDGPU_VRAM_TYPE_HBM`: every simulated GPU has HBM.
pub(crate) const VRAM_TYPE_HBM: u32 = 6;
/// The PCI vendor id of AMD/ATI.
pub(crate) const VENDOR_AMD: u16 = 0x1002;
/// The reference clock of these boards in kHz (`soc15_get_xclk` * 10): 100 MHz.
pub(crate) const GPU_COUNTER_FREQ_KHZ: u32 = 100_000;
/// `GPRs per SIMD` (`max_gprs`).
pub(crate) const MAX_GPRS: u32 = 256;
/// `max_hw_contexts` of `gfx_v9_0_gpu_early_init`.
pub(crate) const MAX_HW_CONTEXTS: u32 = 8;
/// `ce_ram_size` of `gfx_v9_0_sw_init`.
pub(crate) const CE_RAM_SIZE: u32 = 0x8000;
/// Texture channel caches (L2 channels).
pub(crate) const TEXTURE_CHANNEL_CACHES: u32 = 16;
/// Geometry-shader sizes of gfx9 (`gs_vgt_table_depth`, `gs_prim_buffer_depth`,
/// `max_gs_threads`).
pub(crate) const GS_SIZES: (u32, u32, u32) = (32, 1792, 32);

/// Per-device facts that do not follow from the topology.
struct Model {
    chip: Chip,
    pci_revision: u8,
    subsystem_device: u16,
    marketing_name: &'static str,
    rev_id: u32,
    max_mclk_mhz: u32,
}

/// The known devices by PCI device id.
fn model(device_id: u16) -> Option<Model> {
    let m = |chip, pci_revision, subsystem_device, marketing_name, rev_id, max_mclk_mhz| Model {
        chip,
        pci_revision,
        subsystem_device,
        marketing_name,
        rev_id,
        max_mclk_mhz,
    };
    Some(match device_id {
        0x66a1 => m(
            Chip::Vega20,
            0x02,
            0x0834,
            "AMD Instinct MI60 / MI50",
            0,
            1000,
        ),
        0x66a0 => m(Chip::Vega20, 0x00, 0x0834, "AMD Radeon Instinct", 0, 1000),
        0x738c => m(Chip::Arcturus, 0x01, 0x0c34, "AMD Instinct MI100", 1, 1200),
        0x740f => m(Chip::Aldebaran, 0x02, 0x0c34, "AMD Instinct MI210", 1, 1600),
        0x740c => m(
            Chip::Aldebaran,
            0x01,
            0x0b0c,
            "AMD Instinct MI250X / MI250",
            1,
            1600,
        ),
        0x7408 => m(
            Chip::Aldebaran,
            0x00,
            0x0b0c,
            "AMD Instinct MI250X",
            1,
            1600,
        ),
        _ => return None,
    })
}

fn u32_of(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

impl Asic {
    /// The driver's view of the GPU of topology node `n` (a GPU node).
    ///
    /// The device id, compute units, shader layout, engine clock, memory clock, VRAM and MEC/SDMA
    /// firmware come from the node; the rest from the table of known devices, or, for a device
    /// id the table does not know (a user's preset), from the chip its `gfx_target_version`
    /// names, with PCI revision 0 and AMD's subsystem ids.
    pub(crate) fn of_node(n: &Node) -> Self {
        let device_id = u16::try_from(n.prop(keys::DEVICE_ID)).unwrap_or(0);
        let known = model(device_id);
        let chip = known.as_ref().map_or_else(
            || Chip::from_gfx_target_version(n.prop(keys::GFX_TARGET_VERSION)),
            |m| m.chip,
        );
        let simd_per_cu = n.prop(keys::SIMD_PER_CU).max(1);
        let active_cus = u32_of(n.prop(keys::SIMD_COUNT) / simd_per_cu);
        let sh_per_se = u32_of(n.prop(keys::SIMD_ARRAYS_PER_ENGINE).max(1));
        let shader_engines = u32_of(n.prop(keys::ARRAY_COUNT)).max(1) / sh_per_se.max(1);
        let cu_per_sh = u32_of(n.prop(keys::CU_PER_SIMD_ARRAY));
        // The memory clock the topology's frame buffer bank reports, else the model's.
        let bank_mclk = n
            .mem_banks
            .first()
            .and_then(|b| b.properties.get("mem_clk_max"))
            .map(u32_of)
            .filter(|&c| c != 0);
        let (large_bar, vram_size) = n.vram().unwrap_or((true, 0));
        let (gc, sdma, ext, uvd, vce, vcn, jpeg, firmware) = match chip {
            Chip::Vega20 => (
                IpVersion(9, 4, 0),
                IpVersion(4, 2, 0),
                0x28,
                Some(MediaBlock {
                    block: (7, 0),
                    ip: IpVersion(7, 2, 0),
                }),
                Some(MediaBlock {
                    block: (4, 0),
                    ip: IpVersion(4, 1, 0),
                }),
                None,
                None,
                Firmware {
                    me: 162,
                    pfp: 186,
                    ce: 79,
                    rlc: 47,
                    rlc_srl: 1,
                    smc: 0x0028_3900,
                    sos: 0x0011_0061,
                    asd: 0x2100_0030,
                    ta_xgmi: 0x2000_0002,
                    ta_ras: 0x1b00_0013,
                    uvd: 0x4200_2800,
                    vce: 0x3605_0000,
                    vcn: 0,
                    cp_feature: 38,
                },
            ),
            Chip::Arcturus => (
                IpVersion(9, 4, 1),
                IpVersion(4, 2, 2),
                0x32,
                None,
                None,
                Some(MediaBlock {
                    block: (2, 5),
                    ip: IpVersion(2, 5, 0),
                }),
                Some(MediaBlock {
                    block: (2, 5),
                    ip: IpVersion(2, 5, 0),
                }),
                Firmware {
                    rlc: 24,
                    smc: 0x0036_1d00,
                    sos: 0x0017_004f,
                    ta_xgmi: 0x2000_0011,
                    ta_ras: 0x1b00_013e,
                    vcn: 0x0110_1015,
                    cp_feature: 38,
                    ..Firmware::default()
                },
            ),
            Chip::Aldebaran => (
                IpVersion(9, 4, 2),
                IpVersion(4, 4, 0),
                0x3c,
                None,
                None,
                Some(MediaBlock {
                    block: (2, 6),
                    ip: IpVersion(2, 6, 0),
                }),
                Some(MediaBlock {
                    block: (2, 6),
                    ip: IpVersion(2, 6, 0),
                }),
                Firmware {
                    rlc: 17,
                    smc: 0x0044_3800,
                    sos: 0x0027_007f,
                    ta_xgmi: 0x2000_000d,
                    ta_ras: 0x1b00_013c,
                    vcn: 0x0110_101b,
                    cp_feature: 38,
                    ..Firmware::default()
                },
            ),
        };
        let rev_id = known.as_ref().map_or(0, |m| m.rev_id);
        // Every SDMA engine, PCIe and xGMI ones alike (Vega 20: 2, Arcturus: 8, Aldebaran: 5).
        let sdma_instances =
            u32_of(n.prop(keys::NUM_SDMA_ENGINES) + n.prop(keys::NUM_SDMA_XGMI_ENGINES));
        let rb_per_se = match chip {
            Chip::Vega20 => 4,
            Chip::Arcturus | Chip::Aldebaran => 1,
        };
        Asic {
            chip,
            vendor_id: u16::try_from(n.prop(keys::VENDOR_ID)).unwrap_or(VENDOR_AMD),
            device_id,
            pci_revision: known.as_ref().map_or(0, |m| m.pci_revision),
            subsystem_vendor: VENDOR_AMD,
            subsystem_device: known.as_ref().map_or(0x0c34, |m| m.subsystem_device),
            pci_class: 0x03_8000,
            marketing_name: known
                .as_ref()
                .map_or("AMD Radeon Graphics", |m| m.marketing_name),
            rev_id,
            external_rev_id: rev_id + ext,
            gc,
            sdma,
            sdma_instances,
            has_gfx_ring: chip == Chip::Vega20,
            uvd,
            vce,
            vcn,
            jpeg,
            shader_engines,
            sh_per_se,
            cu_per_sh,
            active_cus,
            rb_per_se,
            gb_addr_config: gb_addr_config(shader_engines, rb_per_se),
            max_sclk_mhz: u32_of(n.prop(keys::MAX_ENGINE_CLK_FCOMPUTE)),
            max_mclk_mhz: bank_mclk
                .or(known.as_ref().map(|m| m.max_mclk_mhz))
                .unwrap_or(1000),
            vram_bit_width: 4096,
            vram_size,
            large_bar,
            gds_size: match chip {
                Chip::Vega20 => 0x1_0000,
                Chip::Arcturus => 0x1000,
                Chip::Aldebaran => 0,
            },
            firmware,
            mec_fw: u32_of(n.prop(keys::FW_VERSION)),
            sdma_fw: u32_of(n.prop(keys::SDMA_FW_VERSION)),
        }
    }

    /// The active-CU bitmap of shader engine `se`, array `sh`: the same fused-off pattern as the
    /// topology's caches ([`topology::caches::CuLayout::bitmap`]), so that the render node and
    /// sysfs describe one board.
    pub(crate) fn cu_bitmap_of(&self, se: u32, sh: u32) -> u32 {
        topology::caches::CuLayout {
            shader_engines: self.shader_engines,
            arrays_per_engine: self.sh_per_se,
            slots_per_array: self.cu_per_sh.min(32),
            active: self.active_cus,
        }
        .bitmap(se, sh)
    }

    /// `cu_bitmap[4][4]` as `gfx_v9_0_get_cu_info` lays it out: SE `i`, SH `j` at
    /// `[i % 4][j + i / 4]` (Arcturus and Aldebaran have 8 engines of one array).
    pub(crate) fn cu_bitmap(&self) -> [[u32; 4]; 4] {
        let mut b = [[0u32; 4]; 4];
        for se in 0..self.shader_engines.min(16) {
            for sh in 0..self.sh_per_se {
                let (row, col) = ((se % 4) as usize, (sh + se / 4) as usize);
                if let Some(cell) = b.get_mut(row).and_then(|r| r.get_mut(col)) {
                    *cell = self.cu_bitmap_of(se, sh);
                }
            }
        }
        b
    }

    /// `cu_ao_mask`: the always-on CUs of SE 0-1, SH 0-1, 16 bits per SE and 8 per SH.
    pub(crate) fn cu_ao_mask(&self) -> u32 {
        let mut m = 0u32;
        for se in 0..self.shader_engines.min(2) {
            for sh in 0..self.sh_per_se.min(2) {
                m |= self.cu_bitmap_of(se, sh) << (se * 16 + sh * 8);
            }
        }
        m
    }

    /// Bytes of VRAM the CPU can reach through the BAR (`visible_vram_size`): all of it on a
    /// large-BAR board, else the 256 MiB window.
    pub(crate) fn visible_vram_size(&self) -> u64 {
        if self.large_bar {
            self.vram_size
        } else {
            self.vram_size.min(256 << 20)
        }
    }

    /// The PCI slot name `DDDD:BB:DD.F` of a topology node.
    pub fn slot_name(n: &Node) -> String {
        let loc = n.prop(keys::LOCATION_ID);
        format!(
            "{:04x}:{:02x}:{:02x}.{:x}",
            n.prop(keys::DOMAIN) & 0xffff,
            (loc >> 8) & 0xff,
            (loc >> 3) & 0x1f,
            loc & 7
        )
    }
}

/// `GB_ADDR_CONFIG` of a gfx9 part after `gfx_v9_0_gpu_early_init`: the golden bits `0x22014042`
/// with the board's shader-engine and RB-per-engine counts (log2) in their fields.
fn gb_addr_config(shader_engines: u32, rb_per_se: u32) -> u32 {
    let log2 = |v: u32| v.max(1).ilog2();
    0x2201_4042 | (log2(shader_engines) & 3) << 19 | (log2(rb_per_se) & 3) << 26
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Preset;

    fn asics(p: Preset) -> Vec<Asic> {
        let t = p.to_topology().unwrap();
        t.gpus().map(Asic::of_node).collect()
    }

    #[test]
    fn vega20_addr_config_is_the_golden_value_with_four_engines_of_four_rbs() {
        // Four engines of four RBs give Vega 10's golden value, as Vega 20 reports it.
        let a = &asics(Preset::mi50x1())[0];
        assert_eq!(a.gb_addr_config, 0x2a11_4042);
        assert_eq!(a.shader_engines, 4);
    }

    #[test]
    fn cu_bitmaps_add_up_to_the_topology_cu_count() {
        for p in [
            Preset::mi50x1(),
            Preset::mi100x4(),
            Preset::mi210x2(),
            Preset::mi250x8(),
        ] {
            let a = &asics(p)[0];
            let total: u32 = a.cu_bitmap().iter().flatten().map(|b| b.count_ones()).sum();
            assert_eq!(total, a.active_cus, "{:?}", a.chip);
        }
    }

    #[test]
    fn cu_bitmaps_follow_the_topologys_fused_cu_pattern() {
        // The render node's DEV_INFO bitmaps and the sysfs caches describe the same CUs.
        let t = Preset::mi100x4().to_topology().unwrap();
        let n = t.gpus().next().unwrap();
        let a = Asic::of_node(n);
        let layout = topology::caches::CuLayout::of(&n.properties);
        for se in 0..8 {
            assert_eq!(a.cu_bitmap_of(se, 0), layout.bitmap(se, 0));
        }
        // 120 of 128: each engine's slot 8 is off.
        assert_eq!(a.cu_bitmap_of(3, 0), 0xffff & !(1 << 8));
    }

    #[test]
    fn slot_names_come_from_the_location() {
        let t = Preset::mi100x4().to_topology().unwrap();
        let names: Vec<String> = t.gpus().map(Asic::slot_name).collect();
        assert_eq!(names[0], "0000:23:00.0");
        assert_eq!(names[3], "0000:a3:00.0");
    }
}
