#!/usr/bin/env bash
# The lab guest installs to disk with the real coreos-installer, and the
# installed disk boots: what a node that bootd sends to install does, without
# bootd (its kernel arguments given to QEMU directly).
#
# Usage: tests/lab/install-disk.sh [--timeout SECS (300, per boot)] [--workdir DIR]
#          [--accel tcg|kvm (tcg)] [--platform-id ID]
#
# Inside a private network namespace (10.77.0.1/24 on br0), python3's
# http.server on 10.77.0.1:8080 serves the lab's metal image
# (tests/lab/disk-image.sh: metal.raw.xz) and two Ignition configs. One QEMU
# machine (SeaBIOS, TCG, a virtio NIC on the bridge, no reboot) with two
# empty 1 GiB virtio disks, serials disk-a and disk-b (SeaBIOS boots disk-b,
# the install disk, as a machine's firmware set to boot it would: SeaBIOS
# boots only its first hard disk, it does not fall through to the next),
# boots four times:
#   0. live, units: the lab guest (QEMU loads tests/lab/guest.sh's kernel and
#      initramfs) with ignition.config.url=live.ign, whose Ignition writes
#      /usr/local/bin/lab-hello and enables lab-hello.service (ExecStart that
#      script, which prints LAB-HELLO <args>) and lab-fail.service (exits 3):
#      LAB-UNIT lab-hello.service rc=0, LAB-UNIT lab-fail.service rc=3.
#   1. live, install: the lab guest with the install arguments bootd gives
#        ip=10.77.0.50::10.77.0.1:255.255.255.0:lab:eth0:none ignition.firstboot
#        ignition.platform.id=metal coreos.inst.install_dev=/dev/disk/by-id/virtio-disk-b
#        coreos.inst.ignition_url=http://10.77.0.1:8080/config.ign
#        coreos.inst.image_url=http://10.77.0.1:8080/metal.raw.xz coreos.inst.insecure
#      runs the real coreos-installer-service: LAB-INSTALL rc=0
#      dev=/dev/disk/by-id/virtio-disk-b, then the guest reboots (the
#      kernel's "reboot: Restarting system"; QEMU exits, -no-reboot).
#   2. from disk (no -kernel): SeaBIOS boots disk-b's GRUB, which boots the
#      installed OS: LAB-DISK-BOOT
#      ignition-sha256=<sha256 of config.ign> boots=1, its command line
#      carrying ignition.firstboot and the ip= argument (coreos-installer's
#      --firstboot-args, through /boot/ignition.firstboot).
#   3. from disk again: boots=2, no ignition.firstboot (the stamp is gone).
# --platform-id ID adds coreos.inst.platform_id=ID to boot 1 (coreos-installer
# --platform ID: it rewrites ignition.platform.id=metal in the image's BLS
# entry); boots 2 and 3 then check the entry's options (LAB-DISK-BLS) say ID.
# Then disk-a is still all zeros (blkid -p finds nothing), and the server
# was asked for metal.raw.xz.sig (404: no signature, coreos.inst.insecure).
# Prints ok/FAIL lines, the boots' times, then "PASS install-disk" (exit 0)
# or "FAIL install-disk ..." (exit 1); usage errors exit 2. Root (a network
# namespace, a tap). The run folder (default target/lab-runs/install-disk-<pid>)
# keeps serial-<n>.log, qemu-<n>.log, http.log; the disks are removed.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/harness.sh
. tests/lib/qemu.sh

TIMEOUT=300 WORKDIR="" ACCEL=tcg PLATFORM_ID=""
usage() { sed -n '6,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --timeout) TIMEOUT=${2:-}; shift 2 ;;
    --workdir) WORKDIR=${2:-}; shift 2 ;;
    --accel) ACCEL=${2:-}; shift 2 ;;   # kvm: hangs on this machine (no console output)
    --platform-id) PLATFORM_ID=${2:-}; shift 2 ;;
    -h|--help) usage ;;
    *) echo "install-disk.sh: unknown argument $1" >&2; usage ;;
  esac
done
[[ $TIMEOUT =~ ^[0-9]+$ && $ACCEL =~ ^(tcg|kvm)$ && $PLATFORM_ID =~ ^[a-z0-9]*$ ]] || usage
[[ $(id -u) == 0 ]] || { echo "install-disk.sh: run as root" >&2; exit 2; }

WORKDIR=${WORKDIR:-$REPO/target/lab-runs/install-disk-$$}
mkdir -p "$WORKDIR"
WORKDIR=$(readlink -f "$WORKDIR")
harness_init install-disk --work "$WORKDIR"
rm -f "$WORK"/serial-*.log "$WORK"/qemu-*.log "$WORK"/disk-*.img
# The disks are large (sparse) files: not kept.
# shellcheck disable=SC2016  # $WORK is expanded at exit
after_exit 'rm -f "$WORK"/disk-a.img "$WORK"/disk-b.img'
die() { echo "FAIL install-disk: $*"; exit 1; }
T_RUN=$(now)

IMAGES=$REPO/target/lab-images
"$REPO/tests/lab/guest.sh" "$IMAGES" >&2 || die "guest.sh failed"
"$REPO/tests/lab/disk-image.sh" "$IMAGES" >&2 || die "disk-image.sh failed"
KERNEL=$IMAGES/lab/kernel INITRD=$IMAGES/lab/initramfs

# --- what the server serves ----------------------------------------------------
WWW=$WORK/www
mkdir -p "$WWW"
cp "$IMAGES/lab/metal.raw.xz" "$WWW/metal.raw.xz"
(cd "$WWW" && sha256sum -c --quiet "$IMAGES/lab/metal.raw.xz.sha256") || die "metal.raw.xz does not match its .sha256"
/usr/bin/python3 - "$WWW" <<'PY'
import json, sys, urllib.parse
www = sys.argv[1]
def data(text):
    return "data:," + urllib.parse.quote(text, safe="")
def unit(name, execstart):
    return {"name": name, "enabled": True, "contents":
            "[Unit]\nDescription=lab %s\n[Service]\nType=oneshot\nExecStart=%s\n[Install]\nWantedBy=multi-user.target\n" % (name, execstart)}
live = {"ignition": {"version": "3.3.0"},
        "storage": {"files": [{"path": "/usr/local/bin/lab-hello", "mode": 0o755, "contents": {"source": data(
            "#!/bin/sh\necho \"LAB-HELLO $*\" >/dev/ttyS0\n")}}]},
        "systemd": {"units": [unit("lab-hello.service", "/usr/local/bin/lab-hello one two"),
                              unit("lab-fail.service", "/bin/sh -c 'exit 3'")]}}
installed = {"ignition": {"version": "3.3.0"},
             "storage": {"files": [{"path": "/etc/lab/installed", "mode": 0o644, "contents": {"source": data("installed by coreos-installer\n")}}]}}
for name, cfg in (("live.ign", live), ("config.ign", installed)):
    with open("%s/%s" % (www, name), "w") as f:
        json.dump(cfg, f)
PY
WANT_SHA=$(sha256sum "$WWW/config.ign" | cut -d' ' -f1)

lab_netns "install-$$"
lab_tap tap0
spawn --ns "$NS" --log "$WORK/http.log" /usr/bin/python3 -m http.server 8080 --bind 10.77.0.1 --directory "$WWW"
HTTP_PID=$SPAWNED
http_up() { alive "$HTTP_PID" || return 125; nsx curl -sf -o /dev/null http://10.77.0.1:8080/config.ign; }
wait_for 10 http_up || die "http.server not answering: $(tail -n 5 "$WORK/http.log")"
truncate -s 1G "$WORK/disk-a.img" "$WORK/disk-b.img"

# --- one boot ------------------------------------------------------------------
MAC=52:54:00:77:00:60
BASE="console=ttyS0 ip=10.77.0.50::10.77.0.1:255.255.255.0:lab:eth0:none ignition.firstboot ignition.platform.id=metal"
INSTALL="coreos.inst.install_dev=/dev/disk/by-id/virtio-disk-b coreos.inst.ignition_url=http://10.77.0.1:8080/config.ign coreos.inst.image_url=http://10.77.0.1:8080/metal.raw.xz coreos.inst.insecure${PLATFORM_ID:+ coreos.inst.platform_id=$PLATFORM_ID}"
# boot N [APPEND]: QEMU with the two disks (and the lab kernel with APPEND
# when given) until it exits (poweroff or reboot: -no-reboot) or TIMEOUT;
# $WORK/serial-N.log; BOOT_SECS its time. 1 when QEMU had to be killed.
boot() {
  local n=$1 append=${2:-} q t0
  # shellcheck disable=SC2054  # commas inside QEMU arguments are intended
  q=(qemu-system-x86_64 -accel "$ACCEL" -machine graphics=off -m 1024 -smp 1
    -display none -monitor none -no-reboot -serial "file:$WORK/serial-$n.log"
    -netdev "tap,id=n0,ifname=tap0,script=no,downscript=no" -device "virtio-net-pci,netdev=n0,mac=$MAC,romfile="
    -drive "if=none,id=d0,file=$WORK/disk-a.img,format=raw" -device virtio-blk-pci,drive=d0,serial=disk-a,bootindex=2
    -drive "if=none,id=d1,file=$WORK/disk-b.img,format=raw" -device virtio-blk-pci,drive=d1,serial=disk-b,bootindex=1)
  [[ -z $append ]] || q+=(-kernel "$KERNEL" -initrd "$INITRD" -append "$append")
  t0=$(now)
  spawn --ns "$NS" --log "$WORK/qemu-$n.log" "${q[@]}"
  QEMU_PID=$SPAWNED
  local rc=0
  wait_for "$TIMEOUT" boot_over || rc=1
  BOOT_SECS=$(since "$t0")
  stop_pid "$QEMU_PID"
  clean "$WORK/serial-$n.log" >"$WORK/console-$n.log"
  return $rc
}
# QEMU exited, or SeaBIOS found nothing to boot (it would wait and retry).
boot_over() { qemu_off || grep -aq 'No bootable device' "$WORK/serial-$n.log"; }
line() { grep -a -m1 -E "^$2" "$WORK/console-$1.log" || true; }
fail_boot() { # N WHAT
  bad "boot $1: $2"
  echo "--- last 40 lines of $WORK/serial-$1.log"
  tail -n 40 "$WORK/console-$1.log"
  die "boot $1 failed"
}
declare -A SECS=()
without_word() { ! grep -qw -- "$1" <<<"$2"; }
no_signature() { ! blkid -p "$1" >/dev/null 2>&1; }
partlabels() { sgdisk -p "$1" 2>/dev/null | awk '/^ +[0-9]+ /{printf "%s ", $7}'; }

# 0: live, with units
log "boot 0: live, Ignition enables lab-hello.service and lab-fail.service"
boot 0 "$BASE ignition.config.url=http://10.77.0.1:8080/live.ign" || fail_boot 0 "no poweroff within ${TIMEOUT}s"
SECS[0]=$BOOT_SECS
l=$(line 0 'LAB-IGNITION-CLIENT ')
[[ $l == "LAB-IGNITION-CLIENT fetch=0 files=0 platform=metal" ]] || fail_boot 0 "Ignition: ${l:-no LAB-IGNITION-CLIENT line}"
l=$(line 0 'LAB-HELLO ')
check "boot 0: lab-hello.service ran its ExecStart (the script Ignition wrote): $l" [ "$l" = "LAB-HELLO one two" ]
l=$(line 0 'LAB-UNIT lab-hello')
check "boot 0: $l" [ "$l" = "LAB-UNIT lab-hello.service rc=0" ]
l=$(line 0 'LAB-UNIT lab-fail')
check "boot 0: $l" [ "$l" = "LAB-UNIT lab-fail.service rc=3" ]

# 1: live, install to disk-b
log "boot 1: live, coreos.inst.install_dev=/dev/disk/by-id/virtio-disk-b"
boot 1 "$BASE $INSTALL" || fail_boot 1 "no reboot within ${TIMEOUT}s"
SECS[1]=$BOOT_SECS
l=$(line 1 'LAB-INSTALL ')
[[ -n $l ]] || fail_boot 1 "no LAB-INSTALL line"
check "boot 1: $l" [ "$l" = "LAB-INSTALL rc=0 dev=/dev/disk/by-id/virtio-disk-b" ]
check "boot 1: the guest rebooted (reboot: Restarting system)" grep -aq 'reboot: Restarting system' "$WORK/console-1.log"
l=$(grep -a -m1 '^coreos-installer install ' "$WORK/console-1.log" || true)
log "boot 1: the service ran: $l"
check "boot 1: coreos-installer was given the install device, Ignition URL, image URL, --insecure and the first-boot ip=" \
  grep -aqF "coreos-installer install /dev/disk/by-id/virtio-disk-b --ignition-url http://10.77.0.1:8080/config.ign --insecure-ignition --firstboot-args rd.neednet=1 ip=10.77.0.50::10.77.0.1:255.255.255.0:lab:eth0:none  --image-url http://10.77.0.1:8080/metal.raw.xz ${PLATFORM_ID:+--platform $PLATFORM_ID }--insecure --fetch-retries infinite" "$WORK/console-1.log"
check "boot 1: coreos-installer said Install complete." grep -aq '^Install complete.' "$WORK/console-1.log"
# What it wrote: the image as it is, but for the boot file system (partition
# 3, 6-46 MiB), where it put the Ignition config and the first-boot args.
MiB=$((1024 * 1024))
xz -dc "$IMAGES/lab/metal.raw.xz" >"$WORK/image.raw"
same_range() { cmp -s -i "$1:$1" -n "$2" "$WORK/image.raw" "$WORK/disk-b.img"; }
outside_boot() { same_range 0 $((6 * MiB)) && same_range $((46 * MiB)) $((18 * MiB)); }
check "disk-b: the image's bytes outside the boot partition (0-6 MiB, 46-64 MiB)" outside_boot
dd if="$WORK/disk-b.img" of="$WORK/boot-part.img" bs=1M skip=6 count=40 status=none
rm -f "$WORK/image.raw"
fs() { debugfs -R "$1" "$WORK/boot-part.img" 2>/dev/null; }
l=$(fs 'cat /ignition.firstboot')
check "disk-b boot: ignition.firstboot: $l" [ "$l" = 'set ignition_network_kcmdline="rd.neednet=1 ip=10.77.0.50::10.77.0.1:255.255.255.0:lab:eth0:none "' ]
check "disk-b boot: /ignition/config.ign is config.ign" [ "$(fs 'cat /ignition/config.ign' | sha256sum | cut -d' ' -f1)" = "$WANT_SHA" ]
check "disk-b boot: /ignition/config.ign mode 0600, /ignition 0700" \
  [ "$(fs 'stat /ignition/config.ign' | grep -o 'Mode: *[0-7]*' | tr -s ' ')/$(fs 'stat /ignition' | grep -o 'Mode: *[0-7]*' | tr -s ' ')" = "Mode: 0600/Mode: 0700" ]
log "boot 1: the boot file system after the install: $(fs 'ls -p /' | awk -F/ 'NF > 5 && $6 != "." && $6 != ".." {printf "%s ", $6}')"
rm -f "$WORK/boot-part.img"

# 2 and 3: from disk
for n in 2 3; do
  log "boot $n: from disk (SeaBIOS boots disk-b, the install disk)"
  boot $n || fail_boot $n "no poweroff within ${TIMEOUT}s"
  SECS[$n]=$BOOT_SECS
  l=$(line $n 'LAB-DISK-BOOT')
  [[ -n $l ]] || fail_boot $n "no LAB-DISK-BOOT line"
  check "boot $n: $l" [ "$l" = "LAB-DISK-BOOT ignition-sha256=$WANT_SHA boots=$((n - 1))" ]
  cmdline=$(line $n 'LAB-DISK-CMDLINE ')
  if [[ $n == 2 ]]; then
    check "boot $n: first boot: ignition.firstboot and the ip= coreos-installer kept: $cmdline" \
      grep -qE ' ignition.firstboot rd.neednet=1 ip=10.77.0.50::10.77.0.1:255.255.255.0:lab:eth0:none( |$)' <<<"$cmdline"
  else
    check "boot $n: no ignition.firstboot any more: $cmdline" without_word ignition.firstboot "$cmdline"
  fi
  bls=$(line $n 'LAB-DISK-BLS ')
  check "boot $n: the BLS entry: $bls" grep -qw "ignition.platform.id=${PLATFORM_ID:-metal}" <<<"$bls"
done

# --- the disks and the server's log -------------------------------------------
check "disk-a: blkid -p finds no signature" no_signature "$WORK/disk-a.img"
check "disk-a: all zeros" cmp -s -n "$(stat -c %s "$WORK/disk-a.img")" "$WORK/disk-a.img" /dev/zero
check "disk-b: GPT with BIOS-BOOT, EFI-SYSTEM, boot, root" [ "$(partlabels "$WORK/disk-b.img")" = "BIOS-BOOT EFI-SYSTEM boot root " ]
for req in '"GET /config.ign HTTP/1.1" 200' '"GET /metal.raw.xz.sig HTTP/1.1" 404' '"GET /metal.raw.xz HTTP/1.1" 200'; do
  check "server: $req from the guest" grep -qF "10.77.0.50 - - " <(grep -F "$req" "$WORK/http.log")
done

log "times: live+units ${SECS[0]}s, live+install ${SECS[1]}s, disk boot 1 ${SECS[2]}s, disk boot 2 ${SECS[3]}s; whole run $(since "$T_RUN")s"
harness_verdict
