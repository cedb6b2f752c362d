#!/usr/bin/env bash
# A node whose site entry has an NMState networkConfig with a bond of two
# NICs and a VLAN on the bond network-boots in the lab, and a real
# NetworkManager configures those addresses in the booted guest.
#
# Usage: tests/lab/bond-vlan.sh [--bin DIR (target/release)] [--images DIR (target/lab-images)]
#          [--timeout SECS (240)] [--workdir DIR (target/lab-runs/bond-vlan-PID)]
#
# Inside a private network namespace (10.77.0.0/24 on br0, as tests/lab/):
#  - bootd (its own DHCP) on the lab site plus one node, bond-0, with two MACs
#    and a networkConfig: eno1 and eno2 by MAC, bond0 active-backup (miimon
#    100) of both with 10.77.0.40/24 (the node's ip, the untagged network it
#    PXE-boots on), bond0.78 (VLAN 78) with 10.78.0.40/24, the default route
#    on bond0, dns-resolver 10.77.0.1; kernelArgs lab.hold=120 (the guest
#    stays up after its markers);
#  - VLAN 78 on the host side: br0 forwards tagged frames between the taps
#    like any others; the host kernel has no 8021q (nor bridge VLAN
#    filtering, nor tc's vlan action), so br0.78 (10.78.0.1/24) is a tap whose
#    frames tests/lab/vlan-tap.py tags with VLAN 78 onto a trunk tap on br0,
#    and untags the other way;
#  - QEMU (SeaBIOS + iPXE, TCG) with two virtio-net NICs on two taps on br0;
#    the first one's iPXE ROM boots, the second has none.
# The guest (tests/lab/guest.sh) sees bond= and vlan= on its command line and
# runs NetworkManager's initrd generator and NetworkManager
# --configure-and-quit=initrd (after renaming the NICs by ifname=, as
# dracut's udev rules do), prints what it brought up, fetches its Ignition,
# runs the real Ignition client and prints the keyfiles it wrote.
#
# Checks: NetworkManager exited 0; bond0 is up with eno1 and eno2 (the NICs
# with the node's two MACs) as slaves, mode active-backup, miimon 100;
# bond0 holds 10.77.0.40/24 and bond0.78 (VLAN 78 on bond0) 10.78.0.40/24;
# ping from the namespace over br0.78 to 10.78.0.40 (tagged frames seen by
# vlan-tap.py) and over br0 to 10.77.0.40 while the guest is up; the
# Ignition the guest fetched is `bootd render ignition bond-0`; the real
# client wrote every file of it (tests/lab/ignition-check.py), and the four
# keyfiles describe what runs (type, master, MAC, bond mode and miimon, VLAN
# id and parent, the first IPv4 address).
# Prints ok/FAIL lines, then "PASS bond-vlan" (exit 0) or FAIL lines with
# the logs' ends (exit 1); usage errors exit 2. Root (namespaces, taps).
set -euo pipefail

HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
# shellcheck source=tests/lib/harness.sh
. "$HERE/../lib/harness.sh"
# shellcheck source=tests/lib/qemu.sh
. "$HERE/../lib/qemu.sh"
# shellcheck source=tests/lib/vm.sh
. "$HERE/../lib/vm.sh"

IMAGES=$REPO/target/lab-images TIMEOUT=240 WORKDIR=""
usage() { sed -n '6,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --bin) BIN=${2:-}; shift 2 ;;
    --images) IMAGES=${2:-}; shift 2 ;;
    --timeout) TIMEOUT=${2:-}; shift 2 ;;
    --workdir) WORKDIR=${2:-}; shift 2 ;;
    -h|--help) usage ;;
    *) echo "bond-vlan.sh: unknown argument $1" >&2; usage ;;
  esac
done
[[ $TIMEOUT =~ ^[0-9]+$ ]] || usage
[[ $(id -u) -eq 0 ]] || { echo "bond-vlan.sh: must run as root (netns, tap)" >&2; exit 2; }
BIN=$(realpath "$BIN")
[[ -x $BIN/bootd ]] || { echo "bond-vlan.sh: no $BIN/bootd" >&2; exit 2; }
mkdir -p "$IMAGES"
IMAGES=$(realpath "$IMAGES")

NODE=bond-0 MAC0=52:54:00:77:00:40 MAC1=52:54:00:77:00:41 IP=10.77.0.40
VID=78 VLAN_IP=10.78.0.40 VLAN_HOST=10.78.0.1 HOLD=120
HOST_IP=10.77.0.1 HTTP_BASE=http://10.77.0.1:8080

WORKDIR=${WORKDIR:-$REPO/target/lab-runs/bond-vlan-$$}
rm -rf "$WORKDIR"
mkdir -p "$WORKDIR/state"
harness_init bond-vlan --work "$(readlink -f "$WORKDIR")"

# die MESSAGE: the ends of the console and the logs, then the FAIL line.
die() {
  qemu_fail_logs 60
  show_logs -n 10 "$WORK/vlan-tap.log"
  fail "$*"
}

"$HERE/guest.sh" "$IMAGES" >&2 || die "guest.sh failed"
T0=$(now)

# --- the site: the lab's plus bond-0 ------------------------------------------------
NODE_YAML="
name: $NODE
role: worker
live: true
macs: ['$MAC0', '$MAC1']
ip: $IP
kernelArgs: [console=ttyS0, lab.hold=$HOLD]
networkConfig:
  interfaces:
    - { name: eno1, type: ethernet, state: up, mac-address: '$MAC0', ipv4: { enabled: false }, ipv6: { enabled: false } }
    - { name: eno2, type: ethernet, state: up, mac-address: '$MAC1', ipv4: { enabled: false }, ipv6: { enabled: false } }
    - name: bond0
      type: bond
      state: up
      link-aggregation:
        mode: active-backup
        options: { miimon: '100' }
        port: [eno1, eno2]
      ipv4: { enabled: true, dhcp: false, address: [{ ip: $IP, prefix-length: 24 }] }
      ipv6: { enabled: false }
    - name: bond0.$VID
      type: vlan
      state: up
      vlan: { base-iface: bond0, id: $VID }
      ipv4: { enabled: true, dhcp: false, address: [{ ip: $VLAN_IP, prefix-length: 24 }] }
      ipv6: { enabled: false }
  routes:
    config:
      - { destination: 0.0.0.0/0, next-hop-address: $HOST_IP, next-hop-interface: bond0 }
  dns-resolver:
    config: { server: [$HOST_IP] }
"
SITE=$WORK/site.yaml
lab_site "$SITE" host.stateDir="$WORK/state" images.root="$IMAGES" "nodes+=$NODE_YAML" || die "site not written"
"$BIN/bootd" --check-config "$SITE" >"$WORK/check-config.log" 2>&1 || die "site does not validate: $(cat "$WORK/check-config.log")"
"$BIN/bootd" render ipxe "$NODE" --site "$SITE" --state-dir "$WORK/state" >"$WORK/node.ipxe" 2>"$WORK/render.log" \
  || die "bootd render ipxe $NODE: $(tail -n 3 "$WORK/render.log")"
log "bootd's kernel line for $NODE: $(grep -o 'ifname=.*' "$WORK/node.ipxe" | sed 's/ || goto failed//')"

# --- the network: br0, the guest's two taps, VLAN 78 through vlan-tap.py ----------
lab_netns "bondvlan-$$" "$HOST_IP/24" fd77::1/64
lab_tap tap0
lab_tap tap1
lab_tap vtrunk
ip -n "$NS" tuntap add dev "br0.$VID" mode tap
ip -n "$NS" addr add "$VLAN_HOST/24" dev "br0.$VID"
ip -n "$NS" link set "br0.$VID" up
spawn --ns "$NS" --log "$WORK/vlan-tap.log" python3 -u "$HERE/vlan-tap.py" vtrunk "br0.$VID" "$VID"
TAGGER_PID=$SPAWNED
tagger_up() { alive "$TAGGER_PID" || return 125; grep -q '^vlan-tap: vtrunk' "$WORK/vlan-tap.log"; }
wait_for 10 tagger_up || die "vlan-tap.py did not start: $(tail -n 3 "$WORK/vlan-tap.log" | tr '\n' ' ')"
lab_ra   # iPXE waits ~16 s for a router advertisement otherwise

start_bootd --log "$WORK/bootd.log" --ready "$HTTP_BASE/healthz" --timeout 30 -- --site "$SITE" --state-dir "$WORK/state" \
  || die "bootd did not start"
log "lab up in $(since "$T0")s (workdir $WORK)"

# --- the guest: SeaBIOS + iPXE from the first NIC, a second NIC without ROM ---------
qemu_firmware seabios-ipxe
# shellcheck disable=SC2054  # commas inside QEMU arguments
qemu_start tap0 "$MAC0" virtio-net-pci \
  -netdev tap,id=n1,ifname=tap1,script=no,downscript=no -device "virtio-net-pci,netdev=n1,mac=$MAC1,romfile="
log "QEMU started: $MAC0 on tap0 (boots), $MAC1 on tap1"

GIVEUP='No more network devices|No bootable device|bootd: [^ ]+: could not load|LAB-IGNITION-FAILED'
held() {
  grep -aq '^LAB-HOLD ' "$WORK/serial.log" && return 0
  alive "$QEMU_PID" || return 125
  ! grep -aqE "$GIVEUP" "$WORK/serial.log" || return 125
  return 1
}
wait_for "$TIMEOUT" held || die "no LAB-HOLD line within ${TIMEOUT}s$(alive "$QEMU_PID" || echo ' (QEMU exited)')"
GUEST_SECS=$(since "$T_QEMU")
CONSOLE=$(clean "$WORK/serial.log")
log "guest holding after ${GUEST_SECS}s (QEMU start to LAB-HOLD)"
grep -aE '^LAB-(NET|IGNITION)' <<<"$CONSOLE" | sed "s/^/$HARNESS_NAME:   /" >&2 || true

# marker PREFIX: the first console line starting with PREFIX.
marker() { grep -a -m1 -F -- "$1" <<<"$CONSOLE" | grep -a "^$1" || true; }

# --- while the guest is up (on the network its keyfiles made): ping its VLAN
# address over br0.78, its bond's over br0 -------------------------------------------
if nsx busybox ping -c 3 -w 10 -I "br0.$VID" "$VLAN_IP" >"$WORK/ping-vlan.log" 2>&1; then
  ok "ping $VLAN_IP over br0.$VID (VLAN $VID through vlan-tap.py): $(grep -a 'packets transmitted' "$WORK/ping-vlan.log")"
else
  bad "ping $VLAN_IP over br0.$VID: $(tail -n 2 "$WORK/ping-vlan.log" | tr '\n' ' ')"
fi
if nsx busybox ping -c 3 -w 10 -I br0 "$IP" >"$WORK/ping-bond.log" 2>&1; then
  ok "ping $IP over br0 (untagged): $(grep -a 'packets transmitted' "$WORK/ping-bond.log")"
else
  bad "ping $IP over br0: $(tail -n 2 "$WORK/ping-bond.log" | tr '\n' ' ')"
fi
# The guest's frames on VLAN 78 came in tagged (vlan-tap.py drops untagged ones).
if grep -aq "^vlan-tap: trunk -> br0.$VID: VLAN $VID tag removed: .*52:54:00:77:00:4" "$WORK/vlan-tap.log"; then
  ok "vlan-tap.py received frames tagged VLAN $VID from the guest's bond MAC"
else
  bad "no frame tagged VLAN $VID from the guest in $WORK/vlan-tap.log"
fi
stop_pid "$QEMU_PID"

# --- what NetworkManager brought up: in the initramfs from bootd's dracut
# arguments (LAB-NET), then from the keyfiles Ignition wrote (LAB-SYSNET) ------------
nm=$(marker "LAB-NET-NM ")
if [[ $nm == "LAB-NET-NM generator=0 nm=0" ]]; then
  ok "initramfs: nm-initrd-generator and NetworkManager --configure-and-quit=initrd exited 0"
else
  bad "initramfs: NetworkManager: ${nm:-no LAB-NET-NM line}"
fi
nm=$(marker "LAB-SYSNET-NM ")
if [[ $nm == "LAB-SYSNET-NM nm=0" ]]; then
  ok "keyfiles: NetworkManager --configure-and-quit on the keyfiles Ignition wrote exited 0"
else
  bad "keyfiles: NetworkManager: ${nm:-no LAB-SYSNET-NM line}"
fi
# net_checks PREFIX WHAT: the bond, the VLAN, their addresses and the
# default route as the PREFIX markers show them.
net_checks() {
  local p=$1 what=$2 line n
  line=$(marker "$p-BOND bond0 ")
  local want="$p-BOND bond0 slaves=eno1,eno2 mode=active-backup miimon=100 "
  if [[ $line == "$want"* && $line == *" perm=$MAC0,$MAC1" && $line =~ active=eno[12]\  ]]; then
    ok "$what: bond0 of eno1 and eno2 (MACs $MAC0, $MAC1), active-backup, miimon 100: ${line#* bond0 }"
  else
    bad "$what: bond0: ${line:-no $p-BOND bond0 line} (want ${want}active=eno1|eno2 perm=$MAC0,$MAC1)"
  fi
  line=$(marker "$p bond0 ")
  if [[ $line =~ ^$p\ bond0\ UP\ (.*\ )?$IP/24(\ |$) ]]; then ok "$what: bond0 up with $IP/24"; else bad "$what: bond0: ${line:-no $p bond0 line}"; fi
  line=$(marker "$p bond0.$VID ")
  if [[ $line =~ ^$p\ bond0\.$VID\ UP\ (.*\ )?$VLAN_IP/24(\ |$) ]]; then ok "$what: bond0.$VID up with $VLAN_IP/24"; else bad "$what: bond0.$VID: ${line:-no $p bond0.$VID line}"; fi
  line=$(marker "$p-VLAN bond0.$VID ")
  if [[ $line == "$p-VLAN bond0.$VID id=$VID parent=bond0" ]]; then ok "$what: bond0.$VID is VLAN $VID on bond0"; else bad "$what: VLAN: ${line:-no $p-VLAN line}"; fi
  for n in eno1 eno2; do
    line=$(marker "$p $n ")
    if [[ $line =~ ^$p\ $n\ UP ]]; then ok "$what: $n up"; else bad "$what: $n: ${line:-no $p $n line}"; fi
  done
  line=$(marker "$p-ROUTE default ")
  if [[ $line == "$p-ROUTE default via $HOST_IP dev bond0 "* ]]; then ok "$what: ${line#"$p"-ROUTE }"; else bad "$what: default route: ${line:-none}"; fi
  line=$(marker "$p-DNS ")
  if [[ " $line " == *" nameserver $HOST_IP "* ]]; then ok "$what: resolv.conf: ${line#"$p"-DNS }"; else bad "$what: resolvers: ${line:-no $p-DNS line}"; fi
}
net_checks LAB-NET initramfs
net_checks LAB-SYSNET keyfiles

# --- the Ignition it fetched, and what the real client wrote ---------------------------
ignition_expected "$BIN/bootd" "$NODE" "$SITE" "$WORK/state" || die "bootd render ignition $NODE: $RENDER_ERROR"
line=$(marker "LAB-IGNITION ")
got=$(marker_field "$line" sha256)
if [[ $got == "$WANT_SHA" ]]; then
  ok "the guest's Ignition is bootd's render (sha256 $WANT_SHA, $WANT_BYTES bytes)"
else
  bad "Ignition: guest sha256=${got:-none} ($line), bootd render ignition sha256=$WANT_SHA"
fi
line=$(marker "LAB-IGNITION-CLIENT ")
if [[ $line == "LAB-IGNITION-CLIENT fetch=0 files=0 platform=metal" ]] \
    && python3 "$HERE/ignition-check.py" "$WORK/serial.log" "$WORK/expected.ign" >"$WORK/ignition-check.txt" 2>&1; then
  ok "the real Ignition client wrote every file of the node's config: $(tail -n 1 "$WORK/ignition-check.txt")"
else
  bad "real Ignition client: ${line:-no LAB-IGNITION-CLIENT line}; $(tail -n 2 "$WORK/ignition-check.txt" 2>/dev/null | tr '\n' ' ')"
fi
# The keyfiles it wrote describe what runs.
kf() { marker "LAB-NET-KEYFILE /etc/NetworkManager/system-connections/$1.nmconnection "; }
kf_check() { # NAME WANT...: the keyfile's marker has each WANT (key=value)
  local name=$1 line w miss=""
  shift
  line=$(kf "$name")
  for w in "$@"; do [[ " $line " == *" $w "* ]] || miss+=" $w"; done
  if [[ -n $line && -z $miss ]]; then ok "keyfile $name.nmconnection: ${line#* sha256=* }"
  else bad "keyfile $name.nmconnection: ${line:-no LAB-NET-KEYFILE line}; missing:$miss"; fi
}
kf_check eno1 type=ethernet master=bond0 "mac=$MAC0"
kf_check eno2 type=ethernet master=bond0 "mac=$MAC1"
kf_check bond0 type=bond mode=active-backup miimon=100 ipv4=manual "address1=$IP/24,$HOST_IP"
kf_check "bond0.$VID" type=vlan "vlan=$VID" parent=bond0 ipv4=manual "address1=$VLAN_IP/24"

log "run: $(since "$T0")s (guest: ${GUEST_SECS}s from QEMU start to its hold)"
if [[ $FAILS != 0 ]]; then qemu_fail_logs 30 >&2; fi
harness_verdict
