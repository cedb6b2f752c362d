#!/usr/bin/env bash
# Audits Cargo.lock and fuzz/Cargo.lock with cargo-audit against the
# advisory database snapshot in tests/advisory-db (the live database is not
# reachable from CI). Vulnerabilities and warnings (unmaintained, unsound)
# fail; the advisories .cargo/audit.toml ignores are listed there, each with
# why it does not apply. Installs cargo-audit (pinned) when missing.
# Usage: tests/audit.sh   Prints "PASS audit ..." or the findings and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.22.2
if ! cargo audit --version 2>/dev/null | grep -q " $VERSION\$"; then
    echo "audit.sh: installing cargo-audit $VERSION" >&2
    cargo install cargo-audit --locked --version "$VERSION" >&2
fi
db=$(mktemp -d /tmp/advisory-db.XXXXXX)
trap 'rm -rf "$db"' EXIT
tar -xJf tests/advisory-db/advisory-db.tar.xz -C "$db"
# cargo-audit opens the database as a git repository.
git -C "$db/advisory-db" init -q
git -C "$db/advisory-db" add -A
git -C "$db/advisory-db" -c user.name=audit -c user.email=audit@localhost commit -q -m snapshot
fail=0
for lock in Cargo.lock fuzz/Cargo.lock; do
    if out=$(cargo audit --db "$db/advisory-db" --no-fetch --stale --deny warnings --file "$lock" 2>&1); then
        echo "ok   $lock: $(grep -o 'Scanning .*' <<<"$out" | head -n 1)"
    else
        echo "$out" | grep -v "^ *Fetching\|^ *Loaded" >&2
        echo "FAIL $lock" >&2
        fail=1
    fi
done
[[ $fail == 0 ]] || exit 1
echo "PASS audit ($(tar -tJf tests/advisory-db/advisory-db.tar.xz | grep -c 'RUSTSEC-.*\.md$') advisories)"
