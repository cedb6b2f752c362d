#!/usr/bin/env bash
# The site description at scale: a generated site of N nodes (10 000 and
# 50 000 by default), and for each N:
#   - validate: `bootd --check-config` (best of 3, wall time)
#   - bootd, dnsd, lbd: start to ready (bootd /healthz; dnsd answering the
#     last node's name; lbd /healthz), peak RSS once ready
#   - reload: a node added to the site file, then SIGHUP: the time until
#     bootd and dnsd serve the new site (their "site reloaded" and "zone
#     reloaded" lines; lbd's "configuration reloaded"), five times; each
#     daemon's RSS 1 s after each reload (growth across reloads would be a
#     leak) and its peak
# The daemons run with the units' descriptor limit (LimitNOFILE=65536), or
# the hard limit where that is lower.
# All in one network namespace of its own (a veth link 10.78.0.1/16 with
# the VIPs; lbd's checks of the nodes go nowhere else).
# The hitless reload under a storm is bench/storm (stack bootd-reload).
#
# Knobs (env): NODES ("10000 50000"), BIN (target/release),
# RESULTS (bench/scale/results-<UTC date>.txt).
set -euo pipefail
NODES=${NODES:-"10000 50000"}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BIN=${BIN:-$REPO/target/release}
RESULTS=${RESULTS:-$HERE/results-$(date -u +%F).txt}
[[ $(id -u) -eq 0 ]] || { echo "run.sh: run as root (a network namespace)" >&2; exit 2; }
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"   # as the units' LimitNOFILE, or as near as allowed

# shellcheck source=bench/scale/lib.sh
. "$HERE/lib.sh"
NS=bsc-$$
WORK=$(mktemp -d /tmp/bench-scale.XXXXXX)
chmod 755 "$WORK"
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    ip netns del "$NS" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
scale_netns "$NS"

: >"$RESULTS"
say() { echo "$*"; echo "$*" >>"$RESULTS"; }
rss() { awk '/VmHWM/ {print $2}' "/proc/$1/status"; }      # peak, kB

scale_images


# wait_for SECS CMD...: until CMD succeeds (every 10 ms); fails after SECS.
wait_for() {
    local end; end=$(awk -v s="$1" -v t="$(now)" 'BEGIN { printf "%.3f", t + s }'); shift
    until "$@" >/dev/null 2>&1; do
        [[ $(awk -v e="$end" -v t="$(now)" 'BEGIN { print (t > e) }') == 1 ]] && return 1
        sleep 0.01
    done
}
lines() { grep -c "$2" "$1" 2>/dev/null || true; }
more_lines() { [[ $(lines "$1" "$2") -gt $3 ]]; }

say "== the site at scale, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(cd "$REPO" && git rev-parse --short HEAD)"
say "machine: $(uname -srm), $(nproc --all) vCPU; open files limit $(ulimit -n)"
for n in $NODES; do
    d=$WORK/n$n
    mkdir -p "$d"; chmod 755 "$d"; rm -rf "$WORK/state"
    write_site "$d/site.yaml" "$n"
    best=""
    for _ in 1 2 3; do
        t=$(now); "$BIN/bootd" --check-config "$d/site.yaml" >/dev/null; s=$(since "$t")
        [[ -z $best ]] || [[ $(awk -v a="$s" -v b="$best" 'BEGIN { print (a < b) }') == 1 ]] && best=$s
    done
    say "-- N=$n: site file $(du -k "$d/site.yaml" | cut -f1) kB; validate ${best} s (best of 3)"

    t=$(now)
    ip netns exec "$NS" env RUST_LOG=info "$BIN/bootd" --site "$d/site.yaml" --user root >"$d/bootd.log" 2>&1 &
    bp=$!; PIDS+=("$bp")
    wait_for 120 ip netns exec "$NS" curl -sf -o /dev/null --max-time 1 http://10.78.0.1:8080/healthz || { say "bootd did not start"; tail "$d/bootd.log" | tee -a "$RESULTS"; exit 1; }
    say "   bootd: ready in $(since "$t") s, peak RSS $(rss "$bp") kB"
    last=$(printf 'n%05d' $((n - 1)))
    t=$(now)
    ip netns exec "$NS" env RUST_LOG=info "$BIN/dnsd" --site "$d/site.yaml" --user root >"$d/dnsd.log" 2>&1 &
    dp=$!; PIDS+=("$dp")
    wait_for 120 bash -c "ip netns exec $NS dig +short +time=1 +tries=1 @10.78.0.1 $last.scale.example.test | grep -qE ^10\.78\." || { say "dnsd did not answer"; tail "$d/dnsd.log"; exit 1; }
    say "   dnsd: answering the last node's name in $(since "$t") s, peak RSS $(rss "$dp") kB"
    t=$(now)
    ip netns exec "$NS" env RUST_LOG=info "$BIN/lbd" --site "$d/site.yaml" --user root >"$d/lbd.log" 2>&1 &
    lp=$!; PIDS+=("$lp")
    wait_for 120 ip netns exec "$NS" curl -sf -o /dev/null --max-time 1 http://10.78.0.1:8404/healthz || { say "lbd did not start"; tail "$d/lbd.log"; exit 1; }
    ready=$(since "$t")
    sleep 5   # a few rounds of checks of every backend
    say "   lbd: ready in $ready s, peak RSS after 5 s of checks $(rss "$lp") kB"
    # A node added, five times: site file written, SIGHUP to both; until
    # each says it serves the new site (bootd "site reloaded", dnsd "zone
    # reloaded": its zones changed).
    declare -A took=([bootd]="" [dnsd]="" [lbd]="") now_kb=([bootd]="" [dnsd]="" [lbd]="")
    for k in 1 2 3 4 5; do
        i=$((n + k - 1))
        cb=$(lines "$d/bootd.log" "site reloaded"); cd_=$(lines "$d/dnsd.log" "zone reloaded")
        cl=$(lines "$d/lbd.log" "configuration reloaded")
        t=$(now)
        printf '  - { name: n%05d, role: worker, macs: ["02:78:00:%02x:%02x:%02x"], ip: 10.78.%d.%d }\n' \
            "$i" $((i >> 16 & 255)) $((i >> 8 & 255)) $((i & 255)) $((1 + i / 256)) $((i % 256)) >>"$d/site.yaml"
        kill -HUP "$bp" "$dp" "$lp"
        wait_for 60 more_lines "$d/bootd.log" "site reloaded" "$cb" || { say "bootd did not reload"; exit 1; }
        took[bootd]+="$(since "$t") "
        wait_for 60 more_lines "$d/dnsd.log" "zone reloaded" "$cd_" || { say "dnsd did not reload"; exit 1; }
        took[dnsd]+="$(since "$t") "
        wait_for 60 more_lines "$d/lbd.log" "configuration reloaded" "$cl" || { say "lbd did not reload"; exit 1; }
        took[lbd]+="$(since "$t") "
        sleep 1   # the previous site's last readers let go
        now_kb[bootd]+="$(rss_now "$bp") "; now_kb[dnsd]+="$(rss_now "$dp") "; now_kb[lbd]+="$(rss_now "$lp") "
    done
    say "   reload with a node added (file written to serving it), 5 times: bootd ${took[bootd]}s; dnsd ${took[dnsd]}s; lbd ${took[lbd]}s"
    say "   RSS now, 1 s after each reload: bootd ${now_kb[bootd]}kB; dnsd ${now_kb[dnsd]}kB; lbd ${now_kb[lbd]}kB"
    say "   after the reloads: peak RSS bootd $(rss "$bp") kB, dnsd $(rss "$dp") kB, lbd $(rss "$lp") kB (VmHWM: a reload holds the old and the new site at once)"
    for p in "$bp" "$dp" "$lp"; do kill "$p"; wait "$p" 2>/dev/null || true; done
    PIDS=()
done
