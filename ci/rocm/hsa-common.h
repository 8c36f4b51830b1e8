/*
 * hsa-common.h: what the ROCr programs of ci/rocm (hsa-probe.c, hsa-compute.c, hsa-long.c)
 * share: the status check, finding agents and memory pools, loading hsa-kernels.co through ROCr's
 * executable API, and dispatching one of its kernels by hand on an AQL queue (the packet written
 * as the HSA specification says: every field, then the header with a release store, then the
 * doorbell).
 * Include probe.h first; one translation unit includes this once.
 */
#ifndef ROCM_HSA_COMMON_H
#define ROCM_HSA_COMMON_H

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>

#define MAX_GPUS 16

/* Stops with the call's text, status and ROCr's description of it unless it succeeded. */
#define CHECK(call)                                                                                \
    do {                                                                                           \
        hsa_status_t s_ = (call);                                                                  \
        if (s_ != HSA_STATUS_SUCCESS) {                                                            \
            const char *why_ = NULL;                                                               \
            hsa_status_string(s_, &why_);                                                          \
            stop("%s: status %#x (%s)", #call, (unsigned)s_, why_ ? why_ : "?");                   \
        }                                                                                          \
    } while (0)

struct agents {
    hsa_agent_t cpu;
    bool have_cpu;
    hsa_agent_t gpu[MAX_GPUS];
    unsigned ngpus;
};

static inline hsa_status_t each_agent(hsa_agent_t a, void *data)
{
    struct agents *all = data;
    hsa_device_type_t type;
    hsa_status_t s = hsa_agent_get_info(a, HSA_AGENT_INFO_DEVICE, &type);
    if (s != HSA_STATUS_SUCCESS)
        return s;
    if (type == HSA_DEVICE_TYPE_CPU && !all->have_cpu) {
        all->cpu = a;
        all->have_cpu = true;
    } else if (type == HSA_DEVICE_TYPE_GPU && all->ngpus < MAX_GPUS) {
        all->gpu[all->ngpus++] = a;
    }
    return HSA_STATUS_SUCCESS;
}

/* The CPU agent and every GPU agent; stops unless there is one of each. */
static inline struct agents find_agents(void)
{
    struct agents all;
    memset(&all, 0, sizeof(all));
    CHECK(hsa_iterate_agents(each_agent, &all));
    if (!all.have_cpu)
        stop("no CPU agent");
    if (!all.ngpus)
        stop("no GPU agent");
    return all;
}

/* A global segment pool that allows allocation and has the flag `want`
 * (HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_*). */
struct pool_want {
    uint32_t want;
    hsa_amd_memory_pool_t pool;
    bool found;
};

static inline hsa_status_t each_pool(hsa_amd_memory_pool_t pool, void *data)
{
    struct pool_want *w = data;
    hsa_amd_segment_t seg;
    uint32_t flags = 0;
    bool alloc = false;
    hsa_status_t s = hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &seg);
    if (s != HSA_STATUS_SUCCESS)
        return s;
    if (seg != HSA_AMD_SEGMENT_GLOBAL)
        return HSA_STATUS_SUCCESS;
    s = hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags);
    if (s != HSA_STATUS_SUCCESS)
        return s;
    s = hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED, &alloc);
    if (s != HSA_STATUS_SUCCESS)
        return s;
    if (alloc && (flags & w->want) && !w->found) {
        w->pool = pool;
        w->found = true;
    }
    return HSA_STATUS_SUCCESS;
}

static inline hsa_amd_memory_pool_t find_pool(hsa_agent_t a, uint32_t want, const char *what)
{
    struct pool_want w = {.want = want};
    CHECK(hsa_amd_agent_iterate_memory_pools(a, each_pool, &w));
    if (!w.found)
        stop("no %s pool", what);
    return w.pool;
}

/* Allocates from `pool` and lets every agent in `access` use it. */
static inline void *pool_alloc(hsa_amd_memory_pool_t pool, size_t bytes, const hsa_agent_t *access,
                        unsigned naccess)
{
    void *p = NULL;
    CHECK(hsa_amd_memory_pool_allocate(pool, bytes, 0, &p));
    if (naccess)
        CHECK(hsa_amd_agents_allow_access(naccess, access, NULL, p));
    return p;
}

/* A kernel of a frozen executable: what a dispatch packet needs. */
struct kernel {
    const char *name;
    uint64_t object;
    uint32_t kernarg_size;
    uint32_t group_size;
    uint32_t private_size;
};

/* Reads a whole file into malloc'd memory. */
static inline void *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        stop("cannot open %s", path);
    if (fseek(f, 0, SEEK_END) || (*size = (size_t)ftell(f)) == 0 || fseek(f, 0, SEEK_SET))
        stop("cannot size %s", path);
    void *buf = malloc(*size);
    if (!buf || fread(buf, 1, *size, f) != *size)
        stop("cannot read %s", path);
    fclose(f);
    return buf;
}

/* Loads the code object at `path` for `gpu`: a reader from memory, an executable, the agent's code
 * object loaded (ROCr copies its code into the GPU's memory), frozen. */
static inline hsa_executable_t load_code_object(const char *path, hsa_agent_t gpu)
{
    size_t size = 0;
    void *image = read_file(path, &size);
    hsa_code_object_reader_t reader;
    CHECK(hsa_code_object_reader_create_from_memory(image, size, &reader));
    hsa_executable_t exe;
    CHECK(hsa_executable_create_alt(HSA_PROFILE_FULL, HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT,
                                    NULL, &exe));
    CHECK(hsa_executable_load_agent_code_object(exe, gpu, reader, NULL, NULL));
    CHECK(hsa_executable_freeze(exe, NULL));
    uint32_t result = 0;
    CHECK(hsa_executable_validate(exe, &result));
    if (result)
        stop("hsa_executable_validate: %u", result);
    CHECK(hsa_code_object_reader_destroy(reader));
    free(image);
    return exe;
}

static inline struct kernel find_kernel(hsa_executable_t exe, hsa_agent_t gpu, const char *name)
{
    char symbol[96];
    snprintf(symbol, sizeof(symbol), "%s.kd", name);
    hsa_executable_symbol_t sym;
    CHECK(hsa_executable_get_symbol_by_name(exe, symbol, &gpu, &sym));
    struct kernel k = {.name = name};
    CHECK(hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
                                         &k.object));
    CHECK(hsa_executable_symbol_get_info(
        sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE, &k.kernarg_size));
    CHECK(hsa_executable_symbol_get_info(
        sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE, &k.group_size));
    CHECK(hsa_executable_symbol_get_info(
        sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE, &k.private_size));
    return k;
}

/* A queue error ends the program with the step it happened in (an illegal instruction, a memory
 * fault: what ROCr learns from the queue's inactive signal). */
static inline void on_queue_error(hsa_status_t status, hsa_queue_t *q, void *data)
{
    (void)q;
    (void)data;
    const char *why = NULL;
    hsa_status_string(status, &why);
    stop("queue error %#x (%s)", (unsigned)status, why ? why : "?");
}

static inline hsa_queue_t *create_queue(hsa_agent_t gpu)
{
    hsa_queue_t *q = NULL;
    CHECK(hsa_queue_create(gpu, 256, HSA_QUEUE_TYPE_SINGLE, on_queue_error, NULL, UINT32_MAX,
                           UINT32_MAX, &q));
    return q;
}

/* The shape of a dispatch: 1-3 dimensions, grid and workgroup sizes in work-items. */
struct shape {
    uint16_t dims;
    uint32_t grid[3];
    uint16_t wg[3];
};

static inline struct shape shape_1d(uint32_t items, uint16_t wg)
{
    struct shape s = {1, {items, 1, 1}, {wg, 1, 1}};
    return s;
}

/* Writes one KERNEL_DISPATCH packet of `k` on `q` with the arguments `args` (copied into
 * `kernarg`, which must hold k->kernarg_size bytes and stay until the dispatch ends), rings the
 * doorbell and returns; `done` is decremented when the kernel has finished. */
static inline void dispatch(hsa_queue_t *q, const struct kernel *k, const void *args, size_t args_size,
                     struct shape s, void *kernarg, hsa_signal_t done)
{
    /* A C struct of the arguments ends with padding to its alignment (8 with a pointer in it)
     * where the kernel's segment ends with its last argument: three pointers and a uint are 32
     * bytes in C and 28 in the segment. Only that padding may be left out. */
    size_t padded = ((size_t)k->kernarg_size + 7) & ~(size_t)7;
    if (args_size > padded)
        stop("%s: %zu bytes of arguments, the kernel takes %u", k->name, args_size,
             k->kernarg_size);
    memset(kernarg, 0, k->kernarg_size);
    memcpy(kernarg, args, args_size < k->kernarg_size ? args_size : k->kernarg_size);
    uint64_t index = hsa_queue_add_write_index_screlease(q, 1);
    while (index - hsa_queue_load_read_index_scacquire(q) >= q->size)
        usleep(100);
    hsa_kernel_dispatch_packet_t *p =
        (hsa_kernel_dispatch_packet_t *)q->base_address + (index & (q->size - 1));
    memset((char *)p + 4, 0, sizeof(*p) - 4);
    p->workgroup_size_x = s.wg[0];
    p->workgroup_size_y = s.wg[1];
    p->workgroup_size_z = s.wg[2];
    p->grid_size_x = s.grid[0];
    p->grid_size_y = s.grid[1];
    p->grid_size_z = s.grid[2];
    p->private_segment_size = k->private_size;
    p->group_segment_size = k->group_size;
    p->kernel_object = k->object;
    p->kernarg_address = kernarg;
    p->completion_signal = done;
    uint16_t header = (uint16_t)((HSA_PACKET_TYPE_KERNEL_DISPATCH << HSA_PACKET_HEADER_TYPE) |
                                 (1 << HSA_PACKET_HEADER_BARRIER) |
                                 (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_ACQUIRE_FENCE_SCOPE) |
                                 (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_RELEASE_FENCE_SCOPE));
    uint32_t first_word = (uint32_t)header | ((uint32_t)s.dims << 16);
    __atomic_store_n((uint32_t *)p, first_word, __ATOMIC_RELEASE);
    hsa_signal_store_screlease(q->doorbell_signal, (hsa_signal_value_t)index);
}

/* Waits until `done` drops below 1 (the step's alarm ends a wait that never returns). */
static inline void wait_done(hsa_signal_t done)
{
    hsa_signal_value_t v;
    while ((v = hsa_signal_wait_scacquire(done, HSA_SIGNAL_CONDITION_LT, 1, UINT64_MAX,
                                          HSA_WAIT_STATE_BLOCKED)) >= 1)
        ;
    if (v < 0)
        stop("the completion signal reads %" PRId64, (int64_t)v);
}

/* dispatch() and wait_done() with a fresh signal. */
static inline void run_kernel(hsa_queue_t *q, const struct kernel *k, const void *args, size_t args_size,
                       struct shape s, void *kernarg)
{
    hsa_signal_t done;
    CHECK(hsa_signal_create(1, 0, NULL, &done));
    dispatch(q, k, args, args_size, s, kernarg, done);
    wait_done(done);
    CHECK(hsa_signal_destroy(done));
}

#endif
