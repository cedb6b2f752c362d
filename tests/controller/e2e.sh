#!/usr/bin/env bash
# The controller API's tests, Prism ones included: installs Prism (deps.sh),
# then runs bootd's `controller` test binary with --include-ignored:
#   - in-process: auth, Equinix and Power VS lifecycles against the stateful
#     fake, faults (429 + Retry-After, 500, 503, timeout, truncated JSON),
#     100 parallel creates, kill -9 of a real bootd between intent and reply,
#     canary keys absent from logs, metrics, argv and environment;
#   - the seed platforms' loop (platforms.rs): six nodes per platform from
#     API calls to Ready with provider-assigned addresses, dig against dnsd,
#     lbd's pools, bootstrap teardown; kill -9 in the middle of teardown;
#   - Prism (from ../shared/specs, on 127.0.0.1 only): mock mode validates
#     every request the clients send; proxy mode (--errors) in front of the
#     fake validates requests and replies through both lifecycles and both
#     platforms' whole loops.
# Exits non-zero on any failure. Needs ../shared/specs beside the repo
# (SPECS_DIR overrides).
# Prints "PASS controller-e2e" or "FAIL controller-e2e: ..." (the harness's
# verdict; the test binary's own output above it).
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.."
. tests/lib/harness.sh   # $REPO
harness_init controller-e2e
bash tests/controller/deps.sh || fail "tests/controller/deps.sh (Node.js, Prism) failed"
export PRISM=${PRISM:-$REPO/target/prism/node_modules/.bin/prism}
export SPECS_DIR=${SPECS_DIR:-$REPO/../shared/specs}
# Two tests at a time: a Prism test starts up to three Prism processes, and
# the machine has two cores. (The tests start and stop their servers
# themselves, on 127.0.0.1.)
cargo test -p appliance --test controller -- --include-ignored --test-threads 2 \
  || fail "cargo test -p appliance --test controller (--include-ignored) failed"
harness_verdict
