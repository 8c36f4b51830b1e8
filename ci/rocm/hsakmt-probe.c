/*
 * hsakmt-probe: a small client of Debian's libhsakmt (AMD's thunk over /dev/kfd), written here to
 * see how far AMD's own userspace gets on kfd-simd, and to be checkpointed by real criu while it
 * holds GPU state (issue 17, item 4).
 *
 * It follows the step protocol of probe.h (no step time limit: its waits have their own).
 * Steps:
 *
 *   open        hsaKmtOpenKFD, hsaKmtGetVersion
 *   topology    the system and node properties, each GPU's memory banks
 *   vram        VRAM without host access, mapped to its GPU
 *   gtt         system memory with host access (GTT), written and read through its mapping
 *   vram-host   VRAM with host access, written and read through its mapping
 *   userptr     malloc'ed memory registered with KFD and mapped to the GPU
 *   map-one     the GTT buffer mapped to one GPU (hsaKmtMapMemoryToGPUNodes)
 *   map-all     ... and to all GPUs
 *   events      a signal event: set, waited for, reset, a wait that times out
 *   sdma-queue  an SDMA queue (ring in GTT; libhsakmt gives it read and write pointers of its own)
 *   sdma-copy   a copy GTT (the buffer mapped to all GPUs) -> host-visible VRAM through the queue, a
 *               fence write of our own, and the signal of an event as ROCr signals one from an SDMA
 *               queue: a fence writing the event id into the event's slot of the events page, then
 *               a trap carrying the event id; the copy's bytes are checked through the VRAM
 *               mapping
 *   hold        (--hold FILE) prints "HOLDING <pid>" and waits until FILE exists: criu dumps and
 *               restores the process here; then every buffer is checked through its mapping
 *               again and a second copy is submitted through the same queue
 *   free        the queue, the events, the mappings and the memory released
 *   close       hsaKmtReleaseSystemProperties, hsaKmtCloseKFD
 *
 * Options: --hold FILE (above); --no-sdma (no queue and no copy: the hold and the rest without
 * them).
 *
 * Conventions the SDMA steps follow (those of libhsakmt and ROCr on gfx9): for a non-AQL queue,
 * hsaKmtCreateQueue ignores the pointers it is given and hands the driver read and write pointers
 * in its own queue record, returned in the queue resource; the ring's pointers are in bytes; the
 * doorbell takes the 64-bit write pointer. The driver's SDMA trap handler sets only an event whose
 * slot in the events page was written (kfd_signal_event_interrupt), hence the fence before the
 * trap.
 *
 * Build: gcc -O1 -Wall -Wextra -o hsakmt-probe hsakmt-probe.c $(pkg-config --cflags --libs libhsakmt)
 * (Debian: libhsakmt-dev).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* libhsakmt 6.x (trixie) installs its header as hsakmt/hsakmt.h, and its pkg-config file's
 * include directory (/include/rocm under a relative prefix) does not hold it; 5.x (bookworm)
 * installs hsakmt.h at the top. */
#if __has_include(<hsakmt/hsakmt.h>)
#include <hsakmt/hsakmt.h>
#else
#include <hsakmt.h>
#endif

#include "probe.h"

#define MAX_NODES 64
#define PAGE 4096u

/* Stops with the call's text and status unless it succeeded. */
#define CHECK(call)                                                                                \
    do {                                                                                           \
        HSAKMT_STATUS s_ = (call);                                                                 \
        if (s_ != HSAKMT_STATUS_SUCCESS)                                                           \
            stop("%s: status %d", #call, (int)s_);                                                 \
    } while (0)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* SDMA v4 packets (gfx9): opcodes and layouts from the SDMA v4 packet format. */
#define SDMA_OP_NOP 0u
#define SDMA_OP_COPY 1u
#define SDMA_OP_FENCE 5u
#define SDMA_OP_TRAP 6u

struct sdma {
    HsaQueueResource res;
    volatile uint32_t *ring; /* ring buffer, RING_BYTES */
    volatile uint64_t *rptr; /* libhsakmt's, written by the engine: bytes read */
    volatile uint64_t *wptr; /* libhsakmt's, written by us: bytes written */
    uint64_t wbytes;         /* our write pointer, in bytes, not wrapped */
};

#define RING_BYTES (16u * PAGE)

static void ring_put(struct sdma *q, uint32_t dw)
{
    q->ring[(q->wbytes % RING_BYTES) / 4] = dw;
    q->wbytes += 4;
}

static void ring_fence(struct sdma *q, uint64_t addr, uint32_t value)
{
    ring_put(q, SDMA_OP_FENCE);
    ring_put(q, (uint32_t)addr);
    ring_put(q, (uint32_t)(addr >> 32));
    ring_put(q, value);
}

/* Submits: a linear copy of n bytes src -> dst, a fence writing `value` at `fence`, the event's
 * signal (its id into its slot, a trap with its id); then the write pointer and the doorbell. */
static void sdma_copy(struct sdma *q, uint64_t src, uint64_t dst, uint32_t n, uint64_t fence,
                      uint32_t value, const HsaEvent *ev)
{
    ring_put(q, SDMA_OP_COPY | (0u << 8)); /* COPY, sub-op LINEAR */
    ring_put(q, n - 1);                     /* count: bytes - 1 on SDMA v4 */
    ring_put(q, 0);                         /* parameters: no swaps */
    ring_put(q, (uint32_t)src);
    ring_put(q, (uint32_t)(src >> 32));
    ring_put(q, (uint32_t)dst);
    ring_put(q, (uint32_t)(dst >> 32));
    ring_fence(q, fence, value);
    ring_fence(q, ev->EventData.HWData2, ev->EventId);
    ring_put(q, SDMA_OP_TRAP);
    ring_put(q, ev->EventId & 0x0fffffffu);
    while (q->wbytes % 32)
        ring_put(q, SDMA_OP_NOP);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    *q->wptr = q->wbytes;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    /* gfx9: the SDMA doorbell takes the 64-bit write pointer in bytes. */
    *(volatile uint64_t *)q->res.Queue_DoorBell_aql = q->wbytes;
}

/* Waits for the copy: the event (the trap), then the fence value; checks the bytes. */
static void sdma_wait(struct sdma *q, HsaEvent *ev, volatile uint32_t *fence, uint32_t value,
                      const void *dst, uint32_t n, uint32_t seed)
{
    double t0 = now();
    HSAKMT_STATUS s = hsaKmtWaitOnEvent(ev, 5000);
    if (s == HSAKMT_STATUS_WAIT_TIMEOUT)
        stop("no trap within 5 s (fence %#x, rptr %" PRIu64 " of %" PRIu64 " bytes)", *fence,
             *q->rptr, q->wbytes);
    if (s != HSAKMT_STATUS_SUCCESS)
        stop("hsaKmtWaitOnEvent: status %d", (int)s);
    while (*fence != value) {
        if (now() - t0 > 5)
            stop("the trap came but the fence reads %#x, not %#x", *fence, value);
        usleep(1000);
    }
    check_or_stop("the copy's destination", dst, n, seed);
}

struct buf {
    void *p;
    uint64_t size;
};

static void alloc(struct buf *b, uint32_t node, uint64_t size, bool host, bool nonpaged)
{
    HsaMemFlags f;
    memset(&f, 0, sizeof(f));
    f.ui32.HostAccess = host;
    f.ui32.NonPaged = nonpaged;
    f.ui32.NoSubstitute = 1;
    f.ui32.PageSize = HSA_PAGE_SIZE_4KB;
    f.ui32.CachePolicy = HSA_CACHING_CACHED;
    b->size = size;
    b->p = NULL;
    CHECK(hsaKmtAllocMemory(node, size, f, &b->p));
    if (!b->p)
        stop("hsaKmtAllocMemory gave no address");
}

static uint64_t va(const struct buf *b) { return (uint64_t)(uintptr_t)b->p; }

int main(int argc, char **argv)
{
    const char *hold = NULL;
    bool sdma = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--hold") && i + 1 < argc)
            hold = argv[++i];
        else if (!strcmp(argv[i], "--no-sdma"))
            sdma = false;
        else {
            fprintf(stderr, "usage: %s [--hold FILE] [--no-sdma]\n", argv[0]);
            return 1;
        }
    }
    probe_start(0);

    step("open");
    CHECK(hsaKmtOpenKFD());
    HsaVersionInfo ver;
    CHECK(hsaKmtGetVersion(&ver));
    ok("KFD %u.%u", ver.KernelInterfaceMajorVersion, ver.KernelInterfaceMinorVersion);

    step("topology");
    HsaSystemProperties sys;
    CHECK(hsaKmtAcquireSystemProperties(&sys));
    uint32_t gpus[MAX_NODES], ngpus = 0;
    if (sys.NumNodes > MAX_NODES)
        stop("%u nodes, more than %d", sys.NumNodes, MAX_NODES);
    for (uint32_t n = 0; n < sys.NumNodes; n++) {
        HsaNodeProperties p;
        CHECK(hsaKmtGetNodeProperties(n, &p));
        if (!p.NumFComputeCores)
            continue;
        HsaMemoryProperties mem[8];
        uint32_t banks = p.NumMemoryBanks < 8 ? p.NumMemoryBanks : 8;
        CHECK(hsaKmtGetNodeMemoryProperties(n, banks, mem));
        uint64_t vram = 0;
        for (uint32_t m = 0; m < banks; m++)
            if (mem[m].HeapType == HSA_HEAPTYPE_FRAME_BUFFER_PUBLIC ||
                mem[m].HeapType == HSA_HEAPTYPE_FRAME_BUFFER_PRIVATE)
                vram += mem[m].SizeInBytes;
        printf("GPU node %u: gfx%u%u%x, location %#x, %u CUs, %" PRIu64 " MiB VRAM, %u SDMA engines\n", n,
               p.EngineId.ui32.Major, p.EngineId.ui32.Minor, p.EngineId.ui32.Stepping, p.LocationId,
               p.NumFComputeCores / p.NumSIMDPerCU, vram >> 20, p.NumSdmaEngines);
        // The caches as libhsakmt parsed them from sysfs: counts per level, the L2's size and
        // how many CUs its sibling map names.
        HsaCacheProperties *caches = calloc(p.NumCaches ? p.NumCaches : 1, sizeof(*caches));
        if (!caches)
            stop("out of memory for %u caches", p.NumCaches);
        CHECK(hsaKmtGetNodeCacheProperties(n, p.FComputeIdLo, p.NumCaches, caches));
        uint32_t l1 = 0, l2 = 0, l2_kb = 0, l2_siblings = 0;
        for (uint32_t c = 0; c < p.NumCaches; c++) {
            if (caches[c].CacheLevel == 1)
                l1++;
            if (caches[c].CacheLevel != 2)
                continue;
            l2++;
            l2_kb = caches[c].CacheSize;
            for (uint32_t b = 0; b < HSA_CPU_SIBLINGS; b++)
                l2_siblings += caches[c].SiblingMap[b] != 0;
        }
        printf("GPU node %u caches: %u (%u L1, %u L2), L2 %u KiB with %u siblings\n", n, p.NumCaches, l1,
               l2, l2_kb, l2_siblings);
        free(caches);
        gpus[ngpus++] = n;
    }
    if (!ngpus)
        stop("no GPU node among %u nodes", sys.NumNodes);
    ok("%u nodes, %u GPUs", sys.NumNodes, ngpus);
    uint32_t g = gpus[0];

    step("vram");
    struct buf vram;
    alloc(&vram, g, 2u << 20, false, true);
    CHECK(hsaKmtMapMemoryToGPU(vram.p, vram.size, NULL));
    ok("2 MiB at %p", vram.p);

    step("gtt");
    struct buf gtt;
    alloc(&gtt, 0, 16 * PAGE, true, true);
    fill(gtt.p, gtt.size, 1);
    check_or_stop("GTT", gtt.p, gtt.size, 1);
    CHECK(hsaKmtMapMemoryToGPU(gtt.p, gtt.size, NULL));
    ok("64 KiB at %p, written and read", gtt.p);

    step("vram-host");
    struct buf vis;
    alloc(&vis, g, 16 * PAGE, true, true);
    fill(vis.p, vis.size, 2);
    check_or_stop("host-visible VRAM", vis.p, vis.size, 2);
    CHECK(hsaKmtMapMemoryToGPU(vis.p, vis.size, NULL));
    ok("64 KiB at %p, written and read", vis.p);

    step("userptr");
    void *user = NULL;
    if (posix_memalign(&user, PAGE, 4 * PAGE))
        stop("posix_memalign failed");
    fill(user, 4 * PAGE, 3);
    CHECK(hsaKmtRegisterMemory(user, 4 * PAGE));
    CHECK(hsaKmtMapMemoryToGPU(user, 4 * PAGE, NULL));
    check_or_stop("userptr", user, 4 * PAGE, 3);
    ok("16 KiB at %p", user);

    step("map-one");
    struct buf shared;
    alloc(&shared, 0, 4 * PAGE, true, true);
    HsaMemMapFlags mf;
    memset(&mf, 0, sizeof(mf));
    uint64_t alt = 0;
    CHECK(hsaKmtMapMemoryToGPUNodes(shared.p, shared.size, &alt, mf, 1, &gpus[ngpus - 1]));
    ok("GPU node %u", gpus[ngpus - 1]);

    step("map-all");
    CHECK(hsaKmtUnmapMemoryToGPU(shared.p));
    CHECK(hsaKmtMapMemoryToGPUNodes(shared.p, shared.size, &alt, mf, ngpus, gpus));
    ok("%u GPU nodes", ngpus);

    step("events");
    HsaEventDescriptor ed;
    memset(&ed, 0, sizeof(ed));
    ed.EventType = HSA_EVENTTYPE_SIGNAL;
    ed.NodeId = g;
    HsaEvent *ev = NULL, *done = NULL;
    CHECK(hsaKmtCreateEvent(&ed, false, false, &ev));
    CHECK(hsaKmtSetEvent(ev));
    CHECK(hsaKmtWaitOnEvent(ev, 1000));
    HSAKMT_STATUS s = hsaKmtWaitOnEvent(ev, 10);
    if (s != HSAKMT_STATUS_WAIT_TIMEOUT)
        stop("a wait on an auto-reset event already waited for: status %d, not a timeout", (int)s);
    CHECK(hsaKmtCreateEvent(&ed, false, false, &done));
    ok("event ids %u and %u", ev->EventId, done->EventId);

    struct sdma q;
    memset(&q, 0, sizeof(q));
    struct buf ring, ptrs;
    volatile uint32_t *fence = NULL;
    if (sdma) {
        step("sdma-queue");
        alloc(&ring, 0, RING_BYTES, true, true);
        alloc(&ptrs, 0, PAGE, true, true);
        CHECK(hsaKmtMapMemoryToGPU(ring.p, ring.size, NULL));
        CHECK(hsaKmtMapMemoryToGPU(ptrs.p, ptrs.size, NULL));
        memset(ring.p, 0, ring.size);
        memset(ptrs.p, 0, ptrs.size);
        q.ring = ring.p;
        fence = (volatile uint32_t *)ptrs.p + 8;
        CHECK(hsaKmtCreateQueue(g, HSA_QUEUE_SDMA, 100, HSA_QUEUE_PRIORITY_NORMAL, ring.p,
                                ring.size, NULL, &q.res));
        if (!q.res.QueueDoorBell)
            stop("no doorbell address");
        if (!q.res.Queue_read_ptr_aql || !q.res.Queue_write_ptr_aql)
            stop("no read or write pointer in the queue resource");
        q.rptr = q.res.Queue_read_ptr_aql;
        q.wptr = q.res.Queue_write_ptr_aql;
        q.wbytes = *q.wptr;
        ok("queue %" PRIu64 ", doorbell at %p", (uint64_t)q.res.QueueId,
           (void *)q.res.Queue_DoorBell);

        step("sdma-copy");
        fill(shared.p, PAGE, 4);
        sdma_copy(&q, va(&shared), va(&vis), PAGE, (uint64_t)(uintptr_t)fence, 1, done);
        sdma_wait(&q, done, fence, 1, vis.p, PAGE, 4);
        ok("4 KiB GTT -> VRAM, fence and trap");
    }

    if (hold) {
        step("hold");
        hold_until(hold);
        /* After a restore: the data through the mappings, then the queue again. */
        check_or_stop("GTT after the hold", gtt.p, gtt.size, 1);
        check_or_stop("userptr after the hold", user, 4 * PAGE, 3);
        if (sdma) {
            check_or_stop("VRAM after the hold", vis.p, PAGE, 4);
            fill(shared.p, PAGE, 5);
            sdma_copy(&q, va(&shared), va(&vis), PAGE, (uint64_t)(uintptr_t)fence, 2, done);
            sdma_wait(&q, done, fence, 2, vis.p, PAGE, 5);
        } else {
            check_or_stop("VRAM after the hold", vis.p, vis.size, 2);
        }
        ok("data intact%s", sdma ? ", a second copy through the queue" : "");
    }

    step("free");
    if (sdma) {
        CHECK(hsaKmtDestroyQueue(q.res.QueueId));
        CHECK(hsaKmtUnmapMemoryToGPU(ring.p));
        CHECK(hsaKmtUnmapMemoryToGPU(ptrs.p));
        CHECK(hsaKmtFreeMemory(ring.p, ring.size));
        CHECK(hsaKmtFreeMemory(ptrs.p, ptrs.size));
    }
    CHECK(hsaKmtDestroyEvent(ev));
    CHECK(hsaKmtDestroyEvent(done));
    CHECK(hsaKmtUnmapMemoryToGPU(shared.p));
    CHECK(hsaKmtFreeMemory(shared.p, shared.size));
    CHECK(hsaKmtUnmapMemoryToGPU(user));
    CHECK(hsaKmtDeregisterMemory(user));
    free(user);
    CHECK(hsaKmtUnmapMemoryToGPU(vis.p));
    CHECK(hsaKmtFreeMemory(vis.p, vis.size));
    CHECK(hsaKmtUnmapMemoryToGPU(gtt.p));
    CHECK(hsaKmtFreeMemory(gtt.p, gtt.size));
    CHECK(hsaKmtUnmapMemoryToGPU(vram.p));
    CHECK(hsaKmtFreeMemory(vram.p, vram.size));
    ok("all released");

    step("close");
    CHECK(hsaKmtReleaseSystemProperties());
    CHECK(hsaKmtCloseKFD());
    ok("KFD closed");
    printf("DONE\n");
    return 0;
}
