#!/usr/bin/env bash
# One end-to-end network boot of a QEMU guest against bootd, inside a private
# network namespace (10.77.0.0/24 on bridge br0; nothing leaves the namespace).
#
# Usage: tests/lab/netboot.sh --bootd BOOTD --site SITE_YAML --node NAME --mac MAC --ip IP
#          [--firmware seabios-ipxe|ovmf-ipxe] [--timeout SECS] [--workdir DIR]
#          [--nic virtio-net-pci|e1000] [--images DIR] [--no-dhcp] [--no-ra] [--pcap]
#
# Flow: netns + br0 + tap -> stand-in DHCP (dnsmasq) -> `BOOTD --site SITE
# --state-dir WORKDIR/state` -> wait for /healthz -> QEMU netboot (firmware's
# iPXE -> DHCP -> http://10.77.0.1:8080/boot.ipxe -> kernel + initramfs) -> the
# guest (tests/lab/guest.sh) fetches ignition.config.url and prints
# "LAB-IGNITION sha256=..." on ttyS0 -> compare with
# `BOOTD render ignition NAME --site SITE --state-dir WORKDIR/state`.
# Prints "PASS netboot <firmware> <node> <secs>s" (exit 0) or
# "FAIL netboot <firmware> <node> <reason>" plus logs (exit 1); usage errors exit 2.
# BOOTD may be tests/lab/fake-bootd (a stand-in with the same CLI).
#
#   --nic         QEMU NIC model (default virtio-net-pci; its option ROM is iPXE)
#   --images DIR  guest images dir for guest.sh (default REPO/target/lab-images,
#                 which is what examples/lab/site.yaml's images.root points at)
#   --no-dhcp     do not run the stand-in DHCP (for when bootd serves DHCP itself);
#                 dnsmasq still sends IPv6 RAs unless --no-ra
#   --no-ra       no IPv6 router advertisements (iPXE then waits ~16 s for one)
#   --pcap        tcpdump br0 into WORKDIR/lab.pcap
# shellcheck disable=SC2054  # commas inside QEMU/dnsmasq arguments are intended
set -euo pipefail

HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

BOOTD="" SITE="" NODE="" MAC="" IP=""
FIRMWARE=seabios-ipxe TIMEOUT=180 WORKDIR="" IMAGES=$REPO/target/lab-images
NIC=virtio-net-pci DHCP=1 RA=1 PCAP=0
usage() { sed -n '5,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
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
    --images) IMAGES=$2; shift 2 ;;
    --nic) NIC=$2; shift 2 ;;
    --no-dhcp) DHCP=0; shift ;;
    --no-ra) RA=0; shift ;;
    --pcap) PCAP=1; shift ;;
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
case $NIC in virtio-net-pci|e1000) ;; *) echo "netboot.sh: bad --nic $NIC" >&2; exit 2 ;; esac
[[ $TIMEOUT =~ ^[0-9]+$ ]] || { echo "netboot.sh: bad --timeout $TIMEOUT" >&2; exit 2; }
[[ $MAC =~ ^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$ ]] || { echo "netboot.sh: bad --mac $MAC" >&2; exit 2; }
[[ $IP =~ ^10\.77\.0\.[0-9]+$ ]] || { echo "netboot.sh: --ip must be in 10.77.0.0/24" >&2; exit 2; }

# Lab addressing, fixed by the lab site (host.http.url = http://10.77.0.1:8080).
HOST_IP=10.77.0.1
HOST_IP6=fd77::1          # only so dnsmasq can send router advertisements
HTTP_BASE=http://$HOST_IP:8080
NS=labnet-$$
WORKDIR=${WORKDIR:-$REPO/target/lab-runs/$NODE-$FIRMWARE-$$}
mkdir -p "$WORKDIR"
WORKDIR=$(readlink -f "$WORKDIR")
rm -rf "$WORKDIR"/{serial.log,bootd.log,dnsmasq.log,qemu.log,firmware-debug.log,lab.pcap,tcpdump.log} \
       "$WORKDIR"/{dnsmasq.leases,expected.ign,render.log,OVMF_VARS.fd,state}
mkdir -p "$WORKDIR/state"

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
log() { echo "netboot.sh: $*" >&2; }
# serial.log without CR, ANSI escapes and iPXE's backspace countdown
clean() { tr -d '\r' <"$1" | sed -e 's/\x1b\[[0-9;=?]*[a-zA-Z]//g' -e 's/\x1b[a-zA-Z]//g' -e 's/\x08 \x08//g' -e 's/\x08//g'; }

# --- cleanup: everything we start is recorded by PID and killed by PID ----------
PIDS=()
cleanup() {
  local rc=$? p alive
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for _ in $(seq 50); do           # up to 5 s for them to go, then SIGKILL
    alive=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [[ $alive == 0 ]] && break
    sleep 0.1
  done
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  # Safety net: anything still inside our own namespace was started by us.
  for p in $(ip netns pids "$NS" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
  ip netns del "$NS" 2>/dev/null || true
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "FAIL netboot $FIRMWARE $NODE interrupted"; exit 130' INT TERM HUP
trap 'exit 141' PIPE   # e.g. output piped into head: still run the cleanup
# an unexpected failing command still yields a FAIL line (then the cleanup)
trap 'echo "FAIL netboot $FIRMWARE $NODE script error at line $LINENO: $BASH_COMMAND"' ERR

fail() {
  echo "FAIL netboot $FIRMWARE $NODE $*"
  if [[ -f $WORKDIR/serial.log ]]; then
    echo "--- last 40 lines of $WORKDIR/serial.log"
    clean "$WORKDIR/serial.log" | tail -n 40
  fi
  echo "--- last 40 lines of $WORKDIR/bootd.log"
  tail -n 40 "$WORKDIR/bootd.log" 2>/dev/null || true
  if [[ $DHCP == 1 || $RA == 1 ]]; then
    echo "--- last 10 lines of $WORKDIR/dnsmasq.log"
    grep -v RTR-ADVERT "$WORKDIR/dnsmasq.log" 2>/dev/null | tail -n 10 || true
  fi
  exit 1
}

# Foreground helper only. Background jobs are started as `ip netns exec NS cmd &`
# directly: ip execs cmd, so $! is the server's own PID (a backgrounded shell
# function would give the PID of a subshell, and killing that leaks the server).
nsx() { ip netns exec "$NS" "$@"; }

# A run killed with SIGKILL leaves its namespace behind: remove empty
# labnet-<pid> namespaces whose script is gone (never touching processes).
for old in $(ip netns list 2>/dev/null | awk '$1 ~ /^labnet-[0-9]+$/ {print $1}'); do
  kill -0 "${old#labnet-}" 2>/dev/null && continue
  [[ -z $(ip netns pids "$old" 2>/dev/null) ]] && ip netns del "$old" 2>/dev/null && log "removed stale netns $old"
done

# --- guest images (cached; the lab site's images.root points at them) -----------
"$HERE/guest.sh" "$IMAGES" >&2 || fail "guest.sh failed"

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
  ip netns exec "$NS" tcpdump -i br0 -n -U -w "$WORKDIR/lab.pcap" >"$WORKDIR/tcpdump.log" 2>&1 &
  PIDS+=($!)
fi

# --- stand-in DHCP + IPv6 RA (dnsmasq; until bootd has its own DHCP server) ------
# Only the one static host gets an address. iPXE (option 175 present) gets the
# boot script URL; other clients (the guest's udhcpc) get just an address.
# 175.176=1 (one byte): iPXE skips its ProxyDHCP wait (~3 s).
# ra-only: RAs without M/O flags; iPXE otherwise waits ~16 s for IPv6
# autoconfiguration before it fetches anything (measured: 30 s vs 13 s boots).
DNSMASQ_ARGS=(
  --conf-file=/dev/null --keep-in-foreground --log-facility=- --log-dhcp
  --port=0 --interface=br0 --bind-interfaces --user=root --group=root
  --pid-file="$WORKDIR/dnsmasq.pid" --dhcp-leasefile="$WORKDIR/dnsmasq.leases"
)
if [[ $DHCP == 1 ]]; then
  DNSMASQ_ARGS+=(
    --dhcp-authoritative
    --dhcp-range="$HOST_IP,static,255.255.255.0,1h"
    --dhcp-host="$MAC,$IP"
    --dhcp-match=set:ipxe,175
    --dhcp-boot=tag:ipxe,"$HTTP_BASE/boot.ipxe"
    --dhcp-option=tag:ipxe,encap:175,176,1b
  )
fi
if [[ $RA == 1 ]]; then
  DNSMASQ_ARGS+=(--enable-ra --dhcp-range=::,constructor:br0,ra-only,64,1h)
fi
DNSMASQ_PID=""
if [[ $DHCP == 1 || $RA == 1 ]]; then
  ip netns exec "$NS" dnsmasq "${DNSMASQ_ARGS[@]}" >"$WORKDIR/dnsmasq.log" 2>&1 &
  PIDS+=($!)
  DNSMASQ_PID=$!
fi

# --- bootd ------------------------------------------------------------------------
ip netns exec "$NS" "$BOOTD" --site "$SITE" --state-dir "$WORKDIR/state" >"$WORKDIR/bootd.log" 2>&1 &
PIDS+=($!)
BOOTD_PID=$!

ready=0
for _ in $(seq 150); do          # 30 s max
  kill -0 "$BOOTD_PID" 2>/dev/null || fail "bootd exited before /healthz answered"
  if [[ -n $DNSMASQ_PID ]] && ! kill -0 "$DNSMASQ_PID" 2>/dev/null; then
    fail "dnsmasq exited: $(tail -n 3 "$WORKDIR/dnsmasq.log" | tr '\n' ' ')"
  fi
  if nsx curl -fsS --max-time 1 "$HTTP_BASE/healthz" >/dev/null 2>&1; then ready=1; break; fi
  sleep 0.2
done
[[ $ready == 1 ]] || fail "bootd /healthz not ready within 30 s"
log "network + dnsmasq + bootd ready in $(elapsed "$T0")s (workdir $WORKDIR)"

# --- QEMU ----------------------------------------------------------------------------
# TCG only: /dev/kvm exists here but is not usable. -display none rather than
# -nographic: -nographic puts the monitor on stdio, and a backgrounded QEMU
# reading a tty is stopped by SIGTTIN in interactive shells.
# graphics=off: SeaBIOS then mirrors the text console (its own and iPXE's
# messages) to the serial port, so serial.log shows why iPXE failed. OVMF
# always mirrors its console to serial.
QEMU=(qemu-system-x86_64 -accel tcg -machine graphics=off -m 512 -smp 1
  -display none -monitor none -no-reboot -boot order=n
  -serial "file:$WORKDIR/serial.log"
  -netdev tap,id=n0,ifname=tap0,script=no,downscript=no
  -device "$NIC,netdev=n0,mac=$MAC"
  # firmware debug port (SeaBIOS writes its log here; Debian's OVMF stays quiet)
  -chardev "file,id=fwdbg,path=$WORKDIR/firmware-debug.log"
  -device isa-debugcon,iobase=0x402,chardev=fwdbg)
if [[ $FIRMWARE == ovmf-ipxe ]]; then
  # OVMF from the ovmf package; the NIC's default option ROM (efi-virtio.rom
  # from ipxe-qemu) carries iPXE's EFI driver, so UEFI network boot is iPXE.
  cp /usr/share/OVMF/OVMF_VARS_4M.fd "$WORKDIR/OVMF_VARS.fd"
  QEMU+=(-drive if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd
    -drive "if=pflash,format=raw,unit=1,file=$WORKDIR/OVMF_VARS.fd")
fi
: >"$WORKDIR/serial.log"
T_QEMU=$(now)
ip netns exec "$NS" "${QEMU[@]}" </dev/null >"$WORKDIR/qemu.log" 2>&1 &
PIDS+=($!)
QEMU_PID=$!

# iPXE's last error line, e.g. "Could not boot image: No such file ... (http://ipxe.org/2d0c613b)"
ipxe_error() {
  clean "$WORKDIR/serial.log" | grep -E '\(http://ipxe\.org/[0-9a-f]+\)|bootd: [^ ]+: could not load' \
    | grep -v 'RXE' | tail -n 1 || true
}
marker() { grep -a -m1 -E '^LAB-IGNITION(-FAILED)? ' "$WORKDIR/serial.log" 2>/dev/null | tr -d '\r' || true; }

line=""
deadline=$(( $(date +%s) + TIMEOUT ))
while (( $(date +%s) < deadline )); do
  line=$(marker)
  [[ -n $line ]] && break
  if ! kill -0 "$QEMU_PID" 2>/dev/null; then
    line=$(marker)                 # the marker may have landed just before poweroff
    [[ -n $line ]] && break
    fail "qemu exited without a LAB-IGNITION line: $(tail -n 3 "$WORKDIR/qemu.log" | tr '\n' ' ')"
  fi
  # Fail fast once iPXE has given up instead of waiting for the timeout.
  # SeaBIOS: iPXE prints "No more network devices", SeaBIOS "No bootable device".
  # OVMF: iPXE's boot option returns an error to the boot manager.
  # bootd's node script: "bootd: NODE: could not load ..." after its own retries.
  if grep -aqE 'No more network devices|No bootable device|BdsDxe: failed to load Boot[0-9A-F]+ "UEFI PXEv4|bootd: [^ ]+: could not load' \
      "$WORKDIR/serial.log"; then
    sleep 0.5
    fail "iPXE gave up after $(elapsed "$T_QEMU")s: $(ipxe_error)"
  fi
  sleep 0.2
done
BOOT_SECS=$(elapsed "$T_QEMU")
[[ -n $line ]] || fail "no LAB-IGNITION line within ${TIMEOUT}s (iPXE: $(ipxe_error))"
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
  fail "ignition mismatch: guest sha256=$got_sha bytes=$got_bytes url=$got_url;" \
       "expected (render ignition) sha256=$want_sha bytes=$want_bytes"
fi
echo "PASS netboot $FIRMWARE $NODE ${BOOT_SECS}s"
