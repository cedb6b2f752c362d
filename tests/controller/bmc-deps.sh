#!/usr/bin/env bash
# What tests/controller/bmc-e2e.sh needs beyond the Debian packages
# (tests/lab/deps.sh): the BMC emulators from PyPI, sushy-tools (Redfish) and
# virtualbmc (IPMI), in a venv at $BMC_VENV
# (default /opt/bmc-venv). The venv is made with Debian's /usr/bin/python3 and
# --system-site-packages so that `import libvirt` is python3-libvirt's (a pip
# build of libvirt-python fails without libvirt-dev).
# Idempotent: returns without calling apt or pip when everything is there.
# Usage: tests/controller/bmc-deps.sh        (root when something is missing)
set -euo pipefail
# shellcheck source=tests/lib/harness.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/harness.sh"   # sets REPO
harness_init bmc-deps.sh
BMC_VENV=${BMC_VENV:-/opt/bmc-venv}

# The Debian side (libvirt, python3-libvirt, ipmitool, python3-venv) is in
# tests/lab/deps.sh, with every other package the tests need.
bash "$REPO/tests/lab/deps.sh"

venv_ok() {
  [[ -x $BMC_VENV/bin/sushy-emulator && -x $BMC_VENV/bin/vbmc && -x $BMC_VENV/bin/vbmcd ]] &&
    "$BMC_VENV/bin/python3" -c 'import libvirt, bcrypt, sushy_tools, virtualbmc' 2>/dev/null
}
if venv_ok; then
  log "packages and $BMC_VENV (sushy-tools, virtualbmc) already there"
  exit 0
fi
[[ -x $BMC_VENV/bin/python3 ]] || /usr/bin/python3 -m venv --system-site-packages "$BMC_VENV"
# Pinned: the versions whose behaviour bmc-e2e.sh records (a persistent "Once").
"$BMC_VENV/bin/pip" install -q sushy-tools==2.2.0 virtualbmc==3.3.0 bcrypt==5.0.0
venv_ok || fail "$BMC_VENV still lacks sushy-tools/virtualbmc/libvirt/bcrypt"
log "sushy-tools and virtualbmc installed in $BMC_VENV"
