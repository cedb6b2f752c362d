# Shared by bench/dhcp and bench/tftp: source it with BENCH_NAME set.
#
# --- CPU accounting by cgroup: a server's CPU time includes every thread and
# every child it forks (tftpd-hpa forks one per transfer), exited or not.
# cgroup v1 cpuacct, or cgroup v2 (cpu.stat usage_usec is always there).
CG_V1=/sys/fs/cgroup/cpuacct
if [[ -f $CG_V1/cpuacct.usage ]]; then
    CG_BASE=$CG_V1
else
    CG_BASE=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts)
    [[ -n $CG_BASE && -f $CG_BASE/cgroup.procs ]] || { echo "no cgroup (v1 cpuacct or v2) to account CPU time" >&2; exit 2; }
fi
CG_ROOT=$CG_BASE/bench-$BENCH_NAME-$$
mkdir -p "$CG_ROOT"
cg_new() { mkdir -p "$CG_ROOT/$1"; echo "$CG_ROOT/$1"; }
cg_ns() { # cgroup dir -> CPU nanoseconds used by its tasks so far
    if [[ -f $1/cpuacct.usage ]]; then cat "$1/cpuacct.usage"; else awk '/^usage_usec/ {print $2 * 1000}' "$1/cpu.stat"; fi
}
cg_cleanup() {
    local g p
    # move ourselves back out, then remove the (empty) groups
    echo $$ >"$CG_BASE/cgroup.procs" 2>/dev/null || true
    for g in "$CG_ROOT"/*/; do
        [[ -d $g ]] || continue
        while read -r p; do echo "$p" >"$CG_BASE/cgroup.procs" 2>/dev/null || true; done <"$g/cgroup.procs"
        rmdir "$g" 2>/dev/null || true
    done
    rmdir "$CG_ROOT" 2>/dev/null || true
}
# incg CGDIR cmd args... &: run cmd inside the cgroup. Only ever call it in
# the background (&): it execs, so the background job becomes cmd and $! is
# cmd's PID (stopping it by that PID stops the server itself).
incg() { local g=$1; shift; exec bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$g" "$@"; }

# Other load on the machine, for telling a quiet measurement from a
# disturbed one.
HZ=$(getconf CLK_TCK)
busy_ticks() { awk '/^cpu /{print $2 + $4 + $7 + $8 + $9}' /proc/stat; }
# Softirq work the kernel defers to ksoftirqd (network receive under load)
# is this benchmark's too.
KSOFTIRQD=$(pgrep -x 'ksoftirqd/[0-9]+' | tr '\n' ' ')
ksoftirqd_ns() { local t=0 p; for p in $KSOFTIRQD; do t=$((t + $(awk '{sub(/.*\) /,""); print $12 + $13}' "/proc/$p/stat"))); done; awk -v t="$t" -v hz="$HZ" 'BEGIN { printf "%.0f", t * 1e9 / hz }'; }
