# shellcheck shell=bash
# The numbers the benchmarks share (sourced by tests/lib/harness.sh):
# medians, ratios, and the order of targets within a round.

# median: the median of the numbers on stdin, one a line ("nan" for none).
median() {
    sort -g | awk '{ a[NR] = $1 } END {
        if (NR == 0) { print "nan"; exit }
        if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

# median_of WORDS...: the median of the numbers given as arguments.
median_of() { printf '%s\n' "$@" | grep -v '^$' | median; }

# ratio A B [FMT]: A / B with FMT (%.2f); "n/a" when B is not positive or A
# is not a number.
ratio() {
    awk -v a="$1" -v b="$2" -v f="${3:-%.2f}" 'BEGIN { if (b > 0 && a == a + 0) printf f, a / b; else printf "n/a" }'
}

# order ROUND TARGET...: the targets as given in odd rounds, reversed in even
# ones (A B C, C B A, A B C, ...), so that no target always runs first or
# last and a drift over a round weighs on each target alike over two rounds.
order() {
    local r=$1
    shift
    if [ $((r % 2)) = 1 ]; then echo "$*"; else printf '%s\n' "$@" | tac | tr '\n' ' '; fi
}
