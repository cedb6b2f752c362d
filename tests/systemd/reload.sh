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
BINDIR=$(realpath "${1:-target/release}")
ns=reload-$$ work=$(mktemp -d /tmp/reload.XXXXXX)
chmod 755 "$work"
PIDS=()
. tests/lib.sh
cleanup() { stop_started "$ns"; rm -rf "$work"; }
trap cleanup EXIT
lab_netns "$ns"
nsx() { ip netns exec "$ns" "$@"; }
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

site=$work/site.yaml ign=$work/ignition
mkdir -p "$ign" "$work/state"
cp examples/lab/ignition/*.ign "$ign/"
chmod 644 "$ign"/*.ign
sed -e "s|stateDir: ../../target/lab-state|stateDir: $work/state|" \
    -e "s|root: ../../target/lab-images|root: $PWD/target/lab-images|" \
    -e "s|root: ../../target/lab-tftp|root: $PWD/target/lab-tftp|" \
    -e "s|^  dir: ignition|  dir: $ign|" \
    examples/lab/site.yaml >"$work/good.yaml"
# The same site with worker-2 added: what the last, good reload applies.
sed -e 's|^  - { name: worker-1, .*$|&\n  - { name: worker-2, role: worker, macs: ["52:54:00:77:00:22"], ip: 10.77.0.22, kernelArgs: [console=ttyS0] }|' \
    "$work/good.yaml" >"$work/added.yaml"
grep -q "name: worker-2" "$work/added.yaml" || { echo "FAIL reload: site not written"; exit 1; }

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
wait_served() { for _ in $(seq 60); do served "$1" "$2" && return 0; sleep 0.25; done; return 1; }

run_one() { # daemon args...
    local d=$1; shift
    cp "$work/good.yaml" "$site"
    chmod 644 "$site" "$ign"/*.ign
    local log=$work/$d.log
    ip netns exec "$ns" "$BINDIR/$d" "$@" >"$log" 2>&1 &
    local pid=$!
    PIDS+=("$pid")
    if ! wait_served "$d" master-0; then bad "$d: not serving master-0 at start: $(tail -n 3 "$log")"; return; fi
    local refusals=0 case before
    for case in "a site that does not parse" "a missing role Ignition file" "an unreadable role Ignition file"; do
        # The files broken first, then the new site put in place at once:
        # the daemons also poll their files, and must never see the new
        # site with the files still whole.
        cp "$work/added.yaml" "$site.new"
        case $case in
            "a site that does not parse") printf 'nodes: [ {\n' >>"$site.new" ;;
            "a missing role Ignition file") mv "$ign/worker.ign" "$ign/worker.ign.away" ;;
            "an unreadable role Ignition file") chmod 000 "$ign/worker.ign" ;;
        esac
        chmod 644 "$site.new"; mv "$site.new" "$site"
        before=$(grep -c "refused" "$log" || true)
        kill -HUP "$pid"
        local seen=0
        for _ in $(seq 40); do
            [[ $(grep -c "refused" "$log" || true) -gt $before ]] && { seen=1; break; }
            sleep 0.25
        done
        if [[ $seen == 1 ]] && kill -0 "$pid" 2>/dev/null && served "$d" master-0 && ! served "$d" worker-2; then
            ok "$d: $case: refused, the old site keeps serving ($(grep "refused" "$log" | tail -n 1 | cut -c 30-110))"
            refusals=$((refusals + 1))
        else
            bad "$d: $case: refusal logged=$seen, alive=$(kill -0 "$pid" 2>/dev/null && echo yes || echo no): $(tail -n 3 "$log")"
        fi
        # Back to the good site first, then the files, so the added node
        # is never seen whole before the last step.
        cp "$work/good.yaml" "$site.new"; mv "$site.new" "$site"
        [[ ! -f $ign/worker.ign.away ]] || mv "$ign/worker.ign.away" "$ign/worker.ign"
        chmod 644 "$ign"/*.ign
        kill -HUP "$pid"; sleep 0.5
    done
    cp "$work/added.yaml" "$site"
    kill -HUP "$pid"
    if wait_served "$d" worker-2; then ok "$d: then a good site is applied (worker-2 served)"; else bad "$d: the good site was not applied: $(tail -n 3 "$log")"; fi
    kill "$pid"; wait "$pid" 2>/dev/null || true
}

only=${ONLY:-bootd dnsd lbd appliance}
[[ " $only " != *" bootd "* ]] || run_one bootd --site "$site" --state-dir "$work/state"
[[ " $only " != *" dnsd "* ]] || run_one dnsd --site "$site" --udp-threads 1
[[ " $only " != *" lbd "* ]] || run_one lbd --site "$site" --state-dir "$work/lbd"
[[ " $only " != *" appliance "* ]] || run_one appliance --site "$site" --state-dir "$work/state" --no-lb

if [[ $fail == 0 ]]; then echo "PASS reload"; else echo "FAIL reload"; exit 1; fi
