#!/usr/bin/env bash
# The image catalog end to end with the lab boot: a node network-boots from a
# `catalog:` image set that `images fetch` put into the cache.
#
# Usage: tests/lab/catalog-netboot.sh --bin DIR [--firmware F] [--workdir DIR]
#   DIR holds release binaries: images, bootd
#
# 1. A stream metadata document (RHCOS/FCOS shape) is generated for stream
#    "lab", release 1.0.0-lab, x86_64/metal/pxe: kernel and initramfs are the lab
#    guest's (tests/lab/guest.sh), rootfs is 1 MiB of random bytes (the guest
#    never mounts it; iPXE does not fetch it either, but bootd must serve it).
#    The artifacts are served by a small HTTP server on 127.0.0.1.
# 2. A copy of examples/lab/site.yaml whose lab-x86_64 set is
#    `catalog: {stream: lab, streamUrl: stream.json}` (version latest) and whose
#    images.root is an empty cache (the ppc64le set and node p9-0 are left out).
# 3. `bootd --check-config` on it must fail and name the fetch command;
#    `images fetch --site` fills the cache; the HTTP server is stopped and a
#    second fetch must still succeed (no network I/O); `images verify` passes.
# 4. tests/lab/netboot.sh boots node worker-1 with bootd serving DHCP, and (its
#    --check) while bootd still runs: the node's iPXE script names the cached
#    files (/images/lab/1.0.0-lab/x86_64/metal/...), and what bootd serves
#    there has the sha256 the manifest and the stream document name, byte for
#    byte the files the stream pointed at.
# Prints "PASS catalog-netboot ..." (exit 0) or "FAIL catalog-netboot: <reason>".
set -euo pipefail

HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
# shellcheck source=tests/lib/harness.sh
. "$HERE/../lib/harness.sh"

# --served-check CACHE_SET_DIR SRC_DIR BOOTD SITE: netboot.sh's --check (in the
# namespace). The node's script goes only to the node's address (docs/bootd.md),
# which the running VM holds: the check renders it with `bootd render`, the
# same renderer on the same site, and fetches the files it names over HTTP.
if [[ ${1:-} == --served-check ]]; then
  set_dir=$2 src=$3 bootd=$4 site=$5
  keys=$(mktemp -d)
  script=$("$bootd" --site "$site" --state-dir "$keys" render ipxe "$NODE")
  rm -rf "$keys"
  echo "iPXE script for $NODE:"; sed 's/^/  /' <<<"$script"
  want_prefix="$HTTP_BASE/images/lab/1.0.0-lab/x86_64/metal/"
  url_of() { awk -v cmd="$1" '$1 == cmd { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; exit } }' <<<"$script"; }
  kernel=$(url_of kernel)
  initrd=$(url_of initrd)
  rootfs=$(grep -o 'coreos.live.rootfs_url=[^ ]*' <<<"$script" | head -n 1 | cut -d= -f2-)
  for u in "$kernel" "$initrd" "$rootfs"; do
    [[ $u == "$want_prefix"* ]] || { echo "not a catalog URL: '$u' (want $want_prefix...)"; exit 1; }
  done
  for role in kernel initramfs rootfs; do
    case $role in kernel) u=$kernel ;; initramfs) u=$initrd ;; rootfs) u=$rootfs ;; esac
    name=${u##*/}
    want=$(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print(next(f["sha256"] for f in m["files"] if f["role"]==sys.argv[2] and f["name"]==sys.argv[3]))' \
      "$set_dir/manifest.json" "$role" "$name")
    got=$(curl -fsS --max-time 10 "$u" | sha256sum | cut -d' ' -f1)
    src_sha=$(sha256sum "$src/$name" | cut -d' ' -f1)
    echo "$role $name served sha256=$got manifest=$want stream-source=$src_sha"
    [[ $got == "$want" && $got == "$src_sha" ]] || { echo "$role: served bytes differ"; exit 1; }
  done
  exit 0
fi

BIN="" FIRMWARE=seabios-ipxe WORKDIR=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --bin) BIN=$2; shift 2 ;;
    --firmware) FIRMWARE=$2; shift 2 ;;
    --workdir) WORKDIR=$2; shift 2 ;;
    *) echo "usage: $0 --bin DIR [--firmware F] [--workdir DIR]" >&2; exit 2 ;;
  esac
done
[[ -n $BIN ]] || { echo "usage: $0 --bin DIR [--firmware F] [--workdir DIR]" >&2; exit 2; }
BIN=$(readlink -f "$BIN")
for b in images bootd; do [[ -x $BIN/$b ]] || { echo "catalog-netboot.sh: no $BIN/$b" >&2; exit 2; }; done
WORKDIR=${WORKDIR:-$REPO/target/lab-runs/catalog-$$}
rm -rf "$WORKDIR"; mkdir -p "$WORKDIR"
WORKDIR=$(readlink -f "$WORKDIR")
# $WORK is WORKDIR from here on (kept after the run).
harness_init catalog-netboot --work "$WORKDIR"

# --- 1. artifacts + stream document, served on 127.0.0.1 ------------------------
"$HERE/guest.sh" "$REPO/target/lab-images" >&2 || fail "guest.sh failed"
SRC=$WORK/mirror
mkdir -p "$SRC"
cp "$REPO/target/lab-images/lab/kernel" "$SRC/lab-1.0.0-lab-live-kernel-x86_64"
cp "$REPO/target/lab-images/lab/initramfs" "$SRC/lab-1.0.0-lab-live-initramfs.x86_64.img"
head -c 1048576 /dev/urandom >"$SRC/lab-1.0.0-lab-live-rootfs.x86_64.img"

# The mirror: a static HTTP server on a free port, which it writes to $WORK/port.
cat >"$WORK/mirror.py" <<'PY'
import functools, http.server, os, sys
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
with open(sys.argv[2] + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
srv.serve_forever()
PY
spawn --log "$WORK/mirror.log" python3 "$WORK/mirror.py" "$SRC" "$WORK/port"
SERVER_PID=$SPAWNED
wait_for 5 test -s "$WORK/port" || fail "mirror HTTP server did not start: $(cat "$WORK/mirror.log")"
MIRROR=http://127.0.0.1:$(cat "$WORK/port")

python3 - "$SRC" "$MIRROR" >"$WORK/stream.json" <<'PY'
import hashlib, json, sys
src, base = sys.argv[1], sys.argv[2]
def art(name):
    h = hashlib.sha256(open(f"{src}/{name}", "rb").read()).hexdigest()
    return {"location": f"{base}/{name}", "signature": f"{base}/{name}.sig", "sha256": h}
print(json.dumps({
    "stream": "lab",
    "metadata": {"last-modified": "2026-11-22T00:00:00Z", "generator": "tests/lab/catalog-netboot.sh"},
    "architectures": {"x86_64": {"artifacts": {"metal": {
        "release": "1.0.0-lab",
        "formats": {"pxe": {
            "kernel": art("lab-1.0.0-lab-live-kernel-x86_64"),
            "initramfs": art("lab-1.0.0-lab-live-initramfs.x86_64.img"),
            "rootfs": art("lab-1.0.0-lab-live-rootfs.x86_64.img"),
        }},
    }}}},
}, indent=2))
PY

# --- 2. the site: the lab site with a catalog set and an empty cache --------------
# Only x86_64 here: the ppc64le set and its node (p9-0) go. The check reads
# the node's script after it booted: the lab guest live-boots (no disk), so
# an installed node keeps getting the installer (afterInstall: network).
# streamUrl is relative to the site's folder ($WORK).
CACHE=$WORK/cache
SITE=$WORK/site.yaml
lab_site "$SITE" images.root="$CACHE" host.stateDir="$WORK/state" \
  -images.sets.lab-x86_64.kernel -images.sets.lab-x86_64.initramfs \
  images.sets.lab-x86_64.catalog='{stream: lab, streamUrl: stream.json}' \
  -images.sets.lab-ppc64le -nodes.p9-0 ignition.afterInstall=network \
  || fail "cannot write the site"
mkdir -p "$CACHE"

# --- 3. refused before the fetch, then fetch, offline re-fetch, verify -------------
"$BIN/bootd" --check-config "$SITE" >"$WORK/check-config.log" 2>&1 || true
grep -q "fetch it with: images fetch --site $SITE --set lab-x86_64" "$WORK/check-config.log" \
  || fail "check-config before the fetch named no fetch command: $(tr '\n' ' ' <"$WORK/check-config.log")"
log "check-config before the fetch: $(grep -m1 'images fetch' "$WORK/check-config.log")"
# bootd binds its sockets first (br0 for DHCP, 10.77.0.1), so it is started in a
# namespace of its own with that bridge; it must exit non-zero naming the fetch.
lab_netns "catref-$$"
spawn --ns "catref-$$" --log "$WORK/refused.log" "$BIN/bootd" --site "$SITE" --state-dir "$WORK/state"
refused_pid=$SPAWNED
gone() { ! alive "$1"; }
wait_for 10 gone "$refused_pid" || fail "bootd started with an unfetched catalog set"
refused_rc=0; wait "$refused_pid" || refused_rc=$?
[[ $refused_rc != 0 ]] || fail "bootd exited 0 with an unfetched catalog set"
grep -q "images fetch --site $SITE --set lab-x86_64" "$WORK/refused.log" \
  || fail "bootd refused to start (rc $refused_rc) but did not name the fetch command: $(tail -n 3 "$WORK/refused.log" | tr '\n' ' ')"
log "bootd refused to start (rc $refused_rc): $(grep -m1 'lab-x86_64' "$WORK/refused.log")"

"$BIN/images" fetch --site "$SITE" >"$WORK/fetch.log" 2>&1 || fail "images fetch: $(tail -n 5 "$WORK/fetch.log" | tr '\n' ' ')"
gets=$(grep -c '"GET ' "$WORK/mirror.log" || true)
[[ $gets -ge 3 ]] || fail "the mirror saw $gets GETs, expected the 3 artifacts"
stop_pid "$SERVER_PID"
"$BIN/images" fetch --site "$SITE" >"$WORK/fetch2.log" 2>&1 \
  || fail "second fetch with the mirror stopped: $(tail -n 5 "$WORK/fetch2.log" | tr '\n' ' ')"
"$BIN/images" verify --site "$SITE" >"$WORK/verify.log" 2>&1 || fail "images verify: $(tail -n 5 "$WORK/verify.log" | tr '\n' ' ')"
SET_DIR=$CACHE/lab/1.0.0-lab/x86_64/metal
[[ -f $SET_DIR/manifest.json ]] || fail "no $SET_DIR/manifest.json after the fetch"
log "fetched ($gets GETs), re-fetched offline, verified: $(tr '\n' ' ' <"$WORK/verify.log")"

# --- 4. the boot ---------------------------------------------------------------------
bash "$HERE/netboot.sh" --bootd "$BIN/bootd" --site "$SITE" --no-dhcp --firmware "$FIRMWARE" \
  --node worker-1 --mac 52:54:00:77:00:21 --ip 10.77.0.21 --workdir "$WORK/boot" \
  --check "bash '$HERE/catalog-netboot.sh' --served-check '$SET_DIR' '$SRC' '$BIN/bootd' '$SITE'" >"$WORK/netboot.out" 2>"$WORK/netboot.err" \
  || { cat "$WORK/netboot.out"; tail -n 30 "$WORK/netboot.err"; fail "netboot from the catalog set"; }
# netboot.sh's --check lines: "netboot <firmware> <node>: check: ...".
grep 'check: .* served sha256=' "$WORK/netboot.err" | sed 's/^netboot [^:]*: check: /catalog-netboot: /' >&2
echo "PASS catalog-netboot $FIRMWARE worker-1 ($(tail -n 1 "$WORK/netboot.out"))"
