# criu-kfd-render-first: kfd-workload opens its render nodes before /dev/kfd, so their fds come
# first and criu (3.17.1 and 4.1.1 alike: neither lets a plugin ask to restore a file later)
# restores them before /dev/kfd; the plugin opens them on the GPUs the restore maps to and hands
# them to the KFD restore as the compute VMs. Restored on a node with other gpu ids, and verified.
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"

start_simd --preset mi210x2
start_workload --render-first
kfd_fd=$(find "/proc/$WORKLOAD_PID/fd" -lname /dev/kfd -printf '%f\n' | sort -n | head -n 1)
render_fd=$(find "/proc/$WORKLOAD_PID/fd" -lname '/dev/dri/renderD*' -printf '%f\n' | sort -n | head -n 1)
((render_fd < kfd_fd)) || fail "render fd $render_fd does not come before /dev/kfd fd $kfd_fd"
dump_workload
stop_simd
"$KFD_BIN/kfd-simd" show mi210x2 --gpu-ids 0x4ac1,0x93d7 --render-minors 130,131 \
    >"$VM_LANE_WORK/other-ids.toml"
start_simd --file "$VM_LANE_WORK/other-ids.toml"
criu_restore "$IMAGES"
log=$VM_LANE_OUT/criu/images-restore.log
grep -q 'amdgpu_plugin: .*before its process.s /dev/kfd' "$log" ||
    fail "the plugin did not restore a render node before /dev/kfd"
note "$(grep -m 1 'amdgpu_plugin: .*before its process.s /dev/kfd' "$log")"
verify_restored
pass
