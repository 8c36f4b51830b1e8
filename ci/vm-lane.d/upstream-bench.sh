# upstream-bench: upstream's C plugin and ours, side by side under upstream's criu v4.2, dumping
# and restoring the same kfd-workload with large buffers (KFD_BENCH_VRAM_MIB of VRAM per GPU,
# default 256, on two simulated MI210s: the lane's debug builds of kfd-workload and kfd-simd fill
# and verify 1 GiB per GPU at a few MB/s under TCG; the fill alone took 600 s at load 18), timed
# from criu's logs: the plugin's own part (the DUMP_EXT_FILE or RESTORE_EXT_FILE call that
# handles /dev/kfd, from criu's line that calls the hook to criu's next line of its own) and
# criu's whole run. KFD_BENCH_ROUNDS rounds (default 1),
# each upstream then ours; every restore verifies every byte. Under TCG only the ratio means
# anything. Not in .ci/run: it needs a guest with more memory (the buffers live in kfd-simd and
# again in the images on the guest's tmpfs), e.g.
#     VM_LANE_MEM=4096 VM_LANE_SCENARIO_TIMEOUT=1800 ci/vm-lane --guest bookworm --scenario upstream-bench
# (1 GiB per GPU: KFD_BENCH_VRAM_MIB=1024 VM_LANE_MEM=6144 and a longer time limit)
# It prints one `BENCH` line per plugin and round, and the ratios.
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=upstream.inc
. "$VM_LANE_REPO/ci/vm-lane.d/upstream.inc"

mib=${KFD_BENCH_VRAM_MIB:-256}
rounds=${KFD_BENCH_ROUNDS:-1}
need=$((mib * 2 * 2 + 1024))
have=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
((have >= need)) || skip "needs about $need MiB of guest memory for ${mib} MiB of VRAM per GPU, has $have (VM_LANE_MEM=$((need + 1024)))"

# hook_span LOG MARKER: seconds from criu's call of the hook whose output has MARKER (the last
# `hook N ->` line before it) to criu's next line of its own after it.
hook_span() {
    awk -v marker="$2" '
        function t(line) { return substr(line, 2, index(line, ")") - 2) + 0 }
        /^\(/ { hook = /plugin: `amdgpu_plugin'"'"' hook [0-9]+ ->/ }
        inside && /^\(/ && (hook || !/amdgpu_plugin: /) { printf "%.3f\n", t($0) - start; exit }
        hook { start = t($0); next }
        index($0, marker) { inside = 1 }
    ' "$1"
}
# criu_span LOG: seconds from the first to the last timestamped line.
criu_span() {
    awk '/^\(/ { t = substr($0, 2, index($0, ")") - 2) + 0; if (first == "") first = t; last = t }
        END { printf "%.3f\n", last - first }' "$1"
}

use_criu v4.2
note "ours: $(readlink -f "$OURS_PLUGIN_DIR/amdgpu_plugin.so") ($(stat -c %s "$OURS_PLUGIN_DIR/amdgpu_plugin.so") bytes; give --plugin-dir a release build to time the product)"
node A
WORKLOAD_START_LIMIT=600 VERIFY_LIMIT=600
# The VRAM in 16 MiB buffers: upstream's plugin copies a buffer in one SDMA job, and the
# simulator, like amdgpu, fails a job that runs longer than 10 s (its lockup timeout) with ETIME;
# the lane's debug kfd-simd under TCG takes longer than that for one 256 MiB buffer, and
# upstream's dump then swallows the error (criu exits 0, `failed to query fence status: Timer
# expired` in its log) and writes a pages file short of its header's length.
bufs=$(printf '16384,%.0s' $(seq $((mib / 16))))
start_workload --dma queues --vram-kib "${bufs%,}" --gtt-kib 256
declare -A sum
for ((r = 1; r <= rounds; r++)); do
    for who in up ours; do
        name=bench-$who-$r dir=$VM_LANE_WORK/bench-$who-$r
        use_plugin "$who"
        criu_dump "$WORKLOAD_PID" "$dir"
        criu_restore "$dir"
        verify_again
        if [[ $who == up ]]; then dmark='Dump successful' rmark='Restore successful (fd'
        else dmark='dumped pid ' rmark='restored image '; fi
        d=$(hook_span "$VM_LANE_OUT/criu/$name-dump.log" "$dmark")
        rs=$(hook_span "$VM_LANE_OUT/criu/$name-restore.log" "$rmark")
        dc=$(criu_span "$VM_LANE_OUT/criu/$name-dump.log")
        rc=$(criu_span "$VM_LANE_OUT/criu/$name-restore.log")
        [[ -n $d && -n $rs ]] || fail "$name: no plugin span in criu's logs"
        note "BENCH plugin=$who round=$r vram_mib=$((mib * 2)) dump_plugin=${d}s dump_criu=${dc}s restore_plugin=${rs}s restore_criu=${rc}s"
        echo "$who $r $d $dc $rs $rc" >>"$VM_LANE_OUT/bench.txt"
        rm -rf "$dir"
    done
done
awk '{d[$1] += $3; dc[$1] += $4; r[$1] += $5; rc[$1] += $6}
    END { printf "BENCH ratio upstream/ours: dump plugin %.2f (criu %.2f), restore plugin %.2f (criu %.2f)\n",
        d["up"] / d["ours"], dc["up"] / dc["ours"], r["up"] / r["ours"], rc["up"] / rc["ours"] }' \
    "$VM_LANE_OUT/bench.txt" | while read -r line; do note "$line"; done
simd_warns_only "$LIST_HANDLES_WARNING"
pass
