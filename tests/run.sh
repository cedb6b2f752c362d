#!/usr/bin/env bash
# The test command (README): installs what the tests need on a fresh Debian 12
# machine (apt packages included), then runs every test:
#   1. formatting check;
#   2. cargo test --workspace: unit, golden (checked by ignition-validate) and
#      integration tests (the real servers on loopback, talked to by hyper and curl);
#   3. DHCP interop: udhcpc, dhclient and perfdhcp (relay) against bootd's DHCP;
#   4. end to end: real firmware network-boots the lab site's nodes from bootd
#      inside a private network namespace: SeaBIOS + iPXE ROM, OVMF + iPXE ROM and
#      OVMF's own PXE (-> ipxe.efi over TFTP) boot a Linux guest that proves the
#      Ignition bytes it fetched equal what bootd rendered; SLOF (ppc64) loads
#      GRUB (core.elf) over TFTP, which loads the node's grub.cfg from bootd.
# Needs root (apt, network namespaces). Prints "N passed, N failed" at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

log "dependencies"
bash tests/lab/deps.sh

log "format"
cargo fmt --all -- --check

log "clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

log "cargo test --workspace"
cargo test --workspace --locked

log "end-to-end network boot"
cargo build --release --locked -p bootd
bash tests/lab/guest.sh target/lab-images
bash tests/lab/tftp-root.sh target/lab-tftp
passed=0 failed=0
e2e() {
  # bootd serves DHCP itself (--no-dhcp: no stand-in; dnsmasq only sends IPv6 RAs).
  if bash tests/lab/netboot.sh --bootd target/release/bootd --site examples/lab/site.yaml --no-dhcp "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
}
if bash tests/lab/dhcp-interop.sh target/release/bootd; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
e2e --node bootstrap --mac 52:54:00:77:00:10 --ip 10.77.0.10 --firmware seabios-ipxe
e2e --node master-0 --mac 52:54:00:77:00:11 --ip 10.77.0.11 --firmware ovmf-ipxe
e2e --node worker-0 --mac 52:54:00:77:00:20 --ip 10.77.0.20 --firmware ovmf-pxe
e2e --node p9-0 --mac 52:54:00:77:00:30 --ip 10.77.0.30 --firmware slof-grub

log "summary"
echo "end-to-end: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
