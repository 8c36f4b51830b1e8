// hip-compute: a HIP program of ours that computes on the GPU, each result checked against the
// same computation on the CPU: hipMemcpy in every direction (pinned and pageable host memory),
// hipMemset, streams and events with hipMemcpyAsync, and kernels: vector add, an LDS reduction
// with barriers, atomics, warp shuffles, a 2D grid, double precision and 64-bit indexing.
//
// It follows the step protocol of probe.h ("STEP <name> ok: ..." per step; the first failure, a
// mismatch included, prints "STOP <name>: ..." and exits 2; a step that does not complete within
// the step limit prints "STOP <name>: no completion within N s" and exits 3), then "DONE". Steps:
//
//   init            hipInit, the devices and the first one's properties
//   malloc          device buffers, pinned (hipHostMalloc) and pageable (new) host buffers
//   h2d_pinned h2d_pageable d2d d2h_pinned d2h_pageable h2h default
//                   hipMemcpy of 1 MiB in each direction and kind of host memory, and with
//                   hipMemcpyDefault (unified addressing); each result checked
//   unaligned       hipMemcpy of 1 MiB - 5 bytes between odd offsets, there and back
//   memset          hipMemset of an odd range at an odd offset, hipMemsetD32, checked with the
//                   bytes around them
//   streams         two streams and events: hipMemcpyAsync in on stream 1, a kernel, an event;
//                   stream 2 waits for the event, runs a kernel, hipMemcpyAsync out,
//                   hipMemsetAsync; hipEventSynchronize, hipEventElapsedTime, hipStreamQuery
//   vector_add lds_reduce atomics shuffle grid2d double index64
//                   each kernel launched once, its output compared with the CPU's
//   free            everything released
//
// Usage: hip-compute [--step-seconds N]
// Build: ci/rocm/build.sh (hipcc -O2 --offload-arch=gfx90a).
#include <hip/hip_runtime.h>

#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "probe.h"

#include "hip-common.h"

// Launches and stops on a launch error (the kernel's completion is the next copy's business).
#define LAUNCH(kernel, grid, block, lds, stream, ...)                                              \
    do {                                                                                           \
        hipLaunchKernelGGL(kernel, grid, block, lds, stream, __VA_ARGS__);                         \
        CHECK(hipGetLastError());                                                                  \
    } while (0)

namespace {

constexpr size_t kBytes = 1u << 20;
constexpr uint32_t kN = 1u << 16; // elements of the kernel steps

// A deterministic input: element i of series `seed`.
__host__ __device__ uint32_t input(uint32_t seed, uint32_t i)
{
    uint32_t x = seed * 0x9E3779B9u ^ i * 0x85EBCA6Bu;
    x ^= x >> 15;
    x *= 0x2C1B3C6Du;
    x ^= x >> 12;
    return x;
}

__global__ void vector_add(const float *a, const float *b, float *c, uint32_t n)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

// Per block of 256: the sum of its inputs by a tree in LDS with __syncthreads per level.
__global__ void lds_reduce(const uint32_t *in, uint32_t *sums)
{
    __shared__ uint32_t part[256];
    uint32_t t = threadIdx.x;
    part[t] = in[blockIdx.x * 256 + t];
    __syncthreads();
    for (uint32_t s = 128; s > 0; s >>= 1) {
        if (t < s)
            part[t] += part[t + s];
        __syncthreads();
    }
    if (t == 0)
        sums[blockIdx.x] = part[0];
}

// A 64-bin histogram (atomicAdd), a 64-bit sum (atomicAdd on unsigned long long), the maximum
// (atomicMax), the minimum (atomicMin) and a count of odd inputs by an atomicCAS loop.
__global__ void atomics(const uint32_t *in, uint32_t n, uint32_t *bins,
                        unsigned long long *sum, uint32_t *minmax, uint32_t *odd)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    uint32_t v = in[i];
    atomicAdd(&bins[v & 63], 1u);
    atomicAdd(sum, static_cast<unsigned long long>(v) * 4099u);
    atomicMin(&minmax[0], v);
    atomicMax(&minmax[1], v);
    if (v & 1) {
        uint32_t seen = *odd, was;
        while ((was = atomicCAS(odd, seen, seen + 1)) != seen)
            seen = was;
    }
}

// Warp shuffles (waves of 64): lane 5's value, the xor-1 neighbour's, the value 3 lanes up, and
// the wave's sum by __shfl_down (lane 0).
__global__ void shuffle(const uint32_t *in, uint32_t *bcast, uint32_t *xor1, uint32_t *up3,
                        uint32_t *wave_sums)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = static_cast<int>(in[i]);
    bcast[i] = static_cast<uint32_t>(__shfl(v, 5));
    xor1[i] = static_cast<uint32_t>(__shfl_xor(v, 1));
    up3[i] = static_cast<uint32_t>(__shfl_up(v, 3));
    int s = v;
    for (int d = 32; d > 0; d >>= 1)
        s += __shfl_down(s, d);
    if ((threadIdx.x & 63) == 0)
        wave_sums[i / 64] = static_cast<uint32_t>(s);
}

// A 2D grid over width x height with partial edge blocks: out[y][x] = 3 * in[x][y] + x - y.
__global__ void grid2d(const uint32_t *in, uint32_t *out, uint32_t width, uint32_t height)
{
    uint32_t x = blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height)
        out[y * width + x] = 3 * in[x * height + y] + x - y;
}

// Double precision: y = fma(a, x, y) and q = x / (i + 1).
__global__ void dmath(double a, const double *x, double *y, double *q, uint32_t n)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = __fma_rn(a, x[i], y[i]);
        q[i] = x[i] / static_cast<double>(i + 1);
    }
}

// 64-bit indexing: the hash of each item's 64-bit index at p[first + i].
__global__ void index64(uint32_t *p, uint64_t first, uint32_t n)
{
    uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) {
        uint64_t at = first + i;
        p[at] = static_cast<uint32_t>(at ^ (at >> 32)) * 2654435761u;
    }
}

// streams: x[i] = x[i] * 2 + 1 on stream 1, then y[i] = x[i] + i on stream 2.
__global__ void twice_plus_one(uint32_t *x, uint32_t n)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] = x[i] * 2 + 1;
}

__global__ void plus_index(const uint32_t *x, uint32_t *y, uint32_t n)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = x[i] + i;
}

template <typename T> T *device(size_t count)
{
    void *p = nullptr;
    CHECK(hipMalloc(&p, count * sizeof(T)));
    return static_cast<T *>(p);
}

template <typename T> void put(T *dst, const std::vector<T> &src)
{
    CHECK(hipMemcpy(dst, src.data(), src.size() * sizeof(T), hipMemcpyHostToDevice));
}

template <typename T> std::vector<T> get(const T *src, size_t count)
{
    std::vector<T> out(count);
    CHECK(hipMemcpy(out.data(), src, count * sizeof(T), hipMemcpyDeviceToHost));
    return out;
}

std::vector<uint32_t> series(uint32_t seed, uint32_t n)
{
    std::vector<uint32_t> v(n);
    for (uint32_t i = 0; i < n; i++)
        v[i] = input(seed, i);
    return v;
}

void step_vector_add()
{
    std::vector<float> a(kN), b(kN);
    for (uint32_t i = 0; i < kN; i++) {
        a[i] = static_cast<float>(input(1, i)) / 65536.0f;
        b[i] = static_cast<float>(static_cast<int32_t>(input(2, i))) / 3.0f;
    }
    float *da = device<float>(kN), *db = device<float>(kN), *dc = device<float>(kN);
    put(da, a);
    put(db, b);
    uint32_t n = kN - 3;
    LAUNCH(vector_add, dim3(kN / 256), dim3(256), 0, 0, da, db, dc, n);
    std::vector<float> c = get(dc, n);
    for (uint32_t i = 0; i < n; i++)
        if (c[i] != a[i] + b[i])
            stop("c[%u] = %a, the CPU's %a", i, static_cast<double>(c[i]),
                 static_cast<double>(a[i] + b[i]));
    ok("%u floats equal to the CPU's sums", n);
    CHECK(hipFree(da));
    CHECK(hipFree(db));
    CHECK(hipFree(dc));
}

void step_lds_reduce()
{
    uint32_t blocks = kN / 256;
    std::vector<uint32_t> in = series(3, kN);
    uint32_t *din = device<uint32_t>(kN), *dsum = device<uint32_t>(blocks);
    put(din, in);
    LAUNCH(lds_reduce, dim3(blocks), dim3(256), 0, 0, din, dsum);
    std::vector<uint32_t> sums = get(dsum, blocks);
    for (uint32_t g = 0; g < blocks; g++) {
        uint32_t want = 0;
        for (uint32_t i = g * 256; i < (g + 1) * 256; i++)
            want += in[i];
        if (sums[g] != want)
            stop("block %u: %#x, the CPU's %#x", g, sums[g], want);
    }
    ok("%u blocks of 256 summed in LDS, equal to the CPU's", blocks);
    CHECK(hipFree(din));
    CHECK(hipFree(dsum));
}

void step_atomics()
{
    std::vector<uint32_t> in = series(4, kN);
    uint32_t *din = device<uint32_t>(kN), *dbins = device<uint32_t>(64),
             *dminmax = device<uint32_t>(2), *dodd = device<uint32_t>(1);
    auto *dsum = device<unsigned long long>(1);
    put(din, in);
    CHECK(hipMemset(dbins, 0, 64 * 4));
    CHECK(hipMemset(dsum, 0, 8));
    CHECK(hipMemset(dodd, 0, 4));
    put(dminmax, std::vector<uint32_t>{UINT32_MAX, 0});
    LAUNCH(atomics, dim3(kN / 256), dim3(256), 0, 0, din, kN, dbins, dsum, dminmax, dodd);
    std::vector<uint32_t> bins = get(dbins, 64), minmax = get(dminmax, 2), odd = get(dodd, 1);
    std::vector<unsigned long long> sum = get(dsum, 1);
    std::vector<uint32_t> want_bins(64);
    unsigned long long want_sum = 0;
    uint32_t lo = UINT32_MAX, hi = 0, want_odd = 0;
    for (uint32_t v : in) {
        want_bins[v & 63]++;
        want_sum += static_cast<unsigned long long>(v) * 4099u;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
        want_odd += v & 1;
    }
    for (unsigned b = 0; b < 64; b++)
        if (bins[b] != want_bins[b])
            stop("bin %u: %u, the CPU's %u", b, bins[b], want_bins[b]);
    if (sum[0] != want_sum || minmax[0] != lo || minmax[1] != hi || odd[0] != want_odd)
        stop("sum %#llx, min %#x, max %#x, odd %u; the CPU's %#llx, %#x, %#x, %u", sum[0],
             minmax[0], minmax[1], odd[0], want_sum, lo, hi, want_odd);
    ok("%u items: 64 bins, a 64-bit sum, min, max and a CAS count equal to the CPU's", kN);
    CHECK(hipFree(din));
    CHECK(hipFree(dbins));
    CHECK(hipFree(dminmax));
    CHECK(hipFree(dodd));
    CHECK(hipFree(dsum));
}

void step_shuffle()
{
    uint32_t waves = kN / 64;
    std::vector<uint32_t> in = series(5, kN);
    uint32_t *din = device<uint32_t>(kN), *db = device<uint32_t>(kN), *dx = device<uint32_t>(kN),
             *du = device<uint32_t>(kN), *ds = device<uint32_t>(waves);
    put(din, in);
    LAUNCH(shuffle, dim3(kN / 256), dim3(256), 0, 0, din, db, dx, du, ds);
    std::vector<uint32_t> b = get(db, kN), x = get(dx, kN), u = get(du, kN), s = get(ds, waves);
    for (uint32_t i = 0; i < kN; i++) {
        uint32_t lane = i & 63, wave = i - lane;
        if (b[i] != in[wave + 5])
            stop("__shfl(v, 5): item %u has %#x, lane 5 %#x", i, b[i], in[wave + 5]);
        if (x[i] != in[i ^ 1])
            stop("__shfl_xor(v, 1): item %u has %#x, not %#x", i, x[i], in[i ^ 1]);
        uint32_t want_up = lane >= 3 ? in[i - 3] : in[i];
        if (u[i] != want_up)
            stop("__shfl_up(v, 3): item %u has %#x, not %#x", i, u[i], want_up);
    }
    for (uint32_t w = 0; w < waves; w++) {
        // __shfl_down past the wave's end returns the lane's own value.
        uint32_t part[64];
        for (unsigned l = 0; l < 64; l++)
            part[l] = in[w * 64 + l];
        for (unsigned d = 32; d > 0; d >>= 1) {
            uint32_t next[64];
            for (unsigned l = 0; l < 64; l++)
                next[l] = part[l] + (l + d < 64 ? part[l + d] : part[l]);
            memcpy(part, next, sizeof(part));
        }
        if (s[w] != part[0])
            stop("wave %u: __shfl_down sum %#x, the CPU's %#x", w, s[w], part[0]);
    }
    ok("%u items: __shfl, __shfl_xor, __shfl_up and __shfl_down sums of %u waves equal to the "
       "CPU's",
       kN, waves);
    CHECK(hipFree(din));
    CHECK(hipFree(db));
    CHECK(hipFree(dx));
    CHECK(hipFree(du));
    CHECK(hipFree(ds));
}

void step_grid2d()
{
    const uint32_t w = 300, h = 200;
    std::vector<uint32_t> in = series(6, w * h);
    uint32_t *din = device<uint32_t>(w * h), *dout = device<uint32_t>(w * h);
    put(din, in);
    dim3 block(16, 16), grid((w + 15) / 16, (h + 15) / 16);
    LAUNCH(grid2d, grid, block, 0, 0, din, dout, w, h);
    std::vector<uint32_t> out = get(dout, w * h);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++) {
            uint32_t want = 3 * in[x * h + y] + x - y;
            if (out[y * w + x] != want)
                stop("(%u, %u) = %#x, the CPU's %#x", x, y, out[y * w + x], want);
        }
    ok("%u x %u in %u x %u blocks of 16 x 16, equal to the CPU's", w, h, grid.x, grid.y);
    CHECK(hipFree(din));
    CHECK(hipFree(dout));
}

void step_double()
{
    std::vector<double> x(kN), y(kN);
    for (uint32_t i = 0; i < kN; i++) {
        x[i] = static_cast<double>(input(7, i)) / 7.0 - 1e9;
        y[i] = static_cast<double>(static_cast<int32_t>(input(8, i))) * 1.25e-3;
    }
    double *dx = device<double>(kN), *dy = device<double>(kN), *dq = device<double>(kN);
    put(dx, x);
    put(dy, y);
    const double a = -2.718281828459045;
    LAUNCH(dmath, dim3(kN / 256), dim3(256), 0, 0, a, dx, dy, dq, kN);
    std::vector<double> gy = get(dy, kN), gq = get(dq, kN);
    for (uint32_t i = 0; i < kN; i++) {
        double want = std::fma(a, x[i], y[i]);
        if (gy[i] != want)
            stop("y[%u] = %a, the CPU's fma %a", i, gy[i], want);
        double q = x[i] / static_cast<double>(i + 1);
        if (std::fabs(gq[i] - q) > std::fabs(q) * 0x1p-52)
            stop("q[%u] = %a, the CPU's %a", i, gq[i], q);
    }
    ok("%u doubles: fma exact, divisions within an ulp of the CPU's", kN);
    CHECK(hipFree(dx));
    CHECK(hipFree(dy));
    CHECK(hipFree(dq));
}

void step_index64()
{
    // 4 GiB + 64 KiB (sparse on the simulator: only the window is touched).
    const uint64_t words = (1ull << 30) + 16384, first = (1ull << 30) - 2048;
    const uint32_t n = 4096, margin = 64;
    uint32_t *p = device<uint32_t>(words);
    std::vector<uint32_t> h(n + 2 * margin, 0xA5A5A5A5u);
    CHECK(hipMemcpy(p + first - margin, h.data(), h.size() * 4, hipMemcpyHostToDevice));
    LAUNCH(index64, dim3(n / 256), dim3(256), 0, 0, p, first, n);
    std::fill(h.begin(), h.end(), 0);
    CHECK(hipMemcpy(h.data(), p + first - margin, h.size() * 4, hipMemcpyDeviceToHost));
    for (uint32_t i = 0; i < n + 2 * margin; i++) {
        uint64_t at = first - margin + i;
        uint32_t want = (i < margin || i >= n + margin)
                            ? 0xA5A5A5A5u
                            : static_cast<uint32_t>(at ^ (at >> 32)) * 2654435761u;
        if (h[i] != want)
            stop("dword %#" PRIx64 " (byte %#" PRIx64 ") is %#x, the CPU's %#x", at, at * 4, h[i],
                 want);
    }
    ok("%u dwords across the 4 GiB line of a %" PRIu64 " MiB buffer, the margins untouched", n,
       words * 4 >> 20);
    CHECK(hipFree(p));
}

} // namespace

int main(int argc, char **argv)
{
    unsigned step_seconds = 60;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--step-seconds") && i + 1 < argc) {
            step_seconds = static_cast<unsigned>(strtoul(argv[++i], nullptr, 10));
        } else {
            fprintf(stderr, "usage: %s [--step-seconds N]\n", argv[0]);
            return 1;
        }
    }
    probe_start(step_seconds);

    step("init");
    CHECK(hipInit(0));
    int count = 0;
    CHECK(hipGetDeviceCount(&count));
    hipDeviceProp_t prop;
    CHECK(hipGetDeviceProperties(&prop, 0));
    ok("%d devices; device 0: %s, %s, %d CUs, warp size %d", count, prop.name, prop.gcnArchName,
       prop.multiProcessorCount, prop.warpSize);
    if (prop.warpSize != 64)
        stop("warp size %d: the shuffle step expects 64", prop.warpSize);

    step("malloc");
    uint8_t *a = device<uint8_t>(kBytes), *b = device<uint8_t>(kBytes);
    uint8_t *pinned = nullptr, *pinned2 = nullptr;
    CHECK(hipHostMalloc(reinterpret_cast<void **>(&pinned), kBytes, 0));
    CHECK(hipHostMalloc(reinterpret_cast<void **>(&pinned2), kBytes, 0));
    std::vector<uint8_t> pageable(kBytes), pageable2(kBytes);
    ok("two device buffers, two pinned and two pageable host buffers of 1 MiB");

    step("h2d_pinned");
    fill(pinned, kBytes, 1);
    CHECK(hipMemcpy(a, pinned, kBytes, hipMemcpyHostToDevice));
    ok("1 MiB");

    step("h2d_pageable");
    fill(pageable.data(), kBytes, 2);
    CHECK(hipMemcpy(b, pageable.data(), kBytes, hipMemcpyHostToDevice));
    ok("1 MiB");

    step("d2d");
    CHECK(hipMemcpy(b + kBytes / 2, a + kBytes / 2, kBytes / 2, hipMemcpyDeviceToDevice));
    ok("512 KiB");

    step("d2h_pinned");
    memset(pinned2, 0, kBytes);
    CHECK(hipMemcpy(pinned2, a, kBytes, hipMemcpyDeviceToHost));
    check_or_stop("pinned -> device -> pinned", pinned2, kBytes, 1);
    ok("1 MiB, checked");

    step("d2h_pageable");
    memset(pageable2.data(), 0, kBytes);
    CHECK(hipMemcpy(pageable2.data(), b, kBytes, hipMemcpyDeviceToHost));
    check_or_stop("pageable -> device (first half)", pageable2.data(), kBytes / 2, 2);
    for (size_t i = kBytes / 2; i < kBytes; i++)
        if (pageable2[i] != pattern(1, i))
            stop("device -> device: byte %zu is %#x, not %#x", i, pageable2[i], pattern(1, i));
    ok("1 MiB, checked (half from the pageable upload, half from the device copy)");

    step("h2h");
    memset(pageable2.data(), 0, kBytes);
    CHECK(hipMemcpy(pageable2.data(), pinned2, kBytes, hipMemcpyHostToHost));
    check_or_stop("pinned -> pageable", pageable2.data(), kBytes, 1);
    ok("1 MiB, checked");

    step("default");
    fill(pinned, kBytes, 3);
    CHECK(hipMemcpy(a, pinned, kBytes, hipMemcpyDefault));
    memset(pinned2, 0, kBytes);
    CHECK(hipMemcpy(pinned2, a, kBytes, hipMemcpyDefault));
    check_or_stop("hipMemcpyDefault round trip", pinned2, kBytes, 3);
    ok("1 MiB there and back, checked");

    step("unaligned");
    fill(pageable.data(), kBytes, 4);
    memset(pageable2.data(), 0, kBytes);
    CHECK(hipMemcpy(a + 1, pageable.data() + 3, kBytes - 5, hipMemcpyHostToDevice));
    CHECK(hipMemcpy(b + 5, a + 1, kBytes - 5 - 4, hipMemcpyDeviceToDevice));
    CHECK(hipMemcpy(pageable2.data() + 3, b + 5, kBytes - 9, hipMemcpyDeviceToHost));
    for (size_t i = 0; i < kBytes; i++) {
        uint8_t want = (i >= 3 && i < kBytes - 6) ? pattern(4, i) : 0;
        if (pageable2[i] != want)
            stop("byte %zu is %#x, not %#x", i, pageable2[i], want);
    }
    ok("1 MiB - 5 bytes from odd offsets, through an odd device-to-device copy, checked");

    step("memset");
    CHECK(hipMemset(a, 0x11, kBytes));
    CHECK(hipMemset(a + 3, 0xC3, kBytes - 10));
    CHECK(hipMemsetD32(reinterpret_cast<hipDeviceptr_t>(b), 0xDEADBEEF, kBytes / 4 - 1));
    std::vector<uint8_t> ga = get(a, kBytes), gb = get(b, kBytes);
    for (size_t i = 0; i < kBytes; i++) {
        uint8_t want = (i >= 3 && i < kBytes - 7) ? 0xC3 : 0x11;
        if (ga[i] != want)
            stop("hipMemset: byte %zu is %#x, not %#x", i, ga[i], want);
    }
    for (size_t w = 0; w < kBytes / 4 - 1; w++) {
        uint32_t got;
        memcpy(&got, gb.data() + 4 * w, 4);
        if (got != 0xDEADBEEFu)
            stop("hipMemsetD32: dword %zu is %#x", w, got);
    }
    ok("hipMemset of 1 MiB - 10 bytes at offset 3 inside a set MiB, hipMemsetD32 of 262143 "
       "dwords, checked");

    step("streams");
    {
        const uint32_t n = kN;
        hipStream_t s1, s2;
        hipEvent_t start, mid, end;
        CHECK(hipStreamCreate(&s1));
        CHECK(hipStreamCreateWithFlags(&s2, hipStreamNonBlocking));
        CHECK(hipEventCreate(&start));
        CHECK(hipEventCreate(&mid));
        CHECK(hipEventCreate(&end));
        uint32_t *x = device<uint32_t>(n), *y = device<uint32_t>(n);
        uint32_t *hx = reinterpret_cast<uint32_t *>(pinned), *hy = reinterpret_cast<uint32_t *>(pinned2);
        for (uint32_t i = 0; i < n; i++)
            hx[i] = input(9, i);
        memset(hy, 0, n * 4);
        CHECK(hipEventRecord(start, s1));
        CHECK(hipMemcpyAsync(x, hx, n * 4, hipMemcpyHostToDevice, s1));
        LAUNCH(twice_plus_one, dim3(n / 256), dim3(256), 0, s1, x, n);
        CHECK(hipEventRecord(mid, s1));
        CHECK(hipStreamWaitEvent(s2, mid, 0));
        LAUNCH(plus_index, dim3(n / 256), dim3(256), 0, s2, x, y, n);
        CHECK(hipMemcpyAsync(hy, y, n * 4, hipMemcpyDeviceToHost, s2));
        CHECK(hipMemsetAsync(x, 0, n * 4, s2));
        CHECK(hipEventRecord(end, s2));
        CHECK(hipEventSynchronize(end));
        if (hipStreamQuery(s2) != hipSuccess || hipEventQuery(end) != hipSuccess)
            stop("stream 2 or its last event not complete after hipEventSynchronize");
        float ms = -1;
        CHECK(hipEventElapsedTime(&ms, start, mid));
        if (!(ms >= 0))
            stop("hipEventElapsedTime: %f ms", static_cast<double>(ms));
        for (uint32_t i = 0; i < n; i++) {
            uint32_t want = input(9, i) * 2 + 1 + i;
            if (hy[i] != want)
                stop("y[%u] = %#x, the CPU's %#x", i, hy[i], want);
        }
        std::vector<uint32_t> zero = get(x, n);
        for (uint32_t i = 0; i < n; i++)
            if (zero[i])
                stop("hipMemsetAsync: x[%u] = %#x", i, zero[i]);
        CHECK(hipStreamSynchronize(s1));
        CHECK(hipEventDestroy(start));
        CHECK(hipEventDestroy(mid));
        CHECK(hipEventDestroy(end));
        CHECK(hipStreamDestroy(s1));
        CHECK(hipStreamDestroy(s2));
        CHECK(hipFree(x));
        CHECK(hipFree(y));
        ok("copy, kernel, event on stream 1; wait, kernel, copy, memset on stream 2: %u items "
           "equal to the CPU's; %.3f ms between the events",
           n, static_cast<double>(ms));
    }

    step("vector_add");
    step_vector_add();
    step("lds_reduce");
    step_lds_reduce();
    step("atomics");
    step_atomics();
    step("shuffle");
    step_shuffle();
    step("grid2d");
    step_grid2d();
    step("double");
    step_double();
    step("index64");
    step_index64();

    step("free");
    CHECK(hipFree(a));
    CHECK(hipFree(b));
    CHECK(hipHostFree(pinned));
    CHECK(hipHostFree(pinned2));
    ok("all released");
    alarm(0);
    printf("DONE\n");
    return 0;
}
