#!/usr/bin/env bash
# Started as root outside systemd, each daemon becomes what its unit makes
# it: an unprivileged user (nobody here) holding only the unit's
# capabilities, in every thread, bound to its privileged ports with them.
# bootd serves HTTP on port 80 and DHCP bound to br0 (a client in another
# namespace gets its lease); lbd binds port 443 on
# a reload (after the drop); dnsd answers on 53. `--user root` keeps root;
# an unknown --user refuses to start.
# Usage: tests/systemd/privileges.sh [BINDIR]   (root)
# shellcheck disable=SC2015  # `A && ok … || bad …`: ok never fails
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/harness.sh
harness_init privileges
BIN=$(realpath "${1:-target/release}")
lab_netns
NOBODY=$(id -u nobody)
# CAP_NET_BIND_SERVICE (10), CAP_NET_RAW (13).
BIND=0000000000000400 BIND_RAW=0000000000002400

# The daemon's every thread: uid, capability sets, no_new_privs.
creds_of() { # pid uid caps
    local pid=$1 uid=$2 caps=$3 t bad_threads=0 n=0 holding=0
    for t in /proc/"$pid"/task/*; do
        n=$((n + 1))
        local s; s=$(cat "$t/status")
        local u e p b a nnp
        u=$(awk '/^Uid:/ {print $2 $3 $4 $5}' <<<"$s")
        e=$(awk '/^CapEff:/ {print $2}' <<<"$s"); p=$(awk '/^CapPrm:/ {print $2}' <<<"$s")
        b=$(awk '/^CapBnd:/ {print $2}' <<<"$s"); a=$(awk '/^CapAmb:/ {print $2}' <<<"$s")
        nnp=$(awk '/^NoNewPrivs:/ {print $2}' <<<"$s")
        if [[ $u != "$uid$uid$uid$uid" ]]; then echo "thread ${t##*/}: uids $u"; bad_threads=1; fi
        # A thread that existed before the drop (the log writer) holds no
        # capability at all; every other one holds exactly the unit's.
        if [[ $e$p != "$caps$caps" && $e$p != 00000000000000000000000000000000 ]]; then
            echo "thread ${t##*/}: CapEff $e CapPrm $p"; bad_threads=1
        fi
        [[ $e == "$caps" ]] && holding=$((holding + 1))
        if [[ $e == "$caps" && ( $b != "$caps" || $a != "$caps" || $nnp != 1 ) ]]; then
            echo "thread ${t##*/}: CapBnd $b CapAmb $a NoNewPrivs $nnp"; bad_threads=1
        fi
    done
    [[ $bad_threads == 0 && $n -ge 2 && $holding -ge $((n - 1)) ]] || { echo "($n threads, $holding with the capabilities)"; return 1; }
    echo "$n threads ($holding with the capabilities, the log writer none), uid $uid, capabilities $caps"
}

# (Output is read whole, then searched: `ss | grep -q` fails under pipefail
# when grep stops reading early and ss gets SIGPIPE.)
listening() { # ss-options pattern: a socket in $NS matches pattern
    local s
    s=$(nsx ss "$1")
    grep -q "$2" <<<"$s"
}

# --- bootd: HTTP on :80 and DHCP on br0, bound after the drop ------------------------------
lab_site "$WORK/site.yaml" host.stateDir="$WORK/state" host.http.listen=10.77.0.1:80 host.http.url=http://10.77.0.1
mkdir -p "$WORK/state"
if start_bootd --ready http://10.77.0.1/healthz --timeout 10 -- --site "$WORK/site.yaml"; then
    ok "bootd serves on port 80, bound as nobody"
else
    bad "bootd on :80: $(tail -n 5 "$WORK/bootd.log")"
fi
if out=$(creds_of "$BOOTD_PID" "$NOBODY" "$BIND_RAW"); then ok "bootd: $out"; else bad "bootd credentials: $out"; fi
grep -q '"dropped root"\|dropped root' "$WORK/bootd.log" && ok "bootd logged the drop" || bad "no 'dropped root' in bootd's log"
owner=$(stat -c %U "$WORK/state/token.key" 2>/dev/null || echo none)
[[ $owner == nobody ]] && ok "bootd's state is nobody's (token.key)" || bad "token.key owned by $owner"
listening -lunp "10.77.0.1%br0:67\|0.0.0.0%br0:67\|%br0:67" && ok "DHCP bound to br0 (SO_BINDTODEVICE with CAP_NET_RAW)" \
    || bad "DHCP not bound to br0: $(nsx ss -lunp | grep ':67 ' || true)"
# A DHCP client on the segment (another namespace, worker-0's MAC, no
# address yet, broadcast flag clear): without CAP_NET_ADMIN bootd cannot add
# the neighbour entry a unicast reply needs, so it must broadcast.
cns=privc-$$
ns_new "$cns"
ns_veth "$NS" "vp$$" "$cns" "vc$$"
nsx ip link set "vp$$" master br0 up
ip -n "$cns" link set "vc$$" address 52:54:00:77:00:20 up
if out=$(ip netns exec "$cns" timeout 30 busybox udhcpc -f -q -n -t 5 -T 2 -i "vc$$" -s /bin/true 2>&1) \
    && grep -q "lease of 10.77.0.20 obtained" <<<"$out"; then
    ok "a DHCP client without an address got its lease from bootd as nobody (reply broadcast)"
else
    bad "DHCP as nobody: $(tail -n 3 <<<"$out")"
fi
stop_pid "$BOOTD_PID"

# --- --user root keeps root; an unknown user is refused --------------------------------------
if start_bootd --log "$WORK/bootd-root.log" --ready http://10.77.0.1/healthz --timeout 10 -- --site "$WORK/site.yaml" --user root; then
    uid=$(awk '/^Uid:/ {print $2}' /proc/"$BOOTD_PID"/status)
    [[ $uid == 0 ]] && ok "--user root keeps root" || bad "--user root: uid $uid"
else
    bad "bootd --user root did not start"
fi
grep -q "running as root" "$WORK/bootd-root.log" && ok "--user root is warned about" || bad "no warning for --user root"
stop_pid "$BOOTD_PID"
if out=$(RUST_BACKTRACE=0 nsx timeout 10 "$BIN/bootd" --site "$WORK/site.yaml" --user no-such-user-x 2>&1); then
    bad "--user no-such-user-x started"
else
    grep -q "no-such-user-x: no such user" <<<"$out" && ok "unknown --user refused: $(grep -m1 "no such user" <<<"$out")" || bad "unknown --user: $out"
fi

# --- lbd: binds a new frontend on :443 at a reload, after the drop ---------------------------
cat >"$WORK/lb.yaml" <<EOF
adminListen: 127.0.0.1:8404
services:
  - name: api
    listen: 10.77.0.1:6443
    backends: ["10.77.0.11:6443"]
EOF
mkdir -p "$WORK/lbd"
start_lbd --timeout 10 -- --config "$WORK/lb.yaml" --state-dir "$WORK/lbd" || bad "lbd did not start: $(tail -n 3 "$WORK/lbd.log")"
if out=$(creds_of "$LBD_PID" "$NOBODY" "$BIND"); then ok "lbd: $out"; else bad "lbd credentials: $out"; fi
cat >>"$WORK/lb.yaml" <<EOF
  - name: ingress-https
    listen: 10.77.0.1:443
    backends: ["10.77.0.20:443"]
EOF
kill -HUP "$LBD_PID"
wait_for 5 listening -ltn "10.77.0.1:443 " && ok "lbd bound :443 at a reload, as nobody" || bad "lbd did not bind :443 after the reload: $(tail -n 3 "$WORK/lbd.log")"
stop_pid "$LBD_PID"

# --- dnsd: :53 -------------------------------------------------------------------------------
answers_api() { [[ $(nsx dig +short +time=1 +tries=1 @10.77.0.1 api.lab.example.test A 2>/dev/null) == 10.77.0.1 ]]; }
start_dnsd --ready - -- --site "$WORK/site.yaml" --udp-threads 1
wait_for 5 answers_api && ok "dnsd answers on :53" || bad "dnsd on :53: $(tail -n 3 "$WORK/dnsd.log")"
if out=$(creds_of "$DNSD_PID" "$NOBODY" "$BIND"); then ok "dnsd: $out"; else bad "dnsd credentials: $out"; fi
stop_pid "$DNSD_PID"

harness_verdict
