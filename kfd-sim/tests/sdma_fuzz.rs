//! Random indirect buffers (random ops, counts, addresses around and away from the mapped ranges,
//! random IB sizes) thrown at the simulated SDMA engine: a submission either completes or fails
//! its fence with `ETIME`, never panics or hangs, and never changes a byte outside the mapped
//! writable ranges (sentinels: the unmapped half of a BO, a read-only mapping, the host memory
//! around a userptr).

#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)] // tests panic on failure

mod common;

use std::fs::File;
use std::os::unix::fs::FileExt;

use common::*;
use kfd_abi::render::{GemDomain, IbSubmit, UserptrFlags, VmPageFlags, HW_IP_DMA};
use kfd_abi::sdma::{header, OP_CONST_FILL, OP_COPY, SUBOP_COPY_LINEAR};
use kfd_abi::{Errno, HostBuffer, RenderNode, UserptrBuffer};
use kfd_sim::{Preset, SimFile};
use proptest::prelude::*;

const K64: u64 = 64 << 10;
const IB_VA: u64 = 0x10_0000_0000;
const A_VA: u64 = 0x10_0100_0000; // VRAM GEM, first half mapped read-write
const U_VA: u64 = 0x10_0200_0000; // userptr, read-write
const R_VA: u64 = 0x10_0300_0000; // GTT GEM, read-only
const K_VA: u64 = 0x10_0400_0000; // KFD VRAM BO
const BASES: [u64; 5] = [IB_VA, A_VA, U_VA, R_VA, K_VA];

#[derive(Clone, Debug)]
enum P {
    Copy { src: u64, dst: u64, count: u32 },
    Fill { dst: u64, value: u32, count: u32 },
    Nop(u32),
    Raw(u32),
}

fn addr() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => (0usize..BASES.len(), -8192i64..(2 * (64 << 10) + 8192))
            .prop_map(|(r, off)| BASES[r].wrapping_add_signed(off)),
        1 => any::<u64>(),
    ]
}

fn count() -> impl Strategy<Value = u32> {
    prop_oneof![4 => 0u32..0x2_0000, 1 => any::<u32>()]
}

fn packet() -> impl Strategy<Value = P> {
    prop_oneof![
        4 => (addr(), addr(), count()).prop_map(|(src, dst, count)| P::Copy { src, dst, count }),
        3 => (addr(), any::<u32>(), count()).prop_map(|(dst, value, count)| P::Fill { dst, value, count }),
        1 => (0u32..20).prop_map(P::Nop),
        1 => any::<u32>().prop_map(P::Raw),
    ]
}

fn encode(ps: &[P]) -> Vec<u32> {
    let lo = |v: u64| (v & 0xffff_ffff) as u32;
    let hi = |v: u64| (v >> 32) as u32;
    let mut d = Vec::new();
    for p in ps {
        match *p {
            P::Copy { src, dst, count } => d.extend_from_slice(&[
                header(OP_COPY, SUBOP_COPY_LINEAR),
                count,
                0,
                lo(src),
                hi(src),
                lo(dst),
                hi(dst),
            ]),
            P::Fill { dst, value, count } => {
                d.extend_from_slice(&[header(OP_CONST_FILL, 0), lo(dst), hi(dst), value, count]);
            }
            P::Nop(n) => {
                d.push(n << 16);
                d.extend(std::iter::repeat_n(0xdead_beef, n as usize));
            }
            P::Raw(w) => d.push(w),
        }
    }
    d
}

fn read(f: &File, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, 0).unwrap();
    b
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_ibs_complete_or_fail_their_fence_and_touch_only_mapped_writable_memory(
        packets in prop::collection::vec(packet(), 0..8),
        ib_bytes in prop_oneof![3 => Just(None), 1 => (0u32..(K64 as u32 + 64)).prop_map(Some)],
        ib_skew in prop_oneof![5 => Just(0u64), 1 => 0u64..K64],
    ) {
        let e = env(Preset::mi50x1());
        let r = RenderNode::new(kfd_abi::Transport::try_clone(&e.renders[0]).unwrap(), "renderD");
        let rw = VmPageFlags::READABLE | VmPageFlags::WRITEABLE;
        let mut ib = UserptrBuffer::new(&r, K64 as usize, IB_VA).unwrap();

        let a = r.gem_create(2 * K64, 0, GemDomain::VRAM, 0).unwrap();
        r.va_map(a, A_VA, 0, K64, rw).unwrap();
        let a_buf = File::from(r.prime_handle_to_fd(a).unwrap());
        let sentinel: Vec<u8> = (0..K64).map(|i| (i % 251) as u8).collect();
        a_buf.write_all_at(&sentinel, K64).unwrap();

        let mut host = HostBuffer::new(3 * K64 as usize).unwrap();
        host.as_mut_slice().iter_mut().enumerate().for_each(|(i, b)| *b = (i % 241) as u8);
        let before_host = host.as_slice().to_vec();
        // SAFETY: `host` outlives the BO, which is closed at the end of the case.
        let u = unsafe { r.gem_userptr(host.addr() + K64, K64, UserptrFlags::REGISTER) }.unwrap();
        r.va_map(u, U_VA, 0, K64, rw).unwrap();

        let ro = r.gem_create(K64, 0, GemDomain::GTT, 0).unwrap();
        r.va_map(ro, R_VA, 0, K64, VmPageFlags::READABLE).unwrap();
        let ro_buf = File::from(r.prime_handle_to_fd(ro).unwrap());
        ro_buf.write_all_at(&sentinel, 0).unwrap();

        let k = e.kfd.alloc_memory(K_VA, K64, e.gpus[0], VRAM_W).unwrap();
        e.kfd.map_memory_to_gpu(k.handle, &[e.gpus[0]]).unwrap();

        let dwords = encode(&packets);
        let n = dwords.len().min(ib.len() / 4);
        for (d, w) in ib.as_mut_slice().chunks_exact_mut(4).zip(&dwords[..n]) {
            d.copy_from_slice(&w.to_le_bytes());
        }
        let ctx = r.ctx_alloc().unwrap();
        let submit = IbSubmit {
            ctx,
            bo_list: None,
            ip_type: HW_IP_DMA,
            ring: 0,
            ib_va: IB_VA + ib_skew,
            ib_bytes: ib_bytes.unwrap_or((n * 4) as u32),
        };
        let seq = r.cs_submit(&submit).unwrap();
        let done = r.wait_cs(ctx, HW_IP_DMA, 0, seq, RenderNode::<SimFile>::deadline_in(0));
        match done {
            Ok(signalled) => prop_assert!(signalled),
            Err(err) => prop_assert_eq!(err.errno(), Some(Errno::ETIME)),
        }

        prop_assert!(read(&a_buf, 2 * K64 as usize)[K64 as usize..] == sentinel[..], "unmapped half of a BO");
        prop_assert!(read(&ro_buf, K64 as usize) == sentinel, "read-only mapping");
        let after = host.as_slice();
        let (lo, hi) = (K64 as usize, 2 * K64 as usize);
        prop_assert!(after[..lo] == before_host[..lo], "host memory below the userptr");
        prop_assert!(after[hi..] == before_host[hi..], "host memory above the userptr");
        r.gem_close(u).unwrap();
    }
}
