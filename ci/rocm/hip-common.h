/*
 * hip-common.h: what the HIP programs of ci/rocm (hip-probe.cpp, hip-compute.cpp, hip-loop.cpp)
 * share: the check that stops the step (probe.h) on a HIP error, with the call's text, HIP's
 * description and the error's number. Include probe.h first.
 */
#ifndef ROCM_HIP_COMMON_H
#define ROCM_HIP_COMMON_H

#include <hip/hip_runtime.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        hipError_t e_ = (call);                                                                    \
        if (e_ != hipSuccess)                                                                      \
            stop("%s: %s (%d)", #call, hipGetErrorString(e_), static_cast<int>(e_));               \
    } while (0)

#endif
