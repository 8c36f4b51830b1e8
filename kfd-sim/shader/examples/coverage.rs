//! Which instructions of a library's gfx90a kernels the shader core cannot execute.
//!
//! `cargo run --release -p kfd-shader --example coverage -- [--arch gfx90a] [--mnemonics] [--blocked] FILE...`
//!
//! Each FILE is an AMDGPU code object (Tensile's `.co` and `.hsaco`), a clang offload bundle, or
//! a host library whose `.hip_fatbin` section holds offload bundles (`librocblas.so`). From
//! bundles only the entries for the processor (`gfx90a` unless `--arch` says otherwise) are read,
//! and of those not the `xnack+` ones (the simulated GPU runs with XNACK off). Prints, as
//! Markdown: per kind of file the kernels and instructions walked and how many kernels every
//! instruction decodes in; every instruction the core cannot execute with its occurrences and
//! the kernels it blocks; the same per GEMM type of Tensile's kernels; with `--mnemonics`, how
//! often each mnemonic and DPP control decoded (to compare with a disassembler's count); with `--blocked`, every
//! kernel that cannot run and what stops it.

use std::collections::BTreeMap;
use std::process::ExitCode;

use kfd_shader::bundle;
use kfd_shader::coverage::{self, Gap, KernelScan};
use kfd_shader::elf;

/// What was found in one kind of file.
#[derive(Default)]
struct Kind {
    files: usize,
    code_objects: usize,
    compressed: usize,
    kernels: Vec<KernelScan>,
    callees: Vec<KernelScan>,
}

/// The code objects in a file: (label of the kind, code objects, compressed bundles skipped).
fn code_objects<'a>(
    path: &str,
    bytes: &'a [u8],
    arch: &str,
) -> Result<(String, Vec<&'a [u8]>, usize), String> {
    let ext = path.rsplit('.').next().unwrap_or_default();
    let pick = |entries: Vec<bundle::Entry<'a>>| -> Vec<&'a [u8]> {
        entries
            .into_iter()
            .filter(|e| e.processor() == Some(arch) && !e.features().any(|f| f == "xnack+"))
            .map(|e| e.data)
            .collect()
    };
    if bytes.starts_with(bundle::MAGIC) || bytes.starts_with(bundle::COMPRESSED_MAGIC) {
        return match bundle::parse(bytes) {
            Ok(entries) => Ok((format!("offload bundle (.{ext})"), pick(entries), 0)),
            Err(bundle::BundleError::Compressed) => {
                Ok((format!("offload bundle (.{ext})"), Vec::new(), 1))
            }
            Err(e) => Err(e.to_string()),
        };
    }
    let machine = elf::machine(bytes).map_err(|e| e.to_string())?;
    if machine == elf::EM_AMDGPU {
        return Ok((format!("code object (.{ext})"), vec![bytes], 0));
    }
    let fatbin = elf::section(bytes, ".hip_fatbin")
        .map_err(|e| e.to_string())?
        .ok_or("a host ELF file without a .hip_fatbin section")?;
    let mut out = Vec::new();
    let mut compressed = 0;
    for at in bundle::find_all(fatbin) {
        match bundle::parse(&fatbin[at..]) {
            Ok(entries) => out.extend(pick(entries)),
            Err(bundle::BundleError::Compressed) => compressed += 1,
            Err(e) => return Err(format!("bundle at {at:#x} of .hip_fatbin: {e}")),
        }
    }
    Ok((
        "fat binary (.hip_fatbin of a host library)".into(),
        out,
        compressed,
    ))
}

/// Per gap: occurrences, kernels it appears in, kernels it alone blocks.
fn tally<'a>(kernels: impl Iterator<Item = &'a KernelScan>) -> BTreeMap<Gap, (u64, u64, u64)> {
    let mut t: BTreeMap<Gap, (u64, u64, u64)> = BTreeMap::new();
    for k in kernels {
        for (g, n) in &k.gaps {
            let e = t.entry(*g).or_default();
            e.0 += n;
            e.1 += 1;
            e.2 += u64::from(k.gaps.len() == 1);
        }
    }
    t
}

fn print_gaps(t: &BTreeMap<Gap, (u64, u64, u64)>, limit: usize) {
    let mut rows: Vec<_> = t.iter().collect();
    rows.sort_by(|a, b| {
        b.1 .1
            .cmp(&a.1 .1)
            .then(b.1 .0.cmp(&a.1 .0))
            .then(a.0.cmp(b.0))
    });
    println!("| instruction | encoding, opcode | why | occurrences | kernels blocked | blocked by it alone |");
    println!("|---|---|---|---:|---:|---:|");
    for (g, (n, k, alone)) in rows.iter().take(limit) {
        println!(
            "| {g} | {} {:#x} | {} | {n} | {k} | {alone} |",
            g.encoding, g.opcode, g.reason
        );
    }
    if rows.len() > limit {
        println!("| ({} more) | | | | | |", rows.len() - limit);
    }
}

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut arch = "gfx90a".to_string();
    let mnemonics = args.iter().any(|a| a == "--mnemonics");
    let blocked = args.iter().any(|a| a == "--blocked");
    args.retain(|a| a != "--mnemonics" && a != "--blocked");
    if let Some(i) = args.iter().position(|a| a == "--arch") {
        if i + 1 >= args.len() {
            eprintln!("--arch needs a processor name");
            return ExitCode::from(2);
        }
        arch = args.remove(i + 1);
        args.remove(i);
    }
    if args.is_empty() {
        eprintln!("usage: coverage [--arch gfx90a] [--mnemonics] [--blocked] FILE...");
        return ExitCode::from(2);
    }
    let mut kinds: BTreeMap<String, Kind> = BTreeMap::new();
    let mut failed = false;
    for path in &args {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("{path}: {e}");
                failed = true;
                continue;
            }
        };
        let (label, objects, compressed) = match code_objects(path, &bytes, &arch) {
            Ok(x) => x,
            Err(e) => {
                eprintln!("{path}: {e}");
                failed = true;
                continue;
            }
        };
        let kind = kinds.entry(label).or_default();
        kind.files += 1;
        kind.compressed += compressed;
        for co in objects {
            match coverage::scan(co) {
                Ok(ks) => {
                    kind.code_objects += 1;
                    let (callees, kernels): (Vec<_>, Vec<_>) =
                        ks.into_iter().partition(|k| k.callee);
                    kind.kernels.extend(kernels);
                    kind.callees.extend(callees);
                }
                Err(e) => {
                    eprintln!("{path}: a code object: {e}");
                    failed = true;
                }
            }
        }
    }

    println!("## Files ({arch})\n");
    println!("| kind | files | code objects | compressed bundles (not read) | kernels | runnable | instructions | unsupported instructions |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let all = || kinds.values().flat_map(|k| k.kernels.iter());
    for (label, k) in &kinds {
        let insts: u64 = k.kernels.iter().map(|s| s.instructions).sum();
        let gaps: u64 = k.kernels.iter().flat_map(|s| s.gaps.values()).sum();
        let runnable = k.kernels.iter().filter(|s| s.runnable()).count();
        println!(
            "| {label} | {} | {} | {} | {} | {runnable} | {insts} | {gaps} |",
            k.files,
            k.code_objects,
            k.compressed,
            k.kernels.len()
        );
    }
    let callees: Vec<&KernelScan> = kinds.values().flat_map(|k| k.callees.iter()).collect();
    if !callees.is_empty() {
        let blocked: Vec<&KernelScan> = callees.iter().copied().filter(|k| !k.runnable()).collect();
        println!(
            "\nAlso {} functions that are no kernel's entry (callees), {} instructions; {} with instructions the core cannot execute{}.",
            callees.len(),
            callees.iter().map(|k| k.instructions).sum::<u64>(),
            blocked.len(),
            if blocked.is_empty() { "" } else { " (below as kernels blocked)" }
        );
    }
    let truncated = all().filter(|k| k.truncated).count();
    if truncated > 0 {
        println!(
            "\n{truncated} kernels could not be walked to their end (bad descriptor or symbol)."
        );
    }

    println!("\n## Instructions the core cannot execute, by kernels blocked\n");
    print_gaps(&tally(all()), usize::MAX);
    if callees.iter().any(|k| !k.runnable()) {
        println!("\nIn callees:\n");
        print_gaps(&tally(callees.iter().copied()), usize::MAX);
    }

    println!("\n## By kernel type\n");
    let mut classes: BTreeMap<&str, Vec<&KernelScan>> = BTreeMap::new();
    for k in all() {
        classes
            .entry(coverage::gemm_class(&k.name))
            .or_default()
            .push(k);
    }
    println!("| type | kernels | runnable |");
    println!("|---|---:|---:|");
    for (c, ks) in &classes {
        let runnable = ks.iter().filter(|k| k.runnable()).count();
        println!("| {c} | {} | {runnable} |", ks.len());
    }
    for (c, ks) in &classes {
        println!("\n### {c}\n");
        print_gaps(&tally(ks.iter().copied()), 20);
    }
    if blocked {
        println!("\n## Blocked kernels\n");
        for k in all().filter(|k| !k.runnable()) {
            let gaps: Vec<String> = k.gaps.keys().map(ToString::to_string).collect();
            let t = if k.truncated { " (truncated)" } else { "" };
            println!("- {}{t}: {}", k.name, gaps.join(", "));
        }
    }
    if mnemonics {
        let mut m: BTreeMap<&str, u64> = BTreeMap::new();
        for k in all() {
            for (name, n) in &k.mnemonics {
                *m.entry(name).or_default() += n;
            }
        }
        let mut dpp: BTreeMap<u16, u64> = BTreeMap::new();
        for k in all() {
            for (ctrl, n) in &k.dpp_ctrls {
                *dpp.entry(*ctrl).or_default() += n;
            }
        }
        println!("\n## DPP controls decoded\n");
        println!("| DPP_CTRL | count |");
        println!("|---|---:|");
        for (ctrl, n) in dpp {
            println!("| {ctrl:#05x} | {n} |");
        }
        println!("\n## Mnemonics decoded\n");
        println!("| mnemonic | count |");
        println!("|---|---:|");
        for (name, n) in m {
            println!("| {name} | {n} |");
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
