#!/usr/bin/env bash
# Checks every unit in systemd/: `systemd-analyze verify` passes,
# `systemd-analyze security --offline=true` scores at most 2.0, and the unit
# sets its resource limits, LimitCORE=0, KillMode=mixed and a --check-config
# ExecStartPre.
# Usage: tests/systemd/check.sh [BINDIR]   (BINDIR: where bootd, dnsd, lbd are;
# default target/release). verify needs ExecStart's binary to exist, so the
# units are checked from a copy in the work folder whose ExecStart points
# into BINDIR.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/harness.sh
harness_init systemd-check
BIN=$(realpath "${1:-target/release}")
THRESHOLD=2.0
indent() { sed 's/^/     /'; }
for unit in systemd/*.service; do
    name=$(basename "$unit" .service)
    [ -x "$BIN/$name" ] || { bad "$name: $BIN/$name not built"; continue; }
    sed "s#/usr/local/bin/$name#$BIN/$name#" "$unit" >"$WORK/$name.service"
    if out=$(cd "$WORK" && systemd-analyze verify "./$name.service" 2>&1) && [ -z "$out" ]; then
        ok "$name: systemd-analyze verify"
    else
        bad "$name: systemd-analyze verify:"; indent <<<"$out"
    fi
    # Resource limits, no core dumps, a check before start, a draining stop.
    for want in '^LimitNOFILE=[0-9]' '^LimitCORE=0$' '^MemoryMax=' '^TasksMax=[0-9]' \
                '^KillMode=mixed$' "^ExecStartPre=/usr/local/bin/$name --check-config "; do
        grep -qE "$want" "$unit" || bad "$name: no line matching $want"
    done
    score=$(cd "$WORK" && systemd-analyze security --offline=true --no-pager "./$name.service" 2>&1 |
        sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p') || true
    if [ -n "$score" ] && awk -v s="$score" -v t="$THRESHOLD" 'BEGIN { exit !(s <= t) }'; then
        ok "$name: exposure $score (<= $THRESHOLD)"
    else
        bad "$name: exposure ${score:-unknown} (> $THRESHOLD)"
    fi
done
# The install layout (systemd/install.sh), staged under a root in the work folder.
root="$WORK/root"
if out=$(DESTDIR="$root" SRC="$BIN" bash systemd/install.sh 2>&1); then
    missing=()
    for f in usr/local/bin/bootd usr/local/bin/dnsd usr/local/bin/lbd usr/local/bin/images \
        etc/systemd/system/bootd.service etc/systemd/system/dnsd.service etc/systemd/system/lbd.service \
        etc/bare-metal-boot/site.yaml etc/bare-metal-boot/api-tokens; do
        [ -e "$root/$f" ] || missing+=("$f")
    done
    mode=$(stat -c %a "$root/etc/bare-metal-boot/api-tokens" 2>/dev/null || echo none)
    if [ ${#missing[@]} -eq 0 ] && [ "$mode" = 600 ]; then
        ok "install.sh: binaries, units, example site, API token (mode $mode)"
    else
        bad "install.sh: missing ${missing[*]:-nothing}; api-tokens mode $mode"
    fi
else
    bad "install.sh:"; indent <<<"$out"
fi
harness_verdict
