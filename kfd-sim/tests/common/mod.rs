//! Shared set-up of the integration tests: a machine, a process with `/dev/kfd` and one render
//! node per GPU, each GPU's VM acquired.

#![allow(dead_code)]

pub(crate) mod aql;
pub(crate) mod criu;

use std::os::fd::AsFd;

use kfd_abi::{AllocFlags, GpuId, IoctlError, Kfd, Transport};
use kfd_sim::{Machine, Preset, SimFile, SimProcess};

pub(crate) struct Env {
    pub machine: Machine,
    pub proc: SimProcess,
    pub kfd: Kfd<SimFile>,
    pub renders: Vec<SimFile>,
    pub gpus: Vec<GpuId>,
}

pub(crate) fn gpu(id: u32) -> GpuId {
    GpuId::new(id).expect("nonzero gpu id")
}

/// A process on `preset` with its VMs acquired.
pub(crate) fn env(preset: Preset) -> Env {
    let machine = Machine::new(&preset).expect("machine");
    env_on(machine)
}

/// A process on `machine` with its VMs acquired.
pub(crate) fn env_on(machine: Machine) -> Env {
    let proc = machine.spawn_process();
    let kfd = Kfd::new(proc.open_kfd().expect("open kfd"), "/dev/kfd");
    let gpus: Vec<GpuId> = machine.gpu_ids().into_iter().map(gpu).collect();
    let renders: Vec<SimFile> = machine
        .render_minors()
        .into_iter()
        .map(|m| proc.open_render(m).expect("open render"))
        .collect();
    for (g, r) in gpus.iter().zip(&renders) {
        kfd.acquire_vm(*g, r.as_fd()).expect("acquire vm");
    }
    Env {
        machine,
        proc,
        kfd,
        renders,
        gpus,
    }
}

/// An unacquired process on `preset`.
pub(crate) fn bare(preset: Preset) -> (Machine, SimProcess, Kfd<SimFile>) {
    let machine = Machine::new(&preset).expect("machine");
    let proc = machine.spawn_process();
    let kfd = Kfd::new(proc.open_kfd().expect("open kfd"), "/dev/kfd");
    (machine, proc, kfd)
}

pub(crate) fn errno<T: std::fmt::Debug>(r: Result<T, IoctlError>) -> Option<kfd_abi::Errno> {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.errno(),
    }
}

pub(crate) const VRAM_W: AllocFlags = AllocFlags::VRAM.union(AllocFlags::WRITABLE);
pub(crate) const GTT_W: AllocFlags = AllocFlags::GTT.union(AllocFlags::WRITABLE);

/// A raw ioctl through the transport, with an argument struct.
pub(crate) fn raw<A>(t: &SimFile, request: u32, arg: &mut A) -> Result<i32, kfd_abi::Errno> {
    // SAFETY: `arg` is a live struct; the simulator never dereferences pointers itself.
    unsafe { t.ioctl(request, (arg as *mut A).cast()) }
}

/// A machine of two simulated MI210s behaving as `kernel`.
pub(crate) fn machine_on(kernel: kfd_sim::Kernel) -> Machine {
    let m = Machine::new(&Preset::by_name("mi210x2").expect("preset")).expect("machine");
    m.set_kernel(kernel);
    m
}

/// A render node of GPU `g` of `e`, on a clone of its file.
pub(crate) fn render(e: &Env, g: usize) -> kfd_abi::RenderNode<SimFile> {
    kfd_abi::RenderNode::new(
        Transport::try_clone(&e.renders[g]).expect("clone"),
        "renderD (sim)",
    )
}

/// GEM handle `raw` (not 0).
pub(crate) fn bo(raw: u32) -> kfd_abi::BoHandle {
    kfd_abi::BoHandle::new(raw).expect("a handle is not 0")
}

/// An AQL queue's description on GPU `g`: addresses the simulator keeps but never reads.
pub(crate) fn aql_queue(e: &Env, g: usize) -> kfd_abi::kfd::QueueDesc {
    let mut d = kfd_abi::kfd::QueueDesc::new(e.gpus[g], kfd_abi::QueueType::ComputeAql);
    d.ring_base = 0x1000_0000;
    d.ring_size = 4096;
    d.read_ptr = 0x2000_0000;
    d.write_ptr = 0x2000_0008;
    d.ctl_stack_size = 0x1000;
    d
}
