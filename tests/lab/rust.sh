#!/usr/bin/env bash
# The Rust toolchain the tests build with: the one rust-toolchain.toml pins,
# with rustfmt and clippy. On a machine without cargo (a fresh Debian 12: its
# own rustc 1.63 is too old for the workspace) it first installs rustup for
# this user from static.rust-lang.org, checked against the published sha256.
# Idempotent. The caller puts ~/.cargo/bin on PATH (tests/run.sh does).
# Usage: tests/lab/rust.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$HOME/.cargo/bin:$PATH"

if ! command -v rustup >/dev/null; then
  if command -v cargo >/dev/null; then
    # A toolchain without rustup (a distribution's or an image's): used as it is.
    echo "rust.sh: $(cargo --version) without rustup; rust-toolchain.toml not applied"
    exit 0
  fi
  url="https://static.rust-lang.org/rustup/dist/$(uname -m)-unknown-linux-gnu/rustup-init"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "rust.sh: installing rustup from $url"
  curl -sSf --retry 3 -o "$tmp/rustup-init" "$url"
  want=$(curl -sSf --retry 3 "$url.sha256" | cut -d' ' -f1)
  got=$(sha256sum "$tmp/rustup-init" | cut -d' ' -f1)
  if [[ -z $want || $want != "$got" ]]; then
    echo "rust.sh: rustup-init sha256 $got, published ${want:-nothing}: not run" >&2
    exit 1
  fi
  chmod +x "$tmp/rustup-init"
  "$tmp/rustup-init" -y --no-modify-path --profile minimal --default-toolchain none
fi

# The toolchain file's toolchain and components (a no-op when present).
rustup toolchain install --no-self-update
echo "rust.sh: $(rustc --version), $(cargo --version), $(cargo fmt --version), $(cargo clippy --version)"
