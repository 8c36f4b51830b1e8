# criu-kfd-mapped-two: two kfd-workloads (two KFD processes on the same two GPUs), children of one
# shell, each holding its device mappings (mapped.inc), are dumped in one criu tree and restored
# together. Their doorbell pages have the same offsets (the offset names the GPU, not the
# process) and their buffers' render-node offsets come from the same per-GPU space, so every
# restored task must get the answers to UPDATE_VMA_MAP for its own buffers. After the restore
# each has its device VMAs back, verifies through them and ticks on.
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"
# shellcheck source=mapped.inc
. "$VM_LANE_REPO/ci/vm-lane.d/mapped.inc"

names=(a b)
start_mapped_simd
# shellcheck disable=SC2016 # the inner shell's arguments
pair=$(start_detached pair bash -c '
    bin=$1 work=$2 out=$3
    for w in a b; do
        "$bin" --tick-ms 100 --dma queues --verify-trigger "$work/verify-$w" >"$out/$w.out" 2>"$out/$w.err" &
    done
    wait' pair "$KFD_BIN/kfd-workload" "$VM_LANE_WORK" "$VM_LANE_OUT")
declare -A pid
for w in "${names[@]}"; do
    wait_for "kfd-workload $w to tick" 90 grep -q '^tick 3$' "$VM_LANE_OUT/$w.out"
    note "$w: $(head -n 1 "$VM_LANE_OUT/$w.out")"
    pid[$w]=$(sed -n 's/^started pid=\([0-9]*\) .*/\1/p' "$VM_LANE_OUT/$w.out")
    [[ $(awk '/^PPid:/ {print $2}' "/proc/${pid[$w]}/status") == "$pair" ]] || fail "workload $w is not a child of $pair"
    grep -q 'dma=queues' "$VM_LANE_OUT/$w.out" || fail "kfd-workload $w did not take user-mode queues"
    device_vmas "${pid[$w]}" >"$VM_LANE_OUT/vmas-$w-before.txt"
    check_device_vmas "$VM_LANE_OUT/vmas-$w-before.txt" 2
done
[[ $(doorbell_ids "$VM_LANE_OUT/vmas-a-before.txt") == "$(doorbell_ids "$VM_LANE_OUT/vmas-b-before.txt")" ]] ||
    fail "the two workloads' doorbell pages are on different GPUs"
criu_dump "$pair" "$IMAGES"
n=$(find "$IMAGES" -name 'amdgpu-kfd-*.img' | wc -l)
((n == 2)) || fail "the plugin wrote $n KFD images, expected one per workload"
criu_restore "$IMAGES"
(($(grep -c 'restored image' "$VM_LANE_OUT/criu/images-restore.log" || true) >= 2)) ||
    note "(the restore log does not name two restored images)"

# verify_one W: workload W verifies itself and ticks on, with its queues running.
verify_one() {
    local w=$1 out=$VM_LANE_OUT/$1.out before
    before=$(grep '^tick ' "$out" | tail -n 1 | cut -d' ' -f2)
    touch "$VM_LANE_WORK/verify-$w"
    wait_for "a VERIFY line of $w" 60 grep -q '^VERIFY' "$out"
    note "$w: $(grep '^VERIFY' "$out")"
    grep -q '^VERIFY OK' "$out" || fail "$w: $(grep '^VERIFY' "$out")"
    page_slots_checked "$out"
    wait_for "3 ticks of $w after restore" 30 bash -c "[[ \$(grep '^tick ' '$out' | tail -n 1 | cut -d' ' -f2) -ge $((before + 3)) ]]"
    ! grep -q '^TICK FAIL' "$out" || fail "$w: $(grep '^TICK FAIL' "$out")"
    queues_running "${pid[$w]}"
}
for w in "${names[@]}"; do
    kill -0 "${pid[$w]}" 2>/dev/null || fail "workload $w (pid ${pid[$w]}) was not restored"
    device_vmas "${pid[$w]}" >"$VM_LANE_OUT/vmas-$w-after.txt"
    diff <(same_vmas "$VM_LANE_OUT/vmas-$w-before.txt") <(same_vmas "$VM_LANE_OUT/vmas-$w-after.txt") ||
        fail "restored workload $w does not have its device VMAs back"
    verify_one "$w"
done
kernel_log_clean
pass
