#!/usr/bin/env bash
# Secrets never appear in what the appliance shows: one grep over every
# output of a full end-to-end run.
#
# Usage: tests/secrets/e2e.sh [--bootd BOOTD] [--run DIR]
#
# 1. tests/controller/bmc-e2e.sh runs with SECRETS_AUDIT_DIR (its hooks are
#    tests/secrets/audit.sh): bootd and its CLI at RUST_LOG=trace; Redfish,
#    IPMI and virtual-media nodes through the API to Ready and deleted,
#    discovery; plus a pull secret in the site's install-config and in every
#    role Ignition, a content marker per role Ignition, Equinix Metal and
#    Power VS accounts whose fake echoes every request in its refusals, an
#    Alibaba account (the ECS fake, signatures checked), bad requests (wrong
#    and missing bearer token, a truncated body, a BMC password as a value,
#    a wrong BMC password, forged Ignition tokens, a spent token replayed).
#    Kept in RUN/audit: everything the harness printed, every API answer
#    (lists, nodes, events, timelines, cluster, discovered, refusals),
#    bootd's /metrics, status page and timeline JSON (from bootd's listener
#    and through the API) at each step (booting, Ready, deleted, ...), and
#    the command line and environment of every process in the run's network
#    namespace, sampled every 20 ms. RUN/work is the harness's directory
#    (bootd's logs at trace, the CLI's output, bootd's state, the VMs'
#    consoles, the emulators' files).
# 2. tests/secrets/check.py proves it catches each secret (a planted file
#    per secret, --self-test), then greps RUN/work and RUN/audit, binary
#    files included, for: the BMC password, the API bearer token, the wrong
#    bearer token and the wrong BMC password sent, the pull secret, each
#    role Ignition's marker, the Equinix and Power VS keys, the IAM token,
#    the Alibaba AccessKey secret, and every Ignition token issued in the
#    run (read from the VMs' consoles, the ISOs, the providers' userdata)
#    with any token-shaped string. The exclusions (a secret's own file, the
#    parties meant to hold it) are below, each with its reason; check.py
#    prints how many hits each allowed.
# Prints "PASS secrets-e2e <secs>s" (exit 0) or "FAIL secrets-e2e ..." with
# every hit (file:line, the secret replaced by its name) (exit 1). Root only.
set -euo pipefail

HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
# shellcheck source=tests/lib/harness.sh
. "$HERE/../lib/harness.sh"   # $REPO
BOOTD="" RUN=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --bootd) BOOTD=$2; shift 2 ;;
    --run) RUN=$2; shift 2 ;;
    *) sed -n '5p' "$0" | sed 's/^# //' >&2; exit 2 ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "secrets/e2e.sh: must run as root" >&2; exit 2; }
RUN=${RUN:-$REPO/target/lab-runs/secrets-e2e-$$}
rm -rf "$RUN"
mkdir -p "$RUN/audit"
RUN=$(readlink -f "$RUN")
# The run's folder is kept: what was grepped, and the check's findings.
harness_init secrets-e2e --work "$RUN"
W=$RUN/work A=$RUN/audit
T0=$(date +%s)

# --- 1. the run -------------------------------------------------------------------------
log "bmc-e2e.sh with the audit hooks (output: $A/harness.log)"
rc=0
SECRETS_AUDIT_DIR=$A bash "$REPO/tests/controller/bmc-e2e.sh" ${BOOTD:+--bootd "$BOOTD"} --workdir "$W" \
  >"$A/harness.log" 2>&1 || rc=$?
tail -n 1 "$A/harness.log" >&2
HARNESS_OK=1
[[ $rc == 0 ]] || { HARNESS_OK=0; log "bmc-e2e.sh exited $rc; last lines:"; tail -n 40 "$A/harness.log" >&2; }
[[ -d $W/secrets ]] || fail "the run made no secrets (bmc-e2e.sh exit $rc)"

# --- 2. what to look for ---------------------------------------------------------------------
# Every Ignition token the run issued that a file shows: the consoles (the
# URL on the kernel command line), the ISOs (virtual media), the providers'
# userdata (the echoing fake's record, Alibaba's instances), the forged one.
python3 - "$W" "$RUN/targets.json" <<'EOF'
import base64, glob, json, os, re, sys
w, out = sys.argv[1:]
def read(p):
    return open(p).read().strip()
lit = {"bmc-password": read(f"{w}/bmc-password"), "api-token": read(f"{w}/api-tokens")}
for n in ("pull-secret", "ign-bootstrap", "ign-master", "ign-worker", "equinix-key", "powervs-key",
          "iam-token", "alibaba-key-secret", "wrong-token", "wrong-bmc-password"):
    lit[n] = read(f"{w}/secrets/{n}")
shape = rb"[0-9]{10}\.[sp]\.[A-Za-z0-9_-]{16}\.[A-Za-z0-9_-]{22}"
tokens = {}
def grab(where, data):
    for t in re.findall(shape, data):
        tokens.setdefault(t.decode(), where)
for p in glob.glob(f"{w}/*-serial.log") + glob.glob(f"{w}/state/media/*") + glob.glob(f"{w}/pool/*"):
    if os.path.isfile(p):
        grab(os.path.basename(p), open(p, "rb").read())
for line in open(f"{w}/echo-provider.jsonl", "rb") if os.path.exists(f"{w}/echo-provider.jsonl") else []:
    r = json.loads(line)
    grab("echo-provider", r["body"].encode())
    try:
        grab("echo-provider userData", base64.b64decode(json.loads(r["body"]).get("userData", "")))
    except (ValueError, AttributeError):
        pass
p = f"{w}/secrets/ecs-instances.json"
inst = json.load(open(p)) if os.path.exists(p) else []
for i in inst.get("instances", []) if isinstance(inst, dict) else inst:
    grab("alibaba UserData", base64.b64decode(i.get("UserData") or ""))
if os.path.exists(f"{w}/secrets/forged-token"):
    grab("forged", open(f"{w}/secrets/forged-token", "rb").read())
for t, where in sorted(tokens.items()):
    # The tag (the last part) is the secret; the expiry and nonce are not.
    lit[f"token-tag[{where}:{t.split('.')[1]}]"] = t.rsplit(".", 1)[1]
json.dump({"literal": lit, "regex": {"ignition-token": [shape.decode(), "1764000000.s.AAAAAAAAAAAAAAAA.BBBBBBBBBBBBBBBBBBBBBB"]}},
          open(out, "w"), indent=1)
print(f"{len(lit)} secrets, {len(tokens)} of them Ignition tokens "
      f"({sum(1 for t in tokens if '.p.' in t)} provider, {sum(1 for t in tokens if '.s.' in t)} script)")
EOF
TOKENS='"ignition-token", "token-tag*"'
cat >"$RUN/exclusions.json" <<EOF
[
 {"path": "secrets/*", "targets": ["*"], "line": null,
  "why": "the run's secret files (what bootd reads, what curl sends) and the fake's instances, kept with them"},
 {"path": "bmc-password", "targets": ["bmc-password"], "line": null, "why": "the BMC password's file (a {file} reference)"},
 {"path": "bmc-netrc", "targets": ["bmc-password"], "line": null, "why": "the test's curl credentials for the Redfish emulator"},
 {"path": "vbmc/*", "targets": ["bmc-password"], "line": null, "why": "virtualbmc's own BMC configuration (the IPMI emulator holds its password)"},
 {"path": "vbmcd.*", "targets": ["bmc-password"], "line": null, "why": "virtualbmc's own log (at debug it logs the vbmc add request, password included)"},
 {"path": "api-tokens", "targets": ["api-token"], "line": null, "why": "host.api.tokens's file"},
 {"path": "auth.hdr", "targets": ["api-token"], "line": null, "why": "the test's curl header file (curl -H @file)"},
 {"path": "ignition/*", "targets": ["pull-secret", "ign-bootstrap", "ign-master", "ign-worker"], "line": null,
  "why": "the role Ignition files: where the pull secret and the contents live"},
 {"path": "install-config.yaml", "targets": ["pull-secret"], "line": null, "why": "the install-config the site names: the pull secret's home"},
 {"path": "*-expected.ign", "targets": ["pull-secret", "ign-bootstrap", "ign-master", "ign-worker"], "line": null,
  "why": "bootd render ignition NODE: the offline tool prints a node's Ignition (the harness compares the guest's sha256 with it)"},
 {"path": "*-serial.log", "targets": [$TOKENS], "line": null,
  "why": "the VMs' consoles: the test guest prints the ignition.config.url of its kernel command line"},
 {"path": "harness.log", "targets": [$TOKENS], "line": "guest: LAB-IGNITION sha256=[0-9a-f]+ bytes=[0-9]+ url=",
  "why": "bmc-e2e.sh repeats the guest's console line (its ignition.config.url)"},
 {"path": "state/media/*", "targets": [$TOKENS], "line": null,
  "why": "bootd's cache of a node's virtual-media ISO: its GRUB config carries the node's Ignition URL (docs/bmc.md)"},
 {"path": "pool/*", "targets": [$TOKENS], "line": null, "why": "the same ISO as the Redfish emulator copied it into its libvirt pool"},
 {"path": "sushy-*", "targets": [$TOKENS], "line": null,
  "why": "the Redfish emulator's own log and state: the virtual media URL bootd gives the BMC (InsertMedia) carries a token"},
 {"path": "echo-provider.jsonl", "targets": ["equinix-key", "powervs-key", "iam-token", $TOKENS], "line": null,
  "why": "the fake provider's record of the requests it received: keys, the IAM token, userdata with a provider token"},
 {"path": "proc/environ.txt", "targets": ["bmc-password"], "line": "^[0-9]+ (ipmitool|ip) IPMI_PASSWORD=<bmc-password>$",
  "why": "ipmitool takes the password from its environment (-E, IPMI_PASSWORD), never argv (docs/bmc.md); the test's own ipmitool too (through ip netns exec)"}
]
EOF

# --- 3. the check proves it catches each secret, then greps the run ---------------------------
rm -rf "$RUN/selftest"
python3 "$HERE/check.py" --targets "$RUN/targets.json" --self-test "$RUN/selftest" >&2 \
  || fail "check.py --self-test: a planted secret was not caught"
rm -rf "$RUN/selftest"
out=$(python3 "$HERE/check.py" --targets "$RUN/targets.json" --exclusions "$RUN/exclusions.json" "$W" "$A") && crc=0 || crc=$?
printf '%s\n' "$out" | tee "$RUN/check.txt" >&2
secs=$(( $(date +%s) - T0 ))
if [[ $crc != 0 ]]; then
  fail "$(grep -c '^LEAK' <<<"$out" || true) leak(s) (above; $RUN/check.txt), bmc-e2e.sh $([[ $HARNESS_OK == 1 ]] && echo passed || echo "failed: $(tail -n 1 "$A/harness.log")")"
fi
[[ $HARNESS_OK == 1 ]] || fail "no leak, but bmc-e2e.sh failed: $(tail -n 1 "$A/harness.log")"
# What the audit must have seen, or the grep proves little.
n_snap=$(find "$A/snap" -mindepth 1 -maxdepth 1 | wc -l)
[[ $n_snap -ge 10 ]] || fail "only $n_snap snapshots"
grep -q "TRACE" "$W/bootd-1.log" || fail "bootd did not log at trace"
# bootd's own ipmitool (bmc-e2e.sh never sets a boot device in this mode).
if ! grep -q " ipmitool: .*chassis bootdev pxe" "$A/proc/cmdline.txt" || ! grep -q "^[0-9]* ipmitool IPMI_PASSWORD=" "$A/proc/environ.txt"; then
  fail "the sampler never saw bootd's ipmitool and its environment"
fi
echo "PASS secrets-e2e ${secs}s ($n_snap snapshots, $(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["literal"]))' "$RUN/targets.json") secrets)"
