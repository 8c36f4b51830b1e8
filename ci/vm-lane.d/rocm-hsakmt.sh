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
# What held_probe_cycle (rocm.inc) holds.
HSAKMT_PROBE=$ROCM_PROGRAMS/hsakmt-probe
probe=$HSAKMT_PROBE

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
# copy through the restored queue. It is the only libhsakmt process, so (libhsakmt 5.x; 6.x keeps
# nothing in /dev/shm) it created libhsakmt's semaphore and maps it under glibc's temporary name,
# now deleted: criu refuses to dump that
# without --link-remap, whatever the plugin (it decides before any plugin hook runs), and with it
# the image restores where the link is, on this node.
refused_without_link_remap() {
    local pid
    pid=$(cat "$VM_LANE_WORK/$1.pid")
    if ! grep -q ' /dev/shm/' "/proc/$pid/maps"; then
        note "$1 maps nothing from /dev/shm (this libhsakmt keeps no semaphore there): no link-remap needed"
        return 0
    fi
    grep -q '/dev/shm/sem\..* (deleted)$' "/proc/$pid/maps" ||
        fail "$1 does not map a deleted semaphore file: $(grep /dev/shm "/proc/$pid/maps" || true)"
    if criu_run dump "$VM_LANE_WORK/$1-no-link-remap" -t "$pid"; then
        fail "criu dumped the semaphore's creator without --link-remap"
    fi
    grep -q 'Use link-remap option' "$VM_LANE_OUT/criu/$1-no-link-remap-dump.log" ||
        fail "criu's refusal does not ask for --link-remap"
    note "$1 without --link-remap: $(grep -m1 'link-remap' "$VM_LANE_OUT/criu/$1-no-link-remap-dump.log" | sed 's/^([^)]*) *//')"
    kill -0 "$pid" || fail "$1 did not survive the refused dump"
}
PROBE_BEFORE_DUMP=refused_without_link_remap
held_probe_cycle held
PROBE_BEFORE_DUMP=

# 3. The same onto a node whose GPUs have other gpu ids and render minors, where no libhsakmt
# process runs. The probe starts while another libhsakmt process (the keeper) holds libhsakmt's
# files, so it maps them under their real names and criu dumps it without --link-remap. Between
# dump and restore the keeper is killed, the files are removed, kfd-simd restarts with other gpu
# ids and the simulated sysfs is mounted anew: the plugin maps the GPUs and recreates the files
# (the shared memory with its recorded size and first word, the semaphore unlocked) before criu
# maps them.
start_shm_keeper
PROBE_DUMP_ARGS=()
elsewhere() {
    stop_shm_keeper
    shm_emptied
    probe_remap_node
}
PROBE_AFTER_RESTORE=shm_recreated
held_probe_cycle remapped elsewhere
grep -q 'GPU mapping' "$VM_LANE_OUT/criu/remapped-images-restore.log" ||
    note "(no mapping line in the restore log)"
[[ $HSAKMT_SHM == 0 ]] || grep -q "recreated libhsakmt's semaphore" "$VM_LANE_OUT/criu/remapped-images-restore.log" ||
    fail "the plugin did not say it recreated libhsakmt's semaphore"
pass
