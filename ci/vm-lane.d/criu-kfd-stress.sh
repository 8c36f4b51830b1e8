# criu-kfd-stress: criu-kfd-same in a loop, on one kfd-simd, to shake out races between the
# restored workload and the daemon. Skipped unless KFD_STRESS_ROUNDS is set (e.g. 10), so the
# default lane does not pay for it:
#     KFD_STRESS_ROUNDS=10 ci/vm-lane --scenario criu-kfd-stress
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
[[ -n ${KFD_STRESS_ROUNDS:-} ]] || skip "KFD_STRESS_ROUNDS is not set"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"

start_simd --preset mi210x2
for ((round = 1; round <= KFD_STRESS_ROUNDS; round++)); do
    note "round $round of $KFD_STRESS_ROUNDS"
    rm -rf "$IMAGES"
    start_workload
    dump_workload
    criu_restore "$IMAGES"
    verify_restored
    kill -KILL "$WORKLOAD_PID"
    wait_for "the restored workload to exit" 10 bash -c "! kill -0 $WORKLOAD_PID 2>/dev/null"
    mv "$VM_LANE_OUT/workload.out" "$VM_LANE_OUT/workload-$round.out"
    mv "$VM_LANE_OUT/workload.err" "$VM_LANE_OUT/workload-$round.err"
done
pass
