#!/usr/bin/env bash
# A reload that cannot apply keeps the old configuration serving, for each
# daemon and the all-in-one binary, with a real SIGHUP: a site that does not
# parse, a site whose role Ignition file is missing, and one whose role
# Ignition file the daemon cannot read (it runs as nobody: started as root,
# it drops). After each refusal the daemon still serves what it served, and
# says so in its log; then a good site with a new node is applied.
# Usage: tests/systemd/reload.sh [BINDIR]   (root)
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/harness.sh
harness_init reload
BIN=$(realpath "${1:-target/release}")
lab_netns

site=$WORK/site.yaml ign=$WORK/ignition
mkdir -p "$ign" "$WORK/state"
cp examples/lab/ignition/*.ign "$ign/"
chmod 644 "$ign"/*.ign
lab_site "$WORK/good.yaml" host.stateDir="$WORK/state" ignition.dir="$ign"
# The same site with worker-2 added: what the last, good reload applies.
lab_site "$WORK/added.yaml" --from "$WORK/good.yaml" \
    'nodes+={name: worker-2, role: worker, live: true, macs: ["52:54:00:77:00:22"], ip: 10.77.0.22, kernelArgs: [console=ttyS0]}'

# What each daemon serves, read from outside: "master-0 present" and
# "worker-2 present" checks, per daemon.
# (The answer is read whole, then searched: `curl | grep -q` fails under
# pipefail when grep stops reading early and curl gets SIGPIPE.)
served() { # daemon node -> 0 when the daemon serves node
    local out
    case $1 in
        bootd) out=$(nsx curl -fsS --max-time 3 http://127.0.0.1:8080/status/timeline.json 2>/dev/null) \
                   && grep -q "\"$2\"" <<<"$out" ;;
        dnsd|appliance) [[ $(nsx dig +short +time=1 +tries=1 @10.77.0.1 "$2.lab.example.test" A 2>/dev/null) =~ ^10\.77\.0\.[0-9]+$ ]] ;;
        lbd) out=$(nsx curl -fsS --max-time 3 http://127.0.0.1:8404/status 2>/dev/null) && grep -q "$2" <<<"$out" ;;
    esac
}
wait_served() { wait_for 15 served "$1" "$2"; }
refused_since() { [[ $(grep -c "refused" "$1" || true) -gt $2 ]]; } # log count

run_one() { # daemon args...
    local d=$1; shift
    cp "$WORK/good.yaml" "$site"
    chmod 644 "$site" "$ign"/*.ign
    local log=$WORK/$d.log
    "start_$d" --log "$log" --ready - -- "$@"
    local pid=$DAEMON_PID
    if ! wait_served "$d" master-0; then
        bad "$d: not serving master-0 at start: $(tail -n 3 "$log")"
        stop_pid "$pid"  # the next daemon binds the same ports
        return
    fi
    local refusals=0 case before
    for case in "a site that does not parse" "a missing role Ignition file" "an unreadable role Ignition file"; do
        # The files broken first, then the new site put in place at once:
        # the daemons also poll their files, and must never see the new
        # site with the files still whole.
        cp "$WORK/added.yaml" "$site.new"
        case $case in
            "a site that does not parse") printf 'nodes: [ {\n' >>"$site.new" ;;
            "a missing role Ignition file") mv "$ign/worker.ign" "$ign/worker.ign.away" ;;
            "an unreadable role Ignition file") chmod 000 "$ign/worker.ign" ;;
        esac
        chmod 644 "$site.new"; mv "$site.new" "$site"
        before=$(grep -c "refused" "$log" || true)
        kill -HUP "$pid"
        local seen=0
        wait_for 10 refused_since "$log" "$before" && seen=1
        if [[ $seen == 1 ]] && alive "$pid" && served "$d" master-0 && ! served "$d" worker-2; then
            ok "$d: $case: refused, the old site keeps serving ($(grep "refused" "$log" | tail -n 1 | cut -c 30-110))"
            refusals=$((refusals + 1))
        else
            bad "$d: $case: refusal logged=$seen, alive=$(alive "$pid" && echo yes || echo no): $(tail -n 3 "$log")"
        fi
        # Back to the good site first, then the files, so the added node
        # is never seen whole before the last step.
        cp "$WORK/good.yaml" "$site.new"; mv "$site.new" "$site"
        [[ ! -f $ign/worker.ign.away ]] || mv "$ign/worker.ign.away" "$ign/worker.ign"
        chmod 644 "$ign"/*.ign
        kill -HUP "$pid"; sleep 0.5
    done
    cp "$WORK/added.yaml" "$site"
    kill -HUP "$pid"
    if wait_served "$d" worker-2; then ok "$d: then a good site is applied (worker-2 served)"; else bad "$d: the good site was not applied: $(tail -n 3 "$log")"; fi
    stop_pid "$pid"
}

only=${ONLY:-bootd dnsd lbd appliance}
[[ " $only " != *" bootd "* ]] || run_one bootd --site "$site" --state-dir "$WORK/state"
[[ " $only " != *" dnsd "* ]] || run_one dnsd --site "$site" --udp-threads 1
[[ " $only " != *" lbd "* ]] || run_one lbd --site "$site" --state-dir "$WORK/lbd"
[[ " $only " != *" appliance "* ]] || run_one appliance --site "$site" --state-dir "$WORK/state" --no-lb

harness_verdict
