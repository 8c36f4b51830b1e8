# criu-kfd-no-plugin: a kfd-workload image restored where the plugin is missing fails with criu's
# own error, and nothing of ours is half done: no restored process is left, kfd-simd never sees it
# open a device, and the last KFD process the daemon released (the dumped workload's) left every
# GPU's VRAM free. Two ways to miss it:
# - a plugin directory without it (-L to an empty directory; or /usr/lib/criu holding other
#   plugins): criu >= 4.1 reads the image's plugin list (amdgpu_plugin) and stops at "Missing
#   required plugin: amdgpu_plugin" before it restores anything;
# - no -L: criu looks in /usr/lib/criu. trixie's criu package has no such directory, and then
#   criu 4.1.1 loads no plugin and skips that check too (bookworm's has an empty one, which is
#   the case above); it fails, as criu 3.17 does in every case, on the first GPU file no plugin
#   restores ("Unable to restore 0x<id>").
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"

# Debug logging: kfd-simd then logs every open of its devices, with the opener's pid.
KFD_SIMD_LOG=debug start_simd --preset mi210x2
start_workload
grep -q "opened by pid $WORKLOAD_PID " "$VM_LANE_OUT/simd.err" || fail "kfd-simd does not log the opens"
dump_workload
released_since 0 "$WORKLOAD_PID"
seen=$(wc -l <"$VM_LANE_OUT/simd.err")

# attempt NAME PLUGIN_DIR WANT: restores without the plugin (PLUGIN_DIR: -L, or none when empty);
# criu must fail with WANT in its log, without the plugin, and leave nothing behind.
attempt() {
    local name=$1 dir=$2 want=$3 rc=0
    VM_LANE_PLUGIN_DIR=$dir criu_run restore "$IMAGES" -d || rc=$?
    local log=$VM_LANE_OUT/criu/images-restore-$name.log
    mv "$VM_LANE_OUT/criu/images-restore.log" "$log"
    ((rc != 0)) || fail "$name: criu restored GPU files without the plugin"
    grep -q "$want" "$log" || fail "$name: criu's error ($want) is not in its log"
    note "$name: criu: $(grep -m 1 "$want" "$log")"
    ! grep -q 'amdgpu_plugin: ' "$log" || fail "$name: the plugin ran although it was not given"
    ! kill -0 "$WORKLOAD_PID" 2>/dev/null || fail "$name: pid $WORKLOAD_PID runs after the failed restore"
}

! compgen -G '/usr/lib/criu/amdgpu_plugin*' >/dev/null || fail "this guest has an amdgpu plugin in /usr/lib/criu"
if criu_at_least 4.1; then
    listed='Missing required plugin: amdgpu_plugin'
else
    listed='Unable to restore 0x'
fi
mkdir -p "$VM_LANE_WORK/no-plugins"
attempt empty-dir "$VM_LANE_WORK/no-plugins" "$listed"
if [[ -d /usr/lib/criu ]]; then
    attempt default-dir '' "$listed"
else
    attempt no-dir '' 'Unable to restore 0x'
fi
sleep 1
after=$(tail -n +"$((seen + 1))" "$VM_LANE_OUT/simd.err")
! grep -q "opened by pid $WORKLOAD_PID \|pid $WORKLOAD_PID: " <<<"$after" ||
    fail "kfd-simd saw the failed restores: $(grep -m 3 "pid $WORKLOAD_PID" <<<"$after")"
note "kfd-simd saw nothing of pid $WORKLOAD_PID after the dump"
pass
