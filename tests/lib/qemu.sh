# shellcheck shell=bash
# shellcheck disable=SC2034  # FW_*, GUEST_*, WANT_* and T_QEMU are for the scripts
# shellcheck disable=SC2054  # commas inside QEMU arguments are intended
# Lab VMs: a QEMU guest network-booting from the lab namespace, for the
# scripts that start one (tests/lab/netboot.sh over IPv4, tests/lab/netboot6.sh
# over IPv6; tests/lab/catalog-netboot.sh and tests/container/e2e.sh boot
# through netboot.sh). Source it after tests/lib/harness.sh:
#
#   . tests/lib/harness.sh
#   . tests/lib/qemu.sh
#   qemu_firmware "$FIRMWARE" || usage     # FW_* below, for that variant
#   harness_init netboot --work "$WORKDIR"
#   lab_netns labnet-$$; lab_tap tap0      # $NS, br0, tap0
#   start_bootd ...                        # the server under test, in $NS
#   qemu_start tap0 "$MAC"                 # QEMU_PID, T_QEMU, $WORK/serial.log
#   (or qemu_start_image tap0 "$MAC" KERNEL INITRD ARGS: an image boot,
#   tests/lab/platform-ignition.sh)
#   wait_for "$TIMEOUT" qemu_marker_step   # GUEST_LINE / GUEST_END
#   ignition_expected "$BOOTD" "$NODE" "$SITE" "$WORK/state"   # WANT_SHA
#
# --- Adding a firmware variant --------------------------------------------------
# A variant is one entry in qemu_firmware's table below, plus one line in
# tests/run.sh (lane_b) that boots a node with it. netboot.sh takes every
# variant with FW_FAMILY=4, netboot6.sh every one with FW_FAMILY=6, by its
# name (--firmware NAME); neither script names variants itself. For example
# SeaBIOS + iPXE on QEMU's q35 machine instead of the default i440fx:
#   1. in qemu_firmware:
#        seabios-ipxe-q35) FW_MACHINE=q35 FW_ABOUT="SeaBIOS + iPXE on QEMU's q35 machine" ;;
#   2. in tests/run.sh, lane_b:
#        tb "netboot SeaBIOS + iPXE on q35" e2e $(boot bootstrap) --firmware seabios-ipxe-q35
# (that entry alone boots: PASS netboot seabios-ipxe-q35 bootstrap 10.7s). A
# field left unset keeps the default set at the top of qemu_firmware (the
# seabios-ipxe variant). Run the new line by hand once (tests/lab/README.md);
# `tests/lab/netboot.sh --help` (netboot6.sh --help) lists the variants.

# qemu_firmware NAME: the variant's fields, or 1 for a name not in the table.
#   FW_FAMILY   4: booted by netboot.sh (DHCPv4); 6: by netboot6.sh (DHCPv6)
#   FW_QEMU     the QEMU binary
#   FW_MACHINE  -machine's type and options ("" = QEMU's default, i440fx)
#   FW_BIOS     seabios | ovmf (pflash, a fresh copy of the variables) | slof
#   FW_ROM      1: the NIC's own option ROM (iPXE, from ipxe-qemu) boots;
#               0: romfile= (none): the firmware's own network stack boots
#   FW_FWCFG    OVMF switches (opt/org.tianocore/KEY=VALUE through -fw_cfg)
#   FW_NICS     the NIC models that work, the default first
#   FW_TFTP     1: bootd's TFTP root must hold ipxe.efi/core.elf (tftp-root.sh)
#   FW_WAIT     marker: the lab guest's LAB-IGNITION line on the console;
#               grub: GRUB loading the node's config (no ppc64le guest kernel)
#   FW_TIMELINE the phases bootd's timeline of the node must show (netboot.sh)
#   FW_CLIENT   how bootd's DHCPv6 log names the firmware's boot request
#               (netboot6.sh: the exchange must be there)
#   FW_FETCH    a line bootd must have logged: the firmware fetching its
#               loader the variant's own way ("" = nothing more)
#   FW_ABOUT    one line for usage texts
qemu_firmware() {
    FW_NAME=$1 FW_FAMILY=4 FW_QEMU=qemu-system-x86_64 FW_MACHINE="" FW_BIOS=seabios FW_ROM=1
    FW_FWCFG=() FW_NICS="virtio-net-pci e1000" FW_TFTP=0 FW_WAIT=marker
    FW_TIMELINE=dhcp,script,kernel,initramfs,ignition FW_CLIENT="" FW_FETCH="" FW_ABOUT=""
    case $1 in
        # --- IPv4 (tests/lab/netboot.sh) ---
        seabios-ipxe)
            FW_ABOUT="SeaBIOS + the NIC's iPXE option ROM, HTTP boot" ;;
        ovmf-ipxe)
            FW_BIOS=ovmf FW_ABOUT="OVMF + the NIC's iPXE EFI option ROM, HTTP boot" ;;
        # OVMF has a virtio-net driver but none for e1000: without the NIC's
        # ROM only virtio works.
        ovmf-pxe)
            FW_BIOS=ovmf FW_ROM=0 FW_NICS=virtio-net-pci FW_TFTP=1
            FW_TIMELINE=dhcp,tftp,script,kernel,initramfs,ignition
            FW_ABOUT="OVMF, NIC ROM off: EDK2's PXE -> ipxe.efi over TFTP -> iPXE -> HTTP boot" ;;
        # pseries + SLOF, no default devices. Debian's GRUB 2.06 ofnet never
        # registers SLOF's virtio-net-pci: spapr-vlan (PowerVM's l-lan) only.
        # The cap-* settings only silence TCG warnings.
        slof-grub)
            FW_QEMU=qemu-system-ppc64 FW_BIOS=slof FW_NICS=spapr-vlan FW_TFTP=1 FW_WAIT=grub
            FW_MACHINE=pseries,cap-cfpc=broken,cap-sbbc=broken,cap-ibs=broken,cap-ccf-assist=off
            FW_ABOUT="ppc64 pseries + SLOF: core.elf (GRUB) over TFTP -> the node's grub.cfg" ;;
        # --- IPv6 (tests/lab/netboot6.sh) ---
        ovmf-pxe6)
            FW_FAMILY=6 FW_BIOS=ovmf FW_ROM=0 FW_NICS=virtio-net-pci FW_TFTP=1
            FW_FWCFG=(IPv4PXESupport=n) FW_CLIENT="UEFI x86 PXE"
            FW_ABOUT="OVMF, NIC ROM and IPv4 PXE off: EDK2's PXE over DHCPv6 -> ipxe.efi over TFTP -> iPXE" ;;
        ovmf-http6)
            FW_FAMILY=6 FW_BIOS=ovmf FW_ROM=0 FW_NICS=virtio-net-pci FW_TFTP=1
            FW_FWCFG=(IPv4PXESupport=n IPv6PXESupport=n) FW_CLIENT="UEFI HTTP Boot"
            FW_FETCH='file served path=ipxe.efi '
            FW_ABOUT="OVMF, NIC ROM and PXE off: UEFI HTTP Boot over IPv6 -> ipxe.efi over HTTP -> iPXE" ;;
        ovmf-ipxe6)
            FW_FAMILY=6 FW_BIOS=ovmf FW_NICS=virtio-net-pci FW_TFTP=1 FW_CLIENT=iPXE
            FW_ABOUT="OVMF + the NIC's iPXE EFI ROM: iPXE over DHCPv6 -> HTTP" ;;
        *) return 1 ;;
    esac
}

# qemu_firmwares FAMILY: the names of the variants of FAMILY (4 or 6), one a
# line, each with its FW_ABOUT (for usage texts).
qemu_firmwares() {
    local n
    # The table's entries: its case labels.
    # shellcheck disable=SC2013  # the names are words
    for n in $(awk '/^qemu_firmware\(\)/ { f = 1 } f && /^}/ { f = 0 }
                    f && match($0, /^        [a-z0-9][a-z0-9-]*\)/) { print substr($0, 9, RLENGTH - 9) }' "${BASH_SOURCE[0]}"); do
        # (in a subshell: the caller's FW_* stay; || true: set -e)
        (qemu_firmware "$n" && [[ $FW_FAMILY == "$1" ]] && printf '  %-14s %s\n' "$n" "$FW_ABOUT") || true
    done
}

# netboot_option OPTION VALUE...: one of the options netboot.sh and
# netboot6.sh share (--bootd, --site, --node, --mac, --firmware, --timeout,
# --workdir) into BOOTD, SITE, NODE, MAC, FIRMWARE, TIMEOUT or WORKDIR, for
# the caller to shift 2; 1 for any other option.
#   while [[ $# -gt 0 ]]; do
#     if netboot_option "$@"; then shift 2; continue; fi
#     case $1 in ... esac
#   done
netboot_option() {
    case $1 in
        --bootd) BOOTD=$2 ;;
        --site) SITE=$2 ;;
        --node) NODE=$2 ;;
        --mac) MAC=$2 ;;
        --firmware) FIRMWARE=$2 ;;
        --timeout) TIMEOUT=$2 ;;
        --workdir) WORKDIR=$2 ;;
        *) return 1 ;;
    esac
}

# netboot_workdir NAME FILE...: a boot's folder, kept after the run: WORKDIR
# (default REPO/target/lab-runs/NODE-FIRMWARE-PID) made and absolute, the
# FILEs (and folders) an earlier boot there left removed and nothing else;
# then harness_init "NAME FIRMWARE NODE" with it as $WORK, and $WORK/state.
netboot_workdir() {
    local name=$1 f
    shift
    WORKDIR=${WORKDIR:-$REPO/target/lab-runs/$NODE-$FIRMWARE-$$}
    mkdir -p "$WORKDIR"
    WORKDIR=$(readlink -f "$WORKDIR")
    for f in "$@"; do
        rm -rf "${WORKDIR:?}/$f"
    done
    harness_init "$name $FIRMWARE $NODE" --work "$WORKDIR"
    mkdir -p "$WORK/state"
}

# netboot_artifacts IMAGES TFTP_ROOT: what the site points at, built or
# taken from the cache: the lab guest's kernel and initramfs in IMAGES
# (tests/lab/guest.sh) and, for a variant that boots over TFTP (FW_TFTP=1),
# bootd's TFTP root (tests/lab/tftp-root.sh). The caller's `die` on failure.
netboot_artifacts() {
    "$REPO/tests/lab/guest.sh" "$1" >&2 || die "guest.sh failed"
    if [[ $FW_TFTP == 1 ]]; then
        "$REPO/tests/lab/tftp-root.sh" "$2" >&2 || die "tftp-root.sh failed"
    fi
}

# qemu_nic_ok NIC: NIC is one of the variant's FW_NICS.
qemu_nic_ok() { [[ " $FW_NICS " == *" $1 "* ]]; }

# qemu_start TAP MAC [NIC [QEMU_ARG...]]: the variant's QEMU (qemu_firmware
# first) inside $NS, its NIC (default: the first of FW_NICS; "" for it) on
# TAP with MAC, TCG (KVM is not usable here), no reboot, network boot only,
# plus QEMU_ARGs (a second NIC: tests/lab/bond-vlan.sh). The console goes to
# $WORK/serial.log (emptied), QEMU's own output to $WORK/qemu.log, the
# firmware's debug port (SeaBIOS's log) to $WORK/firmware-debug.log. The PID
# is in QEMU_PID (and PIDS), the start time in T_QEMU.
# -display none rather than -nographic: -nographic puts the monitor on
# stdio, and a backgrounded QEMU reading a tty is stopped by SIGTTIN.
# SLOF: the console (spapr-vty) is a pair of FIFOs, $WORK/console.in/.out;
# console.out is copied into serial.log, and qemu_type writes console.in.
qemu_start() {
    local tap=$1 mac=$2 nic=${3:-${FW_NICS%% *}} kv
    local dev="$nic,netdev=n0,mac=$mac" qemu=()
    shift $(($# < 3 ? $# : 3))
    : >"$WORK/serial.log"
    if [[ $FW_BIOS == slof ]]; then
        rm -f "$WORK/console.in" "$WORK/console.out"
        mkfifo "$WORK/console.in" "$WORK/console.out"
        # The NIC is the first (only) boot device.
        qemu=("$FW_QEMU" -accel tcg -machine "$FW_MACHINE" -nodefaults -m 1024 -smp 1
            -display none -monitor none -no-reboot
            -chardev "pipe,id=con,path=$WORK/console" -serial chardev:con
            -netdev "tap,id=n0,ifname=$tap,script=no,downscript=no"
            -device "$dev,bootindex=0")
        # cat blocks in open() until QEMU opens the FIFO, and ends at QEMU's exit.
        spawn --log "$WORK/serial.log" --append cat "$WORK/console.out"
        # Our end of console.in, opened read-write so that neither open()
        # nor a write ever blocks, whether QEMU is there or not.
        exec {QEMU_CONSOLE}<>"$WORK/console.in"
    else
        # graphics=off: SeaBIOS then mirrors its text console (its own and
        # iPXE's messages) to the serial port; OVMF always does.
        [[ $FW_ROM == 1 ]] || dev+=",romfile="
        qemu=("$FW_QEMU" -accel tcg -machine "${FW_MACHINE:+$FW_MACHINE,}graphics=off" -m 512 -smp 1
            -display none -monitor none -no-reboot -boot order=n
            -serial "file:$WORK/serial.log"
            -netdev "tap,id=n0,ifname=$tap,script=no,downscript=no" -device "$dev"
            -chardev "file,id=fwdbg,path=$WORK/firmware-debug.log"
            -device isa-debugcon,iobase=0x402,chardev=fwdbg)
        if [[ $FW_BIOS == ovmf ]]; then
            # OVMF from the ovmf package; with the NIC's ROM (efi-virtio.rom
            # from ipxe-qemu carries iPXE's EFI driver) network boot is iPXE.
            cp /usr/share/OVMF/OVMF_VARS_4M.fd "$WORK/OVMF_VARS.fd"
            qemu+=(-drive if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd
                -drive "if=pflash,format=raw,unit=1,file=$WORK/OVMF_VARS.fd")
        fi
        for kv in "${FW_FWCFG[@]}"; do qemu+=(-fw_cfg "name=opt/org.tianocore/${kv%%=*},string=${kv#*=}"); done
    fi
    T_QEMU=$(now)
    spawn --ns "$NS" --log "$WORK/qemu.log" "${qemu[@]}" "$@"
    QEMU_PID=$SPAWNED
}

# qemu_start_image TAP MAC KERNEL INITRD APPEND [QEMU_ARG...]: the lab guest
# started the way a cloud instance boots its image, without the network
# boot: QEMU loads KERNEL and INITRD itself with the command line APPEND
# (TCG, 512 MiB, virtio-net with MAC on TAP, its ROM off, no reboot), plus
# QEMU_ARGs (a config drive). Console, logs, QEMU_PID and T_QEMU as
# qemu_start's.
qemu_start_image() {
    local tap=$1 mac=$2 kernel=$3 initrd=$4 append=$5
    shift 5
    : >"$WORK/serial.log"
    T_QEMU=$(now)
    spawn --ns "$NS" --log "$WORK/qemu.log" qemu-system-x86_64 -accel tcg -m 512 -smp 1 \
        -display none -monitor none -no-reboot -serial "file:$WORK/serial.log" \
        -netdev "tap,id=n0,ifname=$tap,script=no,downscript=no" -device "virtio-net-pci,netdev=n0,mac=$mac,romfile=" \
        -kernel "$kernel" -initrd "$initrd" -append "$append" "$@"
    QEMU_PID=$SPAWNED
}

# qemu_type TEXT: TEXT and a carriage return typed at the SLOF guest's console.
qemu_type() { printf '%s\r' "$1" >&"$QEMU_CONSOLE"; }

# clean FILE: a console log without CRs, ANSI escapes and iPXE's backspace
# countdown.
clean() {
    tr -d '\r' <"$1" | sed -e 's/\x1b\[[0-9;=?]*[a-zA-Z]//g' -e 's/\x1b[a-zA-Z]//g' -e 's/\x08 \x08//g' -e 's/\x08//g'
}

# guest_marker: the lab guest's first marker line (tests/lab/guest.sh),
# "LAB-IGNITION sha256=... bytes=... url=..." or "LAB-IGNITION-FAILED
# reason", from $WORK/serial.log; nothing before it prints one.
guest_marker() {
    # A plain grep first: this runs ten times a second beside a TCG guest.
    grep -aqF LAB-IGNITION "$WORK/serial.log" 2>/dev/null || return 0
    clean "$WORK/serial.log" | grep -a -m1 -E '^LAB-IGNITION(-FAILED)? ' || true
}

# qemu_marker_step [GIVEUP_ERE]: one look at the guest, for wait_for:
# 0 once it is over, with GUEST_END set: "marker" (the line in GUEST_LINE),
# "exited" (QEMU stopped without one) or "gave-up" (the console matched
# GIVEUP_ERE: the firmware gave up, no need to wait for the timeout).
#   wait_for "$TIMEOUT" qemu_marker_step "$GIVEUP" || timed out
qemu_marker_step() {
    GUEST_END="" GUEST_LINE=$(guest_marker)
    if [[ -n $GUEST_LINE ]]; then GUEST_END=marker; return 0; fi
    if ! alive "$QEMU_PID"; then
        # The marker may have landed just before poweroff.
        GUEST_LINE=$(guest_marker)
        if [[ -n $GUEST_LINE ]]; then GUEST_END=marker; else GUEST_END=exited; fi
        return 0
    fi
    if [[ -n ${1:-} ]] && grep -aqE "$1" "$WORK/serial.log"; then
        sleep 0.5     # the firmware's next lines say why
        GUEST_END=gave-up
        return 0
    fi
    return 1
}

# qemu_off: QEMU has exited (for wait_for).
qemu_off() { ! alive "$QEMU_PID"; }

# marker_field LINE KEY: KEY's value in a marker line (sha256, bytes, url).
marker_field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }

# ignition_expected BOOTD NODE SITE STATE_DIR: the Ignition bytes bootd
# renders for NODE (`BOOTD render ignition`, on the host, the same state
# directory as the server's) in $WORK/expected.ign, their sha256 in WANT_SHA
# and size in WANT_BYTES; 1 when bootd cannot render it (its words in
# RENDER_ERROR, the log in $WORK/render.log).
ignition_expected() {
    RENDER_ERROR=""
    if ! "$1" render ignition "$2" --site "$3" --state-dir "$4" >"$WORK/expected.ign" 2>"$WORK/render.log"; then
        RENDER_ERROR=$(tail -n 5 "$WORK/render.log" | tr '\n' ' ')
        return 1
    fi
    WANT_SHA=$(sha256sum "$WORK/expected.ign" | cut -d' ' -f1)
    WANT_BYTES=$(stat -c %s "$WORK/expected.ign")
}

# qemu_fail_logs [LINES]: the end of the console (cleaned) and of bootd's log,
# for a FAIL message.
qemu_fail_logs() {
    local n=${1:-40}
    if [[ -f $WORK/serial.log ]]; then
        echo "--- last $n lines of $WORK/serial.log"
        clean "$WORK/serial.log" | tail -n "$n"
    fi
    echo "--- last $n lines of $WORK/bootd.log"
    tail -n "$n" "$WORK/bootd.log" 2>/dev/null || true
}
