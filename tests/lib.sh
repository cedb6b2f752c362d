# Shared by the end-to-end scripts: source it after setting PIDS=().
#
# stop_started [NS]: stops every process in PIDS (everything a script starts
# is recorded there by PID: SIGTERM, up to 5 s to go, then SIGKILL); then,
# with NS, anything still inside that network namespace (only this run
# started processes there) and the namespace itself.
stop_started() {
  local ns=${1:-} p alive
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for _ in $(seq 50); do
    alive=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [[ $alive == 0 ]] && break
    sleep 0.1
  done
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  if [[ -n $ns ]]; then
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  fi
}
