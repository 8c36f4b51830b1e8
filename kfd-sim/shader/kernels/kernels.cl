// Test kernels for the shader core, built by scripts/gen-kernels.sh into kernels.co (committed).
// OpenCL C for amdgcn-amd-amdhsa gfx90a without device libraries: work-item ids and sizes come
// from the amdgcn builtins and the dispatch packet (hsa_kernel_dispatch_packet_t).

typedef unsigned long u64;

// The dispatch packet: workgroup_size_x/y/z u16 at 4/6/8, grid_size_x/y/z u32 at 12/16/20.
static inline uint wg_size(int d) {
    __constant ushort *p = (__constant ushort *)__builtin_amdgcn_dispatch_ptr();
    return p[2 + d];
}

static inline uint grid_size(int d) {
    __constant uint *p = (__constant uint *)__builtin_amdgcn_dispatch_ptr();
    return p[3 + d];
}

// A workgroup barrier with LDS ordering (what OpenCL's barrier() does).
static inline void wg_barrier(void) {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

static inline uint gid_x(void) {
    return __builtin_amdgcn_workgroup_id_x() * wg_size(0) + __builtin_amdgcn_workitem_id_x();
}

static inline uint gid_y(void) {
    return __builtin_amdgcn_workgroup_id_y() * wg_size(1) + __builtin_amdgcn_workitem_id_y();
}

// Blit-style copy: dwordx4 body over a grid-stride loop, then the dword tail, as ROCr's and
// HIP's aligned copy kernels do.
kernel void copy_aligned(global const uint4 *src, global uint4 *dst, u64 n16,
                         global const uint *src_tail, global uint *dst_tail, u64 n4) {
    u64 stride = grid_size(0);
    for (u64 i = gid_x(); i < n16; i += stride)
        dst[i] = src[i];
    for (u64 i = gid_x(); i < n4; i += stride)
        dst_tail[i] = src_tail[i];
}

// Blit-style fill: the value in dwordx4 stores over a grid-stride loop, then the tail.
kernel void fill(global uint4 *dst, uint value, u64 n16, global uint *dst_tail, u64 n4) {
    u64 stride = grid_size(0);
    uint4 v = (uint4)(value, value, value, value);
    for (u64 i = gid_x(); i < n16; i += stride)
        dst[i] = v;
    for (u64 i = gid_x(); i < n4; i += stride)
        dst_tail[i] = value;
}

kernel void vector_add(global const float *a, global const float *b, global float *c, uint n) {
    uint i = gid_x();
    if (i < n)
        c[i] = a[i] + b[i];
}

// Sum of each workgroup's 256 elements: a tree in LDS with a barrier per level.
kernel void lds_reduce(global const uint *in, global uint *out) {
    local uint part[256];
    uint t = __builtin_amdgcn_workitem_id_x();
    part[t] = in[gid_x()];
    wg_barrier();
    for (uint s = 128; s > 0; s >>= 1) {
        if (t < s)
            part[t] += part[t + s];
        wg_barrier();
    }
    if (t == 0)
        out[__builtin_amdgcn_workgroup_id_x()] = part[0];
}

// Global atomics, 32 and 64 bit: counters[0] += 1, [1] = min, [2] = max (signed), [3] umax;
// wide[0] += value, [1] = min, [2] = max; a compare-and-swap claims one slot per item.
kernel void atomics(global uint *counters, global u64 *wide, global uint *slots, global const int *vals) {
    uint i = gid_x();
    int v = vals[i];
    __atomic_fetch_add(&counters[0], 1u, __ATOMIC_RELAXED);
    __atomic_fetch_min((global int *)&counters[1], v, __ATOMIC_RELAXED);
    __atomic_fetch_max((global int *)&counters[2], v, __ATOMIC_RELAXED);
    __atomic_fetch_max(&counters[3], (uint)v, __ATOMIC_RELAXED);
    __atomic_fetch_add(&wide[0], (u64)(long)v, __ATOMIC_RELAXED);
    __atomic_fetch_min((global long *)&wide[1], (long)v * 1000000000L, __ATOMIC_RELAXED);
    __atomic_fetch_max((global long *)&wide[2], (long)v * 1000000000L, __ATOMIC_RELAXED);
    // Claim the first free slot at or after (v & 63): each item ends in a distinct slot.
    uint s = (uint)v & 63;
    for (;;) {
        uint expected = 0;
        if (__atomic_compare_exchange_n(&slots[s], &expected, i + 1, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
            break;
        s = (s + 1) & 127;
    }
}

// Cross-lane moves: ds_bpermute (rotate by one lane) and DPP row shifts.
kernel void shuffle(global const uint *in, global uint *rot, global uint *dpp) {
    uint i = gid_x();
    uint lane = __builtin_amdgcn_workitem_id_x() & 63;
    uint v = in[i];
    rot[i] = __builtin_amdgcn_ds_bpermute((int)(((lane + 1) & 63) * 4), (int)v);
    // row_shr:1 with bound_ctrl: lane 0 of each row of 16 reads 0.
    dpp[i] = __builtin_amdgcn_update_dpp(0, (int)v, 0x111, 0xf, 0xf, true);
}

// A 2D grid: each item writes its coordinates.
kernel void grid2d(global uint *out, uint width) {
    uint x = gid_x();
    uint y = gid_y();
    out[y * width + x] = x * 1000 + y;
}

kernel void dmath(global const double *a, global const double *b, global double *out) {
    uint i = gid_x();
    double x = a[i], y = b[i];
    out[4 * i] = x * y + x;
    out[4 * i + 1] = x / y;
    out[4 * i + 2] = __builtin_sqrt(x);
    out[4 * i + 3] = __builtin_fma(x, y, -1.5);
}

// 64-bit indexing: items write at base + offset + i * 8, offset beyond 4 GiB.
kernel void index64(global u64 *base, u64 offset_words) {
    uint i = gid_x();
    base[offset_words + (u64)i] = offset_words + i;
}

// An instruction word no gfx9 encoding has.
kernel void illegal(global uint *out) {
    out[0] = 1;
    __asm__ volatile(".long 0xfc000000");
    out[0] = 2;
}

// Reads an address the caller leaves unmapped.
kernel void fault(global const uint *bad, global uint *out) {
    out[gid_x()] = bad[gid_x()];
}

kernel void trap(global uint *out) {
    out[0] = 1;
    __builtin_trap();
}

// Waits until the host sets *flag, then copies it out.
kernel void spin(volatile global uint *flag, global uint *out) {
    uint f;
    while ((f = __atomic_load_n(flag, __ATOMIC_ACQUIRE)) == 0)
        __builtin_amdgcn_s_sleep(1);
    out[gid_x()] = f + gid_x();
}

// Private arrays with dynamic indexing live in scratch.
kernel void scratch(global const uint *in, global const uint *idx, global uint *out) {
    uint i = gid_x();
    uint a[64];
    for (uint k = 0; k < 64; k++)
        a[k] = in[i] * k + k;
    out[i] = a[idx[i] & 63] + a[(idx[i] + 7) & 63];
}

__attribute__((noinline)) static void put(uint *p, uint v) {
    *p = v;
}

__attribute__((noinline)) static uint get(uint *p) {
    return *p;
}

// Generic pointers into LDS and private memory: FLAT instructions through the apertures.
kernel void flat_apertures(global uint *out) {
    local uint shared[64];
    uint priv[4];
    uint t = __builtin_amdgcn_workitem_id_x();
    put(&shared[t], t * 3);
    put(&priv[t & 3], t * 5);
    wg_barrier();
    out[gid_x()] = get(&shared[63 - t]) + get(&priv[t & 3]);
}

// MSG_INTERRUPT with M0 = the workgroup id plus 40, from the first lane of each workgroup.
kernel void interrupt(global uint *out) {
    out[gid_x()] = 7;
    if (__builtin_amdgcn_workitem_id_x() == 0)
        __builtin_amdgcn_s_sendmsg(1, __builtin_amdgcn_workgroup_id_x() + 40);
}

// Integer division and remainder, 32 and 64 bit, signed and unsigned: the long instruction
// sequences the compiler expands them into (reciprocal estimates, mul_hi, carries).
kernel void int_div(global const u64 *a, global const u64 *b, global u64 *out) {
    uint i = gid_x();
    u64 x = a[i], y = b[i];
    uint x32 = (uint)x, y32 = (uint)y | 1;
    out[8 * i] = x / (y | 1);
    out[8 * i + 1] = x % (y | 1);
    out[8 * i + 2] = (u64)((long)x / ((long)y | 1));
    out[8 * i + 3] = (u64)((long)x % ((long)y | 1));
    out[8 * i + 4] = x32 / y32;
    out[8 * i + 5] = x32 % y32;
    out[8 * i + 6] = (u64)(long)((int)x32 / (int)y32);
    out[8 * i + 7] = (u64)(long)((int)x32 % (int)y32);
}

#pragma OPENCL EXTENSION cl_khr_fp16 : enable

// Half precision: packed and scalar f16 arithmetic and conversions.
kernel void half_math(global const half *a, global const half *b, global half *out, global float *wide) {
    uint i = gid_x();
    half x = a[i], y = b[i];
    out[4 * i] = x + y;
    out[4 * i + 1] = x * y;
    out[4 * i + 2] = __builtin_fmaf16(x, y, (half)0.25h);
    out[4 * i + 3] = x > y ? x : y;
    wide[i] = (float)x * (float)y;
}

// A softmax over rows of 64: the row maximum and sum by cross-lane moves, exponentials and a
// division per element.
kernel void softmax(global const float *in, global float *out) {
    uint i = gid_x();
    float v = in[i];
    float m = v;
    for (int s = 32; s > 0; s >>= 1) {
        uint lane = __builtin_amdgcn_workitem_id_x() & 63;
        float o = __builtin_bit_cast(float, __builtin_amdgcn_ds_bpermute((int)(((lane + s) & 63) * 4), __builtin_bit_cast(int, m)));
        m = m > o ? m : o;
    }
    float e = __builtin_expf(v - m);
    float sum = e;
    for (int s = 32; s > 0; s >>= 1) {
        uint lane = __builtin_amdgcn_workitem_id_x() & 63;
        sum += __builtin_bit_cast(float, __builtin_amdgcn_ds_bpermute((int)(((lane + s) & 63) * 4), __builtin_bit_cast(int, sum)));
    }
    out[i] = e / sum;
}
