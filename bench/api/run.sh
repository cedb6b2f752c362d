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
. tests/lib/harness.sh
ROUNDS=${ROUNDS:-3} COUNT=${COUNT:-600} THREADS=${THREADS:-4}
STORES=${STORES:-"sqlite etcd1 etcd3"}
BOOTD=$(realpath "${BOOTD_BIN:-target/release/bootd}")
RESULTS=${RESULTS:-bench/api/results-$(date -u +%F).txt}
# The data on the same disk as the tree's: a fixed folder, emptied first,
# left for a look afterwards.
rm -rf "$REPO/target/bench-api"
harness_init bench-api --work "$REPO/target/bench-api"   # at exit bootd and etcd stopped
TOKEN=bench-$RANDOM$RANDOM
printf '%s\n' "$TOKEN" >"$WORK/api-tokens"; chmod 644 "$WORK/api-tokens"
exec > >(tee "$RESULTS") 2>&1
echo "# bench/api $(date -u +%FT%TZ) $(git rev-parse --short HEAD) rounds=$ROUNDS count=$COUNT threads=$THREADS stores=$STORES"

site() { # site OUT [EDIT...]: the lab site, API on loopback, no DHCP/TFTP/DNS, a /16 for the nodes
  local out=$1
  shift
  lab_site "$out" host.stateDir="$WORK/unused" \
    host.http.listen=127.0.0.1:18480 host.https.listen=127.0.0.1:18843 \
    host.api="{listen: 127.0.0.1:19443, tokens: {file: $WORK/api-tokens}}" \
    networks+='{name: bench, subnet: 10.78.0.0/16}' \
    -host.dhcp -host.tftp -dns "$@"
}
etcd_healthy() { etcdctl --endpoints "http://127.0.0.1:23791" endpoint health; }
etcd_up() { # etcd_up N: N members on 127.0.0.1 (data under WORK), CPU 0
  local n=$1 i cluster=""
  for i in $(seq "$n"); do cluster+="${cluster:+,}b$i=http://127.0.0.1:$((23800 + i))"; done
  for i in $(seq "$n"); do
    spawn --log "$WORK/etcd-b$i.log" taskset -c 0 etcd --name "b$i" --data-dir "$WORK/etcd-b$i" \
      --listen-client-urls "http://127.0.0.1:$((23790 + i))" --advertise-client-urls "http://127.0.0.1:$((23790 + i))" \
      --listen-peer-urls "http://127.0.0.1:$((23800 + i))" --initial-advertise-peer-urls "http://127.0.0.1:$((23800 + i))" \
      --initial-cluster "$cluster" --initial-cluster-state new
    ETCD_PIDS+=("$SPAWNED")
  done
  wait_for 10 etcd_healthy || fail "etcd did not start"
}
api_up() { [[ -s $WORK/state/ca.pem ]] && curl -s -o /dev/null --cacert "$WORK/state/ca.pem" https://127.0.0.1:19443/v1/cluster; }
one() { # one STORE: a fresh bootd (and etcd) on STORE; floor then create
  local store=$1 eps="" i edits=()
  rm -rf "$WORK/state" "$WORK"/etcd-b*; mkdir -p "$WORK/state"
  ETCD_PIDS=()
  case $store in
    sqlite) ;;
    etcd*) etcd_up "${store#etcd}"
      for i in $(seq "${store#etcd}"); do eps+="${eps:+, }\"http://127.0.0.1:$((23790 + i))\""; done
      edits=(host.store="{etcd: {endpoints: [$eps], prefix: /bench/}}") ;;
  esac
  site "$WORK/site.yaml" "${edits[@]}"
  spawn --log "$WORK/bootd-$store.log" taskset -c 0 "$BOOTD" --site "$WORK/site.yaml" --state-dir "$WORK/state" --user root
  local pid=$SPAWNED
  wait_for 20 api_up || fail "bootd ($store) did not serve the API within 20 s: $(tail_log "$WORK/bootd-$store.log")"
  local l="taskset -c 1 python3 bench/api/load.py --port 19443 --cacert $WORK/state/ca.pem --token $TOKEN --threads $THREADS"
  echo "store=$store $($l --kind floor --count "$COUNT")"
  echo "store=$store $($l --kind create --count "$COUNT")"
  stop_pid "$pid"
  for i in "${ETCD_PIDS[@]}"; do stop_pid "$i"; done
}
read -r -a ALL <<<"$STORES"
for r in $(seq "$ROUNDS"); do
  read -r -a now_order <<<"$(order "$r" "${ALL[@]}")"
  echo "# round $r: ${now_order[*]}"
  for s in "${now_order[@]}"; do one "$s"; done
done
echo "# medians (requests/s)"
for s in $STORES; do
  for k in floor create; do
    printf '%-7s %-6s %s\n' "$s" "$k" "$(grep "^store=$s kind=$k " "$RESULTS" | sed 's/.*rps=\([0-9]*\).*/\1/' | median)"
  done
done
