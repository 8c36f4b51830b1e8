# criu-kfd-same: the guest's criu (3.17.1 or 4.1.1) with our amdgpu_plugin.so dumps kfd-workload
# (VRAM and GTT buffers on two simulated MI210s, queues, events) and restores it on the same
# simulated node; the workload verifies every byte, queue and event and goes on ticking.
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"

start_simd --preset mi210x2
start_workload
dump_workload
criu_restore "$IMAGES"
verify_restored
pass
