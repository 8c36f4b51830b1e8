/*
 * hsa-long: a ROCr program of ours with a long-running kernel, for criu to dump while the kernel
 * runs. It loads hsa-kernels.co through ROCr's executable API, dispatches `long_chain` (every item
 * iterates a chain of xorshift steps; lane 0 of each wave adds one to a counter in host memory
 * every 4096 steps), prints the counter's progress while it waits, and checks the kernel's output
 * and the counter against the CPU when the kernel has completed: a dispatch that was lost, run
 * twice, or resumed with a wrong state after a restore shows as a mismatch.
 *
 * Step protocol of probe.h. Steps:
 *
 *   init agents pools   hsa_init, the first GPU, its VRAM and the host pools
 *   load queue          hsa-kernels.co loaded for the first GPU; an AQL queue
 *   warmup              a short long_chain dispatch (256 steps), checked
 *   long                the long dispatch: prints "RUNNING <pid>" once it is rung, then
 *                       "PROGRESS <counter>/<total>" as the counter moves (at most once a
 *                       second); with --hold FILE, once the counter has moved, prints
 *                       "HOLDING <pid> (in flight: yes|no)" and waits for FILE to exist without
 *                       waiting for the kernel (criu dumps and restores meanwhile), then waits
 *                       for the completion signal
 *   verify              the output copied back (hsa_memory_copy) and compared with the CPU's
 *                       chains; the counter equal to waves x steps / 4096
 *   again               a second short dispatch on the same queue (after a restore: the
 *                       restored queue runs new work), checked
 *   shutdown            everything freed, hsa_shut_down
 *
 * Usage: hsa-long --code-object FILE [--items N] [--steps S] [--hold FILE] [--step-seconds N]
 *   N work-items (a multiple of 256; default 4096), S steps per item (a multiple of 4096; default
 *   1048576). The long step's limit is --step-seconds times 10.
 */
#define _GNU_SOURCE
#include "probe.h"

#include "hsa-common.h"

struct args_long_chain {
    uint32_t *out;
    uint32_t n;
    uint32_t steps;
    uint32_t *progress;
};

/* The CPU's chain of item i, as long_chain computes it. */
static uint32_t chain(uint32_t i, uint32_t steps)
{
    uint32_t x = i * 2654435761u + 12345u;
    for (uint32_t s = 0; s < steps; s++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x += s;
    }
    return x;
}

struct run {
    hsa_queue_t *q;
    const struct kernel *k;
    hsa_amd_memory_pool_t vram_pool, host_pool;
    hsa_agent_t gpu;
    void *kernarg;
};

/* Dispatches long_chain over `items` with `steps`; returns its output buffer (VRAM), the
 * counter (host) and the completion signal. */
static void start_chain(struct run *r, uint32_t items, uint32_t steps, uint32_t **out,
                        uint32_t **progress, hsa_signal_t *done)
{
    *out = pool_alloc(r->vram_pool, items * 4u, NULL, 0);
    *progress = pool_alloc(r->host_pool, 64, &r->gpu, 1);
    __atomic_store_n(*progress, 0, __ATOMIC_SEQ_CST);
    CHECK(hsa_signal_create(1, 0, NULL, done));
    struct args_long_chain a = {*out, items, steps, *progress};
    dispatch(r->q, r->k, &a, sizeof(a), shape_1d(items, 256), r->kernarg, *done);
}

/* Copies the output back and compares it and the counter with the CPU's. */
static void check_chain(struct run *r, uint32_t items, uint32_t steps, uint32_t *out,
                        uint32_t *progress)
{
    uint32_t *h = pool_alloc(r->host_pool, items * 4u, &r->gpu, 1);
    CHECK(hsa_memory_copy(h, out, items * 4u));
    for (uint32_t i = 0; i < items; i++) {
        uint32_t want = chain(i, steps);
        if (h[i] != want)
            stop("item %u: %#x, the CPU's chain %#x", i, h[i], want);
    }
    uint32_t total = items / 64 * (steps / 4096);
    uint32_t got = __atomic_load_n(progress, __ATOMIC_SEQ_CST);
    if (got != total)
        stop("the progress counter is %u, not %u (waves x steps / 4096)", got, total);
    CHECK(hsa_amd_memory_pool_free(h));
}

int main(int argc, char **argv)
{
    const char *code_object = NULL, *hold = NULL;
    uint32_t items = 4096, steps = 1u << 20;
    unsigned step_seconds = 60;
    bool usage = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--code-object") && i + 1 < argc)
            code_object = argv[++i];
        else if (!strcmp(argv[i], "--items") && i + 1 < argc)
            items = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--hold") && i + 1 < argc)
            hold = argv[++i];
        else if (!strcmp(argv[i], "--step-seconds") && i + 1 < argc)
            step_seconds = (unsigned)strtoul(argv[++i], NULL, 10);
        else
            usage = true;
    }
    if (usage || !code_object || !items || items % 256 || !steps || steps % 4096) {
        fprintf(stderr,
                "usage: %s --code-object FILE [--items N (x256)] [--steps S (x4096)] "
                "[--hold FILE] [--step-seconds N]\n",
                argv[0]);
        return 1;
    }
    probe_start(step_seconds);
    struct run r;
    memset(&r, 0, sizeof(r));

    step("init");
    CHECK(hsa_init());
    ok("ROCr initialised");

    step("agents");
    struct agents all = find_agents();
    r.gpu = all.gpu[0];
    ok("%u GPUs", all.ngpus);

    step("pools");
    r.vram_pool = find_pool(r.gpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED, "VRAM");
    r.host_pool = find_pool(all.cpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED, "host");
    hsa_amd_memory_pool_t kernarg_pool =
        find_pool(all.cpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT, "kernarg");
    ok("VRAM, fine-grained host and kernel-argument pools");

    step("load");
    hsa_executable_t exe = load_code_object(code_object, r.gpu);
    struct kernel k = find_kernel(exe, r.gpu, "long_chain");
    r.k = &k;
    ok("%s: long_chain", code_object);

    step("queue");
    r.q = create_queue(r.gpu);
    r.kernarg = pool_alloc(kernarg_pool, 4096, &r.gpu, 1);
    ok("AQL queue of %u packets", r.q->size);

    step("warmup");
    uint32_t *out, *progress;
    hsa_signal_t done;
    start_chain(&r, 256, 4096, &out, &progress, &done);
    wait_done(done);
    check_chain(&r, 256, 4096, out, progress);
    CHECK(hsa_signal_destroy(done));
    CHECK(hsa_amd_memory_pool_free(out));
    CHECK(hsa_amd_memory_pool_free(progress));
    ok("256 items x 4096 steps, equal to the CPU's");

    /* The long kernel: more time than a step. */
    probe_step_seconds = step_seconds * 10;
    step("long");
    uint32_t total = items / 64 * (steps / 4096);
    start_chain(&r, items, steps, &out, &progress, &done);
    printf("RUNNING %d: %u items x %u steps, %u progress ticks\n", (int)getpid(), items, steps,
           total);
    fflush(stdout);
    uint32_t shown = 0;
    bool held = hold == NULL;
    for (;;) {
        hsa_signal_value_t v = hsa_signal_wait_scacquire(done, HSA_SIGNAL_CONDITION_LT, 1,
                                                         1000000000ull, HSA_WAIT_STATE_BLOCKED);
        uint32_t now = __atomic_load_n(progress, __ATOMIC_SEQ_CST);
        if (now != shown) {
            printf("PROGRESS %u/%u\n", now, total);
            fflush(stdout);
            shown = now;
        }
        if (v < 1)
            break;
        if (!held && now > 0) {
            printf("HOLDING %d (in flight: %s)\n", (int)getpid(),
                   hsa_signal_load_scacquire(done) >= 1 ? "yes" : "no");
            fflush(stdout);
            alarm(0);
            while (access(hold, F_OK))
                usleep(100 * 1000);
            alarm(probe_step_seconds);
            held = true;
            printf("RELEASED %d: progress %u/%u\n", (int)getpid(),
                   __atomic_load_n(progress, __ATOMIC_SEQ_CST), total);
            fflush(stdout);
        }
    }
    if (!held)
        stop("the kernel completed before its progress counter moved: nothing was held");
    wait_done(done);
    ok("%u items x %u steps completed", items, steps);
    probe_step_seconds = step_seconds;

    step("verify");
    check_chain(&r, items, steps, out, progress);
    CHECK(hsa_signal_destroy(done));
    CHECK(hsa_amd_memory_pool_free(out));
    CHECK(hsa_amd_memory_pool_free(progress));
    ok("%u chains equal to the CPU's, the counter at %u", items, total);

    step("again");
    start_chain(&r, 512, 8192, &out, &progress, &done);
    wait_done(done);
    check_chain(&r, 512, 8192, out, progress);
    CHECK(hsa_signal_destroy(done));
    CHECK(hsa_amd_memory_pool_free(out));
    CHECK(hsa_amd_memory_pool_free(progress));
    ok("512 items x 8192 steps on the same queue, equal to the CPU's");

    step("shutdown");
    CHECK(hsa_amd_memory_pool_free(r.kernarg));
    CHECK(hsa_queue_destroy(r.q));
    CHECK(hsa_executable_destroy(exe));
    CHECK(hsa_shut_down());
    ok("runtime closed");
    alarm(0);
    printf("DONE\n");
    return 0;
}
