#!/usr/bin/env bash
# The all-in-one binary serves all three daemons from the lab site: in a
# private namespace, `appliance` answers DNS for the cluster names (dig),
# serves the iPXE script (curl), and lbd reports its frontends (admin API).
# Usage: tests/systemd/appliance.sh [BINDIR]   (root)
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/harness.sh
harness_init appliance
BIN=$(realpath "${1:-target/release}")
lab_netns
mkdir -p "$WORK/state"
start_appliance --ready http://10.77.0.1:8080/healthz -- --site examples/lab/site.yaml --state-dir "$WORK/state" ||
    fail "appliance did not start"
check() { # what, command...: ok with the command's output, or FAIL with it
    local what=$1 out
    shift
    if out=$("$@" 2>&1); then ok "$what: $(echo "$out" | tr '\n' ' ' | cut -c1-120)"; else bad "$what: $out"; fi
}
answer_is() { # want dig-args...: the answer, and whether it is want
    local want=$1 got
    shift
    got=$(nsx dig +short @10.77.0.1 "$@")
    echo "$got"
    [ "$got" = "$want" ]
}
# (The answers are read whole, then searched: `curl | grep -q` fails under
# pipefail when grep stops reading early and curl gets SIGPIPE.)
served() { # url pattern: the URL's body has a line matching pattern
    local body
    body=$(nsx curl -fsS "$1") && grep -q "$2" <<<"$body"
}
check "dig api"      answer_is 10.77.0.1 api.lab.example.test A
check "dig *.apps"   answer_is 10.77.0.1 console-openshift-console.apps.lab.example.test A
check "dig node"     answer_is 10.77.0.11 master-0.lab.example.test A
check "dig PTR"      answer_is master-0.lab.example.test. -x 10.77.0.11
check "boot.ipxe"    served http://10.77.0.1:8080/boot.ipxe '^#!ipxe'
check "lbd status"   served http://127.0.0.1:8404/status master-0
kill "$APPLIANCE_PID"
rc=0
wait "$APPLIANCE_PID" || rc=$?
stop_pid "$APPLIANCE_PID"
if [ "$rc" = 0 ]; then ok "appliance exited 0 on SIGTERM"; else bad "appliance exit status $rc"; fi
[ "$FAILS" = 0 ] || { echo "--- appliance log"; tail -30 "$WORK/appliance.log"; }
harness_verdict
