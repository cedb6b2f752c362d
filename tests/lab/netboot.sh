#!/usr/bin/env bash
# One end-to-end network boot of a QEMU guest against bootd, inside a private
# network namespace (10.77.0.0/24 on bridge br0; nothing leaves the namespace).
#
# Usage:
#   tests/lab/netboot.sh --bootd BOOTD --site SITE_YAML --node NAME --mac MAC --ip IP
#       [--firmware seabios-ipxe|ovmf-ipxe] [--timeout SECS] [--workdir DIR]
#       [--no-ra] [--pcap]
#
# Flow: netns + br0 + tap -> stand-in DHCP (dnsmasq) -> `BOOTD --site SITE
# --state-dir WORKDIR/state` -> wait for /healthz -> QEMU netboot (firmware's
# iPXE -> DHCP -> http://10.77.0.1:8080/boot.ipxe -> kernel+initramfs) -> the
# guest (tests/lab/guest.sh) fetches ignition.config.url and prints
# "LAB-IGNITION sha256=..." on ttyS0 -> compare with
# `BOOTD render ignition NAME --site SITE --state-dir WORKDIR/state`.
# Prints "PASS netboot <firmware> <node> <secs>s" (exit 0) or "FAIL ..." (exit 1).
# BOOTD may be tests/lab/fake-bootd (a stand-in with the same CLI).
set -euo pipefail

HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

BOOTD="" SITE="" NODE="" MAC="" IP=""
FIRMWARE=seabios-ipxe TIMEOUT=180 WORKDIR="" RA=1 PCAP=0
usage() { sed -n '4,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --bootd) BOOTD=$2; shift 2 ;;
    --site) SITE=$2; shift 2 ;;
    --node) NODE=$2; shift 2 ;;
    --mac) MAC=$2; shift 2 ;;
    --ip) IP=$2; shift 2 ;;
    --firmware) FIRMWARE=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --workdir) WORKDIR=$2; shift 2 ;;
    --no-ra) RA=0; shift ;;        # measure iPXE's IPv6 wait without RAs
    --pcap) PCAP=1; shift ;;       # tcpdump br0 into WORKDIR/lab.pcap
    -h|--help) usage ;;
    *) echo "netboot.sh: unknown argument $1" >&2; usage ;;
  esac
done
[[ -n $BOOTD && -n $SITE && -n $NODE && -n $MAC && -n $IP ]] || usage
[[ $(id -u) -eq 0 ]] || { echo "netboot.sh: must run as root (netns, tap)" >&2; exit 2; }
BOOTD=$(readlink -f "$BOOTD"); SITE=$(readlink -f "$SITE")
[[ -x $BOOTD ]] || { echo "netboot.sh: bootd not executable: $BOOTD" >&2; exit 2; }
[[ -f $SITE ]] || { echo "netboot.sh: no site file: $SITE" >&2; exit 2; }
case $FIRMWARE in seabios-ipxe|ovmf-ipxe) ;; *) echo "netboot.sh: bad --firmware $FIRMWARE" >&2; exit 2 ;; esac
[[ $TIMEOUT =~ ^[0-9]+$ ]] || { echo "netboot.sh: bad --timeout" >&2; exit 2; }

# Lab addressing: fixed by the lab site (host.http.url = http://10.77.0.1:8080).
HOST_IP=10.77.0.1
HOST_IP6=fd77::1          # only so dnsmasq can send router advertisements
HTTP_BASE=http://$HOST_IP:8080
NS=labnet-$$
WORKDIR=${WORKDIR:-$REPO/target/lab-runs/$NODE-$FIRMWARE-$$}
mkdir -p "$WORKDIR"
WORKDIR=$(readlink -f "$WORKDIR")
rm -f "$WORKDIR"/{serial.log,bootd.log,dnsmasq.log,qemu.log,firmware-debug.log,lab.pcap,dnsmasq.leases}
mkdir -p "$WORKDIR/state"

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
log() { echo "netboot.sh: $*" >&2; }

# --- cleanup: everything we start is recorded by PID and killed by PID ----------
PIDS=()
cleanup() {
  local rc=$? p i
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  # bounded wait (5 s) for them to go, then SIGKILL the stragglers
  for i in $(seq 50); do
    local alive=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [[ $alive == 0 ]] && break
    sleep 0.1
  done
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  ip netns del "$NS" 2>/dev/null || true
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# "ip netns exec" execs the command, so $! is the server's own PID.
nsx() { ip netns exec "$NS" "$@"; }

# --- guest images (cached; the lab site points images.root at them) -------------
"$HERE/guest.sh" >&2

# --- network --------------------------------------------------------------------
T0=$(now)
ip netns add "$NS"
nsx ip link set lo up
nsx ip link add br0 type bridge forward_delay 0 stp_state 0
nsx ip addr add "$HOST_IP/24" dev br0
nsx ip -6 addr add "$HOST_IP6/64" dev br0 nodad
nsx ip tuntap add dev tap0 mode tap
nsx ip link set tap0 master br0
nsx ip link set tap0 up
nsx ip link set br0 up

if [[ $PCAP == 1 ]]; then
  nsx tcpdump -i br0 -n -U -w "$WORKDIR/lab.pcap" >"$WORKDIR/tcpdump.log" 2>&1 &
  PIDS+=($!)
fi

# --- stand-in DHCP (until bootd has its own DHCP server) -------------------------
# Only the one static host gets an address. iPXE (option 175 present) gets the
# boot script URL; other clients (the guest's udhcpc) just get an address.
# 175.176=1 tells iPXE not to wait for ProxyDHCP offers (saves ~3 s).
# ra-only: RAs with no M/O flags end iPXE's IPv6 autoconfiguration wait (~16 s).
DNSMASQ_ARGS=(
  --conf-file=/dev/null --keep-in-foreground --log-facility=- --log-dhcp
  --port=0 --interface=br0 --bind-interfaces --user=root --group=root
  --pid-file="$WORKDIR/dnsmasq.pid" --dhcp-leasefile="$WORKDIR/dnsmasq.leases"
  --dhcp-authoritative
  --dhcp-range="$HOST_IP,static,255.255.255.0,1h"
  --dhcp-host="$MAC,$IP"
  --dhcp-match=set:ipxe,175
  --dhcp-boot=tag:ipxe,"$HTTP_BASE/boot.ipxe"
  --dhcp-option=tag:ipxe,encap:175,176,1b
)
if [[ $RA == 1 ]]; then
  DNSMASQ_ARGS+=(--enable-ra --dhcp-range=::,constructor:br0,ra-only,64,1h --ra-param=br0,high,10)
fi
nsx dnsmasq "${DNSMASQ_ARGS[@]}" >"$WORKDIR/dnsmasq.log" 2>&1 &
PIDS+=($!)
DNSMASQ_PID=$!

# --- bootd ------------------------------------------------------------------------
nsx "$BOOTD" --site "$SITE" --state-dir "$WORKDIR/state" >"$WORKDIR/bootd.log" 2>&1 &
PIDS+=($!)
BOOTD_PID=$!

fail() {
  local reason=$*
  echo "FAIL netboot $FIRMWARE $NODE $reason"
  echo "--- last 40 lines of $WORKDIR/serial.log"
  tail -n 40 "$WORKDIR/serial.log" 2>/dev/null || true
  echo "--- last 40 lines of $WORKDIR/bootd.log"
  tail -n 40 "$WORKDIR/bootd.log" 2>/dev/null || true
  echo "--- last 20 lines of $WORKDIR/dnsmasq.log"
  tail -n 20 "$WORKDIR/dnsmasq.log" 2>/dev/null || true
  exit 1
}

ready=0
for _ in $(seq 150); do          # 30 s max
  kill -0 "$BOOTD_PID" 2>/dev/null || fail "bootd exited before /healthz answered"
  kill -0 "$DNSMASQ_PID" 2>/dev/null || fail "dnsmasq exited (see dnsmasq.log)"
  if nsx curl -fsS --max-time 1 "$HTTP_BASE/healthz" >/dev/null 2>&1; then ready=1; break; fi
  sleep 0.2
done
[[ $ready == 1 ]] || fail "bootd /healthz not ready within 30 s"
log "network + dnsmasq + bootd ready in $(elapsed "$T0")s (workdir $WORKDIR)"

# --- QEMU ----------------------------------------------------------------------------
# TCG only: /dev/kvm exists here but is not usable. -display none instead of
# -nographic: with -nographic QEMU puts the monitor on stdio, and a backgrounded
# QEMU reading a tty gets SIGTTIN (stops) in interactive shells.
QEMU=(qemu-system-x86_64 -accel tcg -m 512 -smp 1
  -display none -monitor none -no-reboot -boot n
  -serial "file:$WORKDIR/serial.log"
  -netdev tap,id=n0,ifname=tap0,script=no,downscript=no
  -device "virtio-net-pci,netdev=n0,mac=$MAC"
  # firmware debug port (SeaBIOS/OVMF write their log here)
  -chardev "file,id=fwdbg,path=$WORKDIR/firmware-debug.log"
  -device isa-debugcon,iobase=0x402,chardev=fwdbg)
if [[ $FIRMWARE == ovmf-ipxe ]]; then
  # OVMF from the ovmf package; the NIC's default ROM (efi-virtio.rom from
  # ipxe-qemu) carries iPXE's EFI driver, so UEFI boots via iPXE.
  cp /usr/share/OVMF/OVMF_VARS_4M.fd "$WORKDIR/OVMF_VARS.fd"
  QEMU+=(-drive if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd
    -drive "if=pflash,format=raw,unit=1,file=$WORKDIR/OVMF_VARS.fd")
fi
: >"$WORKDIR/serial.log"
T_QEMU=$(now)
nsx "${QEMU[@]}" </dev/null >"$WORKDIR/qemu.log" 2>&1 &
PIDS+=($!)
QEMU_PID=$!

line=""
deadline=$(( $(date +%s) + TIMEOUT ))
while (( $(date +%s) < deadline )); do
  line=$(grep -a -m1 -E '^LAB-IGNITION(-FAILED)? ' "$WORKDIR/serial.log" 2>/dev/null | tr -d '\r' || true)
  [[ -n $line ]] && break
  if ! kill -0 "$QEMU_PID" 2>/dev/null; then
    # one last look: the marker may have landed just before poweroff
    line=$(grep -a -m1 -E '^LAB-IGNITION(-FAILED)? ' "$WORKDIR/serial.log" 2>/dev/null | tr -d '\r' || true)
    [[ -n $line ]] && break
    fail "qemu exited without a LAB-IGNITION line ($(tail -n 3 "$WORKDIR/qemu.log" | tr '\n' ' '))"
  fi
  sleep 0.2
done
BOOT_SECS=$(elapsed "$T_QEMU")
[[ -n $line ]] || fail "no LAB-IGNITION line within ${TIMEOUT}s"
log "marker after ${BOOT_SECS}s: $line"

# The guest powers itself off; give it a moment, then the trap kills QEMU anyway.
for _ in $(seq 50); do kill -0 "$QEMU_PID" 2>/dev/null || break; sleep 0.1; done

[[ $line == LAB-IGNITION-FAILED* ]] && fail "guest: ${line#LAB-IGNITION-FAILED }"

got_sha=$(sed -n 's/.* sha256=\([0-9a-f]*\).*/\1/p' <<<"$line")
got_bytes=$(sed -n 's/.* bytes=\([0-9]*\).*/\1/p' <<<"$line")
got_url=$(sed -n 's/.* url=\(.*\)$/\1/p' <<<"$line")

# Expected bytes straight from bootd's renderer (run on the host, same state dir).
if ! "$BOOTD" render ignition "$NODE" --site "$SITE" --state-dir "$WORKDIR/state" \
    >"$WORKDIR/expected.ign" 2>"$WORKDIR/render.log"; then
  fail "bootd render ignition $NODE failed: $(tail -n 5 "$WORKDIR/render.log" | tr '\n' ' ')"
fi
want_sha=$(sha256sum "$WORKDIR/expected.ign" | cut -d' ' -f1)
want_bytes=$(stat -c %s "$WORKDIR/expected.ign")
if [[ $got_sha != "$want_sha" ]]; then
  fail "ignition mismatch: guest sha256=$got_sha bytes=$got_bytes url=$got_url; expected sha256=$want_sha bytes=$want_bytes"
fi
echo "PASS netboot $FIRMWARE $NODE ${BOOT_SECS}s"
