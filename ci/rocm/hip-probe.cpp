// hip-probe: a small HIP program of ours (no kernel launch), built with Debian's hipcc, to see how
// far AMD's HIP runtime gets on kfd-simd (issue 17, item 5).
//
// It follows the step protocol of probe.h, each step within 30 s. Steps:
//
//   init     hipInit, hipGetDeviceCount, the first device's properties
//   malloc   hipMalloc of two device buffers, hipHostMalloc of a pinned host buffer
//   h2d      hipMemcpy host -> device
//   d2d      hipMemcpy device -> device
//   d2h      hipMemcpy device -> host, the bytes checked
//   free     hipFree, hipHostFree
//
// Build: hipcc -O1 -o hip-probe hip-probe.cpp (Debian: hipcc, libamdhip64-dev).
#include <hip/hip_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "probe.h"

namespace {

constexpr size_t kBytes = 1u << 20;
constexpr unsigned kStepSeconds = 30;

} // namespace

#define CHECK(call)                                                                                \
    do {                                                                                           \
        hipError_t e_ = (call);                                                                    \
        if (e_ != hipSuccess)                                                                      \
            stop("%s: %s (%d)", #call, hipGetErrorString(e_), static_cast<int>(e_));               \
    } while (0)

int main()
{
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

    step("free");
    CHECK(hipFree(a));
    CHECK(hipFree(b));
    CHECK(hipHostFree(host));
    ok("all released");
    alarm(0);
    printf("DONE\n");
    return 0;
}
