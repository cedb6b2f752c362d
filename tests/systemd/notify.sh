#!/usr/bin/env bash
# sd_notify test for each daemon (tests/systemd/notify.py), each in its own
# network namespace with the lab's addresses on a dummy br0, serving
# examples/lab/site.yaml. Usage: tests/systemd/notify.sh [BINDIR]  (root)
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/harness.sh
harness_init notify
BIN=$(realpath "${1:-target/release}")
SITE=$PWD/examples/lab/site.yaml
# run NAME [--tcp PORT...] -- DAEMON ARGS...: notify.py in a new lab
# namespace of NAME's own (deleted at exit), the daemon's state in $WORK.
run() {
    local name=$1 ns=sdn-$1-$$
    shift
    lab_netns "$ns"
    ip netns exec "$ns" python3 tests/systemd/notify.py "$@" || bad "$name: sd_notify protocol (above)"
}
state() { mkdir -p "$WORK/$1-state" && echo "$WORK/$1-state"; }
run bootd --tcp 8080 --tcp 8443 -- "$BIN/bootd" --site "$SITE" --state-dir "$(state bootd)" run
run appliance --tcp 8080 --tcp 53 --tcp 6443 --tcp 22623 -- "$BIN/appliance" --site "$SITE" --state-dir "$(state appliance)"
for d in dnsd lbd; do
    if [ -x "$BIN/$d" ] && "$BIN/$d" --help 2>/dev/null | grep -q -- --site; then
        if [ "$d" = lbd ]; then
            run "$d" -- "$BIN/$d" --site "$SITE" --state-dir "$(state "$d")" run
        else
            run "$d" -- "$BIN/$d" --site "$SITE" run
        fi
    else
        bad "$d: $BIN/$d missing or without --site"
    fi
done
harness_verdict
