# rocm-rocminfo: Debian's rocminfo (ROCr and libhsakmt 5.2.3 on bookworm) against kfd-simd (two
# simulated MI210s) served through the kfd_bridge module (mmap of /dev/kfd and the render nodes),
# with the simulated sysfs mounted where the kernel puts it (mount_sim_sysfs); then criu with our
# plugin dumps and restores kfd-workload with that sysfs still mounted, which must hide nothing
# criu, the plugin or the guest need.
#
# Through the module rocminfo must list the preset's agents (names, gfx target, compute units)
# and exit 0 (measured: it does; ROCr also asks the ROCm DKMS driver's DBG_TRAP, nr 0x82, which
# 6.1.y answers ENOTTY and kfd-simd logs once). With KFD_ROCM_NO_BRIDGE=1 it runs on plain CUSE,
# which has no mmap: the scenario then asserts the furthest point rocminfo reaches, step by step
# (the module check, /dev/kfd, the topology, libdrm's amdgpu_device_initialize on both render
# nodes, GET_PROCESS_APERTURES_NEW and one ACQUIRE_VM per GPU; the MMIO remap page's mmap of
# /dev/kfd fails with ENODEV and libhsakmt goes on; ROCr's first signal event needs the events
# page, a host-visible GTT allocation mapped through the render node: that mmap fails with ENODEV,
# and ROCr aborts in BindVmFaultHandler, "Failed on creating VM fault signal", SIGABRT).
# shellcheck shell=bash
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"

command -v rocminfo >/dev/null || skip "rocminfo is not installed on the host (apt-get install rocminfo libhsakmt1)"
command -v strace >/dev/null || skip "strace is not installed on the host"

# Through the kfd_bridge module (ci/kmod) when it can be loaded: it gives the device files the
# mmap that ROCr needs (doorbells, the events page, host-visible buffers); plain CUSE without it.
bridge=false
if [[ ${KFD_ROCM_NO_BRIDGE:-} != 1 ]]; then
    need_kmod
    bridge=true
fi
start_simd --preset mi210x2 --sysfs-dir "$KFD_SYSFS"
mount_sim_sysfs
gpus=2

# What libdrm checks before it talks to a render node, through the mounted sysfs.
if $bridge; then class=kfd_bridge; else class=cuse; fi
for minor in 128 129; do
    dev=/sys/dev/char/226:$minor
    [[ $(readlink -f "$dev") == /sys/devices/virtual/$class/* ]] ||
        fail "$dev no longer leads to the $class device: $(readlink -f "$dev")"
    [[ -d $dev/device/drm/renderD$minor ]] || fail "no $dev/device/drm/renderD$minor"
    [[ $(readlink "$dev/device/subsystem") == */pci ]] || fail "$dev/device/subsystem is not PCI"
    grep -q '^PCI_SLOT_NAME=' "$dev/device/uevent" || fail "no PCI_SLOT_NAME in $dev/device/uevent"
done
[[ $(cat /sys/module/amdgpu/initstate) == live ]] || fail "/sys/module/amdgpu/initstate is not live"
[[ -f /sys/class/kfd/kfd/topology/generation_id ]] || fail "no KFD topology under /sys/class/kfd"
lsmod | grep -q '^amdgpu ' || fail "lsmod does not list amdgpu"

rc=0
# Unbuffered: rocminfo may abort, and a full stdio buffer would be lost.
# Only the calls checked below are traced, filtered in the kernel (seccomp-bpf): a full trace
# made rocminfo take over 2 minutes in a busy guest.
timeout -k 5 300 strace -f --seccomp-bpf -e trace=openat,ioctl,mmap -o "$VM_LANE_OUT/rocminfo.strace" \
    stdbuf -o0 rocminfo \
    >"$VM_LANE_OUT/rocminfo.out" 2>"$VM_LANE_OUT/rocminfo.err" || rc=$?
note "rocminfo: status $rc"
trace=$VM_LANE_OUT/rocminfo.strace
out=$VM_LANE_OUT/rocminfo.out
ok_ioctl() { grep -c "ioctl([0-9]*, $1, .*) = 0\$" "$trace" || true; }

grep -q 'ROCk module is loaded' "$out" || fail "rocminfo's module check failed: $(head -n 3 "$out")"
note "step: the amdgpu module is loaded"
grep -q 'openat(AT_FDCWD, "/dev/kfd", O_RDWR.*) = [0-9]' "$trace" || fail "rocminfo did not open /dev/kfd"
(($(ok_ioctl AMDKFD_IOC_GET_VERSION) > 0)) || fail "no successful AMDKFD_IOC_GET_VERSION"
grep -q 'openat(AT_FDCWD, "/sys/devices/virtual/kfd/kfd/topology/nodes/2/properties"' "$trace" ||
    fail "libhsakmt did not read the GPU nodes of the topology"
note "step: /dev/kfd opened, KFD 1.11, topology read"
! grep -q 'DRM_IOCTL_GET_CLIENT' "$trace" || fail "libdrm asked DRM_IOCTL_GET_CLIENT: it did not see a render node"
(($(ok_ioctl DRM_IOCTL_VERSION) >= 2 * gpus)) || fail "libdrm got no DRM version from every render node"
(($(ok_ioctl 'DRM_IOCTL_AMDGPU_INFO[^,]*') >= 3 * gpus)) || fail "libdrm's AMDGPU_INFO queries failed"
note "step: amdgpu_device_initialize on both render nodes (DRM VERSION, AMDGPU_INFO)"
(($(ok_ioctl AMDKFD_IOC_GET_PROCESS_APERTURES_NEW) > 0)) || fail "no GET_PROCESS_APERTURES_NEW"
# Every GPU's VM acquired, each call answered 0: ROCr 6.4 (forky, under rocminfo 7.2) opens its
# KFD process twice and acquires each GPU's VM again through the same render-node file, which the
# driver accepts (a second ACQUIRE_VM of the same file is 0; of another file, EBUSY).
acquired=$(ok_ioctl AMDKFD_IOC_ACQUIRE_VM)
((acquired >= gpus && acquired % gpus == 0)) || fail "$acquired ACQUIRE_VM answered 0 for $gpus GPUs"
! grep -q 'AMDKFD_IOC_ACQUIRE_VM, .*) = -1' "$trace" || fail "an ACQUIRE_VM failed: $(grep 'AMDKFD_IOC_ACQUIRE_VM, .*) = -1' "$trace" | head -n 1)"
note "step: apertures, every GPU's VM acquired ($acquired ACQUIRE_VM for $gpus GPUs)"
! grep -q 'kfd-sim: not simulated' "$VM_LANE_OUT/simd.err" ||
    fail "rocminfo issued requests kfd-simd does not answer: $(grep 'not simulated' "$VM_LANE_OUT/simd.err")"

if $bridge && ((rc != 0)); then
    fail "rocminfo failed (status $rc) with mmap through kfd_bridge: $(tail -n 3 "$VM_LANE_OUT/rocminfo.err")"
elif ((rc == 0)); then
    # The whole of rocminfo: every GPU agent of the preset, with its target and compute units.
    [[ $(grep -c '^  Name: *gfx90a' "$out") == "$gpus" ]] || fail "rocminfo does not list $gpus gfx90a agents"
    [[ $(grep -c '^  Compute Unit: *104' "$out") == "$gpus" ]] || fail "rocminfo does not list 104 CUs per GPU"
    [[ $(grep -c '^  Marketing Name: *AMD Instinct MI210' "$out") == "$gpus" ]] ||
        fail "rocminfo does not name $gpus AMD Instinct MI210"
    [[ $(grep -c 'Name: *amdgcn-amd-amdhsa--gfx90a' "$out") == "$gpus" ]] ||
        fail "rocminfo does not list the gfx90a ISA of each GPU"
    note "rocminfo lists the preset's agents"
else
    maps=$(grep 'mmap(.*MAP_SHARED.*) = -1 ENODEV' "$trace" || true)
    [[ -n $maps ]] || fail "rocminfo failed (status $rc) before any device mmap: $(tail -n 3 "$VM_LANE_OUT/rocminfo.err")"
    # The device files' fds: /dev/kfd, and the render nodes libhsakmt keeps open.
    kfd_fd=$(sed -n 's#.*openat(AT_FDCWD, "/dev/kfd", O_RDWR|O_CLOEXEC) = \([0-9]*\)$#\1#p' "$trace" | head -n 1)
    render_fds=$(sed -n 's#.*openat(AT_FDCWD, "/dev/dri/renderD[0-9]*", O_RDWR|O_CLOEXEC) = \([0-9]*\)$#\1#p' "$trace" | sort -u)
    fd_of() { sed 's/.*MAP_FIXED, \([0-9]*\), .*/\1/' <<<"$1"; }
    first=$(head -n 1 <<<"$maps") last=$(tail -n 1 <<<"$maps")
    [[ $(fd_of "$first") == "$kfd_fd" ]] || fail "the first failed mmap is not of /dev/kfd: $first"
    note "step: the MMIO remap page's mmap of /dev/kfd fails (ENODEV); libhsakmt goes on without it"
    grep -qx "$(fd_of "$last")" <<<"$render_fds" || fail "the last failed mmap is not of a render node: $last"
    note "stops at the events page's mmap of a render node: ${last#* }"
    grep -q 'Failed on creating VM fault signal' "$VM_LANE_OUT/rocminfo.err" ||
        fail "rocminfo failed (status $rc) elsewhere: $(tail -n 3 "$VM_LANE_OUT/rocminfo.err")"
    ((rc == 134)) || fail "rocminfo ended with status $rc, not SIGABRT"
    note "stops: ROCr's first signal event needs a mapped events page (BindVmFaultHandler, SIGABRT)"
fi

# The simulated sysfs hides nothing criu and the plugin need: a dump and restore still work.
start_workload
dump_workload
criu_restore "$IMAGES"
verify_restored
pass
