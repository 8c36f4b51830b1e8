# rocm-hsakmt: a C program of ours (ci/rocm/hsakmt-probe.c), built once on the host against the
# guest release's libhsakmt by ci/rocm/build.sh (need_rocm_programs), runs on kfd-simd served through the
# kfd_bridge module (mmap of /dev/kfd and the render nodes) with the simulated sysfs mounted where
# the kernel puts it: open, topology, VRAM without host access, GTT and VRAM with host access
# written and read through their mappings, userptr, mapping to one and to all GPUs, signal events,
# an SDMA queue and a copy through it that signals an event, executed by kfd-simd's user-mode queue
# engine. Then real criu dumps the program while it holds all of that (the queue included) and
# restores it, on the same node and on one with other gpu ids, and the restored program checks its
# data through its mappings and submits a second copy through the same queue.
#
# Guest-agnostic: the libhsakmt version is noted.
# shellcheck shell=bash
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"
# shellcheck source=rocm.inc
. "$VM_LANE_REPO/ci/vm-lane.d/rocm.inc"

need_rocm_programs hsakmt-probe
note "libhsakmt $(dpkg-query -W -f '${Version}' libhsakmt1 2>/dev/null)"
probe=$ROCM_PROGRAMS/hsakmt-probe

start_probe_simd

# 1. The whole program, once (under strace with KFD_ROCM_STRACE=1: it is slow in the guest).
rc=0
trace=()
[[ ${KFD_ROCM_STRACE:-} != 1 ]] ||
    trace=(strace -f --seccomp-bpf -e 'trace=openat,ioctl,mmap' -o "$VM_LANE_OUT/probe.strace")
timeout -k 5 120 "${trace[@]}" "$probe" >"$VM_LANE_OUT/probe.out" 2>"$VM_LANE_OUT/probe.err" || rc=$?
note "hsakmt-probe: status $rc; steps: $(probe_steps "$VM_LANE_OUT/probe.out")"
grep '^GPU node' "$VM_LANE_OUT/probe.out" | while read -r line; do note "$line"; done
! grep -q 'kfd-sim: not simulated' "$VM_LANE_OUT/simd.err" ||
    fail "hsakmt-probe issued requests kfd-simd does not answer: $(grep 'not simulated' "$VM_LANE_OUT/simd.err")"
before_sdma="open topology vram gtt vram-host userptr map-one map-all events sdma-queue"
[[ $(probe_steps "$VM_LANE_OUT/probe.out") == "$before_sdma"* ]] ||
    fail "hsakmt-probe stopped before the SDMA copy: $(grep '^STOP' "$VM_LANE_OUT/probe.out" || tail -n 3 "$VM_LANE_OUT/probe.err")"
[[ $(grep -c '^GPU node .*: gfx90a, .*104 CUs' "$VM_LANE_OUT/probe.out") == 2 ]] ||
    fail "libhsakmt does not see the preset's two gfx90a GPUs with 104 CUs"
# The caches per CU group as 6.1 lists them for an MI210 (104 CUs of 112): 104 TCP L1s, 56
# scalar instruction and 56 scalar data L1s (one per SQC of 2 CUs), one 8 MiB L2 whose map names
# 8 arrays of 13 CUs (kfd-sim topology::caches).
[[ $(grep -c '^GPU node .* caches: 217 (216 L1, 1 L2), L2 8192 KiB with 104 siblings$' "$VM_LANE_OUT/probe.out") == 2 ]] ||
    fail "libhsakmt does not read the caches per CU group: $(grep '^GPU node .* caches' "$VM_LANE_OUT/probe.out")"
((rc == 0)) || fail "hsakmt-probe failed (status $rc): $(grep '^STOP' "$VM_LANE_OUT/probe.out" || tail -n 3 "$VM_LANE_OUT/probe.err")"
grep -q '^DONE' "$VM_LANE_OUT/probe.out" || fail "hsakmt-probe exited 0 without DONE"
grep -q '^STEP sdma-copy ok' "$VM_LANE_OUT/probe.out" || fail "hsakmt-probe made no SDMA copy"
note "hsakmt-probe: every step, the SDMA copy through libhsakmt's queue included"

# 2. criu dumps the program while it holds VRAM, host-visible memory, events and the SDMA queue,
# restores it, and the restored program checks its data through its mappings and submits a second
# copy through the restored queue.
# held_cycle NAME [FN]: a probe_cycle of the held probe, which copies again through its queue.
held_cycle() {
    local between=()
    [[ -z ${2:-} ]] || between=(--between "$2")
    probe_cycle "$1" 60 "${between[@]}" "$probe"
    grep -q '^STEP hold ok: .*a second copy through the queue' "$VM_LANE_OUT/$1.out" ||
        fail "$1 made no second copy after the restore"
}
held_cycle held

# 3. The same onto a node whose GPUs have other gpu ids and render minors: kfd-simd restarts
# between dump and restore, the simulated sysfs is mounted anew, and the plugin maps the GPUs.
held_cycle remapped probe_remap_node
grep -q 'GPU mapping' "$VM_LANE_OUT/criu/remapped-images-restore.log" ||
    note "(no mapping line in the restore log)"
pass
