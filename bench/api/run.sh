#!/usr/bin/env bash
# The controller API's writes per second with each store: SQLite (one
# appliance, host.store sqlite) against etcd (host.store.etcd: one member,
# and three members on this host), beside a floor: the same HTTPS requests
# refused before any store write (422), which is what the API costs without
# the write. Interleaved: each round runs every store in turn, the order
# reversed every other round, each on a fresh state directory (and a fresh
# etcd), the data on the same disk (target/bench-api).
#
# Load: bench/api/load.py, THREADS keep-alive HTTPS connections, COUNT
# POST /v1/nodes, each a new node (a MAC and an address of its own, no
# provider): the candidate site validated, the node written, the overlay
# exported. bootd pinned to CPU 0 (with etcd), the load to CPU 1.
#
# Usage: bench/api/run.sh   (root; knobs: ROUNDS 3, COUNT 600, THREADS 4,
#        STORES "sqlite etcd1 etcd3", BOOTD_BIN target/release/bootd,
#        RESULTS bench/api/results-<date>.txt)
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
ROUNDS=${ROUNDS:-3} COUNT=${COUNT:-600} THREADS=${THREADS:-4}
STORES=${STORES:-"sqlite etcd1 etcd3"}
BOOTD=$(realpath "${BOOTD_BIN:-target/release/bootd}")
RESULTS=${RESULTS:-bench/api/results-$(date -u +%F).txt}
WORK=$REPO/target/bench-api
rm -rf "$WORK"; mkdir -p "$WORK"; chmod 755 "$WORK"
PIDS=()
. tests/lib.sh
trap 'stop_started' EXIT
TOKEN=bench-$RANDOM$RANDOM
printf '%s\n' "$TOKEN" >"$WORK/api-tokens"; chmod 644 "$WORK/api-tokens"
exec > >(tee "$RESULTS") 2>&1
echo "# bench/api $(date -u +%FT%TZ) $(git rev-parse --short HEAD) rounds=$ROUNDS count=$COUNT threads=$THREADS stores=$STORES"

site() { # site STORE_LINE: the lab site, API on loopback, no DHCP/TFTP, a /16 for the nodes
  sed -e "s|stateDir: ../../target/lab-state|stateDir: $WORK/unused|" \
      -e "s|dir: ignition|dir: $REPO/examples/lab/ignition|" \
      -e "s|root: ../../target/lab-images|root: $REPO/target/lab-images|" \
      -e "s|listen: 0.0.0.0:8080|listen: 127.0.0.1:18480|" \
      -e "s|listen: 0.0.0.0:8443|listen: 127.0.0.1:18843|" \
      -e "s|    dnsServers: \[10.77.0.1\]|    dnsServers: [10.77.0.1]\n  - name: bench\n    subnet: 10.78.0.0/16|" \
      -e "s|^host:$|host:\n  api: { listen: 127.0.0.1:19443, tokens: { file: $WORK/api-tokens } }\n$1|" \
      examples/lab/site.yaml \
    | python3 -c 'import sys,re; t=sys.stdin.read(); t=re.sub(r"  dhcp:\n(    .*\n)+", "", t); t=re.sub(r"  tftp:\n(    .*\n)+", "", t); t=re.sub(r"\ndns:\n(  .*\n)+", "\n", t); sys.stdout.write(t)'
}
etcd_up() { # etcd_up N: N members on 127.0.0.1 (data under WORK), CPU 0
  local n=$1 i cluster=""
  for i in $(seq "$n"); do cluster+="${cluster:+,}b$i=http://127.0.0.1:$((23800 + i))"; done
  for i in $(seq "$n"); do
    taskset -c 0 etcd --name "b$i" --data-dir "$WORK/etcd-b$i" \
      --listen-client-urls "http://127.0.0.1:$((23790 + i))" --advertise-client-urls "http://127.0.0.1:$((23790 + i))" \
      --listen-peer-urls "http://127.0.0.1:$((23800 + i))" --initial-advertise-peer-urls "http://127.0.0.1:$((23800 + i))" \
      --initial-cluster "$cluster" --initial-cluster-state new >"$WORK/etcd-b$i.log" 2>&1 &
    PIDS+=("$!"); ETCD_PIDS+=("$!")
  done
  for _ in $(seq 100); do etcdctl --endpoints "http://127.0.0.1:23791" endpoint health >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "etcd did not start"; exit 1
}
one() { # one STORE: a fresh bootd (and etcd) on STORE; floor then create
  local store=$1 line="" eps="" i
  rm -rf "$WORK/state" "$WORK"/etcd-b*; mkdir -p "$WORK/state"
  ETCD_PIDS=()
  case $store in
    sqlite) ;;
    etcd*) etcd_up "${store#etcd}"
      for i in $(seq "${store#etcd}"); do eps+="${eps:+, }\"http://127.0.0.1:$((23790 + i))\""; done
      line="  store: { etcd: { endpoints: [$eps], prefix: /bench/ } }" ;;
  esac
  site "$line" >"$WORK/site.yaml"
  taskset -c 0 "$BOOTD" --site "$WORK/site.yaml" --state-dir "$WORK/state" --user root >"$WORK/bootd-$store.log" 2>&1 &
  local pid=$!; PIDS+=("$pid")
  for _ in $(seq 200); do [[ -s $WORK/state/ca.pem ]] && curl -s -o /dev/null --cacert "$WORK/state/ca.pem" https://127.0.0.1:19443/v1/cluster && break; sleep 0.1; done
  local l="taskset -c 1 python3 bench/api/load.py --port 19443 --cacert $WORK/state/ca.pem --token $TOKEN --threads $THREADS"
  echo "store=$store $($l --kind floor --count "$COUNT")"
  echo "store=$store $($l --kind create --count "$COUNT")"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  for i in "${ETCD_PIDS[@]}"; do kill "$i" 2>/dev/null || true; wait "$i" 2>/dev/null || true; done
}
read -r -a order <<<"$STORES"
for r in $(seq "$ROUNDS"); do
  echo "# round $r: ${order[*]}"
  for s in "${order[@]}"; do one "$s"; done
  mapfile -t order < <(printf '%s\n' "${order[@]}" | tac)
done
echo "# medians (requests/s)"
for s in $STORES; do
  for k in floor create; do
    printf '%-7s %-6s %s\n' "$s" "$k" "$(grep "^store=$s kind=$k " "$RESULTS" | sed 's/.*rps=\([0-9]*\).*/\1/' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')"
  done
done
