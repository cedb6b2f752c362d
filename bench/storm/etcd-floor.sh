#!/usr/bin/env bash
# The HA storm's floor: what a 3-member etcd costs for the consensus writes
# of a storm with no appliance doing any work. The members as run.sh starts
# them (Debian's etcd, one namespace, a bridge, data on the same disk, all
# pinned to CPU 0); from CPU 1, etcd's own client (target/release/examples/
# txn-floor) sends K transactions of a token spend's shape, one at a time on
# one connection, as an appliance's spends arrive during a storm (they
# seldom overlap). Prints the members' CPU (user + system, /proc) in all and
# per transaction, and their WAL fsyncs.
#
# Usage: bench/storm/etcd-floor.sh [K]   (K: 1000; ROUNDS: 3; RESULTS: a file
# the report is also written to; IDLE: seconds to measure the members with
# no client after the transactions, 0: not)
set -euo pipefail
# shellcheck source=tests/lib/harness.sh
. "$(dirname "$0")/../../tests/lib/harness.sh"
# shellcheck source=bench/lib/bench.sh
. "$REPO/bench/lib/bench.sh"
K=${1:-1000}
ROUNDS=${ROUNDS:-3}
IDLE=${IDLE:-0}
FLOOR_BIN=${FLOOR_BIN:-$REPO/target/release/examples/txn-floor}
bench_need_root "network namespaces"
[[ -x $FLOOR_BIN ]] || { echo "build first: cargo build --release -p etcd --example txn-floor" >&2; exit 2; }
harness_init etcd-floor
[[ -z ${RESULTS:-} ]] || bench_results "$RESULTS"
E=efl-$$
ns_new "$E"
ip -n "$E" link add br1 type bridge forward_delay 0 stp_state 0
ns_addr "$E" br1 10.79.0.11/24 10.79.0.12/24 10.79.0.13/24
ip -n "$E" link set br1 up
ENDPOINTS=http://10.79.0.11:2379,http://10.79.0.12:2379,http://10.79.0.13:2379
ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
fsyncs() {
    ip netns exec "$E" curl -s --max-time 5 http://10.79.0.11:2379/metrics \
        | awk '$1 == "etcd_disk_wal_fsync_duration_seconds_count" { print $2 + 0 }'
}
HZ=$(getconf CLK_TCK)
say "== etcd floor: $K spend-shaped transactions, one at a time, 3 members on CPU 0, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say "etcd: $(etcd --version 2>/dev/null | head -1)"
for ((r = 1; r <= ROUNDS; r++)); do
    d=$WORK/r$r cluster="" pids=()
    mkdir -p "$d"
    for i in 1 2 3; do cluster+="${cluster:+,}m$i=http://10.79.0.1$i:2380"; done
    for i in 1 2 3; do
        spawn --ns "$E" --log "$d/m$i.log" taskset -c 0 etcd --name "m$i" --data-dir "$d/m$i" \
            --listen-client-urls "http://10.79.0.1$i:2379" --advertise-client-urls "http://10.79.0.1$i:2379" \
            --listen-peer-urls "http://10.79.0.1$i:2380" --initial-advertise-peer-urls "http://10.79.0.1$i:2380" \
            --initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token "floor-$$-$r"
        pids+=("$SPAWNED")
    done
    wait_for 30 ip netns exec "$E" etcdctl --endpoints "$ENDPOINTS" endpoint health >/dev/null 2>&1 \
        || { log "etcd: no healthy cluster"; exit 1; }
    sleep 2
    t0=() f0=$(fsyncs)
    for p in "${pids[@]}"; do t0+=("$(ticks "$p")"); done
    out=$(ip netns exec "$E" taskset -c 1 "$FLOOR_BIN" "$ENDPOINTS" "$K")
    t=0 each=""
    for i in 0 1 2; do
        c=$(( $(ticks "${pids[i]}") - t0[i] ))
        t=$((t + c))
        each+="m$((i + 1)) $(awk -v c="$c" -v hz="$HZ" 'BEGIN { printf "%.2f", c / hz }') s, "
    done
    f1=$(fsyncs)
    say "round $r: $out; members' CPU $(awk -v c="$t" -v hz="$HZ" 'BEGIN { printf "%.3f", c / hz }') s (${each%, }), $(awk -v c="$t" -v hz="$HZ" -v k="$K" 'BEGIN { printf "%.2f", c / hz / k * 1000 }') ms per transaction; m1 WAL fsyncs $((${f1%.*} - ${f0%.*}))"
    if ((IDLE > 0)); then
        # The same members with no client: what they cost for being there
        # (heartbeats, the leader's lease checks) over IDLE seconds.
        t0=()
        for p in "${pids[@]}"; do t0+=("$(ticks "$p")"); done
        sleep "$IDLE"
        t=0
        for i in 0 1 2; do t=$((t + $(ticks "${pids[i]}") - t0[i])); done
        say "round $r idle: members' CPU $(awk -v c="$t" -v hz="$HZ" 'BEGIN { printf "%.3f", c / hz }') s over $IDLE s, no client ($(awk -v c="$t" -v hz="$HZ" -v s="$IDLE" 'BEGIN { printf "%.1f", c / hz / s * 1000 }') CPU-ms a second)"
    fi
    bench_stop "${pids[@]}"
    rm -rf "$d"/m?
done
