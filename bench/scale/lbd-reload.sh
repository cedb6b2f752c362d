#!/usr/bin/env bash
# lbd alone on a generated site of N nodes (the site of bench/scale/run.sh:
# every worker is a backend of both ingress pools): start, then a node
# added and SIGHUP, K times; for each reload the time from the file
# written to "configuration reloaded", lbd's resident size and its CPU
# time so far. In a network namespace of its own (a veth with the
# VIPs; its probes of the nodes go nowhere else).
#
# Knobs (env): N (10000), K (5 reloads), BIN (target/release),
# RESULTS (bench/scale/results-lbd-<UTC date>.txt).
set -euo pipefail
N=${N:-10000}
K=${K:-5}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BIN=${BIN:-$REPO/target/release}
RESULTS=${RESULTS:-$HERE/results-lbd-$(date -u +%F).txt}
[[ $(id -u) -eq 0 ]] || { echo "lbd-reload.sh: run as root (a network namespace)" >&2; exit 2; }
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

# shellcheck source=bench/scale/lib.sh
. "$HERE/lib.sh"
NS=blr-$$
WORK=$(mktemp -d /tmp/bench-lbd.XXXXXX)
chmod 755 "$WORK"
LP=""
cleanup() {
    [[ -n $LP ]] && { kill "$LP" 2>/dev/null || true; wait "$LP" 2>/dev/null || true; }
    ip netns del "$NS" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
scale_netns "$NS"
scale_images

say() { echo "$*"; echo "$*" >>"$RESULTS"; }
cpu() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"; }
lines() { grep -c "$2" "$1" 2>/dev/null || true; }

write_site "$WORK/site.yaml" "$N"

: >>"$RESULTS"
say "== lbd at scale, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(cd "$REPO" && git rev-parse --short HEAD)"
say "machine: $(uname -srm), $(nproc --all) vCPU; open files limit $(ulimit -n); N=$N nodes"
t=$(now)
ip netns exec "$NS" env RUST_LOG=info "$BIN/lbd" --site "$WORK/site.yaml" --user root >"$WORK/lbd.log" 2>&1 &
LP=$!
ok=""
for _ in $(seq 1 1200); do
    ip netns exec "$NS" curl -sf -o /dev/null --max-time 1 http://10.78.0.1:8404/healthz && { ok=1; break; }
    sleep 0.1
done
[[ -n $ok ]] || { say "lbd did not start"; tail "$WORK/lbd.log"; exit 1; }
say "   ready in $(since "$t") s; RSS $(rss_now "$LP") kB"
sleep 5   # a few rounds of checks
for k in $(seq 1 "$K"); do
    i=$((N + k - 1))
    c=$(lines "$WORK/lbd.log" "configuration reloaded")
    r=$(lines "$WORK/lbd.log" "reload refused")
    t=$(now)
    printf '  - { name: n%05d, role: worker, macs: ["02:78:00:%02x:%02x:%02x"], ip: 10.78.%d.%d }\n' \
        "$i" $((i >> 16 & 255)) $((i >> 8 & 255)) $((i & 255)) $((1 + i / 256)) $((i % 256)) >>"$WORK/site.yaml"
    kill -HUP "$LP"
    done_=""
    for _ in $(seq 1 600); do
        [[ $(lines "$WORK/lbd.log" "configuration reloaded") -gt $c ]] && { done_=1; break; }
        [[ $(lines "$WORK/lbd.log" "reload refused") -gt $r ]] && break
        sleep 0.01
    done
    took=$(since "$t")
    [[ -n $done_ ]] || { say "   reload $k: not done within 6 s"; grep -A3 "reload refused" "$WORK/lbd.log" | tail -4 | tee -a "$RESULTS"; exit 1; }
    sleep 1
    say "   reload $k: $took s; RSS 1 s after $(rss_now "$LP") kB; CPU so far $(cpu "$LP") s"
done
