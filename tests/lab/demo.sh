#!/usr/bin/env bash
# The README's "run the appliance" command: the lab demo.
# Builds bootd, creates the private lab network (10.77.0.0/24 in a network
# namespace), starts the appliance (bootd + dnsd + lbd in one process) with examples/lab/site.yaml, network-boots a QEMU
# VM from it (SeaBIOS + iPXE by default; --firmware ovmf-ipxe for UEFI), then
# prints bootd's URLs and what the machine fetched, with times. Cleans up on exit.
# bootd serves DHCP itself; dnsmasq only sends IPv6 router advertisements
# (iPXE otherwise waits ~16 s for one).
# --via-api: the controller API's loop instead: bootd with host.api and the
# local provider; a node created with curl; bootd starts the QEMU VM itself;
# `bootd nodes wait` until Ready; the guest's Ignition checked; the node
# deleted (tests/controller/local-e2e.sh --no-kill).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tests/lib/harness.sh
. tests/lib/harness.sh
[[ $(id -u) -eq 0 ]] || { echo "demo.sh: run as root (network namespaces, taps)" >&2; exit 2; }
FIRMWARE=seabios-ipxe NODE=bootstrap VIA_API=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --firmware) FIRMWARE=$2; shift 2 ;;
    --node) NODE=$2; shift 2 ;;
    --via-api) VIA_API=1; shift ;;
    *) echo "usage: demo.sh [--firmware seabios-ipxe|ovmf-ipxe] [--node NAME] [--via-api]" >&2; exit 2 ;;
  esac
done
bash tests/lab/deps.sh
cargo build --release -p appliance
bash tests/lab/guest.sh target/lab-images
# follow LOG PID START PATTERN: the lines of LOG (bootd's) that match the ERE
# PATTERN as the run goes (until PID ends), without their timestamp and
# target, with the seconds since START; other lines given as they are when
# they match KEEP (an ERE; default none).
follow() {
  local log=$1 pid=$2 start=$3 pattern=$4 keep=${5:-}
  tail -n +1 -s 0.2 --pid="$pid" -F "$log" 2>/dev/null | while IFS= read -r line; do
    if [[ -n $keep && $line =~ $keep ]]; then
      echo "$line"
    elif [[ $line =~ $pattern ]]; then
      printf '%7.1fs  %s\n' "$(since "$start")" "$(sed -E 's/^[0-9T:.-]+Z +[A-Z]+ +[a-z_:]+: //' <<<"$line")"
    fi
  done
}
if [[ $VIA_API == 1 ]]; then
  harness_init demo --work "$REPO/target/lab-runs/demo-api"
  echo "demo: API -> machine -> network boot -> Ignition -> Ready, with the local provider ($FIRMWARE); logs in $WORK"
  status=0
  spawn --append --log /dev/stdout bash tests/controller/local-e2e.sh --bootd target/release/bootd --firmware "$FIRMWARE" \
    --workdir "$WORK" --no-kill
  E2E=$SPAWNED
  start=$(now)
  # bootd's view as it goes: API calls, the VM, DHCP, scripts, files, Ignition, Ready.
  ( wait_for 10 test -f "$WORK/bootd-1.log" || true
    follow "$WORK/bootd-1.log" "$E2E" "$start" \
      'API request.*(POST|DELETE)|node created|local VM|machine recorded|DHCP.*kind=|script served|file served|Ignition served|node Ready|node removed'
  ) &
  TP=$!
  wait "$E2E" || status=$?
  sleep 0.5
  kill "$TP" 2>/dev/null || true
  exit $status
fi
line=$(grep -E "name: ${NODE}[, ]" examples/lab/site.yaml) || { echo "demo.sh: no node $NODE in the lab site" >&2; exit 2; }
MAC=$(grep -oE '([0-9a-f]{2}:){5}[0-9a-f]{2}' <<<"$line" | head -1)
IP=$(grep -oE 'ip: 10\.77\.0\.[0-9]+' <<<"$line" | cut -d' ' -f2)
rm -rf target/lab-runs/demo
harness_init demo --work "$REPO/target/lab-runs/demo"
echo "demo: booting $NODE ($MAC, $IP) with $FIRMWARE; logs in $WORK"
status=0
# The all-in-one binary serves (bootd + dnsd + lbd from the one site), as in
# the container; bootd's own binary renders what the checks compare against.
spawn --log "$WORK.out" env SERVER_BIN=target/release/appliance bash tests/lab/netboot.sh --bootd target/release/bootd \
  --site examples/lab/site.yaml --node "$NODE" --mac "$MAC" --ip "$IP" --firmware "$FIRMWARE" --workdir "$WORK" --no-dhcp
NB=$SPAWNED
# Follow bootd's log as the machine boots and print each phase with the time
# since bootd started (and bootd's own explanation lines as they are).
follow "$WORK/bootd.log" "$NB" "$(now)" \
  'DHCP.*kind=|script served|file served|Ignition served|refused|GRUB config|explanation' '^(bootd:|  )' &
TP=$!
wait "$NB" || status=$?
sleep 0.5
wait "$TP" 2>/dev/null || true
echo
grep -E '^(PASS|FAIL)|marker' "$WORK.out" || cat "$WORK.out"
exit $status
