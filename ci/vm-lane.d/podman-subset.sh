# podman-subset: containers given one of kfd-simd's two GPUs (/dev/kfd and /dev/dri/renderD128
# only; kfd-workload --render-minors 128 uses just that GPU) are checkpointed with --export and
# restored with --import on another node (kfd-simd restarted with other gpu ids). Each
# container's process has a device record only for the GPU its device cgroup allows (kfd_bridge
# evaluates the cgroup when it opens /dev/kfd, as amdkfd does), so each image has one GPU. Whether
# the restore can work depends on when the OCI runtime puts the restored task under the
# container's device rules, because the task opens /dev/kfd during criu's restore:
# - g5 runs under runc, which creates and configures the container's cgroup (device rules
#   included) and puts criu into it before criu restores: the restored task's /dev/kfd has the
#   container's one GPU, the image's GPU maps onto renderD128's, now 0x4242, and the workload
#   verifies every byte and ticks on;
# - g4 runs under crun (the guest's default), which with the cgroupfs manager on cgroup v2 applies
#   the device rules only after criu's restore has returned (src/libcrun/container.c, measured
#   with crun 1.21): the restored task's /dev/kfd gets both GPUs (kfd-simd's log says its device
#   cgroup allowed every GPU), and the plugin refuses before any GPU state is created, naming the
#   cause and the fix, rather than open renderD129 outside the container. The scenario asserts
#   the refusal and that nothing is left: g4 not running, kfd-simd released every process that
#   opened /dev/kfd during that restore, with all VRAM free.
# trixie only (podman 5, crun, runc, criu 4.1.1).
# shellcheck shell=bash
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"
# shellcheck source=podman.inc
. "$VM_LANE_REPO/ci/vm-lane.d/podman.inc"

command -v runc >/dev/null || skip "runc is not installed in this guest (TRIXIE_PACKAGES)"
# kfd-simd logs every open of its devices at debug.
export KFD_SIMD_LOG=debug
podman_setup --preset mi210x2
run_gpu_container g4 128 -- --render-minors 128
PODMAN_RUNTIME=runc run_gpu_container g5 128 -- --render-minors 128
for c in g4 g5; do
    note "$c runs under $(pm inspect --format '{{.OCIRuntime}}' "$c")"
    podman_cr checkpoint "$c" export --export "$VM_LANE_WORK/$c.tar.gz" --compress gzip ||
        fail "podman checkpoint --export of $c failed (criu's log: criu/$c-export-dump.log)"
    log=$VM_LANE_OUT/criu/$c-export-dump.log
    grep -q 'amdgpu_plugin: dumped pid' "$log" || fail "the plugin did not dump $c's workload"
    # The driver gives a process a device record only for the GPUs its device cgroup allows (the
    # runtime's device rules allow 226:128, not 226:129), so the image has one GPU.
    gpus=$(sed -n 's/.*amdgpu_plugin: dumping pid [0-9]*: \([0-9]*\) GPUs.*/\1/p' "$log" | head -n 1)
    [[ -n $gpus ]] || fail "the plugin did not say how many GPUs $c's process has"
    ((gpus == 1)) || fail "$c's process has $gpus GPUs in its image, not 1: its device cgroup (renderD128 only) was not applied (is kfd_bridge version 2 loaded? kfd-simd's log)"
    pm rm -f "$c" >/dev/null || fail "podman rm $c failed"
done

"$KFD_BIN/kfd-simd" show mi210x2 --gpu-ids 0x4242,0x4343 >"$VM_LANE_WORK/other-node.toml"
gpu_node_restart --file "$VM_LANE_WORK/other-node.toml"

# crun: refused, with the cause, and nothing left.
seen=$(wc -l <"$VM_LANE_OUT/simd.err")
if podman_cr restore g4 import --import "$VM_LANE_WORK/g4.tar.gz"; then
    fail "crun restored g4 although its device cgroup was applied only after criu's restore: the plugin should have refused"
fi
log=$VM_LANE_OUT/criu/g4-import-restore.log
[[ -f $log ]] || fail "no restore.log of g4's failed restore (podman --keep)"
grep 'amdgpu_plugin: .*device cgroup was not applied yet' "$log" ||
    fail "the plugin's reason (device cgroup not applied) is not in criu's log"
grep -q -- '--runtime runc.*--cgroup-manager systemd' "$log" || fail "the plugin's message does not name the fix"
tail -n +"$((seen + 1))" "$VM_LANE_OUT/simd.err" | grep -q 'its device cgroup allows every GPU' ||
    fail "kfd-simd did not see g4's restored task with every GPU allowed (did crun's ordering change?)"
! grep -q 'CRIU_OP(RESTORE)' "$log" || fail "the plugin reached CRIU_OP(RESTORE) before refusing"
nothing_left_since "$seen" g4 "the refused restore"
pm rm -f g4 >/dev/null 2>&1 || true

# runc: restored onto renderD128's GPU, verified.
podman_cr restore g5 import --import "$VM_LANE_WORK/g5.tar.gz" ||
    fail "podman restore --import of g5 (runc) failed (criu's log: criu/g5-import-restore.log)"
need_running g5 "after the restore"
used=$(pm inspect --format '{{.OCIRuntime}}' g5)
[[ $used == runc ]] || fail "g5 was restored by $used, not runc"
log=$VM_LANE_OUT/criu/g5-import-restore.log
grep -A3 'amdgpu_plugin: GPU mapping' "$log" || fail "the plugin logged no GPU mapping"
grep -q '0x4242' "$log" || fail "the image's GPU was not mapped onto 0x4242 (renderD128, the container's)"
! grep -q 'is the restored process.s too' "$log" || fail "g5's restored process had a GPU its container was not given"
verify_container g5
pass
