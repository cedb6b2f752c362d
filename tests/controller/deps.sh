#!/usr/bin/env bash
# What the controller tests need beyond cargo: Node.js (Debian's nodejs/npm
# when no node is installed) and Stoplight Prism 5.14.2 from npm, installed into
# REPO/target/prism (where bootd/tests/controller/prism.rs looks) with `npm ci`
# from tests/controller/prism/package-lock.json: the whole tree is pinned, because
# Prism 5.16 takes @faker-js/faker 10, an ES module Debian 12's Node 18 cannot
# require (found by tests/fresh-debian.sh). When PRISM
# names an executable, that one is used and nothing is installed.
# Idempotent. Usage: tests/controller/deps.sh
set -euo pipefail
# shellcheck source=tests/lib/harness.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/harness.sh"   # sets REPO
harness_init deps.sh
PRISM_DIR=$REPO/target/prism

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  [[ $(id -u) -eq 0 ]] || fail "node/npm missing and not root: apt-get install nodejs npm"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends nodejs npm
fi
if [[ -n ${PRISM:-} && -x ${PRISM:-} ]]; then
  log "using PRISM=$PRISM ($("$PRISM" --version))"
  exit 0
fi
PIN=$REPO/tests/controller/prism
# .installed: the lock file an `npm ci` there finished with (a half-done install has none).
if [[ -x $PRISM_DIR/node_modules/.bin/prism ]] && cmp -s "$PIN/package-lock.json" "$PRISM_DIR/.installed"; then
  log "prism $("$PRISM_DIR/node_modules/.bin/prism" --version) already in $PRISM_DIR"
  exit 0
fi
rm -rf "$PRISM_DIR"
mkdir -p "$PRISM_DIR"
cp "$PIN/package.json" "$PIN/package-lock.json" "$PRISM_DIR/"
npm ci --prefix "$PRISM_DIR" --no-audit --no-fund
cp "$PIN/package-lock.json" "$PRISM_DIR/.installed"
log "prism $("$PRISM_DIR/node_modules/.bin/prism" --version) installed in $PRISM_DIR"
