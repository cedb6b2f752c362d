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
. tests/lib/harness.sh
harness_init lbd-vip
BIN=$(realpath "${1:-target/release}")
NS=lbdvip-$$
ns_new "$NS"
VIP=10.99.0.1

mkdir -p "$WORK/www" && echo "backend" >"$WORK/www/index.html"
spawn --ns "$NS" --log "$WORK/backend.log" python3 -m http.server --bind 127.0.0.1 18080 --directory "$WORK/www"
backend=$SPAWNED
cat >"$WORK/lb.yaml" <<YAML
adminListen: 127.0.0.1:18404
check: { interval: 300ms, fastInterval: 100ms, timeout: 200ms, rise: 1, fall: 2 }
services:
  - name: api
    listen: $VIP:16443
    backends: ["127.0.0.1:18080"]
    check: { type: http, path: / }
YAML
# Readiness is the first check below (lbd ready exits 0).
start_lbd --ready - -- --config "$WORK/lb.yaml" --state-dir "$WORK/state" --user root run

ready() { nsx "$BIN/lbd" ready --vip "$1" --admin 127.0.0.1:18404 >"$WORK/ready.out" 2>&1; }
ready_is() { # CODE VIP: lbd ready --vip VIP exits CODE
  local c=0
  ready "$2" || c=$?
  [[ $c == "$1" ]]
}

if wait_for 10 ready_is 0 "$VIP"; then ok "lbd started with its frontend on $VIP, an address no interface has, and is ready (exit 0)"
else bad "lbd not ready on $VIP: $(cat "$WORK/ready.out"); $(tail -n 3 "$WORK/lbd.log")"; fi
out=$(nsx curl -s -m 2 "http://$VIP:16443/" || true)
if [[ -z $out ]]; then ok "nothing answers on $VIP before the address arrives"; else bad "answered before the address arrived: $out"; fi
ip -n "$NS" addr add "$VIP/32" dev lo   # what keepalived does on the new holder
out=$(nsx curl -s -m 2 "http://$VIP:16443/" || true)
if [[ $out == backend ]]; then ok "the address added: lbd serves it at once, no restart"; else bad "not served after the address arrived: '$out'"; fi
c=0; ready 10.99.0.2 || c=$?
if [[ $c == 1 ]] && grep -q "no frontend listens on 10.99.0.2" "$WORK/ready.out"; then ok "another VIP: exit 1, no frontend listens there"
else bad "another VIP: exit $c, $(cat "$WORK/ready.out")"; fi
stop_pid "$backend"
if wait_for 10 ready_is 1 "$VIP" && grep -q "frontend api (10.99.0.1:16443) has no backend up" "$WORK/ready.out"; then
  ok "the backend stopped: exit 1, $(cat "$WORK/ready.out")"
else
  bad "backend stopped: $(cat "$WORK/ready.out")"
fi
stop_pid "$LBD_PID"
c=0; ready "$VIP" || c=$?
if [[ $c == 2 ]]; then ok "lbd stopped: exit 2 ($(head -c 80 "$WORK/ready.out"))"; else bad "lbd stopped: exit $c"; fi

[[ $FAILS == 0 ]] || tail_log "$WORK/lbd.log"
harness_verdict
