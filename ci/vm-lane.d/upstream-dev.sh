# upstream-dev: upstream's development branch (criu-dev, 2cf8f13) with its own C amdgpu plugin and
# with ours, built unmodified by the lane (upstream.inc).
#
# 1. On one simulated MI50 (criu-dev's own restore is right on one GPU): kfd-workload (user-mode
#    SDMA queues, mapped doorbells and events page, half of every buffer zero) goes through four
#    checkpoints in a row, each restored and verified: up-up-same, up-ours-remap (node B: another
#    gpu id and render minor), ours-up-back (ours dumps the remapped process, upstream restores it
#    on node A), ours-up-remap. Ours' checksum lists and holes are skipped by upstream's reader.
# 2. Upstream's fault on two GPUs, shown, not patched: criu-dev's restore reads the GPUs' pages
#    files in parallel, one thread per GPU, but gives each buffer a file offset that keeps
#    counting across GPUs although each GPU has a pages file of its own; the second GPU's thread
#    reads past its file's end (criu's log: `Unable to read file`), the clean-up of its copy
#    overwrites the error, and criu exits 0 with that GPU's buffers zero. On two MI210s: upstream
#    dumps kfd-workload and restores it (criu exits 0; the workload's VERIFY finds a buffer of
#    the second GPU zero; the log has the line), ours restores the same images (it verifies), ours
#    dumps and upstream restores our images (the same fault).
# Throughout, the simulator's only complaint is criu-dev's AMDGPU_GEM_LIST_HANDLES (Linux 6.18),
# which 6.1 answers EINVAL and the plugin falls back from.
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=upstream.inc
. "$VM_LANE_REPO/ci/vm-lane.d/upstream.inc"

use_criu dev

# 1. One GPU.
UP_PRESET=mi50x1
node A
start_workload "${UP_WORKLOAD_ARGS[@]}"
cycle dev1-up-up-same up up A
grep -q 'not to have AMDGPU_GEM_LIST_HANDLES' "$VM_LANE_OUT/criu/dev1-up-up-same-dump.log" ||
    fail "criu-dev's plugin did not fall back from AMDGPU_GEM_LIST_HANDLES"
cycle dev1-up-ours-remap up ours B
cycle dev1-ours-up-back ours up A
cycle dev1-ours-up-remap ours up B

# 2. Two GPUs.
kill -KILL "$WORKLOAD_PID"
wait_for "the workload to exit" 30 bash -c "! kill -0 $WORKLOAD_PID 2>/dev/null"
UP_PRESET=mi210x2
node A
start_workload "${UP_WORKLOAD_ARGS[@]}"

# dump_two NAME DUMPER: the running workload, holding its ticks, dumped with DUMPER's plugin
# into NAME; its output file is kept as it was at the dump (criu restores the file only at the
# size it had), so that the images can be restored more than once.
dump_two() {
    hold_workload
    use_plugin "$2"
    criu_dump "$WORKLOAD_PID" "$VM_LANE_WORK/$1"
    check_images "$2" "$VM_LANE_WORK/$1"
    cp "$VM_LANE_OUT/workload.out" "$VM_LANE_WORK/$1.workload.out"
}

# restore_two NAME RESTORER: restores NAME's images (a copy of them) with RESTORER's plugin, the
# workload's output file as it was at the dump.
restore_two() {
    local dir=$VM_LANE_WORK/$1-$2
    cp -a "$VM_LANE_WORK/$1" "$dir"
    cp "$VM_LANE_WORK/$1.workload.out" "$VM_LANE_OUT/workload.out"
    use_plugin "$2"
    criu_restore "$dir"
}

# upstream_fault NAME: criu-dev's plugin restores NAME's images (criu exits 0, the plugin says
# `Restore successful`), the restored workload finds a byte of one GPU zero where its data should
# be, and the cause is upstream's: that GPU's pages file was read from the offset where the other
# GPU's file ends (the first short read got exactly what is left of its file after that length,
# none when it is not longer: `Unable to read file (read:N ...)`). The workload is then killed.
upstream_fault() {
    local name=$1 log=$VM_LANE_OUT/criu/$1-up-restore.log dir=$VM_LANE_WORK/$1-up line n zeroed other read want
    # The workload was dumped holding its ticks (dump_two) and is asked to verify before it is
    # restored, so that it verifies before any tick: a tick submits to that GPU's SDMA queue,
    # whose ring pointers (in its zeroed GTT buffers) upstream did not restore either, and the
    # workload would stop there. (Without the hold, a dump that caught a tick waiting for its
    # submission gave a restored workload that finished that tick first and stopped.)
    n=$(grep -c '^VERIFY' "$VM_LANE_WORK/$1.workload.out" || true)
    touch "$TRIGGER"
    restore_two "$1" up
    grep -q "${UP_LOG_PREFIX}Restore successful" "$log" || fail "$name: upstream's plugin did not report success"
    wait_for "a new VERIFY line" 60 bash -c "(( \$(grep -c '^VERIFY' '$VM_LANE_OUT/workload.out') > $n ))"
    line=$(grep '^VERIFY' "$VM_LANE_OUT/workload.out" | tail -n 1)
    note "$name: $line"
    [[ $line =~ ^VERIFY\ FAIL\ GPU\ 0x([0-9a-f]+)\ buffer\ [0-9]+\ .*\ byte\ [0-9]+\ is\ 0x00,\ expected\ 0x[0-9a-f]+$ ]] ||
        fail "$name: expected a byte of a GPU zero where data should be, got: $line"
    zeroed=${BASH_REMATCH[1]}
    mapfile -t files < <(find "$dir" -name 'amdgpu-pages-*.img' ! -name "amdgpu-pages-*-$zeroed.img")
    ((${#files[@]} == 1)) || fail "$name: expected one pages file besides GPU $zeroed's, found ${#files[@]}"
    other=${files[0]##*-}
    other=${other%.img}
    line=$(grep -m1 'Unable to read file' "$log") || fail "$name: no 'Unable to read file' in upstream's restore log"
    note "$name: $(sed 's/^([^)]*) *//' <<<"$line")"
    read=$(sed -n 's/.*Unable to read file (read:\([0-9]*\) .*/\1/p' <<<"$line")
    want=$(($(stat -c %s "$dir"/amdgpu-pages-*-"$zeroed".img) - $(stat -c %s "${files[0]}")))
    ((want > 0)) || want=0
    ((read == want)) ||
        fail "$name: the first short read got $read bytes, not the $want left in GPU $zeroed's pages file after the length of GPU $other's"
    note "$name: GPU 0x$zeroed's pages file was read from where GPU 0x$other's ends ($want bytes left there)"
    note "$name: criu-dev's restore exited 0 with GPU 0x$zeroed's buffers zero (upstream's fault, shown)"
    cp "$VM_LANE_OUT/workload.out" "$VM_LANE_OUT/workload-$name.out"
    kill -KILL "$WORKLOAD_PID"
    wait_for "the workload to exit" 30 bash -c "! kill -0 $WORKLOAD_PID 2>/dev/null"
    # Restored by ours next, it ticks on from where it held.
    rm -f "$HOLD"
}

# Upstream dumps, upstream restores: the fault. The same images restored by ours verify.
dump_two dev2 up
upstream_fault dev2
restore_two dev2 ours
check_restore_log ours "$VM_LANE_OUT/criu/dev2-ours-restore.log"
verify_again
# Ours dumps, upstream restores: the same fault (ours restores them, and verifies).
dump_two dev2o ours
upstream_fault dev2o
restore_two dev2o ours
verify_again
simd_warns_only "$LIST_HANDLES_WARNING"
kernel_log_clean
pass
