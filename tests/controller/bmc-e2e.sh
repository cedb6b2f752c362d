#!/usr/bin/env bash
# The controller API's redfish and ipmi providers against BMC emulators that
# drive real libvirt/QEMU VMs: API call -> BMC (boot override + power on) ->
# the VM network-boots from bootd -> the guest fetches its Ignition -> Ready.
#
# Usage: tests/controller/bmc-e2e.sh [--bootd BOOTD] [--infra-only] [--timeout SECS]
#          [--workdir DIR]
#
# Inside a private network namespace (10.77.0.0/24 on br0, the harness's lab_netns):
#  0. dnsmasq sends IPv6 router advertisements only (bootd serves DHCP);
#     virtlogd + libvirtd run there with private state (tests/controller/bmc-lab.sh);
#     two stopped TCG domains, SeaBIOS, an empty disk first in the boot order,
#     one virtio NIC on br0: bmc-rf (52:54:00:77:00:60), bmc-ipmi (…:61);
#     sushy-emulator (Redfish, libvirt driver, Basic auth) on 127.0.0.1:8000 and,
#     with a throwaway CA's certificate, on https://127.0.0.1:8444 (8443 is bootd's
#     HTTPS in the lab site); vbmcd with an IPMI BMC for bmc-ipmi on 127.0.0.1:6230.
#     The BMC password is random per run, only in WORKDIR/bmc-password (mode 600).
#  1. Redfish: the system of bmc-rf at /redfish/v1/Systems/<domain uuid>, its
#     EthernetInterfaces list the VM's MAC; the HTTPS instance fails to verify
#     without the CA and verifies with it. IPMI: chassis power status answers.
# --infra-only (no providers needed): bootd runs the lab site plus the two VMs as
#  static site nodes; curl PATCHes the Redfish boot override to Pxe and powers
#  bmc-rf on, ipmitool sets bootdev pxe and powers bmc-ipmi on; each VM must
#  print "LAB-IGNITION sha256=X" (X = sha256 of `bootd render ignition NAME`).
#  Then each VM is powered on a second time and what it boots is reported
#  (both emulators make the override persistent: notes by that step).
# Default (the providers): bootd runs the lab site plus host.api with
#  `redfish: {}` and `ipmi: {}`; per node, one VM at a time: POST /v1/nodes with
#  provider redfish (no macs: read from the BMC) / ipmi, `bootd nodes wait NAME`
#  exits 0 (Ready), the LAB-IGNITION check, a second power-on through the BMC
#  after which the VM must not fetch its Ignition again (second_boot_check),
#  DELETE -> 404 within 60 s and the domain "shut off".
# Then discovery: the Redfish VM, in no node now, is started by hand; it reports
#  itself (bootd discovered list shows its UUID and MAC), `bootd discovered
#  adopt` makes it node disc-0, and at its next retry it boots as disc-0 and
#  fetches disc-0's Ignition, with one firmware start (no power cycle).
# Last, the BMC password must appear in no file of WORKDIR but the emulators'
# own (bootd's logs and state included) and in no process's argv.
# Prints "PASS bmc-e2e <infra|providers> rf=<s>s ipmi=<s>s" (exit 0) or
# "FAIL bmc-e2e ..." with logs (exit 1); usage errors exit 2. Root only.
set -Eeuo pipefail

HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
# shellcheck source=tests/lib/harness.sh
. "$HERE/../lib/harness.sh"   # $REPO
# shellcheck source=tests/lib/vm.sh
. "$HERE/../lib/vm.sh"
BOOTD="" TIMEOUT=300 WORKDIR="" INFRA=0
usage() { sed -n '6,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --bootd) BOOTD=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --workdir) WORKDIR=$2; shift 2 ;;
    --infra-only) INFRA=1; shift ;;
    -h|--help) usage ;;
    *) echo "bmc-e2e.sh: unknown argument $1" >&2; usage ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "bmc-e2e.sh: must run as root (netns, libvirtd)" >&2; exit 2; }
[[ $TIMEOUT =~ ^[0-9]+$ ]] || { echo "bmc-e2e.sh: bad --timeout $TIMEOUT" >&2; exit 2; }
MODE=providers
[[ $INFRA == 1 ]] && MODE=infra
export BMC_VENV=${BMC_VENV:-/opt/bmc-venv}

"$HERE/bmc-deps.sh" >&2 || { echo "FAIL bmc-e2e $MODE: bmc-deps.sh failed"; exit 1; }
bootd_under_test "$BOOTD" bmc-e2e.sh

RF_NODE=bmc-rf RF_MAC=52:54:00:77:00:60 RF_IP=10.77.0.60 RF_PORT=8000 RF_TLS_PORT=8444
IPMI_NODE=bmc-ipmi IPMI_MAC=52:54:00:77:00:61 IPMI_IP=10.77.0.61 IPMI_PORT=6230
HOST_IP=10.77.0.1 API=https://10.77.0.1:9443
# The run's folder is kept (tests/secrets/e2e.sh greps it afterwards).
lab_run_init "bmc-e2e $MODE" "$WORKDIR" "$REPO/target/lab-runs/bmc-e2e-$$"
T0=$(now)

# shellcheck source=tests/controller/bmc-lab.sh
. "$HERE/bmc-lab.sh"
# SECRETS_AUDIT_DIR=DIR (tests/secrets/e2e.sh): the secrets audit's hooks,
# tests/secrets/audit.sh; bootd and the CLI log at trace.
AUDIT_DIR=${SECRETS_AUDIT_DIR:-}
# shellcheck source=tests/secrets/audit.sh
[[ -z $AUDIT_DIR ]] || . "$REPO/tests/secrets/audit.sh"
audit() { [[ -z $AUDIT_DIR ]] || { local step=$1; shift; "audit_$step" "$@"; }; }   # audit STEP ARGS...

# die MESSAGE: the consoles and the logs of bootd, libvirt, QEMU and the
# emulators, then the FAIL line.
die() {
  show_logs "$WORK"/*-serial.log "$WORK"/bootd-*.log "$WORK/libvirtd.log" "$WORK"/lv/log/qemu/*.log \
    "$WORK"/sushy-*.log "$WORK/vbmcd.log"
  fail "$*"
}

[[ -d $REPO/target/lab-images ]] || nice -n 10 "$REPO/tests/lab/guest.sh" "$REPO/target/lab-images" >&2 || die "guest.sh failed"
[[ -d $REPO/target/lab-tftp ]] || nice -n 10 "$REPO/tests/lab/tftp-root.sh" "$REPO/target/lab-tftp" >&2 || die "tftp-root.sh failed"

# --- the site: the lab site, plus the BMC nodes or host.api ----------------------------------
SITE=$WORK/site.yaml
if [[ $INFRA == 1 ]]; then
  # Without the providers the two VMs are static site nodes.
  lab_site "$SITE" host.stateDir="$WORK/state" \
    nodes+="{name: $RF_NODE, role: worker, live: true, macs: ['$RF_MAC'], ip: $RF_IP, kernelArgs: [console=ttyS0]}" \
    nodes+="{name: $IPMI_NODE, role: worker, live: true, macs: ['$IPMI_MAC'], ip: $IPMI_IP, kernelArgs: [console=ttyS0]}" \
    || die "site not written"
else
  api_tokens
  # Plus a dynamic pool and discovery, for the unknown-machine step.
  lab_site "$SITE" host.stateDir="$WORK/state" host.api.listen="$HOST_IP:9443" host.api.url="$API" \
    host.api.tokens.file="$WORK/api-tokens" host.api.deadline=10m host.api.bmcFiles="$WORK" \
    host.api.redfish.powerOffTimeout=10s host.api.ipmi.powerOffTimeout=10s \
    networks.lab.pool="{start: 10.77.0.200, end: 10.77.0.220}" discovery="{enabled: true, retry: 5s}" \
    || die "site not written"
fi
if [[ -n $AUDIT_DIR ]]; then
  [[ $INFRA == 0 ]] || die "SECRETS_AUDIT_DIR needs the providers (no --infra-only)"
  audit init
  audit site
fi
"$BOOTD" --check-config "$SITE" >"$WORK/check.log" 2>&1 || die "site does not validate: $(cat "$WORK/check.log")"

# --- network: the lab namespace (IPv6 too), router ads (bootd serves DHCP) ----------------
# Everything left in it at exit (QEMU, vbmcd's per-BMC children) goes with it.
lab_netns "labbmc-$$" "$HOST_IP/24" fd77::1/64
lab_ra

# --- libvirt, the two VMs, the BMC emulators ------------------------------------------------
bmc_libvirt_start
bmc_pool
bmc_define "$RF_NODE" "$RF_MAC"
bmc_define "$IPMI_NODE" "$IPMI_MAC"
RF_UUID=$(lv domuuid "$RF_NODE")
log "libvirtd (PID $LIBVIRTD_PID) and virtlogd (PID $VIRTLOGD_PID) up, domains defined, $(since "$T0")s"
bmc_credentials
bmc_ca
bmc_sushy rf "$RF_PORT" "$RF_UUID"
bmc_sushy rf-tls "$RF_TLS_PORT" "$RF_UUID" tls
bmc_vbmc "$IPMI_NODE" "$IPMI_PORT"
log "sushy-emulator on :$RF_PORT and :$RF_TLS_PORT (TLS), vbmcd with $IPMI_NODE on :$IPMI_PORT, $(since "$T0")s"
audit start

# --- 1. the Redfish system and its NIC; TLS; IPMI ------------------------------------------
RF=http://127.0.0.1:$RF_PORT
r=$(nsx curl -sS --max-time 10 -o /dev/null -w '%{http_code}' "$RF/redfish/v1/Systems")
[[ $r == 401 ]] || die "Redfish without credentials should be 401, got $r"
r=$(rf GET "$RF/redfish/v1/Systems")
[[ $(status_of "$r") == 200 ]] || die "GET /redfish/v1/Systems: $r"
members=$(body_of "$r" | json '" ".join(m["@odata.id"] for m in d["Members"])')
RF_SYSTEM=/redfish/v1/Systems/$RF_UUID
RF_URL=$RF$RF_SYSTEM
[[ " $members " == *" $RF_SYSTEM "* ]] || die "Systems members ($members) lack $RF_SYSTEM"
r=$(rf GET "$RF_URL")
[[ $(status_of "$r") == 200 && $(body_of "$r" | json 'd["Name"]') == "$RF_NODE" ]] || die "GET $RF_SYSTEM: $r"
r=$(rf GET "$RF_URL/EthernetInterfaces")
[[ $(status_of "$r") == 200 ]] || die "GET EthernetInterfaces: $r"
nics=$(body_of "$r" | json '" ".join(m["@odata.id"] for m in d["Members"])')
macs=""
for n in $nics; do
  r=$(rf GET "$RF$n")
  [[ $(status_of "$r") == 200 ]] || die "GET $n: $r"
  macs+=" $(body_of "$r" | json 'd["MACAddress"]')"
done
[[ " $macs " == *" $RF_MAC "* ]] || die "EthernetInterfaces of $RF_SYSTEM list MACs ($macs), not $RF_MAC"
log "Redfish: $RF_URL (members: $members), NICs:$macs"
RF_TLS=https://127.0.0.1:$RF_TLS_PORT
rc=0; nsx curl -sS --max-time 10 --netrc-file "$WORK/bmc-netrc" -o /dev/null "$RF_TLS$RF_SYSTEM" 2>"$WORK/tls-noca.err" || rc=$?
[[ $rc == 60 ]] || die "HTTPS without the CA: curl exit $rc (want 60, certificate not verified): $(cat "$WORK/tls-noca.err")"
r=$(rf GET "$RF_TLS$RF_SYSTEM")
[[ $(status_of "$r") == 200 ]] || die "HTTPS with the CA: $r"
log "Redfish over TLS: unverifiable without bmc-ca.pem (curl 60), 200 with it"
p=$(ipmi "$IPMI_PORT" chassis power status 2>&1) || die "ipmitool chassis power status: $p"
[[ $p == "Chassis Power is off" ]] || die "IPMI power status: $p"

# --- bootd ----------------------------------------------------------------------------------
# Started as root, bootd serves as an unprivileged user (here nobody): the
# secrets it re-reads (API tokens, the BMC password) are handed to it, as an
# operator would (docs/bootd.md). Its log is bootd-1.log (tests/secrets/e2e.sh
# reads it). Ready when /healthz answers, and with the providers when the
# API does too.
chown nobody "$WORK/bmc-password" "$WORK/api-tokens" 2>/dev/null || chown nobody "$WORK/bmc-password"
start_bootd --bin nice --log "$WORK/bootd-1.log" --timeout 30 ${AUDIT_DIR:+--env RUST_LOG=trace} \
  -- -n 5 "$BOOTD" --site "$SITE" --state-dir "$WORK/state" --user nobody || die "bootd did not start"
[[ $INFRA == 1 ]] || wait_up "$BOOTD_PID" 30 "$WORK/bootd-1.log" "bootd's API" api_up
cli() { nsx env ${AUDIT_DIR:+RUST_LOG=trace} "$BOOTD" --site "$SITE" --state-dir "$WORK/state" nodes "$@"; }
# What the waits below look for (within, tests/lib/vm.sh).
node_gone() { [[ $(status_of "$(api GET "/v1/nodes/$1")") == 404 ]]; }
node_failed() { [[ $(body_of "$(api GET "/v1/nodes/$1")" | json 'd["phase"]' 2>/dev/null) == Failed ]]; }
console_says() { serial_from "$1" "$2" | grep -a -q "$3"; }   # DOMAIN OFFSET TEXT
discovered_lists() { # PATTERN: `bootd discovered list` shows it (its output in DISCOVERED)
  DISCOVERED=$(nsx "$BOOTD" --site "$SITE" --state-dir "$WORK/state" discovered list 2>&1 || true)
  grep -q "$1" <<<"$DISCOVERED"
}
log "bootd up, $(since "$T0")s (workdir $WORK)"
audit requests

# --- helpers over the VMs' consoles -------------------------------------------------------
serial_size() { stat -c %s "$WORK/$1-serial.log" 2>/dev/null || echo 0; }
serial_from() { tail -c +"$(( $2 + 1 ))" "$WORK/$1-serial.log" 2>/dev/null | tr -d '\r' || true; }
# wait_ignition NODE OFFSET SECS [DOMAIN]: the first LAB-IGNITION line after
# OFFSET on DOMAIN's console (default: the domain named as the node), its
# sha256 compared with `bootd render ignition NODE`.
wait_ignition() {
  local node=$1 off=$2 line dom=${4:-$1}
  line=$(wait_ignition_line "$3" "$WORK/$dom-serial.log" "$off")
  [[ -n $line ]] || die "$node: no LAB-IGNITION line on its console within $3 s"
  [[ $line == LAB-IGNITION-FAILED* ]] && die "$node: guest: ${line#LAB-IGNITION-FAILED }"
  local got want
  got=$(ignition_sha "$line")
  "$BOOTD" render ignition "$node" --site "$SITE" --state-dir "$WORK/state" >"$WORK/$node-expected.ign" 2>"$WORK/render.log" \
    || die "bootd render ignition $node: $(tail -n 3 "$WORK/render.log" | tr '\n' ' ')"
  want=$(sha256sum "$WORK/$node-expected.ign" | cut -d' ' -f1)
  [[ $got == "$want" ]] || die "$node: ignition mismatch: guest sha256=$got, bootd render ignition sha256=$want"
  log "$node: guest: $line"
}
wait_domstate() { PACE=0.5 within "$3" domstate_is "$1" "$2"; }   # wait_domstate DOMAIN STATE SECS
domstate_is() { [[ $(lv domstate "$1" 2>/dev/null) == "$2" ]]; }
ignition_served() {   # how many times bootd's logs say it served NODE's Ignition
  cat "$WORK"/bootd-*.log | console_clean /dev/stdin | grep -a -c -E "Ignition (pointer config )?served.*node=$1( |\$)" || true
}
boot_xml() { lv dumpxml --inactive "$1" | grep -E "<boot " | tr -s ' ' | tr '\n' ' '; }
# The BMCs' power actions. Both emulators make a restart of a powered-off domain
# a no-op (sushy: ForceRestart only if active; vbmc: reset only if active), and
# the lab guest powers itself off after its Ignition: a second boot is a power-on.
rf_power() {
  local r
  r=$(rf POST "$RF_URL/Actions/ComputerSystem.Reset" "{\"ResetType\":\"$1\"}")
  [[ $(status_of "$r") =~ ^20[0-9]$ ]] || die "Redfish Reset $1: $r"
}
power_on_again() {   # power_on_again rf|ipmi DOMAIN: ForceRestart/reset when running, On/on when off
  local how=$1 dom=$2 state
  state=$(lv domstate "$dom")
  case $how,$state in
    rf,running) rf_power ForceRestart ;;
    rf,*) rf_power On ;;
    ipmi,running) ipmi "$IPMI_PORT" chassis power reset >/dev/null || die "ipmitool chassis power reset" ;;
    ipmi,*) ipmi "$IPMI_PORT" chassis power on >/dev/null || die "ipmitool chassis power on" ;;
  esac
  log "$dom: second boot through $how (domain was $state)"
}
# What a second boot did, from the console after OFFSET: waits until the guest
# printed its marker, SeaBIOS found no bootable device, or the domain went off.
describe_second_boot() {   # describe_second_boot DOMAIN OFFSET SECS -> one line
  local dom=$1 off=$2 seg
  PACE=0.5 within "$3" second_boot_over "$dom" "$off" || true
  seg=$(serial_from "$dom" "$off" | sed -e 's/\x1b\[[0-9;=?]*[a-zA-Z]//g' -e 's/\x1b[a-zA-Z]//g')
  local what=()
  grep -a -q "iPXE" <<<"$seg" && what+=("iPXE ran")
  grep -a -q -E "^Booting from Hard Disk" <<<"$seg" && what+=("SeaBIOS tried the disk")
  grep -a -q "No bootable device" <<<"$seg" && what+=("no bootable device")
  grep -a -q -E '^LAB-IGNITION ' <<<"$seg" && what+=("network-booted: $(grep -a -m1 -E '^LAB-IGNITION ' <<<"$seg" | cut -c1-40)...")
  [[ ${#what[@]} -gt 0 ]] || what+=("nothing recognisable on the console")
  echo "${what[*]}; domain $(lv domstate "$dom")"
}
second_boot_over() { # DOMAIN OFFSET: the marker, no bootable device, or the domain not running
  grep -a -q -E '^LAB-IGNITION|No bootable device' <<<"$(serial_from "$1" "$2")" && return 0
  [[ $(lv domstate "$1") != running ]]
}

# --- 2. --infra-only: the emulators drive the VMs by hand -----------------------------------
# Seen here (sushy-tools 2.2.0, virtualbmc 3.3.0, libvirt 9.0), written to WORK/notes.txt:
# - sushy ignores BootSourceOverrideEnabled: PATCH "Once" reads back "Continuous"
#   (NIC <boot order='1'/>, disk order 2 in the domain XML, persistent); a second
#   power-on network-boots again. PATCH Target "Hdd" leaves only the disk bootable.
# - vbmc `chassis bootdev pxe` rewrites <os><boot dev='network'/> persistently,
#   although `chassis bootparam get 5` says "Options apply to only next boot";
#   a second power-on network-boots again.
# - A restart of a powered-off domain is a no-op in both (sushy ForceRestart: 204,
#   vbmc `chassis power reset`: exit 0), and the lab guest powers itself off after
#   its Ignition: a second boot needs On / `chassis power on`.
# - The guest fetches its Ignition twice per boot (its wget, then the real
#   Ignition client): two "Ignition served" lines in bootd's log.
if [[ $INFRA == 1 ]]; then
  NOTES=()
  # Redfish: boot override once to PXE, power on.
  off=$(serial_size "$RF_NODE")
  # What the provider's mode "Legacy" becomes (see bmc_define on the loader).
  r=$(rf PATCH "$RF_URL" '{"Boot":{"BootSourceOverrideMode":"Legacy"}}')
  [[ $(status_of "$r") =~ ^20[04]$ ]] || die "Redfish PATCH BootSourceOverrideMode Legacy: $r"
  r=$(rf PATCH "$RF_URL" '{"Boot":{"BootSourceOverrideTarget":"Pxe","BootSourceOverrideEnabled":"Once"}}')
  [[ $(status_of "$r") =~ ^20[04]$ ]] || die "Redfish PATCH boot override: $r"
  T_RF=$(now)
  rf_power On
  wait_ignition "$RF_NODE" "$off" "$TIMEOUT"
  RF_SECS=$(since "$T_RF")
  log "$RF_NODE: Reset On -> LAB-IGNITION in ${RF_SECS}s"
  r=$(rf GET "$RF_URL")
  NOTES+=("$RF_NODE after PATCH Once: Redfish Boot $(body_of "$r" | json '{k: d["Boot"].get(k) for k in ("BootSourceOverrideEnabled", "BootSourceOverrideTarget", "BootSourceOverrideMode")}'); domain XML: $(boot_xml "$RF_NODE")")
  wait_domstate "$RF_NODE" "shut off" 120 || die "$RF_NODE: still $(lv domstate "$RF_NODE") 120 s after its Ignition (the guest powers off)"
  # A restart of a powered-off system: sushy does nothing.
  rf_power ForceRestart
  sleep 3
  NOTES+=("$RF_NODE: Redfish ForceRestart while shut off -> domain $(lv domstate "$RF_NODE") (no-op)")
  off=$(serial_size "$RF_NODE")
  power_on_again rf "$RF_NODE"
  NOTES+=("$RF_NODE second boot (Reset On, no new PATCH): $(describe_second_boot "$RF_NODE" "$off" 180)")
  lv domstate "$RF_NODE" | grep -q "shut off" || rf_power ForceOff
  wait_domstate "$RF_NODE" "shut off" 30 || die "$RF_NODE: not off after ForceOff"

  # IPMI: bootdev pxe, power on.
  off=$(serial_size "$IPMI_NODE")
  ipmi "$IPMI_PORT" chassis bootdev pxe >"$WORK/ipmi-bootdev.out" 2>&1 || die "ipmitool chassis bootdev pxe: $(cat "$WORK/ipmi-bootdev.out")"
  T_IPMI=$(now)
  ipmi "$IPMI_PORT" chassis power on >/dev/null || die "ipmitool chassis power on"
  wait_ignition "$IPMI_NODE" "$off" "$TIMEOUT"
  IPMI_SECS=$(since "$T_IPMI")
  log "$IPMI_NODE: chassis power on -> LAB-IGNITION in ${IPMI_SECS}s"
  bp=$(ipmi "$IPMI_PORT" chassis bootparam get 5 2>&1 | grep -E "Options apply|Boot Device Selector" | sed 's/^ *- *//' | tr '\n' ';' || true)
  NOTES+=("$IPMI_NODE after bootdev pxe: bootparam 5: $bp domain XML: $(boot_xml "$IPMI_NODE")")
  wait_domstate "$IPMI_NODE" "shut off" 120 || die "$IPMI_NODE: still $(lv domstate "$IPMI_NODE") 120 s after its Ignition"
  rc=0; out=$(ipmi "$IPMI_PORT" chassis power reset 2>&1) || rc=$?
  sleep 3
  NOTES+=("$IPMI_NODE: chassis power reset while off -> exit $rc ($(tr '\n' ' ' <<<"$out" | cut -c1-80)), domain $(lv domstate "$IPMI_NODE")")
  off=$(serial_size "$IPMI_NODE")
  power_on_again ipmi "$IPMI_NODE"
  NOTES+=("$IPMI_NODE second boot (power on, no new bootdev): $(describe_second_boot "$IPMI_NODE" "$off" 180)")
  lv domstate "$IPMI_NODE" | grep -q "shut off" || ipmi "$IPMI_PORT" chassis power off >/dev/null
  wait_domstate "$IPMI_NODE" "shut off" 30 || die "$IPMI_NODE: not off after power off"
  NOTES+=("bootd served Ignition: $RF_NODE $(ignition_served "$RF_NODE")x, $IPMI_NODE $(ignition_served "$IPMI_NODE")x")
  printf 'bmc-e2e.sh: note: %s\n' "${NOTES[@]}" | tee "$WORK/notes.txt" >&2
fi

# --- 2'. the providers: one VM at a time through the API --------------------------------------
# second_boot_check NODE DOMAIN SERVED_BEFORE OFFSET: the Ready node's VM was
# powered on a second time through its BMC. Neither emulator keeps a one-time
# override one-time (see the notes above), so the VM network-boots again: bootd
# must answer with the local-disk script (the node installed: it fetched its
# Ignition), the console must say so, the node must not fetch its Ignition
# again, and its conditions must flag the install loop.
second_boot_check() {
  local node=$1 dom=$2 before=$3 off=$4 seen
  seen=$(describe_second_boot "$dom" "$off" 180)
  log "$node: second boot: $seen"
  [[ $(ignition_served "$node") == "$before" ]] \
    || die "$node: the second boot fetched its Ignition again (served $before -> $(ignition_served "$node")); console: $seen"
  PACE=0.5 within 60 console_says "$dom" "$off" "bootd: $node installed already" || die "$node: the second boot's console never showed bootd's local-disk script; console: $seen"
  r=$(api GET "/v1/nodes/$node")
  [[ $(status_of "$r") == 200 ]] || die "GET /v1/nodes/$node after the second boot: $r"
  local loop
  loop=$(body_of "$r" | json '" ".join(c["status"] for c in d["conditions"] if c["type"] == "InstallLoop")')
  [[ $loop == True ]] || die "$node: no InstallLoop condition after the second boot: $(body_of "$r" | head -c 600)"
  log "$node: second boot told to boot its disk; InstallLoop flagged; Ignition not fetched again"
}

# redfish_tls_checks: the same system through sushy's HTTPS instance. Without
# its CA the node fails and says the certificate does not verify (nothing is
# powered on); with caBundle it network-boots and turns Ready.
redfish_tls_checks() {
  local url="https://127.0.0.1:$RF_TLS_PORT$RF_SYSTEM" r node=bmc-rf-tls body msg out phase
  body="{\"name\":\"$node\",\"role\":\"worker\",\"ip\":\"$RF_IP\",\"kernelArgs\":[\"console=ttyS0\"],\"live\":true,\"provider\":{\"redfish\":{\"url\":\"$url\",\"username\":\"admin\",\"password\":$PW_REF}}}"
  r=$(api POST /v1/nodes "$body")
  [[ $(status_of "$r") == 201 ]] || die "POST /v1/nodes $node (no CA): $r"
  PACE=0.5 within 60 node_failed "$node" || true
  r=$(api GET "/v1/nodes/$node")
  phase=$(body_of "$r" | json 'd["phase"]')
  msg=$(body_of "$r" | json 'd["message"]')
  [[ $phase == Failed && $msg == *"certificate does not verify"* ]] || die "$node without caBundle: phase $phase, message: $msg"
  [[ $(lv domstate "$RF_NODE") == "shut off" ]] || die "$node without caBundle: the domain was powered on"
  log "$node without caBundle: Failed: $msg"
  r=$(api DELETE "/v1/nodes/$node")
  PACE=0.5 within 30 node_gone "$node" || true
  # Again with the CA, through the CLI that needs no MAC: `nodes import-bmc`.
  out=$(cli import-bmc "$url" --name "$node" --role worker --ip "$RF_IP" --username admin --live \
          --password-file "$WORK/bmc-password" --ca-bundle "$WORK/bmc-ca.pem" 2>&1) \
    || die "bootd nodes import-bmc $node: $out"
  log "$out"
  nodes_wait "$node" 240 "$WORK/wait-$node.out" \
    || die "bootd nodes wait $node (caBundle) exited $?: $(tail -n 1 "$WORK/wait-$node.out")"
  api GET "/v1/nodes/$node" >"$WORK/node-$node.json"
  log "$node with caBundle over HTTPS: Ready"
  r=$(api DELETE "/v1/nodes/$node")
  PACE=0.5 within 60 node_gone "$node" || true
  wait_domstate "$RF_NODE" "shut off" 60 || die "$node: domain $(lv domstate "$RF_NODE") after the delete"
}

# discovery_check: the Redfish VM, no node's MAC any more, is started by hand
# (as a machine nobody registered); it reports itself, `bootd discovered list`
# shows its UUID (the domain's, through SMBIOS) and MAC, the CLI adopts it,
# and at its next retry (5 s) it boots as that node and fetches that node's
# Ignition, without a power cycle.
discovery_check() {
  local node=disc-0 off out t uuid
  uuid=$(tr 'A-F' 'a-f' <<<"$RF_UUID")
  r=$(rf PATCH "$RF_URL" '{"Boot":{"BootSourceOverrideTarget":"Pxe","BootSourceOverrideEnabled":"Once"}}')
  [[ $(status_of "$r") =~ ^20[04]$ ]] || die "Redfish PATCH boot override (discovery): $r"
  off=$(serial_size "$RF_NODE")
  t=$(now)
  lv start "$RF_NODE" >/dev/null || die "virsh start $RF_NODE"
  DISCOVERED=""
  PACE=1 within 120 discovered_lists "^$uuid .*$RF_MAC" || true
  out=$DISCOVERED
  grep -q "^$uuid .*$RF_MAC" <<<"$out" || die "$RF_NODE never appeared in bootd discovered list: $out"
  log "discovered after $(since "$t")s: $(grep "^$uuid" <<<"$out")"
  serial_from "$RF_NODE" "$off" | grep -a -q "discovered as $uuid" || die "the VM's console does not show the discovery answer"
  out=$(nsx "$BOOTD" --site "$SITE" --state-dir "$WORK/state" discovered adopt "$uuid" --name "$node" --role worker --live 2>&1) \
    || die "bootd discovered adopt: $out"
  log "$out"
  [[ $(lv domstate "$RF_NODE") == running ]] || die "$RF_NODE is not running at adoption"
  wait_ignition "$node" "$off" 120 "$RF_NODE"
  # One firmware start since the power-on: the node's boot came from the
  # retry, not from a power cycle.
  local starts
  starts=$(serial_from "$RF_NODE" "$off" | grep -a -c "iPXE initialising devices" || true)
  [[ $starts == 1 ]] || die "$RF_NODE: the firmware started $starts times after the power-on (a power cycle?)"
  log "$node: adopted and booted as the node without a power cycle in $(since "$t")s"
  out=$(nsx "$BOOTD" --site "$SITE" --state-dir "$WORK/state" discovered list 2>&1 || true)
  grep -q "^$uuid " <<<"$out" && die "$uuid still listed after its adoption"
  wait_domstate "$RF_NODE" "shut off" 120 || lv destroy "$RF_NODE" >/dev/null 2>&1 || true
}

# delete_node NODE DOMAIN: DELETE; the node goes within 60 s and the BMC
# powers the machine off.
delete_node() {
  local node=$1 dom=$2 r
  r=$(api DELETE "/v1/nodes/$node")
  [[ $(status_of "$r") =~ ^20[024]$ ]] || die "DELETE /v1/nodes/$node: $r"
  PACE=0.5 within 60 node_gone "$node" || die "$node still there 60 s after DELETE"
  wait_domstate "$dom" "shut off" 60 || die "$dom: $(lv domstate "$dom") after the delete, not shut off"
  log "$node: deleted, $dom shut off"
}

# media_check: the Redfish VM as node bmc-vm with boot: virtualMedia. bootd
# builds the node's ISO, sushy fetches it (InsertMedia) into its libvirt pool
# and attaches it as a CD, the VM boots it once (GRUB from the ISO, no iPXE,
# no network boot), fetches its Ignition and turns Ready; the ISO is then
# ejected (the BMC says Inserted false); a second power-on does not run the
# installer again (no second Ignition fetch, no second GRUB from the ISO).
media_check() {
  local node=bmc-vm dom=$RF_NODE t off before seg r ins
  off=$(serial_size "$dom")
  t=$(now)
  r=$(api POST /v1/nodes "{\"name\":\"$node\",\"role\":\"worker\",\"ip\":\"$RF_IP\",\"kernelArgs\":[\"console=ttyS0\"],\"live\":true,\"provider\":{\"redfish\":{\"url\":\"$RF_URL\",\"username\":\"admin\",\"password\":$PW_REF,\"boot\":\"virtualMedia\",\"mode\":\"Legacy\",\"allowPlainHttp\":true}}}")
  [[ $(status_of "$r") == 201 ]] || die "POST /v1/nodes $node: $r"
  nodes_wait "$node" 240 "$WORK/wait-$node.out" \
    || die "bootd nodes wait $node exited $?: $(tail -n 1 "$WORK/wait-$node.out"); sushy: $(grep -a -i -E "error|media" "$WORK/sushy-rf.log" | tail -n 3)"
  MEDIA_SECS=$(since "$t")
  api GET "/v1/nodes/$node" >"$WORK/node-$node.json"
  wait_ignition "$node" "$off" 60 "$dom"
  seg=$(serial_from "$dom" "$off")
  grep -a -q "bootd: $node: loading kernel" <<<"$seg" || die "$node: the console shows no GRUB from the node's ISO"
  grep -a -q "iPXE initialising devices" <<<"$seg" && die "$node: iPXE ran: the VM network-booted instead of booting the ISO"
  # grep -c, not -q: with pipefail an early exit would fail the pipeline.
  [[ $(cat "$WORK"/bootd-*.log | console_clean /dev/stdin | grep -a -c "virtual media served.*node=$node" || true) -ge 1 ]] \
    || die "$node: bootd's log does not show the ISO served"
  log "$node: booted its ISO from virtual media and fetched its Ignition, Ready in ${MEDIA_SECS}s"
  r=$(rf GET "$RF_URL/VirtualMedia/Cd")
  ins=$(body_of "$r" | json 'd.get("Inserted")')
  [[ $(status_of "$r") == 200 && $ins == false ]] || die "$node: the virtual media is not ejected after Ready: $(body_of "$r" | head -c 400)"
  log "$node: virtual media ejected (Inserted: $ins)"
  wait_domstate "$dom" "shut off" 120 || die "$dom: still $(lv domstate "$dom") 120 s after Ready"
  before=$(ignition_served "$node")
  off=$(serial_size "$dom")
  power_on_again rf "$dom"
  seg=$(describe_second_boot "$dom" "$off" 60)
  log "$node: second boot: $seg"
  [[ $(ignition_served "$node") == "$before" ]] || die "$node: the second boot fetched its Ignition again"
  serial_from "$dom" "$off" | grep -a -q "bootd: $node: loading kernel" && die "$node: the second boot ran the ISO's installer again"
  delete_node "$node" "$dom"
}

provider_node() {   # provider_node NODE DOMAIN rf|ipmi BODY -> sets NODE_SECS
  local node=$1 dom=$2 how=$3 body=$4 r t off before
  t=$(now)
  r=$(api POST /v1/nodes "$body")
  [[ $(status_of "$r") == 201 ]] || die "POST /v1/nodes $node: $r"
  log "POST /v1/nodes $node: 201"
  audit snapshot "$node-booting"
  nodes_wait "$node" "$(time_left "$TIMEOUT" "$t")" "$WORK/wait-$node.out" \
    || die "bootd nodes wait $node exited $?: $(tail -n 1 "$WORK/wait-$node.out")"
  NODE_SECS=$(since "$t")
  # Kept for the leak check at the end: the API must not echo the password.
  api GET "/v1/nodes/$node" >"$WORK/node-$node.json"
  wait_ignition "$node" 0 60
  audit replay "$node" "$dom"
  audit snapshot "$node-ready"
  # The second boot: the guest powers itself off after its Ignition.
  wait_domstate "$dom" "shut off" 120 || die "$dom: still $(lv domstate "$dom") 120 s after Ready"
  before=$(ignition_served "$node")
  off=$(serial_size "$dom")
  power_on_again "$how" "$dom"
  second_boot_check "$node" "$dom" "$before" "$off"
  delete_node "$node" "$dom"
  audit snapshot "$node-deleted"
}

if [[ $INFRA == 0 ]]; then
  PW_REF="{\"file\":\"$WORK/bmc-password\"}"
  provider_node "$RF_NODE" "$RF_NODE" rf \
    "{\"name\":\"$RF_NODE\",\"role\":\"worker\",\"ip\":\"$RF_IP\",\"kernelArgs\":[\"console=ttyS0\"],\"live\":true,\"provider\":{\"redfish\":{\"url\":\"$RF_URL\",\"username\":\"admin\",\"password\":$PW_REF,\"boot\":\"pxe\",\"mode\":\"Legacy\",\"allowPlainHttp\":true}}}"
  RF_SECS=$NODE_SECS
  provider_node "$IPMI_NODE" "$IPMI_NODE" ipmi \
    "{\"name\":\"$IPMI_NODE\",\"role\":\"worker\",\"ip\":\"$IPMI_IP\",\"kernelArgs\":[\"console=ttyS0\"],\"live\":true,\"macs\":[\"$IPMI_MAC\"],\"provider\":{\"ipmi\":{\"address\":\"127.0.0.1\",\"port\":$IPMI_PORT,\"username\":\"admin\",\"password\":$PW_REF,\"mode\":\"Legacy\"}}}"
  IPMI_SECS=$NODE_SECS
  media_check
  audit snapshot media
  redfish_tls_checks
  audit snapshot tls
  discovery_check
  audit snapshot discovery
fi

audit finish
# --- 3. the password leaks nowhere ------------------------------------------------------------
# Exempt: the password file itself and the emulators' own files (their
# credential stores and logs: sushy's htpasswd, curl's netrc, vbmc's config dir
# and logs, sushy's logs and state). Everything else, bootd's logs and state
# included, must not hold it.
leaks=$(grep -r -l -a -F -f "$WORK/bmc-password" "$WORK" \
          --exclude=bmc-password --exclude=bmc-htpasswd --exclude=bmc-netrc \
          --exclude='sushy-*' --exclude='vbmcd.*' --exclude=vbmc-add.log --exclude-dir=vbmc \
          --exclude-dir='sushy-*-state' 2>/dev/null || true)
[[ -z $leaks ]] || die "the BMC password is in: $(tr '\n' ' ' <<<"$leaks")"
# shellcheck disable=SC2009  # every process's argv, not a process by name
n=$(ps -eo args | grep -c -F -f "$WORK/bmc-password" || true)
[[ $n == 0 ]] || die "the BMC password is in $n process command line(s)"
log "BMC password in no log/state file of ours and in no argv"
echo "PASS bmc-e2e $MODE rf=${RF_SECS}s ipmi=${IPMI_SECS}s${MEDIA_SECS:+ media=${MEDIA_SECS}s}"
