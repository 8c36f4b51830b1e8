# Helpers for VM lane scenarios; a scenario starts with
#     . "$VM_LANE_LIB"
# It runs in the guest as root, with `set -euo pipefail` (set here), cwd $VM_LANE_WORK, and:
#   VM_LANE_SCENARIO    its name
#   VM_LANE_WORK        guest-local scratch directory (tmpfs), e.g. for criu images
#   VM_LANE_OUT         results directory shared with the host: logs put here are shown on failure
#   VM_LANE_REPO        the repository (read-only, as on the host)
#   VM_LANE_PLUGIN_DIR  directory holding amdgpu_plugin.so (--plugin-dir), or empty; the criu
#                       helpers below pass it as -L
#   VM_LANE_BIN_DIR     directory holding kfd-simd, kfd-workload (--bin-dir), or empty
#   VM_LANE_LIB         this file
#   VM_LANE_SCENARIO_TIMEOUT  seconds the scenario may take before it is terminated
#   VM_LANE_GUEST       the guest it runs on: bookworm or trixie
#   VM_LANE_CRIU_VERSION  that guest's criu version, e.g. 3.17.1 or 4.1.1
#   VM_LANE_GUESTS      the guests of this ci/vm-lane run, which run side by side
#   VM_LANE_CARRY       a directory shared by the guests of one ci/vm-lane run: what a scenario
#                       leaves there on one guest is there on the others (see wait_for_guest)
#   VM_LANE_KMOD_DIR    where the lane put the kfd_bridge module it built for this guest's kernel
#                       (see need_kmod)
#   VM_LANE_ROCM_DIR    where the lane put the programs of ci/rocm it built for this guest's
#                       release (see need_rocm_programs)
#   VM_LANE_UPSTREAM    what the lane says of upstream's criu builds for this guest (upstream.inc's
#                       need_upstream reads it)
#   KFD_*               passed through from the host's environment
# A scenario may set CRIU_BIN (default `criu`, the guest's own) to run another criu build through
# the criu_* helpers (upstream.inc does).
# Helpers: note, pass, fail, skip, start_detached, wait_for, criu_run, criu_dump, criu_restore,
# need_bin, need_kmod, need_rocm_programs, need_guest, need_criu, criu_at_least, wait_for_guest
# (each described where it is defined). A scenario that exits 0 without calling pass passes; any
# other exit fails it.
# shellcheck shell=bash
set -euo pipefail

: "${VM_LANE_SCENARIO:?run scenarios through ci/vm-lane}"

# Prints a timestamped line to the scenario's output (output.log, shown on failure).
note() { printf '[%6.1fs] %s\n' "$(awk '{print $1}' /proc/uptime)" "$*"; }

_record() { printf '%s\n' "$*" >"$VM_LANE_OUT/status"; }

# Ends the scenario: pass [NOTE], fail MESSAGE, or skip REASON (a skip does not fail the lane). The
# lane's report prints the note, message or reason after the scenario's name.
pass() { note "PASS${1:+: $*}"; _record "PASS${1:+ $*}"; exit 0; }
fail() { note "FAIL: $*"; _record "FAIL $*"; exit 1; }
skip() { note "SKIP: $*"; _record "SKIP $*"; exit 0; }

# An unexpected error (set -e) still says where it happened: the ERR trap notes the first failing
# command's place, the EXIT trap records it unless the scenario recorded a result itself.
_vm_lane_err=
_on_err() { [[ -n $_vm_lane_err ]] || _vm_lane_err="$1:$2: $3"; }
_on_exit() {
    local rc=$1
    ((rc == 0)) || [[ -s $VM_LANE_OUT/status ]] || _record "FAIL status $rc at ${_vm_lane_err:-unknown place}"
}
set -E
trap '_on_err "${BASH_SOURCE[0]##*/}" "$LINENO" "$BASH_COMMAND"' ERR
trap '_on_exit $?' EXIT
# The guest script's per-scenario timeout sends SIGTERM.
trap 'fail "terminated: over the scenario time limit (${VM_LANE_SCENARIO_TIMEOUT:-?}s)"' TERM

# start_detached NAME CMD [ARGS...]: starts CMD as a session leader with stdio on files
# ($VM_LANE_OUT/NAME.out, NAME.err) and stdin from /dev/null, as criu wants for a process tree it
# dumps; prints its pid. The process is killed when the scenario ends.
start_detached() {
    local name=$1 pidfile=$VM_LANE_WORK/$1.pid
    shift
    rm -f "$pidfile"
    # setsid forks when its caller leads a process group; the pid file names the real process.
    # shellcheck disable=SC2016 # $$ and $@ belong to the inner shell
    setsid bash -c 'echo $$ >"$0"; exec "$@"' "$pidfile" "$@" \
        </dev/null >"$VM_LANE_OUT/$name.out" 2>"$VM_LANE_OUT/$name.err" &
    wait_for "pid file of $name" 10 test -s "$pidfile"
    local pid
    pid=$(cat "$pidfile")
    echo "$pid" >>"$VM_LANE_WORK/pids"
    echo "$name $pid" >>"$VM_LANE_WORK/named-pids"
    echo "$pid"
}

# stacks: the threads' stacks of every process start_detached started that still runs, each in
# $VM_LANE_OUT/NAME-PID.stacks (gdb's backtraces where gdb is installed, else the kernel's wait
# channel per thread), for a scenario that timed out waiting on one of them. A restored process
# keeps its pid, so the workload criu restored is among them.
stacks() {
    local name pid t
    [[ -s $VM_LANE_WORK/named-pids ]] || return 0
    while read -r name pid; do
        kill -0 "$pid" 2>/dev/null || continue
        {
            for t in /proc/"$pid"/task/*; do
                printf '%s %s: %s in %s\n' "${t##*/}" "$(cat "$t/comm" 2>/dev/null)" \
                    "$(awk '/^State/ {print $2}' "$t/status" 2>/dev/null)" "$(cat "$t/wchan" 2>/dev/null)"
            done
            if command -v gdb >/dev/null; then
                timeout -k 5 120 gdb -nx -batch -p "$pid" -ex 'thread apply all bt 10' 2>&1 |
                    grep -E '^(Thread|#)' || true
            fi
        } >"$VM_LANE_OUT/$name-$pid.stacks" 2>&1
    done < <(sort -u "$VM_LANE_WORK/named-pids")
}

# wait_for WHAT SECONDS CMD [ARGS...]: polls CMD every 0.1 s until it succeeds; fails after
# SECONDS * 10 polls. The polls are counted, not the clock: in a loaded guest each poll takes
# longer and the wait stretches with it (the failure says how long it took).
wait_for() {
    local what=$1 limit=$2 i t0=$SECONDS
    shift 2
    for ((i = 0; i < limit * 10; i++)); do
        "$@" && return 0
        sleep 0.1
    done
    stacks
    fail "timed out after ${limit}s waiting for $what ($((SECONDS - t0))s of wall time)"
}

# released_since LINE PID: kfd-simd released the KFD process of PID after line LINE of its log
# (0: anywhere in it), with all VRAM free again.
released_since() {
    local seen=$1 pid=$2 line
    _released() { tail -n +"$((seen + 1))" "$VM_LANE_OUT/simd.err" | grep -q "kfd-sim: pid $pid: KFD process released"; }
    wait_for "kfd-simd to release pid $pid" 30 _released
    line=$(tail -n +"$((seen + 1))" "$VM_LANE_OUT/simd.err" | grep "kfd-sim: pid $pid: KFD process released" | tail -n 1)
    note "kfd-simd: $line"
    local in_use=${line##*VRAM in use: }
    [[ -z $(tr ',' '\n' <<<"$in_use" | awk -F': ' '$2 != 0') ]] || fail "VRAM still in use: $in_use"
}

# run_tests NAME BINARY: runs a test binary of the workspace in the guest, one test at a time
# (each starts its own daemon); fails unless every test the binary lists ran and passed, none
# skipped for want of what the guest has.
run_tests() {
    local name=$1 bin=$2 rc=0 want
    KFD_SIMD_LOG=warn "$bin" --test-threads=1 --nocapture >"$VM_LANE_OUT/tests.out" 2>&1 || rc=$?
    tail -n 20 "$VM_LANE_OUT/tests.out"
    ((rc == 0)) || fail "the $name tests failed (status $rc, tests.out)"
    ! grep -q '^SKIPPED' "$VM_LANE_OUT/tests.out" || fail "the $name tests were skipped in the guest"
    want=$("$bin" --list 2>/dev/null | grep -c ': test$')
    grep -q "test result: ok. $want passed" "$VM_LANE_OUT/tests.out" || fail "not all $want $name tests ran"
}

# criu_run ACTION DIR [ARGS...]: runs `criu ACTION -D DIR` with a verbose log, copies the log to
# $VM_LANE_OUT/criu/ and returns criu's status (for scenarios where criu is expected to fail).
criu_run() {
    local action=$1 dir=$2 rc=0 common=()
    shift 2
    mkdir -p "$dir" "$VM_LANE_OUT/criu"
    # Every criu call loads the plugins of --plugin-dir, when the lane was given one.
    [[ -z ${VM_LANE_PLUGIN_DIR:-} ]] || common=(-L "$VM_LANE_PLUGIN_DIR")
    note "${CRIU_BIN:-criu} $action -D $dir ${common[*]} $*"
    "${CRIU_BIN:-criu}" "$action" -D "$dir" -o "$action.log" -v4 "${common[@]}" "$@" || rc=$?
    cp "$dir/$action.log" "$VM_LANE_OUT/criu/$(basename "$dir")-$action.log" 2>/dev/null || true
    note "criu $action: status $rc"
    return "$rc"
}

# criu_dump PID DIR [ARGS...]: dumps the tree rooted at PID into DIR (criu kills it, as by default).
criu_dump() {
    local pid=$1 dir=$2
    shift 2
    criu_run dump "$dir" -t "$pid" "$@" || fail "criu dump of $pid failed"
}

# criu_restore DIR [ARGS...]: restores DIR detached (-d); the restored tree keeps its pids.
criu_restore() {
    local dir=$1
    shift
    criu_run restore "$dir" -d "$@" || fail "criu restore from $dir failed"
}

# need_kmod: loads the kfd_bridge module (ci/kmod) for the running kernel: the one the lane built
# on the host ($VM_LANE_KMOD_DIR/<uname -r>/kfd_bridge.ko), else one built here with
# ci/kmod/build.sh (a guest root with that kernel's headers and a compiler). Fails the scenario
# when there is none, with the host's reason. Sets KMOD_FILE; the guest runner unloads the module
# after the scenario. (ci/vm-lane builds the module only for scenarios that call need_kmod.)
need_kmod() {
    local kver ko
    kver=$(uname -r)
    ko=${VM_LANE_KMOD_DIR:-/nonexistent}/$kver/kfd_bridge.ko
    if [[ ! -f $ko ]]; then
        note "no prebuilt kfd_bridge.ko for $kver; building it here"
        ko=$("$VM_LANE_REPO/ci/kmod/build.sh" --out "$VM_LANE_WORK/kmod" "$kver" 2>"$VM_LANE_OUT/kmod-build.err") ||
            fail "no kfd_bridge module for $kver: $(cat "${VM_LANE_KMOD_DIR:-/nonexistent}/error" 2>/dev/null ||
                tail -n 3 "$VM_LANE_OUT/kmod-build.err")"
    fi
    if [[ ! -e /sys/module/kfd_bridge ]]; then
        insmod "$ko" || fail "insmod $ko failed"
    fi
    wait_for "/dev/kfd-bridge" 10 test -c /dev/kfd-bridge
    KMOD_FILE=$ko
}

# need_rocm_programs NAME...: the programs of ci/rocm (and hsa-kernels.co) that ci/rocm/build.sh
# built on the host for this guest's release, once and cached (ci/vm-lane builds them only for
# scenarios that call need_rocm_programs). Sets ROCM_PROGRAMS to their directory. Fails the
# scenario when the build failed (with the host's reason); skips it when one could not be built
# for want of a tool (hipcc not installed on the host, say), with that reason.
need_rocm_programs() {
    local dir=${VM_LANE_ROCM_DIR:-/nonexistent} name why
    [[ ! -f $dir/error ]] || fail "the programs of ci/rocm were not built: $(cat "$dir/error")"
    for name; do
        why=$(grep -m 1 "^$name: " "$dir/missing" 2>/dev/null) || why=
        [[ -z $why ]] || skip "$why"
        [[ -e $dir/$name ]] || fail "ci/vm-lane built no $name for this guest ($dir)"
    done
    note "ci/rocm programs built on the host with: $(paste -sd, "$dir/toolchain" | sed 's/,/, /g')"
    ROCM_PROGRAMS=$dir
}

# need_bin NAME...: skips the scenario unless each NAME is an executable in --bin-dir; use them as
# "$VM_LANE_BIN_DIR/NAME".
need_bin() {
    local name
    for name; do
        [[ -n ${VM_LANE_BIN_DIR:-} && -x $VM_LANE_BIN_DIR/$name ]] || skip "no $name (pass --bin-dir)"
    done
}

# need_guest NAME...: skips the scenario unless it runs on one of the guests NAME.
need_guest() {
    local g
    for g; do [[ $g == "$VM_LANE_GUEST" ]] && return 0; done
    skip "needs the $* guest (this is $VM_LANE_GUEST, criu $VM_LANE_CRIU_VERSION)"
}

# criu_at_least VERSION: the guest's criu is VERSION (e.g. 4.1) or newer.
criu_at_least() {
    [[ $(printf '%s\n%s\n' "$1" "$VM_LANE_CRIU_VERSION" | sort -V | head -n 1) == "$1" ]]
}

# need_criu VERSION: skips the scenario unless the guest's criu is VERSION or newer.
need_criu() {
    criu_at_least "$1" || skip "needs criu >= $1 (this is $VM_LANE_GUEST, criu $VM_LANE_CRIU_VERSION)"
}

# wait_for_guest GUEST SCENARIO [SECONDS]: waits until GUEST, which runs beside this guest, has
# finished SCENARIO (or has stopped), so that what it left in $VM_LANE_CARRY is there; at most
# SECONDS (default: the scenario's time limit less 2 minutes, for the scenario's own work).
# Returns 1 at once when GUEST is not part of this run.
wait_for_guest() {
    local guest=$1 scenario=$2 limit=${3:-$((${VM_LANE_SCENARIO_TIMEOUT:-300} - 120))} i
    [[ " $VM_LANE_GUESTS " == *" $guest "* ]] || return 1
    local marks=$VM_LANE_CARRY/.$guest
    note "waiting for the $guest guest to finish $scenario"
    for ((i = 0; i < limit; i++)); do
        if [[ -e $marks/$scenario.done || -e $marks/all-done ]]; then
            note "the $guest guest has finished $scenario"
            return 0
        fi
        sleep 1
    done
    fail "timed out after ${limit}s waiting for the $guest guest to finish $scenario"
}
