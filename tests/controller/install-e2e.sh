#!/usr/bin/env bash
# Inspection and install to disk, end to end, through a BMC: the controller
# API creates a node on a Redfish machine (sushy-tools driving a libvirt/QEMU
# VM); the VM network-boots from bootd, runs the inspection agent, which
# reports the machine's real inventory (CPUs, memory, both disks, the NIC and
# the switch port LLDP names) and reboots; the next boot installs with the
# real coreos-installer to the disk the node's root-device hints choose;
# the disk then boots, and keeps booting. A second node, whose role's
# minimums the machine does not meet, is inspected and refused.
#
# Usage: tests/controller/install-e2e.sh [--bootd BOOTD] [--timeout SECS (240, per wait)]
#          [--workdir DIR] [--install-config]
#
# Inside a private network namespace (10.77.0.1/24 and fd77::1/64 on br0):
#  0. dnsmasq sends router advertisements only (bootd serves DHCP); lldpd on
#     br0 (system name lab-tor, port ID swp7, every 2 s) stands in for the
#     top-of-rack switch; virtlogd + libvirtd (tests/controller/bmc-lab.sh)
#     with one stopped TCG domain: SeaBIOS, 2 vCPUs, 1 GiB, two empty 1 GiB
#     raw virtio disks with serials disk-a and disk-b, a virtio NIC on br0
#     (52:54:00:77:00:62); boot order disk-b, then the network (an empty
#     disk falls through to PXE); sushy-emulator (libvirt driver, Basic auth)
#     on 127.0.0.1:8000. The inspection agent is built (musl, static) and put
#     in the images root (tools/bootd-agent); the lab's metal image is built
#     (tests/lab/disk-image.sh). bootd runs the lab site plus host.api
#     (redfish: {}), inspection (the agent, lldpSeconds 10, worker minimums 2
#     CPUs, 1 GiB, 1 GiB disk) and the x86_64 set's metal image.
#  1. POST /v1/nodes inst-0 (provider redfish, role worker, rootDeviceHints
#     {serialNumber: disk-b}): the VM powers on and PXE-boots the live system
#     with the agent's Ignition; the agent reports (bootd logs "inventory
#     reported", the timeline's "inspected") and reboots. `bootd nodes
#     inventory inst-0`: 2 CPUs, 1024 MiB, disk-a and disk-b (1 GiB, their
#     by-id links), the NIC's MAC with link, LLDP lab-tor/swp7 and br0's MAC
#     as the chassis, firmware bios; next boot: install to
#     /dev/disk/by-id/virtio-disk-b.
#  2. The next boot's kernel line has coreos.inst.install_dev=/dev/disk/by-id/virtio-disk-b,
#     the ignition_url, image_url=<bootd>/images/lab/metal.raw.xz and insecure;
#     LAB-INSTALL rc=0; it reboots and the disk boots (SeaBIOS -> iPXE: bootd
#     answers with its local-disk script, sanboot): LAB-DISK-BOOT
#     ignition-sha256=<sha256 of `bootd render ignition inst-0`> boots=1.
#     Powered on again through Redfish: LAB-DISK-BOOT boots=2, no install,
#     Ignition not served again. disk-a has no signature (blkid -p).
#  3. inst-0's conditions: Inspected True (its message the inventory's
#     summary), DiskChosen True; phase Ready. DELETE: the machine is released
#     with its disks wiped (it network-boots the agent's wipe; bootd logs
#     both disks wiped; blkid -p then finds nothing on disk-b either), it is
#     powered off and the node goes (404).
#  4. POST inst-1, a master, on the same machine (the site's default master
#     minimums, OpenShift's: 4 CPUs, 16 GiB, a 100 GiB disk): inspected
#     again, then its script says "bootd: inst-1 does not install: below the
#     master minimums: CPUs: 2 < 4, memory: 1.0 GiB < 16 GiB, …", the
#     condition BelowMinimums is True with that reason, the next boot is
#     none. DELETE (wiped again) -> 404, the VM off.
#
# --install-config (prints PASS/FAIL install-config-e2e instead): the same
# lab, but the machine has a second virtio NIC on br0 (52:54:00:77:00:65, no
# boot ROM), and the node comes from `bootd nodes import --install-config
# <run>/install-config.yaml` (the file in host.api.bmcFiles): host ic-0,
# role worker, bmc redfish+http://127.0.0.1:8000/redfish/v1/Systems/<uuid>
# with sushy's random password, bootMACAddress the first NIC, bootMode
# legacy, rootDeviceHints {serialNumber: disk-b}, networkConfig: eno1 and
# eno2 (by MAC) in bond0 active-backup miimon 100 with 10.77.0.64/24,
# bond0.78 (VLAN 78) with 10.78.0.64/24, the default route, dns-resolver.
# VLAN 78 on the host side: br0.78 (10.78.0.1/24) through tests/lab/vlan-tap.py
# (as tests/lab/bond-vlan.sh). Checks: the password nowhere in bootd's log,
# state or argv (the node refers to the file); the inspection boot's
# NetworkManager network (LAB-NET markers; ping 10.78.0.64 over br0.78 while
# the agent runs); the inventory's two NICs and two disks; bootd's install
# script has bond= and vlan=; the install boot's LAB-NET markers (bond0 of
# both NICs, active-backup, 10.77.0.64/24; bond0.78 10.78.0.64/24); LAB-INSTALL
# rc=0 to disk-b; the disk boots (twice); deleted: wiped. Step 4 is skipped.
# An imported node has no kernelArgs, so the guest's kernel writes nothing
# to the serial port (no console=ttyS0): only /init's markers, iPXE and the
# disk's lines are checked there, and there is no lab.hold.
# Prints ok/FAIL lines, the phases' times, then "PASS install-e2e" (exit 0)
# or "FAIL install-e2e ..." with logs (exit 1); usage errors exit 2. Root.
# The run folder (default target/lab-runs/install-e2e-<pid>) is kept (logs,
# consoles, bootd's state); the disks are removed.
set -Eeuo pipefail

HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
# shellcheck source=tests/lib/harness.sh
. "$HERE/../lib/harness.sh"   # $REPO
# shellcheck source=tests/lib/vm.sh
. "$HERE/../lib/vm.sh"
BOOTD="" TIMEOUT=240 WORKDIR="" IC=0
usage() { sed -n '11,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --bootd) BOOTD=${2:-}; shift 2 ;;
    --timeout) TIMEOUT=${2:-}; shift 2 ;;
    --workdir) WORKDIR=${2:-}; shift 2 ;;
    --install-config) IC=1; shift ;;
    -h|--help) usage ;;
    *) echo "install-e2e.sh: unknown argument $1" >&2; usage ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "install-e2e.sh: must run as root (netns, libvirtd)" >&2; exit 2; }
[[ $TIMEOUT =~ ^[0-9]+$ ]] || usage
export BMC_VENV=${BMC_VENV:-/opt/bmc-venv}

"$HERE/bmc-deps.sh" >&2 || { echo "FAIL install-e2e: bmc-deps.sh failed"; exit 1; }
bootd_under_test "$BOOTD" install-e2e.sh

DOM=inst-vm MAC=52:54:00:77:00:62 IP=10.77.0.62 RF_PORT=8000
HOST_IP=10.77.0.1 API=https://10.77.0.1:9443 RUN=install-e2e
# --install-config: two NICs, a bond and VLAN 78 on it.
MAC2=52:54:00:77:00:65 VID=78 VLAN_IP=10.78.0.64 VLAN_HOST=10.78.0.1
[[ $IC == 0 ]] || { DOM=ic-vm MAC=52:54:00:77:00:64 IP=10.77.0.64 RUN=install-config-e2e; }
lab_run_init "$RUN" "$WORKDIR" "$REPO/target/lab-runs/$RUN-$$"
T0=$(now)
# The disks are large (sparse) files: not kept.
# shellcheck disable=SC2016  # $WORK is expanded at exit
after_exit 'rm -f "$WORK"/disk-a.img "$WORK"/disk-b.img'

# shellcheck source=tests/controller/bmc-lab.sh
. "$HERE/bmc-lab.sh"
die() {
  show_logs -n 40 "$WORK/$DOM-serial.log"
  show_logs "$WORK"/bootd.log "$WORK/libvirtd.log" "$WORK"/lv/log/qemu/*.log "$WORK"/sushy-*.log "$WORK/lldpd.log"
  fail "$*"
}

# --- images: the lab guest, the metal image, the agent ------------------------------------
IMAGES=$REPO/target/lab-images
nice -n 10 "$REPO/tests/lab/guest.sh" "$IMAGES" >&2 || die "guest.sh failed"
nice -n 10 "$REPO/tests/lab/disk-image.sh" "$IMAGES" >&2 || die "disk-image.sh failed"
[[ -d $REPO/target/lab-tftp ]] || nice -n 10 "$REPO/tests/lab/tftp-root.sh" "$REPO/target/lab-tftp" >&2 || die "tftp-root.sh failed"
# The agent as machines get it: static (musl), so that any live system runs it.
MUSL=x86_64-unknown-linux-musl
(cd "$REPO" && nice -n 10 cargo build -q --release --locked -p agent --target "$MUSL") >"$WORK/agent-build.log" 2>&1 \
  || die "cargo build -p agent --target $MUSL (rustup target add $MUSL?): $(tail -n 5 "$WORK/agent-build.log")"
AGENT_BIN=${CARGO_TARGET_DIR:-$REPO/target}/$MUSL/release/bootd-agent
mkdir -p "$IMAGES/tools"
# Replaced by rename: a run that serves the old one meanwhile keeps reading it.
install -m 755 "$AGENT_BIN" "$IMAGES/tools/.bootd-agent.$$" && mv -f "$IMAGES/tools/.bootd-agent.$$" "$IMAGES/tools/bootd-agent"
AGENT_SHA=$(sha256sum "$IMAGES/tools/bootd-agent" | cut -d' ' -f1)
log "images ready (agent $(stat -c %s "$IMAGES/tools/bootd-agent") bytes, sha256 ${AGENT_SHA:0:12}…), $(since "$T0")s"

# --- the site -----------------------------------------------------------------------------
api_tokens
SITE=$WORK/site.yaml
write_site() { # OUT WORKER_CPUS
  lab_site "$1" host.stateDir="$WORK/state" host.api.listen="$HOST_IP:9443" host.api.url="$API" \
    host.api.tokens.file="$WORK/api-tokens" host.api.deadline=10m host.api.bmcFiles="$WORK" \
    host.api.redfish.powerOffTimeout=10s \
    images.sets.lab-x86_64.metal=lab/metal.raw.xz \
    inspection="{agents: {x86_64: tools/bootd-agent}, lldpSeconds: 10, minimums: {worker: {cpus: $2, memoryGiB: 1, diskGiB: 1}}}"
}
write_site "$SITE" 2 || die "site not written"
"$BOOTD" --check-config "$SITE" >"$WORK/check.log" 2>&1 || die "site does not validate: $(cat "$WORK/check.log")"

# --- the lab: namespace, router ads, the switch's LLDP -----------------------------------
lab_netns "labinst-$$" "$HOST_IP/24" fd77::1/64
lab_ra
BR_MAC=$(ip -n "$NS" -br link show br0 | awk '{print $3}')
# lldpd as the top-of-rack switch, on br0 (frames a host sends on its bridge
# reach every port; the VM's tap is one). In a private mount namespace with
# its own /run: its chroot, control socket and pid stay off the host's.
printf '%s\n' "configure system hostname lab-tor" "configure lldp tx-interval 2" \
  "configure ports br0 lldp portidsubtype local swp7" >"$WORK/lldpd.conf"
spawn --ns "$NS" --log "$WORK/lldpd.log" unshare --mount --propagation private sh -c \
  "mount -t tmpfs lldprun /run && exec lldpd -d -k -I br0 -u /run/lldpd.socket -O '$WORK/lldpd.conf'"
LLDPD_PID=$SPAWNED
lldp_sent() { alive "$LLDPD_PID" || return 125; grep -q "system name set to new value lab-tor" "$WORK/lldpd.log"; }
wait_for 10 lldp_sent || die "lldpd did not start: $(tail -n 5 "$WORK/lldpd.log")"
if [[ $IC == 1 ]]; then
  # VLAN 78 on the host side, as tests/lab/bond-vlan.sh: br0.78 is a tap whose
  # frames vlan-tap.py tags onto a trunk tap on br0 (no 8021q here).
  lab_tap vtrunk
  ip -n "$NS" tuntap add dev "br0.$VID" mode tap
  ip -n "$NS" addr add "$VLAN_HOST/24" dev "br0.$VID"
  ip -n "$NS" link set "br0.$VID" up
  spawn --ns "$NS" --log "$WORK/vlan-tap.log" python3 -u "$REPO/tests/lab/vlan-tap.py" vtrunk "br0.$VID" "$VID"
  TAGGER_PID=$SPAWNED
  tagger_up() { alive "$TAGGER_PID" || return 125; grep -q '^vlan-tap: vtrunk' "$WORK/vlan-tap.log"; }
  wait_for 10 tagger_up || die "vlan-tap.py did not start: $(tail -n 3 "$WORK/vlan-tap.log" | tr '\n' ' ')"
fi

# --- libvirt, the machine, its BMC ---------------------------------------------------------
bmc_libvirt_start
truncate -s 1G "$WORK/disk-a.img" "$WORK/disk-b.img"
disk_xml() { # FILE SERIAL DEV [BOOT-ORDER]
  echo "    <disk type='file' device='disk'>"
  echo "      <driver name='qemu' type='raw'/>"
  echo "      <source file='$1'/>"
  echo "      <target dev='$3' bus='virtio'/>"
  echo "      <serial>$2</serial>"
  [[ -z ${4:-} ]] || echo "      <boot order='$4'/>"
  echo "    </disk>"
}
cat >"$WORK/$DOM.xml" <<EOF
<domain type='qemu'>
  <name>$DOM</name>
  <memory unit='MiB'>1024</memory>
  <vcpu>2</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <loader readonly='yes' type='rom'>$SEABIOS</loader>
    <bios useserial='yes'/>
  </os>
  <features><acpi/><apic/></features>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
$(disk_xml "$WORK/disk-a.img" disk-a vda)
$(disk_xml "$WORK/disk-b.img" disk-b vdb 1)
    <interface type='bridge'>
      <mac address='$MAC'/>
      <source bridge='br0'/>
      <model type='virtio'/>
      <boot order='2'/>
    </interface>
$([[ $IC == 0 ]] || printf "    <interface type='bridge'>\n      <mac address='%s'/>\n      <source bridge='br0'/>\n      <model type='virtio'/>\n      <rom enabled='no'/>\n    </interface>" "$MAC2")
    <serial type='file'>
      <source path='$WORK/$DOM-serial.log' append='on'/>
      <target port='0'/>
    </serial>
    <console type='file'>
      <source path='$WORK/$DOM-serial.log' append='on'/>
      <target type='serial' port='0'/>
    </console>
    <controller type='usb' model='none'/>
    <memballoon model='none'/>
  </devices>
</domain>
EOF
lv define "$WORK/$DOM.xml" >/dev/null || die "virsh define $DOM failed"
BMC_DOMAINS+=("$DOM")
UUID=$(lv domuuid "$DOM")
bmc_credentials
bmc_ca
bmc_sushy rf "$RF_PORT" "$UUID"
RF_URL=http://127.0.0.1:$RF_PORT/redfish/v1/Systems/$UUID
log "lldpd, libvirtd, $DOM and sushy-emulator up, $(since "$T0")s"

# --- bootd ----------------------------------------------------------------------------------
chown nobody "$WORK/bmc-password" "$WORK/api-tokens"
start_bootd --bin nice --log "$WORK/bootd.log" --timeout 30 \
  -- -n 5 "$BOOTD" --site "$SITE" --state-dir "$WORK/state" --user nobody || die "bootd did not start"
wait_up "$BOOTD_PID" 30 "$WORK/bootd.log" "bootd's API" api_up
cli() { nsx "$BOOTD" --site "$SITE" --state-dir "$WORK/state" nodes "$@"; }
log "bootd up, $(since "$T0")s (workdir $WORK)"

# --- helpers -------------------------------------------------------------------------------
serial_size() { stat -c %s "$WORK/$DOM-serial.log" 2>/dev/null || echo 0; }
# The console after OFFSET, without CRs and terminal escapes.
console_from() { tail -c +"$(( $1 + 1 ))" "$WORK/$DOM-serial.log" 2>/dev/null | tr -d '\r' \
  | sed -e 's/\x1b\[[0-9;=?]*[a-zA-Z]//g' -e 's/\x1b[a-zA-Z]//g' || true; }
# first OFFSET REGEX: the first match (from the match on) after OFFSET.
first() { console_from "$1" | grep -a -o -m1 -E "$2.*" || true; }
console_has() { [[ -n $(first "$1" "$2") ]]; }   # OFFSET REGEX
lacks() { ! console_has "$1" "$2"; }              # OFFSET REGEX
# shellcheck disable=SC2053  # the glob is the point
says() { [[ $1 == $2 ]]; }                         # TEXT GLOB
no_signature() { ! blkid -p "$1" >/dev/null 2>&1; }
bootd_log() { console_clean "$WORK/bootd.log"; }
# (The log read whole first: grep -q ending a pipe early fails it under pipefail.)
bootd_says() { local l; l=$(bootd_log); grep -a -q -E "$1" <<<"$l"; }
bootd_says_exactly() { local l; l=$(bootd_log); [[ -n $1 ]] && grep -a -q -F "$1" <<<"$l"; }
# What bootd served as the node's (install) Ignition, not the agent's config.
ignition_served() { bootd_log | grep -a -E "Ignition (pointer config )?served.*node=$1( |\$)" | grep -a -c -v "agent Ignition" || true; }
domstate_is() { [[ $(lv domstate "$DOM" 2>/dev/null) == "$1" ]]; }
rf_power() {
  local r
  r=$(rf POST "$RF_URL/Actions/ComputerSystem.Reset" "{\"ResetType\":\"$1\"}")
  [[ $(status_of "$r") =~ ^20[0-9]$ ]] || die "Redfish Reset $1: $r"
}
node_gone() { [[ $(status_of "$(api GET "/v1/nodes/$1")") == 404 ]]; }
# condition NODE TYPE: "STATUS|MESSAGE" of the node's condition TYPE.
condition() {
  local r
  r=$(api GET "/v1/nodes/$1")
  [[ $(status_of "$r") == 200 ]] || { echo "GET $(status_of "$r")"; return; }
  body_of "$r" | json "next(('%s|%s' % (c['status'], c.get('message', '')) for c in d['conditions'] if c['type'] == '$2'), 'none|')"
}
node_body() { # NAME HINTS-JSON [ROLE]
  printf '{"name":"%s","role":"%s","ip":"%s","kernelArgs":["console=ttyS0"],"rootDeviceHints":%s,"provider":{"redfish":{"url":"%s","username":"admin","password":{"file":"%s"},"boot":"pxe","mode":"Legacy","allowPlainHttp":true}}}' \
    "$1" "${3:-worker}" "$IP" "$2" "$RF_URL" "$WORK/bmc-password"
}
create() { # NAME [ROLE]: POST /v1/nodes, 201
  local r
  r=$(api POST /v1/nodes "$(node_body "$1" '{"serialNumber":"disk-b"}' "${2:-worker}")")
  [[ $(status_of "$r") == 201 ]] || die "POST /v1/nodes $1: $r"
  log "POST /v1/nodes $1: 201"
}
delete() { # NAME: DELETE, gone within 60 s, the VM off
  local r
  r=$(api DELETE "/v1/nodes/$1")
  [[ $(status_of "$r") =~ ^20[024]$ ]] || die "DELETE /v1/nodes/$1: $r"
  PACE=0.5 within 60 node_gone "$1" || die "$1 still there 60 s after DELETE: $(api GET "/v1/nodes/$1" | head -c 3000)"
  PACE=0.5 within 60 domstate_is "shut off" || die "$DOM: $(lv domstate "$DOM") 60 s after DELETE $1"
}
# wait_inspected NAME SECS: bootd stored NAME's inventory.
wait_inspected() {
  PACE=0.5 within "$2" bootd_says "inventory reported.*node=$1( |\$)|node=$1( |\$).*inventory reported" \
    || die "$1: no inventory reported within $2 s; console: $(first "$OFF" 'LAB-UNIT|LAB-IGNITION-CLIENT ' | head -c 300)"
}
declare -A SECS=()

# --- --install-config: the file, the import, the network NetworkManager made ---------------
write_install_config() { # FILE: host ic-0 with the bond and VLAN; the password sushy's
  local pw
  pw=$(cat "$WORK/bmc-password")
  (umask 077; cat >"$1" <<EOF
apiVersion: v1
baseDomain: example.test
metadata: { name: lab }
compute: [{ name: worker, replicas: 1 }]
controlPlane: { name: master, replicas: 0 }
platform:
  baremetal:
    hosts:
      - name: $NODE
        role: worker
        bmc: { address: "redfish+http://127.0.0.1:$RF_PORT/redfish/v1/Systems/$UUID", username: admin, password: "$pw" }
        bootMACAddress: "$MAC"
        bootMode: legacy
        rootDeviceHints: { serialNumber: disk-b }
        networkConfig:
          interfaces:
            - { name: eno1, type: ethernet, state: up, mac-address: "$MAC", ipv4: { enabled: false }, ipv6: { enabled: false } }
            - { name: eno2, type: ethernet, state: up, mac-address: "$MAC2", ipv4: { enabled: false }, ipv6: { enabled: false } }
            - name: bond0
              type: bond
              state: up
              link-aggregation: { mode: active-backup, options: { miimon: "100" }, port: [eno1, eno2] }
              ipv4: { enabled: true, dhcp: false, address: [{ ip: $IP, prefix-length: 24 }] }
              ipv6: { enabled: false }
            - name: bond0.$VID
              type: vlan
              state: up
              vlan: { base-iface: bond0, id: $VID }
              ipv4: { enabled: true, dhcp: false, address: [{ ip: $VLAN_IP, prefix-length: 24 }] }
              ipv6: { enabled: false }
          routes:
            config: [{ destination: 0.0.0.0/0, next-hop-address: $HOST_IP, next-hop-interface: bond0 }]
          dns-resolver:
            config: { server: [$HOST_IP] }
EOF
  )
  chown nobody "$1"
}
# The password is in the install-config only: not in bootd's log, state or argv.
password_nowhere() {
  local pw f
  pw=$(cat "$WORK/bmc-password")
  check "the BMC password is not in bootd's log" bash -c '! grep -a -q -F -- "$1" "$2"' _ "$pw" "$WORK/bootd.log"
  f=$(grep -r -a -l -F -- "$pw" "$WORK/state" 2>/dev/null | head -n 3 | tr '\n' ' ' || true)
  check "the BMC password is not in bootd's state ($(find "$WORK/state" -type f | wc -l) files)${f:+: in $f}" [ -z "$f" ]
  check "the BMC password is not in bootd's argv" bash -c '! tr "\0" " " </proc/$2/cmdline | grep -q -F -- "$1"' _ "$pw" "$BOOTD_PID"
}
# ic_net_checks TEXT WHAT: the LAB-NET markers in TEXT (one boot's console).
ic_net_checks() {
  local t=$1 what=$2 line
  # (unanchored: without console=ttyS0 a marker can follow the loader's last line)
  m() { grep -a -o -m1 -E "$1.*" <<<"$t" || true; }
  line=$(m "LAB-NET-NM ")
  check "$what: NetworkManager: ${line:-no LAB-NET-NM line}" [ "$line" = "LAB-NET-NM generator=0 nm=0" ]
  line=$(m "LAB-NET-BOND bond0 ")
  check "$what: ${line:-no LAB-NET-BOND line}" says "$line" "LAB-NET-BOND bond0 slaves=eno1,eno2 mode=active-backup miimon=100 active=eno[12] perm=$MAC,$MAC2"
  line=$(m "LAB-NET bond0 ")
  check "$what: ${line:-no LAB-NET bond0 line}" grep -qE "^LAB-NET bond0 UP (.* )?$IP/24( |\$)" <<<"$line"
  line=$(m "LAB-NET bond0\\.$VID ")
  check "$what: ${line:-no LAB-NET bond0.$VID line}" grep -qE "^LAB-NET bond0\\.$VID UP (.* )?$VLAN_IP/24( |\$)" <<<"$line"
  line=$(m "LAB-NET-VLAN ")
  check "$what: ${line:-no LAB-NET-VLAN line}" [ "$line" = "LAB-NET-VLAN bond0.$VID id=$VID parent=bond0" ]
  line=$(m "LAB-NET-ROUTE default ")
  check "$what: ${line:-no default route}" says "$line" "LAB-NET-ROUTE default via $HOST_IP dev bond0*"
}

# --- 1. inspection ----------------------------------------------------------------------------
NODE=inst-0
OFF=$(serial_size)
if [[ $IC == 0 ]]; then
  T=$(now)
  create "$NODE"
else
  NODE=ic-0
  write_install_config "$WORK/install-config.yaml"
  T=$(now)
  IMPORT=(nodes import --install-config "$WORK/install-config.yaml")
  r=$(nsx "$BOOTD" --site "$SITE" --state-dir "$WORK/state" "${IMPORT[@]}" 2>&1) || die "bootd ${IMPORT[*]}: $r"
  log "bootd ${IMPORT[*]}: $(tr '\n' ' ' <<<"$r")"
  check "bootd nodes import: $NODE created" grep -q "$NODE" <<<"$r"
  check "the import's argv has no password" bash -c '! grep -q -F -- "$1" <<<"$2"' _ "$(cat "$WORK/bmc-password")" "${IMPORT[*]}"
  api GET "/v1/nodes/$NODE" >"$WORK/node-$NODE-imported.json"
  pwref=$(body_of "$(cat "$WORK/node-$NODE-imported.json")" | json "d['provider']['redfish']['password']" 2>&1 || true)
  check "$NODE's provider (its password a reference into the file): $(body_of "$(cat "$WORK/node-$NODE-imported.json")" | json "'%s as %s' % (d['provider']['redfish']['url'], d['provider']['redfish']['username'])" 2>&1 | head -c 300)" \
    grep -q "installConfigHost" <<<"$pwref"
  log "$NODE's password: $pwref"
  # The inspection boot: NetworkManager's bond and VLAN, up while the agent runs.
  PACE=0.5 within "$TIMEOUT" console_has "$OFF" 'LAB-NET-DNS ' || die "$NODE: no LAB-NET-DNS within $TIMEOUT s of the import"
  # (The first echo may go before the guest's ARP answer: one reply of 3 is enough.)
  nsx busybox ping -c 3 -w 10 -I "br0.$VID" "$VLAN_IP" >"$WORK/ping-vlan.log" 2>&1 || true
  if grep -aqE ' [1-9][0-9]* packets received' "$WORK/ping-vlan.log"; then
    ok "ping $VLAN_IP over br0.$VID (VLAN $VID through vlan-tap.py) during the inspection boot: $(grep -a 'packets transmitted' "$WORK/ping-vlan.log")"
  else
    bad "ping $VLAN_IP over br0.$VID during the inspection boot: $(tail -n 2 "$WORK/ping-vlan.log" | tr '\n' ' ')"
  fi
  check "vlan-tap.py received frames tagged VLAN $VID from the guest" \
    grep -aq "^vlan-tap: trunk -> br0.$VID: VLAN $VID tag removed: .*52:54:00:77:00:6" "$WORK/vlan-tap.log"
fi
wait_inspected "$NODE" "$TIMEOUT"
SECS[inspected]=$(since "$T")
if [[ $IC == 1 ]]; then
  INSP=$(console_from "$OFF")
  ic_net_checks "$INSP" "$NODE, inspection boot"
  password_nowhere
fi
l=$(first "$OFF" 'LAB-IGNITION-CLIENT ')
check "$NODE: the live system's Ignition ran: $l" [ "${l%% platform=*}" = "LAB-IGNITION-CLIENT fetch=0 files=0" ]
l=$(first "$OFF" "LAB-FILE /usr/local/bin/bootd-agent ")
check "$NODE: Ignition wrote the agent, bootd's binary (sha256 verified by Ignition): ${l:0:60}…" \
  [ "$l" = "LAB-FILE /usr/local/bin/bootd-agent sha256=$AGENT_SHA" ]
check "$NODE: the live system ran bootd-agent.service" console_has "$OFF" 'LAB-UNIT-START bootd-agent.service'
[[ $IC == 1 ]] || check "$NODE: the agent rebooted the machine (sysrq)" console_has "$OFF" 'sysrq: Resetting'
log "$NODE: inventory reported ${SECS[inspected]}s after the POST"
r=$(cli inventory "$NODE" 2>&1) || die "bootd nodes inventory $NODE: $r"
printf '%s\n' "$r" >"$WORK/inventory-$NODE.json"
inv() { json "$1" <"$WORK/inventory-$NODE.json"; }
I='d["reported"]["inventory"]'
check "inventory: $(inv "${I}['cpu']['count']") CPUs (the VM's 2 vCPUs)" [ "$(inv "${I}['cpu']['count']")" = 2 ]
mem=$(inv "${I}['memoryMib']")
check "inventory: ${mem} MiB of memory (the VM's 1024 MiB)" [ "$mem" = 1024 ]
check "inventory: firmware $(inv "${I}['firmware']")" [ "$(inv "${I}['firmware']")" = bios ]
disks=$(inv "' '.join('%s:%s:%d:%s' % (x['name'], x['serial'], x['sizeBytes'], x['byId']) for x in ${I}['disks'])")
check "inventory: disks $disks" [ "$disks" = "/dev/vda:disk-a:1073741824:/dev/disk/by-id/virtio-disk-a /dev/vdb:disk-b:1073741824:/dev/disk/by-id/virtio-disk-b" ]
nic=$(inv "' '.join('%s:%s' % (x['mac'], x['link']) for x in ${I}['nics'])")
if [[ $IC == 0 ]]; then
  check "inventory: NICs $nic" [ "$nic" = "$MAC:True" ]
else
  names=$(inv "' '.join('%s:%s' % (x['name'], x['link']) for x in ${I}['nics'])")
  check "inventory: two NICs with link: $names" [ "$names" = "eno1:True eno2:True" ]
  check "inventory: eno1's MAC $MAC (the boot NIC)" grep -q "^$MAC:True" <<<"$nic"
  # Each port's own MAC (a bond's port shows the bond's as its address;
  # the agent reads bonding_slave/perm_hwaddr).
  check "inventory: each NIC's own MAC: $nic (want $MAC:True $MAC2:True)" [ "$nic" = "$MAC:True $MAC2:True" ]
fi
lldp=$(inv "next((x.get('lldp') for x in ${I}['nics'] if x['mac'] == '$MAC'), None)")
check "inventory: the NIC's LLDP: $lldp" [ "$(json "'%s %s %s' % (d['systemName'], d['portId'], d['chassisId'])" <<<"$lldp" 2>/dev/null)" = "lab-tor swp7 $BR_MAC" ]
next_boot=$(inv "'%s %s' % (d['nextBoot']['boot'], d['nextBoot'].get('device'))")
check "inventory: next boot: $next_boot ($(inv "d['nextBoot'].get('why')"))" [ "$next_boot" = "install /dev/disk/by-id/virtio-disk-b" ]
check "bootd's timeline: $NODE inspected" bootd_says "node=$NODE.*inventory reported|inventory reported.*node=$NODE"

# --- 2. install, the disk boots ---------------------------------------------------------------
if [[ $IC == 1 ]]; then
  # No console=ttyS0 (an imported node has no kernelArgs), so the guest's
  # kernel line is not on the console: the node's network arguments (every
  # boot of it has them) from `bootd render ipxe`; the install boot's
  # LAB-NET markers below show the guest got them (only bond=/vlan= make
  # /init run NetworkManager); its install arguments show in LAB-INSTALL.
  nsx "$BOOTD" render ipxe "$NODE" --site "$SITE" --state-dir "$WORK/state" >"$WORK/$NODE-install.ipxe" 2>"$WORK/render.log" \
    || die "bootd render ipxe $NODE: $(tail -n 3 "$WORK/render.log")"
  kl=$(grep -a -m1 '^kernel ' "$WORK/$NODE-install.ipxe" || true)
  log "bootd render ipxe $NODE's kernel line: $kl"
  for a in "bond=bond0:eno1,eno2:mode=active-backup,miimon=100" \
      "vlan=bond0.$VID:bond0" "ifname=eno1:$MAC" "ifname=eno2:$MAC2"; do
    check "bootd's kernel line: $a" grep -qF -- " $a" <<<"$kl"
  done
  check "bootd's kernel line: ip=$IP::$HOST_IP:…:bond0:none, ip=$VLAN_IP:…:bond0.$VID:none" \
    grep -qE " ip=$IP:[^ ]*:bond0:none .*ip=$VLAN_IP:[^ ]*:bond0\\.$VID:none" <<<"$kl"
fi
T=$(now)
PACE=0.5 within "$TIMEOUT" console_has "$OFF" 'LAB-INSTALL ' || die "$NODE: no LAB-INSTALL within $TIMEOUT s after the inspection"
SECS[install]=$(since "$T")
INSTALL_OFF=$(console_from "$OFF" | grep -a -b -o 'LAB-UNIT-START bootd-agent.service' | head -n 1 | cut -d: -f1 || true)
seg() { console_from "$OFF" | tail -c +"$((INSTALL_OFF + 1))"; }   # the console after the agent started
if [[ $IC == 0 ]]; then
  cmdline=$(seg | grep -a -o 'Command line: .*coreos.inst.install_dev.*' | head -n 1 || true)
else
  cmdline="(not on the console: no console=ttyS0)"
  ic_net_checks "$(seg)" "$NODE, install boot"
fi
log "install boot's kernel line: $cmdline"
[[ $IC == 1 ]] || for _ in 1; do   # (--install-config: not on the console, above)
want_args=("coreos.inst.install_dev=/dev/disk/by-id/virtio-disk-b" "coreos.inst.image_url=http://$HOST_IP:8080/images/lab/metal.raw.xz" "coreos.inst.insecure")
for a in "${want_args[@]}"; do check "install boot's kernel line: $a" grep -qw -- "$a" <<<"$cmdline"; done
check "install boot's kernel line: coreos.inst.ignition_url=http://$HOST_IP:8080/ignition/$NODE?token=…" \
  grep -qE "coreos.inst.ignition_url=http://$HOST_IP:8080/ignition/$NODE\?token=[^ ]+" <<<"$cmdline"
check "install boot's kernel line: no live ignition.config.url" grep -qv "ignition.config.url=" <<<"$cmdline"
done
l=$(first "$OFF" 'LAB-INSTALL ')
check "$NODE: $l" [ "$l" = "LAB-INSTALL rc=0 dev=/dev/disk/by-id/virtio-disk-b" ]
T=$(now)
PACE=0.5 within "$TIMEOUT" console_has "$OFF" 'LAB-DISK-BOOT ' || die "$NODE: no LAB-DISK-BOOT within $TIMEOUT s after the install"
SECS[disk1]=$(since "$T")
"$BOOTD" render ignition "$NODE" --site "$SITE" --state-dir "$WORK/state" >"$WORK/$NODE-expected.ign" 2>"$WORK/render.log" \
  || die "bootd render ignition $NODE: $(tail -n 3 "$WORK/render.log")"
WANT_SHA=$(sha256sum "$WORK/$NODE-expected.ign" | cut -d' ' -f1)
l=$(first "$OFF" 'LAB-DISK-BOOT ')
check "$NODE: $l (= bootd render ignition)" [ "$l" = "LAB-DISK-BOOT ignition-sha256=$WANT_SHA boots=1" ]
how=$(seg | grep -a -o -m1 "bootd: $NODE installed already[^.]*" || true)
log "$NODE: after the install the machine network-booted (sushy keeps Pxe first) and bootd said: ${how:-nothing}"
check "$NODE: Ignition served once (to coreos-installer)" [ "$(ignition_served "$NODE")" = 1 ]
check "$NODE: installed once its metal image was sent in full (not at its Ignition)" \
  grep -aq "installed (its metal image was sent in full) node=$NODE " <(bootd_log)
PACE=0.5 within 60 domstate_is "shut off" || die "$DOM: still $(lv domstate "$DOM") 60 s after the disk boot (the installed OS powers off)"
api GET "/v1/nodes/$NODE" >"$WORK/node-$NODE.json"
phase=$(body_of "$(cat "$WORK/node-$NODE.json")" | json 'd["phase"]')
check "$NODE: phase $phase" [ "$phase" = Ready ]

# Again, through the BMC: the disk, no install.
OFF2=$(serial_size)
T=$(now)
rf_power On
PACE=0.5 within "$TIMEOUT" console_has "$OFF2" 'LAB-DISK-BOOT ' || die "$NODE: no LAB-DISK-BOOT within $TIMEOUT s after Redfish On"
SECS[disk2]=$(since "$T")
l=$(first "$OFF2" 'LAB-DISK-BOOT ')
check "$NODE, powered on again: $l" [ "$l" = "LAB-DISK-BOOT ignition-sha256=$WANT_SHA boots=2" ]
check "$NODE, powered on again: no install, no live system" lacks "$OFF2" "LAB-INSTALL|LAB-IGNITION|Command line: .*coreos.inst"
check "$NODE, powered on again: Ignition not served again" [ "$(ignition_served "$NODE")" = 1 ]
PACE=0.5 within 60 domstate_is "shut off" || die "$DOM: still $(lv domstate "$DOM") after the second disk boot"
check "disk-a: blkid -p finds no signature" no_signature "$WORK/disk-a.img"
labels=$(sgdisk -p "$WORK/disk-b.img" 2>/dev/null | awk '/^ +[0-9]+ /{printf "%s ", $7}')
check "disk-b: the metal image's partitions: $labels" [ "$labels" = "BIOS-BOOT EFI-SYSTEM boot root " ]

# --- 3. conditions -----------------------------------------------------------------------------
c=$(condition "$NODE" Inspected)
check "$NODE: Inspected ${c%%|*}: ${c#*|}" [ "${c%%|*}" = True ]
check "$NODE: Inspected's message is what bootd logged when the inventory came" bootd_says_exactly "${c#*|}"
c=$(condition "$NODE" DiskChosen)
check "$NODE: DiskChosen ${c%%|*}: ${c#*|}" [ "${c%%|*}" = True ]
# Deleted: an inspected machine is released with its disks wiped (the
# agent's wipe, booted from the network once more), then powered off.
OFF=$(serial_size)
T=$(now)
delete "$NODE"
SECS[release]=$(since "$T")
[[ $IC == 1 ]] || check "$NODE, deleted: the machine booted the agent's wipe" console_has "$OFF" "bootd-agent wipe --post http://$HOST_IP:8080/inventory/$NODE/wiped"
check "$NODE, deleted: bootd's log: disks wiped" bootd_says "wiped /dev/vda \\(/dev/disk/by-id/virtio-disk-a\\), /dev/vdb \\(/dev/disk/by-id/virtio-disk-b\\).*node=$NODE"
check "$NODE, deleted: disk-b: blkid -p finds no signature any more" no_signature "$WORK/disk-b.img"
check "$NODE, deleted: disk-a: still none" no_signature "$WORK/disk-a.img"
log "$NODE deleted (wiped, off) ${SECS[release]}s after the DELETE"

if [[ $IC == 1 ]]; then
  password_nowhere
  log "times: import -> inspected ${SECS[inspected]}s, -> LAB-INSTALL ${SECS[install]}s, -> disk boot 1 ${SECS[disk1]}s, Redfish On -> disk boot 2 ${SECS[disk2]}s, DELETE -> wiped and gone ${SECS[release]}s; whole run $(since "$T0")s"
  harness_verdict
  exit 0
fi
# --- 4. below the minimums ---------------------------------------------------------------------
# The same machine as a master: OpenShift's documented minimums, the
# site's default for the role (4 CPUs, 16 GiB, a 100 GiB disk).
NODE=inst-1
OFF=$(serial_size)
T=$(now)
create "$NODE" master
wait_inspected "$NODE" "$TIMEOUT"
WHY="below the master minimums: CPUs: 2 < 4, memory: 1.0 GiB < 16 GiB, disk /dev/vdb: 1 GiB < 100 GiB"
# iPXE's console wraps at 80 columns: the script's line is checked up to there.
WHY_LINE="below the master minimums: CPUs: 2 < 4"
PACE=0.5 within 120 console_has "$OFF" "bootd: $NODE does not install" || die "$NODE: its console never said it does not install"
SECS[refused]=$(since "$T")
l=$(first "$OFF" "bootd: $NODE does not install")
check "$NODE: the script says: $l" grep -qF "bootd: $NODE does not install: $WHY_LINE" <<<"$l"
check "$NODE: no install" lacks "$OFF" "LAB-INSTALL|coreos.inst.install_dev"
c=$(condition "$NODE" BelowMinimums)
check "$NODE: BelowMinimums ${c%%|*}: ${c#*|}" says "$c" "True|*$WHY*"
r=$(cli inventory "$NODE" 2>&1) || die "bootd nodes inventory $NODE: $r"
nb=$(json "'%s %s' % (d['nextBoot']['boot'], d['nextBoot'].get('reason'))" <<<"$r")
check "$NODE: next boot: $nb" [ "$nb" = "none below_minimums" ]
delete "$NODE"
log "$NODE deleted, $DOM off"

log "times: POST -> inspected ${SECS[inspected]}s, -> LAB-INSTALL ${SECS[install]}s, -> disk boot 1 ${SECS[disk1]}s, Redfish On -> disk boot 2 ${SECS[disk2]}s, DELETE -> wiped and gone ${SECS[release]}s, second node POST -> refused ${SECS[refused]}s; whole run $(since "$T0")s"
harness_verdict
