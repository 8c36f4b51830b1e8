# podman-subset: a container given one of kfd-simd's two GPUs (/dev/kfd and /dev/dri/renderD128
# only; kfd-workload --render-minors 128 uses just that GPU) is checkpointed with --export and
# restored with --import on another node (kfd-simd restarted with other gpu ids): the image's one
# GPU is mapped onto the GPU the container may use, renderD128, now with another id; the workload
# verifies and ticks on. The container's process has a device record only for the GPU its device
# cgroup allows (kfd_bridge evaluates the cgroup when it opens /dev/kfd, as amdkfd does), so the
# image has one GPU.
# trixie only (podman 5, crun, criu 4.1.1).
# shellcheck shell=bash
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"
# shellcheck source=podman.inc
. "$VM_LANE_REPO/ci/vm-lane.d/podman.inc"

podman_setup --preset mi210x2
run_gpu_container g4 128 -- --render-minors 128
archive=$VM_LANE_WORK/g4.tar.gz
podman_cr checkpoint g4 export --export "$archive" --compress gzip || fail "podman checkpoint --export failed (criu's log: criu/g4-export-dump.log)"
grep -q 'amdgpu_plugin: dumped pid' "$VM_LANE_OUT/criu/g4-export-dump.log" || fail "the plugin did not dump the workload"
# The driver gives a process a device record only for the GPUs its device cgroup allows (crun's
# device rules allow 226:128, not 226:129), so the image has one GPU. Had it both, the restore
# would need renderD129, which the container has not.
gpus=$(sed -n 's/.*amdgpu_plugin: dumping pid [0-9]*: \([0-9]*\) GPUs.*/\1/p' "$VM_LANE_OUT/criu/g4-export-dump.log" | head -n 1)
[[ -n $gpus ]] || fail "the plugin did not say how many GPUs the process has"
((gpus == 1)) || fail "the container's process has $gpus GPUs in its image, not 1: its device cgroup (renderD128 only) was not applied (is kfd_bridge version 2 loaded? kfd-simd's log)"
pm rm -f g4 >/dev/null || fail "podman rm g4 failed"

"$KFD_BIN/kfd-simd" show mi210x2 --gpu-ids 0x4242,0x4343 >"$VM_LANE_WORK/other-node.toml"
podman_restart_simd --file "$VM_LANE_WORK/other-node.toml"
if ! podman_cr restore g4 import --import "$archive"; then
    # crun moves the restored task into the container's cgroup, with its device rules, only after
    # criu's restore has returned (src/libcrun/criu.c: "necessary later when moving the process
    # into its cgroup"). The restored task opens /dev/kfd during the restore, so its KFD process
    # gets every GPU, as amdkfd would give it; the plugin then needs renderD129 for the GPU it may
    # not use, which the container's /dev lacks. Measured with crun 1.21 and criu 4.1.1.
    if grep -q 'its device cgroup allows every GPU' "$VM_LANE_OUT/simd.err" &&
        grep -q "restoring process's /dev/kfd has GPU" "$VM_LANE_OUT/criu/g4-import-restore.log"; then
        skip "the checkpoint has the container's one GPU, but crun applies the container's device cgroup only after criu's restore: the restored task's /dev/kfd got both GPUs and renderD129 is not in the container (kfd-simd's log: simd.err)"
    fi
    fail "podman restore --import failed (criu's log: criu/g4-import-restore.log)"
fi
log=$VM_LANE_OUT/criu/g4-import-restore.log
grep -A3 'amdgpu_plugin: GPU mapping' "$log" || fail "the plugin logged no GPU mapping"
grep -q '0x4242' "$log" || fail "the image's GPU was not mapped onto 0x4242 (renderD128, the container's)"
verify_container g4
pass
