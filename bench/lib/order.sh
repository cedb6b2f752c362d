# shellcheck shell=bash
# Sourced by every bench/*/run.sh: the order of targets within a round.

# order ROUND TARGET... -> the targets as given in odd rounds, reversed in
# even ones (A B C, C B A, A B C, ...), so no target always runs first or
# last and a drift over a round weighs on each target alike over two rounds.
order() {
    local r=$1
    shift
    if [ $((r % 2)) = 1 ]; then echo "$*"; else printf '%s\n' "$@" | tac | tr '\n' ' '; fi
}
