# podman-same: `podman container checkpoint` and `podman container restore` of a container
# running kfd-workload on both GPUs of kfd-simd (mi210x2), on the same node: crun's criu 4.1.1 with
# our plugin from /usr/lib/criu, nothing passed through the environment, the container in its own
# pid namespace. The dump stops the container and kfd-simd releases its KFD process; the restored
# workload verifies every byte, queue and event and ticks on; its dma-bufs were installed by the
# kfd_bridge module (no pidfd_getfd of the daemon, which a container's pid namespace cannot see).
# trixie only (podman 5, crun, criu 4.1.1).
# shellcheck shell=bash
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"
# shellcheck source=podman.inc
. "$VM_LANE_REPO/ci/vm-lane.d/podman.inc"

podman_setup --preset mi210x2
run_gpu_container g1 128 129
pid=$(container_pid g1)
private_pid_ns "$pid" "g1's workload"
seen=$(wc -l <"$VM_LANE_OUT/simd.err")

podman_cr checkpoint g1 ckpt || fail "podman checkpoint failed (criu's log: criu/g1-ckpt-dump.log)"
[[ $(container_status g1) == exited ]] || fail "g1 is $(container_status g1) after the checkpoint"
dir=$(userdata g1)
compgen -G "$dir/checkpoint/amdgpu-kfd-*.img" >/dev/null || fail "no amdgpu images in $dir/checkpoint"
note "$(cd "$dir/checkpoint" && ls -l amdgpu-* inventory.img)"
grep -q 'amdgpu_plugin: dumped pid' "$dir/dump.log" || fail "the plugin did not dump the workload"
released_since "$seen" "$pid"

podman_cr restore g1 rst || fail "podman restore failed (criu's log: criu/g1-rst-restore.log)"
need_running g1 "after the restore"
! grep -q pidfd_getfd "$dir/restore.log" || fail "the plugin fetched fds from the daemon"
grep 'amdgpu_plugin: restored image' "$dir/restore.log" || fail "the plugin restored nothing"
verify_container g1
pass
