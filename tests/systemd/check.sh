#!/usr/bin/env bash
# Checks every unit in systemd/: `systemd-analyze verify` passes,
# `systemd-analyze security --offline=true` scores at most 2.0, and the unit
# sets its resource limits, LimitCORE=0, KillMode=mixed and a --check-config
# ExecStartPre.
# Usage: tests/systemd/check.sh [BINDIR]   (BINDIR: where bootd, dnsd, lbd are;
# default target/release). verify needs ExecStart's binary to exist, so the
# units are checked from a temp copy whose ExecStart points into BINDIR.
set -euo pipefail
cd "$(dirname "$0")/../.."
BINDIR=$(realpath "${1:-target/release}")
THRESHOLD=2.0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for unit in systemd/*.service; do
    name=$(basename "$unit" .service)
    [ -x "$BINDIR/$name" ] || { echo "FAIL $name: $BINDIR/$name not built"; fail=1; continue; }
    sed "s#/usr/local/bin/$name#$BINDIR/$name#" "$unit" >"$tmp/$name.service"
    if out=$(cd "$tmp" && systemd-analyze verify "./$name.service" 2>&1) && [ -z "$out" ]; then
        echo "ok   $name: systemd-analyze verify"
    else
        echo "FAIL $name: systemd-analyze verify:"; echo "$out" | sed 's/^/     /'; fail=1
    fi
    # Resource limits, no core dumps, a check before start, a draining stop.
    for want in '^LimitNOFILE=[0-9]' '^LimitCORE=0$' '^MemoryMax=' '^TasksMax=[0-9]' \
                '^KillMode=mixed$' "^ExecStartPre=/usr/local/bin/$name --check-config "; do
        if grep -qE "$want" "$unit"; then :; else echo "FAIL $name: no line matching $want"; fail=1; fi
    done
    score=$(cd "$tmp" && systemd-analyze security --offline=true --no-pager "./$name.service" 2>&1 |
        sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
    if [ -n "$score" ] && awk -v s="$score" -v t="$THRESHOLD" 'BEGIN { exit !(s <= t) }'; then
        echo "ok   $name: exposure $score (<= $THRESHOLD)"
    else
        echo "FAIL $name: exposure ${score:-unknown} (> $THRESHOLD)"; fail=1
    fi
done
# The install layout (systemd/install.sh), staged under a temp root.
root="$tmp/root"
if out=$(DESTDIR="$root" SRC="$BINDIR" bash systemd/install.sh 2>&1); then
    missing=()
    for f in usr/local/bin/bootd usr/local/bin/dnsd usr/local/bin/lbd usr/local/bin/images \
        etc/systemd/system/bootd.service etc/systemd/system/dnsd.service etc/systemd/system/lbd.service \
        etc/bare-metal-boot/site.yaml etc/bare-metal-boot/api-tokens; do
        [ -e "$root/$f" ] || missing+=("$f")
    done
    mode=$(stat -c %a "$root/etc/bare-metal-boot/api-tokens" 2>/dev/null || echo none)
    if [ ${#missing[@]} -eq 0 ] && [ "$mode" = 600 ]; then
        echo "ok   install.sh: binaries, units, example site, API token (mode $mode)"
    else
        echo "FAIL install.sh: missing ${missing[*]:-nothing}; api-tokens mode $mode"; fail=1
    fi
else
    echo "FAIL install.sh:"; echo "$out" | sed 's/^/     /'; fail=1
fi
exit $fail
