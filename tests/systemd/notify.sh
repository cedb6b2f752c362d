#!/usr/bin/env bash
# sd_notify test for each daemon (tests/systemd/notify.py), each in its own
# network namespace with the lab's addresses on a dummy br0, serving
# examples/lab/site.yaml. Usage: tests/systemd/notify.sh [BINDIR]  (root)
set -euo pipefail
cd "$(dirname "$0")/../.."
BINDIR=$(realpath "${1:-target/release}")
SITE=$PWD/examples/lab/site.yaml
PIDS=()
. tests/lib.sh
fail=0
run() { # name tcp-ports... -- args
    local name=$1; shift
    local ns=sdn-$name-$$ state
    state=$(mktemp -d)
    lab_netns "$ns"
    if ! ip netns exec "$ns" python3 tests/systemd/notify.py "$@"; then fail=1; fi
    stop_started "$ns"
    rm -rf "$state"
}
run bootd --tcp 8080 --tcp 8443 -- "$BINDIR/bootd" --site "$SITE" --state-dir "$(mktemp -d)" run
run appliance --tcp 8080 --tcp 53 --tcp 6443 --tcp 22623 -- "$BINDIR/appliance" --site "$SITE" --state-dir "$(mktemp -d)"
for d in dnsd lbd; do
    if [ -x "$BINDIR/$d" ] && "$BINDIR/$d" --help 2>/dev/null | grep -q -- --site; then
        run "$d" -- "$BINDIR/$d" --site "$SITE" $([ "$d" = lbd ] && echo --state-dir "$(mktemp -d)") run
    else
        echo "FAIL $d: $BINDIR/$d missing or without --site"; fail=1
    fi
done
exit $fail
