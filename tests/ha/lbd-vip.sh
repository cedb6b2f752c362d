#!/usr/bin/env bash
# lbd and a VIP that keepalived moves: lbd binds a frontend on an address
# this host does not have yet (IP_FREEBIND), and serves it from the moment
# the address arrives, with no restart; `lbd ready --vip`, keepalived's
# track script (`bootd render keepalived`), says 0 while the frontend has
# a backend up, 1 once none is (with why), 2 when lbd cannot be asked.
# All inside a network namespace of its own (lo only).
# Usage: tests/ha/lbd-vip.sh [BINDIR]   (root)
set -euo pipefail
cd "$(dirname "$0")/../.."
BINDIR=$(realpath "${1:-target/release}")
ns=lbdvip-$$ work=$(mktemp -d /tmp/lbd-vip.XXXXXX)
chmod 755 "$work"
PIDS=()
. tests/lib.sh
cleanup() { stop_started "$ns"; rm -rf "$work"; }
trap cleanup EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
ip netns add "$ns"
ip -n "$ns" link set lo up
nsx() { ip netns exec "$ns" "$@"; }
VIP=10.99.0.1

mkdir -p "$work/www" && echo "backend" >"$work/www/index.html"
ip netns exec "$ns" python3 -m http.server --bind 127.0.0.1 18080 --directory "$work/www" >"$work/backend.log" 2>&1 &
backend=$!; PIDS+=("$backend")
cat >"$work/lb.yaml" <<YAML
adminListen: 127.0.0.1:18404
check: { interval: 300ms, fastInterval: 100ms, timeout: 200ms, rise: 1, fall: 2 }
services:
  - name: api
    listen: $VIP:16443
    backends: ["127.0.0.1:18080"]
    check: { type: http, path: / }
YAML
ip netns exec "$ns" "$BINDIR/lbd" --config "$work/lb.yaml" --state-dir "$work/state" --user root run >"$work/lbd.log" 2>&1 &
PIDS+=("$!")

ready() { nsx "$BINDIR/lbd" ready --vip "$1" --admin 127.0.0.1:18404 >"$work/ready.out" 2>&1; }
wait_code() { # wait_code CODE VIP SECONDS
  local c
  for _ in $(seq $(( $3 * 10 ))); do
    c=0; ready "$2" || c=$?
    [[ $c == "$1" ]] && return 0
    sleep 0.1
  done
  return 1
}

wait_code 0 "$VIP" 10 && ok "lbd started with its frontend on $VIP, an address no interface has, and is ready (exit 0)" \
  || bad "lbd not ready on $VIP: $(cat "$work/ready.out"); $(tail -n 3 "$work/lbd.log")"
out=$(nsx curl -s -m 2 "http://$VIP:16443/" || true)
[[ -z $out ]] && ok "nothing answers on $VIP before the address arrives" || bad "answered before the address arrived: $out"
ip -n "$ns" addr add "$VIP/32" dev lo   # what keepalived does on the new holder
out=$(nsx curl -s -m 2 "http://$VIP:16443/" || true)
[[ $out == backend ]] && ok "the address added: lbd serves it at once, no restart" || bad "not served after the address arrived: '$out'"
c=0; ready 10.99.0.2 || c=$?
[[ $c == 1 ]] && grep -q "no frontend listens on 10.99.0.2" "$work/ready.out" && ok "another VIP: exit 1, no frontend listens there" \
  || bad "another VIP: exit $c, $(cat "$work/ready.out")"
kill "$backend"; wait "$backend" 2>/dev/null || true
wait_code 1 "$VIP" 10 && grep -q "frontend api (10.99.0.1:16443) has no backend up" "$work/ready.out" \
  && ok "the backend stopped: exit 1, $(cat "$work/ready.out")" || bad "backend stopped: $(cat "$work/ready.out")"
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
sleep 0.5
c=0; ready "$VIP" || c=$?
[[ $c == 2 ]] && ok "lbd stopped: exit 2 ($(head -c 80 "$work/ready.out"))" || bad "lbd stopped: exit $c"

[[ $fail == 0 ]] && echo "lbd-vip: passed" || { echo "lbd-vip: FAILED"; tail -n 20 "$work/lbd.log"; }
exit "$fail"
