# criu-kfd-old-kernel: kfd-simd presents KFD interface 1.7 (a kernel before CRIU_OP). A dump is
# refused with upstream's line in criu's log before anything is paused, and the workload runs on;
# an image made on a 1.11 node is refused on the 1.7 node, and nothing of the process is left on
# it (its KFD process is released with every GPU's VRAM free).
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"

refusal='amdgpu_plugin: .*CR not supported on current kernel (current:01.07 min:01.08)'

start_simd --preset mi210x2 --kfd-version 1.7
start_workload
rc=0
criu_run dump "$IMAGES-old" -t "$WORKLOAD_PID" || rc=$?
((rc != 0)) || fail "criu dumped on a KFD without CRIU_OP"
grep -q "$refusal" "$VM_LANE_OUT/criu/images-old-dump.log" ||
    fail "upstream's refusal line is not in criu's dump log"
note "$(grep -m 1 "$refusal" "$VM_LANE_OUT/criu/images-old-dump.log")"
! grep -q "kfd-sim: pid $WORKLOAD_PID: queues paused" "$VM_LANE_OUT/simd.err" ||
    fail "the workload's queues were paused"
ticks_go_on "after the refused dump"
kill -TERM "$WORKLOAD_PID"
wait_for "the workload to exit" 15 bash -c "! kill -0 $WORKLOAD_PID 2>/dev/null"
mv "$VM_LANE_OUT/workload.out" "$VM_LANE_OUT/workload-refused.out"
stop_simd

start_simd --preset mi210x2
start_workload
dump_workload
stop_simd
start_simd --preset mi210x2 --kfd-version 1.7
rc=0
criu_run restore "$IMAGES" -d || rc=$?
((rc != 0)) || fail "criu restored on a KFD without CRIU_OP"
log=$VM_LANE_OUT/criu/images-restore.log
grep -q "$refusal" "$log" || fail "upstream's refusal line is not in criu's restore log"
note "$(grep -m 1 "$refusal" "$log")"
released_since 0 "$WORKLOAD_PID"
pass
