#!/usr/bin/env bash
# Lays out the appliance on a bastion: binaries, hardened systemd units and
# an example site. Idempotent; never overwrites an existing site or tokens.
#   sudo systemd/install.sh                 # from a built tree (cargo build --release)
#   DESTDIR=/tmp/root systemd/install.sh    # staged install (packaging, tests)
# Then: edit /etc/bare-metal-boot/site.yaml, `bootd --check-config` it, and
#   systemctl enable --now bootd dnsd lbd
set -euo pipefail
cd "$(dirname "$0")/.."
DESTDIR=${DESTDIR:-}
BINDIR=${BINDIR:-/usr/local/bin}
UNITDIR=${UNITDIR:-/etc/systemd/system}
CONFDIR=${CONFDIR:-/etc/bare-metal-boot}
SRC=${SRC:-target/release}

for b in bootd dnsd lbd images; do
    [ -x "$SRC/$b" ] || { echo "install.sh: $SRC/$b not built (cargo build --release --workspace)" >&2; exit 1; }
done
install -d -m 0755 "$DESTDIR$BINDIR" "$DESTDIR$UNITDIR"
install -d -m 0750 "$DESTDIR$CONFDIR"
for b in bootd dnsd lbd images; do install -m 0755 "$SRC/$b" "$DESTDIR$BINDIR/$b"; done
for u in systemd/*.service; do
    sed "s#/usr/local/bin/#$BINDIR/#; s#/etc/bare-metal-boot/#$CONFDIR/#g" "$u" >"$DESTDIR$UNITDIR/$(basename "$u")"
    chmod 0644 "$DESTDIR$UNITDIR/$(basename "$u")"
done
if [ ! -e "$DESTDIR$CONFDIR/site.yaml" ]; then
    install -m 0640 examples/openshift/site.yaml "$DESTDIR$CONFDIR/site.yaml"
    install -d -m 0750 "$DESTDIR$CONFDIR/ignition"
    cp -n examples/openshift/ignition/*.ign "$DESTDIR$CONFDIR/ignition/" 2>/dev/null || true
    echo "installed an example site: $DESTDIR$CONFDIR/site.yaml (edit it)"
fi
if [ ! -e "$DESTDIR$CONFDIR/api-tokens" ]; then
    (umask 077; head -c 32 /dev/urandom | base64 | tr -d '=+/' >"$DESTDIR$CONFDIR/api-tokens")
    echo "generated an API token: $DESTDIR$CONFDIR/api-tokens (bootd reads it as a systemd credential)"
fi
[ -z "$DESTDIR" ] && command -v systemctl >/dev/null && systemctl daemon-reload || true
echo "installed: $DESTDIR$BINDIR/{bootd,dnsd,lbd,images}, units in $DESTDIR$UNITDIR"
