// A blit kernel the way ROCr ships its own: raw code behind a 256-byte amd_kernel_code_t
// (kernarg pointer in s[0:1], workgroup id x in s2, work-item id in v0), FLAT loads and stores.
// Written for the shader core's tests (same instruction mix as the runtime's blits, not their
// code). Kernel arguments: src u64 @0, dst u64 @8, 16-byte chunks u64 @16, tail bytes u64 @24,
// work-items in the grid u32 @32. Chunks go by dwordx4 over a grid-stride loop, then the tail
// bytes after them one byte per work-item.

.text
.globl flat_blit
.p2align 8
.type flat_blit,@function
flat_blit:
    // amd_kernel_code_t
    .long 1                 // amd_kernel_code_version_major
    .long 2                 // amd_kernel_code_version_minor
    .short 1                // amd_machine_kind (AMD GPU)
    .short 9, 0, 10         // machine version 9.0.10 (gfx90a)
    .quad 256               // kernel_code_entry_byte_offset
    .quad 0, 0              // kernel_code_prefetch_byte_offset, _size
    .long 0                 // max_scratch_backing_memory_byte_size (low)
    .long 3                 // (high) = COMPUTE_PGM_RSRC3: ACCUM_OFFSET 3, a0 = v16
    // COMPUTE_PGM_RSRC1: 16 VGPRs, 32 SGPRs, f16/f64 denormals kept, DX10 clamp, IEEE.
    .long 1 | (1 << 6) | (3 << 18) | (1 << 21) | (1 << 23)
    // COMPUTE_PGM_RSRC2: 2 user SGPRs, workgroup id x.
    .long (2 << 1) | (1 << 7)
    .long 1 << 3            // kernel_code_properties: kernarg segment ptr
    .fill 196, 1, 0         // the rest of the 256 bytes

    s_load_dwordx8 s[4:11], s[0:1], 0x0
    s_load_dword s12, s[0:1], 0x20
    s_waitcnt lgkmcnt(0)
    s_lshl_b32 s13, s2, 6
    v_add_co_u32 v0, vcc, s13, v0
    // v[2:3]: this item's chunk index
    v_mov_b32 v2, v0
    v_mov_b32 v3, 0
chunks:
    v_cmp_lt_u64 vcc, v[2:3], s[8:9]
    s_and_b64 exec, exec, vcc
    s_cbranch_execz chunks_done
    v_lshlrev_b64 v[4:5], 4, v[2:3]
    v_add_co_u32 v6, vcc, s6, v4
    v_mov_b32 v7, s7
    v_addc_co_u32 v7, vcc, v7, v5, vcc
    v_add_co_u32 v4, vcc, s4, v4
    v_mov_b32 v1, s5
    v_addc_co_u32 v5, vcc, v1, v5, vcc
    flat_load_dwordx4 v[8:11], v[4:5]
    s_waitcnt vmcnt(0)
    flat_store_dwordx4 v[6:7], v[8:11]
    v_add_co_u32 v2, vcc, s12, v2
    v_addc_co_u32 v3, vcc, 0, v3, vcc
    s_branch chunks
chunks_done:
    s_mov_b64 exec, -1
    // The tail: byte (n16 * 16 + id) for the items below the tail length.
    v_mov_b32 v1, 0
    v_cmp_gt_u64 vcc, s[10:11], v[0:1]
    s_and_b64 exec, exec, vcc
    s_cbranch_execz done
    s_lshl_b64 s[8:9], s[8:9], 4
    s_add_u32 s4, s4, s8
    s_addc_u32 s5, s5, s9
    s_add_u32 s6, s6, s8
    s_addc_u32 s7, s7, s9
    v_add_co_u32 v4, vcc, s4, v0
    v_mov_b32 v5, s5
    v_addc_co_u32 v5, vcc, 0, v5, vcc
    flat_load_ubyte v8, v[4:5]
    v_add_co_u32 v6, vcc, s6, v0
    v_mov_b32 v7, s7
    v_addc_co_u32 v7, vcc, 0, v7, vcc
    s_waitcnt vmcnt(0)
    flat_store_byte v[6:7], v8
done:
    s_endpgm
.size flat_blit, .-flat_blit
