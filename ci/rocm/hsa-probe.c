/*
 * hsa-probe: a small client of Debian's ROCr (libhsa-runtime64, AMD's HSA runtime over libhsakmt),
 * written here to see how far AMD's runtime gets on kfd-simd (issue 17, item 5), and to be
 * checkpointed by real criu while it holds device memory.
 *
 * It follows the step protocol of probe.h, each step within 20 s. Steps:
 *
 *   init        hsa_init
 *   agents      the CPU and GPU agents: names, gfx target, compute units
 *   pools       each GPU's coarse-grained global pool (VRAM) and the CPU's fine-grained pool
 *   alloc       hsa_amd_memory_pool_allocate: VRAM on the first GPU, two host buffers, the host
 *               buffers made accessible to the GPU (hsa_amd_agents_allow_access)
 *   h2d         hsa_amd_memory_async_copy host -> VRAM, waited for on its completion signal
 *               (ROCr copies between host and device with an SDMA queue on gfx9)
 *   d2h         hsa_amd_memory_async_copy VRAM -> the other host buffer; its bytes are checked
 *   hold        (--hold FILE) prints "HOLDING <pid>" and waits until FILE exists: criu dumps and
 *               restores the process here; then the host buffers are checked and the round trip
 *               host -> VRAM -> host is made again through the same SDMA queues
 *   memcpy      (unless --no-memory-copy) hsa_memory_copy host -> VRAM, then VRAM -> host,
 *               checked (ROCr's synchronous copy: which engine it takes is what this step finds)
 *   free        hsa_amd_memory_pool_free of every buffer
 *   shutdown    hsa_shut_down
 *
 * Build: gcc -O1 -Wall -Wextra -o hsa-probe hsa-probe.c -lhsa-runtime64 (Debian:
 * libhsa-runtime-dev).
 */
#define _GNU_SOURCE
#include "probe.h"

#include "hsa-common.h"

#define BYTES (1u << 20)
#define STEP_SECONDS 20

/* An asynchronous copy of BYTES, waited for on its completion signal (1 -> 0). */
static void async_copy(void *dst, hsa_agent_t dst_agent, const void *src, hsa_agent_t src_agent)
{
    hsa_signal_t done;
    CHECK(hsa_signal_create(1, 0, NULL, &done));
    CHECK(hsa_amd_memory_async_copy(dst, dst_agent, src, src_agent, BYTES, 0, NULL, done));
    hsa_signal_value_t v;
    while ((v = hsa_signal_wait_scacquire(done, HSA_SIGNAL_CONDITION_LT, 1, UINT64_MAX,
                                          HSA_WAIT_STATE_BLOCKED)) != 0) {
        if (v < 0)
            stop("the completion signal reads %" PRId64, (int64_t)v);
    }
    CHECK(hsa_signal_destroy(done));
}

int main(int argc, char **argv)
{
    const char *hold = NULL;
    bool memory_copy = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--hold") && i + 1 < argc)
            hold = argv[++i];
        else if (!strcmp(argv[i], "--no-memory-copy"))
            memory_copy = false;
        else {
            fprintf(stderr, "usage: %s [--hold FILE] [--no-memory-copy]\n", argv[0]);
            return 1;
        }
    }
    probe_start(STEP_SECONDS);

    step("init");
    CHECK(hsa_init());
    uint16_t major = 0, minor = 0;
    CHECK(hsa_system_get_info(HSA_SYSTEM_INFO_VERSION_MAJOR, &major));
    CHECK(hsa_system_get_info(HSA_SYSTEM_INFO_VERSION_MINOR, &minor));
    ok("HSA %u.%u", major, minor);

    step("agents");
    struct agents all = find_agents();
    for (unsigned i = 0; i < all.ngpus; i++) {
        char name[64] = {0}, product[64] = {0};
        uint32_t cus = 0;
        CHECK(hsa_agent_get_info(all.gpu[i], HSA_AGENT_INFO_NAME, name));
        CHECK(hsa_agent_get_info(all.gpu[i], (hsa_agent_info_t)HSA_AMD_AGENT_INFO_PRODUCT_NAME,
                                 product));
        CHECK(hsa_agent_get_info(all.gpu[i],
                                 (hsa_agent_info_t)HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT, &cus));
        printf("GPU agent %u: %s, %s, %u CUs\n", i, name, product, cus);
    }
    ok("1 CPU, %u GPUs", all.ngpus);
    hsa_agent_t gpu = all.gpu[0];

    step("pools");
    hsa_amd_memory_pool_t vram_pool = find_pool(gpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED, "coarse-grained GPU");
    hsa_amd_memory_pool_t host_pool = find_pool(all.cpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED, "fine-grained CPU");
    size_t vram_size = 0;
    CHECK(hsa_amd_memory_pool_get_info(vram_pool, HSA_AMD_MEMORY_POOL_INFO_SIZE, &vram_size));
    ok("VRAM pool of %zu MiB, a fine-grained system pool", vram_size >> 20);

    step("alloc");
    void *vram = NULL, *src = NULL, *dst = NULL;
    CHECK(hsa_amd_memory_pool_allocate(vram_pool, BYTES, 0, &vram));
    CHECK(hsa_amd_memory_pool_allocate(host_pool, BYTES, 0, &src));
    CHECK(hsa_amd_memory_pool_allocate(host_pool, BYTES, 0, &dst));
    CHECK(hsa_amd_agents_allow_access(1, &gpu, NULL, src));
    CHECK(hsa_amd_agents_allow_access(1, &gpu, NULL, dst));
    ok("1 MiB of VRAM at %p, host buffers at %p and %p", vram, src, dst);

    step("h2d");
    fill(src, BYTES, 1);
    memset(dst, 0, BYTES);
    async_copy(vram, gpu, src, all.cpu);
    ok("1 MiB host -> VRAM");

    step("d2h");
    async_copy(dst, all.cpu, vram, gpu);
    check_or_stop("the copy back", dst, BYTES, 1);
    ok("1 MiB VRAM -> host, checked");

    if (hold) {
        step("hold");
        hold_until(hold);
        check_or_stop("the host buffer after the hold", dst, BYTES, 1);
        /* VRAM after the restore: copied back first, then written anew and read back. */
        memset(dst, 0, BYTES);
        async_copy(dst, all.cpu, vram, gpu);
        check_or_stop("VRAM after the hold", dst, BYTES, 1);
        fill(src, BYTES, 2);
        async_copy(vram, gpu, src, all.cpu);
        memset(dst, 0, BYTES);
        async_copy(dst, all.cpu, vram, gpu);
        check_or_stop("the copy back after the hold", dst, BYTES, 2);
        ok("data intact, a new round trip host -> VRAM -> host");
    }

    if (memory_copy) {
        step("memcpy");
        fill(src, BYTES, 3);
        CHECK(hsa_memory_copy(vram, src, BYTES));
        memset(dst, 0, BYTES);
        CHECK(hsa_memory_copy(dst, vram, BYTES));
        check_or_stop("hsa_memory_copy's round trip", dst, BYTES, 3);
        ok("1 MiB host -> VRAM -> host");
    }

    step("free");
    CHECK(hsa_amd_memory_pool_free(vram));
    CHECK(hsa_amd_memory_pool_free(src));
    CHECK(hsa_amd_memory_pool_free(dst));
    ok("all released");

    step("shutdown");
    CHECK(hsa_shut_down());
    ok("runtime closed");
    alarm(0);
    printf("DONE\n");
    return 0;
}
