//! The rules of one GPU pair: every reason, independent of where the other GPUs go, why a
//! destination GPU cannot take a source GPU.

use super::explain::{Reason, Rejection};
use super::matching::max_matching;
use super::side::{link_fits, CpuLink, Gpu, Side};
use super::{EQUAL_PROPERTIES, VRAM_PUBLIC, VRAM_SIZE};
use crate::model::keys;
use crate::options::{Check, CheckOptions};

/// All static reasons (independent of other GPUs' placement) why `d` cannot take `s`.
pub(super) fn static_reasons(s: &Gpu, d: &Gpu, options: &CheckOptions) -> Vec<Reason> {
    let mut out = Vec::new();
    for (i, property) in EQUAL_PROPERTIES.iter().enumerate() {
        if s.equal[i] != d.equal[i] {
            out.push(Reason::Differs {
                property,
                source: s.equal[i],
                destination: d.equal[i],
            });
        }
    }
    if s.vram_public != d.vram_public {
        out.push(Reason::Differs {
            property: VRAM_PUBLIC,
            source: s.vram_public,
            destination: d.vram_public,
        });
    }
    let checks = [
        (Check::FwVersion, keys::FW_VERSION, s.fw, d.fw),
        (
            Check::SdmaFwVersion,
            keys::SDMA_FW_VERSION,
            s.sdma_fw,
            d.sdma_fw,
        ),
        (Check::CachesCount, keys::CACHES_COUNT, s.caches, d.caches),
        (Check::NumGws, keys::NUM_GWS, s.gws, d.gws),
        (Check::VramSize, VRAM_SIZE, s.vram_size, d.vram_size),
        (
            Check::Capability,
            keys::CAPABILITY,
            s.capability,
            d.capability,
        ),
    ];
    for (check, property, sv, dv) in checks {
        // Capability must be equal; the others may be higher here than in the image.
        let fails = if check == Check::Capability {
            sv != dv
        } else {
            sv > dv
        };
        if options.enabled(check) && fails {
            out.push(Reason::CheckFailed {
                check,
                property,
                source: sv,
                destination: dv,
            });
        }
    }
    if s.hive_size > d.hive_size {
        out.push(Reason::HiveTooSmall {
            source: s.hive_size,
            destination: d.hive_size,
        });
    }
    if s.xgmi_out > d.xgmi_out {
        out.push(Reason::FewerXgmiLinks {
            source: s.xgmi_out,
            destination: d.xgmi_out,
        });
    }
    if s.valid_links > d.valid_links {
        out.push(Reason::FewerLinks {
            source: s.valid_links,
            destination: d.valid_links,
        });
    }
    out.extend(
        unmatched_cpu_link(s, d).map(|(source_cpu, l)| Reason::NoMatchingCpuLink {
            source_cpu,
            link_type: l.ty,
            two_way: l.two_way,
        }),
    );
    out
}

/// The first source CPU link that no destination CPU link can stand for (ignoring NUMA), with
/// the source CPU's index resolved by the caller.
fn unmatched_cpu_link(s: &Gpu, d: &Gpu) -> Option<(u32, CpuLink)> {
    // Distinct destination links for distinct source links: a small bipartite matching.
    let adj: Vec<Vec<usize>> = s
        .cpu_links
        .iter()
        .map(|sl| {
            (0..d.cpu_links.len())
                .filter(|&j| link_fits(sl, &d.cpu_links[j]))
                .collect()
        })
        .collect();
    let (matched, _) = max_matching(&adj, d.cpu_links.len());
    matched.iter().position(Option::is_none).map(|i| {
        (
            u32::try_from(s.cpu_links[i].cpu).unwrap_or(u32::MAX),
            s.cpu_links[i],
        )
    })
}

/// `d`'s first static reason against `s`, with the checks that, all turned off, would lift
/// every reason (none when `d` can take `s`).
pub(super) fn rejection(s: &Gpu, d: &Gpu, options: &CheckOptions) -> Option<Rejection> {
    let reasons = static_reasons(s, d, options);
    let first = reasons.first()?.clone();
    let mut lifted_by: Vec<Check> = Vec::new();
    if reasons.iter().all(|r| r.check().is_some()) {
        for c in reasons.iter().filter_map(Reason::check) {
            if !lifted_by.contains(&c) {
                lifted_by.push(c);
            }
        }
    }
    Some(Rejection {
        destination: d.r,
        reason: first,
        lifted_by,
    })
}

/// Every destination's first static reason for `s`, with the checks that would lift it.
pub(super) fn static_rejections(
    src: &Side,
    dst: &Side,
    s: usize,
    options: &CheckOptions,
) -> Vec<Rejection> {
    dst.gpus
        .iter()
        .filter_map(|dg| rejection(&src.gpus[s], dg, options))
        .collect()
}
