//! The coverage scan's reading of code objects and offload bundles, on the committed kernels and
//! on bundles built here from their bytes.

#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)] // test code

use kfd_shader::bundle::{self, BundleError};
use kfd_shader::coverage::{self, gemm_class, Gap};
use kfd_shader::decode::length_of;
use kfd_shader::elf::{self, CodeObject, ElfError};
use rstest::rstest;

const KERNELS: &[u8] = include_bytes!("../kernels/kernels.co");
const MFMA: &[u8] = include_bytes!("../kernels/mfma.co");

/// A bundle of `entries` (target, bytes), each entry's bytes aligned to 4096 as clang aligns
/// them, the host entry first and empty.
fn build_bundle(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let header_len = 24 + 8 + entries.iter().map(|(t, _)| 24 + t.len()).sum::<usize>();
    let align = |n: usize| n.div_ceil(4096) * 4096;
    let mut offsets = Vec::new();
    let mut at = align(header_len);
    for (_, data) in entries {
        offsets.push(at);
        at = align(at + data.len());
    }
    let mut out = Vec::new();
    out.extend_from_slice(bundle::MAGIC);
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for ((t, data), off) in entries.iter().zip(&offsets) {
        out.extend_from_slice(&(*off as u64).to_le_bytes());
        out.extend_from_slice(&(data.len() as u64).to_le_bytes());
        out.extend_from_slice(&(t.len() as u64).to_le_bytes());
        out.extend_from_slice(t.as_bytes());
    }
    for ((_, data), off) in entries.iter().zip(&offsets) {
        out.resize(*off, 0);
        out.extend_from_slice(data);
    }
    out
}

const HOST: &str = "host-x86_64-unknown-linux-gnu-";
const GFX90A: &str = "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-";
const GFX908: &str = "hipv4-amdgcn-amd-amdhsa--gfx908";

#[test]
fn every_kernel_and_callee_of_the_test_code_object_is_walked_and_only_the_illegal_one_blocked() {
    let all = coverage::scan(KERNELS).unwrap();
    let (callees, scans): (Vec<_>, Vec<_>) = all.into_iter().partition(|k| k.callee);
    let mut names: Vec<_> = scans.iter().map(|k| k.name.clone()).collect();
    let mut want = CodeObject::parse(KERNELS).unwrap().kernels();
    names.sort();
    want.sort();
    assert_eq!(names, want);
    // The two functions the kernels call are walked as callees.
    let mut called: Vec<_> = callees.iter().map(|k| k.name.as_str()).collect();
    called.sort_unstable();
    assert_eq!(called, ["get", "put"]);
    assert!(callees.iter().all(|k| k.runnable() && k.instructions > 0));
    let co = CodeObject::parse(KERNELS).unwrap();
    for k in &scans {
        assert!(!k.truncated, "{}", k.name);
        assert!(k.instructions > 0, "{}", k.name);
        // hipcc/clang kernels have sized symbols: the walk covers exactly the function.
        let (_, size) = co.symbol(&k.name).unwrap();
        assert_eq!(k.bytes, size, "{}", k.name);
        let decoded: u64 = k.mnemonics.values().sum();
        let gaps: u64 = k.gaps.values().sum();
        assert_eq!(decoded + gaps, k.instructions, "{}", k.name);
    }
    let blocked: Vec<_> = scans.iter().filter(|k| !k.runnable()).collect();
    assert_eq!(blocked.len(), 1);
    assert_eq!(blocked[0].name, "illegal");
    let gap = blocked[0].gaps.keys().next().unwrap();
    assert_eq!(gap.reason, "no gfx9 encoding");
    assert_eq!(gap.to_string(), "(no gfx9 encoding)");
}

#[test]
fn the_mfma_kernels_are_all_runnable_and_their_matrix_instructions_counted() {
    let scans = coverage::scan(MFMA).unwrap();
    assert_eq!(scans.len(), 5);
    assert!(scans.iter().all(coverage::KernelScan::runnable));
    let mfma: u64 = scans
        .iter()
        .flat_map(|k| &k.mnemonics)
        .filter(|(m, _)| m.starts_with("v_mfma_"))
        .map(|(_, n)| n)
        .sum();
    assert!(mfma >= 5, "{mfma} matrix instructions");
}

#[test]
fn a_bundle_built_from_the_test_code_objects_gives_them_back_by_target() {
    let b = build_bundle(&[(HOST, &[]), (GFX908, MFMA), (GFX90A, KERNELS)]);
    let entries = bundle::parse(&b).unwrap();
    assert_eq!(entries.len(), 3);
    assert_eq!(entries[0].triple, HOST);
    assert_eq!(entries[0].processor(), None);
    assert_eq!(entries[1].processor(), Some("gfx908"));
    assert_eq!(entries[1].data, MFMA);
    assert_eq!(entries[2].processor(), Some("gfx90a"));
    assert_eq!(entries[2].features().collect::<Vec<_>>(), ["xnack-"]);
    assert_eq!(entries[2].data, KERNELS);
    assert_eq!(bundle::extent(&entries), b.len());
    // The entry scans as the file does.
    assert_eq!(
        coverage::scan(entries[2].data).unwrap(),
        coverage::scan(KERNELS).unwrap()
    );
}

#[test]
fn bundles_are_found_one_after_another_in_a_fat_binary_section() {
    let one = build_bundle(&[(HOST, &[]), (GFX90A, KERNELS)]);
    let two = build_bundle(&[(HOST, &[]), (GFX90A, MFMA)]);
    let mut section = one.clone();
    section.resize(one.len().div_ceil(4096) * 4096, 0);
    let second = section.len();
    section.extend_from_slice(&two);
    section.extend_from_slice(&[0; 100]);
    let third = section.len();
    section.extend_from_slice(b"CCOB\x02\x00\x01\x00");
    section.extend_from_slice(&[0; 64]);
    assert_eq!(bundle::find_all(&section), [0, second, third]);
    assert_eq!(bundle::parse(&section[second..]).unwrap()[1].data, MFMA);
    assert_eq!(
        bundle::parse(&section[third..]),
        Err(BundleError::Compressed)
    );
}

#[rstest]
#[case::not_a_bundle(b"\x7fELF\x02\x01\x01\x00".to_vec(), BundleError::NotBundle)]
#[case::header_cut(bundle::MAGIC[..].to_vec(), BundleError::Truncated)]
#[case::entry_past_the_end({
    let mut b = build_bundle(&[(GFX90A, KERNELS)]);
    b.truncate(b.len() - 1);
    b
}, BundleError::Truncated)]
fn broken_bundles_are_errors(#[case] bytes: Vec<u8>, #[case] want: BundleError) {
    assert_eq!(bundle::parse(&bytes), Err(want));
}

#[test]
fn sections_are_found_by_name_and_host_files_told_apart() {
    assert_eq!(elf::machine(KERNELS), Ok(elf::EM_AMDGPU));
    let text = elf::section(KERNELS, ".text").unwrap().unwrap();
    assert!(!text.is_empty() && text.len() % 4 == 0);
    assert_eq!(elf::section(KERNELS, ".hip_fatbin"), Ok(None));
    assert_eq!(elf::section(b"MZ", ".text"), Err(ElfError::NotElf));
    let b = build_bundle(&[(GFX90A, KERNELS)]);
    assert_eq!(elf::machine(&b), Err(ElfError::NotElf));
}

#[rstest]
#[case::sop2("s_add_u32 s2, s0, s1", 0x8002_0100, 4)]
#[case::sop2_literal("s_bfe_u32 s6, s0, 0x80004", 0x9286_ff00, 8)]
#[case::sopk_setreg_imm32("s_setreg_imm32_b32", 0xba00_1901, 8)]
#[case::vop1_literal("v_mov_b32 v0, 0x...", 0x7e00_02ff, 8)]
#[case::vop2_sdwa("v_add_f32_sdwa", 0x0204_02f9, 8)]
#[case::vop2_dpp("v_dot4c_i32_i8_dpp", 0x7204_02fa, 8)]
#[case::vop2_madak("v_madak_f32 (K follows)", 0x3004_0300, 8)]
#[case::vop2_plain("v_dot4c_i32_i8_e32 v2, v0, v1", 0x7204_0300, 4)]
#[case::vop3("v_add_f64", 0xd280_0002, 8)]
#[case::mubuf("buffer_load_dword ... lds", 0xe051_1000, 8)]
#[case::smem("s_load_dword", 0xc002_0682, 8)]
#[case::sopp("s_endpgm", 0xbf81_0000, 4)]
fn instruction_lengths_need_only_the_first_dword(
    #[case] text: &str,
    #[case] w0: u32,
    #[case] len: u8,
) {
    assert_eq!(length_of(w0), Some(len), "{text}");
}

#[rstest]
#[case::sgemm("Cijk_Ailk_Bljk_SB_MT64x128x8_MI32x32x1x2_SE", "sgemm")]
#[case::dgemm("Cijk_Alik_Bljk_DB_MT64x64x8_MI16x16x4x1_SN", "dgemm")]
#[case::hgemm("Cijk_Ailk_Bjlk_HB_MT128x128x32_MI32x32x8x1", "hgemm")]
#[case::hgemm_hpa("Cijk_Ailk_Bljk_HHS_BH_MT64x64x32_MI32x32x8x1", "hgemm")]
#[case::hgemm_ex_f32("Cijk_Ailk_Bljk_HSS_BH_MT64x64x32_MI32x32x8x1", "hgemm_ex f32")]
#[case::bf16_out("Cijk_Ailk_Bljk_BBS_BH_MT128x160x32_MI32x32x8x1_SE", "bf16 gemm_ex")]
#[case::bf16_to_f32("Cijk_Ailk_Bljk_BSS_BH_MT128x160x32_MI32x32x8x1", "bf16 gemm_ex")]
#[case::complex("Cijk_Ailk_Bljk_CB_MT32x32x8", "other tensile")]
#[case::int8("Cijk_Ailk_Bljk_I8II_BH_MT64x64x32", "other tensile")]
#[case::rocblas_own("_Z10gemv_kernelILi64EfEvii", "rocblas")]
fn tensile_kernel_names_tell_the_gemm_type(#[case] name: &str, #[case] class: &str) {
    assert_eq!(gemm_class(name), class);
}

#[test]
fn gaps_name_themselves_by_mnemonic_or_by_encoding_and_opcode() {
    let known = Gap {
        encoding: "VOP2",
        opcode: 0x39,
        mnemonic: Some("v_dot4c_i32_i8"),
        reason: "not executed",
    };
    assert_eq!(known.to_string(), "v_dot4c_i32_i8");
    let unknown = Gap {
        mnemonic: None,
        reason: "unknown opcode",
        ..known
    };
    assert_eq!(unknown.to_string(), "VOP2 0x39");
}

/// `bytes` with the sizes of every symbol of `.symtab` and `.dynsym` zeroed, as Tensile's
/// assembler leaves its kernels' symbols.
fn without_symbol_sizes(bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for name in [".symtab", ".dynsym"] {
        let Some(table) = elf::section(bytes, name).unwrap() else {
            continue;
        };
        let start = table.as_ptr() as usize - bytes.as_ptr() as usize;
        for entry in (start..start + table.len()).step_by(24) {
            out[entry + 16..entry + 24].fill(0);
        }
    }
    out
}

#[test]
fn kernels_without_symbol_sizes_are_walked_to_the_next_entry() {
    let sized = coverage::scan(KERNELS).unwrap();
    let unsized_bytes = without_symbol_sizes(KERNELS);
    let co = CodeObject::parse(&unsized_bytes).unwrap();
    assert!(co.symbol_table().iter().all(|s| s.size == 0));
    let unsized_scans = coverage::scan(&unsized_bytes).unwrap();
    assert_eq!(unsized_scans.len(), sized.len());
    for (a, b) in sized.iter().zip(&unsized_scans) {
        assert_eq!(a.name, b.name);
        assert!(!b.truncated, "{}", b.name);
        // The same code, then only the s_nop words clang pads functions and .text with.
        assert!(b.bytes >= a.bytes, "{}", b.name);
        let nops = |k: &coverage::KernelScan| k.mnemonics.get("s_nop").copied().unwrap_or(0);
        assert_eq!((b.bytes - a.bytes) / 4, nops(b) - nops(a), "{}", b.name);
        assert_eq!(a.gaps, b.gaps, "{}", b.name);
        for (m, n) in &a.mnemonics {
            assert!(b.mnemonics.get(m) >= Some(n), "{}: {m}", b.name);
        }
    }
}
