#!/usr/bin/env bash
# dnsd's reload alone, on the generated site of bench/scale (N nodes,
# 10 000 and 50 000 by default): dnsd started, then a node added to the
# file and SIGHUP, K times; for each reload the time from the file
# written to "zone reloaded" (the new zones serving), dnsd's CPU time
# for it and its resident size 1 s after. Per N the median of the K
# reloads, and the ratio of the largest N's median to the smallest's
# (linear in the site: N's ratio). bench/scale/run.sh measures the same
# reload with bootd and lbd reloading beside dnsd on the same CPUs.
# In a network namespace of its own (a veth with the VIPs).
#
# Knobs (env): NODES ("10000 50000"), K (5 reloads), BIN (target/release),
# RESULTS (bench/dns/results-<UTC date>-reload.txt).
set -euo pipefail
# shellcheck source=tests/lib/harness.sh
. "$(dirname "$0")/../../tests/lib/harness.sh"
# shellcheck source=bench/lib/bench.sh
. "$REPO/bench/lib/bench.sh"   # say, bench_need_root, wait_fine, secs_since
# shellcheck source=bench/scale/lib.sh
. "$REPO/bench/scale/lib.sh"   # scale_netns, scale_images, write_site, rss_now, lines
NODES=${NODES:-"10000 50000"}
K=${K:-5}
RESULTS=${RESULTS:-$REPO/bench/dns/results-$(date -u +%F)-reload.txt}
bench_need_root "a network namespace"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"   # as the unit's LimitNOFILE, or as near as allowed

harness_init bench-dns-reload  # $WORK; at exit dnsd stopped, the namespace deleted
NS=bdr-$$
scale_netns "$NS"
scale_images
bench_results "$RESULTS" --append

cpu() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
dnsd_up() { nsx dig +short +time=1 +tries=1 @10.78.0.1 "$1.scale.example.test" | grep -qE '^10\.78\.'; }
more_lines() { [[ $(lines "$1" "$2") -gt $3 ]]; }
refused() { [[ $(lines "$WORK/dnsd.log" "reload refused") -gt $1 ]]; }
reload_ended() { more_lines "$WORK/dnsd.log" "zone reloaded" "$1" || refused "$2"; }

say "== dnsd's reload at scale, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(cd "$REPO" && git rev-parse --short HEAD), BIN=$BIN"
say "machine: $(uname -srm), $(nproc --all) vCPU; open files limit $(ulimit -n); K=$K reloads per N"
first="" last=""
for n in $NODES; do
    rm -rf "$WORK/state" "$WORK/dnsd.log"
    write_site "$WORK/site.yaml" "$n"
    t=$(now)
    start_dnsd --log "$WORK/dnsd.log" --ready - --env RUST_LOG=info -- --site "$WORK/site.yaml" --user root
    dp=$DNSD_PID
    wait_fine 120 dnsd_up "$(printf 'n%05d' $((n - 1)))" || { say "dnsd did not answer"; tail "$WORK/dnsd.log"; exit 1; }
    say "-- N=$n: site file $(du -k "$WORK/site.yaml" | cut -f1) kB; answering in $(secs_since "$t") s; RSS $(rss_now "$dp") kB"
    took=""
    for k in $(seq 1 "$K"); do
        i=$((n + k - 1))
        c=$(lines "$WORK/dnsd.log" "zone reloaded")
        r=$(lines "$WORK/dnsd.log" "reload refused")
        c0=$(cpu "$dp")
        t=$(now)
        printf '  - { name: n%05d, role: worker, live: true, macs: ["02:78:00:%02x:%02x:%02x"], ip: 10.78.%d.%d }\n' \
            "$i" $((i >> 16 & 255)) $((i >> 8 & 255)) $((i & 255)) $((1 + i / 256)) $((i % 256)) >>"$WORK/site.yaml"
        kill -HUP "$dp"
        wait_fine 60 reload_ended "$c" "$r" || true
        s=$(secs_since "$t")
        more_lines "$WORK/dnsd.log" "zone reloaded" "$c" || { say "   reload $k: not done within 60 s"; grep -A3 "reload refused" "$WORK/dnsd.log" | tail -4 | tee -a "$RESULTS"; exit 1; }
        sleep 1   # the previous catalog's last readers let go
        took+="$s "
        say "   reload $k: $s s; CPU $(awk -v a="$c0" -v b="$(cpu "$dp")" 'BEGIN { printf "%.2f", b - a }') s (with the 1 s after); RSS 1 s after $(rss_now "$dp") kB"
    done
    m=$(echo "$took" | median)
    say "   N=$n: median reload $m s (of $took)"
    [[ -n $first ]] || first="$n $m"
    last="$n $m"
    bench_stop "$dp"
done
read -r n0 m0 <<<"$first"
read -r n1 m1 <<<"$last"
if [[ $n1 != "$n0" ]]; then
    say "   ratio: $(awk -v a="$m0" -v b="$m1" 'BEGIN { printf "%.2f", b / a }')x the reload time for $(awk -v a="$n0" -v b="$n1" 'BEGIN { printf "%g", b / a }')x the nodes ($n1 against $n0)"
fi
