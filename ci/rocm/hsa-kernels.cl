// The kernels the ROCr programs (hsa-compute.c, hsa-long.c) load through ROCr's executable API.
// OpenCL C for amdgcn-amd-amdhsa, gfx90a, without device libraries: work-item ids and sizes come
// from the amdgcn builtins and the dispatch packet. Built by ci/rocm/build.sh with Debian's
// clang-15 and ld.lld-15 into hsa-kernels.co (a code object v4).
//
// Each kernel's arguments are a C struct in hsa-common.h (struct args_NAME): keep them in step.
// Every result has a CPU counterpart in the programs.

typedef unsigned long u64;

// hsa_kernel_dispatch_packet_t: workgroup_size_x/y/z u16 at 4/6/8, grid_size_x/y/z u32 at 12/16/20.
static inline uint wg_size(int d) {
    __constant ushort *p = (__constant ushort *)__builtin_amdgcn_dispatch_ptr();
    return p[2 + d];
}

static inline uint grid_size(int d) {
    __constant uint *p = (__constant uint *)__builtin_amdgcn_dispatch_ptr();
    return p[3 + d];
}

static inline uint global_x(void) {
    return __builtin_amdgcn_workgroup_id_x() * wg_size(0) + __builtin_amdgcn_workitem_id_x();
}

static inline uint global_y(void) {
    return __builtin_amdgcn_workgroup_id_y() * wg_size(1) + __builtin_amdgcn_workitem_id_y();
}

// OpenCL's barrier(CLK_LOCAL_MEM_FENCE): LDS writes before it are seen after it.
static inline void barrier_lds(void) {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

// c = a + b, n elements.
kernel void vector_add(global const float *a, global const float *b, global float *c, uint n) {
    uint i = global_x();
    if (i < n)
        c[i] = a[i] + b[i];
}

// Per workgroup of 256 items: the sum of its 256 inputs, a tree in LDS with a barrier per level;
// also the largest input, through a second LDS array.
kernel void lds_reduce(global const uint *in, global uint *sums, global uint *maxima) {
    local uint sum[256];
    local uint top[256];
    uint t = __builtin_amdgcn_workitem_id_x();
    uint v = in[global_x()];
    sum[t] = v;
    top[t] = v;
    barrier_lds();
    for (uint s = 128; s > 0; s >>= 1) {
        if (t < s) {
            sum[t] += sum[t + s];
            top[t] = top[t] > top[t + s] ? top[t] : top[t + s];
        }
        barrier_lds();
    }
    if (t == 0) {
        sums[__builtin_amdgcn_workgroup_id_x()] = sum[0];
        maxima[__builtin_amdgcn_workgroup_id_x()] = top[0];
    }
}

// Global atomics: a 64-bin histogram of the inputs' low bits (32-bit adds), a 64-bit sum, the
// largest input (atomic max) and a count of odd inputs claimed by compare-and-swap increments.
kernel void atomics(global const uint *in, uint n, global uint *bins, global u64 *sum,
                    global uint *largest, global uint *odd) {
    uint i = global_x();
    if (i >= n)
        return;
    uint v = in[i];
    __atomic_fetch_add(&bins[v & 63], 1u, __ATOMIC_RELAXED);
    __atomic_fetch_add(sum, (u64)v * 4099u, __ATOMIC_RELAXED);
    __atomic_fetch_max(largest, v, __ATOMIC_RELAXED);
    if (v & 1) {
        uint seen = __atomic_load_n(odd, __ATOMIC_RELAXED);
        while (!__atomic_compare_exchange_n(odd, &seen, seen + 1, false, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED))
            ;
    }
}

// Cross-lane moves within a wave of 64 (ds_bpermute, what HIP's __shfl compiles to): each item
// gets lane 5's value of its wave, its neighbour's (lane ^ 1), and lane 0 of each wave gets the
// wave's sum by a shuffle-down tree.
kernel void shuffle(global const uint *in, global uint *bcast, global uint *xor1,
                    global uint *wave_sums) {
    uint i = global_x();
    uint lane = __builtin_amdgcn_workitem_id_x() & 63;
    uint v = in[i];
    bcast[i] = (uint)__builtin_amdgcn_ds_bpermute(5 * 4, (int)v);
    xor1[i] = (uint)__builtin_amdgcn_ds_bpermute((int)((lane ^ 1) * 4), (int)v);
    uint s = v;
    for (uint d = 32; d > 0; d >>= 1) {
        uint from = lane + d < 64 ? lane + d : lane;
        s += (uint)__builtin_amdgcn_ds_bpermute((int)(from * 4), (int)s);
    }
    if (lane == 0)
        wave_sums[i / 64] = s;
}

// A 2D grid over a width x height matrix, edge workgroups partial: out[y][x] = 3 * in[x][y] + x - y
// (in is height x width transposed).
kernel void grid2d(global const uint *in, global uint *out, uint width, uint height) {
    uint x = global_x();
    uint y = global_y();
    if (x < width && y < height)
        out[y * width + x] = 3 * in[x * height + y] + x - y;
}

// Double precision: y = fma(a, x, y) (exact on both sides) and q = x / (i + 1).
kernel void daxpy(double a, global const double *x, global double *y, global double *q, uint n) {
    uint i = global_x();
    if (i < n) {
        y[i] = __builtin_fma(a, x[i], y[i]);
        q[i] = x[i] / (double)(i + 1);
    }
}

// 64-bit indexing: items write the hash of their 64-bit index at p[first + i], first * 4 bytes
// beyond 4 GiB or across that line.
kernel void index64(global uint *p, u64 first, uint n) {
    uint i = global_x();
    if (i < n) {
        u64 at = first + i;
        p[at] = (uint)(at ^ (at >> 32)) * 2654435761u;
    }
}

// The long kernel: each item iterates a chain of `steps` xorshift steps from its seed and writes
// the end; every 4096 steps lane 0 of each wave adds one to *progress (system memory: the host
// watches it move).
kernel void long_chain(global uint *out, uint n, uint steps, volatile global uint *progress) {
    uint i = global_x();
    uint lane = __builtin_amdgcn_workitem_id_x() & 63;
    uint x = i * 2654435761u + 12345u;
    for (uint s = 0; s < steps; s++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x += s;
        if ((s & 4095) == 4095 && lane == 0)
            __atomic_fetch_add(progress, 1u, __ATOMIC_RELAXED);
    }
    if (i < n)
        out[i] = x;
}
