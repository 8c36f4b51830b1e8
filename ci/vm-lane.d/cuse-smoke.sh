# cuse-smoke: the guest kernel offers CUSE (the host's does not), so a userspace server can create
# character devices such as /dev/kfd. A tiny perl server (cuse-hello.pl) stands in for kfd-simd.
# shellcheck source=lib.sh
. "$VM_LANE_LIB"

[[ -d /sys/module/cuse ]] || fail "the cuse module is not loaded"
[[ -c /dev/cuse ]] || fail "/dev/cuse is missing or not a character device"
# CUSE's control device is misc 10:203.
numbers=$(stat -c '%t:%T' /dev/cuse)
[[ $numbers == a:cb ]] || fail "/dev/cuse has device numbers $numbers (hex), want a:cb (10:203)"
note "$(ls -l /dev/cuse)"

dev=/dev/vmlane-hello
start_detached cuse-hello perl "$VM_LANE_REPO/ci/vm-lane.d/cuse-hello.pl" "${dev#/dev/}" >/dev/null
wait_for "$dev to appear" 30 test -c "$dev"
note "$(ls -l "$dev")"
# A CUSE device shows in sysfs under the cuse class.
sysfs=$(readlink -f "/sys/dev/char/$(stat -c '%Hr:%Lr' "$dev")")
[[ $sysfs == */virtual/cuse/* ]] || fail "$dev is not CUSE-served (sysfs: $sysfs)"
got=$(dd if="$dev" bs=64 count=1 status=none)
[[ $got == "hello from cuse" ]] || fail "read from $dev gave '$got'"
note "read from $dev: $got"
pass
