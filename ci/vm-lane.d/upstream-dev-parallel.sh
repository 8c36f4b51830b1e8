# upstream-dev-parallel: our plugin under criu-dev (2cf8f13, which calls RESTORE_INIT and
# POST_FORKING), restoring one tree of two kfd-workload processes, each on both GPUs of two
# simulated MI210s with KFD_PAR_VRAM_MIB of VRAM per GPU (default 32, in 16 MiB buffers), from
# the same images with the parallel restore off (the contents written in each restored task) and
# on (AMDGPU_CR_PARALLEL_RESTORE=1: the tasks hand their buffers to criu's master, which writes
# them while the tasks go on restoring). Both restores verify every byte of both processes, and
# each is timed from criu's log (first to last timestamped line: criu's restore wall time).
# KFD_PAR_ROUNDS rounds (default 1), off then on in odd rounds, on then off in even ones. Needs
# a guest with more memory than the default: e.g.
#     VM_LANE_MEM=4096 VM_LANE_SCENARIO_TIMEOUT=1500 ci/vm-lane --guest bookworm --scenario upstream-dev-parallel
# It prints one `PARALLEL` line per restore and the ratio.
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=upstream.inc
. "$VM_LANE_REPO/ci/vm-lane.d/upstream.inc"

mib=${KFD_PAR_VRAM_MIB:-32}
rounds=${KFD_PAR_ROUNDS:-1}
need=$((mib * 2 * 2 * 3 + 1024))
have=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
((have >= need)) || skip "needs about $need MiB of guest memory for two processes of ${mib} MiB of VRAM per GPU, has $have (VM_LANE_MEM=$((need + 1024)))"

# criu_span LOG: seconds from the first to the last timestamped line.
criu_span() {
    awk '/^\(/ { t = substr($0, 2, index($0, ")") - 2) + 0; if (first == "") first = t; last = t }
        END { printf "%.3f\n", last - first }' "$1"
}

use_criu dev
use_plugin ours
UP_PRESET=mi210x2
node A
bufs=$(printf '16384,%.0s' $(seq $((mib / 16))))
args=(--tick-ms 100 --dma queues --vram-kib "${bufs%,}" --gtt-kib 256)
# The tree: a shell and its two workloads, each with its own output and triggers.
# shellcheck disable=SC2016 # expanded by the inner shell
PARENT=$(start_detached pair bash -c '
    for i in 1 2; do
        "$0" --verify-trigger "'"$VM_LANE_WORK"'/verify-$i" "$@" >"'"$VM_LANE_OUT"'/w$i.out" 2>"'"$VM_LANE_OUT"'/w$i.err" &
    done
    wait' "$KFD_BIN/kfd-workload" "${args[@]}")
for i in 1 2; do
    wait_for "workload $i to tick" 900 grep -q '^tick 3$' "$VM_LANE_OUT/w$i.out"
    note "workload $i: $(head -n 1 "$VM_LANE_OUT/w$i.out")"
done
criu_dump "$PARENT" "$VM_LANE_WORK/pair"
(($(find "$VM_LANE_WORK/pair" -name 'amdgpu-kfd-*.img' | wc -l) == 2)) || fail "the dump has not two /dev/kfd images"
for i in 1 2; do cp "$VM_LANE_OUT/w$i.out" "$VM_LANE_WORK/w$i.out.dumped"; done

# verify_pair: each restored workload verifies once more (a new VERIFY line, OK).
verify_pair() {
    local i n
    for i in 1 2; do
        n=$(grep -c '^VERIFY' "$VM_LANE_OUT/w$i.out" || true)
        touch "$VM_LANE_WORK/verify-$i"
        wait_for "workload $i to verify" 900 bash -c \
            "(( \$(grep -c '^VERIFY' '$VM_LANE_OUT/w$i.out') > $n )) || grep -q '^TICK FAIL' '$VM_LANE_OUT/w$i.out'"
        ! grep -q '^TICK FAIL' "$VM_LANE_OUT/w$i.out" || fail "workload $i: $(grep '^TICK FAIL' "$VM_LANE_OUT/w$i.out")"
        line=$(grep '^VERIFY' "$VM_LANE_OUT/w$i.out" | tail -n 1)
        note "workload $i: $line"
        [[ $line == 'VERIFY OK'* ]] || fail "workload $i: $line"
        rm -f "$VM_LANE_WORK/verify-$i"
    done
}

# kill_pair: the restored tree goes (the next restore takes the same pids).
kill_pair() {
    local pids
    pids=$(pgrep -P "$PARENT" | paste -sd ' ')
    kill -KILL "$PARENT" $pids
    wait_for "the restored tree to exit" 60 bash -c "! kill -0 $PARENT $pids 2>/dev/null"
}

# Odd rounds off then on, even rounds on then off: the machine's load drifts.
for ((r = 1; r <= rounds; r++)); do
    modes=(0 1)
    ((r % 2)) || modes=(1 0)
    for mode in "${modes[@]}"; do
        name=pair-$mode-$r dir=$VM_LANE_WORK/pair-$mode-$r
        cp -a "$VM_LANE_WORK/pair" "$dir"
        for i in 1 2; do cp "$VM_LANE_WORK/w$i.out.dumped" "$VM_LANE_OUT/w$i.out"; done
        AMDGPU_CR_PARALLEL_RESTORE=$mode criu_restore "$dir"
        log=$VM_LANE_OUT/criu/$name-restore.log
        check_restore_log ours "$log"
        if ((mode)); then
            grep -q 'parallel restore on' "$log" || fail "$name: the parallel restore did not start"
            (($(grep -c 'handed to criu.s master' "$log") == 2)) || fail "$name: not both tasks handed their buffers to criu's master"
            (($(grep -c 'parallel restore: image [0-9]* (pid [0-9]*): [0-9]* bytes written' "$log") == 2)) ||
                fail "$name: criu's master did not write both images"
        else
            ! grep -q 'handed to criu.s master' "$log" || fail "$name: buffers were handed to criu's master with the parallel restore off"
        fi
        verify_pair
        span=$(criu_span "$log")
        note "PARALLEL parallel=$mode round=$r processes=2 vram_mib=$((mib * 2 * 2)) restore_criu=${span}s"
        echo "$mode $r $span" >>"$VM_LANE_OUT/parallel.txt"
        kill_pair
        rm -rf "$dir"
    done
done
awk '{s[$1] += $3} END { printf "PARALLEL ratio on/off: restore %.2f (%.3fs / %.3fs)\n", s[1] / s[0], s[1], s[0] }' \
    "$VM_LANE_OUT/parallel.txt" | while read -r line; do note "$line"; done
simd_warns_only "$LIST_HANDLES_WARNING"
kernel_log_clean
pass
