//! Client memory (userptr) under the command processor's mirrors, through whole dispatches as
//! ROCr's `hsa_memory_copy` makes them: what the client's CPU wrote before a dispatch is what
//! the dispatch reads, what the GPU wrote is in the client's memory when the completion signal
//! fires, a kernel spinning on a flag in client memory sees the CPU's store, and copies at odd
//! offsets and lengths (bytes per lane across pages and mirror windows, partial last pages)
//! touch exactly their bytes.

#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)]

mod common;

use std::time::Duration;

use common::aql::{dispatch_packet, Args, Code, Queue, Rig, MISALIGNED};
use common::{env, GTT_W, VRAM_W};
use kfd_abi::{AllocFlags, MemHandle};
use kfd_sim::Preset;
use rstest::rstest;

/// ROCr's blit grid on an MI210 (64 x 4 work-items per CU, 104 CUs).
const GRID: u32 = 64 * 4 * 104;

/// `len` bytes of the test's own memory registered as userptr at GPU VA `va` and mapped. The
/// bytes start on a page; the registration covers `len` bytes (a partial last page is allowed).
struct Host {
    bytes: Vec<u8>,
    off: usize,
    len: usize,
    va: u64,
    handle: MemHandle,
}

impl Host {
    fn new(rig: &Rig, va: u64, len: usize) -> Self {
        let mut bytes = vec![0u8; len + 8192];
        let off = bytes.as_ptr().align_offset(4096);
        let cpu = bytes[off..].as_mut_ptr() as u64;
        // SAFETY: `bytes` outlives the BO (freed in `free`, before the vector is dropped) and
        // is never reallocated.
        let bo = unsafe {
            rig.e
                .kfd
                .alloc_userptr(va, len as u64, rig.g, AllocFlags::WRITABLE, cpu)
        }
        .unwrap();
        rig.e.kfd.map_memory_to_gpu(bo.handle, &[rig.g]).unwrap();
        Self {
            bytes,
            off,
            len,
            va,
            handle: bo.handle,
        }
    }

    fn slice(&mut self) -> &mut [u8] {
        &mut self.bytes[self.off..self.off + self.len]
    }

    fn free(self, rig: &Rig) {
        rig.e
            .kfd
            .unmap_memory_from_gpu(self.handle, &[rig.g])
            .unwrap();
        rig.e.kfd.free_memory(self.handle).unwrap();
    }
}

/// Bytes that differ from seed to seed and from byte to byte (no period of a page).
fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_right(13) as u8 ^ seed)
        .collect()
}

/// Runs `copy_misaligned` of `n` bytes from `src` to `dst` over ROCr's grid and waits for its
/// completion signal.
fn copy(rig: &Rig, q: &Queue, code: &Code, src: u64, dst: u64, n: u64) {
    let done = rig.signal(1, true);
    let ka = rig.kernargs(&Args::default().u64(src).u64(dst).u64(n).0);
    q.submit(dispatch_packet(
        code.kernel("copy_misaligned"),
        [GRID, 1, 1],
        [64, 1, 1],
        ka,
        done.va,
    ));
    rig.wait_event(&done);
    assert_eq!(rig.value(&done), 0);
}

/// A dispatch reads what the client wrote before it, even where an earlier dispatch on the same
/// queue mirrored the same memory with other contents: each dispatch's mirrors are its own.
#[test]
fn a_client_write_between_two_dispatches_is_seen_by_the_second() {
    let rig = Rig::new(env(Preset::mi210x2()));
    let code = rig.load(MISALIGNED);
    let q = Queue::new(&rig, 64, None);
    let len = 300_000;
    let mut host = Host::new(&rig, 0x7e10_0000_0000, len);
    let vram = rig.buf(len as u64, VRAM_W);
    let n = len - 5;
    for seed in [1u8, 2, 3] {
        let want = pattern(len, seed);
        host.slice().copy_from_slice(&want);
        copy(&rig, &q, &code, host.va + 3, vram.va + 1, n as u64);
        assert_eq!(
            vram.read(1, n),
            want[3..3 + n],
            "dispatch of pattern {seed}"
        );
    }
    host.free(&rig);
}

/// What a copy into client memory wrote is there when its completion signal fires, at odd
/// offsets and lengths: the bytes around the copy (the start of the first page, the rest of a
/// partial last page) keep what the client had there.
#[rstest]
#[case::one_mib_less_five(1 << 20, 3, 1 << 20)]
#[case::a_partial_last_page(3 * 4096 + 1000, 4095, 3 * 4096 + 1000)]
#[case::across_one_window_edge(40_000, 16_383, 40_000)]
#[case::fewer_bytes_than_a_wave(4096, 4050, 4096)]
fn gpu_writes_to_client_memory_are_there_when_the_completion_signal_fires(
    #[case] len: usize,
    #[case] dst_off: usize,
    #[case] src_len: usize,
) {
    let rig = Rig::new(env(Preset::mi210x2()));
    let code = rig.load(MISALIGNED);
    let q = Queue::new(&rig, 64, None);
    let mut host = Host::new(&rig, 0x7e10_0000_0000, len);
    let before = pattern(len, 0x5a);
    host.slice().copy_from_slice(&before);
    let src = rig.buf(src_len as u64, GTT_W);
    let data = pattern(src_len, 0xa5);
    src.write(0, &data);
    // Up to the last 2 bytes of the host buffer.
    let n = len - dst_off - 2;
    copy(
        &rig,
        &q,
        &code,
        src.va + 1,
        host.va + dst_off as u64,
        n as u64,
    );
    let got = host.slice().to_vec();
    assert_eq!(got[..dst_off], before[..dst_off], "bytes before the copy");
    assert_eq!(got[dst_off..dst_off + n], data[1..1 + n], "the copy");
    assert_eq!(
        got[dst_off + n..],
        before[dst_off + n..],
        "bytes after the copy"
    );
    host.free(&rig);
}

/// A kernel spinning with atomic loads on a flag in client memory sees the CPU's store while
/// it runs: its atomics ask for memory as the CPU sees it now, so its next time slice reads
/// the client's memory afresh (a plain load may be served from the dispatch's mirror, as from
/// a cache).
#[test]
fn a_kernel_spinning_on_a_flag_in_client_memory_sees_the_cpu_store() {
    let rig = Rig::new(env(Preset::mi210x2()));
    let q = Queue::new(&rig, 64, None);
    let mut host = Host::new(&rig, 0x7e10_0000_0000, 4096);
    let out = rig.buf(4096, GTT_W);
    let done = rig.signal(1, true);
    let ka = rig.kernargs(&Args::default().u64(host.va).u64(out.va).0);
    q.submit(dispatch_packet(
        rig.kernel("spin"),
        [64, 1, 1],
        [64, 1, 1],
        ka,
        done.va,
    ));
    // The kernel spins for a while (several time slices) before the store.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        rig.value(&done),
        1,
        "the kernel ended before the flag was set"
    );
    let flag = host.slice().as_mut_ptr().cast::<u32>();
    // SAFETY: the first 4 bytes of the host buffer, aligned (page start); the GPU reaches them
    // only through `process_vm_readv`/`writev`, so a volatile store is all the CPU side needs.
    unsafe { flag.write_volatile(7) };
    rig.wait_event(&done);
    let want: Vec<u32> = (0..64).map(|i| 7 + i).collect();
    assert_eq!(out.u32s(0, 64), want);
    host.free(&rig);
}
