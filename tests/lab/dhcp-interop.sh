#!/usr/bin/env bash
# DHCP interop: real clients against bootd's DHCP server, in private network
# namespaces (10.77.0.0/24 on a bridge; nothing leaves them).
#   - busybox udhcpc and ISC dhclient get their reserved lease with hostname,
#     router, DNS and domain; bootpc (plain BOOTP, no DHCP message type, as
#     PowerVM LPAR firmware sends) gets p9-0's address and GRUB's core.elf;
#     udhcpc asking for options 209/210 (as petitboot runs it) gets p9-0's
#     pxelinux config name and bootd's HTTP base, and the config is fetched;
#   - perfdhcp (Kea) in relay mode (giaddr 10.77.0.254, from its own namespace
#     across a veth) completes DORA for 100 simulated clients from the pool;
#   - ISC dhcrelay inserting option 82 (-a: circuit-id = its port's name) in
#     front of a rack subnet (10.78.0.0/24): a client with a MAC the site does
#     not know, on port "port7", gets the reservation of the node that port
#     names (rack-7), and bootd's replies carry option 82 exactly as the
#     relay wrote it (seen on the wire between relay and server).
# Prints "ok   <client> ..." / "FAIL <client>: ..." per client, then "PASS dhcp-interop"
# or "FAIL dhcp-interop (N failed)" (exit 1).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/lib/harness.sh
. "$HERE/../lib/harness.sh"
BOOTD=${1:-$REPO/target/release/bootd}
[[ $(id -u) -eq 0 ]] || { echo "dhcp-interop.sh: run as root" >&2; exit 2; }
[[ -x $BOOTD ]] || { echo "dhcp-interop.sh: no bootd at $BOOTD" >&2; exit 2; }
harness_init dhcp-interop

# S: the lab host (br0, bootd); C: the client, on a veth into the bridge;
# R: the relay, on another veth into the bridge, with the relay's address (giaddr).
S=dhcpi-s-$$ C=dhcpi-c-$$ R=dhcpi-r-$$
lab_netns "$S"
ns_new "$C"
ns_new "$R"
ns_veth "$C" "vc-$$" "$S" "vb-$$"
ip -n "$S" link set "vb-$$" master br0 up
ns_veth "$R" "vr-$$" "$S" "vbr-$$"
ip -n "$S" link set "vbr-$$" master br0 up
ns_addr "$R" "vr-$$" 10.77.0.254/24

# The lab site, with a dynamic pool for perfdhcp's simulated clients.
# The rack subnet behind the relay, and rack-7: known by its switch port only.
lab_site "$WORK/site.yaml" networks.lab.pool='{start: 10.77.0.100, end: 10.77.0.220}' \
  host.stateDir="$WORK/state" host.tftp.root="$WORK" \
  networks+='{name: rack, subnet: 10.78.0.0/24, gateway: 10.78.0.1, dnsServers: [10.77.0.1]}' \
  host.dhcp.trustedRelays='[10.78.0.1]' \
  nodes+='{name: rack-7, role: worker, live: true, ip: 10.78.0.47, relay: {circuitId: port7}, kernelArgs: [console=ttyS0]}'
start_bootd --ns "$S" --log "$WORK/bootd.log" --bin "$BOOTD" -- --site "$WORK/site.yaml" || fail "bootd did not start"

# miss WHAT: a failed check, with the end of bootd's log.
miss() { bad "$@"; tail -n 20 "$WORK/bootd.log"; }

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
  ok "udhcpc $(cat "$WORK/udhcpc.out")"
else
  miss "udhcpc: $(cat "$WORK/udhcpc.out" 2>/dev/null || echo no lease)"
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
  ok "dhclient $(cat "$WORK/dhclient.out")"
else
  miss "dhclient: $(cat "$WORK/dhclient.out" 2>/dev/null || echo no lease)"
fi
# (dhclient went to the background with its lease: stopped by its PID, and
# waited for: bootpc binds the same port 68 next, and a dhclient still
# exiting made it fail with "Address already in use")
if [[ -f $WORK/dhclient.pid ]]; then stop_pids "$(cat "$WORK/dhclient.pid")"; fi

# --- bootpc (plain BOOTP, as PowerVM firmware sends it) as p9-0 ---
ip -n "$C" link set vc-$$ down
ip -n "$C" link set vc-$$ address 52:54:00:77:00:30 up
# bootpc sends from a plain UDP socket: it needs a route for the limited
# broadcast, and asks for a broadcast reply (it has no address to receive one).
ip -n "$C" route add 255.255.255.255/32 dev vc-$$
if ip netns exec "$C" timeout 20 bootpc --dev vc-$$ --serverbcast --timeoutwait 10 --returniffail >"$WORK/bootpc.out" 2>&1 \
  && grep -q "^IPADDR='10.77.0.30'" "$WORK/bootpc.out" && grep -q "^BOOTFILE='core.elf'" "$WORK/bootpc.out" \
  && grep -q "^SERVER='10.77.0.1'" "$WORK/bootpc.out"; then
  ok "bootpc $(grep -E "^(IPADDR|BOOTFILE|SERVER|NETMASK|GATEWAYS)=" "$WORK/bootpc.out" | tr '\n' ' ')"
else
  miss "bootpc: $(tr '\n' ' ' <"$WORK/bootpc.out")"
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
  ok "petitboot-style udhcpc $(cat "$WORK/petitboot.out"), config: $(grep -c . "$WORK/pxelinux.cfg") lines"
else
  miss "petitboot-style udhcpc: $(cat "$WORK/petitboot.out" 2>/dev/null || echo no lease)"
fi

# --- perfdhcp, relay mode, 100 clients from the pool ---
if ip netns exec "$R" timeout 60 perfdhcp -4 -l 10.77.0.254 -R 100 -r 50 -n 100 -p 10 10.77.0.1 >"$WORK/perfdhcp.out" 2>&1 || true; then :; fi
acks=$(awk '/\*\*\*Statistics for: REQUEST-ACK\*\*\*/ {f=1} f && /^received packets:/ {print $3; exit}' "$WORK/perfdhcp.out")
if [[ -n ${acks:-} && ${acks:-0} -ge 90 ]]; then
  ok "perfdhcp relay: $acks REQUEST-ACK exchanges completed (DORA)"
else
  miss "perfdhcp relay: ACKs received: ${acks:-none}"; cat "$WORK/perfdhcp.out"
fi
# --- ISC dhcrelay with option 82 (circuit-id = its port's name) ---
# D: a machine on the relay's port7 (10.78.0.0/24); bootd reaches that
# subnet through the relay.
D=dhcpi-d-$$
ns_new "$D"
ns_veth "$R" port7 "$D" "vd-$$"
ns_addr "$R" port7 10.78.0.1/24
ip -n "$R" link set port7 up
ip -n "$S" route add 10.78.0.0/24 via 10.77.0.254
ip netns exec "$R" sysctl -qw net.ipv4.ip_forward=1
ip -n "$D" link set "vd-$$" address 52:54:00:99:00:07 up
# The wire between relay and server, decoded (option 82 both ways).
spawn --ns "$R" --log "$WORK/relay-wire.txt" tcpdump -l -n -vv -i "vr-$$" udp port 67
tcpdump_pid=$SPAWNED
spawn --ns "$R" --log "$WORK/dhcrelay.log" dhcrelay -4 -d --no-pid -a -id port7 -iu "vr-$$" 10.77.0.1
relay_pid=$SPAWNED
sleep 1
if UDHCPC_OUT=$WORK/rack.out ip netns exec "$D" timeout 20 busybox udhcpc -i "vd-$$" -n -q -t 5 -s "$WORK/udhcpc.sh" >/dev/null 2>&1 \
  && grep -q "ip=10.78.0.47 router=10.78.0.1 dns=10.77.0.1 hostname=rack-7 " "$WORK/rack.out"; then
  ok "dhcrelay -a (option 82): an unknown MAC on port7 got rack-7's reservation: $(cat "$WORK/rack.out")"
else
  miss "dhcrelay -a: $(cat "$WORK/rack.out" 2>/dev/null || echo no lease)"; tail_log "$WORK/dhcrelay.log"
fi
sleep 0.5
stop_pid "$relay_pid"
stop_pid "$tcpdump_pid"
# Each packet tcpdump prints as a block; its second line has the addresses.
# Requests go to 10.77.0.1.67, replies to the relay (10.78.0.1.67); every one
# of either must carry Circuit-ID "port7".
agent_lines=$(awk '
  /^[0-9][0-9]:[0-9][0-9]:/ { dir = "" }
  /> 10\.77\.0\.1\.67:/ { dir = "req"; n[dir]++ }
  /> 10\.78\.0\.1\.67:/ { dir = "rep"; n[dir]++ }
  /Circuit-ID SubOption 1, length 5: port7/ && dir != "" { a[dir]++ }
  END { printf "%d %d %d %d", n["req"], a["req"], n["rep"], a["rep"] }' "$WORK/relay-wire.txt")
read -r nreq areq nrep arep <<<"$agent_lines"
if [[ $nreq -ge 2 && $nrep -ge 2 && $areq == "$nreq" && $arep == "$nrep" ]]; then
  ok "option 82 echoed: $nrep replies from bootd to the relay, each with the relay's Circuit-ID port7 ($nreq requests carried it)"
else
  miss "option 82 echo: requests $nreq (with 82: $areq), replies $nrep (with 82: $arep)"; head -40 "$WORK/relay-wire.txt"
fi

log "$PASSES passed, $FAILS failed"
harness_verdict
