//! `check --devices`: the GPUs of a container, as the render nodes it was given.

use topology::Topology;

#[derive(Debug, thiserror::Error)]
#[error("--devices: {what}")]
pub struct DeviceListError {
    /// What is wrong, and what the node has.
    pub what: String,
}

/// The render minors of a `--devices` list (`/dev/dri/renderD<minor>`, also without the
/// directory; `/dev/kfd` is skipped), each a GPU of `node`, in the order given.
///
/// # Errors
///
/// [`DeviceListError`] for anything else, or a render node that is not a GPU of `node`.
pub fn render_minors(
    devices: &[String],
    node: &Topology,
    topology_root: &str,
) -> Result<Vec<u32>, DeviceListError> {
    let known: Vec<u32> = node.gpus().map(topology::Node::render_minor).collect();
    let listing = || {
        known
            .iter()
            .map(|m| format!("renderD{m}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut minors = Vec::new();
    for d in devices.iter().map(|d| d.trim()).filter(|d| !d.is_empty()) {
        let name = d.rsplit('/').next().unwrap_or(d);
        if name == "kfd" {
            continue;
        }
        let minor: u32 = name
            .strip_prefix("renderD")
            .and_then(|m| m.parse().ok())
            .ok_or_else(|| DeviceListError {
                what: format!(
                    "{d:?} is not a render node (/dev/dri/renderD<minor>) or /dev/kfd; a \
                     container's GPUs are its render nodes"
                ),
            })?;
        if !known.contains(&minor) {
            return Err(DeviceListError {
                what: format!(
                    "{d} is not a GPU of the topology at {topology_root}: the node has {} ({}), \
                     the list allows {} so far",
                    crate::count(known.len(), "GPU", "GPUs"),
                    listing(),
                    minors.len()
                ),
            });
        }
        if !minors.contains(&minor) {
            minors.push(minor);
        }
    }
    if minors.is_empty() {
        return Err(DeviceListError {
            what: format!(
                "no render node listed, so the list allows 0 GPUs; a container needs at least one \
                 GPU's (the node has {}: {})",
                crate::count(known.len(), "GPU", "GPUs"),
                listing()
            ),
        });
    }
    Ok(minors)
}
