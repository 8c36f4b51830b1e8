//! Conversion between the topology model and the image's `kfd_device_entry` records, so the
//! checkpointed machine's topology can be rebuilt from an image and mapped onto this one.
//!
//! An image keeps, per node, what the remapping compares: GPU nodes carry their properties, the
//! VRAM kind and size and their PCIe/xGMI io_links; CPU nodes only `node_id`, `cpu_cores_count`
//! and their PCIe/xGMI io_links (which tell whether a GPU's CPU link was two-way). Everything
//! else (names, caches, link weights, p2p_links, CPU-to-CPU links) is not in the image.

use images::proto::{DevIolink, KfdDeviceEntry};

use topology::model::{heap_type, keys, Link, LinkType, MemBank, Node, Properties, Topology};

/// The node properties a GPU entry carries, in the kernel's order, with their entry fields.
fn gpu_fields(e: &KfdDeviceEntry) -> [(&'static str, u64); 27] {
    [
        (keys::CPU_CORES_COUNT, e.cpu_cores_count.into()),
        (keys::SIMD_COUNT, e.simd_count.into()),
        (keys::MEM_BANKS_COUNT, e.mem_banks_count.into()),
        (keys::CACHES_COUNT, e.caches_count.into()),
        (keys::IO_LINKS_COUNT, e.io_links_count.into()),
        (keys::MAX_WAVES_PER_SIMD, e.max_waves_per_simd.into()),
        (keys::LDS_SIZE_IN_KB, e.lds_size_in_kb.into()),
        (keys::GDS_SIZE_IN_KB, e.gds_size_in_kb.into()),
        (keys::NUM_GWS, e.num_gws.into()),
        (keys::WAVE_FRONT_SIZE, e.wave_front_size.into()),
        (keys::ARRAY_COUNT, e.array_count.into()),
        (
            keys::SIMD_ARRAYS_PER_ENGINE,
            e.simd_arrays_per_engine.into(),
        ),
        (keys::CU_PER_SIMD_ARRAY, e.cu_per_simd_array.into()),
        (keys::SIMD_PER_CU, e.simd_per_cu.into()),
        (keys::MAX_SLOTS_SCRATCH_CU, e.max_slots_scratch_cu.into()),
        (keys::VENDOR_ID, e.vendor_id.into()),
        (keys::DEVICE_ID, e.device_id.into()),
        (keys::DOMAIN, e.domain.into()),
        (keys::DRM_RENDER_MINOR, e.drm_render_minor.into()),
        (keys::HIVE_ID, e.hive_id),
        (keys::NUM_SDMA_ENGINES, e.num_sdma_engines.into()),
        (keys::NUM_SDMA_XGMI_ENGINES, e.num_sdma_xgmi_engines.into()),
        (
            keys::NUM_SDMA_QUEUES_PER_ENGINE,
            e.num_sdma_queues_per_engine.into(),
        ),
        (keys::NUM_CP_QUEUES, e.num_cp_queues.into()),
        (keys::FW_VERSION, e.fw_version.into()),
        (keys::CAPABILITY, e.capability.into()),
        (keys::SDMA_FW_VERSION, e.sdma_fw_version.into()),
    ]
}

/// A 32-bit image field from a sysfs value, saturating (with a warning) if it does not fit.
fn field32(node: &Node, key: &str) -> u32 {
    let v = node.prop(key);
    if u32::try_from(v).is_err() {
        log::warn!(
            "node {} property {key} = {v} does not fit the image's 32-bit field",
            node.id
        );
    }
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// The image's link list of a node: its PCIe and xGMI io_links.
fn iolinks(node: &Node) -> Vec<DevIolink> {
    node.io_links
        .iter()
        .filter(|l| l.link_type().is_compared())
        .map(|l| DevIolink {
            r#type: l.link_type().as_u32(),
            node_to_id: l.node_to(),
        })
        .collect()
}

/// One device entry per node, in node order (CPU entries hold only `node_id`,
/// `cpu_cores_count` and `iolinks`). The caller counts GPUs and CPUs for `num_of_gpus` and
/// `num_of_cpus`, and translates gpu_ids if the process sees other ones.
#[must_use]
pub fn to_device_entries(topology: &Topology) -> Vec<KfdDeviceEntry> {
    topology
        .nodes
        .iter()
        .map(|node| {
            if !node.is_gpu() {
                return KfdDeviceEntry {
                    node_id: node.id,
                    cpu_cores_count: field32(node, keys::CPU_CORES_COUNT),
                    iolinks: iolinks(node),
                    ..KfdDeviceEntry::default()
                };
            }
            let f = |key| field32(node, key);
            let (vram_public, vram_size) = node.vram().unwrap_or((false, 0));
            KfdDeviceEntry {
                node_id: node.id,
                gpu_id: node.gpu_id,
                cpu_cores_count: f(keys::CPU_CORES_COUNT),
                simd_count: f(keys::SIMD_COUNT),
                mem_banks_count: f(keys::MEM_BANKS_COUNT),
                caches_count: f(keys::CACHES_COUNT),
                io_links_count: f(keys::IO_LINKS_COUNT),
                max_waves_per_simd: f(keys::MAX_WAVES_PER_SIMD),
                lds_size_in_kb: f(keys::LDS_SIZE_IN_KB),
                gds_size_in_kb: f(keys::GDS_SIZE_IN_KB),
                num_gws: f(keys::NUM_GWS),
                wave_front_size: f(keys::WAVE_FRONT_SIZE),
                array_count: f(keys::ARRAY_COUNT),
                simd_arrays_per_engine: f(keys::SIMD_ARRAYS_PER_ENGINE),
                cu_per_simd_array: f(keys::CU_PER_SIMD_ARRAY),
                simd_per_cu: f(keys::SIMD_PER_CU),
                max_slots_scratch_cu: f(keys::MAX_SLOTS_SCRATCH_CU),
                vendor_id: f(keys::VENDOR_ID),
                device_id: f(keys::DEVICE_ID),
                domain: f(keys::DOMAIN),
                drm_render_minor: f(keys::DRM_RENDER_MINOR),
                hive_id: node.prop(keys::HIVE_ID),
                num_sdma_engines: f(keys::NUM_SDMA_ENGINES),
                num_sdma_xgmi_engines: f(keys::NUM_SDMA_XGMI_ENGINES),
                num_sdma_queues_per_engine: f(keys::NUM_SDMA_QUEUES_PER_ENGINE),
                num_cp_queues: f(keys::NUM_CP_QUEUES),
                fw_version: f(keys::FW_VERSION),
                capability: f(keys::CAPABILITY),
                sdma_fw_version: f(keys::SDMA_FW_VERSION),
                vram_public: u32::from(vram_public),
                vram_size,
                iolinks: iolinks(node),
            }
        })
        .collect()
}

/// Rebuilds the checkpointed machine's topology from the image's device entries: one node per
/// entry (gpu_id 0 = CPU node), the properties the entry carries in the kernel's key order, one
/// memory bank (the GPU's VRAM, or an empty system bank for a CPU node) and the io_links. Good
/// for [`map_gpus`](topology::map_gpus) as the source side; not a complete sysfs tree.
#[must_use]
pub fn from_device_entries(entries: &[KfdDeviceEntry]) -> Topology {
    let nodes = entries
        .iter()
        .map(|e| {
            let io_links = e
                .iolinks
                .iter()
                .map(|l| Link::new(LinkType::from_u32(l.r#type), e.node_id, l.node_to_id, 0))
                .collect();
            if e.gpu_id == 0 {
                return Node {
                    id: e.node_id,
                    properties: Properties::new()
                        .with(keys::CPU_CORES_COUNT, e.cpu_cores_count.into()),
                    io_links,
                    ..Node::default()
                };
            }
            let fields = gpu_fields(e);
            let properties = keys::NODE_ORDER
                .iter()
                .filter_map(|k| fields.iter().find(|(fk, _)| fk == k).copied())
                .collect();
            let heap = if e.vram_public != 0 {
                heap_type::FB_PUBLIC
            } else {
                heap_type::FB_PRIVATE
            };
            Node {
                id: e.node_id,
                gpu_id: e.gpu_id,
                name: String::new(),
                properties,
                mem_banks: vec![MemBank::new(heap, e.vram_size, 0, 0)],
                caches: Vec::new(),
                io_links,
                p2p_links: Vec::new(),
            }
        })
        .collect();
    Topology {
        generation_id: 0,
        system_properties: Properties::new(),
        nodes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use topology::builder::{GpuSpec, TopologyBuilder};
    use topology::{map_gpus, CheckOptions};

    fn mi250x_hive8() -> Topology {
        TopologyBuilder::new()
            .cpus(2)
            .gpus(4, &GpuSpec::mi250x_gcd().numa(0))
            .gpus(4, &GpuSpec::mi250x_gcd().numa(1))
            .hive(0..8)
            .build()
    }

    fn mi100x4_mixed_bar() -> Topology {
        TopologyBuilder::new()
            .cpus(2)
            .gpu(GpuSpec::mi100().numa(0))
            .gpu(GpuSpec::mi100().numa(0).vram(false, 16 << 30))
            .gpu(GpuSpec::mi50().numa(1))
            .gpu(GpuSpec::mi50().numa(1).two_way_cpu_link(false))
            .build()
    }

    #[rstest]
    #[case::hive_of_8(mi250x_hive8())]
    #[case::pcie_mixed(mi100x4_mixed_bar())]
    fn a_topology_rebuilt_from_its_image_maps_onto_itself_as_identity(#[case] t: Topology) {
        let rebuilt = from_device_entries(&to_device_entries(&t));
        let m = map_gpus(&rebuilt, &t, &CheckOptions::default()).unwrap();
        assert!(m.is_identity(), "{m}");
        assert_eq!(rebuilt.hives(), t.hives());
    }

    #[rstest]
    #[case::hive_of_8(mi250x_hive8())]
    #[case::pcie_mixed(mi100x4_mixed_bar())]
    fn entries_survive_a_round_trip_through_the_model(#[case] t: Topology) {
        let entries = to_device_entries(&t);
        assert_eq!(to_device_entries(&from_device_entries(&entries)), entries);
    }

    #[test]
    fn gpu_entries_carry_the_sysfs_values() {
        let t = TopologyBuilder::new()
            .cpu(12)
            .gpu(GpuSpec::mi100().gpu_id(0x1234).render_minor(130))
            .build();
        let entries = to_device_entries(&t);
        let (cpu, gpu) = (&entries[0], &entries[1]);
        assert_eq!((cpu.node_id, cpu.gpu_id, cpu.cpu_cores_count), (0, 0, 12));
        assert_eq!(cpu.simd_count, 0);
        assert_eq!(
            cpu.iolinks,
            [DevIolink {
                r#type: 2,
                node_to_id: 1
            }]
        );
        assert_eq!(
            (gpu.node_id, gpu.gpu_id, gpu.drm_render_minor),
            (1, 0x1234, 130)
        );
        assert_eq!(
            (gpu.simd_count, gpu.device_id, gpu.fw_version),
            (480, 0x738c, 65)
        );
        assert_eq!((gpu.vram_public, gpu.vram_size), (1, 32 << 30));
        assert_eq!(
            gpu.iolinks,
            [DevIolink {
                r#type: 2,
                node_to_id: 0
            }]
        );
    }

    #[test]
    fn cpu_to_cpu_links_are_not_in_the_image() {
        let t = TopologyBuilder::new().cpus(2).build();
        assert!(to_device_entries(&t).iter().all(|e| e.iolinks.is_empty()));
    }
}
