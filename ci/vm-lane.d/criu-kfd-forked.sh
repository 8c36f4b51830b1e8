# criu-kfd-forked: kfd-workload forks a child that inherits /dev/kfd and the render nodes (the same
# open files) and sleeps, as a worker forked by a ROCm process does. criu dumps the tree with the
# device files shared between the two processes and restores it: the plugin restores the GPU state
# once, in the parent, whose KFD process it is; the child gets the same files back.
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"

start_simd --preset mi210x2
start_workload --fork-child
child=$(sed -n 's/^child pid=//p' "$VM_LANE_OUT/workload.out")
[[ -n $child ]] || fail "kfd-workload printed no child pid"
kfd_fds() { find "/proc/$1/fd" -lname /dev/kfd | wc -l; }
(($(kfd_fds "$child") == 1)) || fail "the child does not hold /dev/kfd"
dump_workload
criu_restore "$IMAGES"
verify_restored
kill -0 "$child" 2>/dev/null || fail "the child was not restored"
[[ $(awk '/^PPid:/ {print $2}' "/proc/$child/status") == "$WORKLOAD_PID" ]] ||
    fail "the restored child's parent is not the workload"
(($(kfd_fds "$child") == 1)) || fail "the restored child does not hold /dev/kfd"
note "child $child restored with /dev/kfd"
pass
