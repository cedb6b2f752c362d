#!/usr/bin/env bash
# One end-to-end network boot of a QEMU guest against bootd, inside a private
# network namespace (10.77.0.0/24 on bridge br0; nothing leaves the namespace).
#
# Usage: tests/lab/netboot.sh --bootd BOOTD --site SITE_YAML --node NAME --mac MAC --ip IP
#          [--firmware seabios-ipxe|ovmf-ipxe|ovmf-pxe|slof-grub] [--timeout SECS]
#          [--workdir DIR] [--nic virtio-net-pci|e1000|spapr-vlan] [--images DIR]
#          [--tftp-root DIR] [--no-dhcp] [--no-ra] [--pcap] [--check CMD]
#          [--https] [--ignition-client] [--ignition-spec VERSION] [--server-cmd CMD]
#
# Flow: netns + br0 + tap -> stand-in DHCP (dnsmasq) -> `BOOTD --site SITE
# --state-dir WORKDIR/state` -> wait for /healthz -> QEMU netboot (firmware's
# iPXE -> DHCP -> http://10.77.0.1:8080/boot.ipxe -> kernel + initramfs) -> the
# guest (tests/lab/guest.sh) fetches ignition.config.url and prints
# "LAB-IGNITION sha256=..." on ttyS0 -> compare with
# `BOOTD render ignition NAME --site SITE --state-dir WORKDIR/state`, then
# check bootd's timeline of the node (tests/lab/timeline-check.py: phases in
# order, durations within 50 ms of the wire-level time captured on br0).
# Prints "PASS netboot <firmware> <node> <secs>s" (exit 0) or
# "FAIL netboot <firmware> <node> <reason>" plus logs (exit 1); usage errors exit 2.
#
# Firmwares:
#   seabios-ipxe  SeaBIOS + the NIC's iPXE option ROM (ipxe-qemu), HTTP boot
#   ovmf-ipxe     OVMF + the NIC's iPXE EFI option ROM, HTTP boot
#   ovmf-pxe      OVMF with the NIC ROM off (romfile=): EDK2's own PXE -> DHCP ->
#                 ipxe.efi over TFTP -> iPXE -> DHCP again -> HTTP boot (as above)
#   slof-grub     qemu-system-ppc64 pseries + SLOF (ppc64le node, e.g. p9-0): DHCP ->
#                 core.elf (GRUB) over TFTP -> GRUB brings up the NIC and fetches
#                 grub.cfg-01-<mac> over TFTP. PASS = bootd logged "GRUB config
#                 served over TFTP node=NODE" and the console shows GRUB running it
#                 ("bootd: NODE: loading kernel"). The lab has no ppc64le kernel, so
#                 GRUB's `linux` failing after that is expected. If GRUB's own
#                 netboot script gives up at the grub> prompt, the console is driven
#                 over a FIFO (rmmod/insmod ofnet, net_bootp, normal).
#   ovmf-pxe and slof-grub run tests/lab/tftp-root.sh on --tftp-root first.
#
#   --nic         QEMU NIC model (default virtio-net-pci; its option ROM is iPXE;
#                 slof-grub: spapr-vlan, the only NIC Debian's GRUB 2.06 finds on SLOF)
#   --tftp-root DIR  bootd's TFTP root, as host.tftp.root in SITE says (default
#                 REPO/target/lab-tftp, the lab site's)
#   --images DIR  guest images dir for guest.sh (default REPO/target/lab-images,
#                 which is what examples/lab/site.yaml's images.root points at)
#   --no-dhcp     do not run the stand-in DHCP (for when bootd serves DHCP itself);
#                 dnsmasq still sends IPv6 RAs unless --no-ra
#   --no-ra       no IPv6 router advertisements (iPXE then waits ~16 s for one)
#   --pcap        tcpdump br0 into WORKDIR/lab.pcap
#   --check CMD   after the boot passed and while bootd still serves: run
#                 `bash -c CMD` inside the namespace with HTTP_BASE, NODE, MAC,
#                 WORKDIR set; its failure (output in WORKDIR/check.log) is a FAIL
#   --https       bootd runs with a copy of SITE (WORKDIR/site.yaml) whose
#                 ignition.overHttps is true: the kernel command line names the
#                 HTTP pointer config, whose merge source is HTTPS trusting the
#                 site CA. The guest's wget then fetches the pointer (a fresh token
#                 each time), so its bytes are not compared; the real client's are.
#   --ignition-client  require the real Ignition client's result: both stages
#                 passed and every file of the node's rendered config written with
#                 its bytes (tests/lab/ignition-check.py)
#   --ignition-spec V  bootd served the node's Ignition as spec V at least once
#                 (the real client's request; bootd logs the version it served)
#   --server-cmd CMD  the server is `bash -c CMD` (e.g. a container), started
#                 in the background outside the namespace with NS (the
#                 namespace's name), SITE and WORKDIR in its environment: it
#                 must serve inside /run/netns/$NS, log to stdout/stderr
#                 (bootd.log) and stop on SIGTERM (exec it: its PID is the one
#                 stopped). BOOTD still renders for the checks.
# shellcheck disable=SC2054  # commas inside QEMU/dnsmasq arguments are intended
set -euo pipefail

HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

BOOTD="" SITE="" NODE="" MAC="" IP=""
FIRMWARE=seabios-ipxe TIMEOUT=180 WORKDIR="" IMAGES=$REPO/target/lab-images
NIC="" DHCP=1 RA=1 PCAP=0 TFTP_ROOT=$REPO/target/lab-tftp CHECK=""
HTTPS=0 IGN_CLIENT=0 IGN_SPEC="" SERVER_CMD=""
usage() { sed -n '5,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
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
    --tftp-root) TFTP_ROOT=$2; shift 2 ;;
    --no-dhcp) DHCP=0; shift ;;
    --no-ra) RA=0; shift ;;
    --pcap) PCAP=1; shift ;;
    --check) CHECK=$2; shift 2 ;;
    --https) HTTPS=1; shift ;;
    --ignition-client) IGN_CLIENT=1; shift ;;
    --ignition-spec) IGN_SPEC=$2; IGN_CLIENT=1; shift 2 ;;
    --server-cmd) SERVER_CMD=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "netboot.sh: unknown argument $1" >&2; usage ;;
  esac
done
[[ -n $BOOTD && -n $SITE && -n $NODE && -n $MAC && -n $IP ]] || usage
[[ $(id -u) -eq 0 ]] || { echo "netboot.sh: must run as root (netns, tap)" >&2; exit 2; }
BOOTD=$(readlink -f "$BOOTD"); SITE=$(readlink -f "$SITE")
[[ -x $BOOTD ]] || { echo "netboot.sh: bootd not executable: $BOOTD" >&2; exit 2; }
[[ -f $SITE ]] || { echo "netboot.sh: no site file: $SITE" >&2; exit 2; }
case $FIRMWARE in seabios-ipxe|ovmf-ipxe|ovmf-pxe|slof-grub) ;; *) echo "netboot.sh: bad --firmware $FIRMWARE" >&2; exit 2 ;; esac
if [[ -z $NIC ]]; then
  if [[ $FIRMWARE == slof-grub ]]; then NIC=spapr-vlan; else NIC=virtio-net-pci; fi
fi
case $FIRMWARE:$NIC in
  seabios-ipxe:virtio-net-pci|seabios-ipxe:e1000|ovmf-ipxe:virtio-net-pci|ovmf-ipxe:e1000) ;;
  # OVMF has a virtio-net driver but none for e1000: without the NIC's ROM only virtio works
  ovmf-pxe:virtio-net-pci) ;;
  # Debian's GRUB 2.06 ofnet never registers SLOF's virtio-net-pci ("no network card found")
  slof-grub:spapr-vlan) ;;
  *) echo "netboot.sh: --nic $NIC does not work with --firmware $FIRMWARE" >&2; exit 2 ;;
esac
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
       "$WORKDIR"/{dnsmasq.leases,expected.ign,render.log,OVMF_VARS.fd,state,console.in,console.out,phases.log} \
       "$WORKDIR"/{timeline.pcap,tcpdump-timeline.log,timeline.json,timeline.txt}
mkdir -p "$WORKDIR/state"
if [[ $HTTPS == 1 ]]; then
  # The site with ignition.overHttps, its relative paths made absolute (they
  # are relative to the site file's directory).
  /usr/bin/python3 - "$SITE" "$WORKDIR/site.yaml" <<'PY' || { echo "netboot.sh: cannot write the --https site" >&2; exit 2; }
import os, sys, yaml
src, dst = sys.argv[1], sys.argv[2]
base = os.path.dirname(os.path.abspath(src))
s = yaml.safe_load(open(src))
absolute = lambda p: p if os.path.isabs(p) else os.path.normpath(os.path.join(base, p))
for sect, key in [("host", "stateDir"), ("images", "root"), ("ignition", "dir"), ("cluster", "installConfig")]:
    if isinstance(s.get(sect), dict) and s[sect].get(key):
        s[sect][key] = absolute(s[sect][key])
if s.get("host", {}).get("tftp", {}).get("root"):
    s["host"]["tftp"]["root"] = absolute(s["host"]["tftp"]["root"])
for role, p in (s.get("ignition", {}).get("roles") or {}).items():
    s["ignition"]["roles"][role] = absolute(p)
s.setdefault("ignition", {})["overHttps"] = True
yaml.safe_dump(s, open(dst, "w"), sort_keys=False)
PY
  SITE=$WORKDIR/site.yaml
fi

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
log() { echo "netboot.sh: $*" >&2; }
# serial.log without CR, ANSI escapes and iPXE's backspace countdown
clean() { tr -d '\r' <"$1" | sed -e 's/\x1b\[[0-9;=?]*[a-zA-Z]//g' -e 's/\x1b[a-zA-Z]//g' -e 's/\x08 \x08//g' -e 's/\x08//g'; }

# --- cleanup: everything we start is recorded by PID and killed by PID ----------
PIDS=()
. "$REPO/tests/lib.sh"
cleanup() {
  local rc=$?
  stop_started "$NS"
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
# --- TFTP root (ipxe.efi, core.elf; cached) for the firmwares that use TFTP ---------
if [[ $FIRMWARE == ovmf-pxe || $FIRMWARE == slof-grub ]]; then
  "$HERE/tftp-root.sh" "$TFTP_ROOT" >&2 || fail "tftp-root.sh failed"
fi

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

# Headers only (256 bytes) of DHCP and bootd's HTTP: the wire-level times the
# boot timeline is checked against (tests/lab/timeline-check.py).
TL_PCAP=""
if command -v tcpdump >/dev/null 2>&1; then
  # --immediate-mode: without it libpcap hands packets over in blocks (up to
  # a timeout), so the last ones (the Ignition GET) may not be in the file yet
  # when the check reads it.
  ip netns exec "$NS" tcpdump -i br0 -n -U --immediate-mode -s 256 -w "$WORKDIR/timeline.pcap" 'udp port 67 or tcp port 8080' \
    >"$WORKDIR/tcpdump-timeline.log" 2>&1 &
  PIDS+=($!)
  TL_PCAP=$WORKDIR/timeline.pcap
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
    # EDK2 PXE (client arch 7/9) gets iPXE over TFTP (served by bootd); SLOF,
    # which names no arch in its DISCOVER, gets GRUB (slof-grub runs only).
    --dhcp-match=set:efi64,option:client-arch,7
    --dhcp-match=set:efi64,option:client-arch,9
    --dhcp-boot=tag:!ipxe,tag:efi64,ipxe.efi,,"$HOST_IP"
  )
  if [[ $FIRMWARE == slof-grub ]]; then
    DNSMASQ_ARGS+=(--dhcp-boot=tag:!ipxe,tag:!efi64,core.elf,,"$HOST_IP")
  fi
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
# SERVER_BIN (e.g. target/release/appliance: bootd + dnsd + lbd in one
# process) serves instead of bootd; $BOOTD still renders for the checks.
if [[ -n $SERVER_CMD ]]; then
  NS=$NS SITE=$SITE WORKDIR=$WORKDIR bash -c "$SERVER_CMD" </dev/null >"$WORKDIR/bootd.log" 2>&1 &
else
  ip netns exec "$NS" "${SERVER_BIN:-$BOOTD}" --site "$SITE" --state-dir "$WORKDIR/state" >"$WORKDIR/bootd.log" 2>&1 &
fi
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

# --- phase timings ---------------------------------------------------------------------
# Seconds after QEMU's start: bootd.log lines carry their own UTC timestamps;
# console events are timed by the wait loop below when it first sees them
# (0.2 s resolution). Printed at the end (and on FAIL) and kept in phases.log.
declare -A SEEN=()
PHASES=()              # "LABEL|bootd-ERE[@N]" or "LABEL|@console-key"
seen() {               # seen KEY ERE: note when ERE first shows up on the console
  [[ -n ${SEEN[$1]:-} ]] && return 0
  grep -aqE "$2" "$WORKDIR/serial.log" 2>/dev/null || return 1
  SEEN[$1]=$(elapsed "$T_QEMU")
}
bootd_at() {           # bootd_at ERE [N]: time of the Nth bootd.log line matching ERE
  local ts
  ts=$(sed 's/\x1b\[[0-9;]*m//g' "$WORKDIR/bootd.log" 2>/dev/null | grep -aE "$1" | sed -n "${2:-1}p" \
       | grep -oE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z' || true)
  [[ -n $ts ]] || return 0
  awk -v a="$T_QEMU" -v b="$(date -d "$ts" +%s.%N)" 'BEGIN { printf "%.1f", b - a }'
}
print_phases() {
  local p label what t n
  [[ -n ${T_QEMU:-} ]] || return 0
  for p in "${PHASES[@]}"; do
    label=${p%%|*} what=${p#*|}
    if [[ $what == @* ]]; then
      t=${SEEN[${what#@}]:-}
    else
      n=1
      if [[ $what =~ @([0-9]+)$ ]]; then n=${BASH_REMATCH[1]}; what=${what%@*}; fi
      t=$(bootd_at "$what" "$n")
    fi
    [[ -n $t ]] && printf '%7ss  %s\n' "+$t" "$label"
  done | sort -s -t+ -k2 -g >"$WORKDIR/phases.log"
  [[ -s $WORKDIR/phases.log ]] || return 0
  log "phases (seconds after QEMU start; bootd.log timestamps and console):"
  sed 's/^/netboot.sh:   /' "$WORKDIR/phases.log" >&2
}
case $FIRMWARE in
  seabios-ipxe|ovmf-ipxe|ovmf-pxe)
    PHASES=(
      'EDK2 PXE starts (console)|@edk2-pxe'
      'DHCP: first offer (firmware)|kind="offer"'
      'ipxe.efi sent over TFTP|file="ipxe\.efi".*transfer complete'
      'iPXE starts (console)|@ipxe'
      'DHCP: ack to iPXE|kind="ack".*iPXE \(option 175'
      'iPXE node script served|iPXE script served'
      'kernel sent (HTTP)|file served path=[^ ]*kernel'
      'initramfs sent (HTTP)|file served path=[^ ]*initramfs'
      'guest kernel: udhcpc lease|kind="ack".*not a network-boot client'
      'Ignition served|Ignition (pointer config )?served'
      'LAB-IGNITION marker (console)|@marker'
    ) ;;
  slof-grub)
    PHASES=(
      'DHCP: offer to SLOF|kind="offer"'
      'core.elf sent over TFTP|file="core\.elf".*transfer complete'
      'GRUB starts (console)|@grub'
      'DHCP: ack to GRUB net_bootp|kind="ack"@2'
      'GRUB network up (console)|@grub-net'
      'GRUB config served over TFTP|GRUB config served over TFTP'
      'GRUB runs it: loading kernel (console)|@grub-kernel'
    ) ;;
esac

fail_phases() { print_phases 2>&1 || true; fail "$@"; }

# --- QEMU ----------------------------------------------------------------------------
# TCG only: /dev/kvm exists here but is not usable. -display none rather than
# -nographic: -nographic puts the monitor on stdio, and a backgrounded QEMU
# reading a tty is stopped by SIGTTIN in interactive shells.
if [[ $FIRMWARE == slof-grub ]]; then
  # pseries + SLOF (qemu-system-ppc), no default devices; the NIC is the first
  # (only) boot device. The cap-* settings only silence TCG warnings. The
  # console (spapr-vty) is a pair of FIFOs: console.out is copied into
  # serial.log, console.in is how the script types at GRUB's prompt.
  mkfifo "$WORKDIR/console.in" "$WORKDIR/console.out"
  QEMU=(qemu-system-ppc64 -accel tcg
    -machine pseries,cap-cfpc=broken,cap-sbbc=broken,cap-ibs=broken,cap-ccf-assist=off
    -nodefaults -m 1024 -smp 1 -display none -monitor none -no-reboot
    -chardev "pipe,id=con,path=$WORKDIR/console" -serial chardev:con
    -netdev tap,id=n0,ifname=tap0,script=no,downscript=no
    -device "$NIC,netdev=n0,mac=$MAC,bootindex=0")
else
  # graphics=off: SeaBIOS then mirrors the text console (its own and iPXE's
  # messages) to the serial port, so serial.log shows why iPXE failed. OVMF
  # always mirrors its console to serial.
  DEV="$NIC,netdev=n0,mac=$MAC"
  # ovmf-pxe: no option ROM on the NIC, so OVMF's own virtio-net driver and
  # EDK2's PXE do the first DHCP and fetch ipxe.efi over TFTP.
  [[ $FIRMWARE == ovmf-pxe ]] && DEV+=",romfile="
  QEMU=(qemu-system-x86_64 -accel tcg -machine graphics=off -m 512 -smp 1
    -display none -monitor none -no-reboot -boot order=n
    -serial "file:$WORKDIR/serial.log"
    -netdev tap,id=n0,ifname=tap0,script=no,downscript=no
    -device "$DEV"
    # firmware debug port (SeaBIOS writes its log here; Debian's OVMF stays quiet)
    -chardev "file,id=fwdbg,path=$WORKDIR/firmware-debug.log"
    -device isa-debugcon,iobase=0x402,chardev=fwdbg)
  if [[ $FIRMWARE == ovmf-* ]]; then
    # OVMF from the ovmf package. ovmf-ipxe: the NIC's default option ROM
    # (efi-virtio.rom from ipxe-qemu) carries iPXE's EFI driver, so UEFI
    # network boot is iPXE.
    cp /usr/share/OVMF/OVMF_VARS_4M.fd "$WORKDIR/OVMF_VARS.fd"
    QEMU+=(-drive if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd
      -drive "if=pflash,format=raw,unit=1,file=$WORKDIR/OVMF_VARS.fd")
  fi
fi
: >"$WORKDIR/serial.log"
if [[ $FIRMWARE == slof-grub ]]; then
  # cat blocks in open() until QEMU opens the FIFO, and ends at QEMU's exit.
  cat "$WORKDIR/console.out" >>"$WORKDIR/serial.log" 2>/dev/null &
  PIDS+=($!)
  # Our end of console.in, opened read-write so that neither open() nor a
  # write ever blocks, whether QEMU is there or not.
  exec 7<>"$WORKDIR/console.in"
fi
T_QEMU=$(now)
ip netns exec "$NS" "${QEMU[@]}" </dev/null >"$WORKDIR/qemu.log" 2>&1 &
PIDS+=($!)
QEMU_PID=$!

# --- slof-grub: wait for GRUB to load bootd's config ------------------------------------
if [[ $FIRMWARE == slof-grub ]]; then
  grub_prompts() { grep -ao 'grub> ' "$WORKDIR/serial.log" 2>/dev/null | wc -l; }
  # Type one line at GRUB's prompt; wait (30 s at most) for the next prompt.
  grub_type() {
    local n
    n=$(grub_prompts)
    log "typing at GRUB's prompt: $1"
    printf '%s\r' "$1" >&7
    for _ in $(seq 150); do
      (( $(grub_prompts) > n )) && return 0
      kill -0 "$QEMU_PID" 2>/dev/null || return 1
      sleep 0.2
    done
    return 1
  }
  # What TESTING.md found for Debian's GRUB 2.06 on SLOF: the NIC shows up only
  # after ofnet is unloaded and loaded again. core.elf (tftp-root.sh) already
  # does this itself; this is the fallback when its script gave up. ofnet.mod is
  # in core.elf's memdisk.
  grub_console_netboot() {
    local round out
    grub_type 'set prefix=(memdisk)' || return 1
    for round in 1 2 3 4; do
      grub_type 'rmmod ofnet' || return 1
      grub_type 'insmod ofnet' || return 1
      grub_type 'net_bootp' || return 1
      out=$(clean "$WORKDIR/serial.log" | awk '/grub> net_bootp/ { buf = "" } { buf = buf "\n" $0 } END { print buf }')
      if ! grep -q 'error:' <<<"$out"; then SEEN[grub-net]=$(elapsed "$T_QEMU"); break; fi
      (( round == 4 )) && return 1
    done
    grub_type "set prefix=(tftp,$HOST_IP)/grub" || return 1
    log "typing at GRUB's prompt: normal"
    printf 'normal\r' >&7
  }

  cfg_re="GRUB config served over TFTP node=$NODE( |$)"
  typed=0 ok=0
  deadline=$(( $(date +%s) + TIMEOUT ))
  while (( $(date +%s) < deadline )); do
    seen grub 'Welcome to GRUB' || true
    seen grub-net 'grub-netboot: network up' || true
    if seen grub-kernel "bootd: $NODE: loading kernel" && grep -aqE "$cfg_re" "$WORKDIR/bootd.log"; then
      ok=1; break
    fi
    kill -0 "$QEMU_PID" 2>/dev/null \
      || fail_phases "qemu exited before GRUB loaded its config: $(tail -n 3 "$WORKDIR/qemu.log" | tr '\n' ' ')"
    # Fail fast: SLOF's own errors (E3xxx: no DHCP answer, TFTP error, not
    # bootable), GRUB's rescue shell, bootd's selector not knowing the MAC.
    if grep -aqE 'E3[0-9]{3}[: ]|grub rescue>|bootd: no node in' "$WORKDIR/serial.log"; then
      sleep 0.5
      fail_phases "after $(elapsed "$T_QEMU")s: $(clean "$WORKDIR/serial.log" | grep -aE 'E3[0-9]{3}[: ]|grub rescue>|bootd: no node in' | head -n 2 | tr '\n' ' ')"
    fi
    # GRUB's own netboot script gave up (or an older core.elf stopped at its
    # prompt without fetching anything): drive the console, once.
    if [[ $typed == 0 ]] && ! grep -aqE "$cfg_re" "$WORKDIR/bootd.log" \
        && grep -aqE 'grub-netboot: (no network card|DHCP gave no server)|grub> ' "$WORKDIR/serial.log"; then
      typed=1
      sleep 1
      grub_console_netboot || fail_phases "typing at GRUB's prompt did not bring the network up"
    fi
    sleep 0.2
  done
  BOOT_SECS=$(elapsed "$T_QEMU")
  [[ $ok == 1 ]] || fail_phases "GRUB did not load bootd's config within ${TIMEOUT}s" \
    "(bootd served it: $(grep -acE "$cfg_re" "$WORKDIR/bootd.log") times)"
  print_phases
  log "GRUB loaded bootd's config for $NODE$([[ $typed == 1 ]] && echo ' (after typing at its prompt)');" \
      "its 'linux' then fails: the lab has no ppc64le kernel (expected)"
  echo "PASS netboot $FIRMWARE $NODE ${BOOT_SECS}s"
  exit 0
fi

# --- x86: wait for the guest's marker -----------------------------------------------------
# iPXE's last error line, e.g. "Could not boot image: No such file ... (http://ipxe.org/2d0c613b)"
ipxe_error() {
  clean "$WORKDIR/serial.log" | grep -E '\(http://ipxe\.org/[0-9a-f]+\)|bootd: [^ ]+: could not load' \
    | grep -v 'RXE' | tail -n 1 || true
}
marker() { grep -a -m1 -E '^LAB-IGNITION(-FAILED)? ' "$WORKDIR/serial.log" 2>/dev/null | tr -d '\r' || true; }

line=""
deadline=$(( $(date +%s) + TIMEOUT ))
while (( $(date +%s) < deadline )); do
  seen edk2-pxe 'Start PXE over IPv4' || true
  seen ipxe 'Open Source Network Boot Firmware' || true
  line=$(marker)
  [[ -n $line ]] && { seen marker '^LAB-IGNITION' || true; break; }
  if ! kill -0 "$QEMU_PID" 2>/dev/null; then
    line=$(marker)                 # the marker may have landed just before poweroff
    [[ -n $line ]] && break
    fail_phases "qemu exited without a LAB-IGNITION line: $(tail -n 3 "$WORKDIR/qemu.log" | tr '\n' ' ')"
  fi
  # Fail fast once iPXE has given up instead of waiting for the timeout.
  # SeaBIOS: iPXE prints "No more network devices", SeaBIOS "No bootable device".
  # OVMF: iPXE's boot option (or EDK2's PXE) returns an error to the boot manager.
  # bootd's node script: "bootd: NODE: could not load ..." after its own retries.
  if grep -aqE 'No more network devices|No bootable device|BdsDxe: failed to load Boot[0-9A-F]+ "UEFI PXEv4|bootd: [^ ]+: could not load' \
      "$WORKDIR/serial.log"; then
    sleep 0.5
    fail_phases "iPXE gave up after $(elapsed "$T_QEMU")s: $(ipxe_error)" \
      "$(clean "$WORKDIR/serial.log" | grep -aE 'PXE-E[0-9]+' | tail -n 1)"
  fi
  sleep 0.2
done
BOOT_SECS=$(elapsed "$T_QEMU")
[[ -n $line ]] || fail_phases "no LAB-IGNITION line within ${TIMEOUT}s (iPXE: $(ipxe_error))"
log "marker after ${BOOT_SECS}s: $line"
if [[ $IGN_CLIENT == 1 && $line != LAB-IGNITION-FAILED* ]]; then
  # The real client runs after the marker; the guest powers off once it has
  # printed every file it wrote.
  while (( $(date +%s) < deadline )) && kill -0 "$QEMU_PID" 2>/dev/null; do sleep 0.2; done
  kill -0 "$QEMU_PID" 2>/dev/null && fail_phases "the guest did not finish the real Ignition client within ${TIMEOUT}s"
  BOOT_SECS=$(elapsed "$T_QEMU")
  log "real Ignition client: $(grep -a -m1 '^LAB-IGNITION-CLIENT ' "$WORKDIR/serial.log" | tr -d '\r') (guest off after ${BOOT_SECS}s)"
fi

# The guest powers itself off; give it a moment, then the trap kills QEMU anyway.
for _ in $(seq 50); do kill -0 "$QEMU_PID" 2>/dev/null || break; sleep 0.1; done
print_phases

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
if [[ $HTTPS == 1 ]]; then
  [[ $got_url == */ignition/$NODE/pointer\?token=* ]] || fail "--https: the kernel command line names $got_url, not the pointer config"
elif [[ $got_sha != "$want_sha" ]]; then
  fail "ignition mismatch: guest sha256=$got_sha bytes=$got_bytes url=$got_url;" \
       "expected (render ignition) sha256=$want_sha bytes=$want_bytes"
fi
if [[ $IGN_CLIENT == 1 ]]; then
  python3 "$HERE/ignition-check.py" "$WORKDIR/serial.log" "$WORKDIR/expected.ign" >"$WORKDIR/ignition-check.txt" 2>&1 \
    || fail "real Ignition client: $(tail -n 1 "$WORKDIR/ignition-check.txt")"
  sed 's/^/netboot.sh:   /' "$WORKDIR/ignition-check.txt" >&2
  if [[ $HTTPS == 1 ]]; then
    grep -aqE "Ignition pointer config served.*node=$NODE|node=$NODE.*Ignition pointer config served" "$WORKDIR/bootd.log" \
      || fail "--https: bootd never served $NODE's pointer config"
  fi
  if [[ -n $IGN_SPEC ]]; then
    served=$(grep -aE "Ignition served" "$WORKDIR/bootd.log" | grep -a "node=$NODE" | grep -ao 'version=[0-9.]*' | sort -u | tr '\n' ' ')
    [[ " $served " == *" version=$IGN_SPEC "* ]] || fail "bootd served $NODE's Ignition as ${served:-nothing}, never as $IGN_SPEC"
    log "bootd served $NODE's Ignition as: $served(the real client's: $IGN_SPEC)"
  fi
fi

# --- the node's boot timeline, as bootd recorded it ------------------------------------
# Every phase in order, durations adding up, and (with the capture) within 50 ms
# of the wire-level time from the first DHCP packet to the last Ignition request.
case $FIRMWARE in
  ovmf-pxe) want_phases=dhcp,tftp,script,kernel,initramfs,ignition ;;
  *) want_phases=dhcp,script,kernel,initramfs,ignition ;;
esac
nsx curl -fsS --max-time 5 "$HTTP_BASE/status/node/$NODE/timeline.json" >"$WORKDIR/timeline.json" \
  || fail "bootd did not serve $NODE's timeline"
tl_args=(--phases "$want_phases")
sleep 0.5   # let tcpdump write the last packets it has seen
# Over HTTPS the last Ignition request is TLS: the capture shows no path to
# compare the timeline's end with, so only the order and the sums are checked.
[[ -n $TL_PCAP && $HTTPS == 0 ]] && tl_args+=(--pcap "$TL_PCAP" --mac "$MAC")
python3 "$HERE/timeline-check.py" "$WORKDIR/timeline.json" "${tl_args[@]}" >"$WORKDIR/timeline.txt" 2>&1 \
  || { sed 's/^/netboot.sh:   /' "$WORKDIR/timeline.txt" >&2; fail "boot timeline: $(grep 'check failed' "$WORKDIR/timeline.txt" | head -n 3 | tr '\n' ' ')"; }
log "boot timeline (bootd):"
sed 's/^/netboot.sh:   /' "$WORKDIR/timeline.txt" >&2
if [[ -n $CHECK ]]; then
  nsx env HTTP_BASE="$HTTP_BASE" NODE="$NODE" MAC="$MAC" WORKDIR="$WORKDIR" bash -c "$CHECK" >"$WORKDIR/check.log" 2>&1 \
    || fail "--check failed: $(tail -n 5 "$WORKDIR/check.log" | tr '\n' ' ')"
  sed 's/^/netboot.sh: check: /' "$WORKDIR/check.log" >&2
fi
echo "PASS netboot $FIRMWARE $NODE ${BOOT_SECS}s"
