# upstream-v42: upstream's criu v4.2 with its own C amdgpu plugin and with ours, built unmodified
# by the lane (upstream.inc), on kfd-workload (two simulated MI210s, user-mode SDMA queues rung
# through the mapped doorbells, the events page mapped, half of every buffer never written). One
# workload goes through four checkpoints in a row, each restored and verified (data, device
# mappings, queues, events) before the next:
#   up-up-same     upstream dumps, upstream restores on the same node;
#   up-ours-remap  upstream dumps, ours restores on node B (other gpu ids and render minors);
#   ours-up-back   ours dumps that remapped process, upstream restores it on node A (the image
#                  names the GPUs by the ids the process knows);
#   ours-up-remap  ours dumps, upstream restores on node B.
# Ours writes what upstream's reader must skip (a checksum list per pages file, field 100 of
# criu_kfd; the zero halves as holes of the pages files); upstream's restores of those images
# verify every byte.
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=upstream.inc
. "$VM_LANE_REPO/ci/vm-lane.d/upstream.inc"

use_criu v4.2
node A
start_workload "${UP_WORKLOAD_ARGS[@]}"
cycle up-up-same up up A
cycle up-ours-remap up ours B
cycle ours-up-back ours up A
cycle ours-up-remap ours up B
# Upstream's v4.2 plugin asks the simulator for nothing it lacks; ours asks for the render
# node's buffer list (AMDGPU_GEM_LIST_HANDLES, Linux 6.18) and, answered EINVAL as 6.1 does,
# dumps no render-node buffers, as on 6.1.
simd_warns_only "$LIST_HANDLES_WARNING"
kernel_log_clean
pass
