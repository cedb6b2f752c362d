# shellcheck shell=bash
# Starting the appliance's daemons for a test (sourced by
# tests/lib/harness.sh): the binary from $BIN, in a namespace, its output to
# a log, recorded in PIDS, and a readiness wait on one URL. On a start that
# does not become ready, the log's tail is printed and the call returns 1.
#
#   start_bootd [OPTIONS --] ARGS...       ready: http://127.0.0.1:8080/healthz
#   start_appliance [OPTIONS --] ARGS...   ready: http://127.0.0.1:8080/healthz
#   start_dnsd [OPTIONS --] ARGS...        ready: http://10.77.0.1:9153/healthz
#   start_lbd [OPTIONS --] ARGS...         ready: http://127.0.0.1:8404/status
#
# OPTIONS, only before a `--` (without one every word is the daemon's):
#   --ns NS        the namespace (default $NS; "-" for none)
#   --log FILE     the output (default $WORK/<daemon>.log), appended to
#   --ready URL    the URL that answers 2xx once it serves (curl -g, so
#                  [v6]:port URLs work); "-" waits for nothing
#   --timeout S    how long to wait (default 15 s)
#   --env K=V      an environment variable for the daemon (repeatable)
#   --bin PATH     the executable (default $BIN/<daemon>)
# The PID is in $DAEMON_PID and in BOOTD_PID, APPLIANCE_PID, DNSD_PID or
# LBD_PID after the daemon's name; the log's path in $DAEMON_LOG.

start_daemon() { # daemon default-ready [OPTIONS --] ARGS...
    local name=$1 ready=$2
    shift 2
    local ns=${NS:-} out="" timeout=15 bin="" envs=() has_sep=0 a
    for a in "$@"; do [[ $a == -- ]] && { has_sep=1; break; }; done
    if [[ $has_sep == 1 ]]; then
        while [[ $1 != -- ]]; do
            case $1 in
                --ns) ns=$2 ;;
                --log) out=$2 ;;
                --ready) ready=$2 ;;
                --timeout) timeout=$2 ;;
                --env) envs+=("$2") ;;
                --bin) bin=$2 ;;
                *) echo "start_$name: unknown option $1" >&2; return 2 ;;
            esac
            shift 2
        done
        shift
    fi
    [[ $ns == - ]] && ns=""
    out=${out:-$WORK/$name.log}
    bin=${bin:-$BIN/$name}
    local cmd=("$bin" "$@")
    [[ ${#envs[@]} -eq 0 ]] || cmd=(env "${envs[@]}" "${cmd[@]}")
    spawn ${ns:+--ns "$ns"} --log "$out" --append "${cmd[@]}"
    DAEMON_PID=$SPAWNED DAEMON_LOG=$out
    local upper=${name^^}
    printf -v "${upper}_PID" '%s' "$SPAWNED"
    [[ $ready == - ]] && return 0
    if wait_for "$timeout" daemon_ready "$ns" "$ready" "$SPAWNED"; then return 0; fi
    echo "start_$name: not ready at $ready within ${timeout}s$(alive "$SPAWNED" || echo " (it exited)"); last lines of $out:"
    tail_log "$out" 30
    return 1
}

daemon_ready() { # ns url pid: the URL answers and the process still runs (125: it died)
    alive "$3" || return 125
    if [[ -n $1 ]]; then ip netns exec "$1" curl -fsS -g --max-time 2 -o /dev/null "$2"
    else curl -fsS -g --max-time 2 -o /dev/null "$2"; fi
}

start_bootd() { start_daemon bootd http://127.0.0.1:8080/healthz "$@"; }
start_appliance() { start_daemon appliance http://127.0.0.1:8080/healthz "$@"; }
start_dnsd() { start_daemon dnsd http://10.77.0.1:9153/healthz "$@"; }
start_lbd() { start_daemon lbd http://127.0.0.1:8404/status "$@"; }
