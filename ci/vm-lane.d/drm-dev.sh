# drm-dev: buffers allocated through the render node (GEM_CREATE, mapped with GEM_VA), which a
# checkpoint carries on Linux 6.18 (AMDGPU_GEM_LIST_HANDLES, GEM_OP GET_MAPPING_INFO,
# GEM_CHANGE_HANDLE), under upstream's development branch (criu-dev, built unmodified by the
# lane, upstream.inc) with its C plugin and with ours, on kfd-simd with the 6.18 personality
# (`serve --kernel 6.18`).
#
# kfd-workload on one simulated MI50, its KFD buffers as in upstream-dev and two render-node
# buffers (1 MiB, 64 KiB) that it writes by SDMA and verifies with the rest, goes through six
# checkpoints in a row, each restored and verified, every direction on the same node and onto
# node B (another gpu id and render minor): ours-ours-same, up-ours-same (criu-dev's plugin dumps
# the render-node buffers, `amdgpu-drm-pages-*`, ours restores them), up-ours-remap,
# ours-up-back (ours dumps on node B, criu-dev's plugin restores on node A), ours-up-remap,
# ours-ours-back. The images hold both render-node buffers, and kfd-simd has nothing to warn
# about: 6.18 answers every request both plugins make.
#
# Upstream's plugin dumps only on node A: at a render node's device VMA it looks up the DRM major
# with stat("/dev/dri/renderD128"), and node B's render minors start above 128 (a machine whose
# first render node is gone), so its dump there fails before any GPU state is read
# (`Error in getting stat for: /dev/dri/renderD128`, measured 2026-12-05).
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=upstream.inc
. "$VM_LANE_REPO/ci/vm-lane.d/upstream.inc"

use_criu dev
UP_PRESET=mi50x1
UP_SIMD_ARGS=(--kernel 6.18)

# render_buffers DIR: how many render-node buffers DIR's images hold (amdgpu-drm-pages files).
render_buffers() {
    find "$1" -name 'amdgpu-drm-pages-*.img' | wc -l
}

node A
start_workload "${UP_WORKLOAD_ARGS[@]}" --render-kib 1024,64
for c in "drm-ours-ours-same ours ours A" "drm-up-ours-same up ours A" "drm-up-ours-remap up ours B" \
    "drm-ours-up-back ours up A" "drm-ours-up-remap ours up B" "drm-ours-ours-back ours ours A"; do
    read -r name dumper restorer to <<<"$c"
    cycle "$name" "$dumper" "$restorer" "$to"
    n=$(render_buffers "$VM_LANE_WORK/$name")
    ((n == 2)) || fail "$name: $dumper's dump wrote $n render-node pages files, not 2"
    note "$name: $n render-node buffers in the images"
done
simd_warns_only '^$'
kernel_log_clean
pass
