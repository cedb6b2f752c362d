#!/usr/bin/env bash
# Side-by-side DNS benchmark: dnsd vs NSD vs Knot, same zone, same query mix,
# on 127.0.0.1 only. Run it under the bench lock:
#   flock /work/bench.lock bench/dns/run.sh
#
# One run: builds dnsd (release) if missing; writes a bench site (200 nodes,
# extra records); renders its zones with `dnsd zone` and loads exactly those
# files into NSD and Knot (dnsd serves the site itself); writes a query file
# (node A with some mixed case, *.apps names, api/api-int, PTR, NXDOMAIN,
# NODATA, a CNAME chain, SRV, MX/TXT at the apex); checks that the three
# servers give the same RCODE mix; then, interleaved (A B C, C B A, ...) for
# ROUNDS rounds, for each server:
#   - throughput: dnsperf with OUTSTANDING queries in flight for DURATION s:
#     QPS, loss, and the server's CPU seconds (bench/lib/cpu.sh: a cgroup
#     holding the server, all its threads and processes), hence queries per
#     server-core-second;
#   - latency: dnsperf at a fixed RATE qps for LAT_DURATION s with -v:
#     p50/p99 of every response's latency, and loss.
# Servers are pinned to CPU 0 (one UDP worker each), dnsperf to CPU 1.
# Medians of the rounds are printed with the ratios dnsd/NSD and dnsd/Knot.
#
# Other load: busy time on CPU 0 not used by our groups (the servers, this
# script with dnsperf) or ksoftirqd/0 is "other" (bench/lib/cpu.sh); a cell
# where it exceeds OTHER_MAX of the cell's time is repeated
# (3 attempts at most) and the count of disturbed cells is printed. Per
# server-CPU-second numbers are robust to other load; QPS and latency are not.
#
# Knobs (env): DURATION (10), LAT_DURATION (5), ROUNDS (3), OUTSTANDING (100),
# RATE (20000), NODES (200), PORT_BASE (25400: below the ephemeral range
# 32768-60999, so no client socket of another bench can hold the port),
# OTHER_MAX (0.15),
# DNSD_BIN (default $CARGO_TARGET_DIR or target, release/dnsd),
# FLOOR (0; 1 adds a fourth server to the throughput cells: dnsd's
# examples/udp_floor.rs, dnsd's UDP loop with no DNS work, whose queries per
# CPU-second bound what any recvmmsg/sendmmsg server could reach; FLOOR_BIN).
set -euo pipefail
# shellcheck source=tests/lib/harness.sh
. "$(dirname "$0")/../../tests/lib/harness.sh"
# shellcheck source=bench/lib/bench.sh
. "$REPO/bench/lib/bench.sh"   # log, bench_need_*, bench_build
# shellcheck source=bench/lib/cpu.sh
. "$REPO/bench/lib/cpu.sh"     # cpu_init, cpu_group, cpu_spawn, cpu_read, cpu_used, cpu_snap, cpu_other

DURATION=${DURATION:-10}
LAT_DURATION=${LAT_DURATION:-5}
ROUNDS=${ROUNDS:-3}
OUTSTANDING=${OUTSTANDING:-100}
RATE=${RATE:-20000}
NODES=${NODES:-200}
PORT_BASE=${PORT_BASE:-25400}
OTHER_MAX=${OTHER_MAX:-0.15}
FLOOR=${FLOOR:-0}
SERVER_CPU=0
LOAD_CPU=1

DNSD_BIN=${DNSD_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/dnsd}
bench_need_tools 1 "apt: dnsperf nsd knot dnsutils" dnsperf nsd knotd dig taskset python3 awk
bench_need_cpus 1
bench_build "$DNSD_BIN" -p dnsd
FLOOR_BIN=${FLOOR_BIN:-$(dirname "$DNSD_BIN")/examples/udp_floor}
if [ "$FLOOR" = 1 ]; then bench_build "$FLOOR_BIN" -p dnsd --example udp_floor; fi

harness_init bench-dns         # $WORK; at exit the servers stopped
cpu_init dns
cpu_group G_LOAD load $LOAD_CPU
cpu_join "$G_LOAD"
declare -A GRP
for s in dnsd nsd knot $([ "$FLOOR" = 1 ] && echo floor); do cpu_group "GRP[$s]" "$s" $SERVER_CPU; done

P_DNSD=$PORT_BASE
P_NSD=$((PORT_BASE + 1))
P_KNOT=$((PORT_BASE + 2))
P_FLOOR=$((PORT_BASE + 3))

# --- the site, its zones, the query file ----------------------------------------
python3 - "$WORK" "$NODES" "$P_DNSD" <<'EOF'
import random, sys
tmp, n, port = sys.argv[1], int(sys.argv[2]), sys.argv[3]
random.seed(42)
open(f"{tmp}/worker.ign", "w").write('{"ignition":{"version":"3.2.0"}}')
nodes = "\n".join(f'  - {{ name: node-{i}, role: worker, live: true, macs: ["52:54:00:88:{i // 256:02x}:{i % 256:02x}"], ip: 10.88.{i // 250}.{i % 250 + 2} }}' for i in range(n))
open(f"{tmp}/site.yaml", "w").write(f"""cluster: {{ name: bench, baseDomain: example.test }}
host: {{ http: {{ listen: 127.0.0.1:1, url: http://10.88.0.1:8080 }} }}
networks: [ {{ subnet: 10.88.0.0/22, dnsServers: [10.88.0.1] }} ]
vips: {{ api: 10.88.0.1, ingress: 10.88.0.2 }}
images: {{ sets: {{ x: {{ arch: x86_64, kernel: k, initramfs: i }} }} }}
ignition: {{ roles: {{ worker: worker.ign }} }}
dns:
  listen: [127.0.0.1:{port}]
  rateLimit: {{ responsesPerSecond: 0 }}
  records:
    - {{ name: registry, type: A, value: 10.88.0.5 }}
    - {{ name: www, type: CNAME, value: registry }}
    - {{ name: "@", type: MX, value: "10 registry" }}
    - {{ name: "@", type: TXT, value: "v=spf1 -all" }}
    - {{ name: _etcd-server-ssl._tcp, type: SRV, value: "0 10 2380 node-0" }}
nodes:
{nodes}
""")
d = "bench.example.test"
def mixed(s):
    return "".join(c.upper() if random.random() < 0.5 else c for c in s)
q = []
for _ in range(20000):
    r = random.random()
    i = random.randrange(n)
    if r < 0.25:
        name = f"node-{i}.{d}"
        q.append(f"{mixed(name) if random.random() < 0.2 else name} A")
    elif r < 0.45:
        q.append(f"app-{random.randrange(10000)}.apps.{d} A")
    elif r < 0.55:
        q.append(f"{random.choice(['api', 'api-int'])}.{d} A")
    elif r < 0.65:
        q.append(f"{i % 250 + 2}.{i // 250}.88.10.in-addr.arpa PTR")
    elif r < 0.75:
        q.append(f"missing-{random.randrange(100000)}.{d} A")
    elif r < 0.85:
        q.append(f"node-{i}.{d} AAAA")
    elif r < 0.90:
        q.append(f"www.{d} A")
    elif r < 0.95:
        q.append(f"_etcd-server-ssl._tcp.{d} SRV")
    else:
        q.append(f"{d} {random.choice(['MX', 'TXT'])}")
open(f"{tmp}/queries.txt", "w").write("\n".join(q) + "\n")
EOF
"$DNSD_BIN" --site "$WORK/site.yaml" zone >"$WORK/all.zone"
python3 - "$WORK" <<'EOF'
import sys
tmp = sys.argv[1]
zones = []
for part in open(f"{tmp}/all.zone").read().split("$ORIGIN ")[1:]:
    origin = part.split("\n", 1)[0].strip().rstrip(".")
    open(f"{tmp}/{origin}.zone", "w").write("$ORIGIN " + part)
    zones.append(origin)
open(f"{tmp}/zones.txt", "w").write("\n".join(zones) + "\n")
EOF
mapfile -t ZONES <"$WORK/zones.txt"

# --- servers ---------------------------------------------------------------------------
cpu_spawn "${GRP[dnsd]}" --log "$WORK/dnsd.log" env RUST_LOG=warn taskset -c $SERVER_CPU "$DNSD_BIN" --site "$WORK/site.yaml" --udp-threads 1

mkdir -p "$WORK/nsd" "$WORK/knot"
{
    cat <<EOF
server:
    ip-address: 127.0.0.1@$P_NSD
    port: $P_NSD
    server-count: 1
    username: ""
    chroot: ""
    zonesdir: "$WORK"
    pidfile: "$WORK/nsd/nsd.pid"
    xfrdfile: "$WORK/nsd/xfrd.state"
    zonelistfile: "$WORK/nsd/zone.list"
    database: ""
    hide-version: yes
    rrl-ratelimit: 0
    verbosity: 0
remote-control:
    control-enable: no
EOF
    for z in "${ZONES[@]}"; do printf 'zone:\n    name: "%s"\n    zonefile: "%s.zone"\n' "$z" "$z"; done
} >"$WORK/nsd/nsd.conf"
cpu_spawn "${GRP[nsd]}" --log "$WORK/nsd/log" taskset -c $SERVER_CPU nsd -d -c "$WORK/nsd/nsd.conf"
{
    cat <<EOF
server:
    listen: 127.0.0.1@$P_KNOT
    rundir: "$WORK/knot"
    pidfile: "$WORK/knot/knot.pid"
    udp-workers: 1
    tcp-workers: 1
    background-workers: 1
    identity: ""
    version: ""
log:
  - target: stderr
    any: warning
database:
    storage: "$WORK/knot"
template:
  - id: default
    storage: "$WORK"
    file: "%s.zone"
    zonefile-sync: -1
    journal-content: none
    semantic-checks: off
zone:
EOF
    for z in "${ZONES[@]}"; do echo "  - domain: $z"; done
} >"$WORK/knot/knot.conf"
cpu_spawn "${GRP[knot]}" --log "$WORK/knot/log" taskset -c $SERVER_CPU knotd -c "$WORK/knot/knot.conf"

SERVERS="dnsd nsd knot"
if [ "$FLOOR" = 1 ]; then
    cpu_spawn "${GRP[floor]}" --log "$WORK/floor.log" taskset -c $SERVER_CPU "$FLOOR_BIN" "127.0.0.1:$P_FLOOR"
fi
port_of() { case $1 in dnsd) echo "$P_DNSD" ;; nsd) echo "$P_NSD" ;; knot) echo "$P_KNOT" ;; floor) echo "$P_FLOOR" ;; esac; }

# up PORT: the zone's SOA answered there; floor_up: the floor answers (with
# no records, so dig's status, not +short).
up() { [ -n "$(dig @127.0.0.1 -p "$1" +short +time=1 +tries=1 "bench.example.test" SOA 2>/dev/null)" ]; }
floor_up() { dig @127.0.0.1 -p "$P_FLOOR" +time=1 +tries=1 bench.example.test SOA; }
for s in $SERVERS; do
    wait_for 10 up "$(port_of "$s")" || { echo "$s did not come up" >&2; tail -5 "$WORK"/*.log "$WORK"/*/log >&2 || true; exit 1; }
done
if [ "$FLOOR" = 1 ]; then
    wait_for 10 floor_up || { echo "udp_floor did not come up" >&2; cat "$WORK/floor.log" >&2; exit 1; }
fi

# Same data: the same RCODE mix for one pass over the query file.
declare -A MIX
for s in $SERVERS; do
    rc=0
    MIX[$s]=$(timeout 30 taskset -c $LOAD_CPU dnsperf -s 127.0.0.1 -p "$(port_of "$s")" -d "$WORK/queries.txt" -n 1 -q 20 -t 2 2>&1 | awk -F': *' '/Response codes/{print $2}') || rc=$?
    case $rc in
        0) ;;
        124) echo "RCODE-mix check: dnsperf against $s did not finish in 30 s (is port $(port_of "$s") taken?)" >&2; exit 1 ;;
        *) echo "RCODE-mix check: dnsperf against $s failed (exit $rc)" >&2; exit 1 ;;
    esac
done
for s in nsd knot; do
    [ "${MIX[$s]}" = "${MIX[dnsd]}" ] || { echo "RCODE mix differs: dnsd '${MIX[dnsd]}' vs $s '${MIX[$s]}'" >&2; exit 1; }
done

echo "== dnsd vs NSD vs Knot DNS benchmark, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "machine: $(nproc --all) vCPU, $(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo), kernel $(uname -r)"
echo "dnsd: $DNSD_BIN, built $(date -u -r "$DNSD_BIN" +%Y-%m-%dT%H:%M:%SZ), repo HEAD $(cd "$REPO" && git rev-parse --short HEAD)"
echo "nsd: $(nsd -v 2>&1 | head -1); knot: $(knotd --version | head -1); dnsperf: $(dnsperf -h 2>&1 | awk '/Version/{print $2}')"
echo "zones: ${ZONES[*]} ($NODES nodes); query file: 20000 queries, RCODE mix ${MIX[dnsd]} (same for all three)"
echo "CPU 0's busy ticks (for other load): $BUSY_HOW"
echo "cpu accounting: $CPU_HOW"
echo "servers pinned to CPU $SERVER_CPU with one UDP worker each (dnsd --udp-threads 1, NSD server-count 1, Knot udp-workers 1), dnsperf to CPU $LOAD_CPU"
echo "throughput: dnsperf -q $OUTSTANDING -l $DURATION; latency: dnsperf -Q $RATE -l $LAT_DURATION -v; rounds: $ROUNDS, interleaved; medians"
echo

RES=$WORK/results # server kind value...
: >"$RES"
disturbed=0
measure() { # server kind -> appends a line
    local s=$1 kind=$2 a r0 r1 s0 s1 t0 t1 out secs other
    for a in 1 2 3; do
        r0=$(cpu_read "${GRP[$s]}"); s0=$(cpu_snap); t0=$(date +%s%N)
        if [ "$kind" = tput ]; then
            out=$(taskset -c $LOAD_CPU dnsperf -s 127.0.0.1 -p "$(port_of "$s")" -d "$WORK/queries.txt" -l "$DURATION" -q "$OUTSTANDING" -t 2 2>&1)
        else
            out=$(taskset -c $LOAD_CPU dnsperf -s 127.0.0.1 -p "$(port_of "$s")" -d "$WORK/queries.txt" -l "$LAT_DURATION" -Q "$RATE" -q "$OUTSTANDING" -t 2 -v 2>&1)
        fi
        r1=$(cpu_read "${GRP[$s]}"); s1=$(cpu_snap); t1=$(date +%s%N)
        secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", (b - a) / 1e9}')
        other=$(cpu_other "$s0" "$s1" "$SERVER_CPU")
        if awk -v o="$other" -v s="$secs" -v m="$OTHER_MAX" 'BEGIN{exit !(o > m * s)}'; then
            log "$s $kind: attempt $a disturbed (other CPU-s on CPU $SERVER_CPU: $other in ${secs}s)"
            disturbed=$((disturbed + 1))
            [ $a -lt 3 ] && continue
        fi
        break
    done
    local completed lost qps cpu user
    completed=$(awk '/Queries completed:/{print $3}' <<<"$out")
    lost=$(awk '/Queries lost:/{print $3}' <<<"$out")
    qps=$(awk '/Queries per second:/{print $4}' <<<"$out")
    read -r cpu user <<<"$(cpu_used "$r0" "$r1" %.2f)"
    if [ "$kind" = tput ]; then
        printf '%s tput %s %s %s %s %s %s\n' "$s" "${qps:-0}" "${completed:-0}" "${lost:-0}" "$cpu" "$other" "$user" >>"$RES"
    else
        local lat
        lat=$(grep '^> ' <<<"$out" | awk '{print $NF}' | sort -g | awk '{v[NR]=$1} END{if (NR == 0) {print "0 0"; exit} i50=int(NR*0.5); i99=int(NR*0.99); if (i50 < 1) i50 = 1; if (i99 < 1) i99 = 1; printf "%.3f %.3f\n", v[i50]*1000, v[i99]*1000}')
        printf '%s lat %s %s %s %s\n' "$s" "$lat" "${completed:-0}" "${lost:-0}" "$cpu" >>"$RES"
    fi
}
TPUT_SERVERS=$SERVERS
if [ "$FLOOR" = 1 ]; then TPUT_SERVERS="dnsd nsd floor knot"; fi
for r in $(seq "$ROUNDS"); do
    log "round $r/$ROUNDS"
    # shellcheck disable=SC2086 # one server a word
    for s in $(order "$r" $TPUT_SERVERS); do measure "$s" tput; done
    # shellcheck disable=SC2086
    for s in $(order "$r" $SERVERS); do measure "$s" lat; done
done

echo "per cell (throughput: QPS completed lost server-CPU-s other-CPU-s server-user-CPU-s; latency: p50-ms p99-ms completed lost server-CPU-s):"
sed 's/^/  /' "$RES"
echo
python3 - "$RES" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = lambda xs: statistics.median(xs) if xs else 0.0
S = ["dnsd", "nsd", "knot"]
F = ["floor"] if any(r[0] == "floor" for r in rows) else []
t = {s: [r for r in rows if r[0] == s and r[1] == "tput"] for s in S + F}
l = {s: [r for r in rows if r[0] == s and r[1] == "lat"] for s in S + F}
res = {}
for s in S + F:
    qps = med([float(r[2]) for r in t[s]])
    per_cpu = med([float(r[3]) / float(r[5]) for r in t[s] if float(r[5]) > 0])
    lost = sum(int(r[4]) for r in t[s])
    p50 = med([float(r[2]) for r in l[s]])
    p99 = med([float(r[3]) for r in l[s]])
    lost_lat = sum(int(r[5]) for r in l[s])
    user = med([float(r[7]) / float(r[5]) for r in t[s] if float(r[5]) > 0])
    res[s] = (qps, per_cpu, lost, p50, p99, lost_lat, user)
print(f"{'server':<6} {'QPS':>10} {'q/server-CPU-s':>15} {'lost(tput)':>10} {'p50 ms':>8} {'p99 ms':>8} {'lost(lat)':>9} {'user share':>10}")
for s in S:
    q, c, lo, p5, p9, ll, u = res[s]
    print(f"{s:<6} {q:>10.0f} {c:>15.0f} {lo:>10} {p5:>8.3f} {p9:>8.3f} {ll:>9} {100 * u:>9.0f}%")
for peer in ("nsd", "knot"):
    d, p = res["dnsd"], res[peer]
    r = lambda a, b: a / b if b else float("nan")
    print(f"dnsd/{peer}: QPS {r(d[0], p[0]):.2f}x, queries per server-CPU-s {r(d[1], p[1]):.2f}x, p99 {r(d[4], p[4]):.2f}x")
# The user share is the part of a server's CPU its own code can remove: with
# none left (only the kernel's send and receive work), dnsd would reach this.
d = res["dnsd"]
print(f"ceiling: dnsd with zero user-space time would be {d[1] / (1 - d[6]) / res['nsd'][1]:.2f}x NSD per server-CPU-s" if d[6] < 1 and res["nsd"][1] else "ceiling: n/a")
if F:
    fq, fc, fl, _, _, _, fu = res["floor"]
    print(f"floor  {fq:>10.0f} {fc:>15.0f} {fl:>10} {'':>8} {'':>8} {'':>9} {100 * fu:>9.0f}%")
    print(f"floor (no DNS work, same recvmmsg/sendmmsg loop): {fc / res['nsd'][1]:.2f}x NSD, {fc / d[1]:.2f}x dnsd per server-CPU-s")
EOF
echo "disturbed cells (other load > $OTHER_MAX CPU on CPU $SERVER_CPU): $disturbed"
