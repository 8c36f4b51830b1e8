//! Tests that run unchanged on the simulator (default) and on real hardware
//! (`AMDGPU_CR_BACKEND=hardware`, the hardware lane): the same fixture selects the platform.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use harness::workload::{Spec, Workload};
use kfd_abi::{GpuId, Platform};
use tests::backend::{Backend, PlatformTest};

struct DriverVersion;

impl PlatformTest for DriverVersion {
    fn run<P: Platform>(&self, platform: &P) {
        let v = platform.open_kfd().unwrap().get_version().unwrap();
        assert_eq!(v.major, 1);
        assert!(v.minor >= 11, "KFD ioctl 1.{} is older than 1.11", v.minor);
    }
}

#[test]
fn the_driver_speaks_kfd_1_11_or_later() {
    Backend::from_env().run(&DriverVersion);
}

struct TopologyMapsOntoItself;

impl PlatformTest for TopologyMapsOntoItself {
    fn run<P: Platform>(&self, platform: &P) {
        let t = topology::parse(&platform.topology_root()).unwrap();
        assert!(t.gpus().count() > 0, "no GPU in the topology");
        let m = topology::map_gpus(&t, &t, &topology::CheckOptions::default()).unwrap();
        assert!(m.is_identity());
    }
}

#[test]
fn the_local_topology_maps_onto_itself_as_the_identity() {
    Backend::from_env().run(&TopologyMapsOntoItself);
}

struct WorkloadRoundTrip;

impl PlatformTest for WorkloadRoundTrip {
    fn run<P: Platform>(&self, platform: &P) {
        let t = topology::parse(&platform.topology_root()).unwrap();
        let kfd = platform.open_kfd().unwrap();
        let gpus = t
            .gpus()
            .map(|n| {
                (
                    GpuId::new(n.gpu_id).unwrap(),
                    platform.open_render(n.render_minor()).unwrap(),
                )
            })
            .collect();
        let spec = Spec::new(3, vec![1 << 20, 8 << 10], vec![64 << 10]);
        let mut w = Workload::start(kfd, gpus, &spec).unwrap();
        w.verify().unwrap();
        assert_eq!(w.tick().unwrap(), 2);
        let r = w.verify().unwrap();
        assert_eq!(r.generation, 2);
        assert_eq!(r.bytes, w.manifest().pattern_bytes());
    }
}

#[test]
fn the_model_workload_fills_and_verifies_its_buffers_by_sdma() {
    Backend::from_env().run(&WorkloadRoundTrip);
}

#[test]
fn the_backend_switch_selects_hardware_only_when_asked() {
    let sim = Backend::from_lookup(|_| None);
    assert!(sim.is_simulator());
    let hw =
        Backend::from_lookup(|k| (k == tests::backend::ENV_BACKEND).then(|| "hardware".into()));
    assert_eq!(hw.name(), "hardware");
}
