#!/usr/bin/env bash
# Install every Debian package the tests and benchmarks need (the Rust
# toolchain itself comes from tests/lab/rust.sh).
# Idempotent: if everything is already installed it returns without calling apt.
# Usage: sudo tests/lab/deps.sh        (Debian 12, root, no tty needed)
# Runs first on a fresh machine: the harness needs nothing at source time
# but bash and coreutils (not python3 nor curl, which this installs).
set -euo pipefail
# shellcheck source=tests/lib/harness.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../lib/harness.sh"
harness_init deps.sh

PKGS=(
  # C compiler and linker for the Rust build (rustc links with cc; mimalloc,
  # SQLite and ring compile C), and what tests/lab/rust.sh fetches rustup with
  build-essential curl ca-certificates
  # the source checks list the tracked files with `git ls-files` (a CI runner
  # has git; a fresh machine given the tree some other way may not)
  git
  # firmware + emulators
  qemu-system-x86 qemu-system-ppc qemu-utils seabios ipxe-qemu ipxe ovmf
  # grub-mkimage for the Open Firmware core.elf (tftp-root.sh; its powerpc modules
  # come from the ppc64el grub-ieee1275-bin .deb, fetched with apt-get download)
  grub-common
  # bootd's virtual-media ISOs (grub-mkrescue: BIOS and UEFI GRUB, xorriso, mtools
  # for the EFI system partition image); xorriso also reads them back in tests
  # and makes the lab's Power VS config drive (tests/lab/platform-ignition.sh)
  grub-pc-bin grub-efi-amd64-bin xorriso mtools
  # guest image building (guest.sh)
  busybox-static cpio gzip xz-utils zstd kmod
  # the real coreos-installer, built by tests/lab/coreos-installer.sh (cargo
  # install: its C libraries through pkg-config), and what the guest runs it
  # with (systemd-udevd, lsblk, blkid); the test disk image
  # (tests/lab/disk-image.sh: sgdisk, mkfs.ext4, mformat, grub-mkimage;
  # the agent's wipe test: sgdisk)
  pkg-config libzstd-dev liblzma-dev libssl-dev udev util-linux e2fsprogs gdisk
  # lab network + stand-in servers (netboot.sh)
  iproute2 dnsmasq-base python3 python3-yaml tcpdump procps openssl
  # the top-of-rack switch's LLDP the inspection agent reads (tests/controller/install-e2e.sh)
  lldpd
  # real Ignition client (+ ignition-validate) and benchmark peers
  ignition nginx wrk
  # TFTP clients for bootd's TFTP tests (clients only: the atftpd package would remove tftpd-hpa)
  atftp tftp-hpa
  # DHCP clients and load generator for bootd's DHCP interop tests
  isc-dhcp-client kea-admin
  # a relay agent that inserts option 82 (dhcrelay -a), in front of a rack
  # subnet (tests/lab/dhcp-interop.sh)
  isc-dhcp-relay
  # NetworkManager's initrd generator reads bootd's dracut network arguments
  # back (bootd/tests/it/host_network.rs); the daemon is never started
  network-manager
  # DHCPv6: a second client (dhcpcd), router advertisements with the M flag
  # for firmware in the IPv6 lab (radvd), and Kea's DHCPv6 server (bench/dhcp6)
  dhcpcd-base radvd kea-dhcp6-server
  # building busybox's udhcpc6 from Debian's source (tests/lab/udhcpc6.sh)
  dpkg-dev bzip2 xz-utils gpgv
  # a plain BOOTP client (PowerVM firmware's protocol) for the same tests
  bootpc
  # GnuPG makes the keys and detached signatures of the image signature
  # tests (images/tests/it/signatures.rs), as an implementation independent
  # of the one that checks them
  gnupg
  # benchmark peers (bench/dhcp, bench/tftp; atftpd is fetched with apt-get download by bench/tftp/run.sh)
  kea-dhcp4-server tftpd-hpa
  # L4 benchmark peer and throughput load (bench/lb); wrk and nginx are above
  haproxy iperf3
  # dnsd: NSD and Knot as secondaries and differential peers (tests/dns/e2e.sh),
  # dig/kdig, and the DNS benchmark's load generator (bench/dns)
  nsd knot knot-dnsutils dnsutils dnsperf
  # bootd's status page rendered in a real browser, headless (tests/status/e2e.sh:
  # screenshot and --dump-dom)
  chromium
  # BMC emulators' backend and clients (tests/controller/bmc-e2e.sh): libvirt
  # (daemon, qemu driver, virsh, the Python binding sushy-tools and virtualbmc
  # use), ipmitool (the ipmi provider runs it), a venv for the emulators
  # (tests/controller/bmc-deps.sh installs them from PyPI)
  libvirt-daemon-system libvirt-daemon-driver-qemu libvirt-clients python3-libvirt
  python3-venv ipmitool
  # the units under a real systemd (tests/systemd/nspawn.sh): a Debian 12 root
  # made by debootstrap, booted by systemd-nspawn
  debootstrap systemd-container
  # a step of the system clock under one process (tests/time/clock-step.sh)
  faketime
  # the container image built from a debootstrap root and run without a
  # registry (tests/container/e2e.sh): podman, runc (crun refuses hosts with
  # cgroup v1 and v2 both mounted), getcap for the image's file capabilities
  libcap2-bin podman runc
  # shared state and VIPs of several appliances (host.store etcd): etcd
  # (the tests start their own members), keepalived, and protoc with the
  # well-known protos to build the etcd client's gRPC code; nftables to
  # drop multicast on a lab bridge (tests/ha/vrrp-unicast.sh)
  etcd-server etcd-client keepalived protobuf-compiler libprotobuf-dev nftables
)

[[ $(id -u) -eq 0 ]] || fail "must run as root"

missing=()
for p in "${PKGS[@]}"; do
  # "install ok installed" only; half-configured or removed-with-config counts as missing
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ $st == "install ok installed" ]] || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  log "all ${#PKGS[@]} packages already installed"
  exit 0
fi
log "installing: ${missing[*]}"

export DEBIAN_FRONTEND=noninteractive
# Keep package installs from starting system services (nginx, dnsmasq...) that
# would grab ports. Remove our policy-rc.d afterwards only if we created it.
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
  on_exit 'rm -f /usr/sbin/policy-rc.d'
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod 755 /usr/sbin/policy-rc.d
fi

apt-get update -q

# Some images carry a backported qemu-utils (10.x) whose Breaks: conflict with
# bookworm's qemu-system-common 7.2 -> the resolver gives up. Pin qemu-utils to
# the bookworm version (a downgrade there; a plain install on a fresh machine).
extra=()
inst=$(dpkg-query -W -f='${Version}' qemu-utils 2>/dev/null || true)
if [[ $inst == *bpo* ]]; then
  extra+=(--allow-downgrades)
fi
args=()
for p in "${missing[@]}"; do
  if [[ $p == qemu-utils ]]; then args+=("qemu-utils/bookworm"); else args+=("$p"); fi
done
# qemu-system-* also pulls qemu-utils; if it is not in "missing" but is the backport, pin it too
if [[ $inst == *bpo* && " ${missing[*]} " != *" qemu-utils "* ]]; then
  args+=("qemu-utils/bookworm")
fi

apt-get install -y -q --no-install-recommends "${extra[@]}" "${args[@]}"
log "done"
