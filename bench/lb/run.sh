#!/usr/bin/env bash
# Side-by-side L4 benchmark: lbd vs HAProxy (tcp mode) vs direct, on 127.0.0.1.
#
# One run starts two nginx backends (a 1 KiB file and /healthz), one iperf3
# server, lbd and HAProxy each with the same two frontends (web: both nginx,
# round robin, HTTP check of /healthz; bulk: the iperf3 server), pins every
# server (balancers, nginx, iperf3 -s) to CPU 0 and every load generator
# (wrk, iperf3 -c) to CPU 1, and measures, interleaved (lbd haproxy direct,
# then the reverse, ... for ROUNDS rounds, median reported):
#   - keepalive: wrk -c16 on the 1 KiB file: req/s and p99 latency;
#   - conn rate: the same with "Connection: close" (a new connection per request);
#   - throughput: iperf3, one stream, Gbit/s;
# each also per second of the balancer's CPU time (bench/lib/cpu.sh: a cgroup
# holding the balancer, all its threads), which is steadier than raw rates on
# a shared VM. Then, once per balancer,
# failover: a short-connection wrk runs while one nginx is killed (SIGKILL);
# reported: time until the balancer marks it down, and failed client requests.
# Everything listens on and talks to 127.0.0.1 only; every load is bounded.
#
# Knobs (env): DURATION (s per cell, 8), ROUNDS (3), CONNS (16), PRIO (0; e.g.
# -10 on a shared machine: servers and load at nice -10 in their own session
# and autogroup), OTHER_MAX (0.15 CPU: a cell where other processes used more
# of CPU 0, or of a saturated CPU 1, is repeated, at most 3 attempts),
# LBD_BIN (default target/release/lbd, built if missing), PORT_BASE (19080;
# uses PORT_BASE..PORT_BASE+20), FAILOVER (1; 0 skips it), FAILOVER_KILLS (3 per
# balancer, alternating), FLOOR (0; 1 adds a fourth target to the keepalive
# and connrate cells: lbd's examples/relay_floor.rs, a one-thread epoll relay
# with no checks, timers or limits, whose rates per CPU-second bound what any
# user-space relay could reach; FLOOR_BIN).
set -euo pipefail
# shellcheck source=tests/lib/harness.sh
. "$(dirname "$0")/../../tests/lib/harness.sh"
# shellcheck source=bench/lib/bench.sh
. "$REPO/bench/lib/bench.sh"   # log, bench_need_*, bench_build, bench_own_session, wait_fine
# shellcheck source=bench/lib/cpu.sh
. "$REPO/bench/lib/cpu.sh"     # cpu_init, cpu_group, cpu_spawn, cpu_read, cpu_used, cpu_snap, cpu_other

DURATION=${DURATION:-8}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-16}
PRIO=${PRIO:-0}
OTHER_MAX=${OTHER_MAX:-0.15}
PORT_BASE=${PORT_BASE:-19080}
FAILOVER=${FAILOVER:-1}
FAILOVER_KILLS=${FAILOVER_KILLS:-3}
FLOOR=${FLOOR:-0}
SERVER_CPU=0
LOAD_CPU=1

# With PRIO < 0 and autogroups, nice only counts inside a session: run in a
# session of our own whose autogroup gets the same nice value.
bench_own_session BENCH_LB_SESSION "$@"

LBD_BIN=${LBD_BIN:-$REPO/target/release/lbd}
bench_need_tools 1 "tests/lab/deps.sh installs it" wrk iperf3 haproxy nginx curl taskset python3 awk
bench_need_cpus 1
bench_build "$LBD_BIN" -p lbd
FLOOR_BIN=${FLOOR_BIN:-$(dirname "$LBD_BIN")/examples/relay_floor}
if [ "$FLOOR" = 1 ]; then bench_build "$FLOOR_BIN" -p lbd --example relay_floor; fi

harness_init bench-lb          # $WORK; at exit every server stopped
# CPU groups (bench/lib/cpu.sh): one per balancer, one for the backends (nginx,
# iperf3 -s), all on CPU 0; this shell and the generators it starts on CPU 1.
cpu_init lb
cpu_group G_LOAD load $LOAD_CPU
cpu_join "$G_LOAD"
cpu_group G_BACK backends $SERVER_CPU
declare -A GRP
for b in lbd haproxy $([ "$FLOOR" = 1 ] && echo floor); do cpu_group "GRP[$b]" "$b" $SERVER_CPU; done
# An array, not a function: cpu_spawn G "${ON_SERVER[@]}" cmd keeps cmd's own
# PID (nice and taskset exec it), so the harness stops the server itself.
ON_SERVER=(nice -n "$PRIO" taskset -c "$SERVER_CPU")
on_load() { nice -n "$PRIO" taskset -c $LOAD_CPU "$@"; }

P_NG1=$((PORT_BASE + 1)) P_NG2=$((PORT_BASE + 2)) P_IPERF=$((PORT_BASE + 3))
P_LBD_WEB=$((PORT_BASE + 10)) P_LBD_BULK=$((PORT_BASE + 11)) P_LBD_ADMIN=$((PORT_BASE + 12))
P_HA_WEB=$((PORT_BASE + 15)) P_HA_BULK=$((PORT_BASE + 16)) P_FLOOR_WEB=$((PORT_BASE + 18))
mkdir -p "$WORK/www"
head -c 1024 /dev/urandom | base64 -w 0 | head -c 1024 >"$WORK/www/1k"
chmod 644 "$WORK/www/1k"

# --- backends ------------------------------------------------------------------
declare -A NGX_PID
start_nginx() { # name port
    local d=$WORK/ngx-$1
    mkdir -p "$d"
    cat >"$d/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes 1;
pid $d/nginx.pid;
error_log $d/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    sendfile on;
    tcp_nodelay on;
    keepalive_timeout 65s;
    keepalive_requests 100000000;
    client_body_temp_path $d/body; proxy_temp_path $d/proxy; fastcgi_temp_path $d/fcgi; uwsgi_temp_path $d/uwsgi; scgi_temp_path $d/scgi;
    default_type application/octet-stream;
    server {
        listen 127.0.0.1:$2 reuseport backlog=4096;
        root $WORK/www;
        location = /healthz { return 200 "ok\n"; }
    }
}
EOF
    cpu_spawn "$G_BACK" --log "$d/error.log" --append "${ON_SERVER[@]}" nginx -p "$d" -c "$d/nginx.conf"
    NGX_PID[$1]=$SPAWNED
    wait_http "http://127.0.0.1:$2/1k"
}
http_ok() { curl -sf -o /dev/null --max-time 1 "$1"; }
wait_http() {
    wait_for 10 http_ok "$1" && return 0
    echo "nothing answers at $1" >&2
    return 1
}
start_nginx ng1 "$P_NG1"
start_nginx ng2 "$P_NG2"
cpu_spawn "$G_BACK" --log "$WORK/iperf3-s.log" "${ON_SERVER[@]}" iperf3 -s -B 127.0.0.1 -p "$P_IPERF"

# --- balancers: the same frontends, checks and timeouts --------------------------
cat >"$WORK/lb.yaml" <<EOF
adminListen: 127.0.0.1:$P_LBD_ADMIN
check: { interval: 2s, fastInterval: 1s, timeout: 1s, rise: 2, fall: 3 }
limits: { maxConns: 8000, maxConnsPerSource: 8000, connectTimeout: 3s, idleTimeout: 1h }
services:
  - name: web
    listen: 127.0.0.1:$P_LBD_WEB
    backends: ["127.0.0.1:$P_NG1", "127.0.0.1:$P_NG2"]
    check: { type: http, path: /healthz }
  - name: bulk
    listen: 127.0.0.1:$P_LBD_BULK
    backends: ["127.0.0.1:$P_IPERF"]
EOF
cpu_spawn "${GRP[lbd]}" --log "$WORK/lbd.log" env RUST_LOG="${RUST_LOG:-warn}" "${ON_SERVER[@]}" "$LBD_BIN" --config "$WORK/lb.yaml" --state-dir "$WORK/lbd-state"
LBD_PID=$SPAWNED

cat >"$WORK/haproxy.cfg" <<EOF
global
    maxconn 8000
    stats socket $WORK/haproxy.sock mode 600 level admin
defaults
    mode tcp
    timeout connect 3s
    timeout client 1h
    timeout server 1h
    option redispatch
    retries 3
frontend web
    bind 127.0.0.1:$P_HA_WEB
    default_backend web
backend web
    balance roundrobin
    option httpchk GET /healthz
    default-server inter 2s fastinter 1s downinter 2s rise 2 fall 3
    timeout check 1s
    server ng1 127.0.0.1:$P_NG1 check
    server ng2 127.0.0.1:$P_NG2 check
frontend bulk
    bind 127.0.0.1:$P_HA_BULK
    default_backend bulk
backend bulk
    server iperf 127.0.0.1:$P_IPERF check inter 2s
EOF
haproxy -c -q -f "$WORK/haproxy.cfg"
cpu_spawn "${GRP[haproxy]}" --log "$WORK/haproxy.log" "${ON_SERVER[@]}" haproxy -db -f "$WORK/haproxy.cfg"
HA_PID=$SPAWNED

if [ "$FLOOR" = 1 ]; then
    cpu_spawn "${GRP[floor]}" --log "$WORK/floor.log" "${ON_SERVER[@]}" "$FLOOR_BIN" "127.0.0.1:$P_FLOOR_WEB" "127.0.0.1:$P_NG1" "127.0.0.1:$P_NG2"
fi

wait_http "http://127.0.0.1:$P_LBD_WEB/1k"
wait_http "http://127.0.0.1:$P_HA_WEB/1k"
if [ "$FLOOR" = 1 ]; then wait_http "http://127.0.0.1:$P_FLOOR_WEB/1k"; fi
sleep 3   # every check settled

port_web() { case $1 in lbd) echo "$P_LBD_WEB" ;; haproxy) echo "$P_HA_WEB" ;; direct) echo "$P_NG1" ;; floor) echo "$P_FLOOR_WEB" ;; esac; }
port_bulk() { case $1 in lbd) echo "$P_LBD_BULK" ;; haproxy) echo "$P_HA_BULK" ;; direct) echo "$P_IPERF" ;; esac; }
lb_group() { case $1 in lbd | haproxy | floor) echo "${GRP[$1]}" ;; direct) echo "" ;; esac; }

# --- CPU accounting -------------------------------------------------------------
# Other load (bench/lib/cpu.sh): busy time of each CPU minus our groups' and
# its ksoftirqd's (loopback TCP's softirq work is ours), in CPU-seconds.
# other "snap0" "snap1" -> other CPU-seconds on CPU 0 and CPU 1, and the seconds
other() { echo "$(cpu_other "$1" "$2" "$SERVER_CPU" "$LOAD_CPU") $(cpu_secs "$1" "$2" | awk '{printf "%.2f", $1}')"; }

# --- measurements -----------------------------------------------------------------
to_ms() { awk '{v=$1; if (v ~ /us$/) {sub(/us$/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms$/,"",v)} else if (v ~ /s$/) {sub(/s$/,"",v); v*=1000}; printf "%.3f\n", v}'; }
wrk_run() { # target extra-args... -> "req/s p99ms errors"
    local who=$1 out rps p99 errs
    shift
    out=$(on_load timeout $((DURATION + 30)) wrk -t1 -c"$CONNS" -d"${DURATION}s" --timeout 5s --latency "$@" "http://127.0.0.1:$(port_web "$who")/1k" 2>&1) || true
    rps=$(awk '/^Requests\/sec:/{print $2}' <<<"$out")
    p99=$(awk '$1 == "99%" {print $2}' <<<"$out" | to_ms)
    errs=$(awk '/Socket errors/{gsub(/,/,""); print $4 + $6 + $8 + $10} /Non-2xx/{print $NF}' <<<"$out" | awk '{s+=$1} END{print s+0}')
    echo "${rps:-0} ${p99:-0} $errs"
}
iperf_run() { # target -> "Gbit/s 0 0"
    local out
    out=$(on_load timeout $((DURATION + 30)) iperf3 -c 127.0.0.1 -p "$(port_bulk "$1")" -t "$DURATION" -J 2>/dev/null) || true
    python3 -c 'import json,sys
try: print("%.2f 0 0" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e9))
except Exception: print("0 0 1")' <<<"$out"
}

RES=$WORK/results   # test, target, value, p99ms, errors, lb CPU-s, other CPU-s cpu0/cpu1, attempts, seconds, lb user CPU-s
: >"$RES"
cell() { # test target kind args...
    local test=$1 who=$2 kind=$3 a v r0 r1 s0 s1 o cpu user
    shift 3
    for a in 1 2 3; do
        r0=$(cpu_read "$(lb_group "$who")"); s0=$(cpu_snap)
        v=$("$kind" "$who" "$@")
        r1=$(cpu_read "$(lb_group "$who")"); s1=$(cpu_snap)
        o=$(other "$s0" "$s1")
        read -r cpu user <<<"$(cpu_used "$r0" "$r1" %.2f)"
        # clean: a value, and other load under OTHER_MAX of CPU 0 (CPU 1 is saturated by the generator)
        if awk -v v="${v%% *}" -v o="$o" -v m="$OTHER_MAX" 'BEGIN{split(o, x, " "); exit !(v > 0 && x[1] <= m * x[3] + 0.03)}'; then
            break
        fi
        log "$test $who: attempt $a disturbed or failed (value ${v%% *}; other CPU-s on CPU0/CPU1, s: $o)"
    done
    # shellcheck disable=SC2086
    set -- $v
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$test" "$who" "$1" "$2" "$3" "$cpu" "$(awk '{print $1 "/" $2}' <<<"$o")" "$a" "$(awk '{print $3}' <<<"$o")" "$user" >>"$RES"
}
WEB_TARGETS="lbd haproxy direct"
if [ "$FLOOR" = 1 ]; then WEB_TARGETS="lbd haproxy floor direct"; fi

echo "== lbd vs HAProxy vs direct, L4 benchmark, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "machine: $(nproc --all) vCPU, $(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo), kernel $(uname -r); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "lbd: $LBD_BIN ($(date -u -r "$LBD_BIN" +%Y-%m-%dT%H:%M:%SZ), repo HEAD $(cd "$REPO" && git rev-parse --short HEAD))"
echo "haproxy: $(haproxy -v | head -1 | awk '{print $3}'), nbthread $(awk '/^Threads/{print $2}' "/proc/$HA_PID/status") thread(s), tcp mode, option redispatch, no splice; nginx $(nginx -v 2>&1 | sed 's/.*\///'), 2 backends x 1 worker; wrk $(wrk -v 2>&1 | head -1 | awk '{print $2}'), iperf3 $(iperf3 --version | head -1 | awk '{print $2}')"
echo "lbd threads: $(awk '/^Threads/{print $2}' "/proc/$LBD_PID/status") (runtime: one worker per CPU it may use)"
echo "pinning: lbd, haproxy, nginx, iperf3 -s on CPU $SERVER_CPU; wrk, iperf3 -c on CPU $LOAD_CPU; nice $PRIO$([ -n "${BENCH_LB_SESSION:-}" ] && echo ", own session, autogroup $(cat /proc/$$/autogroup | awk '{print $NF}')")"
echo "CPU busy ticks (for other load): $BUSY_HOW"
echo "cpu accounting: $CPU_HOW"
echo "cells: ${DURATION}s each, wrk -t1 -c$CONNS, $ROUNDS rounds interleaved (lbd haproxy direct / reverse), median"
echo

T0=$(date +%s)
for r in $(seq "$ROUNDS"); do
    log "round $r/$ROUNDS"
    # shellcheck disable=SC2086 # one target a word
    for w in $(order "$r" $WEB_TARGETS); do cell keepalive "$w" wrk_run; done
    # shellcheck disable=SC2086
    for w in $(order "$r" $WEB_TARGETS); do cell connrate "$w" wrk_run -H "Connection: close"; done
    for w in $(order "$r" lbd haproxy direct); do cell throughput "$w" iperf_run; done
done
T1=$(date +%s)

echo "== raw cells: test | target | value per round | p99 ms | errors | balancer CPU-s | other CPU-s CPU0/CPU1 | attempts"
awk -F'\t' '{k=sprintf("%-10s | %-7s", $1, $2); v[k]=v[k] " " $3; p[k]=p[k] " " $4; e[k]=e[k] " " $5; c[k]=c[k] " " $6; o[k]=o[k] " " $7; a[k]=a[k] $8; if(!(k in s)){s[k]=1; ord[n++]=k}}
     END{for(i=0;i<n;i++) printf "%s |%s |%s |%s |%s |%s | %s\n", ord[i], v[ord[i]], p[ord[i]], e[ord[i]], c[ord[i]], o[ord[i]], a[ord[i]]}' "$RES"
echo
awk -F'\t' '
function median(s,   a, n, i, j, t) {
    n = split(s, a, " ")
    for (i = 2; i <= n; i++) { t = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j+1] = a[j]; a[j+1] = t }
    if (n == 0) return 0
    return (n % 2) ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
}
{ v[$1, $2] = v[$1, $2] " " $3; p[$1, $2] = p[$1, $2] " " $4; if ($6 > 0) { eff[$1, $2] = eff[$1, $2] " " $3 * $9 / $6; us[$1, $2] = us[$1, $2] " " $10 / $6 }; err[$1, $2] += $5 }
END {
    split("keepalive connrate throughput", T, " ")
    unit["keepalive"] = "req/s"; unit["connrate"] = "conn/s"; unit["throughput"] = "Gbit/s"
    printf "%-11s %-7s %11s %11s %11s %9s %9s %8s\n", "test", "unit", "lbd", "haproxy", "direct", "lbd/ha", "ha/direct", "target"
    for (i = 1; i <= 3; i++) {
        t = T[i]; l = median(v[t, "lbd"]); h = median(v[t, "haproxy"]); d = median(v[t, "direct"])
        printf "%-11s %-7s %11.1f %11.1f %11.1f %9.2f %9.2f %8s\n", t, unit[t], l, h, d, (h > 0 ? l / h : 0), (d > 0 ? h / d : 0), (h > 0 && l / h >= 1.2 ? ">=1.2 yes" : ">=1.2 NO")
    }
    print ""
    print "per second of balancer CPU (work done per CPU-second the balancer process used):"
    for (i = 1; i <= 3; i++) {
        t = T[i]; l = median(eff[t, "lbd"]); h = median(eff[t, "haproxy"])
        printf "%-11s %-7s %11.1f %11.1f %11s %9.2f\n", t, unit[t], l, h, "-", (h > 0 ? l / h : 0)
    }
    print ""
    print "user-space share of the balancer CPU, and the per-CPU-second ratio lbd would reach with none (only the kernel'"'"'s work left):"
    for (i = 1; i <= 3; i++) {
        t = T[i]; ul = median(us[t, "lbd"]); uh = median(us[t, "haproxy"]); l = median(eff[t, "lbd"]); h = median(eff[t, "haproxy"])
        printf "%-11s lbd %3.0f%%  haproxy %3.0f%%  ceiling lbd/ha %.2f\n", t, 100 * ul, 100 * uh, (h > 0 && ul < 1 ? l / (1 - ul) / h : 0)
    }
    print ""
    print "p99 latency (wrk, ms; added = balancer - direct):"
    for (i = 1; i <= 2; i++) {
        t = T[i]; l = median(p[t, "lbd"]); h = median(p[t, "haproxy"]); d = median(p[t, "direct"])
        printf "%-11s lbd %.3f (+%.3f)  haproxy %.3f (+%.3f)  direct %.3f  -> lbd added p99 %s haproxy\n", t, l, l - d, h, h - d, d, (l - d <= h - d ? "<=" : "> (WORSE than)")
    }
    printf "failed client requests in all cells: lbd %d, haproxy %d, direct %d\n", err["keepalive", "lbd"] + err["connrate", "lbd"], err["keepalive", "haproxy"] + err["connrate", "haproxy"], err["keepalive", "direct"] + err["connrate", "direct"]
    if (v["keepalive", "floor"] != "") {
        print ""
        print "floor (examples/relay_floor: one-thread epoll relay, nothing else), against HAProxy: raw, per CPU-second, user share:"
        for (i = 1; i <= 2; i++) {
            t = T[i]; f = median(v[t, "floor"]); h = median(v[t, "haproxy"]); fe = median(eff[t, "floor"]); he = median(eff[t, "haproxy"])
            printf "%-11s floor %.1f %s (%.2fx haproxy), per CPU-s %.1f (%.2fx haproxy, lbd %.2fx floor), user %.0f%%, errors %d\n", t, f, unit[t], (h > 0 ? f / h : 0), fe, (he > 0 ? fe / he : 0), (fe > 0 ? median(eff[t, "lbd"]) / fe : 0), 100 * median(us[t, "floor"]), err[t, "floor"]
        }
    }
}' "$RES"
echo "measurement time $((T1 - T0)) s; cells $(wc -l <"$RES"), retried $(awk -F'\t' '$8 > 1' "$RES" | wc -l)"

# --- failover -----------------------------------------------------------------------
# lbd: state of ng2 from /status; haproxy: srv_op_state of ng2 (0 = stopped) from its socket.
is_down() {
    case $1 in
    lbd) curl -sf --max-time 1 "http://127.0.0.1:$P_LBD_ADMIN/status" | python3 -c 'import json,sys
s = json.load(sys.stdin)
b = [b for f in s["frontends"] if f["name"] == "web" for b in f["backends"] if b["addr"].endswith(":'"$P_NG2"'")]
sys.exit(0 if b and b[0]["state"] == "down" else 1)' ;;
    haproxy) python3 -c 'import socket,sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b"show servers state web\n")
d = b""
while True:
    c = s.recv(65536)
    if not c: break
    d += c
rows = [l.split() for l in d.decode().splitlines() if l and l[0].isdigit() and len(l.split()) > 5]
sys.exit(0 if any(r[3] == "ng2" and r[5] == "0" for r in rows) else 1)' "$WORK/haproxy.sock" ;;
    esac
}
is_up() { ! is_down "$1"; }
# lbd: connections ng2 reset or closed before answering, replayed on ng1 (limits.retryUnanswered); a counter.
replayed_so_far() {
    curl -sf --max-time 1 "http://127.0.0.1:$P_LBD_ADMIN/status" | python3 -c 'import json,sys
s = json.load(sys.stdin)
print(sum(b.get("unansweredFailures", 0) for f in s["frontends"] if f["name"] == "web" for b in f["backends"] if b["addr"].endswith(":'"$P_NG2"'")))'
}
failover() { # balancer -> appends "balancer detect_ms requests errors replayed" to $WORK/failover (no subshell: it restarts nginx)
    local who=$1 out t_kill t_det=0 req errs replayed0=0
    # ng2 may have come back after the other balancer's kill: wait until this one has it up again.
    wait_for 10 is_up "$who" || true
    [ "$who" = lbd ] && replayed0=$(replayed_so_far)
    spawn --log "$WORK/fo-$who.txt" nice -n "$PRIO" taskset -c $LOAD_CPU timeout 60 wrk -t1 -c4 -d10s --timeout 5s -H "Connection: close" "http://127.0.0.1:$(port_web "$who")/1k"
    local wpid=$SPAWNED
    sleep 3
    # shellcheck disable=SC2046 # its workers, one PID a word
    kill -9 "${NGX_PID[ng2]}" $(pgrep -P "${NGX_PID[ng2]}") 2>/dev/null || true
    t_kill=$(date +%s%N)
    # measured: fine steps (wait_for's 0.1 s would be a part of it)
    if wait_fine 30 is_down "$who"; then t_det=$(date +%s%N); fi
    wait "$wpid" || true
    stop_pid "$wpid"
    wait "${NGX_PID[ng2]}" 2>/dev/null || true   # reaped (a zombie would hold stop_pid 5 s) ...
    stop_pid "${NGX_PID[ng2]}"                  # ... and out of PIDS
    out=$(cat "$WORK/fo-$who.txt")
    req=$(awk '/requests in/{print $1}' <<<"$out")
    errs=$(awk '/Socket errors/{gsub(/,/,""); print $4 + $6 + $8 + $10} /Non-2xx/{print $NF}' <<<"$out" | awk '{s+=$1} END{print s+0}')
    local replayed=-
    [ "$who" = lbd ] && replayed=$(($(replayed_so_far) - replayed0))
    start_nginx ng2 "$P_NG2"
    wait_for 10 is_up "$who" || true
    echo "$who $([ "$t_det" -gt 0 ] && echo $(((t_det - t_kill) / 1000000)) || echo never) ${req:-0} $errs $replayed" >>"$WORK/failover"
}
if [ "$FAILOVER" = 1 ]; then
    echo
    echo "== failover: one of two nginx killed (SIGKILL) under wrk -c4 with a new connection per request; checks: HTTP /healthz every 2s, 1s while changing, timeout 1s, fall 3"
    echo "   $FAILOVER_KILLS kill(s) per balancer, alternating"
    for _ in $(seq "$FAILOVER_KILLS"); do
        for w in lbd haproxy; do failover "$w"; done
    done
    awk '{printf "%-8s detected down after %s ms; client requests %s, failed %s%s\n", $1, $2, $3, $4, ($5 == "-" ? "" : "; replayed on the other backend after the killed one failed before answering: " $5)}' "$WORK/failover"
    awk '{n[$1]++; req[$1] += $3; err[$1] += $4; if ($5 != "-") rep[$1] += $5} END {for (w in n) printf "%-8s total over %d kills: client requests %d, failed %d%s\n", w, n[w], req[w], err[w], (w == "lbd" ? ", replayed " rep[w] : "")}' "$WORK/failover" | sort
fi
for w in lbd haproxy; do
    if grep -qiE 'panic|error' "$WORK/$w.log"; then echo "$w log (errors):"; grep -iE 'panic|error' "$WORK/$w.log" | head -10; fi
done
