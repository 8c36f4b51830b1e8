# criu-kfd-stress: dumps and restores in a loop on one kfd-simd, to shake out races between the
# restored workload, criu's freeze and the daemon. Skipped unless KFD_STRESS_ROUNDS is set (e.g.
# 10), so the default lane does not pay for it:
#     KFD_STRESS_ROUNDS=10 ci/vm-lane --scenario criu-kfd-stress
#
# - KFD_STRESS_ROUNDS rounds of criu-kfd-same: kfd-workload (user-mode SDMA queues, events)
#   dumped, restored, verified, on plain CUSE;
# - then KFD_STRESS_ROUNDS rounds on kernels in flight (issue "Checkpoint with kernels in flight",
#   item 5), on kfd-simd served through the kfd_bridge module: odd rounds hsa-long (one long
#   kernel, held once its progress counter moved), even rounds hip-loop (its second batch, with a
#   long kernel, launched, then held), each dumped while its kernels run (kfd-simd's log of the
#   dump's pause names a dispatch of it saved: dumped_in_flight), restored on the same node and
#   run to its checked results; at the end no queue of kfd-simd met the memory of a process that
#   was gone (the dumped processes criu killed). A completion signal or event lost or fired twice
#   across criu's freeze, the queues' eviction and the restore shows as a program that hangs or
#   whose results differ from the CPU's. Without the ROCm programs (ci/rocm/build.sh could not
#   build them) these rounds are skipped and the scenario says so.
# Two sets of rounds take longer than most scenarios:
# vm-lane-timeout: 2400
#
# shellcheck shell=bash
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
[[ -n ${KFD_STRESS_ROUNDS:-} ]] || skip "KFD_STRESS_ROUNDS is not set"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"
# shellcheck source=rocm.inc
. "$VM_LANE_REPO/ci/vm-lane.d/rocm.inc"

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
stop_simd

# The rounds with kernels in flight. Not need_rocm_programs: its skip would hide the rounds above.
rocm_missing=$(cat "${VM_LANE_ROCM_DIR:-/nonexistent}/error" 2>/dev/null ||
    grep -E '^(hsa-long|hip-loop|hsa-kernels.co): ' "${VM_LANE_ROCM_DIR:-/nonexistent}/missing" 2>/dev/null || true)
if [[ -n $rocm_missing || ! -x ${VM_LANE_ROCM_DIR:-/nonexistent}/hsa-long ]]; then
    pass "$KFD_STRESS_ROUNDS rounds of kfd-workload; none on kernels in flight (no ROCm programs: ${rocm_missing:-not built})"
fi
need_rocm_programs hsa-long hip-loop hsa-kernels.co
start_probe_simd
# Kernels of about half a minute under TCG: in flight at the dump, not the whole round.
hsa_long=("$ROCM_PROGRAMS/hsa-long" --code-object "$ROCM_PROGRAMS/hsa-kernels.co"
    --items 512 --steps 65536 --step-seconds 600)
hip_loop=("$ROCM_PROGRAMS/hip-loop" --kernels 20 --batch 10 --long-every 20 --long-steps 16384
    --step-seconds 600)
in_flight() { sed -n 's/^HOLDING [0-9]* (in flight: \([a-z]*\)).*/\1/p' "$VM_LANE_OUT/$1.out"; }
# Between the dump and the restore of round $name: a dispatch of it was saved at the dump.
round_dumped_in_flight() {
    dumped_in_flight "$name" "$(sed -n 's/^HOLDING \([0-9]*\) .*/\1/p' "$VM_LANE_OUT/$name.out")"
}
flights=()
for ((round = 1; round <= KFD_STRESS_ROUNDS; round++)); do
    if ((round % 2)); then
        name=inflight-$round-hsa-long
        probe_cycle "$name" 900 --between round_dumped_in_flight "${hsa_long[@]}"
        note "$name: $(grep '^RELEASED' "$VM_LANE_OUT/$name.out")"
    else
        name=inflight-$round-hip-loop
        probe_cycle "$name" 900 --between round_dumped_in_flight "${hip_loop[@]}"
    fi
    [[ $(in_flight "$name") == yes ]] || fail "$name: its kernels had ended before its hold: nothing was in flight"
    note "$name: dumped in flight, restored, verified: $(probe_steps "$VM_LANE_OUT/$name.out")"
    flights+=("$name")
done
simd_no_gone_mm
pass "$KFD_STRESS_ROUNDS rounds of kfd-workload, $KFD_STRESS_ROUNDS with kernels in flight (${flights[*]})"
