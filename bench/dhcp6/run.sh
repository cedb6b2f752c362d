#!/usr/bin/env bash
# The DHCPv6 benchmark, bootd vs Kea: bench/dhcp/run.sh --family 6 (its header and bench/dhcp6/README.md say what it measures; same knobs).
exec "$(dirname "$0")/../dhcp/run.sh" --family 6 "$@"
