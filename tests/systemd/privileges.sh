#!/usr/bin/env bash
# Started as root outside systemd, each daemon becomes what its unit makes
# it: an unprivileged user (nobody here) holding only the unit's
# capabilities, in every thread, bound to its privileged ports with them.
# bootd serves HTTP on port 80 and DHCP bound to br0 (a client in another
# namespace gets its lease); lbd binds port 443 on
# a reload (after the drop); dnsd answers on 53. `--user root` keeps root;
# an unknown --user refuses to start.
# Usage: tests/systemd/privileges.sh [BINDIR]   (root)
set -euo pipefail
cd "$(dirname "$0")/../.."
BINDIR=$(realpath "${1:-target/release}")
ns=priv-$$ work=$(mktemp -d /tmp/privileges.XXXXXX)
chmod 755 "$work"
PIDS=()
. tests/lib.sh
cleanup() { stop_started "$ns"; rm -rf "$work"; }
trap cleanup EXIT
lab_netns "$ns"
nsx() { ip netns exec "$ns" "$@"; }
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
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

wait_http() { for _ in $(seq 100); do nsx curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }

# --- bootd: HTTP on :80 and DHCP on br0, bound after the drop ------------------------------
sed -e "s|stateDir: ../../target/lab-state|stateDir: $work/state|" \
    -e "s|listen: 0.0.0.0:8080 .*|listen: 10.77.0.1:80|" -e "s|url: http://10.77.0.1:8080 .*|url: http://10.77.0.1|" \
    -e "s|root: ../../target/lab-images|root: $PWD/target/lab-images|" \
    -e "s|root: ../../target/lab-tftp|root: $PWD/target/lab-tftp|" \
    -e "s|^  dir: ignition|  dir: $PWD/examples/lab/ignition|" \
    examples/lab/site.yaml >"$work/site.yaml"
grep -q "listen: 10.77.0.1:80$" "$work/site.yaml" || { echo "FAIL privileges: site not rewritten"; exit 1; }
mkdir -p "$work/state"
ip netns exec "$ns" "$BINDIR/bootd" --site "$work/site.yaml" >"$work/bootd.log" 2>&1 &
bootd=$!; PIDS+=("$bootd")
if wait_http http://10.77.0.1/healthz; then ok "bootd serves on port 80, bound as nobody"; else bad "bootd on :80: $(tail -n 5 "$work/bootd.log")"; fi
if out=$(creds_of "$bootd" "$NOBODY" "$BIND_RAW"); then ok "bootd: $out"; else bad "bootd credentials: $out"; fi
grep -q '"dropped root"\|dropped root' "$work/bootd.log" && ok "bootd logged the drop" || bad "no 'dropped root' in bootd's log"
owner=$(stat -c %U "$work/state/token.key" 2>/dev/null || echo none)
[[ $owner == nobody ]] && ok "bootd's state is nobody's (token.key)" || bad "token.key owned by $owner"
nsx ss -lunp | grep -q "10.77.0.1%br0:67\|0.0.0.0%br0:67\|%br0:67" && ok "DHCP bound to br0 (SO_BINDTODEVICE with CAP_NET_RAW)" \
    || bad "DHCP not bound to br0: $(nsx ss -lunp | grep ':67 ' || true)"
# A DHCP client on the segment (another namespace, worker-0's MAC, no
# address yet, broadcast flag clear): without CAP_NET_ADMIN bootd cannot add
# the neighbour entry a unicast reply needs, so it must broadcast.
cns=privc-$$
ip netns add "$cns"
ip link add "vp$$" type veth peer name "vc$$"
ip link set "vp$$" netns "$ns"; ip link set "vc$$" netns "$cns"
nsx ip link set "vp$$" master br0 up
ip -n "$cns" link set "vc$$" address 52:54:00:77:00:20 up
if out=$(ip netns exec "$cns" timeout 30 busybox udhcpc -f -q -n -t 5 -T 2 -i "vc$$" -s /bin/true 2>&1) \
    && grep -q "lease of 10.77.0.20 obtained" <<<"$out"; then
    ok "a DHCP client without an address got its lease from bootd as nobody (reply broadcast)"
else
    bad "DHCP as nobody: $(tail -n 3 <<<"$out")"
fi
ip netns del "$cns" 2>/dev/null || true
kill "$bootd"; wait "$bootd" 2>/dev/null || true

# --- --user root keeps root; an unknown user is refused --------------------------------------
ip netns exec "$ns" "$BINDIR/bootd" --site "$work/site.yaml" --user root >"$work/bootd-root.log" 2>&1 &
bootd=$!; PIDS+=("$bootd")
wait_http http://10.77.0.1/healthz || bad "bootd --user root did not start"
uid=$(awk '/^Uid:/ {print $2}' /proc/"$bootd"/status)
[[ $uid == 0 ]] && ok "--user root keeps root" || bad "--user root: uid $uid"
grep -q "running as root" "$work/bootd-root.log" && ok "--user root is warned about" || bad "no warning for --user root"
kill "$bootd"; wait "$bootd" 2>/dev/null || true
if out=$(RUST_BACKTRACE=0 nsx timeout 10 "$BINDIR/bootd" --site "$work/site.yaml" --user no-such-user-x 2>&1); then
    bad "--user no-such-user-x started"
else
    grep -q "no-such-user-x: no such user" <<<"$out" && ok "unknown --user refused: $(grep -m1 "no such user" <<<"$out")" || bad "unknown --user: $out"
fi

# --- lbd: binds a new frontend on :443 at a reload, after the drop ---------------------------
cat >"$work/lb.yaml" <<EOF
adminListen: 127.0.0.1:8404
services:
  - name: api
    listen: 10.77.0.1:6443
    backends: ["10.77.0.11:6443"]
EOF
mkdir -p "$work/lbd"
ip netns exec "$ns" "$BINDIR/lbd" --config "$work/lb.yaml" --state-dir "$work/lbd" >"$work/lbd.log" 2>&1 &
lbd=$!; PIDS+=("$lbd")
wait_http http://127.0.0.1:8404/status || bad "lbd did not start: $(tail -n 3 "$work/lbd.log")"
if out=$(creds_of "$lbd" "$NOBODY" "$BIND"); then ok "lbd: $out"; else bad "lbd credentials: $out"; fi
cat >>"$work/lb.yaml" <<EOF
  - name: ingress-https
    listen: 10.77.0.1:443
    backends: ["10.77.0.20:443"]
EOF
kill -HUP "$lbd"
bound=0
for _ in $(seq 50); do nsx ss -ltn | grep -q "10.77.0.1:443 " && { bound=1; break; }; sleep 0.1; done
[[ $bound == 1 ]] && ok "lbd bound :443 at a reload, as nobody" || bad "lbd did not bind :443 after the reload: $(tail -n 3 "$work/lbd.log")"
kill "$lbd"; wait "$lbd" 2>/dev/null || true

# --- dnsd: :53 -------------------------------------------------------------------------------
ip netns exec "$ns" "$BINDIR/dnsd" --site "$work/site.yaml" --udp-threads 1 >"$work/dnsd.log" 2>&1 &
dnsd=$!; PIDS+=("$dnsd")
answered=0
for _ in $(seq 50); do
    [[ $(nsx dig +short +time=1 +tries=1 @10.77.0.1 api.lab.example.test A 2>/dev/null) == 10.77.0.1 ]] && { answered=1; break; }
    sleep 0.1
done
[[ $answered == 1 ]] && ok "dnsd answers on :53" || bad "dnsd on :53: $(tail -n 3 "$work/dnsd.log")"
if out=$(creds_of "$dnsd" "$NOBODY" "$BIND"); then ok "dnsd: $out"; else bad "dnsd credentials: $out"; fi
kill "$dnsd"; wait "$dnsd" 2>/dev/null || true

if [[ $fail == 0 ]]; then echo "PASS privileges"; else echo "FAIL privileges"; exit 1; fi
