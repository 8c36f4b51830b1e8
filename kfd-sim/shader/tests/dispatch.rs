//! The initial state of a dispatch's waves (AMDGPUUsage "Initial Kernel Execution State", gfx90a)
//! and the dispatches that cannot start.

#![allow(clippy::unwrap_used)] // test code

use kfd_shader::{
    hwreg, reg, Apertures, Dispatch, DispatchError, DispatchPacket, KernelDescriptor, ScratchSetup,
};
use rstest::rstest;

const RESOURCE: [u32; 4] = [0x1111, 0x2222, 0x3333, 0x4444];

fn packet(grid: [u32; 3], wg: [u16; 3], group: u32) -> DispatchPacket {
    let mut p = [0u8; 64];
    for d in 0..3 {
        p[4 + 2 * d..6 + 2 * d].copy_from_slice(&wg[d].to_le_bytes());
        p[12 + 4 * d..16 + 4 * d].copy_from_slice(&grid[d].to_le_bytes());
    }
    p[24..28].copy_from_slice(&48u32.to_le_bytes());
    p[28..32].copy_from_slice(&group.to_le_bytes());
    p[32..40].copy_from_slice(&0x7000_0000u64.to_le_bytes());
    p[40..48].copy_from_slice(&0x8000_0000u64.to_le_bytes());
    DispatchPacket::parse(&p, 0x9000_0040, 0xa000_0000, 17)
}

/// A descriptor enabling every user SGPR, every system SGPR and x/y/z work-item ids.
fn descriptor() -> KernelDescriptor {
    let mut kd = [0u8; 64];
    kd[16..24].copy_from_slice(&0x100i64.to_le_bytes());
    kd[44..48].copy_from_slice(&7u32.to_le_bytes()); // ACCUM_OFFSET 7: a0 = v32
                                                     // VGPR granule 3 (32 registers), f32 denormals kept, DX10 clamp, IEEE.
    let rsrc1: u32 = 3 | 3 << 16 | 1 << 21 | 1 << 23;
    kd[48..52].copy_from_slice(&rsrc1.to_le_bytes());
    let rsrc2: u32 = 1 | 15 << 1 | 1 << 7 | 1 << 8 | 1 << 9 | 1 << 10 | 2 << 11;
    kd[52..56].copy_from_slice(&rsrc2.to_le_bytes());
    kd[56..58].copy_from_slice(&0x7fu16.to_le_bytes());
    KernelDescriptor::parse(&kd).unwrap()
}

fn scratch() -> ScratchSetup {
    ScratchSetup {
        resource: RESOURCE,
        base: 0xb000_0000,
        wave_bytes: 0x400,
    }
}

#[test]
fn user_and_system_sgprs_follow_the_enable_bits_in_order() {
    let d = Dispatch::new(
        descriptor(),
        packet([130, 3, 2], [64, 2, 1], 100),
        scratch(),
        Apertures::KFD_GFX9,
    )
    .unwrap();
    assert_eq!(d.workgroup_counts(), [3, 2, 2]);
    assert_eq!(d.entry(), 0x7000_0100);
    // Workgroup 6 is (0, 0, 1): a full one.
    let wg = d.workgroup(6, 5);
    assert_eq!(wg.id, [0, 0, 1]);
    assert_eq!(wg.waves.len(), 2, "64 x 2 items");
    let w = &wg.waves[1];
    let s = &w.sgpr;
    assert_eq!(&s[0..4], &RESOURCE, "private segment buffer");
    assert_eq!(w.sgpr64(4), 0x9000_0040, "dispatch ptr");
    assert_eq!(w.sgpr64(6), 0xa000_0000, "queue ptr");
    assert_eq!(w.sgpr64(8), 0x8000_0000, "kernarg ptr");
    assert_eq!(w.sgpr64(10), 17, "dispatch id");
    assert_eq!(
        w.sgpr64(12),
        0xb000_0000,
        "flat scratch init: the absolute scratch base"
    );
    assert_eq!(s[14], 48, "private segment size");
    assert_eq!(
        &s[15..18],
        &[0, 0, 1],
        "workgroup id x, y, z from USER_SGPR_COUNT"
    );
    assert_eq!(s[18], 2, "workgroup info of a wave other than the first");
    assert_eq!(wg.waves[0].sgpr[18], 1 << 31 | 2);
    assert_eq!(
        s[19],
        (5 + 1) * 0x400,
        "private segment wave offset of slot 5 + wave 1"
    );
    assert_eq!(w.pc, 0x7000_0100);
    assert_eq!(w.exec(), u64::MAX);
    assert_eq!(w.vgpr.len(), 32);
    assert_eq!(w.accum_offset, 32);
    assert_eq!(
        w.mode,
        3 << hwreg::MODE_DENORM32_SHIFT | hwreg::MODE_DX10_CLAMP | hwreg::MODE_IEEE
    );
    assert_eq!(
        wg.lds.len(),
        512,
        "the group segment rounded up to the granule"
    );
    // Packed work-item ids: wave 1 holds y = 1.
    assert_eq!(w.v(0)[5], 5 | 1 << 10);
    assert_eq!(w.sgpr[reg::M0], 0);
}

#[test]
fn edge_workgroups_are_partial_and_the_last_wave_has_fewer_lanes() {
    let d = Dispatch::new(
        descriptor(),
        packet([130, 3, 2], [64, 2, 1], 0),
        scratch(),
        Apertures::KFD_GFX9,
    )
    .unwrap();
    // Workgroup 5 is (2, 1, 0): x holds 130 - 128 = 2 items, y 3 - 2 = 1.
    let wg = d.workgroup(5, 0);
    assert_eq!(wg.id, [2, 1, 0]);
    assert_eq!(wg.waves.len(), 1);
    assert_eq!(wg.waves[0].exec(), 0b11);
    assert_eq!(&wg.waves[0].v(0)[..3], &[0, 1, 0]);
    assert_eq!(wg.waves[0].sgpr[18], 1 << 31 | 1);
}

#[rstest]
#[case::zero_grid([0, 1, 1], [64, 1, 1], 0)]
#[case::zero_workgroup([64, 1, 1], [0, 1, 1], 0)]
#[case::too_many_items([64, 1, 1], [64, 32, 1], 0)]
fn dispatches_with_bad_dimensions_do_not_start(
    #[case] grid: [u32; 3],
    #[case] wg: [u16; 3],
    #[case] group: u32,
) {
    let e = Dispatch::new(
        descriptor(),
        packet(grid, wg, group),
        scratch(),
        Apertures::KFD_GFX9,
    );
    assert_eq!(
        e,
        Err(DispatchError::Dimensions {
            grid,
            workgroup: wg
        })
    );
}

#[test]
fn more_than_64_kib_of_lds_does_not_start() {
    let e = Dispatch::new(
        descriptor(),
        packet([64, 1, 1], [64, 1, 1], 65537),
        scratch(),
        Apertures::KFD_GFX9,
    );
    assert_eq!(e, Err(DispatchError::GroupSegment(65537)));
    assert_eq!(
        KernelDescriptor::parse(&[0; 63]),
        Err(DispatchError::ShortDescriptor(63))
    );
}
