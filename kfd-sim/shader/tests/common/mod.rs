//! What the kernel tests share: the committed code object, kernel arguments, input patterns and
//! the atomics kernel's buffers.

#![allow(dead_code, clippy::unwrap_used, clippy::cast_sign_loss)] // each test file uses a part

use kfd_shader::testmem::Rig;

/// The committed test kernels.
pub(crate) const CODE_OBJECT: &[u8] = include_bytes!("../../kernels/kernels.co");

/// Kernel arguments, each aligned to its size.
pub(crate) use kfd_shader::testmem::Args;

/// `n` words that differ from lane to lane and from `seed` to seed.
pub(crate) fn pattern(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| i.wrapping_mul(0x9e37_79b9).wrapping_add(seed) ^ (i >> 3))
        .collect()
}

/// The buffers of the `atomics` kernel, initialised: counters (add, signed min, signed max,
/// unsigned max), wide counters (add, min, max), 128 slots, and the values.
pub(crate) struct AtomicsBuffers {
    pub counters: u64,
    pub wide: u64,
    pub slots: u64,
    pub vals: u64,
}

impl AtomicsBuffers {
    pub(crate) fn new(rig: &mut Rig, vals: &[i32]) -> Self {
        let b = Self {
            counters: rig.alloc(16).unwrap(),
            wide: rig.alloc(24).unwrap(),
            slots: rig.alloc(128 * 4).unwrap(),
            vals: rig.alloc(vals.len() as u64 * 4).unwrap(),
        };
        rig.mem
            .write_u32s(b.vals, &vals.iter().map(|&v| v as u32).collect::<Vec<_>>());
        rig.mem
            .write_u32s(b.counters, &[0, i32::MAX as u32, i32::MIN as u32, 0]);
        let wide = [
            0u64.to_le_bytes(),
            i64::MAX.to_le_bytes(),
            i64::MIN.to_le_bytes(),
        ]
        .concat();
        rig.mem.write(b.wide, &wide);
        b
    }

    pub(crate) fn args(&self) -> Args {
        Args::default()
            .u64(self.counters)
            .u64(self.wide)
            .u64(self.slots)
            .u64(self.vals)
    }
}
