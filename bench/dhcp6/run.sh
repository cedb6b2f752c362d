#!/usr/bin/env bash
# Side-by-side DHCPv6 benchmark: bootd vs Kea (kea-dhcp6, multi-threaded,
# memfile with persist=true), driven by perfdhcp -6 in relay mode (-A 1).
# The DHCPv4 benchmark (bench/dhcp/run.sh) is the model: same namespaces,
# pinning, CPU accounting (bench/lib/cpu.sh), round order (bench/lib/order.sh)
# and report.
#
# One run does everything: two private network namespaces joined by a veth
# pair (server side fd00:78::1/64, relay/load side fd00:78::fe/64, both
# nodad, accept_dad=0; nothing leaves them), then for each client count in
# CLIENTS and ROUNDS rounds, each server in turn (order reversed every other
# round: A B, B A), started fresh with an empty lease file, pinned to CPU 0,
# against
#   perfdhcp -6 -A 1 -l <load veth> -R <clients> -p <DURATION> [-r RATE] fd00:78::1
# pinned to CPU 1 (one simulated relay: every message is a Relay-forward
# sent to the server's unicast address, answered with a Relay-reply).
# Reported per server (median of the rounds): perfdhcp's rate of completed
# Solicit-Advertise-Request-Reply exchanges (its Rate: line; Replies
# received per second), its drops, the server's CPU time (a cgroup holding
# the server, all its threads, around the perfdhcp run), CPU per SARR, SARR
# per server-core-second, and the bindings found on disk afterwards; then
# ratios bootd/Kea and the product's target (bootd >= 1.5x Kea's SARR/s).
#
# Durability as configured (see README.md):
#   bootd : leases6.jsonl appended and fdatasync'ed (group commit) before
#           the Replies that grant the bindings are sent (an Advertise
#           binds nothing and is not written).
#   Kea   : memfile, persist=true: each lease is appended to the CSV and
#           flushed (write(2)) before the Reply; Kea never fsyncs it.
#
# No floor row: the DHCPv4 bench has none either.
#
# Knobs (env): ROUNDS (3), DURATION (10 s), CLIENTS ("1000 100000"),
# RATE (0 = perfdhcp's "as fast as possible"; else -r RATE), SERVERS
# ("bootd kea"), KEA_THREADS (2), BOOTD_LOG (info: bootd's default logging,
# to a file; Kea logs at INFO to a file too), BOOTD_BIN
# (target/release/bootd), RESULTS (raw output file, default
# bench/dhcp6/results-<UTC date>.txt), WAIT_HTTP_BENCH (1200: seconds to
# wait for a running bench/http run to end before each measurement),
# QUIET_WAIT (120 s to wait for other load to stop), OTHER_MAX (0.2 CPUs),
# ATTEMPTS (2 per measurement when other load ran meanwhile), KEEP (0; 1 keeps
# each run's directory under /tmp/bench-dhcp6.* with the servers' logs, lease
# files and configs).
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
CLIENTS=${CLIENTS:-"1000 100000"}
RATE=${RATE:-0}
SERVERS=${SERVERS:-"bootd kea"}
KEA_THREADS=${KEA_THREADS:-2}
BOOTD_LOG=${BOOTD_LOG:-info}
WAIT_HTTP_BENCH=${WAIT_HTTP_BENCH:-1200}
KEEP=${KEEP:-0}
SERVER_CPU=0
LOAD_CPU=1

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BOOTD_BIN=${BOOTD_BIN:-$REPO/target/release/bootd}
RESULTS=${RESULTS:-$HERE/results-$(date -u +%F).txt}

[[ $(id -u) -eq 0 ]] || { echo "run.sh: run as root (network namespaces)" >&2; exit 2; }
for t in perfdhcp kea-dhcp6 taskset ip ss curl awk sort timeout; do
    command -v "$t" >/dev/null || { echo "missing tool: $t (tests/lab/deps.sh installs them)" >&2; exit 2; }
done
[[ -x $BOOTD_BIN ]] || { echo "no bootd at $BOOTD_BIN: cargo build --release -p appliance --bin bootd" >&2; exit 2; }
[[ $(nproc --all) -ge 2 ]] || { echo "need 2 CPUs" >&2; exit 2; }
for s in $SERVERS; do
    case $s in bootd | kea) ;; *) echo "SERVERS: unknown server $s (bootd, kea)" >&2; exit 2 ;; esac
done

S=bd6-s-$$ L=bd6-l-$$
VS=vs6-$$ VL=vl6-$$
SRV_IP=fd00:78::1 RELAY_IP=fd00:78::fe
POOL_START=fd00:78::1:0 POOL_END=fd00:78::ffff:ffff
WORK=$(mktemp -d /tmp/bench-dhcp6.XXXXXX)
chmod 755 "$WORK"   # bootd serves as nobody once it has bound its sockets
SRV_PID=""
. "$REPO/bench/lib/ns.sh"      # ns_pair, ns_addr, ns_cleanup
. "$REPO/bench/lib/cpu.sh"     # cpu_init, cpu_group, incg, cpu_read, cpu_snap, cpu_quiet, ...
. "$REPO/bench/lib/order.sh"   # order
cleanup() {
    stop_server || true
    ns_cleanup
    cpu_cleanup
    if [[ $KEEP == 1 ]]; then echo "run.sh: kept $WORK (KEEP=1)" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

: >"$RESULTS"
raw() { cat >>"$RESULTS"; }
say() { echo "$*"; echo "$*" >>"$RESULTS"; }
log() { echo "# $*" >&2; echo "# $*" >>"$RESULTS"; }

# The machine may be shared: as in bench/dhcp/run.sh, wait (bounded) for no
# bench/http run and at most OTHER_MAX CPUs of other load before a
# measurement; a run with more other load is repeated (ATTEMPTS at most), the
# least disturbed attempt kept and flagged.
OTHER_MAX=${OTHER_MAX:-0.2}
QUIET_WAIT=${QUIET_WAIT:-120}
ATTEMPTS=${ATTEMPTS:-2}
cpu_init dhcp6
cpu_group CG_LOAD load $LOAD_CPU
cpu_join "$CG_LOAD"
cpu_group CG_SRV server $SERVER_CPU
wait_quiet() {
    cpu_wait_http_bench "$WAIT_HTTP_BENCH"
    cpu_quiet "$OTHER_MAX" "$QUIET_WAIT"
}

# --- network: S (servers) <-veth-> L (perfdhcp as relay agent) ------------
ns_pair "$S" "$L" "$VS" "$VL"
for ns in "$S" "$L"; do
    # No duplicate address detection: addresses usable at once (the veth
    # ends already exist, so their own setting too).
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
done
ip netns exec "$S" sysctl -qw "net.ipv6.conf.$VS.accept_dad=0"
ip netns exec "$L" sysctl -qw "net.ipv6.conf.$VL.accept_dad=0"
ip -n "$S" addr add $SRV_IP/64 dev "$VS" nodad
ip -n "$L" addr add $RELAY_IP/64 dev "$VL" nodad
ns_addr "$S" "$VS"   # (addresses above: ns_addr cannot pass nodad) link up
ns_addr "$L" "$VL"

stop_server() {
    [[ -n $SRV_PID ]] || return 0
    kill "$SRV_PID" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$SRV_PID" 2>/dev/null || break; sleep 0.05; done
    kill -9 "$SRV_PID" 2>/dev/null || true
    wait "$SRV_PID" 2>/dev/null || true
    SRV_PID=""
}

# Is something in S listening on UDP port 547 (on the server's unicast
# address, or on all of them)?
listening547() { ip netns exec "$S" ss -Hlun 'sport = :547' | grep -qE "\[?($SRV_IP|::|\*)\]?:547"; }

write_configs() { # dir
    local d=$1
    mkdir -p "$d/state" "$d/images/lab"
    printf 'bench kernel\n' >"$d/images/lab/kernel"
    printf 'bench initramfs\n' >"$d/images/lab/initramfs"
    cat >"$d/site.yaml" <<EOF
# examples/lab-dual/site.yaml's structure, IPv6 only, on fd00:78::/64 with
# a pool for far more than 100 000 clients.
cluster: { name: bench, baseDomain: example.test }
host:
  stateDir: $d/state
  http: { listen: "[$SRV_IP]:8080", url: "http://[$SRV_IP]:8080" }
  dhcp6:
    interface: $VS
    serverAddress: $SRV_IP
    leaseTime: 1h
    # Above the largest client count: the table's limit (65 536 by
    # default) would answer the rest NoAddrsAvail, and Kea has none.
    maxBindings: 1048576
networks:
  - name: bench
    subnet: fd00:78::/64
    gateway: $RELAY_IP
    dnsServers: ["$SRV_IP"]
    pool: { start: "$POOL_START", end: "$POOL_END" }
vips: { api: $SRV_IP, ingress: $SRV_IP }
images:
  root: $d/images
  sets:
    lab-x86_64: { arch: x86_64, kernel: lab/kernel, initramfs: lab/initramfs }
nodes:
  - { name: worker-0, role: worker, macs: ["52:54:00:78:00:20"], ip: "fd00:78::20" }
ignition:
  dir: $REPO/examples/lab/ignition
EOF
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
    "subnet6": [ { "id": 1, "subnet": "fd00:78::/64", "interface": "$VS",
                   "pools": [ { "pool": "$POOL_START - $POOL_END" } ] } ],
    "loggers": [ { "name": "kea-dhcp6", "severity": "INFO",
                   "output_options": [ { "output": "$d/kea.log" } ] } ]
} }
EOF
}

start_server() { # name dir
    local name=$1 d=$2
    case $name in
    bootd)
        RUST_LOG=$BOOTD_LOG incg "$CG_SRV" ip netns exec "$S" taskset -c $SERVER_CPU "$BOOTD_BIN" --site "$d/site.yaml" >"$d/bootd.out" 2>"$d/bootd.log" &
        SRV_PID=$!
        for _ in $(seq 100); do
            ip netns exec "$S" curl -sf -o /dev/null --max-time 1 "http://[$SRV_IP]:8080/healthz" && listening547 && return 0
            sleep 0.1
        done ;;
    kea)
        KEA_PIDFILE_DIR=$d KEA_LOCKFILE_DIR=$d incg "$CG_SRV" ip netns exec "$S" taskset -c $SERVER_CPU kea-dhcp6 -c "$d/kea.json" >"$d/kea.out" 2>&1 &
        SRV_PID=$!
        for _ in $(seq 100); do listening547 && return 0; sleep 0.1; done ;;
    esac
    log "$name did not come up"; tail -n 30 "$d"/*.log "$d"/*.out >&2 || true
    return 1
}

# name dir -> distinct (DUID, IAID) with a binding in the lease file
leases_on_disk() {
    local d=$2
    case $1 in
    bootd) [[ -f $d/state/leases6.jsonl ]] && sed -nE 's/.*"duid":"([^"]*)".*"iaid":([0-9]+).*/\1 \2/p' "$d/state/leases6.jsonl" | sort -u | wc -l || echo 0 ;;
    # address,duid,valid_lifetime,expire,subnet_id,pref_lifetime,lease_type,iaid,...
    kea) [[ -f $d/kea-leases6.csv ]] && awk -F, 'NR > 1 && $7 == 0 {print $2, $8}' "$d/kea-leases6.csv" | sort -u | wc -l || echo 0 ;;
    esac
}

# perfdhcp's report -> "rate sa_sent sa_recv sa_drops rr_sent rr_recv rr_drops
# rejected sa_avg_delay_ms rr_avg_delay_ms" (the delays: how long answers
# queue; perfdhcp counts one as a drop after 1 s)
parse_perfdhcp() {
    awk '
      /^\*\*\*Statistics for: SOLICIT-ADVERTISE/ { ex = "s" }
      /^\*\*\*Statistics for: REQUEST-REPLY/ { ex = "r" }
      /^sent packets:/ { s[ex] = $3 }
      /^received packets:/ { r[ex] = $3 }
      /^drops:/ { dr[ex] = $2 }
      /^rejected leases:/ { rej += $3 }
      /^avg delay:/ { ad[ex] = $3 }
      /^Rate:/ { rate = $2 }
      END { printf "%s %s %s %s %s %s %s %s %s %s\n", rate+0, s["s"]+0, r["s"]+0, dr["s"]+0, s["r"]+0, r["r"]+0, dr["r"]+0, rej+0, ad["s"]+0, ad["r"]+0 }' "$1"
}

median() { sort -g | awk '{a[NR]=$1} END { if (NR == 0) { print "nan"; exit } if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'; }

# --- report the setup ------------------------------------------------------
say "== bootd vs Kea DHCPv6 (perfdhcp -6 relay mode -A 1), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say "machine: $(uname -srm), $(nproc --all) vCPU ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), $(. /etc/os-release && echo "$PRETTY_NAME")"
say "bootd: $BOOTD_BIN ($(cd "$REPO" && git rev-parse --short HEAD 2>/dev/null || echo '?')$(cd "$REPO" && git diff --quiet HEAD -- bootd site 2>/dev/null || echo '+dirty')), RUST_LOG=$BOOTD_LOG, log to a file; leases6.jsonl fdatasync'ed before the Reply"
say "kea: kea-dhcp6 $(kea-dhcp6 -v), memfile persist=true lfc-interval=0 (no fsync), multi-threading thread-pool-size=$KEA_THREADS packet-queue-size=64, INFO log to a file"
say "perfdhcp: $(perfdhcp -v 2>&1 | head -1); -6 -A 1 (relay) -l $VL from its own namespace ($RELAY_IP) across a veth to $SRV_IP; -p $DURATION s; rate: $([[ $RATE == 0 ]] && echo 'unlimited (as fast as possible)' || echo "-r $RATE")"
say "pinning: servers taskset CPU $SERVER_CPU, perfdhcp CPU $LOAD_CPU; rounds: $ROUNDS, order reversed every other round; each run starts with an empty lease file"
say "cpu accounting: $CPU_HOW"
say "subnet fd00:78::/64, pool $POOL_START-$POOL_END; valid lifetime 1h; no floor row (the DHCPv4 bench has none)"
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
        c0=$(cpu_read "$CG_SRV"); t0=$(date +%s.%N)
        local args=(-6 -A 1 -l "$VL" -R "$n" -p "$DURATION")
        [[ $RATE != 0 ]] && args+=(-r "$RATE")
        ip netns exec "$L" taskset -c $LOAD_CPU timeout $((DURATION + 30)) perfdhcp "${args[@]}" $SRV_IP >"$d/perfdhcp.out" 2>&1 || true
        c1=$(cpu_read "$CG_SRV"); t1=$(date +%s.%N)
        s1=$(cpu_snap)
        local other; other=$(cpu_load "$s0" "$s1")
        local rss; rss=$(awk '/VmHWM/ {print $2}' "/proc/$SRV_PID/status" 2>/dev/null || echo '?')
        local metrics=""
        if [[ $name == bootd ]]; then
            metrics=$(ip netns exec "$S" curl -sf --max-time 2 "http://[$SRV_IP]:8080/metrics" | grep -E '^bootd_dhcp6' | tr '\n' ' ' || true)
        fi
        stop_server
        local onDisk; onDisk=$(leases_on_disk "$name" "$d")
        read -r rate ss sr sd rs rr rd rej sdelay rdelay < <(parse_perfdhcp "$d/perfdhcp.out")
        local cpu; cpu=$(cpu_used "$c0" "$c1" %.3f); cpu=${cpu%% *}
        local wall; wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
        # completed SARR = Replies to Requests received by perfdhcp
        local us_per; us_per=$(awk -v c="$cpu" -v k="$rr" 'BEGIN { if (k > 0) printf "%.1f", c * 1e6 / k; else print "nan" }')
        local per_core; per_core=$(awk -v c="$cpu" -v k="$rr" 'BEGIN { if (c > 0) printf "%.0f", k / c; else print "nan" }')
        local drops=$((sd + rd))
        log "clients=$n round=$round attempt=$a $name: SARR/s=$rate solicit sent/recv/drops=$ss/$sr/$sd request sent/recv/drops=$rs/$rr/$rd rejected=$rej avg-delay SA/RR=${sdelay}/${rdelay}ms cpu=${cpu}s wall=${wall}s cpu/SARR=${us_per}us SARR/core-s=$per_core bindings-on-disk=$onDisk rss=${rss}kB other-load=${other}CPUs"
        [[ -n $metrics ]] && log "  bootd metrics: $metrics"
        if [[ $name == kea ]] && ! grep -q DHCP6_STARTED "$d/kea.log" 2>/dev/null; then
            log "  kea log: $(tail -n 3 "$d/kea.log" 2>/dev/null | tr '\n' ' ')"
        fi
        { echo "----- perfdhcp output: clients=$n round=$round attempt=$a server=$name"; cat "$d/perfdhcp.out"; echo "-----"; } | raw
        [[ $KEEP == 1 ]] || rm -rf "$d"
        # keep the attempt with the least other load
        if [[ -z $best_other ]] || awk -v o="$other" -v b="$best_other" 'BEGIN { exit !(o < b) }'; then
            best_other=$other
            best="rate $rate|drops $drops|cpu $cpu|us $us_per|core $per_core|replies $rr|disk $onDisk|rejected $rej|other $other"
        fi
        if awk -v o="$other" -v m="$OTHER_MAX" 'BEGIN { exit !(o <= m) }'; then break; fi
        if ((a < ATTEMPTS)); then log "  other load ${other} CPUs during the run: repeating it"; else log "  WARNING: other load during every attempt; keeping the one with the least (${best_other} CPUs)"; fi
    done
    local kv
    IFS='|' read -r -a kvs <<<"$best"
    for kv in "${kvs[@]}"; do
        set -- $kv
        R[$n,$name,$1]="${R[$n,$name,$1]:-} $2"
    done
}

read -r -a SRV <<<"$SERVERS"
for n in $CLIENTS; do
    for ((round = 1; round <= ROUNDS; round++)); do
        for s in $(order "$round" "${SRV[@]}"); do run_one "$s" "$n" "$round"; done
    done
done

med() { echo "${R[$1,$2,$3]:-}" | tr ' ' '\n' | grep -v '^$' | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0 && a == a + 0) printf "%.2f", a / b; else print "n/a" }'; }

say ""
say "== results (median of $ROUNDS; per-round values in brackets)"
for n in $CLIENTS; do
    say ""
    say "### perfdhcp -6 -A 1 -R $n, -p $DURATION s"
    say ""
    say "| server | SARR/s | drops | server CPU s | CPU us/SARR | SARR per server-core-s | Replies | bindings on disk | rejected | other load (CPUs) |"
    say "|---|---|---|---|---|---|---|---|---|---|"
    for s in "${SRV[@]}"; do
        say "| $s | $(med "$n" "$s" rate) [${R[$n,$s,rate]# }] | $(med "$n" "$s" drops) | $(med "$n" "$s" cpu) | $(med "$n" "$s" us) | $(med "$n" "$s" core) [${R[$n,$s,core]# }] | $(med "$n" "$s" replies) | $(med "$n" "$s" disk) | $(med "$n" "$s" rejected) | ${R[$n,$s,other]# } |"
    done
    if [[ " ${SRV[*]} " == *" bootd "* && " ${SRV[*]} " == *" kea "* ]]; then
        r=$(ratio "$(med "$n" bootd rate)" "$(med "$n" kea rate)")
        say ""
        say "ratio bootd/kea ($n clients): SARR/s $r, SARR per server-core-s $(ratio "$(med "$n" bootd core)" "$(med "$n" kea core)")"
        say "target bootd >= 1.5x Kea's SARR/s (bindings durable before Reply): $(awk -v r="$r" 'BEGIN { if (r == r + 0) print (r >= 1.5 ? "met" : "not met"); else print "n/a" }') ($r)"
    fi
done
say ""
say "raw output: $RESULTS"
