# docker-checkpoint: Docker's own checkpoint and restore (`docker checkpoint create`,
# `docker start --checkpoint`) of containers running kfd-workload on kfd-simd's GPUs, in one
# dockerd start and three phases (docker.inc: docker.io 26.1 on containerd 1.7 and runc 1.1, which
# runs criu 4.1.1 with our plugin from /usr/lib/criu; nothing reaches criu through the
# environment, checked on the daemons and the runc shims):
# 1. same node: g1 (both GPUs, its own pid namespace) is checkpointed into its container's
#    checkpoint directory and started from it; kfd-simd released its KFD process at the dump, the
#    plugin restored the image, and the workload verifies every byte, queue and event and ticks on
#    (not started anew);
# 2. a new container given 1 of 2 GPUs, on another node: g2 (given renderD128 only, kfd-workload
#    --render-minors 128; its image has that one GPU) is checkpointed into a --checkpoint-dir, a
#    new container g2b is created with the same devices, and kfd-simd restarts with other gpu
#    ids. Docker does not start a container from a --checkpoint-dir ("custom checkpointdir is
#    not supported", refused by its daemon before anything runs: asserted). Copied into g2b's own
#    checkpoint directory, the checkpoint is restored by criu into g2's old cgroup path, which
#    criu recreates (runc 1.1 gives criu no cgroup root on cgroup v2), outside g2b's device
#    rules: its /dev/kfd gets both GPUs and the plugin refuses (asserted with criu's cgroup line;
#    nothing left). With `manage-cgroups=ignore` in /etc/criu/runc.conf criu leaves the task in
#    g2b's cgroup, and it restores onto renderD128's GPU, now 0x4242, and verifies;
# 3. a refused restore: kfd-simd restarts with older firmware, and starting a new container g1c
#    from g1's checkpoint of phase 1 (copied in) fails with the plugin's reason
#    (KFD_FW_VER_CHECK) in criu's log, Docker's error names criu's failure and a log file that is
#    already gone, nothing runs and every device file the restore opened is released.
# criu's log under runc is kept through /etc/criu/runc.conf (containerd.inc).
# trixie only.
# shellcheck shell=bash
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"
# shellcheck source=docker.inc
. "$VM_LANE_REPO/ci/vm-lane.d/docker.inc"

# kfd-simd logs every open of its devices at debug (phase 3 counts them).
export KFD_SIMD_LOG=debug
"$KFD_BIN/kfd-simd" show mi210x2 --fw-version 90 >"$VM_LANE_WORK/node-a.toml"
"$KFD_BIN/kfd-simd" show mi210x2 --fw-version 90 --gpu-ids 0x4242,0x4343 >"$VM_LANE_WORK/node-b.toml"
"$KFD_BIN/kfd-simd" show mi210x2 --fw-version 60 >"$VM_LANE_WORK/node-c.toml"
gpu_node_setup --file "$VM_LANE_WORK/node-a.toml"
docker_start
docker_gpu run g1 128 129
shims=$(shim_pids)
[[ -n $shims ]] || fail "no containerd runc shim is running"
# shellcheck disable=SC2086 # a list of pids
no_gpu_env "containerd, dockerd and the runc shim" "$CTRD_PID" "$DOCKERD_PID" $shims
pid=$(dk_pid g1)
private_pid_ns "$pid" "g1's workload"

note "--- phase 1: checkpoint and restore on the same node"
seen=$(wc -l <"$VM_LANE_OUT/simd.err")
dk_cr g1-ckpt checkpoint create g1 cp1 || fail "docker checkpoint create failed (criu's log: criu/g1-ckpt.log)"
[[ $(dk_state g1) == exited ]] || fail "g1 is $(dk_state g1) after the checkpoint"
grep -q 'amdgpu_plugin: dumped pid' "$CRIU_LOG" || fail "the plugin did not dump g1's workload"
cpdir=$DOCKER_ROOT/containers/$(dk inspect --format '{{.Id}}' g1)/checkpoints/cp1
compgen -G "$cpdir/amdgpu-kfd-*.img" >/dev/null || fail "no amdgpu images in $cpdir"
note "$(cd "$cpdir" && ls -l amdgpu-* | awk '{print $5, $NF}' | paste -sd ' ')"
released_since "$seen" "$pid"
dk_cr g1-rst start --checkpoint cp1 g1 || fail "docker start --checkpoint failed (criu's log: criu/g1-rst.log)"
[[ $(dk_state g1) == running ]] || fail "g1 is $(dk_state g1) after the restore: $(dk_log g1 | tail -n 3 | paste -sd '|')"
grep 'amdgpu_plugin: restored image' "$CRIU_LOG" || fail "the plugin restored nothing"
! grep -q pidfd_getfd "$CRIU_LOG" || fail "the plugin fetched fds from the daemon"
[[ $(dk_cgroup g1) == "/docker/$(dk_id g1)" ]] || fail "g1's restored workload is in cgroup $(dk_cgroup g1), not its container's"
dk_verify g1

note "--- phase 2: a new container, given 1 of 2 GPUs, from --checkpoint-dir on a node with other gpu ids"
# A --checkpoint-dir holds checkpoints by name only (DIR/NAME), whichever container made them.
cpd=$VM_LANE_WORK/checkpoints
mkdir -p "$cpd"
# g1 goes, and its checkpoint directory with it: cp1 is kept for phase 3. g2 is given renderD128
# only.
cp -a "$cpdir" "$cpd/cp1"
dk rm -f g1 >/dev/null
docker_gpu run g2 128 -- --render-minors 128
dk_cr g2-export checkpoint create --checkpoint-dir "$cpd" g2 g2-cp ||
    fail "docker checkpoint create --checkpoint-dir of g2 failed (criu's log: criu/g2-export.log)"
# The driver gives a process a device record only for the GPUs its device cgroup allows.
gpus=$(sed -n 's/.*amdgpu_plugin: dumping pid [0-9]*: \([0-9]*\) GPUs.*/\1/p' "$CRIU_LOG" | head -n 1)
[[ $gpus == 1 ]] || fail "g2's image has ${gpus:-an unknown number of} GPUs, not 1: its device cgroup (renderD128 only) was not applied"
docker_gpu create g2b 128 -- --render-minors 128
gpu_node_restart --file "$VM_LANE_WORK/node-b.toml"
# Docker writes a checkpoint into a --checkpoint-dir but does not start from one: its daemon
# refuses before anything runs (moby's containerStart, unchanged in 26.1).
if dk_cr g2b-dir start --checkpoint-dir "$cpd" --checkpoint g2-cp g2b; then
    fail "docker started g2b from --checkpoint-dir: update the scenario and README (Docker now supports it)"
fi
grep -q 'custom checkpointdir is not supported' "$VM_LANE_OUT/g2b-dir.docker" ||
    fail "docker start --checkpoint-dir failed for another reason: $(cat "$VM_LANE_OUT/g2b-dir.docker")"
[[ $(dk_state g2b) == created ]] || fail "g2b is $(dk_state g2b) after the refused start"
# What works: the checkpoint copied into the new container's own checkpoint directory. But
# runc 1.1 on cgroup v2 gives criu no cgroup root, and criu (cgroup mode soft, its default) puts
# the restored task into the checkpointed container's cgroup path (g2's), which it creates anew:
# outside g2b's cgroup and its device rules. (Phase 1 restored into the same container, so the
# same path.) g2b's /dev/kfd then gets both GPUs, and the plugin refuses rather than open
# renderD129, which g2b was not given.
dk_checkpoint_into g2b "$cpd/g2-cp"
seen=$(wc -l <"$VM_LANE_OUT/simd.err")
if dk_cr g2b-rst start --checkpoint g2-cp g2b; then
    fail "g2b restored in spite of a cgroup without its device rules (did runc's restore change? criu's log: criu/g2b-rst.log)"
fi
grep 'amdgpu_plugin: .*which its container was not given' "$CRIU_LOG" ||
    fail "g2b's restore failed without the plugin's device cgroup reason (criu's log: criu/g2b-rst.log)"
grep -q "cg: Created cgroup dir unified/docker/$(dk_id g2)" "$CRIU_LOG" ||
    fail "criu did not recreate g2's cgroup for g2b's restore (criu's log: criu/g2b-rst.log)"
[[ -z $(dk ps -q --filter name=g2b) ]] || fail "g2b runs after the refused restore"
devices_released_since "$seen" "g2b's refused restore"
# With `manage-cgroups=ignore` in runc.conf criu leaves the restored task in the cgroup runc
# prepared for it (g2b's, its device rules set): one GPU, renderD128's, and it verifies.
DK_CRIU_OPTIONS=("manage-cgroups=ignore")
dk_cr g2b-rst-ignore start --checkpoint g2-cp g2b ||
    fail "docker start of g2b with manage-cgroups=ignore failed (criu's log: criu/g2b-rst-ignore.log)"
DK_CRIU_OPTIONS=()
[[ $(dk_cgroup g2b) == "/docker/$(dk_id g2b)" ]] || fail "g2b's restored workload is in cgroup $(dk_cgroup g2b), not its container's"
grep -A2 'amdgpu_plugin: GPU mapping' "$CRIU_LOG" || fail "the plugin logged no GPU mapping"
grep -q '0x4242' "$CRIU_LOG" || fail "g2b's GPU was not mapped onto 0x4242 (renderD128, the container's)"
! grep -q 'is the restored process.s too' "$CRIU_LOG" || fail "g2b's restored process had a GPU its container was not given"
dk_verify g2b

note "--- phase 3: a restore refused on a node with older firmware"
# g1's checkpoint of phase 1 (taken on a node with firmware 90), in a new container g1c, on a
# node with 60.
dk rm -f g2b >/dev/null
docker_gpu create g1c 128 129
gpu_node_restart --file "$VM_LANE_WORK/node-c.toml"
seen=$(wc -l <"$VM_LANE_OUT/simd.err")
dk_checkpoint_into g1c "$cpd/cp1"
if dk_cr g1c-rst start --checkpoint cp1 g1c; then
    fail "docker restored g1c onto older firmware"
fi
grep 'amdgpu_plugin: .*KFD_FW_VER_CHECK' "$CRIU_LOG" || fail "the plugin's reason is not in criu's log"
grep -q 'criu failed' "$VM_LANE_OUT/g1c-rst.docker" || fail "docker's error does not name criu's failure"
# Docker's error names criu's log in the task's bundle, which containerd has deleted with the
# failed task: without a log-file in /etc/criu/runc.conf the plugin's reason is nowhere.
named=$(sed -n 's/^log file: \(.*\): unknown$/\1/p' "$VM_LANE_OUT/g1c-rst.docker")
[[ -n $named ]] || fail "docker's error names no log file: $(cat "$VM_LANE_OUT/g1c-rst.docker")"
[[ ! -e $named ]] || fail "$named, which docker's error names, is still there: update README"
note "the log docker's error names is gone: $named"
state=$(dk_state g1c)
note "g1c after the refused restore: $state"
[[ $state != running && $state != paused ]] || fail "g1c is $state after the refused restore"
[[ -z $(dk ps -q) ]] || fail "containers are running: $(dk ps)"
devices_released_since "$seen" "the refused restore"
pass
