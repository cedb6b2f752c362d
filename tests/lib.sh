# Shared by the end-to-end scripts: source it after setting PIDS=().
#
# stop_started [NS...]: stops every process in PIDS (everything a script
# starts is recorded there by PID: SIGTERM, up to 5 s to go, then SIGKILL);
# then, for each NS, anything still inside that network namespace (only this
# run started processes there) and the namespace itself.
stop_started() {
  local ns p alive
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for _ in $(seq 50); do
    alive=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [[ $alive == 0 ]] && break
    sleep 0.1
  done
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for ns in "$@"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
}

# lab_netns NS: a new network namespace with the lab host's address,
# 10.77.0.1/24 on a bridge br0 (no other interface), and lo up.
lab_netns() {
  ip netns add "$1"
  ip -n "$1" link set lo up
  ip -n "$1" link add br0 type bridge
  ip -n "$1" addr add 10.77.0.1/24 dev br0
  ip -n "$1" link set br0 up
}
