#!/usr/bin/env bash
# A busybox with udhcpc6 (busybox's DHCPv6 client) for the DHCPv6 interop
# tests: Debian 12 builds its busybox packages without it.
#
# Usage: tests/lab/udhcpc6.sh [OUT]        (default REPO/target/udhcpc6; root)
#
# OUT/busybox
#     built from Debian's own busybox source package, the version of the
#     installed busybox (busybox-static 1:1.35.0-4+deb12u1+b1 -> source
#     1:1.35.0-4+deb12u1), or the archive's candidate when that is gone.
#     The source is fetched with `apt-get source` through a private apt state
#     (OUT/apt: its own sources list with deb-src lines for the system's
#     mirror, its own lists and cache); /etc/apt and the system's lists are
#     not touched. apt checks the .dsc and tarballs against the Sources index,
#     whose InRelease it verifies with debian-archive-keyring; dpkg-source -x
#     checks the tarballs against the .dsc's checksums (and the uploader's
#     signature when debian-keyring is installed; without it dpkg-source only
#     warns that it cannot verify the signature) and applies Debian's patches.
#     Configured from `make allnoconfig`, then the options below and `make
#     oldconfig`: udhcpc6 with RFC 3646 (dns, search), 4704 (fqdn), 4833 (tz),
#     5970 (bootfile_url, bootfile_param) where this version has them, usage
#     text, long options, `true` (see below), linked statically against glibc;
#     `make -j2 busybox`; only the binary is kept (OUT/src keeps the .dsc,
#     tarballs and logs; OUT/busybox.config is the .config it was built with).
#
# Idempotent: does nothing when OUT/busybox exists and `OUT/busybox udhcpc6
# --help` works (0.03 s). Fresh: ~3 s download (10 MB of Sources indexes, 2.5 MB
# of source), 16-40 s build on 2 cores (~15 s of CPU); 1.1 MB static binary.
#
# Needs (tests/lab/deps.sh): build-essential (gcc, make, libc6-dev: the static
# libc.a), dpkg-dev (dpkg-source), bzip2 and xz-utils (the .orig.tar.bz2 and
# .debian.tar.xz), gpgv, debian-archive-keyring. Missing ones are installed
# here with apt-get -y.
set -euo pipefail

HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
# shellcheck source=tests/lib/harness.sh
. "$HERE/../lib/harness.sh"
OUT=${1:-$REPO/target/udhcpc6}
# The Debian mirror (the system's, /etc/apt/sources.list.d/debian.sources).
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

works() { [[ -x $OUT/busybox ]] && "$OUT/busybox" udhcpc6 --help >/dev/null 2>&1; }
if works; then
  log "$OUT/busybox has udhcpc6; nothing to do"
  exit 0
fi

[[ $(id -u) -eq 0 ]] || { echo "udhcpc6.sh: must run as root (apt-get)" >&2; exit 1; }
# OUT is the run's directory (kept: the binary, the source, the logs).
harness_init udhcpc6 --work "$OUT"
# shellcheck disable=SC1091
. /etc/os-release
CODENAME=${VERSION_CODENAME:-bookworm}

# --- build dependencies -------------------------------------------------------
PKGS=(build-essential libc6-dev dpkg-dev bzip2 xz-utils gpgv debian-archive-keyring)
missing=()
for p in "${PKGS[@]}"; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ $st == "install ok installed" ]] || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  log "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 \
    || { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; }
fi

OUT=$(readlink -f "$OUT")

# --- the source package, through a private apt state ---------------------------
APT=$OUT/apt
SRC=$OUT/src
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$APT/sources.list.d" "$SRC"
cat >"$APT/sources.list" <<EOF
deb-src [signed-by=$KEYRING] $MIRROR $CODENAME main
deb-src [signed-by=$KEYRING] $MIRROR $CODENAME-updates main
deb-src [signed-by=$KEYRING] $SECURITY_MIRROR $CODENAME-security main
EOF
APT_OPTS=(-q -o "Dir::Etc::SourceList=$APT/sources.list" -o "Dir::Etc::SourceParts=$APT/sources.list.d"
  -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT/cache"
  -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=
  -o Acquire::Languages=none -o APT::Get::Only-Source=true)

# The installed busybox's source version, so the two match.
WANT=""
for p in busybox-static busybox; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  if [[ $st == "install ok installed" ]]; then
    WANT=$(dpkg-query -W -f='${source:Version}' "$p"); break
  fi
done

dsc() { local fs=("$SRC"/busybox_*.dsc); [[ -e ${fs[0]} ]] && printf '%s\n' "${fs[@]}" | sort -V | tail -n 1; }
DSC=""
if [[ -n $WANT ]]; then
  f=$SRC/busybox_${WANT#*:}.dsc
  [[ -f $f ]] && DSC=$f
fi
if [[ -z $DSC ]]; then
  log "apt-get update (deb-src, private state in $APT)"
  apt-get "${APT_OPTS[@]}" update >"$APT/update.log" 2>&1 \
    || log "apt-get update reported errors (see $APT/update.log); trying anyway"
  # apt-get source downloads into the cwd (as _apt when it can, else as root
  # with a notice, filtered out here), checks sizes and hashes against the
  # signed Sources index; --download-only: dpkg-source runs below.
  fetch() {
    (cd "$SRC" && apt-get "${APT_OPTS[@]}" --download-only source "$1" 2>&1) \
      | { grep -v -e "couldn't be accessed by user '_apt'" -e '^Reading package lists' >&2 || true; }
  }
  if [[ -n $WANT ]] && fetch "busybox=$WANT"; then
    DSC=$SRC/busybox_${WANT#*:}.dsc
  else
    [[ -n $WANT ]] && log "busybox $WANT is not in the archive any more; taking the candidate"
    fetch busybox || fail "apt-get source busybox failed (see $APT/update.log)"
    DSC=$(dsc)
  fi
  [[ -f $DSC ]] || fail "no busybox .dsc in $SRC"
fi
VER=$(sed -n 's/^Version: //p' "$DSC")
log "source: ${DSC##*/} (busybox $VER)"

# --- unpack (always fresh) -------------------------------------------------------
TREE=$SRC/busybox-tree
rm -rf "$TREE"
DS_OPTS=(--no-copy)
# With the Debian developers' keyring the uploader's signature must be valid.
[[ -f /usr/share/keyrings/debian-keyring.gpg ]] && DS_OPTS+=(--require-valid-signature)
dpkg-source "${DS_OPTS[@]}" -x "$DSC" "$TREE" >"$SRC/dpkg-source.log" 2>&1 \
  || { cat "$SRC/dpkg-source.log" >&2; fail "dpkg-source -x $DSC failed"; }
if grep -q 'cannot verify' "$SRC/dpkg-source.log"; then
  log "dpkg-source: uploader's signature not checked (no debian-keyring); the .dsc and tarballs were checked by apt against the archive-signed Sources index when downloaded, the tarballs by dpkg-source against the .dsc"
fi

# --- configure: allnoconfig + what udhcpc6 needs ---------------------------------
FRAG=$SRC/udhcpc6.fragment
# allnoconfig leaves strings empty and ints 0: those get upstream's defaults
# (UDHCP_DEBUG 2: up to -vv). The "sh" choice would default to ash (78 kb):
# none. `true` is there to make two applets: with udhcpc6 alone busybox builds
# a single-applet binary that ignores its argv[0] and argv[1], and `busybox
# udhcpc6 ...` would not work. FEATURE_UDHCP_RFC3397 is udhcpc's (IPv4);
# udhcpc6's "search" comes with RFC3646.
cat >"$FRAG" <<'EOF'
CONFIG_BUSYBOX=y
CONFIG_SHOW_USAGE=y
CONFIG_FEATURE_VERBOSE_USAGE=y
CONFIG_LONG_OPTS=y
CONFIG_STATIC=y
CONFIG_FEATURE_IPV6=y
CONFIG_UDHCPC6=y
CONFIG_FEATURE_UDHCPC6_RFC3646=y
CONFIG_FEATURE_UDHCPC6_RFC4704=y
CONFIG_FEATURE_UDHCPC6_RFC4833=y
CONFIG_FEATURE_UDHCPC6_RFC5970=y
CONFIG_UDHCPC_DEFAULT_SCRIPT="/usr/share/udhcpc/default.script"
CONFIG_UDHCPC_DEFAULT_INTERFACE="eth0"
CONFIG_UDHCP_DEBUG=2
CONFIG_SH_IS_NONE=y
# CONFIG_SH_IS_ASH is not set
# CONFIG_SHELL_ASH is not set
CONFIG_TRUE=y
EOF
BUILD_LOG=$SRC/build.log
start=$(date +%s)
(
  cd "$TREE"
  make allnoconfig
  # The fragment's options on (busybox's old kconfig ignores KCONFIG_ALLCONFIG
  # for allnoconfig); oldconfig then asks only for the options they make
  # visible, which take their defaults.
  while IFS= read -r line; do
    opt=$(sed -E -e 's/^# (CONFIG_[A-Za-z0-9_]+) is not set$/\1/' -e 's/=.*//' <<<"$line")
    sed -i -e "/^$opt=/d" -e "/^# $opt is not set\$/d" .config
    echo "$line" >>.config
  done <"$FRAG"
  yes "" | make oldconfig
  # Every option of the fragment this version knows must have kept its value.
  while IFS= read -r line; do
    opt=$(sed -E -e 's/^# (CONFIG_[A-Za-z0-9_]+) is not set$/\1/' -e 's/=.*//' <<<"$line")
    if grep -rqsE "^(//config:)?[[:space:]]*config ${opt#CONFIG_}\$" --include='Config.*' --include='*.c' . ; then
      grep -qxF "$line" .config || { echo "udhcpc6.sh: $line did not stick (.config: $(grep "${opt}[= ]" .config))" >&2; exit 1; }
    else
      echo "udhcpc6.sh: $opt does not exist in busybox $VER (skipped)" >&2
    fi
  done <"$FRAG"
  make -j2 busybox
) >"$BUILD_LOG" 2>&1 || { tail -n 40 "$BUILD_LOG" >&2; fail "build failed (log: $BUILD_LOG)"; }
grep '^udhcpc6.sh:' "$BUILD_LOG" >&2 || true

install -m 0755 "$TREE/busybox" "$OUT/busybox.tmp.$$"
mv -f "$OUT/busybox.tmp.$$" "$OUT/busybox"
cp "$TREE/.config" "$OUT/busybox.config"
rm -rf "$TREE"
works || fail "$OUT/busybox udhcpc6 --help does not work"
log "built $OUT/busybox (busybox $VER, udhcpc6; $(( $(date +%s) - start )) s to build)"
