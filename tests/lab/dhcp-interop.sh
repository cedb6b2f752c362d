#!/usr/bin/env bash
# DHCP interop: real clients against bootd's DHCP server, in private network
# namespaces (10.77.0.0/24 on a bridge; nothing leaves them).
#   - busybox udhcpc and ISC dhclient get their reserved lease with hostname,
#     router, DNS and domain; bootpc (plain BOOTP, no DHCP message type, as
#     PowerVM LPAR firmware sends) gets p9-0's address and GRUB's core.elf;
#     udhcpc asking for options 209/210 (as petitboot runs it) gets p9-0's
#     pxelinux config name and bootd's HTTP base, and the config is fetched;
#   - perfdhcp (Kea) in relay mode (giaddr 10.77.0.254, from its own namespace
#     across a veth) completes DORA for 100 simulated clients from the pool.
# Prints "PASS dhcp-interop <client>" / "FAIL ..." per client; exit 1 on any failure.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BOOTD=${1:-$REPO/target/release/bootd}
[[ $(id -u) -eq 0 ]] || { echo "dhcp-interop.sh: run as root" >&2; exit 2; }
[[ -x $BOOTD ]] || { echo "dhcp-interop.sh: no bootd at $BOOTD" >&2; exit 2; }

S=dhcpi-s-$$ C=dhcpi-c-$$ R=dhcpi-r-$$
WORK=$(mktemp -d /tmp/dhcp-interop.XXXXXX)
chmod 755 "$WORK"   # the daemon, started as root, serves as nobody: it reads its files here
PIDS=()
. "$REPO/tests/lib.sh"
cleanup() {
  stop_started "$S" "$C" "$R"
  rm -rf "$WORK"
}
trap cleanup EXIT

ip netns add "$S"; ip netns add "$C"; ip netns add "$R"
ip -n "$S" link set lo up
ip -n "$S" link add br0 type bridge
ip -n "$S" addr add 10.77.0.1/24 dev br0
ip -n "$S" link set br0 up
# client: veth into the bridge
ip link add vc-$$ netns "$C" type veth peer name vb-$$ netns "$S"
ip -n "$S" link set vb-$$ master br0 up
ip -n "$C" link set lo up
# relay: veth into the bridge, with the relay's address (giaddr)
ip link add vr-$$ netns "$R" type veth peer name vbr-$$ netns "$S"
ip -n "$S" link set vbr-$$ master br0 up
ip -n "$R" link set lo up
ip -n "$R" addr add 10.77.0.254/24 dev vr-$$
ip -n "$R" link set vr-$$ up

# The lab site, with a dynamic pool for perfdhcp's simulated clients.
sed -e "s|dnsServers: \[10.77.0.1\]|dnsServers: [10.77.0.1]\n    pool: { start: 10.77.0.100, end: 10.77.0.220 }|" \
    -e "s|stateDir: ../../target/lab-state|stateDir: $WORK/state|" \
    -e "s|dir: ignition|dir: $REPO/examples/lab/ignition|" \
    -e "s|root: ../../target/lab-images|root: $REPO/target/lab-images|" \
    -e "s|root: ../../target/lab-tftp|root: $WORK|" \
    "$REPO/examples/lab/site.yaml" >"$WORK/site.yaml"
ip netns exec "$S" "$BOOTD" --site "$WORK/site.yaml" >"$WORK/bootd.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do
  ip netns exec "$S" curl -fsS -o /dev/null http://10.77.0.1:8080/healthz 2>/dev/null && break
  sleep 0.1
done

passed=0 failed=0
pass() { echo "PASS dhcp-interop $*"; passed=$((passed + 1)); }
fail() { echo "FAIL dhcp-interop $*"; failed=$((failed + 1)); tail -n 20 "$WORK/bootd.log"; }

# --- busybox udhcpc as worker-1 ---
ip -n "$C" link set vc-$$ address 52:54:00:77:00:21 up
cat >"$WORK/udhcpc.sh" <<'S'
#!/bin/sh
[ "$1" = bound ] && echo "ip=$ip router=$router dns=$dns hostname=$hostname domain=$domain lease=$lease" >"$UDHCPC_OUT"
exit 0
S
chmod +x "$WORK/udhcpc.sh"
if UDHCPC_OUT=$WORK/udhcpc.out ip netns exec "$C" timeout 20 busybox udhcpc -i vc-$$ -n -q -t 5 -s "$WORK/udhcpc.sh" >/dev/null 2>&1 \
  && grep -q "ip=10.77.0.21 router=10.77.0.1 dns=10.77.0.1 hostname=worker-1 domain=lab.example.test lease=3600" "$WORK/udhcpc.out"; then
  pass "udhcpc $(cat "$WORK/udhcpc.out")"
else
  fail "udhcpc: $(cat "$WORK/udhcpc.out" 2>/dev/null || echo no lease)"
fi

# --- ISC dhclient as worker-0 ---
ip -n "$C" link set vc-$$ down
ip -n "$C" link set vc-$$ address 52:54:00:77:00:20 up
cat >"$WORK/dhclient.sh" <<'S'
#!/bin/sh
case $reason in BOUND|RENEW|REBOOT)
  echo "ip=$new_ip_address router=$new_routers dns=$new_domain_name_servers hostname=$new_host_name domain=$new_domain_name" >"$DHCLIENT_OUT";;
esac
exit 0
S
chmod +x "$WORK/dhclient.sh"
if DHCLIENT_OUT=$WORK/dhclient.out ip netns exec "$C" timeout 30 dhclient -4 -1 -sf "$WORK/dhclient.sh" -lf "$WORK/dhclient.leases" -pf "$WORK/dhclient.pid" \
     -e DHCLIENT_OUT="$WORK/dhclient.out" vc-$$ >/dev/null 2>&1 \
  && grep -q "ip=10.77.0.20 router=10.77.0.1 dns=10.77.0.1 hostname=worker-0 domain=lab.example.test" "$WORK/dhclient.out"; then
  pass "dhclient $(cat "$WORK/dhclient.out")"
else
  fail "dhclient: $(cat "$WORK/dhclient.out" 2>/dev/null || echo no lease)"
fi
[[ -f $WORK/dhclient.pid ]] && kill "$(cat "$WORK/dhclient.pid")" 2>/dev/null || true

# --- bootpc (plain BOOTP, as PowerVM firmware sends it) as p9-0 ---
ip -n "$C" link set vc-$$ down
ip -n "$C" link set vc-$$ address 52:54:00:77:00:30 up
# bootpc sends from a plain UDP socket: it needs a route for the limited
# broadcast, and asks for a broadcast reply (it has no address to receive one).
ip -n "$C" route add 255.255.255.255/32 dev vc-$$
if ip netns exec "$C" timeout 20 bootpc --dev vc-$$ --serverbcast --timeoutwait 10 --returniffail >"$WORK/bootpc.out" 2>&1 \
  && grep -q "^IPADDR='10.77.0.30'" "$WORK/bootpc.out" && grep -q "^BOOTFILE='core.elf'" "$WORK/bootpc.out" \
  && grep -q "^SERVER='10.77.0.1'" "$WORK/bootpc.out"; then
  pass "bootpc $(grep -E "^(IPADDR|BOOTFILE|SERVER|NETMASK|GATEWAYS)=" "$WORK/bootpc.out" | tr '\n' ' ')"
else
  fail "bootpc: $(tr '\n' ' ' <"$WORK/bootpc.out")"
fi

# --- udhcpc as petitboot runs it (asks for options 209/210) as p9-0, then
#     the pxelinux config fetched from the path prefix it got ---
# busybox names options 209/210 pxeconffile and pxepathprefix: the variables
# petitboot's udhcpc script reads; then the config, fetched from the leased
# address as petitboot does (a node's config goes only to its address).
cat >"$WORK/petitboot.sh" <<'S'
#!/bin/sh
[ "$1" = bound ] && echo "ip=$ip conf=$pxeconffile prefix=$pxepathprefix" >"$PB_OUT"
exit 0
S
chmod +x "$WORK/petitboot.sh"
ip -n "$C" route del 255.255.255.255/32 dev vc-$$ 2>/dev/null || true
if PB_OUT=$WORK/petitboot.out ip netns exec "$C" timeout 20 busybox udhcpc -i vc-$$ -n -q -t 5 -O 209 -O 210 -s "$WORK/petitboot.sh" >/dev/null 2>&1 \
  && grep -q "^ip=10.77.0.30 conf=pxelinux.cfg/01-52-54-00-77-00-30 prefix=http://10.77.0.1:8080/$" "$WORK/petitboot.out" \
  && ip -n "$C" addr add 10.77.0.30/24 dev "vc-$$" \
  && ip netns exec "$C" curl -fsS --retry 3 --retry-connrefused "http://10.77.0.1:8080/pxelinux.cfg/01-52-54-00-77-00-30" >"$WORK/pxelinux.cfg" \
  && grep -q "^  KERNEL http://10.77.0.1:8080/images/lab-ppc64le/vmlinux$" "$WORK/pxelinux.cfg"; then
  pass "petitboot-style udhcpc $(cat "$WORK/petitboot.out"), config: $(grep -c . "$WORK/pxelinux.cfg") lines"
else
  fail "petitboot-style udhcpc: $(cat "$WORK/petitboot.out" 2>/dev/null || echo no lease)"
fi

# --- perfdhcp, relay mode, 100 clients from the pool ---
if ip netns exec "$R" timeout 60 perfdhcp -4 -l 10.77.0.254 -R 100 -r 50 -n 100 -p 10 10.77.0.1 >"$WORK/perfdhcp.out" 2>&1 || true; then :; fi
sent=$(awk '/^sent packets:/ {print $3; exit}' "$WORK/perfdhcp.out" 2>/dev/null || true)
acks=$(awk '/\*\*\*Statistics for: REQUEST-ACK\*\*\*/ {f=1} f && /^received packets:/ {print $3; exit}' "$WORK/perfdhcp.out")
if [[ -n ${acks:-} && ${acks:-0} -ge 90 ]]; then
  pass "perfdhcp relay: $acks REQUEST-ACK exchanges completed (DORA)"
else
  fail "perfdhcp relay: ACKs received: ${acks:-none}"; cat "$WORK/perfdhcp.out"
fi
echo "dhcp-interop: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
