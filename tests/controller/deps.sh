#!/usr/bin/env bash
# What the controller tests need beyond cargo: Node.js (Debian's nodejs/npm
# when no node is installed) and Stoplight Prism 5 from npm, installed into
# REPO/target/prism (where bootd/tests/controller/prism.rs looks). When PRISM
# names an executable, that one is used and nothing is installed.
# Idempotent. Usage: tests/controller/deps.sh
set -euo pipefail
REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
PRISM_DIR=$REPO/target/prism

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  [[ $(id -u) -eq 0 ]] || { echo "deps.sh: node/npm missing and not root: apt-get install nodejs npm" >&2; exit 1; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends nodejs npm
fi
if [[ -n ${PRISM:-} && -x ${PRISM:-} ]]; then
  echo "deps.sh: using PRISM=$PRISM ($("$PRISM" --version))"
  exit 0
fi
if [[ -x $PRISM_DIR/node_modules/.bin/prism ]]; then
  echo "deps.sh: prism $("$PRISM_DIR/node_modules/.bin/prism" --version) already in $PRISM_DIR"
  exit 0
fi
mkdir -p "$PRISM_DIR"
npm install --prefix "$PRISM_DIR" --no-audit --no-fund @stoplight/prism-cli@5
echo "deps.sh: prism $("$PRISM_DIR/node_modules/.bin/prism" --version) installed in $PRISM_DIR"
