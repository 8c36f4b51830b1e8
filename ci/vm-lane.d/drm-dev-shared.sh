# drm-dev-shared: two processes of one tree sharing a render-node buffer through a dma-buf, under
# upstream's development branch (criu-dev, built unmodified by the lane, upstream.inc) with its C
# plugin and with ours, on kfd-simd's Linux 6.18 personality (`serve --kernel 6.18`), as drm-dev
# does for one process's render-node buffers.
#
# kfd-workload on one simulated MI50 (`--share-child 512`) creates a 512 KiB VRAM buffer on its
# render node, maps it in its VM and for the CPU, and exports it; its child (the same program,
# started with the dma-buf fd and a socket) imports the dma-buf into a render-node file of its
# own, at the same GEM handle number (upstream's image format names a shared buffer by one number
# in every process: the child first creates 64 KiB buffers of its own at the handles below), maps
# it too and closes the dma-buf fd: it holds the buffer through its handle. Each tick one side
# writes the whole buffer through its mapping and the other checks it through its own; each
# VERIFY checks it from both sides (the parent also by SDMA at its GPU address; the child its
# handle and its VA) and has each side write once for the other: `shared_sides=2
# child=handle=H,va=ok,fd=closed` in the parent's line.
#
# The child does not keep the dma-buf fd here (`--share-keep-fd`, which the in-process tests
# cover): kfd-simd's dma-bufs are memfds of the simulator, which criu checkpoints as memfds of its
# own without asking a plugin (a real dma-buf is a file of the kernel's dma-buf file system, which
# criu-dev hands to the plugins), so the restored fd would be a copy of the bytes, no dma-buf.
#
# Part 1: the parent has 16 render-node buffers of its own before the shared one (GEM handle 17),
# more than it has /dev/kfd buffers (8: see part 2 for why that matters). Checkpoints in a row,
# each restored with the shared buffer verified from both sides: ours-ours-same, up-ours-same,
# up-ours-remap (onto node B), then ours dumps on node B and criu-dev's plugin restores on node
# A: that restore fails, and the same images are restored by ours (ours-ours-back).
#
# Why criu-dev's plugin cannot restore the tree (an upstream fault, not patched): it restores a
# render-node file only in a process whose /dev/kfd it restored first. The GPU map it needs
# (`restore_maps`) is filled by the KFD restore (amdgpu_plugin.c, `set_restore_gpu_maps(...,
# &restore_maps)` in amdgpu_plugin_restore_file), in that process; for a render-node image,
# `target_gpu_id = maps_get_dest_gpu(&restore_maps, rd->gpu_id)` is 0 in a process without one,
# and the file fails with -ENODEV (the code says so: "TODO: Currently, this code will only work
# if this function is called for /dev/kfd first as we assume restore_maps is already filled").
# The importing child has a render node and no /dev/kfd: criu's log shows `render node gpu_id =
# 0x...` and then `Unable to restore 0x...` for the child's render-node file, and criu fails the
# restore. That is so whatever the node (same GPU ids or not), so the scenario asserts it once.
#
# Part 2: the parent's shared buffer is its third render-node buffer (GEM handle 3). criu-dev's
# plugin dumps and ours restores: the buffer is no longer shared (part 1 shares it across the
# same dump and restore at handle 17), because criu-dev's dump loses it (fault (1) of drm-dev, README): its dump numbers each
# /dev/kfd buffer by the handle it gets importing the buffer into the plugin's own render-node
# file (1, 2, ...: amdgpu_plugin.c, `boinfo->handle = get_gem_handle(h_dev,
# bo_bucket->dmabuf_fd)`, then `record_shared_bo(boinfo->handle, false)`), and marks every
# render-node buffer whose handle repeats a number recorded before as an import
# (amdgpu_plugin_drm.c, `boinfo->is_import = ... || shared_bo_has_exporter(boinfo->handle)`). So
# the exporter's buffer at handle 3 is written as an import of the /dev/kfd buffer numbered 3,
# like the child's, and no image creates the shared buffer. criu-dev's own restore would make
# both aliases of that /dev/kfd buffer; ours restores an entry marked so in an image without
# checksums as a buffer of its own (the warning `marked as an import of the /dev/kfd buffer
# numbered 3`), so the two processes get two buffers with the same contents, and the first write
# of one side is not what the other reads. The scenario asserts that failure (the workload held,
# so that no tick runs into it first), with the warnings in the restore log.
#
# Upstream's plugin dumps only on node A (drm-dev: it stats /dev/dri/renderD128).
# 449-475 s on bookworm at load 9-11 (2026-12-05), hence a longer limit than the lane's default.
# vm-lane-timeout: 1500
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=upstream.inc
. "$VM_LANE_REPO/ci/vm-lane.d/upstream.inc"

use_criu dev
UP_PRESET=mi50x1
UP_SIMD_ARGS=(--kernel 6.18)
SHARE_KIB=512

# count DIR GLOB: how many files of DIR match GLOB.
count() { find "$1" -maxdepth 1 -name "$2" | wc -l; }

# share_started: the workload's `share child` line; sets CHILD_PID and SHARED_HANDLE.
share_started() {
    local line
    wait_for "the share child's line" 30 grep -q '^share child ' "$VM_LANE_OUT/workload.out"
    line=$(grep '^share child ' "$VM_LANE_OUT/workload.out" | head -n 1)
    note "$line"
    CHILD_PID=$(sed -E 's/.* pid=([0-9]+) .*/\1/' <<<"$line")
    SHARED_HANDLE=$(sed -E 's/.* handle=([0-9]+) .*/\1/' <<<"$line")
    kill -0 "$CHILD_PID" || fail "the share child $CHILD_PID is not running"
}

# shared_verified: the last VERIFY line checked the shared buffer from both sides, the child at
# the exporter's handle and VA.
shared_verified() {
    local want="shared_sides=2 child=handle=$SHARED_HANDLE,va=ok,fd=closed"
    [[ $VERIFY_LINE == *" shared=$((SHARE_KIB << 10)) shared_handle=$SHARED_HANDLE $want"* ]] ||
        fail "the VERIFY line did not check the shared buffer from both sides ($want): $VERIFY_LINE"
}

# shared_cycle NAME DUMPER RESTORER NODE: upstream.inc's cycle (the parent's device VMAs and
# data), and the child's device VMAs back after the restore, both render-node images (the
# parent's and the child's) and no dma-buf image in the dump, and the shared buffer verified
# from both sides.
shared_cycle() {
    local name=$1 dumper=$2 restorer=$3 to=$4 dir=$VM_LANE_WORK/$1 n
    device_vmas "$CHILD_PID" >"$VM_LANE_OUT/$name-child-vmas-before.txt"
    grep -q ' /dev/dri/renderD[0-9]*$' "$VM_LANE_OUT/$name-child-vmas-before.txt" ||
        fail "$name: the share child maps no render node before the dump"
    cycle "$name" "$dumper" "$restorer" "$to"
    device_vmas "$CHILD_PID" >"$VM_LANE_OUT/$name-child-vmas-after.txt"
    diff <(canon_vmas "$VM_LANE_OUT/$name-child-vmas-before.txt") <(canon_vmas "$VM_LANE_OUT/$name-child-vmas-after.txt") ||
        fail "$name: the restored share child does not have its device VMAs back"
    n=$(count "$dir" 'amdgpu-renderD-*.img')
    ((n == 2)) || fail "$name: $dumper's dump wrote $n render-node images, not 2 (parent's and child's)"
    n=$(count "$dir" 'amdgpu-dmabuf_*.img')
    ((n == 0)) || fail "$name: $dumper's dump wrote $n dma-buf images; no process holds a dma-buf fd"
    shared_verified
    note "$name: shared buffer verified from both sides; $(count "$dir" 'amdgpu-drm-pages-*.img') render-node pages files"
    rm -rf "$dir"
}

# stop_tree: the restored workload and its child go.
stop_tree() {
    kill -KILL "$WORKLOAD_PID" "$CHILD_PID" 2>/dev/null || true
    wait_for "the workload's tree to exit" 60 bash -c "! kill -0 $WORKLOAD_PID $CHILD_PID 2>/dev/null"
}

# ---- part 1: the shared buffer at handle 17
node A
start_workload "${UP_WORKLOAD_ARGS[@]}" --render-kib "1024,64$(printf ',4%.0s' $(seq 14))" \
    --share-child "$SHARE_KIB"
share_started
((SHARED_HANDLE == 17)) || fail "the shared buffer is GEM handle $SHARED_HANDLE, not 17"
for c in "shared-ours-ours-same ours ours A" "shared-up-ours-same up ours A" "shared-up-ours-remap up ours B"; do
    read -r name dumper restorer to <<<"$c"
    shared_cycle "$name" "$dumper" "$restorer" "$to"
done
# ours dumps on node B; criu-dev's plugin fails to restore on node A (see above); ours restores
# the same images there.
name=shared-ours-up-back
dir=$VM_LANE_WORK/$name
device_vmas "$CHILD_PID" >"$VM_LANE_OUT/$name-child-vmas-before.txt"
device_vmas "$WORKLOAD_PID" >"$VM_LANE_OUT/$name-vmas-before.txt"
use_plugin ours
criu_dump "$WORKLOAD_PID" "$dir"
check_images ours "$dir"
cp -a "$dir" "$dir.ours"
node A
use_plugin up
! criu_run restore "$dir" -d || fail "$name: criu-dev's plugin restored the importer's render node without a /dev/kfd"
log=$VM_LANE_OUT/criu/$name-restore.log
grep -A3 "^([0-9. ]*) *$CHILD_PID: ${UP_LOG_PREFIX}render node gpu_id = " "$log" | grep -q 'Unable to restore' ||
    fail "$name: criu-dev's restore did not fail at the importer's render node ($log)"
note "$name: criu-dev's plugin could not restore the render node of pid $CHILD_PID (no /dev/kfd in that process: restore_maps empty), as expected"
rm -rf "$dir"
mv "$dir.ours" "$VM_LANE_WORK/shared-ours-ours-back"
name=shared-ours-ours-back
dir=$VM_LANE_WORK/$name
use_plugin ours
criu_restore "$dir"
check_restore_log ours "$VM_LANE_OUT/criu/$name-restore.log"
for who in "" child-; do
    pid=$WORKLOAD_PID
    [[ -z $who ]] || pid=$CHILD_PID
    device_vmas "$pid" >"$VM_LANE_OUT/$name-${who}vmas-after.txt"
    diff <(canon_vmas "$VM_LANE_OUT/shared-ours-up-back-${who}vmas-before.txt") <(canon_vmas "$VM_LANE_OUT/$name-${who}vmas-after.txt") ||
        fail "$name: the restored ${who:-parent }process does not have its device VMAs back"
done
verify_again
shared_verified
note "$name: shared buffer verified from both sides"
rm -rf "$dir"
stop_tree

# ---- part 2: the shared buffer at handle 3
node A
mv "$VM_LANE_OUT/workload.out" "$VM_LANE_OUT/workload-part1.out"
mv "$VM_LANE_OUT/workload.err" "$VM_LANE_OUT/workload-part1.err"
start_workload "${UP_WORKLOAD_ARGS[@]}" --render-kib 1024,64 --share-child "$SHARE_KIB"
share_started
((SHARED_HANDLE == 3)) || fail "the shared buffer is GEM handle $SHARED_HANDLE, not 3"
# criu-dev's plugin dumps; the exporter's entry is marked an import, by number, of a /dev/kfd
# buffer (see above): ours restores two buffers, and the exchange in the VERIFY shows it.
# The workload holds its ticks (the first tick after the restore would fail before the VERIFY).
name=shared-handle-up-ours
dir=$VM_LANE_WORK/$name
hold_workload
use_plugin up
criu_dump "$WORKLOAD_PID" "$dir"
use_plugin ours
criu_restore "$dir"
log=$VM_LANE_OUT/criu/$name-restore.log
grep -q "GEM handle $SHARED_HANDLE: marked as an import of the /dev/kfd buffer numbered $SHARED_HANDLE" "$log" ||
    fail "$name: our restore did not find the exporter's buffer marked an import of a /dev/kfd buffer ($log)"
n=$(grep -c "GEM handle $SHARED_HANDLE: marked as an import of the /dev/kfd buffer numbered" "$log")
((n == 2)) || fail "$name: $n render-node entries at handle $SHARED_HANDLE restored on their own, not 2 (exporter's and importer's)"
before=$(grep -c '^VERIFY' "$VM_LANE_OUT/workload.out" || true)
touch "$TRIGGER"
wait_for "a VERIFY line" 60 bash -c "(( \$(grep -c '^VERIFY' '$VM_LANE_OUT/workload.out') > $before ))"
VERIFY_LINE=$(grep '^VERIFY' "$VM_LANE_OUT/workload.out" | tail -n 1)
note "$VERIFY_LINE"
[[ $VERIFY_LINE == 'VERIFY FAIL shared buffer: '*'shared buffer byte '*' is '*', expected '* ]] ||
    fail "$name: expected the VERIFY to find the two processes' buffers apart (criu-dev's dump lost the sharing), got: $VERIFY_LINE"
note "$name: criu-dev's dump lost the sharing of the buffer at handle $SHARED_HANDLE, as expected (the exporter's entry marked an import of /dev/kfd buffer $SHARED_HANDLE)"
stop_tree
rm -rf "$dir"

simd_warns_only '^$'
kernel_log_clean
pass
