# rocm-inflight-tree: two of our ROCm programs with kernels in flight, children of one shell, are
# dumped by real criu as one process tree (the shell's pid) and restored together (issue
# "Checkpoint with kernels in flight", item 4, "the same with two processes in one tree"):
#
# - the tree: a bash root that starts hip-loop (HIP) and, once hip-loop holds, hsa-long (ROCr) as
#   its children, and waits for them. Each child is a program of its own (fork and exec), so each
#   initialises its runtime in its own process (ROCr is not fork-safe: no child inherits an
#   initialised runtime). Both hold on one trigger file with kernels running ("HOLDING <pid> (in
#   flight: yes|no)", as in rocm-inflight): hip-loop at its second batch (of 20 kernels), the one
#   with its long kernel, sized to outlast hsa-long's start (ROCr starts faster than HIP: started
#   together, hip-loop held 25 to 124 s after hsa-long, 2026-12-05, by when hsa-long's kernel of
#   this size had completed); hsa-long once its long kernel's counter moved, and criu dumps at
#   once. criu's dump of the two took up to 137 s to reach the pause at load 12 (2026-12-05), so
#   hsa-long's kernel is rocm-inflight's, about two minutes under TCG (512 x 65536 steps had
#   completed by the pause on trixie);
# - in flight at the dump: kfd-simd's log of the dump's pause must name, for each child, at least
#   one dispatch saved into its context save area (dumped_in_flight);
# - the checkpoints: dumped and restored on the same node; then, run anew, dumped on the preset's
#   node and restored on a kfd-simd with other gpu ids and render minors. After each restore both
#   children are let go and must finish with every result checked against the CPU (hsa-long's
#   chains and progress counter, hip-loop's state, counter and log), the root shell collecting
#   both.
#
# hip-loop runs 20 kernels instead of rocm-inflight's 400.
# vm-lane-timeout: 1800
#
# shellcheck shell=bash
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"
# shellcheck source=rocm.inc
. "$VM_LANE_REPO/ci/vm-lane.d/rocm.inc"

need_rocm_programs hsa-long hip-loop hsa-kernels.co
start_probe_simd

hsa_long=("$ROCM_PROGRAMS/hsa-long" --code-object "$ROCM_PROGRAMS/hsa-kernels.co"
    --items "${KFD_TREE_ITEMS:-1024}" --steps "${KFD_TREE_STEPS:-131072}" --step-seconds 600)
hip_loop=("$ROCM_PROGRAMS/hip-loop" --kernels 20 --batch 10 --long-every 20
    --long-steps "${KFD_TREE_HIP_STEPS:-65536}" --step-seconds 600)

# in_flight FILE: what the program's HOLDING line in FILE said.
in_flight() { sed -n 's/^HOLDING [0-9]* (in flight: \([a-z]*\)).*/\1/p' "$1"; }

# tree_cycle NAME [--between FN]: the tree (root NAME, children NAME-hsa and NAME-hip, their output
# in NAME-hsa.out and NAME-hip.out) started, held with both children's kernels in flight, dumped
# by its root's pid, FN run between dump and restore, restored, let go; both children must print
# DONE and the root exit.
tree_cycle() {
    local name=$1 between=true trigger=$VM_LANE_WORK/$1.go root c pid maps n
    shift
    if [[ ${1:-} == --between ]]; then
        between=$2
        shift 2
    fi
    rm -f "$trigger"
    # shellcheck disable=SC2016 # the inner shell's arguments
    root=$(start_detached "$name" bash -c '
        out=$1 trigger=$2 n_hsa=$3
        shift 3
        "${@:n_hsa+1}" --hold "$trigger" >"$out-hip.out" 2>"$out-hip.err" &
        until grep -qE "^(HOLDING|STOP)" "$out-hip.out"; do
            kill -0 $! 2>/dev/null || break
            sleep 0.2
        done
        "${@:1:n_hsa}" --hold "$trigger" >"$out-hsa.out" 2>"$out-hsa.err" &
        wait' "$name" "$VM_LANE_OUT/$name" "$trigger" "${#hsa_long[@]}" "${hsa_long[@]}" "${hip_loop[@]}")
    declare -gA TREE_PID=()
    for c in hip hsa; do
        wait_for "$name-$c to hold" 900 grep -qE '^(HOLDING|STOP)' "$VM_LANE_OUT/$name-$c.out"
        grep -q '^HOLDING' "$VM_LANE_OUT/$name-$c.out" ||
            fail "$name-$c stopped before its hold: $(grep '^STOP' "$VM_LANE_OUT/$name-$c.out")"
        pid=$(sed -n 's/^HOLDING \([0-9]*\) .*/\1/p' "$VM_LANE_OUT/$name-$c.out")
        [[ $(awk '/^PPid:/ {print $2}' "/proc/$pid/status") == "$root" ]] ||
            fail "$name-$c (pid $pid) is not a child of the tree's root $root"
        maps=$VM_LANE_OUT/$name-$c-maps.txt
        grep -E '/dev/(kfd|dri/renderD)' "/proc/$pid/maps" >"$maps" || true
        grep -q '/dev/kfd$' "$maps" || fail "$name-$c maps nothing of /dev/kfd"
        note "$name-$c: pid $pid, $(wc -l <"$maps") device mappings, $(find "/proc/$pid/task" -mindepth 1 -maxdepth 1 | wc -l) threads, in flight at its hold: $(in_flight "$VM_LANE_OUT/$name-$c.out")"
        TREE_PID[$c]=$pid
    done
    criu_dump "$root" "$VM_LANE_WORK/$name-images" "${PROBE_DUMP_ARGS[@]}"
    for c in hip hsa; do
        dumped_in_flight "$name-$c" "${TREE_PID[$c]}"
    done
    n=$(find "$VM_LANE_WORK/$name-images" -name 'amdgpu-kfd-*.img' | wc -l)
    ((n == 2)) || fail "the plugin wrote $n KFD images for $name, expected one per child"
    "$between"
    criu_restore "$VM_LANE_WORK/$name-images"
    for c in hsa hip; do
        kill -0 "${TREE_PID[$c]}" 2>/dev/null || fail "$name-$c (pid ${TREE_PID[$c]}) was not restored"
    done
    touch "$trigger"
    for c in hsa hip; do
        wait_for "$name-$c to finish" 900 grep -qE '^(DONE|STOP)' "$VM_LANE_OUT/$name-$c.out"
        grep -q '^DONE' "$VM_LANE_OUT/$name-$c.out" ||
            fail "$name-$c after restore: $(grep '^STOP' "$VM_LANE_OUT/$name-$c.out")"
        note "$name-$c restored and finished: steps $(probe_steps "$VM_LANE_OUT/$name-$c.out")"
        [[ $(in_flight "$VM_LANE_OUT/$name-$c.out") == yes ]] ||
            fail "$name-$c's kernels had ended before its hold: nothing was in flight"
    done
    note "$name-hsa: $(grep '^RELEASED' "$VM_LANE_OUT/$name-hsa.out")"
    wait_for "the root of $name to exit" 60 bash -c "! kill -0 $root 2>/dev/null"
}

tree_cycle tree-same
note "tree-same: both children restored on the same node and verified"
tree_cycle tree-remapped --between probe_remap_node
note "tree-remapped: both children restored on other gpu ids and verified"
simd_no_gone_mm
pass "hsa-long and hip-loop, children of one shell, dumped as one tree with kernels in flight, restored (same node, other gpu ids), verified"
