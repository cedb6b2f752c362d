#!/usr/bin/env bash
# bootd's status page in a real browser: headless Chromium renders /status and
# one node's timeline; the test asserts on the rendered DOM and keeps
# screenshots in target/test-artifacts/.
#
# Usage: tests/status/e2e.sh [--bootd PATH]   (root: it makes a network namespace)
#
# Inside a private namespace (nothing leaves it): br0 with 10.77.0.1/24 and the
# lab nodes' addresses, bootd with a copy of the lab site (images: small
# stand-ins). Lab "nodes" are driven with real clients from their own
# addresses: DHCP through a relay (python3, giaddr 10.77.0.1), TFTP and HTTP
# with curl --interface. bootstrap boots as far as Ignition; worker-0 as far
# as its kernel over TFTP+HTTP; an unknown MAC gets no lease; master-1's
# Ignition is asked from the wrong address and denied. Then Chromium:
#   --dump-dom  every lab node in the table with the expected phase, the
#               unknown MAC and the reasons shown, nothing unescaped;
#   --screenshot target/test-artifacts/status.png, status-bootstrap.png.
# Exit 0 and "PASS status-page" when every check holds, else 1 with the reasons
# and "FAIL status-page (N failed)".
set -euo pipefail

HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
# shellcheck source=tests/lib/harness.sh
. "$HERE/../lib/harness.sh"
BOOTD=$REPO/target/release/bootd
while [[ $# -gt 0 ]]; do
  case $1 in
    --bootd) BOOTD=$2; shift 2 ;;
    *) echo "usage: $0 [--bootd PATH]" >&2; exit 2 ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "e2e.sh: must run as root (netns)" >&2; exit 2; }
harness_init status-page
chrome_check
if [[ ! -x $BOOTD ]]; then
  (cd "$REPO" && cargo build --release --locked -p appliance --bin bootd) >&2
fi
BOOTD=$(readlink -f "$BOOTD")

ART=$REPO/target/test-artifacts
mkdir -p "$ART"

# --- site copy with small images -----------------------------------------------
# Without dhcp.interface: the relay's packets to 10.77.0.1 arrive on lo, which a
# socket bound to br0 would never see.
mkdir -p "$WORK/images/lab" "$WORK/tftp" "$WORK/state"
cp -r "$REPO/examples/lab/ignition" "$WORK/ignition"
head -c 2000000 /dev/zero >"$WORK/images/lab/kernel"
head -c 1000000 /dev/zero >"$WORK/images/lab/initramfs"
head -c 300000 /dev/zero >"$WORK/tftp/ipxe.efi"
lab_site "$WORK/site.yaml" images.root="$WORK/images" host.stateDir="$WORK/state" \
  host.tftp.root="$WORK/tftp" ignition.dir="$WORK/ignition" -host.dhcp.interface

# --- namespace: br0 (no machines, only the host's and the nodes' addresses) ------
lab_netns "status-$$" 10.77.0.1/24 10.77.0.10/32 10.77.0.11/32 10.77.0.12/32 10.77.0.20/32

# Relay replies go to 10.77.0.1:1067 (bootd's hidden --dhcp-reply-ports).
start_bootd --bin "$BOOTD" --log "$WORK/bootd.log" --timeout 20 \
  -- --site "$WORK/site.yaml" --state-dir "$WORK/state" --dhcp-reply-ports 68,1067 \
  || fail "bootd not ready"

# --- drive the nodes -------------------------------------------------------------
# DHCP DISCOVER + REQUEST through a relay at 10.77.0.1:1067 for MAC; prints the
# reply types ("offer ack", or "none").
dhcp_dora() {
  nsx python3 - "$1" "${2:-PXEClient:Arch:00007:UNDI:003016}" <<'PY'
import socket, struct, sys
mac = bytes(int(x, 16) for x in sys.argv[1].split(":"))
vendor = sys.argv[2].encode()
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("10.77.0.1", 1067)); s.settimeout(2)
def pkt(xid, mtype, req=None):
    b = struct.pack("!BBBBIHHIIII", 1, 1, 6, 1, xid, 0, 0, 0, 0, 0, 0x0a4d0001)
    b += mac + b"\0" * 10 + b"\0" * 192 + b"\x63\x82\x53\x63"
    b += bytes([53, 1, mtype, 93, 2, 0, 7, 60, len(vendor)]) + vendor
    if req:
        b += bytes([50, 4]) + socket.inet_aton(req) + bytes([54, 4]) + socket.inet_aton("10.77.0.1")
    return b + b"\xff"
def ask(xid, mtype, req=None):
    s.sendto(pkt(xid, mtype, req), ("10.77.0.1", 67))
    try:
        d = s.recv(1500)
    except socket.timeout:
        return None, None
    o, t = 240, None
    while o < len(d) and d[o] != 255:
        if d[o] == 53: t = d[o + 2]
        o += 2 + d[o + 1]
    return t, socket.inet_ntoa(d[16:20])
t, ip = ask(0x1001, 1)
if t != 2:
    print("none"); sys.exit(0)
t2, _ = ask(0x1002, 3, ip)
print("offer " + ("ack" if t2 == 5 else "none"))
PY
}
from() { nsx curl -fsS --max-time 10 --interface "$1" "${@:2}" >/dev/null; }

check "bootstrap: DHCP offer and ack" test "$(dhcp_dora 52:54:00:77:00:10)" = "offer ack"
sleep 0.3
check "bootstrap: iPXE entry + node script" from 10.77.0.10 http://10.77.0.1:8080/boot.ipxe "http://10.77.0.1:8080/ipxe/node?mac=52:54:00:77:00:10"
sleep 0.3
check "bootstrap: kernel + initramfs" from 10.77.0.10 http://10.77.0.1:8080/images/lab/kernel http://10.77.0.1:8080/images/lab/initramfs
sleep 0.3
check "bootstrap: Ignition from its own address" from 10.77.0.10 http://10.77.0.1:8080/ignition/bootstrap

check "worker-0: DHCP offer and ack" test "$(dhcp_dora 52:54:00:77:00:20)" = "offer ack"
check "worker-0: ipxe.efi over TFTP" from 10.77.0.20 tftp://10.77.0.1/ipxe.efi
check "worker-0: kernel" from 10.77.0.20 http://10.77.0.1:8080/images/lab/kernel

check "master-0: DHCP only" test "$(dhcp_dora 52:54:00:77:00:11)" = "offer ack"
check "unknown MAC: no lease (the lab has no pool)" test "$(dhcp_dora 52:54:00:66:66:01 '<b>PXEClient</b>')" = "none"
check "master-1: Ignition from the wrong address is refused" \
  test "$(nsx curl -s -o /dev/null -w '%{http_code}' --interface 10.77.0.11 http://10.77.0.1:8080/ignition/master-1)" = 404
sleep 0.5   # the recorder's queue is drained by its writer task

# --- the browser ---------------------------------------------------------------------
chrome --dump-dom http://10.77.0.1:8080/status >"$WORK/status.dom" || true
chrome --screenshot="$ART/status.png" http://10.77.0.1:8080/status >/dev/null || true
chrome --dump-dom http://10.77.0.1:8080/status/node/bootstrap >"$WORK/bootstrap.dom" || true
chrome --screenshot="$ART/status-bootstrap.png" http://10.77.0.1:8080/status/node/bootstrap >/dev/null || true
cp "$WORK/status.dom" "$ART/status.dom.html" 2>/dev/null || true
cp "$WORK/bootstrap.dom" "$ART/status-bootstrap.dom.html" 2>/dev/null || true

row() { grep -q "data-node=\"$1\" data-phase=\"$2\"" "$WORK/status.dom"; }
check "DOM: status page rendered" grep -q '<table id="nodes">' "$WORK/status.dom"
check "DOM: bootstrap in phase ignition" row bootstrap ignition
check "DOM: worker-0 in phase kernel" row worker-0 kernel
check "DOM: master-0 in phase dhcp" row master-0 dhcp
check "DOM: master-1 in phase ignition (denied)" row master-1 ignition
for n in master-2 worker-1 p9-0; do check "DOM: $n listed, waiting" row "$n" waiting; done
check "DOM: the unknown MAC listed in phase dhcp" row "mac 52:54:00:66:66:01" dhcp
check "DOM: the unknown MAC's reason shown" grep -q 'unknown MAC and no dynamic pool' "$WORK/status.dom"
check "DOM: master-1's denial shown" grep -q 'Ignition denied: ' "$WORK/status.dom"
check "DOM: client text escaped (no <b> from the vendor class)" bash -c "! grep -q '<b>PXEClient' '$WORK/status.dom' '$WORK/bootstrap.dom'"
check "DOM: meta refresh" grep -q 'http-equiv="refresh"' "$WORK/status.dom"
phases=$(grep -o '<tr data-phase="[a-z_]*"' "$WORK/bootstrap.dom" | sed 's/.*="\(.*\)"/\1/' | tr '\n' ' ')
check "DOM: bootstrap's timeline: dhcp script kernel initramfs ignition (got: $phases)" \
  test "$phases" = "dhcp script kernel initramfs ignition "
check "screenshot status.png written" test -s "$ART/status.png"
check "screenshot status-bootstrap.png written" test -s "$ART/status-bootstrap.png"
check "no token on the page" bash -c "! grep -q 'token=[A-Za-z0-9]' '$WORK/status.dom' '$WORK/bootstrap.dom'"

if [[ $FAILS -gt 0 ]]; then
  echo "--- chromium.log (tail)"; tail -n 20 "$WORK/chromium.log" 2>/dev/null || true
  echo "--- bootd.log (tail)"; tail -n 30 "$WORK/bootd.log"
fi
log "screenshots in $ART"
harness_verdict
