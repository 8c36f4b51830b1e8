// Matrix-core test kernels for the shader core, built by scripts/gen-kernels.sh into mfma.co
// (committed). Each is a square GEMM, c = a x b with n x n row-major matrices (n a multiple of
// the tile), made of one MFMA form: one wave (a workgroup of 64) per output tile, workgroup
// x the tile's index in row-major order of tiles.

#pragma OPENCL EXTENSION cl_khr_fp16 : enable

typedef unsigned long u64;

typedef float float16_t __attribute__((ext_vector_type(16)));
typedef int int16_t __attribute__((ext_vector_type(16)));
typedef double double4_t __attribute__((ext_vector_type(4)));
typedef half half4_t __attribute__((ext_vector_type(4)));
typedef short short4_t __attribute__((ext_vector_type(4)));

static inline uint lane(void) {
    return __builtin_amdgcn_workitem_id_x();
}

// The tile's first row and column for tiles of t x t.
static inline uint tile_row(uint n, uint t) {
    return __builtin_amdgcn_workgroup_id_x() / (n / t) * t;
}

static inline uint tile_col(uint n, uint t) {
    return __builtin_amdgcn_workgroup_id_x() % (n / t) * t;
}

// 32x32 tiles: D row 8 x (r / 4) + 4 x (lane / 32) + r % 4, column lane % 32.
static inline uint d_row32(uint r) {
    return 8 * (r / 4) + 4 * (lane() / 32) + r % 4;
}

// f32, 32x32x2: lane holds A[i = lane % 32][k = lane / 32] and B[k][j = lane % 32].
kernel void gemm_f32(global const float *a, global const float *b, global float *c, uint n) {
    uint i0 = tile_row(n, 32), j0 = tile_col(n, 32), l = lane();
    float16_t acc = 0;
    for (uint k = 0; k < n; k += 2) {
        float x = a[(i0 + l % 32) * n + k + l / 32];
        float y = b[(k + l / 32) * n + j0 + l % 32];
        acc = __builtin_amdgcn_mfma_f32_32x32x2f32(x, y, acc, 0, 0, 0);
    }
    for (uint r = 0; r < 16; r++)
        c[(i0 + d_row32(r)) * n + j0 + l % 32] = acc[r];
}

// f16, 32x32x8: lane holds A[i][k = 4 x (lane / 32) + 0..3] and B likewise; f32 result.
kernel void gemm_f16(global const half *a, global const half *b, global float *c, uint n) {
    uint i0 = tile_row(n, 32), j0 = tile_col(n, 32), l = lane();
    float16_t acc = 0;
    for (uint k = 0; k < n; k += 8) {
        half4_t x, y;
        for (uint t = 0; t < 4; t++) {
            uint kk = k + 4 * (l / 32) + t;
            x[t] = a[(i0 + l % 32) * n + kk];
            y[t] = b[kk * n + j0 + l % 32];
        }
        acc = __builtin_amdgcn_mfma_f32_32x32x8f16(x, y, acc, 0, 0, 0);
    }
    for (uint r = 0; r < 16; r++)
        c[(i0 + d_row32(r)) * n + j0 + l % 32] = acc[r];
}

// i8, 32x32x8: four bytes of k a lane, as f16 above; i32 result.
kernel void gemm_i8(global const char *a, global const char *b, global int *c, uint n) {
    uint i0 = tile_row(n, 32), j0 = tile_col(n, 32), l = lane();
    int16_t acc = 0;
    for (uint k = 0; k < n; k += 8) {
        uint x = 0, y = 0;
        for (uint t = 0; t < 4; t++) {
            uint kk = k + 4 * (l / 32) + t;
            x |= (uint)(uchar)a[(i0 + l % 32) * n + kk] << (8 * t);
            y |= (uint)(uchar)b[kk * n + j0 + l % 32] << (8 * t);
        }
        acc = __builtin_amdgcn_mfma_i32_32x32x8i8((int)x, (int)y, acc, 0, 0, 0);
    }
    for (uint r = 0; r < 16; r++)
        c[(i0 + d_row32(r)) * n + j0 + l % 32] = acc[r];
}

// bf16 (the _1k form), 32x32x8: the bf16 bits as shorts, laid out as f16 above.
kernel void gemm_bf16(global const ushort *a, global const ushort *b, global float *c, uint n) {
    uint i0 = tile_row(n, 32), j0 = tile_col(n, 32), l = lane();
    float16_t acc = 0;
    for (uint k = 0; k < n; k += 8) {
        short4_t x, y;
        for (uint t = 0; t < 4; t++) {
            uint kk = k + 4 * (l / 32) + t;
            x[t] = (short)a[(i0 + l % 32) * n + kk];
            y[t] = (short)b[kk * n + j0 + l % 32];
        }
        acc = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(x, y, acc, 0, 0, 0);
    }
    for (uint r = 0; r < 16; r++)
        c[(i0 + d_row32(r)) * n + j0 + l % 32] = acc[r];
}

// f64, 16x16x4 on 16x16 tiles: lane holds A[i = lane % 16][k = lane / 16] and B[k][j]; D row
// 4 x r + lane / 16 of register pair r, column lane % 16.
kernel void gemm_f64(global const double *a, global const double *b, global double *c, uint n) {
    uint i0 = tile_row(n, 16), j0 = tile_col(n, 16), l = lane();
    double4_t acc = 0;
    for (uint k = 0; k < n; k += 4) {
        double x = a[(i0 + l % 16) * n + k + l / 16];
        double y = b[(k + l / 16) * n + j0 + l % 16];
        acc = __builtin_amdgcn_mfma_f64_16x16x4f64(x, y, acc, 0, 0, 0);
    }
    for (uint r = 0; r < 4; r++)
        c[(i0 + 4 * r + l / 16) * n + j0 + l % 16] = acc[r];
}
