#!/usr/bin/env bash
# The Rust toolchain the tests build with: the one rust-toolchain.toml pins,
# with rustfmt and clippy. On a machine without cargo (a fresh Debian 12: its
# own rustc 1.63 is too old for the workspace) it first installs rustup for
# this user: rustup-init of a pinned version from static.rust-lang.org, checked
# against the sha256 written here (not one fetched beside it).
# Idempotent. The caller puts ${CARGO_HOME:-~/.cargo}/bin on PATH (tests/run.sh does).
# Usage: tests/lab/rust.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
# (Before anything else is installed: the harness needs only bash and
# coreutils at source time.)
. tests/lib/harness.sh
harness_init rust.sh
HOME=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
export HOME
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

RUSTUP_VERSION=1.28.2
declare -A RUSTUP_SHA256=(
  [x86_64-unknown-linux-gnu]=20a06e644b0d9bd2fbdbfd52d42540bdde820ea7df86e92e533c073da0cdd43c
  [aarch64-unknown-linux-gnu]=e3853c5a252fca15252d07cb23a1bdd9377a8c6f3efa01531109281ae47f841c
)
channel=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)
[[ -n $channel ]] || fail "no channel in rust-toolchain.toml"

if ! command -v rustup >/dev/null; then
  if command -v cargo >/dev/null; then
    # A toolchain without rustup (a distribution's or an image's): used as
    # it is if it is new enough.
    have=$(cargo --version | awk '{print $2}')
    if [[ $(printf '%s\n%s\n' "$channel" "$have" | sort -V | head -1) != "$channel" ]]; then
      fail "cargo $have (without rustup) is older than $channel (rust-toolchain.toml); remove it or install rustup"
    fi
    log "cargo $have without rustup; used as it is"
    exit 0
  fi
  target="$(uname -m)-unknown-linux-gnu"
  want=${RUSTUP_SHA256[$target]:-}
  [[ -n $want ]] || fail "no pinned rustup-init for $target"
  url="https://static.rust-lang.org/rustup/archive/$RUSTUP_VERSION/$target/rustup-init"
  log "installing rustup $RUSTUP_VERSION from $url"
  curl -sSf --retry 3 -o "$WORK/rustup-init" "$url"
  got=$(sha256sum "$WORK/rustup-init" | cut -d' ' -f1)
  [[ $want == "$got" ]] || fail "rustup-init sha256 is $got, expected $want: not run"
  chmod +x "$WORK/rustup-init"
  "$WORK/rustup-init" -y --no-modify-path --profile minimal --default-toolchain none
fi

# The toolchain file's toolchain and components (a no-op when present).
rustup toolchain install --no-self-update --profile minimal --component rustfmt,clippy "$channel"
# The inspection agent is static (musl): the binary bootd serves to any
# live system (tests/controller/install-e2e.sh builds it).
[[ $(uname -m) != x86_64 ]] || rustup target add --toolchain "$channel" x86_64-unknown-linux-musl
log "$(rustc --version), $(cargo --version), $(cargo fmt --version), $(cargo clippy --version)"
