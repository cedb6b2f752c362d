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
  --node "$NODE" --mac "$MAC" --ip "$IP" --firmware "$FIRMWARE" --workdir "$WORK" --no-dhcp >"$WORK.out" 2>&1 &
NB=$!
# Follow bootd's log as the machine boots and print each phase with the time
# since bootd started.
start=$(date +%s.%N)
phases() {
  tail -n +1 -s 0.2 --pid="$NB" -F "$WORK/bootd.log" 2>/dev/null | while IFS= read -r line; do
    case $line in
      bootd:*|"  "*) echo "$line" ;;
      *DHCP*kind=*|*"script served"*|*"file served"*|*"Ignition served"*|*refused*|*"GRUB config"*|*explanation*)
        msg=$(sed -E 's/^[0-9T:.-]+Z +[A-Z]+ +[a-z_:]+: //' <<<"$line")
        printf '%7.1fs  %s\n' "$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" "$msg" ;;
    esac
  done
}
mkdir -p "$WORK"
phases &
TP=$!
wait $NB || status=$?
sleep 0.5
wait $TP 2>/dev/null || true
echo
grep -E '^(PASS|FAIL)|marker' "$WORK.out" || cat "$WORK.out"
exit $status
