#!/usr/bin/env bash
# Soak: the all-in-one appliance (bootd, dnsd, lbd in one process) under
# bounded mixed load for SECONDS (default 1800), in a private network
# namespace, with its resident memory, open descriptors, threads and state
# files sampled every 10 s. Passes when
#   the live heap (bootd_process_heap_bytes: what the appliance's counting
#   allocator has handed out and not had back) grows by at most 4 MiB over
#   the second half of the run, floor to floor (the least of the samples in
#   the minute before half-way, and in the last minute: in-flight requests
#   come and go, what is kept stays). Bounded buffers such as the boot
#   timeline fill during the first half; a leak grows in both;
#   RSS never exceeds 160 MiB. RSS itself is no leak signal: mimalloc keeps
#   freed pages per thread, and in CI it moves by +-10 MiB with the load of
#   the tests running beside the soak; its second half is reported;
#   from the end of the warm-up (the larger of 120 s and a tenth of the
#   run) to the end, descriptors grow by at most 8, threads by at most 2;
#   the lease file stays under 1 MiB (it is compacted);
#   every load generator did its work, and the appliance answers at the end.
# Load (each bounded in rate and by the end time):
#   DHCP:  perfdhcp through a relay, 20 exchanges/s over 100 clients, a 2 min
#          lease time so leases expire and are reused, on a 121-address pool;
#   DNS:   dnsperf, 100 queries/s (names, wildcards, PTR, NXDOMAIN);
#   HTTP:  every 0.2 s: boot.ipxe, a node's script and its Ignition from the
#          node's address (single-use tokens: each is spent and recorded),
#          an image range, /metrics, /status;
#   TFTP:  tftp-hpa fetches undionly.kpxe every 2 s;
#   LB:    HTTP through lbd's ingress frontend to two busybox httpd backends,
#          every 0.2 s;
#   API:   a node created, listed, read and deleted every second (each a
#          SQLite write and a node-overlay write);
#   reload: SIGHUP every 30 s.
# Usage: tests/soak/soak.sh [BINDIR] [SECONDS]   (root)
set -euo pipefail
cd "$(dirname "$0")/../.."
BINDIR=$(realpath "${1:-target/release}")
SECS=${2:-${SOAK_SECONDS:-1800}}
ns=soak-$$ rns=soakr-$$ work=$(mktemp -d /tmp/soak.XXXXXX)
chmod 755 "$work"
PIDS=()
. tests/lib.sh
cleanup() { stop_started "$ns" "$rns"; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 1' TERM INT  # the EXIT trap stops what this started
lab_netns "$ns"
nsx() { ip netns exec "$ns" "$@"; }
# Node and backend addresses on the lab bridge: master-0 (to fetch its own
# script and Ignition), worker-0 and worker-1 (ingress backends).
for a in 10.77.0.11 10.77.0.20 10.77.0.21; do nsx ip addr add "$a/24" dev br0; done
# The relay's namespace (perfdhcp sends from 10.77.0.254 as giaddr).
ip netns add "$rns"
ip link add "vr$$" netns "$rns" type veth peer name "vb$$" netns "$ns"
ip -n "$ns" link set "vb$$" master br0 up
ip -n "$rns" link set lo up
ip -n "$rns" addr add 10.77.0.254/24 dev "vr$$"
ip -n "$rns" link set "vr$$" up

sed -e "s|stateDir: ../../target/lab-state|stateDir: $work/state|" \
    -e "s|leaseTime: 1h|leaseTime: 2m|" \
    -e "s|^    dnsServers: \[10.77.0.1\]|    dnsServers: [10.77.0.1]\n    pool: { start: 10.77.0.100, end: 10.77.0.220 }|" \
    -e "s|tokenTtl: 1h|tokenTtl: 1h\n  afterInstall: network|" \
    -e "s|^host:|host:\n  api: { listen: 127.0.0.1:9443, tokens: { file: $work/api-tokens } }|" \
    -e "s|root: ../../target/lab-images|root: $PWD/target/lab-images|" \
    -e "s|root: ../../target/lab-tftp|root: $PWD/target/lab-tftp|" \
    -e "s|^  dir: ignition|  dir: $PWD/examples/lab/ignition|" \
    examples/lab/site.yaml >"$work/site.yaml"
grep -q "afterInstall: network" "$work/site.yaml" && grep -q "listen: 127.0.0.1:9443" "$work/site.yaml" && grep -q "end: 10.77.0.220" "$work/site.yaml" \
    || { echo "FAIL soak: site not rewritten"; exit 1; }
mkdir -p "$work/state" "$work/www"
echo soak-api-token-7f3e >"$work/api-tokens"
chown nobody "$work/api-tokens"; chmod 600 "$work/api-tokens"
echo backend >"$work/www/index.html"
for a in 10.77.0.20 10.77.0.21; do
    ip netns exec "$ns" busybox httpd -f -p "$a:80" -h "$work/www" &
    PIDS+=($!)
done
ip netns exec "$ns" "$BINDIR/appliance" --site "$work/site.yaml" --state-dir "$work/state" >"$work/appliance.log" 2>&1 &
app=$!; PIDS+=("$app")
for _ in $(seq 100); do nsx curl -fsS -o /dev/null http://10.77.0.1:8080/healthz 2>/dev/null && break; sleep 0.2; done
nsx curl -fsS -o /dev/null http://10.77.0.1:8080/healthz || { echo "FAIL soak: appliance did not start"; tail "$work/appliance.log"; exit 1; }
start=$(date +%s) end=$(( $(date +%s) + SECS ))
echo "soak: appliance pid $app, $SECS s of load (until $(date -d "@$end" +%T))"

# --- load -----------------------------------------------------------------------------------
ip netns exec "$rns" nice -n 10 perfdhcp -4 -l 10.77.0.254 -R 100 -r 20 -p "$SECS" 10.77.0.1 >"$work/perfdhcp.out" 2>&1 &
PIDS+=($!)
{
    for _ in $(seq 20); do
        echo "api.lab.example.test A"; echo "console.apps.lab.example.test A"; echo "master-0.lab.example.test A"
        echo "11.0.77.10.in-addr.arpa PTR"; echo "nothing-$RANDOM.lab.example.test A"; echo "lab.example.test SOA"
    done
} >"$work/queries"
nsx nice -n 10 dnsperf -s 10.77.0.1 -d "$work/queries" -l "$SECS" -Q 100 >"$work/dnsperf.out" 2>&1 &
PIDS+=($!)
http_load() {
    local n=0 ok=0 script url
    while (( $(date +%s) < end )); do
        n=$((n + 1))
        script=$(nsx curl -fsS --interface 10.77.0.11 "http://10.77.0.1:8080/ipxe/node?mac=52-54-00-77-00-11" 2>/dev/null || true)
        url=$(grep -o 'http://10.77.0.1:8080/ignition/master-0?token=[^ ]*' <<<"$script" | head -n 1 || true)
        if [[ -n $url ]] && nsx curl -fsS -o /dev/null --interface 10.77.0.11 \
            -H 'Accept: application/vnd.coreos.ignition+json;version=3.3.0' "$url" 2>/dev/null \
            && nsx curl -fsS -o /dev/null http://10.77.0.1:8080/boot.ipxe \
                -o /dev/null -r 0-65535 http://10.77.0.1:8080/images/lab/kernel \
                -o /dev/null http://10.77.0.1:8080/metrics -o /dev/null http://10.77.0.1:8080/status 2>/dev/null; then
            ok=$((ok + 1))
        fi
        sleep 0.2
    done
    echo "$n $ok" >"$work/http.count"
}
lb_load() {
    local n=0 ok=0
    while (( $(date +%s) < end )); do
        n=$((n + 1))
        nsx curl -fsS -o /dev/null --max-time 5 http://10.77.0.1/ 2>/dev/null && ok=$((ok + 1))
        sleep 0.2
    done
    echo "$n $ok" >"$work/lb.count"
}
tftp_load() {
    local n=0 ok=0
    while (( $(date +%s) < end )); do
        n=$((n + 1))
        rm -f "$work/tftp.out"
        nsx timeout 20 tftp -m binary 10.77.0.1 -c get undionly.kpxe "$work/tftp.out" 2>/dev/null \
            && cmp -s "$work/tftp.out" target/lab-tftp/undionly.kpxe && ok=$((ok + 1))
        sleep 2
    done
    echo "$n $ok" >"$work/tftp.count"
}
api_load() { # a node created, listed, read and deleted through the API, every second
    local n=0 ok=0 c st1 st2 st3 st4
    c=(curl -s -o /dev/null -w '%{http_code}' --max-time 10 --cacert "$work/state/ca.pem" -H 'Authorization: Bearer soak-api-token-7f3e')
    while (( $(date +%s) < end )); do
        n=$((n + 1))
        st1=$(nsx "${c[@]}" -X POST https://localhost:9443/v1/nodes \
            -d "{\"name\":\"soak-$n\",\"role\":\"worker\",\"macs\":[\"52:54:00:7d:00:01\"],\"ip\":\"10.77.0.240\"}" || true)
        st2=$(nsx "${c[@]}" https://localhost:9443/v1/nodes || true)
        st3=$(nsx "${c[@]}" "https://localhost:9443/v1/nodes/soak-$n" || true)
        st4=$(nsx "${c[@]}" -X DELETE "https://localhost:9443/v1/nodes/soak-$n" || true)
        [[ $st1 == 201 && $st2 == 200 && $st3 == 200 && $st4 == 20[02] ]] && ok=$((ok + 1))
        # The node is gone before its address and MAC are used again.
        for _ in $(seq 50); do
            [[ $(nsx "${c[@]}" "https://localhost:9443/v1/nodes/soak-$n" || true) == 404 ]] && break
            sleep 0.1
        done
        sleep 1
    done
    echo "$n $ok" >"$work/api.count"
}
reload_load() {
    local n=0
    while (( $(date +%s) + 30 < end )); do sleep 30; kill -HUP "$app" && n=$((n + 1)); done
    echo "$n" >"$work/reload.count"
}
nice -n 10 bash -c "$(declare -f nsx http_load); ns=$ns end=$end work=$work; http_load" & PIDS+=($!)
nice -n 10 bash -c "$(declare -f nsx lb_load); ns=$ns end=$end work=$work; lb_load" & PIDS+=($!)
nice -n 10 bash -c "$(declare -f nsx tftp_load); ns=$ns end=$end work=$work; tftp_load" & PIDS+=($!)
nice -n 10 bash -c "$(declare -f nsx api_load); ns=$ns end=$end work=$work; api_load" & PIDS+=($!)
reload_load & PIDS+=($!)

# --- samples ----------------------------------------------------------------------------------
echo "t_s rss_kib fds threads leases_bytes spent_bytes db_bytes heap_bytes" >"$work/samples"
sample() {
    local t=$(( $(date +%s) - start )) rss fds thr lb sb db heap
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$app/status")
    fds=$(find "/proc/$app/fd" -mindepth 1 -maxdepth 1 | wc -l)
    thr=$(awk '/^Threads:/ {print $2}' "/proc/$app/status")
    lb=$(stat -c %s "$work/state/leases.jsonl" 2>/dev/null || echo 0)
    sb=$(stat -c %s "$work/state/spent-tokens" 2>/dev/null || echo 0)
    db=$(du -cb "$work/state"/controller.db* 2>/dev/null | awk 'END {print $1}')
    heap=$(nsx curl -fsS --max-time 5 http://10.77.0.1:8080/metrics 2>/dev/null | awk '$1 == "bootd_process_heap_bytes" {print $2}')
    echo "$t $rss $fds $thr $lb $sb ${db:-0} ${heap:--}" >>"$work/samples"
}
while (( $(date +%s) < end )); do
    kill -0 "$app" 2>/dev/null || { echo "FAIL soak: the appliance died at $(( $(date +%s) - start )) s"; tail -n 20 "$work/appliance.log"; exit 1; }
    sample
    sleep 10
done
sample
sleep 3  # the load loops write their counts

# --- verdict ----------------------------------------------------------------------------------
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
kill -0 "$app" 2>/dev/null && ok "the appliance ran the whole $SECS s" || bad "the appliance is gone"
nsx curl -fsS -o /dev/null http://10.77.0.1:8080/healthz && ok "bootd answers at the end" || bad "bootd does not answer at the end"
[[ $(nsx dig +short @10.77.0.1 api.lab.example.test A) == 10.77.0.1 ]] && ok "dnsd answers at the end" || bad "dnsd does not answer at the end"
warm=$(( SECS / 10 > 120 ? SECS / 10 : 120 ))
(( warm <= SECS / 2 )) || warm=$(( SECS / 2 ))  # a short run (trying the script out)
read -r w_rss w_fds w_thr _ <<<"$(awk -v w="$warm" 'NR > 1 && $1 >= w {print $2, $3, $4; exit}' "$work/samples")"
read -r e_rss e_fds e_thr e_lb e_sb e_db <<<"$(tail -n 1 "$work/samples" | awk '{print $2, $3, $4, $5, $6, $7}')"
read -r h_rss <<<"$(awk -v h="$(( SECS / 2 ))" 'NR > 1 && $1 >= h {print $2; exit}' "$work/samples")"
read -r m_rss m_fds m_thr <<<"$(awk 'NR > 1 {if ($2 > r) r = $2; if ($3 > f) f = $3; if ($4 > t) t = $4} END {print r, f, t}' "$work/samples")"
echo "soak: after warm-up (${warm} s): RSS ${w_rss} KiB, ${w_fds} fds, ${w_thr} threads; half-way: RSS ${h_rss} KiB; end: RSS ${e_rss} KiB, ${e_fds} fds, ${e_thr} threads; max: RSS ${m_rss} KiB, ${m_fds} fds, ${m_thr} threads"
echo "note RSS over the second half: $h_rss -> $e_rss KiB (not a leak signal; the heap is)"
# The heap's floor in the minute before half-way and in the last minute.
floor() { awk -v a="$1" -v b="$2" 'NR > 1 && $1 >= a && $1 <= b && $8 != "-" {if (m == "" || $8 < m) m = $8} END {print m}' "$work/samples"; }
h_heap=$(floor $(( SECS / 2 - 60 )) $(( SECS / 2 ))); e_heap=$(floor $(( SECS - 60 )) $(( SECS + 60 )))
w_heap=$(floor "$warm" $(( warm + 60 )))
n_heap=$(awk 'NR > 1 && $8 == "-"' "$work/samples" | wc -l)
if [[ -z $h_heap || -z $e_heap ]]; then
    bad "no bootd_process_heap_bytes in /metrics"
else
    echo "soak: live heap floor after warm-up ${w_heap:-?} B, half-way $h_heap B, end $e_heap B ($n_heap samples without it)"
    (( e_heap - h_heap <= 4194304 )) && ok "live heap over the second half: $h_heap -> $e_heap bytes (bound +4 MiB)" \
        || bad "live heap grew from $h_heap to $e_heap bytes over the second half"
fi
(( m_rss <= 163840 )) && ok "RSS at most $m_rss KiB (bound 160 MiB)" || bad "RSS reached $m_rss KiB"
(( e_fds - w_fds <= 8 )) && ok "descriptors: $w_fds -> $e_fds (bound +8)" || bad "descriptors grew from $w_fds to $e_fds"
(( e_thr - w_thr <= 2 )) && ok "threads: $w_thr -> $e_thr (bound +2)" || bad "threads grew from $w_thr to $e_thr"
(( e_lb < 1048576 )) && ok "lease file $e_lb bytes (bound 1 MiB)" || bad "lease file $e_lb bytes"
acks=$(awk '/\*\*\*Statistics for: REQUEST-ACK\*\*\*/ {f=1} f && /^received packets:/ {print $3; exit}' "$work/perfdhcp.out")
(( ${acks:-0} >= SECS * 5 )) && ok "DHCP: $acks DORAs completed (perfdhcp, relayed)" || { bad "DHCP: ${acks:-no} DORAs"; tail -n 20 "$work/perfdhcp.out"; }
q=$(awk '/Queries completed:/ {print $3; exit}' "$work/dnsperf.out")
(( ${q:-0} >= SECS * 50 )) && ok "DNS: $q queries answered (dnsperf)" || { bad "DNS: ${q:-no} queries"; tail -n 20 "$work/dnsperf.out"; }
for what in http lb tftp api; do
    read -r n good <"$work/$what.count" || { bad "$what: no count"; continue; }
    (( good * 100 >= n * 99 && good > 0 )) && ok "$what: $good of $n rounds succeeded" || bad "$what: $good of $n rounds succeeded"
done
(( e_sb > 0 )) && ok "spent-tokens: $e_sb bytes (one record per Ignition fetch; compacted as tokens expire)" || bad "no spent tokens recorded"
echo "note controller.db (with its WAL) at the end: $e_db bytes"
r=$(cat "$work/reload.count"); (( r >= SECS / 30 - 2 )) && ok "$r reloads (SIGHUP)" || bad "$r reloads"
mkdir -p target/soak && cp "$work/samples" "target/soak/samples-$(date +%Y%m%d-%H%M%S).txt"
[[ $fail == 0 ]] && echo "soak: passed" || { echo "soak: FAILED"; tail -n 20 "$work/appliance.log"; }
exit "$fail"
