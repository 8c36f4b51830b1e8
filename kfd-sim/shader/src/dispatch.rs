//! From a KERNEL_DISPATCH to waves: the kernel descriptor, the packet fields, scratch, and the
//! initial state of every wave of every workgroup (AMDGPUUsage "Initial Kernel Execution
//! State", gfx90a: absolute flat scratch, packed work-item ids).

use crate::exec::WgEnv;
use crate::wave::{hwreg, Wave, LANES};
use crate::workgroup::Workgroup;

/// The flat apertures of the process (KFD's gfx9 values: [`Apertures::KFD_GFX9`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Apertures {
    /// Base of the LDS aperture (src_shared_base); 4 GiB long.
    pub shared_base: u64,
    /// Base of the private aperture (src_private_base); 4 GiB long.
    pub private_base: u64,
}

impl Apertures {
    /// KFD's gfx9 apertures: LDS at 1 << 48, private at 2 << 48.
    pub const KFD_GFX9: Apertures = Apertures {
        shared_base: 1 << 48,
        private_base: 2 << 48,
    };

    /// src_shared_limit: the last byte of the LDS aperture.
    pub fn shared_limit(&self) -> u64 {
        self.shared_base + 0xffff_ffff
    }

    /// src_private_limit: the last byte of the private aperture.
    pub fn private_limit(&self) -> u64 {
        self.private_base + 0xffff_ffff
    }
}

/// What the command processor reads of a kernel descriptor: the 64-byte `.kd` of code object
/// v3 and later, and the first 64 bytes of the 256-byte `amd_kernel_code_t` of ROCr's own
/// blit kernels, which agree where these fields are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KernelDescriptor {
    /// Byte offset of the entry point from the descriptor (at 16).
    pub entry_offset: i64,
    /// COMPUTE_PGM_RSRC3 (at 44; gfx90a ACCUM_OFFSET bits 5:0).
    pub rsrc3: u32,
    /// COMPUTE_PGM_RSRC1 (at 48).
    pub rsrc1: u32,
    /// COMPUTE_PGM_RSRC2 (at 52).
    pub rsrc2: u32,
    /// Kernel code properties (at 56): user SGPR enables in bits 0-6 (and, in
    /// `amd_kernel_code_t`, the grid workgroup counts in 7-9).
    pub properties: u16,
}

impl KernelDescriptor {
    /// The fields from the descriptor's bytes (at least 64).
    pub fn parse(bytes: &[u8]) -> Result<Self, DispatchError> {
        let b = bytes
            .get(..64)
            .ok_or(DispatchError::ShortDescriptor(bytes.len()))?;
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let mut e = [0u8; 8];
        e.copy_from_slice(&b[16..24]);
        Ok(Self {
            entry_offset: i64::from_le_bytes(e),
            rsrc3: u32_at(44),
            rsrc1: u32_at(48),
            rsrc2: u32_at(52),
            properties: u16::from_le_bytes([b[56], b[57]]),
        })
    }

    /// Registers of the unified VGPR file (gfx90a: granules of 8).
    pub fn vgprs(&self) -> usize {
        ((self.rsrc1 & 0x3f) as usize + 1) * 8
    }

    /// Index of a0 in the unified file: (ACCUM_OFFSET + 1) x 4.
    pub fn accum_offset(&self) -> u32 {
        ((self.rsrc3 & 0x3f) + 1) * 4
    }

    /// USER_SGPR_COUNT.
    pub fn user_sgprs(&self) -> usize {
        ((self.rsrc2 >> 1) & 0x1f) as usize
    }

    /// The initial MODE from rsrc1's float fields.
    pub fn mode(&self) -> u32 {
        let r = self.rsrc1;
        let round = (r >> 12) & 0xf;
        let denorm = (r >> 16) & 0xf;
        let mut m = round | denorm << 4;
        if r & (1 << 21) != 0 {
            m |= hwreg::MODE_DX10_CLAMP;
        }
        if r & (1 << 23) != 0 {
            m |= hwreg::MODE_IEEE;
        }
        if r & (1 << 26) != 0 {
            m |= hwreg::MODE_FP16_OVFL;
        }
        m
    }
}

/// The fields of a KERNEL_DISPATCH packet and of its queue that the waves see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DispatchPacket {
    /// Work-items per workgroup, per dimension.
    pub workgroup_size: [u16; 3],
    /// Work-items in the grid, per dimension.
    pub grid_size: [u32; 3],
    /// Private (scratch) bytes per work-item.
    pub private_segment_size: u32,
    /// LDS bytes per workgroup.
    pub group_segment_size: u32,
    /// VA of the kernel descriptor.
    pub kernel_object: u64,
    /// VA of the kernel arguments.
    pub kernarg_address: u64,
    /// VA of the packet itself (the dispatch ptr).
    pub packet_address: u64,
    /// VA of the queue's `amd_queue_t` (the queue ptr).
    pub queue_address: u64,
    /// The packet's index in the queue (the dispatch id).
    pub dispatch_id: u64,
}

impl DispatchPacket {
    /// The packet fields from its 64 bytes; the addresses and id the caller knows.
    pub fn parse(p: &[u8; 64], packet_address: u64, queue_address: u64, dispatch_id: u64) -> Self {
        let u16_at = |o: usize| u16::from_le_bytes([p[o], p[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes([p[o], p[o + 1], p[o + 2], p[o + 3]]);
        let u64_at = |o: usize| u64::from(u32_at(o)) | u64::from(u32_at(o + 4)) << 32;
        Self {
            workgroup_size: [u16_at(4), u16_at(6), u16_at(8)],
            grid_size: [u32_at(12), u32_at(16), u32_at(20)],
            private_segment_size: u32_at(24),
            group_segment_size: u32_at(28),
            kernel_object: u64_at(32),
            kernarg_address: u64_at(40),
            packet_address,
            queue_address,
            dispatch_id,
        }
    }
}

/// The queue's scratch as the waves see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScratchSetup {
    /// The private segment buffer descriptor (`amd_queue_t.scratch_resource_descriptor`).
    pub resource: [u32; 4],
    /// The scratch backing memory's VA (flat scratch init: absolute on gfx90a).
    pub base: u64,
    /// Bytes of scratch per wave slot (the private segment wave offset of slot k is k times
    /// this).
    pub wave_bytes: u64,
}

/// A dispatch that cannot start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DispatchError {
    /// Fewer than 64 bytes of kernel descriptor.
    #[error("a kernel descriptor has 64 bytes, got {0}")]
    ShortDescriptor(usize),
    /// A zero dimension, or a workgroup of more than 1024 work-items.
    #[error("invalid dimensions: grid {grid:?}, workgroup {workgroup:?}")]
    Dimensions {
        /// Grid size.
        grid: [u32; 3],
        /// Workgroup size.
        workgroup: [u16; 3],
    },
    /// More LDS than a workgroup can have (64 KiB).
    #[error("group segment of {0} bytes exceeds 64 KiB")]
    GroupSegment(u32),
}

/// LDS allocation granule in bytes.
const LDS_GRANULE: usize = 512;

/// A dispatch ready to make its workgroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatch {
    kd: KernelDescriptor,
    packet: DispatchPacket,
    scratch: ScratchSetup,
    apertures: Apertures,
    counts: [u32; 3],
}

impl Dispatch {
    /// Checks the dispatch and prepares its workgroups.
    pub fn new(
        kd: KernelDescriptor,
        packet: DispatchPacket,
        scratch: ScratchSetup,
        apertures: Apertures,
    ) -> Result<Self, DispatchError> {
        let (g, w) = (packet.grid_size, packet.workgroup_size);
        let items: u32 = w.iter().map(|&x| u32::from(x)).product();
        if g.contains(&0) || w.contains(&0) || items > 1024 {
            return Err(DispatchError::Dimensions {
                grid: g,
                workgroup: w,
            });
        }
        if packet.group_segment_size > 64 << 10 {
            return Err(DispatchError::GroupSegment(packet.group_segment_size));
        }
        let counts = std::array::from_fn(|d| g[d].div_ceil(u32::from(w[d])));
        Ok(Self {
            kd,
            packet,
            scratch,
            apertures,
            counts,
        })
    }

    /// Workgroups per dimension.
    pub fn workgroup_counts(&self) -> [u32; 3] {
        self.counts
    }

    /// Workgroups in all.
    pub fn workgroup_count(&self) -> u64 {
        self.counts.iter().map(|&c| u64::from(c)).product()
    }

    /// Waves of a full workgroup.
    pub fn waves_per_workgroup(&self) -> u32 {
        let items: u32 = self
            .packet
            .workgroup_size
            .iter()
            .map(|&x| u32::from(x))
            .product();
        items.div_ceil(LANES as u32)
    }

    /// The address of the first instruction.
    pub fn entry(&self) -> u64 {
        self.packet
            .kernel_object
            .wrapping_add(self.kd.entry_offset as u64)
    }

    /// The kernel descriptor.
    pub fn kernel(&self) -> &KernelDescriptor {
        &self.kd
    }

    /// The packet.
    pub fn packet(&self) -> &DispatchPacket {
        &self.packet
    }

    /// Workgroup number `index` (x fastest, then y, then z; below [`Dispatch::workgroup_count`],
    /// a workgroup past the grid has no waves) in its initial state; its waves
    /// use scratch wave slots from `scratch_slot` on (the private segment wave offset of its
    /// wave k is `(scratch_slot + k) * wave_bytes`). The caller makes sure that workgroups
    /// running at the same time use different slots.
    pub fn workgroup(&self, index: u64, scratch_slot: u32) -> Workgroup {
        let [cx, cy, _] = self.counts.map(u64::from);
        let id = [
            (index % cx) as u32,
            (index / cx % cy) as u32,
            (index / (cx * cy)) as u32,
        ];
        // Edge workgroups are partial: their work-items are numbered with their real size.
        let size: [u32; 3] = std::array::from_fn(|d| {
            let w = u32::from(self.packet.workgroup_size[d]);
            let start = u64::from(id[d]) * u64::from(w);
            (u64::from(w).min(u64::from(self.packet.grid_size[d]).saturating_sub(start))) as u32
        });
        let items = size[0] * size[1] * size[2];
        let nwaves = items.div_ceil(LANES as u32);
        let kd = &self.kd;
        let mut waves = Vec::with_capacity(nwaves as usize);
        for wi in 0..nwaves {
            let mut w = Wave::new(wi, kd.vgprs(), kd.accum_offset());
            w.pc = self.entry();
            w.mode = kd.mode();
            self.user_and_system_sgprs(&mut w, id, wi, nwaves, scratch_slot);
            let first = wi * LANES as u32;
            let lanes = (items - first).min(LANES as u32);
            w.set_exec(if lanes == 64 {
                u64::MAX
            } else {
                (1u64 << lanes) - 1
            });
            let ids = (kd.rsrc2 >> 11) & 3;
            if let Some(v0) = w.v_mut(0) {
                for (l, x) in v0.iter_mut().enumerate().take(lanes as usize) {
                    let item = first + l as u32;
                    let tx = item % size[0];
                    let ty = item / size[0] % size[1];
                    let tz = item / (size[0] * size[1]);
                    *x = tx
                        | if ids >= 1 { ty << 10 } else { 0 }
                        | if ids >= 2 { tz << 20 } else { 0 };
                }
            }
            waves.push(w);
        }
        let lds_bytes =
            (self.packet.group_segment_size as usize).div_ceil(LDS_GRANULE) * LDS_GRANULE;
        let env = WgEnv {
            apertures: self.apertures,
            waves: nwaves,
            gpr_alloc: (kd.rsrc1 & 0x3f) << 8 | ((kd.rsrc1 >> 6) & 0xf) << 24,
            lds_alloc: ((lds_bytes / LDS_GRANULE) as u32) << 12,
        };
        Workgroup::new(id, waves, vec![0; lds_bytes], env)
    }

    fn user_and_system_sgprs(&self, w: &mut Wave, id: [u32; 3], wi: u32, nwaves: u32, slot: u32) {
        let p = &self.packet;
        let props = self.kd.properties;
        let mut user: Vec<u32> = Vec::with_capacity(16);
        let pair = |v: u64| [v as u32, (v >> 32) as u32];
        if props & 1 != 0 {
            user.extend_from_slice(&self.scratch.resource);
        }
        if props & 2 != 0 {
            user.extend_from_slice(&pair(p.packet_address));
        }
        if props & 4 != 0 {
            user.extend_from_slice(&pair(p.queue_address));
        }
        if props & 8 != 0 {
            user.extend_from_slice(&pair(p.kernarg_address));
        }
        if props & 16 != 0 {
            user.extend_from_slice(&pair(p.dispatch_id));
        }
        if props & 32 != 0 {
            user.extend_from_slice(&pair(self.scratch.base));
        }
        if props & 64 != 0 {
            user.push(p.private_segment_size);
        }
        for d in 0..3 {
            if props & (128 << d) != 0 {
                user.push(self.counts[d]);
            }
        }
        for (k, v) in user.iter().take(16).enumerate() {
            w.set_sgpr(k, *v);
        }
        let r2 = self.kd.rsrc2;
        let mut s = self.kd.user_sgprs();
        let mut push = |w: &mut Wave, v: u32| {
            w.set_sgpr(s, v);
            s += 1;
        };
        for d in 0..3 {
            if r2 & (1 << (7 + d)) != 0 {
                push(w, id[d]);
            }
        }
        if r2 & (1 << 10) != 0 {
            push(w, if wi == 0 { 1 << 31 } else { 0 } | (nwaves & 0x3f));
        }
        if r2 & 1 != 0 {
            let off = (u64::from(slot) + u64::from(wi)).wrapping_mul(self.scratch.wave_bytes);
            push(w, off as u32);
        }
    }
}
