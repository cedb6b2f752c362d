#!/usr/bin/env bash
# Build the lab guest: Debian's amd64 kernel + a tiny busybox initramfs whose
# /init does DHCP (or takes the static addresses of ip= arguments, IPv4 or
# IPv6), fetches ignition.config.url= from the kernel command line and
# prints a marker line on ttyS0, then runs the real Ignition client against
# the same URL and prints what it wrote, then powers off.
# The client runs as the platform the kernel command line names
# (ignition.platform.id=, default metal): on a cloud platform there is no
# ignition.config.url and the client fetches from the platform's own place
# (aliyun: http://100.100.100.200/latest/user-data; packet:
# https://metadata.packet.net/userdata; powervs: the config drive labelled
# config-2, which /init links under /dev/disk/by-label as udev would).
# Its resolvers (/etc/resolv.conf, read by the client's Go resolver) are
# the nameserver= arguments of the kernel command line, then DHCP's option 6.
#
# Usage: tests/lab/guest.sh [OUTDIR]       (default /work/main/target/lab-images)
# Output: OUTDIR/lab/kernel, OUTDIR/lab/initramfs (gzip'd cpio newc)
# Markers on /dev/ttyS0:
#   LAB-IGNITION sha256=<hex> bytes=<n> url=<url>   (what ignition.config.url returns to wget)
#   LAB-IGNITION-FAILED <reason>
# then, from the real Ignition client (Debian's ignition, fetch and files stages):
#   LAB-IGNITION-CLIENT fetch=<exit code> files=<exit code|skipped> platform=<id>
#   LAB-FILE <path> sha256=<hex>                     (each file it wrote, when both passed)
#   LAB-IGNITION-CLIENT-LOG <line>                   (the failing stage's last log lines)
# then, for each unit Ignition enabled (its ExecStart= run as systemd would start it,
# after udev coldplugged the devices as the live system's would have):
#   LAB-UNIT-START <name>   and   LAB-UNIT <name> rc=<exit code|no-unit-file>
# With coreos.inst.install_dev= on the kernel line (the live system installs;
# no units run, and without ignition.config.url no Ignition): systemd-udevd,
# the real coreos-installer-service script and coreos-installer 0.27.0, then
#   LAB-INSTALL rc=<exit code> dev=<install_dev>
# and reboot -f (poweroff when it failed or with coreos.inst.skip_reboot).
# Only when the kernel command line has bond= or vlan= (a node's networkConfig
# with a bond or VLAN): NetworkManager brings the network up instead of
# udhcpc/ip= parsing, as in RHCOS's initramfs (udevd with dracut's rules for
# ifname=NAME:MAC, nm-initrd-generator on the command line, then
# NetworkManager --configure-and-quit=initrd), with these markers before
# LAB-IGNITION:
#   LAB-NET-NM generator=<exit code> nm=<exit code|timeout>
#   LAB-NET <ifname> <state> <address/prefix...>     (every interface but lo, from ip -br addr)
#   LAB-NET-BOND <bond> slaves=<a,b> mode=<mode> miimon=<ms> active=<ifname> perm=<the slaves' own MACs>
#   LAB-NET-VLAN <ifname> id=<vid> parent=<ifname>
#   LAB-NET-ROUTE <ip -4 route line>
#   LAB-NET-DNS <NetworkManager's resolv.conf, one line>
# and after the files stage, each keyfile it wrote, then the network again
# from those keyfiles alone, as the installed system's NetworkManager
# would bring it up (bonds and VLANs deleted first):
#   LAB-NET-KEYFILE <path> sha256=<hex> type=<type> [master= mac= mode= miimon= vlan= parent= ipv4= address1=]
#   LAB-SYSNET-NM nm=<exit code|timeout>, then LAB-SYSNET, LAB-SYSNET-BOND,
#   LAB-SYSNET-VLAN, LAB-SYSNET-ROUTE, LAB-SYSNET-DNS as above
# lab.hold=SECONDS: /init prints LAB-HOLD <seconds> and sleeps that long
# before it powers off (a test reaching the guest over the network).
# Needs (tests/lab/deps.sh): busybox-static cpio gzip kmod ignition udev util-linux, apt lists for apt-get download;
# coreos-installer from tests/lab/coreos-installer.sh (built on first use, ~11 min).
set -euo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
# shellcheck source=tests/lib/harness.sh
. "$(dirname "$SELF")/../lib/harness.sh"   # sets REPO
OUTDIR=${1:-$REPO/target/lab-images}
LAB=$OUTDIR/lab
CACHE=$OUTDIR/cache
KERNEL=$LAB/kernel
INITRD=$LAB/initramfs

mkdir -p "$LAB" "$CACHE"
# The build folder is beside the outputs, so that they are put in place by
# a rename within one file system; removed at exit.
harness_init guest.sh --work "$(mktemp -d "$OUTDIR/.guest-build.XXXXXX")"
# shellcheck disable=SC2016  # $WORK is expanded at exit
on_exit 'rm -rf "$WORK"'

# Cache: nothing to do if both outputs exist and are newer than this script.
if [[ -s $KERNEL && -s $INITRD && $KERNEL -nt $SELF && $INITRD -nt $SELF ]]; then
  log "up to date: $LAB"
  exit 0
fi

for tool in busybox cpio gzip depmod modinfo dpkg-deb apt-get; do
  command -v "$tool" >/dev/null || fail "missing $tool (run tests/lab/deps.sh)"
done
BUSYBOX=/bin/busybox
# The initramfs has no libc: the busybox must be busybox-static's.
if [[ ! -x $BUSYBOX || $(ldd "$BUSYBOX" 2>&1 || true) != *"not a dynamic"* ]]; then
  fail "$BUSYBOX missing or not static (install busybox-static)"
fi

# --- kernel package -----------------------------------------------------------
# linux-image-amd64 is a metapackage; its Depends names the real ABI package.
kpkg() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'; }
PKG=$(kpkg || true)
if [[ -z $PKG ]]; then
  log "apt lists empty, running apt-get update"
  apt-get update -q >&2
  PKG=$(kpkg)
fi
cached_deb() { local d; for d in "$CACHE/${PKG}"_*.deb; do [[ -f $d ]] && { echo "$d"; return 0; }; done; return 0; }
DEB=$(cached_deb)
if [[ -z $DEB ]]; then
  # apt-get download writes into the cwd. _apt cannot write a root-owned dir,
  # so apt warns and downloads unsandboxed: harmless, filtered out.
  (cd "$CACHE" && { apt-get download -q "$PKG" 2>&1 | grep -v 'unsandboxed' >&2; } ) || true
  DEB=$(cached_deb)
  [[ -n $DEB ]] || fail "apt-get download $PKG failed"
  # drop older kernels from the cache
  find "$CACHE" -name 'linux-image-*.deb' ! -name "$(basename "$DEB")" -delete
fi
log "kernel package $(basename "$DEB")"
dpkg-deb -x "$DEB" "$WORK/k"
KVER=$(basename "$(find "$WORK/k/lib/modules" -mindepth 1 -maxdepth 1 -type d | head -n1)")
KMOD=$WORK/k/lib/modules/$KVER

# --- initramfs tree -------------------------------------------------------------
R=$WORK/root
mkdir -p "$R"/{bin,sbin,dev,proc,sys,tmp,run,etc,usr/bin,usr/sbin,lib/modules/"$KVER"}
cp "$BUSYBOX" "$R/bin/busybox"
# busybox applet symlinks for everything we use (and more; they're free)
for a in $("$BUSYBOX" --list); do
  [[ $a == busybox ]] || ln -sf busybox "$R/bin/$a"
done
# /dev/console must exist before /init runs or init has no stdout
mknod -m 600 "$R/dev/console" c 5 1 2>/dev/null || true
mknod -m 666 "$R/dev/null" c 1 3 2>/dev/null || true

# NIC drivers (virtio-net needs virtio_pci: both are modules in Debian's
# kernel) plus their dependencies, resolved recursively with modinfo.
# The config drive (powervs): a CD on virtio-scsi (a virtual optical device,
# as PowerVM attaches it), ISO 9660.
want=(virtio_pci virtio_net e1000 e1000e virtio_scsi sr_mod isofs bonding 8021q)
declare -A seen=()
modpath() { find "$KMOD/kernel" -name "$1.ko" -o -name "$1.ko.xz" -o -name "$1.ko.zst" | head -n1; }
add_mod() {
  local m=${1//-/_} p deps d
  [[ -n ${seen[$m]:-} ]] && return 0
  seen[$m]=1
  p=$(modpath "$m")
  [[ -n $p ]] || fail "module $m not found in $KVER"
  mkdir -p "$R/lib/modules/$KVER/$(dirname "${p#"$KMOD"/}")"
  cp "$p" "$R/lib/modules/$KVER/${p#"$KMOD"/}"
  deps=$(modinfo -F depends "$p")
  for d in ${deps//,/ }; do add_mod "$d"; done
}
for m in "${want[@]}"; do add_mod "$m"; done
cp "$KMOD"/modules.order "$KMOD"/modules.builtin "$KMOD"/modules.builtin.modinfo "$R/lib/modules/$KVER/" 2>/dev/null || true
# kmod's depmod writes modules.dep in the format busybox modprobe reads.
depmod -b "$R" "$KVER"
log "modules: ${!seen[*]}"

# The real Ignition client (Debian's `ignition`, what RHCOS and FCOS run in
# their initramfs) with the shared libraries and loader it links against.
IGNITION_BIN=/usr/lib/dracut/modules.d/30ignition/ignition
[[ -x $IGNITION_BIN ]] || fail "$IGNITION_BIN missing (apt-get install ignition; tests/lab/deps.sh)"
copy_elf() { # BIN DEST: the binary at DEST in the initramfs, its libraries at their own paths
  local bin=$1 dest=$2 lib
  install -D -m 755 "$bin" "$R$dest"
  for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
    [[ -e $R$lib ]] || install -D -m 755 "$(readlink -f "$lib")" "$R$lib"
  done
}
copy_elf "$IGNITION_BIN" /usr/bin/ignition
log "ignition $("$IGNITION_BIN" -version 2>&1 | head -n1)"
# Debian's Ignition relabels what it writes (SELinux), with setfiles from
# policycoreutils: the real one, from the package (not installed on the host).
cached_pc() { local d; for d in "$CACHE"/policycoreutils_*.deb; do [[ -f $d ]] && { echo "$d"; return 0; }; done; return 0; }
PC_DEB=$(cached_pc)
if [[ -z $PC_DEB ]]; then
  (cd "$CACHE" && { apt-get download -q policycoreutils 2>&1 | grep -v 'unsandboxed' >&2; } ) || true
  PC_DEB=$(cached_pc)
  [[ -n $PC_DEB ]] || fail "apt-get download policycoreutils failed"
fi
dpkg-deb -x "$PC_DEB" "$WORK/pc"
copy_elf "$WORK/pc/sbin/setfiles" /usr/sbin/setfiles

# --- installing to disk (coreos.inst.*; /init's install_to_disk) ------------------
# What RHCOS's live system runs for coreos-installer.service: the real
# coreos-installer 0.27.0 (tests/lab/coreos-installer.sh builds it), the
# service's own script from the crate (/usr/libexec/coreos-installer-service,
# bash), and what they call: udevadm (settle; coreos-installer refuses to go on
# without /run/udev/control and trusts lsblk's labels only with udev), lsblk,
# blkid (-p). The real systemd-udevd runs in the guest with the rules that name
# disks (/dev/disk/by-id/virtio-<serial>, by-label, by-partlabel); virtio-blk
# and ext4 (coreos-installer mounts the boot partition) are modules.
CI_BIN=$("$REPO/tests/lab/coreos-installer.sh") || fail "tests/lab/coreos-installer.sh failed"
CI_SRC=$(find "${CARGO_HOME:-$HOME/.cargo}"/registry/src -maxdepth 2 -type d -name "coreos-installer-$("$CI_BIN" --version | cut -d' ' -f2)" | head -n1)
[[ -f $CI_SRC/scripts/coreos-installer-service ]] || fail "coreos-installer's crate source (scripts/coreos-installer-service) not in cargo's registry"
for b in "$CI_BIN:/usr/bin/coreos-installer" /bin/bash:/bin/bash /bin/udevadm:/usr/bin/udevadm \
    /bin/lsblk:/usr/bin/lsblk /sbin/blkid:/usr/sbin/blkid; do
  rm -f "$R${b#*:}"     # not through a busybox applet link
  copy_elf "${b%%:*}" "${b#*:}"
done
install -D -m 755 "$CI_SRC/scripts/coreos-installer-service" "$R/usr/libexec/coreos-installer-service"
mkdir -p "$R/usr/lib/systemd" "$R/usr/lib/udev/rules.d"
ln -sf ../../bin/udevadm "$R/usr/lib/systemd/systemd-udevd"
for f in 50-udev-default.rules 60-block.rules 60-persistent-storage.rules; do
  cp "/usr/lib/udev/rules.d/$f" "$R/usr/lib/udev/rules.d/"
done
for m in virtio_blk crc32c_generic ext4; do add_mod "$m"; done
depmod -b "$R" "$KVER"
log "coreos-installer $("$CI_BIN" --version | cut -d' ' -f2) from $CI_BIN, service script from $CI_SRC"

# --- bonds and VLANs (bond=/vlan=; /init's nm_network) ----------------------------
# NetworkManager's initramfs pieces (Debian's network-manager 1.42, the
# version RHCOS 9 runs): the initrd generator (in /usr/libexec, where RHCOS
# has it) and the daemon, which runs without D-Bus in
# --configure-and-quit=initrd mode; systemd's udevd, without which
# NetworkManager leaves every NIC unmanaged (not initialized by udev), and
# which renames NICs by the rules /init writes from ifname= as dracut's do;
# iproute2's ip beside busybox's (-br, -d), for what /init prints.
NM_GEN=/usr/lib/NetworkManager/nm-initrd-generator
[[ -x $NM_GEN ]] || NM_GEN=/usr/libexec/nm-initrd-generator
for f in "$NM_GEN" /usr/sbin/NetworkManager /bin/ip /bin/udevadm; do
  [[ -x $f ]] || fail "$f missing (apt-get install network-manager iproute2 udev; tests/lab/deps.sh)"
done
copy_elf "$NM_GEN" /usr/libexec/nm-initrd-generator
copy_elf /usr/sbin/NetworkManager /usr/sbin/NetworkManager
copy_elf /bin/ip /usr/sbin/ip
copy_elf /bin/udevadm /usr/bin/udevadm
mkdir -p "$R/usr/lib/systemd" "$R/etc/udev/rules.d" "$R"/etc/NetworkManager/{conf.d,system-connections} "$R/var/lib/NetworkManager"
ln -sf ../../bin/udevadm "$R/usr/lib/systemd/systemd-udevd"
log "NetworkManager $(/usr/sbin/NetworkManager --version)"

cat > "$R/etc/udhcpc.script" <<'SCRIPT'
#!/bin/sh
# busybox udhcpc hook: apply the lease; its DNS servers (option 6) are
# kept for /init, which writes /etc/resolv.conf.
case "$1" in
  deconfig) ip addr flush dev "$interface"; ip link set "$interface" up ;;
  bound|renew)
    ip addr flush dev "$interface"
    ip addr add "$ip/${mask:-24}" dev "$interface"
    [ -n "$router" ] && ip route add default via ${router%% *} dev "$interface"
    echo "$dns" >/run/dhcp-dns
    echo "udhcpc: $interface $ip/${mask:-24} router=${router:-none} dns=${dns:-none} server=${serverid:-?}" ;;
esac
exit 0
SCRIPT
chmod 755 "$R/etc/udhcpc.script"

cat > "$R/init" <<'INIT'
#!/bin/sh
# Lab guest /init (busybox ash). Never exits: always ends in poweroff -f.
export PATH=/bin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mount -t tmpfs tmp /tmp
exec </dev/console >/dev/console 2>&1
# Keep kernel messages from splitting our marker line on the console.
dmesg -n 1

T0=$(cut -d' ' -f1 /proc/uptime)
# The marker goes straight to the first serial port so it lands in the serial
# log whatever console= says, and exactly once.
marker() {
  if [ -c /dev/ttyS0 ]; then echo "$*" >/dev/ttyS0; else echo "$*"; fi
}
finish() {
  if [ -n "$HOLD" ]; then
    marker "LAB-HOLD $HOLD"
    echo "lab-init: holding ${HOLD}s (lab.hold)"
    sleep "$HOLD"
  fi
  echo "lab-init: done after $(cut -d' ' -f1 /proc/uptime)s uptime (init started at ${T0}s)"
  sync
  poweroff -f
  sleep 30
}
fail() { marker "LAB-IGNITION-FAILED $*"; finish; }

URL="" PLATFORM=metal NAMESERVERS="" HOLD="" NM=0
for w in $(cat /proc/cmdline); do
  case "$w" in
    bond=*|vlan=*) NM=1 ;;
    lab.hold=*) HOLD=${w#lab.hold=} ;;
    ignition.config.url=*) URL=${w#ignition.config.url=} ;;
    ignition.platform.id=*) PLATFORM=${w#ignition.platform.id=} ;;
    nameserver=*) NAMESERVERS="$NAMESERVERS ${w#nameserver=}" ;;
  esac
done
echo "lab-init: platform $PLATFORM"
# Installing to disk (RHCOS's coreos-installer.service and its generator):
# coreos.inst.install_dev=; coreos.inst.skip_reboot read as the generator
# reads it (bare or any value but 0/no/off: no reboot).
INSTALL_DEV="" SKIP_REBOOT=0
for w in $(cat /proc/cmdline); do
  case "$w" in
    coreos.inst.install_dev=*) INSTALL_DEV=${w#*=} ;;
    coreos.inst.skip_reboot) SKIP_REBOOT=1 ;;
    coreos.inst.skip_reboot=*) case "${w#*=}" in ""|0|no|off) SKIP_REBOOT=0 ;; *) SKIP_REBOOT=1 ;; esac ;;
  esac
done

for m in virtio_pci virtio_net e1000 e1000e virtio_scsi sr_mod isofs; do modprobe "$m" 2>/dev/null; done

# A bond or VLAN on the command line: NetworkManager, as RHCOS's initramfs
# runs it (dracut's network-manager module: nm-initrd-generator on the
# command line, then NetworkManager --configure-and-quit=initrd), instead of
# the one-NIC code below. bonding and 8021q are loaded only here: bonding
# would otherwise make a bond0 that the one-NIC code takes for the NIC.
nm_network() {
  modprobe bonding max_bonds=0
  modprobe 8021q
  ip link set lo up
  # dracut's ifname=NAME:MAC: a udev rule naming the NIC with that MAC NAME
  # (dracut's ifname-genrules.sh writes the same). udevd then initializes
  # the NICs (NetworkManager manages only those) and renames them.
  for w in $(cat /proc/cmdline); do
    case "$w" in
      ifname=*:*)
        v=${w#ifname=}; mac=$(echo "${v#*:}" | tr A-F a-f)
        printf 'SUBSYSTEM=="net", ACTION=="add", DRIVERS=="?*", ATTR{address}=="%s", ATTR{type}=="1", NAME="%s"\n' \
          "$mac" "${v%%:*}" >>/etc/udev/rules.d/80-ifname.rules ;;
    esac
  done
  [ -f /etc/udev/rules.d/80-ifname.rules ] && { echo "lab-init: udev rules from ifname=:"; cat /etc/udev/rules.d/80-ifname.rules; }
  [ -e /run/udev/control ] || /usr/lib/systemd/systemd-udevd --daemon --resolve-names=never
  udevadm trigger --type=devices --action=add --subsystem-match=net
  udevadm settle --timeout=20
  echo "lab-init: NICs after udev: $(ls /sys/class/net | tr '\n' ' ')"
  mkdir -p /run/NetworkManager
  /usr/libexec/nm-initrd-generator -- $(cat /proc/cmdline) >/tmp/nm-gen.log 2>&1
  gen=$?
  echo "lab-init: nm-initrd-generator exit $gen:"; cat /tmp/nm-gen.log
  for f in /run/NetworkManager/system-connections/* /run/NetworkManager/conf.d/* /run/NetworkManager/initrd/*; do
    [ -f "$f" ] && { echo "lab-init: --- $f"; cat "$f"; }
  done
  run_nm initrd --configure-and-quit=initrd
  marker "LAB-NET-NM generator=$gen nm=$nm"
  net_markers LAB-NET
}
# run_nm WHAT ARG...: NetworkManager ARG... in the foreground (60 s at most),
# its log on the console; its exit code in nm ("timeout": stopped by the
# timeout, it says "caught SIGTERM" and exits 0).
run_nm() {
  what=$1; shift
  timeout 60 /usr/sbin/NetworkManager "$@" --no-daemon --debug --log-level=INFO >/tmp/nm-$what.log 2>&1
  nm=$?
  grep -q 'caught SIGTERM' /tmp/nm-$what.log && nm=timeout
  echo "lab-init: NetworkManager $* exit $nm:"; cat /tmp/nm-$what.log
}
# net_markers PREFIX: what is up, on the console and as PREFIX markers.
net_markers() {
  echo "lab-init: ip -br addr:"; /usr/sbin/ip -br addr
  echo "lab-init: ip -d link show:"; /usr/sbin/ip -d link show
  echo "lab-init: ip route:"; /usr/sbin/ip route
  /usr/sbin/ip -br addr | while read -r n st addrs; do
    [ "$n" = lo ] || marker "$1 ${n%@*} $st $addrs"
  done
  for b in /sys/class/net/*/bonding; do
    [ -d "$b" ] || continue
    n=${b%/bonding}; n=${n##*/}
    perm=$(awk '/^Permanent HW addr:/ { printf "%s%s", s, $4; s = "," }' /proc/net/bonding/$n)
    marker "$1-BOND $n slaves=$(tr ' ' ',' <$b/slaves) mode=$(cut -d' ' -f1 $b/mode) miimon=$(cat $b/miimon) active=$(cat $b/active_slave) perm=$perm"
  done
  # /proc/net/vlan/config: "NAME | VID | PARENT" after two header lines.
  tail -n +3 /proc/net/vlan/config 2>/dev/null | while IFS='| ' read -r v id parent; do
    marker "$1-VLAN $v id=$id parent=$parent"
  done
  /usr/sbin/ip -4 route | while read -r r; do marker "$1-ROUTE $r"; done
  marker "$1-DNS $(grep -v '^#' /run/NetworkManager/resolv.conf 2>/dev/null | tr '\n' ' ')"
}
# nm_system: each keyfile Ignition wrote (a marker with what it says of the
# bond and VLAN), then the network from those keyfiles alone, as the
# installed system's NetworkManager brings it up at its first boot: no
# generated connections (the initramfs's bonds and VLANs deleted first,
# NetworkManager's run state with them), the keyfile plugin reading where
# Ignition wrote. Still --configure-and-quit=initrd: outside initrd mode
# NetworkManager exits at once without D-Bus ("cannot connect to D-Bus").
nm_system() {
  for f in /sysroot/etc/NetworkManager/system-connections/*.nmconnection; do
    marker "LAB-NET-KEYFILE ${f#/sysroot} sha256=$(sha256sum "$f" | cut -d' ' -f1) $(awk -F= '
      /^\[/ { s = $0; next }
      s == "[connection]" && $1 == "type" { o = o " type=" $2 }
      s == "[connection]" && $1 == "master" { o = o " master=" $2 }
      s == "[ethernet]" && $1 == "mac-address" { o = o " mac=" $2 }
      s == "[bond]" && $1 == "mode" { o = o " mode=" $2 }
      s == "[bond]" && $1 == "miimon" { o = o " miimon=" $2 }
      s == "[vlan]" && $1 == "id" { o = o " vlan=" $2 }
      s == "[vlan]" && $1 == "parent" { o = o " parent=" $2 }
      s == "[ipv4]" && $1 == "method" { o = o " ipv4=" $2 }
      s == "[ipv4]" && $1 == "address1" { o = o " address1=" $2 }
      END { print substr(o, 2) }' "$f")"
  done
  for v in $(tail -n +3 /proc/net/vlan/config 2>/dev/null | cut -d'|' -f1); do /usr/sbin/ip link del "$v"; done
  for b in /sys/class/net/*/bonding; do [ -d "$b" ] && { b=${b%/bonding}; /usr/sbin/ip link del "${b##*/}"; }; done
  rm -rf /run/NetworkManager
  printf '[main]\nplugins=keyfile\n\n[keyfile]\npath=/sysroot/etc/NetworkManager/system-connections\n' >/tmp/nm-system.conf
  echo "lab-init: network from the keyfiles Ignition wrote; left after deleting the initramfs's bonds and VLANs: $(ls /sys/class/net | tr '\n' ' ')"
  run_nm system --config=/tmp/nm-system.conf --configure-and-quit=initrd
  marker "LAB-SYSNET-NM nm=$nm"
  net_markers LAB-SYSNET
}
if [ $NM = 1 ]; then
  nm_network
else
# (the one-NIC network: DHCP, or the ip= arguments)
# First non-loopback interface; give the driver a moment to register it.
IF=""
i=0
while [ $i -lt 50 ]; do
  for n in /sys/class/net/*; do
    n=${n##*/}
    [ "$n" = lo ] || { IF=$n; break; }
  done
  [ -n "$IF" ] && break
  sleep 0.1; i=$((i+1))
done
[ -n "$IF" ] || fail "no-network-interface"
ip link set lo up
ip link set "$IF" up
echo "lab-init: interface $IF $(cat /sys/class/net/$IF/address)"

# Static addresses from the kernel command line (bootd's ip= arguments for
# nodes with a static network): ip=<client>::<gw>:<netmask or prefix>:<host>:<iface>:none,
# an IPv6 client and gateway in brackets. The interface named is ignored:
# the guest has one. Without any, DHCP (IPv4).
STATIC=0
for w in $(cat /proc/cmdline); do
  case "$w" in
    ip=\[*)
      v=${w#ip=}; v=${v#?}; addr=${v%%]*}; rest=${v#*]::}
      gw=""
      case "$rest" in \[*) gw=${rest#?}; gw=${gw%%]*}; rest=${rest#*]} ;; esac
      rest=${rest#:}; prefix=${rest%%:*}
      echo 0 >/proc/sys/net/ipv6/conf/"$IF"/accept_dad
      ip -6 addr add "$addr/$prefix" dev "$IF" || fail "ip-v6-$addr"
      [ -n "$gw" ] && ip -6 route add default via "$gw" dev "$IF"
      echo "lab-init: static $addr/$prefix gateway ${gw:-none}"
      STATIC=1 ;;
    ip=*::*:*:*:*:none)
      v=${w#ip=}; addr=${v%%::*}; rest=${v#*::}
      gw=${rest%%:*}; rest=${rest#*:}; mask=${rest%%:*}
      eval "$(ipcalc -p "$addr" "$mask")"
      ip addr add "$addr/$PREFIX" dev "$IF" || fail "ip-v4-$addr"
      [ -n "$gw" ] && ip route add default via "$gw" dev "$IF"
      echo "lab-init: static $addr/$PREFIX gateway ${gw:-none}"
      STATIC=1 ;;
  esac
done
# -n: exit if no lease; -q: quit after obtaining one; 5 discovers 2 s apart.
if [ $STATIC = 0 ]; then
  udhcpc -i "$IF" -s /etc/udhcpc.script -n -q -t 5 -T 2 || fail "dhcp-no-lease"
fi
fi

# The resolvers, as the initramfs's NetworkManager would have them: the
# kernel command line's nameserver= first, then DHCP's option 6.
: >/etc/resolv.conf
for d in $NAMESERVERS $(cat /run/dhcp-dns 2>/dev/null); do
  grep -qx "nameserver $d" /etc/resolv.conf || echo "nameserver $d" >>/etc/resolv.conf
done
echo "lab-init: resolvers: $(grep -o '[^ ]*$' /etc/resolv.conf | tr '\n' ' ')(nameserver=:${NAMESERVERS:- none}; DHCP: $(cat /run/dhcp-dns 2>/dev/null || echo none))"

# /dev/disk/by-label, as udev makes it, for the platforms that read a config
# drive (powervs: Ignition waits for /dev/disk/by-label/config-2). The label
# of an ISO 9660 volume: 32 bytes at 32808.
by_label() {
  mkdir -p /dev/disk/by-label
  for b in /sys/class/block/*; do
    b=/dev/${b##*/}
    l=$(dd if="$b" bs=1 skip=32808 count=32 2>/dev/null | tr -d '\000' | sed 's/ *$//')
    case "$l" in ""|*[!A-Za-z0-9_.-]*) ;; *) ln -sf "$b" "/dev/disk/by-label/$l" ;; esac
  done
}
case "$PLATFORM" in
  powervs|ibmcloud|openstack)
    i=0
    while [ $i -lt 50 ]; do
      by_label
      [ -e /dev/disk/by-label/config-2 ] && break
      sleep 0.2; i=$((i+1))
    done
    echo "lab-init: by label: $(ls /dev/disk/by-label | tr '\n' ' ')" ;;
esac

if [ -z "$URL" ] && [ -n "$INSTALL_DEV" ]; then
  # Installing only: no live Ignition config (the client does not run).
  echo "lab-init: no ignition.config.url: the live system installs to $INSTALL_DEV"
elif [ -z "$URL" ] && [ "$PLATFORM" != metal ]; then
  # A cloud image: its config comes from the platform, not the kernel line.
  echo "lab-init: no ignition.config.url: Ignition fetches from platform $PLATFORM"
else
  [ -n "$URL" ] || fail "no-ignition.config.url-on-cmdline"

  # busybox 1.35 wget -T segfaults: bound each attempt with timeout instead.
  ok=0
  n=0
  while [ $n -lt 5 ]; do
    n=$((n+1))
    rm -f /tmp/ign
    if timeout 20 wget -q -O /tmp/ign "$URL" 2>/tmp/wget.err; then ok=1; break; fi
    echo "lab-init: fetch attempt $n failed: $(head -n 1 /tmp/wget.err)"
    sleep 1
  done
  [ $ok = 1 ] || fail "fetch-failed url=$URL: $(head -n 1 /tmp/wget.err)"

  SUM=$(sha256sum /tmp/ign | cut -d' ' -f1)
  BYTES=$(wc -c </tmp/ign | tr -d ' ')
  marker "LAB-IGNITION sha256=$SUM bytes=$BYTES url=$URL"
fi

# Then the real client, as a CoreOS initramfs runs it: the fetch stage reads
# ignition.config.url, follows merge pointers (HTTPS with the CA a pointer
# config carries) and caches the merged config; the files stage writes it
# below /sysroot. Markers: the stages' exit codes, then every file written.
if [ -x /usr/bin/ignition ] && { [ -n "$URL" ] || [ -z "$INSTALL_DEV" ]; }; then
  mkdir -p /sysroot /run/ignition
  mount -t tmpfs sysroot /sysroot
  # The files stage relabels what it wrote with setfiles, by the target's
  # policy: a one-rule "targeted" policy stands in for the OS's.
  mkdir -p /sysroot/etc/selinux/targeted/contexts/files
  printf 'SELINUX=enforcing\nSELINUXTYPE=targeted\n' >/sysroot/etc/selinux/config
  printf '/.*\tsystem_u:object_r:etc_t:s0\n' >/sysroot/etc/selinux/targeted/contexts/files/file_contexts
  timeout 90 /usr/bin/ignition -platform "$PLATFORM" -stage fetch -log-to-stdout -config-cache /run/ignition.json >/tmp/ign-fetch.log 2>&1
  fetch=$?
  files=skipped
  if [ $fetch = 0 ]; then
    timeout 90 /usr/bin/ignition -platform "$PLATFORM" -stage files -root /sysroot -log-to-stdout -config-cache /run/ignition.json >/tmp/ign-files.log 2>&1
    files=$?
  fi
  echo "lab-init: ignition fetch stage:"; cat /tmp/ign-fetch.log
  [ -f /tmp/ign-files.log ] && { echo "lab-init: ignition files stage:"; cat /tmp/ign-files.log; }
  marker "LAB-IGNITION-CLIENT fetch=$fetch files=$files platform=$PLATFORM"
  if [ "$files" = 0 ]; then
    find /sysroot -type f | sort | while read -r f; do
      marker "LAB-FILE ${f#/sysroot} sha256=$(sha256sum "$f" | cut -d' ' -f1)"
    done
    # The keyfiles the installed system would get: what they say, and what
    # NetworkManager brings up from them alone.
    [ $NM = 1 ] && ls /sysroot/etc/NetworkManager/system-connections/*.nmconnection >/dev/null 2>&1 && nm_system
  else
    for l in /tmp/ign-fetch.log /tmp/ign-files.log; do
      [ -f $l ] && tail -n 3 $l | while read -r line; do marker "LAB-IGNITION-CLIENT-LOG $line"; done
    done
  fi
fi

# --- after Ignition: the live system's systemd, for what the lab needs ---------
# Units Ignition enabled: Ignition 2.14 records them as `enable NAME` lines in
# /etc/systemd/system-preset/20-ignition.preset (systemd-preset-all applies
# them at boot). Each NAME's ExecStart= lines from /sysroot/etc/systemd/system
# run in order (systemd's prefixes -@+!: dropped; `-` ignores a failure), by
# sh, cwd /, stdin /dev/null, output to the console, systemd's PATH, with
# /usr/local/bin holding links to what Ignition wrote in /sysroot/usr/local/bin.
# systemd's one specifier an ExecStart= here may carry, %% (a URL's escapes),
# is read as %. Before the units, what the live system's systemd has by then:
# udev coldplugged (the disks' drivers loaded, /dev/disk/by-id links), for an
# inspection agent that reads them.
# Markers: LAB-UNIT-START NAME, then LAB-UNIT NAME rc=<code|no-unit-file>.
run_enabled_units() {
  local preset=/sysroot/etc/systemd/system-preset/20-ignition.preset f
  [ -f $preset ] || return 0
  start_udev
  mkdir -p /usr/local/bin
  for f in /sysroot/usr/local/bin/*; do [ -e "$f" ] && ln -sf "$f" /usr/local/bin/; done
  sed -n 's/^enable  *//p' $preset | while read -r name; do
    unit=/sysroot/etc/systemd/system/$name
    if [ ! -f "$unit" ]; then marker "LAB-UNIT $name rc=no-unit-file"; continue; fi
    marker "LAB-UNIT-START $name"
    rc=0
    sed -n 's/^ExecStart=//p' "$unit" | sed 's/%%/%/g' >/tmp/unit-exec
    while read -r cmd; do
      ignore=0
      while :; do
        case "$cmd" in
          -*) ignore=1; cmd=${cmd#?} ;;
          [@+!:]*) cmd=${cmd#?} ;;
          *) break ;;
        esac
      done
      echo "lab-init: $name: $cmd"
      (cd / && PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin sh -c "$cmd" </dev/null)
      r=$?
      if [ $r != 0 ] && [ $ignore = 0 ]; then rc=$r; break; fi
    done </tmp/unit-exec
    marker "LAB-UNIT $name rc=$rc"
  done
}
# udev as the live system's systemd has it (systemd-udev-trigger, -settle):
# the real systemd-udevd, coldplugged and settled, the disks' drivers loaded.
start_udev() {
  for m in virtio_blk crc32c_generic ext4; do modprobe "$m" 2>/dev/null; done
  [ -e /run/udev/control ] || /usr/lib/systemd/systemd-udevd --daemon   # (nm_network may have started it)
  udevadm trigger --type=subsystems --action=add
  udevadm trigger --type=devices --action=add
  udevadm settle --timeout=30
  echo "lab-init: disks by id: $(ls /dev/disk/by-id 2>/dev/null | tr '\n' ' ')"
}
# Installing: what coreos-installer.service does in RHCOS's live system. The
# real systemd-udevd first (coldplugged and settled, as systemd-udev-trigger
# and -settle would), then the real /usr/libexec/coreos-installer-service as
# the unit runs it (systemd's clean environment, stdin /dev/null, output to
# the console), then the reboot coreos-installer-reboot.service does unless
# coreos.inst.skip_reboot. On failure the unit's OnFailure=emergency.target
# would stop there: here the guest powers off. (The script's
# --fetch-retries infinite retries a failing image fetch for ever.)
# Marker: LAB-INSTALL rc=<exit code> dev=<install_dev>.
install_to_disk() {
  start_udev
  env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /usr/libexec/coreos-installer-service </dev/null
  rc=$?
  marker "LAB-INSTALL rc=$rc dev=$INSTALL_DEV"
  if [ $rc = 0 ] && [ $SKIP_REBOOT = 0 ]; then
    echo "lab-init: rebooting after $(cut -d' ' -f1 /proc/uptime)s uptime"
    sync
    reboot -f
    sleep 30
  fi
}
if [ -n "$INSTALL_DEV" ]; then
  # coreos-installer-generator makes default.target coreos-installer-post.target:
  # the units Ignition enabled for multi-user.target do not start.
  install_to_disk
elif [ "${files:-}" = 0 ]; then
  run_enabled_units
fi
finish
INIT
chmod 755 "$R/init"

# --- pack -------------------------------------------------------------------------
(cd "$R" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) | gzip -9 > "$WORK/initramfs"
cp "$WORK/k/boot/vmlinuz-$KVER" "$WORK/kernel"
# install both atomically-ish (rename within the same fs)
mv -f "$WORK/kernel" "$KERNEL"
mv -f "$WORK/initramfs" "$INITRD"
log "built $KERNEL ($(stat -c %s "$KERNEL") bytes), $INITRD ($(stat -c %s "$INITRD") bytes), kernel $KVER"
