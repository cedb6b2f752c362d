#!/usr/bin/env bash
# Lays out the appliance on a bastion: binaries, hardened systemd units, the
# daemons' group and an example site. Idempotent; never overwrites an
# existing site or tokens.
#   sudo systemd/install.sh                 # from a built tree (cargo build --release)
#   DESTDIR=/tmp/root systemd/install.sh    # staged install into another root
#                                           # (packaging, tests/systemd/nspawn.sh)
# Then: edit /etc/bare-metal-boot/site.yaml, `bootd --check-config` it, and
#   systemctl enable --now bootd dnsd lbd
#
# The units run as dynamic users (DynamicUser=yes) in one static group,
# bare-metal-boot (a sysusers.d entry, made here with systemd-sysusers, also
# under DESTDIR): the configuration is root:bare-metal-boot, directories 0750
# and files 0640, so the three daemons read it and nobody else does; the API
# tokens (and any other systemd credential) stay root's 0600, systemd reads
# them for bootd. bootd's state is group-owned too, which is how dnsd and lbd
# read its node overlay (docs/operations.md).
set -euo pipefail
cd "$(dirname "$0")/.."
DESTDIR=${DESTDIR:-}
BINDIR=${BINDIR:-/usr/local/bin}
UNITDIR=${UNITDIR:-/etc/systemd/system}
CONFDIR=${CONFDIR:-/etc/bare-metal-boot}
SRC=${SRC:-target/release}
# The units name it (Group=, SupplementaryGroups=): not configurable here.
GROUP=bare-metal-boot
SYSUSERS=/etc/sysusers.d/bare-metal-boot.conf

for b in bootd dnsd lbd images; do
    [ -x "$SRC/$b" ] || { echo "install.sh: $SRC/$b not built (cargo build --release --workspace)" >&2; exit 1; }
done
install -d -m 0755 "$DESTDIR$BINDIR" "$DESTDIR$UNITDIR" "$DESTDIR$(dirname "$SYSUSERS")"
for b in bootd dnsd lbd images; do install -m 0755 "$SRC/$b" "$DESTDIR$BINDIR/$b"; done
for u in systemd/*.service; do
    sed "s#/usr/local/bin/#$BINDIR/#; s#/etc/bare-metal-boot/#$CONFDIR/#g" "$u" >"$DESTDIR$UNITDIR/$(basename "$u")"
    chmod 0644 "$DESTDIR$UNITDIR/$(basename "$u")"
done

# The group: declared in sysusers.d (so systemd-sysusers keeps it), made now.
printf '# The group of bootd, dnsd and lbd (systemd/install.sh): reads %s and bootd'"'"'s node overlay.\ng %s -\n' \
    "$CONFDIR" "$GROUP" >"$DESTDIR$SYSUSERS"
root=() prefix=()
[ -z "$DESTDIR" ] || { root=(--root "$DESTDIR"); prefix=(--prefix "$DESTDIR"); }
if command -v systemd-sysusers >/dev/null; then
    systemd-sysusers "${root[@]}" "$(basename "$SYSUSERS")"
elif ! grep -q "^$GROUP:" "$DESTDIR/etc/group" 2>/dev/null; then
    groupadd --system "${prefix[@]}" "$GROUP"
fi
gid=$(awk -F: -v g="$GROUP" '$1 == g { print $3 }' "$DESTDIR/etc/group" 2>/dev/null || true)
[ -n "$gid" ] || { echo "install.sh: group $GROUP not in $DESTDIR/etc/group" >&2; exit 1; }

install -d -m 0750 -g "$gid" "$DESTDIR$CONFDIR"
if [ ! -e "$DESTDIR$CONFDIR/site.yaml" ]; then
    install -m 0640 -g "$gid" examples/openshift/site.yaml "$DESTDIR$CONFDIR/site.yaml"
    # The example site reads its cluster name and domain from it.
    [ -e "$DESTDIR$CONFDIR/install-config.yaml" ] ||
        install -m 0640 -g "$gid" examples/openshift/install-config.yaml "$DESTDIR$CONFDIR/install-config.yaml"
    install -d -m 0750 -g "$gid" "$DESTDIR$CONFDIR/ignition"
    for f in examples/openshift/ignition/*.ign; do
        [ -e "$DESTDIR$CONFDIR/ignition/$(basename "$f")" ] ||
            install -m 0640 -g "$gid" "$f" "$DESTDIR$CONFDIR/ignition/$(basename "$f")"
    done
    echo "installed an example site: $DESTDIR$CONFDIR/site.yaml (edit it)"
fi
# An existing configuration (an earlier install left it root:root): the
# daemons' group reads the site and what this script put beside it; others
# get nothing. Files the site names elsewhere need the same (docs/operations.md).
for f in "$DESTDIR$CONFDIR/site.yaml" "$DESTDIR$CONFDIR/install-config.yaml" "$DESTDIR$CONFDIR/ignition"; do
    [ -e "$f" ] || continue
    chgrp -R "$gid" "$f"
    chmod -R g+rX,o-rwx "$f"
done
if [ ! -e "$DESTDIR$CONFDIR/api-tokens" ]; then
    (umask 077; head -c 32 /dev/urandom | base64 | tr -d '=+/' >"$DESTDIR$CONFDIR/api-tokens")
    echo "generated an API token: $DESTDIR$CONFDIR/api-tokens (bootd reads it as a systemd credential)"
fi
[ -z "$DESTDIR" ] && command -v systemctl >/dev/null && systemctl daemon-reload || true
echo "installed: $DESTDIR$BINDIR/{bootd,dnsd,lbd,images}, units in $DESTDIR$UNITDIR, group $GROUP ($gid), $DESTDIR$CONFDIR readable by it"
