# rocm-hsa: a C program of ours (ci/rocm/hsa-probe.c), built here against Debian's ROCr
# (libhsa-runtime-dev on the host root the guest shares), runs on kfd-simd served through the
# kfd_bridge module with the simulated sysfs mounted where the kernel puts it: hsa_init, the agents,
# their memory pools, VRAM and host buffers from hsa_amd_memory_pool_allocate, and a round trip
# host -> VRAM -> host with hsa_amd_memory_async_copy, which ROCr runs on its SDMA queues (gfx9):
# kfd-simd's user-mode queue engine executes ROCr's packets (HDP flush, copy, ATOMIC decrement of
# the completion signal, FENCE + TRAP of its event).
#
# Where it stops: hsa_memory_copy. ROCr copies there with a blit kernel (a dispatch of its copy
# shader on an AQL compute queue it creates then); the simulator creates the queue as the driver
# does and names the KERNEL_DISPATCH packet rung on it, but has no command processor and cannot
# run shader code, so the copy never completes. The
# scenario asserts exactly that stop (the probe's alarm after 20 s), then real criu dumps a probe
# that holds ROCr's state (its SDMA queues, signals, events, VRAM and host buffers) and restores
# it, on the same node and on one with other gpu ids; the restored probe checks its buffers and
# makes a new round trip through the restored SDMA queues, frees everything and shuts ROCr down.
#
# shellcheck shell=bash
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"
# shellcheck source=rocm.inc
. "$VM_LANE_REPO/ci/vm-lane.d/rocm.inc"

command -v gcc >/dev/null || skip "no gcc on the host root"
[[ -f /usr/include/hsa/hsa.h ]] ||
    skip "libhsa-runtime-dev is not installed on the host (apt-get install libhsa-runtime-dev)"
note "ROCr $(dpkg-query -W -f '${Version}' libhsa-runtime64-1 2>/dev/null)"

probe=$VM_LANE_WORK/hsa-probe
gcc -O1 -Wall -Wextra -Werror -o "$probe" "$VM_LANE_REPO/ci/rocm/hsa-probe.c" -lhsa-runtime64 \
    2>"$VM_LANE_OUT/gcc.err" ||
    fail "building hsa-probe failed: $(head -n 5 "$VM_LANE_OUT/gcc.err")"

start_probe_simd

# 1. The whole probe once: everything up to hsa_memory_copy, where it must stop.
rc=0
timeout -k 5 180 strace -f --seccomp-bpf -e 'trace=openat,ioctl,mmap' -o "$VM_LANE_OUT/probe.strace" \
    "$probe" >"$VM_LANE_OUT/probe.out" 2>"$VM_LANE_OUT/probe.err" || rc=$?
note "hsa-probe: status $rc; steps: $(probe_steps "$VM_LANE_OUT/probe.out")"
grep '^GPU agent' "$VM_LANE_OUT/probe.out" | while read -r line; do note "$line"; done
! grep -q 'kfd-sim: not simulated' "$VM_LANE_OUT/simd.err" ||
    fail "hsa-probe issued requests kfd-simd does not answer: $(grep 'not simulated' "$VM_LANE_OUT/simd.err")"
! grep -q 'SDMA queue .* hung' "$VM_LANE_OUT/simd.err" ||
    fail "an SDMA queue of ROCr hung: $(grep 'SDMA queue .* hung' "$VM_LANE_OUT/simd.err")"
[[ $(grep -c '^GPU agent .*: gfx90a, AMD Instinct MI210, 104 CUs' "$VM_LANE_OUT/probe.out") == 2 ]] ||
    fail "ROCr does not see the preset's two MI210s"
[[ $(probe_steps "$VM_LANE_OUT/probe.out") == "init agents pools alloc h2d d2h" ]] ||
    fail "hsa-probe stopped before hsa_memory_copy: $(grep '^STOP' "$VM_LANE_OUT/probe.out" || tail -n 3 "$VM_LANE_OUT/probe.err")"
note "ROCr: hsa_init, agents, pools, allocations, SDMA copies host -> VRAM -> host"
if ((rc == 0)); then
    note "hsa_memory_copy completed: the scenario's expected stop is gone, update it and the README"
    fail "hsa_memory_copy completed, which the simulator cannot do (no shader execution)"
fi
grep -q '^STOP memcpy: no completion within' "$VM_LANE_OUT/probe.out" ||
    fail "hsa-probe stopped elsewhere: $(grep '^STOP' "$VM_LANE_OUT/probe.out")"
grep 'queue [0-9]* created' "$VM_LANE_OUT/simd.err" | while read -r line; do note "kfd-simd: $line"; done
grep -q 'queue [0-9]* created .*: compute AQL' "$VM_LANE_OUT/simd.err" ||
    fail "hsa_memory_copy did not complete, yet ROCr created no AQL queue for its blit kernel"
grep -q 'AQL queue [0-9]* rung for a KERNEL_DISPATCH packet' "$VM_LANE_OUT/simd.err" ||
    fail "hsa_memory_copy did not complete, yet ROCr rang no kernel dispatch on its AQL queue"
note "stops at hsa_memory_copy: ROCr's blit kernel, dispatched on an AQL queue, never completes (no shader execution)"

# 2. criu dumps a probe holding ROCr's state and restores it; the restored probe copies again.
probe_cycle held 120 "$probe" --no-memory-copy
probe_cycle remapped 120 --between probe_remap_node "$probe" --no-memory-copy
pass
