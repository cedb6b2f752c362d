#!/usr/bin/env bash
# A step of the system clock, forwards and backwards, moves no lease and no
# token (docs/reliability.md, "Time"; runtime/src/clock.rs).
#
# bootd runs under libfaketime (Debian's faketime): its system clock
# (CLOCK_REALTIME, what SystemTime::now reads) is shifted at run time through
# a timestamp file, while CLOCK_BOOTTIME and CLOCK_MONOTONIC stay real
# (FAKETIME_DONT_FAKE_MONOTONIC), as an NTP step or `date -s` leaves them.
# A time namespace cannot do this: it virtualises the monotonic clocks only.
#
# The pool holds one address, so whether a lease still holds is seen by a
# second client's DISCOVER (busybox udhcpc in another namespace):
#   forward, +2 days: a 1 h lease still holds (the second client gets
#     nothing) and a 1 h Ignition token is still accepted;
#   backward, -2 days: a 4 s lease expires after 4 s (the second client gets
#     the address) and a 4 s token is refused after 4 s.
# Also: bootd_clock_step_seconds shows the step, and the step is logged once.
# Usage: tests/time/clock-step.sh [BINDIR]   (root)
# shellcheck disable=SC2015  # `A && ok … || bad …`: ok never fails
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/harness.sh
harness_init clock-step
BIN=$(realpath "${1:-target/release}")
FAKETIME_LIB=/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1
[[ -r $FAKETIME_LIB ]] || fail "$FAKETIME_LIB missing (apt install faketime)"
lab_netns

# The client namespace, on the lab bridge.
cns=clkc-$$
ns_new "$cns"
ns_veth "$NS" "vp$$" "$cns" "vc$$"
nsx ip link set "vp$$" master br0 up
ip -n "$cns" link set "vc$$" up
# dhcp MAC: one DORA from the client namespace; prints the address or nothing.
dhcp() {
    ip -n "$cns" link set "vc$$" address "$1"
    local out
    out=$(ip netns exec "$cns" timeout 20 busybox udhcpc -f -q -n -t 3 -T 1 -i "vc$$" -s /bin/true 2>&1 || true)
    sed -n 's/.*lease of \([0-9.]*\) obtained.*/\1/p' <<<"$out" | head -n 1
}

site() { # leaseTime tokenTtl: the lab site, its pool one address, worker-0's Ignition from any address
    lab_site "$WORK/site.yaml" host.stateDir="$WORK/state" host.dhcp.leaseTime="$1" \
        ignition.tokenTtl="$2" ignition.singleUseTokens=false \
        'networks.lab.pool={start: 10.77.0.100, end: 10.77.0.100}' nodes.worker-0.fetchFrom=anyAddress
}

run_bootd() { # log: bootd under libfaketime, its clock at +0 (the timestamp file)
    rm -rf "$WORK/state"; mkdir -p "$WORK/state"
    echo "+0" >"$WORK/faketime"; chmod 644 "$WORK/faketime"
    start_bootd --log "$WORK/$1" --timeout 10 --env LD_PRELOAD="$FAKETIME_LIB" \
        --env FAKETIME_TIMESTAMP_FILE="$WORK/faketime" --env FAKETIME_NO_CACHE=1 \
        --env FAKETIME_DONT_FAKE_MONOTONIC=1 -- --site "$WORK/site.yaml" ||
        fail "bootd did not start"
}

# token: the Ignition URL in worker-0's iPXE script (its token inside).
ignition_url() {
    local s
    s=$(nsx curl -fsS "http://10.77.0.1:8080/ipxe/node?mac=52-54-00-77-00-20")
    grep -o 'http://10.77.0.1:8080/ignition/worker-0?token=[^ ]*' <<<"$s" | head -n 1
}
status_of() { nsx curl -s -o /dev/null -w '%{http_code}' -H 'Accept: application/vnd.coreos.ignition+json;version=3.3.0' "$1"; }
step_gauge() {
    local m; m=$(nsx curl -fsS http://10.77.0.1:8080/metrics)
    awk '$1 == "bootd_clock_step_seconds" {print $2}' <<<"$m"
}
near() { awk -v v="$1" -v want="$2" 'BEGIN { d = v - want; if (d < 0) d = -d; exit !(v != "" && d < 60) }'; }
step() { echo "$1" >"$WORK/faketime"; }
step_logged() { # count expected
    local n; n=$(grep -c "system clock was stepped" "$WORK/$1" || true)
    [[ $n == "$2" ]]
}

# --- forward: nothing expires ------------------------------------------------------------------
site 1h 1h
run_bootd forward.log
a=$(dhcp 52:54:00:99:00:01)
[[ $a == 10.77.0.100 ]] && ok "forward: the first client leased the pool's one address" || bad "forward: first client got '$a'"
url=$(ignition_url)
[[ -n $url ]] && ok "forward: worker-0's script carries an Ignition URL with a 1 h token" || bad "forward: no Ignition URL in worker-0's script"
step "+2d"
sleep 7  # one watch period (5 s) and then some
b=$(dhcp 52:54:00:99:00:02)
[[ -z $b ]] && ok "forward +2 d: the 1 h lease still holds (a second client got no address)" \
    || bad "forward +2 d: a second client got $b: the first lease expired with the step"
code=$(status_of "$url")
[[ $code == 200 ]] && ok "forward +2 d: the 1 h token is still accepted (200)" || bad "forward +2 d: the token got $code"
g=$(step_gauge)
near "$g" 172800 && ok "forward: bootd_clock_step_seconds $g" || bad "forward: bootd_clock_step_seconds '$g', want about 172800"
step_logged forward.log 1 && ok "forward: the step was logged once" || bad "forward: step logged $(grep -c 'system clock was stepped' "$WORK/forward.log" || true) times"
stop_pid "$BOOTD_PID"

# --- backward: nothing is extended -------------------------------------------------------------
site 4s 4s
run_bootd backward.log
a=$(dhcp 52:54:00:99:00:01)
[[ $a == 10.77.0.100 ]] && ok "backward: the first client leased the pool's one address for 4 s" || bad "backward: first client got '$a'"
url=$(ignition_url)
[[ -n $url ]] || bad "backward: no Ignition URL in worker-0's script"
step "-2d"
sleep 7
b=$(dhcp 52:54:00:99:00:02)
[[ $b == 10.77.0.100 ]] && ok "backward -2 d: the 4 s lease expired after 4 s (a second client got the address)" \
    || bad "backward -2 d: the second client got '$b': the first lease was extended by the step"
code=$(status_of "$url")
[[ $code == 404 || $code == 403 ]] && ok "backward -2 d: the 4 s token is refused after 4 s ($code)" || bad "backward -2 d: the expired token got $code"
g=$(step_gauge)
near "$g" -172800 && ok "backward: bootd_clock_step_seconds $g" || bad "backward: bootd_clock_step_seconds '$g', want about -172800"
step_logged backward.log 1 && ok "backward: the step was logged once" || bad "backward: step logged $(grep -c 'system clock was stepped' "$WORK/backward.log" || true) times"
stop_pid "$BOOTD_PID"

if [[ $FAILS != 0 ]]; then
    for f in forward backward; do echo "--- $f.log"; tail_log "$WORK/$f.log" 5; done
fi
harness_verdict
