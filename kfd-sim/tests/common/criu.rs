//! A process worth checkpointing (BOs of every kind on two GPUs, queues, events, an SVM range),
//! its dump, and the arguments of its restore: shared by the CRIU_OP tests.

#![allow(clippy::unwrap_used)] // test helpers, like the tests themselves, panic on failure

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;

use kfd_abi::criu::{Checkpoint, RestoreBo, RestoreDevice};
use kfd_abi::kfd::{QueueDesc, SvmAttribute};
use kfd_abi::{AllocFlags, EventId, EventType, Kfd, QueueType};
use kfd_sim::{Machine, Preset, SimFile, SimProcess};
use kfd_sys as sys;

use super::{env, gpu, Env, GTT_W, VRAM_W};

/// Where the source process's BOs start.
pub(crate) const VA: u64 = 0x7f00_0000_0000;
/// One MiB.
pub(crate) const MIB: u64 = 1 << 20;

/// The traced process's /dev/kfd in the hands of a new, tracing "criu" process.
pub(crate) fn criu_view(kfd: &Kfd<SimFile>, target: &SimProcess) -> (SimProcess, Kfd<SimFile>) {
    let criu = target.machine().spawn_process();
    criu.ptrace_attach(target);
    let k = Kfd::new(kfd.transport().used_by(&criu).unwrap(), "/dev/kfd (criu)");
    (criu, k)
}

pub(crate) struct Source {
    pub env: Env,
    _host: Vec<u8>,
    pub events: Vec<EventId>,
}

/// The dumped process: BOs of every kind on two GPUs, three queues, three events, an SVM range.
pub(crate) fn source() -> Source {
    let e = env(Preset::mi210x2());
    let (g0, g1) = (e.gpus[0], e.gpus[1]);
    let k = &e.kfd;
    let v0 = k.alloc_memory(VA, 4 * MIB, g0, VRAM_W).unwrap();
    k.map_memory_to_gpu(v0.handle, &[g0, g1]).unwrap();
    let v1 = k
        .alloc_memory(VA + 16 * MIB, 2 * MIB, g1, VRAM_W | AllocFlags::EXECUTABLE)
        .unwrap();
    k.map_memory_to_gpu(v1.handle, &[g1]).unwrap();
    k.alloc_memory(VA + 32 * MIB, MIB, g0, AllocFlags::GTT)
        .unwrap();
    let page = k.alloc_memory(VA + 64 * MIB, 32 << 10, g1, GTT_W).unwrap();
    k.alloc_memory(VA + 128 * MIB, 8192, g0, AllocFlags::DOORBELL)
        .unwrap();
    let host = vec![0u8; 16384];
    let cpu = (host.as_ptr() as u64 + 4095) & !4095;
    // SAFETY: `host` lives as long as the process (kept in Source).
    unsafe { k.alloc_userptr(VA + 130 * MIB, 8192, g1, AllocFlags::WRITABLE, cpu) }.unwrap();
    let mut aql = QueueDesc::new(g0, QueueType::ComputeAql);
    aql.ring_base = 0x1000_0000;
    aql.ring_size = 4096;
    aql.ctl_stack_size = 0x2000;
    // SAFETY: the simulator keeps the addresses but never dereferences them.
    unsafe {
        k.create_queue(&aql).unwrap();
        k.create_queue(&QueueDesc::new(g1, QueueType::Sdma))
            .unwrap();
        k.create_queue(&QueueDesc {
            gpu_id: g1.get(),
            ..aql
        })
        .unwrap();
    }
    let e0 = k
        .create_event(EventType::Signal, false, Some(page.handle))
        .unwrap()
        .event_id;
    let e1 = k
        .create_event(EventType::Signal, true, None)
        .unwrap()
        .event_id;
    let e2 = k
        .create_event(EventType::NodeChange, false, None)
        .unwrap()
        .event_id;
    k.set_event(e0).unwrap();
    let svm = vec![0u8; 3 * 4096];
    let start = (svm.as_ptr() as u64 + 4095) & !4095;
    let loc = SvmAttribute {
        ty: sys::KFD_IOCTL_SVM_ATTR_PREFERRED_LOC,
        value: g1.get(),
    };
    k.svm_set_attr(start, 4096, &[loc]).unwrap();
    Source {
        env: e,
        _host: host,
        events: vec![e0, e1, e2],
    }
}

pub(crate) fn restore_devices<'a>(
    c: &Checkpoint,
    m: &Machine,
    renders: &'a [SimFile],
) -> Vec<RestoreDevice<'a>> {
    c.devices
        .iter()
        .zip(m.gpu_ids())
        .zip(renders)
        .map(|((d, new), r)| RestoreDevice {
            user_gpu_id: gpu(d.user_gpu_id),
            actual_gpu_id: gpu(new),
            drm: r.as_fd(),
        })
        .collect()
}

pub(crate) fn restore_bos(c: &Checkpoint) -> Vec<RestoreBo> {
    c.bos.iter().map(RestoreBo::from).collect()
}

pub(crate) fn dump() -> (Source, Checkpoint) {
    let src = source();
    let (_criu, ck) = criu_view(&src.env.kfd, &src.env.proc);
    let info = ck.criu_process_info().unwrap();
    let c = ck.criu_checkpoint(&info).unwrap();
    ck.criu_unpause().unwrap();
    (src, c)
}

/// Writes `data` at the start of a BO through its dma-buf fd.
pub(crate) fn write_dmabuf(fd: &OwnedFd, data: &[u8]) {
    File::from(fd.try_clone().unwrap())
        .write_all_at(data, 0)
        .unwrap();
}

/// Reads the first `len` bytes of a BO through its dma-buf fd.
pub(crate) fn read_dmabuf(fd: &OwnedFd, len: u64) -> Vec<u8> {
    let mut b = vec![0u8; usize::try_from(len).unwrap()];
    File::from(fd.try_clone().unwrap())
        .read_exact_at(&mut b, 0)
        .unwrap();
    b
}

/// A restore of `c` into a fresh process on an MI210x2 whose GPUs have other ids (0x3a01,
/// 0x3a02), with a render node of each GPU opened by it.
pub(crate) struct RestoredElsewhere {
    pub machine: Machine,
    pub process: SimProcess,
    pub kfd: Kfd<SimFile>,
    pub renders: Vec<SimFile>,
    pub bos: Vec<kfd_abi::criu::RestoredBo>,
}

/// Restores `c` as [`RestoredElsewhere`] says.
pub(crate) fn restore_on_other_gpu_ids(c: &Checkpoint) -> RestoredElsewhere {
    let machine = Machine::new(&Preset::mi210x2().with_gpu_ids(&[0x3a01, 0x3a02])).unwrap();
    let process = machine.spawn_process();
    let kfd = Kfd::new(process.open_kfd().unwrap(), "/dev/kfd (restored)");
    let renders: Vec<SimFile> = machine
        .render_minors()
        .into_iter()
        .map(|m| process.open_render(m).unwrap())
        .collect();
    let bos = kfd
        .criu_restore(
            &restore_devices(c, &machine, &renders),
            &restore_bos(c),
            &c.priv_data,
            c.num_objects,
        )
        .unwrap();
    RestoredElsewhere {
        machine,
        process,
        kfd,
        renders,
        bos,
    }
}
