#!/usr/bin/env bash
# Side-by-side DHCP benchmark, one script for both families:
#   --family 4 (the default): DHCPv4, bootd vs Kea (kea-dhcp4, multi-threaded,
#     memfile with persist=true) vs dnsmasq, driven by perfdhcp in relay mode;
#   --family 6: DHCPv6, bootd vs Kea (kea-dhcp6, the same configuration),
#     driven by perfdhcp -6 in relay mode (-A 1). bench/dhcp6/run.sh runs
#     this with --family 6.
#
# One run does everything: two private network namespaces joined by a veth
# pair (nothing leaves them):
#   4: server side 10.78.0.1/16, relay/load side 10.78.0.254/16 = giaddr;
#   6: server side fd00:78::1/64, relay/load side fd00:78::fe/64 (both
#      nodad, accept_dad=0),
# then for each client count in CLIENTS and ROUNDS rounds, each server in
# turn (order reversed every other round: A B C, C B A), started fresh with
# an empty lease file, pinned to CPU 0, against
#   4: perfdhcp -4 -l 10.78.0.254 -R <clients> -p <DURATION> [-r RATE] 10.78.0.1
#   6: perfdhcp -6 -A 1 -l <load veth> -R <clients> -p <DURATION> [-r RATE] fd00:78::1
#      (one simulated relay: every message is a Relay-forward sent to the
#      server's unicast address, answered with a Relay-reply)
# pinned to CPU 1. Reported per server (median of the rounds): perfdhcp's
# rate of completed exchanges (its Rate: line: DORA for 4, Solicit-
# Advertise-Request-Reply for 6), its drops, the server's CPU time
# (bench/lib/cpu.sh: a cgroup holding the server, all its threads, around
# the perfdhcp run), CPU per exchange, exchanges per server-core-second, and
# the leases (6: bindings) found on disk afterwards; then ratios bootd/peer
# (6: and the product's target, bootd >= 1.5x Kea's SARR/s).
#
# Durability as configured (see README.md, bench/dhcp6/README.md):
#   bootd   : leases.jsonl (6: leases6.jsonl) appended and fdatasync'ed
#             (group commit) before the ACKs (6: the Replies that grant the
#             bindings; an Advertise binds nothing) that depend on them are
#             sent.
#   Kea     : memfile, persist=true: each lease is appended to the CSV and
#             flushed (write(2)) before the ACK (Reply); Kea never fsyncs it.
#   dnsmasq : (4 only) --dhcp-leasefile; the file is rewritten after
#             changes, never fsynced.
#
#   bootd-etcd (4 only): bootd with host.store etcd: each lease committed to
#             a single etcd member (Debian's etcd-server, started in the
#             server's namespace, pinned to the server's CPU and counted
#             with it, its data directory on the same disk) before its
#             ACK; etcd fsyncs its WAL per commit batch. The one appliance
#             elected for DHCP answers.
#   bootd-etcd3 (4 only): the same with three etcd members (each commit
#             waits for two of them), all on the server's CPU and disk: the
#             cost of replication without a network's latency.
#
# No floor row, for either family.
#
# Arguments: [--family 4|6] (4).
# Knobs (env): ROUNDS (3), DURATION (10 s), CLIENTS ("1000 100000"),
# RATE (0 = perfdhcp's "as fast as possible"; else -r RATE), SERVERS
# (4: "bootd kea dnsmasq", "bootd bootd-etcd" for the shared store's cost;
# 6: "bootd kea"), KEA_THREADS (2), BOOTD_LOG (info: bootd's default
# logging to a file; Kea and dnsmasq log at their defaults to files too),
# BOOTD_BIN (target/release/bootd), RESULTS (raw output file, default
# bench/dhcp/results-<UTC date>.txt, 6: bench/dhcp6/...), WAIT_HTTP_BENCH
# (1200: seconds to wait for a running bench/http run to end before each
# measurement), QUIET_WAIT (120 s to wait for other load to stop),
# OTHER_MAX (0.2 CPUs), ATTEMPTS (2 per measurement when other load ran
# meanwhile), KEEP (0; 1 keeps the run's directory, /tmp/bench-dhcp.* or
# /tmp/bench-dhcp6.*, with each run's servers' logs, lease files and
# configs).
set -euo pipefail

FAMILY=4
while [[ $# -gt 0 ]]; do
    case $1 in
    --family) FAMILY=${2:-}; shift 2 || shift ;;
    --family=*) FAMILY=${1#*=}; shift ;;
    *) echo "usage: $(basename "$0") [--family 4|6]" >&2; exit 2 ;;
    esac
done
[[ $FAMILY == 4 || $FAMILY == 6 ]] || { echo "--family: 4 or 6, not '$FAMILY'" >&2; exit 2; }

# shellcheck source=tests/lib/harness.sh
. "$(dirname "$0")/../../tests/lib/harness.sh"
# shellcheck source=bench/lib/bench.sh
. "$REPO/bench/lib/bench.sh"   # say, log, raw, bench_need_*, num_lt
# shellcheck source=bench/lib/cpu.sh
. "$REPO/bench/lib/cpu.sh"     # cpu_init, cpu_group, cpu_spawn, cpu_read, cpu_snap, cpu_quiet, ...

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
CLIENTS=${CLIENTS:-"1000 100000"}
RATE=${RATE:-0}
KEA_THREADS=${KEA_THREADS:-2}
BOOTD_LOG=${BOOTD_LOG:-info}
WAIT_HTTP_BENCH=${WAIT_HTTP_BENCH:-1200}
KEEP=${KEEP:-0}
SERVER_CPU=0
LOAD_CPU=1
BOOTD_BIN=${BOOTD_BIN:-$REPO/target/release/bootd}

# What differs between the families, all here.
if [[ $FAMILY == 4 ]]; then
    NAME=dhcp
    SERVERS=${SERVERS:-"bootd kea dnsmasq"}
    KNOWN="bootd kea dnsmasq bootd-etcd bootd-etcd3"
    TOOLS="perfdhcp kea-dhcp4 dnsmasq"
    S=bdh-s-$$ L=bdh-l-$$
    VS=vs$$ VL=vl$$
    SRV_IP=10.78.0.1 RELAY_IP=10.78.0.254
    SRV_CIDR=$SRV_IP/16 RELAY_CIDR=$RELAY_IP/16
    HTTP=http://$SRV_IP:8080
    SUBNET=10.78.0.0/16 POOL_START=10.78.1.0 POOL_END=10.78.255.250 NODE_IP=10.78.0.20
    SITE_NOTE="examples/lab/site.yaml's structure, on 10.78.0.0/16 with a big pool."
    DHCP_KEY=dhcp DHCP_MORE=""
    METRICS='^bootd_dhcp'
    ACKS=acks REJ=naks   # the keys of the completed exchanges and the rejected leases in R
else
    NAME=dhcp6
    SERVERS=${SERVERS:-"bootd kea"}
    KNOWN="bootd kea"
    TOOLS="perfdhcp kea-dhcp6 ss timeout"
    S=bd6-s-$$ L=bd6-l-$$
    VS=vs6-$$ VL=vl6-$$
    SRV_IP=fd00:78::1 RELAY_IP=fd00:78::fe
    SRV_CIDR=$SRV_IP/64 RELAY_CIDR=$RELAY_IP/64
    HTTP=http://[$SRV_IP]:8080
    SUBNET=fd00:78::/64 POOL_START=fd00:78::1:0 POOL_END=fd00:78::ffff:ffff NODE_IP=fd00:78::20
    SITE_NOTE="examples/lab-dual/site.yaml's structure, IPv6 only, on fd00:78::/64 with a pool for far more than 100 000 clients."
    # Above the largest client count: the table's limit (65 536 by default)
    # would answer the rest NoAddrsAvail, and Kea has none.
    DHCP_KEY=dhcp6 DHCP_MORE="maxBindings: 1048576"
    METRICS='^bootd_dhcp6'
    ACKS=replies REJ=rejected
fi
RESULTS=${RESULTS:-$REPO/bench/$NAME/results-$(date -u +%F).txt}

bench_need_root "network namespaces"
# shellcheck disable=SC2086 # one tool a word
bench_need_tools 2 "tests/lab/deps.sh installs them" $TOOLS taskset ip curl awk sort
[[ -x $BOOTD_BIN ]] || { echo "no bootd at $BOOTD_BIN: cargo build --release -p appliance --bin bootd" >&2; exit 2; }
bench_need_cpus 2
for s in $SERVERS; do
    [[ " $KNOWN " == *" $s "* ]] || { echo "SERVERS: unknown server $s ($KNOWN)" >&2; exit 2; }
done

harness_init "bench-$NAME"     # $WORK; at exit the servers stopped, the namespaces deleted
if [[ $KEEP == 1 ]]; then
    export KEEP_WORK=1
    # shellcheck disable=SC2016 # expanded at exit
    on_exit 'echo "run.sh: kept $WORK (KEEP=1)" >&2'
fi
bench_results "$RESULTS"

# The machine may be shared (another agent's bench/http run, QEMU lab tests).
# Before a measurement: no wrk / bench/http run, and at most OTHER_MAX CPUs'
# worth of load that is not ours, waited for up to QUIET_WAIT s. During it:
# "other" load over the whole machine (bench/lib/cpu.sh: busy time in
# /proc/stat minus our groups, the server and this script with perfdhcp, and
# ksoftirqd); a run with more than OTHER_MAX CPUs of other load is repeated
# (ATTEMPTS at most), then kept and flagged in the log.
OTHER_MAX=${OTHER_MAX:-0.2}
QUIET_WAIT=${QUIET_WAIT:-120}
ATTEMPTS=${ATTEMPTS:-2}
cpu_init "$NAME"
cpu_group CG_LOAD load $LOAD_CPU
cpu_join "$CG_LOAD"
cpu_group CG_SRV server $SERVER_CPU
wait_quiet() {
    cpu_wait_http_bench "$WAIT_HTTP_BENCH"
    cpu_quiet "$OTHER_MAX" "$QUIET_WAIT"
}

# --- network: S (servers) <-veth-> L (perfdhcp as relay agent) ------------
ns_pair "$S" "$L" "$VS" "$VL"
if [[ $FAMILY == 6 ]]; then
    # No duplicate address detection: addresses usable at once (ns_addr adds
    # them nodad; the link-local ones need accept_dad=0, the veth ends
    # already exist, so their own setting too).
    ip netns exec "$S" sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0 "net.ipv6.conf.$VS.accept_dad=0"
    ip netns exec "$L" sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0 "net.ipv6.conf.$VL.accept_dad=0"
fi
ns_addr "$S" "$VS" "$SRV_CIDR"
ns_addr "$L" "$VL" "$RELAY_CIDR"

SRV_PID="" ETCD_PIDS=()
stop_server() { [[ -z $SRV_PID ]] || stop_pid "$SRV_PID"; SRV_PID=""; }
stop_etcd() {
    local p
    for p in "${ETCD_PIDS[@]}"; do stop_pid "$p"; done
    ETCD_PIDS=()
}

# Is something in S listening on the server port (6: on the server's
# unicast address, or on all of them)?
listening() {
    if [[ $FAMILY == 4 ]]; then ip netns exec "$S" ss -Hlun 'sport = :67' | grep -q .
    else ip netns exec "$S" ss -Hlun 'sport = :547' | grep -qE "\[?($SRV_IP|::|\*)\]?:547"; fi
}
bootd_up() { ip netns exec "$S" curl -sf -o /dev/null --max-time 1 "$HTTP/healthz" && listening; }
# Up once it answers DHCP: elected, the shared leases loaded.
bootd_shared_up() { grep -q "shared leases loaded" "$1/bootd.log" 2>/dev/null && listening; }

write_configs() { # dir
    local d=$1
    mkdir -p "$d/state" "$d/images/lab"
    printf 'bench kernel\n' >"$d/images/lab/kernel"
    printf 'bench initramfs\n' >"$d/images/lab/initramfs"
    cat >"$d/site.yaml" <<EOF
# $SITE_NOTE
cluster: { name: bench, baseDomain: example.test }
host:
  stateDir: $d/state
  http: { listen: "${HTTP#http://}", url: "$HTTP" }
  $DHCP_KEY:
    interface: $VS
    serverAddress: "$SRV_IP"
    leaseTime: 1h
    $DHCP_MORE
networks:
  - name: bench
    subnet: "$SUBNET"
    gateway: "$RELAY_IP"
    dnsServers: ["$SRV_IP"]
    pool: { start: "$POOL_START", end: "$POOL_END" }
vips: { api: "$SRV_IP", ingress: "$SRV_IP" }
images:
  root: $d/images
  sets:
    lab-x86_64: { arch: x86_64, kernel: lab/kernel, initramfs: lab/initramfs }
nodes:
  - { name: worker-0, role: worker, live: true, macs: ["52:54:00:78:00:20"], ip: "$NODE_IP" }
ignition:
  dir: $REPO/examples/lab/ignition
EOF
    if [[ $FAMILY == 4 ]]; then
        cat >"$d/kea.json" <<EOF
{ "Dhcp4": {
    "interfaces-config": { "interfaces": [ "$VS/$SRV_IP" ], "dhcp-socket-type": "udp" },
    "lease-database": { "type": "memfile", "persist": true, "name": "$d/kea-leases4.csv", "lfc-interval": 0 },
    "multi-threading": { "enable-multi-threading": true, "thread-pool-size": $KEA_THREADS, "packet-queue-size": 64 },
    "valid-lifetime": 3600,
    "option-data": [
        { "name": "routers", "data": "$RELAY_IP" },
        { "name": "domain-name-servers", "data": "$SRV_IP" },
        { "name": "domain-name", "data": "bench.example.test" } ],
    "subnet4": [ { "id": 1, "subnet": "$SUBNET", "pools": [ { "pool": "$POOL_START - $POOL_END" } ] } ],
    "loggers": [ { "name": "kea-dhcp4", "severity": "INFO",
                   "output_options": [ { "output": "$d/kea.log" } ] } ]
} }
EOF
        return
    fi
    # The subnet names the interface: perfdhcp's Relay-forward carries link
    # address :: (Kea then selects by the sender's address, else by the
    # interface it came in on). data-directory: the server DUID file goes
    # here, not to /var/lib/kea.
    cat >"$d/kea.json" <<EOF
{ "Dhcp6": {
    "data-directory": "$d",
    "server-id": { "type": "LLT", "persist": false },
    "interfaces-config": { "interfaces": [ "$VS/$SRV_IP" ] },
    "lease-database": { "type": "memfile", "persist": true, "name": "$d/kea-leases6.csv", "lfc-interval": 0 },
    "multi-threading": { "enable-multi-threading": true, "thread-pool-size": $KEA_THREADS, "packet-queue-size": 64 },
    "preferred-lifetime": 3600,
    "valid-lifetime": 3600,
    "renew-timer": 1800,
    "rebind-timer": 2880,
    "option-data": [
        { "name": "dns-servers", "data": "$SRV_IP" },
        { "name": "domain-search", "data": "bench.example.test" } ],
    "subnet6": [ { "id": 1, "subnet": "$SUBNET", "interface": "$VS",
                   "pools": [ { "pool": "$POOL_START - $POOL_END" } ] } ],
    "loggers": [ { "name": "kea-dhcp6", "severity": "INFO",
                   "output_options": [ { "output": "$d/kea.log" } ] } ]
} }
EOF
}

start_server() { # name dir
    local name=$1 d=$2
    local on_cpu=(taskset -c "$SERVER_CPU")
    case $name in
    bootd-etcd | bootd-etcd3)
        # One member, or three (a quorum of two per commit), all on the
        # server's CPU and counted with it.
        local m members=1 cluster="" endpoints=""
        [[ $name == bootd-etcd3 ]] && members=3
        for ((m = 0; m < members; m++)); do
            cluster+="${cluster:+,}m$m=http://127.0.0.1:$((12380 + 10 * m))"
            endpoints+="${endpoints:+, }\"http://127.0.0.1:$((12379 + 10 * m))\""
        done
        for ((m = 0; m < members; m++)); do
            cpu_spawn "$CG_SRV" --ns "$S" --log "$d/etcd$m.log" "${on_cpu[@]}" etcd --name "m$m" --data-dir "$d/etcd$m" \
                --listen-client-urls "http://127.0.0.1:$((12379 + 10 * m))" --advertise-client-urls "http://127.0.0.1:$((12379 + 10 * m))" \
                --listen-peer-urls "http://127.0.0.1:$((12380 + 10 * m))" --initial-advertise-peer-urls "http://127.0.0.1:$((12380 + 10 * m))" \
                --initial-cluster "$cluster" --log-level error
            ETCD_PIDS+=("$SPAWNED")
        done
        lab_site "$d/site.yaml" --from "$d/site.yaml" host.store="{etcd: {endpoints: [$endpoints], prefix: /bench/}}"
        cpu_spawn "$CG_SRV" --ns "$S" --log "$d/bootd.log" env RUST_LOG="$BOOTD_LOG" "${on_cpu[@]}" "$BOOTD_BIN" --site "$d/site.yaml"
        SRV_PID=$SPAWNED
        wait_for 20 bootd_shared_up "$d" && return 0 ;;
    bootd)
        cpu_spawn "$CG_SRV" --ns "$S" --log "$d/bootd.log" env RUST_LOG="$BOOTD_LOG" "${on_cpu[@]}" "$BOOTD_BIN" --site "$d/site.yaml"
        SRV_PID=$SPAWNED
        wait_for 10 bootd_up && return 0 ;;
    kea)
        cpu_spawn "$CG_SRV" --ns "$S" --log "$d/kea.out" env KEA_PIDFILE_DIR="$d" KEA_LOCKFILE_DIR="$d" "${on_cpu[@]}" "kea-dhcp$FAMILY" -c "$d/kea.json"
        SRV_PID=$SPAWNED
        wait_for 10 listening && return 0 ;;
    dnsmasq)
        # --no-ping: the others don't ping before offering either (dnsmasq's
        # default ICMP check would delay every new OFFER).
        cpu_spawn "$CG_SRV" --ns "$S" --log "$d/dnsmasq.out" "${on_cpu[@]}" dnsmasq --keep-in-foreground --conf-file=/dev/null --port=0 \
            --user=root --group=root --pid-file="$d/dnsmasq.pid" \
            --interface="$VS" --bind-interfaces --log-facility="$d/dnsmasq.log" \
            --dhcp-range=10.78.1.0,10.78.255.250,255.255.0.0,1h --dhcp-lease-max=300000 --no-ping \
            --dhcp-option=3,$RELAY_IP --dhcp-option=6,$SRV_IP --domain=bench.example.test \
            --dhcp-leasefile="$d/dnsmasq.leases"
        SRV_PID=$SPAWNED
        wait_for 10 listening && return 0 ;;
    esac
    log "$name did not come up"; tail -n 30 "$d"/*.log "$d"/*.out >&2 2>/dev/null || true
    return 1
}

# name dir -> 4: distinct MACs with an active lease in the file; 6: distinct
# (DUID, IAID) with a binding in the lease file
leases_on_disk() {
    local d=$2
    case $FAMILY-$1 in
    4-bootd) [[ -f $d/state/leases.jsonl ]] && grep -o '"mac":"[^"]*"' "$d/state/leases.jsonl" | sort -u | wc -l || echo 0 ;;
    4-bootd-etcd*) [[ ${#ETCD_PIDS[@]} -gt 0 ]] && ETCDCTL_API=3 ip netns exec "$S" etcdctl --endpoints http://127.0.0.1:12379 get --prefix /bench/dhcp/leases/ --keys-only 2>/dev/null \
        | grep -c . || echo 0 ;;
    4-kea) [[ -f $d/kea-leases4.csv ]] && awk -F, 'NR>1 {print $2}' "$d/kea-leases4.csv" | sort -u | wc -l || echo 0 ;;
    4-dnsmasq) [[ -f $d/dnsmasq.leases ]] && wc -l <"$d/dnsmasq.leases" || echo 0 ;;
    6-bootd) [[ -f $d/state/leases6.jsonl ]] && sed -nE 's/.*"duid":"([^"]*)".*"iaid":([0-9]+).*/\1 \2/p' "$d/state/leases6.jsonl" | sort -u | wc -l || echo 0 ;;
    # address,duid,valid_lifetime,expire,subnet_id,pref_lifetime,lease_type,iaid,...
    6-kea) [[ -f $d/kea-leases6.csv ]] && awk -F, 'NR > 1 && $7 == 0 {print $2, $8}' "$d/kea-leases6.csv" | sort -u | wc -l || echo 0 ;;
    esac
}

# perfdhcp's report -> "rate a_sent a_recv a_drops r_sent r_recv r_drops
# rejected a_avg_delay_ms r_avg_delay_ms": a = the first exchange
# (DISCOVER-OFFER, SOLICIT-ADVERTISE), r = the second (REQUEST-ACK,
# REQUEST-REPLY); rejected = rejected leases (4: NAKs). The delays (6's
# log line): how long answers queue; perfdhcp counts one as a drop after 1 s.
parse_perfdhcp() {
    awk '
      /^\*\*\*Statistics for: (DISCOVER-OFFER|SOLICIT-ADVERTISE)/ { ex = "a" }
      /^\*\*\*Statistics for: REQUEST-(ACK|REPLY)/ { ex = "r" }
      /^sent packets:/ { s[ex] = $3 }
      /^received packets:/ { r[ex] = $3 }
      /^drops:/ { dr[ex] = $2 }
      /^rejected leases:/ { rej += $3 }
      /^avg delay:/ { ad[ex] = $3 }
      /^Rate:/ { rate = $2 }
      END { printf "%s %s %s %s %s %s %s %s %s %s\n", rate+0, s["a"]+0, r["a"]+0, dr["a"]+0, s["r"]+0, r["r"]+0, dr["r"]+0, rej+0, ad["a"]+0, ad["r"]+0 }' "$1"
}

# --- report the setup ------------------------------------------------------
rev="$(cd "$REPO" && git rev-parse --short HEAD 2>/dev/null || echo '?')$(cd "$REPO" && git diff --quiet HEAD -- bootd site 2>/dev/null || echo '+dirty')"
load_rate=$([[ $RATE == 0 ]] && echo 'unlimited (as fast as possible)' || echo "-r $RATE")
if [[ $FAMILY == 4 ]]; then
    say "== bootd vs Kea vs dnsmasq DHCPv4 (perfdhcp relay mode), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    say "machine: $(uname -srm), $(nproc --all) vCPU ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), $(. /etc/os-release && echo "$PRETTY_NAME")"
    say "bootd: $BOOTD_BIN ($rev), RUST_LOG=$BOOTD_LOG, log to a file"
    say "kea: $(kea-dhcp4 -v), memfile persist=true lfc-interval=0, multi-threading thread-pool-size=$KEA_THREADS packet-queue-size=64, udp sockets, INFO log to a file"
    say "dnsmasq: $(dnsmasq --version | head -1 | awk '{print $3}'), --dhcp-leasefile --dhcp-lease-max=300000 --no-ping, default log to a file"
    say "perfdhcp: $(perfdhcp -v 2>&1 | head -1); relay mode -l $RELAY_IP (giaddr) from its own namespace across a veth; -p $DURATION s; rate: $load_rate"
else
    say "== bootd vs Kea DHCPv6 (perfdhcp -6 relay mode -A 1), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    say "machine: $(uname -srm), $(nproc --all) vCPU ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), $(. /etc/os-release && echo "$PRETTY_NAME")"
    say "bootd: $BOOTD_BIN ($rev), RUST_LOG=$BOOTD_LOG, log to a file; leases6.jsonl fdatasync'ed before the Reply"
    say "kea: kea-dhcp6 $(kea-dhcp6 -v), memfile persist=true lfc-interval=0 (no fsync), multi-threading thread-pool-size=$KEA_THREADS packet-queue-size=64, INFO log to a file"
    say "perfdhcp: $(perfdhcp -v 2>&1 | head -1); -6 -A 1 (relay) -l $VL from its own namespace ($RELAY_IP) across a veth to $SRV_IP; -p $DURATION s; rate: $load_rate"
fi
say "pinning: servers taskset CPU $SERVER_CPU, perfdhcp CPU $LOAD_CPU; rounds: $ROUNDS, order reversed every other round; each run starts with an empty lease file"
say "cpu accounting: $CPU_HOW"
if [[ $FAMILY == 4 ]]; then
    say "pool 10.78.1.0-10.78.255.250 (65274 addresses) on 10.78.0.0/16"
else
    say "subnet fd00:78::/64, pool $POOL_START-$POOL_END; valid lifetime 1h; no floor row (the DHCPv4 bench has none)"
fi
say ""

declare -A R  # R[clients,server,metric] = space-separated values per round
run_one() { # server clients round
    local name=$1 n=$2 round=$3 a d best="" best_other=""
    for ((a = 1; a <= ATTEMPTS; a++)); do
        d=$WORK/$name-$n-$round-$a
        write_configs "$d"
        wait_quiet
        start_server "$name" "$d" || return 1
        sleep 0.5
        local c0 c1 t0 t1 s0 s1
        s0=$(cpu_snap)
        c0=$(cpu_read "$CG_SRV"); t0=$(now)
        local args=(-4 -l "$RELAY_IP" -R "$n" -p "$DURATION")
        [[ $FAMILY == 6 ]] && args=(-6 -A 1 -l "$VL" -R "$n" -p "$DURATION")
        [[ $RATE != 0 ]] && args+=(-r "$RATE")
        ip netns exec "$L" taskset -c $LOAD_CPU timeout $((DURATION + 30)) perfdhcp "${args[@]}" "$SRV_IP" >"$d/perfdhcp.out" 2>&1 || true
        c1=$(cpu_read "$CG_SRV"); t1=$(now)
        s1=$(cpu_snap)
        local other; other=$(cpu_load "$s0" "$s1")
        local rss; rss=$(awk '/VmHWM/ {print $2}' "/proc/$SRV_PID/status" 2>/dev/null || echo '?')
        local metrics=""
        if [[ $name == bootd* ]]; then
            metrics=$(ip netns exec "$S" curl -sf --max-time 2 "$HTTP/metrics" | grep -E "$METRICS" | tr '\n' ' ' || true)
        fi
        # etcd's keys are read while it runs: bootd stopped first.
        stop_server
        local onDisk; onDisk=$(leases_on_disk "$name" "$d")
        stop_etcd
        local rate as ar ad rs rr rd rej adelay rdelay
        read -r rate as ar ad rs rr rd rej adelay rdelay < <(parse_perfdhcp "$d/perfdhcp.out")
        local cpu; cpu=$(cpu_used "$c0" "$c1" %.3f); cpu=${cpu%% *}
        local wall; wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
        # completed exchanges = ACKs (6: Replies to Requests) received by perfdhcp
        local us_per; us_per=$(awk -v c="$cpu" -v k="$rr" 'BEGIN { if (k > 0) printf "%.1f", c * 1e6 / k; else print "nan" }')
        local per_core; per_core=$(awk -v c="$cpu" -v k="$rr" 'BEGIN { if (c > 0) printf "%.0f", k / c; else print "nan" }')
        local drops=$((ad + rd))
        if [[ $FAMILY == 4 ]]; then
            log "clients=$n round=$round attempt=$a $name: DORA/s=$rate discover sent/recv/drops=$as/$ar/$ad request sent/recv/drops=$rs/$rr/$rd naks=$rej cpu=${cpu}s wall=${wall}s cpu/DORA=${us_per}us DORA/core-s=$per_core leases-on-disk=$onDisk rss=${rss}kB other-load=${other}CPUs"
        else
            log "clients=$n round=$round attempt=$a $name: SARR/s=$rate solicit sent/recv/drops=$as/$ar/$ad request sent/recv/drops=$rs/$rr/$rd rejected=$rej avg-delay SA/RR=${adelay}/${rdelay}ms cpu=${cpu}s wall=${wall}s cpu/SARR=${us_per}us SARR/core-s=$per_core bindings-on-disk=$onDisk rss=${rss}kB other-load=${other}CPUs"
        fi
        [[ -n $metrics ]] && log "  bootd metrics: $metrics"
        if [[ $name == kea ]] && ! grep -q "DHCP${FAMILY}_STARTED" "$d/kea.log" 2>/dev/null; then
            log "  kea log: $(tail -n 3 "$d/kea.log" 2>/dev/null | tr '\n' ' ')"
        fi
        { echo "----- perfdhcp output: clients=$n round=$round attempt=$a server=$name"; cat "$d/perfdhcp.out"; echo "-----"; } | raw
        [[ $KEEP == 1 ]] || rm -rf "$d"
        # keep the attempt with the least other load
        if [[ -z $best_other ]] || num_lt "$other" "$best_other"; then
            best_other=$other
            best="rate $rate|drops $drops|cpu $cpu|us $us_per|core $per_core|$ACKS $rr|disk $onDisk|$REJ $rej|other $other"
        fi
        num_lt "$OTHER_MAX" "$other" || break
        if ((a < ATTEMPTS)); then log "  other load ${other} CPUs during the run: repeating it"; else log "  WARNING: other load during every attempt; keeping the one with the least (${best_other} CPUs)"; fi
    done
    local kv k v kvs
    IFS='|' read -r -a kvs <<<"$best"
    for kv in "${kvs[@]}"; do
        read -r k v <<<"$kv"
        R[$n,$name,$k]="${R[$n,$name,$k]:-} $v"
    done
}

read -r -a SRV <<<"$SERVERS"
for n in $CLIENTS; do
    for ((round = 1; round <= ROUNDS; round++)); do
        for s in $(order "$round" "${SRV[@]}"); do run_one "$s" "$n" "$round"; done
    done
done

# shellcheck disable=SC2086 # the rounds' values, one a word
med() { median_of ${R[$1,$2,$3]:-}; }

say ""
say "== results (median of $ROUNDS; per-round values in brackets)"
for n in $CLIENTS; do
    say ""
    if [[ $FAMILY == 4 ]]; then
        say "### perfdhcp -R $n, -p $DURATION s"
        say ""
        say "| server | DORA/s | drops | server CPU s | CPU us/DORA | DORA per server-core-s | ACKs | leases on disk | other load (CPUs) |"
        say "|---|---|---|---|---|---|---|---|---|"
    else
        say "### perfdhcp -6 -A 1 -R $n, -p $DURATION s"
        say ""
        say "| server | SARR/s | drops | server CPU s | CPU us/SARR | SARR per server-core-s | Replies | bindings on disk | rejected | other load (CPUs) |"
        say "|---|---|---|---|---|---|---|---|---|---|"
    fi
    for s in "${SRV[@]}"; do
        row="| $s | $(med "$n" "$s" rate) [${R[$n,$s,rate]# }] | $(med "$n" "$s" drops) | $(med "$n" "$s" cpu) | $(med "$n" "$s" us) | $(med "$n" "$s" core) [${R[$n,$s,core]# }] | $(med "$n" "$s" $ACKS) | $(med "$n" "$s" disk) |"
        [[ $FAMILY == 6 ]] && row+=" $(med "$n" "$s" rejected) |"
        say "$row ${R[$n,$s,other]# } |"
    done
    [[ " ${SRV[*]} " == *" bootd "* ]] || continue
    if [[ $FAMILY == 4 ]]; then
        say ""
        for p in "${SRV[@]}"; do
            [[ $p == bootd ]] && continue
            say "ratio bootd/$p ($n clients): DORA/s $(ratio "$(med "$n" bootd rate)" "$(med "$n" "$p" rate)"), DORA per server-core-s $(ratio "$(med "$n" bootd core)" "$(med "$n" "$p" core)")"
        done
    elif [[ " ${SRV[*]} " == *" kea "* ]]; then
        r=$(ratio "$(med "$n" bootd rate)" "$(med "$n" kea rate)")
        say ""
        say "ratio bootd/kea ($n clients): SARR/s $r, SARR per server-core-s $(ratio "$(med "$n" bootd core)" "$(med "$n" kea core)")"
        say "target bootd >= 1.5x Kea's SARR/s (bindings durable before Reply): $(awk -v r="$r" 'BEGIN { if (r == r + 0) print (r >= 1.5 ? "met" : "not met"); else print "n/a" }') ($r)"
    fi
done
say ""
say "raw output: $RESULTS"
