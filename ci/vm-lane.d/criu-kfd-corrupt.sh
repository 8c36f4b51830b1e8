# criu-kfd-corrupt: one bit of a pages file is flipped after the dump; criu restore fails with the
# plugin's reason (a checksum mismatch naming the file) in its log, and nothing of the
# half-restored process is left on the node: kfd-simd releases its KFD process and every GPU's
# VRAM is free again (kfd-simd logs each release at info). Then, with the pages file mended, four
# bytes of the KFD image are overwritten where the message still decodes: criu restore fails
# again, the plugin naming the damaged image (its own checksum, field 101), before it opens
# /dev/kfd.
# shellcheck source=lib.sh
. "$VM_LANE_LIB"
# shellcheck source=kfd.inc
. "$VM_LANE_REPO/ci/vm-lane.d/kfd.inc"

start_simd --preset mi210x2
start_workload
dump_workload
pages=$(find "$IMAGES" -name 'amdgpu-pages-*.img' | sort | head -n 1)
[[ -n $pages ]] || fail "no pages file"
# One bit of the first data byte past 1 MiB (inside the first buffer's contents).
offset=$((1024 * 1024 + 17))
byte=$(od -An -tu1 -j "$offset" -N 1 "$pages" | tr -d ' ')
printf "$(printf '\\%03o' $((byte ^ 1)))" | dd of="$pages" bs=1 seek="$offset" conv=notrunc status=none
note "flipped bit 0 of byte $offset of ${pages##*/}"
# The dumped process's KFD process goes when its files are released; wait for that first, so
# that the release seen after the restore is the half-restored process's.
wait_for "kfd-simd to release the dumped process" 15 \
    grep -q "kfd-sim: pid $WORKLOAD_PID: KFD process released" "$VM_LANE_OUT/simd.err"
seen=$(wc -l <"$VM_LANE_OUT/simd.err")
rc=0
criu_run restore "$IMAGES" -d || rc=$?
((rc != 0)) || fail "criu restored a corrupt image"
log=$VM_LANE_OUT/criu/images-restore.log
grep -q "amdgpu_plugin: .*checksum.*${pages##*/}\|amdgpu_plugin: .*${pages##*/}.*checksum" "$log" ||
    fail "the plugin's reason (checksum of ${pages##*/}) is not in criu's log"
note "$(grep -m 1 "amdgpu_plugin: .*${pages##*/}" "$log")"
released() {
    tail -n +"$((seen + 1))" "$VM_LANE_OUT/simd.err" |
        grep -q "kfd-sim: pid $WORKLOAD_PID: KFD process released"
}
wait_for "kfd-simd to release the half-restored process" 15 released
line=$(tail -n +"$((seen + 1))" "$VM_LANE_OUT/simd.err" |
    grep "kfd-sim: pid $WORKLOAD_PID: KFD process released" | tail -n 1)
note "kfd-simd: $line"
in_use=${line##*VRAM in use: }
[[ -z $(tr ',' '\n' <<<"$in_use" | awk -F': ' '$2 != 0') ]] || fail "VRAM still in use: $in_use"

# The pages file mended, the KFD image damaged: four bytes at offset 200, inside the first GPU's
# device entry (the message still decodes: before the image checksum, such an image restored
# with a wrong VRAM size or firmware version).
printf "$(printf '\\%03o' "$byte")" | dd of="$pages" bs=1 seek="$offset" conv=notrunc status=none
kfd=$(find "$IMAGES" -name 'amdgpu-kfd-*.img' | sort | head -n 1)
[[ -n $kfd ]] || fail "no KFD image"
printf '\336\255\276\357' | dd of="$kfd" bs=1 seek=200 conv=notrunc status=none
note "overwrote bytes 200-203 of ${kfd##*/}"
rc=0
criu_run restore "$IMAGES" -d || rc=$?
((rc != 0)) || fail "criu restored a damaged KFD image"
grep -q "amdgpu_plugin: .*image file ${kfd##*/} is damaged" "$log" ||
    fail "the plugin's reason (image file ${kfd##*/} is damaged) is not in criu's log"
note "$(grep -m 1 "amdgpu_plugin: .*${kfd##*/} is damaged" "$log")"
pass
