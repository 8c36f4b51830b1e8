# criu-kfd-leave-running: `criu dump --leave-running` checkpoints kfd-workload and lets it go on:
# the plugin unpauses its queues, and the workload keeps ticking on the same files. The workload is
# then killed and the checkpoint restored and verified, as after a node failure.
#
# criu checks at restore that the workload's output files have the size they had at the dump, and
# a workload left running writes on: it is stopped (SIGSTOP) around the dump so that the sizes can
# be noted and put back before the restore. criu dumps and restores it stopped.
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"

start_simd --preset mi210x2
start_workload
kill -STOP "$WORKLOAD_PID"
out_size=$(stat -c %s "$VM_LANE_OUT/workload.out")
err_size=$(stat -c %s "$VM_LANE_OUT/workload.err")
criu_dump "$WORKLOAD_PID" "$IMAGES" --leave-running
kill -CONT "$WORKLOAD_PID"
kill -0 "$WORKLOAD_PID" || fail "the workload did not survive criu dump --leave-running"
ticks_go_on "after criu dump --leave-running"
queues_running "$WORKLOAD_PID"
kill -KILL "$WORKLOAD_PID"
wait_for "the workload to exit" 10 bash -c "! kill -0 $WORKLOAD_PID 2>/dev/null"
cp "$VM_LANE_OUT/workload.out" "$VM_LANE_OUT/workload-left-running.out"
truncate -s "$out_size" "$VM_LANE_OUT/workload.out"
truncate -s "$err_size" "$VM_LANE_OUT/workload.err"
criu_restore "$IMAGES"
kill -CONT "$WORKLOAD_PID"
verify_restored
pass
