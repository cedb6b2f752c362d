#!/usr/bin/env bash
# The real Ignition client, each platform's way: a QEMU guest (tests/lab/guest.sh)
# runs Debian's Ignition with the platform id its node would have and fetches
# its user data from where that platform serves it, stood in for inside the
# lab namespace and filled with what the provider fake received in the
# controller's create call; the pointer config it gets there leads to
# bootd's node config, which merges
# https://api-int.lab.example.test:22623/config/worker (openshift-install's
# worker.ign) from a machine-config server stand-in behind lbd's VIP.
#
# Usage: tests/lab/platform-ignition.sh --platform aliyun|powervs|packet|metal
#          [--no-resolver] [--boot-before-read] [--bin DIR (target/release)]
#          [--timeout SECS (240)]
#
# Inside a private network namespace (10.77.0.0/24 on br0, as tests/lab/):
#  - the all-in-one appliance on the lab site: bootd with the controller API
#    (10.77.0.1:9443) and its DHCP, dnsd on 10.77.0.1:53 (the network's
#    dnsServers, so DHCP option 6 and the node's NetworkManager drop-in name
#    it; names outside its zones go to the platform resolver below), lbd on
#    the api VIP 10.77.0.1 (6443, 22623), its status read in process;
#  - the role configs: bootstrap and master from examples/lab, worker the
#    pointer openshift-install writes (merge api-int:22623/config/worker,
#    trusting a CA made for this run);
#  - the machine-config server stand-in (tests/lab/http-standin.py, TLS for
#    api-int.lab.example.test from that CA) on 10.77.0.10:22623, the
#    bootstrap node's address, so in lbd's machine-config pool; its worker
#    config writes /etc/lab/mcs-worker with content random per run;
#  - the platform's resolver stand-in: dnsmasq on 10.77.0.2, which knows
#    metadata.packet.net (10.77.0.4) and answers NXDOMAIN for every other
#    name, the cluster's among them (dnsd's upstream);
#  - the node, created through the API with the platform's provider against
#    a fake: aliyun: alibaba, tests/controller/ecs-fake.py (RunInstances'
#    UserData, PrivateIpAddress, MacAddress); powervs and packet: powervs and
#    equinix (operatingSystem: an image boot), tests/controller/machines-fake.py;
#    metal: no provider (MAC and address given), it network-boots;
#  - the guest with the MAC and address the provider reported (bootd's DHCP
#    reservation comes from the recorded facts), booting the way the platform
#    boots it:
#      aliyun   the image (QEMU loads the lab kernel), ignition.platform.id=aliyun;
#               user data at http://100.100.100.200/latest/user-data (that
#               address on br0)
#      powervs  the image, ignition.platform.id=powervs; user data in a
#               config drive (ISO 9660 labelled config-2,
#               openstack/latest/user_data) on a virtio-scsi CD
#      packet   the image, ignition.platform.id=packet; user data at
#               https://metadata.packet.net/userdata: the name through dnsd
#               and its upstream, TLS from a second CA the guest trusts as a
#               system root (an extra initramfs archive); Ignition posts its
#               status to the phone-home URL of /metadata
#      metal    SeaBIOS + iPXE from bootd (DHCP, bootd's script with
#               ignition.platform.id=metal, ignition.config.url and nameserver=)
#
# Passes when the guest's Ignition fetch and files stages exited 0, it wrote
# every file of bootd's node config (its NetworkManager resolver drop-in, or
# for packet the layer-3 bond's keyfiles, among them) and of the
# machine-config server's (this run's content), the
# platform stand-in served the user data to the node's address, and the
# node is Ready with MachineConfigServed True (ConnectedThroughLbd).
# --no-resolver: the network's dnsServers is the platform resolver (which
# does not know api-int) and host.api.machineConfigWithin 20s: passes when
# the node gets MachineConfigServed False (NotReached) with a message naming
# api-int and that resolver, and the resolver was asked for api-int.
# --boot-before-read (aliyun): the machine boots before the controller has
# read where it is, as an instance does between its start and the
# controller's next poll (or while a new controller is elected): the fake
# holds the reply to the controller's first DescribeInstances by id, and
# the guest boots at once with the address the fake gave the instance (ip=
# and nameserver=, as the cloud's DHCP would give them), so its Ignition
# asks bootd for the node's config before bootd serves the node. Passes
# when, besides the above, bootd answered 503 (the node's timeline says
# "awaited"), the real client tried again (its log: Service Unavailable),
# and once the held reply is let go the node is served and a retry gets it.
# Prints "PASS platform-ignition-<platform>[-no-resolver]" (exit 0) or FAIL
# lines with logs (exit 1); usage errors exit 2. Root (namespaces, taps).
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/harness.sh
. tests/lib/qemu.sh
. tests/lib/vm.sh

PLATFORM="" RESOLVER=1 TIMEOUT=240 EARLY=0
usage() { sed -n '11,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --platform) PLATFORM=${2:-}; shift 2 ;;
    --no-resolver) RESOLVER=0; shift ;;
    --boot-before-read) EARLY=1; shift ;;
    --bin) BIN=${2:-}; shift 2 ;;
    --timeout) TIMEOUT=${2:-}; shift 2 ;;
    -h|--help) usage ;;
    *) echo "platform-ignition.sh: unknown argument $1" >&2; usage ;;
  esac
done
case $PLATFORM in aliyun|powervs|packet|metal) ;; *) usage ;; esac
[[ $EARLY == 0 || ( $PLATFORM == aliyun && $RESOLVER == 1 ) ]] || usage
[[ $TIMEOUT =~ ^[0-9]+$ ]] || usage
[[ $(id -u) -eq 0 ]] || { echo "platform-ignition.sh: must run as root (netns, tap)" >&2; exit 2; }
BIN=$(realpath "$BIN")
for b in appliance bootd; do [[ -x $BIN/$b ]] || { echo "platform-ignition.sh: no $BIN/$b" >&2; exit 2; }; done

NAME=platform-ignition-$PLATFORM$([[ $RESOLVER == 1 ]] || echo -no-resolver)
harness_init "$NAME"
T0=$(now)
HOST_IP=10.77.0.1 API=https://10.77.0.1:9443 DOMAIN=lab.example.test ROLE=worker
NODE=worker-$PLATFORM
MCS_IP=10.77.0.10         # the site's bootstrap address: in lbd's machine-config pool
RESOLVER_IP=10.77.0.2     # the platform's resolver stand-in
PACKET_META_IP=10.77.0.4  # metadata.packet.net, by that resolver
ALIYUN_META_IP=100.100.100.200
SPECS=${SPECS_DIR:-$REPO/../shared/specs}

# die MESSAGE: the guest's console and the servers' logs, then the FAIL line.
die() {
  show_logs -n 40 "$WORK/serial.log" "$WORK/appliance.log"
  show_logs -n 10 "$WORK/provider-fake.log" "$WORK/mcs.log" "$WORK/metadata.log" "$WORK/platform-dns.log"
  fail "$*"
}
rand_hex() { head -c "$1" /dev/urandom | od -An -tx1 | tr -d ' \n'; }

bash tests/lab/guest.sh "$REPO/target/lab-images" >&2 || die "guest.sh failed"
IMAGES=$REPO/target/lab-images/lab

# --- certificates: the machine-config server's CA (carried by the pointer),
#     and for packet the metadata service's (a system root in the guest) -------
# ca DIR SUBJECT / leaf DIR NAME: an EC P-256 CA, and a server certificate
# for NAME signed by it (DIR/NAME.pem, DIR/NAME.key); valid two days.
ca() {
  mkdir -p "$1"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=$2" \
    -keyout "$1/ca.key" -out "$1/ca.pem" -addext basicConstraints=critical,CA:TRUE \
    -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
}
leaf() {
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$2" \
    -keyout "$1/$2.key" -out "$1/$2.csr" 2>/dev/null
  printf 'subjectAltName=DNS:%s\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n' "$2" >"$1/$2.ext"
  openssl x509 -req -in "$1/$2.csr" -CA "$1/ca.pem" -CAkey "$1/ca.key" -CAcreateserial -days 2 \
    -extfile "$1/$2.ext" -out "$1/$2.pem" 2>/dev/null
}
ca "$WORK/mcs-ca" "lab machine-config server CA" || die "openssl: CA"
leaf "$WORK/mcs-ca" "api-int.$DOMAIN" || die "openssl: the machine-config server's certificate"

# --- role configs: the worker's is openshift-install's pointer --------------------
MARK=$(rand_hex 16)
mkdir -p "$WORK/ignition" "$WORK/mcs"
cp examples/lab/ignition/bootstrap.ign examples/lab/ignition/master.ign "$WORK/ignition/"
python3 - "$WORK" "$DOMAIN" "$ROLE" "$MARK" <<'EOF'
import base64, json, sys
work, domain, role, mark = sys.argv[1:]
ca = base64.b64encode(open(f"{work}/mcs-ca/ca.pem", "rb").read()).decode()
pointer = {"ignition": {"version": "3.2.0",
                        "config": {"merge": [{"source": f"https://api-int.{domain}:22623/config/{role}"}]},
                        "security": {"tls": {"certificateAuthorities": [
                            {"source": f"data:text/plain;charset=utf-8;base64,{ca}"}]}}}}
json.dump(pointer, open(f"{work}/ignition/{role}.ign", "w"))
served = {"ignition": {"version": "3.2.0"},
          "storage": {"files": [{"path": f"/etc/lab/mcs-{role}", "mode": 420, "overwrite": True,
                                 "contents": {"source": f"data:,{mark}"}}]}}
json.dump(served, open(f"{work}/mcs/{role}.ign", "w"))
open(f"{work}/mcs/healthz", "w").write("ok\n")
EOF
chmod 644 "$WORK"/ignition/*.ign

# --- secrets: the API token and the providers' keys ------------------------------
api_tokens
mkdir -p "$WORK/secrets"
echo "LTAIlab$(rand_hex 6)" >"$WORK/secrets/alibaba-key-id"
echo "AliLab$(rand_hex 12)" >"$WORK/secrets/alibaba-key-secret"
echo "EquinixLab$(rand_hex 12)" >"$WORK/secrets/equinix-key"
echo "PowerVsLab$(rand_hex 12)" >"$WORK/secrets/powervs-key"
chmod 600 "$WORK"/secrets/*
# The appliance serves as nobody; it reads the keys and the API tokens.
chown -R nobody "$WORK/secrets" "$WORK/api-tokens"

# --- the site ------------------------------------------------------------------------
SITE=$WORK/site.yaml
edits=(host.stateDir="$WORK/state" host.api.listen="$HOST_IP:9443" host.api.url="$API"
  host.api.tokens.file="$WORK/api-tokens" host.api.deadline=10m ignition.dir="$WORK/ignition"
  dns.upstreams="[$RESOLVER_IP]"
  lb.check="{interval: 1s, fastInterval: 500ms, timeout: 1s, rise: 1, fall: 2}")
case $PLATFORM in
  aliyun) edits+=(host.api.alibaba="{regionId: cn-hangzhou, endpoint: 'http://127.0.0.1:8092', accessKeyId: {file: $WORK/secrets/alibaba-key-id}, accessKeySecret: {file: $WORK/secrets/alibaba-key-secret}, zones: [cn-hangzhou-h], vSwitches: {cn-hangzhou-h: vsw-lab}, securityGroupId: sg-lab, instanceTypes: {master: ecs.g6.xlarge, worker: ecs.g6.large}, imageId: m-rhcos-lab}") ;;
  packet) edits+=(host.api.equinix="{baseUrl: 'http://127.0.0.1:8093', projectId: lab-project, apiKey: {file: $WORK/secrets/equinix-key}}") ;;
  powervs) edits+=(host.api.powervs="{baseUrl: 'http://127.0.0.1:8093', iamUrl: 'http://127.0.0.1:8093', cloudInstanceId: lab-ws, crn: 'crn:v1:bluemix:public:power-iaas:lon04:a/lab:lab-ws::', apiKey: {file: $WORK/secrets/powervs-key}}") ;;
esac
# Without the resolver step: the node's network names the platform's
# resolver, as a cloud's DHCP does; the condition is due 20 s after its Ignition.
[[ $RESOLVER == 1 ]] || edits+=(networks.lab.dnsServers="[$RESOLVER_IP]" host.api.machineConfigWithin=20s)
lab_site "$SITE" "${edits[@]}" || die "site not written"
"$BIN/bootd" --check-config "$SITE" >"$WORK/check.log" 2>&1 || die "site does not validate: $(cat "$WORK/check.log")"

# --- the network -----------------------------------------------------------------------
lab_netns "plat-$$" "$HOST_IP/24" "$RESOLVER_IP/24" "$PACKET_META_IP/24" "$MCS_IP/24" "$ALIYUN_META_IP/32" fd77::1/64
lab_tap tap0
[[ $PLATFORM != metal ]] || lab_ra   # iPXE waits 16 s for an RA otherwise

spawn --ns "$NS" --log "$WORK/platform-dns.log" dnsmasq --conf-file=/dev/null --keep-in-foreground \
  --log-facility=- --log-queries --no-resolv --no-hosts --listen-address="$RESOLVER_IP" --bind-interfaces \
  --port=53 --user=root --group=root --pid-file="$WORK/platform-dns.pid" \
  --address=/metadata.packet.net/"$PACKET_META_IP" --local=/#/
standin() { spawn --ns "$NS" --log "$WORK/$1.log" python3 tests/lab/http-standin.py --record "$WORK/$1.jsonl" "${@:2}"; }
standin mcs --listen "$MCS_IP:22623" --tls "$WORK/mcs-ca/api-int.$DOMAIN.pem" "$WORK/mcs-ca/api-int.$DOMAIN.key" \
  --serve "/config/$ROLE=$WORK/mcs/$ROLE.ign" --serve "/healthz=$WORK/mcs/healthz"
case $PLATFORM in
  aliyun)
    spawn --ns "$NS" --log "$WORK/provider-fake.log" python3 tests/controller/ecs-fake.py \
      --spec "$SPECS/alibaba-ecs/api-docs.json" --access-key-id "$(cat "$WORK/secrets/alibaba-key-id")" \
      --secret-file "$WORK/secrets/alibaba-key-secret" --listen 127.0.0.1:8092 \
      --port-file "$WORK/provider-fake.port" --start-after 1
    FAKE=http://127.0.0.1:8092 ;;
  packet|powervs)
    spawn --ns "$NS" --log "$WORK/provider-fake.log" python3 tests/controller/machines-fake.py \
      --listen 127.0.0.1:8093 --equinix-key-file "$WORK/secrets/equinix-key" \
      --powervs-key-file "$WORK/secrets/powervs-key" --specs "$SPECS"
    FAKE=http://127.0.0.1:8093 ;;
esac
mcs_up() { nsx curl -fsS --max-time 1 --cacert "$WORK/mcs-ca/ca.pem" --resolve "api-int.$DOMAIN:22623:$MCS_IP" "https://api-int.$DOMAIN:22623/healthz"; }
wait_for 15 mcs_up || die "the machine-config server stand-in does not answer"
if [[ -n ${FAKE:-} ]]; then
  fake_up() { nsx curl -s -o /dev/null --max-time 1 "$FAKE/"; }
  wait_for 20 fake_up || die "the provider fake does not answer"
fi

start_appliance --ready "http://$HOST_IP:8080/healthz" --timeout 30 -- --site "$SITE" --state-dir "$WORK/state" \
  || die "the appliance did not start"
wait_up "$APPLIANCE_PID" 30 "$WORK/appliance.log" appliance api_up
log "lab up in $(since "$T0")s: appliance, machine-config server stand-in, platform resolver${FAKE:+, provider fake}"

# --- the node, through the API ------------------------------------------------------------
case $PLATFORM in
  aliyun) PROVIDER='{"alibaba":{}}' ;;
  packet) PROVIDER='{"equinix":{"metro":"da","plan":"m3.small.x86","operatingSystem":"flatcar_stable"}}' ;;
  powervs) PROVIDER='{"powervs":{"imageID":"rhcos-lab","processors":0.5,"memory":4,"procType":"shared","sysType":"s922","networkID":"lab-net"}}' ;;
  metal) PROVIDER="" ;;
esac
if [[ -n $PROVIDER ]]; then
  BODY="{\"name\":\"$NODE\",\"role\":\"$ROLE\",\"provider\":$PROVIDER}"
else
  BODY="{\"name\":\"$NODE\",\"role\":\"$ROLE\",\"macs\":[\"52:54:00:77:00:60\"],\"ip\":\"10.77.0.60\",\"kernelArgs\":[\"console=ttyS0\"],\"live\":true}"
fi
if [[ $EARLY == 1 ]]; then
  # The controller's first read of the instance by id waits at the fake.
  nsx curl -fsS -X POST -H 'Content-Type: application/json' \
    --data '{"action": "DescribeInstances", "withParameter": "InstanceIds", "count": 1}' "$FAKE/_fake/hold" >/dev/null \
    || die "the fake took no hold"
fi
T_CREATE=$(now)
r=$(api POST /v1/nodes "$BODY")
[[ $(status_of "$r") == 201 ]] || die "POST /v1/nodes: $r"
log "POST /v1/nodes $NODE: 201"

# node_json: GET /v1/nodes/NODE's body in NODE_JSON.
node_json() { local r; r=$(api GET "/v1/nodes/$NODE") && [[ $(status_of "$r") == 200 ]] && NODE_JSON=$(body_of "$r"); }
# cond TYPE: "status reason message" of the node's condition TYPE (from NODE_JSON).
cond() {
  json "next((' '.join([c['status'], c['reason'], c['message']]) for c in d['conditions'] if c['type'] == '$1'), '')" <<<"$NODE_JSON"
}
# cond_is TYPE STATUS: GET the node; its condition TYPE has STATUS (for within).
cond_is() { node_json && [[ $(cond "$1") == "$2 "* ]]; }
facts_in() { node_json && [[ $(json '(d.get("facts") or {}).get("ip") or ""' <<<"$NODE_JSON") != "" ]]; }
# ecs_instance: the ECS fake's record of NODE's instance into F_IP F_MAC
# F_UD F_ID (address, MAC, base64 user data, id); fails while it has none.
ecs_instance() {
  local line
  nsx curl -fsS "$FAKE/_fake/instances" >"$WORK/fake.json" || return 1
  line=$(python3 -c 'import json,sys; i=[x for x in json.load(open(sys.argv[1])) if x.get("InstanceName")==sys.argv[2]]; i and print(i[0]["PrivateIpAddress"], i[0]["MacAddress"], i[0]["UserData"], i[0]["InstanceId"])' "$WORK/fake.json" "$NODE") || return 1
  [[ -n $line ]] && read -r F_IP F_MAC F_UD F_ID <<<"$line"
}
# pointer_in B64: the user data decoded into $WORK/userdata; its merge source in src.
pointer_in() {
  base64 -d <<<"$1" >"$WORK/userdata" || die "the fake's user data is not base64"
  chmod 644 "$WORK/userdata"
  src=$(json 'd["ignition"]["config"]["merge"][0]["source"]' <"$WORK/userdata") || die "the user data is not a pointer config: $(head -c 200 "$WORK/userdata")"
}
if [[ $EARLY == 1 ]]; then
  # The instance as the fake made it: the address and MAC the cloud gave it
  # at create, and its user data. bootd does not serve the node yet (the
  # controller's read of where the machine is waits at the fake).
  PACE=0.2 within 30 ecs_instance || die "the fake made no instance for $NODE within 30 s: $(cond Provisioned)"
  ! facts_in || die "$NODE has provider facts before the controller read its instance: $NODE_JSON"
  IP=$F_IP MAC=$F_MAC
  pointer_in "$F_UD"
  ok "$PLATFORM: the provider made $NODE ($F_ID, $IP $MAC), the controller's read of it held; bootd does not serve it yet; its user data is a pointer to ${src%%\?*}"
elif [[ -n $PROVIDER ]]; then
  PACE=0.5 within 60 facts_in || die "no provider facts on $NODE within 60 s: $(cond Provisioned)"
  IP=$(json 'd["facts"]["ip"]' <<<"$NODE_JSON")
  MAC=$(json 'd["facts"]["macs"][0]' <<<"$NODE_JSON")
  # What the fake recorded of the create call: its user data, the address and MAC it reported.
  case $PLATFORM in
    aliyun) ecs_instance || die "the fake has no instance for $NODE" ;;
    *) # Every request the controller sent conforms to the provider's document.
       violations=$(nsx curl -fsS "$FAKE/_fake/violations") || die "the provider fake's violations could not be read"
       [[ $violations == "[]" ]] || die "requests that do not conform to the provider's spec: $violations"
       nsx curl -fsS "$FAKE/_fake/machines" >"$WORK/fake.json"
       read -r F_IP F_MAC F_UD < <(python3 -c 'import base64,json,sys; m=[x for x in json.load(open(sys.argv[1])) if x["name"].endswith(sys.argv[2])][0]; u=m["userdata"]; print(m["ip"], m["mac"], u if m["provider"]=="powervs" else base64.b64encode(u.encode()).decode())' "$WORK/fake.json" "$NODE") ;;
  esac
  [[ $F_IP == "$IP" && ${F_MAC,,} == "${MAC,,}" ]] \
    || die "the node's facts ($IP, $MAC) are not what the fake reported ($F_IP, $F_MAC)"
  # Alibaba and Power VS take base64; Equinix the text (re-encoded above).
  pointer_in "$F_UD"
  ok "$PLATFORM: the provider made $NODE with $IP $MAC; its user data is a pointer to ${src%%\?*}"
else
  IP=10.77.0.60 MAC=52:54:00:77:00:60
fi

# --- the platform's stand-in, with what the provider received ----------------------------
APPEND="console=ttyS0 ignition.firstboot ignition.platform.id=$PLATFORM"
# Booted before the controller read it: the network as the cloud's DHCP
# gives it (bootd's DHCP reservation comes from the facts, not there yet).
[[ $EARLY == 0 ]] || APPEND+=" ip=$IP::$HOST_IP:255.255.255.0:$NODE:eth0:none nameserver=$HOST_IP"
INITRD=$IMAGES/initramfs QEMU_EXTRA=()
case $PLATFORM in
  aliyun)
    standin metadata --listen "$ALIYUN_META_IP:80" --serve "/latest/user-data=$WORK/userdata"
    USERDATA_PATH=/latest/user-data ;;
  packet)
    { ca "$WORK/meta-ca" "lab stand-in public root" && leaf "$WORK/meta-ca" metadata.packet.net; } || die "openssl: metadata CA"
    printf '{"id": "%s", "hostname": "%s", "phone_home_url": "https://metadata.packet.net/phone-home"}\n' \
      "$(json 'd["facts"]["id"]' <<<"$NODE_JSON")" "$NODE" >"$WORK/packet-metadata.json"
    standin metadata --listen "$PACKET_META_IP:443" --tls "$WORK/meta-ca/metadata.packet.net.pem" "$WORK/meta-ca/metadata.packet.net.key" \
      --serve "/userdata=$WORK/userdata" --serve "/metadata=$WORK/packet-metadata.json" --post /events
    USERDATA_PATH=/userdata
    # The image trusts the stand-in's CA as it trusts the public roots: a
    # second archive after the lab initramfs holding the bundle Go reads.
    mkdir -p "$WORK/extra/etc/ssl/certs"
    cp "$WORK/meta-ca/ca.pem" "$WORK/extra/etc/ssl/certs/ca-certificates.crt"
    (cd "$WORK/extra" && find . | LC_ALL=C sort | cpio -o -H newc --quiet | gzip -9) >"$WORK/extra.cpio.gz"
    cat "$IMAGES/initramfs" "$WORK/extra.cpio.gz" >"$WORK/initramfs"
    INITRD=$WORK/initramfs ;;
  powervs)
    mkdir -p "$WORK/config-drive/openstack/latest"
    cp "$WORK/userdata" "$WORK/config-drive/openstack/latest/user_data"
    printf '{"uuid": "%s", "hostname": "%s"}\n' "$(json 'd["facts"]["id"]' <<<"$NODE_JSON")" "$NODE" \
      >"$WORK/config-drive/openstack/latest/meta_data.json"
    xorriso -as mkisofs -quiet -V config-2 -J -R -o "$WORK/config-2.iso" "$WORK/config-drive" 2>"$WORK/xorriso.log" \
      || die "xorriso: $(tail -n 3 "$WORK/xorriso.log")"
    # shellcheck disable=SC2054  # commas inside QEMU arguments
    QEMU_EXTRA=(-device virtio-scsi-pci,id=scsi0
      -drive "file=$WORK/config-2.iso,if=none,id=cd0,media=cdrom,readonly=on,format=raw"
      -device scsi-cd,drive=cd0,bus=scsi0.0) ;;
esac
if [[ -n ${USERDATA_PATH:-} ]]; then
  meta_up() { [[ -s $WORK/metadata.log ]]; }
  wait_for 10 meta_up || die "the metadata stand-in did not start"
fi

# --- the guest -----------------------------------------------------------------------------
if [[ $PLATFORM == metal ]]; then
  qemu_firmware seabios-ipxe
  qemu_start tap0 "$MAC"
else
  qemu_start_image tap0 "$MAC" "$IMAGES/kernel" "$INITRD" "$APPEND" "${QEMU_EXTRA[@]}"
fi
log "guest started ($PLATFORM, $MAC) $(since "$T_CREATE")s after the create call"

client_done() { grep -aq '^LAB-IGNITION-CLIENT \|^LAB-IGNITION-FAILED' "$WORK/serial.log" || { alive "$QEMU_PID" || return 125; return 1; }; }

if [[ $EARLY == 1 ]]; then
  # bootd's "not yet": the node's timeline says awaited once the guest's
  # Ignition asked with the pointer's token. Then the held read goes on.
  awaited() {
    local r
    r=$(api GET "/v1/nodes/$NODE/timeline") && [[ $(status_of "$r") == 200 && $(body_of "$r") == *awaited* ]] \
      || { alive "$QEMU_PID" || return 125; return 1; }
  }
  PACE=0.5 within 120 awaited || die "bootd never answered $NODE's Ignition 'not yet' (no awaited on its timeline within 120 s): $(tail -n 5 "$WORK/serial.log" | tr '\n' ' ')"
  ok "the guest's Ignition asked for $NODE's config before the controller read its instance: bootd said not yet (timeline: awaited), $(since "$T_QEMU")s after the guest started"
  held=$(nsx curl -fsS "$FAKE/_fake/held") || die "the fake's held replies could not be read"
  [[ $held == *'"held": 1'* ]] || die "the controller's read is not held at the fake: $held"
  nsx curl -fsS -X POST "$FAKE/_fake/release" >/dev/null || die "the fake did not release the held reply"
  T_RUN=$(now)
  PACE=0.5 within 60 facts_in || die "no provider facts on $NODE within 60 s of the held read's reply: $(cond Provisioned)"
  [[ $(json 'd["facts"]["ip"]' <<<"$NODE_JSON") == "$IP" && $(json 'd["facts"]["macs"][0].lower()' <<<"$NODE_JSON") == "${MAC,,}" ]] \
    || die "the node's facts are not what the fake gave the instance ($IP, $MAC): $NODE_JSON"
  ok "the held read answered: bootd has $NODE's address ($IP) from its provider $(since "$T_RUN")s later"
fi

if [[ $RESOLVER == 0 ]]; then
  # --- without the resolver step: a clear condition, not a timeout -----------------------
  PACE=1 within "$TIMEOUT" cond_is IgnitionServed True || die "$NODE never fetched its Ignition: $(cond IgnitionServed)"
  T_IGN=$(now)
  ok "$NODE fetched its Ignition $(since "$T_CREATE")s after the create call"
  PACE=1 within 90 cond_is MachineConfigServed False || die "no MachineConfigServed False within 90 s of its Ignition: $(cond MachineConfigServed)"
  c=$(cond MachineConfigServed)
  log "MachineConfigServed: $c"
  if [[ $c == "False NotReached "* && $c == *"api-int.$DOMAIN"* && $c == *"$RESOLVER_IP"* ]]; then
    ok "MachineConfigServed False NotReached $(since "$T_IGN")s after its Ignition (machineConfigWithin 20s), naming api-int.$DOMAIN and its resolver $RESOLVER_IP"
  else
    bad "MachineConfigServed: $c"
  fi
  queries=$(grep -a "api-int.$DOMAIN from $IP" "$WORK/platform-dns.log" || true)
  if [[ -n $queries ]]; then
    ok "the guest asked its resolver $RESOLVER_IP for api-int.$DOMAIN, which does not know it: $(grep -a -A1 -m1 "query.*api-int.$DOMAIN from $IP" "$WORK/platform-dns.log" | tail -n 1 | sed 's/^.*dnsmasq[^:]*: //')"
  else
    bad "no query for api-int.$DOMAIN from $IP at the platform resolver"
  fi
  if grep -aq "\"path\": \"/config/$ROLE\"" "$WORK/mcs.jsonl" 2>/dev/null; then
    bad "the machine-config server was reached after all"
  else
    ok "nothing reached the machine-config server"
  fi
  log "run: $(since "$T0")s"
  harness_verdict
  exit 0
fi

wait_for "$TIMEOUT" client_done || die "no LAB-IGNITION-CLIENT line within ${TIMEOUT}s$(alive "$QEMU_PID" || echo ' (QEMU exited)')"
GUEST_SECS=$(since "$T_QEMU")
line=$(clean "$WORK/serial.log" | grep -a -m1 -E '^LAB-IGNITION-CLIENT |^LAB-IGNITION-FAILED' || true)
wait_for 20 qemu_off || true   # the guest prints its files, then powers off
# The console, read whole once (grep -q on a pipe fails under pipefail).
CONSOLE=$(clean "$WORK/serial.log")
log "guest: $line (after ${GUEST_SECS}s)"
[[ $line == LAB-IGNITION-FAILED* ]] && die "guest: ${line#LAB-IGNITION-FAILED }"
if [[ $line == "LAB-IGNITION-CLIENT fetch=0 files=0 platform=$PLATFORM" ]]; then
  ok "Ignition (-platform $PLATFORM): fetch and files stages passed in ${GUEST_SECS}s of guest time"
else
  bad "Ignition: $line: $(grep -a '^LAB-IGNITION-CLIENT-LOG' <<<"$CONSOLE" | tr '\n' ' ')"
fi

# Where the config came from: the platform's place, then api-int through lbd.
if [[ -n ${USERDATA_PATH:-} ]]; then
  if python3 -c 'import json,sys; sys.exit(0 if any(e["path"]==sys.argv[2] and e["client"]==sys.argv[3] and e["status"]==200 and e["method"]=="GET" for e in map(json.loads, open(sys.argv[1]))) else 1)' \
      "$WORK/metadata.jsonl" "$USERDATA_PATH" "$IP" 2>/dev/null; then
    ok "the $PLATFORM metadata stand-in served $USERDATA_PATH to $IP (the user data the provider received)"
  else
    bad "the metadata stand-in never served $USERDATA_PATH to $IP: $(tr '\n' ' ' <"$WORK/metadata.jsonl" 2>/dev/null)"
  fi
elif [[ $PLATFORM == metal ]]; then
  if url=$(grep -a -m1 -o '^LAB-IGNITION sha256=[0-9a-f]* bytes=[0-9]* url=[^ ?]*' <<<"$CONSOLE"); then
    ok "bootd's iPXE script gave ignition.config.url=${url##*url=} (and nameserver=, above)"
  else
    bad "no LAB-IGNITION line: the guest did not fetch ignition.config.url"
  fi
elif [[ $PLATFORM == powervs ]]; then
  if mounted=$(grep -a -m1 'executing: "mount" .*/dev/disk/by-label/config-2' <<<"$CONSOLE"); then
    ok "Ignition read the config drive: ${mounted#*executing: }"
  else
    bad "no sign of the config drive in Ignition's log"
  fi
fi
if [[ $EARLY == 1 ]]; then
  # The real client's own account: bootd's 503 for the pointer's source,
  # tried again, then fetched.
  unavailable=$(grep -ac 'GET result: Service Unavailable' <<<"$CONSOLE" || true)
  if [[ $unavailable -ge 1 ]] && grep -aqF "fetched referenced config at ${src%%\?*}" <<<"$CONSOLE"; then
    ok "Ignition's log: $unavailable x 'GET result: Service Unavailable' from bootd, then fetched referenced config at ${src%%\?*}"
  else
    bad "Ignition's log has no 503 from bootd followed by the fetch of ${src%%\?*} ($unavailable x Service Unavailable)"
  fi
fi
if grep -aq "fetched referenced config at https://api-int.$DOMAIN:22623/config/$ROLE" <<<"$CONSOLE"; then
  ok "Ignition merged https://api-int.$DOMAIN:22623/config/$ROLE (resolvers: $(sed -n 's/^lab-init: resolvers: \(.*[^ ]\) *$/\1/p' <<<"$CONSOLE" | head -n 1))"
else
  bad "Ignition's log has no fetch of api-int.$DOMAIN:22623/config/$ROLE"
fi
if [[ $PLATFORM == packet ]]; then
  if grep -aq '"path": "/events"' "$WORK/metadata.jsonl" && grep -aq 'finished successfully' "$WORK/metadata.jsonl"; then
    ok "Ignition posted its status to the phone-home stand-in: finished successfully"
  else
    bad "no status posted to https://metadata.packet.net/events"
  fi
fi

# What it wrote: bootd's node config (the resolver drop-in among it) and the
# machine-config server's config, byte for byte.
"$BIN/bootd" render ignition "$NODE" --site "$SITE" --state-dir "$WORK/state" >"$WORK/expected.ign" 2>"$WORK/render.log" \
  || die "bootd render ignition $NODE: $(tail -n 3 "$WORK/render.log" | tr '\n' ' ')"
if python3 tests/lab/ignition-check.py "$WORK/serial.log" "$WORK/expected.ign" "$WORK/mcs/$ROLE.ign" >"$WORK/ignition-check.txt" 2>&1; then
  sed "s/^/$HARNESS_NAME:   /" "$WORK/ignition-check.txt" >&2
  # Equinix's layer-3 devices get their bond from the device's facts: its
  # keyfiles carry the resolvers (no drop-in); the other platforms get the
  # drop-in.
  if [[ $PLATFORM == packet ]]; then
    resolver_files="bond0.nmconnection (dns=10.77.0.1), eth0 and eth1"
    resolvers_ok() {
      grep -q "^ok /etc/NetworkManager/system-connections/bond0.nmconnection " "$WORK/ignition-check.txt" \
        && grep -q "^ok /etc/NetworkManager/system-connections/eth0.nmconnection " "$WORK/ignition-check.txt" \
        && grep -q "^ok /etc/NetworkManager/system-connections/eth1.nmconnection " "$WORK/ignition-check.txt" \
        && grep -q 'dns%3D10.77.0.1%3B' "$WORK/expected.ign"
    }
  else
    resolver_files="50-cluster-dns.conf"
    resolvers_ok() { grep -q "^ok /etc/NetworkManager/conf.d/50-cluster-dns.conf " "$WORK/ignition-check.txt"; }
  fi
  if grep -q "^ok /etc/lab/mcs-$ROLE " "$WORK/ignition-check.txt" && resolvers_ok; then
    ok "under /sysroot: /etc/lab/mcs-$ROLE (this run's $MARK) and bootd's $resolver_files, as served"
  else
    bad "the check passed without the machine-config file or the resolver drop-in: $(cat "$WORK/ignition-check.txt")"
  fi
else
  bad "what Ignition wrote: $(tail -n 1 "$WORK/ignition-check.txt")"
fi

# The controller's word: Ready, and MachineConfigServed from lbd's status.
PACE=1 within 30 cond_is MachineConfigServed True || true
c=$(cond MachineConfigServed)
if [[ $c == "True ConnectedThroughLbd "* ]]; then ok "MachineConfigServed: $c"; else bad "MachineConfigServed: ${c:-not set}"; fi
c=$(cond Ready)
if [[ $c == True* ]]; then ok "Ready: $c"; else bad "Ready: $c"; fi
log "run: $(since "$T0")s (guest ${GUEST_SECS}s)"
[[ $FAILS == 0 ]] || show_logs -n 60 "$WORK/serial.log"
harness_verdict
