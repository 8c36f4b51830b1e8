# rocm-hsakmt: a C program of ours (ci/rocm/hsakmt-probe.c), built here against Debian's
# libhsakmt (libhsakmt-dev on the host root the guest shares), runs on kfd-simd served through the
# kfd_bridge module (mmap of /dev/kfd and the render nodes) with the simulated sysfs mounted where
# the kernel puts it: open, topology, VRAM without host access, GTT and VRAM with host access
# written and read through their mappings, userptr, mapping to one and to all GPUs, signal events,
# an SDMA queue and a copy through it that signals an event, executed by kfd-simd's user-mode queue
# engine. Then real criu dumps the program while it holds all of that (the queue included) and
# restores it, on the same node and on one with other gpu ids, and the restored program checks its
# data through its mappings and submits a second copy through the same queue.
#
# Guest-agnostic: it needs gcc, libhsakmt-dev and pkg-config on the (shared) root, whatever their
# versions; the libhsakmt version is noted.
# shellcheck shell=bash
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"

command -v gcc >/dev/null || skip "no gcc on the host root"
pkg-config --exists libhsakmt 2>/dev/null || skip "libhsakmt-dev is not installed on the host (apt-get install libhsakmt-dev)"
note "libhsakmt $(dpkg-query -W -f '${Version}' libhsakmt1 2>/dev/null || pkg-config --modversion libhsakmt)"

probe=$VM_LANE_WORK/hsakmt-probe
# shellcheck disable=SC2046 # pkg-config's words are separate arguments
gcc -O1 -Wall -Wextra -Werror -o "$probe" "$VM_LANE_REPO/ci/rocm/hsakmt-probe.c" \
    $(pkg-config --cflags --libs libhsakmt) 2>"$VM_LANE_OUT/gcc.err" ||
    fail "building hsakmt-probe failed: $(head -n 5 "$VM_LANE_OUT/gcc.err")"

need_kmod
start_simd --preset mi210x2 --sysfs-dir "$KFD_SYSFS"
grep -q 'kfd_bridge proxy of' "$VM_LANE_OUT/simd.out" || fail "kfd-simd does not serve through kfd_bridge"
mount_sim_sysfs

# steps FILE: the steps a run passed, on one line.
steps() { sed -n 's/^STEP \([^ ]*\) ok.*/\1/p' "$1" | paste -sd ' '; }

# 1. The whole program, once (under strace with KFD_ROCM_STRACE=1: it is slow in the guest).
rc=0
trace=()
[[ ${KFD_ROCM_STRACE:-} != 1 ]] ||
    trace=(strace -f --seccomp-bpf -e 'trace=openat,ioctl,mmap' -o "$VM_LANE_OUT/probe.strace")
timeout -k 5 120 "${trace[@]}" "$probe" >"$VM_LANE_OUT/probe.out" 2>"$VM_LANE_OUT/probe.err" || rc=$?
note "hsakmt-probe: status $rc; steps: $(steps "$VM_LANE_OUT/probe.out")"
grep '^GPU node' "$VM_LANE_OUT/probe.out" | while read -r line; do note "$line"; done
! grep -q 'kfd-sim: not simulated' "$VM_LANE_OUT/simd.err" ||
    fail "hsakmt-probe issued requests kfd-simd does not answer: $(grep 'not simulated' "$VM_LANE_OUT/simd.err")"
before_sdma="open topology vram gtt vram-host userptr map-one map-all events sdma-queue"
[[ $(steps "$VM_LANE_OUT/probe.out") == "$before_sdma"* ]] ||
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
# cycle NAME [between]: one dump and restore of a held probe; `between` runs between the two.
cycle() {
    local name=$1 between=${2:-true} trigger=$VM_LANE_WORK/$1.go pid
    rm -f "$trigger"
    pid=$(start_detached "$name" "$probe" --hold "$trigger")
    wait_for "$name to hold" 60 grep -q '^HOLDING' "$VM_LANE_OUT/$name.out"
    grep -E '/dev/(kfd|dri/renderD)' "/proc/$pid/maps" >"$VM_LANE_OUT/$name-maps.txt" || true
    note "$name: $(wc -l <"$VM_LANE_OUT/$name-maps.txt") device mappings"
    grep -q '/dev/kfd$' "$VM_LANE_OUT/$name-maps.txt" || fail "$name maps nothing of /dev/kfd"
    grep -q '/dev/dri/renderD' "$VM_LANE_OUT/$name-maps.txt" || fail "$name maps no render node"
    # --link-remap: a probe that creates a named semaphore (libhsakmt's, in /dev/shm) maps it
    # under the temporary name glibc's sem_open creates it with before it links the real name
    # and unlinks the temporary one ("/dev/shm/sem.XXXXXX (deleted)" in its maps); criu dumps
    # such a mapping only with a link-remap ("Can't create link remap ... Use link-remap
    # option", measured on the remapped cycle). A probe that finds the semaphore already there
    # maps it under its real name.
    criu_dump "$pid" "$VM_LANE_WORK/$name-images" --link-remap
    grep -q 'supported via device plugins' "$VM_LANE_OUT/criu/$name-images-dump.log" ||
        fail "criu did not hand $name's device mappings to the plugin"
    compgen -G "$VM_LANE_WORK/$name-images/amdgpu-*" >/dev/null || fail "the plugin wrote no amdgpu images for $name"
    "$between"
    criu_restore "$VM_LANE_WORK/$name-images"
    touch "$trigger"
    wait_for "$name to finish" 60 grep -qE '^(DONE|STOP)' "$VM_LANE_OUT/$name.out"
    grep -q '^DONE' "$VM_LANE_OUT/$name.out" ||
        fail "$name after restore: $(grep '^STOP' "$VM_LANE_OUT/$name.out")"
    grep -q '^STEP hold ok: .*a second copy through the queue' "$VM_LANE_OUT/$name.out" ||
        fail "$name made no second copy after the restore"
    note "$name restored: $(grep '^STEP hold' "$VM_LANE_OUT/$name.out"); then $(steps "$VM_LANE_OUT/$name.out" | sed 's/.* hold //')"
}
cycle held

# 3. The same onto a node whose GPUs have other gpu ids and render minors: kfd-simd restarts
# between dump and restore, the simulated sysfs is mounted anew, and the plugin maps the GPUs.
remap_node() {
    umount_sim_sysfs
    stop_simd
    "$KFD_BIN/kfd-simd" show mi210x2 --gpu-ids 0x4242,0x4343 --render-minors 130,131 \
        >"$VM_LANE_WORK/variant.toml"
    start_simd --file "$VM_LANE_WORK/variant.toml" --sysfs-dir "$KFD_SYSFS-remapped"
    mount_sim_sysfs "$KFD_SYSFS-remapped"
}
cycle remapped remap_node
grep -q 'GPU mapping' "$VM_LANE_OUT/criu/remapped-images-restore.log" ||
    note "(no mapping line in the restore log)"
pass
