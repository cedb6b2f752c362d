# Sourced by bench scripts: CPU ticks of processes from /proc/PID/stat.

# proc_ticks PID... -> "utime+stime utime", summed over the processes (all
# their threads); the second is user space only. A process that has gone
# counts 0.
proc_ticks() {
    local t=0 u=0 p v
    for p in "$@"; do
        v=$(awk '{sub(/.*\) /,""); print $12 + $13, $12}' "/proc/$p/stat" 2>/dev/null || echo "0 0")
        t=$((t + ${v% *})); u=$((u + ${v#* }))
    done
    echo "$t $u"
}
