#!/usr/bin/env bash
# One end-to-end network boot over IPv6 of a QEMU guest against bootd, in a
# private network namespace (fd00:77::/64, and 10.77.0.0/24 on a dual-stack
# site, on bridge br0; nothing leaves the namespace). bootd serves DHCPv6
# (and DHCPv4 on a dual-stack site) itself; radvd sends the router
# advertisements with the M flag (bootd does not send them).
#
# Usage: tests/lab/netboot6.sh --bootd BOOTD --site SITE_YAML --node NAME --mac MAC
#          [--firmware ovmf-pxe6|ovmf-ipxe6|ovmf-http6] [--timeout SECS] [--workdir DIR]
#
# Firmwares:
#   ovmf-pxe6   OVMF with the NIC's ROM off and IPv4 PXE off (fw_cfg): EDK2's
#               own PXE over IPv6 -> DHCPv6 (arch 7) -> tftp://[fd00:77::1]/ipxe.efi
#               -> iPXE -> DHCPv6 again (user class iPXE) -> http://[fd00:77::1]:8080/boot.ipxe
#   ovmf-ipxe6  OVMF + the NIC's iPXE EFI ROM: iPXE from the ROM -> DHCPv6 -> HTTP
#   ovmf-http6  OVMF with the NIC's ROM off and PXE off: UEFI HTTP Boot over IPv6
#               (arch 16, vendor class HTTPClient) -> ipxe.efi over HTTP -> iPXE as above
# Then: the node's iPXE script (its URLs in brackets) -> kernel + initramfs over
# HTTP/IPv6 -> the lab guest (tests/lab/guest.sh) takes its address from the
# ip=[...] kernel argument (the tested node is given `network: {interface:
# eth0}` in a copy of SITE), fetches ignition.config.url over IPv6 and prints
# "LAB-IGNITION sha256=..." on ttyS0, compared with `BOOTD render ignition`.
# Also checked: bootd answered the firmware's boot request over DHCPv6; on
# an IPv6-only site the Ignition URL is the IPv6 one and the request came
# from the node's own IPv6 address; on a dual-stack site (where iPXE,
# answered over both families, picks IPv4) from one of the node's addresses.
# Prints "PASS netboot6 <firmware> <node> <secs>s" (exit 0) or "FAIL ..." (exit 1).
set -euo pipefail
HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

BOOTD="" SITE="" NODE="" MAC="" FIRMWARE=ovmf-pxe6 TIMEOUT=240 WORKDIR=""
usage() { sed -n '8,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --bootd) BOOTD=$2; shift 2 ;;
    --site) SITE=$2; shift 2 ;;
    --node) NODE=$2; shift 2 ;;
    --mac) MAC=$2; shift 2 ;;
    --firmware) FIRMWARE=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --workdir) WORKDIR=$2; shift 2 ;;
    *) usage ;;
  esac
done
[[ -n $BOOTD && -n $SITE && -n $NODE && -n $MAC ]] || usage
[[ $(id -u) -eq 0 ]] || { echo "netboot6.sh: run as root" >&2; exit 2; }
case $FIRMWARE in ovmf-pxe6|ovmf-ipxe6|ovmf-http6) ;; *) usage ;; esac
BOOTD=$(readlink -f "$BOOTD"); SITE=$(readlink -f "$SITE")
NS=lab6-$$
WORKDIR=${WORKDIR:-$REPO/target/lab-runs/$NODE-$FIRMWARE-$$}
mkdir -p "$WORKDIR"; WORKDIR=$(readlink -f "$WORKDIR")
rm -rf "$WORKDIR"/{serial.log,bootd.log,radvd.log,qemu.log,state,OVMF_VARS.fd,expected.ign,site.yaml}
mkdir -p "$WORKDIR/state"
PIDS=()
. "$REPO/tests/lib.sh"
cleanup() { local rc=$?; stop_started "$NS"; exit "$rc"; }
trap cleanup EXIT
log() { echo "netboot6.sh: $*" >&2; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
clean() { tr -d '\r' <"$1" | sed -e 's/\x1b\[[0-9;=?]*[a-zA-Z]//g' -e 's/\x08//g'; }
fail() {
  echo "FAIL netboot6 $FIRMWARE $NODE $*"
  echo "--- last 30 lines of serial.log"; clean "$WORKDIR/serial.log" 2>/dev/null | tail -n 30 || true
  echo "--- last 30 lines of bootd.log"; tail -n 30 "$WORKDIR/bootd.log" 2>/dev/null || true
  exit 1
}
nsx() { ip netns exec "$NS" "$@"; }

"$HERE/guest.sh" >&2 || fail "guest.sh failed"
"$HERE/tftp-root.sh" "$REPO/target/lab-tftp" >&2 || fail "tftp-root.sh failed"

# The site, its relative paths made absolute, the tested node with a static
# network (the lab guest has no DHCPv6 client: its address is ip=).
/usr/bin/python3 - "$SITE" "$WORKDIR/site.yaml" "$NODE" "$REPO" <<'PY' || fail "cannot write the site copy"
import os, sys, yaml
src, dst, node, repo = sys.argv[1:5]
base = os.path.dirname(os.path.abspath(src))
s = yaml.safe_load(open(src))
absolute = lambda p: p if os.path.isabs(p) else os.path.normpath(os.path.join(base, p))
for sect, key in [("host", "stateDir"), ("images", "root"), ("ignition", "dir")]:
    if isinstance(s.get(sect), dict) and s[sect].get(key):
        s[sect][key] = absolute(s[sect][key])
s["host"]["tftp"]["root"] = os.path.join(repo, "target/lab-tftp")
s["images"]["root"] = os.path.join(repo, "target/lab-images")
found = [n for n in s["nodes"] if n["name"] == node]
if not found:
    sys.exit(f"no node {node}")
found[0]["network"] = {"interface": "eth0"}
yaml.safe_dump(s, open(dst, "w"), sort_keys=False)
PY
SITE=$WORKDIR/site.yaml
IP6=$(python3 -c "import yaml,sys; n=[n for n in yaml.safe_load(open('$SITE'))['nodes'] if n['name']=='$NODE'][0]; ips=n['ip'] if isinstance(n['ip'], list) else [n['ip']]; print([i for i in ips if ':' in i][0])")
DUAL=$(python3 -c "import yaml; s=yaml.safe_load(open('$SITE')); print(1 if s['host'].get('dhcp') else 0)")

# --- network ---------------------------------------------------------------------
T0=$(now)
ip netns add "$NS"
nsx ip link set lo up
nsx sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
nsx ip link add br0 type bridge forward_delay 0 stp_state 0
nsx ip -6 addr add fd00:77::1/64 dev br0 nodad
[[ $DUAL == 1 ]] && nsx ip addr add 10.77.0.1/24 dev br0
nsx ip tuntap add dev tap0 mode tap
nsx ip link set tap0 master br0
nsx ip link set tap0 up
nsx ip link set br0 up

# Router advertisements: M flag (addresses from DHCPv6), the prefix on-link,
# no SLAAC (the guest's and the firmware's addresses come from bootd).
cat >"$WORKDIR/radvd.conf" <<EOF
interface br0 {
  AdvSendAdvert on;
  AdvManagedFlag on;
  AdvOtherConfigFlag on;
  MinRtrAdvInterval 3;
  MaxRtrAdvInterval 10;
  prefix fd00:77::/64 { AdvOnLink on; AdvAutonomous off; };
};
EOF
nsx radvd -n -C "$WORKDIR/radvd.conf" -p "$WORKDIR/radvd.pid" -m logfile -l "$WORKDIR/radvd.log" &
PIDS+=($!)
nsx "$BOOTD" --site "$SITE" --state-dir "$WORKDIR/state" >"$WORKDIR/bootd.log" 2>&1 &
PIDS+=($!); BOOTD_PID=$!
for _ in $(seq 150); do
  kill -0 "$BOOTD_PID" 2>/dev/null || fail "bootd exited: $(tail -n 3 "$WORKDIR/bootd.log")"
  nsx curl -fsS --max-time 1 "http://[fd00:77::1]:8080/healthz" >/dev/null 2>&1 && break
  sleep 0.2
done
log "network + radvd + bootd ready in $(elapsed "$T0")s (workdir $WORKDIR)"

# --- QEMU ------------------------------------------------------------------------
DEV="virtio-net-pci,netdev=n0,mac=$MAC"
FWCFG=()
case $FIRMWARE in
  ovmf-pxe6) DEV+=",romfile="; FWCFG=(-fw_cfg name=opt/org.tianocore/IPv4PXESupport,string=n) ;;
  ovmf-http6) DEV+=",romfile="; FWCFG=(-fw_cfg name=opt/org.tianocore/IPv4PXESupport,string=n
                                      -fw_cfg name=opt/org.tianocore/IPv6PXESupport,string=n) ;;
esac
cp /usr/share/OVMF/OVMF_VARS_4M.fd "$WORKDIR/OVMF_VARS.fd"
: >"$WORKDIR/serial.log"
T_QEMU=$(now)
nsx qemu-system-x86_64 -accel tcg -machine graphics=off -m 512 -smp 1 -display none -monitor none \
  -no-reboot -boot order=n -serial "file:$WORKDIR/serial.log" \
  -netdev tap,id=n0,ifname=tap0,script=no,downscript=no -device "$DEV" "${FWCFG[@]}" \
  -drive if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd \
  -drive "if=pflash,format=raw,unit=1,file=$WORKDIR/OVMF_VARS.fd" </dev/null >"$WORKDIR/qemu.log" 2>&1 &
PIDS+=($!); QEMU_PID=$!

deadline=$(( $(date +%s) + TIMEOUT ))
while (( $(date +%s) < deadline )); do
  grep -aq 'LAB-IGNITION sha256=\|LAB-IGNITION-FAILED' "$WORKDIR/serial.log" && break
  kill -0 "$QEMU_PID" 2>/dev/null || break
  sleep 0.5
done
sleep 0.5
line=$(clean "$WORKDIR/serial.log" | grep -a 'LAB-IGNITION sha256=' | head -n 1 || true)
[[ -n $line ]] || fail "no LAB-IGNITION marker after $(elapsed "$T_QEMU")s: $(clean "$WORKDIR/serial.log" | grep -a 'LAB-IGNITION-FAILED' | head -n 1)"
got=$(sed -n 's/.*sha256=\([0-9a-f]*\).*/\1/p' <<<"$line")
"$BOOTD" render ignition "$NODE" --site "$SITE" --state-dir "$WORKDIR/state" >"$WORKDIR/expected.ign" 2>"$WORKDIR/render.log" \
  || fail "bootd render ignition failed: $(cat "$WORKDIR/render.log")"
want=$(sha256sum "$WORKDIR/expected.ign" | cut -d' ' -f1)
[[ $got == "$want" ]] || fail "Ignition sha256 $got, bootd renders $want"
url=$(sed -n 's/.*url=\([^ ]*\).*/\1/p' <<<"$line")
# bootd's log: the firmware booted over DHCPv6 (its boot URL from bootd).
# (The firmware's Solicit and its Request both carry its architecture and
# are both answered with the boot URL; either proves the exchange.)
case $FIRMWARE in
  ovmf-pxe6) fw_re="kind=\"(solicit|request)\".*$NODE: (solicit|request) .*UEFI x86 PXE" ;;
  ovmf-http6) fw_re="kind=\"(solicit|request)\".*$NODE: (solicit|request) .*UEFI HTTP Boot" ;;
  ovmf-ipxe6) fw_re="kind=\"(solicit|request)\".*$NODE: (solicit|request) .*iPXE" ;;
esac
# Into a file first: `grep -q` on a pipe ends at the first match and, under
# pipefail, a writer still writing a long log fails the pipeline (SIGPIPE).
clean "$WORKDIR/bootd.log" >"$WORKDIR/bootd.plain.log"
# On failure, what bootd did log of its DHCPv6 exchanges, in the FAIL line.
exchanges() { grep -aoE 'kind="[a-z-]+" reason=[^;]*;[^(:]*' "$WORKDIR/bootd.plain.log" | sed 's/ reason=/ /' | tr '\n' '|' | cut -c1-900; }
grep -aqE "DHCPv6.*$fw_re" "$WORKDIR/bootd.plain.log" || fail "bootd logged no DHCPv6 boot exchange of $NODE ($fw_re); it logged: $(exchanges)"
if [[ $FIRMWARE == ovmf-http6 ]]; then
  grep -aqE 'file served path=ipxe.efi ' "$WORKDIR/bootd.plain.log" || fail "the firmware did not fetch ipxe.efi over HTTP; DHCPv6: $(exchanges)"
fi
served=$(grep -aE -m 1 "Ignition (pointer config )?served node=$NODE " "$WORKDIR/bootd.plain.log" || true)
if [[ $DUAL == 0 ]]; then
  # IPv6 only: every URL is the IPv6 one, the Ignition came from the node's own IPv6 address.
  [[ $url == "http://[fd00:77::1]:8080/"* ]] || fail "the Ignition URL is not the IPv6 one: $url"
  grep -q "source=$IP6 " <<<"$served" || fail "the Ignition was not served to $IP6: $served"
  how="over IPv6 from $IP6"
else
  # Dual stack: iPXE, answered over both, fetches its script over the family
  # it chooses (Debian's iPXE: IPv4); the Ignition came from a node address.
  grep -qE "source=($IP6|::ffff:10\.77\.0\.[0-9]+) via=\"node address\"" <<<"$served" || fail "the Ignition was not served to a node address: $served"
  how="firmware over DHCPv6, Ignition via $(sed -n 's/.*source=\([^ ]*\).*/\1/p' <<<"$served")"
fi
echo "PASS netboot6 $FIRMWARE $NODE $(elapsed "$T_QEMU")s ($how, sha256 $got)"
