//! The model ROCm workload on the in-process simulator: it fills its VRAM and GTT by SDMA through
//! its render files (the VMs KFD acquired), verifies, ticks, verifies again; a byte corrupted
//! through a checkpoint dma-buf is caught and named.

#![allow(clippy::unwrap_used)] // tests panic on failure

use std::fs::File;
use std::os::unix::fs::FileExt;

use harness::workload::{Dma, Kind, Spec, Workload, WorkloadError, STAMP_SLOT};
use kfd_abi::{GpuId, Kfd, RenderNode};
use kfd_sim::{Machine, Preset, SimFile, SimProcess};
use rstest::rstest;

fn start(machine: &Machine, proc: &SimProcess) -> Workload<SimFile> {
    start_with(machine, proc, Dma::Auto)
}

fn start_with(machine: &Machine, proc: &SimProcess, dma: Dma) -> Workload<SimFile> {
    let kfd = Kfd::new(proc.open_kfd().unwrap(), "/dev/kfd");
    let gpus = machine
        .gpu_ids()
        .into_iter()
        .zip(machine.render_minors())
        .map(|(id, minor)| {
            let r = RenderNode::new(proc.open_render(minor).unwrap(), format!("renderD{minor}"));
            (GpuId::new(id).unwrap(), r)
        })
        .collect();
    Workload::start_with(kfd, gpus, &Spec::default(), dma).unwrap()
}

#[rstest]
#[case::auto_takes_user_queues(Dma::Auto, Dma::Queues)]
#[case::user_queues(Dma::Queues, Dma::Queues)]
#[case::command_submission(Dma::Cs, Dma::Cs)]
fn the_workload_starts_verifies_ticks_and_verifies_again(#[case] asked: Dma, #[case] got: Dma) {
    let machine = Machine::new(&Preset::mi210x2()).unwrap();
    let proc = machine.spawn_process();
    let mut w = start_with(&machine, &proc, asked);
    assert_eq!(w.dma(), got);
    // With user queues the process maps, per GPU, its doorbell page, ring and staging buffer,
    // and the events page from /dev/kfd at the page buffer's GPU address.
    let vmas = proc.device_vmas();
    let want = if got == Dma::Queues { 2 * 3 + 1 } else { 0 };
    assert_eq!(vmas.len(), want, "{vmas:?}");
    let page = w
        .manifest()
        .gpus
        .iter()
        .flat_map(|g| &g.buffers)
        .find(|b| b.kind == Kind::EventPage)
        .unwrap();
    let events_vmas: Vec<_> = vmas
        .iter()
        .filter(|v| v.pgoff == kfd_abi::mmap_offset::TYPE_EVENTS)
        .collect();
    if got == Dma::Queues {
        assert_eq!(events_vmas.len(), 1, "{vmas:?}");
        assert_eq!(events_vmas[0].start, page.va);
        assert_eq!(w.events_page().map(|m| m.addr()), Some(page.va));
    } else {
        assert!(events_vmas.is_empty(), "{vmas:?}");
        assert!(w.events_page().is_none());
    }
    let first = w.verify().unwrap();
    // Through the events page: the stamp, and the slot of each event (and each queue's).
    let page_slots = if got == Dma::Queues {
        1 + Spec::default().events as usize + 2
    } else {
        0
    };
    assert_eq!(first.page_slots, page_slots);
    let spec = Spec::default();
    assert_eq!(first.buffers, 2 * (spec.vram.len() + spec.gtt.len()));
    assert_eq!(first.bytes, w.manifest().pattern_bytes());
    assert_eq!(first.queues, 2 * spec.queues as usize);
    assert_eq!(first.events, spec.events as usize);
    assert_eq!(first.generation, 1);
    assert_eq!(w.tick().unwrap(), 2);
    assert_eq!(w.verify().unwrap().generation, 2);
}

#[test]
fn a_corrupted_byte_fails_verify_naming_the_buffer() {
    let machine = Machine::new(&Preset::mi210x2()).unwrap();
    let proc = machine.spawn_process();
    let w = start(&machine, &proc);
    let gpu = &w.manifest().gpus[1];
    let victim = gpu
        .buffers
        .iter()
        .find(|b| b.kind == Kind::Vram && b.index == 1)
        .unwrap()
        .clone();

    // criu's way to the memory: a dma-buf from CHECKPOINT.
    let criu = machine.spawn_process();
    criu.ptrace_attach(&proc);
    let ck = Kfd::new(w.kfd().transport().used_by(&criu).unwrap(), "/dev/kfd");
    let info = ck.criu_process_info().unwrap();
    let c = ck.criu_checkpoint(&info).unwrap();
    let bucket = c.bos.iter().find(|b| b.addr == victim.va).unwrap();
    let f = File::from(bucket.dmabuf.as_ref().unwrap().try_clone().unwrap());
    let mut byte = [0u8];
    f.read_exact_at(&mut byte, 12345).unwrap();
    f.write_all_at(&[byte[0] ^ 0x40], 12345).unwrap();
    ck.criu_unpause().unwrap();

    let err = w.verify().unwrap_err();
    let WorkloadError::Mismatch(msg) = &err else {
        panic!("expected a mismatch, got {err}");
    };
    let want = format!("GPU {:#x} buffer 1 (Vram", gpu.gpu_id);
    assert!(msg.contains(&want), "{msg}");
    assert!(msg.contains("byte 12345"), "{msg}");
}

/// Which slot of the events page a test spoils.
enum Spoil {
    Stamp,
    FirstEvent,
}

#[rstest]
#[case::the_stamp_through_the_mapping(Spoil::Stamp, "slot 4095 reads")]
#[case::an_event_slot_left_written(Spoil::FirstEvent, "the slot of event ")]
fn the_events_page_mapping_is_checked(#[case] spoil: Spoil, #[case] says: &str) {
    let machine = Machine::new(&Preset::mi210x2()).unwrap();
    let proc = machine.spawn_process();
    let mut w = start_with(&machine, &proc, Dma::Queues);
    assert_eq!(w.tick().unwrap(), 2);
    let slot = match spoil {
        Spoil::Stamp => STAMP_SLOT,
        Spoil::FirstEvent => u64::from(w.manifest().events[0].0),
    };
    let page = w.events_page().unwrap();
    let at = usize::try_from(slot * 8).unwrap();
    let was = page.read_u64(at).unwrap();
    assert!(page.write_u64(at, 0x1234));
    let err = w.verify().unwrap_err().to_string();
    assert!(err.contains("events page: ") && err.contains(says), "{err}");
    // Written back, the page verifies again (what the GPU reads is what the mapping shows).
    assert!(page.write_u64(at, was));
    assert_eq!(w.verify().unwrap().generation, 2);
}
