# criu-kfd-dump-fails: the image directory is a tmpfs too small for the GPU memory, so the plugin's
# pages write fails mid-dump; criu dump fails with the plugin's reason in its log, and the
# workload, whose queues the plugin had paused, goes on ticking (nothing left paused or frozen).
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"

small=$VM_LANE_WORK/small
mkdir -p "$small"
mount -t tmpfs -o size=2m tmpfs "$small"
trap 'umount "$small" 2>/dev/null || true; _on_exit $?' EXIT
start_simd --preset mi210x2
start_workload
rc=0
criu_run dump "$small/images" -t "$WORKLOAD_PID" || rc=$?
((rc != 0)) || fail "criu dump into 2 MiB succeeded"
log=$VM_LANE_OUT/criu/images-dump.log
grep -q 'amdgpu_plugin: .*No space left on device' "$log" ||
    fail "the plugin's reason (ENOSPC) is not in criu's log"
note "$(grep -m 2 'amdgpu_plugin: .*No space' "$log")"
kill -0 "$WORKLOAD_PID" || fail "the workload died with the failed dump"
ticks_go_on "after the failed dump"
queues_running "$WORKLOAD_PID"
pass
