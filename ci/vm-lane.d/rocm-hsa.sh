# rocm-hsa: a C program of ours (ci/rocm/hsa-probe.c), built here against Debian's ROCr
# (libhsa-runtime-dev on the host root the guest shares), runs on kfd-simd served through the
# kfd_bridge module with the simulated sysfs mounted where the kernel puts it: hsa_init, the agents,
# their memory pools, VRAM and host buffers from hsa_amd_memory_pool_allocate, and a round trip
# host -> VRAM -> host with hsa_amd_memory_async_copy, which ROCr runs on its SDMA queues (gfx9):
# kfd-simd's user-mode queue engine executes ROCr's packets (HDP flush, copy, ATOMIC decrement of
# the completion signal, FENCE + TRAP of its event).
#
# Then hsa_memory_copy host -> VRAM -> host: ROCr copies there with a blit kernel (a dispatch of
# its copy shader on an AQL compute queue it creates then), which kfd-simd's command processor
# runs on its gfx90a shader core; the probe checks the bytes, frees everything and shuts ROCr
# down. Then real criu dumps a probe that holds ROCr's state (its SDMA queues, signals, events,
# VRAM and host buffers) and restores it, on the same node and on one with other gpu ids; the
# restored probe checks its buffers and makes a new round trip through the restored SDMA queues.
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

# 1. The whole probe once, hsa_memory_copy's blit kernel included.
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
[[ $(probe_steps "$VM_LANE_OUT/probe.out") == "init agents pools alloc h2d d2h memcpy free shutdown" ]] ||
    fail "hsa-probe stopped: $(grep '^STOP' "$VM_LANE_OUT/probe.out" || tail -n 3 "$VM_LANE_OUT/probe.err")"
((rc == 0)) || fail "hsa-probe exited with status $rc"
note "ROCr: hsa_init, agents, pools, allocations, SDMA copies host -> VRAM -> host"
grep 'queue [0-9]* created' "$VM_LANE_OUT/simd.err" | while read -r line; do note "kfd-simd: $line"; done
grep -q 'queue [0-9]* created .*: compute AQL' "$VM_LANE_OUT/simd.err" ||
    fail "hsa_memory_copy completed, yet ROCr created no AQL queue for its blit kernel"
grep 'logged once' "$VM_LANE_OUT/simd.err" | while read -r line; do note "kfd-simd: $line"; done
! grep -q 'AQL queue [0-9]*: .*queue error' "$VM_LANE_OUT/simd.err" ||
    fail "an AQL queue of ROCr stopped: $(grep 'queue error' "$VM_LANE_OUT/simd.err")"
note "hsa_memory_copy: 1 MiB host -> VRAM -> host by ROCr's blit kernel on kfd-simd's command processor, checked"

# 2. criu dumps a probe holding ROCr's state and restores it; the restored probe copies again.
probe_cycle held 120 "$probe" --no-memory-copy
probe_cycle remapped 120 --between probe_remap_node "$probe" --no-memory-copy
pass
