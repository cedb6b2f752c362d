# Sourced by bench scripts: the order of targets within a round.

# order ROUND TARGET... -> the targets as given in odd rounds, reversed in
# even ones, so no target always runs first or last.
order() {
    local r=$1
    shift
    if [ $((r % 2)) = 1 ]; then echo "$*"; else printf '%s\n' "$@" | tac | tr '\n' ' '; fi
}
