// hip-probe: a small HIP program of ours (no kernel launch of its own; HIP copies with its blit
// kernels), built with Debian's hipcc, to see how far AMD's HIP runtime gets on kfd-simd (issue
// 17, item 5), and to be checkpointed by real criu while it holds device memory.
//
// It follows the step protocol of probe.h, each step within 30 s. Steps:
//
//   init     hipInit, hipGetDeviceCount, the first device's properties
//   malloc   hipMalloc of two device buffers, hipHostMalloc of a pinned host buffer
//   h2d      hipMemcpy host -> device
//   d2d      hipMemcpy device -> device
//   d2h      hipMemcpy device -> host, the bytes checked
//   hold     (--hold FILE) prints "HOLDING <pid>" and waits until FILE exists, its queues idle:
//            criu dumps and restores the process here; then the pinned buffer is checked, both
//            device buffers are copied back and checked, and a new round trip host -> device ->
//            device -> host is made on the restored queues
//   free     hipFree, hipHostFree
//
// Usage: hip-probe [--hold FILE]
// Build: ci/rocm/build.sh (hipcc --offload-arch=gfx90a; Debian: hipcc, libamdhip64-dev).
#include <hip/hip_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "probe.h"

#include "hip-common.h"

namespace {

constexpr size_t kBytes = 1u << 20;
constexpr unsigned kStepSeconds = 30;

} // namespace


int main(int argc, char **argv)
{
    const char *hold = nullptr;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--hold") && i + 1 < argc) {
            hold = argv[++i];
        } else {
            fprintf(stderr, "usage: %s [--hold FILE]\n", argv[0]);
            return 1;
        }
    }
    probe_start(kStepSeconds);

    step("init");
    CHECK(hipInit(0));
    int count = 0;
    CHECK(hipGetDeviceCount(&count));
    hipDeviceProp_t prop;
    CHECK(hipGetDeviceProperties(&prop, 0));
    ok("%d devices; device 0: %s, %s, %d CUs", count, prop.name, prop.gcnArchName,
       prop.multiProcessorCount);

    step("malloc");
    void *a = nullptr, *b = nullptr, *host = nullptr;
    CHECK(hipMalloc(&a, kBytes));
    CHECK(hipMalloc(&b, kBytes));
    CHECK(hipHostMalloc(&host, kBytes, 0));
    ok("device buffers at %p and %p, pinned host buffer at %p", a, b, host);

    step("h2d");
    fill(host, kBytes, 1);
    CHECK(hipMemcpy(a, host, kBytes, hipMemcpyHostToDevice));
    ok("1 MiB");

    step("d2d");
    CHECK(hipMemcpy(b, a, kBytes, hipMemcpyDeviceToDevice));
    ok("1 MiB");

    step("d2h");
    memset(host, 0, kBytes);
    CHECK(hipMemcpy(host, b, kBytes, hipMemcpyDeviceToHost));
    check_or_stop("the copy back", host, kBytes, 1);
    ok("1 MiB, checked");

    if (hold) {
        step("hold");
        hold_until(hold);
        check_or_stop("the pinned buffer after the hold", host, kBytes, 1);
        memset(host, 0, kBytes);
        CHECK(hipMemcpy(host, a, kBytes, hipMemcpyDeviceToHost));
        check_or_stop("device buffer a after the hold", host, kBytes, 1);
        memset(host, 0, kBytes);
        CHECK(hipMemcpy(host, b, kBytes, hipMemcpyDeviceToHost));
        check_or_stop("device buffer b after the hold", host, kBytes, 1);
        fill(host, kBytes, 2);
        CHECK(hipMemcpy(a, host, kBytes, hipMemcpyHostToDevice));
        CHECK(hipMemcpy(b, a, kBytes, hipMemcpyDeviceToDevice));
        memset(host, 0, kBytes);
        CHECK(hipMemcpy(host, b, kBytes, hipMemcpyDeviceToHost));
        check_or_stop("the round trip after the hold", host, kBytes, 2);
        ok("device buffers intact, a new round trip host -> device -> device -> host");
    }

    step("free");
    CHECK(hipFree(a));
    CHECK(hipFree(b));
    CHECK(hipHostFree(host));
    ok("all released");
    alarm(0);
    printf("DONE\n");
    return 0;
}
