# shellcheck shell=bash
# The harness every script in tests/ and bench/ runs on: source it, then
# call harness_init once. Everything a script starts is recorded by PID and
# stopped by PID; every namespace it makes is deleted; one EXIT trap does
# both, whatever way the script ends (tests/README.md, "The shell harness").
#
#   cd "$(dirname "$0")/../.."          # scripts run from the repository root
#   . tests/lib/harness.sh
#   harness_init reload                 # name used in PASS/FAIL lines and logs
#   lab_netns                           # $NS: a namespace with the lab bridge
#   lab_site "$WORK/site.yaml" host.dhcp.leaseTime=2m
#   start_bootd --site "$WORK/site.yaml"
#   ok "it served"  |  bad "it did not"  |  fail "cannot go on"
#   harness_verdict                     # PASS name / FAIL name, exit status
#
# This file defines the lifecycle, the verdict words and process handling;
# it sources the rest of tests/lib: ns.sh (namespaces, bridges, veth, taps),
# daemons.sh (start_bootd|dnsd|lbd|appliance with a readiness wait),
# site.sh (lab_site: a lab site copy with keys set), stats.sh (median,
# ratio, the interleaving order of benchmark rounds), browser.sh (headless
# Chromium in the lab namespace).

HARNESS_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HARNESS_LIB/../.." && pwd)
export REPO
# The release binaries unless the caller says otherwise (BIN=... or a
# script's own argument).
BIN=${BIN:-$REPO/target/release}

. "$HARNESS_LIB/ns.sh"
. "$HARNESS_LIB/daemons.sh"
. "$HARNESS_LIB/site.sh"
. "$HARNESS_LIB/stats.sh"
. "$HARNESS_LIB/browser.sh"

PIDS=()
HARNESS_HOOKS=()
HARNESS_AFTER=()
FAILS=0 PASSES=0
HARNESS_NAME=${HARNESS_NAME:-$(basename "$0" .sh)}

# harness_init NAME [--work DIR]: the run's name, its work directory $WORK
# (a new /tmp/NAME.XXXXXX, world-readable so that daemons that drop to
# nobody can read what the script writes there, deleted at exit unless
# KEEP_WORK=1; or DIR, made if missing and never deleted), and the traps:
# EXIT stops everything (harness_cleanup); INT, TERM and HUP end the script
# through it; a command that fails outside a condition prints a FAIL line
# with its line number before set -e ends the script.
harness_init() {
    HARNESS_NAME=$1
    shift
    WORK_OWNED=1
    if [[ ${1:-} == --work ]]; then
        WORK=$2 WORK_OWNED=0
        mkdir -p "$WORK"
    else
        WORK=$(mktemp -d "/tmp/$HARNESS_NAME.XXXXXX")
    fi
    chmod 755 "$WORK"
    export WORK
    # The trap's own stderr is dropped: bash 5.2 may print a spurious
    # "wait_for: No record of process" there when the script exits with a
    # job running. The hooks still print to the script's stderr.
    exec {HARNESS_STDERR}>&2
    trap 'harness_cleanup 2>/dev/null' EXIT
    trap 'echo "FAIL $HARNESS_NAME: interrupted"; exit 130' INT TERM HUP
    trap 'exit 141' PIPE
    trap 'harness_error $LINENO "$BASH_COMMAND"' ERR
}

harness_error() { # line command: an unexpected failure, from the ERR trap
    # Only the script's own shell speaks: a subshell's failure reaches it
    # as that subshell's status anyway.
    [[ $BASHPID == "$$" ]] || return 0
    echo "FAIL $HARNESS_NAME: line $1 failed: $2"
}

# on_exit COMMAND: run COMMAND (a string, eval'ed) at exit, before the
# processes are stopped; hooks run last-registered first.
on_exit() { HARNESS_HOOKS+=("$1"); }
# after_exit COMMAND: the same, after the processes are stopped and the
# namespaces deleted (e.g. removing a folder they were writing to).
after_exit() { HARNESS_AFTER+=("$1"); }

harness_cleanup() {
    local rc=$? i
    # A subshell (a pipeline's part, $(...)) leaves the stopping to the
    # script's own shell.
    [[ $BASHPID == "$$" ]] || exit "$rc"
    trap - ERR
    set +e
    for ((i = ${#HARNESS_HOOKS[@]} - 1; i >= 0; i--)); do eval "${HARNESS_HOOKS[i]}" 2>&"$HARNESS_STDERR"; done
    stop_pids "${PIDS[@]}"
    ns_cleanup
    for ((i = ${#HARNESS_AFTER[@]} - 1; i >= 0; i--)); do eval "${HARNESS_AFTER[i]}" 2>&"$HARNESS_STDERR"; done
    if [[ ${WORK_OWNED:-0} == 1 && ${KEEP_WORK:-0} != 1 && -n ${WORK:-} ]]; then rm -rf "$WORK"; fi
    exit "$rc"
}

# --- what a run says ----------------------------------------------------------
# log: progress, to stderr, prefixed with the run's name.
log() { printf '%s: %s\n' "$HARNESS_NAME" "$*" >&2; }
# ok / bad: one check's verdict on stdout ("ok   ..." / "FAIL ..."); bad
# counts the failure and the script goes on.
ok() { echo "ok   $*"; PASSES=$((PASSES + 1)); }
bad() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
# fail: a failure the script cannot go on from: FAIL line, exit 1.
fail() { echo "FAIL $HARNESS_NAME: $*"; exit 1; }
# check WHAT COMMAND...: ok WHAT when COMMAND succeeds, else bad WHAT.
check() {
    local what=$1
    shift
    if "$@"; then ok "$what"; else bad "$what"; fi
}
# harness_verdict: the closing line, PASS NAME or FAIL NAME (with the count
# of failed checks), and the script's exit status.
harness_verdict() {
    if [[ $FAILS == 0 ]]; then
        echo "PASS $HARNESS_NAME"
    else
        echo "FAIL $HARNESS_NAME ($FAILS failed)"
        exit 1
    fi
}
# tail_log FILE [N]: the last N (20) lines of a log, for a FAIL message.
tail_log() { tail -n "${2:-20}" "$1" 2>/dev/null | sed 's/^/    | /'; }

# --- processes ----------------------------------------------------------------
# spawn [--ns NS] [--log FILE] [--append] COMMAND...: COMMAND in the
# background (inside NS when given: `ip netns exec` execs it, so the PID is
# COMMAND's own), its output to FILE (default /dev/null), recorded in PIDS;
# its PID in $SPAWNED. COMMAND must be a program, not a shell function: a
# backgrounded function is a subshell, and killing that leaves its children.
spawn() {
    local ns="" out=/dev/null append=0
    while [[ $# -gt 0 ]]; do
        case $1 in
            --ns) ns=$2; shift 2 ;;
            --log) out=$2; shift 2 ;;
            --append) append=1; shift ;;
            *) break ;;
        esac
    done
    if declare -F "$1" >/dev/null; then
        echo "spawn: $1 is a shell function; give a program" >&2
        return 2
    fi
    [[ -z $ns ]] || set -- ip netns exec "$ns" "$@"
    # The background subshell drops the script's traps and execs at once:
    # $! is then COMMAND's own PID, and a signal to it never runs the
    # script's exit trap in a copy of the script.
    if [[ $append == 1 ]]; then
        (trap - EXIT ERR INT TERM HUP PIPE; exec "$@") >>"$out" 2>&1 &
    else
        (trap - EXIT ERR INT TERM HUP PIPE; exec "$@") >"$out" 2>&1 &
    fi
    SPAWNED=$!
    PIDS+=("$SPAWNED")
}

# stop_pids PID...: SIGTERM to each, up to STOP_GRACE (5) seconds for all
# to go, then SIGKILL; reaps the ones that are this shell's children.
stop_pids() {
    local p alive i
    [[ $# -gt 0 ]] || return 0
    for p in "$@"; do kill "$p" 2>/dev/null || true; done
    for ((i = 0; i < ${STOP_GRACE:-5} * 10; i++)); do
        alive=0
        for p in "$@"; do kill -0 "$p" 2>/dev/null && { alive=1; break; }; done
        [[ $alive == 0 ]] && break
        sleep 0.1
    done
    for p in "$@"; do kill -9 "$p" 2>/dev/null || true; done
    for p in "$@"; do wait "$p" 2>/dev/null || true; done
}

# stop_pid PID: stop_pids for one, and PID leaves the list.
stop_pid() {
    local p=$1 i
    stop_pids "$p"
    for i in "${!PIDS[@]}"; do [[ ${PIDS[i]} == "$p" ]] && unset 'PIDS[i]'; done
    PIDS=("${PIDS[@]}")
}

# wait_for SECONDS COMMAND...: run COMMAND every 0.1 s until it succeeds
# (0), or SECONDS have passed by the clock (1), or COMMAND exits 125, which
# means "give up now" (e.g. the process being waited for has died: 1). The
# one readiness loop: scripts call this instead of writing their own.
# COMMAND may be a shell function; its output is discarded.
wait_for() {
    local secs=$1 rc end
    shift
    # microseconds, from bash's own clock (no fork per try)
    end=$((${EPOCHREALTIME/./} + secs * 1000000))
    while true; do
        rc=0
        "$@" >/dev/null 2>&1 || rc=$?
        [[ $rc == 0 ]] && return 0
        [[ $rc == 125 || ${EPOCHREALTIME/./} -ge $end ]] && return 1
        sleep 0.1
    done
}

# alive PID: the process still runs.
alive() { kill -0 "$1" 2>/dev/null; }

# now / since T0: seconds since the epoch, and the seconds (one decimal)
# since T0.
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
