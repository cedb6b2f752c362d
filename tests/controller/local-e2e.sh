#!/usr/bin/env bash
# The controller API's whole loop with the local provider, for real:
# API call -> QEMU VM on the lab bridge -> network boot from bootd (DHCP,
# iPXE, kernel, initramfs) -> the guest fetches its Ignition -> Ready.
#
# Usage: tests/controller/local-e2e.sh [--bootd BOOTD] [--firmware seabios-ipxe|ovmf-ipxe]
#          [--timeout SECS] [--workdir DIR] [--no-kill]
#
# Inside a private network namespace (10.77.0.0/24 on br0, as tests/lab/):
#  1. bootd runs the lab site plus host.api (10.77.0.1:9443, a token file) and
#     host.api.local (qemu-system-x86_64 on br0; VM files in WORKDIR/vms);
#     bootd serves DHCP itself; dnsmasq only sends IPv6 router advertisements.
#  2. curl (bearer token from a header file, the site CA) POSTs node api-0
#     with provider {"local": {...}}; bootd starts QEMU with the node's MAC.
#  3. Once the machine is Provisioned, bootd is killed with SIGKILL and started
#     again: the VM runs on, and the new bootd keeps the same machine (same
#     PID), with exactly one QEMU for the node. (--no-kill skips this step:
#     tests/lab/demo.sh --via-api.)
#  4. `bootd nodes wait api-0` (the CLI) must exit 0 (Ready) within the timeout.
#  5. The guest's console (WORKDIR/vms/api-0/serial.log) must show
#     "LAB-IGNITION sha256=X" with X = sha256 of `bootd render ignition api-0`.
#  6. `bootd nodes wait no-such-node` must exit 1 saying "no such node".
#  7. DELETE /v1/nodes/api-0 -> 404 within 30 s, the QEMU PID gone, its tap gone.
# Prints "PASS local-e2e <firmware> <secs>s" (exit 0) or "FAIL local-e2e ..."
# with logs (exit 1); usage errors exit 2. Root only (netns, tap).
set -euo pipefail

HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BOOTD="" FIRMWARE=seabios-ipxe TIMEOUT=300 WORKDIR="" KILL=1
usage() { sed -n '6,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --bootd) BOOTD=$2; shift 2 ;;
    --firmware) FIRMWARE=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --workdir) WORKDIR=$2; shift 2 ;;
    --no-kill) KILL=0; shift ;;
    -h|--help) usage ;;
    *) echo "local-e2e.sh: unknown argument $1" >&2; usage ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "local-e2e.sh: must run as root (netns, tap)" >&2; exit 2; }
case $FIRMWARE in seabios-ipxe|ovmf-ipxe) ;; *) echo "local-e2e.sh: bad --firmware $FIRMWARE" >&2; exit 2 ;; esac
[[ $TIMEOUT =~ ^[0-9]+$ ]] || { echo "local-e2e.sh: bad --timeout $TIMEOUT" >&2; exit 2; }
if [[ -z $BOOTD ]]; then
  (cd "$REPO" && cargo build -q -p appliance --bin bootd) >&2
  BOOTD=${CARGO_TARGET_DIR:-$REPO/target}/debug/bootd
fi
BOOTD=$(readlink -f "$BOOTD")
[[ -x $BOOTD ]] || { echo "local-e2e.sh: bootd not executable: $BOOTD" >&2; exit 2; }

NODE=api-0 MAC=52:54:00:77:00:50 IP=10.77.0.50
HOST_IP=10.77.0.1 API=https://10.77.0.1:9443
NS=labapi-$$
WORKDIR=${WORKDIR:-$REPO/target/lab-runs/local-e2e-$$}
rm -rf "$WORKDIR"
mkdir -p "$WORKDIR/state"
WORKDIR=$(readlink -f "$WORKDIR")
T0=$(date +%s.%N)
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
log() { echo "local-e2e.sh: $*" >&2; }
nsx() { ip netns exec "$NS" "$@"; }

PIDS=()
. "$REPO/tests/lib.sh"
cleanup() {
  local rc=$?
  # Also anything still in our own namespace (a VM bootd started).
  stop_started "$NS"
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "FAIL local-e2e $FIRMWARE interrupted"; exit 130' INT TERM HUP
trap 'echo "FAIL local-e2e $FIRMWARE script error at line $LINENO: $BASH_COMMAND"' ERR

clean() { tr -d '\r' <"$1" | sed -e 's/\x1b\[[0-9;=?]*[a-zA-Z]//g' -e 's/\x1b[a-zA-Z]//g' -e 's/\x08//g'; }
fail() {
  echo "FAIL local-e2e $FIRMWARE $*"
  local f
  for f in "$WORKDIR/vms/$NODE/serial.log" "$WORKDIR/vms/$NODE/qemu.log" "$WORKDIR"/bootd-*.log; do
    [[ -f $f ]] || continue
    echo "--- last 30 lines of $f"
    clean "$f" | tail -n 30
  done
  exit 1
}

# A run killed with SIGKILL leaves its namespace behind: drop empty ones whose script is gone.
for old in $(ip netns list 2>/dev/null | awk '$1 ~ /^labapi-[0-9]+$/ {print $1}'); do
  kill -0 "${old#labapi-}" 2>/dev/null && continue
  [[ -z $(ip netns pids "$old" 2>/dev/null) ]] && ip netns del "$old" 2>/dev/null && log "removed stale netns $old"
done

"$REPO/tests/lab/guest.sh" "$REPO/target/lab-images" >&2 || fail "guest.sh failed"

# --- the site: the lab site + host.api + host.api.local, absolute paths -------------
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORKDIR/api-tokens"
chmod 600 "$WORKDIR/api-tokens"
printf 'Authorization: Bearer %s\n' "$(cat "$WORKDIR/api-tokens")" >"$WORKDIR/auth.hdr"   # curl -H @file: not in argv
chmod 600 "$WORKDIR/auth.hdr"
SITE=$WORKDIR/site.yaml
sed -e "s|stateDir: ../../target/lab-state|stateDir: $WORKDIR/state|" \
    -e "s|root: ../../target/lab-images|root: $REPO/target/lab-images|" \
    -e "s|root: ../../target/lab-tftp|root: $REPO/target/lab-tftp|" \
    -e "s|^  dir: ignition|  dir: $REPO/examples/lab/ignition|" \
    -e "s|^host:\$|host:\n  api:\n    listen: $HOST_IP:9443\n    url: $API\n    tokens: { file: $WORKDIR/api-tokens }\n    deadline: 10m\n    local: { qemu: qemu-system-x86_64, bridge: br0, firmware: $FIRMWARE, memory: 512, stateDir: $WORKDIR/vms }|" \
    "$REPO/examples/lab/site.yaml" >"$SITE"
grep -q "local: { qemu" "$SITE" || fail "site not written"
"$BOOTD" --check-config "$SITE" >"$WORKDIR/check.log" 2>&1 || fail "site does not validate: $(cat "$WORKDIR/check.log")"

# --- network: netns, br0, router ads (bootd serves DHCP) ---------------------------------
ip netns add "$NS"
nsx ip link set lo up
nsx ip link add br0 type bridge forward_delay 0 stp_state 0
nsx ip addr add "$HOST_IP/24" dev br0
nsx ip -6 addr add fd77::1/64 dev br0 nodad
nsx ip link set br0 up
ip netns exec "$NS" dnsmasq --conf-file=/dev/null --keep-in-foreground --log-facility=- --port=0 \
  --interface=br0 --bind-interfaces --user=root --group=root --pid-file="$WORKDIR/dnsmasq.pid" \
  --dhcp-leasefile="$WORKDIR/dnsmasq.leases" --enable-ra --dhcp-range=::,constructor:br0,ra-only,64,1h \
  >"$WORKDIR/dnsmasq.log" 2>&1 &
PIDS+=($!)

N_BOOTD=0 BOOTD_PID=""
start_bootd() {
  N_BOOTD=$((N_BOOTD + 1))
  ip netns exec "$NS" "$BOOTD" --site "$SITE" --state-dir "$WORKDIR/state" >"$WORKDIR/bootd-$N_BOOTD.log" 2>&1 &
  BOOTD_PID=$!
  PIDS+=("$BOOTD_PID")
  local ok=0
  for _ in $(seq 150); do   # 30 s
    kill -0 "$BOOTD_PID" 2>/dev/null || fail "bootd exited at start"
    if nsx curl -fsS --max-time 1 --cacert "$WORKDIR/state/ca.pem" "$API/healthz" >/dev/null 2>&1; then ok=1; break; fi
    sleep 0.2
  done
  [[ $ok == 1 ]] || fail "bootd's API /healthz not answering within 30 s"
}
api() {   # api METHOD PATH [BODY] -> prints the body, then the status on the last line
  local args=(-sS --max-time 10 --cacert "$WORKDIR/state/ca.pem" -H @"$WORKDIR/auth.hdr" -X "$1" -w '\n%{http_code}')
  [[ $# -ge 3 ]] && args+=(-H 'Content-Type: application/json' --data-binary "$3")
  nsx curl "${args[@]}" "$API$2"
}
status_of() { tail -n 1 <<<"$1"; }
machine_id() { api GET "/v1/nodes/$NODE" | sed -n 's/.*"id": *"\([^"]*\)".*/\1/p' | head -n 1; }
vms_of_node() {   # PIDs whose argv carries -name bootd:$NODE
  local p
  for p in $(ip netns pids "$NS"); do
    tr '\0' '\n' <"/proc/$p/cmdline" 2>/dev/null | grep -qx "bootd:$NODE" && echo "$p"
  done
  return 0
}
cli() { nsx "$BOOTD" --site "$SITE" --state-dir "$WORKDIR/state" nodes "$@"; }

start_bootd
log "namespace and bootd up in $(elapsed "$T0")s (workdir $WORKDIR)"

# --- 1. create through the API -----------------------------------------------------
r=$(api GET /v1/nodes)
[[ $(status_of "$r") == 200 ]] || fail "GET /v1/nodes: $r"
r=$(nsx curl -sS --max-time 10 --cacert "$WORKDIR/state/ca.pem" -o /dev/null -w '%{http_code}' "$API/v1/nodes")
[[ $r == 401 ]] || fail "no token should be 401, got $r"
BODY="{\"name\":\"$NODE\",\"role\":\"worker\",\"macs\":[\"$MAC\"],\"ip\":\"$IP\",\"kernelArgs\":[\"console=ttyS0\"],\"provider\":{\"local\":{\"firmware\":\"$FIRMWARE\"}}}"
T_CREATE=$(date +%s.%N)
r=$(api POST /v1/nodes "$BODY")
[[ $(status_of "$r") == 201 ]] || fail "POST /v1/nodes: $r"
log "POST /v1/nodes $NODE: 201"

# --- 2. the machine is made; kill -9 bootd and restart it ------------------------------------
ID=""
deadline=$(( $(date +%s) + 30 ))
while (( $(date +%s) < deadline )); do
  ID=$(machine_id)
  [[ -n $ID ]] && break
  sleep 0.2
done
[[ -n $ID ]] || fail "no machine recorded for $NODE within 30 s"
QEMU_PID=$(cat "$WORKDIR/vms/$NODE/qemu.pid")
[[ $ID == "$NODE.$QEMU_PID."* ]] || fail "machine id $ID does not name the pidfile's PID $QEMU_PID"
tr '\0' ' ' <"/proc/$QEMU_PID/cmdline" | grep -q -- "mac=$MAC" || fail "QEMU $QEMU_PID has not the node's MAC"
log "machine $ID (QEMU PID $QEMU_PID) after $(elapsed "$T_CREATE")s"

if [[ $KILL == 1 ]]; then
  kill -9 "$BOOTD_PID"
  wait "$BOOTD_PID" 2>/dev/null || true
  kill -0 "$QEMU_PID" 2>/dev/null || fail "QEMU died with bootd"
  start_bootd
  log "bootd killed with SIGKILL and restarted; QEMU $QEMU_PID still runs"
  [[ $(machine_id) == "$ID" ]] || fail "after the restart the machine is $(machine_id), not $ID"
fi
[[ $(vms_of_node | wc -l) == 1 ]] || fail "QEMU processes for $NODE: $(vms_of_node | tr '\n' ' ')"

# --- 3. bootd nodes wait (the CLI) until Ready -------------------------------------------------
left=$(awk -v t="$TIMEOUT" -v e="$(elapsed "$T_CREATE")" 'BEGIN { l = int(t - e); print (l < 10 ? 10 : l) }')
rc=0
# shown as it goes (tee), kept for the FAIL line
cli wait "$NODE" --timeout "$left" --interval 1 > >(tee "$WORKDIR/wait.out" >&2) 2>&1 || rc=$?
sleep 0.2
[[ $rc == 0 ]] || fail "bootd nodes wait $NODE exited $rc: $(tail -n 1 "$WORKDIR/wait.out")"
READY_SECS=$(elapsed "$T_CREATE")
[[ $(vms_of_node | wc -l) == 1 ]] || fail "QEMU processes for $NODE at Ready: $(vms_of_node | tr '\n' ' ')"

# --- 4. the guest proved its Ignition bytes --------------------------------------------------
line=""
deadline=$(( $(date +%s) + 60 ))
while (( $(date +%s) < deadline )); do
  line=$(grep -a -m1 -E '^LAB-IGNITION(-FAILED)? ' "$WORKDIR/vms/$NODE/serial.log" 2>/dev/null | tr -d '\r' || true)
  [[ -n $line ]] && break
  sleep 0.2
done
[[ -n $line ]] || fail "Ready, but no LAB-IGNITION line on the guest's console"
[[ $line == LAB-IGNITION-FAILED* ]] && fail "guest: ${line#LAB-IGNITION-FAILED }"
got=$(sed -n 's/.* sha256=\([0-9a-f]*\).*/\1/p' <<<"$line")
"$BOOTD" render ignition "$NODE" --site "$SITE" --state-dir "$WORKDIR/state" >"$WORKDIR/expected.ign" 2>"$WORKDIR/render.log" \
  || fail "bootd render ignition $NODE: $(tail -n 3 "$WORKDIR/render.log" | tr '\n' ' ')"
want=$(sha256sum "$WORKDIR/expected.ign" | cut -d' ' -f1)
[[ $got == "$want" ]] || fail "ignition mismatch: guest sha256=$got, bootd render ignition sha256=$want"
log "guest: $line"

# --- 5. wait's failure exit ------------------------------------------------------------------
rc=0
out=$(cli wait no-such-node --timeout 10 2>&1) || rc=$?
[[ $rc == 1 && $out == *"no such node"* ]] || fail "nodes wait no-such-node: exit $rc: $out"

# --- 6. delete: the VM's PID is killed, the node goes ----------------------------------------
TAP=$(sed -n 's/.*"tap": *"\([^"]*\)".*/\1/p' "$WORKDIR/vms/$NODE/vm.json")
[[ -n $TAP ]] && { nsx ip link show "$TAP" >/dev/null 2>&1 || fail "tap $TAP not found while the VM runs"; }
r=$(api DELETE "/v1/nodes/$NODE")
[[ $(status_of "$r") == 202 ]] || fail "DELETE: $r"
gone=0
deadline=$(( $(date +%s) + 30 ))
while (( $(date +%s) < deadline )); do
  [[ $(status_of "$(api GET "/v1/nodes/$NODE")") == 404 ]] && { gone=1; break; }
  sleep 0.2
done
[[ $gone == 1 ]] || fail "node still there 30 s after DELETE"
state=$(awk '{print $3}' "/proc/$QEMU_PID/stat" 2>/dev/null || true)
[[ -z $state || $state == Z ]] || fail "QEMU $QEMU_PID still runs after the delete (state $state)"
[[ -z $(vms_of_node) ]] || fail "QEMU processes left for $NODE: $(vms_of_node | tr '\n' ' ')"
[[ -n $TAP ]] && { nsx ip link show "$TAP" >/dev/null 2>&1 && fail "tap $TAP left behind"; }
grep -q "\"error\"" <<<"$(api GET "/v1/nodes/$NODE")" || fail "GET after delete has no error body"
echo "PASS local-e2e $FIRMWARE ${READY_SECS}s"
