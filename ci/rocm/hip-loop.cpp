// hip-loop: a long-running HIP program of ours, for criu to dump while its kernels run. Its
// state lives on the device and is updated by kernels in a loop, thousands of short ones and now
// and then a long one; the same updates are made on a CPU copy beside it, and at the end the
// device state is copied back and compared with it. Each kernel also counts itself (an atomic
// counter) and stamps its number in a log, so a kernel lost or run twice across a checkpoint
// shows, and the state is a ping-pong between two buffers with each element reading its
// neighbour, so kernels run out of order show too.
//
// Step protocol of probe.h. Steps:
//
//   init      hipInit, the device
//   setup     the state (two buffers of --elements uint32), the counter and the log on the device,
//             initialised from the CPU copy
//   loop      --kernels kernels in batches of --batch; every --long-every-th kernel is the long
//             one (--long-steps iterations per element). After each batch it synchronises,
//             prints "PROGRESS <done>/<total>" and advances the CPU copy by the same batch
//             (while the next batch runs). "RUNNING <pid>" once the first batch is done.
//             With --hold FILE, in the middle: a long kernel and a batch of short ones are
//             launched, then "HOLDING <pid> (in flight: yes|no)" is printed and the program
//             waits for FILE to exist without waiting for the device (criu dumps and restores
//             meanwhile); then it goes on
//   verify    the state, the counter and the log copied back and compared with the CPU's
//   free      everything released
//
// Usage: hip-loop [--elements N] [--kernels K] [--batch B] [--long-every L] [--long-steps S]
//                 [--hold FILE] [--step-seconds N]
//   defaults: 4096 elements, 2000 kernels, batches of 100, a long kernel every 500th with 4096
//   steps. A batch must finish within the step limit.
#include <hip/hip_runtime.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "probe.h"

#include "hip-common.h"

namespace {

// One short update, kernel number k: next[i] from cur[i] and its neighbour.
__host__ __device__ uint32_t short_update(uint32_t self, uint32_t next, uint32_t k)
{
    return self * 1664525u + (next ^ (next >> 7)) + k * 1013904223u;
}

// The long update: `steps` xorshift rounds of one element.
__host__ __device__ uint32_t long_update(uint32_t x, uint32_t k, uint32_t steps)
{
    x ^= k;
    for (uint32_t s = 0; s < steps; s++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x += s;
    }
    return x;
}

__global__ void short_kernel(const uint32_t *cur, uint32_t *next, uint32_t n, uint32_t k,
                             uint32_t *counter, uint32_t *log)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        next[i] = short_update(cur[i], cur[(i + 1) % n], k);
    if (i == 0) {
        atomicAdd(counter, 1u);
        log[k] = k + 1;
    }
}

__global__ void long_kernel(const uint32_t *cur, uint32_t *next, uint32_t n, uint32_t k,
                            uint32_t steps, uint32_t *counter, uint32_t *log)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        next[i] = long_update(cur[i], k, steps);
    if (i == 0) {
        atomicAdd(counter, 1u);
        log[k] = k + 1;
    }
}

struct config {
    uint32_t elements = 4096;
    uint32_t kernels = 2000;
    uint32_t batch = 100;
    uint32_t long_every = 500;
    uint32_t long_steps = 4096;
    const char *hold = nullptr;
    unsigned step_seconds = 60;
};

bool is_long(const config &c, uint32_t k)
{
    return c.long_every && k % c.long_every == c.long_every - 1;
}

// The device side: two state buffers (ping-pong), the counter, the log.
struct device_state {
    uint32_t *buf[2];
    uint32_t *counter;
    uint32_t *log;
};

void launch(const config &c, const device_state &d, uint32_t k)
{
    const uint32_t *cur = d.buf[k & 1];
    uint32_t *next = d.buf[(k + 1) & 1];
    dim3 grid((c.elements + 255) / 256), block(256);
    if (is_long(c, k))
        hipLaunchKernelGGL(long_kernel, grid, block, 0, 0, cur, next, c.elements, k,
                           c.long_steps, d.counter, d.log);
    else
        hipLaunchKernelGGL(short_kernel, grid, block, 0, 0, cur, next, c.elements, k, d.counter,
                           d.log);
    CHECK(hipGetLastError());
}

// The CPU copy advanced by kernels [from, to).
void advance(const config &c, std::vector<uint32_t> &state, uint32_t from, uint32_t to)
{
    std::vector<uint32_t> next(state.size());
    for (uint32_t k = from; k < to; k++) {
        uint32_t n = c.elements;
        for (uint32_t i = 0; i < n; i++)
            next[i] = is_long(c, k) ? long_update(state[i], k, c.long_steps)
                                    : short_update(state[i], state[(i + 1) % n], k);
        state.swap(next);
    }
}

uint32_t parse(const char *s)
{
    return static_cast<uint32_t>(strtoul(s, nullptr, 10));
}

} // namespace

int main(int argc, char **argv)
{
    config c;
    bool usage = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "--elements") && has)
            c.elements = parse(argv[++i]);
        else if (!strcmp(a, "--kernels") && has)
            c.kernels = parse(argv[++i]);
        else if (!strcmp(a, "--batch") && has)
            c.batch = parse(argv[++i]);
        else if (!strcmp(a, "--long-every") && has)
            c.long_every = parse(argv[++i]);
        else if (!strcmp(a, "--long-steps") && has)
            c.long_steps = parse(argv[++i]);
        else if (!strcmp(a, "--hold") && has)
            c.hold = argv[++i];
        else if (!strcmp(a, "--step-seconds") && has)
            c.step_seconds = static_cast<unsigned>(parse(argv[++i]));
        else
            usage = true;
    }
    if (usage || !c.elements || !c.kernels || !c.batch) {
        fprintf(stderr,
                "usage: %s [--elements N] [--kernels K] [--batch B] [--long-every L] "
                "[--long-steps S] [--hold FILE] [--step-seconds N]\n",
                argv[0]);
        return 1;
    }
    probe_start(c.step_seconds);

    step("init");
    CHECK(hipInit(0));
    hipDeviceProp_t prop;
    CHECK(hipGetDeviceProperties(&prop, 0));
    ok("%s, %s", prop.name, prop.gcnArchName);

    step("setup");
    std::vector<uint32_t> cpu(c.elements);
    for (uint32_t i = 0; i < c.elements; i++)
        cpu[i] = i * 2654435761u ^ 0x5bd1e995u;
    device_state d;
    CHECK(hipMalloc(&d.buf[0], c.elements * 4));
    CHECK(hipMalloc(&d.buf[1], c.elements * 4));
    CHECK(hipMalloc(&d.counter, 4));
    CHECK(hipMalloc(&d.log, c.kernels * 4));
    CHECK(hipMemcpy(d.buf[0], cpu.data(), c.elements * 4, hipMemcpyHostToDevice));
    CHECK(hipMemset(d.counter, 0, 4));
    CHECK(hipMemset(d.log, 0, c.kernels * 4));
    CHECK(hipDeviceSynchronize());
    ok("%u elements, %u kernels (a long one every %u, %u steps), batches of %u", c.elements,
       c.kernels, c.long_every, c.long_steps, c.batch);

    step("loop");
    uint32_t done = 0, cpu_done = 0;
    bool held = c.hold == nullptr;
    while (done < c.kernels) {
        uint32_t end = done + c.batch < c.kernels ? done + c.batch : c.kernels;
        // The hold: the first batch past the middle that has a long kernel (or the last batch).
        bool has_long = false;
        for (uint32_t k = done; k < end; k++)
            has_long = has_long || is_long(c, k);
        bool hold_here = !held && done >= c.kernels / 2 &&
                         (has_long || !c.long_every || end == c.kernels);
        for (uint32_t k = done; k < end; k++)
            launch(c, d, k);
        // The CPU copy catches up with the batches before this one while it runs.
        advance(c, cpu, cpu_done, done);
        cpu_done = done;
        if (hold_here) {
            bool in_flight = hipStreamQuery(0) == hipErrorNotReady;
            printf("HOLDING %d (in flight: %s) at kernels %u-%u of %u\n",
                   static_cast<int>(getpid()), in_flight ? "yes" : "no", done, end - 1,
                   c.kernels);
            fflush(stdout);
            hold_until(c.hold);
            held = true;
            printf("RELEASED %d\n", static_cast<int>(getpid()));
            fflush(stdout);
        }
        CHECK(hipStreamSynchronize(0));
        bool first = done == 0;
        done = end;
        printf("PROGRESS %u/%u\n", done, c.kernels);
        if (first)
            printf("RUNNING %d\n", static_cast<int>(getpid()));
        fflush(stdout);
        step("loop"); // a new time limit per batch
    }
    advance(c, cpu, cpu_done, done);
    ok("%u kernels", c.kernels);

    step("verify");
    std::vector<uint32_t> state(c.elements), log(c.kernels);
    uint32_t counter = 0;
    CHECK(hipMemcpy(state.data(), d.buf[c.kernels & 1], c.elements * 4, hipMemcpyDeviceToHost));
    CHECK(hipMemcpy(&counter, d.counter, 4, hipMemcpyDeviceToHost));
    CHECK(hipMemcpy(log.data(), d.log, c.kernels * 4, hipMemcpyDeviceToHost));
    if (counter != c.kernels)
        stop("the kernels counted %u runs, not %u", counter, c.kernels);
    for (uint32_t k = 0; k < c.kernels; k++)
        if (log[k] != k + 1)
            stop("kernel %u left %u in the log, not %u", k, log[k], k + 1);
    for (uint32_t i = 0; i < c.elements; i++)
        if (state[i] != cpu[i])
            stop("element %u is %#x, the CPU copy's %#x", i, state[i], cpu[i]);
    ok("%u elements equal to the CPU copy after %u kernels, each counted and logged once",
       c.elements, c.kernels);

    step("free");
    CHECK(hipFree(d.buf[0]));
    CHECK(hipFree(d.buf[1]));
    CHECK(hipFree(d.counter));
    CHECK(hipFree(d.log));
    ok("device memory released");
    alarm(0);
    printf("DONE\n");
    return 0;
}
