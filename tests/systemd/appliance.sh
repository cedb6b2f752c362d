#!/usr/bin/env bash
# The all-in-one binary serves all three daemons from the lab site: in a
# private namespace, `appliance` answers DNS for the cluster names (dig),
# serves the iPXE script (curl), and lbd reports its frontends (admin API).
# Usage: tests/systemd/appliance.sh [BINDIR]   (root)
set -euo pipefail
cd "$(dirname "$0")/../.."
BINDIR=$(realpath "${1:-target/release}")
ns=appl-$$ state=$(mktemp -d)
PIDS=()
. tests/lib.sh
cleanup() { stop_started "$ns"; rm -rf "$state"; }
trap cleanup EXIT
lab_netns "$ns"
ip netns exec "$ns" "$BINDIR/appliance" --site examples/lab/site.yaml --state-dir "$state" >"$state/log" 2>&1 &
pid=$!
PIDS+=("$pid")
fail=0
check() { # what, command...
    local what=$1; shift
    if out=$("$@" 2>&1); then echo "ok   $what: $(echo "$out" | tr '\n' ' ' | cut -c1-120)"; else echo "FAIL $what: $out"; fail=1; fi
}
for _ in $(seq 50); do ip netns exec "$ns" curl -fsS -o /dev/null http://10.77.0.1:8080/healthz 2>/dev/null && break; sleep 0.2; done
check "dig api"      bash -c "[ \"\$(ip netns exec $ns dig +short @10.77.0.1 api.lab.example.test A)\" = 10.77.0.1 ]"
check "dig *.apps"   bash -c "[ \"\$(ip netns exec $ns dig +short @10.77.0.1 console-openshift-console.apps.lab.example.test A)\" = 10.77.0.1 ]"
check "dig node"     bash -c "[ \"\$(ip netns exec $ns dig +short @10.77.0.1 master-0.lab.example.test A)\" = 10.77.0.11 ]"
check "dig PTR"      bash -c "[ \"\$(ip netns exec $ns dig +short @10.77.0.1 -x 10.77.0.11)\" = master-0.lab.example.test. ]"
check "boot.ipxe"    bash -c "ip netns exec $ns curl -fsS http://10.77.0.1:8080/boot.ipxe | grep -q '^#!ipxe'"
check "lbd status"   bash -c "ip netns exec $ns curl -fsS http://127.0.0.1:8404/status | grep -q master-0"
kill "$pid"; wait "$pid" && echo "ok   appliance exited 0 on SIGTERM" || { echo "FAIL appliance exit status $?"; fail=1; }
pid=
[ "$fail" = 0 ] || { echo "--- appliance log"; tail -30 "$state/log"; }
exit $fail
