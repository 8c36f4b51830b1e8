//! The rest of sysfs that AMD's userspace reads, besides the KFD topology: what the amdgpu driver
//! and the DRM core create for each GPU, written into a directory laid out like `/sys`.
//!
//! Who reads what (checked against libdrm 2.4.114, libhsakmt and rocminfo 5.2.3):
//!
//! - libdrm decides that an fd is a DRM node when `/sys/dev/char/<maj>:<min>/device/drm` exists
//!   (`drmNodeIsDRM`), and that a render node needs no authentication from its minor
//!   (`drmGetNodeTypeFromFd`): without that directory `amdgpu_device_initialize` asks
//!   `DRM_IOCTL_GET_CLIENT`, which a render node refuses. It names a device's primary node from
//!   the `card*` entry of that `drm` directory (`drmGetMinorNameForFD`, used to tell two devices
//!   apart), its bus from `device/subsystem` (a link ending in `/pci`) and `PCI_SLOT_NAME` of
//!   `device/uevent`, and its ids from `device/{revision,vendor,device,subsystem_vendor,
//!   subsystem_device}` (hex, `drmParsePciDeviceInfo`), falling back on `device/config`.
//! - rocminfo checks that the amdgpu module is loaded: 5.2.3 runs `lsmod | grep amdgpu` (lsmod
//!   reads `/proc/modules`, then `/sys/module/amdgpu/{refcnt,coresize,holders}`), later versions
//!   read `/sys/module/amdgpu/initstate` (`live`).
//!
//! The tree written (`root` stands for `/sys`):
//!
//! ```text
//! devices/virtual/kfd/kfd/topology/...          the KFD topology (topology::write)
//! class/kfd/kfd -> ../../devices/virtual/kfd/kfd
//! devices/pci<dom>:<bus>/<slot>/                  one PCI function per GPU: vendor, device,
//!     subsystem_vendor, subsystem_device, revision, class, config, uevent, numa_node,
//!     mem_info_vram_total, mem_info_vis_vram_total, mem_info_gtt_total, unique_id,
//!     subsystem -> ../../../bus/pci, driver -> ../../../bus/pci/drivers/amdgpu,
//!     drm/card<N>/{dev,uevent,device,subsystem}, drm/renderD<M>/{dev,uevent,device,subsystem}
//! dev/char/226:<N>, dev/char/226:<M> -> the drm entries
//! class/drm/card<N>, class/drm/renderD<M> -> the drm entries
//! bus/pci/drivers/amdgpu/<slot> -> the PCI function; module -> ../../../../module/amdgpu
//! module/amdgpu/{initstate,refcnt,coresize,taint,holders/,drivers/pci:amdgpu}
//! ```
//!
//! With [`SysfsOptions::cuse_render_nodes`], each render node served over CUSE
//! (`devices/virtual/cuse/dri!renderD<M>`, and the kfd_bridge module's proxy of it,
//! `devices/virtual/kfd_bridge/dri!renderD<M>`) also gets the `device` link a DRM minor has, to
//! its PCI function: mounted over the real sysfs (ci/vm-lane.d/kfd.inc, `mount_sim_sysfs`), the CUSE
//! device keeps its own `/sys/dev/char` link (which is how kfd-abi tells that it is CUSE-served)
//! and libdrm still finds `device/drm` under it.

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use topology::model::{keys, Node};
use topology::{create_dir_below, Topology};

use crate::asic::Asic;

/// The DRM character-device major.
pub(crate) const DRM_MAJOR: u32 = 226;
/// What `/sys/module/amdgpu/coresize` reports (the module's core size, bytes; also the size
/// column of its `/proc/modules` line). A size of the order of Debian 6.1's amdgpu.ko.
pub(crate) const AMDGPU_CORESIZE: u64 = 9_744_384;

/// Why the sysfs tree could not be written.
#[derive(Debug, thiserror::Error)]
pub enum SysfsError {
    /// A file, directory or link could not be created.
    #[error("cannot write sysfs entry {path}: {source}; check that the directory is writable")]
    Write {
        /// The entry.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The KFD topology part could not be written.
    #[error(transparent)]
    Topology(#[from] topology::WriteError),
}

/// What to write besides the kernel's entries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SysfsOptions {
    /// Give each render node served over CUSE (`devices/virtual/cuse/dri!renderD<M>`) and its
    /// kfd_bridge proxy (`devices/virtual/kfd_bridge/dri!renderD<M>`) the `device` link of a DRM
    /// minor.
    pub cuse_render_nodes: bool,
}

/// One GPU's PCI and DRM identity, as the tree names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GpuSysfs {
    /// `DDDD:BB:DD.F`.
    pub(crate) slot: String,
    /// `devices/pci<dom>:<bus>/<slot>`, relative to the sysfs root.
    pub(crate) device_dir: PathBuf,
    /// The primary node's minor (`card<N>`).
    pub(crate) card_minor: u32,
    /// The render node's minor (`renderD<M>`).
    pub(crate) render_minor: u32,
}

impl GpuSysfs {
    /// Where GPU number `index` of the topology (node `n`) appears.
    pub(crate) fn of(index: usize, n: &Node) -> Self {
        let slot = Asic::slot_name(n);
        let root_bus = format!(
            "pci{:04x}:{:02x}",
            n.prop(keys::DOMAIN) & 0xffff,
            (n.prop(keys::LOCATION_ID) >> 8) & 0xff
        );
        let render_minor = n.render_minor();
        // amdgpu registers card N and renderD 128+N together; a preset with other render minors
        // keeps that pairing where it can.
        let card_minor = match render_minor.checked_sub(128) {
            Some(c) if c < 64 => c,
            _ => u32::try_from(index).unwrap_or(0),
        };
        GpuSysfs {
            device_dir: Path::new("devices").join(root_bus).join(&slot),
            slot,
            card_minor,
            render_minor,
        }
    }
}

/// The GTT size amdgpu gives a GPU on this machine (`amdgpu_ttm_init`): half the system memory,
/// at least 3 GiB.
pub(crate) fn gtt_size(topology: &Topology) -> u64 {
    let ram: u64 = topology
        .cpus()
        .flat_map(|n| n.mem_banks.iter())
        .map(topology::model::MemBank::size_in_bytes)
        .fold(0u64, u64::saturating_add);
    (ram / 2).max(3 << 30)
}

/// The 256-byte PCI configuration header of a GPU (type 0): ids, command/status, revision, class,
/// header type, the BARs left zero, subsystem ids.
pub(crate) fn pci_config(a: &Asic) -> [u8; 256] {
    let mut c = [0u8; 256];
    c[0..2].copy_from_slice(&a.vendor_id.to_le_bytes());
    c[2..4].copy_from_slice(&a.device_id.to_le_bytes());
    // Memory space and bus mastering enabled; capabilities list present.
    c[4..6].copy_from_slice(&0x0006u16.to_le_bytes());
    c[6..8].copy_from_slice(&0x0010u16.to_le_bytes());
    c[8] = a.pci_revision;
    c[9..12].copy_from_slice(&a.pci_class.to_le_bytes()[..3]);
    c[44..46].copy_from_slice(&a.subsystem_vendor.to_le_bytes());
    c[46..48].copy_from_slice(&a.subsystem_device.to_le_bytes());
    c
}

/// Every entry of the tree: files with their bytes, directories, and symbolic links.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A directory (possibly empty).
    Dir(PathBuf),
    /// A file and its contents.
    File(PathBuf, Vec<u8>),
    /// A symbolic link and its target text.
    Link(PathBuf, PathBuf),
}

impl Entry {
    /// The entry's path, relative to the sysfs root.
    pub fn path(&self) -> &Path {
        match self {
            Entry::Dir(p) | Entry::File(p, _) | Entry::Link(p, _) => p,
        }
    }
}

fn text(path: PathBuf, s: impl Into<String>) -> Entry {
    Entry::File(path, s.into().into_bytes())
}

fn link(path: PathBuf, target: &str) -> Entry {
    Entry::Link(path, PathBuf::from(target))
}

/// The `..` prefix that climbs from `path`'s directory back to the sysfs root.
fn up_to_root(path: &Path) -> String {
    let depth = path.components().count().saturating_sub(1);
    "../".repeat(depth)
}

/// The DRM minor entry `drm/<name>` of a GPU.
fn drm_minor(gpu: &GpuSysfs, name: &str, minor: u32, out: &mut Vec<Entry>) {
    let dir = gpu.device_dir.join("drm").join(name);
    out.push(text(dir.join("dev"), format!("{DRM_MAJOR}:{minor}\n")));
    out.push(text(
        dir.join("uevent"),
        format!("MAJOR={DRM_MAJOR}\nMINOR={minor}\nDEVNAME=dri/{name}\n"),
    ));
    out.push(link(dir.join("device"), &format!("../../../{}", gpu.slot)));
    let sub = dir.join("subsystem");
    let up = up_to_root(&sub);
    out.push(link(sub, &format!("{up}class/drm")));
    for alias in [
        Path::new("dev/char").join(format!("{DRM_MAJOR}:{minor}")),
        Path::new("class/drm").join(name),
    ] {
        let up = up_to_root(&alias);
        out.push(link(alias, &format!("{up}{}", dir.display())));
    }
}

/// Every entry of the tree for `topology`, in a stable order.
pub fn entries(topology: &Topology, opts: SysfsOptions) -> Vec<Entry> {
    let mut out = Vec::new();
    let kfd = Path::new("devices/virtual/kfd/kfd");
    out.push(Entry::Dir(kfd.join("topology")));
    out.push(link(
        PathBuf::from("class/kfd/kfd"),
        "../../devices/virtual/kfd/kfd",
    ));
    let gtt = gtt_size(topology);
    let drivers = Path::new("bus/pci/drivers/amdgpu");
    for (i, n) in topology.gpus().enumerate() {
        let a = Asic::of_node(n);
        let gpu = GpuSysfs::of(i, n);
        let d = &gpu.device_dir;
        let hex16 = |v: u16| format!("0x{v:04x}\n");
        out.push(text(d.join("vendor"), hex16(a.vendor_id)));
        out.push(text(d.join("device"), hex16(a.device_id)));
        out.push(text(d.join("subsystem_vendor"), hex16(a.subsystem_vendor)));
        out.push(text(d.join("subsystem_device"), hex16(a.subsystem_device)));
        out.push(text(
            d.join("revision"),
            format!("0x{:02x}\n", a.pci_revision),
        ));
        out.push(text(d.join("class"), format!("0x{:06x}\n", a.pci_class)));
        out.push(Entry::File(d.join("config"), pci_config(&a).to_vec()));
        let mut uevent = String::new();
        let _ = write!(
            uevent,
            "DRIVER=amdgpu\nPCI_CLASS={:X}\nPCI_ID={:04X}:{:04X}\nPCI_SUBSYS_ID={:04X}:{:04X}\n\
             PCI_SLOT_NAME={}\nMODALIAS=pci:v{:08X}d{:08X}sv{:08X}sd{:08X}bc{:02X}sc{:02X}i{:02X}\n",
            a.pci_class,
            a.vendor_id,
            a.device_id,
            a.subsystem_vendor,
            a.subsystem_device,
            gpu.slot,
            a.vendor_id,
            a.device_id,
            a.subsystem_vendor,
            a.subsystem_device,
            a.pci_class >> 16,
            (a.pci_class >> 8) & 0xff,
            a.pci_class & 0xff,
        );
        out.push(text(d.join("uevent"), uevent));
        let numa = topology
            .resolved_links(n)
            .into_iter()
            .find_map(|l| topology.node(l.to).filter(|t| !t.is_gpu()).map(|t| t.id));
        out.push(text(
            d.join("numa_node"),
            numa.map_or_else(|| "-1\n".to_owned(), |id| format!("{id}\n")),
        ));
        out.push(text(
            d.join("mem_info_vram_total"),
            format!("{}\n", a.vram_size),
        ));
        out.push(text(
            d.join("mem_info_vis_vram_total"),
            format!("{}\n", a.visible_vram_size()),
        ));
        out.push(text(d.join("mem_info_gtt_total"), format!("{gtt}\n")));
        out.push(text(
            d.join("unique_id"),
            format!("{:016x}\n", n.prop(keys::UNIQUE_ID)),
        ));
        let up = up_to_root(&d.join("x"));
        out.push(link(d.join("subsystem"), &format!("{up}bus/pci")));
        out.push(link(
            d.join("driver"),
            &format!("{up}{}", drivers.display()),
        ));
        drm_minor(
            &gpu,
            &format!("card{}", gpu.card_minor),
            gpu.card_minor,
            &mut out,
        );
        drm_minor(
            &gpu,
            &format!("renderD{}", gpu.render_minor),
            gpu.render_minor,
            &mut out,
        );
        let bound = drivers.join(&gpu.slot);
        let up = up_to_root(&bound);
        out.push(link(bound, &format!("{up}{}", d.display())));
        if opts.cuse_render_nodes {
            // The CUSE device, and the kfd_bridge module's proxy in front of it when the daemon
            // serves through the module (ci/kmod): the public node is the proxy then.
            for class in ["cuse", "kfd_bridge"] {
                let dev = Path::new("devices/virtual")
                    .join(class)
                    .join(format!("dri!renderD{}", gpu.render_minor))
                    .join("device");
                let up = up_to_root(&dev);
                out.push(link(dev, &format!("{up}{}", d.display())));
            }
        }
    }
    out.push(link(drivers.join("module"), "../../../../module/amdgpu"));
    let module = Path::new("module/amdgpu");
    out.push(text(module.join("initstate"), "live\n"));
    out.push(text(module.join("refcnt"), "0\n"));
    out.push(text(
        module.join("coresize"),
        format!("{AMDGPU_CORESIZE}\n"),
    ));
    out.push(text(module.join("taint"), "\n"));
    out.push(Entry::Dir(module.join("holders")));
    out.push(link(
        module.join("drivers/pci:amdgpu"),
        "../../../bus/pci/drivers/amdgpu",
    ));
    out
}

/// The line the amdgpu module has in `/proc/modules` (name, size, users, dependents, state,
/// address as an unprivileged reader sees it).
pub fn proc_modules_line() -> String {
    format!("amdgpu {AMDGPU_CORESIZE} 0 - Live 0x0000000000000000\n")
}

/// Writes the tree for `topology` under `root` (created if needed): the KFD topology at
/// `devices/virtual/kfd/kfd/topology` and every entry of [`entries`].
///
/// # Errors
///
/// [`SysfsError`] naming the entry that could not be written.
pub fn write(topology: &Topology, root: &Path, opts: SysfsOptions) -> Result<(), SysfsError> {
    let err = |path: &Path| {
        let path = path.to_owned();
        move |source| SysfsError::Write { path, source }
    };
    fs::create_dir_all(root).map_err(err(root))?;
    let kfd = Path::new("devices/virtual/kfd/kfd/topology");
    create_dir_below(root, kfd).map_err(err(&root.join(kfd)))?;
    topology::write(topology, &root.join(kfd))?;
    for e in entries(topology, opts) {
        let path = root.join(e.path());
        if let Some(parent) = e.path().parent() {
            create_dir_below(root, parent).map_err(err(&root.join(parent)))?;
        }
        match &e {
            Entry::Dir(rel) => create_dir_below(root, rel).map_err(err(&path))?,
            Entry::File(_, bytes) => fs::write(&path, bytes).map_err(err(&path))?,
            Entry::Link(_, target) => {
                if fs::symlink_metadata(&path).is_ok() {
                    fs::remove_file(&path).map_err(err(&path))?;
                }
                symlink(target, &path).map_err(err(&path))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Preset;

    #[test]
    fn a_removed_root_is_not_made_again_by_what_is_written_below_it() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("gone");
        let t = Preset::mi210x2().to_topology().unwrap();
        let e = create_dir_below(&root, Path::new("class/drm")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        std::fs::create_dir(&root).unwrap();
        write(&t, &root, SysfsOptions::default()).unwrap();
        // Removed while a second write is under way: every directory below it is refused.
        std::fs::remove_dir_all(&root).unwrap();
        for e in entries(&t, SysfsOptions::default()) {
            if let Some(parent) = e.path().parent() {
                assert!(create_dir_below(&root, parent).is_err() || parent.as_os_str().is_empty());
            }
        }
        assert!(!root.exists());
    }

    #[test]
    fn links_climb_back_to_the_root() {
        assert_eq!(up_to_root(Path::new("dev/char/226:128")), "../../");
        assert_eq!(up_to_root(Path::new("class/kfd/kfd")), "../../");
    }

    #[test]
    fn card_minors_pair_with_render_minors() {
        let t = Preset::mi210x2()
            .with_render_minors(&[130, 250])
            .to_topology()
            .unwrap();
        let g: Vec<GpuSysfs> = t
            .gpus()
            .enumerate()
            .map(|(i, n)| GpuSysfs::of(i, n))
            .collect();
        assert_eq!((g[0].card_minor, g[0].render_minor), (2, 130));
        assert_eq!((g[1].card_minor, g[1].render_minor), (1, 250));
    }

    #[test]
    fn gtt_is_half_the_system_memory_and_at_least_3_gib() {
        let t = Preset::mi210x2().to_topology().unwrap();
        assert_eq!(gtt_size(&t), 256 << 30);
        let mut small = Preset::mi50x1();
        small.numa[0].memory_gib = 4;
        assert_eq!(gtt_size(&small.to_topology().unwrap()), 3 << 30);
    }
}
