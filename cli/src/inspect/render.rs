//! The text form of the inspect report (its JSON form is the model's `Serialize`) and the outcome
//! it gives.

use std::io::{self, Write};

use super::{ImageLink, InspectReport, KfdSummary, PagesStatus};
use crate::table::Table;
use crate::topo::{hive_text, vram_text};
use crate::{count, hex_id, HumanSize, Outcome, Report};

fn size_or_dash(size: Option<u64>) -> String {
    size.map_or("-".to_owned(), |s| HumanSize(s).to_string())
}

fn render_kfd(k: &KfdSummary, out: &mut dyn Write) -> io::Result<()> {
    write!(out, "\n{} ({})", k.file, HumanSize(k.size))?;
    let Some(c) = &k.content else {
        return writeln!(
            out,
            ": DOES NOT DECODE: {}",
            k.error.as_deref().unwrap_or("?")
        );
    };
    writeln!(out, ": /dev/kfd of pid {}", c.pid)?;
    let n = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    writeln!(
        out,
        "  {}, {}, {}, {}, priv_data {}",
        count(n(c.num_of_gpus.into()), "GPU", "GPUs"),
        count(n(c.num_of_cpus.into()), "CPU node", "CPU nodes"),
        count(n(c.num_of_bos), "BO", "BOs"),
        count(n(c.num_of_objects.into()), "object", "objects"),
        HumanSize(c.priv_data_size)
    )?;
    for p in &k.problems {
        writeln!(out, "  PROBLEM: {p}")?;
    }
    match c.shared_memory {
        Some(s) => writeln!(
            out,
            "  shared memory (hsakmt): {}, magic {:#010x}",
            HumanSize(s.size),
            s.magic
        )?,
        None => writeln!(out, "  shared memory (hsakmt): none")?,
    }
    let with_contents = c.gpus.iter().filter(|g| g.contents > 0).count();
    if c.checksummed_files == 0 {
        writeln!(out, "  page checksums: none (image without integrity data)")?;
    } else {
        writeln!(
            out,
            "  page checksums: present for {} of {} with contents",
            c.checksummed_files,
            count(with_contents, "GPU", "GPUs")
        )?;
    }
    writeln!(out, "  GPUs")?;
    let mut t = Table::new(&[
        "gpu_id", "node", "device", "model", "CUs", "VRAM", "renderD", "hive", "fw", "sdma fw",
        "links",
    ]);
    for g in &c.gpus {
        t.row([
            hex_id(g.gpu_id),
            g.node_id.to_string(),
            format!("{:04x}:{:04x}", g.vendor_id, g.device_id),
            g.model.unwrap_or("-").to_owned(),
            g.compute_units.to_string(),
            vram_text(Some(g.vram)),
            g.render_minor.to_string(),
            hive_text(g.hive_id),
            g.fw_version.to_string(),
            g.sdma_fw_version.to_string(),
            link_list(&g.links),
        ]);
    }
    t.write(out, "    ")?;
    if !c.cpus.is_empty() {
        writeln!(out, "  CPU nodes")?;
        let mut t = Table::new(&["node", "cores", "links to"]);
        for cpu in &c.cpus {
            t.row([
                cpu.node_id.to_string(),
                cpu.cores.to_string(),
                if cpu.links.is_empty() {
                    "-".to_owned()
                } else {
                    cpu.links
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                },
            ]);
        }
        t.write(out, "    ")?;
    }
    writeln!(out, "  BOs")?;
    let mut t = Table::new(&["gpu_id", "type", "count", "size"]);
    for g in &c.gpus {
        for b in &g.bos {
            t.row([
                hex_id(g.gpu_id),
                b.kind.name().to_owned(),
                b.count.to_string(),
                HumanSize(b.size).to_string(),
            ]);
        }
    }
    for (gpu, b) in &c.unassigned_bos {
        t.row([
            format!("{} (no such GPU!)", hex_id(*gpu)),
            b.kind.name().to_owned(),
            b.count.to_string(),
            HumanSize(b.size).to_string(),
        ]);
    }
    if t.is_empty() {
        writeln!(out, "    none")?;
    } else {
        t.write(out, "    ")?;
    }
    Ok(())
}

/// `PCIe->0, xGMI->3,4` from the links, grouped by kind in order of appearance.
fn link_list(links: &[ImageLink]) -> String {
    let mut groups: Vec<(&str, Vec<String>)> = Vec::new();
    for l in links {
        match groups.iter_mut().find(|(t, _)| *t == l.link_type) {
            Some((_, v)) => v.push(l.to.to_string()),
            None => groups.push((&l.link_type, vec![l.to.to_string()])),
        }
    }
    if groups.is_empty() {
        return "-".to_owned();
    }
    groups
        .iter()
        .map(|(ty, v)| format!("{ty}->{}", v.join(",")))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Report for InspectReport {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "Image directory: {}", self.dir)?;
        if self.kfd.is_empty()
            && self.render_nodes.is_empty()
            && self.dmabufs.is_empty()
            && self.pages_files.is_empty()
        {
            writeln!(
                out,
                "\nNo amdgpu image files in the directory: not a checkpoint of a GPU process, or \
                 not the images directory."
            )?;
            return writeln!(out, "\nResult: 1 problem (no images)");
        }
        for k in &self.kfd {
            render_kfd(k, out)?;
        }
        if !self.render_nodes.is_empty() {
            writeln!(out, "\nRender-node images")?;
            for r in &self.render_nodes {
                match (&r.error, r.gpu_id, r.render_minor, r.bos, r.bo_bytes) {
                    (None, Some(g), Some(m), Some(n), Some(bytes)) => writeln!(
                        out,
                        "  {}: GPU {}, renderD{m}, {} ({}){}",
                        r.file,
                        hex_id(g),
                        crate::count(usize::try_from(n).unwrap_or(usize::MAX), "BO", "BOs"),
                        HumanSize(bytes),
                        r.problem
                            .as_ref()
                            .map_or(String::new(), |p| format!(": PROBLEM: {p}"))
                    )?,
                    (e, ..) => writeln!(
                        out,
                        "  {}: DOES NOT DECODE: {}",
                        r.file,
                        e.as_deref().unwrap_or("?")
                    )?,
                }
            }
        }
        if !self.dmabufs.is_empty() {
            writeln!(out, "\ndma-buf images")?;
            for b in &self.dmabufs {
                match (&b.error, b.gem_handle) {
                    (None, Some(h)) => writeln!(
                        out,
                        "  {}: GEM handle {h}{}",
                        b.file,
                        b.problem
                            .as_ref()
                            .map_or(String::new(), |p| format!(": PROBLEM: {p}"))
                    )?,
                    (e, _) => writeln!(
                        out,
                        "  {}: DOES NOT DECODE: {}",
                        b.file,
                        e.as_deref().unwrap_or("?")
                    )?,
                }
            }
        }
        writeln!(out, "\nPages files")?;
        if self.pages_files.is_empty() {
            writeln!(out, "  none")?;
        } else {
            let mut t = Table::new(&["file", "size", "payload", "checksums", "status"]);
            for p in &self.pages_files {
                t.row([
                    p.file.clone(),
                    size_or_dash(p.size),
                    size_or_dash(p.expected_payload),
                    p.checksums.as_ref().map_or("-".to_owned(), |c| {
                        format!(
                            "{} x {} {}",
                            c.chunks,
                            HumanSize(c.chunk_size.into()),
                            c.algorithm
                        )
                    }),
                    p.status.text(),
                ]);
            }
            t.write(out, "  ")?;
            for p in &self.pages_files {
                if let PagesStatus::Bad { message, .. } = &p.status {
                    writeln!(out, "  {}: {message}", p.file)?;
                }
            }
        }
        self.provenance.render(out)?;
        // The summary says no more than the rows: files read without checksums were not
        // verified.
        let unverified = self
            .pages_files
            .iter()
            .filter(|p| {
                matches!(
                    p.status,
                    PagesStatus::Ok {
                        read: true,
                        verified: false
                    } | PagesStatus::HeaderUnset { read: true }
                )
            })
            .count();
        if self.problems == 0 {
            writeln!(
                out,
                "\nResult: ok{}",
                if !self.verify {
                    " (pages files not read; --verify reads and verifies them)".to_owned()
                } else if self.pages_files.is_empty() {
                    " (no pages files)".to_owned()
                } else if unverified == 0 {
                    " (all pages files read and verified)".to_owned()
                } else if unverified == self.pages_files.len() {
                    " (all pages files read; none has checksums, so none was verified)".to_owned()
                } else {
                    format!(
                        " (all pages files read; {} without checksums not verified)",
                        count(unverified, "file", "files")
                    )
                }
            )
        } else {
            writeln!(
                out,
                "\nResult: {}",
                crate::count(self.problems, "problem", "problems")
            )
        }
    }

    fn outcome(&self) -> Outcome {
        Outcome::from_bool(self.problems == 0)
    }
}
