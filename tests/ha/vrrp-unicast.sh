#!/usr/bin/env bash
# VIPs on a network that drops multicast: two keepalived (Debian's) in
# appliance namespaces A (10.77.0.2) and B (10.77.0.3) on one bridge whose
# nftables drops and counts every IPv4 multicast frame (VRRP's 224.0.0.18
# among them) and counts the VRRP frames it lets through. Each
# configuration is `bootd render keepalived`'s, rendered inside the
# appliance's namespace from a lab site with vips.vrrp (its own address
# found on ens3), and vips.vrrp.notify names a program that appends its
# arguments, with the namespace it ran in, to a file.
#
# 1. Multicast (no unicastPeers): the adverts are dropped (counter > 0),
#    the two never hear each other and both hold the VIP: multicast VRRP
#    does not work here, and nothing moves between them.
# 2. unicastPeers [10.77.0.2, 10.77.0.3]: A holds the VIP; B, started
#    after, stays BACKUP past the master-down interval (it hears A); the
#    multicast counter does not move, the VRRP one does. The notify file:
#    A MASTER, B BACKUP. A is killed by PID (SIGKILL: no goodbye advert);
#    B holds the VIP within 3 adverts + 1.5 s, its notify run says MASTER.
#
# Usage: tests/ha/vrrp-unicast.sh [BINDIR]   (root; BINDIR holds bootd)
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/harness.sh
harness_init vrrp-unicast
BIN=$(realpath "${1:-target/release}")
[[ -x $BIN/bootd ]] || fail "$BIN/bootd missing"
for t in keepalived nft; do
  command -v "$t" >/dev/null || fail "$t missing (tests/lab/deps.sh)"
done

VIP=10.77.0.5
L=vul-$$ A=vua-$$ B=vub-$$
lab_netns "$L" 10.77.0.254/24
for x in A B; do
  ns=${!x}
  ns_new "$ns"
  ns_veth "$ns" ens3 "$L" "ve$x"
  ip -n "$L" link set "ve$x" master br0 up
  ns_addr "$ns" ens3 "10.77.0.$([[ $x == A ]] && echo 2 || echo 3)/24"
done
ip netns exec "$L" nft -f - <<'NFT'
table bridge vrrp {
  chain vips {
    type filter hook forward priority 0; policy accept;
    ip daddr 224.0.0.0/4 counter drop
    ip protocol vrrp counter accept
  }
}
NFT
counter() { # counter multicast|vrrp: packets the bridge's rule counted
  local m
  [[ $1 == multicast ]] && m='224.0.0.0/4' || m='ip protocol vrrp'
  ip netns exec "$L" nft list chain bridge vrrp vips | awk -v m="$m" 'index($0, m) {
    for (i = 1; i < NF; i++) if ($i == "packets") print $(i + 1) }'
}

# The programs keepalived runs (its checks, the notify program), in a
# directory only root can write (keepalived's script security refuses
# one under /tmp), and the notify file in one that nobody may write.
D=/run/vrrp-unicast-$$
mkdir -p "$D/out"
on_exit "rm -rf $D"
chmod 755 "$D"
chown nobody "$D/out"
printf '#!/bin/sh\nexit 0\n' >"$D/ready"
# shellcheck disable=SC2016 # the program's own expansions, written as they are
printf '#!/bin/sh\necho "$(readlink /proc/self/ns/net) $*" >>%s/out/notify.log\n' "$D" >"$D/notify"
chmod 755 "$D/ready" "$D/notify"
netns_of() { ip netns exec "$1" readlink /proc/self/ns/net; }
NA=$(netns_of "$A") NB=$(netns_of "$B")
notified() { # notified NETNS STATE: the notify program ran there for the VIP with STATE
  grep -qxF "$1 $VIP INSTANCE lab_api $2 100" "$D/out/notify.log" 2>/dev/null
}

vrrp="interface: ens3, notify: $D/notify, notifyUser: nobody"
lab_site "$WORK/multicast.yaml" host.stateDir="$WORK/state" vips.api=$VIP vips.ingress=$VIP \
  "vips.vrrp={$vrrp}"
lab_site "$WORK/unicast.yaml" host.stateDir="$WORK/state" vips.api=$VIP vips.ingress=$VIP \
  "vips.vrrp={$vrrp, unicastPeers: [10.77.0.2, 10.77.0.3]}"
render() { # render NS SITE OUT: bootd render keepalived inside NS
  ip netns exec "$1" "$BIN/bootd" --site "$2" render keepalived --lbd "$D/ready" --bootd "$D/ready" >"$3" 2>"$3.err" \
    || fail "render in $1: $(cat "$3.err")"
}
keepalived_in() { # keepalived_in A|B CONF: started in that namespace; $KA_<x> its PID
  local x=$1
  spawn --ns "${!x}" --log "$WORK/ka-$x.log" --append keepalived -n -l -D -f "$2" \
    -p "$WORK/ka-$x.pid" -r "$WORK/vrrp-$x.pid" -c "$WORK/chk-$x.pid"
  printf -v "KA_$x" '%s' "$SPAWNED"
}
has() { [[ $(ip -n "$1" -4 -o addr show dev ens3) == *" $VIP/"* ]]; }
both_hold() { has "$A" && has "$B"; }
none_holds() { ! has "$A" && ! has "$B"; }

# --- 1. multicast, dropped ---------------------------------------------------------------
render "$A" "$WORK/multicast.yaml" "$WORK/multicast.conf"
if grep -q unicast_ "$WORK/multicast.conf"; then bad "multicast site rendered unicast lines: $(grep unicast_ "$WORK/multicast.conf")"; fi
t0=$(now)
keepalived_in A "$WORK/multicast.conf"
keepalived_in B "$WORK/multicast.conf"
if wait_for 10 both_hold; then
  ok "multicast: A and B both hold $VIP $(since "$t0") s after they started: they never hear each other ($(counter multicast) multicast frames dropped)"
else
  bad "multicast: not both holding $VIP (A: $(has "$A" && echo yes || echo no), B: $(has "$B" && echo yes || echo no))"
fi
mc=$(counter multicast)
if (( mc > 0 )); then ok "multicast: the bridge dropped $mc frames to 224.0.0.0/4"
else bad "multicast: nothing dropped: the drop rule saw no multicast"; fi
stop_pid "$KA_A"
stop_pid "$KA_B"
wait_for 5 none_holds || bad "keepalived stopped, the VIP still held"
: >"$D/out/notify.log"

# --- 2. unicast ----------------------------------------------------------------------------
render "$A" "$WORK/unicast.yaml" "$WORK/a.conf"
render "$B" "$WORK/unicast.yaml" "$WORK/b.conf"
peers() { awk '/unicast_peer \{/ {p = 1; next} p && /\}/ {p = 0} p {print $1}' "$1" | sort -u | xargs; }
if grep -q "unicast_src_ip 10.77.0.2$" "$WORK/a.conf" && [[ $(peers "$WORK/a.conf") == 10.77.0.3 ]] \
  && grep -q "unicast_src_ip 10.77.0.3$" "$WORK/b.conf" && [[ $(peers "$WORK/b.conf") == 10.77.0.2 ]]; then
  ok "rendered in each namespace: A's source 10.77.0.2, its peer 10.77.0.3; B's the other way round"
else
  bad "unicast lines: A $(grep unicast_src "$WORK/a.conf" | head -1) peers $(peers "$WORK/a.conf"); B $(grep unicast_src "$WORK/b.conf" | head -1) peers $(peers "$WORK/b.conf")"
fi
mc0=$(counter multicast) vr0=$(counter vrrp)
t0=$(now)
keepalived_in A "$WORK/a.conf"
if wait_for 10 has "$A"; then ok "unicast: A holds $VIP $(since "$t0") s after it started"
else bad "unicast: A does not hold $VIP: $(tail_log "$WORK/ka-A.log")"; fi
keepalived_in B "$WORK/b.conf"
wait_for 5 notified "$NB" BACKUP || bad "B's notify program did not run with BACKUP"
# The master-down interval is 3 adverts and a skew (3.6 s): B, hearing A,
# must not take the VIP in 5 s.
if wait_for 5 has "$B"; then bad "unicast: B took $VIP while A held it: it does not hear A"
else ok "unicast: B stays BACKUP for 5 s while A holds $VIP (it hears A's adverts)"; fi
if notified "$NA" MASTER && notified "$NB" BACKUP; then ok "notify: A ran it with MASTER, B with BACKUP ($VIP first, then keepalived's arguments)"
else bad "notify: $(cat "$D/out/notify.log")"; fi
mc1=$(counter multicast) vr1=$(counter vrrp)
parent=$(cat "$WORK/ka-A.pid") child=$(cat "$WORK/vrrp-A.pid") checker=$(cat "$WORK/chk-A.pid" 2>/dev/null || true)
[[ $parent == "$KA_A" ]] || bad "keepalived's pid file says $parent, spawned $KA_A"
# The parent first stopped (it would restart a dead child), then the VRRP
# child killed (SIGKILL: no priority-0 goodbye), then the rest.
kill -STOP "$parent"
kill -9 "$child" ${checker:+"$checker"}
kill -9 "$parent"
t0=$(now)
if wait_for 5 has "$B"; then
  took=$(since "$t0")
  if awk -v t="$took" 'BEGIN { exit !(t <= 4.5) }'; then ok "A killed: B holds $VIP $took s later (bound: 3 adverts + 1.5 s)"
  else bad "A killed: B took $VIP only after $took s (bound 4.5 s)"; fi
else
  bad "A killed: B does not hold $VIP after 5 s: $(tail_log "$WORK/ka-B.log")"
fi
if wait_for 3 notified "$NB" MASTER; then ok "notify: B ran it with MASTER"
else bad "notify: B did not run it with MASTER: $(cat "$D/out/notify.log")"; fi
mc2=$(counter multicast) vr2=$(counter vrrp)
if (( mc2 == mc0 && vr1 > vr0 && vr2 > vr1 )); then
  ok "unicast: no multicast frame crossed the bridge ($mc0 before, $mc2 after); VRRP frames $vr0 -> $vr1 (A master) -> $vr2 (B master)"
else
  bad "unicast: multicast $mc0 -> $mc1 -> $mc2, VRRP $vr0 -> $vr1 -> $vr2"
fi
if grep -q -E "WARNING|Unable to|nsafe|rror" "$WORK/ka-B.log"; then bad "B's keepalived complained: $(grep -E "WARNING|Unable to|nsafe|rror" "$WORK/ka-B.log" | head -3)"; fi

[[ $FAILS == 0 ]] || { tail_log "$WORK/ka-A.log"; tail_log "$WORK/ka-B.log"; cat "$D/out/notify.log" 2>/dev/null; }
harness_verdict
