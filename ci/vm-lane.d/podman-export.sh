# podman-export: `podman container checkpoint --export` of a container running kfd-workload on
# both GPUs of kfd-simd (mi210x2), the container removed, kfd-simd restarted as another node whose
# GPUs have other gpu ids, then `podman container restore --import`: the plugin maps the image's
# GPUs onto the new ones (in criu's log) and the workload, which keeps its image's gpu ids, verifies
# every byte, queue and event and ticks on. The render minors stay those of the dump: the
# container's device list (--device /dev/dri/renderD128 ...) comes from the checkpoint; a node
# whose GPUs have other render minors is not tested.
# trixie only (podman 5, crun, criu 4.1.1).
# shellcheck shell=bash
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"
# shellcheck source=podman.inc
. "$VM_LANE_REPO/ci/vm-lane.d/podman.inc"

podman_setup --preset mi210x2
run_gpu_container g2 128 129
archive=$VM_LANE_WORK/g2.tar.gz
podman_cr checkpoint g2 export --export "$archive" --compress gzip || fail "podman checkpoint --export failed (criu's log: criu/g2-export-dump.log)"
note "$(ls -l "$archive")"
tar -tzf "$archive" | grep -E 'amdgpu-(kfd|pages|renderD)' >"$VM_LANE_OUT/archive-amdgpu.txt" ||
    fail "no amdgpu images in the exported archive"
note "$(wc -l <"$VM_LANE_OUT/archive-amdgpu.txt") amdgpu image files in the archive"
pm rm -f g2 >/dev/null || fail "podman rm g2 failed"

# Another node: other gpu ids, same render minors.
"$KFD_BIN/kfd-simd" show mi210x2 --gpu-ids 0x4242,0x4343 >"$VM_LANE_WORK/other-node.toml"
gpu_node_restart --file "$VM_LANE_WORK/other-node.toml"
podman_cr restore g2 import --import "$archive" ||
    fail "podman restore --import failed (criu's log: criu/g2-import-restore.log)"
[[ $(container_status g2) == running ]] || fail "g2 is $(container_status g2) after the restore"
log=$VM_LANE_OUT/criu/g2-import-restore.log
grep -A3 'amdgpu_plugin: GPU mapping' "$log" || fail "the plugin logged no GPU mapping"
grep -qi '0x4242' "$log" || fail "the restore did not use the new node's GPUs (no 0x4242 in criu's log)"
verify_container g2
pass
