# shellcheck shell=bash
# What the benchmarks share beyond the harness: source it after
# tests/lib/harness.sh (and before bench/lib/cpu.sh where a bench counts
# CPU):
#
#   . "$(dirname "$0")/../../tests/lib/harness.sh"
#   . "$REPO/bench/lib/bench.sh"
#   bench_need_root "network namespaces"          # checks, before harness_init
#   harness_init bench-NAME                       # $WORK, the exit trap
#   bench_results "$RESULTS"                      # say/log also go there
#
# The harness stops every process and deletes every namespace at exit; this
# file adds the benches' report lines, their checks before a run, the own
# session for PRIO < 0, and a fine-grained wait for timing a change.

# --- what a bench says ---------------------------------------------------------
# A bench's report goes to stdout and, after bench_results FILE, to that raw
# results file too. Its progress lines are comments ("# ...") on stderr and
# in the results file: log here replaces the harness's "NAME: ..." form,
# since the benches' output files keep "#" for what is not the report.
BENCH_OUT=""
# bench_results FILE [--append]: say, log and raw also write to FILE
# (emptied first unless --append).
bench_results() {
    BENCH_OUT=$1
    if [[ ${2:-} == --append ]]; then : >>"$BENCH_OUT"; else : >"$BENCH_OUT"; fi
}
say() { echo "$*"; [[ -z $BENCH_OUT ]] || echo "$*" >>"$BENCH_OUT"; }
log() { echo "# $*" >&2; [[ -z $BENCH_OUT ]] || echo "# $*" >>"$BENCH_OUT"; }
# raw: stdin into the results file only (a load generator's whole report).
raw() { if [[ -n $BENCH_OUT ]]; then cat >>"$BENCH_OUT"; else cat >/dev/null; fi; }

# num_lt A B: A < B as numbers (awk's, so 0.15 and 1e3 work).
num_lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

# --- before a run ----------------------------------------------------------------
# bench_need_root WHY: root, or a message and exit 2.
bench_need_root() {
    [[ $(id -u) -eq 0 ]] || { echo "$(basename "$0"): run as root ($1)" >&2; exit 2; }
}
# bench_need_tools STATUS HINT TOOL...: every TOOL on PATH, or "missing tool:
# TOOL (HINT)" and exit STATUS.
bench_need_tools() {
    local status=$1 hint=$2 t
    shift 2
    for t in "$@"; do
        command -v "$t" >/dev/null || { echo "missing tool: $t${hint:+ ($hint)}" >&2; exit "$status"; }
    done
}
# bench_need_cpus STATUS: two CPUs at least (servers on one, load on the
# other), or exit STATUS.
bench_need_cpus() {
    [[ $(nproc --all) -ge 2 ]] || { echo "need at least 2 CPUs" >&2; exit "$1"; }
}

# bench_build BIN CARGO_ARGS...: BIN built (cargo build --release
# CARGO_ARGS, from the repository) when it is not there; still missing
# after the build: exit 1.
bench_build() {
    local bin=$1
    shift
    [[ ! -x $bin ]] || return 0
    log "building $(basename "$bin") (release: cargo build --release $*)"
    (cd "$REPO" && cargo build --release "$@")
    [[ -x $bin ]] || { echo "no $bin after the build (set the knob that names it)" >&2; exit 1; }
}

# bench_own_session VAR ARGS...: with PRIO < 0 on a kernel with autogroups,
# nice only counts within a session's autogroup: the script runs again in a
# session of its own (VAR=1 in its environment) and this copy waits for it
# and exits with its status; in that session, the autogroup gets nice PRIO.
# Call it before harness_init: the waiting copy starts nothing.
bench_own_session() {
    local var=$1 child rc=0
    shift
    [[ ${PRIO:-0} -lt 0 ]] || return 0
    if [[ -n ${!var:-} ]]; then
        echo "$PRIO" >"/proc/$$/autogroup"
        return 0
    fi
    [[ $(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null) == 1 ]] || return 0
    env "$var=1" setsid "$0" "$@" &
    child=$!
    trap 'kill -TERM "$child" 2>/dev/null || true' INT TERM
    while :; do
        wait "$child" && rc=0 || rc=$?
        kill -0 "$child" 2>/dev/null || break
    done
    exit "$rc"
}

# --- timing a change -------------------------------------------------------------
# wait_fine SECONDS COMMAND...: COMMAND every 10 ms until it succeeds (0) or
# SECONDS pass (1). Only where the wait itself is what is measured (a start,
# a reload, a failover detected): wait_for's 0.1 s steps would be a large
# part of a 0.1-0.4 s reload. Readiness before a measurement uses wait_for.
wait_fine() {
    local end
    end=$(awk -v s="$1" -v t="$(date +%s.%N)" 'BEGIN { printf "%.3f", t + s }')
    shift
    until "$@" >/dev/null 2>&1; do
        awk -v e="$end" -v t="$(date +%s.%N)" 'BEGIN { exit !(t > e) }' && return 1
        sleep 0.01
    done
}
# secs_since T0: seconds since T0 (from `now`), three decimals (the
# harness's since gives one).
secs_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }'; }

# bench_stop PID...: the harness's stop_pids (all at once: SIGTERM, up to
# 5 s, SIGKILL), and the PIDs leave PIDS, as with stop_pid (which takes one).
bench_stop() {
    local p i
    stop_pids "$@"
    for p in "$@"; do
        for i in "${!PIDS[@]}"; do [[ ${PIDS[i]} != "$p" ]] || unset 'PIDS[i]'; done
    done
    PIDS=("${PIDS[@]}")
}
