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

# cpu_busy_ticks CPU -> the CPU's busy ticks from /proc/stat, counted the way
# the kernel counts a process's utime+stime, so that busy minus our
# processes' ticks is other work: user + system + steal, plus irq and
# softirq unless the kernel accounts interrupt time apart from tasks
# (CONFIG_IRQ_TIME_ACCOUNTING=y). Without it, a tick that lands in softirq
# goes to the running task's stime and to the CPU's softirq column alike, and
# loopback's softirq work mostly runs in our processes' context (left out,
# "other" went negative by up to a quarter of a CPU). nice is left out: work
# at positive nice never disturbs us much.
# BUSY_COLUMNS (env) overrides the choice; BUSY_HOW says what was chosen and why.
if [ -n "${BUSY_COLUMNS:-}" ]; then
    BUSY_HOW="columns $BUSY_COLUMNS (BUSY_COLUMNS from the environment)"
elif grep -qs '^CONFIG_IRQ_TIME_ACCOUNTING=y' "/boot/config-$(uname -r)" || { [ -r /proc/config.gz ] && zgrep -qs '^CONFIG_IRQ_TIME_ACCOUNTING=y' /proc/config.gz; }; then
    BUSY_COLUMNS='$2 + $4 + $9'
    BUSY_HOW="user+system+steal (kernel has CONFIG_IRQ_TIME_ACCOUNTING=y)"
elif [ -r "/boot/config-$(uname -r)" ] || [ -r /proc/config.gz ]; then
    BUSY_COLUMNS='$2 + $4 + $7 + $8 + $9'
    BUSY_HOW="user+system+irq+softirq+steal (kernel without CONFIG_IRQ_TIME_ACCOUNTING)"
else
    BUSY_COLUMNS='$2 + $4 + $7 + $8 + $9'
    BUSY_HOW="user+system+irq+softirq+steal (kernel config not readable: assumed without IRQ time accounting; set BUSY_COLUMNS to override)"
fi
cpu_busy_ticks() { awk -v c="cpu$1" "\$1 == c {print $BUSY_COLUMNS}" /proc/stat; }
