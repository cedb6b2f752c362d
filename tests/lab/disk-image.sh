#!/usr/bin/env bash
# Build the lab's metal disk image: what coreos-installer writes to a node's
# disk (coreos.inst.image_url), laid out as Fedora CoreOS/RHCOS images are,
# and bootable by SeaBIOS, so that a test can boot the installed disk.
#
#   GPT  1 BIOS-BOOT   1 MiB   GRUB 2.06 i386-pc core.img (Debian's grub-pc-bin)
#        2 EFI-SYSTEM  4 MiB   FAT, label EFI-SYSTEM, empty (no UEFI boot here)
#        3 boot       40 MiB   ext4, label boot
#        4 root       16 MiB   ext4, label root, empty
#   MBR: GRUB's boot.img (with the protective MBR's partition table kept).
#
# The boot file system holds what coreos-installer looks for:
#   grub2/grub.cfg        FCOS's grub.cfg, blscfg replaced by one menuentry
#                         (Debian's GRUB has no blscfg); it keeps the
#                         CONSOLE-SETTINGS-START/END markers (--console,
#                         --platform), reads ignition.firstboot (the
#                         first-boot network args coreos-installer appends
#                         there) and user.cfg/console.cfg like FCOS's
#   ignition.firstboot    the first-boot stamp (empty, as in FCOS images;
#                         coreos-installer fails without it when it has
#                         --firstboot-args to write)
#   loader/entries/lab-1.conf   a BLS entry whose options carry
#                         ignition.platform.id=metal (coreos-installer edits
#                         it for --platform, --console, --append-karg)
#   lab/vmlinuz           the lab's kernel (OUTDIR/lab/kernel, guest.sh)
#   lab/initramfs.img     the "installed OS": busybox /init that mounts the
#                         boot partition (label boot) and prints on ttyS0
#                           LAB-DISK-CMDLINE <its kernel command line>
#                           LAB-DISK-BLS <the BLS entry's options line>
#                           LAB-DISK-BOOT ignition-sha256=<hex|none> boots=<n>
#                         (sha256 of /boot/ignition/config.ign, which
#                         coreos-installer writes; n counts this disk's boots
#                         in /boot/lab/boots), removes /boot/ignition.firstboot
#                         when booted with ignition.firstboot (as FCOS's
#                         coreos-ignition-firstboot-complete does), powers off
#                         (LAB-DISK-BOOT-FAILED <reason> when it cannot).
# Made without loop devices: sgdisk on the image file, mkfs.ext4 -d and
# mformat at the partitions' offsets, GRUB's boot sector and core.img patched
# as grub-bios-setup would (that tool is not in grub-pc-bin).
#
# Usage: tests/lab/disk-image.sh [OUTDIR]     (default target/lab-images)
# Output: OUTDIR/lab/metal.raw.xz (xz, as FCOS ships metal images; 64 MiB raw)
#         OUTDIR/lab/metal.raw.xz.sha256 (sha256sum format)
# Up to date (nothing done) when both are newer than this script and the kernel.
set -euo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
# shellcheck source=tests/lib/harness.sh
. "$(dirname "$SELF")/../lib/harness.sh"   # sets REPO
OUTDIR=${1:-$REPO/target/lab-images}
mkdir -p "$OUTDIR"
OUTDIR=$(readlink -f "$OUTDIR")
LAB=$OUTDIR/lab
IMAGE=$LAB/metal.raw.xz
SUMS=$IMAGE.sha256

# The kernel (and the kernel package, for its modules) come from guest.sh.
"$REPO/tests/lab/guest.sh" "$OUTDIR" >&2 || { echo "FAIL disk-image.sh: guest.sh failed"; exit 1; }
KERNEL=$LAB/kernel

harness_init disk-image.sh --work "$(mktemp -d "$OUTDIR/.disk-build.XXXXXX")"
# shellcheck disable=SC2016  # $WORK is expanded at exit
on_exit 'rm -rf "$WORK"'

if [[ -s $IMAGE && -s $SUMS && $IMAGE -nt $SELF && $IMAGE -nt $KERNEL && $SUMS -nt $IMAGE ]]; then
  log "up to date: $IMAGE"
  exit 0
fi
T0=$(now)
for tool in sgdisk mkfs.ext4 mformat grub-mkimage xz cpio gzip depmod modinfo dpkg-deb; do
  command -v "$tool" >/dev/null || fail "missing $tool (run tests/lab/deps.sh)"
done
GRUB_DIR=/usr/lib/grub/i386-pc
[[ -f $GRUB_DIR/boot.img ]] || fail "$GRUB_DIR/boot.img missing (install grub-pc-bin)"
BUSYBOX=/bin/busybox
[[ -x $BUSYBOX && $(ldd "$BUSYBOX" 2>&1 || true) == *"not a dynamic"* ]] || fail "$BUSYBOX missing or not static (install busybox-static)"
DEB=$(find "$OUTDIR/cache" -maxdepth 1 -name 'linux-image-*.deb' | head -n1)
[[ -n $DEB ]] || fail "no kernel package in $OUTDIR/cache (guest.sh keeps it there)"

# --- the installed OS's initramfs ------------------------------------------------
dpkg-deb -x "$DEB" "$WORK/k"
KVER=$(basename "$(find "$WORK/k/lib/modules" -mindepth 1 -maxdepth 1 -type d | head -n1)")
KMOD=$WORK/k/lib/modules/$KVER
cmp -s "$WORK/k/boot/vmlinuz-$KVER" "$KERNEL" || fail "$KERNEL is not the kernel of $(basename "$DEB")"
R=$WORK/initramfs
mkdir -p "$R"/{bin,dev,proc,sys,boot,lib/modules/"$KVER"}
cp "$BUSYBOX" "$R/bin/busybox"
for a in $("$BUSYBOX" --list); do [[ $a == busybox ]] || ln -sf busybox "$R/bin/$a"; done
mknod -m 600 "$R/dev/console" c 5 1
mknod -m 666 "$R/dev/null" c 1 3
# virtio disks and ext4 (modules in Debian's kernel), with their dependencies;
# ext4's crc32c comes through the crypto API (a soft dependency): crc32c_generic.
declare -A seen=()
add_mod() {
  local m=${1//-/_} p d
  [[ -n ${seen[$m]:-} ]] && return 0
  seen[$m]=1
  p=$(find "$KMOD/kernel" -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" | head -n1)
  [[ -n $p ]] || fail "module $m not found in $KVER"
  install -D -m 644 "$p" "$R/lib/modules/$KVER/${p#"$KMOD"/}"
  for d in $(modinfo -F depends "$p" | tr ',' ' '); do add_mod "$d"; done
}
for m in virtio_pci virtio_blk crc32c_generic ext4; do add_mod "$m"; done
cp "$KMOD"/modules.order "$KMOD"/modules.builtin "$KMOD"/modules.builtin.modinfo "$R/lib/modules/$KVER/"
depmod -b "$R" "$KVER"
cat >"$R/init" <<'INIT'
#!/bin/sh
# The lab's "installed OS" (tests/lab/disk-image.sh). Always ends in poweroff -f.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
exec </dev/console >/dev/console 2>&1
dmesg -n 1
marker() { if [ -c /dev/ttyS0 ]; then echo "$*" >/dev/ttyS0; else echo "$*"; fi; }
finish() { sync; poweroff -f; sleep 30; }
failed() { marker "LAB-DISK-BOOT-FAILED $*"; finish; }
for m in virtio_pci virtio_blk crc32c_generic ext4; do modprobe "$m"; done
# The boot partition by its file system label, as GRUB and FCOS find it.
DEV="" i=0
while [ $i -lt 50 ]; do
  DEV=$(findfs LABEL=boot 2>/dev/null) && [ -n "$DEV" ] && break
  sleep 0.1; i=$((i+1))
done
[ -n "$DEV" ] || failed "no file system labelled boot"
mount -t ext4 "$DEV" /boot || failed "cannot mount $DEV"
mkdir -p /boot/lab
n=$(cat /boot/lab/boots 2>/dev/null || echo 0)
n=$((n+1))
echo "$n" >/boot/lab/boots
SUM=none
[ -f /boot/ignition/config.ign ] && SUM=$(sha256sum /boot/ignition/config.ign | cut -d' ' -f1)
marker "LAB-DISK-CMDLINE $(cat /proc/cmdline)"
marker "LAB-DISK-BLS $(sed -n 's/^options //p' /boot/loader/entries/*.conf 2>/dev/null | head -n1)"
# First boot over: FCOS's coreos-ignition-firstboot-complete removes the stamp.
case " $(cat /proc/cmdline) " in *" ignition.firstboot "*) rm -f /boot/ignition.firstboot ;; esac
sync
umount /boot
echo "lab-disk: boot partition $DEV, boot $n"
marker "LAB-DISK-BOOT ignition-sha256=$SUM boots=$n"
finish
INIT
chmod 755 "$R/init"

# --- the boot file system ----------------------------------------------------------
B=$WORK/boot
mkdir -p "$B/grub2" "$B/lab" "$B/loader/entries"
cp "$KERNEL" "$B/lab/vmlinuz"
(cd "$R" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) | gzip -9 >"$B/lab/initramfs.img"
: >"$B/ignition.firstboot"
# shellcheck disable=SC2016  # GRUB expands $ignition_firstboot
OPTIONS='root=LABEL=root rw console=ttyS0,115200n8 ignition.platform.id=metal $ignition_firstboot'
cat >"$B/loader/entries/lab-1.conf" <<EOF
title Lab installed OS
version 1
options $OPTIONS
linux /lab/vmlinuz
initrd /lab/initramfs.img
EOF
# FCOS's grub.cfg (coreos-assembler src/grub.cfg), its blscfg replaced by the
# entry above written out: Debian's GRUB 2.06 has no blscfg module.
cat >"$B/grub2/grub.cfg" <<EOF
set pager=1
search --label boot --set boot --no-floppy
set root=\$boot

if [ -f \${config_directory}/grubenv ]; then
  load_env -f \${config_directory}/grubenv
elif [ -s \$prefix/grubenv ]; then
  load_env
fi

if [ -f \$prefix/console.cfg ]; then
  # Source in any GRUB console settings if provided by the user/platform
  source \$prefix/console.cfg
fi

# Any non-default console settings will be inserted here.
# CONSOLE-SETTINGS-START
serial --speed=115200
terminal_input serial console
terminal_output serial console
# CONSOLE-SETTINGS-END

set timeout=1

# Determine if this is a first boot and set the \${ignition_firstboot} variable
# which is used in the kernel command line.
set ignition_firstboot=""
if [ -f "/ignition.firstboot" ]; then
    # Default networking parameters to be used with ignition.
    set ignition_network_kcmdline=''

    # Source in the \`ignition.firstboot\` file which could override the
    # above \$ignition_network_kcmdline with static networking config.
    # coreos-installer appends its --firstboot-args there.
    source "/ignition.firstboot"

    set ignition_firstboot="ignition.firstboot \${ignition_network_kcmdline}"
fi

if [ -f \$prefix/user.cfg ]; then
  source \$prefix/user.cfg
fi

# loader/entries/lab-1.conf (blscfg would read it)
menuentry 'Lab installed OS' {
  linux /lab/vmlinuz $OPTIONS
  initrd /lab/initramfs.img
}
EOF

# --- the disk ----------------------------------------------------------------------
IMG=$WORK/metal.raw
MiB=$((1024 * 1024))
truncate -s 64M "$IMG"
# Fixed GUIDs, so that the same inputs make the same image.
sgdisk -U 00000000-0000-4000-a000-000000000001 \
  -n 1:1M:+1M -t 1:ef02 -c 1:BIOS-BOOT -u 1:00000000-0000-4000-a000-000000000011 \
  -n 2:2M:+4M -t 2:ef00 -c 2:EFI-SYSTEM -u 2:00000000-0000-4000-a000-000000000012 \
  -n 3:6M:+40M -t 3:8300 -c 3:boot -u 3:00000000-0000-4000-a000-000000000013 \
  -n 4:46M:+16M -t 4:8300 -c 4:root -u 4:00000000-0000-4000-a000-000000000014 \
  "$IMG" >"$WORK/sgdisk.log" 2>&1 || fail "sgdisk: $(cat "$WORK/sgdisk.log")"
[[ $(sgdisk -p "$IMG" | grep -c "^ *[0-9] ") == 4 ]] || fail "sgdisk made no 4 partitions: $(sgdisk -p "$IMG")"
# ext4 that both GRUB 2.06 and the 6.1 kernel read: no metadata_csum_seed nor
# orphan_file (e2fsprogs 1.47 features GRUB 2.06 does not know).
export E2FSPROGS_FAKE_TIME=1700000000
mkfs.ext4 -q -F -L boot -U 00000000-0000-4000-b000-000000000003 -O ^metadata_csum_seed,^orphan_file \
  -E "offset=$((6 * MiB)),root_owner=0:0" -d "$B" "$IMG" 40M
mkdir -p "$WORK/emptyroot"
mkfs.ext4 -q -F -L root -U 00000000-0000-4000-b000-000000000004 -O ^metadata_csum_seed,^orphan_file \
  -E "offset=$((46 * MiB)),root_owner=0:0" -d "$WORK/emptyroot" "$IMG" 16M
mformat -i "$IMG@@$((2 * MiB))" -T $((4 * MiB / 512)) -h 64 -s 32 -v EFI-SYSTEM -N 0e1a0002 ::

# GRUB: core.img with everything it needs built in, finding the boot file
# system by label (as FCOS's BIOS GRUB does), written into BIOS-BOOT.
cat >"$WORK/early.cfg" <<'EOF'
search --no-floppy --label boot --set root
set prefix=($root)/grub2
EOF
grub-mkimage -O i386-pc -d "$GRUB_DIR" -o "$WORK/core.img" -c "$WORK/early.cfg" -p /grub2 \
  biosdisk part_gpt ext2 search search_label normal configfile linux echo test serial terminal loadenv sleep
CORE_LBA=2048   # BIOS-BOOT's first sector
core_sectors=$(( ($(stat -c %s "$WORK/core.img") + 511) / 512 ))
((core_sectors <= 2048)) || fail "core.img is larger than BIOS-BOOT"
le() { # VALUE BYTES: VALUE little-endian, as printf escapes
  local v=$1 n=$2 s="" i
  for ((i = 0; i < n; i++)); do s+=$(printf '\\x%02x' $(((v >> (8 * i)) & 255))); done
  printf '%s' "$s"
}
patch() { # FILE OFFSET ESCAPED-BYTES
  # shellcheck disable=SC2059  # the bytes are printf escapes
  printf "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
# The first sector of core.img (diskboot) loads the rest: its block list, the
# 12 bytes at its end {start u64, len u16, segment u16}; grub-mkimage wrote
# len (sectors after the first) and segment 0x820, grub-bios-setup the start.
len=$(od -An -tu2 -j 508 -N 2 "$WORK/core.img" | tr -d ' ')
[[ $len == $((core_sectors - 1)) ]] || fail "core.img block list says $len sectors, not $((core_sectors - 1))"
patch "$WORK/core.img" 500 "$(le $((CORE_LBA + 1)) 8)"
dd if="$WORK/core.img" of="$IMG" bs=512 seek=$CORE_LBA conv=notrunc status=none
# The boot sector: boot.img's code (its first 440 bytes; the disk signature
# and the protective MBR's partition table after them stay), the sector of
# core.img at 0x5c, and the jump of the boot drive check at 0x66 replaced
# by two NOPs (a hard disk, as grub-bios-setup does).
dd if="$GRUB_DIR/boot.img" of="$IMG" bs=440 count=1 conv=notrunc status=none
patch "$IMG" $((0x5c)) "$(le $CORE_LBA 8)"
patch "$IMG" $((0x66)) '\x90\x90'
sgdisk -v "$IMG" >"$WORK/sgdisk-v.log" 2>&1 || fail "sgdisk -v: $(cat "$WORK/sgdisk-v.log")"

RAW_SUM=$(sha256sum "$IMG" | cut -d' ' -f1)
xz -T2 -6 -c "$IMG" >"$WORK/metal.raw.xz"
mv -f "$WORK/metal.raw.xz" "$IMAGE"
(cd "$LAB" && sha256sum "$(basename "$IMAGE")") >"$WORK/sums"
mv -f "$WORK/sums" "$SUMS"
log "built $IMAGE ($(stat -c %s "$IMAGE") bytes; raw 64 MiB sha256 $RAW_SUM) in $(since "$T0")s"
log "$(cat "$SUMS")"
