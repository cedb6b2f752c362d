#!/usr/bin/env bash
# The real coreos-installer (what RHCOS's live system runs to install to
# disk) for the lab guest: version 0.27.0 from crates.io, built with
#   cargo install coreos-installer --version 0.27.0 --locked --root target/tools
# unless target/tools/bin/coreos-installer already says 0.27.0. A build takes
# 2.6 min here (2 cores, nice 19, crates already in cargo's cache; up to ~11 min
# with downloads and load). Build dependencies (tests/lab/deps.sh): a C compiler,
# pkg-config, libzstd-dev, liblzma-dev, libssl-dev (reqwest's native TLS).
# The crate's source (scripts/coreos-installer-service, systemd/) stays in
# cargo's registry; tests/lab/guest.sh reads the script from there.
# Usage: tests/lab/coreos-installer.sh      (prints the binary's path)
set -euo pipefail
# shellcheck source=tests/lib/harness.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/harness.sh"   # sets REPO
harness_init coreos-installer.sh
VERSION=0.27.0
ROOT=${TOOLS_ROOT:-$REPO/target/tools}   # TOOLS_ROOT: another place (a build check)
BINARY=$ROOT/bin/coreos-installer
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

have() { [[ -x $BINARY && $("$BINARY" --version 2>/dev/null) == "coreos-installer $VERSION" ]]; }
# One build at a time: the test command starts one early, in the
# background, and tests/lab/guest.sh's call waits for it here.
mkdir -p "$ROOT"
exec 9>"$ROOT/.coreos-installer.lock"
flock 9
if have; then
  log "up to date: $BINARY ($VERSION)"
  echo "$BINARY"
  exit 0
fi
command -v cargo >/dev/null || fail "no cargo (run tests/lab/rust.sh)"
for p in pkg-config cc; do command -v "$p" >/dev/null || fail "missing $p (run tests/lab/deps.sh)"; done
for lib in libzstd liblzma openssl; do
  pkg-config --exists "$lib" || fail "pkg-config finds no $lib (run tests/lab/deps.sh)"
done
log "building coreos-installer $VERSION into $ROOT (2.5-11 min on 2 cores)"
T0=$(now)
# From the repository: the toolchain is rust-toolchain.toml's.
(cd "$REPO" && cargo install coreos-installer --version "$VERSION" --locked --root "$ROOT") >&2 \
  || fail "cargo install coreos-installer $VERSION failed"
have || fail "$BINARY does not say coreos-installer $VERSION"
log "built in $(since "$T0")s"
echo "$BINARY"
