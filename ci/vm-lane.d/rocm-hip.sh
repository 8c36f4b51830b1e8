# rocm-hip: a HIP program of ours (ci/rocm/hip-probe.cpp, no kernel launch), built here with
# Debian's hipcc (hipcc and libamdhip64-dev on the host root the guest shares; not installed by
# .ci/run: they pull clang-15 and LLVM, about 350 MB), runs on kfd-simd served through the
# kfd_bridge module with the simulated sysfs mounted: hipInit, the device's properties, hipMalloc,
# hipHostMalloc, hipMemcpy host -> device -> device -> host.
#
# Where it stops (measured with HIP 5.2.3 on bookworm): the first hipMemcpy (host -> device, from
# pinned memory). By then HIP has created two AQL compute queues and no SDMA queue; it copies with
# a blit kernel: a KERNEL_DISPATCH packet rung on an AQL queue (kfd-simd names the packets rung on
# AQL queues), which the simulator cannot execute (no command processor, no shader code): the copy
# never completes. The scenario asserts that stop (the probe's 30 s alarm) after hipInit, the
# device's properties and the allocations, and the kernel dispatch. No criu cycle: a HIP process
# is held nowhere useful before the stop.
#
# Guest-agnostic: it skips where hipcc is not installed.
# shellcheck shell=bash
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"

command -v hipcc >/dev/null || skip "hipcc is not installed on the host (apt-get install hipcc libamdhip64-dev)"
note "HIP $(dpkg-query -W -f '${Version}' libamdhip64-5 2>/dev/null)"

probe=$VM_LANE_WORK/hip-probe
if [[ -n ${KFD_HIP_PROBE:-} ]]; then
    # Built on the host with the same hipcc (the guest shares the host's root) in seconds, at a
    # path the guest sees (the repository's; the guest's /tmp is its own):
    #   hipcc -O1 --offload-arch=gfx90a -o target/hip-probe ci/rocm/hip-probe.cpp
    [[ -x $KFD_HIP_PROBE ]] || fail "KFD_HIP_PROBE=$KFD_HIP_PROBE is not an executable the guest sees"
    [[ $KFD_HIP_PROBE -nt $VM_LANE_REPO/ci/rocm/hip-probe.cpp && $KFD_HIP_PROBE -nt $VM_LANE_REPO/ci/rocm/probe.h ]] ||
        fail "KFD_HIP_PROBE=$KFD_HIP_PROBE is older than ci/rocm/hip-probe.cpp or probe.h: build it again"
    cp "$KFD_HIP_PROBE" "$probe"
    note "hip-probe built on the host ($KFD_HIP_PROBE)"
else
    # --offload-arch: hipcc would otherwise ask rocm_agent_enumerator, which reads the real
    # topology. hipcc in the TCG guest took 290 s at load 15 and over 600 s at load 18.
    hrc=0
    timeout 1500 hipcc -O1 --offload-arch=gfx90a -o "$probe" "$VM_LANE_REPO/ci/rocm/hip-probe.cpp" \
        2>"$VM_LANE_OUT/hipcc.err" || hrc=$?
    ((hrc != 124)) || fail "building hip-probe took over 1500 s"
    ((hrc == 0)) || fail "building hip-probe failed (status $hrc): $(head -n 5 "$VM_LANE_OUT/hipcc.err")"
    note "hip-probe built"
fi

need_kmod
start_simd --preset mi210x2 --sysfs-dir "$KFD_SYSFS"
mount_sim_sysfs

steps() { sed -n 's/^STEP \([^ ]*\) ok.*/\1/p' "$1" | paste -sd ' '; }
rc=0
timeout -k 5 300 strace -f --seccomp-bpf -e 'trace=openat,ioctl,mmap' -o "$VM_LANE_OUT/probe.strace" \
    "$probe" >"$VM_LANE_OUT/probe.out" 2>"$VM_LANE_OUT/probe.err" || rc=$?
note "hip-probe: status $rc; steps: $(steps "$VM_LANE_OUT/probe.out")"
grep '^STEP init' "$VM_LANE_OUT/probe.out" | while read -r line; do note "$line"; done
grep '^STOP' "$VM_LANE_OUT/probe.out" | while read -r line; do note "$line"; done
grep -E 'not simulated|hung|logged once|queue [0-9]* created' "$VM_LANE_OUT/simd.err" |
    while read -r line; do note "kfd-simd: $line"; done
! grep -q 'kfd-sim: not simulated' "$VM_LANE_OUT/simd.err" ||
    fail "hip-probe issued requests kfd-simd does not answer: $(grep 'not simulated' "$VM_LANE_OUT/simd.err")"
grep -q '^STEP init ok: 2 devices; device 0: AMD Instinct MI210, gfx90a.*, 104 CUs' "$VM_LANE_OUT/probe.out" ||
    fail "HIP does not see the preset's two MI210s: $(grep -E '^(STEP init|STOP)' "$VM_LANE_OUT/probe.out")"
[[ $(steps "$VM_LANE_OUT/probe.out") == "init malloc"* ]] ||
    fail "hip-probe stopped before its first copy: $(grep '^STOP' "$VM_LANE_OUT/probe.out" || tail -n 3 "$VM_LANE_OUT/probe.err")"
note "HIP: hipInit, device properties, hipMalloc, hipHostMalloc"
if ((rc == 0)); then
    fail "hip-probe's copies completed, which the simulator cannot do (no AQL packet processing): update the scenario and the README"
fi
grep -q '^STOP h2d: no completion within' "$VM_LANE_OUT/probe.out" ||
    fail "hip-probe stopped elsewhere: $(grep '^STOP' "$VM_LANE_OUT/probe.out")"
grep -q 'queue [0-9]* created .*: compute AQL' "$VM_LANE_OUT/simd.err" ||
    fail "hipMemcpy did not complete, yet HIP created no AQL queue"
grep -q 'AQL queue [0-9]* rung for a KERNEL_DISPATCH packet' "$VM_LANE_OUT/simd.err" ||
    fail "hipMemcpy did not complete, yet HIP rang no kernel dispatch on an AQL queue"
note "stops at the first hipMemcpy: HIP copies with a blit kernel dispatched on its AQL queue, which nothing executes"
pass
