#!/usr/bin/env bash
# One end-to-end network boot of a QEMU guest against bootd, inside a private
# network namespace (10.77.0.0/24 on bridge br0; nothing leaves the namespace).
#
# Usage: tests/lab/netboot.sh --bootd BOOTD --site SITE_YAML --node NAME --mac MAC --ip IP
#          [--firmware NAME (seabios-ipxe)] [--timeout SECS]
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
# Prints "PASS netboot <firmware> <node> <secs>s" (exit 0) or the logs' ends and
# "FAIL netboot <firmware> <node>: <reason>" (exit 1); usage errors exit 2. Progress
# goes to stderr as "netboot <firmware> <node>: ..." (--check's output as
# "netboot <firmware> <node>: check: ...").
#
# Firmwares (--firmware; the table is tests/lib/qemu.sh's qemu_firmware, every
# variant with FW_FAMILY=4; `netboot.sh --help` lists them):
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
#   Variants that boot over TFTP (ovmf-pxe, slof-grub) run tests/lab/tftp-root.sh
#   on --tftp-root first.
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
# shellcheck disable=SC2317  # the *_step functions are called through wait_for
set -euo pipefail

HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
# shellcheck source=tests/lib/harness.sh
. "$HERE/../lib/harness.sh"
# shellcheck source=tests/lib/qemu.sh
. "$HERE/../lib/qemu.sh"

BOOTD="" SITE="" NODE="" MAC="" IP=""
FIRMWARE=seabios-ipxe TIMEOUT=180 WORKDIR="" IMAGES=$REPO/target/lab-images
NIC="" DHCP=1 RA=1 PCAP=0 TFTP_ROOT=$REPO/target/lab-tftp CHECK=""
HTTPS=0 IGN_CLIENT=0 IGN_SPEC="" SERVER_CMD=""
usage() {
  { sed -n '5,9p' "$0" | sed 's/^# \{0,1\}//'; echo "firmwares:"; qemu_firmwares 4; } >&2
  exit 2
}
while [[ $# -gt 0 ]]; do
  if netboot_option "$@"; then shift 2; continue; fi
  case $1 in
    --ip) IP=$2; shift 2 ;;
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
# The variant's QEMU, NIC ROM and checks: tests/lib/qemu.sh (FW_*).
if ! qemu_firmware "$FIRMWARE" || [[ $FW_FAMILY != 4 ]]; then
  echo "netboot.sh: bad --firmware $FIRMWARE (netboot6.sh boots the IPv6 ones)" >&2; exit 2
fi
NIC=${NIC:-${FW_NICS%% *}}
qemu_nic_ok "$NIC" || { echo "netboot.sh: --nic $NIC does not work with --firmware $FIRMWARE (it takes: $FW_NICS)" >&2; exit 2; }
[[ $TIMEOUT =~ ^[0-9]+$ ]] || { echo "netboot.sh: bad --timeout $TIMEOUT" >&2; exit 2; }
[[ $MAC =~ ^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$ ]] || { echo "netboot.sh: bad --mac $MAC" >&2; exit 2; }
[[ $IP =~ ^10\.77\.0\.[0-9]+$ ]] || { echo "netboot.sh: --ip must be in 10.77.0.0/24" >&2; exit 2; }

# Lab addressing, fixed by the lab site (host.http.url = http://10.77.0.1:8080).
HOST_IP=10.77.0.1
HOST_IP6=fd77::1          # only so dnsmasq can send router advertisements
HTTP_BASE=http://$HOST_IP:8080
# $WORK is WORKDIR from here on (kept after the run).
netboot_workdir netboot serial.log bootd.log dnsmasq.log qemu.log firmware-debug.log lab.pcap tcpdump.log \
  dnsmasq.leases expected.ign render.log OVMF_VARS.fd state console.in console.out phases.log \
  timeline.pcap tcpdump-timeline.log timeline.json timeline.txt
if [[ $HTTPS == 1 ]]; then
  # The site with ignition.overHttps, its relative paths made absolute.
  lab_site "$WORK/site.yaml" --from "$SITE" ignition.overHttps=true \
    || { echo "netboot.sh: cannot write the --https site" >&2; exit 2; }
  SITE=$WORK/site.yaml
fi

# die REASON...: the ends of the logs, then the FAIL line (exit 1).
die() {
  qemu_fail_logs 40
  if [[ $DHCP == 1 || $RA == 1 ]]; then
    echo "--- last 10 lines of $WORK/dnsmasq.log"
    grep -v RTR-ADVERT "$WORK/dnsmasq.log" 2>/dev/null | tail -n 10 || true
  fi
  fail "$@"
}

# --- guest images (the lab site's images.root points at them) and, for the
# firmwares that use TFTP, its root (ipxe.efi, core.elf); both cached -------------
netboot_artifacts "$IMAGES" "$TFTP_ROOT"

# --- network --------------------------------------------------------------------
T0=$(now)
lab_netns "labnet-$$" "$HOST_IP/24" "$HOST_IP6/64"
lab_tap tap0

if [[ $PCAP == 1 ]]; then
  spawn --ns "$NS" --log "$WORK/tcpdump.log" tcpdump -i br0 -n -U -w "$WORK/lab.pcap"
fi

# Headers only (256 bytes) of DHCP and bootd's HTTP: the wire-level times the
# boot timeline is checked against (tests/lab/timeline-check.py).
TL_PCAP=""
if command -v tcpdump >/dev/null 2>&1; then
  # --immediate-mode: without it libpcap hands packets over in blocks (up to
  # a timeout), so the last ones (the Ignition GET) may not be in the file yet
  # when the check reads it.
  spawn --ns "$NS" --log "$WORK/tcpdump-timeline.log" \
    tcpdump -i br0 -n -U --immediate-mode -s 256 -w "$WORK/timeline.pcap" 'udp port 67 or tcp port 8080'
  TL_PCAP=$WORK/timeline.pcap
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
  --pid-file="$WORK/dnsmasq.pid" --dhcp-leasefile="$WORK/dnsmasq.leases"
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
  if [[ $FW_BIOS == slof ]]; then
    DNSMASQ_ARGS+=(--dhcp-boot=tag:!ipxe,tag:!efi64,core.elf,,"$HOST_IP")
  fi
fi
if [[ $RA == 1 ]]; then
  DNSMASQ_ARGS+=(--enable-ra --dhcp-range=::,constructor:br0,ra-only,64,1h)
fi
DNSMASQ_PID=""
if [[ $DHCP == 1 || $RA == 1 ]]; then
  spawn --ns "$NS" --log "$WORK/dnsmasq.log" dnsmasq "${DNSMASQ_ARGS[@]}"
  DNSMASQ_PID=$SPAWNED
fi

# --- bootd ------------------------------------------------------------------------
# SERVER_BIN (e.g. target/release/appliance: bootd + dnsd + lbd in one
# process) serves instead of bootd; $BOOTD still renders for the checks.
if [[ -n $SERVER_CMD ]]; then
  # Outside the namespace: the command joins it itself (and execs the server).
  spawn --log "$WORK/bootd.log" env NS="$NS" SITE="$SITE" WORKDIR="$WORK" bash -c "$SERVER_CMD"
  BOOTD_PID=$SPAWNED
  server_ready() { alive "$BOOTD_PID" && nsx curl -fsS --max-time 1 "$HTTP_BASE/healthz"; }
  wait_for 30 server_ready \
    || die "the server (--server-cmd) did not answer $HTTP_BASE/healthz within 30 s$(alive "$BOOTD_PID" || echo ': it exited')"
else
  start_bootd --bin "${SERVER_BIN:-$BOOTD}" --log "$WORK/bootd.log" --ready "$HTTP_BASE/healthz" --timeout 30 \
    -- --site "$SITE" --state-dir "$WORK/state" \
    || die "bootd /healthz not ready within 30 s$(alive "$BOOTD_PID" || echo ' (it exited)')"
fi
if [[ -n $DNSMASQ_PID ]] && ! alive "$DNSMASQ_PID"; then
  die "dnsmasq exited: $(tail -n 3 "$WORK/dnsmasq.log" | tr '\n' ' ')"
fi
log "network + dnsmasq + bootd ready in $(since "$T0")s (workdir $WORK)"

# --- phase timings ---------------------------------------------------------------------
# Seconds after QEMU's start: bootd.log lines carry their own UTC timestamps;
# console events are timed by the wait below when it first sees them
# (0.1 s resolution). Printed at the end (and on FAIL) and kept in phases.log.
declare -A SEEN=()
PHASES=()              # "LABEL|bootd-ERE[@N]" or "LABEL|@console-key"
seen() {               # seen KEY ERE: note when ERE first shows up on the console
  [[ -n ${SEEN[$1]:-} ]] && return 0
  grep -aqE "$2" "$WORK/serial.log" 2>/dev/null || return 1
  SEEN[$1]=$(since "$T_QEMU")
}
bootd_at() {           # bootd_at ERE [N]: time of the Nth bootd.log line matching ERE
  local ts
  ts=$(sed 's/\x1b\[[0-9;]*m//g' "$WORK/bootd.log" 2>/dev/null | grep -aE "$1" | sed -n "${2:-1}p" \
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
  done | sort -s -t+ -k2 -g >"$WORK/phases.log"
  [[ -s $WORK/phases.log ]] || return 0
  log "phases (seconds after QEMU start; bootd.log timestamps and console):"
  sed "s/^/$HARNESS_NAME:   /" "$WORK/phases.log" >&2
}
case $FW_WAIT in
  marker)
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
  grub)
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

fail_phases() { print_phases 2>&1 || true; die "$@"; }

# --- QEMU (tests/lib/qemu.sh: the variant's machine, firmware, NIC ROM) ---------------
qemu_start tap0 "$MAC" "$NIC"
deadline=$(( $(date +%s) + TIMEOUT ))

# --- GRUB (slof-grub): wait for it to load bootd's config ------------------------------
if [[ $FW_WAIT == grub ]]; then
  grub_prompts() { grep -ao 'grub> ' "$WORK/serial.log" 2>/dev/null | wc -l; }
  prompt_after() { (( $(grub_prompts) > $1 )) || ! alive "$QEMU_PID"; }
  # Type one line at GRUB's prompt; wait (30 s at most) for the next prompt.
  grub_type() {
    local n
    n=$(grub_prompts)
    log "typing at GRUB's prompt: $1"
    qemu_type "$1"
    wait_for 30 prompt_after "$n" && (( $(grub_prompts) > n ))
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
      out=$(clean "$WORK/serial.log" | awk '/grub> net_bootp/ { buf = "" } { buf = buf "\n" $0 } END { print buf }')
      if ! grep -q 'error:' <<<"$out"; then SEEN[grub-net]=$(since "$T_QEMU"); break; fi
      (( round == 4 )) && return 1
    done
    grub_type "set prefix=(tftp,$HOST_IP)/grub" || return 1
    log "typing at GRUB's prompt: normal"
    qemu_type normal
  }

  cfg_re="GRUB config served over TFTP node=$NODE( |$)"
  # SLOF's own errors (E3xxx: no DHCP answer, TFTP error, not bootable),
  # GRUB's rescue shell, bootd's selector not knowing the MAC.
  slof_errors='E3[0-9]{3}[: ]|grub rescue>|bootd: no node in'
  typed=0
  # One look at the console, for wait_for: 0 once there is something to do,
  # in GRUB_END: ok (GRUB ran bootd's config), exited, error (fail fast),
  # prompt (GRUB's own netboot script gave up, or an older core.elf stopped
  # at its prompt without fetching anything: drive the console, once).
  grub_step() {
    seen grub 'Welcome to GRUB' || true
    seen grub-net 'grub-netboot: network up' || true
    if seen grub-kernel "bootd: $NODE: loading kernel" && grep -aqE "$cfg_re" "$WORK/bootd.log"; then
      GRUB_END=ok; return 0
    fi
    if ! alive "$QEMU_PID"; then GRUB_END=exited; return 0; fi
    if grep -aqE "$slof_errors" "$WORK/serial.log"; then GRUB_END=error; return 0; fi
    if [[ $typed == 0 ]] && ! grep -aqE "$cfg_re" "$WORK/bootd.log" \
        && grep -aqE 'grub-netboot: (no network card|DHCP gave no server)|grub> ' "$WORK/serial.log"; then
      GRUB_END=prompt; return 0
    fi
    return 1
  }
  while :; do
    GRUB_END=timeout
    wait_for $(( deadline - $(date +%s) )) grub_step || break
    case $GRUB_END in
      ok) break ;;
      exited) fail_phases "qemu exited before GRUB loaded its config: $(tail -n 3 "$WORK/qemu.log" | tr '\n' ' ')" ;;
      error)
        sleep 0.5
        fail_phases "after $(since "$T_QEMU")s: $(clean "$WORK/serial.log" | grep -aE "$slof_errors" | head -n 2 | tr '\n' ' ')" ;;
      prompt)
        typed=1
        sleep 1
        grub_console_netboot || fail_phases "typing at GRUB's prompt did not bring the network up" ;;
    esac
  done
  BOOT_SECS=$(since "$T_QEMU")
  [[ $GRUB_END == ok ]] || fail_phases "GRUB did not load bootd's config within ${TIMEOUT}s" \
    "(bootd served it: $(grep -acE "$cfg_re" "$WORK/bootd.log") times)"
  print_phases
  log "GRUB loaded bootd's config for $NODE$([[ $typed == 1 ]] && echo ' (after typing at its prompt)');" \
      "its 'linux' then fails: the lab has no ppc64le kernel (expected)"
  echo "PASS netboot $FIRMWARE $NODE ${BOOT_SECS}s"
  exit 0
fi

# --- the lab guest: wait for its marker ---------------------------------------------------
# iPXE's last error line, e.g. "Could not boot image: No such file ... (http://ipxe.org/2d0c613b)"
ipxe_error() {
  clean "$WORK/serial.log" | grep -E '\(http://ipxe\.org/[0-9a-f]+\)|bootd: [^ ]+: could not load' \
    | grep -v 'RXE' | tail -n 1 || true
}
# Fail fast once iPXE has given up instead of waiting for the timeout.
# SeaBIOS: iPXE prints "No more network devices", SeaBIOS "No bootable device".
# OVMF: iPXE's boot option (or EDK2's PXE) returns an error to the boot manager.
# bootd's node script: "bootd: NODE: could not load ..." after its own retries.
GIVEUP='No more network devices|No bootable device|BdsDxe: failed to load Boot[0-9A-F]+ "UEFI PXEv4|bootd: [^ ]+: could not load'
guest_step() {
  seen edk2-pxe 'Start PXE over IPv4' || true
  seen ipxe 'Open Source Network Boot Firmware' || true
  qemu_marker_step "$GIVEUP"
}
wait_for "$TIMEOUT" guest_step || fail_phases "no LAB-IGNITION line within ${TIMEOUT}s (iPXE: $(ipxe_error))"
case $GUEST_END in
  exited) fail_phases "qemu exited without a LAB-IGNITION line: $(tail -n 3 "$WORK/qemu.log" | tr '\n' ' ')" ;;
  gave-up) fail_phases "iPXE gave up after $(since "$T_QEMU")s: $(ipxe_error)" \
             "$(clean "$WORK/serial.log" | grep -aE 'PXE-E[0-9]+' | tail -n 1)" ;;
esac
seen marker '^LAB-IGNITION' || true
line=$GUEST_LINE
BOOT_SECS=$(since "$T_QEMU")
log "marker after ${BOOT_SECS}s: $line"
if [[ $IGN_CLIENT == 1 && $line != LAB-IGNITION-FAILED* ]]; then
  # The real client runs after the marker; the guest powers off once it has
  # printed every file it wrote.
  wait_for $(( deadline - $(date +%s) )) qemu_off \
    || fail_phases "the guest did not finish the real Ignition client within ${TIMEOUT}s"
  BOOT_SECS=$(since "$T_QEMU")
  log "real Ignition client: $(grep -a -m1 '^LAB-IGNITION-CLIENT ' "$WORK/serial.log" | tr -d '\r') (guest off after ${BOOT_SECS}s)"
fi

# The guest powers itself off; give it a moment, then the exit stops QEMU anyway.
wait_for 5 qemu_off || true
print_phases

[[ $line == LAB-IGNITION-FAILED* ]] && die "guest: ${line#LAB-IGNITION-FAILED }"

got_sha=$(marker_field "$line" sha256)
got_bytes=$(marker_field "$line" bytes)
got_url=$(marker_field "$line" url)

# Expected bytes straight from bootd's renderer (run on the host, same state dir).
ignition_expected "$BOOTD" "$NODE" "$SITE" "$WORK/state" || die "bootd render ignition $NODE failed: $RENDER_ERROR"
if [[ $HTTPS == 1 ]]; then
  [[ $got_url == */ignition/$NODE/pointer\?token=* ]] || die "--https: the kernel command line names $got_url, not the pointer config"
elif [[ $got_sha != "$WANT_SHA" ]]; then
  die "ignition mismatch: guest sha256=$got_sha bytes=$got_bytes url=$got_url;" \
      "expected (render ignition) sha256=$WANT_SHA bytes=$WANT_BYTES"
fi
if [[ $IGN_CLIENT == 1 ]]; then
  python3 "$HERE/ignition-check.py" "$WORK/serial.log" "$WORK/expected.ign" >"$WORK/ignition-check.txt" 2>&1 \
    || die "real Ignition client: $(tail -n 1 "$WORK/ignition-check.txt")"
  sed "s/^/$HARNESS_NAME:   /" "$WORK/ignition-check.txt" >&2
  if [[ $HTTPS == 1 ]]; then
    grep -aqE "Ignition pointer config served.*node=$NODE|node=$NODE.*Ignition pointer config served" "$WORK/bootd.log" \
      || die "--https: bootd never served $NODE's pointer config"
  fi
  if [[ -n $IGN_SPEC ]]; then
    served=$(grep -aE "Ignition served" "$WORK/bootd.log" | grep -a "node=$NODE" | grep -ao 'version=[0-9.]*' | sort -u | tr '\n' ' ')
    [[ " $served " == *" version=$IGN_SPEC "* ]] || die "bootd served $NODE's Ignition as ${served:-nothing}, never as $IGN_SPEC"
    log "bootd served $NODE's Ignition as: $served(the real client's: $IGN_SPEC)"
  fi
fi

# --- the node's boot timeline, as bootd recorded it ------------------------------------
# Every phase in order (the variant's FW_TIMELINE), durations adding up, and
# (with the capture) within 50 ms of the wire-level time from the first DHCP
# packet to the last Ignition request.
nsx curl -fsS --max-time 5 "$HTTP_BASE/status/node/$NODE/timeline.json" >"$WORK/timeline.json" \
  || die "bootd did not serve $NODE's timeline"
tl_args=(--phases "$FW_TIMELINE")
sleep 0.5   # let tcpdump write the last packets it has seen
# Over HTTPS the last Ignition request is TLS: the capture shows no path to
# compare the timeline's end with, so only the order and the sums are checked.
[[ -n $TL_PCAP && $HTTPS == 0 ]] && tl_args+=(--pcap "$TL_PCAP" --mac "$MAC")
python3 "$HERE/timeline-check.py" "$WORK/timeline.json" "${tl_args[@]}" >"$WORK/timeline.txt" 2>&1 \
  || { sed "s/^/$HARNESS_NAME:   /" "$WORK/timeline.txt" >&2; die "boot timeline: $(grep 'check failed' "$WORK/timeline.txt" | head -n 3 | tr '\n' ' ')"; }
log "boot timeline (bootd):"
sed "s/^/$HARNESS_NAME:   /" "$WORK/timeline.txt" >&2
if [[ -n $CHECK ]]; then
  nsx env HTTP_BASE="$HTTP_BASE" NODE="$NODE" MAC="$MAC" WORKDIR="$WORK" bash -c "$CHECK" >"$WORK/check.log" 2>&1 \
    || die "--check failed: $(tail -n 5 "$WORK/check.log" | tr '\n' ' ')"
  sed "s/^/$HARNESS_NAME: check: /" "$WORK/check.log" >&2
fi
echo "PASS netboot $FIRMWARE $NODE ${BOOT_SECS}s"
