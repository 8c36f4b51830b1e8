/*
 * hsa-compute: a ROCr program of ours that computes on the GPU, each result checked against the
 * same computation on the CPU: ROCr's synchronous copies in every direction, its fills, and our
 * own kernels (hsa-kernels.cl) loaded from a code object through ROCr's executable API and
 * dispatched by hand on an AQL queue.
 *
 * It follows the step protocol of probe.h ("STEP <name> ok: ..." per step; the first failure, a
 * mismatch included, prints "STOP <name>: ..." and exits 2; a step that does not complete within
 * the step limit prints "STOP <name>: no completion within N s" and exits 3), then "DONE".
 * Steps:
 *
 *   init agents pools alloc   hsa_init; the CPU and GPU agents; VRAM and fine-grained host pools;
 *                             VRAM on the first GPU, host buffers the GPU may use
 *   copy_h2d copy_d2d copy_d2h copy_h2h
 *                             hsa_memory_copy host -> VRAM, VRAM -> VRAM, VRAM -> host, host ->
 *                             host, 1 MiB each; the data checked after the last
 *   copy_unaligned            hsa_memory_copy of 1 MiB - 5 bytes from offset 3 to offset 1 and
 *                             back (ROCr's misaligned copy kernel)
 *   copy_locked               host memory from malloc locked with hsa_amd_memory_lock (a userptr)
 *                             -> VRAM -> another locked buffer
 *   copy_peer                 VRAM of the first GPU -> VRAM of the second (when there are two)
 *   fill                      hsa_amd_memory_fill of VRAM (an odd count of dwords) and of a host
 *                             buffer, checked with the bytes around them
 *   load                      hsa-kernels.co: a code object reader, an executable, the first
 *                             GPU's code object loaded, frozen; its kernels' descriptors
 *   queue                     hsa_queue_create of an AQL queue and the kernel arguments' memory
 *   vector_add lds_reduce atomics shuffle grid2d daxpy index64
 *                             each kernel dispatched once, its output copied back and compared
 *                             with the CPU's
 *   free shutdown             every buffer freed, the executable and queue destroyed,
 *                             hsa_shut_down
 *
 * Usage: hsa-compute --code-object FILE [--step-seconds N]
 * Build: ci/rocm/build.sh (gcc -O1 ... -lhsa-runtime64; hsa-kernels.co with clang-15).
 */
#define _GNU_SOURCE
#include <math.h>

#include "probe.h"

#include "hsa-common.h"

#define BYTES (1u << 20)
#define N (1u << 16) /* elements of the kernel steps */

/* Arguments of the kernels in hsa-kernels.cl, as the compiler lays them out. */
struct args_vector_add {
    const float *a, *b;
    float *c;
    uint32_t n;
};
struct args_lds_reduce {
    const uint32_t *in;
    uint32_t *sums, *maxima;
};
struct args_atomics {
    const uint32_t *in;
    uint32_t n;
    uint32_t *bins;
    uint64_t *sum;
    uint32_t *largest, *odd;
};
struct args_shuffle {
    const uint32_t *in;
    uint32_t *bcast, *xor1, *wave_sums;
};
struct args_grid2d {
    const uint32_t *in;
    uint32_t *out;
    uint32_t width, height;
};
struct args_daxpy {
    double a;
    const double *x;
    double *y, *q;
    uint32_t n;
};
struct args_index64 {
    uint32_t *p;
    uint64_t first;
    uint32_t n;
};

/* A deterministic input: element i of series `seed`. */
static uint32_t input(uint32_t seed, uint32_t i)
{
    uint32_t x = seed * 0x9E3779B9u ^ i * 0x85EBCA6Bu;
    x ^= x >> 15;
    x *= 0x2C1B3C6Du;
    x ^= x >> 12;
    return x;
}

struct ctx {
    struct agents all;
    hsa_agent_t gpu;
    hsa_amd_memory_pool_t vram_pool, host_pool, kernarg_pool;
    hsa_queue_t *queue;
    void *kernarg;
};

/* Device buffers for a kernel step: allocated in VRAM, filled from host buffers with
 * hsa_memory_copy, read back the same way. */
static void *vram(struct ctx *c, size_t bytes)
{
    return pool_alloc(c->vram_pool, bytes, NULL, 0);
}

static void *host(struct ctx *c, size_t bytes)
{
    return pool_alloc(c->host_pool, bytes, &c->gpu, 1);
}

static void to_device(void *dst, const void *src, size_t bytes)
{
    CHECK(hsa_memory_copy(dst, src, bytes));
}

static void from_device(void *dst, const void *src, size_t bytes)
{
    CHECK(hsa_memory_copy(dst, src, bytes));
}

static void step_vector_add(struct ctx *c, const struct kernel *k)
{
    size_t bytes = N * sizeof(float);
    float *ha = host(c, bytes), *hb = host(c, bytes), *hc = host(c, bytes);
    for (uint32_t i = 0; i < N; i++) {
        ha[i] = (float)input(1, i) / 65536.0f;
        hb[i] = (float)(int32_t)input(2, i) / 3.0f;
        hc[i] = -1.0f;
    }
    float *da = vram(c, bytes), *db = vram(c, bytes), *dc = vram(c, bytes);
    to_device(da, ha, bytes);
    to_device(db, hb, bytes);
    uint32_t n = N - 3; /* a partial last workgroup */
    struct args_vector_add a = {da, db, dc, n};
    run_kernel(c->queue, k, &a, sizeof(a), shape_1d(N, 256), c->kernarg);
    from_device(hc, dc, n * sizeof(float));
    for (uint32_t i = 0; i < n; i++)
        if (hc[i] != ha[i] + hb[i])
            stop("c[%u] = %a, the CPU's %a + %a = %a", i, (double)hc[i], (double)ha[i],
                 (double)hb[i], (double)(ha[i] + hb[i]));
    ok("%u floats, equal to the CPU's sums", n);
    hsa_amd_memory_pool_free(ha);
    hsa_amd_memory_pool_free(hb);
    hsa_amd_memory_pool_free(hc);
    hsa_amd_memory_pool_free(da);
    hsa_amd_memory_pool_free(db);
    hsa_amd_memory_pool_free(dc);
}

static void step_lds_reduce(struct ctx *c, const struct kernel *k)
{
    uint32_t groups = N / 256;
    uint32_t *hin = host(c, N * 4), *hs = host(c, groups * 4), *hm = host(c, groups * 4);
    for (uint32_t i = 0; i < N; i++)
        hin[i] = input(3, i);
    uint32_t *din = vram(c, N * 4), *ds = vram(c, groups * 4), *dm = vram(c, groups * 4);
    to_device(din, hin, N * 4);
    struct args_lds_reduce a = {din, ds, dm};
    run_kernel(c->queue, k, &a, sizeof(a), shape_1d(N, 256), c->kernarg);
    from_device(hs, ds, groups * 4);
    from_device(hm, dm, groups * 4);
    for (uint32_t g = 0; g < groups; g++) {
        uint32_t sum = 0, top = 0;
        for (uint32_t i = g * 256; i < (g + 1) * 256; i++) {
            sum += hin[i];
            top = hin[i] > top ? hin[i] : top;
        }
        if (hs[g] != sum || hm[g] != top)
            stop("workgroup %u: sum %#x, max %#x; the CPU's %#x, %#x", g, hs[g], hm[g], sum, top);
    }
    ok("%u workgroups of 256: sums and maxima equal to the CPU's", groups);
    hsa_amd_memory_pool_free(hin);
    hsa_amd_memory_pool_free(hs);
    hsa_amd_memory_pool_free(hm);
    hsa_amd_memory_pool_free(din);
    hsa_amd_memory_pool_free(ds);
    hsa_amd_memory_pool_free(dm);
}

static void step_atomics(struct ctx *c, const struct kernel *k)
{
    /* Results: 64 bins, then the 64-bit sum, the max and the odd count. */
    size_t rbytes = 64 * 4 + 8 + 4 + 4;
    uint32_t *hin = host(c, N * 4);
    uint8_t *hr = host(c, rbytes);
    for (uint32_t i = 0; i < N; i++)
        hin[i] = input(4, i);
    memset(hr, 0, rbytes);
    uint32_t *din = vram(c, N * 4);
    uint8_t *dr = vram(c, rbytes);
    to_device(din, hin, N * 4);
    to_device(dr, hr, rbytes);
    struct args_atomics a = {din,
                             N,
                             (uint32_t *)dr,
                             (uint64_t *)(dr + 256),
                             (uint32_t *)(dr + 264),
                             (uint32_t *)(dr + 268)};
    run_kernel(c->queue, k, &a, sizeof(a), shape_1d(N, 256), c->kernarg);
    from_device(hr, dr, rbytes);
    uint32_t bins[64] = {0}, top = 0, odd = 0;
    uint64_t sum = 0;
    for (uint32_t i = 0; i < N; i++) {
        bins[hin[i] & 63]++;
        sum += (uint64_t)hin[i] * 4099u;
        top = hin[i] > top ? hin[i] : top;
        odd += hin[i] & 1;
    }
    uint32_t *gbins = (uint32_t *)hr;
    for (unsigned b = 0; b < 64; b++)
        if (gbins[b] != bins[b])
            stop("bin %u: %u, the CPU's %u", b, gbins[b], bins[b]);
    uint64_t gsum;
    uint32_t gtop, godd;
    memcpy(&gsum, hr + 256, 8);
    memcpy(&gtop, hr + 264, 4);
    memcpy(&godd, hr + 268, 4);
    if (gsum != sum || gtop != top || godd != odd)
        stop("sum %#" PRIx64 ", max %#x, odd %u; the CPU's %#" PRIx64 ", %#x, %u", gsum, gtop,
             godd, sum, top, odd);
    ok("%u items: 64 bins, a 64-bit sum, max and a CAS count equal to the CPU's", N);
    hsa_amd_memory_pool_free(hin);
    hsa_amd_memory_pool_free(hr);
    hsa_amd_memory_pool_free(din);
    hsa_amd_memory_pool_free(dr);
}

static void step_shuffle(struct ctx *c, const struct kernel *k)
{
    uint32_t waves = N / 64;
    uint32_t *hin = host(c, N * 4), *hb = host(c, N * 4), *hx = host(c, N * 4),
             *hs = host(c, waves * 4);
    for (uint32_t i = 0; i < N; i++)
        hin[i] = input(5, i);
    uint32_t *din = vram(c, N * 4), *db = vram(c, N * 4), *dx = vram(c, N * 4),
             *ds = vram(c, waves * 4);
    to_device(din, hin, N * 4);
    struct args_shuffle a = {din, db, dx, ds};
    run_kernel(c->queue, k, &a, sizeof(a), shape_1d(N, 256), c->kernarg);
    from_device(hb, db, N * 4);
    from_device(hx, dx, N * 4);
    from_device(hs, ds, waves * 4);
    for (uint32_t i = 0; i < N; i++) {
        uint32_t wave = i / 64 * 64;
        if (hb[i] != hin[wave + 5])
            stop("broadcast: item %u has %#x, lane 5 of its wave %#x", i, hb[i], hin[wave + 5]);
        if (hx[i] != hin[i ^ 1])
            stop("xor 1: item %u has %#x, its neighbour %#x", i, hx[i], hin[i ^ 1]);
    }
    for (uint32_t w = 0; w < waves; w++) {
        /* The tree's own arithmetic: lanes past the end add their own value. */
        uint32_t s[64];
        for (unsigned l = 0; l < 64; l++)
            s[l] = hin[w * 64 + l];
        for (unsigned d = 32; d > 0; d >>= 1) {
            uint32_t next[64];
            for (unsigned l = 0; l < 64; l++)
                next[l] = s[l] + (l + d < 64 ? s[l + d] : s[l]);
            memcpy(s, next, sizeof(s));
        }
        if (hs[w] != s[0])
            stop("wave %u: shuffle-down sum %#x, the CPU's %#x", w, hs[w], s[0]);
    }
    ok("%u items: broadcast, xor and shuffle-down sums of %u waves equal to the CPU's", N, waves);
    hsa_amd_memory_pool_free(hin);
    hsa_amd_memory_pool_free(hb);
    hsa_amd_memory_pool_free(hx);
    hsa_amd_memory_pool_free(hs);
    hsa_amd_memory_pool_free(din);
    hsa_amd_memory_pool_free(db);
    hsa_amd_memory_pool_free(dx);
    hsa_amd_memory_pool_free(ds);
}

static void step_grid2d(struct ctx *c, const struct kernel *k)
{
    const uint32_t w = 300, h = 200; /* not multiples of the 16 x 16 workgroups */
    size_t bytes = (size_t)w * h * 4;
    uint32_t *hin = host(c, bytes), *hout = host(c, bytes);
    for (uint32_t i = 0; i < w * h; i++)
        hin[i] = input(6, i);
    uint32_t *din = vram(c, bytes), *dout = vram(c, bytes);
    to_device(din, hin, bytes);
    struct args_grid2d a = {din, dout, w, h};
    struct shape s = {2, {w, h, 1}, {16, 16, 1}};
    run_kernel(c->queue, k, &a, sizeof(a), s, c->kernarg);
    from_device(hout, dout, bytes);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++) {
            uint32_t want = 3 * hin[x * h + y] + x - y;
            if (hout[y * w + x] != want)
                stop("(%u, %u) = %#x, the CPU's %#x", x, y, hout[y * w + x], want);
        }
    ok("%u x %u grid in 16 x 16 workgroups equal to the CPU's", w, h);
    hsa_amd_memory_pool_free(hin);
    hsa_amd_memory_pool_free(hout);
    hsa_amd_memory_pool_free(din);
    hsa_amd_memory_pool_free(dout);
}

static void step_daxpy(struct ctx *c, const struct kernel *k)
{
    size_t bytes = N * sizeof(double);
    double *hx = host(c, bytes), *hy = host(c, bytes), *hq = host(c, bytes);
    double *y0 = malloc(bytes);
    for (uint32_t i = 0; i < N; i++) {
        hx[i] = (double)input(7, i) / 7.0 - 1e9;
        hy[i] = y0[i] = (double)(int32_t)input(8, i) * 1.25e-3;
    }
    double *dx = vram(c, bytes), *dy = vram(c, bytes), *dq = vram(c, bytes);
    to_device(dx, hx, bytes);
    to_device(dy, hy, bytes);
    const double a = -2.718281828459045;
    struct args_daxpy args = {a, dx, dy, dq, N};
    run_kernel(c->queue, k, &args, sizeof(args), shape_1d(N, 256), c->kernarg);
    from_device(hy, dy, bytes);
    from_device(hq, dq, bytes);
    for (uint32_t i = 0; i < N; i++) {
        double want = fma(a, hx[i], y0[i]);
        if (hy[i] != want)
            stop("y[%u] = %a, the CPU's fma %a", i, hy[i], want);
        /* The GPU's division is a correctly rounded Newton sequence: within one ulp. */
        double q = hx[i] / (double)(i + 1);
        if (fabs(hq[i] - q) > fabs(q) * 0x1p-52)
            stop("q[%u] = %a, the CPU's %a", i, hq[i], q);
    }
    ok("%u doubles: fma exact, divisions within an ulp of the CPU's", N);
    free(y0);
    hsa_amd_memory_pool_free(hx);
    hsa_amd_memory_pool_free(hy);
    hsa_amd_memory_pool_free(hq);
    hsa_amd_memory_pool_free(dx);
    hsa_amd_memory_pool_free(dy);
    hsa_amd_memory_pool_free(dq);
}

static void step_index64(struct ctx *c, const struct kernel *k)
{
    /* 4 GiB + 64 KiB of VRAM (sparse on the simulator: only the window is touched); the kernel
     * writes 4096 dwords starting 2048 dwords before the 4 GiB line. */
    const uint64_t words = (1ull << 30) + 16384, first = (1ull << 30) - 2048;
    const uint32_t n = 4096, margin = 64;
    uint32_t *p = vram(c, words * 4);
    uint32_t *h = host(c, (n + 2 * margin) * 4);
    memset(h, 0xA5, (n + 2 * margin) * 4);
    to_device(p + first - margin, h, (n + 2 * margin) * 4);
    struct args_index64 a = {p, first, n};
    run_kernel(c->queue, k, &a, sizeof(a), shape_1d(n, 256), c->kernarg);
    memset(h, 0, (n + 2 * margin) * 4);
    from_device(h, p + first - margin, (n + 2 * margin) * 4);
    for (uint32_t i = 0; i < n + 2 * margin; i++) {
        uint64_t at = first - margin + i;
        uint32_t want = (i < margin || i >= n + margin)
                            ? 0xA5A5A5A5u
                            : (uint32_t)(at ^ (at >> 32)) * 2654435761u;
        if (h[i] != want)
            stop("dword %#" PRIx64 " (byte %#" PRIx64 ") is %#x, the CPU's %#x", at, at * 4, h[i],
                 want);
    }
    ok("%u dwords across the 4 GiB line of a %" PRIu64 " MiB buffer, the margins untouched", n,
       words * 4 >> 20);
    hsa_amd_memory_pool_free(p);
    hsa_amd_memory_pool_free(h);
}

int main(int argc, char **argv)
{
    const char *code_object = NULL;
    unsigned step_seconds = 60;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--code-object") && i + 1 < argc)
            code_object = argv[++i];
        else if (!strcmp(argv[i], "--step-seconds") && i + 1 < argc)
            step_seconds = (unsigned)strtoul(argv[++i], NULL, 10);
        else
            code_object = NULL, i = argc;
    }
    if (!code_object) {
        fprintf(stderr, "usage: %s --code-object FILE [--step-seconds N]\n", argv[0]);
        return 1;
    }
    probe_start(step_seconds);
    struct ctx c;
    memset(&c, 0, sizeof(c));

    step("init");
    CHECK(hsa_init());
    ok("ROCr initialised");

    step("agents");
    c.all = find_agents();
    c.gpu = c.all.gpu[0];
    char name[64] = {0};
    CHECK(hsa_agent_get_info(c.gpu, HSA_AGENT_INFO_NAME, name));
    ok("%u GPUs, the first %s", c.all.ngpus, name);

    step("pools");
    c.vram_pool = find_pool(c.gpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED, "VRAM");
    c.host_pool = find_pool(c.all.cpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED, "host");
    c.kernarg_pool = find_pool(c.all.cpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT, "kernarg");
    ok("VRAM, fine-grained host and kernel-argument pools");

    step("alloc");
    uint8_t *src = host(&c, BYTES), *dst = host(&c, BYTES), *dst2 = host(&c, BYTES);
    uint8_t *dev = vram(&c, BYTES), *dev2 = vram(&c, BYTES);
    ok("1 MiB buffers: two in VRAM, three on the host");

    step("copy_h2d");
    fill(src, BYTES, 11);
    CHECK(hsa_memory_copy(dev, src, BYTES));
    ok("1 MiB");

    step("copy_d2d");
    CHECK(hsa_memory_copy(dev2, dev, BYTES));
    ok("1 MiB");

    step("copy_d2h");
    memset(dst, 0, BYTES);
    CHECK(hsa_memory_copy(dst, dev2, BYTES));
    check_or_stop("host -> VRAM -> VRAM -> host", dst, BYTES, 11);
    ok("1 MiB, checked");

    step("copy_h2h");
    memset(dst2, 0, BYTES);
    CHECK(hsa_memory_copy(dst2, dst, BYTES));
    check_or_stop("host -> host", dst2, BYTES, 11);
    ok("1 MiB, checked");

    step("copy_unaligned");
    fill(src, BYTES, 12);
    memset(dst, 0, BYTES);
    CHECK(hsa_memory_copy(dev + 1, src + 3, BYTES - 5));
    CHECK(hsa_memory_copy(dst + 3, dev + 1, BYTES - 5));
    if (dst[0] || dst[1] || dst[2] || dst[BYTES - 2] || dst[BYTES - 1])
        stop("bytes outside the copied range were written");
    for (size_t i = 3; i < BYTES - 2; i++)
        if (dst[i] != pattern(12, i))
            stop("byte %zu is %#x, not %#x", i, dst[i], pattern(12, i));
    ok("1 MiB - 5 bytes, offsets 3 -> 1 -> 3, checked with its edges");

    step("copy_locked");
    {
        uint8_t *a = aligned_alloc(4096, BYTES), *b = aligned_alloc(4096, BYTES);
        void *ga = NULL, *gb = NULL;
        if (!a || !b)
            stop("aligned_alloc");
        fill(a, BYTES, 13);
        memset(b, 0, BYTES);
        CHECK(hsa_amd_memory_lock(a, BYTES, &c.gpu, 1, &ga));
        CHECK(hsa_amd_memory_lock(b, BYTES, &c.gpu, 1, &gb));
        CHECK(hsa_memory_copy(dev, ga, BYTES));
        CHECK(hsa_memory_copy(gb, dev, BYTES));
        check_or_stop("locked -> VRAM -> locked", b, BYTES, 13);
        CHECK(hsa_amd_memory_unlock(a));
        CHECK(hsa_amd_memory_unlock(b));
        free(a);
        free(b);
    }
    ok("1 MiB from malloc, locked, -> VRAM -> locked, checked");

    step("copy_peer");
    if (c.all.ngpus > 1) {
        hsa_agent_t g1 = c.all.gpu[1];
        hsa_amd_memory_pool_t pool1 =
            find_pool(g1, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED, "VRAM of GPU 1");
        hsa_agent_t both[2] = {c.gpu, g1};
        uint8_t *peer = pool_alloc(pool1, BYTES, both, 2);
        CHECK(hsa_amd_agents_allow_access(2, both, NULL, dev2));
        /* hsa_memory_copy from GPU 1's VRAM to host memory copies on GPU 1 (the source's
         * agent): the host buffer, so far allowed to GPU 0 only, must be allowed to GPU 1 too,
         * or GPU 1's blit faults on it. */
        CHECK(hsa_amd_agents_allow_access(2, both, NULL, dst));
        fill(src, BYTES, 14);
        CHECK(hsa_memory_copy(dev2, src, BYTES));
        CHECK(hsa_memory_copy(peer, dev2, BYTES));
        memset(dst, 0, BYTES);
        CHECK(hsa_memory_copy(dst, peer, BYTES));
        check_or_stop("GPU 0 -> GPU 1 -> host", dst, BYTES, 14);
        hsa_amd_memory_pool_free(peer);
        ok("1 MiB GPU 0 VRAM -> GPU 1 VRAM -> host, checked");
    } else {
        ok("skipped: one GPU");
    }

    step("fill");
    {
        const uint32_t value = 0xC0FFEE11u, words = (BYTES / 4) - 3;
        memset(dst, 0x5A, BYTES);
        CHECK(hsa_memory_copy(dev, dst, BYTES));
        CHECK(hsa_amd_memory_fill(dev + 4, value, words - 1));
        memset(dst, 0, BYTES);
        CHECK(hsa_memory_copy(dst, dev, BYTES));
        for (uint32_t w = 0; w < BYTES / 4; w++) {
            uint32_t got, want = (w >= 1 && w < words) ? value : 0x5A5A5A5Au;
            memcpy(&got, dst + 4 * w, 4);
            if (got != want)
                stop("VRAM dword %u is %#x, not %#x", w, got, want);
        }
        memset(dst2, 0x5A, BYTES);
        CHECK(hsa_amd_memory_fill(dst2 + 8, ~value, 1001));
        for (uint32_t w = 0; w < BYTES / 4; w++) {
            uint32_t got, want = (w >= 2 && w < 1003) ? ~value : 0x5A5A5A5Au;
            memcpy(&got, dst2 + 4 * w, 4);
            if (got != want)
                stop("host dword %u is %#x, not %#x", w, got, want);
        }
        ok("%u dwords of VRAM and 1001 of host memory, checked with their edges", words - 1);
    }

    step("load");
    hsa_executable_t exe = load_code_object(code_object, c.gpu);
    const char *names[] = {"vector_add", "lds_reduce", "atomics", "shuffle",
                           "grid2d",     "daxpy",      "index64"};
    struct kernel k[7];
    for (unsigned i = 0; i < 7; i++)
        k[i] = find_kernel(exe, c.gpu, names[i]);
    ok("%s: 7 kernels (lds_reduce: %u bytes of LDS)", code_object, k[1].group_size);

    step("queue");
    c.queue = create_queue(c.gpu);
    uint32_t kernarg_max = 0;
    for (unsigned i = 0; i < 7; i++)
        kernarg_max = k[i].kernarg_size > kernarg_max ? k[i].kernarg_size : kernarg_max;
    CHECK(hsa_amd_memory_pool_allocate(c.kernarg_pool, 4096, 0, &c.kernarg));
    CHECK(hsa_amd_agents_allow_access(1, &c.gpu, NULL, c.kernarg));
    ok("AQL queue of %u packets, kernel arguments up to %u bytes", c.queue->size, kernarg_max);

    step("vector_add");
    step_vector_add(&c, &k[0]);
    step("lds_reduce");
    step_lds_reduce(&c, &k[1]);
    step("atomics");
    step_atomics(&c, &k[2]);
    step("shuffle");
    step_shuffle(&c, &k[3]);
    step("grid2d");
    step_grid2d(&c, &k[4]);
    step("daxpy");
    step_daxpy(&c, &k[5]);
    step("index64");
    step_index64(&c, &k[6]);

    step("free");
    CHECK(hsa_amd_memory_pool_free(src));
    CHECK(hsa_amd_memory_pool_free(dst));
    CHECK(hsa_amd_memory_pool_free(dst2));
    CHECK(hsa_amd_memory_pool_free(dev));
    CHECK(hsa_amd_memory_pool_free(dev2));
    CHECK(hsa_amd_memory_pool_free(c.kernarg));
    CHECK(hsa_queue_destroy(c.queue));
    CHECK(hsa_executable_destroy(exe));
    ok("all released");

    step("shutdown");
    CHECK(hsa_shut_down());
    ok("runtime closed");
    alarm(0);
    printf("DONE\n");
    return 0;
}
