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
# shellcheck source=tests/lib/harness.sh
. "$(dirname "$0")/../../tests/lib/harness.sh"
# shellcheck source=bench/lib/bench.sh
. "$REPO/bench/lib/bench.sh"   # say, bench_need_root, wait_fine, secs_since
# shellcheck source=bench/scale/lib.sh
. "$REPO/bench/scale/lib.sh"   # scale_netns, scale_images, write_site, rss_now, lines
N=${N:-10000}
K=${K:-5}
RESULTS=${RESULTS:-$REPO/bench/scale/results-lbd-$(date -u +%F).txt}
bench_need_root "a network namespace"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

harness_init bench-lbd         # $WORK; at exit lbd stopped, the namespace deleted
NS=blr-$$
scale_netns "$NS"
scale_images

cpu() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"; }
# The start and each reload are timed: waited for in 10 ms steps (wait_fine).
lbd_up() { nsx curl -sf -o /dev/null --max-time 1 http://10.78.0.1:8404/healthz; }
reloaded() { [[ $(lines "$WORK/lbd.log" "configuration reloaded") -gt $1 ]]; }
refused() { [[ $(lines "$WORK/lbd.log" "reload refused") -gt $1 ]]; }
reload_ended() { reloaded "$1" || refused "$2"; }

write_site "$WORK/site.yaml" "$N"

bench_results "$RESULTS" --append
say "== lbd at scale, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(cd "$REPO" && git rev-parse --short HEAD)"
say "machine: $(uname -srm), $(nproc --all) vCPU; open files limit $(ulimit -n); N=$N nodes"
t=$(now)
start_lbd --log "$WORK/lbd.log" --ready - --env RUST_LOG=info -- --site "$WORK/site.yaml" --user root
LP=$LBD_PID
wait_fine 120 lbd_up || { say "lbd did not start"; tail "$WORK/lbd.log"; exit 1; }
say "   ready in $(secs_since "$t") s; RSS $(rss_now "$LP") kB"
sleep 5   # a few rounds of checks
for k in $(seq 1 "$K"); do
    i=$((N + k - 1))
    c=$(lines "$WORK/lbd.log" "configuration reloaded")
    r=$(lines "$WORK/lbd.log" "reload refused")
    t=$(now)
    printf '  - { name: n%05d, role: worker, live: true, macs: ["02:78:00:%02x:%02x:%02x"], ip: 10.78.%d.%d }\n' \
        "$i" $((i >> 16 & 255)) $((i >> 8 & 255)) $((i & 255)) $((1 + i / 256)) $((i % 256)) >>"$WORK/site.yaml"
    kill -HUP "$LP"
    wait_fine 6 reload_ended "$c" "$r" || true
    took=$(secs_since "$t")
    reloaded "$c" || { say "   reload $k: not done within 6 s"; grep -A3 "reload refused" "$WORK/lbd.log" | tail -4 | tee -a "$RESULTS"; exit 1; }
    sleep 1
    say "   reload $k: $took s; RSS 1 s after $(rss_now "$LP") kB; CPU so far $(cpu "$LP") s"
done
