# shellcheck shell=bash
# The test command's steps (sourced by tests/run.sh): each step is timed and
# recorded, and at the end a table shows every step's lane, start, duration
# and verdict, with each lane's wall time and critical path.
#
#   steps_init DIR                 records go to DIR/steps.tsv (emptied)
#   setup NAME COMMAND...          a step the rest needs: its failure ends the run
#   step_in LANE NAME COMMAND...   a counted check in LANE (main, B, soak, ...)
#   steps_summary                  the table, then "end-to-end: N passed, N failed"
#                                  as the last line; returns 1 if a check failed
# Lanes run side by side (a background lane is a subshell calling step_in);
# within a lane the steps run one after another, so a lane's critical path
# is the sum of its steps and the run's is its longest lane.

steps_init() {
    STEPS_DIR=$1
    mkdir -p "$STEPS_DIR"
    STEPS_FILE=$STEPS_DIR/steps.tsv
    : >"$STEPS_FILE"
    STEPS_T0=$(date +%s)
    export STEPS_FILE STEPS_T0
}

log() { printf '\n== %s  [%s]\n' "$*" "$(date +%T)"; }

steps_record() { # lane kind start end verdict name
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$STEPS_FILE"
}

# step_in LANE NAME COMMAND...: one counted check; always returns 0 (the
# verdict is in the record).
step_in() {
    local lane=$1 name=$2 t0 rc=0
    shift 2
    log "$name"
    t0=$(date +%s)
    "$@" || rc=$?
    steps_record "$lane" check "$t0" "$(date +%s)" "$([[ $rc == 0 ]] && echo PASS || echo FAIL)" "$name"
    return 0
}

# setup NAME COMMAND...: a step everything after it needs (build,
# formatting, cargo test): timed like a check, and its failure ends the run
# with the table so far.
setup() {
    local name=$1 t0 rc=0
    shift
    log "$name"
    t0=$(date +%s)
    "$@" || rc=$?
    steps_record main setup "$t0" "$(date +%s)" "$([[ $rc == 0 ]] && echo PASS || echo FAIL)" "$name"
    if [[ $rc != 0 ]]; then
        echo "FAIL $name (exit $rc)"
        steps_summary || true
        exit "$rc"
    fi
}

steps_summary() {
    log "steps"
    awk -F'\t' -v t0="$STEPS_T0" '
    function mmss(s) { return sprintf("%d:%02d", int(s / 60), s % 60) }
    {
        n++; lane[n] = $1; kind[n] = $2; st[n] = $3 - t0; dur[n] = $4 - $3; v[n] = $5; name[n] = $6
        if (!($1 in first) || st[n] < first[$1]) first[$1] = st[n]
        if (!($1 in last) || st[n] + dur[n] > last[$1]) last[$1] = st[n] + dur[n]
        sum[$1] += dur[n]
        if (dur[n] > top1d[$1]) { top3d[$1] = top2d[$1]; top3n[$1] = top2n[$1]; top2d[$1] = top1d[$1]; top2n[$1] = top1n[$1]; top1d[$1] = dur[n]; top1n[$1] = name[n] }
        else if (dur[n] > top2d[$1]) { top3d[$1] = top2d[$1]; top3n[$1] = top2n[$1]; top2d[$1] = dur[n]; top2n[$1] = name[n] }
        else if (dur[n] > top3d[$1]) { top3d[$1] = dur[n]; top3n[$1] = name[n] }
        if (kind[n] == "check") { if ($5 == "PASS") pass++; else { fail++; failed = failed (failed ? "; " : "") $6 } }
        else if ($5 != "PASS") { fail++; failed = failed (failed ? "; " : "") "setup: " $6 }
    }
    END {
        printf "%-5s %7s %7s  %-4s  %s\n", "lane", "start", "took", "", "step"
        # by start time
        for (i = 1; i <= n; i++) idx[i] = i
        for (i = 2; i <= n; i++) { k = idx[i]; j = i - 1; while (j > 0 && st[idx[j]] > st[k]) { idx[j + 1] = idx[j]; j-- } idx[j + 1] = k }
        for (i = 1; i <= n; i++) { k = idx[i]; printf "%-5s %7s %7s  %-4s  %s\n", lane[k], mmss(st[k]), mmss(dur[k]), v[k], substr(name[k], 1, 100) }
        print ""
        for (l in sum) {
            printf "lane %-5s wall %s (from %s to %s), steps %s; longest: %s %s", l, mmss(last[l] - first[l]), mmss(first[l]), mmss(last[l]), mmss(sum[l]), mmss(top1d[l]), substr(top1n[l], 1, 50)
            if (top2n[l] != "") printf ", %s %s", mmss(top2d[l]), substr(top2n[l], 1, 50)
            if (top3n[l] != "") printf ", %s %s", mmss(top3d[l]), substr(top3n[l], 1, 50)
            printf "\n"
            if (last[l] > end) { end = last[l]; crit = l }
        }
        printf "critical path: lane %s, the run ends at %s\n", crit, mmss(end)
        printf "end-to-end: %d passed, %d failed%s\n", pass, fail, (fail ? " (" failed ")" : "")
        exit (fail > 0)
    }' "$STEPS_FILE"
}
