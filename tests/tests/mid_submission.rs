//! A checkpoint that lands inside a step of the workload's tick, as criu's freeze can, with the
//! workload moving data by command submission (`Dma::Cs`; its user-mode queues keep no objects
//! in the render-node file, see kfd-sim's tests/umq.rs for a checkpoint with packets in a ring).
//!
//! The workload's tick builds an IB, a submission context and a staging buffer in its render-node
//! file, submits, waits, and tears them down. Here criu's part (dump through the plugin, restore
//! into a fresh process) runs right when the workload enters a given ioctl, and from then on the
//! workload's fds lead to the restored files, as after `criu restore`: same process memory, new
//! open files whose VMs hold the KFD buffers but none of the step's objects. The step fails as on
//! the 6.1 driver (WAIT_CS on a context that is gone: EINVAL; a submission whose IB was mapped in
//! the old file only: a VM fault, ETIME), the workload runs it again on new objects, and every
//! byte, queue and event verifies.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::c_void;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use amdgpu_plugin::criu::Settings;
use harness::workload::{Dma, Spec, Workload};
use harness::{self, SimNode};
use kfd_abi::transport::Forward;
use kfd_abi::{Errno, GpuId, Kfd, RenderNode, Transport};
use kfd_sim::preset::Preset;
use kfd_sim::{SimFile, SimProcess};
use rstest::rstest;

/// What criu does when it fires: returns the restored files, `/dev/kfd` first, then the render
/// nodes in the workload's order, and the restored process (kept alive with them).
type Criu = Box<dyn FnOnce() -> (Vec<SimFile>, SimProcess) + Send>;

/// Shared by the workload's files: once armed, fires criu on the `at`-th render-node call.
struct Trap {
    at: usize,
    calls: AtomicUsize,
    criu: Mutex<Option<Criu>>,
    replaced: Vec<Arc<OnceLock<SimFile>>>,
    restored: OnceLock<SimProcess>,
}

impl Trap {
    fn render_call(&self) {
        let mut armed = self.criu.lock().unwrap();
        if armed.is_none() || self.calls.fetch_add(1, Ordering::SeqCst) + 1 != self.at {
            return;
        }
        let criu = armed.take().unwrap();
        drop(armed);
        let (files, process) = criu();
        assert_eq!(files.len(), self.replaced.len());
        for (slot, file) in self.replaced.iter().zip(files) {
            slot.set(file).unwrap();
        }
        self.restored.set(process).unwrap();
    }

    fn fired(&self) -> bool {
        self.restored.get().is_some()
    }
}

impl std::fmt::Debug for Trap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Trap")
    }
}

/// One of the workload's fds: the file it was opened on until criu restores the process, then
/// the restored file.
#[derive(Debug)]
struct Fd {
    render: bool,
    opened: SimFile,
    restored: Arc<OnceLock<SimFile>>,
    trap: Arc<Trap>,
}

impl Fd {
    fn current(&self) -> &SimFile {
        self.restored.get().unwrap_or(&self.opened)
    }
}

impl AsFd for Fd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.current().as_fd()
    }
}

impl Forward for Fd {
    type Inner = SimFile;

    fn inner(&self) -> &SimFile {
        self.current()
    }

    unsafe fn before_ioctl(&self, _request: u32, _arg: *mut c_void) -> Result<(), Errno> {
        if self.render {
            self.trap.render_call();
        }
        Ok(())
    }

    fn dup(&self) -> io::Result<Self> {
        Ok(Self {
            render: self.render,
            opened: self.opened.try_clone()?,
            restored: Arc::clone(&self.restored),
            trap: Arc::clone(&self.trap),
        })
    }
}

/// Every render-node call of the first GPU's step, in order: the IB (GEM_USERPTR, GEM_VA), the
/// context (AMDGPU_CTX), the staging buffer (GEM_USERPTR, GEM_VA), AMDGPU_CS, AMDGPU_WAIT_CS, and
/// the teardown (AMDGPU_CTX, GEM_VA, GEM_CLOSE, GEM_VA, GEM_CLOSE); then the second GPU's first.
/// Landing after the IB was mapped and before the submission makes the submission fault on the
/// restored file (ETIME); after the submission, its wait finds no context (EINVAL).
#[rstest]
fn a_checkpoint_inside_a_step_costs_at_most_one_rerun_of_it(
    #[values(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13)] at: usize,
) {
    let preset = Preset::by_name("mi210x2").unwrap();
    let node = Arc::new(SimNode::new(&preset).unwrap());
    let process = node.machine.spawn_process();
    let platform = node.platform_of(&process);
    let kfd = platform.open_kfd_as(&process).unwrap();
    let minors = node.machine.render_minors();
    let renders: Vec<SimFile> = minors
        .iter()
        .map(|&m| platform.open_render_as(&process, m).unwrap())
        .collect();

    // criu's part, with its own handles on the workload's files (as the parasite passes them).
    let dir = tempfile::tempdir().unwrap();
    let criu: Criu = {
        let node = Arc::clone(&node);
        let process = process.clone();
        let kfd = Kfd::new(kfd.try_clone().unwrap(), "/dev/kfd");
        let renders: Vec<RenderNode<SimFile>> = renders
            .iter()
            .map(|r| RenderNode::new(r.try_clone().unwrap(), "renderD"))
            .collect();
        let dir = dir.path().to_path_buf();
        Box::new(move || {
            let settings = Settings::from_lookup(|_| None, false);
            let refs: Vec<&RenderNode<SimFile>> = renders.iter().collect();
            let (ids, _) =
                harness::checkpoint_files(&node, &|p| p, &process, &kfd, &refs, &dir, &settings)
                    .unwrap();
            // The dumped process lives on in this test (its memory is the test's), so the
            // restored one gets another pid on the same node.
            let fresh = node.machine.spawn_process();
            let (restored, _) =
                harness::restore_with(&node, &|p| p, fresh, &dir, &ids, &settings).unwrap();
            let mut files = vec![restored.kfd.into_transport()];
            files.extend(restored.renders.into_iter().map(RenderNode::into_transport));
            (files, restored.process)
        })
    };
    let trap = Arc::new(Trap {
        at,
        calls: AtomicUsize::new(0),
        criu: Mutex::new(None),
        replaced: (0..=renders.len())
            .map(|_| Arc::new(OnceLock::new()))
            .collect(),
        restored: OnceLock::new(),
    });
    let fd = |opened: SimFile, i: usize| Fd {
        render: i > 0,
        opened,
        restored: Arc::clone(&trap.replaced[i]),
        trap: Arc::clone(&trap),
    };
    let wkfd = Kfd::new(fd(kfd, 0), "/dev/kfd");
    let gpus: Vec<(GpuId, RenderNode<Fd>)> = node
        .machine
        .gpu_ids()
        .into_iter()
        .zip(renders)
        .enumerate()
        .map(|(i, (id, r))| {
            (
                GpuId::new(id).unwrap(),
                RenderNode::new(fd(r, i + 1), format!("renderD{}", minors[i])),
            )
        })
        .collect();
    let spec = Spec::new(9, vec![1 << 20, 4 << 10], vec![64 << 10]);
    // Only command submission keeps objects in the render-node file across a tick step.
    let mut w = Workload::start_with(wkfd, gpus, &spec, Dma::Cs).unwrap();
    assert_eq!(w.tick().unwrap(), 2, "a tick before the checkpoint");
    assert!(!trap.fired());

    // Arm: criu runs at the `at`-th render-node call of the next tick.
    *trap.criu.lock().unwrap() = Some(criu);
    assert_eq!(w.tick().unwrap(), 3);
    assert!(trap.fired(), "criu ran inside the tick");
    let rebuilds = w.rebuilds();
    assert!(rebuilds <= 1, "{rebuilds} steps ran again");
    // Between the mapping of the IB and the wait, the step cannot finish on the restored file.
    if (2..=7).contains(&at) {
        assert_eq!(rebuilds, 1, "the interrupted step ran again");
    }

    assert_eq!(w.tick().unwrap(), 4);
    assert_eq!(w.rebuilds(), rebuilds, "later ticks need no rerun");
    let report = w.verify().unwrap();
    assert_eq!(report.generation, 4);
    assert_eq!(report.bytes, w.manifest().pattern_bytes());
    assert_eq!(report.queues, 2);
    assert_eq!(report.events, 2);
}
