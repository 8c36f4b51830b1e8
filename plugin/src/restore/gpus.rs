//! The GPUs a restore may use: the local topology as the restored process may see it (its
//! device cgroup), and the spare GPUs the 6.1 driver wants listed beside the image's.

use std::collections::BTreeMap;

use kfd_abi::platform::Platform;
use kfd_abi::{Errno, Kfd, Transport};
use topology::Mapping;

use super::{RestoreError, SpareGpu};

/// The GPUs of this node that a restoring process may use, as it sees them
/// ([`usable_topology`]).
#[derive(Clone, Debug)]
pub(crate) struct UsableGpus {
    /// This node's topology without the GPUs the process may not use.
    pub topology: topology::Topology,
    /// The GPUs left out, each with what opening its render node returned.
    pub refused: Vec<RefusedGpu>,
}

/// A GPU of this node whose render node the restoring process cannot open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RefusedGpu {
    /// Its gpu_id on this node.
    pub gpu_id: u32,
    /// Its render minor.
    pub render_minor: u32,
    /// What the open returned (`EPERM` from a device cgroup, `ENOENT` when the container's
    /// `/dev` has no such node).
    pub errno: Errno,
}

/// The GPUs of this node that the restoring process may use, as it sees them.
///
/// Its device cgroup decides (a container's `--device` list): the kernel hides the other GPUs'
/// topology from it (the parser leaves those nodes out) and refuses to open their render nodes
/// (`EPERM`). criu calls the restore hooks in the restored task itself, so what it can open here
/// is what the container allows; a GPU whose render node it cannot open is left out of the
/// mapping, so that a container given 2 of 8 GPUs is restored onto those 2 and no others.
pub(crate) fn usable_topology<P: Platform>(platform: &P, local: &topology::Topology) -> UsableGpus {
    let refused: Vec<RefusedGpu> = local
        .gpus()
        .filter_map(|n| {
            let minor = n.render_minor();
            match platform.open_render(minor) {
                Ok(_) => None,
                Err(e) => match e.errno() {
                    Some(errno @ (Errno::EPERM | Errno::EACCES | Errno::ENOENT)) => {
                        log::info!(
                            "GPU {:#x} (renderD{minor}) is not for this process: {e}",
                            n.gpu_id
                        );
                        Some(RefusedGpu {
                            gpu_id: n.gpu_id,
                            render_minor: minor,
                            errno,
                        })
                    }
                    // Not a question of access: the restore reports it if it needs the GPU.
                    _ => None,
                },
            }
        })
        .collect();
    let topology = if refused.is_empty() {
        local.clone()
    } else {
        local.restricted_to(|n| !refused.iter().any(|r| r.gpu_id == n.gpu_id))
    };
    UsableGpus { topology, refused }
}

/// The restoring process's GPUs that `mapping` leaves out, with the ids the restore gives them.
///
/// Its `/dev/kfd` has a per-device record for every GPU its device cgroup lets it use
/// (`GET_PROCESS_APERTURES_NEW` lists them; the kernel filters the topology it may read by the
/// same rule), and the 6.1 driver's RESTORE wants a device bucket for each (`num_devices` must
/// equal their number). A GPU the image did not have keeps its own gpu_id as the id the process
/// knows it by, unless the image uses that id for another GPU (the restored process names its
/// GPUs by the image's ids, which must stay unambiguous); then it gets the lowest 16-bit id that
/// no GPU of the image or of this node has. The process never names these GPUs: its runtime
/// enumerated the GPUs before the checkpoint.
pub(super) fn spare_gpus<T: Transport>(
    kfd: &Kfd<T>,
    mapping: &Mapping,
    image_ids: &[u32],
    usable: &UsableGpus,
) -> Result<Vec<SpareGpu>, RestoreError> {
    let local = &usable.topology;
    let own: Vec<u32> = kfd
        .get_process_apertures_new()?
        .iter()
        .map(|a| a.gpu_id)
        .collect();
    let own_list = || {
        own.iter()
            .map(|g| format!("{g:#x}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(m) = mapping
        .gpus
        .iter()
        .find(|m| !own.contains(&m.destination_gpu_id))
    {
        return Err(RestoreError::ProcessGpus(format!(
            "image GPU {:#x} maps to GPU {:#x} (renderD{}), which the restoring process may not \
             use: its /dev/kfd has GPUs [{}] (is the topology read from another node or outside \
             the container?)",
            m.source_gpu_id,
            m.destination_gpu_id,
            m.destination_render_minor,
            own_list()
        )));
    }
    let local_ids: Vec<u32> = local.gpus().map(|n| n.gpu_id).collect();
    let mut taken: Vec<u32> = image_ids.to_vec();
    let mut out = Vec::new();
    for &gpu in &own {
        if mapping.gpus.iter().any(|m| m.destination_gpu_id == gpu) {
            continue;
        }
        if let Some(r) = usable.refused.iter().find(|r| r.gpu_id == gpu) {
            return Err(RestoreError::DeviceCgroupNotApplied {
                gpu_id: gpu,
                render_minor: r.render_minor,
                errno: r.errno,
                process_gpus: own_list(),
            });
        }
        let node = local.gpus().find(|n| n.gpu_id == gpu).ok_or_else(|| {
            RestoreError::ProcessGpus(format!(
                "the restoring process's /dev/kfd has GPU {gpu:#x} (of [{}]), which the GPU \
                 topology does not show",
                own_list()
            ))
        })?;
        let user_gpu_id = if taken.contains(&gpu) {
            (1..=0xffff)
                .find(|id| !taken.contains(id) && !local_ids.contains(id) && !own.contains(id))
                .ok_or_else(|| RestoreError::ProcessGpus("no free GPU id left".to_owned()))?
        } else {
            gpu
        };
        taken.push(user_gpu_id);
        log::info!(
            "GPU {gpu:#x} (renderD{}) is the restored process's too, but not the image's: it \
             gets no state{}",
            node.render_minor(),
            if user_gpu_id == gpu {
                String::new()
            } else {
                format!(", and id {user_gpu_id:#x} (the image uses {gpu:#x} for another GPU)")
            }
        );
        out.push(SpareGpu {
            gpu_id: gpu,
            user_gpu_id,
            render_minor: node.render_minor(),
        });
    }
    Ok(out)
}

/// Per image GPU, the render minor and gpu_id on this node that `mapping` chose.
pub(super) fn targets_of(mapping: &Mapping) -> BTreeMap<u32, (u32, u32)> {
    mapping
        .gpus
        .iter()
        .map(|m| {
            (
                m.source_gpu_id,
                (m.destination_render_minor, m.destination_gpu_id),
            )
        })
        .collect()
}
