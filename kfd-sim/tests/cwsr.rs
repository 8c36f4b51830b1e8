//! Compute wave save/restore: a dispatch stopped by an eviction with waves in flight (four waves
//! per workgroup between two `s_barrier`s, LDS written, an atomic already done) is written to
//! the queue's context save area (a KFD BO, as ROCr 5.2 allocates it, or anonymous memory
//! registered as an SVM range, as 6.1 does) and control stack; it
//! resumes from there after UNPAUSE, and after a CRIU checkpoint restored into a fresh machine
//! whose GPUs have other ids, with the memory of a run never stopped: no workgroup runs twice.

#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap
)]

mod common;

use std::time::{Duration, Instant};

use common::aql::{dispatch_packet, Args, Buf, Queue, Rig, INVALID};
use common::criu::{criu_view, read_dmabuf, restore_on_other_gpu_ids, write_dmabuf};
use common::{env, gpu, GTT_W, VRAM_W};
use kfd_abi::criu::{Checkpoint, RestoreDevice};
use kfd_abi::kfd::SvmAttribute;
use kfd_abi::{AllocFlags, Errno, Kfd, Prot, QueueId, RenderNode, Share};
use kfd_sim::criu::{BO_PRIV_SIZE, DEVICE_PRIV_SIZE, PROCESS_PRIV_SIZE, QUEUE_PRIV_SIZE};
use kfd_sim::{Machine, Preset, SimFile};
use rstest::rstest;

/// `spin_lds`: every work-item adds 1 to `entered`, writes its id into LDS, meets the other
/// waves at a barrier, spins until `flag` is not 0, reads the id of the work-item 64 away (in
/// another wave), meets them again, and adds that id plus the flag to `sum`. Arguments: flag,
/// entered, sum (u64 each). Words as llvm-mc -mcpu=gfx90a -show-encoding prints them.
const SPIN_LDS: &[(&str, &[u32])] = &[
    (
        "s_load_dwordx4 s[4:7], s[0:1], 0x0",
        &[0xc00a_0100, 0x0000_0000],
    ),
    (
        "s_load_dwordx2 s[8:9], s[0:1], 0x10",
        &[0xc006_0200, 0x0000_0010],
    ),
    ("s_waitcnt lgkmcnt(0)", &[0xbf8c_c07f]),
    ("v_mov_b32_e32 v1, 1", &[0x7e02_0281]),
    ("v_mov_b32_e32 v3, 0", &[0x7e06_0280]),
    (
        "global_atomic_add v3, v1, s[6:7]",
        &[0xdd08_8000, 0x0006_0103],
    ),
    ("v_lshlrev_b32_e32 v2, 2, v0", &[0x2404_0082]),
    ("ds_write_b32 v2, v0", &[0xd81a_0000, 0x0000_0002]),
    ("s_waitcnt vmcnt(0) lgkmcnt(0)", &[0xbf8c_0070]),
    ("s_barrier", &[0xbf8a_0000]),
    (
        "global_load_dword v4, v3, s[4:5] glc",
        &[0xdc51_8000, 0x0404_0003],
    ),
    ("s_waitcnt vmcnt(0)", &[0xbf8c_0f70]),
    ("v_readfirstlane_b32 s10, v4", &[0x7e14_0504]),
    ("s_sleep 1", &[0xbf8e_0001]),
    ("s_cmp_eq_u32 s10, 0", &[0xbf06_800a]),
    ("s_cbranch_scc1 -7", &[0xbf85_fff9]),
    ("v_xor_b32_e32 v5, 64, v0", &[0x2a0a_00c0]),
    ("v_lshlrev_b32_e32 v5, 2, v5", &[0x240a_0a82]),
    ("ds_read_b32 v6, v5", &[0xd86c_0000, 0x0600_0005]),
    ("s_waitcnt lgkmcnt(0)", &[0xbf8c_c07f]),
    ("s_barrier", &[0xbf8a_0000]),
    ("v_add_u32_e64 v6, v6, s10", &[0xd134_0006, 0x0000_1506]),
    (
        "global_atomic_add v3, v6, s[8:9]",
        &[0xdd08_8000, 0x0008_0603],
    ),
    ("s_endpgm", &[0xbf81_0000]),
];

/// Work-items per workgroup (four waves) and LDS bytes.
const WG: u32 = 256;
const LDS: u32 = WG * 4;
/// Bytes of the context save area and of the control stack.
const AREA: u64 = 1 << 20;
const CTL_STACK: usize = 4096;
/// The simulator's control-stack entries: dispatch, workgroup, wave.
const DISPATCH_ENTRY: usize = 56;
const GROUP_ENTRY: usize = 16;
const WAVE_ENTRY: usize = 8;

/// `spin_lds`'s kernel descriptor and code in VRAM; the kernel (descriptor, group, private).
fn spin_lds(rig: &Rig) -> (Buf, (u64, u32, u32)) {
    let b = rig.buf(4096, VRAM_W | AllocFlags::PUBLIC);
    let mut kd = [0u8; 64];
    kd[0..4].copy_from_slice(&LDS.to_le_bytes());
    kd[16..24].copy_from_slice(&256i64.to_le_bytes());
    // 16 VGPRs, the AGPRs after them; two user SGPRs: the kernarg pointer.
    kd[44..48].copy_from_slice(&3u32.to_le_bytes());
    kd[48..52].copy_from_slice(&1u32.to_le_bytes());
    kd[52..56].copy_from_slice(&(2u32 << 1).to_le_bytes());
    kd[56..58].copy_from_slice(&8u16.to_le_bytes());
    b.write(0, &kd);
    let words: Vec<u32> = SPIN_LDS
        .iter()
        .flat_map(|(_, w)| w.iter().copied())
        .collect();
    b.put_u32s(256, &words);
    let va = b.va;
    (b, (va, LDS, 0))
}

/// A dispatch of `spin_lds` in flight on a queue of its own.
struct Spinning {
    rig: Rig,
    q: Queue,
    area: Buf,
    flag: Buf,
    counts: Buf,
    done: common::aql::Signal,
    groups: u32,
    _code: Buf,
    _host: Vec<u8>,
}

/// What the context save area of the queue is.
#[derive(Debug, Clone, Copy)]
enum SaveArea {
    /// A KFD BO in GTT mapped for the GPU (ROCr 5.2).
    Bo,
    /// Anonymous memory registered as an SVM range the GPU may access (ROCr 6.1).
    Svm,
    /// None (`ctx_save_restore_address` 0).
    None,
}

/// Starts `groups` workgroups of `spin_lds` and waits until the first have done their atomic.
fn spinning(groups: u32, area: SaveArea) -> Spinning {
    let rig = Rig::new(env(Preset::mi210x2()));
    let (code, kernel) = spin_lds(&rig);
    let area_buf = rig.buf(AREA, GTT_W);
    let host = vec![0u8; (AREA + 4096) as usize];
    let host_area = (host.as_ptr() as u64 + 4095) & !4095;
    if let SaveArea::Svm = area {
        let access = SvmAttribute {
            ty: kfd_sys::KFD_IOCTL_SVM_ATTR_ACCESS,
            value: rig.g.get(),
        };
        rig.e.kfd.svm_set_attr(host_area, AREA, &[access]).unwrap();
    }
    let q = Queue::with_save_area(
        &rig,
        64,
        None,
        match area {
            SaveArea::Bo => Some((area_buf.va, AREA as u32)),
            SaveArea::Svm => Some((host_area, AREA as u32)),
            SaveArea::None => Some((0, 0)),
        },
    );
    let flag = rig.buf(4096, GTT_W);
    let counts = rig.buf(4096, GTT_W);
    let done = rig.signal(1, true);
    let ka = rig.kernargs(
        &Args::default()
            .u64(flag.va)
            .u64(counts.va)
            .u64(counts.va + 64)
            .0,
    );
    q.submit(dispatch_packet(
        kernel,
        [groups * WG, 1, 1],
        [WG as u16, 1, 1],
        ka,
        done.va,
    ));
    let s = Spinning {
        rig,
        q,
        area: area_buf,
        flag,
        counts,
        done,
        groups,
        _code: code,
        _host: host,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.entered() == 0 {
        assert!(Instant::now() < deadline, "the kernel never started");
        std::thread::sleep(Duration::from_millis(1));
    }
    s
}

impl Spinning {
    fn entered(&self) -> u32 {
        self.counts.u32s(0, 1)[0]
    }

    fn sum(&self) -> u32 {
        self.counts.u32s(64, 1)[0]
    }

    /// The control stack's used part and the wave data's size, as GET_QUEUE_WAVE_STATE says.
    fn wave_state(&self) -> (Vec<u8>, u32) {
        wave_state(&self.rig.e.kfd, self.q.id)
    }
}

fn wave_state(kfd: &Kfd<SimFile>, q: QueueId) -> (Vec<u8>, u32) {
    let mut stack = vec![0u8; CTL_STACK];
    // SAFETY: the buffer is as large as the queue's control stack.
    let (used, data) = unsafe { kfd.get_queue_wave_state(q, &mut stack) }.unwrap();
    stack.truncate(used as usize);
    (stack, data)
}

/// The saved workgroups a control stack's used part names (and a check of its entries).
fn saved_groups(stack: &[u8]) -> usize {
    if stack.is_empty() {
        return 0;
    }
    let top = &stack[stack.len() - DISPATCH_ENTRY..];
    assert_eq!(&top[..4], b"KCWS", "the dispatch entry is on top");
    let groups = u32::from_le_bytes(top[48..52].try_into().unwrap()) as usize;
    let waves = u32::from_le_bytes(top[52..56].try_into().unwrap()) as usize;
    assert_eq!(waves, 4 * groups, "one entry per wave, four per workgroup");
    assert_eq!(
        stack.len(),
        DISPATCH_ENTRY + groups * GROUP_ENTRY + waves * WAVE_ENTRY
    );
    groups
}

/// What `groups` workgroups of `spin_lds` leave in `sum` with `flag`.
fn want_sum(groups: u32, flag: u32) -> u32 {
    groups * ((0..WG).map(|t| t ^ 64).sum::<u32>() + WG * flag)
}

/// Waits up to 20 s until the 8-byte value at `off` of `m` is `want`.
fn wait_u64(read: impl Fn() -> u64, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while read() != want {
        assert!(Instant::now() < deadline, "{} != {want}", read());
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[rstest]
#[case::kfd_bo(SaveArea::Bo, 6)]
#[case::svm_range(SaveArea::Svm, 6)]
#[case::no_area(SaveArea::None, 6)]
#[case::one_workgroup(SaveArea::Bo, 1)]
fn an_evicted_dispatch_resumes_after_unpause_with_nothing_run_twice(
    #[case] area: SaveArea,
    #[case] groups: u32,
) {
    let s = spinning(groups, area);
    // PROCESS_INFO evicts the queues: it returns although the kernel spins.
    let (_criu, ck) = criu_view(&s.rig.e.kfd, &s.rig.e.proc);
    ck.criu_process_info().unwrap();
    let (stack, data) = s.wave_state();
    let saved = saved_groups(&stack);
    match area {
        SaveArea::Bo | SaveArea::Svm => {
            assert!(saved >= 1, "the spinning workgroups are saved");
            assert!(data > 0 && u64::from(data) <= AREA - CTL_STACK as u64);
            assert!(
                s.entered() <= saved as u32 * WG,
                "only saved workgroups started"
            );
        }
        SaveArea::None => assert_eq!((saved, data), (0, 0), "nothing to save into"),
    }
    assert!(s.flag.map.write_u64(0, 3));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(s.rig.value(&s.done), 1, "an evicted dispatch does not run");
    assert_eq!(s.sum(), 0);
    ck.criu_unpause().unwrap();
    s.rig.wait_event(&s.done);
    assert_eq!(s.rig.value(&s.done), 0, "the signal is decremented once");
    assert_eq!(s.entered(), s.groups * WG, "no work-item entered twice");
    assert_eq!(s.sum(), want_sum(s.groups, 3));
    s.q.wait_read_index(1);
    assert_eq!(s.q.header(0), INVALID);
}

/// The devices of a restore of `c` onto `m`.
fn devices<'a>(c: &Checkpoint, m: &Machine, renders: &'a [SimFile]) -> Vec<RestoreDevice<'a>> {
    common::criu::restore_devices(c, m, renders)
}

#[rstest]
#[case::kfd_bo(SaveArea::Bo)]
#[case::svm_range(SaveArea::Svm)]
fn a_checkpoint_mid_kernel_resumes_on_a_fresh_machine_with_other_gpu_ids(#[case] area: SaveArea) {
    let s = spinning(5, area);
    // A packet behind the spinning dispatch, rung: it waits in the ring.
    let out = s.rig.buf(4096, GTT_W);
    let next = s.rig.signal(1, false);
    let ka = s.rig.kernargs(&Args::default().u64(out.va).u32(8).0);
    s.q.submit(dispatch_packet(
        s.rig.kernel("grid2d"),
        [8, 1, 1],
        [8, 1, 1],
        ka,
        next.va,
    ));
    let (_criu, ck) = criu_view(&s.rig.e.kfd, &s.rig.e.proc);
    let info = ck.criu_process_info().unwrap();
    let (stack, _) = s.wave_state();
    assert!(saved_groups(&stack) >= 1);
    let c = ck.criu_checkpoint(&info).unwrap();

    let r = restore_on_other_gpu_ids(&c);
    for (b, rb) in c.bos.iter().zip(&r.bos) {
        if let (Some(from), Some(to)) = (&b.dmabuf, &rb.dmabuf) {
            write_dmabuf(to, &read_dmabuf(from, b.size));
        }
    }
    // The restored queue starts evicted, its waves in the control stack and the area.
    assert_eq!(wave_state(&r.kfd, s.q.id).0, stack);
    let rr = RenderNode::new(
        r.renders[0].used_by(&r.process).unwrap(),
        "render (restored)",
    );
    let map = |b: &Buf, len: usize| {
        let off = c
            .bos
            .iter()
            .zip(&r.bos)
            .find(|(x, _)| x.addr == b.va)
            .map(|(_, rb)| rb.restored_offset)
            .unwrap();
        rr.map_bo(off, len, Prot::RW, Share::Shared).unwrap()
    };
    let flag = map(&s.flag, 4096);
    let counts = map(&s.counts, 4096);
    let signals = map(&s.rig.signals, 4096);
    let done = (s.done.va - s.rig.signals.va) as usize + 8;
    assert!(flag.write_u64(0, 9));
    // criu maps the doorbells again and resumes the queues.
    let _doorbells = r.kfd.map_doorbells(gpu(0x3a01), 8192).unwrap();
    let criu_b = r.machine.spawn_process();
    Kfd::new(criu_b.open_kfd().unwrap(), "/dev/kfd (criu)")
        .criu_resume(r.process.pid())
        .unwrap();
    wait_u64(|| signals.load_u64(done).unwrap(), 0);
    let c32 = |off: usize| {
        let mut b = [0u8; 4];
        assert!(counts.read(off, &mut b));
        u32::from_le_bytes(b)
    };
    assert_eq!(c32(0), 5 * WG, "no work-item entered twice");
    assert_eq!(c32(64), want_sum(5, 9));
    // The packet behind it runs too, without a new doorbell: the MQD latched the old one.
    let next_value = (next.va - s.rig.signals.va) as usize + 8;
    wait_u64(|| signals.load_u64(next_value).unwrap(), 0);
    let grid = map(&out, 4096);
    let mut b = [0u8; 32];
    assert!(grid.read(0, &mut b));
    let got: Vec<u32> = b
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, (0..8).map(|x| x * 1000).collect::<Vec<u32>>());
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(signals.load_u64(done), Some(0), "decremented once");
    // The source, unpaused, finishes on its own machine too.
    ck.criu_unpause().unwrap();
    assert!(s.flag.map.write_u64(0, 1));
    s.rig.wait_event(&s.done);
    assert_eq!(s.sum(), want_sum(5, 1));
    drop(s.area);
}

#[test]
fn a_restore_that_fails_half_way_leaves_no_saved_waves() {
    let s = spinning(3, SaveArea::Bo);
    let (_criu, ck) = criu_view(&s.rig.e.kfd, &s.rig.e.proc);
    let info = ck.criu_process_info().unwrap();
    let c = ck.criu_checkpoint(&info).unwrap();
    let restore = |edit: &dyn Fn(&mut Vec<u8>)| {
        let m = Machine::new(&Preset::mi210x2()).unwrap();
        let p = m.spawn_process();
        let k = Kfd::new(p.open_kfd().unwrap(), "/dev/kfd");
        let renders: Vec<SimFile> = m
            .render_minors()
            .into_iter()
            .map(|x| p.open_render(x).unwrap())
            .collect();
        let mut priv_data = c.priv_data.clone();
        edit(&mut priv_data);
        let bos = common::criu::restore_bos(&c);
        let r = k
            .criu_restore(&devices(&c, &m, &renders), &bos, &priv_data, c.num_objects)
            .map(|_| ());
        (r.err().and_then(|e| e.errno()), wave_state(&k, s.q.id))
    };
    let (ok, (stack, data)) = restore(&|_| {});
    assert_eq!(ok, None);
    assert!(
        saved_groups(&stack) >= 1 && data > 0,
        "a whole restore has them"
    );
    // Trailing bytes fail the restore after every queue record.
    let (err, (stack, data)) = restore(&|p| p.extend_from_slice(&[0; 8]));
    assert_eq!(err, Some(Errno::EINVAL));
    assert_eq!(
        (stack.len(), data),
        (0, 0),
        "a half-restored queue has none"
    );
}

/// An MQD the simulator did not write (another driver's image) has no CWSR registers: the
/// restored queue is not stopped by a control stack it cannot read, and runs the dispatch from
/// its packet, as before wave save/restore.
#[test]
fn a_restored_mqd_of_another_driver_runs_the_dispatch_from_its_packet() {
    let s = spinning(2, SaveArea::Bo);
    let (_criu, ck) = criu_view(&s.rig.e.kfd, &s.rig.e.proc);
    let info = ck.criu_process_info().unwrap();
    let mut c = ck.criu_checkpoint(&info).unwrap();
    // The queue record comes first after the BO records; its MQD after its 120-byte header.
    let objects =
        PROCESS_PRIV_SIZE + DEVICE_PRIV_SIZE * c.devices.len() + BO_PRIV_SIZE * c.bos.len();
    assert_eq!(c.priv_data[objects], 0, "a queue record");
    let mqd = objects + QUEUE_PRIV_SIZE;
    c.priv_data[mqd..mqd + 4].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    let r = restore_on_other_gpu_ids(&c);
    for (b, rb) in c.bos.iter().zip(&r.bos) {
        if let (Some(from), Some(to)) = (&b.dmabuf, &rb.dmabuf) {
            write_dmabuf(to, &read_dmabuf(from, b.size));
        }
    }
    let (stack, data) = wave_state(&r.kfd, s.q.id);
    assert_eq!(
        (stack.len(), data),
        (CTL_STACK, 0),
        "the whole stack, as before"
    );
    let rr = RenderNode::new(
        r.renders[0].used_by(&r.process).unwrap(),
        "render (restored)",
    );
    let offset = |va: u64| {
        c.bos
            .iter()
            .zip(&r.bos)
            .find(|(x, _)| x.addr == va)
            .map(|(_, rb)| rb.restored_offset)
            .unwrap()
    };
    let flag = rr
        .map_bo(offset(s.flag.va), 4096, Prot::RW, Share::Shared)
        .unwrap();
    let signals = rr
        .map_bo(offset(s.rig.signals.va), 4096, Prot::RW, Share::Shared)
        .unwrap();
    assert!(flag.write_u64(0, 2));
    let _doorbells = r.kfd.map_doorbells(gpu(0x3a01), 8192).unwrap();
    let criu_b = r.machine.spawn_process();
    Kfd::new(criu_b.open_kfd().unwrap(), "/dev/kfd (criu)")
        .criu_resume(r.process.pid())
        .unwrap();
    let done = (s.done.va - s.rig.signals.va) as usize + 8;
    wait_u64(|| signals.load_u64(done).unwrap(), 0);
    let inactive = (s.q.inactive.va - s.rig.signals.va) as usize + 8;
    assert_eq!(signals.load_u64(inactive), Some(0), "no queue error");
}

/// The process's mm torn down with a dispatch in flight (criu kills the task it dumped, whose
/// queues it had just let run again): as amdkfd's MMU notifier release, the process's queues are
/// destroyed. The dispatch stops where it was, for good: no wave goes on, its completion signal
/// and the queue's `queue_inactive_signal` are never written (a queue error there would be a
/// write into a dead process), and nothing is logged as a fault of the queue.
#[rstest]
#[case::spinning(SaveArea::Bo)]
#[case::evicted_then_released(SaveArea::Svm)]
fn the_release_of_the_mm_destroys_the_queues_with_their_dispatch(#[case] area: SaveArea) {
    let s = spinning(3, area);
    let evicted = matches!(area, SaveArea::Svm);
    let criu = evicted.then(|| criu_view(&s.rig.e.kfd, &s.rig.e.proc));
    if let Some((_, ck)) = &criu {
        // Saved into its context save area, as at a dump.
        ck.criu_process_info().unwrap();
        assert!(saved_groups(&s.wave_state().0) >= 1);
    }
    let logged = s.rig.e.machine.logged_once();
    s.rig.e.proc.notify_mm_release();
    assert_eq!(
        s.rig.e.kfd.destroy_queue(s.q.id).unwrap_err().errno(),
        Some(Errno::EINVAL),
        "the queue is gone"
    );
    if let Some((_, ck)) = &criu {
        // criu's unpause after the dump: nothing is left to resume.
        ck.criu_unpause().unwrap();
    }
    let entered = s.entered();
    assert!(s.flag.map.write_u64(0, 3));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(s.rig.value(&s.done), 1, "the dispatch never completes");
    assert_eq!(s.sum(), 0, "no wave went past its spin");
    assert_eq!(s.entered(), entered, "no workgroup started");
    assert_eq!(
        s.rig.value(&s.q.inactive),
        0,
        "no queue error was written into the process"
    );
    assert_eq!(
        s.rig.e.machine.logged_once(),
        logged,
        "nothing of the queue was logged since (no fault, no queue error)"
    );
    // Released once: a second release (the watch asked again) changes nothing.
    s.rig.e.proc.notify_mm_release();
}
