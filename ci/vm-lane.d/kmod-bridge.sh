# kmod-bridge: the kfd_bridge kernel module (ci/kmod) gives kfd-simd's devices what CUSE alone
# cannot: mmap of /dev/kfd and the render nodes (the VMA keeps the device file, the pages are the
# daemon's), and fds installed into the caller by the kernel (CRIU_OP dma-bufs, the SMI fd), also
# in another pid namespace. Loads the module, checks the nodes kfd-simd makes through it, runs
# kfd-sim's bridge test suite (mappings and their errno, fork, partial munmap, the daemon exiting
# under live mappings, clients exiting with them), has criu dump a process that holds device
# mappings (the criu-kfd-mapped* scenarios restore them), then checks that the kernel logged no
# oops, BUG or WARNING and that the module unloads once everything is closed.
#
# Binaries: kfd-simd from --bin-dir, else the repository's target/debug; the test binary from
# $KFD_BRIDGE_TEST_BIN, else the newest target/debug/deps/bridge-* (build both with
# `cargo test -p kfd-sim --test bridge --no-run`).
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"

tests=${KFD_BRIDGE_TEST_BIN:-}
if [[ -z $tests ]]; then
    for f in "$VM_LANE_REPO"/target/debug/deps/bridge-*; do
        [[ $f != *.d && -x $f ]] || continue
        [[ -n $tests && ! $f -nt $tests ]] || tests=$f
    done
fi
[[ -n $tests && -x $tests ]] || skip "no bridge test binary (cargo test -p kfd-sim --test bridge --no-run)"

# What the kernel logs from here on is checked at the end.
log_start=$(dmesg | wc -l)
kernel_log() { dmesg | tail -n "+$((log_start + 1))"; }
check_kernel_log() {
    kernel_log >"$VM_LANE_OUT/dmesg.txt"
    if grep -E 'BUG:|Oops|WARNING:|general protection|Call Trace|kernel BUG|refcount_t:|list_(add|del) corruption|bad page|page dumped' "$VM_LANE_OUT/dmesg.txt"; then
        fail "the kernel logged a problem $1 (dmesg.txt)"
    fi
}

need_kmod
note "loaded $KMOD_FILE ($(stat -c %s "$KMOD_FILE") bytes): $(ls -l /dev/kfd-bridge)"

# 1. The daemon by hand: public nodes are the module's proxies, the CUSE devices private.
start_simd --preset mi210x2
grep -q 'kfd_bridge proxy of /dev/kfd-sim/kfd' "$VM_LANE_OUT/simd.out" ||
    fail "kfd-simd did not serve through the module: $(cat "$VM_LANE_OUT/simd.out")"
kfd_sysfs=$(readlink -f "/sys/dev/char/$(stat -c '%Hr:%Lr' /dev/kfd)")
[[ $kfd_sysfs == /sys/devices/virtual/kfd_bridge/kfd ]] || fail "/dev/kfd is not the module's proxy ($kfd_sysfs)"
for minor in 128 129; do
    node=/dev/dri/renderD$minor
    [[ $(stat -c '%t:%T' "$node") == e2:$(printf '%x' "$minor") ]] || fail "$node has numbers $(stat -c '%t:%T' "$node") (hex)"
    sysfs=$(readlink -f "/sys/dev/char/226:$minor")
    [[ $sysfs == "/sys/devices/virtual/kfd_bridge/dri!renderD$minor" ]] || fail "$node is not the module's proxy ($sysfs)"
    backend=/dev/kfd-sim/dri-renderD$minor
    [[ $(readlink -f "/sys/dev/char/$(stat -c '%Hr:%Lr' "$backend")") == /sys/devices/virtual/cuse/* ]] ||
        fail "$backend is not a CUSE device"
done
note "$(ls -l /dev/kfd /dev/dri/ /dev/kfd-sim/)"
stop_simd
[[ ! -e /dev/dri/renderD128 ]] || fail "the render node proxies outlived the daemon"

# 2. The bridge test suite, for real (each test starts its own daemon).
note "running the bridge tests: $tests"
run_tests bridge "$tests"
check_kernel_log "during the tests"

# 3. criu sees the mappings as device VMAs and hands them to the plugin.
start_simd --preset mi210x2
holder=$(start_detached holder env KFD_BRIDGE_HELPER=hold-for-criu "$tests" --exact helper_process_entry --nocapture --test-threads=1)
wait_for "the holder's mappings" 60 grep -q 'HELPER mapped' "$VM_LANE_OUT/holder.out"
grep -E '/dev/(kfd|dri/renderD)' "/proc/$holder/maps" >"$VM_LANE_OUT/holder-maps.txt" || true
note "device mappings of the holder: $(wc -l <"$VM_LANE_OUT/holder-maps.txt")"
grep -q '/dev/kfd$' "$VM_LANE_OUT/holder-maps.txt" || fail "no /dev/kfd mapping in /proc/$holder/maps"
grep -q '/dev/dri/renderD128$' "$VM_LANE_OUT/holder-maps.txt" || fail "no render node mapping in /proc/$holder/maps"
criu_dump "$holder" "$VM_LANE_WORK/holder-images"
grep -q 'supported via device plugins' "$VM_LANE_OUT/criu/holder-images-dump.log" ||
    fail "criu did not hand the device VMAs to the plugin"
note "$(grep -c 'supported via device plugins' "$VM_LANE_OUT/criu/holder-images-dump.log") device VMAs went to the plugin"

# kfd-workload dumped and restored with its device mappings (doorbells, events page, ring and
# staging) through the module: the criu-kfd-mapped* scenarios (same node, remapped, two processes).
stop_simd
check_kernel_log "around criu"

# 5. With everything closed the module unloads.
rmmod kfd_bridge || fail "rmmod kfd_bridge failed with everything closed"
[[ ! -e /dev/kfd-bridge ]] || fail "/dev/kfd-bridge outlived the module"
check_kernel_log "at unload"
pass
