#!/usr/bin/env bash
# Two appliances, one etcd, keepalived: the site examples/ha/site.yaml served
# by the all-in-one binary in two network namespaces, each with keepalived
# (its configuration from `bootd render keepalived`), a 3-member etcd
# (Debian's etcd-server) on a management network, and QEMU VMs booting.
#
# Usage: [HA_MODE=hotStandby|loadBalancing] [STORM_CLIENTS=16000] [STORM_RATE=250]
#        tests/ha/e2e.sh [BINDIR]   (root; BINDIR: target/release)
# HA_MODE is the site's host.dhcp.ha: one elected appliance answers DHCP, or
# each answers its share of the clients (both answer during the storm).
#
# Namespaces (all created here, removed at the end):
#   L  the wire: br0 (provisioning, 10.77.0.254; the relayed rack
#      10.80.0.0/16 routed here, perfdhcp's relay addresses 10.80.0.1 and
#      .2), br1 (management, 10.88.0.254), the VMs' taps, tcpdump
#   A, B  the appliances: ens3 on br0 (10.77.0.2, .3), ens4 on br1 (10.88.0.2, .3)
#   C  an appliance of another rack: ens3 on br2 (10.81.0.2, rack3, L routing
#      it to br0 as 10.81.0.254), ens4 on br1 (10.88.0.4); no keepalived
#      (the VIPs live on A and B's segment)
#   E  etcd members 10.88.0.11-13 and the ECS fake (Alibaba) on 10.88.0.20
#   N  stand-in cluster backends for lbd's checks: master-0 (10.77.0.11:
#      6443, 22623 over TLS) and worker-0 (10.77.0.20: 80, 443, 1936)
#
# 1. A starts first and holds the three VRRP addresses (boot 10.77.0.1,
#    api 10.77.0.5, ingress 10.77.0.6), the controller leadership and the
#    DHCP election; then B. dnsd answers the same on both (dig).
# 2. The kill: a VM (node bootstrap, SeaBIOS + iPXE) boots; an API create of
#    an Alibaba node is held by the ECS fake after it made the instance; once
#    the VM's kernel runs (after DHCP, script, kernel and initramfs from A),
#    A loses power (kill -9 of everything in A, its links down). The three
#    addresses must reach B within advertInterval x 3 + 1 s; the VM must
#    fetch its Ignition (from B, with A's token) and its bytes must be the
#    node's; the node made through A's API must be Provisioned by B with one
#    instance in the fake. B's status page shows the VM's boot with the
#    appliance that served each step (DHCP, script, kernel by A; Ignition by B).
# 3. A DHCP storm: A back (standby, or a group member); two perfdhcp in relay mode, one per
#    appliance (a relay sending to both), the same clients (same seed),
#    STORM_CLIENTS clients at STORM_RATE/s each; halfway, B (elected, or
#    answering its share) loses power. The capture of every reply and etcd's leases, afterwards: no
#    address ACKed to two clients, no client ACKed two addresses, every ACK
#    in etcd as that client's (tests/ha/dhcp-check.py).
# 4. Quorum loss: B back; two etcd members killed. A known node (worker-1)
#    boots and fetches its Ignition; a new client gets no lease, the
#    refusal logged and counted (no_store); the members restarted, new
#    clients get leases again.
# 5. Several racks: C starts; a VM on rack3 (worker-2) gets its address from
#    C, elected for its own segment (A and B never see its broadcasts), and
#    fetches its Ignition from the boot address on A and B's segment.
# Prints "PASS ha-e2e ..." (exit 0) or "FAIL ha-e2e <why>" with logs (exit 1).
set -Eeuo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/harness.sh
. tests/lib/vm.sh
BIN=$(realpath "${1:-target/release}")
STORM_CLIENTS=${STORM_CLIENTS:-16000}
STORM_RATE=${STORM_RATE:-250}
HA_MODE=${HA_MODE:-hotStandby}   # host.dhcp.ha
[[ $HA_MODE == hotStandby || $HA_MODE == loadBalancing ]] || { echo "ha-e2e: HA_MODE hotStandby or loadBalancing" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "ha-e2e: must run as root (namespaces)" >&2; exit 2; }
for b in appliance bootd lbd; do [[ -x $BIN/$b ]] || { echo "ha-e2e: $BIN/$b missing" >&2; exit 2; }; done
for t in etcd etcdctl keepalived perfdhcp tcpdump dig qemu-system-x86_64 openssl; do
  command -v "$t" >/dev/null || { echo "ha-e2e: $t missing (tests/lab/deps.sh)" >&2; exit 2; }
done
[[ -s target/lab-images/lab/kernel ]] || { echo "ha-e2e: no lab images (tests/lab/guest.sh target/lab-images)" >&2; exit 2; }

T=$$
L=hal-$T A=haa-$T B=hab-$T C=hac-$T E=hae-$T N=han-$T
KEEP_WORK=${KEEP_WORK:-${KEEP:-0}}   # KEEP=1: the work folder stays
harness_init ha-e2e
SHM=/dev/shm/ha-e2e-$T
after_exit "rm -rf '$SHM'"  # once etcd has stopped writing there
calc() { awk "BEGIN { v = $1; if (v == int(v)) print v; else printf \"%.2f\\n\", v }"; }
# die MESSAGE: the appliances', keepalived's and the VMs' logs, then the FAIL line.
die() { show_logs -n 25 "$WORK"/A.log "$WORK"/B.log "$WORK"/ka-*.log "$WORK"/vm-*/serial.log; fail "$*"; }
py() { python3 -c "import json,sys; v=json.load(sys.stdin); $1"; }

# --- the wire ----------------------------------------------------------------------------
# L: br0 (provisioning, with the relayed rack's router addresses), br1
# (management), br2 (rack3); it routes between them.
lab_netns "$L" 10.77.0.254/24 10.80.0.1/16 10.80.0.2/16
for br in br1 br2; do
  ip -n "$L" link add "$br" type bridge forward_delay 0 stp_state 0
done
ns_addr "$L" br1 10.88.0.254/24
ns_addr "$L" br2 10.81.0.254/24
ip netns exec "$L" sysctl -qw net.ipv4.ip_forward=1
# plug NS IF BRIDGE ADDR/LEN...: a veth from namespace NS into L's bridge.
PLUG=0
plug() {
  PLUG=$((PLUG + 1))
  local ns=$1 ifname=$2 br=$3 peer=hav$PLUG-$T; shift 3
  ns_veth "$L" "$peer" "$ns" "$ifname"
  ip -n "$L" link set "$peer" master "$br" up
  ns_addr "$ns" "$ifname" "$@"
}
for ns in "$A" "$B" "$C" "$E" "$N"; do ns_new "$ns"; done
plug "$A" ens3 br0 10.77.0.2/24; plug "$A" ens4 br1 10.88.0.2/24
plug "$B" ens3 br0 10.77.0.3/24; plug "$B" ens4 br1 10.88.0.3/24
plug "$C" ens3 br2 10.81.0.2/24; plug "$C" ens4 br1 10.88.0.4/24
ip -n "$C" route add default via 10.81.0.254
plug "$E" eth0 br1 10.88.0.11/24 10.88.0.12/24 10.88.0.13/24 10.88.0.20/24
plug "$N" eth0 br0 10.77.0.11/24 10.77.0.20/24
for ns in "$A" "$B"; do
  ip -n "$ns" route add 10.80.0.0/16 via 10.77.0.254
  ip -n "$ns" route add 10.81.0.0/24 via 10.77.0.254
done
log "namespaces: wire $L, appliances $A $B $C, etcd $E, backends $N"

# --- etcd: three members -------------------------------------------------------------------
mkdir -p "$SHM"
CLUSTER=m1=http://10.88.0.11:2380,m2=http://10.88.0.12:2380,m3=http://10.88.0.13:2380
ENDPOINTS=http://10.88.0.11:2379,http://10.88.0.12:2379,http://10.88.0.13:2379
declare -A MEMBER
member() { # member N: start etcd member mN (data kept across restarts)
  local i=$1 ip=10.88.0.1$1
  spawn --ns "$E" --log "$WORK/etcd-m$i.log" --append etcd --name "m$i" --data-dir "$SHM/m$i" \
    --listen-client-urls "http://$ip:2379" --advertise-client-urls "http://$ip:2379" \
    --listen-peer-urls "http://$ip:2380" --initial-advertise-peer-urls "http://$ip:2380" \
    --initial-cluster "$CLUSTER" --initial-cluster-state new --initial-cluster-token "ha-$T" \
    --heartbeat-interval 250 --election-timeout 2500
  MEMBER[$i]=$SPAWNED
}
ectl() { ip netns exec "$E" etcdctl --endpoints "$ENDPOINTS" --command-timeout 5s "$@"; }
for i in 1 2 3; do member "$i"; done
wait_for 20 ectl endpoint health || die "etcd: no healthy cluster: $(tail -n 3 "$WORK/etcd-m1.log")"
ok "etcd: 3 members healthy"

# --- the ECS fake and the backends ---------------------------------------------------------
printf 'LTAI-ha-e2e' >"$WORK/ecs-akid"
head -c 24 /dev/urandom | base64 | tr -d '/+=' >"$WORK/ecs-secret"
spawn --ns "$E" --log "$WORK/ecs.log" python3 tests/controller/ecs-fake.py --in-netns --listen 10.88.0.20:8001 \
  --access-key-id LTAI-ha-e2e --secret-file "$WORK/ecs-secret" --port-file "$WORK/ecs-port" \
  --start-after 1
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=backend -keyout "$WORK/be.key" \
  -out "$WORK/be.pem" >/dev/null 2>&1
cat >"$WORK/backends.py" <<'PY'
import http.server, socket, ssl, sys, threading
work = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *a): pass
def serve(addr, tls=False):
    s = http.server.ThreadingHTTPServer(addr, H)
    if tls:
        c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        c.load_cert_chain(f"{work}/be.pem", f"{work}/be.key")
        s.socket = c.wrap_socket(s.socket, server_side=True)
    threading.Thread(target=s.serve_forever, daemon=True).start()
serve(("10.77.0.11", 6443), True); serve(("10.77.0.11", 22623), True)
serve(("10.77.0.20", 80)); serve(("10.77.0.20", 443)); serve(("10.77.0.20", 1936))
threading.Event().wait()
PY
spawn --ns "$N" --log "$WORK/backends.log" python3 "$WORK/backends.py" "$WORK"
wait_for 10 test -s "$WORK/ecs-port" || die "ECS fake did not start: $(cat "$WORK/ecs.log")"
ecs() { ip netns exec "$E" curl -s -m 5 -X "$1" "http://10.88.0.20:8001$2" ${3:+-H content-type:application/json -d "$3"}; }

# --- the site --------------------------------------------------------------------------------
API_TOKEN=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
printf '%s\n' "$API_TOKEN" >"$WORK/api-tokens"
for f in api-tokens ecs-akid ecs-secret; do chown nobody "$WORK/$f"; chmod 600 "$WORK/$f"; done
SITE=$WORK/site.yaml
# host.stateDir names a directory nothing may create: each appliance's
# --state-dir holds all of its state, the node overlay included.
lab_site "$SITE" --from examples/ha/site.yaml host.stateDir="$WORK/unused-state-dir" host.dhcp.ha="$HA_MODE" \
  host.api.tokens.file="$WORK/api-tokens" \
  host.api.alibaba="{regionId: cn-hangzhou, endpoint: 'http://10.88.0.20:8001', accessKeyId: {file: $WORK/ecs-akid}, accessKeySecret: {file: $WORK/ecs-secret}, zones: [cn-hangzhou-h], vSwitches: {cn-hangzhou-h: vsw-h1}, securityGroupId: sg-lab, instanceTypes: {master: ecs.g6.xlarge, worker: ecs.g6.large}, imageId: m-rhcos418}" \
  || die "the site was not rewritten"
"$BIN/bootd" --check-config "$SITE" >"$WORK/check.out" 2>&1 || die "site: $(cat "$WORK/check.out")"

# --- appliances and keepalived ------------------------------------------------------------
nsof() { case $1 in A) echo "$A" ;; B) echo "$B" ;; C) echo "$C" ;; esac; }
appliance() { # appliance A|B|C: start the all-in-one binary in its namespace (wait_healthy waits)
  local x=$1 ns
  ns=$(nsof "$x")
  mkdir -p "$WORK/$x"
  start_appliance --ns "$ns" --log "$WORK/$x.log" --env RUST_LOG=info --bin "$BIN/appliance" --ready - \
    -- --site "$SITE" --state-dir "$WORK/$x" --name "$x"
}
keepalived_on() { # keepalived_on A|B
  local x=$1
  spawn --ns "$(nsof "$x")" --log "$WORK/ka-$x.log" --append keepalived -n -l -D -f "$WORK/keepalived.conf" \
    -p "$WORK/$x/ka.pid" -r "$WORK/$x/vrrp.pid" -c "$WORK/$x/chk.pid"
}
power_off() { # power_off A|B: its links down, then everything in the namespace killed
  local ns p
  ns=$([[ $1 == A ]] && echo "$A" || echo "$B")
  # The links first: nothing leaves once the power is gone (keepalived's
  # VRRP process, its parent killed, would say goodbye: priority 0).
  ip -n "$ns" link set ens3 down; ip -n "$ns" link set ens4 down
  for p in $(ip netns pids "$ns"); do kill -9 "$p" 2>/dev/null || true; done
  ip -n "$ns" -4 addr flush dev ens3 scope global   # keepalived's addresses go with the power
  ip -n "$ns" addr add "$([[ $1 == A ]] && echo 10.77.0.2 || echo 10.77.0.3)/24" dev ens3
}
power_on() { # power_on A|B: links up, the appliance and keepalived started
  local ns
  ns=$([[ $1 == A ]] && echo "$A" || echo "$B")
  ip -n "$ns" link set ens3 up; ip -n "$ns" link set ens4 up
  ip -n "$ns" route replace 10.80.0.0/16 via 10.77.0.254
  ip -n "$ns" route replace 10.81.0.0/24 via 10.77.0.254
  appliance "$1"; wait_healthy "$1"; keepalived_on "$1"
}
wait_healthy() { # wait_healthy A|B|C: `bootd ready` answers in its namespace
  wait_for 60 ip netns exec "$(nsof "$1")" "$BIN/bootd" ready --http 127.0.0.1:8080 || die "appliance $1 not healthy after 60 s"
}
has() { [[ $(ip -n "$1" -4 -o addr show dev ens3) == *" $2/"* ]]; }
# (Not tests/lib/vm.sh's api: this one goes through the boot address from L.)
api() { # api METHOD PATH [BODY]: the API through the boot address, as an operator would
  ip netns exec "$L" curl -s -m 10 --cacert "$WORK/A/ca.pem" -H "authorization: Bearer $API_TOKEN" \
    -X "$1" "https://10.77.0.1:9443$2" ${3:+-H content-type:application/json -d "$3"}
}
metric() { # metric A|B NAME{labels}: one value from bootd's /metrics
  local ns; ns=$([[ $1 == A ]] && echo "$A" || echo "$B")
  local text
  text=$(ip netns exec "$ns" curl -s -m 5 http://127.0.0.1:8080/metrics || true)
  awk -v k="$2" '$1 == k {print $2; exit}' <<<"$text"
}

# wait_log X PATTERN BEFORE SECS: until X's log has more lines matching
# PATTERN than BEFORE (grep -c before the event).
wait_log() { wait_for "$4" log_grew "$1" "$2" "$3"; }
log_grew() { (( $(grep -c -- "$2" "$WORK/$1.log" || true) > $3 )); }

appliance A; wait_healthy A
"$BIN/bootd" --site "$SITE" render keepalived --lbd "$BIN/lbd" --bootd "$BIN/bootd" >"$WORK/keepalived.conf"
keepalived_on A
holds_all() { has "$1" 10.77.0.1 && has "$1" 10.77.0.5 && has "$1" 10.77.0.6; }
wait_for 20 holds_all "$A" || die "A does not hold the three addresses: $(ip -n "$A" -4 -o addr show dev ens3)"
ok "A holds the boot address and both VIPs (keepalived, checks bootd ready and lbd ready)"
# What an appliance logs when it answers DHCP: elected (hotStandby), or a
# member of the group (loadBalancing).
if [[ $HA_MODE == hotStandby ]]; then ANSWERS="elected DHCP server"; else ANSWERS="of the DHCP group"; fi
members() { ectl get --prefix /bare-metal-boot/lab/members/dhcp/ --keys-only | grep -c . || true; }
wait_log A "$ANSWERS" 0 20 || die "A does not answer DHCP ($HA_MODE)"
leading() { api GET /v1/cluster | py 'print(v["controller"]["leading"])' 2>/dev/null; }
leads() { [[ $(leading) == True ]]; }
wait_for 20 leads || die "A does not lead the controller: $(api GET /v1/cluster)"
ok "A leads the controller and DHCP"
appliance B; wait_healthy B; keepalived_on B
sleep 3
has "$B" 10.77.0.1 && die "B took the boot address from a healthy A (nopreempt)"
if [[ $HA_MODE == hotStandby ]]; then
  grep -q "elected DHCP server" "$WORK/B.log" && die "B was elected for DHCP while A serves"
else
  wait_log B "$ANSWERS" 0 20 || die "B did not join the DHCP group"
  [[ $(members) == 2 ]] || die "DHCP group: $(members) members, want 2"
fi
ok "B started: $([[ $HA_MODE == hotStandby ]] && echo "standby for DHCP" || echo "answering its share of DHCP"), backup for the addresses"

# dnsd on both: the same answers and serials, each on its own address.
for q in "api.lab.example.test A" "lab.example.test SOA" "bootstrap.lab.example.test A"; do
  # shellcheck disable=SC2086
  a=$(ip netns exec "$L" dig +short +time=2 +tries=2 @10.77.0.2 $q)
  # shellcheck disable=SC2086
  b=$(ip netns exec "$L" dig +short +time=2 +tries=2 @10.77.0.3 $q)
  [[ -n $a && $a == "$b" ]] || die "dnsd: '$q' answered '$a' by A and '$b' by B"
done
ok "dnsd on A and B: the same answers and SOA serial ($(ip netns exec "$L" dig +short @10.77.0.2 lab.example.test SOA | awk '{print $3}'))"

# --- 2. the kill mid-boot -------------------------------------------------------------------
vm() { # vm NAME MAC [BRIDGE]: a SeaBIOS + iPXE VM on BRIDGE (br0; TCG) in L, its files in WORK/vm-NAME
  lab_vm "$L" "tap-$1" "$2" "$WORK/vm-$1" "${3:-br0}"
  VMPID=$VM_PID
}
# wait_ignition NAME PID SECS: the VM's LAB-IGNITION line, or nothing when
# it stopped (QEMU exited) or SECS passed.
wait_ignition() { wait_ignition_line "$3" "$WORK/vm-$1/serial.log" 0 "$2"; }
ecs POST /_fake/hold '{"action": "RunInstances", "count": 1}' >/dev/null
out=$(api POST /v1/nodes '{"name": "ecs-0", "role": "worker", "provider": {"alibaba": {}}}')
[[ $(echo "$out" | py 'print(v["name"])' 2>/dev/null) == ecs-0 ]] || die "API create through A: $out"
vm bootstrap 52:54:00:77:00:10; VM1=$VMPID
wait_for 120 grep -aq "Linux version" "$WORK/vm-bootstrap/serial.log" || die "the VM's kernel did not start within 120 s"
grep -q 'iPXE script served node=bootstrap' "$WORK/A.log" || die "A did not serve the VM's script"
held=$(ecs GET /_fake/held)
echo "$held" | grep -q '"held": *1' || die "no RunInstances held at the kill: $held"
instances_at_kill=$(ecs GET /_fake/instances | py 'print(len(v))')
t_kill=$(now)
power_off A
ecs POST /_fake/release >/dev/null
log "A powered off: the VM's kernel runs (its script, kernel and initramfs came from A); a create held in the ECS fake ($instances_at_kill instance made)"
declare -A MOVED=([10.77.0.1]="" [10.77.0.5]="" [10.77.0.6]="")
moved=0
# all_moved: each address's time on B since the kill, as each arrives
# (wait_for: 0.1 s apart; the times are taken when seen, 2 decimals).
all_moved() {
  local v
  for v in 10.77.0.1 10.77.0.5 10.77.0.6; do
    if [[ -z ${MOVED[$v]} ]] && has "$B" "$v"; then MOVED[$v]=$(calc "$(now) - $t_kill"); moved=$((moved + 1)); fi
  done
  [[ $moved == 3 ]]
}
wait_for 15 all_moved || die "not every address reached B within 15 s: boot '${MOVED[10.77.0.1]}' api '${MOVED[10.77.0.5]}' ingress '${MOVED[10.77.0.6]}'"
bound=4   # advertInterval 1 s x 3 + 1 s
for v in 10.77.0.1 10.77.0.5 10.77.0.6; do
  [[ $(calc "${MOVED[$v]} <= $bound") == 1 ]] || die "$v reached B after ${MOVED[$v]} s (bound $bound s)"
done
ok "the addresses moved to B: boot ${MOVED[10.77.0.1]} s, api ${MOVED[10.77.0.5]} s, ingress ${MOVED[10.77.0.6]} s (bound $bound s)"
line=$(wait_ignition bootstrap "$VM1" 180)
[[ $line == "LAB-IGNITION sha256="* ]] || die "the VM did not fetch its Ignition: '${line:-nothing (180 s or QEMU stopped)}'"
want=$(ip netns exec "$B" "$BIN/bootd" --site "$SITE" --state-dir "$WORK/B" render ignition bootstrap | sha256sum | cut -d' ' -f1)
[[ $line == "LAB-IGNITION sha256=$want "* ]] || die "the VM's Ignition is not the node's: $line (want $want)"
grep -q 'Ignition served node=bootstrap' "$WORK/B.log" || die "B did not serve the VM's Ignition"
ok "the VM booted through the loss of A: its Ignition (sha256 ${want:0:12}...) served by B with the token A minted"
# B's status page tells the whole boot: the steps A served (shared before
# it lost power) and B's, each with the appliance that served it.
served_by=$(ip netns exec "$B" curl -s -m 5 http://127.0.0.1:8080/status/node/bootstrap/timeline.json |
  py 'print(" ".join(p["phase"] + "=" + ",".join(p.get("by", [])) for p in v["phases"]))' 2>/dev/null || true)
for want_by in script=A kernel=A ignition=B; do
  [[ " $served_by " == *" $want_by"[\ ,]* ]] || die "B's timeline of bootstrap: '$served_by' (want $want_by first)"
done
# The firmware's DHCP: A's (hotStandby), or whichever appliance the
# client's hash gives (loadBalancing). The guest's own DHCP, after A's
# loss, is B's: dhcp=A,B.
dhcp_by=${served_by#*dhcp=}; dhcp_by=${dhcp_by:0:1}
[[ $dhcp_by == A || ($HA_MODE == loadBalancing && $dhcp_by == B) ]] || die "B's timeline of bootstrap: '$served_by' (DHCP first by '$dhcp_by')"
page=$(ip netns exec "$B" curl -s -m 5 http://127.0.0.1:8080/status/node/bootstrap)
[[ $page == *'<td class="by">A</td>'* && $page == *'<td class="by">B</td>'* ]] || die "B's status page of bootstrap names no appliance per step"
ok "B's status page of the VM: $served_by"
stop_pid "$VM1"
ecs_provisioned() {
  node=$(api GET /v1/nodes/ecs-0)
  provisioned=$(echo "$node" | py 'print(any(c["type"]=="Provisioned" and c["status"]=="True" for c in v.get("conditions",[])))' 2>/dev/null || true)
  [[ $provisioned == True ]]
}
wait_for 60 ecs_provisioned || die "ecs-0 not Provisioned by B within 60 s: $node"
n=$(ecs GET /_fake/instances | py 'print(len(v))')
[[ $n == 1 ]] || die "ECS instances after the takeover: $n (want 1)"
[[ $(leading) == True ]] || die "B does not lead the controller: $(api GET /v1/cluster)"
ok "the create held at the kill: Provisioned by B, one instance in the fake"
grep -q "name: ecs-0" "$WORK/B/nodes.yaml" || die "the API node is not in B's overlay (its --state-dir)"
[[ -e $WORK/unused-state-dir ]] && die "the site's host.stateDir was written although --state-dir overrides it"
ok "the API node, with its address, is in B's overlay (in B's --state-dir)"

# --- 3. the DHCP storm --------------------------------------------------------------------------
# back_on X OTHER: X powered on again; it must not take DHCP from OTHER
# (hotStandby) or must rejoin the group (loadBalancing).
back_on() {
  local n
  n=$(grep -c "$ANSWERS" "$WORK/$1.log" || true)
  power_on "$1"
  if [[ $HA_MODE == hotStandby ]]; then
    sleep 3
    wait_log "$1" "$ANSWERS" "$n" 0 && die "$1 back: elected for DHCP while $2 serves"
  else
    wait_log "$1" "$ANSWERS" "$n" 20 || die "$1 back: not in the DHCP group"
  fi
  return 0
}
back_on A B
wait_for 10 grep -q "name: ecs-0" "$WORK/A/nodes.yaml" || die "A back: the node made while it was off is not in its overlay"
has "$B" 10.77.0.1 || die "A back: B lost the boot address"
ok "A powered on again: DHCP $([[ $HA_MODE == hotStandby ]] && echo standby || echo "group member"), B keeps the addresses (nopreempt), the node made while A was off in A's overlay"
spawn --ns "$L" --log "$WORK/tcpdump.log" tcpdump -i br0 -U -n -s 400 -w "$WORK/storm.pcap" \
  'udp and src port 67 and (src host 10.77.0.2 or src host 10.77.0.3)'
TCPDUMP=$SPAWNED
sleep 1
secs=$(( STORM_CLIENTS / STORM_RATE ))
storm() { # storm GIADDR SERVER OUT: one relay lane of the storm (its PID in SPAWNED)
  spawn --ns "$L" --log "$3" timeout $(( secs + 30 )) perfdhcp -4 -l "$1" -R "$STORM_CLIENTS" -n "$STORM_CLIENTS" \
    -r "$STORM_RATE" -s 7 -b mac=02:80:00:00:00:00 "$2"
}
storm 10.80.0.1 10.77.0.3 "$WORK/storm-B.out"; S1=$SPAWNED
storm 10.80.0.2 10.77.0.2 "$WORK/storm-A.out"; S2=$SPAWNED
sleep $(( secs / 2 ))
n_elected=$(grep -c "elected DHCP server (relayed requests): shared leases loaded" "$WORK/A.log" || true)
t_kill=$(now)
power_off B
if [[ $HA_MODE == hotStandby ]]; then
  log "B (elected for DHCP) powered off halfway through the storm"
  wait_log A "elected DHCP server (relayed requests): shared leases loaded" "$n_elected" 30 || die "storm: A not elected for DHCP within 30 s of B's loss"
  log "A elected for DHCP $(since "$t_kill") s after B's loss: $(grep "elected DHCP server (relayed requests): shared leases loaded" "$WORK/A.log" | tail -n 1 | grep -o 'leases=[0-9]*')"
else
  log "B (answering its share) powered off halfway through the storm"
  one_member() { [[ $(members) == 1 ]]; }
  wait_for 30 one_member || die "storm: B still in the DHCP group 30 s after its loss"
  log "B's share is A's $(since "$t_kill") s after B's loss (its member key expired)"
fi
wait "$S1" "$S2" || true
stop_pid "$S1"; stop_pid "$S2"   # ended: out of the list
sleep 1; stop_pid "$TCPDUMP"
ectl get --prefix /bare-metal-boot/lab/dhcp/leases/ -w json >"$WORK/leases.json" || die "etcd read of the leases"
python3 tests/ha/dhcp-check.py "$WORK/storm.pcap" "$WORK/leases.json" --net 10.80. >"$WORK/storm-check.out" 2>&1 \
  || die "storm: $(cat "$WORK/storm-check.out")"
summary=$(grep '^summary ' "$WORK/storm-check.out" | cut -d' ' -f2-)
read -r acks clients <<<"$(echo "$summary" | py 'print(v["acks"], v["clients_acked"])')"
acks_a=$(echo "$summary" | py 'print(v["acks_by_server"].get("10.77.0.2", 0))')
acks_b=$(echo "$summary" | py 'print(v["acks_by_server"].get("10.77.0.3", 0))')
(( acks_a > 0 && acks_b > 0 )) || die "storm: ACKs by A $acks_a, by B $acks_b: one of them never answered"
ok "storm: $STORM_CLIENTS simulated clients x 2 relay lanes at $STORM_RATE/s: $acks ACKs to $clients clients (B $acks_b before its loss, A $acks_a after); no duplicate on the wire or in etcd, every ACK in etcd"

# --- 4. quorum loss ------------------------------------------------------------------------------
back_on B A
# The new clients come through the relay: what counts is the relayed
# scope's role (each scope logs its own line).
LOST="the shared store cannot be reached: DHCP answers the site's nodes only and grants no other address (relayed requests)"
n_lost=$(grep -c "$LOST" "$WORK/A.log" || true)
kill -9 "${MEMBER[2]}" "${MEMBER[3]}"
stop_pid "${MEMBER[2]}"; stop_pid "${MEMBER[3]}"   # reaped, and out of the list
t_q=$(now)
wait_log A "$LOST" "$n_lost" 20 || die "A did not report the lost quorum within 20 s"
ok "two etcd members of three killed: A reports it after $(since "$t_q") s"
before=$(metric A 'bootd_dhcp_packets_total{kind="no_store"}'); before=${before:-0}
ip netns exec "$L" timeout 30 perfdhcp -4 -l 10.80.0.2 -R 20 -n 20 -r 10 -s 11 -b mac=02:81:00:00:00:00 10.77.0.2 \
  >"$WORK/quorum-lost.out" 2>&1 || true
acks=$(awk '/\*\*\*Statistics for: REQUEST-ACK\*\*\*/ {f=1} f && /^received packets:/ {print $3; exit}' "$WORK/quorum-lost.out")
offers=$(awk '/\*\*\*Statistics for: DISCOVER-OFFER\*\*\*/ {f=1} f && /^received packets:/ {print $3; exit}' "$WORK/quorum-lost.out")
after=$(metric A 'bootd_dhcp_packets_total{kind="no_store"}'); after=${after:-0}
[[ ${offers:-0} == 0 && ${acks:-0} == 0 ]] || die "quorum lost: new clients got ${offers:-?} offers, ${acks:-?} ACKs"
[[ $(calc "$after > $before") == 1 ]] || die "quorum lost: no_store not counted ($before -> $after)"
ok "quorum lost: 20 new clients got no lease; A counted $(calc "$after - $before") refusals as no_store"
vm worker-1 52:54:00:77:00:21; VM2=$VMPID
line=$(wait_ignition worker-1 "$VM2" 180)
[[ $line == "LAB-IGNITION sha256="* ]] || die "quorum lost: the known node worker-1 did not boot: '${line:-nothing (180 s or QEMU stopped)}'"
want=$(ip netns exec "$A" "$BIN/bootd" --site "$SITE" --state-dir "$WORK/A" render ignition worker-1 | sha256sum | cut -d' ' -f1)
[[ $line == "LAB-IGNITION sha256=$want "* ]] || die "worker-1's Ignition is not the node's: $line"
stop_pid "$VM2"
ok "quorum lost: the known node worker-1 booted and fetched its Ignition"
member 2; member 3
wait_for 20 ectl endpoint health || true
t_q=$(now)
got=0
for _ in $(seq 10); do
  spawn --ns "$L" --log "$WORK/quorum-back-a.out" timeout 20 perfdhcp -4 -l 10.80.0.2 -R 10 -n 10 -r 10 -s 12 \
    -b mac=02:82:00:00:00:00 10.77.0.2
  pa=$SPAWNED
  ip netns exec "$L" timeout 20 perfdhcp -4 -l 10.80.0.1 -R 10 -n 10 -r 10 -s 12 -b mac=02:82:00:00:00:00 10.77.0.3 \
    >"$WORK/quorum-back-b.out" 2>&1 || true
  wait "$pa" || true
  stop_pid "$pa"
  got=$(cat "$WORK"/quorum-back-?.out | awk '/\*\*\*Statistics for: REQUEST-ACK\*\*\*/ {f=1} f && /^received packets:/ {s+=$3; f=0} END {print s+0}')
  (( got > 0 )) && break
done
(( got > 0 )) || die "quorum back: no new client got a lease"
ok "quorum back: new clients get leases again ($got ACKs, $(since "$t_q") s after the members returned)"

# --- 5. several racks ------------------------------------------------------------------------
appliance C; wait_healthy C
wait_log C "$ANSWERS (segment rack3)" 0 20 || die "C does not answer its segment rack3 ($HA_MODE)"
for x in A B; do
  grep -q "segment rack3" "$WORK/$x.log" && die "$x took part in rack3's DHCP"
done
vm worker-2 52:54:00:77:00:22 br2; VM3=$VMPID
line=$(wait_ignition worker-2 "$VM3" 180)
[[ $line == "LAB-IGNITION sha256="* ]] || die "rack3: worker-2 did not boot: '${line:-nothing (180 s or QEMU stopped)}'"
want=$(ip netns exec "$A" "$BIN/bootd" --site "$SITE" --state-dir "$WORK/A" render ignition worker-2 | sha256sum | cut -d' ' -f1)
[[ $line == "LAB-IGNITION sha256=$want "* ]] || die "worker-2's Ignition is not the node's: $line"
grep -q "reason=worker-2: ack 10.81.0.22" "$WORK/C.log" || die "rack3: C did not ACK worker-2"
stop_pid "$VM3"
ok "several racks: C answers rack3's broadcasts (A and B never see them); worker-2 got 10.81.0.22 from C and its Ignition through the boot address"

echo "PASS ha-e2e $HA_MODE moved=${MOVED[10.77.0.1]}/${MOVED[10.77.0.5]}/${MOVED[10.77.0.6]}s storm_acks=$acks_b+$acks_a"
