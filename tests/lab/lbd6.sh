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
BINDIR=$(realpath "${1:-target/release}")
ns=lbd6-$$ work=$(mktemp -d /tmp/lbd6.XXXXXX)
chmod 755 "$work"
PIDS=()
. tests/lib.sh
cleanup() { stop_started "$ns"; rm -rf "$work"; }
trap cleanup EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
nsx() { ip netns exec "$ns" "$@"; }
ip netns add "$ns"
nsx ip link set lo up
nsx sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
nsx ip link add dummy0 type bridge
nsx ip link set dummy0 up
for a in 1 10 11 12 13 20 21; do nsx ip -6 addr add "fd00:77::$a/64" dev dummy0 nodad; done

# Backends: each node answers with its name; /readyz for the api checks.
declare -A BACKEND=()
for n in master-0:11 master-1:12 master-2:13; do
  name=${n%%:*} a=${n##*:}
  mkdir -p "$work/$name/readyz"; echo "$name" >"$work/$name/index.html"; echo ok >"$work/$name/readyz/index.html"
  ip netns exec "$ns" python3 -m http.server --bind "fd00:77::$a" 6443 --directory "$work/$name" >"$work/$name.log" 2>&1 &
  PIDS+=($!); BACKEND[$name]=$!
done
for n in worker-0:20 worker-1:21; do
  name=${n%%:*} a=${n##*:}
  mkdir -p "$work/$name"; echo "$name" >"$work/$name/index.html"
  ip netns exec "$ns" python3 -m http.server --bind "fd00:77::$a" 80 --directory "$work/$name" >"$work/$name.log" 2>&1 &
  PIDS+=($!)
done

sed -e "s|stateDir: ../../target/lab-state-v6|stateDir: $work/state|" \
    -e "s|dir: ../lab/ignition|dir: $PWD/examples/lab/ignition|" \
    -e "s|root: ../../target/lab-images|root: $work|" \
    -e "s|root: ../../target/lab-tftp|root: $work|" \
    examples/lab-v6/site.yaml >"$work/site.yaml"
cat >>"$work/site.yaml" <<'YAML'
lb:
  adminListen: "[::1]:8404"
  check: { interval: 500ms, fastInterval: 200ms, timeout: 400ms, rise: 1, fall: 2 }
  bootstrap: { drainTimeout: 1s }
  frontends:
    api: { check: { type: http, path: /readyz/ } }
    machineConfig: { enabled: false }
    ingressHttps: { enabled: false }
YAML
ip netns exec "$ns" "$BINDIR/lbd" --site "$work/site.yaml" >"$work/lbd.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do nsx curl -fsS -g -o /dev/null "http://[::1]:8404/metrics" 2>/dev/null && break; sleep 0.1; done
up() { nsx curl -fsS -g "http://[::1]:8404/metrics" | grep -c "lbd_backend_up{frontend=\"$1\".*} 1" || true; }
for _ in $(seq 100); do [[ $(up api) -ge 3 && $(up ingress-http) -ge 2 ]] && break; sleep 0.1; done

# --- through the IPv6 VIP --------------------------------------------------------
seen=$(for _ in $(seq 12); do nsx curl -fsS -g --max-time 2 "http://[fd00:77::1]:6443/"; done | sort | uniq -c | awk '{print $2"="$1}' | tr '\n' ' ')
if [[ $seen == *master-0=* && $seen == *master-1=* && $seen == *master-2=* && $seen != *bootstrap* ]]; then
  ok "api [fd00:77::1]:6443 -> every master over IPv6: $seen"
else
  bad "api through the VIP: $seen"; tail -n 20 "$work/lbd.log"
fi
seen=$(for _ in $(seq 6); do nsx curl -fsS -g --max-time 2 "http://[fd00:77::1]:80/"; done | sort | uniq -c | awk '{print $2"="$1}' | tr '\n' ' ')
if [[ $seen == *worker-0=* && $seen == *worker-1=* ]]; then
  ok "ingress-http [fd00:77::1]:80 -> the workers: $seen"
else
  bad "ingress through the VIP: $seen"
fi

# --- a master goes down: its checks take it out ----------------------------------
kill "${BACKEND[master-1]}"
for _ in $(seq 50); do [[ $(up api) -eq 2 ]] && break; sleep 0.1; done
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
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
for p in "${PIDS[@]}"; do
  for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
done
PIDS=()
nsx ip addr add 10.77.0.1/24 dev dummy0
for a in 11 12 13 20 21; do nsx ip addr add "10.77.0.$a/24" dev dummy0; done
for n in master-0:11 master-1:12 master-2:13; do
  name=${n%%:*} a=${n##*:}
  for fam in v4:10.77.0.$a v6:fd00:77::$a; do
    d=$work/dual-$name-${fam%%:*}; mkdir -p "$d/readyz"; echo "$name ${fam%%:*}" >"$d/index.html"; echo ok >"$d/readyz/index.html"
    ip netns exec "$ns" python3 -m http.server --bind "${fam#*:}" 6443 --directory "$d" >"$d.log" 2>&1 &
    PIDS+=($!)
  done
done
sed -e "s|stateDir: ../../target/lab-state-dual|stateDir: $work/state-dual|" \
    -e "s|dir: ../lab/ignition|dir: $PWD/examples/lab/ignition|" \
    -e "s|root: ../../target/lab-images|root: $work|" \
    -e "s|root: ../../target/lab-tftp|root: $work|" \
    examples/lab-dual/site.yaml >"$work/dual.yaml"
cat >>"$work/dual.yaml" <<'YAML'
lb:
  adminListen: "[::1]:8404"
  check: { interval: 500ms, fastInterval: 200ms, timeout: 400ms, rise: 1, fall: 2 }
  frontends:
    api: { check: { type: http, path: /readyz/ } }
    machineConfig: { enabled: false }
    ingressHttp: { enabled: false }
    ingressHttps: { enabled: false }
YAML
ip netns exec "$ns" "$BINDIR/lbd" --site "$work/dual.yaml" >"$work/lbd-dual.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do [[ $(up api) -ge 3 && $(up api-v6) -ge 3 ]] && break; sleep 0.1; done
v6=$(for _ in $(seq 6); do nsx curl -fsS -g --max-time 2 "http://[fd00:77::1]:6443/" || echo error; done | sort -u | tr '\n' ' ')
v4=$(for _ in $(seq 6); do nsx curl -fsS --max-time 2 "http://10.77.0.1:6443/" || echo error; done | sort -u | tr '\n' ' ')
if [[ $v6 == "master-0 v6 master-1 v6 master-2 v6 " && $v4 == "master-0 v4 master-1 v4 master-2 v4 " ]]; then
  ok "dual stack: api-v6 [fd00:77::1]:6443 -> the masters' IPv6 addresses ($v6); api 10.77.0.1:6443 -> their IPv4 ones ($v4)"
else
  bad "dual stack: through the IPv6 VIP: $v6; through the IPv4 VIP: $v4"; tail -n 20 "$work/lbd-dual.log"
fi
[[ $fail == 0 ]] && echo "lbd6: PASS" || { echo "lbd6: FAIL"; tail -n 30 "$work/lbd.log"; }
exit $fail
