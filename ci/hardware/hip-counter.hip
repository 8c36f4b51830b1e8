// A HIP program for the hardware lane: 64 MiB of device memory holds a pattern that a kernel
// advances every tick; the host checks it and prints "count N ok" (or "count N BAD").
#include <hip/hip_runtime.h>
#include <cstdio>
#include <cstdint>
#include <unistd.h>

__global__ void advance(uint32_t *buf, size_t n, uint32_t tick) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) buf[i] = (uint32_t)(i * 2654435761u) ^ tick;
}

int main() {
    const size_t n = (64u << 20) / sizeof(uint32_t);
    uint32_t *dev = nullptr;
    if (hipMalloc(&dev, n * sizeof(uint32_t)) != hipSuccess) return 1;
    uint32_t *host = (uint32_t *)malloc(n * sizeof(uint32_t));
    for (uint32_t tick = 1;; tick++) {
        hipLaunchKernelGGL(advance, dim3((n + 255) / 256), dim3(256), 0, 0, dev, n, tick);
        hipMemcpy(host, dev, n * sizeof(uint32_t), hipMemcpyDeviceToHost);
        bool ok = true;
        for (size_t i = 0; i < n; i += 4099) ok &= host[i] == ((uint32_t)(i * 2654435761u) ^ tick);
        printf("count %u %s\n", tick, ok ? "ok" : "BAD");
        fflush(stdout);
        sleep(1);
    }
}
