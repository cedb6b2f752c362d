#!/usr/bin/env bash
# The README's "run the appliance" command: the lab demo.
# Builds bootd, creates the private lab network (10.77.0.0/24 in a network
# namespace), starts bootd with examples/lab/site.yaml, network-boots a QEMU
# VM from it (SeaBIOS + iPXE by default; --firmware ovmf-ipxe for UEFI), then
# prints bootd's URLs and what the machine fetched, with times. Cleans up on exit.
# bootd serves DHCP itself; dnsmasq only sends IPv6 router advertisements
# (iPXE otherwise waits ~16 s for one).
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ $(id -u) -eq 0 ]] || { echo "demo.sh: run as root (network namespaces, taps)" >&2; exit 2; }
FIRMWARE=seabios-ipxe NODE=bootstrap
while [[ $# -gt 0 ]]; do
  case $1 in
    --firmware) FIRMWARE=$2; shift 2 ;;
    --node) NODE=$2; shift 2 ;;
    *) echo "usage: demo.sh [--firmware seabios-ipxe|ovmf-ipxe] [--node NAME]" >&2; exit 2 ;;
  esac
done
bash tests/lab/deps.sh
cargo build --release -p bootd
bash tests/lab/guest.sh target/lab-images
line=$(grep -E "name: $NODE[, ]" examples/lab/site.yaml) || { echo "demo.sh: no node $NODE in the lab site" >&2; exit 2; }
MAC=$(grep -oE '([0-9a-f]{2}:){5}[0-9a-f]{2}' <<<"$line" | head -1)
IP=$(grep -oE 'ip: 10\.77\.0\.[0-9]+' <<<"$line" | cut -d' ' -f2)
WORK=target/lab-runs/demo
rm -rf "$WORK"
echo "demo: booting $NODE ($MAC, $IP) with $FIRMWARE; logs in $WORK"
status=0
bash tests/lab/netboot.sh --bootd target/release/bootd --site examples/lab/site.yaml \
  --node "$NODE" --mac "$MAC" --ip "$IP" --firmware "$FIRMWARE" --workdir "$WORK" --no-dhcp || status=$?
echo
echo "== bootd (as it started)"
grep -E '^(bootd:|  )' "$WORK/bootd.log" || true
echo
echo "== what the machine fetched (bootd's log)"
grep -E 'listening|served|refused|explanation|DHCP' "$WORK/bootd.log" | sed -E 's/^([0-9T:.-]+)Z/\1/' || true
exit $status
