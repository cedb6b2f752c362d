#!/usr/bin/env bash
# The status page of a rack: a site of 1 000 nodes, driven through their boot
# by real clients from their own addresses, rendered by headless Chromium.
#
# Usage: tests/status/rack.sh [--bootd PATH]   (root: it makes a network namespace)
#
# Inside a private namespace (nothing leaves it): br0 with 10.77.0.1/16 and
# the addresses of the 300 nodes that go past DHCP; bootd with the lab site
# grown to 1 000 nodes (r0000-r0999, 3 masters). DHCP DISCOVER+REQUEST for all
# 1 000 through a relay (python3, giaddr 10.77.0.1); the iPXE script for
# r0000-r0299, the kernel for r0000-r0099, the Ignition for r0000-r0049, and
# r0300-r0304's Ignition asked from r0000's address (denied: failing). Then:
#   curl         /status under 1 MB;
#   Chromium     --dump-dom: the counts (1 000 nodes, 5 failing, per phase:
#                dhcp 695, script 200, kernel 50, ignition 55 (the five
#                denied are in their Ignition phase); per role),
#                1 000 phase bars, the filter ?phase=kernel listing 50 nodes
#                and ?failing=1 five; the page rendered within a second
#                (Chromium on /status against Chromium on about:blank,
#                interleaved, medians of 3); screenshots in
#                target/test-artifacts/status-rack*.png.
# Exit 0 and "PASS status-rack" when every check holds, else 1.
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
[[ $(id -u) -eq 0 ]] || { echo "rack.sh: must run as root (netns)" >&2; exit 2; }
harness_init status-rack
chrome_check
[[ -x $BOOTD ]] || fail "no bootd at $BOOTD"
ART=$REPO/target/test-artifacts
mkdir -p "$ART"

# Node i: MAC 52:54:01:00:HH:LL (i in hex), address 10.77.(4 + i/250).(1 + i%250).
mac_of() { printf '52:54:01:00:%02x:%02x' $(($1 / 256)) $(($1 % 256)); }
ip_of() { echo "10.77.$((4 + $1 / 250)).$((1 + $1 % 250))"; }

mkdir -p "$WORK/images/lab" "$WORK/tftp" "$WORK/state"
cp -r "$REPO/examples/lab/ignition" "$WORK/ignition"
head -c 200000 /dev/zero >"$WORK/images/lab/kernel"
head -c 100000 /dev/zero >"$WORK/images/lab/initramfs"
nodes=$(python3 - <<'PY'
items = []
for i in range(1000):
    role = "master" if i < 3 else "worker"
    mac = "52:54:01:00:%02x:%02x" % (i // 256, i % 256)
    ip = "10.77.%d.%d" % (4 + i // 250, 1 + i % 250)
    items.append('{name: r%04d, role: %s, live: true, macs: ["%s"], ip: %s}' % (i, role, mac, ip))
print("[" + ", ".join(items) + "]")
PY
)
lab_site "$WORK/site.yaml" images.root="$WORK/images" host.stateDir="$WORK/state" \
  host.tftp.root="$WORK/tftp" ignition.dir="$WORK/ignition" -host.dhcp.interface \
  networks.lab.subnet=10.77.0.0/16 nodes="$nodes"

addrs=(10.77.0.1/16)
for ((i = 0; i < 300; i++)); do addrs+=("$(ip_of $i)/32"); done
lab_netns "rack-$$" "${addrs[@]}"
start_bootd --bin "$BOOTD" --log "$WORK/bootd.log" --timeout 30 \
  -- --site "$WORK/site.yaml" --state-dir "$WORK/state" --dhcp-reply-ports 68,1067 \
  || fail "bootd not ready"

# --- DHCP for all 1 000, through a relay at 10.77.0.1:1067 -------------------
acks=$(nsx python3 - <<'PY'
import socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("10.77.0.1", 1067)); s.settimeout(2)
def pkt(mac, xid, mtype, req=None):
    b = struct.pack("!BBBBIHHIIII", 1, 1, 6, 1, xid, 0, 0, 0, 0, 0, 0x0a4d0001)
    b += mac + b"\0" * 10 + b"\0" * 192 + b"\x63\x82\x53\x63"
    v = b"PXEClient:Arch:00007:UNDI:003016"
    b += bytes([53, 1, mtype, 93, 2, 0, 7, 60, len(v)]) + v
    if req:
        b += bytes([50, 4]) + socket.inet_aton(req) + bytes([54, 4]) + socket.inet_aton("10.77.0.1")
    return b + b"\xff"
def ask(mac, xid, mtype, req=None):
    s.sendto(pkt(mac, xid, mtype, req), ("10.77.0.1", 67))
    while True:
        try:
            d = s.recv(1500)
        except socket.timeout:
            return None, None
        if struct.unpack("!I", d[4:8])[0] != xid:
            continue
        o, t = 240, None
        while o < len(d) and d[o] != 255:
            if d[o] == 53: t = d[o + 2]
            o += 2 + d[o + 1]
        return t, socket.inet_ntoa(d[16:20])
n = 0
for i in range(1000):
    mac = bytes([0x52, 0x54, 0x01, 0x00, i // 256, i % 256])
    t, ip = ask(mac, 0x20000 + 2 * i, 1)
    if t == 2:
        t2, _ = ask(mac, 0x20001 + 2 * i, 3, ip)
        n += t2 == 5
print(n)
PY
)
check "DHCP: 1 000 nodes got their reservation through the relay (acks: $acks)" test "$acks" = 1000

# --- scripts, kernels, Ignition from the nodes' own addresses -----------------
get() { nsx curl -fsS -o /dev/null --max-time 10 --interface "$1" "$2"; }
fails=0
for ((i = 0; i < 300; i++)); do
  get "$(ip_of $i)" "http://10.77.0.1:8080/ipxe/node?mac=$(mac_of $i)" || fails=$((fails + 1))
done
for ((i = 0; i < 100; i++)); do
  get "$(ip_of $i)" http://10.77.0.1:8080/images/lab/kernel || fails=$((fails + 1))
done
for ((i = 0; i < 50; i++)); do
  get "$(ip_of $i)" "http://10.77.0.1:8080/ignition/r$(printf %04d $i)" || fails=$((fails + 1))
done
check "HTTP: 450 fetches from the nodes' addresses served (failed: $fails)" test "$fails" = 0
denied=0
for ((i = 300; i < 305; i++)); do
  code=$(nsx curl -s -o /dev/null -w '%{http_code}' --max-time 10 --interface "$(ip_of 0)" \
    "http://10.77.0.1:8080/ignition/r$(printf %04d $i)")
  [[ $code == 404 ]] && denied=$((denied + 1))
done
check "HTTP: 5 Ignitions asked from another node's address refused" test "$denied" = 5
sleep 1 # the recorder's queue is drained by its writer task

# --- the page ------------------------------------------------------------------
bytes=$(nsx curl -fsS http://10.77.0.1:8080/status | wc -c)
check "the page is under 1 MB ($bytes bytes)" test "$bytes" -lt 1000000
export CHROME_WINDOW=1400,1000
# Chromium's own start is part of either run: the difference is the page's.
page_s=() blank_s=()
for _ in 1 2 3; do
  t0=$(now); chrome --dump-dom about:blank >/dev/null || true; blank_s+=("$(since "$t0")")
  t0=$(now); chrome --dump-dom http://10.77.0.1:8080/status >"$WORK/status.dom" || true; page_s+=("$(since "$t0")")
done
page=$(median_of "${page_s[@]}") blank=$(median_of "${blank_s[@]}")
render=$(awk -v a="$page" -v b="$blank" 'BEGIN { printf "%.2f", a - b }')
log "Chromium --dump-dom: /status ${page_s[*]} s, about:blank ${blank_s[*]} s"
check "rendered within a second (${render} s: /status ${page} s - about:blank ${blank} s, medians of 3)" \
  awk -v r="$render" 'BEGIN { exit !(r < 1.0) }'
chrome --screenshot="$ART/status-rack.png" http://10.77.0.1:8080/status >/dev/null || true
chrome --dump-dom "http://10.77.0.1:8080/status?phase=kernel" >"$WORK/kernel.dom" || true
chrome --screenshot="$ART/status-rack-kernel.png" "http://10.77.0.1:8080/status?phase=kernel" >/dev/null || true
chrome --dump-dom "http://10.77.0.1:8080/status?failing=1" >"$WORK/failing.dom" || true
cp "$WORK/status.dom" "$ART/status-rack.dom.html"

count() { grep -o "data-count=\"$1\" href=\"/status?phase=$1\">$1 [0-9]*" "$WORK/status.dom" | awk '{print $NF}'; }
check "DOM: 1 000 nodes counted" grep -q '<p id="counts">Nodes <b>1000</b>' "$WORK/status.dom"
check "DOM: 5 failing" grep -q 'id="failing" class="err" href="/status?failing=1">5<' "$WORK/status.dom"
# The five denied went on to phase ignition (their failed attempt).
check "DOM: per phase dhcp 695 (got $(count dhcp))" test "$(count dhcp)" = 695
check "DOM: per phase script 200 (got $(count script))" test "$(count script)" = 200
check "DOM: per phase kernel 50 (got $(count kernel))" test "$(count kernel)" = 50
check "DOM: per phase ignition 55 (got $(count ignition))" test "$(count ignition)" = 55
check "DOM: per role: master 3, worker 997" bash -c "grep -q 'href=\"/status?role=master\">master 3</a>' '$WORK/status.dom' && grep -q 'href=\"/status?role=worker\">worker 997</a>' '$WORK/status.dom'"
bars=$(grep -o '<div class="g">' "$WORK/status.dom" | wc -l)
check "DOM: one phase bar per node ($bars)" test "$bars" = 1000
check "DOM: r0000's bar has its four phases" bash -c "grep 'data-node=\"r0000\"' '$WORK/status.dom' | grep -o '<i class=\"p[0-9]*\"' | wc -l | grep -qx 4"
krows=$(grep -c 'data-phase="kernel"' "$WORK/kernel.dom" || true)
check "DOM: ?phase=kernel lists the 50 nodes in their kernel ($krows)" test "$krows" = 50
check "DOM: ?phase=kernel says what it shows" grep -q 'Showing <b>50</b> of 1000 nodes: phase kernel' "$WORK/kernel.dom"
frows=$(grep -c '<tr class="err" data-node=' "$WORK/failing.dom" || true)
check "DOM: ?failing=1 lists the 5 denied ($frows)" test "$frows" = 5
check "screenshots written" test -s "$ART/status-rack.png" -a -s "$ART/status-rack-kernel.png"

if [[ $FAILS -gt 0 ]]; then
  echo "--- chromium.log (tail)"; tail -n 20 "$WORK/chromium.log" 2>/dev/null || true
  echo "--- bootd.log (tail)"; tail -n 30 "$WORK/bootd.log"
fi
log "render: ${render} s; page: $bytes bytes; screenshots in $ART"
harness_verdict
