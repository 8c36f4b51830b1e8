// hip-probe: a small HIP program of ours (no kernel launch), built with Debian's hipcc, to see how
// far AMD's HIP runtime gets on kfd-simd (issue 17, item 5).
//
// Like the other probes it prints "STEP <name> ok[: details]" per step and "STOP <name>: <what>"
// at the first failure (exit 2); a step that does not finish within its time limit prints
// "STOP <name>: no completion within N s" from an alarm and exits 3. Steps:
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

#include <csignal>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

namespace {

constexpr size_t kBytes = 1u << 20;
constexpr unsigned kStepSeconds = 30;
const char* volatile step_name = "start";

void step(const char* name)
{
    step_name = name;
    alarm(kStepSeconds);
}

void on_alarm(int)
{
    char line[160];
    int n = snprintf(line, sizeof(line), "STOP %s: no completion within %u s\n",
                     const_cast<const char*>(step_name), kStepSeconds);
    if (n > 0 && write(STDOUT_FILENO, line, static_cast<size_t>(n)) < 0)
        _exit(4);
    _exit(3);
}

__attribute__((format(printf, 1, 2))) void ok(const char* fmt, ...)
{
    va_list ap;
    printf("STEP %s ok: ", const_cast<const char*>(step_name));
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

[[noreturn]] void stop(const char* what, hipError_t e)
{
    printf("STOP %s: %s: %s (%d)\n", const_cast<const char*>(step_name), what,
           hipGetErrorString(e), static_cast<int>(e));
    fflush(stdout);
    exit(2);
}

#define CHECK(call)                                                                                \
    do {                                                                                           \
        hipError_t e_ = (call);                                                                    \
        if (e_ != hipSuccess)                                                                      \
            stop(#call, e_);                                                                       \
    } while (0)

uint8_t pattern(uint32_t seed, size_t i)
{
    uint32_t x = seed * 2654435761u + static_cast<uint32_t>(i) * 40503u;
    return static_cast<uint8_t>(x ^ (x >> 13) ^ (x >> 24));
}

} // namespace

int main()
{
    setvbuf(stdout, nullptr, _IOLBF, 0);
    signal(SIGALRM, on_alarm);

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
    auto* h = static_cast<uint8_t*>(host);
    for (size_t i = 0; i < kBytes; i++)
        h[i] = pattern(1, i);
    CHECK(hipMemcpy(a, host, kBytes, hipMemcpyHostToDevice));
    ok("1 MiB");

    step("d2d");
    CHECK(hipMemcpy(b, a, kBytes, hipMemcpyDeviceToDevice));
    ok("1 MiB");

    step("d2h");
    memset(host, 0, kBytes);
    CHECK(hipMemcpy(host, b, kBytes, hipMemcpyDeviceToHost));
    for (size_t i = 0; i < kBytes; i++)
        if (h[i] != pattern(1, i)) {
            printf("STOP d2h: byte %zu is %#x, not %#x\n", i, h[i], pattern(1, i));
            return 2;
        }
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
