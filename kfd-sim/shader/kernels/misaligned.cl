// A test kernel for the simulator's command processor and its bench, built by
// scripts/gen-kernels.sh into misaligned.co (committed). OpenCL C for amdgcn-amd-amdhsa gfx90a
// without device libraries, as kernels.cl.

typedef unsigned long u64;

// The dispatch packet's grid_size_x (u32 at 12).
static inline uint grid_size_x(void) {
    __constant uint *p = (__constant uint *)__builtin_amdgcn_dispatch_ptr();
    return p[3];
}

// The packet's workgroup_size_x (u16 at 4).
static inline uint wg_size_x(void) {
    __constant ushort *p = (__constant ushort *)__builtin_amdgcn_dispatch_ptr();
    return p[2];
}

static inline uint gid_x(void) {
    return __builtin_amdgcn_workgroup_id_x() * wg_size_x() + __builtin_amdgcn_workitem_id_x();
}

// Blit-style copy at any alignment, the shape of the runtimes' misaligned copy kernels: byte
// loads and stores only, the lanes of a wave at consecutive bytes. Each work-item moves four
// bytes a grid stride apart per iteration (four loads, then four stores) over a grid-stride
// loop, then what is left one byte per iteration.
kernel void copy_misaligned(global const uchar *src, global uchar *dst, u64 n) {
    u64 stride = grid_size_x();
    u64 i = gid_x();
    for (; i + 3 * stride < n; i += 4 * stride) {
        uchar a = src[i];
        uchar b = src[i + stride];
        uchar c = src[i + 2 * stride];
        uchar d = src[i + 3 * stride];
        dst[i] = a;
        dst[i + stride] = b;
        dst[i + 2 * stride] = c;
        dst[i + 3 * stride] = d;
    }
    for (; i < n; i += stride)
        dst[i] = src[i];
}
