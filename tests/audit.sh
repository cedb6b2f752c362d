#!/usr/bin/env bash
# Audits Cargo.lock and fuzz/Cargo.lock with cargo-audit against the
# advisory database snapshot in tests/advisory-db (the live database is not
# reachable from CI). Vulnerabilities and warnings (unmaintained, unsound)
# fail; the advisories .cargo/audit.toml ignores are listed there, each with
# why it does not apply. Installs cargo-audit (pinned) when missing.
# Usage: tests/audit.sh   Prints "ok" lines and "PASS audit", or the
# findings and "FAIL audit", and exits 1.
#        tests/audit.sh --install   only installs cargo-audit: the test
# command starts that early, niced, in the background, and the audit's own
# run waits for it (one install at a time, a lock).
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/lib/harness.sh
harness_init audit
VERSION=0.22.2
mkdir -p target/tools
exec 9>target/tools/.cargo-audit.lock
flock 9
if ! cargo audit --version 2>/dev/null | grep -q " $VERSION\$"; then
    log "installing cargo-audit $VERSION"
    cargo install cargo-audit --locked --version "$VERSION" >&2
fi
flock -u 9
if [[ ${1:-} == --install ]]; then
    log "cargo-audit $VERSION installed"
    exit 0
fi
db=$WORK/advisory-db
tar -xJf tests/advisory-db/advisory-db.tar.xz -C "$WORK"
# cargo-audit opens the database as a git repository.
git -C "$db" init -q
git -C "$db" add -A
git -C "$db" -c user.name=audit -c user.email=audit@localhost commit -q -m snapshot
log "$(tar -tJf tests/advisory-db/advisory-db.tar.xz | grep -c 'RUSTSEC-.*\.md$') advisories in the snapshot"
for lock in Cargo.lock fuzz/Cargo.lock; do
    if out=$(cargo audit --db "$db" --no-fetch --stale --deny warnings --file "$lock" 2>&1); then
        ok "$lock: $(grep -o 'Scanning .*' <<<"$out" | head -n 1)"
    else
        echo "$out" | grep -v "^ *Fetching\|^ *Loaded" >&2
        bad "$lock"
    fi
done
harness_verdict
