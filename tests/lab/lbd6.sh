#!/usr/bin/env bash
# lbd over IPv6: the IPv6-only lab site (examples/lab-v6), its VIP
# fd00:77::1 and the masters' and workers' IPv6 addresses on a dummy
# interface in a network namespace of its own (nothing leaves it). Real
# backends (python3 http.server) on each node's address; lbd derives the
# api frontend ([fd00:77::1]:6443, HTTP checks of /readyz here) and
# ingress-http ([fd00:77::1]:80, TCP checks) from the site and:
#   - curl -g through the VIP reaches every master in turn (round robin),
#     and the ingress frontend the workers;
#   - a master whose backend stops is taken out by its checks (status
#     page), and curl still gets answers from the others;
#   - /metrics shows the IPv6 backends by address;
#   - on the dual-stack site (examples/lab-dual, a VIP per family) the
#     api frontend of each VIP reaches the masters' addresses of its family.
# Usage: tests/lab/lbd6.sh [BINDIR]   (root)
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/harness.sh
harness_init lbd6
BIN=$(realpath "${1:-target/release}")
# The host's and the nodes' addresses on the bridge (lab_netns adds them
# without duplicate address detection).
lab_netns "lbd6-$$" fd00:77::1/64 fd00:77::10/64 fd00:77::11/64 fd00:77::12/64 fd00:77::13/64 \
    fd00:77::20/64 fd00:77::21/64

# backend ADDR PORT DIR: python3 http.server for a node, serving DIR (log DIR.log).
backend() { spawn --ns "$NS" --log "$3.log" python3 -m http.server --bind "$1" "$2" --directory "$3"; }
# Backends: each node answers with its name; /readyz for the api checks.
declare -A BACKEND=()
for n in master-0:11 master-1:12 master-2:13; do
  name=${n%%:*} a=${n##*:}
  mkdir -p "$WORK/$name/readyz"; echo "$name" >"$WORK/$name/index.html"; echo ok >"$WORK/$name/readyz/index.html"
  backend "fd00:77::$a" 6443 "$WORK/$name"
  BACKEND[$name]=$SPAWNED
done
for n in worker-0:20 worker-1:21; do
  name=${n%%:*} a=${n##*:}
  mkdir -p "$WORK/$name"; echo "$name" >"$WORK/$name/index.html"
  backend "fd00:77::$a" 80 "$WORK/$name"
done

# lb_site OUT FROM STATE: FROM's site with its state in STATE (images and
# TFTP root: none are served here) and an lb: block, lbd's admin API on
# [::1]:8404 and fast checks, then the rest of the block from stdin.
lb_site() {
  lab_site "$1" --from "$2" host.stateDir="$3" images.root="$WORK" host.tftp.root="$WORK"
  { printf 'lb:\n  adminListen: "[::1]:8404"\n'
    printf '  check: { interval: 500ms, fastInterval: 200ms, timeout: 400ms, rise: 1, fall: 2 }\n'
    cat; } >>"$1"
}
lb_site "$WORK/site.yaml" examples/lab-v6/site.yaml "$WORK/state" <<'YAML'
  bootstrap: { drainTimeout: 1s }
  frontends:
    api: { check: { type: http, path: /readyz/ } }
    machineConfig: { enabled: false }
    ingressHttps: { enabled: false }
YAML
start_lbd --ready "http://[::1]:8404/metrics" -- --site "$WORK/site.yaml" || fail "lbd did not start"
up() { nsx curl -fsS -g "http://[::1]:8404/metrics" | grep -c "lbd_backend_up{frontend=\"$1\".*} 1" || true; }
# settled FRONTEND COUNT...: each frontend has at least COUNT backends up,
# and every backend has had its first probe. (A new backend is up but
# unconfirmed until then: the dual-stack site's bootstrap, 10.77.0.10,
# which no interface has, takes a probe timeout to go down, and until it
# does it gets its share of the connections.)
settled() {
  local s
  while [[ $# -gt 0 ]]; do [[ $(up "$1") -ge $2 ]] || return 1; shift 2; done
  s=$(nsx curl -fsS -g "http://[::1]:8404/status") && ! grep -q "first probe pending" <<<"$s"
}
wait_for 10 settled api 3 ingress-http 2 || true

# --- through the IPv6 VIP --------------------------------------------------------
seen=$(for _ in $(seq 12); do nsx curl -fsS -g --max-time 2 "http://[fd00:77::1]:6443/"; done | sort | uniq -c | awk '{print $2"="$1}' | tr '\n' ' ')
if [[ $seen == *master-0=* && $seen == *master-1=* && $seen == *master-2=* && $seen != *bootstrap* ]]; then
  ok "api [fd00:77::1]:6443 -> every master over IPv6: $seen"
else
  bad "api through the VIP: $seen"; tail_log "$WORK/lbd.log"
fi
seen=$(for _ in $(seq 6); do nsx curl -fsS -g --max-time 2 "http://[fd00:77::1]:80/"; done | sort | uniq -c | awk '{print $2"="$1}' | tr '\n' ' ')
if [[ $seen == *worker-0=* && $seen == *worker-1=* ]]; then
  ok "ingress-http [fd00:77::1]:80 -> the workers: $seen"
else
  bad "ingress through the VIP: $seen"
fi

# --- a master goes down: its checks take it out ----------------------------------
stop_pid "${BACKEND[master-1]}"
up_is() { [[ $(up "$1") -eq $2 ]]; }
wait_for 5 up_is api 2 || true
seen=$(for _ in $(seq 8); do nsx curl -fsS -g --max-time 2 "http://[fd00:77::1]:6443/" || echo error; done | sort | uniq -c | awk '{print $2"="$1}' | tr '\n' ' ')
if [[ $(up api) -eq 2 && $seen != *master-1* && $seen != *error* ]]; then
  ok "master-1 down: taken out by its checks; answers from the others only: $seen"
else
  bad "after master-1 went down: up $(up api), answers $seen"
fi
metrics=$(nsx curl -fsS -g "http://[::1]:8404/metrics" || true)
if grep -q 'backend="\[fd00:77::12\]:6443"\|addr="\[fd00:77::12\]:6443"\|fd00:77::12' <<<"$metrics"; then
  ok "metrics name the IPv6 backends: $(grep -m1 'fd00:77::11' <<<"$metrics")"
else
  bad "no IPv6 backend in lbd's metrics"
fi

# --- a dual-stack site (examples/lab-dual): a VIP per family, a frontend per
#     VIP, each forwarding to the nodes' addresses of its family ---------------
stop_pids "${PIDS[@]}"
PIDS=()
ns_addr "$NS" br0 10.77.0.1/24 10.77.0.11/24 10.77.0.12/24 10.77.0.13/24 10.77.0.20/24 10.77.0.21/24
for n in master-0:11 master-1:12 master-2:13; do
  name=${n%%:*} a=${n##*:}
  for fam in v4:10.77.0.$a v6:fd00:77::$a; do
    d=$WORK/dual-$name-${fam%%:*}; mkdir -p "$d/readyz"; echo "$name ${fam%%:*}" >"$d/index.html"; echo ok >"$d/readyz/index.html"
    backend "${fam#*:}" 6443 "$d"
  done
done
lb_site "$WORK/dual.yaml" examples/lab-dual/site.yaml "$WORK/state-dual" <<'YAML'
  frontends:
    api: { check: { type: http, path: /readyz/ } }
    machineConfig: { enabled: false }
    ingressHttp: { enabled: false }
    ingressHttps: { enabled: false }
YAML
start_lbd --log "$WORK/lbd-dual.log" --ready "http://[::1]:8404/metrics" -- --site "$WORK/dual.yaml" || fail "lbd (dual stack) did not start"
wait_for 10 settled api 3 api-v6 3 || true
v6=$(for _ in $(seq 6); do nsx curl -fsS -g --max-time 2 "http://[fd00:77::1]:6443/" || echo error; done | sort -u | tr '\n' ' ')
v4=$(for _ in $(seq 6); do nsx curl -fsS --max-time 2 "http://10.77.0.1:6443/" || echo error; done | sort -u | tr '\n' ' ')
if [[ $v6 == "master-0 v6 master-1 v6 master-2 v6 " && $v4 == "master-0 v4 master-1 v4 master-2 v4 " ]]; then
  ok "dual stack: api-v6 [fd00:77::1]:6443 -> the masters' IPv6 addresses ($v6); api 10.77.0.1:6443 -> their IPv4 ones ($v4)"
else
  bad "dual stack: through the IPv6 VIP: $v6; through the IPv4 VIP: $v4"; tail_log "$WORK/lbd-dual.log"
fi
[[ $FAILS == 0 ]] || tail_log "$WORK/lbd.log" 30
harness_verdict
