#!/usr/bin/env bash
# Side-by-side TFTP benchmark: bootd vs tftpd-hpa (in.tftpd -L) vs atftpd
# (run from its unpacked .deb: installing the package would remove tftpd-hpa).
#
# One run does everything: a server namespace and a client namespace joined
# by a veth pair (10.78.200.0/24; nothing leaves them). All three servers
# listen on port 69, each on its own address in the server namespace, pinned
# to CPU 0; clients are pinned to CPU 1. Tests (servers interleaved, order
# reversed every other round, median of ROUNDS):
#   lock64  : one 64 MiB fetch, blksize 1468, lock-step (curl --tftp-blksize;
#             curl also asks tsize) -- all three servers
#   ws64    : one 64 MiB fetch, blksize 1468 + windowsize 16 (atftp
#             --option) -- bootd and atftpd (tftpd-hpa has no windowsize)
#   conc20  : 20 clients at once, each fetching a 1 MiB file CONC_REPS times
#             in a row, blksize 1468 lock-step (curl) -- all three
#   conc20w : the same with atftp, windowsize 16 -- bootd and atftpd
# each in two modes: plain (idle machine) and busy (a `nice -n 19` busy loop
# pinned to each CPU, so a vCPU waiting for the next packet does not halt;
# see shared/TESTING.md: lock-step round trips are 2-8x slower on a quiet
# VM). Reported: MiB/s (wall clock of the client side), server CPU time per
# MiB (bench/lib/cpu.sh: a cgroup per server, all threads and forked
# children, tftpd-hpa forks one per transfer), and ratios bootd/peer within
# the same mode.
#
# Knobs (env): ROUNDS (3), MODES ("plain busy"), TESTS ("lock64 ws64 conc20
# conc20w"), BIG_MIB (64), CONC (20), CONC_REPS (5), FETCH_TIMEOUT (180 s),
# BOOTD_BIN, ATFTPD_BIN (default: apt-get download atftpd + dpkg-deb -x into
# a temp dir), RESULTS (default bench/tftp/results-<UTC date>.txt),
# WAIT_HTTP_BENCH (1200 s to wait for a running bench/http run to end),
# QUIET_WAIT (120 s to wait for other load to stop), OTHER_MAX (0.2 CPUs),
# ATTEMPTS (2 per measurement when other load ran meanwhile).
set -euo pipefail
# shellcheck source=tests/lib/harness.sh
. "$(dirname "$0")/../../tests/lib/harness.sh"
# shellcheck source=bench/lib/bench.sh
. "$REPO/bench/lib/bench.sh"   # say, log, bench_need_*, num_lt
# shellcheck source=bench/lib/cpu.sh
. "$REPO/bench/lib/cpu.sh"     # cpu_init, cpu_group, cpu_spawn, cpu_read, cpu_snap, cpu_quiet, busy_start, ...

ROUNDS=${ROUNDS:-3}
MODES=${MODES:-"plain busy"}
TESTS=${TESTS:-"lock64 ws64 conc20 conc20w"}
BIG_MIB=${BIG_MIB:-64}
CONC=${CONC:-20}
CONC_REPS=${CONC_REPS:-5}
FETCH_TIMEOUT=${FETCH_TIMEOUT:-180}
WAIT_HTTP_BENCH=${WAIT_HTTP_BENCH:-1200}
SERVER_CPU=0
LOAD_CPU=1
BLK=1468
WIN=16

BOOTD_BIN=${BOOTD_BIN:-$REPO/target/release/bootd}
RESULTS=${RESULTS:-$REPO/bench/tftp/results-$(date -u +%F).txt}

bench_need_root "network namespaces, port 69"
bench_need_tools 2 "tests/lab/deps.sh installs them" in.tftpd atftp curl taskset ip awk sha256sum
[[ -x $BOOTD_BIN ]] || { echo "no bootd at $BOOTD_BIN: cargo build --release -p appliance --bin bootd" >&2; exit 2; }
bench_need_cpus 2

S=btf-s-$$ C=btf-c-$$
VS=ts$$ VC=tc$$
IP_BOOTD=10.78.200.1 IP_HPA=10.78.200.2 IP_ATFTPD=10.78.200.3 IP_CLIENT=10.78.200.100
harness_init bench-tftp        # $WORK (755: bootd serves as nobody once it has bound its sockets); at exit the servers stopped, the namespaces deleted
bench_results "$RESULTS"
declare -A PID
declare -A CG

# The machine may be shared (another agent's bench/http run, QEMU lab tests).
# Before a measurement: no wrk / bench/http run, and at most OTHER_MAX CPUs'
# worth of load that is not ours, waited for up to QUIET_WAIT s. During it:
# "other" load over the whole machine (bench/lib/cpu.sh: busy time in
# /proc/stat minus our groups, the servers and this script with its clients,
# and ksoftirqd; the nice-19 busy loops count in neither); a run with more
# than OTHER_MAX CPUs of other load is repeated (ATTEMPTS at most), then kept
# and flagged in the log.
OTHER_MAX=${OTHER_MAX:-0.2}
QUIET_WAIT=${QUIET_WAIT:-120}
ATTEMPTS=${ATTEMPTS:-2}
cpu_init tftp
cpu_group CG_LOAD load $LOAD_CPU
cpu_join "$CG_LOAD"
wait_quiet() {
    cpu_wait_http_bench "$WAIT_HTTP_BENCH"
    cpu_quiet "$OTHER_MAX" "$QUIET_WAIT"
}

# --- atftpd from its .deb ---------------------------------------------------
if [[ -z ${ATFTPD_BIN:-} ]]; then
    mkdir -p "$WORK/atftpd-deb"
    (cd "$WORK/atftpd-deb" && apt-get download atftpd >/dev/null 2>&1 && dpkg-deb -x atftpd_*.deb root) \
        || { echo "could not fetch atftpd (apt-get download atftpd)" >&2; exit 2; }
    ATFTPD_BIN=$WORK/atftpd-deb/root/usr/sbin/atftpd
    debs=("$WORK"/atftpd-deb/atftpd_*.deb)
    ATFTPD_VER=$(basename "${debs[0]}" | sed 's/.*atftpd_\(.*\)_.*/\1/')
else
    ATFTPD_VER="$ATFTPD_BIN"
fi

# --- files ---------------------------------------------------------------------
ROOT=$WORK/tftp
mkdir -p "$ROOT"
chmod 777 "$ROOT"   # atftpd insists on a world-writable root; nothing writes
dd if=/dev/urandom of="$ROOT/big.bin" bs=1M count="$BIG_MIB" iflag=fullblock status=none
dd if=/dev/urandom of="$ROOT/small.bin" bs=1M count=1 iflag=fullblock status=none
chmod 644 "$ROOT"/*.bin
BIG_SUM=$(sha256sum <"$ROOT/big.bin" | cut -d' ' -f1)
SMALL_SUM=$(sha256sum <"$ROOT/small.bin" | cut -d' ' -f1)
cat "$ROOT"/*.bin >/dev/null

# --- network -------------------------------------------------------------------
ns_pair "$S" "$C" "$VS" "$VC"
ns_addr "$S" "$VS" $IP_BOOTD/24 $IP_HPA/24 $IP_ATFTPD/24
ns_addr "$C" "$VC" $IP_CLIENT/24

# --- servers -------------------------------------------------------------------
mkdir -p "$WORK/bootd/state" "$WORK/bootd/images"
cat >"$WORK/bootd/site.yaml" <<EOF
cluster: { name: bench, baseDomain: example.test }
host:
  stateDir: $WORK/bootd/state
  http: { listen: "$IP_BOOTD:8080", url: "http://$IP_BOOTD:8080" }
  tftp: { listen: "$IP_BOOTD:69", root: $ROOT }
networks: [ { name: bench, subnet: 10.78.200.0/24, gateway: $IP_BOOTD } ]
vips: { api: $IP_BOOTD, ingress: $IP_BOOTD }
images:
  root: $WORK/bootd/images
  sets:
    lab-x86_64: { arch: x86_64, kernel: lab/kernel, initramfs: lab/initramfs }
nodes:
  - { name: worker-0, role: worker, live: true, macs: ["52:54:00:78:00:20"], ip: 10.78.200.20 }
ignition:
  dir: $REPO/examples/lab/ignition
EOF
for x in bootd tftpd-hpa atftpd; do cpu_group "CG[$x]" "$x" $SERVER_CPU; done
cpu_spawn "${CG[bootd]}" --ns "$S" --log "$WORK/bootd.log" taskset -c $SERVER_CPU "$BOOTD_BIN" --site "$WORK/bootd/site.yaml"
PID[bootd]=$SPAWNED
# tftpd-hpa: foreground (-L), forks one child per transfer; -s chroots to the root.
cpu_spawn "${CG[tftpd-hpa]}" --ns "$S" --log "$WORK/hpa.log" taskset -c $SERVER_CPU in.tftpd -L -a $IP_HPA:69 -u root -s "$ROOT"
PID[tftpd-hpa]=$SPAWNED
# atftpd: one thread per transfer.
cpu_spawn "${CG[atftpd]}" --ns "$S" --log "$WORK/atftpd.out" taskset -c $SERVER_CPU "$ATFTPD_BIN" --daemon --no-fork --port 69 --bind-address $IP_ATFTPD \
    --user root --group root --logfile "$WORK/atftpd.log" --maxthread 100 "$ROOT"
PID[atftpd]=$SPAWNED

ip_of() { case $1 in bootd) echo $IP_BOOTD ;; tftpd-hpa) echo $IP_HPA ;; atftpd) echo $IP_ATFTPD ;; esac; }

# client commands (run in the client namespace on CPU 1)
c_lock() { # ip file out
    ip netns exec "$C" taskset -c $LOAD_CPU timeout "$FETCH_TIMEOUT" curl -sS --tftp-blksize $BLK -o "$3" "tftp://$1/$2"
}
c_win() { # ip file out
    ip netns exec "$C" taskset -c $LOAD_CPU timeout "$FETCH_TIMEOUT" atftp --option "blksize $BLK" --option "windowsize $WIN" \
        -g -r "$2" -l "$3" "$1" 69 >/dev/null 2>&1
}

# Up: each server still runs and listens on its address's port 69.
up() { alive "${PID[$1]}" && ip netns exec "$S" ss -Hlun "src $(ip_of "$1"):69" | grep -q .; }
all_up() { up bootd && up tftpd-hpa && up atftpd; }
if ! wait_for 5 all_up; then
    for s in bootd tftpd-hpa atftpd; do
        alive "${PID[$s]}" || { echo "$s exited:" >&2; cat "$WORK"/*.log "$WORK"/*.out >&2; exit 1; }
        up "$s" || { echo "$s does not listen on $(ip_of "$s"):69 after 5 s:" >&2; cat "$WORK"/*.log "$WORK"/*.out >&2; exit 1; }
    done
fi

# Correctness first: every server sends the same bytes, with the options used.
check() { # server kind(lock|win) file sum
    local out=$WORK/check.out
    rm -f "$out"
    if [[ $2 == lock ]]; then c_lock "$(ip_of "$1")" "$3" "$out"; else c_win "$(ip_of "$1")" "$3" "$out"; fi || true
    local got; got=$(sha256sum <"$out" 2>/dev/null | cut -d' ' -f1)
    [[ $got == "$4" ]] || { echo "$1: $3 via $2 differs (got ${got:-nothing})" >&2; tail "$WORK"/*.log >&2; exit 1; }
}
for s in bootd tftpd-hpa atftpd; do check "$s" lock big.bin "$BIG_SUM"; check "$s" lock small.bin "$SMALL_SUM"; done
for s in bootd atftpd; do check "$s" win big.bin "$BIG_SUM"; check "$s" win small.bin "$SMALL_SUM"; done
# tftpd-hpa ignores windowsize: atftp then runs lock-step against it.
check tftpd-hpa win small.bin "$SMALL_SUM"
rm -f "$WORK/check.out"

servers_for() { case $1 in lock64 | conc20) echo "bootd tftpd-hpa atftpd" ;; ws64 | conc20w) echo "bootd atftpd" ;; esac; }

# One measurement -> "MiB wall server_cpu_s other_cpus"
measure() { # test server
    local ip; ip=$(ip_of "$2")
    local g=${CG[$2]}
    local c0 c1 t0 t1 mib s0 s1
    sleep 0.2
    s0=$(cpu_snap); c0=$(cpu_read "$g"); t0=$(date +%s.%N)
    case $1 in
    lock64) c_lock "$ip" big.bin /dev/null || log "WARNING: $1 fetch from $2 failed"; mib=$BIG_MIB ;;
    ws64) c_win "$ip" big.bin /dev/null || log "WARNING: $1 fetch from $2 failed"; mib=$BIG_MIB ;;
    conc20 | conc20w)
        local pids=() i
        for ((i = 0; i < CONC; i++)); do
            (
                for ((j = 0; j < CONC_REPS; j++)); do
                    if [[ $1 == conc20 ]]; then c_lock "$ip" small.bin /dev/null; else c_win "$ip" small.bin /dev/null; fi || exit 1
                done
            ) &
            pids+=($!)
        done
        local fail=0
        for i in "${pids[@]}"; do wait "$i" || fail=1; done
        ((fail == 0)) || log "WARNING: a $1 fetch from $2 failed"
        mib=$((CONC * CONC_REPS)) ;;
    esac
    t1=$(date +%s.%N)
    sleep 0.2   # transfers' last ACK handling, tftpd-hpa children exiting
    c1=$(cpu_read "$g"); s1=$(cpu_snap)
    local w; w=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    local cpu; cpu=$(cpu_used "$c0" "$c1" %.3f)
    echo "$mib $w ${cpu%% *} $(cpu_load "$s0" "$s1")"
}

declare -A R

say "== bootd vs tftpd-hpa vs atftpd TFTP, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say "machine: $(uname -srm), $(nproc --all) vCPU ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), $(. /etc/os-release && echo "$PRETTY_NAME")"
say "bootd: $BOOTD_BIN ($(cd "$REPO" && git rev-parse --short HEAD 2>/dev/null || echo '?')$(cd "$REPO" && git diff --quiet HEAD -- bootd site 2>/dev/null || echo '+dirty')); tftpd-hpa: $(in.tftpd -V 2>&1 | head -1) (in.tftpd -L -s, forks per transfer); atftpd: $ATFTPD_VER (unpacked .deb, --daemon --no-fork, threads)"
say "clients: $(curl --version | head -1 | cut -d' ' -f1-2) (--tftp-blksize $BLK, lock-step), atftp $(dpkg-query -W -f='${Version}' atftp 2>/dev/null) (--option 'blksize $BLK' --option 'windowsize $WIN')"
say "files: ${BIG_MIB} MiB and 1 MiB random, page cache warm; servers on CPU $SERVER_CPU, clients on CPU $LOAD_CPU; veth between two namespaces"
say "busy mode: one 'nice -n 19' shell busy loop pinned to each CPU during the measurement"
say "cpu accounting: $CPU_HOW"
say ""

for mode in $MODES; do
    for t in $TESTS; do
        read -r -a SV <<<"$(servers_for "$t")"
        for ((round = 1; round <= ROUNDS; round++)); do
            [[ $mode == busy ]] && busy_start 3600 $SERVER_CPU $LOAD_CPU   # bounded: far above the longest phase
            for s in $(order "$round" "${SV[@]}"); do
                best="" best_other=""
                for ((a = 1; a <= ATTEMPTS; a++)); do
                    wait_quiet
                    read -r mib wall cpu other < <(measure "$t" "$s")
                    log "  $mode/$t/$s attempt $a: MiB=$mib wall=${wall}s server-cpu=${cpu}s other-load=${other}CPUs"
                    # keep the attempt with the least other load
                    if [[ -z $best_other ]] || num_lt "$other" "$best_other"; then
                        best_other=$other; best="$mib $wall $cpu $other"
                    fi
                    num_lt "$OTHER_MAX" "$other" || break
                done
                read -r mib wall cpu other <<<"$best"
                mbs=$(awk -v m="$mib" -v w="$wall" 'BEGIN { printf "%.1f", m / w }')
                cpm=$(awk -v m="$mib" -v c="$cpu" 'BEGIN { printf "%.2f", c * 1000 / m }')
                log "mode=$mode test=$t round=$round server=$s MiB=$mib wall=${wall}s MiB/s=$mbs server-cpu=${cpu}s cpu-ms/MiB=$cpm other-load=${other}CPUs"
                R[$mode,$t,$s,mbs]="${R[$mode,$t,$s,mbs]:-} $mbs"
                R[$mode,$t,$s,cpm]="${R[$mode,$t,$s,cpm]:-} $cpm"
                R[$mode,$t,$s,oth]="${R[$mode,$t,$s,oth]:-} $other"
            done
            [[ $mode == busy ]] && busy_stop
        done
    done
done

# shellcheck disable=SC2086 # the rounds' values, one a word
med() { median_of ${R[$1,$2,$3,$4]:-}; }
desc() {
    case $1 in
    lock64) echo "${BIG_MIB} MiB, blksize $BLK lock-step (curl)" ;;
    ws64) echo "${BIG_MIB} MiB, blksize $BLK windowsize $WIN (atftp)" ;;
    conc20) echo "$CONC concurrent clients x $CONC_REPS x 1 MiB, lock-step (curl)" ;;
    conc20w) echo "$CONC concurrent clients x $CONC_REPS x 1 MiB, windowsize $WIN (atftp)" ;;
    esac
}
say ""
say "== results (median of $ROUNDS; MiB/s per round in brackets; CPU = server CPU ms per MiB sent, lower is better)"
for mode in $MODES; do
    say ""
    say "### mode: $mode"
    say ""
    say "| test | server | MiB/s | server CPU ms/MiB | bootd/peer MiB/s | peer/bootd CPU per MiB | other load (CPUs) |"
    say "|---|---|---|---|---|---|---|"
    for t in $TESTS; do
        for s in $(servers_for "$t"); do
            r1="" r2=""
            if [[ $s != bootd ]]; then
                r1=$(ratio "$(med "$mode" "$t" bootd mbs)" "$(med "$mode" "$t" "$s" mbs)")
                r2=$(ratio "$(med "$mode" "$t" "$s" cpm)" "$(med "$mode" "$t" bootd cpm)")
            fi
            say "| $(desc "$t") | $s | $(med "$mode" "$t" "$s" mbs) [${R[$mode,$t,$s,mbs]# }] | $(med "$mode" "$t" "$s" cpm) | $r1 | $r2 | ${R[$mode,$t,$s,oth]# } |"
        done
    done
done
say ""
say "raw output: $RESULTS"
