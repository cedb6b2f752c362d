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
#   discovery: a machine in no node (its own namespace, its pool lease
#          from bootd's DHCP kept by busybox udhcpc) reports itself every
#          0.5 s with a new UUID each time: bootd takes one report every
#          2 s from it (the rest 429) and keeps at most 4 machines for it;
#   reload: SIGHUP every 30 s.
# Usage: tests/soak/soak.sh [BINDIR] [SECONDS]   (root)
# (ok and bad never fail: `test && ok ... || bad ...` is an if-then-else here.)
# shellcheck disable=SC2015
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/harness.sh
BINDIR=$(realpath "${1:-target/release}")
SECS=${2:-${SOAK_SECONDS:-1800}}
harness_init soak
lab_netns "soak-$$"
# Node and backend addresses on the lab bridge: master-0 (to fetch its own
# script and Ignition), worker-0 and worker-1 (ingress backends).
for a in 10.77.0.11 10.77.0.20 10.77.0.21; do nsx ip addr add "$a/24" dev br0; done
# The relay's namespace (perfdhcp sends from 10.77.0.254 as giaddr), on br0.
rns=soakr-$$
ns_new "$rns"
ns_veth "$rns" "vr$$" "$NS" "vb$$"
ip -n "$NS" link set "vb$$" master br0 up
ns_addr "$rns" "vr$$" 10.77.0.254/24
# The discovering machine's namespace, on br0, with a MAC in no node.
dscns=soakd-$$ dmac=02:5a:00:00:00:01
ns_new "$dscns"
ns_veth "$dscns" "vd$$" "$NS" "vdb$$"
ip -n "$NS" link set "vdb$$" master br0 up
ip -n "$dscns" link set "vd$$" address "$dmac" up

echo soak-api-token-7f3e >"$WORK/api-tokens"
chown nobody "$WORK/api-tokens"; chmod 600 "$WORK/api-tokens"
lab_site "$WORK/site.yaml" host.stateDir="$WORK/state" host.dhcp.leaseTime=2m \
    networks.lab.pool="{start: 10.77.0.100, end: 10.77.0.220}" ignition.afterInstall=network \
    discovery="{enabled: true, retry: 5s}" \
    host.api="{listen: '127.0.0.1:9443', tokens: {file: $WORK/api-tokens}}" \
    || fail "site not rewritten"
mkdir -p "$WORK/state" "$WORK/www"
echo backend >"$WORK/www/index.html"
for a in 10.77.0.20 10.77.0.21; do
    spawn --ns "$NS" busybox httpd -f -p "$a:80" -h "$WORK/www"
done
start_appliance --bin "$BINDIR/appliance" --ready http://10.77.0.1:8080/healthz --timeout 20 \
    -- --site "$WORK/site.yaml" --state-dir "$WORK/state" || fail "appliance did not start"
app=$APPLIANCE_PID
start=$(date +%s) end=$(( $(date +%s) + SECS ))
echo "soak: appliance pid $app, $SECS s of load (until $(date -d "@$end" +%T))"

# --- load -----------------------------------------------------------------------------------
# The discovering machine's lease, kept (renewed) by udhcpc for the whole run.
cat >"$WORK/udhcpc.sh" <<'S'
#!/bin/sh
case $1 in bound|renew) ip addr replace "$ip/${mask:-24}" dev "$interface"; echo "$ip" >"$UDHCPC_OUT";; esac
exit 0
S
chmod +x "$WORK/udhcpc.sh"
spawn --ns "$dscns" --log "$WORK/udhcpc.log" env UDHCPC_OUT="$WORK/discovering.ip" busybox udhcpc -f -i "vd$$" -s "$WORK/udhcpc.sh" -t 10
wait_for 20 test -s "$WORK/discovering.ip" || fail "the discovering machine got no lease"
spawn --ns "$rns" --log "$WORK/perfdhcp.out" nice -n 10 perfdhcp -4 -l 10.77.0.254 -R 100 -r 20 -p "$SECS" 10.77.0.1
{
    for _ in $(seq 20); do
        echo "api.lab.example.test A"; echo "console.apps.lab.example.test A"; echo "master-0.lab.example.test A"
        echo "11.0.77.10.in-addr.arpa PTR"; echo "nothing-$RANDOM.lab.example.test A"; echo "lab.example.test SOA"
    done
} >"$WORK/queries"
spawn --ns "$NS" --log "$WORK/dnsperf.out" nice -n 10 dnsperf -s 10.77.0.1 -d "$WORK/queries" -l "$SECS" -Q 100
# rounds NAME PAUSE ROUND: ROUND N (a function) every PAUSE s until the
# end; "rounds succeeded" to $WORK/NAME.count.
rounds() {
    local n=0 ok=0
    while (( $(date +%s) < end )); do
        n=$((n + 1))
        "$3" "$n" && ok=$((ok + 1))
        sleep "$2"
    done
    echo "$n $ok" >"$WORK/$1.count"
}
http_round() { # a node's script and its single-use Ignition from its address, images, metrics, status
    local script url
    script=$(nsx curl -fsS --interface 10.77.0.11 "http://10.77.0.1:8080/ipxe/node?mac=52-54-00-77-00-11" 2>/dev/null || true)
    url=$(grep -o 'http://10.77.0.1:8080/ignition/master-0?token=[^ ]*' <<<"$script" | head -n 1 || true)
    [[ -n $url ]] && nsx curl -fsS -o /dev/null --interface 10.77.0.11 \
        -H 'Accept: application/vnd.coreos.ignition+json;version=3.3.0' "$url" 2>/dev/null \
        && nsx curl -fsS -o /dev/null http://10.77.0.1:8080/boot.ipxe \
            -o /dev/null -r 0-65535 http://10.77.0.1:8080/images/lab/kernel \
            -o /dev/null http://10.77.0.1:8080/metrics -o /dev/null http://10.77.0.1:8080/status 2>/dev/null
}
lb_round() { nsx curl -fsS -o /dev/null --max-time 5 http://10.77.0.1/ 2>/dev/null; }
tftp_round() {
    rm -f "$WORK/tftp.out"
    nsx timeout 20 tftp -m binary 10.77.0.1 -c get undionly.kpxe "$WORK/tftp.out" 2>/dev/null \
        && cmp -s "$WORK/tftp.out" target/lab-tftp/undionly.kpxe
}
api_round() { # N: node soak-N created, listed, read and deleted through the API
    local n=$1 c st1 st2 st3 st4 rc=0
    c=(curl -s -o /dev/null -w '%{http_code}' --max-time 10 --cacert "$WORK/state/ca.pem" -H 'Authorization: Bearer soak-api-token-7f3e')
    st1=$(nsx "${c[@]}" -X POST https://localhost:9443/v1/nodes \
        -d "{\"name\":\"soak-$n\",\"role\":\"worker\",\"macs\":[\"52:54:00:7d:00:01\"],\"ip\":\"10.77.0.240\",\"live\":true}" || true)
    st2=$(nsx "${c[@]}" https://localhost:9443/v1/nodes || true)
    st3=$(nsx "${c[@]}" "https://localhost:9443/v1/nodes/soak-$n" || true)
    st4=$(nsx "${c[@]}" -X DELETE "https://localhost:9443/v1/nodes/soak-$n" || true)
    [[ $st1 == 201 && $st2 == 200 && $st3 == 200 && $st4 == 20[02] ]] || rc=1
    # The node is gone before its address and MAC are used again.
    wait_for 5 api_gone "$n" || true
    return "$rc"
}
discovery_round() { # a report with a new UUID each time: 200 (kept) or 429 (over the rate) both right
    local st
    st=$(ip netns exec "$DNS_NS" curl -s -o /dev/null -w '%{http_code}' --max-time 5 \
        "http://10.77.0.1:8080/discover?mac=02-5a-00-00-00-01&uuid=$(cat /proc/sys/kernel/random/uuid)&buildarch=x86_64&platform=efi&product=soak" || true)
    echo "$st" >>"$WORK/discovery.codes"
    [[ $st == 200 || $st == 429 ]]
}
api_gone() { [[ $(nsx "${c[@]}" "https://localhost:9443/v1/nodes/soak-$1" || true) == 404 ]]; }   # (api_round's c)
reload_load() {
    local n=0
    while (( $(date +%s) + 30 < end )); do sleep 30; kill -HUP "$app" && n=$((n + 1)); done
    echo "$n" >"$WORK/reload.count"
}
# Each generator a program of its own (bash -c with its functions), so
# that spawn records the loop's own PID.
load() { # load [nice -n 10] FUNCTION ARGS...: FUNCTION ARGS in a bash of its own
    local pre=()
    [[ $1 != nice ]] || { pre=("$1" "$2" "$3"); shift 3; }
    spawn "${pre[@]}" bash -c "$(declare -f nsx wait_for rounds http_round lb_round tftp_round api_round api_gone discovery_round "$1")
        NS=$NS DNS_NS=$dscns end=$end WORK=$WORK app=$app; $*"
}
load nice -n 10 rounds http 0.2 http_round
load nice -n 10 rounds lb 0.2 lb_round
load nice -n 10 rounds tftp 2 tftp_round
load nice -n 10 rounds api 1 api_round
load nice -n 10 rounds discovery 0.5 discovery_round
load reload_load

# --- samples ----------------------------------------------------------------------------------
echo "t_s rss_kib fds threads leases_bytes spent_bytes db_bytes heap_bytes" >"$WORK/samples"
sample() {
    local t=$(( $(date +%s) - start )) rss fds thr lb sb db heap
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$app/status")
    fds=$(find "/proc/$app/fd" -mindepth 1 -maxdepth 1 | wc -l)
    thr=$(awk '/^Threads:/ {print $2}' "/proc/$app/status")
    lb=$(stat -c %s "$WORK/state/leases.jsonl" 2>/dev/null || echo 0)
    sb=$(stat -c %s "$WORK/state/spent-tokens" 2>/dev/null || echo 0)
    db=$(du -cb "$WORK/state"/controller.db* 2>/dev/null | awk 'END {print $1}')
    heap=$(nsx curl -fsS --max-time 5 http://10.77.0.1:8080/metrics 2>/dev/null | awk '$1 == "bootd_process_heap_bytes" {print $2}')
    echo "$t $rss $fds $thr $lb $sb ${db:-0} ${heap:--}" >>"$WORK/samples"
}
while (( $(date +%s) < end )); do
    alive "$app" || { tail -n 20 "$WORK/appliance.log"; fail "the appliance died at $(( $(date +%s) - start )) s"; }
    sample
    sleep 10
done
sample
sleep 3  # the load loops write their counts

# --- verdict ----------------------------------------------------------------------------------
alive "$app" && ok "the appliance ran the whole $SECS s" || bad "the appliance is gone"
nsx curl -fsS -o /dev/null http://10.77.0.1:8080/healthz && ok "bootd answers at the end" || bad "bootd does not answer at the end"
[[ $(nsx dig +short @10.77.0.1 api.lab.example.test A) == 10.77.0.1 ]] && ok "dnsd answers at the end" || bad "dnsd does not answer at the end"
warm=$(( SECS / 10 > 120 ? SECS / 10 : 120 ))
(( warm <= SECS / 2 )) || warm=$(( SECS / 2 ))  # a short run (trying the script out)
read -r w_rss w_fds w_thr _ <<<"$(awk -v w="$warm" 'NR > 1 && $1 >= w {print $2, $3, $4; exit}' "$WORK/samples")"
read -r e_rss e_fds e_thr e_lb e_sb e_db <<<"$(tail -n 1 "$WORK/samples" | awk '{print $2, $3, $4, $5, $6, $7}')"
read -r h_rss <<<"$(awk -v h="$(( SECS / 2 ))" 'NR > 1 && $1 >= h {print $2; exit}' "$WORK/samples")"
read -r m_rss m_fds m_thr <<<"$(awk 'NR > 1 {if ($2 > r) r = $2; if ($3 > f) f = $3; if ($4 > t) t = $4} END {print r, f, t}' "$WORK/samples")"
echo "soak: after warm-up (${warm} s): RSS ${w_rss} KiB, ${w_fds} fds, ${w_thr} threads; half-way: RSS ${h_rss} KiB; end: RSS ${e_rss} KiB, ${e_fds} fds, ${e_thr} threads; max: RSS ${m_rss} KiB, ${m_fds} fds, ${m_thr} threads"
echo "note RSS over the second half: $h_rss -> $e_rss KiB (not a leak signal; the heap is)"
# The heap's floor in the minute before half-way and in the last minute.
floor() { awk -v a="$1" -v b="$2" 'NR > 1 && $1 >= a && $1 <= b && $8 != "-" {if (m == "" || $8 < m) m = $8} END {print m}' "$WORK/samples"; }
h_heap=$(floor $(( SECS / 2 - 60 )) $(( SECS / 2 ))); e_heap=$(floor $(( SECS - 60 )) $(( SECS + 60 )))
w_heap=$(floor "$warm" $(( warm + 60 )))
n_heap=$(awk 'NR > 1 && $8 == "-"' "$WORK/samples" | wc -l)
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
acks=$(awk '/\*\*\*Statistics for: REQUEST-ACK\*\*\*/ {f=1} f && /^received packets:/ {print $3; exit}' "$WORK/perfdhcp.out")
(( ${acks:-0} >= SECS * 5 )) && ok "DHCP: $acks DORAs completed (perfdhcp, relayed)" || { bad "DHCP: ${acks:-no} DORAs"; tail -n 20 "$WORK/perfdhcp.out"; }
q=$(awk '/Queries completed:/ {print $3; exit}' "$WORK/dnsperf.out")
(( ${q:-0} >= SECS * 50 )) && ok "DNS: $q queries answered (dnsperf)" || { bad "DNS: ${q:-no} queries"; tail -n 20 "$WORK/dnsperf.out"; }
for what in http lb tftp api discovery; do
    read -r n good <"$WORK/$what.count" || { bad "$what: no count"; continue; }
    (( good * 100 >= n * 99 && good > 0 )) && ok "$what: $good of $n rounds succeeded" || bad "$what: $good of $n rounds succeeded"
done
# Discovery: reports kept at the rate, the rest 429, and the one machine's
# share of the list (4), each with its MAC verified by its lease.
kept=$(grep -c '^200$' "$WORK/discovery.codes" || true) limited=$(grep -c '^429$' "$WORK/discovery.codes" || true)
(( kept >= SECS / 3 && limited > 0 )) && ok "discovery: $kept reports kept, $limited over the rate (429)" \
    || bad "discovery: $kept kept, $limited over the rate (want >= $(( SECS / 3 )) kept and some 429)"
listed=$(python3 -c 'import json,sys; l=json.load(open(sys.argv[1])); print(sum(1 for m in l if m.get("ip")==sys.argv[2] and sys.argv[3] in m.get("verified",[])))' \
    "$WORK/state/discovered.json" "$(cat "$WORK/discovering.ip")" "$dmac" 2>/dev/null || echo 0)
(( listed >= 1 && listed <= 4 )) && ok "discovery: the reporting machine holds $listed entries (its share: 4), verified by its lease" \
    || bad "discovery: the reporting machine holds $listed entries (want 1-4)"
(( e_sb > 0 )) && ok "spent-tokens: $e_sb bytes (one record per Ignition fetch; compacted as tokens expire)" || bad "no spent tokens recorded"
echo "note controller.db (with its WAL) at the end: $e_db bytes"
r=$(cat "$WORK/reload.count"); (( r >= SECS / 30 - 2 )) && ok "$r reloads (SIGHUP)" || bad "$r reloads"
mkdir -p target/soak && cp "$WORK/samples" "target/soak/samples-$(date +%Y%m%d-%H%M%S).txt"
if [[ $FAILS == 0 ]]; then echo "soak: passed"; else echo "soak: FAILED"; tail -n 20 "$WORK/appliance.log"; fi
harness_verdict
