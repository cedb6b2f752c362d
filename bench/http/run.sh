#!/usr/bin/env bash
# Side-by-side HTTP benchmark: bootd vs nginx (Debian, sendfile) on 127.0.0.1.
#
# One run: builds bootd (release) if missing, makes a 1 GiB and a 100 KiB
# random file, starts bootd and two nginx instances (worker_processes 1 and
# auto) serving the same directory, pins every server to CPU 0 and every
# load generator (wrk, curl) to CPU 1, and measures, interleaved (A B C, then
# C B A, ... for ROUNDS rounds, median reported):
#   - wrk req/s on the 100 KiB file at each of CONNS connections;
#   - wrk req/s on bootd's /boot.ipxe vs nginx serving the same bytes from a
#     static file;
#   - curl throughput of the 1 GiB file, 1 and 8 parallel downloads;
#   - bootd's peak RSS (VmHWM, reset before the big downloads).
# Everything listens on and talks to 127.0.0.1 only.
#
# Knobs (env): DURATION (wrk seconds, default 8), ROUNDS (3), CONNS ("1 16 64"),
# PARALLEL ("1 8"), BIG_MIB (1024), SMALL_KIB (100), BUSY (0; 1 = run a
# nice-19 busy loop on each CPU during the measurements, see TESTING.md),
# NGINX_AUTO (1; 0 = skip the worker_processes=auto instance),
# BOOTD_BIN (default target/release/bootd), BOOTD_ALT_BIN (optional: a second
# bootd build measured in the same interleave, e.g. a candidate fix),
# PORT_BASE (18080; uses PORT_BASE..PORT_BASE+3),
# PRIO (0; a negative nice value for servers and load generators, e.g. -10,
# when the machine is shared: other nice-0 work then gets ~10 % of a CPU),
# OTHER_MAX (0.15 CPU: a cell with more CPU used by other processes is
# repeated, at most 3 attempts), QUIET_WAIT (seconds to wait for a quiet
# machine before each cell; 180, or 0 with PRIO < 0).
set -euo pipefail
# shellcheck source=tests/lib/harness.sh
. "$(dirname "$0")/../../tests/lib/harness.sh"
# shellcheck source=bench/lib/bench.sh
. "$REPO/bench/lib/bench.sh"   # log, bench_need_*, bench_build, bench_own_session
# shellcheck source=bench/lib/cpu.sh
. "$REPO/bench/lib/cpu.sh"     # cpu_init, cpu_group, cpu_spawn, cpu_read, cpu_snap, cpu_other, cpu_quiet, busy_start

DURATION=${DURATION:-8}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-"1 16 64"}
PARALLEL=${PARALLEL:-"1 8"}
BIG_MIB=${BIG_MIB:-1024}
SMALL_KIB=${SMALL_KIB:-100}
BUSY=${BUSY:-0}
NGINX_AUTO=${NGINX_AUTO:-1}
PORT_BASE=${PORT_BASE:-18080}
PRIO=${PRIO:-0}
SERVER_CPU=0
LOAD_CPU=1

# With PRIO < 0 on a kernel with autogroups, nice only counts within a
# session's autogroup: run in a session of our own and raise that group's
# weight, so other sessions' work yields to the benchmark.
bench_own_session BENCH_HTTP_SESSION "$@"

BOOTD_BIN=${BOOTD_BIN:-$REPO/target/release/bootd}
NGINX_BIN=${NGINX_BIN:-/usr/sbin/nginx}

bench_need_tools 1 "" wrk curl taskset "$NGINX_BIN" awk
bench_need_cpus 1

bench_build "$BOOTD_BIN" -p appliance --bin bootd

harness_init bench-http        # $WORK (755: nginx workers run as nobody and must read the files); at exit the servers stopped
# CPU groups (bench/lib/cpu.sh): one per server on CPU 0; this shell and the
# generators it starts (wrk, curl) on CPU 1.
cpu_init http
cpu_group G_LOAD load $LOAD_CPU
cpu_join "$G_LOAD"
declare -A GRP SPID   # per server: its CPU group, its (master) process

IMG=$WORK/site/images
mkdir -p "$IMG" "$WORK/site/state" "$WORK/ngx"

log "creating ${BIG_MIB} MiB and ${SMALL_KIB} KiB random files in $IMG"
dd if=/dev/urandom of="$IMG/big.bin" bs=1M count="$BIG_MIB" iflag=fullblock status=none
dd if=/dev/urandom of="$IMG/small.bin" bs=1K count="$SMALL_KIB" iflag=fullblock status=none
chmod 644 "$IMG"/*
BIG_BYTES=$(stat -c %s "$IMG/big.bin")
if [ $((BIG_MIB % 1024)) = 0 ]; then BIG_LABEL="$((BIG_MIB / 1024))GiB"; else BIG_LABEL="${BIG_MIB}MiB"; fi
cat "$IMG/big.bin" "$IMG/small.bin" >/dev/null   # warm the page cache

# --- bootd -------------------------------------------------------------------
P_BOOTD=$PORT_BASE
P_NG1=$((PORT_BASE + 1))
P_NGA=$((PORT_BASE + 2))
P_ALT=$((PORT_BASE + 3))
echo '{"ignition":{"version":"3.2.0"}}' >"$WORK/site/worker.ign"
run_bootd() { # binary port name -> SPID[name]
    cpu_group "GRP[$3]" "$3" $SERVER_CPU
    mkdir -p "$WORK/site/state-$3"
    cat >"$WORK/site/$3.yaml" <<EOF
cluster: { name: bench, baseDomain: example.test }
host:
  stateDir: state-$3
  http: { listen: "127.0.0.1:$2", url: "http://127.0.0.1:$2" }
networks: [ { subnet: 10.99.0.0/24 } ]
vips: { api: 10.99.0.1, ingress: 10.99.0.1 }
images:
  root: images
  sets:
    b: { arch: x86_64, kernel: big.bin, initramfs: small.bin }
nodes:
  - { name: n0, role: worker, live: true, macs: ["52:54:00:99:00:01"], ip: 10.99.0.10 }
ignition: { roles: { worker: worker.ign } }
EOF
    cpu_spawn "${GRP[$3]}" --log "$WORK/$3.log" env RUST_LOG="${RUST_LOG:-warn}" nice -n "$PRIO" taskset -c $SERVER_CPU "$1" --site "$WORK/site/$3.yaml"
    SPID[$3]=$SPAWNED
}

http_ok() { curl -sf -o /dev/null --max-time 1 "$1"; }
wait_http() { # url
    wait_for 10 http_ok "$1" && return 0
    echo "server at $1 did not come up" >&2
    return 1
}
run_bootd "$BOOTD_BIN" "$P_BOOTD" bootd
wait_http "http://127.0.0.1:$P_BOOTD/healthz" || { cat "$WORK/bootd.log" >&2; exit 1; }
BOOTD_PID=${SPID[bootd]}
if [ -n "${BOOTD_ALT_BIN:-}" ]; then
    run_bootd "$BOOTD_ALT_BIN" "$P_ALT" bootd-alt
    wait_http "http://127.0.0.1:$P_ALT/healthz" || { cat "$WORK/bootd-alt.log" >&2; exit 1; }
fi

# The script nginx serves: exactly the bytes bootd answers on /boot.ipxe.
curl -sf -o "$WORK/ngx/boot.ipxe" "http://127.0.0.1:$P_BOOTD/boot.ipxe"
chmod 644 "$WORK/ngx/boot.ipxe"
SCRIPT_BYTES=$(stat -c %s "$WORK/ngx/boot.ipxe")

# --- nginx -------------------------------------------------------------------
start_nginx() { # name port workers
    local d=$WORK/ngx/$1
    cpu_group "GRP[nginx-$1]" "nginx-$1" $SERVER_CPU
    mkdir -p "$d"
    cat >"$d/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes $3;
pid $d/nginx.pid;
error_log $d/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 65s;
    keepalive_requests 100000000;
    client_body_temp_path $d/body;
    proxy_temp_path $d/proxy;
    fastcgi_temp_path $d/fastcgi;
    uwsgi_temp_path $d/uwsgi;
    scgi_temp_path $d/scgi;
    types { }
    default_type application/octet-stream;
    server {
        listen 127.0.0.1:$2;
        location /images/ { alias $IMG/; }
        location = /boot.ipxe {
            alias $WORK/ngx/boot.ipxe;
            default_type "text/plain; charset=utf-8";
            add_header Cache-Control no-store;
        }
    }
}
EOF
    cpu_spawn "${GRP[nginx-$1]}" --log "$d/error.log" --append nice -n "$PRIO" taskset -c $SERVER_CPU "$NGINX_BIN" -p "$d" -c "$d/nginx.conf"
    SPID[nginx-$1]=$SPAWNED
    wait_http "http://127.0.0.1:$2/images/small.bin" || { cat "$d/error.log" >&2; exit 1; }
}
start_nginx w1 "$P_NG1" 1
SERVERS="bootd${BOOTD_ALT_BIN:+ bootd-alt} nginx-w1"
if [ "$NGINX_AUTO" = 1 ]; then
    start_nginx auto "$P_NGA" auto
    SERVERS="$SERVERS nginx-auto"
fi

threads() { find "/proc/$1/task" -mindepth 1 -maxdepth 1 | wc -l; }
port_of() { case $1 in bootd) echo "$P_BOOTD" ;; bootd-alt) echo "$P_ALT" ;; nginx-w1) echo "$P_NG1" ;; nginx-auto) echo "$P_NGA" ;; esac; }
# A server's processes (bootd: one; nginx: master and workers), for the header.
server_pids() {
    case $1 in
    bootd | bootd-alt) echo "${SPID[$1]}" ;;
    nginx-*) echo "${SPID[$1]} $(pgrep -P "${SPID[$1]}" | tr '\n' ' ')" ;;
    esac
}

# Sanity: the same bytes from every server.
SMALL_SUM=$(sha256sum <"$IMG/small.bin" | cut -d' ' -f1)
for s in $SERVERS; do
    got=$(curl -sf "http://127.0.0.1:$(port_of "$s")/images/small.bin" | sha256sum | cut -d' ' -f1)
    [ "$got" = "$SMALL_SUM" ] || { echo "$s serves different bytes for small.bin" >&2; exit 1; }
    got=$(curl -sf "http://127.0.0.1:$(port_of "$s")/boot.ipxe" | wc -c)
    [ "$got" = "$SCRIPT_BYTES" ] || { echo "$s: /boot.ipxe is $got bytes, want $SCRIPT_BYTES" >&2; exit 1; }
done

# --- report the setup ---------------------------------------------------------
echo "== bootd vs nginx HTTP benchmark, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "machine: $(nproc --all) vCPU, $(awk '/MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo), $(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo), kernel $(uname -r)"
bin_id() { echo "$1, built $(date -u -r "$1" +%Y-%m-%dT%H:%M:%SZ), sha256 $(sha256sum <"$1" | cut -c1-12)"; }
echo "bootd: $(bin_id "$BOOTD_BIN"); repo HEAD $(cd "$REPO" && git rev-parse --short HEAD 2>/dev/null || echo '?')$(cd "$REPO" && git diff --quiet HEAD -- bootd 2>/dev/null || echo ' (bootd/ has uncommitted changes)')"
if [ "$BOOTD_BIN" = "$REPO/target/release/bootd" ] && [ -n "$(find "$REPO/bootd/src" "$REPO/site/src" -newer "$BOOTD_BIN" -name '*.rs' 2>/dev/null | head -1)" ]; then
    echo "  note: sources are newer than this binary (it is only built when missing)"
fi
[ -z "${BOOTD_ALT_BIN:-}" ] || echo "bootd-alt: $(bin_id "$BOOTD_ALT_BIN")"
echo "nginx: $($NGINX_BIN -v 2>&1 | sed 's/.*: //'), sendfile on, tcp_nopush on, keepalive (keepalive_requests 1e8), access_log off"
echo "wrk: $(wrk -v 2>&1 | head -1 | awk '{print $1, $2}'), curl: $(curl -V | head -1 | awk '{print $2}')"
echo "pinning: servers on CPU $SERVER_CPU, load generators (wrk, curl) on CPU $LOAD_CPU (taskset)"
echo "cpu accounting: $CPU_HOW"
for s in $SERVERS; do
    for p in $(server_pids "$s"); do
        printf '  %-10s pid %-7s %s affinity %s\n' "$s" "$p" "$(tr -d '\0' <"/proc/$p/comm")" "$(taskset -cp "$p" | sed 's/.*: //')"
    done
done
echo "  bootd threads: $(threads "$BOOTD_PID") at start; nginx-auto workers: $( [ "$NGINX_AUTO" = 1 ] && pgrep -P "${SPID[nginx-auto]}" | wc -l || echo -) (auto counts online CPUs, not the affinity mask: all share CPU $SERVER_CPU)"
echo "files: small.bin ${SMALL_KIB} KiB, big.bin $BIG_BYTES bytes, boot.ipxe $SCRIPT_BYTES bytes (bootd dynamic; nginx static copy)"
echo "wrk: -t1 -d${DURATION}s, connections: $CONNS; curl parallel: $PARALLEL; rounds: $ROUNDS (order alternates A B C / C B A); median reported"
echo "busy loop: $([ "$BUSY" = 1 ] && echo "yes, nice 19 on each CPU" || echo no); servers and load run at nice $PRIO$([ -n "${BENCH_HTTP_SESSION:-}" ] && echo ", in their own session with autogroup $(cat /proc/$$/autogroup)")"
echo

# bounded: ends after 2 h at the latest, stopped at exit before (cpu_cleanup)
if [ "$BUSY" = 1 ]; then busy_start 7200 $SERVER_CPU $LOAD_CPU; fi

RES=$WORK/results    # tab-separated: test, server, value, server CPU-s, other CPU-s (server CPU/load CPU), attempts, clean, cell seconds
: >"$RES"

# The machine may be shared: CPU time used by anything outside this benchmark
# during a measurement is "other CPU", counted per CPU (bench/lib/cpu.sh: busy
# time in /proc/stat minus our groups', the servers on the server CPU, this
# shell with wrk and curl on the load CPU, and ksoftirqd's; the BUSY loops
# count in neither). A cell counts as disturbed when other work took more
# than OTHER_MAX of the server CPU, or of the load CPU while that CPU had no
# idle time left (< 10 %).
# other_of "snap0" "snap1" -> "other_server_cpu_s other_load_cpu_s load_idle_s seconds"
other_of() {
    echo "$(cpu_other "$1" "$2" $SERVER_CPU $LOAD_CPU) $(cpu_idle "$1" "$2" $LOAD_CPU) $(cpu_secs "$1" "$2" | awk '{printf "%.2f", $1}')"
}
disturbed() { # "o0 o1 idle1 secs" -> exit 0 when disturbed
    # shellcheck disable=SC2086
    set -- $1
    awk -v o0="$1" -v o1="$2" -v id="$3" -v t="$4" -v m="$OTHER_MAX" \
        'BEGIN{exit !(o0 > m * t + 0.03 || (o1 > m * t + 0.03 && id < 0.1 * t))}'   # + 3 ticks of slack
}
OTHER_MAX=${OTHER_MAX:-0.15}   # CPUs' worth of other load tolerated in a cell
# Seconds to wait for a quiet machine before a cell; pointless when PRIO
# already makes other work yield, so 0 then.
if [ "$PRIO" -lt 0 ]; then QUIET_WAIT=${QUIET_WAIT:-0}; else QUIET_WAIT=${QUIET_WAIT:-180}; fi
# quiet: other work at most OTHER_MAX on each CPU
wait_quiet() { cpu_quiet "$OTHER_MAX" "$QUIET_WAIT" $SERVER_CPU $LOAD_CPU; }

# cell test server kind args...: waits for a quiet machine, measures, and
# repeats (at most 3 attempts) when other load disturbed it or nothing was
# measured; records the last attempt.
cell() {
    local test=$1 srv=$2 kind=$3 a v c0 c1 s0 o scpu clean=no
    shift 3
    for a in 1 2 3; do
        wait_quiet
        c0=$(cpu_read "${GRP[$srv]}"); s0=$(cpu_snap)
        v=$("$kind" "$srv" "$@")
        c1=$(cpu_read "${GRP[$srv]}"); o=$(other_of "$s0" "$(cpu_snap)")
        scpu=$(cpu_used "$c0" "$c1" %.2f); scpu=${scpu%% *}
        if awk -v v="${v:-0}" 'BEGIN{exit !(v > 0)}' && ! disturbed "$o"; then
            clean=yes
            break
        fi
        log "$test $srv: attempt $a disturbed (value ${v:-0}; other CPU-s on server/load CPU, load-CPU idle s, cell s: $o), $([ $a -lt 3 ] && echo retrying || echo keeping it)"
    done
    # other: "server-CPU/load-CPU" CPU-seconds used by other processes
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$test" "$srv" "${v:-0}" "$scpu" "$(echo "$o" | awk '{print $1 "/" $2}')" "$a" "$clean" "$(echo "$o" | awk '{print $4}')" >>"$RES"
}

wrk_rps() { # server conns path -> req/s
    local out rps errs
    out=$(nice -n "$PRIO" taskset -c $LOAD_CPU timeout $((DURATION + 30)) wrk -t1 -c"$2" -d"${DURATION}s" --timeout 10s "http://127.0.0.1:$(port_of "$1")$3" 2>&1) || true
    rps=$(awk '/^Requests\/sec:/{print $2}' <<<"$out")
    errs=$(grep -E 'Non-2xx|Socket errors' <<<"$out" || true)
    if [ -z "$rps" ] || [ -n "$errs" ]; then
        echo "!! $1 c=$2 $3: wrk problem: ${errs:-no Requests/sec line}" >&2
        echo "$out" >&2
        rps=0
    fi
    echo "$rps"
}

curl_mbps() { # server parallel -> aggregate MB/s (10^6 B/s): total bytes / wall time
    local url n=$2 i t0 t1 pids=() total=0 b code bad=0
    url="http://127.0.0.1:$(port_of "$1")/images/big.bin"
    t0=$(date +%s%N)
    for i in $(seq "$n"); do
        nice -n "$PRIO" taskset -c $LOAD_CPU curl -s -o /dev/null --max-time 300 -w '%{size_download} %{http_code}\n' "$url" >"$WORK/curl.$i" &
        pids+=("$!")
    done
    for i in "${pids[@]}"; do wait "$i" || true; done
    t1=$(date +%s%N)
    for i in $(seq "$n"); do
        read -r b code <"$WORK/curl.$i" || { b=0; code=0; }
        if [ "$code" != 200 ] || [ "$b" != "$BIG_BYTES" ]; then
            echo "!! $1 x$n: curl $i got $b bytes, status $code" >&2
            bad=1
        fi
        total=$((total + b))   # bash arithmetic is 64-bit
    done
    [ "$bad" = 0 ] || { echo 0; return; }
    awk -v b="$total" -v ns=$((t1 - t0)) 'BEGIN{printf "%.1f\n", b / (ns / 1e9) / 1e6}'
}

rss_kib() { awk -v k="$2" '$1 == k":" {print $2}' "/proc/$1/status"; }

RSS_START=$(rss_kib "$BOOTD_PID" VmRSS)
[ -z "${BOOTD_ALT_BIN:-}" ] || ALT_RSS_START=$(rss_kib "${SPID[bootd-alt]}" VmRSS)
T_START=$(date +%s)
for r in $(seq "$ROUNDS"); do
    log "round $r/$ROUNDS: wrk"
    for c in $CONNS; do
        # shellcheck disable=SC2086 # one server a word
        for s in $(order "$r" $SERVERS); do cell "small-100KiB c=$c" "$s" wrk_rps "$c" /images/small.bin; done
        # shellcheck disable=SC2086
        for s in $(order "$r" $SERVERS); do cell "boot.ipxe c=$c" "$s" wrk_rps "$c" /boot.ipxe; done
    done
done
RSS_HWM_WRK=$(rss_kib "$BOOTD_PID" VmHWM)
# Reset bootd's peak RSS so VmHWM below is the big downloads' alone.
echo 5 >"/proc/$BOOTD_PID/clear_refs"
[ -z "${BOOTD_ALT_BIN:-}" ] || { ALT_HWM_WRK=$(rss_kib "${SPID[bootd-alt]}" VmHWM); echo 5 >"/proc/${SPID[bootd-alt]}/clear_refs"; }
RSS_BEFORE_BIG=$(rss_kib "$BOOTD_PID" VmRSS)
for r in $(seq "$ROUNDS"); do
    log "round $r/$ROUNDS: curl $BIG_LABEL"
    for n in $PARALLEL; do
        # shellcheck disable=SC2086
        for s in $(order "$r" $SERVERS); do cell "big-${BIG_LABEL} x$n" "$s" curl_mbps "$n"; done
    done
done
RSS_HWM_BIG=$(rss_kib "$BOOTD_PID" VmHWM)
RSS_END=$(rss_kib "$BOOTD_PID" VmRSS)
[ -z "${BOOTD_ALT_BIN:-}" ] || ALT_HWM_BIG=$(rss_kib "${SPID[bootd-alt]}" VmHWM)
T_END=$(date +%s)

# --- table -----------------------------------------------------------------------
echo "== raw: test | server | value per round | server CPU-s per round | other processes' CPU-s on server CPU/load CPU per round | attempts"
awk -F'\t' '{k=sprintf("%-24s | %-10s", $1, $2); v[k]=v[k] " " $3; c[k]=c[k] " " $4; o[k]=o[k] " " $5; a[k]=a[k] $6; if(!(k in seen)){seen[k]=1; ord[n++]=k}}
     END{for(i=0;i<n;i++) printf "%s |%s |%s |%s | %s\n", ord[i], v[ord[i]], c[ord[i]], o[ord[i]], a[ord[i]]}' "$RES"
echo

# Medians per test and server: of the rate, and of rate per server CPU-second.
awk -F'\t' -v servers="$SERVERS" '
function median(s,   a, n, i, j, t) {
    n = split(s, a, " ")
    for (i = 2; i <= n; i++) { t = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j+1] = a[j]; a[j+1] = t }
    if (n == 0) return 0
    return (n % 2) ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
}
function header(extra,   k) {
    printf "%-24s", "test"
    for (k = 1; k <= ns; k++) printf " %11s", S[k]
    for (k = 1; k <= ns; k++) if (S[k] ~ /^bootd/) printf " %*s", (S[k] == "bootd" ? 7 : 11), (S[k] == "bootd" ? "ratio" : "alt ratio")
    printf "%s\n", extra
}
{
    if (!($1 in seen)) { seen[$1] = 1; ord[n++] = $1 }
    vals[$1, $2] = vals[$1, $2] " " $3
    # requests (or MB) done in the cell per second of server CPU time
    if ($4 > 0) eff[$1, $2] = eff[$1, $2] " " $3 * $8 / $4
}
END {
    ns = split(servers, S, " ")
    header("  target  pass")
    for (i = 0; i < n; i++) {
        t = ord[i]; printf "%-24s", t
        for (k = 1; k <= ns; k++) printf " %11.1f", median(vals[t, S[k]])
        g = median(vals[t, "nginx-w1"]); tgt = (t ~ /^big/) ? 0.9 : 1.0; pass = ""
        for (k = 1; k <= ns; k++) if (S[k] ~ /^bootd/) {
            r = (g > 0) ? median(vals[t, S[k]]) / g : 0
            printf " %*.2f", (S[k] == "bootd" ? 7 : 11), r
            pass = pass (pass == "" ? "" : "/") (r >= tgt ? "yes" : "NO")
        }
        printf "  %6s  %s\n", ">=" tgt, pass
    }
    print "(ratio = bootd / nginx-w1, medians" (servers ~ /bootd-alt/ ? "; alt ratio = bootd-alt / nginx-w1; pass: bootd/bootd-alt)" : ")")
    print ""
    print "per second of server CPU time (requests or MB served per server CPU-second; steadier than raw rates):"
    header("")
    for (i = 0; i < n; i++) {
        t = ord[i]; printf "%-24s", t
        for (k = 1; k <= ns; k++) if (eff[t, S[k]] == "") printf " %11s", "n/a"; else printf " %11.1f", median(eff[t, S[k]])
        g = median(eff[t, "nginx-w1"])
        for (k = 1; k <= ns; k++) if (S[k] ~ /^bootd/) {
            b = median(eff[t, S[k]])
            if (b > 0 && g > 0) printf " %*.2f", (S[k] == "bootd" ? 7 : 11), b / g; else printf " %*s", (S[k] == "bootd" ? 7 : 11), "n/a"
        }
        printf "\n"
    }
}' "$RES"
echo
echo "units: small/boot.ipxe rows = requests/s (wrk); big rows = aggregate MB/s (10^6 B/s, total bytes / wall time); per-CPU-second table: requests or MB per second of server CPU"
echo "bootd RSS: ${RSS_START} KiB at start; peak ${RSS_HWM_WRK} KiB after the wrk runs (up to $(echo "$CONNS" | awk '{print $NF}') connections);"
echo "           ${RSS_BEFORE_BIG} KiB before the $BIG_LABEL downloads, peak (VmHWM, reset just before) ${RSS_HWM_BIG} KiB during them, ${RSS_END} KiB after"
[ -z "${BOOTD_ALT_BIN:-}" ] || echo "bootd-alt RSS: ${ALT_RSS_START} KiB at start; peak ${ALT_HWM_WRK} KiB after the wrk runs; peak ${ALT_HWM_BIG} KiB during the $BIG_LABEL downloads"
echo "bootd threads at end: $(threads "$BOOTD_PID")"
echo "measurement time: $((T_END - T_START)) s; cells: $(wc -l <"$RES"), retried: $(awk -F'\t' '$6 > 1' "$RES" | wc -l), kept although disturbed: $(awk -F'\t' '$7 != "yes"' "$RES" | wc -l) (other work > ${OTHER_MAX} of the server CPU, or of a saturated load CPU)"
for l in "$WORK"/bootd*.log; do
    if grep -qiE 'error|panic' "$l"; then
        echo "$(basename "$l") (errors):"; grep -iE 'error|panic' "$l" | head -20
    fi
done
