# shellcheck shell=bash
# Sourced by every bench/*/run.sh, after tests/lib/harness.sh and
# bench/lib/bench.sh: where the machine's CPU time goes during a measurement,
# defined once.
#
# Server CPU: the CPU time of a group holding a server with every thread and
# every child it forks, exited or not (tftpd-hpa forks one per transfer, nginx
# and NSD run worker processes). A group is a cgroup: v1 cpuacct, else v2
# (cpu.stat is always there). Fallback where no cgroup can be made (no
# cgroupfs, or not root): /proc, where a group is the processes started into
# it and their descendants, each counted as utime+stime plus cutime+cstime
# (the children it has reaped); a child reaped by someone else (init) is lost.
# BENCH_CPU (env: cgroup1, cgroup2 or proc) forces one.
#
# Other load: busy time of a set of CPUs from /proc/stat (columns below) minus
# what our own groups used on them: the servers' groups, the load group
# holding this shell and every generator it starts, and the ksoftirqd threads
# of those CPUs (network receive work the kernel defers there is ours). Per
# CPU from cpuacct.usage_percpu; where the kernel gives no per-CPU split
# (cgroup v2, /proc), a group's time is put on the CPUs it is declared to run
# on. Work at positive nice (busy_start's loops, a niced build) is neither
# busy nor ours.
#
# Use: cpu_init NAME once, after harness_init (it registers cpu_cleanup with
# the harness's on_exit); then
#   cpu_group G NAME [CPUS]      a group counted as ours, its handle in $G (CPUS: "0", "0,1"; empty = any)
#   cpu_join G                   this shell (and what it starts from now on) into G
#   cpu_spawn G [--ns NS] [--log F] [--append] cmd args...
#                                the harness's spawn, cmd in G ($SPAWNED is cmd's PID, in PIDS)
#   incg G cmd args... &         cmd in G ($! is cmd's PID), for what the harness does not stop
#   r=$(cpu_read G)              -> "ns user_ns system_ns" so far; cpu_used R0 R1 [FMT] -> "cpu_s user_s"
#   s=$(cpu_snap)                -> a snapshot; cpu_other, cpu_load, cpu_idle, cpu_secs compare two
#   cpu_quiet MAX WAIT CPUSET... waits (bounded) until other load <= MAX CPUs on each set
# CPU_HOW and BUSY_HOW say what was chosen, for the output's header.

# --- /proc/stat columns that are "busy" -------------------------------------
# Counted the way the kernel counts a task's CPU time, so that busy minus our
# groups is other work: user + system + steal, plus irq and softirq unless the
# kernel accounts interrupt time apart from tasks (CONFIG_IRQ_TIME_ACCOUNTING=y).
# Without it, a tick that lands in softirq goes to the running task and to the
# CPU's softirq column alike, and loopback's softirq work mostly runs in our
# processes' context (left out, "other" went negative by up to a quarter of a
# CPU). nice is left out: work at positive nice never disturbs us much.
# BUSY_COLUMNS (env) overrides the choice.
# shellcheck disable=SC2016 # awk's columns, for cpu_snap's awk
if [[ -n ${BUSY_COLUMNS:-} ]]; then
    BUSY_HOW="columns $BUSY_COLUMNS (BUSY_COLUMNS from the environment)"
elif grep -qs '^CONFIG_IRQ_TIME_ACCOUNTING=y' "/boot/config-$(uname -r)" || { [[ -r /proc/config.gz ]] && zgrep -qs '^CONFIG_IRQ_TIME_ACCOUNTING=y' /proc/config.gz; }; then
    BUSY_COLUMNS='$2 + $4 + $9'
    BUSY_HOW="user+system+steal (kernel has CONFIG_IRQ_TIME_ACCOUNTING=y)"
elif [[ -r /boot/config-$(uname -r) || -r /proc/config.gz ]]; then
    BUSY_COLUMNS='$2 + $4 + $7 + $8 + $9'
    BUSY_HOW="user+system+irq+softirq+steal (kernel without CONFIG_IRQ_TIME_ACCOUNTING)"
else
    BUSY_COLUMNS='$2 + $4 + $7 + $8 + $9'
    BUSY_HOW="user+system+irq+softirq+steal (kernel config not readable: assumed without IRQ time accounting; set BUSY_COLUMNS to override)"
fi

CPU_HZ=$(getconf CLK_TCK)
CPU_MODE="" CPU_BASE="" CPU_ROOT="" CPU_PROCS="" CPU_SELF="" CPU_KSOFT="" CPU_HOW=""
CPU_OURS=()
CPU_BUSY_PIDS=()
declare -A CPU_HOME

# cgroup1|cgroup2 -> the mount point plus this process's own cgroup in it
_cpu_cg_base() {
    local mnt rel
    if [[ $1 == cgroup1 ]]; then
        mnt=$(awk '$3 == "cgroup" && $4 ~ /(^|,)cpuacct(,|$)/ {print $2; exit}' /proc/mounts)
        rel=$(awk -F: '$2 ~ /(^|,)cpuacct(,|$)/ {print $3; exit}' /proc/self/cgroup)
        [[ -n $mnt && -f $mnt/cpuacct.usage ]] || return 1
    else
        mnt=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts)
        rel=$(awk -F: '$1 == "0" {print $3; exit}' /proc/self/cgroup)
        [[ -n $mnt && -f $mnt/cgroup.procs ]] || return 1
    fi
    rel=${rel%/}
    echo "$mnt$rel"
}

cpu_init() { # NAME
    local m want=${BENCH_CPU:-}
    for m in ${want:-cgroup1 cgroup2 proc}; do
        case $m in
        cgroup1 | cgroup2)
            CPU_BASE=$(_cpu_cg_base "$m") || continue
            CPU_ROOT=$CPU_BASE/bench-$1-$$
            mkdir "$CPU_ROOT" 2>/dev/null || { CPU_ROOT=""; continue; }
            CPU_PROCS=cgroup.procs ;;
        proc)
            CPU_ROOT=$(mktemp -d "/tmp/bench-cpu-$1.XXXXXX")
            CPU_PROCS=pids ;;
        *) echo "BENCH_CPU=$m: want cgroup1, cgroup2 or proc" >&2; exit 2 ;;
        esac
        CPU_MODE=$m
        break
    done
    [[ -n $CPU_MODE ]] || { echo "BENCH_CPU=$want: cannot make a group there" >&2; exit 2; }
    case $CPU_MODE in
    cgroup1) CPU_HOW="server CPU from cgroup v1 cpuacct ($CPU_ROOT), other load per CPU from cpuacct.usage_percpu" ;;
    cgroup2) CPU_HOW="server CPU from cgroup v2 cpu.stat ($CPU_ROOT), other load per CPU by the CPUs each group is pinned to" ;;
    proc) CPU_HOW="server CPU from /proc (no cgroup: process trees' utime+stime+cutime+cstime), other load per CPU by the CPUs each group is pinned to" ;;
    esac
    CPU_HOW="$CPU_HOW; busy = $BUSY_HOW, minus our groups and ksoftirqd"
    local p
    for p in $(pgrep -x 'ksoftirqd/[0-9]+'); do CPU_KSOFT="$CPU_KSOFT /proc/$p/stat"; done
    on_exit cpu_cleanup
}

_cpu_mkgroup() { # NAME -> dir
    mkdir -p "$CPU_ROOT/$1"
    [[ $CPU_MODE != proc ]] || : >"$CPU_ROOT/$1/pids"
    echo "$CPU_ROOT/$1"
}
# cpu_group VAR NAME [CPUS]: a group whose time is ours, its handle put in VAR
# (an array element works: 'G[bootd]'). CPUS: where its tasks run.
cpu_group() {
    local g
    g=$(_cpu_mkgroup "$2")
    CPU_OURS+=("$g")
    CPU_HOME[$g]=${3:-}
    printf -v "$1" %s "$g"
}

# cpu_join GROUP: this shell, and whatever it starts from now on (/proc: the
# shell's own time and its reaped children's, read between measurements).
cpu_join() {
    if [[ $CPU_MODE == proc ]]; then CPU_SELF=$1; else echo $$ >"$1/cgroup.procs"; fi
}

# incg GROUP cmd args... &: run cmd inside GROUP. Only ever call it in the
# background (&): it execs, so the background job becomes cmd and $! is cmd's
# PID (stopping it by that PID stops the server itself).
incg() { local g=$1; shift; exec bash -c 'echo $$ >>"$0" && exec "$@"' "$g/$CPU_PROCS" "$@"; }

# cpu_spawn GROUP [--ns NS] [--log F] [--append] cmd args...: spawn
# (tests/lib/harness.sh) with cmd inside GROUP: recorded in PIDS and stopped
# at exit (or by stop_pid), its own PID in $SPAWNED (bash joins the group,
# then execs `ip netns exec NS` (which execs cmd) or cmd). The group is
# joined before entering NS: `ip netns exec` mounts a sysfs of its own,
# where the group's path is not.
cpu_spawn() {
    local g=$1 opts=() ns=()
    shift
    while [[ $# -gt 0 ]]; do
        case $1 in
        --append) opts+=("$1"); shift ;;
        --log) opts+=("$1" "$2"); shift 2 ;;
        --ns) ns=(ip netns exec "$2"); shift 2 ;;
        *) break ;;
        esac
    done
    # shellcheck disable=SC2016 # for the inner bash
    spawn "${opts[@]}" bash -c 'echo $$ >>"$0" && exec "$@"' "$g/$CPU_PROCS" "${ns[@]}" "$@"
}

_cpu_proc_ticks() { # "self" | pid... (with their descendants) -> "user_ticks system_ticks"
    local files="" p r
    if [[ ${1:-} == self ]]; then
        files=/proc/$$/stat
    else
        for p in $(for r in "$@"; do _cpu_tree "$r"; done); do files="$files /proc/$p/stat"; done
    fi
    [[ -n $files ]] || { echo "0 0"; return; }
    # shellcheck disable=SC2086
    cat $files 2>/dev/null | awk '{ sub(/.*\) /, ""); u += $12 + $14; s += $13 + $15 } END { print u + 0, s + 0 }'
}
_cpu_tree() { local c; echo "$1"; for c in $(pgrep -P "$1" 2>/dev/null); do _cpu_tree "$c"; done; }

# cpu_read GROUP -> "ns user_ns system_ns" used so far ("0 0 0" for no group).
# ns is exact; the user/system split is tick-sampled (cpu_used scales it).
cpu_read() {
    local g=${1:-} u s
    [[ -n $g ]] || { echo "0 0 0"; return; }
    case $CPU_MODE in
    cgroup1) echo "$(<"$g/cpuacct.usage") $(<"$g/cpuacct.usage_user") $(<"$g/cpuacct.usage_sys")" ;;
    cgroup2) awk '{ v[$1] = $2 } END { printf "%.0f %.0f %.0f\n", v["usage_usec"] * 1000, v["user_usec"] * 1000, v["system_usec"] * 1000 }' "$g/cpu.stat" ;;
    proc)
        # shellcheck disable=SC2046 # one PID a word
        if [[ $g == "$CPU_SELF" ]]; then read -r u s <<<"$(_cpu_proc_ticks self)"; else read -r u s <<<"$(_cpu_proc_ticks $(<"$g/pids"))"; fi
        awk -v u="$u" -v s="$s" -v hz="$CPU_HZ" 'BEGIN { printf "%.0f %.0f %.0f\n", (u + s) * 1e9 / hz, u * 1e9 / hz, s * 1e9 / hz }' ;;
    esac
}
# cpu_used R0 R1 [FMT] -> "cpu_s user_s" between two cpu_read values (FMT: %.3f)
cpu_used() {
    awk -v a="$1" -v b="$2" -v f="${3:-%.3f}" 'BEGIN {
        split(a, x, " "); split(b, y, " "); c = (y[1] - x[1]) / 1e9; u = y[2] - x[2]; s = y[3] - x[3]
        printf f " " f "\n", c, (u + s > 0 ? c * u / (u + s) : 0) }'
}

# Lines "o CPU NS" (CPU "*": spread over all CPUs) of our time so far.
_cpu_ours() {
    local g v c n
    for g in "${CPU_OURS[@]}"; do
        if [[ $CPU_MODE == cgroup1 ]]; then
            awk '{ for (i = 1; i <= NF; i++) print "o", i - 1, $i }' "$g/cpuacct.usage_percpu"
            continue
        fi
        v=$(cpu_read "$g"); v=${v%% *}
        if [[ -z ${CPU_HOME[$g]} ]]; then echo "o * $v"; continue; fi
        n=$(tr ',' '\n' <<<"${CPU_HOME[$g]}" | wc -l)
        for c in ${CPU_HOME[$g]//,/ }; do echo "o $c $((v / n))"; done
    done
    # shellcheck disable=SC2086
    [[ -z $CPU_KSOFT ]] || cat $CPU_KSOFT 2>/dev/null | awk -v hz="$CPU_HZ" '{
        match($0, /\(ksoftirqd\/[0-9]+\)/); c = substr($0, RSTART + 11, RLENGTH - 12)
        sub(/.*\) /, ""); printf "o %s %.0f\n", c, ($12 + $13) * 1e9 / hz }'
}

# cpu_snap -> "T_NS N  CPU BUSY_TICKS IDLE_TICKS OURS_NS  ..." for N CPUs
cpu_snap() {
    { echo "t $(date +%s%N)"; grep '^cpu[0-9]' /proc/stat; _cpu_ours; } | awk '
        $1 == "t" { t = $2; next }
        $1 ~ /^cpu[0-9]/ { id = substr($1, 4); ids[n++] = id; b[id] = '"$BUSY_COLUMNS"'; i[id] = $5 + $6; next }
        $1 == "o" { if ($2 == "*") all += $3; else o[$2] += $3 }
        END { printf "%s %d", t, n; for (k = 0; k < n; k++) { id = ids[k]; printf " %s %s %s %.0f", id, b[id], i[id], o[id] + all / n }; print "" }'
}
# _cpu_cmp WHAT S0 S1 CPUSET... -> per CPUSET ("all" or "0,1"): other CPU-s, other CPUs (load), or idle s
_cpu_cmp() {
    awk -v what="$1" -v a="$2" -v b="$3" -v sets="${*:4}" -v hz="$CPU_HZ" 'BEGIN {
        split(a, x, " "); split(b, y, " "); secs = (y[1] - x[1]) / 1e9
        for (k = 0; k < x[2]; k++) { j = 3 + 4 * k; id = x[j]; ob[id] = x[j + 1]; oi[id] = x[j + 2]; oo[id] = x[j + 3]; all = all "," id }
        for (k = 0; k < y[2]; k++) { j = 3 + 4 * k; id = y[j]; nb[id] = y[j + 1]; ni[id] = y[j + 2]; no[id] = y[j + 3] }
        if (sets == "") sets = "all"
        ns = split(sets, S, " ")
        for (s = 1; s <= ns; s++) {
            nc = split(S[s] == "all" ? substr(all, 2) : S[s], C, ",")
            v = 0
            for (c = 1; c <= nc; c++) {
                id = C[c]
                if (what == "idle") v += (ni[id] - oi[id]) / hz
                else v += (nb[id] - ob[id]) / hz - (no[id] - oo[id]) / 1e9
            }
            if (what == "load") v = (secs > 0 ? v / secs : 0)
            printf "%s%.2f", (s > 1 ? " " : ""), v
        }
        print "" }'
}
cpu_other() { _cpu_cmp other "$@"; } # S0 S1 [CPUSET...] -> other load, CPU-seconds per set
cpu_load() { _cpu_cmp load "$@"; }   # S0 S1 [CPUSET...] -> other load, CPUs (CPU-s per s) per set
cpu_idle() { _cpu_cmp idle "$@"; }   # S0 S1 [CPUSET...] -> idle seconds per set
cpu_secs() { awk -v a="${1%% *}" -v b="${2%% *}" 'BEGIN { printf "%.3f\n", (b - a) / 1e9 }'; }

# cpu_quiet MAX WAIT [CPUSET...]: before a measurement, wait up to WAIT
# seconds (sampling 1 s at a time) until other load is at most MAX CPUs on
# each CPUSET (default: the whole machine). Calls the script's log.
cpu_quiet() {
    local max=$1 wait=$2 t=0 s0 o
    shift 2
    while ((t < wait)); do
        s0=$(cpu_snap); sleep 1; o=$(cpu_load "$s0" "$(cpu_snap)" "$@")
        awk -v m="$max" -v o="$o" 'BEGIN { n = split(o, x, " "); for (i = 1; i <= n; i++) if (x[i] > m) exit 1 }' && return 0
        ((t % 30 != 0)) || log "machine busy with other work (other load ${o// //} CPUs on CPUs ${*:-all}): waiting (bounded, ${wait}s)"
        t=$((t + 1))
    done
    ((wait == 0)) || log "WARNING: machine not quiet after ${wait}s; measuring anyway"
}

# cpu_wait_http_bench WAIT: wait up to WAIT seconds while a bench/http run or
# any wrk (bench/lb's too) is running: they load both CPUs.
_cpu_http_running() { pgrep -x wrk >/dev/null || pgrep -f 'bench/http/run.sh' >/dev/null; }
cpu_wait_http_bench() {
    local t=0
    while _cpu_http_running && ((t < $1)); do
        ((t % 60 != 0)) || log "an HTTP benchmark (bench/http, wrk) is running: waiting for it to end (bounded, ${1}s)"
        sleep 5; t=$((t + 5))
    done
    ! _cpu_http_running || log "WARNING: HTTP benchmark still running after ${1}s: measuring anyway"
}

# busy_start SECONDS CPU...: a `nice -n 19` busy loop pinned to each CPU, so a
# vCPU waiting for the next packet does not halt (see shared/TESTING.md). In a
# group that is not ours, and at positive nice, so it counts as neither ours
# nor other. Bounded by SECONDS; busy_stop (or cpu_cleanup) ends it by PID.
busy_start() {
    local secs=$1 c g
    shift
    g=$(_cpu_mkgroup busy)
    for c in "$@"; do
        incg "$g" timeout "$secs" nice -n 19 taskset -c "$c" sh -c 'while :; do :; done' &
        CPU_BUSY_PIDS+=($!)
    done
}
busy_stop() {
    local p
    for p in "${CPU_BUSY_PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    CPU_BUSY_PIDS=()
}

# From the harness's exit (on_exit, registered by cpu_init; the hooks run
# before the harness stops the processes in PIDS): stop the busy loops, move
# what is still in a group (this shell, servers about to be stopped) back
# where this shell was and remove the groups.
cpu_cleanup() {
    local g p
    busy_stop
    [[ -n $CPU_ROOT ]] || return 0
    if [[ $CPU_MODE == proc ]]; then
        rm -rf "$CPU_ROOT"
    else
        echo $$ >"$CPU_BASE/cgroup.procs" 2>/dev/null || true
        for g in "$CPU_ROOT"/*/; do
            [[ -d $g ]] || continue
            while read -r p; do echo "$p" >"$CPU_BASE/cgroup.procs" 2>/dev/null || true; done <"$g/cgroup.procs"
            rmdir "$g" 2>/dev/null || true
        done
        rmdir "$CPU_ROOT" 2>/dev/null || true
    fi
    CPU_ROOT=""
}
