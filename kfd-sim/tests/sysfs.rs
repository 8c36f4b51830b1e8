//! The sysfs slice the simulator writes, looked at the way AMD's userspace looks at it: libdrm's
//! render-node checks (`drmNodeIsDRM`, `drmGetMinorNameForFD`, `drmParseSubsystemType`,
//! `drmParsePciBusInfo`, `drmParsePciDeviceInfo`), libhsakmt's topology path and rocminfo's
//! module check, for every preset.

#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)] // tests panic on failure

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use kfd_sim::sysfs::{self, Entry, SysfsOptions};
use kfd_sim::Asic;
use kfd_sim::Preset;
use rstest::rstest;
use topology::model::keys;

fn hex(path: &Path) -> u32 {
    let s = fs::read_to_string(path).unwrap();
    u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).unwrap()
}

fn uevent(path: &Path, key: &str) -> Option<String> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")).map(str::to_owned))
}

#[rstest]
#[case::mi50x1(Preset::mi50x1(), 0x66a1, 0x02, 0x0834)]
#[case::mi100x4(Preset::mi100x4(), 0x738c, 0x01, 0x0c34)]
#[case::mi210x2(Preset::mi210x2(), 0x740f, 0x02, 0x0c34)]
#[case::mi250x8(Preset::mi250x8(), 0x740c, 0x01, 0x0b0c)]
fn libdrm_finds_each_render_node_a_pci_amdgpu_device(
    #[case] preset: Preset,
    #[case] device: u32,
    #[case] revision: u32,
    #[case] subsystem: u32,
) {
    let t = preset.to_topology().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    sysfs::write(&t, root, SysfsOptions::default()).unwrap();
    let mut cards = Vec::new();
    for n in t.gpus() {
        let minor = n.render_minor();
        let dev = root.join(format!("dev/char/226:{minor}/device"));
        // drmNodeIsDRM; the render entry is there.
        assert!(dev.join("drm").is_dir(), "minor {minor}");
        assert!(dev.join(format!("drm/renderD{minor}")).is_dir());
        // drmGetMinorNameForFD(DRM_NODE_PRIMARY): a card entry, different for each GPU.
        let card = fs::read_dir(dev.join("drm"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .find(|n| n.starts_with("card"))
            .unwrap();
        cards.push(card);
        // drmParseSubsystemType: the link's last component is "pci".
        let sub = fs::read_link(dev.join("subsystem")).unwrap();
        assert!(sub.to_string_lossy().ends_with("/pci"), "{sub:?}");
        assert!(dev.join("subsystem").is_dir(), "the link resolves");
        // drmParsePciBusInfo: PCI_SLOT_NAME is the topology's location.
        let slot = uevent(&dev.join("uevent"), "PCI_SLOT_NAME").unwrap();
        assert_eq!(slot, Asic::slot_name(n));
        let loc = n.prop(keys::LOCATION_ID);
        assert_eq!(slot, format!("0000:{:02x}:00.0", loc >> 8));
        // drmParsePciDeviceInfo with and without the revision, and the config fallback.
        assert_eq!(hex(&dev.join("vendor")), 0x1002);
        assert_eq!(hex(&dev.join("device")), device);
        assert_eq!(u64::from(hex(&dev.join("device"))), n.prop(keys::DEVICE_ID));
        assert_eq!(hex(&dev.join("revision")), revision);
        assert_eq!(hex(&dev.join("subsystem_vendor")), 0x1002);
        assert_eq!(hex(&dev.join("subsystem_device")), subsystem);
        let config = fs::read(dev.join("config")).unwrap();
        assert_eq!(u16::from_le_bytes([config[2], config[3]]), device as u16);
        assert_eq!(u32::from(config[8]), revision);
        assert_eq!(
            u16::from_le_bytes([config[46], config[47]]),
            subsystem as u16
        );
        // The driver is amdgpu, as the module knows.
        assert_eq!(
            uevent(&dev.join("uevent"), "DRIVER").as_deref(),
            Some("amdgpu")
        );
        assert!(root
            .join("module/amdgpu/drivers/pci:amdgpu")
            .join(&slot)
            .exists());
    }
    let mut distinct = cards.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), cards.len(), "{cards:?}");
}

#[test]
fn the_kfd_topology_and_the_module_are_where_the_kernel_puts_them() {
    let t = Preset::mi210x2().to_topology().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    sysfs::write(&t, root, SysfsOptions::default()).unwrap();
    for base in ["devices/virtual/kfd/kfd/topology", "class/kfd/kfd/topology"] {
        let parsed = topology::parse(&root.join(base)).unwrap();
        assert_eq!(parsed, t, "{base}");
    }
    assert_eq!(
        fs::read_to_string(root.join("module/amdgpu/initstate")).unwrap(),
        "live\n"
    );
    assert_eq!(
        fs::read_to_string(root.join("module/amdgpu/refcnt")).unwrap(),
        "0\n"
    );
    assert!(root.join("module/amdgpu/holders").is_dir());
    let coresize = fs::read_to_string(root.join("module/amdgpu/coresize")).unwrap();
    assert_eq!(
        sysfs::proc_modules_line(),
        format!("amdgpu {} 0 - Live 0x0000000000000000\n", coresize.trim())
    );
}

#[test]
fn a_cuse_render_node_leads_to_its_pci_function() {
    let t = Preset::mi100x4().to_topology().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let opts = SysfsOptions {
        cuse_render_nodes: true,
    };
    sysfs::write(&t, root, opts).unwrap();
    for n in t.gpus() {
        let m = n.render_minor();
        // The CUSE device, and the kfd_bridge module's proxy that is the public node with it.
        for class in ["cuse", "kfd_bridge"] {
            let dev = root.join(format!("devices/virtual/{class}/dri!renderD{m}/device"));
            assert!(dev.join(format!("drm/renderD{m}")).is_dir(), "{class}");
            assert_eq!(
                fs::canonicalize(&dev).unwrap(),
                fs::canonicalize(root.join(format!("dev/char/226:{m}/device"))).unwrap()
            );
        }
    }
    // Without the option there is no CUSE or kfd_bridge directory at all.
    let plain = tempfile::tempdir().unwrap();
    sysfs::write(&t, plain.path(), SysfsOptions::default()).unwrap();
    assert!(!plain.path().join("devices/virtual/cuse").exists());
    assert!(!plain.path().join("devices/virtual/kfd_bridge").exists());
}

#[test]
fn numa_nodes_of_the_pci_functions_follow_the_topology() {
    let t = Preset::mi100x4().to_topology().unwrap();
    let dir = tempfile::tempdir().unwrap();
    sysfs::write(&t, dir.path(), SysfsOptions::default()).unwrap();
    let numa: Vec<String> = t
        .gpus()
        .map(|n| {
            let m = n.render_minor();
            fs::read_to_string(
                dir.path()
                    .join(format!("dev/char/226:{m}/device/numa_node")),
            )
            .unwrap()
        })
        .collect();
    assert_eq!(numa, ["0\n", "0\n", "1\n", "1\n"]);
}

/// Every entry of the MI50 slice (all but the KFD topology, which has its own snapshot), for
/// review.
#[test]
fn mi50_slice_is_laid_out_like_the_kernels() {
    let t = Preset::mi50x1().to_topology().unwrap();
    let mut out = String::new();
    for e in sysfs::entries(&t, SysfsOptions::default()) {
        match e {
            Entry::Dir(p) => writeln!(out, "{}/", p.display()),
            Entry::Link(p, to) => writeln!(out, "{} -> {}", p.display(), to.display()),
            Entry::File(p, bytes) if p.ends_with("config") => {
                writeln!(out, "{} = {:02x?}", p.display(), &bytes[..48])
            }
            Entry::File(p, bytes) => writeln!(
                out,
                "{} = {:?}",
                p.display(),
                String::from_utf8_lossy(&bytes)
            ),
        }
        .unwrap();
    }
    insta::assert_snapshot!(out);
}
