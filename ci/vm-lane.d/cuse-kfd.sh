# cuse-kfd: kfd-simd serves /dev/kfd and the render nodes over CUSE (pure Rust, no libfuse); the
# nodes look like real ones (render nodes 226:<minor>, CUSE class in sysfs); the daemon stops
# cleanly on SIGTERM; then kfd-sim's CUSE test suite runs for real against it: a client opens
# /dev/kfd, GET_VERSION, ACQUIRE_VM with render fds, allocates; a second process is checkpointed by
# its ptrace parent, whose dma-buf fds arrive through pidfd_getfd; garbage ioctls and clients
# killed in mid-call do not take the daemon down; a signal ends a WAIT_EVENTS with EINTR.
#
# Binaries: kfd-simd from --bin-dir, else $KFD_SIMD_BIN, else the repository's target/debug; the
# test binary from $KFD_CUSE_TEST_BIN, else the newest target/debug/deps/cuse-* (build both with
# `cargo test -p kfd-sim --test cuse --no-run`).
# shellcheck source=lib.sh
. "$VM_LANE_LIB"

[[ -c /dev/cuse ]] || fail "/dev/cuse is missing"
simd=${KFD_SIMD_BIN:-}
[[ -n $simd ]] || { [[ -n ${VM_LANE_BIN_DIR:-} ]] && simd=$VM_LANE_BIN_DIR/kfd-simd; }
[[ -x ${simd:-} ]] || simd=$VM_LANE_REPO/target/debug/kfd-simd
[[ -x $simd ]] || skip "no kfd-simd binary (cargo build -p kfd-sim, or --bin-dir)"
tests=${KFD_CUSE_TEST_BIN:-}
if [[ -z $tests ]]; then
    for f in "$VM_LANE_REPO"/target/debug/deps/cuse-*; do
        [[ $f != *.d && -x $f ]] || continue
        [[ -n $tests && ! $f -nt $tests ]] || tests=$f
    done
fi
[[ -n $tests && -x $tests ]] || skip "no CUSE test binary (cargo test -p kfd-sim --test cuse --no-run)"
note "kfd-simd: $simd"
note "tests:    $tests"

# 1. The daemon by hand.
topo=$VM_LANE_WORK/topology
pid=$(start_detached simd env KFD_SIMD_LOG=info "$simd" serve --preset mi210x2 --topology-dir "$topo")
wait_for "kfd-simd READY" 60 grep -q '^READY' "$VM_LANE_OUT/simd.out"
note "$(cat "$VM_LANE_OUT/simd.out")"
[[ -c /dev/kfd ]] || fail "/dev/kfd is not a character device"
for minor in 128 129; do
    node=/dev/dri/renderD$minor
    [[ -c $node ]] || fail "$node is missing"
    numbers=$(stat -c '%t:%T' "$node")
    [[ $numbers == e2:$(printf '%x' "$minor") ]] || fail "$node has numbers $numbers (hex), want e2:$(printf '%x' "$minor")"
    sysfs=$(readlink -f "/sys/dev/char/$(stat -c '%Hr:%Lr' "$node")")
    [[ $sysfs == /sys/devices/virtual/cuse/* ]] || fail "$node is not CUSE-served (sysfs: $sysfs)"
done
note "$(ls -l /dev/kfd /dev/dri/)"
[[ -d $topo/nodes ]] || fail "no topology tree in $topo"
grep -q "AMDGPU_CR_TOPOLOGY_ROOT=$topo" "$VM_LANE_OUT/simd.out" || fail "kfd-simd did not print the client environment"
kill -TERM "$pid"
wait_for "kfd-simd to stop on SIGTERM" 30 bash -c "! kill -0 $pid 2>/dev/null || grep -q '^Z' <(ps -o stat= -p $pid)"
grep -q 'kfd-simd: stopped' "$VM_LANE_OUT/simd.out" || fail "kfd-simd did not stop cleanly"
wait_for "/dev/kfd to go away" 10 test ! -e /dev/kfd

# 2. Without CUSE it says so and fails (no panic).
rc=0
"$simd" serve --preset mi50x1 --topology-dir "$VM_LANE_WORK/t2" --cuse /nonexistent/cuse \
    >"$VM_LANE_OUT/nocuse.out" 2>"$VM_LANE_OUT/nocuse.err" || rc=$?
((rc == 1)) || fail "kfd-simd without CUSE exited with $rc, want 1"
grep -q 'does not exist' "$VM_LANE_OUT/nocuse.err" || fail "no clear error without CUSE"
! grep -q panicked "$VM_LANE_OUT/nocuse.err" || fail "kfd-simd panicked without CUSE"

# 3. The CUSE test suite, for real (each test starts its own daemon).
note "running the CUSE tests"
run_tests CUSE "$tests"
pass
