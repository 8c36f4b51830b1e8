# containerd-checkpoint: containerd directly, the runtime Kubernetes uses (containerd.inc:
# containerd 1.7, runc 1.1, criu 4.1.1 with our plugin from /usr/lib/criu, nothing passed through
# the environment), in one daemon start:
# 1. `ctr run` of a container running kfd-workload on /dev/kfd and both render nodes (its own
#    pid namespace; its output goes to a file in a bind-mounted directory, as a CRI container's log
#    does), `ctr containers checkpoint --task` into a checkpoint image (containerd pauses the task,
#    criu dumps it and it runs on: it verifies after the checkpoint), whose criu layer holds the
#    plugin's images;
# 2. the container removed, kfd-simd restarted with other gpu ids, `ctr containers restore --live`
#    from that image: the plugin maps the image's GPUs onto the new ones and the workload verifies
#    every byte, queue and event and ticks on (not started anew);
# 3. the CRI: containerd's CRI plugin answers Version through its gRPC socket (cri-call.py, a small
#    client: no kubelet), and CheckpointContainer, which the kubelet's checkpoint API calls, is
#    not implemented in containerd 1.7 (`method CheckpointContainer not implemented`, code
#    Unimplemented); the scenario asserts that answer, so a containerd that implements it fails
#    here until the scenario checkpoints through it.
# trixie only.
# shellcheck shell=bash
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"
# shellcheck source=containerd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/containerd.inc"

python3 -c 'import grpc' 2>/dev/null || skip "no python3-grpcio in this guest (TRIXIE_PACKAGES)"
IMAGE=localhost/kfd-sim-busybox:latest
CHECKPOINT=localhost/c1-checkpoint:1
LOGS=$VM_LANE_WORK/logs
mkdir -p "$LOGS"

gpu_node_setup --preset mi210x2
containerd_start
container_rootfs "$VM_LANE_WORK/rootfs"
oci_archive "$VM_LANE_WORK/rootfs" "$IMAGE" "$VM_LANE_WORK/image.tar"
ctr_ images import "$VM_LANE_WORK/image.tar" >/dev/null || fail "ctr images import failed"
note "image: $(ctr_ images list -q | paste -sd ' ')"

# c_log NAME: the workload's output (its file in the bind-mounted log directory).
c_log() { cat "$LOGS/$1.log" 2>/dev/null; }
_c_ticking() { c_log "$1" | grep -q '^tick 3$'; }
_c_verify_now() { ctr_ tasks exec --exec-id "verify-$RANDOM" "$1" touch /tmp/verify-now; }
# c_pid NAME: the task's pid as this guest sees it.
c_pid() { ctr_ tasks list | awk -v id="$1" '$1 == id {print $2}'; }
c_status() { ctr_ tasks list | awk -v id="$1" '$1 == id {print $3}'; }

note "--- phase 1: ctr run, checkpoint into an image"
note "ctr run c1: /dev/kfd, renderD128, renderD129"
ctr_ run -d --null-io --device /dev/kfd --device /dev/dri/renderD128 --device /dev/dri/renderD129 \
    --mount "type=bind,src=$KFD_BIN,dst=/kfdbin,options=rbind:ro" \
    --mount "type=bind,src=$AMDGPU_CR_TOPOLOGY_ROOT,dst=/topology,options=rbind:ro" \
    --mount "type=bind,src=$LOGS,dst=/logs,options=rbind:rw" \
    --env AMDGPU_CR_TOPOLOGY_ROOT=/topology \
    "$IMAGE" c1 sh -c 'exec /kfdbin/kfd-workload --tick-ms 100 --verify-trigger /tmp/verify-now >>/logs/c1.log 2>&1' ||
    fail "ctr run c1 failed"
poll_slow "c1 to tick" 90 _c_ticking c1
note "c1: $(c_log c1 | head -n 1)"
shims=$(shim_pids)
[[ -n $shims ]] || fail "no containerd runc shim is running"
# shellcheck disable=SC2086 # a list of pids
no_gpu_env "containerd and the runc shim" "$CTRD_PID" $shims
private_pid_ns "$(c_pid c1)" "c1's workload"

runc_criu_log c1-ckpt
t0=$SECONDS
ctr_ containers checkpoint --task c1 "$CHECKPOINT" >"$VM_LANE_OUT/c1-ckpt.ctr" 2>&1 ||
    { save_runc_criu_log c1-ckpt || true; fail "ctr containers checkpoint failed: $(cat "$VM_LANE_OUT/c1-ckpt.ctr") (criu's log: criu/c1-ckpt.log)"; }
note "ctr containers checkpoint --task: $((SECONDS - t0))s"
save_runc_criu_log c1-ckpt || fail "criu did not run for ctr containers checkpoint"
grep -q 'amdgpu_plugin: dumped pid' "$CRIU_LOG" || fail "the plugin did not dump c1's workload"
# The checkpoint image (an index: the container's spec, its runtime's options and criu's images as
# a tar, application/vnd.containerd.container.criu.checkpoint.criu.tar): that tar holds the
# plugin's images. Read from containerd's content store on disk (`ctr content get` of an 11 MB
# blob takes a minute under TCG).
blobs=$CTRD_ROOT/io.containerd.content.v1.content/blobs
index=$(ctr_ images list | awk -v r="$CHECKPOINT" '$1 == r {print $3}')
[[ -n $index && -f $blobs/${index/://} ]] || fail "no image $CHECKPOINT (index ${index:-none}) in $blobs"
criu_tar=$(python3 -c '
import json, sys
for m in json.load(open(sys.argv[1])).get("manifests", []):
    if m.get("mediaType", "").endswith(".criu.tar"):
        print(m["digest"])' "$blobs/${index/://}")
[[ -n $criu_tar ]] || fail "$CHECKPOINT has no criu layer: $(cat "$blobs/${index/://}")"
tar -tvf "$blobs/${criu_tar/://}" | grep amdgpu- >"$VM_LANE_OUT/checkpoint-amdgpu.txt" ||
    fail "the criu layer of $CHECKPOINT ($criu_tar) holds no amdgpu images"
grep -q 'amdgpu-kfd-.*\.img' "$VM_LANE_OUT/checkpoint-amdgpu.txt" || fail "the criu layer of $CHECKPOINT holds no amdgpu-kfd image"
note "$CHECKPOINT: index $index, criu layer $criu_tar with $(wc -l <"$VM_LANE_OUT/checkpoint-amdgpu.txt") amdgpu image files"
[[ $(c_status c1) == RUNNING ]] || fail "c1 is $(c_status c1) after the checkpoint (containerd resumes it)"
workload_verifies c1 c_log _c_verify_now

note "--- phase 2: the container removed, restored from the image on a node with other gpu ids"
ctr_ tasks kill -s KILL c1 >/dev/null
_c_stopped() { [[ $(c_status "$1") == STOPPED ]]; }
poll_slow "c1 to stop" 30 _c_stopped c1
ctr_ tasks delete c1 >/dev/null
ctr_ containers delete c1 >/dev/null
"$KFD_BIN/kfd-simd" show mi210x2 --gpu-ids 0x4242,0x4343 >"$VM_LANE_WORK/other-node.toml"
gpu_node_restart --file "$VM_LANE_WORK/other-node.toml"
runc_criu_log c1-rst
t0=$SECONDS
ctr_ containers restore --live c1 "$CHECKPOINT" </dev/null >"$VM_LANE_OUT/c1-rst.ctr" 2>&1 ||
    { save_runc_criu_log c1-rst || true; fail "ctr containers restore --live failed: $(cat "$VM_LANE_OUT/c1-rst.ctr") (criu's log: criu/c1-rst.log)"; }
note "ctr containers restore --live: $((SECONDS - t0))s"
save_runc_criu_log c1-rst || fail "criu did not run for ctr containers restore"
status=$(c_status c1)
[[ $status == RUNNING ]] || fail "c1 is ${status:-gone} after the restore: $(c_log c1 | tail -n 3 | paste -sd '|')"
grep -A3 'amdgpu_plugin: GPU mapping' "$CRIU_LOG" || fail "the plugin logged no GPU mapping"
grep -q '0x4242' "$CRIU_LOG" || fail "the restore did not use the new node's GPUs (no 0x4242 in criu's log)"
workload_verifies c1 c_log _c_verify_now

note "--- phase 3: the CRI's CheckpointContainer"
# Both calls in one client (python and grpc take about 10 s to start under TCG).
rc=0
answer=$(clean_env python3 "$VM_LANE_REPO/ci/vm-lane.d/cri-call.py" "$CTRD_SOCK" version + \
    checkpoint "$(ctr_ containers list -q | head -n 1)" "$VM_LANE_WORK/cri-checkpoint.tar" 60) || rc=$?
version=$(sed -n 1p <<<"$answer")
checkpoint=$(sed -n 2p <<<"$answer")
note "CRI Version: $version"
[[ $version == *runtime_name=containerd* ]] || fail "the CRI's Version failed or is not containerd's: $version"
note "CRI CheckpointContainer: $checkpoint (status $rc)"
[[ $rc == 1 && $checkpoint == 'error code=UNIMPLEMENTED details=method CheckpointContainer not implemented' ]] ||
    fail "containerd's CRI answered CheckpointContainer with '$checkpoint' (status $rc), not 'not implemented': this containerd may implement it; checkpoint a CRI-created container through it here"
pass
