#!/usr/bin/env bash
# DHCPv6 interop: real clients against bootd's DHCPv6 server, in private
# network namespaces (fd00:77::/64 and 10.77.0.0/24 on a bridge; nothing
# leaves them). The dual-stack lab site (examples/lab-dual).
#   - ISC dhclient -6 gets worker-0's reserved address, the DNS server and
#     the cluster's domain, and the binding is on disk; a machine that is no
#     node gets a pool address, which after a restart of bootd goes to no
#     other machine and back to it; its release is recorded;
#   - dhcpcd (DHCPv6 only) gets worker-1's reserved address; so does busybox
#     udhcpc6 (built from Debian's source by tests/lab/udhcpc6.sh), with the
#     DNS server and search list, and option 59 when it says it is UEFI x64;
#   - perfdhcp -6 in relay mode (Relay-forward from its own namespace across
#     a veth) completes Solicit-Advertise-Request-Reply for 100 simulated
#     clients from the pool;
#   - with host.dhcp6.maxBindings at 150, 200 more perfdhcp clients fill the
#     table to 150 and no further (bootd_dhcp6_bindings, NoAddrsAvail for the
#     rest), and a node (dhclient as worker-0) is still answered after;
#   - malformed datagrams (truncated option, 33 relays deep) are dropped and
#     counted in bootd_dhcp6_packets{kind="malformed"}, and bootd answers after;
# Prints "ok   <client> ..." / "FAIL <client>: ..." per check, then "PASS dhcp6-interop"
# or "FAIL dhcp6-interop (N failed)" (exit 1).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/lib/harness.sh
. "$HERE/../lib/harness.sh"
BOOTD=${1:-$REPO/target/release/bootd}
[[ $(id -u) -eq 0 ]] || { echo "dhcp6-interop.sh: run as root" >&2; exit 2; }
[[ -x $BOOTD ]] || { echo "dhcp6-interop.sh: no bootd at $BOOTD" >&2; exit 2; }
harness_init dhcp6-interop

# S: the lab host (br0, bootd); C: the client and R: the relay, each on a
# veth into the bridge.
S=dhcp6-s-$$ C=dhcp6-c-$$ R=dhcp6-r-$$
lab_netns "$S" 10.77.0.1/24 fd00:77::1/64
ns_new "$C"
ns_new "$R"
# No duplicate address detection: addresses are usable at once (br0's too).
for ns in "$S" "$C" "$R"; do
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
done
ip netns exec "$S" sysctl -qw net.ipv6.conf.br0.accept_dad=0
ns_veth "$C" "vc-$$" "$S" "vb-$$"
ip -n "$S" link set "vb-$$" master br0 up
ns_veth "$R" "vr-$$" "$S" "vbr-$$"
ip -n "$S" link set "vbr-$$" master br0 up
ns_addr "$R" "vr-$$" fd00:77::fe/64

# The dual-stack lab site, at most 150 DHCPv6 bindings.
lab_site "$WORK/site.yaml" --from examples/lab-dual/site.yaml host.stateDir="$WORK/state" \
  host.tftp.root="$WORK" host.dhcp6.maxBindings=150
# bootd_up: bootd started (again: its log is appended to), ready on IPv6.
bootd_up() {
  start_bootd --ns "$S" --log "$WORK/bootd.log" --bin "$BOOTD" --ready "http://[fd00:77::1]:8080/healthz" --timeout 10 \
    -- --site "$WORK/site.yaml"
}
bootd_up || fail "bootd did not start"

# miss WHAT: a failed check, with the end of bootd's log.
miss() { bad "$@"; tail -n 20 "$WORK/bootd.log"; }
metric() { ip netns exec "$S" curl -fsS "http://10.77.0.1:8080/metrics" | awk -v k="bootd_dhcp6_packets_total{kind=\"$1\"}" '$1 == k {print $2}'; }
bindings() { ip netns exec "$S" curl -fsS "http://10.77.0.1:8080/metrics" | awk '$1 == "bootd_dhcp6_bindings" {print $2}'; }

# dhclient's script: what it was given, one line per event.
cat >"$WORK/dhclient.sh" <<'S'
#!/bin/sh
case $reason in BOUND6|RENEW6|REBIND6|RELEASE6|EXPIRE6|STOP6)
  echo "$reason ip=$new_ip6_address old=$old_ip6_address dns=$new_dhcp6_name_servers domain=$new_dhcp6_domain_search" >>"$DHCLIENT_OUT";;
esac
exit 0
S
chmod +x "$WORK/dhclient.sh"
# stop_dhclient6: dhclient, gone to the background with its lease, stopped
# by its PID and waited for (the next client binds the same port).
stop_dhclient6() {
  if [[ -f $WORK/dhclient6.pid ]]; then stop_pids "$(cat "$WORK/dhclient6.pid")"; fi
}
dhclient6() {
  DHCLIENT_OUT=$WORK/dhclient.out ip netns exec "$C" timeout 30 dhclient -6 -sf "$WORK/dhclient.sh" \
    -lf "$WORK/dhclient6.leases" -pf "$WORK/dhclient6.pid" -e DHCLIENT_OUT="$WORK/dhclient.out" "$@" vc-$$ >>"$WORK/dhclient.log" 2>&1
}

# --- ISC dhclient -6 as worker-0: Solicit/Advertise/Request/Reply ---
ip -n "$C" link set vc-$$ address 52:54:00:77:00:20 up
if dhclient6 -1 && grep -q "^BOUND6 ip=fd00:77::20 old= dns=fd00:77::1 domain=lab.example.test.\?$" "$WORK/dhclient.out"; then
  ok "dhclient -6 $(grep BOUND6 "$WORK/dhclient.out")"
else
  miss "dhclient -6: $(cat "$WORK/dhclient.out" 2>/dev/null || echo no lease) $(tail -n 5 "$WORK/dhclient.log")"
fi
stop_dhclient6
sleep 0.5
if grep -q '"ip":"fd00:77::20"' "$WORK/state/leases6.jsonl" 2>/dev/null; then
  ok "binding on disk: $(grep -c . "$WORK/state/leases6.jsonl") line(s) in leases6.jsonl"
else
  miss "binding on disk: $(cat "$WORK/state/leases6.jsonl" 2>/dev/null || echo no file)"
fi

# --- a machine that is no node gets a pool address; bootd restarts; another
#     machine does not get that address, and the first gets it back ---
pool_client() {  # MAC LEASEFILE: prints the address dhclient was given
  ip -n "$C" link set vc-$$ down
  ip -n "$C" link set vc-$$ address "$1" up
  : >"$WORK/dhclient.out"
  DHCLIENT_OUT=$WORK/dhclient.out ip netns exec "$C" timeout 30 dhclient -6 -1 -sf "$WORK/dhclient.sh" \
    -lf "$2" -pf "$WORK/dhclient6.pid" -e DHCLIENT_OUT="$WORK/dhclient.out" vc-$$ >>"$WORK/dhclient.log" 2>&1 || true
  stop_dhclient6
  sleep 0.3
  sed -n 's/^BOUND6 ip=\([^ ]*\).*/\1/p' "$WORK/dhclient.out" | head -n 1
}
a1=$(pool_client 52:54:00:99:00:01 "$WORK/a.leases")
stop_pid "$BOOTD_PID"
bootd_up || fail "bootd did not start again"
b1=$(pool_client 52:54:00:99:00:02 "$WORK/b.leases")
a2=$(pool_client 52:54:00:99:00:01 "$WORK/a.leases")
if [[ $a1 == fd00:77::1* && -n $b1 && $b1 != "$a1" && $a2 == "$a1" ]]; then
  ok "pool binding survives a restart: A got $a1; after the restart B got $b1 and A $a2"
else
  miss "pool binding across a restart: A $a1, B $b1, A again $a2"
fi

# --- dhclient -6 -r: Release; bootd's binding is released ---
ip -n "$C" link set vc-$$ down; ip -n "$C" link set vc-$$ address 52:54:00:99:00:01 up
if DHCLIENT_OUT=$WORK/dhclient.out ip netns exec "$C" timeout 30 dhclient -6 -r -sf "$WORK/dhclient.sh" \
     -lf "$WORK/a.leases" -pf "$WORK/dhclient6.pid" vc-$$ >>"$WORK/dhclient.log" 2>&1 \
   && sleep 0.5 && tail -n 1 "$WORK/state/leases6.jsonl" | grep -q "\"ip\":\"$a1\".*\"state\":\"released\""; then
  ok "dhclient -6 -r: release recorded ($(tail -n 1 "$WORK/state/leases6.jsonl"))"
else
  miss "dhclient -6 -r: $(tail -n 2 "$WORK/state/leases6.jsonl" 2>/dev/null)"
fi

# --- dhcpcd, DHCPv6 only, as worker-1 ---
ip -n "$C" link set vc-$$ down
ip -n "$C" link set vc-$$ address 52:54:00:77:00:21 up
if command -v dhcpcd >/dev/null; then
  cat >"$WORK/dhcpcd.sh" <<'S'
[ "$reason" = BOUND6 ] && echo "ip=$new_dhcp6_ia_na1_ia_addr1 dns=$new_dhcp6_name_servers" >>"$DHCPCD_OUT"
S
  if DHCPCD_OUT=$WORK/dhcpcd.out ip netns exec "$C" timeout 30 dhcpcd -6 -1 -B -T --nohook resolv.conf -c "$WORK/dhcpcd.sh" \
       --ia_na vc-$$ >"$WORK/dhcpcd.log" 2>&1; grep -q "fd00:77::21" "$WORK/dhcpcd.log" "$WORK/dhcpcd.out" 2>/dev/null; then
    ok "dhcpcd -6 $(grep -ho 'fd00:77::21[^ ]*' "$WORK/dhcpcd.log" "$WORK/dhcpcd.out" 2>/dev/null | head -n 1)"
  else
    miss "dhcpcd -6: $(tail -n 8 "$WORK/dhcpcd.log")"
  fi
fi

# --- busybox udhcpc6 as worker-1 (Debian's busybox has no udhcpc6:
#     tests/lab/udhcpc6.sh builds one from Debian's source, once): address,
#     DNS server and search list; option 59 only for a network-boot client
#     (arch 7, UEFI x64, in option 61), not for plain udhcpc6 asking for it ---
UDHCPC6_DIR=$REPO/target/udhcpc6
if "$HERE/udhcpc6.sh" "$UDHCPC6_DIR" >"$WORK/udhcpc6-build.log" 2>&1; then
  cat >"$WORK/udhcpc6.sh" <<'S'
#!/bin/sh
[ "$1" = bound ] && echo "ipv6=$ipv6 dns=$dns search=$search bootfile_url=$bootfile_url" >>"$U6_OUT"
exit 0
S
  chmod +x "$WORK/udhcpc6.sh"
  udhcpc6_run() {  # OUT ARGS...: one Solicit..Reply; what the script was given in OUT
    : >"$1"
    ip netns exec "$C" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin U6_OUT="$1" timeout 30 \
      "$UDHCPC6_DIR/busybox" udhcpc6 -i vc-$$ -n -q -t 5 -s "$WORK/udhcpc6.sh" "${@:2}" >>"$WORK/udhcpc6.log" 2>&1
  }
  ip -n "$C" link set vc-$$ down
  ip -n "$C" link set vc-$$ address 52:54:00:77:00:21 up
  # udhcpc6 writes addresses uncompressed (and lease= byte-swapped in 1.35: not checked)
  want="ipv6=fd00:0077:0000:0000:0000:0000:0000:0021 dns=fd00:0077:0000:0000:0000:0000:0000:0001 search=lab.example.test"
  if udhcpc6_run "$WORK/u6.out" -O bootfile_url && grep -qxF "$want bootfile_url=" "$WORK/u6.out"; then
    ok "udhcpc6 $(cat "$WORK/u6.out")"
  else
    miss "udhcpc6: $(cat "$WORK/u6.out") $(tail -n 5 "$WORK/udhcpc6.log")"
  fi
  if udhcpc6_run "$WORK/u6-boot.out" -O bootfile_url -x 61:0007 \
     && grep -qxF "$want bootfile_url=tftp://[fd00:77::1]/ipxe.efi" "$WORK/u6-boot.out"; then
    ok "udhcpc6 -O bootfile_url -x 61:0007 (UEFI x64): $(sed 's/.* bootfile_url=/bootfile_url=/' "$WORK/u6-boot.out")"
  else
    miss "udhcpc6 -x 61:0007: $(cat "$WORK/u6-boot.out") $(tail -n 5 "$WORK/udhcpc6.log")"
  fi
else
  miss "udhcpc6: tests/lab/udhcpc6.sh could not build it: $(tail -n 5 "$WORK/udhcpc6-build.log")"
fi

# --- perfdhcp -6, relay mode, 100 clients from the pool ---
ip netns exec "$R" timeout 60 perfdhcp -6 -l vr-$$ -A 1 -R 100 -r 50 -n 100 -p 10 fd00:77::1 >"$WORK/perfdhcp.out" 2>&1 || true
replies=$(awk '/\*\*\*Statistics for: REQUEST-REPLY\*\*\*/ {f=1} f && /^received packets:/ {print $3; exit}' "$WORK/perfdhcp.out")
if [[ -n ${replies:-} && ${replies:-0} -ge 90 ]]; then
  ok "perfdhcp -6 relay: $replies REQUEST-REPLY exchanges completed (SARR)"
else
  miss "perfdhcp -6 relay: Replies received: ${replies:-none}"; cat "$WORK/perfdhcp.out"
fi

# --- a full binding table: 200 new clients on top of what is bound, at
#     most 150 bindings; the rest are told NoAddrsAvail ---
b0=$(bindings)
ip netns exec "$R" timeout 60 perfdhcp -6 -l vr-$$ -A 1 -b duid=0001000100000000aabbcc000000 -R 200 -r 100 -n 200 -p 10 fd00:77::1 >"$WORK/perfdhcp-full.out" 2>&1 || true
b1=$(bindings)
got=$(awk '/\*\*\*Statistics for: REQUEST-REPLY\*\*\*/ {f=1} f && /^received packets:/ {print $3; exit}' "$WORK/perfdhcp-full.out")
full=$(grep -c "the binding table is full (150 bindings" "$WORK/bootd.log" || true)
if [[ ${b1:-0} -eq 150 && ${full:-0} -gt 0 ]]; then
  ok "maxBindings 150: bindings $b0 -> $b1 after 200 more clients (perfdhcp got ${got:-0} Replies; $full answers said the table is full)"
else
  miss "maxBindings 150: bindings $b0 -> ${b1:-none}, ${full:-0} 'table is full' answers"; tail -n 30 "$WORK/perfdhcp-full.out"
fi

# --- malformed input: dropped and counted; bootd goes on answering ---
before=$(metric malformed); before=${before:-0}
ip netns exec "$R" python3 - <<'PY'
import socket
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
solicit = bytes([1, 0, 0, 1]) + bytes([0, 1, 0, 10, 0, 3, 0, 1, 0x52, 0x54, 0, 0x99, 0, 1])
truncated = bytes([1, 0, 0, 2, 0, 1, 0, 200, 0, 3])
deep = solicit
for _ in range(33):
    deep = bytes([12, 0]) + bytes(16) + bytes(16) + bytes([0, 9]) + len(deep).to_bytes(2, "big") + deep
for m in (truncated, deep, bytes([1, 2])):
    s.sendto(m, ("fd00:77::1", 547))
PY
sleep 0.5
after=$(metric malformed); after=${after:-0}
: >"$WORK/dhclient.out"; rm -f "$WORK/dhclient6.leases"
ip -n "$C" link set vc-$$ down; ip -n "$C" link set vc-$$ address 52:54:00:77:00:20 up
if [[ $((after - before)) -eq 3 ]] && dhclient6 -1 && grep -q "ip=fd00:77::20" "$WORK/dhclient.out"; then
  ok "malformed: 3 dropped and counted (bootd_dhcp6_packets malformed $before -> $after); dhclient (worker-0, a node) answered after, with the table full"
else
  miss "malformed: counted $before -> $after; $(cat "$WORK/dhclient.out")"
fi
stop_dhclient6

log "$PASSES passed, $FAILS failed"
harness_verdict
