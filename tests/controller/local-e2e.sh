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
# shellcheck source=tests/lib/harness.sh
. "$HERE/../lib/harness.sh"   # $REPO
# shellcheck source=tests/lib/vm.sh
. "$HERE/../lib/vm.sh"
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
bootd_under_test "$BOOTD" local-e2e.sh

NODE=api-0 MAC=52:54:00:77:00:50 IP=10.77.0.50
HOST_IP=10.77.0.1 API=https://10.77.0.1:9443
lab_run_init "local-e2e $FIRMWARE" "$WORKDIR" "$REPO/target/lab-runs/local-e2e-$$"
T0=$(now)

# die MESSAGE: the VM's console and QEMU's and bootd's logs, then the FAIL line.
die() { show_logs "$WORK/vms/$NODE/serial.log" "$WORK/vms/$NODE/qemu.log" "$WORK"/bootd-*.log; fail "$*"; }

"$REPO/tests/lab/guest.sh" "$REPO/target/lab-images" >&2 || die "guest.sh failed"

# --- the site: the lab site + host.api + host.api.local ---------------------------------
api_tokens
SITE=$WORK/site.yaml
lab_site "$SITE" host.stateDir="$WORK/state" host.api.listen="$HOST_IP:9443" host.api.url="$API" \
  host.api.tokens.file="$WORK/api-tokens" host.api.deadline=10m \
  host.api.local="{qemu: qemu-system-x86_64, bridge: br0, firmware: $FIRMWARE, memory: 512, stateDir: $WORK/vms}" \
  || die "site not written"
"$BOOTD" --check-config "$SITE" >"$WORK/check.log" 2>&1 || die "site does not validate: $(cat "$WORK/check.log")"

# --- network: the lab namespace (IPv6 too), router ads (bootd serves DHCP) ----------------
# Everything left in it at exit (the VM bootd started) goes with it.
lab_netns "labapi-$$" "$HOST_IP/24" fd77::1/64
lab_ra

# start_api_bootd N: bootd (its log bootd-N.log), ready once its API answers.
start_api_bootd() {
  start_bootd --bin "$BOOTD" --log "$WORK/bootd-$1.log" --timeout 30 -- --site "$SITE" --state-dir "$WORK/state" \
    || die "bootd did not start"
  wait_up "$BOOTD_PID" 30 "$WORK/bootd-$1.log" bootd api_up
}
machine_id() { api GET "/v1/nodes/$NODE" | sed -n 's/.*"id": *"\([^"]*\)".*/\1/p' | head -n 1; }
vms_of_node() {   # PIDs whose argv carries -name bootd:$NODE
  local p
  for p in $(ip netns pids "$NS"); do
    tr '\0' '\n' <"/proc/$p/cmdline" 2>/dev/null | grep -qx "bootd:$NODE" && echo "$p"
  done
  return 0
}
cli() { nsx "$BOOTD" --site "$SITE" --state-dir "$WORK/state" nodes "$@"; }

start_api_bootd 1
log "namespace and bootd up in $(since "$T0")s (workdir $WORK)"

# --- 1. create through the API -----------------------------------------------------
r=$(api GET /v1/nodes)
[[ $(status_of "$r") == 200 ]] || die "GET /v1/nodes: $r"
r=$(nsx curl -sS --max-time 10 --cacert "$WORK/state/ca.pem" -o /dev/null -w '%{http_code}' "$API/v1/nodes")
[[ $r == 401 ]] || die "no token should be 401, got $r"
BODY="{\"name\":\"$NODE\",\"role\":\"worker\",\"macs\":[\"$MAC\"],\"ip\":\"$IP\",\"kernelArgs\":[\"console=ttyS0\"],\"provider\":{\"local\":{\"firmware\":\"$FIRMWARE\"}}}"
T_CREATE=$(now)
r=$(api POST /v1/nodes "$BODY")
[[ $(status_of "$r") == 201 ]] || die "POST /v1/nodes: $r"
log "POST /v1/nodes $NODE: 201"

# --- 2. the machine is made; kill -9 bootd and restart it ------------------------------------
ID=""
recorded() { ID=$(machine_id); [[ -n $ID ]]; }
PACE=0.2 within 30 recorded || die "no machine recorded for $NODE within 30 s"
QEMU_PID=$(cat "$WORK/vms/$NODE/qemu.pid")
[[ $ID == "$NODE.$QEMU_PID."* ]] || die "machine id $ID does not name the pidfile's PID $QEMU_PID"
tr '\0' ' ' <"/proc/$QEMU_PID/cmdline" | grep -q -- "mac=$MAC" || die "QEMU $QEMU_PID has not the node's MAC"
log "machine $ID (QEMU PID $QEMU_PID) after $(since "$T_CREATE")s"

if [[ $KILL == 1 ]]; then
  kill -9 "$BOOTD_PID"
  stop_pid "$BOOTD_PID"   # reaped, and out of the list
  alive "$QEMU_PID" || die "QEMU died with bootd"
  start_api_bootd 2
  log "bootd killed with SIGKILL and restarted; QEMU $QEMU_PID still runs"
  [[ $(machine_id) == "$ID" ]] || die "after the restart the machine is $(machine_id), not $ID"
fi
[[ $(vms_of_node | wc -l) == 1 ]] || die "QEMU processes for $NODE: $(vms_of_node | tr '\n' ' ')"

# --- 3. bootd nodes wait (the CLI) until Ready -------------------------------------------------
nodes_wait "$NODE" "$(time_left "$TIMEOUT" "$T_CREATE")" "$WORK/wait.out" \
  || die "bootd nodes wait $NODE exited $?: $(tail -n 1 "$WORK/wait.out")"
READY_SECS=$(since "$T_CREATE")
[[ $(vms_of_node | wc -l) == 1 ]] || die "QEMU processes for $NODE at Ready: $(vms_of_node | tr '\n' ' ')"

# --- 4. the guest proved its Ignition bytes --------------------------------------------------
line=$(wait_ignition_line 60 "$WORK/vms/$NODE/serial.log")
[[ -n $line ]] || die "Ready, but no LAB-IGNITION line on the guest's console"
[[ $line == LAB-IGNITION-FAILED* ]] && die "guest: ${line#LAB-IGNITION-FAILED }"
got=$(ignition_sha "$line")
"$BOOTD" render ignition "$NODE" --site "$SITE" --state-dir "$WORK/state" >"$WORK/expected.ign" 2>"$WORK/render.log" \
  || die "bootd render ignition $NODE: $(tail -n 3 "$WORK/render.log" | tr '\n' ' ')"
want=$(sha256sum "$WORK/expected.ign" | cut -d' ' -f1)
[[ $got == "$want" ]] || die "ignition mismatch: guest sha256=$got, bootd render ignition sha256=$want"
log "guest: $line"

# --- 5. wait's failure exit ------------------------------------------------------------------
rc=0
out=$(cli wait no-such-node --timeout 10 2>&1) || rc=$?
[[ $rc == 1 && $out == *"no such node"* ]] || die "nodes wait no-such-node: exit $rc: $out"

# --- 6. delete: the VM's PID is killed, the node goes ----------------------------------------
TAP=$(sed -n 's/.*"tap": *"\([^"]*\)".*/\1/p' "$WORK/vms/$NODE/vm.json")
[[ -n $TAP ]] && { nsx ip link show "$TAP" >/dev/null 2>&1 || die "tap $TAP not found while the VM runs"; }
r=$(api DELETE "/v1/nodes/$NODE")
[[ $(status_of "$r") == 202 ]] || die "DELETE: $r"
node_gone() { [[ $(status_of "$(api GET "/v1/nodes/$NODE")") == 404 ]]; }
PACE=0.2 within 30 node_gone || die "node still there 30 s after DELETE"
state=$(awk '{print $3}' "/proc/$QEMU_PID/stat" 2>/dev/null || true)
[[ -z $state || $state == Z ]] || die "QEMU $QEMU_PID still runs after the delete (state $state)"
[[ -z $(vms_of_node) ]] || die "QEMU processes left for $NODE: $(vms_of_node | tr '\n' ' ')"
[[ -n $TAP ]] && { nsx ip link show "$TAP" >/dev/null 2>&1 && die "tap $TAP left behind"; }
grep -q "\"error\"" <<<"$(api GET "/v1/nodes/$NODE")" || die "GET after delete has no error body"
echo "PASS local-e2e $FIRMWARE ${READY_SECS}s"
