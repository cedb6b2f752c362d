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
# shellcheck source=tests/lib/harness.sh
. "$(dirname "$0")/../../tests/lib/harness.sh"
# shellcheck source=bench/lib/bench.sh
. "$REPO/bench/lib/bench.sh"   # say, bench_need_root, bench_stop, wait_fine, secs_since
# shellcheck source=bench/scale/lib.sh
. "$REPO/bench/scale/lib.sh"   # scale_netns, scale_images, write_site, rss_now, lines
NODES=${NODES:-"10000 50000"}
RESULTS=${RESULTS:-$REPO/bench/scale/results-$(date -u +%F).txt}
bench_need_root "a network namespace"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"   # as the units' LimitNOFILE, or as near as allowed

harness_init bench-scale       # $WORK; at exit the daemons stopped, the namespace deleted
NS=bsc-$$
scale_netns "$NS"
bench_results "$RESULTS"
rss() { awk '/VmHWM/ {print $2}' "/proc/$1/status"; }      # peak, kB
scale_images

# The start and reload times are what is measured: waited for in 10 ms
# steps (wait_fine), the daemons started without a readiness wait of their own.
bootd_up() { nsx curl -sf -o /dev/null --max-time 1 http://10.78.0.1:8080/healthz; }
dnsd_up() { nsx dig +short +time=1 +tries=1 @10.78.0.1 "$1.scale.example.test" | grep -qE '^10\.78\.'; }
lbd_up() { nsx curl -sf -o /dev/null --max-time 1 http://10.78.0.1:8404/healthz; }
more_lines() { [[ $(lines "$1" "$2") -gt $3 ]]; }

say "== the site at scale, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(cd "$REPO" && git rev-parse --short HEAD)"
say "machine: $(uname -srm), $(nproc --all) vCPU; open files limit $(ulimit -n)"
for n in $NODES; do
    d=$WORK/n$n
    mkdir -p "$d"; chmod 755 "$d"; rm -rf "$WORK/state"
    write_site "$d/site.yaml" "$n"
    best=""
    for _ in 1 2 3; do
        t=$(now); "$BIN/bootd" --check-config "$d/site.yaml" >/dev/null; s=$(secs_since "$t")
        if [[ -z $best ]] || num_lt "$s" "$best"; then best=$s; fi
    done
    say "-- N=$n: site file $(du -k "$d/site.yaml" | cut -f1) kB; validate ${best} s (best of 3)"

    t=$(now)
    start_bootd --log "$d/bootd.log" --ready - --env RUST_LOG=info -- --site "$d/site.yaml" --user root
    bp=$BOOTD_PID
    wait_fine 120 bootd_up || { say "bootd did not start"; tail "$d/bootd.log" | tee -a "$RESULTS"; exit 1; }
    say "   bootd: ready in $(secs_since "$t") s, peak RSS $(rss "$bp") kB"
    last=$(printf 'n%05d' $((n - 1)))
    t=$(now)
    start_dnsd --log "$d/dnsd.log" --ready - --env RUST_LOG=info -- --site "$d/site.yaml" --user root
    dp=$DNSD_PID
    wait_fine 120 dnsd_up "$last" || { say "dnsd did not answer"; tail "$d/dnsd.log"; exit 1; }
    say "   dnsd: answering the last node's name in $(secs_since "$t") s, peak RSS $(rss "$dp") kB"
    t=$(now)
    start_lbd --log "$d/lbd.log" --ready - --env RUST_LOG=info -- --site "$d/site.yaml" --user root
    lp=$LBD_PID
    wait_fine 120 lbd_up || { say "lbd did not start"; tail "$d/lbd.log"; exit 1; }
    ready=$(secs_since "$t")
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
        printf '  - { name: n%05d, role: worker, live: true, macs: ["02:78:00:%02x:%02x:%02x"], ip: 10.78.%d.%d }\n' \
            "$i" $((i >> 16 & 255)) $((i >> 8 & 255)) $((i & 255)) $((1 + i / 256)) $((i % 256)) >>"$d/site.yaml"
        kill -HUP "$bp" "$dp" "$lp"
        wait_fine 60 more_lines "$d/bootd.log" "site reloaded" "$cb" || { say "bootd did not reload"; exit 1; }
        took[bootd]+="$(secs_since "$t") "
        wait_fine 60 more_lines "$d/dnsd.log" "zone reloaded" "$cd_" || { say "dnsd did not reload"; exit 1; }
        took[dnsd]+="$(secs_since "$t") "
        wait_fine 60 more_lines "$d/lbd.log" "configuration reloaded" "$cl" || { say "lbd did not reload"; exit 1; }
        took[lbd]+="$(secs_since "$t") "
        sleep 1   # the previous site's last readers let go
        now_kb[bootd]+="$(rss_now "$bp") "; now_kb[dnsd]+="$(rss_now "$dp") "; now_kb[lbd]+="$(rss_now "$lp") "
    done
    say "   reload with a node added (file written to serving it), 5 times: bootd ${took[bootd]}s; dnsd ${took[dnsd]}s; lbd ${took[lbd]}s"
    say "   RSS now, 1 s after each reload: bootd ${now_kb[bootd]}kB; dnsd ${now_kb[dnsd]}kB; lbd ${now_kb[lbd]}kB"
    say "   after the reloads: peak RSS bootd $(rss "$bp") kB, dnsd $(rss "$dp") kB, lbd $(rss "$lp") kB (VmHWM: a reload holds the old and the new site at once)"
    bench_stop "$bp" "$dp" "$lp"
done
