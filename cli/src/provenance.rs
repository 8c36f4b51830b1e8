//! Which plugin wrote an image directory (ours, upstream's v4.2 or its development branch), and
//! what of it each plugin can restore: part of `amdgpu-cr inspect`.
//!
//! The three write the same files and the same messages (criu-amdgpu.proto), and differ in
//! what they add:
//! - ours: a checksum list per pages file (`pages_checksums`, field 100 of `criu_kfd` and
//!   `criu_render_node`), which no upstream plugin writes; besides the development branch's
//!   fields (below), which ours writes too.
//! - upstream's development branch (criu-dev): `kfd_bo_entry.handle` (field 6) in every BO
//!   entry, `criu_render_node`'s `id`, `drm_render_minor`, `num_of_bos` (fields 2-4) and, on
//!   Linux 6.18 and later, render-node buffers (`bo_entries`, `amdgpu-drm-pages-*` files) and
//!   dma-buf files (`amdgpu-dmabuf_*`). Its proto declares those fields `required`, so it cannot
//!   decode a v4.2 image, which lacks them.
//! - upstream's v4.2: none of these.
//!
//! The development branch's fields are told from v4.2's absence of them on the wire (a decoded
//! `handle` of 0xFFFFFFFF, "no handle", looks the same either way).

use std::path::Path;

use images::proto::CriuRenderNode;
use images::wire::fields;
use images::{DmabufImage, ImageFile, KfdImage, RenderNodeImage};
use serde::Serialize;

use super::imagedir::{ImageDir, ImageName};

/// Who wrote an image directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Writer {
    /// This project's plugin (its checksum lists).
    Ours,
    /// Upstream's development branch, criu-dev (its fields, no checksum list); or ours with
    /// checksums off (`amdgpu-cr demo --no-checksums`), which writes the same.
    UpstreamDev,
    /// Upstream's v4.2 release (neither).
    UpstreamV42,
    /// Nothing to tell it by (no decodable image).
    Unknown,
}

impl Writer {
    /// As the writer of a directory.
    fn as_writer(self) -> &'static str {
        match self {
            Self::UpstreamDev => {
                "upstream's plugin, development branch (criu-dev), or this plugin without checksums"
            }
            other => other.name(),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Ours => "this plugin (amdgpu-cr)",
            Self::UpstreamDev => "upstream's plugin, development branch (criu-dev)",
            Self::UpstreamV42 => "upstream's plugin, v4.2",
            Self::Unknown => "unknown",
        }
    }
}

/// What one plugin can restore of the directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Restorer {
    /// The plugin: `ours`, `upstream_v42` or `upstream_dev`.
    pub plugin: Writer,
    /// It restores everything the images hold.
    pub all: bool,
    /// What it does not restore, or why it fails; empty when `all`.
    pub limits: Vec<String>,
}

/// Who wrote the directory, why we think so, and what each plugin can restore of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Provenance {
    /// The writer.
    pub writer: Writer,
    /// What it was told by.
    pub evidence: String,
    /// Ours, upstream's v4.2, upstream's criu-dev, in that order.
    pub restorers: Vec<Restorer>,
}

/// What the files hold that tells the writers apart.
#[derive(Debug, Default)]
struct Marks {
    images: usize,
    checksum_lists: usize,
    /// KFD images ending with our own image checksum (field 101), verified.
    image_checksums: usize,
    /// BO entries with / without field 6.
    bos_with_handle: usize,
    bos_without_handle: usize,
    /// Render-node images with / without fields 2-5.
    renders_dev: usize,
    renders_v42: usize,
    render_buffers: u64,
    dmabufs: usize,
    /// Dma-buf images and importing render-node buffers whose shared buffer (named by its GEM
    /// handle) no image creates.
    orphans: usize,
    drm_pages: usize,
    /// The most GPUs with saved contents in one KFD image.
    gpus_with_contents: usize,
}

/// The payload of image file `name` of `dir` (after its 8-byte length).
fn payload(dir: &Path, name: &str) -> Option<Vec<u8>> {
    let bytes = std::fs::read(dir.join(name)).ok()?;
    bytes.get(8..).map(<[u8]>::to_vec)
}

fn collect(dir: &Path, d: &ImageDir) -> Marks {
    let mut m = Marks::default();
    // Shared buffers by their number: those some image creates, those some file needs.
    let mut created = std::collections::BTreeSet::new();
    let mut needed = Vec::new();
    for e in &d.entries {
        match e.name {
            ImageName::Kfd { id } => {
                let Ok((msg, integrity)) = KfdImage::read_with_integrity(d.fd(), id) else {
                    continue;
                };
                m.images += 1;
                m.image_checksums += usize::from(integrity == images::Integrity::Verified);
                m.checksum_lists += msg.pages_checksums.len();
                let with_contents = msg
                    .device_entries
                    .iter()
                    .filter(|g| images::pages::kfd_pages_len(&msg.bo_entries, g.gpu_id) > 0)
                    .count();
                m.gpus_with_contents = m.gpus_with_contents.max(with_contents);
                created.extend(
                    msg.bo_entries
                        .iter()
                        .map(|b| b.handle)
                        .filter(|&h| h != u32::MAX),
                );
                let raw = payload(dir, &e.name.file_name()).unwrap_or_default();
                for (_, bo) in fields(&raw)
                    .unwrap_or_default()
                    .iter()
                    .filter(|(n, _)| *n == 6)
                {
                    if fields(bo).is_some_and(|f| f.iter().any(|(n, _)| *n == 6)) {
                        m.bos_with_handle += 1;
                    } else {
                        m.bos_without_handle += 1;
                    }
                }
            }
            ImageName::Render { id } => {
                let Ok(msg) = RenderNodeImage::read(d.fd(), id) else {
                    continue;
                };
                m.images += 1;
                m.checksum_lists += msg.pages_checksums.len();
                m.render_buffers += render_buffers(&msg);
                for b in &msg.bo_entries {
                    if b.is_import == 0 {
                        created.insert(b.handle);
                    } else {
                        needed.push(b.handle);
                    }
                }
                let dev = payload(dir, &e.name.file_name())
                    .and_then(|p| fields(&p).map(|f| f.iter().any(|(n, _)| (2..=5).contains(n))))
                    .unwrap_or(false);
                if dev {
                    m.renders_dev += 1;
                } else {
                    m.renders_v42 += 1;
                }
            }
            ImageName::Dmabuf { id } => {
                if let Ok(msg) = DmabufImage::read(d.fd(), id) {
                    m.images += 1;
                    m.dmabufs += 1;
                    needed.push(msg.gem_handle);
                }
            }
            ImageName::DrmPages { .. } => m.drm_pages += 1,
            ImageName::KfdPages { .. } => {}
        }
    }
    m.orphans = needed.iter().filter(|h| !created.contains(h)).count();
    m
}

fn render_buffers(msg: &CriuRenderNode) -> u64 {
    msg.num_of_bos.max(msg.bo_entries.len() as u64)
}

/// Who wrote image directory `dir` (opened as `d`), and what each plugin can restore of it.
#[must_use]
pub(crate) fn provenance(dir: &Path, d: &ImageDir) -> Provenance {
    judge(&collect(dir, d))
}

fn judge(m: &Marks) -> Provenance {
    let dev_marks = m.bos_with_handle + m.renders_dev + m.dmabufs + m.drm_pages;
    let (writer, evidence) = if m.images == 0 {
        (Writer::Unknown, "no decodable image".to_owned())
    } else if m.checksum_lists > 0 || m.image_checksums > 0 {
        (
            Writer::Ours,
            format!(
                "{} of pages files (field 100), {} (field 101)",
                crate::count(m.checksum_lists, "checksum list", "checksum lists"),
                crate::count(
                    m.image_checksums,
                    "checksum of a KFD image",
                    "checksums of KFD images"
                )
            ),
        )
    } else if dev_marks > 0 {
        (
            Writer::UpstreamDev,
            format!(
                "no checksum list; the development branch's fields: {} BO entries with a handle, \
                 {} render-node images with id and minor, {} dma-buf images, {} render-node \
                 pages files",
                m.bos_with_handle, m.renders_dev, m.dmabufs, m.drm_pages
            ),
        )
    } else {
        (
            Writer::UpstreamV42,
            format!(
                "no checksum list, none of the development branch's fields ({} BO entries \
                 without a handle, {} render-node images with the GPU id only)",
                m.bos_without_handle, m.renders_v42
            ),
        )
    };
    let mut ours = Vec::new();
    let mut v42 = Vec::new();
    let mut dev = Vec::new();
    if m.render_buffers > 0 || m.drm_pages > 0 {
        ours.push(format!(
            "restores the {} only on Linux 6.18 or later (AMDGPU_GEM_LIST_HANDLES, \
             DRM_IOCTL_GEM_CHANGE_HANDLE); older kernels refuse {}",
            crate::count(
                usize::try_from(m.render_buffers).unwrap_or(usize::MAX),
                "render-node buffer",
                "render-node buffers"
            ),
            if m.render_buffers == 1 { "it" } else { "them" }
        ));
        v42.push(format!(
            "restores the render nodes without their {} (it does not know them)",
            crate::count(
                usize::try_from(m.render_buffers).unwrap_or(usize::MAX),
                "buffer",
                "buffers"
            )
        ));
    }
    if m.orphans > 0 {
        ours.push(format!(
            "{} {} a shared buffer that no image creates: refused",
            crate::count(
                m.orphans,
                "dma-buf file or imported render-node buffer",
                "dma-buf files or imported render-node buffers"
            ),
            if m.orphans == 1 { "names" } else { "name" }
        ));
    }
    if m.dmabufs > 0 {
        v42.push(format!(
            "{}: criu finds no plugin to restore {}",
            crate::count(m.dmabufs, "dma-buf file", "dma-buf files"),
            if m.dmabufs == 1 { "it" } else { "them" }
        ));
    }
    if m.bos_without_handle > 0 || m.renders_v42 > 0 {
        dev.push(
            "cannot decode the images: they lack fields its proto requires (kfd_bo_entry.handle, \
             criu_render_node.id)"
                .to_owned(),
        );
    } else if m.gpus_with_contents > 1 {
        dev.push(format!(
            "restores {} GPUs' buffers in parallel with a file offset that runs on across GPUs: \
             all but the first GPU it reads come back zero while criu reports success (upstream's \
             fault)",
            m.gpus_with_contents
        ));
    }
    let restorer = |plugin, limits: Vec<String>| Restorer {
        plugin,
        all: limits.is_empty(),
        limits,
    };
    Provenance {
        writer,
        evidence,
        restorers: vec![
            restorer(Writer::Ours, ours),
            restorer(Writer::UpstreamV42, v42),
            restorer(Writer::UpstreamDev, dev),
        ],
    }
}

impl Provenance {
    /// This plugin refuses the directory as it is when the validation found `problems` (those a
    /// restore refuses): it must not say it restores all of it.
    pub(crate) fn refused_by_ours(&mut self, problems: usize) {
        if problems == 0 {
            return;
        }
        if let Some(ours) = self.restorers.iter_mut().find(|r| r.plugin == Writer::Ours) {
            ours.all = false;
            ours.limits.insert(
                0,
                format!(
                    "refuses it as it is: {} (listed above)",
                    crate::count(problems, "problem", "problems")
                ),
            );
        }
    }

    /// The lines `amdgpu-cr inspect` prints.
    ///
    /// # Errors
    /// Writing to `out` failed.
    pub fn render(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        writeln!(
            out,
            "\nWritten by {} ({})",
            self.writer.as_writer(),
            self.evidence
        )?;
        for r in &self.restorers {
            if r.all {
                writeln!(out, "  {}: restores all of it", r.plugin.name())?;
            } else {
                writeln!(out, "  {}: {}", r.plugin.name(), r.limits.join("; "))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn marks(f: impl FnOnce(&mut Marks)) -> Marks {
        let mut m = Marks {
            images: 3,
            gpus_with_contents: 1,
            ..Marks::default()
        };
        f(&mut m);
        m
    }

    /// (writer, restores all: ours, v4.2, criu-dev)
    #[rstest]
    #[case::ours(marks(|m| { m.checksum_lists = 2; m.bos_with_handle = 9; m.renders_dev = 2; }),
        Writer::Ours, [true, true, true])]
    #[case::ours_on_two_gpus(marks(|m| { m.checksum_lists = 2; m.bos_with_handle = 9; m.gpus_with_contents = 2; }),
        Writer::Ours, [true, true, false])]
    #[case::v42(marks(|m| { m.bos_without_handle = 9; m.renders_v42 = 2; }),
        Writer::UpstreamV42, [true, true, false])]
    #[case::dev(marks(|m| { m.bos_with_handle = 9; m.renders_dev = 2; }),
        Writer::UpstreamDev, [true, true, true])]
    #[case::dev_with_render_buffers(marks(|m| { m.bos_with_handle = 9; m.renders_dev = 2; m.render_buffers = 3; m.drm_pages = 3; }),
        Writer::UpstreamDev, [false, false, true])]
    #[case::dev_with_dmabufs(marks(|m| { m.bos_with_handle = 9; m.renders_dev = 2; m.dmabufs = 1; }),
        Writer::UpstreamDev, [true, false, true])]
    #[case::dev_with_a_dmabuf_of_nothing(marks(|m| { m.bos_with_handle = 9; m.renders_dev = 2; m.dmabufs = 1; m.orphans = 1; }),
        Writer::UpstreamDev, [false, false, true])]
    #[case::nothing(Marks::default(), Writer::Unknown, [true, true, true])]
    fn tells_the_writer_and_what_each_restores(
        #[case] m: Marks,
        #[case] writer: Writer,
        #[case] all: [bool; 3],
    ) {
        let p = judge(&m);
        assert_eq!(p.writer, writer, "{}", p.evidence);
        let got: Vec<(Writer, bool)> = p.restorers.iter().map(|r| (r.plugin, r.all)).collect();
        assert_eq!(
            got,
            [
                (Writer::Ours, all[0]),
                (Writer::UpstreamV42, all[1]),
                (Writer::UpstreamDev, all[2])
            ]
        );
    }
}
